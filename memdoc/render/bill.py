"""`memdoc bill`: the itemised bill with per-phase stacked bars, the verdict, the ladder, --max and --dataset."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from memdoc.core.billing.vocabulary import LINE_ITEMS
from memdoc.render.common import ITEM_COLORS, duration, gib, ruled_table, table
from memdoc.render.layout import NARROW_COLUMNS, paragraph, parts_line, stdout, title

BAR_WIDTH = 40
"""Cells of the widest stacked bar (the larger of the highest phase and the GPU's memory)."""


def phase_bar(phase, scale: int) -> str:
    """A stacked bar of one phase's items, `scale` bytes = full width."""
    out = []
    for item, color in ITEM_COLORS.items():
        cells = round(getattr(phase, item) / scale * BAR_WIDTH) if scale else 0
        if cells:
            out.append(f"[{color}]{'█' * cells}[/{color}]")
    return "".join(out)


def render_time(time, world_size: int, generic_gpu: bool = False) -> None:
    """One line: modelled seconds per optimizer step, tokens/s, and wall time per billion tokens."""
    per_billion = 1e9 / (time.tokens_per_second * world_size)
    gpus = f" on {world_size} GPUs" if world_size > 1 else ""
    parts_line(
        f"step time ≈ {duration(time.seconds)} per optimizer step ({time.tokens:,} tokens/GPU)",
        f"{time.tokens_per_second:,.0f} tokens/s/GPU",
        f"{duration(per_billion)} per billion tokens{gpus}",
    )
    if time.note:
        stdout.print(f"  ({time.note})")
    if generic_gpu:
        stdout.print("  (times at A100 rates: name the GPU, e.g. --gpu rtx-4090, for its own)")


def render_bill(bill, ladder, command_line=None, time=None, host=None, run=None) -> None:
    """The bill table with per-phase stacked bars, the host RAM per node (`host`: the limit offloaded states are
    held against, a `resolve.host.HostRam`), the whole run (`run`: a `run_phases.RunBill`), the verdict line and
    the ladder (`time`: a StepTime)."""
    _bill_title(bill)
    _bill_table(bill)
    _bill_summary(bill, time)
    if bill.host:
        host_lines(bill, host)
    if run is not None and (bill.plan.world_size > 1 or len(run.parts) > 3 or run.peak_part(rank0=True) != "step"):
        render_run(run)  # one GPU, no evaluation, the step the peak: the JSON's `run` has it, the table says it
    if bill.gpu is None:
        return
    render_verdict(
        bill.fit,
        bill.gpu,
        bill.plan.world_size,
        peak_phase=bill.peak_phase,
        process_total=bill.process_total,
        name_peak=bill.plan.task.value != "sft",
    )
    if ladder:
        render_ladder(ladder)


def _bill_title(bill) -> None:
    """The heading: model, parameters, method/precision/optimizer, batch × seq, and the knobs not at their default."""
    plan = bill.plan
    title(
        bill.model.id,
        f"{bill.model.params.total / 1e9:.2f}B params",
        f"{plan.method.value} {plan.precision.value} {plan.optimizer.value}",
        f"task {plan.task.value}" if plan.task.value != "sft" else "",
        f"batch {plan.micro_batch} × seq {plan.seq_len}",
        f"ckpt {plan.checkpointing.value}" if plan.checkpointing.value != "none" else "",
        f"{plan.shard.value} × {plan.world_size}" if plan.shard.value != "none" else "",
        f"offload {plan.offload.value}" if plan.offload.value != "none" else "",
    )


def _bill_table(bill) -> None:
    """Line items × phases (plus the offloaded host column), then one stacked bar per phase."""
    t = Table(caption_justify="left")
    t.add_column("per GPU", justify="left")
    phases = bill.phase_names
    for phase in phases:
        t.add_column(phase + (" ◀ peak" if phase == bill.peak_phase else ""), justify="right")
    host = f"offloaded ({bill.plan.offload_to.value})" if bill.host else None
    if host:
        t.add_column(host, justify="right")
    for item in LINE_ITEMS:
        offloaded = [gib(bill.host[item]) if item in bill.host else ""] if host else []
        t.add_row(
            f"[{ITEM_COLORS[item]}]■[/] {item}", *[gib(getattr(bill.phases[p], item)) for p in phases], *offloaded
        )
    t.add_row(
        "[b]allocated[/b]",
        *[f"[b]{gib(bill.phases[p].total)}[/b]" for p in phases],
        *([f"[b]{gib(bill.host_bytes)}[/b]"] if host else []),
    )
    stdout.print(t)
    scale = max(bill.phases[p].total for p in phases)
    scale = max(scale, bill.gpu.memory_bytes if bill.gpu else 0)
    width = max(len(p) for p in phases) + 1  # "generation" needs eleven columns
    for phase in phases:
        stdout.print(f"  {phase:<{width}}{phase_bar(bill.phases[phase], scale)}")


def _bill_summary(bill, time) -> None:
    """Peak allocated, reserved and process total; the step time; what 'other' holds; host memory; the notes."""
    from memdoc.core.billing.verdict import other_explained

    plan = bill.plan
    parts_line(
        f"peak allocated {gib(bill.peak_allocated)} ({bill.peak_phase})",
        f"reserved ≈ {gib(bill.peak_reserved)} (fragmentation {gib(bill.fragmentation_bytes)}, "
        f"{plan.allocator.value} allocator)",
        f"process total ≈ {gib(bill.process_total)} (incl. {gib(bill.overhead_bytes)} CUDA context and workspaces)",
    )
    if time is not None:
        render_time(time, plan.world_size, bill.gpu is None or bill.gpu.is_generic)
    explained = other_explained(bill)
    if explained:
        paragraph(explained)
    for line in bill.notes:
        paragraph(f"note: {line}")


def host_lines(bill, host=None) -> None:
    """Host RAM per node as the engine holds it (by item), against `host` (the limit and its source), and NVMe."""
    plan = bill.plan
    gpus = f"{plan.gpus_per_node} GPU{'s' if plan.gpus_per_node > 1 else ''}"
    items = ", ".join(f"{name} {gib(v * plan.gpus_per_node)}" for name, v in bill.host.items())
    line = f"  host RAM needed ({bill.engine}): {gib(bill.host_bytes_per_node)} per node ({gpus}: {items})"
    if host is not None and host.bytes:
        verdict = "fits" if bill.host_bytes_per_node <= host.bytes else "does not fit"
        line += f" · {verdict} {gib(host.bytes)}, {host.source}"
    elif host is not None:
        line += f" · {host.source}"
    stdout.print(line)
    if bill.nvme:
        stdout.print(f"  NVMe needed: {gib(sum(bill.nvme.values()) * plan.gpus_per_node)} per node")


def render_run(run) -> None:
    """The whole run in two lines: each part's GPU bytes per rank (rank 0's extra apart, the peak marked), the
    host bytes on rank 0's node; then a line for each part that needs more than the step and does not fit
    comfortably on rank 0."""
    peak, peak0 = run.peak_part(), run.peak_part(rank0=True)
    gpu, host = [], []
    for name, part in run.parts.items():
        extra = f" (rank 0 +{gib(part.rank0_gpu_bytes)})" if part.rank0_gpu_bytes else ""
        gpu.append(f"{name} {gib(part.gpu_bytes)}{extra}" + (" ◀ peak" if name == peak else ""))
        node = part.host_per_node(run.gpus_per_node)
        if node:
            rank0 = f" (rank 0 {gib(part.rank0_host_bytes)})" if part.rank0_host_bytes else ""
            host.append(f"{name} {gib(node)}{rank0}")
    parts_line("whole run, GPU per rank: " + gpu[0], *gpu[1:])
    if host:
        parts_line("host RAM, rank 0's node: " + host[0], *host[1:])
    if peak0 != peak:
        paragraph(f"rank 0 peaks in {peak0}: {run.parts[peak0].how}")
    step = run.min_memory_bytes("step", rank0=True)
    for name, part in run.parts.items():
        fit = run.fit(name, rank0=True)
        if name != "step" and fit is not None and not fit.comfortable and fit.min_memory_bytes > step:
            paragraph(f"{name}: {fit.fit.value} on rank 0 ({gib(run.min_memory_bytes(name, rank0=True))}) — {part.how}")


def render_verdict(
    answer,
    gpu,
    world_size: int = 1,
    *,
    peak_phase: str | None = None,
    process_total: int | None = None,
    basis: str | None = None,
    name_peak: bool = False,
) -> None:
    """The one fit rule's answer (a `verdict.FitAnswer`) in one line: comfortable, close call or does not fit,
    with the margin of the card over the minimum memory against that minimum's error band.

    `process_total`: the unconstrained run's total, to say when a step fits only because the allocator
    releases its cache and retries (its total is over the card, its minimum is not). `basis`: what the
    error band rests on, when it is not the training benchmark (the inference bill, whose minimum is its
    process total). `name_peak`: say the peak phase when it fits too (post-training, where it may be generation)."""
    from memdoc.core.billing.verdict import Fit

    gpus = f"{world_size} × " if world_size > 1 else ""
    where = f"{gpus}{gpu.name} ({gib(gpu.memory_bytes)})"
    margin = answer.margin_bytes
    if answer.fit is Fit.COMFORTABLE:
        head = f"[bold green]✔ fits[/] {where} comfortably"
    elif answer.fits:
        head = f"[bold yellow]✔ fits[/] {where}, a close call"
    elif answer.fit is Fit.CLOSE_CALL:
        head = f"[bold yellow]✘ close call[/] on {where}"
    else:
        head = f"[bold red]✘ does not fit[/] {where}"
    if margin >= 0:
        amount = f"{gib(margin)} headroom per GPU" + (f", peaks in {peak_phase}" if name_peak and peak_phase else "")
    else:
        amount = f"{gib(-margin)} over per GPU" + (f", peak in {peak_phase}" if peak_phase else "")
    parts = [head, amount, _error_band(answer, basis)]
    if basis is None:
        parts.append(f"smallest GPU that runs it: {gib(answer.min_memory_bytes)}")
    if answer.fits and process_total is not None and process_total > gpu.memory_bytes:
        parts.append(
            "it fits only because the allocator releases its cache and retries "
            f"(the unconstrained run reserves {gib(process_total - gpu.memory_bytes)} more)"
        )
    parts_line(*parts, indent="")


def _error_band(answer, basis: str | None) -> str:
    """'close call: within …' or 'margin beyond …' the bill's benchmarked error (or the error of `basis`)."""
    from memdoc.core.billing.verdict import MIN_MEMORY_ERROR

    error = f"±{MIN_MEMORY_ERROR:.0%}"
    band = f"{error} (±{gib(answer.error_bytes)}); {basis}" if basis else None
    if answer.close_call:
        return "[yellow]close call[/]: within " + (
            band or f"the bill's {error} benchmarked error (±{gib(answer.error_bytes)}, measured on real H200 steps)"
        )
    return "margin beyond " + (band or f"the bill's {error} benchmarked error (±{gib(answer.error_bytes)})")


def render_ladder(ladder) -> None:
    """The ladder: each remedy on top of the last, with its peak, process total, saving, step time and fit."""
    narrow = stdout.width < NARROW_COLUMNS
    title("The ladder: cheapest remedies first, each on top of the last")
    t = ruled_table(narrow)
    for header, justify in (
        ("#", "right"),
        ("remedy", "left"),
        ("peak" if narrow else "peak alloc.", "right"),
        ("process", "right"),
        ("saves", "right"),
        ("time" if narrow else "step time", "right"),
        ("fits", "left"),
    ):
        t.add_column(header, justify=justify, no_wrap=header != "remedy", min_width=12 if header == "remedy" else None)
    for i, step in enumerate(ladder, 1):
        change = step.fixed_change
        t.add_row(
            str(i),
            step.action + (f" — [yellow]needs a change you fixed: {escape(change)}[/]" if change else ""),
            gib(step.bill.peak_allocated),
            gib(step.bill.process_total),
            gib(step.saved_bytes),
            f"×{step.relative_time:.2f} ({duration(step.step_seconds)})",
            _FIT_CELL[step.fit.value],
        )
    stdout.print(t)
    if not ladder[-1].comfortable:
        stdout.print(
            "[red]No rung makes it fit comfortably: use more GPUs (--gpus, --shard), a bigger GPU, or a smaller "
            "model.[/]"
        )


_FIT_CELL = {"comfortable": "[green]comfortable[/]", "close call": "[yellow]close call[/]", "does not fit": "no"}
"""The ladder's fits column: the one fit rule's answer (`verdict.Fit` values)."""


def render_max(maximum, *, inference: bool = False) -> None:
    """`--max batch|seq` (a `maximum.Maximum`): the largest value that fits comfortably and the largest that
    fits at all (past it, a close call), or that not even 1 does."""
    name = {
        ("batch", False): "micro-batch",
        ("seq", False): "sequence length",
        ("batch", True): "batch",
        ("seq", True): "context",
    }[(maximum.knob, inference)]
    if maximum.fits is None:
        stdout.print(f"No {name} fits: even 1 is over.")
        return
    if maximum.comfortable is None:
        stdout.print(f"No {name} fits comfortably: even 1 is a close call.")
    else:
        stdout.print(f"Largest {name} that fits comfortably: [bold]{maximum.comfortable}[/]")
    if maximum.fits != maximum.comfortable:
        stdout.print(f"Largest that fits at all: [bold]{maximum.fits}[/] (a close call: within the bill's error)")


def render_dataset(data: dict) -> None:
    """`bill --dataset`: the token-length distribution against the longest sequence that fits."""
    fits, at_all = data["max_seq_that_fits"], data.get("max_seq_fits_at_all")
    rows = [
        [
            "samples",
            f"{data['samples']:,}" + (f" ({data['skipped']:,} without text skipped)" if data["skipped"] else ""),
        ],
        ["max", f"{data['max_tokens']:,} tokens"],
        ["p99", f"{data['p99_tokens']:,} tokens"],
        ["p50", f"{data['p50_tokens']:,} tokens"],
        [
            f"longest that fits comfortably (micro-batch {data['micro_batch']})",
            "none (not even 128 tokens)" if fits is None else f"{fits:,} tokens",
        ],
        *(
            [["longest that fits at all (a close call)", f"{at_all:,} tokens"]]
            if at_all is not None and at_all != fits
            else []
        ),
        ["longer than that", f"{data['over']:,} samples"],
    ]
    table(
        escape(f"{data['file']} · {data['text_field']} · tokenizer {data['tokenizer']}"),
        [("lengths", "left"), ("", "right")],
        rows,
    )
    if "images" in data:
        _render_dataset_images(data["images"])
    for p in data["prescriptions"]:
        stdout.print(f"• [b]{p['id']}[/b]: {p['action']}")
        for key, value in p["how"].items():
            stdout.print(f"    {key}: {', '.join(f'{k}: {v}' for k, v in value.items())}")


def _render_dataset_images(images: dict) -> None:
    """`bill --dataset` with images: image tokens per sample and the sample whose text + image tokens peak."""
    peak = images.get("peak")
    rows = [
        [
            "images",
            f"{images['images']:,} in {images['samples_with_images']:,} samples "
            f"(up to {images['max_images_per_sample']} per sample)",
        ],
        ["image tokens per sample: max", f"{images['image_tokens_max']:,} tokens"],
        ["p99", f"{images['image_tokens_p99']:,} tokens"],
        ["p50", f"{images['image_tokens_p50']:,} tokens"],
        ["text + image tokens: max", f"{images['total_tokens_max']:,} tokens"],
        ["p99", f"{images['total_tokens_p99']:,} tokens"],
        ["vision encoder, longest sample", f"{images['encoder_tokens_max']:,} patches"],
    ]
    if peak is not None:
        rows.append(
            [
                "the peak sample",
                f"record {peak['record']:,}: {peak['text_tokens']:,} text + {peak['image_tokens']:,} image tokens "
                f"({peak['images']} images)",
            ]
        )
    bill = (peak or {}).get("bill")
    if bill is not None:
        rows.append(
            [
                "the peak sample, billed",
                f"{bill['peak_allocated'] / 1024**3:.2f} GiB peak allocated, "
                f"vision encoder {bill['vision_saved'] / 1024**3:.2f} GiB saved",
            ]
        )
    table("image tokens (the fit above counts text + image tokens)", [("images", "left"), ("", "right")], rows)


def render_run_verdict(verdict) -> None:
    """The whole run's verdict (a `run_verdict.RunVerdict`) in one line, when a part other than the step, or
    the host RAM, turns it: the step's own verdict line above speaks for the step alone."""
    if verdict is None:
        return
    if verdict.decided_by == "host":
        line = (
            f"[bold red]✘ the whole run does not fit[/] the host: {verdict.host_part} needs {gib(verdict.host_bytes)} "
            f"of RAM on rank 0's node, over {gib(verdict.host_limit)} ({verdict.host_source})"
        )
    elif verdict.gpu is None or verdict.gpu_part == "step" or verdict.gpu.comfortable:
        return
    else:
        word = "does not fit" if not verdict.fits else "is a close call"
        colour = "red" if not verdict.fits else "yellow"
        line = (
            f"[bold {colour}]✘ the whole run {word}[/]: {verdict.gpu_part} needs "
            f"{gib(verdict.gpu.min_memory_bytes)} on rank 0 against {gib(verdict.gpu.capacity_bytes)}, "
            "more than the step"
        )
    parts_line(line, indent="")
