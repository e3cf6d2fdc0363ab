"""The plan an emitted config runs, as `bill --config` reads it back (issue 35: "emit writes the job it billed").

A trainer does not always run the plan it is given: TRL turns `bf16: true` on a 16-bit LoRA base into autocast, and
TRL ≥ 1.16 computes the loss through its fused LM head. The readers of `bill --config` know those rules (they are
the trainers' own, in `core/trainers/<fmt>/read.py`), so the emitted header bills the plan that reading the
emitted files back gives, not the plan as asked: `read(emit(job))` is the job the header prices.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.stack import Stack
from memdoc.errors import MemdocError

RUNTIME_FIELDS = ("precision", "loss", "optimizer")
"""The fields a trainer may run otherwise than the plan asks (autocast, its own loss path, DeepSpeed's CPU Adam):
the header bills the read-back value of these; the rest are the plan's (flags a format cannot carry stay as given)."""


def as_run(plan: TrainingPlan, files: list[tuple[Path, str]], stack: Stack, model_id: str) -> TrainingPlan:
    """`plan` with the `RUNTIME_FIELDS` the trainer runs, as `bill --config` reads `files` back."""
    back = read_back_plan(files, stack, model_id, plan)
    if back is None:
        return plan
    return plan.replace(**{name: getattr(back, name) for name in RUNTIME_FIELDS})


def billed_as_note(plan: TrainingPlan, runs: TrainingPlan, fmt: str) -> str:
    """The header's note on what the bill prices instead of the plan as asked."""
    changes = ", ".join(
        f"{name} {getattr(plan, name).value} → {getattr(runs, name).value}"
        for name in RUNTIME_FIELDS
        if getattr(plan, name) != getattr(runs, name)
    )
    return f"billed as {fmt} runs this file ({changes}), as `memdoc bill --config` reads it back"


def read_back_plan(
    files: list[tuple[Path, str]], stack: Stack, model_id: str, plan: TrainingPlan
) -> TrainingPlan | None:
    """The plan `bill --config` reads from `files` (the main config first, side files named as it references
    them), under `stack`; None when the files do not read back (the header then bills the plan as given)."""
    from memdoc.resolve.setup import resolve_setup

    spec = ",".join(f"{name}=={text}" for name, text in stack.versions.items() if name not in stack.assumed)
    with tempfile.TemporaryDirectory(prefix="memdoc-read-back-") as tmp:
        root = Path(tmp)
        for path, text in files:
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        try:
            setup = resolve_setup(
                model_id,
                config=[root / files[0][0]],
                stack=spec or None,
                need_gpu=False,
                gpus_per_node=plan.gpus_per_node,
                nodes=plan.nodes,
            )
        except MemdocError:
            return None
    return setup.plan


__all__ = ["read_back_plan"]
