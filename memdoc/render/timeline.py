"""An offline HTML view of a memory timeline: a stacked inline SVG (no scripts, no network), viewable anywhere.

The points come from `memdoc.probe.cuda_stats.snapshot_timeline` (a CUDA allocator trace) or the
script runner's CPU op timeline: dicts with bytes per category (the bill's line items, or
`TIMELINE_CATEGORIES` for a CUDA trace) and "total". The chart is `memdoc.render.html.timeline_svg`
(the one the `--html` report draws): only the categories present are drawn and listed.
"""

from __future__ import annotations

import html

from memdoc.render.html.page import CSS
from memdoc.render.html.timeline_svg import timeline_svg


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
    peak = max((p["total"] for p in points), default=0)
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Peak allocated in the trace: {peak / 2**20:.1f} MiB.</p>",
        timeline_svg(points, marks),
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
