"""CUDA allocator evidence: `memory_stats()` digests and snapshot timelines (drawn by `memdoc.render.timeline`).

Everything here works on plain data in the documented formats, so it is tested without a GPU:

- `torch.cuda.memory_stats()` → a flat dict with keys such as ``allocated_bytes.all.peak``,
  ``reserved_bytes.all.peak``, ``inactive_split_bytes.all.current``, ``num_alloc_retries``,
  ``num_ooms``. `digest_stats` picks what memdoc reports.
- `torch.cuda.memory._snapshot()` → ``{"segments": [...], "device_traces": [[event, ...], ...]}``
  where each event is ``{"action": "alloc" | "free_requested" | "free_completed" |
  "segment_alloc" | "segment_free" | "oom" | "snapshot" | …, "addr", "size", "stream",
  "time_us", "frames"}``. `snapshot_timeline` replays the trace of one device into allocated
  bytes per category over time; `memdoc.render.timeline.timeline_html` draws it.
"""

from __future__ import annotations

import os

from memdoc.core.billing.vocabulary import TIMELINE_CATEGORIES as CATEGORIES


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


def snapshot_timeline(
    snapshot: dict, categories: dict[int, str] | None = None, *, device: int | None = None
) -> list[dict]:
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
        out.append(
            {"t": int(ev.get("time_us", len(out)) or 0), "action": action, **totals, "total": sum(totals.values())}
        )
    return out


__all__ = ["CATEGORIES", "digest_stats", "snapshot_timeline"]
