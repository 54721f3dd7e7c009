"""Automatic prefix caching on the paged allocator (vLLM's ``enable_prefix_caching``).

A full block inside a request's :class:`~simulator.request.Prefix` is identified by a key that determines its whole
content chain (see ``Prefix.block_keys``). Cached blocks are reference-counted: a new sequence whose leading
blocks are cached shares them (its prefill is charged only for the rest; at least its last prompt token is
always computed), and registers its own prefix blocks so later sequences can share them. When nobody references a
cached block it stays cached, evictable, in LRU order (a finished sequence's blocks enter tail-first, so its prefix
head is evicted last); allocations evict the least recently used ones when the truly free blocks run out.

``free_blocks`` counts free *and* evictable blocks — what an allocation may take — so the growth arithmetic of
:class:`PagedAllocator` applies unchanged; ``breakdown().cached`` reports the evictable part.

Simplification: a block becomes shareable when its sequence is admitted, not when its prefill finishes, so two
requests of one group admitted in the same iteration share it (vLLM would compute it twice).
"""

from __future__ import annotations

from collections import OrderedDict

from simulator.kv.base import KVAllocator, MemoryBreakdown
from simulator.kv.paged import PagedAllocator
from simulator.request import Prefix


class PrefixCachingAllocator(PagedAllocator):
    __slots__ = ("_extra_refs", "_lru", "_prefix", "_refs", "_shared", "hit_tokens")

    def __init__(self, num_blocks: int, block_size: int) -> None:
        super().__init__(num_blocks, block_size)
        self._refs: dict[tuple[int, int], int] = {}  # referenced cached block -> sequences sharing it
        self._lru: OrderedDict[tuple[int, int], None] = OrderedDict()  # unreferenced cached blocks, oldest first
        self._shared: dict[int, list[tuple[int, int]]] = {}  # seq -> keys of the cached blocks it references
        self._prefix: dict[int, Prefix] = {}
        self._extra_refs = 0  # Σ (references − 1) over referenced cached blocks: blocks counted by two sequences
        self.hit_tokens = 0  # prompt tokens served from the cache

    def _hits(self, prefix: Prefix | None, tokens: int) -> list[tuple[int, int]]:
        """The cached leading blocks of a ``tokens``-token prompt (leaving at least one token to compute)."""
        if prefix is None:
            return []
        hits = []
        for key in prefix.block_keys(self.block_size, tokens - 1):
            if key not in self._refs and key not in self._lru:
                break
            hits.append(key)
        return hits

    def cached_prefix_tokens(self, prefix, tokens: int) -> int:
        return len(self._hits(prefix, tokens)) * self.block_size

    def _blocks_taken(self, tokens: int, hits: list[tuple[int, int]]) -> int:
        """Available blocks an allocation consumes: new blocks plus cached ones it takes out of the LRU."""
        referenced = sum(1 for key in hits if key in self._refs)
        return self.blocks_for(tokens) - referenced

    def can_allocate(
        self, tokens: int, reserve_growth: bool = False, *, final_tokens: int | None = None, prefix=None
    ) -> bool:
        needed = self._blocks_taken(tokens, self._hits(prefix, tokens))
        return needed <= self.free_blocks - self._growth_reserve(reserve_growth)

    def _evict(self) -> None:
        """Evict least recently used cached blocks until the free ones cover the shortfall."""
        lru = self._lru
        while len(lru) > self.free_blocks:
            lru.popitem(last=False)

    def _register(self, seq: int, start_tokens: int, end_tokens: int) -> None:
        """Make the sequence's full prefix blocks in [start, end) tokens shareable (unless cached already)."""
        prefix = self._prefix.get(seq)
        if prefix is None:
            return
        shared, refs, lru = self._shared[seq], self._refs, self._lru
        for key in prefix.block_keys(self.block_size, end_tokens)[start_tokens // self.block_size:]:
            if key not in refs and key not in lru:
                refs[key] = 1
                shared.append(key)

    def allocate(self, seq: int, tokens: int, *, final_tokens: int | None = None, prefix=None) -> int:
        hits = self._hits(prefix, tokens)
        needed = self._blocks_taken(tokens, hits)
        if needed > self.free_blocks:
            raise MemoryError(f"sequence {seq} needs {needed} blocks, {self.free_blocks} free")
        # the base class takes blocks_for(tokens) blocks; hits referenced by others are not taken from the pool
        self.free_blocks += self.blocks_for(tokens) - needed
        super().allocate(seq, tokens)
        refs, lru = self._refs, self._lru
        for key in hits:
            if key in refs:
                refs[key] += 1
                self._extra_refs += 1
            else:
                del lru[key]  # an evictable block becomes referenced: counted in ``needed``
                refs[key] = 1
        self._shared[seq] = list(hits)
        if prefix is not None:
            self._prefix[seq] = prefix
            self._register(seq, len(hits) * self.block_size, tokens)
        self._evict()
        cached = len(hits) * self.block_size
        self.hit_tokens += cached
        return cached

    def append(self, seq: int, n: int) -> None:
        old = self._static[seq]
        super().append(seq, n)
        self._register(seq, old, old + n)
        self._evict()

    def grow(self, n: int) -> None:
        super().grow(n)
        self._evict()

    def free(self, seq: int) -> None:
        shared = self._shared.pop(seq)
        self._prefix.pop(seq, None)
        super().free(seq)  # returns every block of the sequence...
        self.free_blocks -= len(shared)  # ...but the shared ones go back only when nobody references them
        refs, lru = self._refs, self._lru
        for key in reversed(shared):
            if refs[key] == 1:
                del refs[key]
                lru[key] = None
                self.free_blocks += 1
            else:
                refs[key] -= 1
                self._extra_refs -= 1

    # the paged allocator's compact memory state does not see cached blocks: integrate the breakdown itself
    memory_state = KVAllocator.memory_state
    breakdown_integral = KVAllocator.breakdown_integral

    def breakdown(self) -> MemoryBreakdown:
        """As for the paged allocator, with a shared block counted once per sequence holding it when finding the
        empty slots, and once in the memory it occupies."""
        bs, cached, used = self.block_size, len(self._lru), self.used_blocks
        internal = bs * (used + self._extra_refs) - self.used_tokens
        return MemoryBreakdown(bs * used - internal, internal, 0, cached * bs, (self.free_blocks - cached) * bs)
