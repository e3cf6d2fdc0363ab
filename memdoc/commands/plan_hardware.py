"""`memdoc plan` with several --gpu (or --tokens, --price): the hardware choice, one row per card and the
recommended card (`memdoc.core.reports.hardware.hardware_report`)."""

import typer

from memdoc.commands.options import PlanFlags, print_setup_notes
from memdoc.core.remedies.search import KNOBS


def compare_hardware(model, plan: PlanFlags, gpus, tokens, prices, global_batch, emit_format, json_out, host) -> None:
    """The hardware choice: the plan search on each --gpu, one row each, and the recommended card."""
    from memdoc import render
    from memdoc.core.reports.hardware import DEFAULT_TOKENS, HardwareOption, hardware_report, with_prices
    from memdoc.errors import PlanError
    from memdoc.render.hardware import render_hardware

    if emit_format:
        raise PlanError("--emit writes one plan: give one --gpu (the recommended card) to emit its plan")
    setups = plan.resolve_per_gpu(model, gpus or [None])
    options = [
        HardwareOption(label=gpu or setup.gpu.id, gpu=setup.gpu, plan=setup.plan, fixed=setup.explicit)
        for gpu, setup in zip(gpus or [None], setups)
    ]
    options = with_prices(options, prices or [])
    report = hardware_report(
        setups[0].model,
        options,
        tokens=tokens or DEFAULT_TOKENS,
        global_batch=global_batch,
        host_ram_bytes=host.bytes,
    )
    if json_out:
        render.print_json(report.to_json())
    else:
        for setup in setups:
            if setup.gpu_note:
                render.note(f"note: {setup.gpu_note}")
        print_setup_notes(setups[0], gpu_note=False, searched=frozenset(KNOBS))
        render_hardware(report)
    if report.recommended is None:
        raise typer.Exit(3)
