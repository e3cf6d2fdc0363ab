"""Whether one rank was heavier than the others, from what a log shows of several ranks.

`rank_imbalance(log_text, frames)` returns a sentence of evidence, or None. It reads:

1. OOM messages of several devices (each rank prints its own): their used memory (NVML's
   "this process has X memory in use", else PyTorch's reserved bytes) differs by at least
   `IMBALANCE_SHARE` of the card;
2. an `nvidia-smi` table in the log ("|  79000MiB / 81559MiB |" per GPU row, the layout of
   `nvidia-smi`'s default query): the most and least used GPUs differ by at least
   `IMBALANCE_SHARE` of the card;
3. the traceback runs code guarded for one rank (`is_world_process_zero`, `is_main_process`,
   `rank == 0`, `local_rank == 0`): rank 0 doing evaluation, logging or saving the others skip.

Balanced data-parallel ranks hold the same model states and batches of the same shape, so a gap this
large is work or data only one rank has. Pure logic: no torch.
"""

from __future__ import annotations

import re

from memdoc.core.doctor.logtext import Frame, normalise_log
from memdoc.core.doctor.oom_event import OomEvent
from memdoc.units import format_bytes

__all__ = ["IMBALANCE_SHARE", "rank_imbalance"]

IMBALANCE_SHARE = 0.15
"""Two ranks' usage differing by less than this share of the card is allocator noise and uneven
sequence lengths within one batch shape; more is work or data only one rank has."""

_SMI_ROW = re.compile(r"\|\s*(\d+)\s*MiB\s*/\s*(\d+)\s*MiB\s*\|")
_RANK_GUARD = re.compile(
    r"is_world_process_zero|is_main_process|is_local_main_process|\b(?:local_)?rank\s*==\s*0\b|"
    r"get_rank\(\)\s*==\s*0|\bRANK\b.*==\s*['\"]?0"
)


def _used(event: OomEvent) -> int | None:
    return event.this_process_in_use or event.reserved


def _from_events(events: list[OomEvent]) -> str | None:
    by_gpu: dict[int, int] = {}
    total = None
    for e in events:
        used = _used(e)
        if e.gpu is not None and used:
            by_gpu[e.gpu] = max(by_gpu.get(e.gpu, 0), used)
            total = total or e.total
    if len(by_gpu) < 2 or not total:
        return None
    hi, lo = max(by_gpu, key=by_gpu.get), min(by_gpu, key=by_gpu.get)
    if by_gpu[hi] - by_gpu[lo] < IMBALANCE_SHARE * total:
        return None
    return (
        f"the OOM messages of {len(by_gpu)} GPUs differ: GPU {hi} used {format_bytes(by_gpu[hi])}, "
        f"GPU {lo} {format_bytes(by_gpu[lo])} of {format_bytes(total)}"
    )


def _from_smi(text: str) -> str | None:
    rows = [(int(u), int(t)) for u, t in _SMI_ROW.findall(text) if int(t) > 0]
    if len(rows) < 2:
        return None
    used = [u for u, _ in rows]
    card = max(t for _, t in rows)
    if max(used) - min(used) < IMBALANCE_SHARE * card:
        return None
    return (
        f"nvidia-smi in the log shows {len(rows)} GPUs from {min(used)} MiB to {max(used)} MiB used "
        f"(of {card} MiB): one GPU holds more than the others"
    )


def _from_frames(frames: list[Frame]) -> str | None:
    guarded = next((f for f in frames if _RANK_GUARD.search(f.code)), None)
    if guarded is None:
        return None
    return f"the traceback runs code only one rank runs: {guarded.describe()}"


def rank_imbalance(log_text: str, frames: list[Frame], events: list[OomEvent]) -> str | None:
    """Evidence that one rank held more memory than the others (rules in the module docstring), or None."""
    try:
        return _from_events(events) or _from_smi(normalise_log(log_text or "")) or _from_frames(frames)
    except Exception:  # pragma: no cover - evidence is optional; the doctor never raises
        return None
