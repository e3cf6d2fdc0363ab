"""`memdoc plan`: the fastest plans that fit the GPU, searched over the knobs the user left free."""

from typing import Annotated, Optional

import typer

from memdoc.commands.emit import Format, print_emitted
from memdoc.commands.options import JsonOpt, ModelArg, PlanFlags, plan_options, print_setup_notes

EXAMPLES = """
Examples:

  memdoc plan meta-llama/Llama-3.1-8B --gpu 24

  memdoc plan meta-llama/Llama-3.1-8B --gpu a100-80 --method full --global-batch 32

  memdoc plan Qwen/Qwen2.5-14B --gpu h100-sxm --gpus 8 --seq 4096 --top 3 --json

  memdoc plan meta-llama/Llama-3.1-8B --gpu rtx-4090 --method lora --emit trl -o sft.yaml

  memdoc plan meta-llama/Llama-3.1-70B --gpu rtx-4090 --host-ram 128

Every plan flag you pass is kept fixed; the others are searched (method, precision, optimizer,
micro-batch × accumulation for the global batch, checkpointing, fused loss, sharding, offload).
--batch fixes the micro-batch: give --global-batch instead to let plan split it.
LoRA rank and targets, sequence length, attention kernel and GPU count stay as given (or default).
A plan fits when its minimum memory leaves more headroom than the bill's error (comfortable), and,
when it offloads, when the node's host RAM holds what it offloads (--host-ram, else this machine's).
Each step time carries its band: calibrated (H200-measured terms), published (QLoRA's factor) or
first-order (offload transfers, multi-GPU communication); an uncertain plan ranks above a calibrated
one only when it is faster by more than its band.
Exit status: 0 plans found, 2 bad input, 3 nothing fits.
"""

GlobalBatchOpt = Annotated[
    Optional[int],
    typer.Option("--global-batch", help="Sequences per optimizer step over all GPUs. [default: batch × accum × GPUs]"),
]
TopOpt = Annotated[int, typer.Option("--top", min=1, help="How many plans to show.")]
EmitOpt = Annotated[
    Optional[Format],
    typer.Option(
        "--emit",
        metavar="FORMAT",
        help="Write the fastest plan as a trainer config (trl, hf, axolotl, llamafactory), as `memdoc emit` does.",
    ),
]
OutputOpt = Annotated[
    Optional[str], typer.Option("--output", "-o", help="With --emit: write the config here. Default: print it.")
]
ForceOpt = Annotated[bool, typer.Option("--force", help="With --emit: overwrite existing files.")]
HostRamOpt = Annotated[
    Optional[float],
    typer.Option(
        "--host-ram",
        metavar="GiB",
        min=0,
        help="Host RAM per node that offloaded states may use. [default: this machine's RAM]",
    ),
]


@plan_options
def plan_command(
    model: ModelArg = None,
    *,
    plan: PlanFlags,
    global_batch: GlobalBatchOpt = None,
    top: TopOpt = 5,
    emit_format: EmitOpt = None,
    output: OutputOpt = None,
    force: ForceOpt = False,
    host_ram_gib: HostRamOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Search the fastest training plans that fit the GPU comfortably (and the host RAM when offloading).

    Bills every combination of the knobs you did not set (pure arithmetic, no torch) and ranks
    those whose minimum memory fits with more headroom than the bill's error by modelled step time
    and its uncertainty; prints the top plans with their minimum memory, process total, host RAM,
    step time ± band, tokens/s and what changed from your plan.
    """
    from memdoc import render
    from memdoc.core.reports.plan import plan_report
    from memdoc.errors import PlanError
    from memdoc.resolve.host import host_ram

    if (output or force) and not emit_format:
        raise PlanError("-o/--force write the config of --emit FORMAT; pass --emit too")
    setup, host = plan.resolve(model), host_ram(host_ram_gib)
    report = plan_report(
        setup.model,
        setup.plan,
        setup.gpu,
        fixed=setup.explicit,
        global_batch=global_batch,
        top=top,
        host_ram_bytes=host.bytes,
        host_ram_source=host.source,
    )
    chosen = report.candidates[0].plan if emit_format and report.candidates else None
    if json_out:
        emitted = _emit(setup, chosen, emit_format, output, force)[0] if chosen else None
        render.print_json(report.to_json(emitted=None if emitted is None else emitted.to_json()))
    else:
        print_setup_notes(setup, gpu_note=False)
        render.render_plans(setup, report)
        if chosen is not None:
            emitted, note = _emit(setup, chosen, emit_format, output, force)
            print_emitted(emitted, gpu_note=note)
    if not report.candidates:
        raise typer.Exit(3)


def _emit(setup, chosen, fmt: Format, output: Optional[str], force: bool):
    """Emit the chosen plan as `memdoc emit --gpu ID` would: (the EmitResult, the note a loose GPU id carries)."""
    import dataclasses
    from pathlib import Path

    from memdoc.output.emit import emit_files
    from memdoc.resolve.setup import card_as_emit_sees_it

    emit_setup = card_as_emit_sees_it(dataclasses.replace(setup, plan=chosen))
    return emit_files(emit_setup, fmt.value, output=Path(output) if output else None, force=force), emit_setup.gpu_note
