"""The caching allocator's bookkeeping (`memdoc.core.billing.allocator` runs it): a block of a segment
with its neighbours, an expandable segment's virtual range, and a pool of cached free blocks sorted as
`c10/cuda/CUDACachingAllocator.cpp` `BlockComparatorSize` sorts them (stream, size, address).
"""

from __future__ import annotations

from bisect import bisect_left, insort


class Segment:
    """An expandable segment: a virtual range mapped page by page."""

    __slots__ = ("base", "page")

    def __init__(self, base: int, page: int) -> None:
        self.base, self.page = base, page


class Block:
    """A block of a segment: its address and size, allocated or cached, and its neighbours in the segment."""

    __slots__ = ("addr", "size", "stream", "small", "allocated", "prev", "next", "mapped", "seg")

    def __init__(self, addr: int, size: int, stream: int, small: bool, seg: Segment | None = None, mapped: bool = True):
        self.addr, self.size, self.stream, self.small = addr, size, stream, small
        self.allocated = False
        self.prev: Block | None = None
        self.next: Block | None = None
        self.mapped, self.seg = mapped, seg

    def splice(self, before: Block | None, after: Block | None) -> None:
        if before is not None:
            before.next = self
        self.prev = before
        if after is not None:
            after.prev = self
        self.next = after


def block_key(stream: int, size: int, addr: int) -> int:
    """A cached block's sort key, `BlockComparatorSize` order (stream, size, address) as one integer:
    sizes and addresses are below 2⁶⁴, so integer order is the tuple's order (and compares and hashes
    faster than a tuple on the hot path)."""
    return (stream << 128) + (size << 64) + addr


class Pool:
    """Cached free blocks sorted by `block_key` (stream, size, address); unmapped expandable ranges by
    (stream, address)."""

    __slots__ = ("small", "keys", "blocks", "unmapped", "unmapped_blocks")

    def __init__(self, small: bool) -> None:
        self.small = small
        self.keys: list[int] = []
        self.blocks: dict[int, Block] = {}
        self.unmapped: list[tuple[int, int]] = []
        self.unmapped_blocks: dict[tuple[int, int], Block] = {}

    def insert(self, b: Block) -> None:
        key = (b.stream << 128) + (b.size << 64) + b.addr
        insort(self.keys, key)
        self.blocks[key] = b

    def remove(self, b: Block) -> None:
        key = (b.stream << 128) + (b.size << 64) + b.addr
        keys = self.keys
        del keys[bisect_left(keys, key)]
        del self.blocks[key]

    def insert_unmapped(self, b: Block) -> None:
        key = (b.stream, b.addr)
        insort(self.unmapped, key)
        self.unmapped_blocks[key] = b

    def remove_unmapped(self, b: Block) -> None:
        key = (b.stream, b.addr)
        del self.unmapped[bisect_left(self.unmapped, key)]
        del self.unmapped_blocks[key]


__all__ = ["Block", "Pool", "Segment", "block_key", "merge_into_cache"]


def merge_into_cache(block: Block, pool: Pool) -> None:
    """`free_block` of a freed block whose segment is all mapped (no expandable segments): `try_merge_blocks`
    with each free neighbour, then the merged block into the pool's cache (`CachingAllocator.free` inlined)."""
    keys, blocks = pool.keys, pool.blocks
    prev, nxt = block.prev, block.next
    if prev is not None and not prev.allocated:
        key = (prev.stream << 128) + (prev.size << 64) + prev.addr
        del keys[bisect_left(keys, key)]
        del blocks[key]
        block.addr = prev.addr
        block.size += prev.size
        before = block.prev = prev.prev
        if before is not None:
            before.next = block
    if nxt is not None and not nxt.allocated:
        key = (nxt.stream << 128) + (nxt.size << 64) + nxt.addr
        del keys[bisect_left(keys, key)]
        del blocks[key]
        block.size += nxt.size
        after = block.next = nxt.next
        if after is not None:
            after.prev = block
    key = (block.stream << 128) + (block.size << 64) + block.addr
    insort(keys, key)
    blocks[key] = block
