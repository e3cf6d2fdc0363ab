"""Memory that creeps up from step to step: the ``memory-growth`` finding.

Input: the memory held at the start of each optimizer step (CUDA: `memory_allocated()`; CPU: the
process's resident set), from the second step on — the first step creates the optimizer states,
after it nothing should persist across steps but weights, states and the data loader's batches.

Rule: compare the first and the last third of those steady-state samples. Memory grew when the
*smallest* start of the last third exceeds the *largest* start of the first third by at least
`GROWTH_MIN_BYTES` and `GROWTH_SHARE` of that first-third level — a single large batch or a
one-off allocation moves a maximum, not the minimum of a third. Needs `GROWTH_MIN_STEPS` samples.
Typical causes: a loss or output kept across steps (``losses.append(loss)`` without
``.item()``), a growing cache or list of tensors, tensors held by a hook. It ends in a mid-run
OOM, so the finding names that symptom.
"""

from __future__ import annotations

from memdoc.core.doctor.findings import Finding
from memdoc.units import MiB, format_bytes

GROWTH_MIN_STEPS = 6
"""Steady-state step starts needed before growth is judged."""
GROWTH_MIN_BYTES = 64 * MiB
"""Smaller increases are allocator/caching noise (and on CPU, the resident set's)."""
GROWTH_SHARE = 0.02
"""…and the increase must be at least this share of the memory held at the start."""


def memory_growth(starts: list[tuple[int, int]]) -> Finding | None:
    """The ``memory-growth`` finding for [(step, bytes at its start), …] (steady-state steps), or None."""
    if len(starts) < GROWTH_MIN_STEPS:
        return None
    third = len(starts) // 3
    first, last = starts[:third], starts[-third:]
    level = max(b for _, b in first)
    growth = min(b for _, b in last) - level
    if growth < max(GROWTH_MIN_BYTES, GROWTH_SHARE * level):
        return None
    span = starts[-1][0] - starts[0][0]
    total = starts[-1][1] - starts[0][1]
    return Finding(
        id="memory-growth",
        severity="warning",
        message=(
            f"memory at the start of each step grew by {format_bytes(total)} over {span} steps "
            f"(≈ {format_bytes(total / max(span, 1))} per step): something keeps tensors across steps"
        ),
        symptom="mid-run-oom",
        detail=(
            "look for losses/outputs kept without .item() or .detach(), caches or lists that grow, "
            "tensors held by hooks; this ends in an out-of-memory error mid-run"
        ),
    )
