"""PagedAttention-style allocator: a pool of fixed-size blocks, blocks appended on demand.

A sequence of L tokens holds ceil(L / block_size) blocks, so at most one partially filled block per sequence.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simulator.kv.base import KV_ALLOCATORS, KVAllocator


@KV_ALLOCATORS.register("paged")
class PagedAllocator(KVAllocator):
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_blocks = num_blocks
        self._tokens: dict[int, int] = {}
        self._used_tokens = 0

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def can_allocate(self, tokens: int) -> bool:
        return self.blocks_for(tokens) <= self.free_blocks

    def can_ever_fit(self, tokens: int) -> bool:
        return self.blocks_for(tokens) <= self.num_blocks

    def allocate(self, seq: int, tokens: int) -> None:
        if seq in self._tokens:
            raise ValueError(f"sequence {seq} already holds KV blocks")
        needed = self.blocks_for(tokens)
        if needed > self.free_blocks:
            raise MemoryError(f"sequence {seq} needs {needed} blocks, {self.free_blocks} free")
        self._tokens[seq] = tokens
        self.free_blocks -= needed
        self._used_tokens += tokens

    def append(self, seq: int, n: int = 1) -> None:
        old = self._tokens[seq]
        needed = self.blocks_for(old + n) - self.blocks_for(old)
        if needed > self.free_blocks:
            raise MemoryError(f"sequence {seq} needs {needed} more blocks, {self.free_blocks} free")
        self._tokens[seq] = old + n
        self.free_blocks -= needed
        self._used_tokens += n

    def free(self, seq: int) -> None:
        tokens = self._tokens.pop(seq)
        self.free_blocks += self.blocks_for(tokens)
        self._used_tokens -= tokens

    def tokens_of(self, seq: int) -> int:
        return self._tokens[seq]

    def max_appends(self, seqs: Sequence[int], limit: int) -> int:
        """Largest n ≤ limit with Σ_i [ceil((L_i + n)/bs) − ceil(L_i/bs)] ≤ free blocks (binary search on n)."""
        if limit <= 0 or not seqs:
            return max(limit, 0)
        bs = self.block_size
        lengths = np.fromiter((self._tokens[s] for s in seqs), dtype=np.int64, count=len(seqs))
        held = -(-lengths // bs)

        def extra_blocks(n: int) -> int:
            return int((-(-(lengths + n) // bs) - held).sum())

        if extra_blocks(limit) <= self.free_blocks:
            return limit
        lo, hi = 0, limit  # extra_blocks(lo) fits, extra_blocks(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if extra_blocks(mid) <= self.free_blocks:
                lo = mid
            else:
                hi = mid
        return lo

    @property
    def used_tokens(self) -> int:
        return self._used_tokens

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self.free_blocks
