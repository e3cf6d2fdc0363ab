"""CUDA allocator evidence: `memory_stats()` digests, snapshot timelines, and an offline HTML view.

Everything here works on plain data in the documented formats, so it is tested without a GPU:

- `torch.cuda.memory_stats()` → a flat dict with keys such as ``allocated_bytes.all.peak``,
  ``reserved_bytes.all.peak``, ``inactive_split_bytes.all.current``, ``num_alloc_retries``,
  ``num_ooms``. `digest_stats` picks what memdoc reports.
- `torch.cuda.memory._snapshot()` → ``{"segments": [...], "device_traces": [[event, ...], ...]}``
  where each event is ``{"action": "alloc" | "free_requested" | "free_completed" |
  "segment_alloc" | "segment_free" | "oom" | "snapshot" | …, "addr", "size", "stream",
  "time_us", "frames"}``. `snapshot_timeline` replays the trace of one device into allocated
  bytes per category over time; `timeline_html` draws it as a stacked inline SVG (no scripts, no
  network), viewable anywhere.
"""

from __future__ import annotations

import html
import os

CATEGORIES = ("weights", "gradients", "optimizer", "activations+other")
_COLORS = {"weights": "#4e79a7", "gradients": "#b07aa1", "optimizer": "#edc948", "activations+other": "#59a14f"}


def digest_stats(stats: dict) -> dict:
    """The memory_stats() figures memdoc reports (bytes / counts; 0 where absent)."""

    def get(key: str) -> int:
        return int(stats.get(key, 0) or 0)

    return {
        "allocated_peak": get("allocated_bytes.all.peak"),
        "allocated_current": get("allocated_bytes.all.current"),
        "reserved_peak": get("reserved_bytes.all.peak"),
        "reserved_current": get("reserved_bytes.all.current"),
        "inactive_split": get("inactive_split_bytes.all.current"),
        "inactive_split_peak": get("inactive_split_bytes.all.peak"),
        "num_alloc_retries": get("num_alloc_retries"),
        "num_ooms": get("num_ooms"),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF") or "",
    }


def snapshot_timeline(snapshot: dict, categories: dict[int, str] | None = None, *, device: int | None = None) -> list[dict]:
    """Replay one device's trace: a list of {"t", "action", <category>: bytes…, "total"} after each event.

    `categories` maps block addresses to a category (weights/gradients/optimizer) as known at the
    end of the run; other addresses count as "activations+other". Blocks alive before recording
    started appear when the trace first frees them (their size is taken from the segments).
    """
    categories = categories or {}
    traces = snapshot.get("device_traces") or []
    if device is None:  # the device with the longest trace
        device = max(range(len(traces)), key=lambda i: len(traces[i]), default=0)
    events = traces[device] if device < len(traces) else []
    live: dict[int, tuple[int, str]] = {}
    totals = {c: 0 for c in CATEGORIES}
    # blocks allocated before recording started: known from the segments, seen only when freed
    preexisting = {}
    for seg in snapshot.get("segments") or []:
        if seg.get("device", device) != device:
            continue
        for block in seg.get("blocks") or []:
            if block.get("state") == "active_allocated":  # segment blocks carry "address" (torch 2.x), events "addr"
                preexisting[int(block.get("address", block.get("addr", 0)))] = int(block["size"])
    out = []
    for ev in events:
        action = ev.get("action")
        addr = int(ev.get("addr", 0) or 0)
        size = int(ev.get("size", 0) or 0)
        if action == "alloc":
            cat = categories.get(addr, "activations+other")
            live[addr] = (size, cat)
            totals[cat] += size
        elif action in ("free_requested", "free_completed"):
            if action == "free_completed" and addr not in live:
                continue
            entry = live.pop(addr, None)
            if entry is None and addr in preexisting:
                continue  # allocated before recording: not part of the replayed total
            if entry is not None:
                totals[entry[1]] -= entry[0]
        else:
            if action not in ("oom", "snapshot"):
                continue
        out.append({"t": int(ev.get("time_us", len(out)) or 0), "action": action, **totals, "total": sum(totals.values())})
    return out


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

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">']
    below = [0] * n
    for cat in CATEGORIES:
        upper = [below[i] + points[i].get(cat, 0) for i in range(n)]
        if not any(points[i].get(cat, 0) for i in range(n)):
            continue
        path = " ".join(f"{x(i):.1f},{y(upper[i]):.1f}" for i in range(n))
        back = " ".join(f"{x(i):.1f},{y(below[i]):.1f}" for i in reversed(range(n)))
        parts.append(f'<polygon points="{path} {back}" fill="{_COLORS[cat]}" opacity="0.85"><title>{cat}</title></polygon>')
        below = upper
    for frac in (0, 0.5, 1):
        v = top * frac
        parts.append(f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ccc"/>')
        parts.append(f'<text x="{pad_l - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{v / 2**20:.1f} MiB</text>')
    for i, label in marks or []:
        parts.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="10" y2="{10 + h}" stroke="#d33" stroke-dasharray="3,3"/>')
        parts.append(f'<text x="{x(i) + 3:.1f}" y="20" fill="#d33">{html.escape(label)}</text>')
    parts.append(f'<text x="{pad_l}" y="{height - 6}">allocation events →  ({n} events)</text>')
    parts.append("</svg>")
    return "".join(parts)


def timeline_html(points: list[dict], *, title: str, notes: list[str] | None = None, marks: list[tuple[int, str]] | None = None) -> str:
    """A self-contained HTML page (inline SVG, no scripts, no network) of allocated memory by category."""
    legend = " ".join(
        f'<span style="display:inline-block;width:12px;height:12px;background:{_COLORS[c]}"></span> {c}&nbsp;&nbsp;' for c in CATEGORIES
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
    body.append("<p>Drop the snapshot pickle on https://pytorch.org/memory_viz for the interactive view.</p>")
    body.append("</body></html>")
    return "\n".join(body)


__all__ = ["CATEGORIES", "digest_stats", "snapshot_timeline", "timeline_html"]
