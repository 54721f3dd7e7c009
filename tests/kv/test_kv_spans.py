"""Bounded-span (sliding-window, local-chunk) layers in the KV pool: slots sized by the context-growing layers, and a
per-sequence reserve that never holds more than the span's tokens."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import load_hardware, load_model
from simulator.kv import PagedAllocator, PrefixCachingAllocator, kv_budget
from simulator.kv.span_reserve import SpanReserve, span_reserve
from simulator.request import Prefix


def test_gpt_oss_pool_slots_are_the_full_attention_layers():
    """gpt-oss-120b: 18 full layers × 2 × 8 KV heads × 64 × 2 B = 36,864 B per slot on one GPU; its 18 sliding
    layers (the same bytes per token) hold at most 128 tokens: a reserve of min(final, 128) slots per sequence."""
    model = load_model("gpt-oss-120b")
    budget = kv_budget(model, load_hardware("h100-sxm"), tensor_parallel=1, weight_dtype="mxfp4", kv_dtype_name="bf16",
                       gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=8192, max_num_seqs=256,
                       max_model_len=8192)
    assert budget.kv_bytes_per_token == 18 * 2 * 8 * 64 * 2
    assert budget.spans == ((128, 1.0),)
    pool = budget.usable_bytes - budget.weight_bytes - budget.workspace_bytes
    assert budget.num_blocks == math.floor(pool / (16 * budget.kv_bytes_per_token))
    assert span_reserve(budget.spans, 5000) == 128 and span_reserve(budget.spans, 40) == 40


def test_a_model_of_only_windowed_layers_sizes_slots_by_all_of_them(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: all-windows\nhidden_size: 512\nvocab_size: 1000\nmax_position_embeddings: 4096\n"
                    "layers:\n  - {count: 4, attention: {kind: sliding, window: 256, num_heads: 8, num_kv_heads: 2, "
                    "head_dim: 64}, ffn: {intermediate_size: 1024}}\n")
    budget = kv_budget(load_model(str(path)), load_hardware("h100-sxm"), tensor_parallel=1, weight_dtype="bf16",
                       kv_dtype_name="bf16", gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=2048,
                       max_num_seqs=16, max_model_len=4096)
    assert budget.kv_bytes_per_token == 4 * 2 * 2 * 64 * 2 and budget.spans == ()


operations = st.lists(st.tuples(st.sampled_from(["admit", "chunk", "decode", "grow", "free"]),
                                st.integers(0, 7), st.integers(1, 700)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(operations, st.booleans(), st.sampled_from([[(128, 1.0)], [(256, 0.5), (1024, 2.5)]]))
def test_the_reserve_never_holds_more_than_the_span(ops, prefix_caching, spans):
    """Random admissions, prompt chunks, decode growth and frees on a (prefix-caching) paged pool: every sequence's
    reserve is at most Σ ratio·min(final, span) + 1 slot, schedulers see its own tokens, the wrapped pool holds
    tokens + reserves, and freeing everything returns every block."""
    inner = (PrefixCachingAllocator if prefix_caching else PagedAllocator)(num_blocks=400, block_size=16)
    kv = SpanReserve(inner, spans)
    own, final, growing = {}, {}, set()
    for op, seq, n in ops:
        if op == "admit" and seq not in own:
            total = n + 300
            prefix = Prefix((seq % 2,), 64) if prefix_caching else None  # a shared 64-token system prompt
            if kv.can_allocate(n, final_tokens=total, prefix=prefix):
                kv.allocate(seq, n, final_tokens=total, prefix=prefix)
                own[seq], final[seq] = n, total
        elif op == "chunk" and seq in own and seq not in growing and kv.can_append(seq, n):
            kv.append(seq, n)
            own[seq] += n
        elif op == "decode" and seq in own and seq not in growing:
            kv.start_growing(seq)
            growing.add(seq)
        elif op == "grow" and growing:
            steps = kv.max_grow(n % 40 + 1)
            kv.grow(steps)
            for s in growing:
                own[s] += steps
        elif op == "free" and seq in own:
            kv.free(seq)
            del own[seq], final[seq]
            growing.discard(seq)
        for s, tokens in own.items():
            reserve = inner.tokens_of(s) - tokens
            assert kv.tokens_of(s) == tokens
            assert reserve == span_reserve(spans, final[s])
            assert reserve <= sum(ratio * min(final[s], span) for span, ratio in spans) + 1
        assert kv.growing_tokens == sum(own[s] for s in growing)
        assert kv.num_growing == len(growing)
    for s in list(own):
        kv.free(s)
    assert kv.free_blocks == inner.num_blocks


def test_a_windowed_model_runs_more_sequences_than_if_its_windows_were_full(tmp_path):
    """gpt-oss-120b at 4000 + 1000 tokens on one H100, a burst of requests: with its sliding layers held at 128
    tokens the pool's slots are the full layers' only, a sequence takes 4000–5000 + 128 of them, and the batch it admits
    is about twice the batch of the same model with every layer full (its slots hold half as many tokens)."""
    import json

    import simulator
    from simulator.catalog.current_models import CURRENT_MODELS

    _, fields = CURRENT_MODELS["gpt-oss-120b"]
    full = tmp_path / "full" / "config.json"
    full.parent.mkdir()
    full.write_text(json.dumps({**fields, "layer_types": ["full_attention"] * 36}))
    peaks = {}
    for name, model in (("windowed", "gpt-oss-120b"), ("full", str(full))):
        config = simulator.load({
            "model": model, "hardware": "h100-sxm", "seed": 0, "dtype": "mxfp4",
            "workload": {"num_requests": 150, "arrival": {"kind": "poisson", "rate": 1000},
                         "input_tokens": {"kind": "fixed", "value": 4000},
                         "output_tokens": {"kind": "fixed", "value": 1000}}})
        summary = simulator.run(config).summary
        assert summary["completed"] == 150
        peaks[name] = (summary["peak_running"], summary["kv_capacity_tokens"])
    (windowed, windowed_slots), (full_batch, full_slots) = peaks["windowed"], peaks["full"]
    assert windowed_slots == pytest.approx(2 * full_slots, rel=0.01)  # the same bytes, half as many per slot
    assert windowed <= windowed_slots // (4000 + 128) + 1 and full_batch <= full_slots // 4000 + 1
    assert windowed >= 1.8 * full_batch
