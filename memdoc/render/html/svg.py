"""Inline SVG building blocks for memdoc's HTML pages: escaped text, sizes, colours and label lanes.

Text widths are estimated, not measured (no browser at render time): `text_width` takes a
conservative average advance of 0.62 em, wider than DejaVu Sans' and Liberation Sans' lower-case
letters, so labels laid out with it do not overlap in the browser (checked in Chromium by
tests/render/test_html_browser.py).
"""

from __future__ import annotations

import html

from memdoc.units import format_bytes

COLORS = {
    "weights": "#4e79a7",
    "gradients": "#b07aa1",
    "optimizer": "#e0b530",
    "activations": "#59a14f",
    "other": "#9c755f",
    "activations+other": "#76b7b2",
}
"""One colour per line item (`memdoc.core.billing.vocabulary.LINE_ITEMS` and the timeline's categories)."""

FONT_PX = 12
EM = 0.62
"""Average advance of a character, in em, used to reserve room for a label."""


def esc(text: object) -> str:
    """Text made safe inside an element or a quoted attribute."""
    return html.escape(str(text), quote=True)


def size(n: float) -> str:
    """Bytes as memdoc prints them everywhere (`memdoc.units.format_bytes`, GiB)."""
    return format_bytes(n)


def text_width(text: str, font_px: float = FONT_PX) -> float:
    """The room a label takes at `font_px`, estimated generously (see the module docstring)."""
    return len(text) * font_px * EM


def fit_text(text: str, width: float, font_px: float = FONT_PX) -> str:
    """`text` cut with an ellipsis to fit `width` pixels (the whole text stays in the element's tooltip)."""
    room = int(width / (font_px * EM))
    if len(text) <= room:
        return text
    return text[: max(room - 1, 1)] + "…"


def text(x: float, y: float, label: str, *, anchor: str = "start", fill: str = "#222", bold: bool = False) -> str:
    """One `<text>` element at (x, y), its baseline at y."""
    weight = ' font-weight="bold"' if bold else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{fill}"{weight}>{esc(label)}</text>'


def rect(x: float, y: float, w: float, h: float, fill: str, title: str = "", extra: str = "") -> str:
    """A filled rectangle, with a tooltip when `title` is given."""
    tip = f"<title>{esc(title)}</title>" if title else ""
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" fill="{fill}"{extra}>'
        f"{tip}</rect>"
    )


def line(x1: float, y1: float, x2: float, y2: float, stroke: str, extra: str = "") -> str:
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}"{extra}/>'


def open_svg(width: int, height: int, label: str) -> str:
    """The start of a chart: a fixed coordinate system that scales down with the page (viewBox)."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{esc(label)}" font-family="sans-serif" font-size="{FONT_PX}">'
    )


def lanes(spans: list[tuple[float, float]], gap: float = 6) -> list[int]:
    """The lane (row) of each (start, end) span so that no two spans in a lane overlap: the first lane
    whose last span ends `gap` before this one starts (greedy interval colouring, in order)."""
    ends: list[float] = []
    out = []
    for start, end in spans:
        for i, last in enumerate(ends):
            if start >= last + gap:
                ends[i] = end
                out.append(i)
                break
        else:
            ends.append(end)
            out.append(len(ends) - 1)
    return out


def legend(categories: list[str], width: int) -> tuple[str, int]:
    """A legend of coloured squares, wrapped to `width`; returns (svg fragment, its height)."""
    parts, x, y = [], 0.0, 0.0
    for cat in categories:
        w = 16 + text_width(cat) + 18
        if x and x + w > width:
            x, y = 0.0, y + 18
        parts.append(rect(x, y, 12, 12, COLORS.get(cat, "#999")))
        parts.append(text(x + 16, y + 11, cat))
        x += w
    return "".join(parts), int(y + 18)


__all__ = ["COLORS", "esc", "fit_text", "lanes", "legend", "line", "open_svg", "rect", "size", "text", "text_width"]
