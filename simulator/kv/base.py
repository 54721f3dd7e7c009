"""The contract every KV-cache allocator keeps.

Schedulers never do block arithmetic: they ask the allocator. Sequences are identified by an integer id and are in
one of two groups:

- *static*: the sequence's KV changes only when told — ``allocate(seq, tokens)`` admits it, ``append(seq, n)`` grows
  it (a prompt chunk);
- *growing*: the decoding sequences. ``start_growing(seq)`` moves a sequence there; ``grow(n)`` grows **every**
  growing sequence by n tokens at once (n decode steps). Allocators implement this lazily, so a run of decode steps
  costs the same whatever the batch size.

A new sequence is placed by ``allocate(seq, tokens, final_tokens=..., prefix=...)``: ``final_tokens`` is the KV it
will hold when it finishes (what a contiguous allocator may reserve up front), ``prefix`` the request's
:class:`~simulator.request.Prefix` content identity (what a prefix cache matches); ``allocate`` returns the tokens
found already cached (0 without a prefix cache). ``cached_prefix_tokens(prefix, tokens)`` asks the same without
taking anything, so a scheduler charges prefill only for uncached tokens. Before a decode step,
``prepare_growth()`` lets an allocator make room for one more token of every decoding sequence (a contiguous
allocator that reallocates slabs does it there); ``copied_tokens`` counts KV tokens copied by such moves.

``release(seq, n)`` gives back a static sequence's last n tokens (speculative decoding's rejected drafts; block pools
only). Queries: ``can_allocate(tokens)`` / ``can_append(seq, n)`` (would it fit now? optionally keeping room for one
growth step of every decoding sequence, for iterations that mix prompt chunks with decodes), ``max_grow(limit)``
(the largest n ≤ limit such that every growing sequence can grow by n now — how the engine learns how many decode
steps can run before memory forces the batch to change), ``can_grow_one()`` (the common case of that),
``can_ever_fit(tokens)`` (in an empty pool?), ``tokens_of(seq)``, ``used_tokens``, ``growing_tokens``,
``num_growing``, ``used_blocks`` and ``free_blocks``. ``free(seq)`` releases either kind. ``breakdown()`` says where
the pool's slots are (:class:`MemoryBreakdown`); ``memory_state()`` is its cheap affine summary for time integrals.

Block arithmetic that a scheduler's admission rules need is declared here too, so every scheduler runs with every
allocator: ``blocks_for(tokens)`` (the blocks of one sequence of that many tokens), ``blocks_to_extend(tokens, n)``
(the blocks such a sequence takes to hold n more: speculative decoding's drafted tokens), ``fits_commitment(
committed, tokens)`` (``guaranteed_no_evict``: whether a sequence that ends with ``tokens`` fits the whole pool
beside ``committed`` blocks), with ``num_blocks``, ``block_size`` and ``free_blocks`` (the watermark).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from simulator.kv.tiers import KVTiers
from simulator.registry import Registry


class MemoryBreakdown(NamedTuple):
    """Where the pool's token slots are at one instant; the five parts sum to the capacity.

    ``real``: slots holding KV of a running sequence (a shared prefix block counted once); ``internal``: slots
    claimed by a sequence but empty (the unused tail of its last block, or of its reserved slab); ``external``:
    free slots no allocation can use whole (outside the largest hole of a contiguous pool); ``cached``:
    unreferenced prefix-cache blocks, evictable; ``free``: the rest. Counts of slots (ints) at an instant; slot-seconds
    (floats) as the integral over time that :meth:`KVAllocator.breakdown_integral` returns."""

    real: float
    internal: float
    external: float
    cached: float
    free: float


class KVAllocator(ABC):
    num_blocks: int
    block_size: int
    if TYPE_CHECKING:  # declared for the type checker only: at run time an allocator sets these its own way
        def __init__(self, num_blocks: int, block_size: int) -> None:
            """What the default :meth:`from_config` builds an allocator with (a wrapper may take other arguments)."""

        @property
        @abstractmethod
        def free_blocks(self) -> int:
            """Blocks an allocation may take now (an attribute or a property)."""

        @property
        def copied_tokens(self) -> int:
            """KV tokens copied by moves that make room (contiguous slabs); 0 by default."""
    else:
        copied_tokens = 0
    tiers: KVTiers | None = None  # the tiers below HBM, where an allocator keeps them (simulator.kv.tiers)

    @classmethod
    def from_config(cls, config, num_blocks: int, block_size: int, max_model_len: int) -> KVAllocator:
        """Build from the ``kv_cache`` config section (a user's allocator may override)."""
        return cls(num_blocks, block_size)

    @abstractmethod
    def can_allocate(
        self, tokens: int, reserve_growth: bool = False, *, final_tokens: int | None = None, prefix=None
    ) -> bool:
        """Would a new sequence of ``tokens`` fit now (leaving room to grow every growing sequence by one)?"""

    @abstractmethod
    def can_append(self, seq: int, n: int, reserve_growth: bool = False) -> bool:
        """Could a static sequence take ``n`` more tokens now (leaving room for one growth step)?"""

    @abstractmethod
    def can_ever_fit(self, tokens: int) -> bool: ...

    @abstractmethod
    def allocate(self, seq: int, tokens: int, *, final_tokens: int | None = None, prefix=None) -> int:
        """Give ``seq`` KV for ``tokens``; return how many of them were found in the prefix cache."""

    def cached_prefix_tokens(self, prefix, tokens: int) -> int:
        """Tokens at the start of a ``tokens``-long prompt that the prefix cache holds now."""
        return 0

    def prepare_growth(self) -> bool:
        """Make room for one more token of every growing sequence (after ``can_grow_one()`` said it can); return
        whether the free space changed shape (then a waiting request may fit where it did not). Block pools need
        nothing, so the default does nothing."""
        return False

    @abstractmethod
    def append(self, seq: int, n: int) -> None: ...

    def release(self, seq: int, n: int) -> None:
        """Give back the KV of a static sequence's last ``n`` tokens, the blocks left empty returning to the pool:
        speculative decoding reserves (``append``) the k + 1 positions a verification writes and releases those of
        the drafts it rejected. Only block pools can (the paged allocator); speculation needs one."""
        raise NotImplementedError(f"{type(self).__name__} cannot release a sequence's last tokens")

    @abstractmethod
    def start_growing(self, seq: int) -> None: ...

    @abstractmethod
    def grow(self, n: int) -> None: ...

    @abstractmethod
    def max_grow(self, limit: int) -> int: ...

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold one sequence of ``tokens`` tokens: ceil(tokens / block_size)."""
        return -(-tokens // self.block_size)

    def blocks_to_extend(self, tokens: int, n: int) -> int:
        """Blocks a sequence holding ``tokens`` tokens takes to hold ``n`` more: blocks_for(tokens + n) −
        blocks_for(tokens)."""
        bs = self.block_size
        return (-tokens // bs) - (-(tokens + n) // bs)  # ceil((tokens + n) / bs) − ceil(tokens / bs)

    def fits_commitment(self, committed_blocks: int, tokens: int) -> bool:
        """Whether a sequence that will hold ``tokens`` tokens at its end fits the whole pool beside
        ``committed_blocks`` blocks promised to others (``guaranteed_no_evict`` admission)."""
        return committed_blocks + -(-tokens // self.block_size) <= self.num_blocks

    def free_blocks_after_growth(self, n: int) -> int:
        """Free blocks once every growing sequence has taken ``n`` more tokens (allocators that reserve a
        sequence's room up front: unchanged)."""
        return self.free_blocks

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

    @abstractmethod
    def breakdown(self) -> MemoryBreakdown: ...

    def memory_state(self) -> tuple[float, ...]:
        """A few numbers of which every part of :meth:`breakdown` is an affine function, cheaper to take than the
        breakdown: the engine integrates them over time at every run boundary, and :meth:`breakdown_integral` maps
        the integrals back. By default, the breakdown itself."""
        return self.breakdown()

    def breakdown_integral(self, state_seconds: Sequence[float], seconds: float) -> MemoryBreakdown:
        """∫ breakdown dt over ``seconds`` of time, from ∫ :meth:`memory_state` dt over the same time."""
        return MemoryBreakdown(*state_seconds)

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self.free_blocks

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size


class LazyGrowth:
    """Token bookkeeping shared by allocators that grow decoding sequences lazily: a static sequence's tokens are in
    ``_static`` (summed in ``_static_tokens``); a growing one stores ``_base[seq] = tokens − _clock`` (summed in
    ``_base_sum``), so growing every one by n is ``_clock += n``."""

    __slots__ = ()
    _static: dict[int, int]
    _static_tokens: int
    _base: dict[int, int]
    _base_sum: int
    _clock: int

    def tokens_of(self, seq: int) -> int:
        if seq in self._static:
            return self._static[seq]
        return self._base[seq] + self._clock

    def _move_to_growing(self, seq: int) -> int:
        """Move a static sequence to the growing set; returns its base (tokens − clock)."""
        tokens = self._static.pop(seq)
        self._static_tokens -= tokens  # type: ignore[misc]  # the slots are the concrete allocator's (mixin)
        base = tokens - self._clock
        self._base[seq] = base
        self._base_sum += base  # type: ignore[misc]  # likewise
        return base

    @property
    def used_tokens(self) -> int:
        return self._static_tokens + self._base_sum + len(self._base) * self._clock

    @property
    def growing_tokens(self) -> int:
        return self._base_sum + len(self._base) * self._clock

    @property
    def num_growing(self) -> int:
        return len(self._base)


KV_ALLOCATORS: Registry[KVAllocator] = Registry("kv_cache")
