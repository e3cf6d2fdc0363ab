"""A simulator of PyTorch's CUDA caching allocator, in pure Python (no torch, no GPU).

It follows `c10/cuda/CUDACachingAllocator.cpp` (pytorch/pytorch, read at commit 001074d; replaying
the torch 2.11 trace `tests/fixtures/hf-step.pickle` through this simulation reproduces its
segments, blocks and peaks exactly, so torch 2.11 — which also measured the H200 rows — follows
the same policy) for the default configuration — `max_split_size` unlimited, no
`roundup_power2_divisions`, no garbage-collection threshold, one stream, no CUDA graphs:

* `round_size`: requests round up to a multiple of `kMinBlockSize` = 512 B;
* `get_pool`: ≤ `kSmallSize` (1 MiB) goes to the small pool, the rest to the large pool;
* `get_allocation_size`: a new segment is `kSmallBuffer` (2 MiB) for small requests,
  `kLargeBuffer` (20 MiB) below `kMinLargeAlloc` (10 MiB), else the request rounded up to
  `kRoundLarge` (2 MiB);
* `get_free_block`: best fit — the smallest cached block of the pool with size ≥ request
  (`BlockComparatorSize`: stream, size, then address);
* `should_split` / `alloc_found_block`: the block is split when the remainder is ≥ 512 B (small
  pool, or any pool with expandable segments) or > 1 MiB (large pool); the request takes the
  low addresses, the remainder stays cached;
* `free_block` / `try_merge_blocks`: a freed block merges with free neighbours of its segment;
* `malloc`: cache → `alloc_block` (cudaMalloc) → `release_cached_blocks` (free every cached
  segment that is not split, unmap free pages of expandable segments) and retry → out of memory;
* expandable segments (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`): one segment per pool
  and stream whose pages (2 MiB small, 20 MiB large) are mapped on demand
  (`find_expandable_block`, `map_block`, `try_allocate_expandable_block`, `unmap_block`); best fit
  treats a free block next to the unmapped tail as the size it can grow to.

`capacity` models the device: cudaMalloc (or mapping pages) fails when the reserved bytes would
exceed it. Reserved (`reserved_bytes`) is what `torch.cuda.memory_reserved()` reports; allocated
(`allocated_bytes`) is `memory_allocated()` — both count rounded block sizes, as torch does.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from dataclasses import dataclass, field

from memdoc.core.billing.allocator_blocks import Block, Pool, Segment, block_key, merge_into_cache

MiB = 1024 * 1024
K_MIN_BLOCK_SIZE = 512
"""kMinBlockSize: all sizes are rounded to at least 512 bytes."""
K_SMALL_SIZE = 1 * MiB
"""kSmallSize: largest "small" allocation."""
K_SMALL_BUFFER = 2 * MiB
"""kSmallBuffer: small allocations are packed in 2 MiB segments (and 2 MiB expandable pages)."""
K_LARGE_BUFFER = 20 * MiB
"""kLargeBuffer: allocations between 1 and 10 MiB share 20 MiB segments (and 20 MiB expandable pages)."""
K_MIN_LARGE_ALLOC = 10 * MiB
"""kMinLargeAlloc: below this, a large request allocates kLargeBuffer."""
K_ROUND_LARGE = 2 * MiB
"""kRoundLarge: larger requests round their segment up to 2 MiB."""
_ADDRESS_GAP = 2 * MiB  # simulated cudaMalloc returns increasing, 2 MiB-aligned addresses


class AllocatorOOM(Exception):
    """The request could not be served even after releasing the cache (torch's OutOfMemoryError)."""

    def __init__(self, size: int, allocated: int, reserved: int) -> None:
        super().__init__(f"out of memory allocating {size} B ({allocated} B allocated, {reserved} B reserved)")
        self.size, self.allocated, self.reserved = size, allocated, reserved


def round_size(size: int) -> int:
    """`round_size`: up to a multiple of 512 B (minimum 512 B)."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return K_MIN_BLOCK_SIZE * -(-size // K_MIN_BLOCK_SIZE)


def allocation_size(size: int) -> int:
    """`get_allocation_size`: bytes cudaMalloc'ed for a new segment serving a rounded request."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * -(-size // K_ROUND_LARGE)


@dataclass
class AllocatorStats:
    """The counters of `torch.cuda.memory_stats()` the simulation keeps."""

    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    num_alloc_retries: int = 0
    num_device_alloc: int = 0
    num_device_free: int = 0
    segment_events: list[tuple[str, int, int]] = field(default_factory=list)
    """(action, address, size): segment_alloc / segment_free / segment_map / segment_unmap, as torch's
    trace names them."""


class CachingAllocator:
    """One device's caching allocator. `malloc` returns an address, `free` takes it back."""

    def __init__(
        self,
        *,
        capacity: int | None = None,
        expandable: bool = False,
        record: bool = False,
        segment_addresses: list[int] | None = None,
    ) -> None:
        """`capacity`: device bytes the allocator may reserve (None: unlimited); `record`: keep segment
        events; `segment_addresses`: addresses for successive new segments (to replay a recorded trace)."""
        self.capacity = capacity
        self.expandable = expandable
        self.record = record
        self.stats = AllocatorStats()
        self._large, self._small = Pool(False), Pool(True)
        self._active: dict[int, Block] = {}
        self._next_addr = 1 << 40
        self._addresses = list(reversed(segment_addresses)) if segment_addresses else []

    # -- public API -------------------------------------------------------------------------
    def malloc(self, orig_size: int, stream: int = 0) -> int:
        """`DeviceCachingAllocator::malloc`: the address of a block of at least `orig_size` bytes.

        (`get_free_block`, `should_split` and `alloc_found_block` are inlined: this is the hot path
        of every bill.)"""
        size = (
            K_MIN_BLOCK_SIZE
            if orig_size < K_MIN_BLOCK_SIZE
            else (orig_size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE * K_MIN_BLOCK_SIZE
        )
        small = size <= K_SMALL_SIZE
        pool = self._small if small else self._large
        keys, blocks = pool.keys, pool.blocks
        block = None
        if self.expandable:
            block = self._get_free_block(pool, stream, size) if keys else None
        elif keys:
            i = bisect_left(keys, (stream << 128) + (size << 64))  # `block_key(stream, size, 0)`
            if i < len(keys) and keys[i] >> 128 == stream:
                block = blocks.pop(keys.pop(i))
        if block is None:
            block = self._new_block(pool, stream, size, orig_size)
        remaining = block.size - size
        if remaining >= K_MIN_BLOCK_SIZE if (small or self.expandable) else remaining > K_SMALL_SIZE:
            rest = block
            block = Block(rest.addr, size, stream, small, rest.seg)
            prev = rest.prev
            block.prev = prev
            if prev is not None:
                prev.next = block
            block.next = rest
            rest.prev = block
            rest.addr += size
            rest.size = remaining
            key = (rest.stream << 128) + (remaining << 64) + rest.addr
            insort(keys, key)
            blocks[key] = rest
        block.allocated = True
        self._active[block.addr] = block
        st = self.stats
        st.allocated += block.size
        if st.allocated > st.peak_allocated:
            st.peak_allocated = st.allocated
        return block.addr

    def replay(self, ids: Sequence[int], sizes: Sequence[int]) -> None:
        """Run a flat event stream on stream 0: `sizes[i] > 0` mallocs that many bytes for tensor `ids[i]` (a small
        integer ≥ 0), `sizes[i] == 0` frees it, a negative size is `empty_cache`. Event for event what `malloc`,
        `free` and `empty_cache` do (tests/unit/billing/test_replay.py); without expandable segments, cache hits
        with their splits and frees are inlined here."""
        addr = [0] * (max(ids, default=0) + 1)
        if self.expandable or self.record:
            self._replay_per_event(ids, sizes, addr)
            return
        pools, active, st, new_block = (self._large, self._small), self._active, self.stats, self._new_block
        allocated, peak = st.allocated, st.peak_allocated  # kept in locals, written back before a new segment
        for tid, orig_size in zip(ids, sizes):
            if not orig_size:
                block = active.pop(addr[tid])
                block.allocated = False
                allocated -= block.size
                merge_into_cache(block, pools[block.small])
                continue
            if orig_size < 0:
                st.allocated, st.peak_allocated = allocated, peak
                self.empty_cache()
                continue
            size = (
                K_MIN_BLOCK_SIZE
                if orig_size < K_MIN_BLOCK_SIZE
                else -(-orig_size // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE
            )
            small = size <= K_SMALL_SIZE
            pool = pools[small]
            keys = pool.keys
            i = bisect_left(keys, size << 64)  # `block_key(0, size, 0)`
            if i == len(keys) or keys[i] >> 128:
                st.allocated, st.peak_allocated = allocated, peak  # as out of memory reports them
                block = new_block(pool, 0, size, orig_size)
            else:
                block = pool.blocks.pop(keys.pop(i))
            remaining = block.size - size
            if remaining >= K_MIN_BLOCK_SIZE if small else remaining > K_SMALL_SIZE:
                rest = block  # on stream 0, as every block of this run
                block = Block(rest.addr, size, 0, small, rest.seg)
                prev = block.prev = rest.prev
                if prev is not None:
                    prev.next = block
                block.next = rest
                rest.prev = block
                rest.addr += size
                rest.size = remaining
                key = (remaining << 64) + rest.addr
                insort(keys, key)
                pool.blocks[key] = rest
            block.allocated = True
            a = addr[tid] = block.addr
            active[a] = block
            allocated += block.size
            if allocated > peak:
                peak = allocated
        st.allocated, st.peak_allocated = allocated, peak

    def _replay_per_event(self, ids: Sequence[int], sizes: Sequence[int], addr: list[int]) -> None:
        """`replay` through `malloc`, `free` and `empty_cache`, one call per event (expandable segments, recording)."""
        for tid, size in zip(ids, sizes):
            if size > 0:
                addr[tid] = self.malloc(size)
            elif size:
                self.empty_cache()
            else:
                self.free(addr[tid])

    def free(self, addr: int) -> None:
        """`free` → `free_block`: merge with free neighbours and return the block to its pool's cache."""
        block = self._active.pop(addr)
        block.allocated = False
        self.stats.allocated -= block.size
        pool = self._small if block.small else self._large
        prev, nxt = block.prev, block.next
        if prev is not None and not prev.allocated:
            self._try_merge(block, prev, pool)
        if nxt is not None and not nxt.allocated:
            self._try_merge(block, nxt, pool)
        key = (block.stream << 128) + (block.size << 64) + block.addr
        insort(pool.keys, key)
        pool.blocks[key] = block

    def empty_cache(self) -> None:
        """`torch.cuda.empty_cache()`: `release_cached_blocks`."""
        self._release_cached_blocks()

    def segments(self) -> list[dict]:
        """Mapped segments in address order, as `torch.cuda.memory._snapshot()['segments']` lists them:
        {address, total_size, is_large, blocks: [{address, size, allocated}]}."""
        heads = [
            b
            for b in list(self._active.values()) + list(self._large.blocks.values()) + list(self._small.blocks.values())
            if b.mapped and not (b.prev is not None and b.prev.mapped)
        ]
        out = []
        for head in sorted(heads, key=lambda b: b.addr):
            blocks, b = [], head
            while b is not None and b.mapped:
                blocks.append({"address": b.addr, "size": b.size, "allocated": b.allocated})
                b = b.next
            out.append(
                {
                    "address": head.addr,
                    "total_size": sum(x["size"] for x in blocks),
                    "is_large": not head.small,
                    "blocks": blocks,
                }
            )
        return out

    # -- internals (names follow the C++) -----------------------------------------------------
    def _new_block(self, pool: Pool, stream: int, size: int, orig_size: int) -> Block:
        """The `malloc` steps after a cache miss: `alloc_block` of `allocation_size`, else `release_cached_blocks`
        and retry, else out of memory (AllocatorOOM for the `orig_size` request)."""
        alloc = (
            K_SMALL_BUFFER
            if pool.small
            else (K_LARGE_BUFFER if size < K_MIN_LARGE_ALLOC else -(-size // K_ROUND_LARGE) * K_ROUND_LARGE)
        )  # `allocation_size`
        block = self._alloc_block(pool, stream, size, alloc)
        if block is None:
            self._release_cached_blocks()
            self.stats.num_alloc_retries += 1
            block = self._alloc_block(pool, stream, size, alloc)
        if block is None:
            raise AllocatorOOM(orig_size, self.stats.allocated, self.stats.reserved)
        return block

    def _get_free_block(self, pool: Pool, stream: int, size: int) -> Block | None:
        keys = pool.keys
        i = bisect_left(keys, block_key(stream, size, 0))
        if i == len(keys) or keys[i] >> 128 != stream:
            return None
        block = pool.blocks[keys[i]]
        if block.seg is not None:
            # an expandable block counts as the size it can grow to (next to the unmapped tail)
            def grown(b: Block) -> int:
                return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)

            while i + 1 < len(keys) and keys[i + 1] >> 128 == stream and grown(pool.blocks[keys[i + 1]]) < grown(block):
                i += 1
                block = pool.blocks[keys[i]]
        pool.remove(block)
        return block

    def _new_address(self, size: int) -> int:
        if self._addresses:
            return self._addresses.pop()
        addr = self._next_addr
        self._next_addr += -(-size // _ADDRESS_GAP) * _ADDRESS_GAP + _ADDRESS_GAP
        return addr

    def _grow_reserved(self, nbytes: int) -> None:
        st = self.stats
        st.reserved += nbytes
        st.num_device_alloc += 1
        if st.reserved > st.peak_reserved:
            st.peak_reserved = st.reserved

    def _fits_device(self, nbytes: int) -> bool:
        return self.capacity is None or self.stats.reserved + nbytes <= self.capacity

    def _alloc_block(self, pool: Pool, stream: int, size: int, alloc: int) -> Block | None:
        """`alloc_block`: cudaMalloc a new segment (or map pages of an expandable one). (`_fits_device`,
        `_new_address` and `_grow_reserved` are inlined for segments: a third of a bill's requests come here.)"""
        if self.expandable:
            return self._try_allocate_expandable_block(pool, stream, size)
        st = self.stats
        reserved = st.reserved + alloc
        if self.capacity is not None and reserved > self.capacity:
            return None
        if self._addresses:
            addr = self._addresses.pop()
        else:
            addr = self._next_addr
            self._next_addr += -(-alloc // _ADDRESS_GAP) * _ADDRESS_GAP + _ADDRESS_GAP
        block = Block(addr, alloc, stream, pool.small)
        st.reserved = reserved
        st.num_device_alloc += 1
        if reserved > st.peak_reserved:
            st.peak_reserved = reserved
        if self.record:
            self.stats.segment_events.append(("segment_alloc", block.addr, alloc))
        return block

    def _try_merge(self, dst: Block, src: Block | None, pool: Pool) -> int:
        """`try_merge_blocks`: absorb a free neighbour `src` (same mapping state) into `dst`, which is in no pool."""
        if src is None or src.allocated or src.mapped != dst.mapped:
            return 0
        if src.mapped:
            pool.remove(src)
        else:
            pool.remove_unmapped(src)
        if dst.prev is src:
            dst.addr = src.addr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    def _release_cached_blocks(self) -> None:
        """`release_cached_blocks` → `release_blocks` for the large, then the small pool."""
        for pool in (self._large, self._small):
            to_unmap = []
            for key in list(pool.keys):
                block = pool.blocks[key]
                if block.seg is not None:
                    to_unmap.append(block)
                elif block.prev is None and block.next is None:
                    pool.remove(block)
                    self.stats.reserved -= block.size
                    self.stats.num_device_free += 1
                    if self.record:
                        self.stats.segment_events.append(("segment_free", block.addr, block.size))
            for block in to_unmap:
                self._unmap_block(pool, block)
                if block.prev is None and block.next is None and not block.mapped:
                    pool.remove_unmapped(block)  # release_expandable_segment

    # -- expandable segments ----------------------------------------------------------------------
    def _find_expandable_block(self, pool: Pool, stream: int, size: int) -> Block:
        """`find_expandable_block`: lowest unmapped range (with the free block before it) that can hold `size`."""

        def allocatable(b: Block | None) -> bool:
            return b is not None and not b.allocated

        i = bisect_left(pool.unmapped, (stream, -1))
        while i < len(pool.unmapped) and pool.unmapped[i][0] == stream:
            c = pool.unmapped_blocks[pool.unmapped[i]]
            if allocatable(c.prev):
                c = c.prev
            total, b = 0, c
            while total < size and allocatable(b):
                total += b.size
                b = b.next
            if total >= size:
                return c
            i += 1
        page = K_SMALL_BUFFER if pool.small else K_LARGE_BUFFER
        # address space for 1 1/8 of the device (the C++ reserves totalGlobalMem × 9/8)
        span = -(-((self.capacity or 1 << 44) * 9 // 8) // page) * page
        seg = Segment(self._new_address(span), page)
        candidate = Block(seg.base, span, stream, pool.small, seg, mapped=False)
        pool.insert_unmapped(candidate)
        return candidate

    def _map_block(self, pool: Pool, to_map: Block, size: int) -> bool:
        """`map_block`: back [to_map, to_map + size) with whole pages; merge with free neighbours."""
        seg = to_map.seg
        begin = (to_map.addr - seg.base) // seg.page
        end = -(-(to_map.addr + size - seg.base) // seg.page)
        mapped = (end - begin) * seg.page
        if not self._fits_device(mapped):
            return False
        pool.remove_unmapped(to_map)
        to_map.mapped = True
        if mapped < to_map.size:
            remaining = Block(
                to_map.addr + mapped, to_map.size - mapped, to_map.stream, to_map.small, seg, mapped=False
            )
            remaining.splice(to_map, to_map.next)
            pool.insert_unmapped(remaining)
            to_map.size = mapped
        self._try_merge(to_map, to_map.prev, pool)
        self._try_merge(to_map, to_map.next, pool)
        pool.insert(to_map)
        self._grow_reserved(mapped)
        if self.record:
            self.stats.segment_events.append(("segment_map", seg.base + begin * seg.page, mapped))
        return True

    def _try_allocate_expandable_block(self, pool: Pool, stream: int, size: int) -> Block | None:
        candidate = self._find_expandable_block(pool, stream, size)
        if not candidate.mapped and not self._map_block(pool, candidate, min(candidate.size, size)):
            return None
        while candidate.size < size:
            nxt = candidate.next
            if not self._map_block(pool, nxt, min(size - candidate.size, nxt.size)):
                return None
            candidate = nxt
        pool.remove(candidate)
        return candidate

    def _unmap_block(self, pool: Pool, block: Block) -> None:
        """`unmap_block`: return the whole pages inside a free expandable block to the device."""
        seg = block.seg
        begin = -(-(block.addr - seg.base) // seg.page)
        end = (block.addr + block.size - seg.base) // seg.page
        if begin >= end:
            return
        pool.remove(block)
        start, length = seg.base + begin * seg.page, (end - begin) * seg.page
        before = start - block.addr
        if before > 0:
            b = Block(block.addr, before, block.stream, block.small, seg)
            b.splice(block.prev, block)
            pool.insert(b)
        after = block.size - before - length
        if after > 0:
            a = Block(start + length, after, block.stream, block.small, seg)
            a.splice(block, block.next)
            pool.insert(a)
        block.addr, block.size, block.mapped = start, length, False
        self._try_merge(block, block.prev, pool)
        self._try_merge(block, block.next, pool)
        pool.insert_unmapped(block)
        self.stats.reserved -= length
        self.stats.num_device_free += 1
        if self.record:
            self.stats.segment_events.append(("segment_unmap", start, length))


__all__ = ["AllocatorOOM", "AllocatorStats", "CachingAllocator", "allocation_size", "round_size"]
