"""Stateful tests of the contiguous allocator and the prefix cache: ownership, conservation, no overlap, no leak."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from simulator.kv import ContiguousAllocator, PrefixCachingAllocator
from simulator.request import Prefix
from tests.helpers import assert_memory_state_integrates_to_breakdown


class ContiguousMachine(RuleBasedStateMachine):
    """Random allocate/append/grow/free against a plain record of who holds how many tokens."""

    CAPACITY_BLOCKS, BS, MAX_LEN = 40, 8, 96
    RESERVE, PLACEMENT = "grow", "first_fit"

    def __init__(self):
        super().__init__()
        self.kv = ContiguousAllocator(
            self.CAPACITY_BLOCKS, self.BS, reserve=self.RESERVE, placement=self.PLACEMENT, max_model_len=self.MAX_LEN
        )
        self.tokens: dict[int, int] = {}
        self.growing: set[int] = set()
        self.next_id = 0

    @rule(tokens=st.integers(1, 60), extra=st.integers(0, 36))
    def allocate(self, tokens, extra):
        final = tokens + extra
        if self.kv.can_allocate(tokens, final_tokens=final):
            self.kv.allocate(self.next_id, tokens, final_tokens=final)
            self.tokens[self.next_id] = tokens
            self.next_id += 1
        else:
            with pytest.raises(MemoryError):
                self.kv.allocate(self.next_id, tokens, final_tokens=final)

    @precondition(lambda self: set(self.tokens) - self.growing)
    @rule(data=st.data(), n=st.integers(1, 30))
    def append(self, data, n):
        seq = data.draw(st.sampled_from(sorted(set(self.tokens) - self.growing)))
        if self.tokens[seq] + n > self.MAX_LEN:
            return
        if self.kv.can_append(seq, n):
            self.kv.append(seq, n)
            self.tokens[seq] += n

    @precondition(lambda self: set(self.tokens) - self.growing)
    @rule(data=st.data())
    def start_growing(self, data):
        seq = data.draw(st.sampled_from(sorted(set(self.tokens) - self.growing)))
        self.kv.start_growing(seq)
        self.growing.add(seq)

    @precondition(lambda self: self.growing)
    @rule(n=st.integers(1, 20))
    def decode(self, n):
        """One scheduled decode step (make room, grow one), then as many more as ``max_grow`` allows."""
        if any(self.tokens[s] >= self.MAX_LEN for s in self.growing) or not self.kv.can_grow_one():
            return
        self.kv.prepare_growth()
        steps = self.kv.max_grow(n)
        assert steps >= 1
        steps = min(steps, min(self.MAX_LEN - self.tokens[s] for s in self.growing))
        self.kv.grow(steps)
        for seq in self.growing:
            self.tokens[seq] += steps

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        self.kv.free(seq)
        del self.tokens[seq]
        self.growing.discard(seq)

    @invariant()
    def slabs_and_holes_tile_the_address_space(self):
        pieces = sorted([*self.kv.slabs(), *self.kv.holes()])
        position = 0
        for start, size in pieces:
            assert start == position and size > 0  # no overlap, no gap
            position += size
        assert position == self.kv.capacity
        holes = self.kv.holes()
        assert all(a[0] + a[1] < b[0] for a, b in itertools.pairwise(holes))  # holes are merged

    @invariant()
    def tokens_fit_their_slabs_and_add_up(self):
        sizes = {seq: size for seq, (_, size) in self.kv._slabs.items()}
        assert set(sizes) == set(self.tokens)
        for seq, tokens in self.tokens.items():
            assert self.kv.tokens_of(seq) == tokens <= sizes[seq]
        parts = self.kv.breakdown()
        assert sum(parts) == self.kv.capacity
        assert parts.real == sum(self.tokens.values())
        assert parts.internal == sum(sizes.values()) - parts.real
        assert_memory_state_integrates_to_breakdown(self.kv)

    def teardown(self):
        for seq in list(self.tokens):
            self.kv.free(seq)
        assert self.kv.holes() == [(0, self.kv.capacity)]


class ContiguousReserveMaxLen(ContiguousMachine):
    RESERVE, PLACEMENT = "max_model_len", "best_fit"


class ContiguousReserveRequested(ContiguousMachine):
    RESERVE = "requested"


for _machine in (ContiguousMachine, ContiguousReserveMaxLen, ContiguousReserveRequested):
    _machine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestContiguousGrow = ContiguousMachine.TestCase
TestContiguousMaxLen = ContiguousReserveMaxLen.TestCase
TestContiguousRequested = ContiguousReserveRequested.TestCase


class PrefixCacheMachine(RuleBasedStateMachine):
    """Sequences with random shared prefixes come and go; blocks are conserved and reference counts exact."""

    BLOCKS, BS = 30, 4

    def __init__(self):
        super().__init__()
        self.kv = PrefixCachingAllocator(self.BLOCKS, self.BS)
        self.tokens: dict[int, int] = {}
        self.appended: dict[int, int] = {}  # tokens appended after the prompt (what speculation may release)
        self.next_id = 0

    @rule(group=st.integers(0, 2), prefix=st.integers(1, 20), tokens=st.integers(1, 30), extra=st.integers(0, 6))
    def allocate(self, group, prefix, tokens, extra):
        key = Prefix((group, prefix), prefix)
        tokens = max(tokens, prefix) + extra
        if not self.kv.can_allocate(tokens, prefix=key):
            return
        expected = self.kv.cached_prefix_tokens(key, tokens)
        assert expected <= tokens - 1 and expected % self.BS == 0
        assert self.kv.allocate(self.next_id, tokens, prefix=key) == expected
        self.tokens[self.next_id] = tokens
        self.next_id += 1

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def grow_or_free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        if data.draw(st.booleans()) and seq in self.kv._static and self.kv.can_append(seq, 3):
            self.kv.append(seq, 3)
            self.tokens[seq] += 3
            self.appended[seq] = self.appended.get(seq, 0) + 3
        else:
            self.kv.free(seq)
            del self.tokens[seq]
            self.appended.pop(seq, None)

    @precondition(lambda self: self.appended)
    @rule(data=st.data(), n=st.integers(1, 6))
    def release(self, data, n):
        """Rejected drafts: tokens past the prompt go back (never a shared prefix block, all inside the prompt)."""
        seq = data.draw(st.sampled_from(sorted(self.appended)))
        n = min(n, self.appended[seq])
        self.kv.release(seq, n)
        self.tokens[seq] -= n
        self.appended[seq] -= n

    @invariant()
    def blocks_are_conserved_and_counted_once(self):
        kv = self.kv
        shared = Counter(key for keys in kv._shared.values() for key in keys)
        assert dict(shared) == kv._refs  # reference counts are exact, hence never negative
        assert not set(kv._refs) & set(kv._lru)  # a cached block is referenced or evictable, not both
        private = sum(math.ceil(t / self.BS) - len(kv._shared[s]) for s, t in self.tokens.items())
        truly_free = kv.free_blocks - len(kv._lru)
        assert truly_free >= 0 and private >= 0
        assert private + len(kv._refs) + len(kv._lru) + truly_free == self.BLOCKS  # used + cached + free = total
        assert sum(kv.breakdown()) == self.BLOCKS * self.BS
        assert_memory_state_integrates_to_breakdown(kv)

    def teardown(self):
        for seq in list(self.tokens):
            self.kv.free(seq)
        assert self.kv.used_blocks == 0 and not self.kv._refs
        assert self.kv.free_blocks == self.BLOCKS


TestPrefixCache = PrefixCacheMachine.TestCase
TestPrefixCache.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)


def test_contiguous_first_fit_leaves_a_hole_that_a_larger_slab_cannot_use():
    """Hand example of external fragmentation: 100 slots, slabs 30 | 30 | 30, free the middle one: 40 slots are
    free but a 35-slot slab does not fit (largest hole 30), so 10 of the free slots count as external."""
    kv = ContiguousAllocator(100, 1, reserve="requested")
    for seq in range(3):
        kv.allocate(seq, 10, final_tokens=30)
    kv.free(1)
    assert kv.holes() == [(30, 30), (90, 10)]
    assert not kv.can_allocate(35)
    assert kv.breakdown() == (20, 40, 10, 0, 30)  # real, internal (2 × 20 reserved), external, cached, free


def test_contiguous_grow_extends_in_place_or_moves_and_counts_the_copy():
    kv = ContiguousAllocator(100, 1, reserve="grow", max_model_len=64)
    kv.allocate(0, 10)
    kv.allocate(1, 10)  # right after slab 0: slab 0 cannot extend in place
    kv.start_growing(0)
    assert kv.max_grow(5) == 0 and kv.can_grow_one()
    kv.prepare_growth()  # 0 moves to a 20-slot slab at 20 and its 10 tokens are copied
    assert kv.slabs() == [(10, 10), (20, 20)] and kv.copied_tokens == 10
    assert kv.max_grow(50) == 10
    kv.start_growing(1)  # slab 1 is full; the hole after it is taken by slab 0, so it moves too
    kv.prepare_growth()
    assert kv.copied_tokens == 20
