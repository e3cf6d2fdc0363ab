"""`memdoc plan --gpu A --gpu B …`: one row per hardware option, the recommendation and why."""

from __future__ import annotations

from rich.markup import escape

from memdoc.core.reports.hardware import FORMULA, HardwareReport, HardwareRow, hours_text, tokens_text
from memdoc.render.common import duration, table
from memdoc.render.layout import markup_paragraph, paragraph


def plan_summary(row: HardwareRow) -> str:
    """What the option's fastest plan changes from the user's plan ('method qlora; loss fused')."""
    if row.best is None:
        return "nothing fits"
    parts = [f"{field.replace('_', ' ')} {_value(after)}" for field, _, after in row.best.changes]
    return "; ".join(parts) or "your plan"


def _value(value) -> str:
    return ",".join(value) if isinstance(value, tuple) else str(getattr(value, "value", value))


def render_hardware(report: HardwareReport) -> None:
    """The hardware table (option, GPUs, fastest plan, step time, time and cost for the tokens), the
    offload notes, the recommendation with its reason, and the formula."""
    tokens = tokens_text(report.tokens)
    columns = [
        ("hardware", "left"),
        ("GPUs", "right"),
        ("fastest plan that fits (changes)", "left"),
        ("step", "right"),
        (f"{tokens} tokens", "right"),
    ]
    if report.priced:
        columns.append(("cost", "right"))
    rows = []
    for row in report.rows:
        cells = [
            row.option.label,
            str(row.count),
            plan_summary(row),
            None if row.step_seconds is None else duration(row.step_seconds),
            None if row.hours is None else hours_text(row.hours),
        ]
        if report.priced:
            cells.append(None if row.cost is None else f"${row.cost:,.2f}")
        rows.append(cells)
    table(f"{report.model.id} · the hardware choice for {tokens} tokens", columns, rows)
    for row in report.rows:
        if row.note:
            paragraph(f"{row.option.label}: {row.note}")
    if report.recommended is not None:
        markup_paragraph(f"[b]recommended: {escape(report.recommended.option.label)}[/b]: {escape(report.why)}", 0)
    else:
        markup_paragraph(f"[bold red]{escape(report.why)}[/]", 0)
    paragraph(FORMULA, indent="", hang="")
