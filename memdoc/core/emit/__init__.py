"""Emit a training plan as a config its trainer runs as is (pure mapping; no I/O here).

`emit(fmt, ctx)` returns an `Emitted` (main config dict, side files, launch command, notes);
`render_main` / `render_side` turn it into file text. One module per target format.
"""

from __future__ import annotations

import dataclasses

from memdoc.core.emit.axolotl import emit_axolotl
from memdoc.core.emit.base import EmitContext, Emitted, SideFile, loss_path_note, render_main, render_side
from memdoc.core.emit.hf import emit_hf
from memdoc.core.emit.llamafactory import emit_llamafactory
from memdoc.core.emit.trl import emit_trl
from memdoc.errors import PlanError

_FORMATS = {
    "trl": (emit_trl, "sft.yaml"),
    "hf": (emit_hf, "training_args.yaml"),
    "axolotl": (emit_axolotl, "axolotl.yaml"),
    "llamafactory": (emit_llamafactory, "llamafactory.yaml"),
}
"""Each target format: its emitter and the config file name written by default. The one list of formats."""

FORMATS = tuple(_FORMATS)
DEFAULT_FILENAMES = {fmt: filename for fmt, (_, filename) in _FORMATS.items()}


def _mirrored(asked: str, model_id: str) -> bool:
    """Is `asked` another org's repository of the same name as the catalog's `model_id` (a mirror,
    `memdoc.resolve.models.mirror_of`), rather than a spelling of the catalog's id?"""
    asked_org, _, asked_name = asked.lower().rpartition("/")
    org, _, name = model_id.lower().rpartition("/")
    return bool(asked_org) and asked_org != org and asked_name == name


def emit(fmt: str, ctx: EmitContext) -> Emitted:
    try:
        emitter, _ = _FORMATS[fmt]
    except KeyError:
        raise PlanError(f"--format {fmt!r} is not one of: {', '.join(FORMATS)}") from None
    emitted = emitter(ctx)
    loss_note = loss_path_note(fmt, ctx.plan)
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
            launch=f"PYTORCH_CUDA_ALLOC_CONF={conf} {emitted.launch}",
            notes=[*emitted.notes, f"PYTORCH_CUDA_ALLOC_CONF={conf}: export it wherever the trainer starts"],
        )
    return emitted


__all__ = ["DEFAULT_FILENAMES", "FORMATS", "EmitContext", "Emitted", "SideFile", "emit", "render_main", "render_side"]
