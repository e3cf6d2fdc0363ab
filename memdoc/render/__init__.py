"""Rendering: the only module that imports Rich. Tables and bars to stdout, notes to stderr."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from memdoc.units import format_bytes

# Piped output (files, CI logs) gets 120 columns instead of Rich's 80 so tables stay readable.
stdout = Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 120)
stderr = Console(stderr=True, highlight=False)


def print_json(data) -> None:
    """Machine-readable output: one JSON document on stdout, bytes as integers."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def note(text: str) -> None:
    """A hint or warning for the human, on stderr so --json stays clean."""
    stderr.print(text)


def table(title: str | None, columns: list[tuple[str, str]], rows: list[list], *, caption: str | None = None) -> None:
    """A plain table; columns are (header, justify)."""
    t = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    for header, justify in columns:
        t.add_column(header, justify=justify)
    for row in rows:
        t.add_row(*[str(cell) if cell is not None else "—" for cell in row])
    stdout.print(t)


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
    stdout.print(f"  step time ≈ {duration(time.seconds)} per optimizer step ({time.tokens:,} tokens/GPU) · "
                 f"{time.tokens_per_second:,.0f} tokens/s/GPU · {duration(per_billion)} per billion tokens{gpus}")
    if generic_gpu:
        stdout.print("  (times at A100 rates: name the GPU, e.g. --gpu rtx-4090, for its own)")


def render_bill(bill, ladder, command_line=None, time=None) -> None:
    """The bill table with per-phase stacked bars, the verdict line and the ladder (`time`: a StepTime)."""
    from memdoc.core.billing.bill import ITEMS, PHASES

    plan = bill.plan
    gpu = bill.gpu
    title = (
        f"{bill.model.id} · {bill.model.params.total / 1e9:.2f}B params · {plan.method.value} {plan.precision.value} "
        f"{plan.optimizer.value} · batch {plan.micro_batch} × seq {plan.seq_len}"
        + (f" · ckpt {plan.checkpointing.value}" if plan.checkpointing.value != "none" else "")
        + (f" · {plan.shard.value} × {plan.world_size}" if plan.shard.value != "none" else "")
        + (f" · offload {plan.offload.value}" if plan.offload.value != "none" else "")
    )
    t = Table(title=title, title_justify="left", caption_justify="left")
    t.add_column("per GPU", justify="left")
    for phase in PHASES:
        t.add_column(phase + (" ◀ peak" if phase == bill.peak_phase else ""), justify="right")
    host = f"offloaded ({plan.offload_to.value})" if bill.host else None
    if host:
        t.add_column(host, justify="right")
    for item in ITEMS:
        offloaded = [gib(bill.host[item]) if item in bill.host else ""] if host else []
        t.add_row(f"[{_COLORS[item]}]■[/] {item}", *[gib(getattr(bill.phases[p], item)) for p in PHASES], *offloaded)
    t.add_row("[b]allocated[/b]", *[f"[b]{gib(bill.phases[p].total)}[/b]" for p in PHASES],
              *([f"[b]{gib(bill.host_bytes)}[/b]"] if host else []))
    stdout.print(t)
    scale = max(bill.phases[p].total for p in PHASES)
    scale = max(scale, gpu.memory_bytes if gpu else 0)
    for phase in PHASES:
        stdout.print(f"  {phase:<10}{_bar(bill.phases[phase], scale)}")
    stdout.print(
        f"  peak allocated {gib(bill.peak_allocated)} ({bill.peak_phase}) · reserved ≈ {gib(bill.peak_reserved)}"
        f" (fragmentation {gib(bill.fragmentation_bytes)}, {plan.allocator.value} allocator)"
        f" · process total ≈ {gib(bill.process_total)} (incl. {gib(bill.overhead_bytes)} CUDA context and workspaces)"

    )
    if time is not None:
        render_time(time, plan.world_size, gpu is None or gpu.is_generic)
    if bill.host:
        stdout.print(f"  host {plan.offload_to.value.upper() if plan.offload_to.value == 'nvme' else 'RAM'} needed: "
                     f"{gib(bill.host_bytes)} per GPU, {gib(bill.host_bytes * plan.gpus_per_node)} per node "
                     f"({plan.gpus_per_node} GPU{'s' if plan.gpus_per_node > 1 else ''})")
    for line in bill.notes:
        stdout.print(f"  note: {line}")
    if gpu is None:
        return
    gpus = f"{plan.world_size} × " if plan.world_size > 1 else ""
    if bill.fits and bill.headroom_bytes < 0:
        stdout.print(f"[bold yellow]✔ fits[/] {gpus}{gpu.name} ({gib(gpu.memory_bytes)}) only because the allocator releases "
                     f"its cache and retries (the unconstrained run reserves {gib(-bill.headroom_bytes)} more); "
                     f"smallest GPU that runs it: {gib(bill.min_memory_bytes)}")
    elif bill.fits:
        stdout.print(f"[bold green]✔ fits[/] {gpus}{gpu.name} ({gib(gpu.memory_bytes)}) with {gib(bill.headroom_bytes)} headroom per GPU")
    else:
        # the smallest GPU (a bisection of simulations) is worth its time when fragmentation decides the verdict
        close = bill.peak_allocated + bill.overhead_bytes <= gpu.memory_bytes
        stdout.print(f"[bold red]✘ does not fit[/] {gpus}{gpu.name} ({gib(gpu.memory_bytes)}): {gib(-bill.headroom_bytes)} over per GPU, peak in {bill.peak_phase}"
                     + (f"; smallest GPU that runs it: {gib(bill.min_memory_bytes)}" if close else ""))
    if ladder:
        render_ladder(ladder)


def render_ladder(ladder) -> None:
    t = Table(title="The ladder: cheapest remedies first, each on top of the last", title_justify="left")
    for header, justify in (("#", "right"), ("remedy", "left"), ("peak alloc.", "right"), ("process", "right"),
                            ("saves", "right"), ("step time", "right"), ("fits", "left")):
        t.add_column(header, justify=justify)
    for i, step in enumerate(ladder, 1):
        t.add_row(str(i), step.rung.action, gib(step.bill.peak_allocated), gib(step.bill.process_total),
                  gib(step.saved_bytes), f"×{step.relative_time:.2f} ({duration(step.step_seconds)})", "[green]yes[/]" if step.fits else "no")
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
        stdout.print(f"[bold red]No plan fits[/] {gpus}{gpu.name} ({gib(gpu.memory_bytes)}) with {headroom:.0%} headroom "
                     "over the knobs left free: free a fixed flag, add GPUs (--gpus) or use a bigger GPU.")
        return
    t = Table(title=f"{setup.model.id} on {gpus}{gpu.name} ({gib(gpu.memory_bytes)}): fastest plans that fit "
                    f"with {headroom:.0%} headroom", title_justify="left")
    for header, justify in (("#", "right"), ("changes from your plan", "left"), ("peak alloc.", "right"),
                            ("process", "right"), ("step time", "right"), ("tokens/s/GPU", "right"),
                            ("per 1B tokens", "right")):
        t.add_column(header, justify=justify)
    for i, c in enumerate(candidates, 1):
        changes = "; ".join(_change(*change) for change in c.changes) or "(none: your plan)"
        per_billion = 1e9 / (c.time.tokens_per_second * c.plan.world_size)
        t.add_row(str(i), changes, gib(c.bill.peak_allocated), gib(c.bill.process_total), duration(c.time.seconds),
                  f"{c.time.tokens_per_second:,.0f}", duration(per_billion))
    stdout.print(t)
    if setup.explicit:
        stdout.print(f"  kept as given: {', '.join(sorted(setup.explicit))}")
    if gpu.is_generic:
        stdout.print("  times use A100 rates: name the GPU (--gpu rtx-4090, h100-sxm, …) for its own")


def render_max(knob: str, value, bill) -> None:
    name = "micro-batch" if knob == "batch" else "sequence length"
    if value is None:
        stdout.print(f"No {name} fits: even 1 is over.")
    else:
        stdout.print(f"Largest {name} that fits: [bold]{value}[/]")


def render_inference(result) -> None:
    rows = [["weights", gib(result.weights)], ["KV cache", gib(result.kv_cache)], ["activations (prefill)", gib(result.activations)],
            ["[b]peak allocated[/b]", gib(result.peak_allocated)], ["process total", gib(result.process_total)]]
    table(f"{result.model.id} inference · batch {result.plan.micro_batch} × context {result.plan.seq_len}", [("item", "left"), ("per GPU", "right")], rows)
    if result.gpu is not None:
        verdict = "[green]✔ fits[/]" if result.fits else "[red]✘ does not fit[/]"
        stdout.print(f"{verdict} {result.gpu.name} ({gib(result.gpu.memory_bytes)})")


# ------------------------------------------------------------------------------------ diagnose
_DIAG_ITEMS = ("weights", "gradients", "optimizer", "activations", "other")


class _ProgressReporter:
    """`progress(message, fraction)` for long work: a transient Rich progress bar on stderr."""

    def __init__(self, title: str):
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                                  console=stderr, transient=True)
        self._title = title
        self._task = None

    def __enter__(self):
        self._progress.__enter__()
        self._task = self._progress.add_task(self._title, total=1.0)
        return self

    def __exit__(self, *exc):
        return self._progress.__exit__(*exc)

    def __call__(self, message: str, fraction: float) -> None:
        self._progress.update(self._task, description=f"{self._title}: {message}", completed=max(0.0, min(1.0, fraction)))


def progress_reporter(title: str) -> _ProgressReporter:
    return _ProgressReporter(title)


def _delta(measured: int | None, billed: int | None) -> tuple[str, str]:
    if measured is None or billed is None:
        return "—", "—"
    diff = billed - measured
    sign = "+" if diff > 0 else ("−" if diff < 0 else "±")
    pct = f"{diff / measured:+.1%}" if measured else ("—" if not billed else "new")
    return f"{sign}{format_bytes(abs(diff))}", pct


def _compare_table(title: str, measured: dict, billed: dict | None, *, caption: str | None = None) -> None:
    t = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    t.add_column("item", justify="left")
    t.add_column("measured", justify="right")
    if billed is not None:
        for header in ("billed", "bill − measured", "%"):
            t.add_column(header, justify="right")
    for item in (*_DIAG_ITEMS, "peak_allocated"):
        label = f"[{_COLORS[item]}]■[/] {item}" if item in _COLORS else "[b]peak allocated[/b]"
        row = [label, format_bytes(int(measured.get(item, 0)))]
        if billed is not None:
            d, pct = _delta(int(measured.get(item, 0)), int(billed.get(item, 0)))
            row += [format_bytes(int(billed.get(item, 0))), d, pct]
        t.add_row(*row)
    stdout.print(t)


def render_traced(measurement, bill, cuda: dict | None = None) -> None:
    """`memdoc diagnose MODEL`: the traced step next to the analytic bill, peak phase, top modules."""
    from memdoc.core.billing.bill import bill_json

    billed = bill_json(bill)["per_gpu"]
    plan = bill.plan
    title = (f"{bill.model.id} · traced step vs bill · {plan.method.value} {plan.precision.value} {plan.optimizer.value}"
             f" · batch {plan.micro_batch} × seq {plan.seq_len}"
             + (f" · ckpt {plan.checkpointing.value}" if plan.checkpointing.value != "none" else ""))
    measured = {**measurement.line_items, "peak_allocated": measurement.peak_allocated}
    _compare_table(title, measured, billed)
    stdout.print(f"  peak in [b]{measurement.peak_phase}[/b] (bill: {bill.peak_phase})"
                 f" · peak allocated {format_bytes(measurement.peak_allocated)} ≈ torch.cuda.max_memory_allocated()")
    if measurement.phases:
        stdout.print("  per phase: " + " · ".join(f"{p} {format_bytes(v['peak_allocated'])}" for p, v in measurement.phases.items()))
    if cuda:
        d, pct = _delta(cuda["peak_allocated"], measurement.peak_allocated)
        stdout.print(f"  real CUDA step on {cuda.get('device')}: max_memory_allocated {format_bytes(cuda['peak_allocated'])}, "
                     f"max_memory_reserved {format_bytes(cuda['peak_reserved'])} (trace − real: {d}, {pct})")
    if measurement.modules:
        rows = [[name, format_bytes(b)] for name, b in measurement.modules[:8]]
        table("Top modules by activations kept after their forward", [("module", "left"), ("activations", "right")], rows)
    for line in measurement.notes:
        stdout.print(f"  note: {line}")


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
        "oom": f"[bold red]OUT OF MEMORY[/] in {(result.oom or {}).get('phase')} of step {(result.oom or {}).get('step')}",
        "error": f"[red]the script raised an exception[/] after {result.steps} optimizer step(s) (traceback above)",
    }[result.stop_reason]
    stdout.print(f"  {how} · {', '.join(result.models) or 'no nn.Module called'} · "
                 f"{', '.join(o['class'] for o in result.optimizers) or 'no optimizer step'} · {result.elapsed_s:.1f} s")
    if result.oom:
        from rich.markup import escape

        stdout.print(f"  [red]{escape(result.oom['message'])}[/]")
        stdout.print(f"      → [b]{result.oom.get('prescribe', 'memdoc prescribe --symptom mid-run-oom')}[/b] (or `memdoc prescribe --log` with the full error)")
    if result.peak_phase is None:
        stdout.print("  no forward pass of an nn.Module was seen: nothing to attribute")
    else:
        from memdoc.core.billing.measurement import PHASES

        t = Table(title="Measured tensor memory, itemised at each phase's peak", title_justify="left")
        t.add_column("item", justify="left")
        phases = [p for p in PHASES if p in result.phases]
        for p in phases:
            t.add_column(p + (" ◀ peak" if p == result.peak_phase else ""), justify="right")
        for item in _DIAG_ITEMS:
            t.add_row(f"[{_COLORS[item]}]■[/] {item}", *[format_bytes(result.phases[p][item]) for p in phases])
        t.add_row("[b]allocated[/b]", *[f"[b]{format_bytes(result.phases[p]['peak_allocated'])}[/b]" for p in phases])
        stdout.print(t)
        s = result.states
        stdout.print(f"  model states at the stop: weights {format_bytes(s['weights'])} · gradients {format_bytes(s['gradients'])}"
                     f" · optimizer {format_bytes(s['optimizer'])} · trainable {format_bytes(s['trainable'])}")
    if result.cuda:
        c = result.cuda
        stdout.print(f"  CUDA: peak allocated {format_bytes(c['allocated_peak'])} · peak reserved {format_bytes(c['reserved_peak'])}"
                     f" · inactive split {format_bytes(c['inactive_split'])} · alloc retries {c['num_alloc_retries']} · OOMs {c['num_ooms']}")
        if summary and result.cuda_summary:
            stdout.print(result.cuda_summary, markup=False)
    elif summary:
        stdout.print("  --summary: no CUDA memory was used, so there is no memory_summary()")
    if bill is not None and result.hf:
        from memdoc.core.billing.bill import bill_json

        det = result.hf["detected"]
        title = (f"{result.hf['model_id']} · measured vs billed for the detected plan: "
                 + " ".join(f"{k}={v if not isinstance(v, (list, tuple)) else ','.join(v)}" for k, v in det.items()))
        _compare_table(title, result.measured, bill_json(bill)["per_gpu"],
                       caption=f"measured peak in {result.peak_phase}, bill peak in {bill.peak_phase}; the bill counts the "
                               "steady state at the bill's own peak phase, the script's data tensors count as other")
    if result.findings:
        stdout.print("[b]Findings[/b]")
        for f in result.findings:
            stdout.print(f"  [{_SEVERITY_STYLE.get(f.severity, '')}]{f.severity}[/] [b]{f.id}[/b]: {f.message}")
            if f.modules:
                stdout.print(f"      modules: {', '.join(f.modules[:8])}" + (" …" if len(f.modules) > 8 else ""))
            stdout.print(f"      → [b]{f.prescribe}[/b]")
    else:
        stdout.print("  no findings")
    for line in result.notes:
        stdout.print(f"  note: {line}")
    for path in written or []:
        stdout.print(f"  wrote {path}")


def render_prescriptions(symptom, oom, guess, quantified, base) -> None:
    """Symptom, what the log said, and the prescriptions in ladder order (quantified when billed)."""
    from memdoc.units import format_bytes

    if oom is not None:
        figures = [f"{name.replace('_', ' ')} {format_bytes(getattr(oom, name))}"
                   for name in ("requested", "total", "free", "allocated_by_pytorch", "reserved_unallocated")
                   if getattr(oom, name, None) is not None]
        stdout.print(f"[b]OOM found[/b] ({oom.format}): " + ", ".join(figures))
    if guess is not None:
        for reason in guess.reasons:
            stdout.print(f"  because: {reason}")
        for unknown in guess.unknowns:
            stdout.print(f"  [yellow]could not tell:[/] {unknown}")
    stdout.print(f"[b]{symptom.id}[/b]: {symptom.title}")
    for cause in symptom.causes:
        stdout.print(f"  cause: {cause}")
    by_id = {q.prescription.id: q for q in quantified or []}
    columns = [("#", "right"), ("prescription", "left"), ("shrinks", "left"), ("time cost", "left")]
    if quantified is not None:
        columns += [("saves", "right"), ("fits alone", "left")]
    rows = []
    for i, p in enumerate(symptom.prescriptions, 1):
        row = [i, p.action, p.why, p.time_cost]
        if quantified is not None:
            q = by_id[p.id]
            row += [gib(q.saves_bytes) if q.saves_bytes is not None else q.note,
                    {True: "[green]yes[/]", False: "no", None: "—"}[q.fits_alone]]
        rows.append(row)
    title = "Prescriptions, cheapest first"
    if base is not None:
        title += f" (your plan: {gib(base.process_total)} per GPU" + ("" if base.fits is None else (", fits)" if base.fits else ", does not fit)"))
    table(title, columns, rows)
    for i, p in enumerate(symptom.prescriptions, 1):
        switches = "; ".join(f"{tool}: {value}" for tool, value in p.how.items())
        if switches:
            stdout.print(f"  {i}. {switches}")
