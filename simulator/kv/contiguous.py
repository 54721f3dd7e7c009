"""Contiguous KV allocation: one slab per sequence in a linear address space (FasterTransformer / Orca style).

The pool is ``num_blocks × block_size`` token slots laid out as one address range. Each sequence owns one slab
``[start, start + size)``; free space is a sorted list of holes, placed ``first_fit`` (lowest address) or
``best_fit`` (smallest hole that fits). Holes between slabs are real external fragmentation. The slab size comes
from ``reserve``:

- ``max_model_len``: every sequence reserves the longest sequence the server accepts;
- ``requested``: prompt + requested output (the request's final KV length, known at admission);
- ``grow``: the tokens it holds now; when a sequence outgrows its slab the slab is reallocated to
  max(2 × size, needed) tokens (capped at ``max_model_len``) — extended in place when the hole right after it is
  large enough, otherwise moved to a new hole and its tokens copied; when no hole is large enough but the free
  slots are, the pool is compacted (slabs slid together, the growing one last). ``copied_tokens`` counts every
  copy; the replica charges them as device-to-device copy time (a stall of that replica). Without compaction a
  lone request could be unable to grow although the pool has room, and chunked prefill would livelock.

Decoding sequences grow lazily, as in the paged allocator: ``tokens = base + clock``. A slab only fills when
``clock`` reaches ``size − base``, so a heap of those values answers ``max_grow`` in O(log n). Slabs of growing
sequences that are full are reallocated by ``prepare_growth`` (called when a decode step is scheduled), so a decode
run never reallocates mid-way.
"""

from __future__ import annotations

import bisect
import heapq
from typing import Literal

from simulator.config.engine import KVCacheBase
from simulator.kv.base import KV_ALLOCATORS, KVAllocator, LazyGrowth, MemoryBreakdown

Reserve = Literal["max_model_len", "requested", "grow"]
Placement = Literal["first_fit", "best_fit"]


class ContiguousKVConfig(KVCacheBase):
    """One slab per request in a linear address space. ``reserve``: max_model_len (FasterTransformer / Orca),
    requested (prompt + output), or grow (start at the prompt, reallocate and copy when full)."""

    kind: Literal["contiguous"]
    reserve: Reserve = "max_model_len"
    placement: Placement = "first_fit"


def _find_hole(holes: list[list[int]], size: int, placement: Placement) -> int:
    """Index of the hole a slab of ``size`` goes to (-1 if none is large enough)."""
    if placement == "first_fit":
        return next((i for i, (_, length) in enumerate(holes) if length >= size), -1)
    fits = [(length, i) for i, (_, length) in enumerate(holes) if length >= size]
    return min(fits)[1] if fits else -1


def _carve(holes: list[list[int]], index: int, size: int) -> int:
    """Take ``size`` slots from the start of hole ``index``; return the slab's start address."""
    hole = holes[index]
    start = hole[0]
    if hole[1] == size:
        del holes[index]
    else:
        hole[0] += size
        hole[1] -= size
    return start


@KV_ALLOCATORS.register("contiguous", config=ContiguousKVConfig)
class ContiguousAllocator(LazyGrowth, KVAllocator):
    copied_tokens: int  # counted here (the interface declares it read-only)

    def __init__(
        self, num_blocks: int, block_size: int, *, reserve: Reserve = "max_model_len",
        placement: Placement = "first_fit", max_model_len: int | None = None,
    ) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.reserve = reserve
        self.placement = placement
        self.capacity = num_blocks * block_size
        self.max_model_len = max_model_len or self.capacity
        self._holes: list[list[int]] = [[0, self.capacity]]  # [start, length], sorted by start, never adjacent
        self._slabs: dict[int, list[int]] = {}  # seq -> [start, size]
        self._allocated = 0
        self._static: dict[int, int] = {}  # seq -> tokens
        self._static_tokens = 0
        self._base: dict[int, int] = {}  # growing seq -> tokens − clock
        self._base_sum = 0
        self._clock = 0
        self._full_at: list[tuple[int, int]] = []  # (clock at which a growing seq's slab is full, seq); lazy
        self.copied_tokens = 0

    @classmethod
    def from_config(cls, config, num_blocks: int, block_size: int, max_model_len: int) -> ContiguousAllocator:
        return cls(num_blocks, block_size, reserve=config.reserve, placement=config.placement,
                   max_model_len=max_model_len)

    # --- address space -----------------------------------------------------------------------------------------
    def _slab_size(self, tokens: int, final_tokens: int | None) -> int:
        if self.reserve == "max_model_len":
            return max(self.max_model_len, tokens)
        if self.reserve == "requested":
            return max(final_tokens or tokens, tokens)
        return tokens

    def _place(self, seq: int, size: int) -> None:
        index = _find_hole(self._holes, size, self.placement)
        if index < 0 and self.reserve == "grow" and size <= self._free_slots():
            self._compact()
            index = 0
        if index < 0:
            raise MemoryError(f"no hole of {size} slots for sequence {seq} (largest {self._largest_hole()})")
        self._slabs[seq] = [_carve(self._holes, index, size), size]
        self._allocated += size

    def _release(self, start: int, size: int) -> None:
        """Return ``[start, start + size)`` to the holes, merging with free neighbours."""
        holes = self._holes
        i = bisect.bisect_left(holes, [start, 0])
        if i < len(holes) and holes[i][0] == start + size:  # merge with the next hole
            size += holes[i][1]
            del holes[i]
        if i > 0 and holes[i - 1][0] + holes[i - 1][1] == start:  # and the previous one
            holes[i - 1][1] += size
        else:
            holes.insert(i, [start, size])

    def _largest_hole(self) -> int:
        return max((length for _, length in self._holes), default=0)

    def _grown_size(self, size: int, needed: int) -> int:
        return max(needed, min(2 * size, self.max_model_len))

    def _free_slots(self) -> int:
        return self.capacity - self._allocated

    def _compact(self, last: int | None = None) -> None:
        """Slide every slab to the lowest addresses (``last`` at the end), leaving one hole after them — what
        ``grow`` does when no hole is large enough but the free slots are; moved slabs' tokens count as copied."""
        order = sorted((s for s in self._slabs if s != last), key=lambda s: self._slabs[s][0])
        position = 0
        for seq in [*order, *([last] if last is not None else [])]:
            start, size = self._slabs[seq]
            if start != position:
                self.copied_tokens += self.tokens_of(seq)
                self._slabs[seq] = [position, size]
            position += size
        self._holes = [[position, self.capacity - position]] if position < self.capacity else []

    def _resize(self, seq: int, needed: int, pending: int = 0) -> None:
        """Reallocate ``seq``'s slab to hold ``needed`` tokens, doubling it unless that would leave fewer free
        slots than ``pending`` (growth other sequences still need now): in place if the next hole allows, else
        moved to a hole with its tokens copied, else — when no hole is large enough but the free slots are —
        after compacting the pool (``seq`` last)."""
        start, size = self._slabs[seq]
        new_size = self._grown_size(size, needed)
        if new_size - size + pending > self._free_slots():
            new_size = needed
        if new_size - size > self._free_slots():
            raise MemoryError(f"no room to grow sequence {seq} to {needed} slots")
        holes = self._holes
        i = bisect.bisect_left(holes, [start + size, 0])
        if i < len(holes) and holes[i][0] == start + size and holes[i][1] >= new_size - size:
            _carve(holes, i, new_size - size)
        elif (index := _find_hole(holes, new_size, self.placement)) >= 0:
            new_start = _carve(holes, index, new_size)
            self._release(start, size)
            self.copied_tokens += self.tokens_of(seq)
            start = new_start
        else:
            self._compact(last=seq)
            start = self._slabs[seq][0]
            _carve(self._holes, 0, new_size - size)
        self._slabs[seq] = [start, new_size]
        self._allocated += new_size - size

    def _growth_needed(self, requests: list[tuple[int, int]]) -> int:
        """Slots the resizes ``(seq, needed)`` take at the least."""
        return sum(needed - self._slabs[seq][1] for seq, needed in requests)

    # --- growing sequences: which slabs are full --------------------------------------------------------------
    def _push_full_at(self, seq: int) -> None:
        heapq.heappush(self._full_at, (self._slabs[seq][1] - self._base[seq], seq))

    def _first_full_at(self) -> int | None:
        """The clock value at which the first growing sequence's slab is full."""
        heap = self._full_at
        while heap:
            at, seq = heap[0]
            if seq in self._base and self._slabs[seq][1] - self._base[seq] == at:
                return at
            heapq.heappop(heap)
        return None

    def _full_growing(self) -> list[tuple[int, int]]:
        """Growing sequences whose slab is full, with the tokens they need for one more step."""
        full = []
        while (at := self._first_full_at()) is not None and at <= self._clock:
            _, seq = heapq.heappop(self._full_at)
            full.append((seq, self._base[seq] + self._clock + 1))
        for seq, _ in full:  # the query must not change the heap
            self._push_full_at(seq)
        return full

    # --- the contract -------------------------------------------------------------------------------------------
    def can_allocate(self, tokens: int, reserve_growth: bool = False, *, final_tokens: int | None = None,
                     prefix=None) -> bool:
        size = self._slab_size(tokens, final_tokens)
        if self.reserve == "grow":  # placement can always compact: only the count of free slots matters
            pending = self._growth_needed(self._full_growing()) if reserve_growth else 0
            return size + pending <= self._free_slots()
        return size <= self._largest_hole()

    def can_append(self, seq: int, n: int, reserve_growth: bool = False) -> bool:
        needed = self._static[seq] + n
        extra = max(0, needed - self._slabs[seq][1])
        if self.reserve != "grow":
            return extra == 0
        pending = self._growth_needed(self._full_growing()) if reserve_growth else 0
        return extra + pending <= self._free_slots()

    def can_ever_fit(self, tokens: int) -> bool:
        return self._slab_size(tokens, tokens) <= self.capacity

    def allocate(self, seq: int, tokens: int, *, final_tokens: int | None = None, prefix=None) -> int:
        if seq in self._slabs:
            raise ValueError(f"sequence {seq} already holds a slab")
        self._place(seq, self._slab_size(tokens, final_tokens))
        self._static[seq] = tokens
        self._static_tokens += tokens
        return 0

    def append(self, seq: int, n: int) -> None:
        needed = self._static[seq] + n
        if needed > self._slabs[seq][1]:
            if self.reserve != "grow":
                raise MemoryError(f"sequence {seq} outgrows its reserved slab of {self._slabs[seq][1]} slots")
            self._resize(seq, needed, pending=self._growth_needed(self._full_growing()))
        self._static[seq] = needed
        self._static_tokens += n

    def start_growing(self, seq: int) -> None:
        self._move_to_growing(seq)
        self._push_full_at(seq)

    def prepare_growth(self) -> bool:
        full = self._full_growing()
        if full and self.reserve != "grow":
            raise MemoryError(f"{len(full)} decoding sequences fill their reserved slabs")
        pending = self._growth_needed(full)
        for seq, needed in full:
            pending -= needed - self._slabs[seq][1]
            self._resize(seq, needed, pending)
            self._push_full_at(seq)
        return bool(full)

    def can_grow_one(self) -> bool:
        full = self._full_growing()
        return not full or (self.reserve == "grow" and self._growth_needed(full) <= self._free_slots())

    def max_grow(self, limit: int) -> int:
        at = self._first_full_at()
        return limit if at is None else max(0, min(limit, at - self._clock))

    def grow(self, n: int) -> None:
        if n > self.max_grow(n):
            raise MemoryError(f"growing by {n} overflows a slab")
        self._clock += n

    def free(self, seq: int) -> None:
        if seq in self._static:
            self._static_tokens -= self._static.pop(seq)
        else:
            self._base_sum -= self._base.pop(seq)
        start, size = self._slabs.pop(seq)
        self._allocated -= size
        self._release(start, size)

    @property
    def free_blocks(self) -> int:
        return (self.capacity - self._allocated) // self.block_size

    def breakdown(self) -> MemoryBreakdown:
        """Real KV, reserved-but-empty slab space, free space outside the largest hole (unusable for any slab
        larger than the next hole), and the largest hole."""
        real = self.used_tokens
        free = self.capacity - self._allocated
        largest = self._largest_hole()
        return MemoryBreakdown(real, self._allocated - real, free - largest, 0, largest)

    def slabs(self) -> list[tuple[int, int]]:
        """``(start, size)`` of every slab (for invariant checks)."""
        return sorted((start, size) for start, size in self._slabs.values())

    def holes(self) -> list[tuple[int, int]]:
        return [(start, length) for start, length in self._holes]
