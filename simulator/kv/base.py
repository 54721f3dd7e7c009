"""The contract every KV-cache allocator keeps.

Schedulers never do block arithmetic: they ask the allocator. Sequences are identified by an integer id and are in
one of two groups:

- *static*: the sequence's KV changes only when told — ``allocate(seq, tokens)`` admits it, ``append(seq, n)`` grows
  it (a prompt chunk);
- *growing*: the decoding sequences. ``start_growing(seq)`` moves a sequence there; ``grow(n)`` grows **every**
  growing sequence by n tokens at once (n decode steps). Allocators implement this lazily, so a run of decode steps
  costs the same whatever the batch size.

Queries: ``can_allocate(tokens)`` / ``can_append(seq, n)`` (would it fit now? optionally keeping room for one
growth step of every decoding sequence, for iterations that mix prompt chunks with decodes), ``max_grow(limit)``
(the largest n ≤ limit such that every growing sequence can grow by n now — how the engine learns how many decode
steps can run before memory forces the batch to change), ``can_grow_one()`` (the common case of that),
``can_ever_fit(tokens)`` (in an empty pool?), ``tokens_of(seq)``, ``used_tokens``, ``growing_tokens``,
``num_growing``, ``used_blocks`` and ``free_blocks``. ``free(seq)`` releases either kind.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from simulator.registry import Registry


class KVAllocator(ABC):
    num_blocks: int
    block_size: int
    free_blocks: int

    @abstractmethod
    def can_allocate(self, tokens: int, reserve_growth: bool = False) -> bool:
        """Would a new sequence of ``tokens`` fit now (leaving room to grow every growing sequence by one)?"""

    @abstractmethod
    def can_append(self, seq: int, n: int, reserve_growth: bool = False) -> bool:
        """Could a static sequence take ``n`` more tokens now (leaving room for one growth step)?"""

    @abstractmethod
    def can_ever_fit(self, tokens: int) -> bool: ...

    @abstractmethod
    def allocate(self, seq: int, tokens: int) -> None: ...

    @abstractmethod
    def append(self, seq: int, n: int) -> None: ...

    @abstractmethod
    def start_growing(self, seq: int) -> None: ...

    @abstractmethod
    def grow(self, n: int) -> None: ...

    @abstractmethod
    def max_grow(self, limit: int) -> int: ...

    def can_grow_one(self) -> bool:
        """Whether every growing sequence can take one more token now."""
        return self.max_grow(1) == 1

    @abstractmethod
    def free(self, seq: int) -> None: ...

    @abstractmethod
    def tokens_of(self, seq: int) -> int: ...

    @property
    @abstractmethod
    def used_tokens(self) -> int: ...

    @property
    @abstractmethod
    def growing_tokens(self) -> int: ...

    @property
    @abstractmethod
    def num_growing(self) -> int: ...

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self.free_blocks

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size


KV_ALLOCATORS: Registry[KVAllocator] = Registry("kv_cache")
