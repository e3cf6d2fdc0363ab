"""Rendering: the only package that imports Rich. Tables and bars to stdout, notes to stderr.

One module per command (`bill`, `inference`, `plan`, `prescribe`, `diagnose`), the shared pieces
in `common` (JSON sink, notes, tables, units) and `layout` (the consoles, headings, wrapping);
`timeline` draws the offline HTML view. This module re-exports what the commands call as `render.X`.
"""

from __future__ import annotations

from memdoc.render.bill import (
    render_bill,
    render_dataset,
    render_ladder,
    render_max,
    render_run_verdict,
    render_time,
    render_verdict,
)
from memdoc.render.common import duration, gib, note, print_json, progress_reporter, table
from memdoc.render.diagnose import render_script_report, render_traced
from memdoc.render.layout import format_switches, paragraph, parts_line, stderr, stdout, title
from memdoc.render.plan import render_plans
from memdoc.render.prescribe import render_prescriptions
from memdoc.render.user_config import render_config_notes

__all__ = [
    "render_config_notes",
    "duration",
    "format_switches",
    "gib",
    "note",
    "paragraph",
    "parts_line",
    "print_json",
    "progress_reporter",
    "render_bill",
    "render_dataset",
    "render_ladder",
    "render_max",
    "render_run_verdict",
    "render_plans",
    "render_prescriptions",
    "render_script_report",
    "render_time",
    "render_traced",
    "render_verdict",
    "stderr",
    "stdout",
    "table",
    "title",
]
