"""PagedAttention-style allocator: a pool of fixed-size blocks, blocks appended on demand.

A sequence of L tokens holds ceil(L / bs) blocks (bs = block size), so at most one partially filled block each.

Growing sequences are tracked lazily: a clock counts the tokens every growing sequence has gained, and each one
stores ``base = tokens − clock``. Only the histogram of ``base mod bs`` matters for block counts: a sequence's
*slack* (free slots in its last block) is ``(−(base + clock)) mod bs``, and growing it by n tokens takes
ceil(max(0, n − slack) / bs) new blocks. Writing n = q·bs + m (0 ≤ m < bs), that is q + [m > slack], so all growing
sequences together need

    extra(n) = G·q + C[m],   C[m] = number of growing sequences with slack < m,   G = number growing,

which gives ``grow`` and ``max_grow`` in O(bs) operations whatever the number of sequences.
"""

from __future__ import annotations

from simulator.kv.base import KV_ALLOCATORS, KVAllocator, LazyGrowth, MemoryBreakdown


@KV_ALLOCATORS.register("paged")
class PagedAllocator(LazyGrowth, KVAllocator):
    __slots__ = (
        "_base", "_base_sum", "_clock", "_residues", "_static", "_static_tokens", "block_size", "free_blocks",
        "num_blocks",
    )

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
            from simulator.kv.prefix_cache import PrefixCachingAllocator  # a subclass: imported late

            return PrefixCachingAllocator(num_blocks, block_size)
        return cls(num_blocks, block_size)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

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

    def memory_state(self) -> tuple[int, int]:
        """(tokens held, blocks held)."""
        return (self._static_tokens + self._base_sum + len(self._base) * self._clock,  # used_tokens, inlined
                self.num_blocks - self.free_blocks)

    def breakdown_integral(self, state_seconds: list[float], seconds: float) -> MemoryBreakdown:
        tokens, blocks = state_seconds
        bs = self.block_size
        return MemoryBreakdown(tokens, bs * blocks - tokens, 0, 0, bs * (self.num_blocks * seconds - blocks))
