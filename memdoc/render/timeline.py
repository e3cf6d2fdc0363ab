"""An offline HTML view of a memory timeline: a stacked inline SVG (no scripts, no network), viewable anywhere.

The points come from `memdoc.probe.cuda_stats.snapshot_timeline` (a CUDA allocator trace) or the
script runner's CPU op timeline: dicts with bytes per category of `TIMELINE_CATEGORIES` and "total".
"""

from __future__ import annotations

import html

from memdoc.core.billing.vocabulary import TIMELINE_CATEGORIES

_COLORS = {"weights": "#4e79a7", "gradients": "#b07aa1", "optimizer": "#edc948", "activations+other": "#59a14f"}


def _svg(points: list[dict], width: int = 900, height: int = 300, marks: list[tuple[int, str]] | None = None) -> str:
    if not points:
        return "<p>No allocation events were recorded.</p>"
    top = max(p["total"] for p in points) or 1
    n = len(points)
    pad_l, pad_b = 70, 24
    w, h = width - pad_l - 10, height - pad_b - 10

    def x(i: int) -> float:
        return pad_l + (w * i / max(n - 1, 1))

    def y(v: float) -> float:
        return 10 + h - h * v / top

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="11">'
    ]
    below = [0] * n
    for cat in TIMELINE_CATEGORIES:
        upper = [below[i] + points[i].get(cat, 0) for i in range(n)]
        if not any(points[i].get(cat, 0) for i in range(n)):
            continue
        path = " ".join(f"{x(i):.1f},{y(upper[i]):.1f}" for i in range(n))
        back = " ".join(f"{x(i):.1f},{y(below[i]):.1f}" for i in reversed(range(n)))
        parts.append(
            f'<polygon points="{path} {back}" fill="{_COLORS[cat]}" opacity="0.85"><title>{cat}</title></polygon>'
        )
        below = upper
    for frac in (0, 0.5, 1):
        v = top * frac
        parts.append(f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ccc"/>')
        parts.append(f'<text x="{pad_l - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{v / 2**20:.1f} MiB</text>')
    for i, label in marks or []:
        parts.append(
            f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="10" y2="{10 + h}" stroke="#d33" stroke-dasharray="3,3"/>'
        )
        parts.append(f'<text x="{x(i) + 3:.1f}" y="20" fill="#d33">{html.escape(label)}</text>')
    parts.append(f'<text x="{pad_l}" y="{height - 6}">allocation events →  ({n} events)</text>')
    parts.append("</svg>")
    return "".join(parts)


def timeline_html(
    points: list[dict],
    *,
    title: str,
    notes: list[str] | None = None,
    marks: list[tuple[int, str]] | None = None,
    pickle_name: str | None = None,
) -> str:
    """A self-contained HTML page (inline SVG, no scripts, no network) of allocated memory by category; with
    `pickle_name` (the snapshot pickle written next to the page), how to open it in PyTorch's memory viewer."""
    legend = " ".join(
        f'<span style="display:inline-block;width:12px;height:12px;background:{_COLORS[c]}"></span> {c}&nbsp;&nbsp;'
        for c in TIMELINE_CATEGORIES
    )
    peak = max((p["total"] for p in points), default=0)
    body = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em;color:#222}</style></head><body>",
        f"<h2>{html.escape(title)}</h2>",
        f"<p>Peak allocated in the trace: {peak / 2**20:.1f} MiB. {legend}</p>",
        _svg(points, marks=marks),
    ]
    for note in notes or []:
        body.append(f"<p>{html.escape(note)}</p>")
    if pickle_name:
        body.append(
            f"<p>Drop the snapshot pickle {html.escape(pickle_name)} (next to this page) on "
            "https://pytorch.org/memory_viz for the interactive view.</p>"
        )
    body.append("</body></html>")
    return "\n".join(body)


__all__ = ["timeline_html"]
