"""`memdoc plan`: the fastest plans that fit the GPU, searched over the knobs the user left free."""

from typing import Annotated, Optional

import typer

from memdoc.commands.command_options import (
    ForceOpt,
    GlobalBatchOpt,
    OutputOpt,
    PriceOpt,
    TokensOpt,
    TopOpt,
    repeatable_gpu,
)
from memdoc.commands.emit import Format, print_emitted
from memdoc.commands.html_page import check_html, write_html
from memdoc.commands.options import (
    HostRamOpt,
    HtmlOpt,
    JsonOpt,
    ModelArg,
    PlanFlags,
    plan_options,
    print_setup_notes,
)
from memdoc.commands.plan_hardware import compare_hardware
from memdoc.core.remedies.search import KNOBS

EXAMPLES = """
Examples:

  memdoc plan meta-llama/Llama-3.1-8B --gpu 24

  memdoc plan meta-llama/Llama-3.1-8B --gpu a100-80 --method full --global-batch 32

  memdoc plan Qwen/Qwen2.5-14B --gpu h100-sxm --gpus 8 --seq 4096 --top 3 --json

  memdoc plan meta-llama/Llama-3.1-8B --gpu rtx-4090 --method lora --emit trl -o sft.yaml

  memdoc plan meta-llama/Llama-3.1-8B --gpu rtx-4090 --gpu a100-80 --gpu 8xh100 --tokens 2e8
      --price rtx-4090=0.40 --price a100-80=1.20 --price 8xh100=2.50

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
With --gpu given more than once (or --tokens, --price): one row per card, its fastest plan, the time
for the tokens (tokens / tokens per step × step time) and the cost (hours × GPUs × price per GPU-hour),
and the recommended card: the cheapest when priced, else the fastest.
Exit status: 0 plans found, 2 bad input, 3 nothing fits.
"""

EmitOpt = Annotated[
    Optional[Format],
    typer.Option(
        "--emit",
        metavar="FORMAT",
        help="Write the fastest plan as a trainer config (trl, hf, axolotl, llamafactory), as `memdoc emit` does.",
    ),
]


@repeatable_gpu
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
    tokens: TokensOpt = None,
    prices: PriceOpt = None,
    host_ram_gib: HostRamOpt = None,
    json_out: JsonOpt = False,
    html: HtmlOpt = None,
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
    from memdoc.output.emit import emit_plan
    from memdoc.resolve.host import host_ram

    if (output or (force and html is None)) and not emit_format:
        raise PlanError("-o/--force write the config of --emit FORMAT; pass --emit too")
    check_html(html, force and html is not None)
    gpus, host = list(plan.values["gpu"] or []), host_ram(host_ram_gib)
    if (len(gpus) > 1 or tokens is not None or prices) and html is not None:
        raise PlanError("--html draws the plans of one card: give one --gpu, without --tokens or --price")
    if len(gpus) > 1 or tokens is not None or prices:
        return compare_hardware(model, plan, gpus, tokens, prices, global_batch, emit_format, json_out, host)
    setup = plan.resolve_per_gpu(model, gpus or [None])[0]
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
    write_html(html, report.to_json(), title=f"memdoc plan: {setup.model.id}", force=force)
    if json_out:
        emitted = emit_plan(setup, chosen, emit_format.value, output=output, force=force)[0] if chosen else None
        render.print_json(report.to_json(emitted=None if emitted is None else emitted.to_json()))
    else:
        print_setup_notes(setup, gpu_note=False, searched=frozenset(KNOBS))
        render.render_plans(setup, report)
        if chosen is not None:
            emitted, note = emit_plan(setup, chosen, emit_format.value, output=output, force=force)
            print_emitted(emitted, gpu_note=note)
    if not report.candidates:
        raise typer.Exit(3)
