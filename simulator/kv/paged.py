"""PagedAttention-style allocator: a pool of fixed-size blocks, blocks appended on demand.

A sequence of L tokens holds ceil(L / bs) blocks (bs = block size), so at most one partially filled block each.

Growing sequences are tracked lazily: a clock counts the tokens every growing sequence has gained, and each one
stores ``base = tokens − clock``. Only the histogram of ``base mod bs`` matters for block counts: a sequence's
*slack* (free slots in its last block) is ``(−(base + clock)) mod bs``, and growing it by n tokens takes
ceil(max(0, n − slack) / bs) new blocks. Writing n = q·bs + m (0 ≤ m < bs), that is q + [m > slack], so all growing
sequences together need

    extra(n) = G·q + C[m],   C[m] = number of growing sequences with slack < m,   G = number growing,

which gives ``grow`` and ``max_grow`` in O(bs) operations whatever the number of sequences.

Automatic prefix caching (vLLM's ``enable_prefix_caching``; ``kv_cache.prefix_caching``) is
:class:`PrefixCachingAllocator`, a :class:`PagedAllocator` whose blocks can be shared; ``from_config`` picks it.

A full block inside a request's :class:`~simulator.request.Prefix` is identified by a key that determines its whole
content chain (see ``Prefix.block_keys``). Cached blocks are reference-counted: a new sequence whose leading
blocks are cached shares them (its prefill is charged only for the rest; at least its last prompt token is
always computed), and registers its own prefix blocks so later sequences can share them. When nobody references a
cached block it stays cached, evictable, in LRU order (a finished sequence's blocks enter tail-first, so its prefix
head is evicted last); allocations evict the least recently used ones when the truly free blocks run out.

With ``kv_cache.offload`` it is :class:`TieredPrefixCachingAllocator`: a prompt's run of cached blocks continues in
the tiers below HBM (:mod:`simulator.kv.tiers`), whose blocks are loaded back instead of computed.

``free_blocks`` counts free *and* evictable blocks — what an allocation may take — so the growth arithmetic of
:class:`PagedAllocator` applies unchanged; ``breakdown().cached`` reports the evictable part.

Simplification: a block becomes shareable when its sequence is admitted, not when its prefill finishes, so two
requests of one group admitted in the same iteration share it (vLLM would compute it twice).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Literal

from pydantic import model_validator

from simulator.config.engine import KVCacheBase
from simulator.kv.base import KV_ALLOCATORS, KVAllocator, LazyGrowth, MemoryBreakdown
from simulator.kv.tiers import KVTiers, OffloadConfig
from simulator.request import Prefix


class PagedKVConfig(KVCacheBase):
    """PagedAttention-style block pool; ``prefix_caching`` shares cached prompt-prefix blocks (vLLM's APC);
    ``offload`` keeps prefix blocks in tiers below HBM (:mod:`simulator.kv.tiers`)."""

    kind: Literal["paged"] = "paged"
    prefix_caching: bool = False
    offload: OffloadConfig | None = None

    @model_validator(mode="after")
    def _offload_needs_prefix_caching(self) -> PagedKVConfig:
        if self.offload is not None and not self.prefix_caching:
            raise ValueError("offload: needs prefix_caching: true (offloaded blocks are found again by their prefix)")
        return self


@KV_ALLOCATORS.register("paged", config=PagedKVConfig)
class PagedAllocator(LazyGrowth, KVAllocator):
    __slots__ = (
        "_base", "_base_sum", "_clock", "_residues", "_static", "_static_tokens", "block_size", "free_blocks",
        "num_blocks",
    )
    free_blocks: int  # a plain attribute here (the interface declares it read-only)

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_blocks = num_blocks
        self._static: dict[int, int] = {}  # seq -> tokens
        self._static_tokens = 0
        self._base: dict[int, int] = {}  # growing seq -> tokens − clock
        self._base_sum = 0
        self._residues = [0] * block_size  # growing sequences by base mod bs
        self._clock = 0

    @classmethod
    def from_config(cls, config, num_blocks: int, block_size: int, max_model_len: int) -> PagedAllocator:
        if getattr(config, "prefix_caching", False):
            if getattr(config, "offload", None) is not None:
                return TieredPrefixCachingAllocator(num_blocks, block_size)
            return PrefixCachingAllocator(num_blocks, block_size)
        return cls(num_blocks, block_size)

    # --- static sequences -------------------------------------------------------------------------------------
    def _growth_reserve(self, reserve_growth: bool) -> int:
        """Blocks one growth step of every growing sequence needs (those with no slack take one each)."""
        return self._residues[-self._clock % self.block_size] if reserve_growth else 0

    def can_allocate(
        self, tokens: int, reserve_growth: bool = False, *, final_tokens: int | None = None, prefix=None
    ) -> bool:
        free = self.free_blocks - self._growth_reserve(True) if reserve_growth else self.free_blocks
        return -(-tokens // self.block_size) <= free  # blocks_for, inlined: admission checks run per arrival

    def can_append(self, seq: int, n: int, reserve_growth: bool = False) -> bool:
        old = self._static[seq]
        needed = self.blocks_for(old + n) - self.blocks_for(old)
        return needed <= self.free_blocks - self._growth_reserve(reserve_growth)

    def can_ever_fit(self, tokens: int) -> bool:
        return self.blocks_for(tokens) <= self.num_blocks

    def allocate(self, seq: int, tokens: int, *, final_tokens: int | None = None, prefix=None) -> int:
        if seq in self._static or seq in self._base:
            raise ValueError(f"sequence {seq} already holds KV blocks")
        needed = -(-tokens // self.block_size)  # blocks_for, inlined
        if needed > self.free_blocks:
            raise MemoryError(f"sequence {seq} needs {needed} blocks, {self.free_blocks} free")
        self._static[seq] = tokens
        self._static_tokens += tokens
        self.free_blocks -= needed
        return 0

    def append(self, seq: int, n: int) -> None:
        old = self._static[seq]
        needed = self.blocks_for(old + n) - self.blocks_for(old)
        if needed > self.free_blocks:
            raise MemoryError(f"sequence {seq} needs {needed} more blocks, {self.free_blocks} free")
        self._static[seq] = old + n
        self._static_tokens += n
        self.free_blocks -= needed

    def release(self, seq: int, n: int) -> None:
        """A static sequence's last ``n`` tokens (rejected drafts) go back, and the blocks they leave empty."""
        old = self._static[seq]
        self._static[seq] = old - n
        self._static_tokens -= n
        self.free_blocks += self.blocks_for(old) - self.blocks_for(old - n)

    # --- growing sequences ------------------------------------------------------------------------------------
    def start_growing(self, seq: int) -> None:
        self._residues[self._move_to_growing(seq) % self.block_size] += 1

    def _slack_below(self, m: int) -> int:
        """C[m]: growing sequences whose slack is < m. Slack s ↔ residue (−s − clock) mod bs, so slacks 0 … m−1
        are the residues r0, r0−1, … r0−m+1 (cyclically) with r0 = −clock mod bs."""
        bs, residues = self.block_size, self._residues
        end = -self._clock % bs + 1
        start = end - m
        if start >= 0:
            return sum(residues[start:end])
        return sum(residues[:end]) + sum(residues[start + bs :])

    def _extra_blocks(self, n: int) -> int:
        q, m = divmod(n, self.block_size)
        return len(self._base) * q + (self._slack_below(m) if m else 0)

    def free_blocks_after_growth(self, n: int) -> int:
        return self.free_blocks - self._extra_blocks(n)

    def grow(self, n: int) -> None:
        needed = self._extra_blocks(n)
        if needed > self.free_blocks:
            raise MemoryError(f"growing by {n} needs {needed} blocks, {self.free_blocks} free")
        self.free_blocks -= needed
        self._clock += n

    def max_grow(self, limit: int) -> int:
        growing, bs, free = len(self._base), self.block_size, self.free_blocks
        if growing == 0 or limit <= 0:
            return max(limit, 0)
        if growing * -(-limit // bs) <= free:  # even a new block per ceil(limit/bs) steps for everyone fits
            return limit
        best = -1
        for m in range(bs):
            below = self._slack_below(m)
            if below <= free:
                best = max(best, (free - below) // growing * bs + m)
        return min(best, limit)

    def can_grow_one(self) -> bool:
        """Whether every growing sequence can take one more token (those with no slack need a block each)."""
        return self._residues[-self._clock % self.block_size] <= self.free_blocks  # _growth_reserve(True)

    # --- either -----------------------------------------------------------------------------------------------
    def free(self, seq: int) -> None:
        if seq in self._static:
            tokens = self._static.pop(seq)
            self._static_tokens -= tokens
        else:
            base = self._base.pop(seq)
            self._base_sum -= base
            self._residues[base % self.block_size] -= 1
            tokens = base + self._clock
        self.free_blocks += -(-tokens // self.block_size)  # blocks_for, inlined

    def breakdown(self) -> MemoryBreakdown:
        """Each sequence holds ceil(t / bs) blocks for its t tokens, so the blocks held leave
        bs × (blocks held) − (tokens held) slots empty (internal fragmentation)."""
        return self.breakdown_integral(self.memory_state(), 1)

    def memory_state(self) -> tuple[float, ...]:
        """(tokens held, blocks held)."""
        return (self._static_tokens + self._base_sum + len(self._base) * self._clock,  # used_tokens, inlined
                self.num_blocks - self.free_blocks)

    def breakdown_integral(self, state_seconds: Sequence[float], seconds: float) -> MemoryBreakdown:
        tokens, blocks = state_seconds
        bs = self.block_size
        return MemoryBreakdown(tokens, bs * blocks - tokens, 0, 0, bs * (self.num_blocks * seconds - blocks))


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
        return self._cached_run(prefix.block_keys(self.block_size, tokens - 1)) if prefix is not None else []

    def _cached_run(self, keys: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The leading ``keys`` HBM's cache holds."""
        hits = []
        for key in keys:
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
        self._unreference(shared)  # ...but the shared ones go back only when nobody references them

    def release(self, seq: int, n: int) -> None:
        """As the paged allocator's; a shared or registered prefix block the released tokens leave entirely (a
        prefix that runs past the prompt, as a Mooncake trace's last hash block does) is given up as :meth:`free`
        gives up a sequence's (a block they leave partly filled stays the sequence's, registered)."""
        super().release(seq, n)
        shared = self._shared[seq]
        held = self.blocks_for(self._static[seq])
        if len(shared) > held:
            self._unreference(shared[held:])
            del shared[held:]

    def _unreference(self, keys: list[tuple[int, int]]) -> None:
        """A sequence's references to the cached blocks ``keys``, whose slots were just counted free, dropped (last
        first): a block nobody else references stays cached, evictable; one that others do stays taken."""
        self.free_blocks -= len(keys)
        refs, lru = self._refs, self._lru
        for key in reversed(keys):
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


class TieredPrefixCachingAllocator(PrefixCachingAllocator):
    """A prefix cache whose blocks also live in tiers below HBM (:mod:`simulator.kv.tiers`): the pool's builder
    sets ``tiers`` before use. HBM's evictions (``policy: evicted``) or registrations (``all``) are written down;
    a prompt's cached run continues in the tiers, whose blocks are loaded (counted in ``hit_tokens`` and
    ``tier_hit_tokens``) and then held in HBM as computed ones are."""

    __slots__ = ("tier_hit_tokens", "tiers")
    tiers: KVTiers  # type: ignore[assignment]  # set by the pool's builder before the first allocation

    def __init__(self, num_blocks: int, block_size: int) -> None:
        super().__init__(num_blocks, block_size)
        self.tier_hit_tokens = 0  # prompt tokens loaded from the tiers

    def cached_prefix_tokens(self, prefix, tokens: int) -> int:
        if prefix is None:
            return 0
        keys = prefix.block_keys(self.block_size, tokens - 1)
        hits = len(self._cached_run(keys))
        return (hits + self.tiers.run_length(keys, hits)) * self.block_size

    def allocate(self, seq: int, tokens: int, *, final_tokens: int | None = None, prefix=None) -> int:
        loaded = 0
        if prefix is not None:  # load first, so that the writes the allocation causes cannot move the run away
            keys = prefix.block_keys(self.block_size, tokens - 1)
            first = len(self._cached_run(keys))
            loaded = self.tiers.run_length(keys, first)
            if loaded:
                self.tiers.load(keys[first:first + loaded])
                self.tier_hit_tokens += loaded * self.block_size
                self.hit_tokens += loaded * self.block_size
        return super().allocate(seq, tokens, final_tokens=final_tokens, prefix=prefix) + loaded * self.block_size

    def _register(self, seq: int, start_tokens: int, end_tokens: int) -> None:
        shared = self._shared[seq]
        before = len(shared)
        super()._register(seq, start_tokens, end_tokens)
        if self.tiers.policy == "all" and len(shared) > before:
            self.tiers.write(shared[before:])

    def _evict(self) -> None:
        lru = self._lru
        if len(lru) <= self.free_blocks:
            return
        evicted = []
        while len(lru) > self.free_blocks:
            evicted.append(lru.popitem(last=False)[0])
        if self.tiers.policy == "evicted":
            self.tiers.write(evicted)
