"""Emit a training plan as a config its trainer runs as is (pure mapping; no I/O here).

`emit(fmt, ctx)` returns an `Emitted` (main config dict, side files, launch command, notes);
`render_main` / `render_side` turn it into file text. One module per target format.
"""

from __future__ import annotations

import dataclasses

from memdoc.core.emit.axolotl import emit_axolotl
from memdoc.core.emit.base import FORMATS, EmitContext, Emitted, SideFile, render_main, render_side
from memdoc.core.emit.hf import emit_hf
from memdoc.core.emit.llamafactory import emit_llamafactory
from memdoc.core.emit.trl import emit_trl
from memdoc.errors import PlanError

_EMITTERS = {"trl": emit_trl, "hf": emit_hf, "axolotl": emit_axolotl, "llamafactory": emit_llamafactory}

DEFAULT_FILENAMES = {"trl": "sft.yaml", "hf": "training_args.yaml", "axolotl": "axolotl.yaml", "llamafactory": "llamafactory.yaml"}


def emit(fmt: str, ctx: EmitContext) -> Emitted:
    try:
        emitter = _EMITTERS[fmt]
    except KeyError:
        raise PlanError(f"--format {fmt!r} is not one of: {', '.join(FORMATS)}") from None
    emitted = emitter(ctx)
    conf = ctx.plan.allocator.alloc_conf
    if conf:  # --allocator expandable: the allocator reads it from the environment at start-up
        emitted = dataclasses.replace(emitted, launch=f"PYTORCH_CUDA_ALLOC_CONF={conf} {emitted.launch}",
                                      notes=[*emitted.notes, f"PYTORCH_CUDA_ALLOC_CONF={conf}: export it wherever the trainer starts"])
    return emitted


__all__ = ["DEFAULT_FILENAMES", "FORMATS", "EmitContext", "Emitted", "SideFile", "emit", "render_main", "render_side"]
