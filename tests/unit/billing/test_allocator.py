"""The caching-allocator simulator against the C++ rules (hand-computed cases) and a real CUDA trace.

`fixtures/hf-step.pickle` is `torch.cuda.memory._dump_snapshot()` of two training steps of a 2-layer
Llama on an H200 (torch 2.11, gpu-measurements/dump_snapshot.py): every allocator event since the
model was built, its segments at the end, and `hf-step-stats.json` the matching `memory_stats()`.
"""

import json
import pickle

import pytest
from conftest import FIXTURES

from memdoc.core.billing.allocator import AllocatorOOM, CachingAllocator, allocation_size, round_size

FIX = FIXTURES
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def snapshot():
    with open(FIX / "hf-step.pickle", "rb") as f:
        return pickle.load(f)


def replay(trace, **kw):
    alloc = CachingAllocator(record=True, **kw)
    addr = {}
    for e in trace:
        if e["action"] == "alloc":
            addr[e["addr"]] = alloc.malloc(e["size"], e["stream"])
        elif e["action"] == "free_completed":
            alloc.free(addr.pop(e["addr"]))
    return alloc


def test_rounding_and_segment_sizes_follow_the_cpp_constants():
    assert round_size(1) == 512 and round_size(512) == 512 and round_size(513) == 1024
    assert allocation_size(1 * MiB) == 2 * MiB  # small pool: 2 MiB segments
    assert allocation_size(1 * MiB + 512) == 20 * MiB  # 1–10 MiB: 20 MiB segments
    assert allocation_size(10 * MiB - 512) == 20 * MiB
    assert allocation_size(10 * MiB) == 10 * MiB  # ≥ 10 MiB: rounded to 2 MiB
    assert allocation_size(11 * MiB) == 12 * MiB


def test_small_requests_share_one_2mib_segment():
    a = CachingAllocator()
    for _ in range(4):
        a.malloc(1000)  # 1024 B blocks
    assert a.stats.reserved == 2 * MiB and a.stats.allocated == 4 * 1024


def test_large_block_is_split_only_when_more_than_1mib_remains():
    a = CachingAllocator()
    x = a.malloc(12 * MiB)
    a.free(x)
    a.malloc(11 * MiB)  # 12 MiB block, 1 MiB left: not split (remainder must be > 1 MiB)
    a.malloc(3 * MiB)  # no cached block: a new 20 MiB segment, split (17 MiB left)
    # allocated counts block sizes (alloc_found_block: allocated_bytes += block->size): 12 + 3 MiB
    assert a.stats.reserved == 32 * MiB and a.stats.allocated == 15 * MiB
    a.malloc(17 * MiB)  # best fit: the 17 MiB remainder, no new segment
    assert a.stats.reserved == 32 * MiB


def test_best_fit_picks_the_smallest_block_and_freed_neighbours_merge():
    a = CachingAllocator()
    big, small = a.malloc(40 * MiB), a.malloc(20 * MiB)
    a.free(big), a.free(small)
    a.malloc(18 * MiB)  # fits the 20 MiB segment (2 MiB left > 1 MiB: split), not the 40 MiB one
    assert a.stats.reserved == 60 * MiB
    p, q = a.malloc(20 * MiB), a.malloc(20 * MiB)  # both from the 40 MiB segment
    a.free(p), a.free(q)  # merge back into one 40 MiB block
    a.malloc(40 * MiB)
    assert a.stats.reserved == 60 * MiB


def test_release_and_retry_at_capacity_then_oom():
    a = CachingAllocator(capacity=64 * MiB)
    x = a.malloc(40 * MiB)
    a.free(x)  # cached, unsplit
    a.malloc(30 * MiB)  # served from the 40 MiB block (split): no retry
    assert a.stats.num_alloc_retries == 0
    b = CachingAllocator(capacity=64 * MiB)
    b.free(b.malloc(40 * MiB))
    b.malloc(50 * MiB)  # 40 + 50 > 64: release the cached 40 MiB segment, retry
    assert b.stats.num_alloc_retries == 1 and b.stats.reserved == 50 * MiB
    with pytest.raises(AllocatorOOM):
        b.malloc(20 * MiB)


def test_split_segments_are_not_released():
    a = CachingAllocator(capacity=60 * MiB)
    x = a.malloc(20 * MiB)
    a.malloc(20 * MiB)  # a second segment
    y = a.malloc(18 * MiB)
    a.free(x)
    a.free(y)  # the 20 MiB and 18 MiB segments are free and unsplit
    a.malloc(30 * MiB)  # 58 + 30 > 60: release both (38 MiB), 20 + 30 fits
    assert a.stats.reserved == 50 * MiB


def test_expandable_segments_map_20mib_pages_and_reuse_the_tail():
    a = CachingAllocator(expandable=True)
    a.malloc(30 * MiB)  # maps two 20 MiB pages
    assert a.stats.reserved == 40 * MiB
    a.malloc(5 * MiB)  # fits in the 10 MiB mapped tail
    assert a.stats.reserved == 40 * MiB
    a.malloc(10 * MiB)  # 5 MiB free at the tail + one more page
    assert a.stats.reserved == 60 * MiB and a.stats.allocated == 45 * MiB


def test_expandable_segments_unmap_free_pages_at_capacity():
    a = CachingAllocator(expandable=True, capacity=100 * MiB)
    x = a.malloc(60 * MiB)
    a.malloc(20 * MiB)
    a.free(x)  # 60 MiB free at the start of the segment
    a.malloc(70 * MiB)  # no room: unmap the three free pages, map four at the end
    assert a.stats.num_alloc_retries == 1 and a.stats.reserved == 100 * MiB


def test_replay_reproduces_the_real_segment_allocations(snapshot):
    trace = snapshot["device_traces"][0]
    real = [e["size"] for e in trace if e["action"] == "segment_alloc"]
    alloc = replay(trace)
    assert [size for action, _, size in alloc.stats.segment_events if action == "segment_alloc"] == real


def test_replay_reproduces_the_real_final_segments_and_peaks(snapshot):
    trace = snapshot["device_traces"][0]
    addresses = [e["addr"] for e in trace if e["action"] == "segment_alloc"]
    alloc = replay(trace, segment_addresses=addresses)
    ours = [(s["address"], [(b["address"], b["size"], b["allocated"]) for b in s["blocks"]]) for s in alloc.segments()]
    theirs = [
        (s["address"], [(b["address"], b["size"], b["state"] == "active_allocated") for b in s["blocks"]])
        for s in snapshot["segments"]
    ]
    assert ours == theirs
    stats = json.loads((FIX / "hf-step-stats.json").read_text())
    assert alloc.stats.peak_reserved == stats["max_memory_reserved"]
    assert alloc.stats.peak_allocated == stats["max_memory_allocated"]
    real = stats["memory_stats"]
    assert (alloc.stats.num_device_alloc, alloc.stats.num_device_free, alloc.stats.num_alloc_retries) == (
        real["num_device_alloc"],
        real["num_device_free"],
        real["num_alloc_retries"],
    )
