"""Rendering: the only module that imports Rich. Tables and bars to stdout, notes to stderr."""

from __future__ import annotations

import json
import sys

from rich import box
from rich.markup import escape
from rich.table import Table

from memdoc.core.billing.vocabulary import LINE_ITEMS, PHASES
from memdoc.render.layout import (
    NARROW_COLUMNS,
    format_switches,
    markup_paragraph,
    paragraph,
    parts_line,
    stderr,
    stdout,
    title,
)
from memdoc.units import format_bytes

__all__ = ["format_switches", "paragraph", "parts_line", "stderr", "stdout", "title"]


def print_json(data) -> None:
    """Machine-readable output: one JSON document on stdout, bytes as integers."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def note(text: str) -> None:
    """A hint or warning for the human, on stderr so --json stays clean."""
    stderr.print(text)


def table(heading: str | None, columns: list[tuple[str, str]], rows: list[list], *, caption: str | None = None) -> None:
    """A plain table; columns are (header, justify).

    When the columns cannot all fit the console (numbers whole, text folded to 14 characters),
    each row becomes a block instead — its first cell, then `header value` parts — so no column
    is cut or dropped at 80 columns.
    """
    if heading:
        title(heading)
    cells = [[str(cell) if cell is not None else "—" for cell in row] for row in rows]
    widths = []
    for i, (header, justify) in enumerate(columns):
        longest = max((len(row[i]) for row in cells if i < len(row)), default=0)
        widths.append(max(longest, len(header)) if justify == "right" else min(max(longest, len(header)), 14))
    if sum(widths) + 2 * len(columns) > stdout.width and len(columns) > 2:
        for row in cells:
            markup_paragraph(f"[b]{escape(row[0])}[/b]", indent=0)
            parts_line(*(f"{header} {value}" for (header, _), value in zip(columns[1:], row[1:]) if value.strip()))
    else:
        narrow = stdout.width < NARROW_COLUMNS
        t = Table(box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, show_edge=not narrow, collapse_padding=narrow)
        for (header, justify), width in zip(columns, widths):  # numbers never wrap; text folds, never "…"
            t.add_column(
                header,
                justify=justify,
                no_wrap=justify == "right",
                overflow="fold",
                min_width=None if justify == "right" else width,
            )
        for row in cells:
            t.add_row(*row)
        stdout.print(t)
    if caption:
        paragraph(caption, indent="", hang="")


def gib(n: int | None) -> str:
    return "—" if n is None else format_bytes(n, unit="GiB")


_COLORS = {"weights": "blue", "gradients": "magenta", "optimizer": "yellow", "activations": "green", "other": "red"}
_BAR_WIDTH = 40


def _bar(phase, scale: int) -> str:
    """A stacked bar of one phase's items, `scale` bytes = full width."""
    out = []
    for item, color in _COLORS.items():
        cells = round(getattr(phase, item) / scale * _BAR_WIDTH) if scale else 0
        if cells:
            out.append(f"[{color}]{'█' * cells}[/{color}]")
    return "".join(out)


def duration(seconds: float) -> str:
    """A duration with its unit: ms below a second, s below two minutes, then min, h, days."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.2f} s"


def render_time(time, world_size: int, generic_gpu: bool = False) -> None:
    """One line: modelled seconds per optimizer step, tokens/s, and wall time per billion tokens."""
    per_billion = 1e9 / (time.tokens_per_second * world_size)
    gpus = f" on {world_size} GPUs" if world_size > 1 else ""
    parts_line(
        f"step time ≈ {duration(time.seconds)} per optimizer step ({time.tokens:,} tokens/GPU)",
        f"{time.tokens_per_second:,.0f} tokens/s/GPU",
        f"{duration(per_billion)} per billion tokens{gpus}",
    )
    if generic_gpu:
        stdout.print("  (times at A100 rates: name the GPU, e.g. --gpu rtx-4090, for its own)")


def render_bill(bill, ladder, command_line=None, time=None) -> None:
    """The bill table with per-phase stacked bars, the verdict line and the ladder (`time`: a StepTime)."""
    from memdoc.core.billing.verdict import other_explained

    plan = bill.plan
    gpu = bill.gpu
    title(
        bill.model.id,
        f"{bill.model.params.total / 1e9:.2f}B params",
        f"{plan.method.value} {plan.precision.value} {plan.optimizer.value}",
        f"batch {plan.micro_batch} × seq {plan.seq_len}",
        f"ckpt {plan.checkpointing.value}" if plan.checkpointing.value != "none" else "",
        f"{plan.shard.value} × {plan.world_size}" if plan.shard.value != "none" else "",
        f"offload {plan.offload.value}" if plan.offload.value != "none" else "",
    )
    t = Table(caption_justify="left")
    t.add_column("per GPU", justify="left")
    for phase in PHASES:
        t.add_column(phase + (" ◀ peak" if phase == bill.peak_phase else ""), justify="right")
    host = f"offloaded ({plan.offload_to.value})" if bill.host else None
    if host:
        t.add_column(host, justify="right")
    for item in LINE_ITEMS:
        offloaded = [gib(bill.host[item]) if item in bill.host else ""] if host else []
        t.add_row(f"[{_COLORS[item]}]■[/] {item}", *[gib(getattr(bill.phases[p], item)) for p in PHASES], *offloaded)
    t.add_row(
        "[b]allocated[/b]",
        *[f"[b]{gib(bill.phases[p].total)}[/b]" for p in PHASES],
        *([f"[b]{gib(bill.host_bytes)}[/b]"] if host else []),
    )
    stdout.print(t)
    scale = max(bill.phases[p].total for p in PHASES)
    scale = max(scale, gpu.memory_bytes if gpu else 0)
    for phase in PHASES:
        stdout.print(f"  {phase:<10}{_bar(bill.phases[phase], scale)}")
    parts_line(
        f"peak allocated {gib(bill.peak_allocated)} ({bill.peak_phase})",
        f"reserved ≈ {gib(bill.peak_reserved)} (fragmentation {gib(bill.fragmentation_bytes)}, {plan.allocator.value} allocator)",
        f"process total ≈ {gib(bill.process_total)} (incl. {gib(bill.overhead_bytes)} CUDA context and workspaces)",
    )
    if time is not None:
        render_time(time, plan.world_size, gpu is None or gpu.is_generic)
    explained = other_explained(bill)
    if explained:
        paragraph(explained)
    if bill.host:
        stdout.print(
            f"  host {plan.offload_to.value.upper() if plan.offload_to.value == 'nvme' else 'RAM'} needed: "
            f"{gib(bill.host_bytes)} per GPU, {gib(bill.host_bytes * plan.gpus_per_node)} per node "
            f"({plan.gpus_per_node} GPU{'s' if plan.gpus_per_node > 1 else ''})"
        )
    for line in bill.notes:
        paragraph(f"note: {line}")
    if gpu is None:
        return
    # the smallest GPU (a bisection of simulations) is worth its time only when fragmentation decides
    near = bill.peak_allocated + bill.overhead_bytes <= gpu.memory_bytes and bill.headroom_bytes < 0
    render_verdict(
        bill.process_total,
        gpu,
        plan.world_size,
        peak_phase=bill.peak_phase,
        fits=bill.fits,
        min_memory=bill.min_memory_bytes if near else None,
    )
    if ladder:
        render_ladder(ladder)


def render_verdict(
    process_total: int,
    gpu,
    world_size: int = 1,
    *,
    peak_phase: str | None = None,
    fits: bool | None = None,
    min_memory: int | None = None,
    basis: str | None = None,
) -> None:
    """✔ fits / ✘ does not fit, with the margin against the bill's benchmarked error (close call inside it).

    `fits` is the bill's simulated answer where it has one: a run that fits with a negative margin
    completes only because the allocator frees its cache and retries. `min_memory`: the smallest
    GPU that runs the step, printed when given. `basis`: what the error band rests on, when it is not
    the training benchmark."""
    from memdoc.core.billing.verdict import VERDICT_ERROR, verdict

    v = verdict(process_total, gpu.memory_bytes, fits=fits)
    gpus = f"{world_size} × " if world_size > 1 else ""
    where = f"{gpus}{gpu.name} ({gib(gpu.memory_bytes)})"
    if v.fits and v.margin_bytes < 0:
        head = (
            f"[bold yellow]✔ fits[/] {where} only because the allocator releases its cache and retries "
            f"(the unconstrained run reserves {gib(-v.margin_bytes)} more)"
        )
    elif v.fits:
        head = f"[bold green]✔ fits[/] {where} with {gib(v.margin_bytes)} headroom per GPU"
    else:
        head = f"[bold red]✘ does not fit[/] {where}: {gib(-v.margin_bytes)} over per GPU" + (
            f", peak in {peak_phase}" if peak_phase else ""
        )
    band = f"±{VERDICT_ERROR:.0%} (±{gib(v.error_bytes)}); {basis}" if basis else None
    if v.close_call:
        tail = "[yellow]close call[/]: within " + (
            band
            or f"the bill's ±{VERDICT_ERROR:.0%} benchmarked error (±{gib(v.error_bytes)}, measured on real H200 steps)"
        )
    else:
        tail = "margin beyond " + (band or f"the bill's ±{VERDICT_ERROR:.0%} benchmarked error (±{gib(v.error_bytes)})")
    parts = [head, tail] + ([f"smallest GPU that runs it: {gib(min_memory)}"] if min_memory is not None else [])
    parts_line(*parts, indent="")


def render_ladder(ladder) -> None:
    narrow = stdout.width < NARROW_COLUMNS
    title("The ladder: cheapest remedies first, each on top of the last")
    t = Table(box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, show_edge=not narrow, collapse_padding=narrow)
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
        t.add_row(
            str(i),
            step.rung.action,
            gib(step.bill.peak_allocated),
            gib(step.bill.process_total),
            gib(step.saved_bytes),
            f"×{step.relative_time:.2f} ({duration(step.step_seconds)})",
            "[green]yes[/]" if step.fits else "no",
        )
    stdout.print(t)
    if not ladder[-1].fits:
        stdout.print("[red]No rung makes it fit: use more GPUs (--gpus, --shard), a bigger GPU, or a smaller model.[/]")


def _change(field: str, before, after) -> str:
    value = lambda v: ",".join(v) if isinstance(v, tuple) else getattr(v, "value", v)  # noqa: E731
    return f"{field.replace('_', ' ')} {value(before)} → {value(after)}"


def render_plans(setup, candidates, headroom: float) -> None:
    """`memdoc plan`: the fastest fitting plans, each with what changed from the user's plan."""
    gpu, plan = setup.gpu, setup.plan
    gpus = f"{plan.world_size} × " if plan.world_size > 1 else ""
    if not candidates:
        stdout.print(
            f"[bold red]No plan fits[/] {gpus}{gpu.name} ({gib(gpu.memory_bytes)}) with {headroom:.0%} headroom "
            "over the knobs left free: free a fixed flag, add GPUs (--gpus) or use a bigger GPU."
        )
        return
    narrow = stdout.width < NARROW_COLUMNS
    title(
        f"{setup.model.id} on {gpus}{gpu.name} ({gib(gpu.memory_bytes)})",
        f"fastest plans that fit with {headroom:.0%} headroom",
    )
    t = Table(box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, show_edge=not narrow, collapse_padding=narrow)
    for header, justify in (
        ("#", "right"),
        ("changes from your plan", "left"),
        ("peak alloc.", "right"),
        ("process", "right"),
        ("step time", "right"),
        ("tokens/s/GPU", "right"),
        ("per 1B tokens", "right"),
    ):
        short = {
            "changes from your plan": "changes",
            "peak alloc.": "peak",
            "tokens/s/GPU": "tok/s/GPU",
            "per 1B tokens": "per 1B tok",
        }
        t.add_column(
            short.get(header, header) if narrow else header,
            justify=justify,
            no_wrap=justify == "right",
            min_width=12 if justify == "left" else None,
        )
    for i, c in enumerate(candidates, 1):
        changes = "; ".join(_change(*change) for change in c.changes) or "(none: your plan)"
        per_billion = 1e9 / (c.time.tokens_per_second * c.plan.world_size)
        t.add_row(
            str(i),
            changes,
            gib(c.bill.peak_allocated),
            gib(c.bill.process_total),
            duration(c.time.seconds),
            f"{c.time.tokens_per_second:,.0f}",
            duration(per_billion),
        )
    stdout.print(t)
    if setup.explicit:
        stdout.print(f"  kept as given: {', '.join(sorted(setup.explicit))}")
    if gpu.is_generic:
        stdout.print("  times use A100 rates: name the GPU (--gpu rtx-4090, h100-sxm, …) for its own")


def render_max(knob: str, value, bill, *, inference: bool = False) -> None:
    name = {
        ("batch", False): "micro-batch",
        ("seq", False): "sequence length",
        ("batch", True): "batch",
        ("seq", True): "context",
    }[(knob, inference)]
    if value is None:
        stdout.print(f"No {name} fits: even 1 is over.")
    else:
        stdout.print(f"Largest {name} that fits: [bold]{value}[/]")


def render_dataset(data: dict) -> None:
    """`bill --dataset`: the token-length distribution against the longest sequence that fits."""
    fits = data["max_seq_that_fits"]
    rows = [
        [
            "samples",
            f"{data['samples']:,}" + (f" ({data['skipped']:,} without text skipped)" if data["skipped"] else ""),
        ],
        ["max", f"{data['max_tokens']:,} tokens"],
        ["p99", f"{data['p99_tokens']:,} tokens"],
        ["p50", f"{data['p50_tokens']:,} tokens"],
        [
            f"longest that fits (micro-batch {data['micro_batch']})",
            "none (not even 128 tokens)" if fits is None else f"{fits:,} tokens",
        ],
        ["longer than that", f"{data['over']:,} samples"],
    ]
    from rich.markup import escape

    table(
        escape(f"{data['file']} · {data['text_field']} · tokenizer {data['tokenizer']}"),
        [("lengths", "left"), ("", "right")],
        rows,
    )
    for p in data["prescriptions"]:
        stdout.print(f"• [b]{p['id']}[/b]: {p['action']}")
        for key, value in p["how"].items():
            stdout.print(f"    {key}: {', '.join(f'{k}: {v}' for k, v in value.items())}")


# ------------------------------------------------------------------------------------ diagnose


class _ProgressReporter:
    """`progress(message, fraction)` for long work: a transient Rich progress bar on stderr."""

    def __init__(self, title: str):
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=stderr,
            transient=True,
        )
        self._title = title
        self._task = None

    def __enter__(self):
        self._progress.__enter__()
        self._task = self._progress.add_task(self._title, total=1.0)
        return self

    def __exit__(self, *exc):
        return self._progress.__exit__(*exc)

    def __call__(self, message: str, fraction: float) -> None:
        self._progress.update(
            self._task, description=f"{self._title}: {message}", completed=max(0.0, min(1.0, fraction))
        )


def progress_reporter(title: str) -> _ProgressReporter:
    return _ProgressReporter(title)


def _delta(measured: int | None, billed: int | None) -> tuple[str, str]:
    if measured is None or billed is None:
        return "—", "—"
    diff = billed - measured
    sign = "+" if diff > 0 else ("−" if diff < 0 else "±")
    pct = f"{diff / measured:+.1%}" if measured else ("—" if not billed else "new")
    return f"{sign}{format_bytes(abs(diff))}", pct


def _compare_table(heading, measured: dict, billed: dict | None, *, caption: str | None = None) -> None:
    title(*(heading if isinstance(heading, tuple) else (heading,)))
    t = Table()
    t.add_column("item", justify="left")
    t.add_column("measured", justify="right")
    if billed is not None:
        for header in ("billed", "bill − measured", "%"):
            t.add_column(header, justify="right")
    for item in (*LINE_ITEMS, "peak_allocated"):
        label = f"[{_COLORS[item]}]■[/] {item}" if item in _COLORS else "[b]peak allocated[/b]"
        row = [label, format_bytes(int(measured.get(item, 0)))]
        if billed is not None:
            d, pct = _delta(int(measured.get(item, 0)), int(billed.get(item, 0)))
            row += [format_bytes(int(billed.get(item, 0))), d, pct]
        t.add_row(*row)
    stdout.print(t)
    if caption:
        paragraph(caption)


def render_traced(measurement, bill, cuda: dict | None = None) -> None:
    """`memdoc diagnose MODEL`: the traced step next to the analytic bill, peak phase, top modules."""
    from memdoc.core.billing.bill import bill_json

    billed = bill_json(bill)["per_gpu"]
    plan = bill.plan
    heading = (
        bill.model.id,
        "traced step vs bill",
        f"{plan.method.value} {plan.precision.value} {plan.optimizer.value}",
        f"batch {plan.micro_batch} × seq {plan.seq_len}",
        f"ckpt {plan.checkpointing.value}" if plan.checkpointing.value != "none" else "",
    )
    measured = {**measurement.line_items, "peak_allocated": measurement.peak_allocated}
    _compare_table(heading, measured, billed)
    parts_line(
        f"peak in [b]{measurement.peak_phase}[/b] (bill: {bill.peak_phase})",
        f"peak allocated {format_bytes(measurement.peak_allocated)} ≈ torch.cuda.max_memory_allocated()",
    )
    if measurement.phases:
        stdout.print(
            "  per phase: "
            + " · ".join(f"{p} {format_bytes(v['peak_allocated'])}" for p, v in measurement.phases.items())
        )
    if cuda:
        d, pct = _delta(cuda["peak_allocated"], measurement.peak_allocated)
        stdout.print(
            f"  real CUDA step on {cuda.get('device')}: max_memory_allocated {format_bytes(cuda['peak_allocated'])}, "
            f"max_memory_reserved {format_bytes(cuda['peak_reserved'])} (trace − real: {d}, {pct})"
        )
    if measurement.modules:
        rows = [[name, format_bytes(b)] for name, b in measurement.modules[:8]]
        table(
            "Top modules by activations kept after their forward", [("module", "left"), ("activations", "right")], rows
        )
    for line in measurement.notes:
        paragraph(f"note: {line}")


_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def render_script_report(result, bill=None, *, summary: bool = False, written: list[str] | None = None) -> None:
    """`memdoc diagnose train.py`: the outcome, the measured line items, measured vs billed, findings."""
    from rich.rule import Rule

    stdout.print(Rule(f"memdoc diagnose · {result.script}", style="dim"))
    how = {
        "steps": f"[green]stopped after {result.steps} optimizer step(s)[/]",
        "finished": f"the script finished ({result.steps} optimizer step(s))",
        "exit": f"the script exited with status {result.script_exit_code or 0} ({result.steps} optimizer step(s))",
        "timeout": f"[yellow]stopped by --timeout[/] after {result.steps} optimizer step(s)",
        "interrupted": f"[yellow]interrupted (KeyboardInterrupt)[/] after {result.steps} optimizer step(s)",
        "oom": f"[bold red]OUT OF MEMORY[/] in {(result.oom or {}).get('phase')} of step {(result.oom or {}).get('step')}",
        "error": f"[red]the script raised an exception[/] after {result.steps} optimizer step(s) (traceback above)",
    }[result.stop_reason]
    parts_line(
        how,
        ", ".join(result.models) or "no nn.Module called",
        ", ".join(o["class"] for o in result.optimizers) or "no optimizer step",
        f"{result.elapsed_s:.1f} s",
    )
    if result.oom:
        stdout.print(f"  [red]{escape(result.oom['message'])}[/]")
        for i, cause in enumerate(result.oom.get("causes") or [], 1):
            stdout.print(f"      cause {i}: {escape(cause['title'])}: {escape(cause['evidence'])}")
        stdout.print(
            f"      → [b]{result.oom.get('prescribe', 'memdoc prescribe --symptom mid-run-oom')}[/b] (or `memdoc prescribe --log` with the full error)"
        )
    if result.peak_phase is None:
        stdout.print("  no forward pass of an nn.Module was seen: nothing to attribute")
    else:
        title("Measured tensor memory, itemised at each phase's peak")
        t = Table()
        t.add_column("item", justify="left")
        phases = [p for p in PHASES if p in result.phases]
        for p in phases:
            t.add_column(p + (" ◀ peak" if p == result.peak_phase else ""), justify="right")
        for item in LINE_ITEMS:
            t.add_row(f"[{_COLORS[item]}]■[/] {item}", *[format_bytes(result.phases[p][item]) for p in phases])
        t.add_row("[b]allocated[/b]", *[f"[b]{format_bytes(result.phases[p]['peak_allocated'])}[/b]" for p in phases])
        stdout.print(t)
        s = result.states
        parts_line(
            f"model states at the stop: weights {format_bytes(s['weights'])}",
            f"gradients {format_bytes(s['gradients'])}",
            f"optimizer {format_bytes(s['optimizer'])}",
            f"trainable {format_bytes(s['trainable'])}",
        )
    if result.cuda:
        c = result.cuda
        parts_line(
            f"CUDA: peak allocated {format_bytes(c['allocated_peak'])}",
            f"peak reserved {format_bytes(c['reserved_peak'])}",
            f"inactive split {format_bytes(c['inactive_split'])}",
            f"alloc retries {c['num_alloc_retries']}",
            f"OOMs {c['num_ooms']}",
        )
        if summary and result.cuda_summary:
            stdout.print(result.cuda_summary, markup=False)
    elif summary:
        stdout.print("  --summary: no CUDA memory was used, so there is no memory_summary()")
    if bill is not None and result.hf:
        from memdoc.core.billing.bill import bill_json

        det = result.hf["detected"]
        heading = (
            result.hf["model_id"],
            "measured vs billed for the detected plan:",
            *(f"{k}={v if not isinstance(v, (list, tuple)) else ','.join(v)}" for k, v in det.items()),
        )
        _compare_table(
            heading,
            result.measured,
            bill_json(bill)["per_gpu"],
            caption=f"measured peak in {result.peak_phase}, bill peak in {bill.peak_phase}; the bill counts the "
            "steady state at the bill's own peak phase, the script's data tensors count as other",
        )
    if result.findings:
        stdout.print("[b]Findings[/b]")
        for f in result.findings:
            markup_paragraph(
                f"[{_SEVERITY_STYLE.get(f.severity, '')}]{f.severity}[/] [b]{escape(f.id)}[/b]: {escape(f.message)}"
            )
            if f.modules:
                markup_paragraph(
                    f"modules: {escape(', '.join(f.modules[:8]))}" + (" …" if len(f.modules) > 8 else ""), indent=6
                )
            markup_paragraph(f"→ [b]{escape(f.prescribe)}[/b]", indent=6)
    else:
        stdout.print("  no findings")
    for line in result.notes:
        paragraph(f"note: {line}")
    for path in written or []:
        stdout.print(f"  wrote {path}")


def render_prescriptions(symptom, oom, guess, quantified, base, *, order=None, culprit=None) -> None:
    """OOM figures, causes, the culprit tensor, then the prescriptions (those for the culprit first)."""
    from memdoc.units import format_bytes

    if oom is not None:
        figures = [
            f"{name.replace('_', ' ')} {format_bytes(getattr(oom, name))}"
            for name in ("requested", "total", "free", "allowed", "allocated_by_pytorch", "reserved_unallocated")
            if getattr(oom, name, None) is not None
        ]
        stdout.print(f"[b]OOM found[/b] ({oom.format}): " + (", ".join(figures) or oom.status or ""))
    if guess is not None:
        for i, cause in enumerate(guess.causes, 1):
            frees = f" (frees {format_bytes(cause.frees_bytes)})" if cause.frees_bytes else ""
            stdout.print(f"  [b]cause {i}[/b]: {cause.title}: {cause.evidence}")
            stdout.print(f"     fix: {cause.fix}{frees}")
        for reason in guess.reasons:
            paragraph(f"because: {reason}")
        for assumption in guess.assumptions:
            paragraph(f"assumed: {assumption}")
        for unknown in guess.unknowns:
            stdout.print(f"  [yellow]could not tell:[/] {unknown}")
    if culprit is not None:
        shape = " × ".join(str(d) for d in culprit.shape)
        stdout.print(f"  [b]culprit[/b]: {culprit.name} [{shape}] = {format_bytes(culprit.bytes)} ({culprit.item})")
        if culprit.note:
            stdout.print(f"     [yellow]note:[/] {culprit.note}")
    stdout.print(f"[b]{symptom.id}[/b]: {symptom.title}")
    for cause in symptom.causes:
        paragraph(f"cause: {cause}")
    prescriptions = list(order) if order is not None else list(symptom.prescriptions)
    by_id = {q.prescription.id: q for q in quantified or []}
    heading = "Prescriptions, cheapest first"
    if base is not None:
        heading += f" (your plan: {gib(base.process_total)} per GPU" + (
            "" if base.fits is None else (", fits)" if base.fits else ", does not fit)")
        )

    def quantity(p) -> list[str]:
        if quantified is None:
            return []
        q = by_id[p.id]
        return [
            gib(q.saves_bytes) if q.saves_bytes is not None else q.note,
            {True: "[green]yes[/]", False: "no", None: "—"}[q.fits_alone],
        ]

    if stdout.width < NARROW_COLUMNS:  # one block per prescription: a table's text columns would be a few letters wide
        title(heading)
        for i, p in enumerate(prescriptions, 1):
            paragraph(f"{i}. {p.action}", indent="", hang="   ")
            facts = [f"shrinks {p.why}", f"time cost {p.time_cost}"]
            if quantified is not None:
                saves, fits = quantity(p)
                facts += [f"saves {saves}", f"fits alone {fits}"]
            parts_line(*facts, indent="   ")
            for tool, value in p.how.items():
                paragraph(f"{tool}: {format_switches(value)}", indent="   ", hang="     ")
        return
    columns = [("#", "right"), ("prescription", "left"), ("shrinks", "left"), ("time cost", "left")]
    if quantified is not None:
        columns += [("saves", "right"), ("fits alone", "left")]
    rows = [[i, p.action, p.why, p.time_cost, *quantity(p)] for i, p in enumerate(prescriptions, 1)]
    table(heading, columns, rows)
    for i, p in enumerate(prescriptions, 1):
        switches = "; ".join(f"{tool}: {format_switches(value)}" for tool, value in p.how.items())
        if switches:
            paragraph(f"{i}. {switches}", hang="     ")
