"""Paged KV allocator invariants, KV sizing and the memory budget."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from simulator.catalog import load_hardware, load_model
from simulator.errors import LLMSimError
from simulator.kv import PagedAllocator, kv_budget, kv_cache_bytes
from tests.helpers import assert_memory_state_integrates_to_breakdown


class PagedAllocatorMachine(RuleBasedStateMachine):
    """Random allocate/append/grow/free sequences against a plain model of who holds how many tokens."""

    BS, BLOCKS = 8, 50

    def __init__(self):
        super().__init__()
        self.kv = PagedAllocator(num_blocks=self.BLOCKS, block_size=self.BS)
        self.static: dict[int, int] = {}
        self.growing: dict[int, int] = {}
        self.next_id = 0

    def blocks(self, tokens: int) -> int:
        return math.ceil(tokens / self.BS)

    def free_blocks(self) -> int:
        held = sum(self.blocks(t) for t in [*self.static.values(), *self.growing.values()])
        return self.BLOCKS - held

    @rule(tokens=st.integers(1, 120))
    def allocate(self, tokens):
        if self.blocks(tokens) <= self.free_blocks():
            assert self.kv.can_allocate(tokens)
            self.kv.allocate(self.next_id, tokens)
            self.static[self.next_id] = tokens
            self.next_id += 1
        else:
            assert not self.kv.can_allocate(tokens)
            with pytest.raises(MemoryError):
                self.kv.allocate(self.next_id, tokens)

    @precondition(lambda self: self.static)
    @rule(data=st.data(), n=st.integers(1, 40))
    def append(self, data, n):
        seq = data.draw(st.sampled_from(sorted(self.static)))
        needed = self.blocks(self.static[seq] + n) - self.blocks(self.static[seq])
        if needed <= self.free_blocks():
            self.kv.append(seq, n)
            self.static[seq] += n
        else:
            with pytest.raises(MemoryError):
                self.kv.append(seq, n)

    @precondition(lambda self: self.static)
    @rule(data=st.data(), n=st.integers(0, 40))
    def release(self, data, n):
        """Speculative decoding's rejected drafts: a static sequence's last tokens go back."""
        seq = data.draw(st.sampled_from(sorted(self.static)))
        n = min(n, self.static[seq])
        self.kv.release(seq, n)
        self.static[seq] -= n

    @precondition(lambda self: self.static)
    @rule(data=st.data())
    def start_growing(self, data):
        seq = data.draw(st.sampled_from(sorted(self.static)))
        self.kv.start_growing(seq)
        self.growing[seq] = self.static.pop(seq)

    def grow_needs(self, n: int) -> int:
        return sum(self.blocks(t + n) - self.blocks(t) for t in self.growing.values())

    @rule(n=st.integers(1, 40))
    def grow(self, n):
        if self.grow_needs(n) <= self.free_blocks():
            self.kv.grow(n)
            self.growing = {seq: t + n for seq, t in self.growing.items()}
        else:
            with pytest.raises(MemoryError):
                self.kv.grow(n)

    @rule(limit=st.integers(0, 300))
    def max_grow_is_the_largest_that_fits(self, limit):
        free = self.free_blocks()
        brute = max(n for n in range(limit + 1) if self.grow_needs(n) <= free)
        assert self.kv.max_grow(limit) == brute
        assert self.kv.can_grow_one() == (self.grow_needs(1) <= free)

    @precondition(lambda self: self.static or self.growing)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted([*self.static, *self.growing])))
        self.kv.free(seq)
        self.static.pop(seq, None)
        self.growing.pop(seq, None)

    @invariant()
    def accounting_matches_the_model(self):
        assert self.kv.free_blocks == self.free_blocks() >= 0
        assert self.kv.used_blocks <= self.kv.num_blocks
        assert self.kv.used_tokens == sum(self.static.values()) + sum(self.growing.values())
        assert self.kv.growing_tokens == sum(self.growing.values())
        assert self.kv.num_growing == len(self.growing)
        for seq, tokens in [*self.static.items(), *self.growing.items()]:
            assert self.kv.tokens_of(seq) == tokens
        parts = self.kv.breakdown()
        held = [*self.static.values(), *self.growing.values()]
        assert parts.internal == sum(-t % self.BS for t in held)  # the empty tail of each last block
        assert parts.real == sum(held) and parts.external == parts.cached == 0
        assert sum(parts) == self.BLOCKS * self.BS
        assert_memory_state_integrates_to_breakdown(self.kv)


TestPagedAllocator = PagedAllocatorMachine.TestCase
TestPagedAllocator.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)


def test_double_allocation_and_unknown_free_are_errors():
    kv = PagedAllocator(4, 16)
    kv.allocate(1, 10)
    with pytest.raises(ValueError):
        kv.allocate(1, 10)
    with pytest.raises(KeyError):
        kv.free(2)


def test_kv_cache_bytes_worked_example():
    """2 × 32 layers × 32 heads × 128 × 2 B = 524,288 B/token; × 4096 × 16 = 34.36 GB = 32 GiB."""
    total = kv_cache_bytes(32, 32, 128, "fp16", 4096, 16)
    assert total == 34_359_738_368
    assert total / 2**30 == 32.0


@given(st.sampled_from(["llama-2-7b", "llama-3-8b", "llama-2-70b", "qwen2.5-7b"]))
def test_kv_bytes_per_token_matches_published(name):
    """Published KV bytes per token at fp16 (../shared/reference/models.csv)."""
    published = {"llama-2-7b": 524_288, "llama-3-8b": 131_072, "llama-2-70b": 327_680, "qwen2.5-7b": 57_344}
    assert load_model(name).kv_bytes_per_token(2) == published[name]


def test_budget_of_llama3_8b_on_h100():
    """80 GiB × 0.9 = 72 GiB; weights 8.03 B × 2 B ≈ 14.96 GiB; the rest minus workspace is KV at 128 KiB/token."""
    model, gpu = load_model("llama-3-8b"), load_hardware("h100-sxm")
    budget = kv_budget(
        model, gpu, tensor_parallel=1, weight_dtype="bf16", kv_dtype_name="bf16", gpu_memory_utilization=0.9,
        block_size=16, max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=8192,
    )
    assert budget.weight_bytes / 2**30 == pytest.approx(8.03e9 * 2 / 2**30, rel=0.01)
    pool = 72 * 2**30 - budget.weight_bytes - budget.workspace_bytes
    assert budget.num_blocks == math.floor(pool / (16 * 131_072))
    assert 50 < budget.capacity_tokens * 131_072 / 2**30 < 57  # GiB of KV


def test_fp8_kv_doubles_capacity():
    model, gpu = load_model("llama-3-8b"), load_hardware("h100-sxm")
    common = dict(tensor_parallel=1, weight_dtype="bf16", gpu_memory_utilization=0.9, block_size=16,
                  max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=8192)
    bf16 = kv_budget(model, gpu, kv_dtype_name="bf16", **common)
    fp8 = kv_budget(model, gpu, kv_dtype_name="fp8", **common)
    assert fp8.num_blocks in (2 * bf16.num_blocks, 2 * bf16.num_blocks + 1)


def test_model_that_does_not_fit_is_refused_with_missing_gib():
    model, gpu = load_model("llama-2-70b"), load_hardware("a100-80gb-sxm")
    with pytest.raises(LLMSimError, match=r"GiB short of one 4096-token request"):
        kv_budget(model, gpu, tensor_parallel=1, weight_dtype="fp16", kv_dtype_name="fp16",
                  gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=4096, max_num_seqs=256,
                  max_model_len=4096)
    # with 4-way tensor parallelism it fits: ~32 GiB of weights per GPU
    budget = kv_budget(model, gpu, tensor_parallel=4, weight_dtype="fp16", kv_dtype_name="fp16",
                       gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=4096, max_num_seqs=256,
                       max_model_len=4096)
    assert budget.num_blocks > 0
