"""The allocation timeline as a stacked area chart (inline SVG), coloured by category, with phase labels.

Points are dicts of bytes per category and "total" (`memdoc.probe.cuda_stats.snapshot_timeline` for a
CUDA trace; the script runner's CPU timeline, `memdoc.probe.script.session.Session.after_op`). The
categories drawn are those the points carry, in bill order; the legend lists only those. Phase
labels go on lanes above the plot so that none overlaps another (`svg.lanes`), and stay inside it.
"""

from __future__ import annotations

from memdoc.core.billing.vocabulary import LINE_ITEMS, TIMELINE_CATEGORIES
from memdoc.render.html.svg import COLORS, esc, legend, line, open_svg, size, text, text_width
from memdoc.render.html.svg import lanes as label_lanes

ORDER = (*LINE_ITEMS, *[c for c in TIMELINE_CATEGORIES if c not in LINE_ITEMS])
MAX_LANES = 3


def categories_in(points: list[dict]) -> list[str]:
    """The categories with any bytes in `points`, in bill order."""
    return [c for c in ORDER if any(p.get(c) for p in points)]


def downsample(points: list[dict], most: int = 600) -> list[int]:
    """Indices of at most ~`most` points that keep each stretch's highest total (the peaks stay)."""
    n = len(points)
    if n <= most:
        return list(range(n))
    step = n / most
    keep = []
    for b in range(most):
        lo, hi = int(b * step), min(int((b + 1) * step), n)
        keep.append(max(range(lo, hi), key=lambda i: points[i].get("total", 0)))
    return keep


def _phase_labels(marks: list[tuple[int, str]], x, width: float, pad_r: float) -> tuple[list, int]:
    """(x, label, lane, anchor) of each phase label that fits on one of MAX_LANES lanes; the lane count."""
    spans, placed = [], []
    for i, label in marks:
        w = text_width(label)
        start = x(i) + 3
        anchor = "start"
        if start + w > width - pad_r:  # near the right edge: the label ends at its line instead
            start, anchor = x(i) - 3 - w, "end"
        spans.append((start, start + w))
        placed.append((x(i), label, anchor))
    rows = label_lanes(spans)
    kept = [(xi, lab, lane, anchor) for (xi, lab, anchor), lane in zip(placed, rows) if lane < MAX_LANES]
    return kept, min(max(rows, default=-1) + 1, MAX_LANES)


def timeline_svg(points: list[dict], marks: list[tuple[int, str]] | None = None, *, width: int = 900) -> str:
    """A stacked area of allocated bytes per category over the events, with the phase changes as
    dashed lines labelled above the plot (labels that would need a fourth lane are left as tooltips)."""
    if not points:
        return "<p>No allocation events were recorded.</p>"
    cats = categories_in(points) or ["activations+other"]
    n, top = len(points), max(p.get("total", 0) for p in points) or 1
    pad_l, pad_r = 78, 12

    def x(i: int) -> float:
        return pad_l + (width - pad_l - pad_r) * i / max(n - 1, 1)

    labels, lane_count = _phase_labels(list(marks or []), x, width, pad_r)
    pad_t = 12 + 16 * lane_count
    plot_h = 240
    height = pad_t + plot_h + 30

    def y(v: float) -> float:
        return pad_t + plot_h - plot_h * v / top

    leg, leg_h = legend(cats, width - 20)
    parts = [open_svg(width, height + leg_h, "allocation timeline"), f'<g transform="translate(10,{height})">{leg}</g>']
    below = [0] * n
    for cat in cats:
        upper = [below[i] + int(points[i].get(cat, 0) or 0) for i in range(n)]
        fwd = " ".join(f"{x(i):.1f},{y(upper[i]):.1f}" for i in range(n))
        back = " ".join(f"{x(i):.1f},{y(below[i]):.1f}" for i in reversed(range(n)))
        parts.append(
            f'<polygon points="{fwd} {back}" fill="{COLORS[cat]}" opacity="0.9"><title>{esc(cat)}</title></polygon>'
        )
        below = upper
    for frac in (0, 0.5, 1):
        parts.append(line(pad_l, y(top * frac), width - pad_r, y(top * frac), "#ccc"))
        parts.append(text(pad_l - 6, y(top * frac) + 4, size(top * frac) if frac else "0", anchor="end"))
    for i, label in marks or []:
        parts.append(
            f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{pad_t}" y2="{pad_t + plot_h}" stroke="#d33" '
            f'stroke-dasharray="3,3"><title>{esc(label)}</title></line>'
        )
    for xi, label, lane, anchor in labels:
        parts.append(text(xi + (3 if anchor == "start" else -3), 12 + 16 * lane, label, anchor=anchor, fill="#b22"))
    parts.append(text(pad_l, pad_t + plot_h + 20, f"allocation events → ({n} points)", fill="#555"))
    parts.append("</svg>")
    return "".join(parts)


__all__ = ["categories_in", "downsample", "timeline_svg"]
