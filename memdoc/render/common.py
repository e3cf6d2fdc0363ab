"""What every command's rendering shares: the JSON sink, stderr notes, plain tables, byte and
duration formatting, the line-item colours and the progress bar."""

from __future__ import annotations

import contextlib
import json
import sys

from rich import box
from rich.markup import escape
from rich.table import Table

from memdoc.render.layout import NARROW_COLUMNS, markup_paragraph, paragraph, parts_line, stderr, stdout, title
from memdoc.units import format_bytes

ITEM_COLORS = {"weights": "blue", "gradients": "magenta", "optimizer": "yellow", "activations": "green", "other": "red"}
"""The Rich colour of each line item, in bill order: the ■ swatches of tables and the stacked bars."""


def print_json(data) -> None:
    """Machine-readable output: one JSON document on stdout, bytes as integers."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def note(text: str) -> None:
    """A hint or warning for the human, on stderr so --json stays clean."""
    stderr.print(text)


def ruled_table(narrow: bool) -> Table:
    """Every table's frame: a heavy head and edges, or on a narrow console a simple head, no edges, no padding."""
    return Table(box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, show_edge=not narrow, collapse_padding=narrow)


def table(heading: str | None, columns: list[tuple[str, str]], rows: list[list], *, caption: str | None = None) -> None:
    """A plain table; columns are (header, justify).

    When the columns cannot all fit the console (numbers whole, text folded to 14 characters),
    each row becomes a block instead — its first cell, then `header value` parts — so no column
    is cut or dropped at 80 columns.
    """
    if heading:
        title(heading)
    cells = [[str(cell) if cell is not None else "—" for cell in row] for row in rows]
    widths = _column_widths(columns, cells)
    if sum(widths) + 2 * len(columns) > stdout.width and len(columns) > 2:
        for row in cells:
            markup_paragraph(f"[b]{escape(row[0])}[/b]", indent=0)
            parts_line(*(f"{header} {value}" for (header, _), value in zip(columns[1:], row[1:]) if value.strip()))
    else:
        narrow = stdout.width < NARROW_COLUMNS
        t = ruled_table(narrow)
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


def _column_widths(columns: list[tuple[str, str]], cells: list[list[str]]) -> list[int]:
    """Each column's width: numbers (right-justified) whole, text at most 14 characters before it folds."""
    widths = []
    for i, (header, justify) in enumerate(columns):
        longest = max((len(row[i]) for row in cells if i < len(row)), default=0)
        widths.append(max(longest, len(header)) if justify == "right" else min(max(longest, len(header)), 14))
    return widths


def gib(n: int | None) -> str:
    """Bytes in GiB (one unit for a whole column, even below 1 GiB); "—" when unknown."""
    return "—" if n is None else format_bytes(n, unit="GiB")


def duration(seconds: float) -> str:
    """A duration with its unit: ms below a second, s below two minutes, then min, h, days."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.2f} s"


class ProgressReporter:
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


def progress_reporter(title: str, *, quiet: bool = False):
    """A progress bar titled `title`, used as a context manager and called as `progress(message, fraction)`;
    with `quiet` (--json) none: the context manager yields None."""
    return contextlib.nullcontext() if quiet else ProgressReporter(title)
