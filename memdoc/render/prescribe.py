"""`memdoc prescribe`: the OOM's figures, the likely causes and culprit, then the prescriptions: the
causes' own first, then the ladder cheapest first, and apart the rows already done or not applicable."""

from __future__ import annotations

from memdoc.render.common import gib, table
from memdoc.render.layout import NARROW_COLUMNS, format_switches, paragraph, parts_line, stdout, title
from memdoc.units import format_bytes


def render_prescriptions(diagnosis) -> None:
    """OOM figures, causes, the culprit tensor, then the ranked prescriptions and those set apart
    (`diagnosis`: a `memdoc.core.doctor.diagnosis.OomDiagnosis`)."""
    d = diagnosis
    if d.event is not None:
        _render_oom(d.event)
    if d.guess is not None:
        _render_guess(d.guess, d.kind, d.phase)
    if d.culprit is not None:
        _render_culprit(d.culprit)
    symptom = d.symptom
    stdout.print(f"[b]{symptom.id}[/b]: {symptom.title}")
    for cause in symptom.causes:
        paragraph(f"cause: {cause}")
    rows = list(d.rows)
    prescriptions = [r.prescription for r in rows]
    by_id = None if d.base is None else {r.prescription.id: r.quantified for r in rows}
    heading = _heading(d.base, rows) if "oom" in symptom.id else "Prescriptions, in the order to try them"
    if stdout.width < NARROW_COLUMNS:  # one block per prescription: a table's text columns would be a few letters wide
        _render_blocks(heading, prescriptions, by_id)
    else:
        _render_table(heading, prescriptions, by_id)
    if d.apart:
        title("Set apart, not ranked")
        for r in d.apart:
            paragraph(f"– {r.prescription.action} ({r.apart})", indent="  ", hang="    ")


def _render_oom(oom) -> None:
    """'OOM found (format): requested …, total …, free …' — the figures the error message gave."""
    figures = [
        f"{name.replace('_', ' ')} {format_bytes(getattr(oom, name))}"
        for name in ("requested", "total", "free", "allowed", "allocated_by_pytorch", "reserved_unallocated")
        if getattr(oom, name, None) is not None
    ]
    stdout.print(f"[b]OOM found[/b] ({oom.format}): " + (", ".join(figures) or oom.status or ""))


def _render_guess(guess, kind, phase) -> None:
    """The kind and phase, the inferred causes with their fixes, then the reasons, assumptions and what
    could not be told."""
    stdout.print(f"  [b]kind[/b] {kind or '?'}, [b]phase[/b] {phase or 'not shown'}")
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


def _render_culprit(culprit) -> None:
    """The tensor the failed request matches: its name, shape, size and line item."""
    shape = " × ".join(str(d) for d in culprit.shape)
    stdout.print(f"  [b]culprit[/b]: {culprit.name} [{shape}] = {format_bytes(culprit.bytes)} ({culprit.item})")
    if culprit.note:
        stdout.print(f"     [yellow]note:[/] {culprit.note}")


def _heading(base, rows) -> str:
    """What the order is (the causes' fixes first, then cheapest first), with the user's plan's process
    total and fit when it was billed."""
    ladder = any(r.ladder for r in rows)
    by_cause = any(not r.ladder for r in rows)
    heading = {
        (True, True): "Prescriptions: for the causes first, then cheapest first",
        (True, False): "Prescriptions for the causes",
        (False, True): "Prescriptions, cheapest first",
        (False, False): "Prescriptions",
    }[(by_cause, ladder)]
    if base is not None:
        heading += f" (your plan: {gib(base.process_total)} per GPU" + (
            "" if base.fits is None else (", fits)" if base.fits else ", does not fit)")
        )
    return heading


def _quantity(p, by_id: dict | None) -> list[str]:
    """[saves, fits alone] of prescription `p` on the user's plan; [] when the plan was not billed.

    `by_id`: the Quantified of each prescription by its id, None when there is no plan."""
    if by_id is None:
        return []
    q = by_id[p.id]
    return [
        gib(q.saves_bytes) if q.saves_bytes is not None else q.note,
        {True: "[green]yes[/]", False: "no", None: "—"}[q.fits_alone],
    ]


def _render_blocks(heading: str, prescriptions, by_id: dict | None) -> None:
    """A narrow console: one block per prescription (action, facts, then each tool's switches)."""
    title(heading)
    for i, p in enumerate(prescriptions, 1):
        paragraph(f"{i}. {p.action}", indent="", hang="   ")
        facts = [f"shrinks {p.why}", f"time cost {p.time_cost}"]
        if by_id is not None:
            saves, fits = _quantity(p, by_id)
            facts += [f"saves {saves}", f"fits alone {fits}"]
        parts_line(*facts, indent="   ")
        for tool, value in p.how.items():
            paragraph(f"{tool}: {format_switches(value)}", indent="   ", hang="     ")


def _render_table(heading: str, prescriptions, by_id: dict | None) -> None:
    """A wide console: one table row per prescription, then each one's switches by number."""
    columns = [("#", "right"), ("prescription", "left"), ("shrinks", "left"), ("time cost", "left")]
    if by_id is not None:
        columns += [("saves", "right"), ("fits alone", "left")]
    rows = [[i, p.action, p.why, p.time_cost, *_quantity(p, by_id)] for i, p in enumerate(prescriptions, 1)]
    table(heading, columns, rows)
    for i, p in enumerate(prescriptions, 1):
        switches = "; ".join(f"{tool}: {format_switches(value)}" for tool, value in p.how.items())
        if switches:
            paragraph(f"{i}. {switches}", hang="     ")
