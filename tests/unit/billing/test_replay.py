"""`CachingAllocator.replay` (the bill's simulation, with cache hits and frees inlined) against the real CUDA
trace and against `malloc`/`free` called event by event, on the event streams of many plans.

The real trace (`fixtures/hf-step.pickle`, torch 2.11 on an H200, see test_allocator.py) is the independent
truth; the event-by-event path is the reference the other tests hold to the C++ rules, so the streams of many
bills (every method, checkpointing, batch and sequence length, offload) and device capacities that force cache
releases and out-of-memory must run identically through both: the same counters, the same segments and blocks,
and out of memory at the same event.
"""

import functools
import json
import pickle

import pytest
from conftest import FIXTURES

from memdoc.core.billing.allocator import AllocatorOOM, CachingAllocator
from memdoc.core.billing.bill import compute_bill
from memdoc.core.billing.step_events import EMPTY_CACHE, training_events
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import parse_plan
from memdoc.resolve.models import resolve_model

PLANS = [  # the default allocator: with expandable segments `replay` calls `malloc`/`free` itself, and comparing
    # the two would compare the code with itself
    ("meta-llama/Llama-3.1-8B", {}),
    ("meta-llama/Llama-3.2-1B", {"method": "full", "checkpointing": "full", "shard": "fsdp", "gpus_per_node": 2}),
    ("meta-llama/Llama-3.1-8B", {"method": "qlora", "micro_batch": 4, "seq_len": 4096}),
    ("meta-llama/Llama-2-7b-hf", {"method": "full", "micro_batch": 2, "seq_len": 1024}),
    (
        "meta-llama/Llama-2-7b-hf",
        {"method": "lora", "checkpointing": "full", "micro_batch": 8, "optimizer": "adamw-8bit"},
    ),
    ("Qwen/Qwen2.5-0.5B", {"method": "full", "micro_batch": 8, "seq_len": 1024, "optimizer": "adamw-foreach"}),
    ("Qwen/Qwen2.5-0.5B", {"method": "full", "loss": "fused"}),
    ("google/gemma-2-2b", {"method": "full", "micro_batch": 2, "seq_len": 2048}),
    ("meta-llama/Llama-3.1-70B", {"gpus_per_node": 8, "shard": "zero3"}),
    (  # post-training with a sleeping colocated vLLM: each generation empties the cache first
        "Qwen/Qwen2.5-0.5B",
        {"method": "full", "task": "grpo", "grad_accum": 8, "vllm": "colocate", "vllm_sleep": True},
    ),
]


def per_event(events, **kw):
    """The stream through `malloc`, `free` and `empty_cache`, one call per event: (allocator, the request that ran
    out of memory with the allocated and reserved bytes then, or None)."""
    alloc = CachingAllocator(**kw)
    addr = {}
    for tid, size in zip(events.ids, events.sizes):
        try:
            if size > 0:
                addr[tid] = alloc.malloc(size)
            elif size == EMPTY_CACHE:
                alloc.empty_cache()
            else:
                alloc.free(addr[tid])
        except AllocatorOOM as exc:
            return alloc, (exc.size, exc.allocated, exc.reserved)
    return alloc, None


def replayed(events, **kw):
    """The stream through `replay`: (allocator, the out-of-memory request as `per_event` gives it)."""
    alloc = CachingAllocator(**kw)
    try:
        alloc.replay(events.ids, events.sizes)
    except AllocatorOOM as exc:
        return alloc, (exc.size, exc.allocated, exc.reserved)
    return alloc, None


def state(alloc):
    return alloc.stats, alloc.segments()


@functools.cache
def events_of(model, plan_items):
    bill = compute_bill(resolve_model(model), parse_plan(**dict(plan_items)), resolve_gpu("h100"))
    return training_events(bill.policy, bill.post) if bill.post is not None else training_events(bill)


@pytest.mark.parametrize(("model", "values"), PLANS)
def test_replay_is_malloc_and_free_event_by_event(model, values):
    events = events_of(model, tuple(values.items()))
    free_run, _ = per_event(events)
    peak_allocated, peak_reserved = free_run.stats.peak_allocated, free_run.stats.peak_reserved
    assert peak_reserved > peak_allocated  # fragmentation: the stream exercises splits, caching and merges
    # unconstrained, at the peak reserved, between the peaks (cache released and retried), under the tensors (OOM)
    between = [peak_allocated + (peak_reserved - peak_allocated) * k // 4 for k in (1, 3)]
    for capacity in (None, peak_reserved, *between, peak_allocated * 9 // 10):
        a, oom_a = per_event(events, capacity=capacity)
        b, oom_b = replayed(events, capacity=capacity)
        assert oom_a == oom_b, capacity
        assert state(a) == state(b), capacity
    assert oom_a is not None  # under the tensors alone: out of memory, at the same request


def test_a_sleeping_vllm_empties_the_cache_before_each_generation():
    """TRL 1.16 (`trl/generation/vllm_generation.py`) calls `torch.cuda.empty_cache()` before vLLM wakes up, and
    vLLM's own allocator unmaps its pool when it sleeps: after the first event the allocator holds only segments with
    a live block (torch's `release_cached_blocks`)."""
    model, values = PLANS[-1]
    events = events_of(model, tuple(values.items()))
    first = events.sizes.index(EMPTY_CACHE)
    assert events.sizes.count(EMPTY_CACHE) == 4  # per simulated step: before vLLM wakes, and as it sleeps
    alloc, _ = per_event(type(events)(events.ids[: first + 1], events.sizes[: first + 1]))
    segments = alloc.segments()
    assert all(any(b["allocated"] for b in seg["blocks"]) for seg in segments)
    assert alloc.stats.reserved == sum(seg["total_size"] for seg in segments)
    awake = dict(values, vllm_sleep=False)
    assert EMPTY_CACHE not in events_of(model, tuple(awake.items())).sizes


def test_some_capacity_between_the_peaks_releases_the_cache():
    """The constrained runs above do reach `release_cached_blocks` (the path `replay` leaves to `malloc`)."""
    retried = 0
    for model, values in PLANS:
        events = events_of(model, tuple(values.items()))
        stats = per_event(events)[0].stats
        for k in (1, 3):
            capacity = stats.peak_allocated + (stats.peak_reserved - stats.peak_allocated) * k // 4
            alloc, oom = replayed(events, capacity=capacity)
            retried += alloc.stats.num_alloc_retries > 0
    assert retried > 0


def test_replay_reproduces_the_real_cuda_trace():
    with open(FIXTURES / "hf-step.pickle", "rb") as f:
        snapshot = pickle.load(f)
    trace = snapshot["device_traces"][0]
    ids, sizes, live, tids = [], [], {}, 0
    for e in trace:
        if e["action"] == "alloc":
            tids += 1
            live[e["addr"]] = tids
            ids.append(tids)
            sizes.append(e["size"])
        elif e["action"] == "free_completed":
            ids.append(live.pop(e["addr"]))
            sizes.append(0)
    addresses = [e["addr"] for e in trace if e["action"] == "segment_alloc"]
    alloc = CachingAllocator(segment_addresses=addresses)
    alloc.replay(ids, sizes)
    ours = [(s["address"], [(b["address"], b["size"], b["allocated"]) for b in s["blocks"]]) for s in alloc.segments()]
    theirs = [
        (s["address"], [(b["address"], b["size"], b["state"] == "active_allocated") for b in s["blocks"]])
        for s in snapshot["segments"]
    ]
    assert ours == theirs
    stats = json.loads((FIXTURES / "hf-step-stats.json").read_text())
    assert (alloc.stats.peak_reserved, alloc.stats.peak_allocated) == (
        stats["max_memory_reserved"],
        stats["max_memory_allocated"],
    )
