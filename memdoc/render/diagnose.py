"""`memdoc diagnose`: a traced step next to its bill, and the report of a diagnosed training script."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from memdoc.core.billing.bill_json import billed_phases
from memdoc.core.billing.vocabulary import LINE_ITEMS, PHASES
from memdoc.render.common import ITEM_COLORS, table
from memdoc.render.layout import markup_paragraph, paragraph, parts_line, stdout, title
from memdoc.units import format_bytes

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _delta(measured: int | None, billed: int | None) -> tuple[str, str]:
    """(signed difference, percentage of measured) of bill − measured; dashes when either is unknown."""
    if measured is None or billed is None:
        return "—", "—"
    diff = billed - measured
    sign = "+" if diff > 0 else ("−" if diff < 0 else "±")
    pct = f"{diff / measured:+.1%}" if measured else ("—" if not billed else "new")
    return f"{sign}{format_bytes(abs(diff))}", pct


def _compare_table(heading, measured: dict, billed: dict | None, *, caption: str | None = None) -> None:
    """Line items and peak allocated: measured, and (when `billed`) billed, bill − measured and its %."""
    title(*(heading if isinstance(heading, tuple) else (heading,)))
    t = Table()
    t.add_column("item", justify="left")
    t.add_column("measured", justify="right")
    if billed is not None:
        for header in ("billed", "bill − measured", "%"):
            t.add_column(header, justify="right")
    for item in (*LINE_ITEMS, "peak_allocated"):
        label = f"[{ITEM_COLORS[item]}]■[/] {item}" if item in ITEM_COLORS else "[b]peak allocated[/b]"
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
        f"task {plan.task.value}" if plan.task.value != "sft" else "",
    )
    measured = {**measurement.line_items, "peak_allocated": measurement.peak_allocated}
    _compare_table(heading, measured, billed)
    parts_line(
        f"peak in [b]{measurement.peak_phase}[/b] (bill: {bill.peak_phase})",
        f"peak allocated {format_bytes(measurement.peak_allocated)} ≈ torch.cuda.max_memory_allocated()",
    )
    if set(measurement.phases) - set(PHASES):
        _phase_table(measurement, billed_phases(bill))
    elif measurement.phases:
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


def _phase_table(measurement, billed: dict[str, int | None]) -> None:
    """A post-training step's phases in step order: traced and billed allocated at each phase's own peak
    (the billed cells empty where the bill has no such phase)."""
    title("Per phase: allocated at the phase's own peak")
    t = Table()
    for header, justify in (("phase", "left"), ("traced", "right"), ("billed", "right"), ("bill − traced", "right")):
        t.add_column(header, justify=justify)
    for phase, items in measurement.phases.items():
        traced, bill = items["peak_allocated"], billed.get(phase)
        d, pct = _delta(traced, bill)
        label = phase + (" ◀ peak" if phase == measurement.peak_phase else "")
        t.add_row(label, format_bytes(traced), "" if bill is None else format_bytes(bill), "" if bill is None else d)
    stdout.print(t)


def render_script_report(result, bill=None, *, summary: bool = False, written: list[str] | None = None) -> None:
    """`memdoc diagnose train.py`: the outcome, the measured line items, measured vs billed, findings."""
    from rich.rule import Rule

    stdout.print(Rule(f"memdoc diagnose · {result.script}", style="dim"))
    parts_line(
        _outcome(result),
        ", ".join(result.models) or "no nn.Module called",
        ", ".join(o["class"] for o in result.optimizers) or "no optimizer step",
        f"{result.elapsed_s:.1f} s",
    )
    if result.oom:
        _render_oom(result.oom)
    if result.peak_phase is None:
        stdout.print("  no forward pass of an nn.Module was seen: nothing to attribute")
    else:
        _render_measured(result)
    if result.post is not None:
        _render_post(result.post, bill)
    _render_cuda(result, summary)
    if bill is not None and result.hf:
        _render_measured_vs_billed(result, bill)
    _render_findings(result.findings)
    for line in result.notes:
        paragraph(f"note: {line}")
    for path in written or []:
        stdout.print(f"  wrote {path}")


def _outcome(result) -> str:
    """How the run ended (its stop reason) and after how many optimizer steps, in markup."""
    oom = result.oom or {}
    return {
        "steps": f"[green]stopped after {result.steps} optimizer step(s)[/]",
        "finished": f"the script finished ({result.steps} optimizer step(s))",
        "exit": f"the script exited with status {result.script_exit_code or 0} ({result.steps} optimizer step(s))",
        "timeout": f"[yellow]stopped by --timeout[/] after {result.steps} optimizer step(s)",
        "interrupted": f"[yellow]interrupted (KeyboardInterrupt)[/] after {result.steps} optimizer step(s)",
        "terminated": f"[yellow]terminated (SIGTERM)[/] after {result.steps} optimizer step(s)",
        "oom": f"[bold red]OUT OF MEMORY[/] in {oom.get('phase')} of step {oom.get('step')}",
        "error": f"[red]the script raised an exception[/] after {result.steps} optimizer step(s) (traceback above)",
    }[result.stop_reason]


def _render_oom(oom: dict) -> None:
    """The OOM's message, the doctor's causes and first prescriptions, and the prescribe command to run next."""
    stdout.print(f"  [red]{escape(oom['message'])}[/]")
    for i, cause in enumerate(oom.get("causes") or [], 1):
        stdout.print(f"      cause {i}: {escape(cause['title'])}: {escape(cause['evidence'])}")
    for i, p in enumerate((oom.get("prescriptions") or [])[:3], 1):
        stdout.print(f"      try {i}: {escape(p['action'])} ({escape(p['time_cost'])})")
    stdout.print(
        f"      → [b]{oom.get('prescribe', 'memdoc prescribe --symptom mid-run-oom')}[/b] (or "
        "`memdoc prescribe --log` with the full error)"
    )


def _render_measured(result) -> None:
    """The measured line items at each phase's peak, then the model states at the stop."""
    title("Measured tensor memory, itemised at each phase's peak")
    t = Table()
    t.add_column("item", justify="left")
    phases = [p for p in PHASES if p in result.phases]
    for p in phases:
        t.add_column(p + (" ◀ peak" if p == result.peak_phase else ""), justify="right")
    for item in LINE_ITEMS:
        t.add_row(f"[{ITEM_COLORS[item]}]■[/] {item}", *[format_bytes(result.phases[p][item]) for p in phases])
    t.add_row("[b]allocated[/b]", *[f"[b]{format_bytes(result.phases[p]['peak_allocated'])}[/b]" for p in phases])
    stdout.print(t)
    s = result.states
    parts_line(
        f"model states at the stop: weights {format_bytes(s['weights'])}",
        f"gradients {format_bytes(s['gradients'])}",
        f"optimizer {format_bytes(s['optimizer'])}",
        f"trainable {format_bytes(s['trainable'])}",
    )


def _render_post(post: dict, bill) -> None:
    """A TRL trainer's step by phase (generation and reference included): measured peak, the bill's phase of the
    same name (a dash where the bill has none), and each generation round's peak."""
    knobs = post["knobs"]
    shown = [f"{k} {knobs[k]}" for k in ("beta", "num_generations", "max_completion_length", "use_vllm") if k in knobs]
    title(f"{post['trainer']} ({post['task']}) by phase", *([", ".join(shown)] if shown else []))
    billed = getattr(bill, "phases", None) or {}
    t = Table()
    for name in ("phase", "measured peak", "billed"):
        t.add_column(name, justify="left" if name == "phase" else "right")
    for phase, items in post["phases"].items():
        mark = " ◀ peak" if phase == post["peak_phase"] else ""
        bill_cell = format_bytes(billed[phase].total) if phase in billed else "—"
        t.add_row(phase + mark, format_bytes(items["peak_allocated"]), bill_cell)
    stdout.print(t)
    rounds = post["generation_rounds"]
    if rounds:
        parts_line(
            *(
                f"generation round {i} (step {r['step']}): +{format_bytes(r['peak_allocated'] - r['start_allocated'])}"
                for i, r in enumerate(rounds, 1)
            )
        )


def _render_cuda(result, summary: bool) -> None:
    """The CUDA allocator's peaks and counters (and memory_summary() with --summary), when CUDA was used."""
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


def _render_measured_vs_billed(result, bill) -> None:
    """The script's measured line items next to the bill of the plan detected from its HF model."""
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


_LEAKS = ("memory-growth", "graph-kept")
"""Findings that name the script's lines (`memdoc.core.doctor.findings`, `_growth` and `_graph_kept`)."""


def _render_findings(findings) -> None:
    """Each finding: severity, id and message, the modules it names, and the command to run next."""
    if not findings:
        stdout.print("  no findings")
        return
    stdout.print("[b]Findings[/b]")
    for f in findings:
        markup_paragraph(
            f"[{_SEVERITY_STYLE.get(f.severity, '')}]{f.severity}[/] [b]{escape(f.id)}[/b]: {escape(f.message)}"
        )
        leak = f.id in _LEAKS  # script lines, and the fix in the script itself
        if f.modules:
            label = "lines" if leak else "modules"
            markup_paragraph(
                f"{label}: {escape(', '.join(f.modules[:8]))}" + (" …" if len(f.modules) > 8 else ""), indent=6
            )
        if leak and f.detail:
            markup_paragraph(f"fix: {escape(f.detail)}", indent=6)
        markup_paragraph(f"→ [b]{escape(f.prescribe)}[/b]", indent=6)
