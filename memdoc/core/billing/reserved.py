"""Allocator-true figures of a bill: the step's event stream run through the caching-allocator simulator.

* `peak_reserved`: `max_memory_reserved` of the run on an unconstrained device;
* `fragmentation_bytes`: peak reserved − peak allocated of the same simulation (block rounding,
  segment tails and cached blocks too small or too scattered for the next request);
* `fits(capacity)`: the run completes on a device whose allocator may reserve `capacity` bytes,
  releasing cached segments and retrying before giving up (what torch does before an OOM);
* `min_memory_bytes`: the smallest such capacity, by bisection between peak allocated and peak
  reserved (to 0.5% or 64 MiB; 5% for a plan the card cannot hold anyway, `Bill.min_memory_bytes`) —
  success is monotone in capacity except in pathological orders. A run that completes at capacity C with
  a peak reserved R ≤ C completes identically at R (`_constrained_peak`), so each success lowers the upper
  bound to R, not just to C.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from memdoc.core.billing.allocator import AllocatorOOM, AllocatorStats, CachingAllocator
from memdoc.core.billing.step_events import Events
from memdoc.units import MiB


def simulate(events: Events, *, capacity: int | None = None, expandable: bool = False) -> AllocatorStats | None:
    """Run `events` through the allocator; None when it runs out of memory at `capacity`."""
    alloc = CachingAllocator(capacity=capacity, expandable=expandable)
    try:
        alloc.replay(events.ids, events.sizes)  # ids are small consecutive integers
    except AllocatorOOM:
        return None
    return alloc.stats


@dataclass(frozen=True)
class ReservedVerdict:
    """Simulated allocator figures for one event stream."""

    events: Events | None
    """None: not simulated (see `unsimulated`)."""
    expandable: bool
    stats: AllocatorStats

    @property
    def peak_reserved(self) -> int:
        return self.stats.peak_reserved

    @property
    def peak_allocated(self) -> int:
        return self.stats.peak_allocated

    @property
    def fragmentation_bytes(self) -> int:
        return self.stats.peak_reserved - self.stats.peak_allocated

    def fits(self, capacity: int) -> bool:
        if self.events is None:  # not simulated: the tensors alone decide
            return self.peak_allocated <= capacity
        if self.peak_reserved <= capacity:
            return True
        if self.peak_allocated > capacity:
            return False
        return _constrained_peak(self.events, capacity, self.expandable) is not None

    def min_memory_bytes(self, resolution: int = 200) -> int:
        """The smallest capacity the run completes on, to 1/`resolution` of itself (or 64 MiB)."""
        if self.events is None:
            return self.peak_allocated
        lo, hi = self.peak_allocated, self.peak_reserved  # fails below lo, runs at hi
        while hi - lo > max(64 * MiB, hi // resolution):
            mid = (lo + hi) // 2
            peak = _constrained_peak(self.events, mid, self.expandable)
            if peak is None:
                lo = mid
            else:
                hi = mid if self.expandable else peak
        return hi


@lru_cache(maxsize=64)
def _constrained_peak(events: Events, capacity: int, expandable: bool) -> int | None:
    """Peak reserved of the run at `capacity`, None when it runs out of memory.

    Without expandable segments, a run that completes at capacity C with peak reserved R completes
    identically at R: every cudaMalloc of the run at C ended with reserved ≤ R, so it fits under R too, and
    every cache release at C was triggered by a request over C ≥ R, which triggers it under R too; by
    induction over the events the two runs are the same. (Expandable segments size their virtual range
    from the capacity, so there the argument is not made.)
    """
    stats = simulate(events, capacity=capacity, expandable=expandable)
    return None if stats is None else stats.peak_reserved


MAX_SIMULATED_LAYERS = 512
"""Deepest model whose run is simulated event by event (real models have < 200 layers); deeper
configs are billed without fragmentation, so the bill's cost never grows with an absurd layer count."""


def unsimulated(peak_allocated: int, *, expandable: bool = False) -> ReservedVerdict:
    """A verdict without simulation: reserved = allocated (no fragmentation counted)."""
    stats = AllocatorStats(peak_allocated=peak_allocated, peak_reserved=peak_allocated)
    return ReservedVerdict(None, expandable, stats)


@lru_cache(maxsize=64)
def reserved_verdict(events: Events, *, expandable: bool = False) -> ReservedVerdict:
    """The unconstrained simulation of `events`, once per distinct stream: the plan search and the
    ladder bill many plans whose streams are identical (LoRA's optimizer choice or ZeRO-1 vs ZeRO-2 moves
    no tensor of the stream), and the simulation is the bill's only costly step."""
    stats = simulate(events, expandable=expandable)
    return ReservedVerdict(events, expandable, stats)
