"""`emit(fmt, ctx)`: the plan as the config of one trainer format, with the notes every format shares (the
loss path, a borrowed config, a mirrored model id, the allocator setting)."""

from __future__ import annotations

import dataclasses
import shlex

from memdoc.core.trainers.base import EmitContext, Emitted, SideFile, render_main, render_side
from memdoc.core.trainers.registry import format_of, formats
from memdoc.errors import PlanError


def _mirrored(asked: str, model_id: str) -> bool:
    """Is `asked` another org's repository of the same name as the catalog's `model_id` (a mirror,
    `memdoc.resolve.models.mirror_of`), rather than a spelling of the catalog's id?"""
    asked_org, _, asked_name = asked.lower().rpartition("/")
    org, _, name = model_id.lower().rpartition("/")
    return bool(asked_org) and asked_org != org and asked_name == name


def emit(fmt: str, ctx: EmitContext) -> Emitted:
    try:
        trainer = format_of(fmt)
    except KeyError:
        raise PlanError(f"--format {fmt!r} is not one of: {', '.join(formats())}") from None
    trainer.check_parallel(ctx.plan)
    emitted = trainer.emit(ctx)
    trainer.add_parallel_keys(ctx.plan, emitted)
    loss_note = trainer.loss_note(ctx.plan, ctx.stack)
    if loss_note:
        emitted.notes.append(loss_note)
    if ctx.config_of:
        emitted.notes.insert(
            0,
            f"model {ctx.model_id} is loaded as given; it was billed with the config of "
            f"{ctx.config_of} (same layer shapes)",
        )
    elif ctx.asked_id and _mirrored(ctx.asked_id, ctx.model_id):
        emitted.notes.insert(
            0,
            f"model {ctx.asked_id} was taken as {ctx.model_id}, the catalog's model of the same name: the config "
            f"names {ctx.model_id}; write {ctx.asked_id} back to load your copy",
        )
    elif ctx.asked_id and ctx.asked_id.lower() != ctx.model_id.lower():
        emitted.notes.insert(
            0,
            f"model {ctx.asked_id} is catalogued as {ctx.model_id}, the repository transformers "
            "loads: the config names that repository",
        )
    conf = ctx.plan.allocator.alloc_conf
    if conf:  # --allocator expandable: the allocator reads it from the environment at start-up
        emitted = dataclasses.replace(
            emitted,
            launch=f"PYTORCH_CUDA_ALLOC_CONF={shlex.quote(conf)} {emitted.launch}",
            notes=[*emitted.notes, f"PYTORCH_CUDA_ALLOC_CONF={conf}: export it wherever the trainer starts"],
        )
    return emitted


__all__ = ["EmitContext", "Emitted", "SideFile", "emit", "render_main", "render_side"]
