"""Every kind of OOM and every phase, read from logs written from the code that prints them.

Each fixture in tests/fixtures/oom-logs/ starts with a `#` header naming the source files its text comes
from (torch, transformers, deepspeed, accelerate, NCCL, the kernel, bash); the expectations below are
what that text states (its kind of message, the frames it shows, its progress bar), not memdoc's output.
A second table holds real texts quoted from public threads, beyond the repository's fixtures.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from memdoc.core.doctor.logtext import traceback_frames
from memdoc.core.doctor.oom import first_oom, parse_oom_log
from memdoc.core.doctor.oom_event import KINDS
from memdoc.core.doctor.oom_phase import read_step
from memdoc.core.doctor.oom_symptom import infer_symptom
from memdoc.core.doctor.symptoms import get_symptom

LOGS = FIXTURES / "oom-logs"
GiB = 1024**3
KiB = 1024


def _log(name: str) -> str:
    text = (LOGS / f"{name}.log").read_text(encoding="utf-8")
    header, sep, body = text.partition("# ---\n")
    assert sep and all(line.startswith("#") for line in header.splitlines()), "a cited header, then the log"
    return body


# name: (kind, phase, step, symptom, fields the text states)
FIXTURE_TABLE = {
    "host-elastic-sigkill": ("host-oom", "startup", "unknown", "host-oom", {"pid": 3326, "rank": 1}),
    "host-kernel-oom-killer": (
        "host-oom",
        None,
        "step-n",
        "host-oom",
        {"pid": 25315, "process": "python3", "host_rss": 31451456 * KiB, "variant": "kernel-oom-killer"},
    ),
    "host-dataloader-worker": (
        "host-oom",
        "training-step",
        "step-n",
        "host-oom",
        {"pid": 41873, "variant": "dataloader-worker"},
    ),
    "host-shell-killed": ("host-oom", None, "step-n", "host-oom", {"pid": 77421, "variant": "shell-killed"}),
    "nccl-cuda-failure": (
        "nccl-oom",
        None,
        "unknown",
        "nccl-oom",
        {"gpu": 3, "call": "include/alloc.h:178", "requested": 6291456, "count": 2},
    ),
    "cuda-error-set-device": (
        "cuda-error",
        "startup",
        "unknown",
        "startup-oom",
        {"status": "CUDA error: out of memory"},
    ),
    "first-step-backward": ("cuda-oom", "backward", "first-step", "startup-oom", {"gpu": 0}),
    "step-n-logits": ("cuda-oom", "loss", "step-n", "long-sample-oom", {"requested": round(15.66 * GiB)}),
    "eval-prediction-step": ("cuda-oom", "eval", "step-n", "eval-oom", {}),
    "save-zero3-gather": ("cuda-oom", "save", "step-n", "save-oom", {"gpu": 5}),
    "save-fsdp-full-state-dict": ("cuda-oom", "save", "unknown", "save-oom", {}),
    "generate-sample": ("cuda-oom", "generate", "unknown", "inference-oom", {}),
    "load-from-pretrained": ("cuda-oom", "startup", "unknown", "startup-oom", {}),
    "rank0-heavier": ("cuda-oom", "training-step", "step-n", "rank-imbalance", {}),
}


def test_every_fixture_is_in_the_table_and_every_kind_is_covered():
    assert {p.stem for p in LOGS.glob("*.log")} >= set(FIXTURE_TABLE)
    assert {kind for kind, *_ in FIXTURE_TABLE.values()} == set(KINDS) - {"vllm-kv"}  # vLLM: doc-pipeline's vllm-kv


@pytest.mark.parametrize("name", list(FIXTURE_TABLE))
def test_fixture_kind_phase_step_symptom(name):
    kind, phase, step, symptom, fields = FIXTURE_TABLE[name]
    text = _log(name)
    event = first_oom(text)
    assert event is not None and event.kind == kind
    for key, want in fields.items():
        assert getattr(event, key) == want, key
    guess = infer_symptom(event, text)
    assert (guess.kind, guess.phase, guess.step, guess.symptom) == (kind, phase, step, symptom)
    get_symptom(guess.symptom)  # a symptom the knowledge base has


def test_set_device_traceback_is_read():
    text = _log("cuda-error-set-device")
    assert [f.func for f in traceback_frames(text)] == ["<module>", "set_device"]
    guess = infer_symptom(first_oom(text), text)
    assert not any("no traceback frames" in u for u in guess.unknowns)
    assert any("set_device" in r for r in guess.reasons)


def test_step_numbers_come_from_the_bar():
    assert read_step("  0%|          | 0/1250 [00:00<?, ?it/s]\n").step == 0
    assert infer_symptom(first_oom(_log("step-n-logits")), _log("step-n-logits")).step_number == 312
    assert infer_symptom(first_oom(_log("first-step-backward")), _log("first-step-backward")).step_number == 0
    # the eval bar (31/50) follows the training bar (500/1250): the step is the training loop's
    assert infer_symptom(first_oom(_log("eval-prediction-step")), _log("eval-prediction-step")).step_number == 500


@pytest.mark.parametrize(
    ("text", "reading"),
    [
        ("Map:  50%|█████     | 500/1000 [00:01<00:01, 400.00 examples/s]", "unknown"),  # a data bar
        ("Loading checkpoint shards:  50%|█████     | 2/4 [00:09<00:09,  4.62s/it]", "unknown"),
        ("100%|██████████| 50/50 [00:10<00:00,  5.00it/s]", "unknown"),  # a finished bar
        ("Epoch 0:   0%|          | 0/400 [00:00<?, ?it/s]", "first-step"),
        (" 40%|████      | 500/1250 [58:41<1:27:31]\n 0%|          | 0/50 [00:00<?, ?it/s]", "step-n"),
        ("{'loss': 2.5, 'learning_rate': 2e-05, 'epoch': 0.01}", "step-n"),  # older on_log: bare floats
        ("step 1 loss 2.31", "unknown"),  # 0- or 1-based: ambiguous
        ("[Rank 0] step=10, skipped=0, lr=[1e-05]", "step-n"),
        ("Epoch 1/3", "unknown"),
        ("Epoch 2/3", "step-n"),
        ("gradient_accumulation_steps=16 max_steps=1000 Num Epochs = 3", "unknown"),
    ],
)
def test_step_evidence(text, reading):
    assert read_step(text).reading == reading


def test_a_gpu_oom_comes_before_the_host_kill_it_caused():
    text = _log("first-step-backward") + "\n" + _log("host-elastic-sigkill")
    kinds = [e.kind for e in parse_oom_log(text)]
    assert kinds == ["cuda-oom", "host-oom"]
    assert first_oom(text).kind == "cuda-oom"


def test_ncclunhandledcudaerror_without_out_of_memory_is_not_an_oom():
    # https://github.com/NVIDIA/nccl/issues/1410: the same exception for 'invalid argument'.
    text = (
        "[rank7]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
        "[rank7]: ncclUnhandledCudaError: Call to CUDA function failed.\n[rank7]: Last error:\n"
        "[rank7]: Cuda failure 1 'invalid argument'\n"
    )
    assert parse_oom_log(text) == []


# ---------------------------------------------------------------------------------------------
# Beyond the repository: texts quoted from public threads (excerpts, as posted).

THREADS = [
    (
        "https://github.com/lzhxmu/CPPO/issues/6",
        "Root Cause (first observed failure):\n[0]:\n  time      : 2025-05-21_15:43:03\n  host      : worker\n"
        "  rank      : 0 (local_rank: 0)\n  exitcode  : -9 (pid: 14750)\n  error_file: <N/A>\n"
        "  traceback : Signal 9 (SIGKILL) received by PID 14750\n",
        ("host-oom", "elastic-sigkill", {"pid": 14750, "rank": 0}),
    ),
    (
        "https://github.com/OpenBMB/MiniCPM-V/issues/770",
        "torch/distributed/elastic/multiprocessing/api.py:826] failed (exitcode: -9) local_rank: 0 (pid: 1322) of "
        "binary: /root/miniconda3/bin/python\n",
        ("host-oom", "elastic-sigkill", {"pid": 1322}),
    ),
    (
        "https://github.com/0jc1/py-autovod/issues/7",
        "[Sun Mar 30 08:24:00 2025] Out of memory: Killed process 7899 (python) total-vm:26,184,840kB, "
        "anon-rss:153,700,88kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:38964kB oom_score_adj:0\n",
        ("host-oom", "kernel-oom-killer", {"pid": 7899, "process": "python", "host_rss": 15370088 * KiB}),
    ),
    (
        "https://github.com/intel/platform-resource-manager/issues/42",
        "[Thu Mar 14 01:57:55 2019] Out of memory: Kill process 89746 (python) score 1031 or sacrifice child\n"
        "[Thu Mar 14 01:57:55 2019] Killed process 89746 (python) total-vm:118026216kB, anon-rss:109819332kB, "
        "file-rss:3324kB, shmem-rss:0kB\n",
        ("host-oom", "kernel-oom-killer", {"pid": 89746, "host_rss": 109819332 * KiB}),
    ),
    (
        "https://github.com/castorini/hedwig/issues/70",
        "100%██████████████████| 3000001/3000001 [03:33<00:00, 14061.26it/s]\nKilled\n",
        ("host-oom", "shell-killed", {"pid": None}),
    ),
    (
        "https://github.com/PKU-YuanGroup/Open-Sora-Plan/issues/386",
        "ins-7df6eojsifuykig9:3018451:3018451 [0] enqueue.cc:1085 NCCL WARN Cuda failure 'out of memory'\n",
        ("nccl-oom", "cuda-failure", {"gpu": 0, "call": "enqueue.cc:1085"}),
    ),
    (
        "https://github.com/NVIDIA/TensorRT-LLM/issues/1670",
        "VM-0-16-ubuntu:392:494 [2] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'\n\n"
        "VM-0-16-ubuntu:392:494 [2] enqueue.cc:54 NCCL WARN Cuda failure 'invalid resource handle'\n\n"
        "VM-0-16-ubuntu:392:494 [2] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'\n",
        ("nccl-oom", "cuda-failure", {"gpu": 2, "count": 2}),
    ),
]


@pytest.mark.parametrize(("source", "text", "expected"), THREADS, ids=[t[0].split("github.com/")[1] for t in THREADS])
def test_public_thread_texts(source, text, expected):
    kind, variant, fields = expected
    (event,) = parse_oom_log(text)
    assert (event.kind, event.variant) == (kind, variant)
    for key, want in fields.items():
        assert getattr(event, key) == want, key
    assert infer_symptom(event, text).symptom == kind  # host-oom / nccl-oom are symptom ids too
