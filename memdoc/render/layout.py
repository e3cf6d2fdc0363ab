"""Layout at any width: the console (its width follows the terminal, COLUMNS, or 120 when piped),
headings and report lines broken between their ' · ' parts, wrapped paragraphs, trainer settings."""

from __future__ import annotations

import os
import textwrap

from rich.console import Console, ConsoleDimensions
from rich.text import Text

PIPED_COLUMNS = 120
"""Width of piped output (files, CI logs) when COLUMNS is not set; a terminal uses its own width."""
MIN_COLUMNS = 60
"""The narrowest layout: a console or COLUMNS below it (`COLUMNS=1`) is laid out at this width."""
NARROW_COLUMNS = 100
"""Below this width, wide tables are laid out as blocks (prescriptions) or compact columns (ladder)."""


class _Console(Console):
    """A console whose width follows the terminal, else COLUMNS, else PIPED_COLUMNS, at every print;
    never below MIN_COLUMNS."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._width = None  # Rich fixes COLUMNS at creation; read it at each print instead

    @property
    def size(self) -> ConsoleDimensions:
        dims = Console.size.fget(self)
        columns = os.environ.get("COLUMNS", "")
        if self._width is None and columns.isdigit():  # COLUMNS=0 too (Rich would take 80)
            return ConsoleDimensions(max(MIN_COLUMNS, int(columns)), dims.height)
        if self._width is None and not self.is_terminal:
            return ConsoleDimensions(PIPED_COLUMNS, dims.height)
        return ConsoleDimensions(max(MIN_COLUMNS, dims.width), dims.height)

    @size.setter
    def size(self, new_size) -> None:
        Console.size.fset(self, new_size)


stdout = _Console(highlight=False, soft_wrap=False)
stderr = _Console(stderr=True, highlight=False)


def title(*parts: str) -> None:
    """A heading of ' · '-separated parts, broken between parts (never inside one) at the console width."""
    for text in _joined(parts, width=stdout.width):
        stdout.print(f"[b]{text}[/b]", soft_wrap=True)


def parts_line(*parts: str, indent: str = "  ") -> None:
    """A report line of ' · '-separated parts (Rich markup allowed), continued on indented lines at the width."""
    for text in _joined(parts, width=stdout.width - len(indent), cont="  "):
        stdout.print(indent + text, soft_wrap=True)


def paragraph(text: str, indent: str = "  ", hang: str = "    ") -> None:
    """Plain text wrapped at the console width between words, continuation lines indented by `hang`."""
    width = max(40, stdout.width)
    for line in textwrap.wrap(
        text, width=width, initial_indent=indent, subsequent_indent=hang, break_long_words=True, break_on_hyphens=False
    ):
        stdout.print(line, markup=False, soft_wrap=True)


def markup_paragraph(text: str, indent: int = 2) -> None:
    """Rich markup wrapped at the console width, every line indented by `indent` (a block, not a ragged edge)."""
    for line in Text.from_markup(text).wrap(stdout, max(20, stdout.width - indent)):
        line.rstrip()
        stdout.print(Text(" " * indent) + line, soft_wrap=True)


def _joined(parts, *, width: int, cont: str = "") -> list[str]:
    lines, line = [], ""
    pieces = []
    room = width - len(cont)
    for part in (p for p in parts if p):  # a part longer than the line is wrapped between its words
        if "[" not in part and len(part) > room:
            pieces += textwrap.wrap(part, width=room, break_long_words=True, break_on_hyphens=False)
        elif "[" in part and Text.from_markup(part).cell_len > room:  # Rich markup: wrapped as styled text
            for piece in Text.from_markup(part).wrap(stdout, room):
                piece.rstrip()
                pieces.append(piece.markup)
        else:
            pieces.append(part)
    for part in pieces:
        candidate = f"{line} · {part}" if line else part
        if line and Text.from_markup(candidate).cell_len > width:
            lines.append(line)
            candidate = cont + part
        line = candidate
    lines.append(line)
    return lines


def format_switches(value) -> str:
    """A trainer setting as the user writes it: `key=value` pairs (YAML-style true/false), never a Python repr."""
    if isinstance(value, dict):
        return ", ".join(f"{key}={_setting(v)}" for key, v in value.items())
    return _setting(value)


def _setting(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + format_switches(value) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_setting(v) for v in value) + "]"
    return str(value)
