"""`memdoc plan`: the fastest plans that fit the GPU, searched over the knobs the user left free."""

import contextlib
import io
import json
from typing import Annotated, Optional

import typer

from memdoc.commands.app import command
from memdoc.commands.options import JsonOpt, PlanArgs, plan_options

EXAMPLES = """
Examples:

  memdoc plan meta-llama/Llama-3.1-8B --gpu 24

  memdoc plan meta-llama/Llama-3.1-8B --gpu a100-80 --method full --global-batch 32

  memdoc plan Qwen/Qwen2.5-14B --gpu h100-sxm --gpus 8 --seq 4096 --top 3 --json

  memdoc plan meta-llama/Llama-3.1-8B --gpu rtx-4090 --method lora --emit trl -o sft.yaml

Every plan flag you pass is kept fixed; the others are searched (method, precision, optimizer,
micro-batch × accumulation for the global batch, checkpointing, fused loss, sharding, offload).
--batch fixes the micro-batch: give --global-batch instead to let plan split it.
LoRA rank and targets, sequence length, attention kernel and GPU count stay as given (or default).
Exit status: 0 plans found, 2 bad input, 3 nothing fits.
"""

_FLAG_NAMES = {"micro_batch": "batch", "seq_len": "seq", "grad_accum": "accum", "gpus_per_node": "gpus"}


def _flags_of(plan, gpu) -> dict:
    """The plan flags (as `plan_options` passes them) that reproduce `plan` on `gpu`."""
    values = {"recipe": None, "allow_long": plan.allow_long}
    values["gpu"] = gpu.id if gpu.id != "local" else str(gpu.memory_bytes / 1024**3)
    for field, value in plan.to_dict().items():
        if field == "allow_long":
            continue
        values[_FLAG_NAMES.get(field, field)] = ",".join(value) if isinstance(value, list) else value
    return values


@command("plan", epilog=EXAMPLES)
@plan_options
def plan_command(
    model: Annotated[
        Optional[str],
        typer.Argument(metavar="MODEL", help="HF model id, model directory or config.json (optional with --recipe)."),
    ] = None,
    *,
    plan: PlanArgs,
    global_batch: Annotated[
        Optional[int],
        typer.Option(
            "--global-batch", help="Sequences per optimizer step over all GPUs. [default: batch × accum × GPUs]"
        ),
    ] = None,
    top: Annotated[int, typer.Option("--top", min=1, help="How many plans to show.")] = 5,
    emit_format: Annotated[
        Optional[str],
        typer.Option(
            "--emit",
            metavar="FORMAT",
            help="Write the fastest plan as a trainer config (trl, hf, axolotl, llamafactory), as `memdoc emit` does.",
        ),
    ] = None,
    output: Annotated[
        Optional[str], typer.Option("--output", "-o", help="With --emit: write the config here. Default: print it.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="With --emit: overwrite existing files.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Search the fastest training plans that fit the GPU with 5% headroom.

    Bills every combination of the knobs you did not set (pure arithmetic, no torch) and ranks
    those that fit by modelled step time; prints the top plans with their peak, process total,
    step time, tokens/s and what changed from your plan.
    """
    from memdoc import render
    from memdoc.core.billing.bill import compute_bill
    from memdoc.core.billing.steptime import step_time
    from memdoc.core.model.gpu import gpu_json
    from memdoc.core.remedies.search import HEADROOM, search
    from memdoc.errors import PlanError

    if (output or force) and not emit_format:
        raise PlanError("-o/--force write the config of --emit FORMAT; pass --emit too")
    setup = plan.resolve(model)
    found = search(setup.model, setup.plan, setup.gpu, fixed=setup.explicit, global_batch=global_batch, top=top)
    if json_out:
        emitted = (
            _emit(setup, found[0].plan, emit_format, output, force, capture=True) if emit_format and found else None
        )
        base = compute_bill(setup.model, setup.plan, setup.gpu)
        render.print_json(
            {
                "model": {
                    "id": setup.model.id,
                    "params": setup.model.params.total,
                    "trainable_params": base.states.trainable_params,
                },
                "gpu": gpu_json(setup.gpu, setup.plan.world_size),
                "headroom_fraction": HEADROOM,
                "fixed": sorted(setup.explicit),
                "given": {
                    "plan": setup.plan.to_dict(),
                    "process_total": base.process_total,
                    "time": step_time(setup.model, setup.plan, setup.gpu).to_json(setup.plan.world_size),
                },
                "plans": [c.to_json() for c in found],
                **({"emitted": emitted} if emitted is not None else {}),
            }
        )
    else:
        render.render_plans(setup, found, HEADROOM)
        if emit_format and found:
            _emit(setup, found[0].plan, emit_format, output, force, capture=False)
    if not found:
        raise typer.Exit(3)


def _emit(setup, chosen, fmt: str, output: Optional[str], force: bool, *, capture: bool):
    """Run `memdoc emit` on the chosen plan (the same library path); with `capture`, return what it printed."""
    from pathlib import Path

    from memdoc.commands.emit import Format, emit
    from memdoc.errors import PlanError

    try:
        fmt_value = Format(fmt)
    except ValueError:
        raise PlanError(f"--emit {fmt!r} is not one of: {', '.join(f.value for f in Format)}") from None
    args = dict(
        fmt=fmt_value,
        output=Path(output) if output else None,
        fit=False,
        force=force,
        dataset=None,
        output_dir=None,
        json_out=capture,
        **_flags_of(chosen, setup.gpu),
    )
    if not capture:
        emit(setup.model.id, **args)
        return None
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        emit(setup.model.id, **args)
    return json.loads(buffer.getvalue())
