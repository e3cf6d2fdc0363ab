"""The one OOM diagnosis (`memdoc.core.doctor.diagnosis`) on realistic logs (tests/fixtures/oom-logs/,
each written from the code that prints it: see each file's header), and its three users agreeing.

Truth: the figures and frames written in each log (read here by hand, in the comments), the
prescription whose switch the cause's evidence names (PYTORCH_CUDA_ALLOC_CONF=expandable_segments
for fragmentation, vLLM's max_model_len for the KV-cache refusal), and the time column's own text.
"""

import json

import pytest
from conftest import FIXTURES, invoke

from memdoc.core.doctor.diagnosis import PlanContext, diagnose_oom
from memdoc.core.doctor.symptoms import get_symptom, list_symptoms, time_cost_rank
from memdoc.core.model.plan import parse_plan
from memdoc.core.reports.diagnose import read_oom
from memdoc.integrations.record import oom_record
from memdoc.resolve.models import resolve_model

LOGS = FIXTURES / "oom-logs"
ALLOCATOR = {"cuda-current", "cuda-oom"}
"""The caching allocator's "CUDA out of memory. Tried to allocate …": the message's format, or the kind
the doctor names (`OomEvent.kind`) once it names one."""
VLLM = {"vllm-kv-cache", "vllm-kv"}
GiB = 1024**3


def log(name: str) -> str:
    """The fixture's log text, without its comment header (which cites the sources)."""
    text = (LOGS / name).read_text(encoding="utf-8")
    header, _, body = text.partition("\n\n")
    assert all(line.startswith("# ") for line in header.splitlines()), name
    return body


def ranked(d) -> list[str]:
    return [r.prescription.id for r in d.rows]


def apart(d) -> dict[str, str]:
    return {r.prescription.id: r.apart for r in d.apart}


def test_zero3_first_step_is_fragmentation_not_a_long_sample():
    d = diagnose_oom(log("hf-deepspeed-zero3-step0.log"))
    assert d.kind in ALLOCATOR
    assert d.phase == "backward"  # the last frames: engine.backward → loss.backward → autograd
    if hasattr(d.guess, "step"):  # the step reading (progress bar 0/1250), once the doctor reads it
        assert d.guess.step == "first-step"
    assert d.symptom.id != "long-sample-oom"
    # 3.42 GiB reserved-unallocated < 3.91 GiB requested, but 3.42 + 2.31 GiB free ≥ 3.91
    assert d.causes[0].id == "fragmentation"
    assert "2.31 GiB free" in d.causes[0].evidence
    assert ranked(d)[0] == "midrun-expandable-segments"
    assert "long-cap-length" not in ranked(d)[:3]
    # the traceback's DeepSpeed runs DeepSpeedZeroOptimizer_Stage3: sharding is never a row to try
    assert "startup-shard-zero3" not in ranked(d)


def test_eval_oom_is_treated_as_evaluation():
    d = diagnose_oom(log("hf-eval-logits.log"))
    assert d.kind in ALLOCATOR
    assert d.phase == "eval"  # evaluate → evaluation_loop → all_preds.add(logits)
    # 69.64 GiB of the 79.15 GiB card in this process (88%): the live tensors fill it
    assert [c.id for c in d.causes][-1] == "tensors-fill-the-card"
    if "eval-oom" in {s.id for s in list_symptoms()}:  # the evaluation symptom's content is doc-kinds'
        assert d.symptom.id == "eval-oom"
        assert ranked(d)[0].startswith("eval-")
        assert {"eval-accumulation-steps", "eval-smaller-batch"} <= set(ranked(d))


def test_fragmentation_table_leads_with_expandable_segments():
    d = diagnose_oom(log("fragmentation-mid-run.log"))
    assert d.kind in ALLOCATOR and d.phase == "forward"
    assert d.causes[0].id == "fragmentation"  # 7.82 GiB reserved-unallocated ≥ the 2.50 GiB requested
    assert d.causes[0].frees_bytes == round(7.82 * GiB)
    first = d.rows[0].prescription
    assert first.id == "midrun-expandable-segments"
    assert first.how["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


def test_fragmentation_with_a_plan_keeps_expandable_segments_ranked():
    model = resolve_model("meta-llama/Llama-3.1-8B")
    plan = PlanContext(model=model, plan=parse_plan(method="lora", seq_len=4096, micro_batch=1))
    d = diagnose_oom(log("fragmentation-mid-run.log"), plan=plan)
    assert ranked(d)[0] == "midrun-expandable-segments"
    # micro-batch 1 cannot be halved: that row is set apart, never ranked
    assert "midrun-halve-micro-batch" not in ranked(d)
    assert apart(d)["midrun-halve-micro-batch"] == "already in this plan or not applicable to it"


def test_other_process_fix_comes_before_any_ladder_and_bf16_is_already_done():
    text = log("other-process-load-bf16.log")
    d = diagnose_oom(text)
    assert d.kind in ALLOCATOR and d.phase == "startup"  # from_pretrained → … → param.to(device)
    assert d.causes[0].id == "other-processes" and "process 48213" in d.causes[0].evidence
    assert ranked(d)[0] == "fix-other-processes"
    assert "startup-load-bf16" not in ranked(d)
    # even with the startup ladder asked for, loading in bf16 is already done: torch_dtype=torch.bfloat16
    flagged = diagnose_oom(text, symptom="startup-oom")
    assert "startup-load-bf16" not in ranked(flagged)
    assert "bf16" in apart(flagged)["startup-load-bf16"]


def test_vllm_kv_cache_refusal_never_prescribes_inference_mode():
    text = log("vllm-kv-cache.log")
    d = diagnose_oom(text)
    assert d.kind in VLLM and d.phase == "generate"
    assert d.causes[0].id == "vllm-kv-cache"
    assert "131,072" in d.causes[0].evidence and "44,560" in d.causes[0].evidence
    assert d.causes[0].fix.startswith("--max-model-len 44560 starts")  # the log's own KV-cache tokens
    assert ranked(d)[:4] == ["infer-kv-quant", "infer-limit-context", "infer-limit-batch", "infer-prefix-caching"]
    assert "max_model_len" in d.rows[1].prescription.how["vllm"]
    flagged = diagnose_oom(text, symptom="inference-oom")
    assert "infer-no-grad" not in ranked(flagged)
    assert "inference_mode" in apart(flagged)["infer-no-grad"]


@pytest.mark.parametrize(
    ("text", "rank"),
    [
        ("none (faster on tensor cores)", 0),
        ("about +0-10% (smaller, less efficient matmuls)", 5),
        ("about +33% (one extra forward per step)", 33),
        ("+30-100% per step (PCIe transfers and a CPU Adam step)", 65),
        ("5-10x slower", 650),
        ("none for LoRA; about +20-30% for QLoRA (dequantisation in every matmul)", 0),
    ],
)
def test_time_cost_rank_reads_the_time_column(text, rank):
    assert time_cost_rank(text) == rank


@pytest.mark.parametrize("symptom", ["startup-oom", "mid-run-oom", "long-sample-oom", "inference-oom"])
def test_ladder_is_cheapest_first_by_its_time_column(symptom):
    d = diagnose_oom(None, symptom=symptom)
    costs = [time_cost_rank(r.prescription.time_cost) for r in d.rows]
    assert costs == sorted(costs)
    if symptom == "mid-run-oom":  # expandable segments ("none") before checkpointing ("about +33%")
        assert ranked(d).index("midrun-expandable-segments") < ranked(d).index("midrun-checkpointing")


def test_the_three_users_give_the_same_diagnosis(tmp_path):
    text = log("hf-deepspeed-zero3-step0.log")
    message = text[text.index("torch.OutOfMemoryError:") :].split(": ", 1)[1].strip()
    traceback = text[text.index("Traceback") : text.index("torch.OutOfMemoryError:")]
    path = tmp_path / "train.log"
    path.write_text(text, encoding="utf-8")
    res = invoke("prescribe", "--log", str(path), "--json")
    assert res.exit_code == 0, res.output
    cli = json.loads(res.stdout)
    # the log's progress bar says the first step (0/1250): the script run and the callback see the same step
    script = {"message": message, "phase": "backward", "step": 0}
    read_oom(script, traceback, steps=0)
    callback = oom_record(
        message, traceback + "torch.OutOfMemoryError: " + message, step=0, where="training_step",
        batch=None, longest_before=None, first_step=True,
    )  # fmt: skip
    cause_ids = [c["id"] for c in cli["diagnosis"]["causes"]]
    assert cause_ids[0] == "fragmentation"
    assert [c["id"] for c in script["causes"]] == cause_ids == [c["id"] for c in callback["causes"]]
    assert script["kind"] == cli["diagnosis"]["kind"] == callback["kind"]
    assert script["traceback_phase"] == cli["diagnosis"]["phase"] == callback["phase"] == "backward"
    first = cli["prescriptions"][0]["id"]
    assert first == script["prescriptions"][0]["id"] == callback["prescriptions"][0]["id"]
    assert first == "midrun-expandable-segments"
    assert script["symptom"] == cli["symptom"] == callback["symptom"]


def test_symptom_texts_take_their_figures_from_the_plan():
    model = resolve_model("meta-llama/Llama-3.1-8B")
    plan = parse_plan(method="full", micro_batch=4, grad_accum=4, seq_len=2048)
    d = diagnose_oom(None, symptom="mid-run-oom", plan=PlanContext(model=model, plan=plan))
    halve = next(r.prescription for r in [*d.rows, *d.apart] if r.prescription.id == "midrun-halve-micro-batch")
    # half of 4 is 2, and 2 × 8 keeps the effective batch of 4 × 4
    assert halve.how["hf"] == {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 8}
    startup = diagnose_oom(None, symptom="startup-oom", plan=PlanContext(model=model, plan=plan))
    states = startup.base.states
    per_param = (states.weights + states.gradients + states.optimizer) / model.params.total
    assert f"{per_param:.1f} bytes per parameter on this plan" in startup.symptom.causes[1]
    generic = get_symptom("startup-oom").causes[1]
    assert not any(ch.isdigit() for ch in generic)  # without a plan: no figure that could contradict it


def test_every_corpus_oom_leads_with_its_first_causes_fix():
    # beyond the fixtures: every real OOM text of the corpus (public issue threads) goes through the pipeline, and
    # when the first cause is not "the plan needs less memory", the first row is that cause's own fix
    import yaml

    corpus = yaml.safe_load((FIXTURES / "oom-corpus.yaml").read_text(encoding="utf-8"))
    led = 0
    for entry in corpus:
        d = diagnose_oom(entry["text"])
        assert d.rows, entry["source"]
        if d.causes and not d.causes[0].shrink_plan:
            assert d.rows[0].source == f"cause:{d.causes[0].id}", entry["source"]
            led += 1
    assert led >= 5  # the corpus has caps, other processes, fragmentation, vLLM refusals, shape bugs


# Every log in tests/fixtures/oom-logs (doc-kinds' and these): what an engineer reading it concludes.
# (kind, phase, symptom, the top cause, the first prescription)
EVERY_LOG = {
    "cuda-error-set-device": ("cuda-error", "startup", "startup-oom", "card-full-at-start", "rank-set-device-first"),
    "eval-prediction-step": ("cuda-oom", "eval", "eval-oom", "tensors-fill-the-card", "eval-argmax-logits"),
    "first-step-backward": ("cuda-oom", "backward", "startup-oom", "tensors-fill-the-card", "startup-load-bf16"),
    "fragmentation-mid-run": ("cuda-oom", "forward", "mid-run-oom", "fragmentation", "midrun-expandable-segments"),
    "dpo-reference-load": ("cuda-oom", "startup", "reference-model-oom", "reference-model", "ref-precompute"),
    "generate-sample": ("cuda-oom", "generate", "inference-oom", "tensors-fill-the-card", "infer-no-grad"),
    "hf-deepspeed-zero3-step0": ("cuda-oom", "backward", "startup-oom", "fragmentation", "midrun-expandable-segments"),
    "hf-eval-logits": ("cuda-oom", "eval", "eval-oom", "tensors-fill-the-card", "eval-argmax-logits"),
    "grpo-generation-kv-cache": (
        "cuda-oom",
        "generate",
        "rl-generation-oom",
        "rl-generation-cache",
        "rl-smaller-generation-batch",
    ),
    "host-dataloader-worker": ("host-oom", "training-step", "host-oom", "host-ram", "fix-host-ram"),
    "host-elastic-sigkill": ("host-oom", "startup", "host-oom", "host-ram", "fix-host-ram"),
    "host-kernel-oom-killer": ("host-oom", None, "host-oom", "host-ram", "fix-host-ram"),
    "host-shell-killed": ("host-oom", None, "host-oom", "host-ram", "fix-host-ram"),
    "load-from-pretrained": ("cuda-oom", "startup", "startup-oom", "tensors-fill-the-card", "startup-load-bf16"),
    "nccl-cuda-failure": ("nccl-oom", None, "nccl-oom", "nccl-buffers", "fix-nccl-buffers"),
    "other-process-load-bf16": ("cuda-oom", "startup", "startup-oom", "other-processes", "fix-other-processes"),
    "rank0-heavier": ("cuda-oom", "training-step", "rank-imbalance", "tensors-fill-the-card", "rank-set-device-first"),
    "save-fsdp-full-state-dict": ("cuda-oom", "save", "save-oom", "tensors-fill-the-card", "save-fsdp-sharded"),
    "save-zero3-gather": ("cuda-oom", "save", "save-oom", "fragmentation", "midrun-expandable-segments"),
    "step-n-logits": ("cuda-oom", "loss", "long-sample-oom", "tensors-fill-the-card", "long-cap-length"),
    # vLLM's refusals: the cause names the max_model_len the log allows, then the seed's inference order
    # (KV quantisation → context limit → batch limit → prefix caching)
    "vllm-kv-cache": ("vllm-kv", "generate", "inference-oom", "vllm-kv-cache", "infer-kv-quant"),
    "vllm-max-seq-len-v0": ("vllm-kv", None, "inference-oom", "vllm-kv-cache", "infer-kv-quant"),
    "vllm-kv-needed-v1": ("vllm-kv", "generate", "inference-oom", "vllm-kv-cache", "infer-kv-quant"),
    "vllm-no-cache-blocks-v1": ("vllm-kv", "generate", "inference-oom", "vllm-kv-cache", "infer-kv-quant"),
}


def fixture_log(name: str) -> str:
    """A log of tests/fixtures/oom-logs without its header: the `#` lines citing the sources, then `# ---` or a
    blank line."""
    lines = (LOGS / f"{name}.log").read_text(encoding="utf-8").splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    return "".join(lines[start + (not lines[start].strip()) :])


def test_every_fixture_log_is_in_the_table():
    assert sorted(EVERY_LOG) == sorted(p.stem for p in LOGS.glob("*.log"))


@pytest.mark.parametrize("name", sorted(EVERY_LOG))
def test_every_kind_of_oom_gets_its_cause_and_first_fix(name, tmp_path):
    kind, phase, symptom, cause, first = EVERY_LOG[name]
    d = diagnose_oom(fixture_log(name))
    assert (d.kind, d.phase, d.symptom.id) == (kind, phase, symptom)
    assert d.causes[0].id == cause
    assert d.rows[0].prescription.id == first
    # prescribe --log gives the same answer as the library
    path = tmp_path / "train.log"
    path.write_text(fixture_log(name), encoding="utf-8")
    res = invoke("prescribe", "--log", str(path), "--json")
    assert res.exit_code == 0, res.output
    cli = json.loads(res.stdout)
    assert (cli["symptom"], cli["diagnosis"]["kind"], cli["diagnosis"]["phase"]) == (symptom, kind, phase)
    assert cli["diagnosis"]["causes"][0]["id"] == cause and cli["prescriptions"][0]["id"] == first
