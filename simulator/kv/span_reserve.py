"""KV of layers that keep a bounded span (sliding windows, local-attention chunks) in the same pool.

The pool's token slots are sized by the layers whose KV grows with the context (``KVBudget.kv_bytes_per_token``).
A sequence also holds, in each bounded-span group g of span W_g and e_g bytes per token, at most W_g tokens — the
blocks that leave the window are freed, as vLLM's hybrid KV-cache manager does. :class:`SpanReserve` wraps an
allocator and gives every sequence, besides its tokens, a reserve of

    R(final) = ceil(Σ_g e_g · min(final, W_g) / e)      slots (e = the growing layers' bytes per token)

for its whole life, ``final`` being the tokens it holds when it finishes: the span layers' KV once it is full
(exact from the moment the sequence reaches min(final, W_g) tokens; before that the reserve is already held, the
way a contiguous allocator reserves a request's room). The wrapped allocator sees tokens + R; schedulers see the
sequence's own tokens (``tokens_of``, ``growing_tokens``); the memory breakdown counts the reserves as real KV.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from simulator.kv.base import KVAllocator, MemoryBreakdown


def span_reserve(spans, final_tokens: int) -> int:
    """R(final): the slots a sequence finishing with ``final_tokens`` tokens holds for its bounded-span layers
    (``spans`` = [(W_g, e_g / e), ...])."""
    return math.ceil(sum(ratio * min(final_tokens, span) for span, ratio in spans) - 1e-9)


class SpanReserve(KVAllocator):
    """``inner`` with a per-sequence reserve for bounded-span layers: ``spans`` = [(W_g, e_g / e), ...]."""

    def __init__(self, inner: KVAllocator, spans: list[tuple[int, float]]) -> None:
        self.inner = inner
        self.spans = spans
        self.num_blocks, self.block_size = inner.num_blocks, inner.block_size
        self._reserved: dict[int, int] = {}  # seq -> its reserve
        self._growing: set[int] = set()
        self._growing_reserve = 0

    def reserve(self, final_tokens: int) -> int:
        return span_reserve(self.spans, final_tokens)

    def __getattr__(self, name: str):  # allocator-specific extras (hit_tokens, slabs, holes, ...)
        return getattr(self.__dict__["inner"], name)

    @property
    def free_blocks(self) -> int:
        return self.inner.free_blocks

    @property
    def copied_tokens(self) -> int:
        return self.inner.copied_tokens

    @property
    def tiers(self):  # type: ignore[override]  # the wrapped allocator's (a class attribute would hide it)
        return self.inner.tiers

    def can_allocate(self, tokens: int, reserve_growth: bool = False, *, final_tokens: int | None = None,
                     prefix=None) -> bool:
        extra = self.reserve(tokens if final_tokens is None else final_tokens)
        final = None if final_tokens is None else final_tokens + extra
        return self.inner.can_allocate(tokens + extra, reserve_growth, final_tokens=final, prefix=prefix)

    def can_append(self, seq: int, n: int, reserve_growth: bool = False) -> bool:
        return self.inner.can_append(seq, n, reserve_growth)

    def can_ever_fit(self, tokens: int) -> bool:
        return self.inner.can_ever_fit(tokens + self.reserve(tokens))

    def allocate(self, seq: int, tokens: int, *, final_tokens: int | None = None, prefix=None) -> int:
        extra = self.reserve(tokens if final_tokens is None else final_tokens)
        final = None if final_tokens is None else final_tokens + extra
        cached = self.inner.allocate(seq, tokens + extra, final_tokens=final, prefix=prefix)
        self._reserved[seq] = extra
        return cached

    def cached_prefix_tokens(self, prefix, tokens: int) -> int:
        return self.inner.cached_prefix_tokens(prefix, tokens)

    def prepare_growth(self) -> bool:
        return self.inner.prepare_growth()

    def append(self, seq: int, n: int) -> None:
        self.inner.append(seq, n)

    def release(self, seq: int, n: int) -> None:
        self.inner.release(seq, n)

    def start_growing(self, seq: int) -> None:
        self.inner.start_growing(seq)
        self._growing.add(seq)
        self._growing_reserve += self._reserved[seq]

    def grow(self, n: int) -> None:
        self.inner.grow(n)

    def max_grow(self, limit: int) -> int:
        return self.inner.max_grow(limit)

    def free_blocks_after_growth(self, n: int) -> int:
        return self.inner.free_blocks_after_growth(n)

    def can_grow_one(self) -> bool:
        return self.inner.can_grow_one()

    def free(self, seq: int) -> None:
        self.inner.free(seq)
        extra = self._reserved.pop(seq)
        if seq in self._growing:
            self._growing.remove(seq)
            self._growing_reserve -= extra

    def tokens_of(self, seq: int) -> int:
        return self.inner.tokens_of(seq) - self._reserved[seq]

    @property
    def used_tokens(self) -> int:
        return self.inner.used_tokens

    @property
    def growing_tokens(self) -> int:
        return self.inner.growing_tokens - self._growing_reserve

    @property
    def num_growing(self) -> int:
        return self.inner.num_growing

    def breakdown(self) -> MemoryBreakdown:
        return self.inner.breakdown()

    def memory_state(self) -> tuple[float, ...]:
        return self.inner.memory_state()

    def breakdown_integral(self, state_seconds: Sequence[float], seconds: float) -> MemoryBreakdown:
        return self.inner.breakdown_integral(state_seconds, seconds)
