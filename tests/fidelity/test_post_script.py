"""`memdoc diagnose train.py` and `MemdocCallback` inside TRL's post-training trainers (trl 1.16): a tiny Llama,
2 steps on the CPU. The phases (generation, reference, forward, backward, optimizer) are reported with the
trainer's task and knobs, against independent counts: the CPU allocator's own events (torch.profiler's memory
records) over each generation call, and the exact parameter bytes of the policy and its reference copy."""

from __future__ import annotations

import contextlib
import json

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

from conftest import FIXTURES  # noqa: E402
from conftest import invoke_diagnose as run_cli  # noqa: E402

pytestmark = pytest.mark.slow
POST = FIXTURES / "post"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny Llama and tokenizer of tests/fixtures/post/tiny.py, saved once."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("post_tiny", POST / "tiny.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = tmp_path_factory.mktemp("post") / "tiny-llama"
    module.save(path)
    return path, module.CONFIG


def model_bytes(path) -> int:
    """Parameter + buffer bytes of the saved model, built here."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(path)
    return sum(t.numel() * t.element_size() for t in [*m.parameters(), *m.buffers()])


@contextlib.contextmanager
def allocator_windows(klass, name: str):
    """The CPU allocator's own count (torch.profiler's memory events, independent of memdoc's tensor tracker) of
    every `klass.name` call, profiled alone: yields a list filled, per call, with the peak of the bytes allocated
    and not yet freed since the call began."""
    from torch.profiler import ProfilerActivity, profile

    original = klass.__dict__[name]
    out: list[int] = []

    def profiled(self, *args, **kwargs):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            result = original(self, *args, **kwargs)
        events = sorted(
            (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
        )
        now = peak = 0
        for _, n in events:
            now += n
            peak = max(peak, now)
        out.append(peak)
        return result

    setattr(klass, name, profiled)
    try:
        yield out
    finally:
        setattr(klass, name, original)


def diagnose(script: str, model, tmp_path) -> dict:
    res = run_cli(str(POST / script), "--json", "--", str(model), str(tmp_path / "out"))
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def test_grpo_script_generation_and_reference_phases(tiny, tmp_path):
    path, config = tiny
    with allocator_windows(trl.GRPOTrainer, "_generate") as rounds:
        rep = diagnose("grpo_tiny.py", path, tmp_path)
    post = rep["post_training"]
    assert post["trainer"] == "GRPOTrainer" and post["task"] == "grpo"
    # the knobs the script sets, and TRL's own defaults and derived values for the rest (GRPOConfig.__post_init__)
    cfg = trl.GRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=4, num_generations=4, beta=0.1
    )
    for knob in ("beta", "num_generations", "loss_type", "num_iterations", "generation_batch_size", "use_vllm"):
        assert post["knobs"][knob] == getattr(cfg, knob), knob
    assert post["knobs"]["max_completion_length"] == 8
    assert list(post["phases"]) == ["generation", "reference", "forward", "backward", "optimizer"]
    # beta 0.1: TRL loads a reference copy of the policy; both are held at the reference forward
    assert post["phases"]["reference"]["weights"] == 2 * model_bytes(path)
    assert post["phases"]["reference"]["activations"] < post["phases"]["forward"]["activations"] / 10  # no_grad
    # each generation call's peak over what it began with, against the CPU allocator's own count over the same
    # call: the allocator also holds op-internal scratch no tensor tracker sees (the buffers of torch's CPU sdpa
    # kernel), so it bounds the measurement from above; both rounds have the same shapes, so the same bytes
    measured = [r["peak_allocated"] - r["start_allocated"] for r in post["generation_rounds"]]
    assert len(measured) == len(rounds) == 2 and measured[0] == measured[1]
    # from below: the KV cache of the generation batch at its last length (k and v, fp32, every layer)
    kv = kv_bytes(config, 4, 12 + 8 - 1)
    for ours, allocator in zip(measured, rounds, strict=True):
        assert kv < ours <= allocator
        assert ours >= 0.8 * allocator
    detected = rep["hf"]["detected_plan"]
    assert (detected["task"], detected["num_generations"], detected["completion_len"], detected["seq_len"]) == (
        "grpo",
        4,
        8,
        12,  # the prompts' 12 words
    )
    billed = post["billed"]  # the bill's phases by name, None where the bill has no such phase
    assert list(billed) == list(post["phases"]) and isinstance(billed["forward"], int)


def test_dpo_script_reference_phase(tiny, tmp_path):
    path, _ = tiny
    rep = diagnose("dpo_tiny.py", path, tmp_path)
    post = rep["post_training"]
    assert (post["trainer"], post["task"]) == ("DPOTrainer", "dpo")
    cfg = trl.DPOConfig(output_dir=str(tmp_path), use_cpu=True)  # TRL's defaults for what the script leaves
    for knob in ("beta", "loss_type", "precompute_ref_log_probs", "max_length"):
        assert post["knobs"][knob] == getattr(cfg, knob), knob
    assert list(post["phases"]) == ["reference", "forward", "backward", "optimizer"]  # no generation in DPO
    # the reference is a frozen copy (trl 1.16 DPOTrainer.__init__ without peft): two models' weights
    ref, fwd = post["phases"]["reference"], post["phases"]["forward"]
    assert ref["weights"] == 2 * model_bytes(path)
    assert ref["gradients"] == 0 and ref["step"] == fwd["step"]
    assert ref["activations"] < fwd["activations"] / 10  # under no_grad nothing is saved for backward
    detected = rep["hf"]["detected_plan"]
    # 2 pairs per device: chosen and rejected concatenated make 4 rows in the forward
    assert (detected["task"], detected["micro_batch"], detected["beta"]) == ("dpo", 2, cfg.beta)
    # the bill of the detected plan per phase, against the measured step (P-fidelity): on the CPU TRL's fused head
    # scores every position (`add_fused_lm_head`, not `compact`), as the bill does without --prompt-len, so its
    # tile buffer (4 rows × 17 positions × 32768, bf16: 4.25 MiB) dominates both
    for name, billed in post["billed"].items():
        if billed is not None:
            assert billed == pytest.approx(post["phases"][name]["peak_allocated"], rel=0.05), name


def grpo_with_callback(path, tmp_path, *, cpu: bool) -> trl.GRPOTrainer:
    """A GRPOTrainer of grpo_tiny.py's settings with `MemdocCallback` writing tmp_path/memdoc.json."""
    from datasets import Dataset

    from memdoc.integrations.hf import MemdocCallback

    prompts = Dataset.from_dict({"prompt": [" ".join(f"w{(i * 7 + j) % 100}" for j in range(12)) for i in range(8)]})
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "run"),
        use_cpu=cpu,
        bf16=False,
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        beta=0.1,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
    )
    return trl.GRPOTrainer(
        model=str(path),
        reward_funcs=lambda completions, **kw: [float(len(c)) for c in completions],
        args=args,
        train_dataset=prompts,
        callbacks=[MemdocCallback(report=tmp_path / "memdoc.json")],
    )


def kv_bytes(config, rows: int, length: int, dtype_bytes: int = 4) -> int:
    """The KV cache of `rows` sequences of `length` tokens: k and v, every layer, the config's kv heads."""
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    return 2 * config["num_hidden_layers"] * rows * config["num_key_value_heads"] * head_dim * length * dtype_bytes


def test_callback_in_grpo_reports_generation_and_reference(tiny, tmp_path):
    """`MemdocCallback` inside `GRPOTrainer` (2 steps, the 2nd measured): the report's post_training phases."""
    path, config = tiny
    trainer = grpo_with_callback(path, tmp_path, cpu=True)
    with allocator_windows(trl.GRPOTrainer, "_generate") as rounds:
        trainer.train()
    post = json.loads((tmp_path / "memdoc.json").read_text())["post_training"]
    assert (post["trainer"], post["task"]) == ("GRPOTrainer", "grpo")
    assert list(post["phases"]) == ["generation", "reference", "forward", "backward", "optimizer"]
    assert {p["step"] for p in post["phases"].values()} == {2}  # the measured step
    assert post["phases"]["reference"]["weights"] == 2 * model_bytes(path)  # policy + TRL's reference copy
    (round2,) = post["generation_rounds"]  # one generation per step (steps_per_generation = accumulation = 1)
    ours = round2["peak_allocated"] - round2["start_allocated"]
    # see test_grpo_script_generation_and_reference_phases
    assert kv_bytes(config, 4, 12 + 8 - 1) < ours <= rounds[1] and ours >= 0.8 * rounds[1]
    assert list(post["billed"]) == list(post["phases"]) and isinstance(post["billed"]["forward"], int)


@pytest.mark.cuda
def test_callback_in_grpo_on_cuda_reads_the_allocator_per_phase(tiny, tmp_path):
    """On a GPU the phases' peaks come from the allocator's counters; the step's peak stays whole."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    path, config = tiny
    trainer = grpo_with_callback(path, tmp_path, cpu=False)
    starts: list[int] = []
    original = trl.GRPOTrainer.__dict__["_generate"]

    def seen(self, *args, **kwargs):
        starts.append(torch.cuda.memory_allocated())  # the same counter, read just inside memdoc's wrapper
        return original(self, *args, **kwargs)

    trl.GRPOTrainer._generate = seen
    try:
        trainer.train()
    finally:
        trl.GRPOTrainer._generate = original
    rep = json.loads((tmp_path / "memdoc.json").read_text())
    post = rep["post_training"]
    assert set(post["phases"]) == {"generation", "reference"}
    (round2,) = post["generation_rounds"]
    assert round2["start_allocated"] == starts[1]
    assert round2["peak_allocated"] - round2["start_allocated"] >= kv_bytes(config, 4, 12 + 8 - 1)
    assert rep["measured"]["peak_allocated"] == post["step_peak_allocated"]
    assert max(p["peak_allocated"] for p in post["phases"].values()) <= rep["measured"]["peak_allocated"]


def test_the_knobs_read_are_the_trainers_config_fields():
    """Every knob memdoc reads is a field of some installed TRL config, and each trainer's own knobs are its own."""
    import dataclasses

    from memdoc.probe.script.trl_phases import KNOBS, TRAINERS

    configs = {"grpo": trl.GRPOConfig, "rloo": trl.RLOOConfig, "dpo": trl.DPOConfig, "kto": trl.KTOConfig}
    names = {task: {f.name for f in dataclasses.fields(c)} for task, c in configs.items()}
    assert set(KNOBS) <= set().union(*names.values())
    for online in ("grpo", "rloo"):
        assert {"num_generations", "max_completion_length", "generation_batch_size", "use_vllm"} <= names[online]
    assert {cls for cls, _, _ in TRAINERS.values()} <= set(dir(trl))
