"""The contract every KV-cache allocator keeps.

Schedulers never do block arithmetic: they ask the allocator. Sequences are identified by an integer id; the
allocator tracks how many tokens of KV each holds.

- ``can_allocate(tokens)``: would a new sequence of ``tokens`` fit now?
- ``allocate(seq, tokens)`` / ``free(seq)``: admit / release a sequence.
- ``append(seq, n)``: the sequence's KV grows by ``n`` tokens (caller checked it fits).
- ``max_appends(seqs, limit)``: the largest n ≤ limit such that every listed sequence can grow by n tokens now.
  This is how the engine learns how many decode iterations can run before memory forces the batch to change.
- ``tokens_of(seq)``: KV tokens the sequence holds.
- ``can_ever_fit(tokens)``: could a sequence of ``tokens`` fit in an empty pool?
- ``used_tokens`` / ``used_blocks`` / ``capacity_tokens`` / ``num_blocks``: occupancy for metrics.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from simulator.registry import Registry


class KVAllocator(ABC):
    num_blocks: int
    block_size: int

    @abstractmethod
    def can_allocate(self, tokens: int) -> bool: ...

    @abstractmethod
    def allocate(self, seq: int, tokens: int) -> None: ...

    @abstractmethod
    def append(self, seq: int, n: int = 1) -> None: ...

    @abstractmethod
    def free(self, seq: int) -> None: ...

    @abstractmethod
    def tokens_of(self, seq: int) -> int:
        """KV tokens the sequence holds."""

    @abstractmethod
    def max_appends(self, seqs: Sequence[int], limit: int) -> int: ...

    @abstractmethod
    def can_ever_fit(self, tokens: int) -> bool: ...

    @property
    @abstractmethod
    def used_tokens(self) -> int: ...

    @property
    @abstractmethod
    def used_blocks(self) -> int: ...

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size


KV_ALLOCATORS: Registry[KVAllocator] = Registry("kv_cache")
