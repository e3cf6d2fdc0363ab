"""`memdoc emit`'s result: the trainer config and its side files for a plan, with the bill they carry.

Pure assembly: the texts and the paths they go to; writing them is `memdoc.output.emit.emit_files`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from memdoc.core.billing.bill import Bill, compute_bill
from memdoc.core.billing.verdict import fit_json
from memdoc.core.model.gpu import GpuSpec, gpu_json
from memdoc.core.model.model_spec import ModelSpec, model_json
from memdoc.core.model.plan import TrainingPlan, flag_for
from memdoc.core.model.stack import Stack
from memdoc.core.remedies.climb import climb
from memdoc.core.trainers.emit import EmitContext, emit, render_main, render_side
from memdoc.core.trainers.registry import default_filename
from memdoc.core.trainers.text import shell_join


@dataclass(frozen=True)
class EmitResult:
    """The files of one emitted plan (the config first), how to launch them, and the plan's bill."""

    fmt: str
    model: ModelSpec
    plan: TrainingPlan
    """The plan emitted (with --fit, the ladder's plan that fits)."""
    gpu: GpuSpec | None
    bill: Bill
    files: list[tuple[Path, str]]
    """(path, text) of the config, then its side files (DeepSpeed JSON, accelerate YAML)."""
    launch: str
    notes: list[str] = field(default_factory=list)
    """Knobs the format cannot express, and how the trainer reads the plan."""
    fit_message: str | None = None
    """With --fit, which ladder rungs were applied (None when the plan fitted as given)."""
    written: bool = False
    runs: TrainingPlan | None = None
    """The plan the trainer runs from the files (`output/read_back.py`), which the header bills; None: `plan`."""

    def to_json(self) -> dict:
        return {
            "format": self.fmt,
            "model": model_json(self.model, self.bill.states.trainable_params),
            "plan": self.plan.to_dict(),
            "gpu": gpu_json(self.gpu, self.plan.world_size),
            "per_gpu": {
                "peak_allocated": self.bill.peak_allocated,
                "peak_reserved": self.bill.peak_reserved,
                "process_total": self.bill.process_total,
            },
            **fit_json(self.bill.fits, self.bill.headroom_bytes, self.bill.fit),
            "written": self.written,
            "files": [{"path": str(path), "content": text} for path, text in self.files],
            "launch": self.launch,
            "notes": self.notes,
        }


def plan_to_emit(
    model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None, *, fit: bool, fixed: frozenset[str] = frozenset()
) -> tuple[TrainingPlan, Bill, str | None] | None:
    """(plan, its bill, the --fit message): the plan as given, or with `fit` and a plan that is not a
    comfortable fit (the one fit rule, `verdict.fit_answer`), the ladder's plan that is: the values the user
    set (`fixed`) are kept while the ladder can (`climb`). None when no rung fits comfortably."""
    the_bill = compute_bill(model, plan, gpu)
    if not fit or the_bill.comfortable is not False:
        return plan, the_bill, None
    steps = climb(model, plan, gpu, fixed=fixed)
    if not steps or not steps[-1].comfortable:
        return None
    rungs = ", ".join(s.rung.id for s in steps)
    changed = [s.fixed_change for s in steps if s.fixed_change]
    message = f"--fit: the plan is not a comfortable fit; emitting the ladder plan after: {rungs}" + (
        f" (changes values you set: {'; '.join(changed)})" if changed else ""
    )
    return steps[-1].plan, steps[-1].bill, message


def command_line(
    model_id: str, gpu: GpuSpec | None, plan: TrainingPlan, fmt: str, *, output: str | None, stack: Stack | None = None
) -> str:
    """The explicit memdoc command that reproduces this plan (non-default flags only), shell-quoted."""
    parts = ["memdoc", "emit", model_id]
    if gpu is not None:
        parts += ["--gpu", gpu.id]
    default = TrainingPlan().to_dict()
    for key, value in plan.to_dict().items():
        if value == default.get(key) or (key == "lora_alpha" and value is None):
            continue
        if not plan.is_peft and key.startswith("lora_"):
            continue
        flag = flag_for(key)
        if isinstance(value, bool):
            parts.append(flag)
        else:
            parts += [flag, ",".join(value) if isinstance(value, list) else str(value)]
    if stack is not None and stack.source == "--stack":
        given = [f"{name}=={text}" for name, text in stack.versions.items() if name not in stack.assumed]
        parts += ["--stack", ",".join(given)]
    parts += ["--format", fmt]
    if output:
        parts += ["-o", output]
    return shell_join(parts)


def emit_result(
    model: ModelSpec,
    plan: TrainingPlan,
    gpu: GpuSpec | None,
    the_bill: Bill,
    fmt: str,
    *,
    output: Path | None = None,
    dataset: str | None = None,
    output_dir: str | None = None,
    asked_id: str | None = None,
    stack: Stack | None = None,
    billed_as: str | None = None,
) -> EmitResult:
    """The config of `plan` in format `fmt` and its side files, at `output` (else the format's default name)."""
    config_path = str(output) if output else default_filename(fmt, plan.task.value)
    ctx = EmitContext(
        model_id=model.id,
        plan=plan,
        peak_allocated=the_bill.peak_allocated,
        process_total=the_bill.process_total,
        gpu_name=gpu.name if gpu else None,
        gpu_memory=gpu.memory_bytes if gpu else None,
        command=command_line(model.id, gpu, plan, fmt, output=str(output) if output else None, stack=stack),
        dataset=dataset,
        output_dir=output_dir,
        side_dir=os.path.dirname(str(output)) if output else "",
        config_path=config_path,
        config_of=model.config_of,
        asked_id=asked_id,
        model_type=model.model_type,
        image_family=model.image_family,
        stack=stack,
    )
    emitted = emit(fmt, ctx)
    if billed_as:
        emitted.notes.insert(0, billed_as)
    files = [(Path(config_path), render_main(ctx, emitted))]
    files += [(Path(ctx.side_path(side.name)), render_side(ctx, side)) for side in emitted.side_files]
    return EmitResult(
        fmt=fmt,
        model=model,
        plan=plan,
        gpu=gpu,
        bill=the_bill,
        files=files,
        launch=emitted.launch,
        notes=list(emitted.notes),
    )
