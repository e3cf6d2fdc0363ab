"""Run the post-training cases with TRL's own trainers on the CPU and write one fixture per case.

    HF_HUB_OFFLINE=1 PYTHONPATH=$PWD .venv/bin/python -m benchmarks.posttrain.harness [--only NAME…] [--out DIR]

Each case (`cases.py`) saves the tiny model and tokenizer to a temporary folder, builds `DPOTrainer` or
`GRPOTrainer` from that path (so the reference model, when TRL creates one, loads the same weights), trains
`case.steps` optimizer steps, and measures the last one per phase (`phases.py`) with a live-tensor counter
(`tracker.py`). One GPU-like change to TRL: `trl.trainer.utils._use_triton` answers True, so the fused LM head
scores only the labelled positions (`compact`, as on a Triton device) instead of every position; the tiles are
still folded by TRL's torch code (`trl/kernels/chunked_logprob.py` imports its own `_use_triton`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path

from benchmarks.posttrain.cases import CASES, COMMON, CONFIG, LORA, Case, dataset, reward_len, save_model

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "posttrain"


@contextlib.contextmanager
def compact_scoring():
    """Score only the labelled positions in TRL's fused head, as its GPU path does (see the module docstring)."""
    import trl.trainer.utils as trl_utils

    original = trl_utils._use_triton
    trl_utils._use_triton = lambda device: True
    try:
        yield
    finally:
        trl_utils._use_triton = original


def build_trainer(case: Case, folder: Path):
    """The TRL trainer of `case` over the checkpoint in `folder`."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    knobs = {**COMMON, **case.config, "output_dir": str(folder / "out"), "max_steps": case.steps}
    if case.trainer == "dpo":
        from trl import DPOConfig, DPOTrainer

        peft_config = None
        if case.lora:
            from peft import LoraConfig

            peft_config = LoraConfig(task_type="CAUSAL_LM", **LORA)
        return DPOTrainer(
            model=str(folder),
            args=DPOConfig(**knobs),
            train_dataset=dataset("dpo"),
            processing_class=tokenizer,
            peft_config=peft_config,
        )
    from trl import GRPOConfig, GRPOTrainer

    return GRPOTrainer(
        model=str(folder),
        reward_funcs=reward_len,
        args=GRPOConfig(**knobs),
        train_dataset=dataset("grpo"),
        processing_class=tokenizer,
    )


def storage_ids(live, tensors) -> set[int]:
    """The tracker's serial numbers of `tensors`' storages."""
    return {live.key_of(t) for t in tensors}


def breakdown(probe, trainer) -> dict[str, dict[str, int]]:
    """Map each phase's peak to what it holds: policy weights, reference weights, gradients (known at
    `on_pre_optimizer_step`, so a gradient freed earlier counts as "other"), optimizer state, the rest,
    and the rest's largest storage.
    The storages are matched by the tracker's serial numbers, never by reused addresses."""
    import torch

    live = probe.done
    weights = storage_ids(live, trainer.model.parameters())
    ref = trainer.ref_model if getattr(trainer, "ref_model", None) is not None else None
    ref_weights = storage_ids(live, ref.parameters()) if ref is not None else set()
    states = trainer.optimizer.state.values()
    state = storage_ids(live, (t for s in states for t in s.values() if isinstance(t, torch.Tensor)))
    owner = {k: "optimizer_state" for k in state}
    owner |= {k: "gradients" for k in probe.grad_ids} | {k: "reference_weights" for k in ref_weights}
    owner |= {k: "weights" for k in weights}
    out = {}
    for phase, peak_live in live.peak_live.items():
        parts = dict.fromkeys(("weights", "reference_weights", "gradients", "optimizer_state", "other"), 0)
        for key, nbytes in peak_live.items():
            parts[owner.get(key, "other")] += nbytes
        others = [n for k, n in peak_live.items() if k not in owner]
        out[phase] = {**parts, "largest_other": max(others, default=0)}
    return out


def run_case(case: Case) -> dict:
    """Train `case` and return its fixture."""
    import peft
    import torch
    import transformers
    import trl

    from benchmarks.posttrain.phases import PhaseProbe

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp, compact_scoring():
        folder = Path(tmp)
        save_model(folder)
        trainer = build_trainer(case, folder)
        probe = PhaseProbe(trainer, case.steps)
        trainer.add_callback(probe)
        trainer.train()
    params = list(trainer.model.parameters())
    ref = getattr(trainer, "ref_model", None)
    opt = trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer
    return {
        "case": case.name,
        "trainer": type(trainer).__name__,
        "config": CONFIG,
        "plan": case.plan,
        "phases": dict(probe.done.peaks),
        "breakdown": breakdown(probe, trainer),
        "inputs": probe.inputs,
        "params": sum(p.numel() for p in params),
        "trainable_params": sum(p.numel() for p in params if p.requires_grad),
        "param_bytes": sum(p.numel() * p.element_size() for p in params),
        "reference_param_bytes": sum(p.numel() * p.element_size() for p in ref.parameters()) if ref else 0,
        "knobs": {
            **COMMON,
            **case.config,
            "lora": LORA if case.lora else None,
            "max_steps": case.steps,
            "measured_step": case.steps,
            "optimizer": type(opt).__name__,
            "optimizer_fused": bool(opt.defaults.get("fused")),
            "optimizer_foreach": opt.defaults.get("foreach"),
            "steps_per_generation": getattr(trainer.args, "steps_per_generation", None),
            "generation_batch_size": getattr(trainer.args, "generation_batch_size", None),
            "compact_scoring": True,
            "device": "cpu",
        },
        "versions": {
            "trl": trl.__version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="case names (default: all)")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args(argv)
    names = args.only or list(CASES)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        record = run_case(CASES[name])
        (args.out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
        print(name, {k: f"{v / 2**20:.2f} MiB" for k, v in record["phases"].items()}, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
