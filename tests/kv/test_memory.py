"""KV memory end to end: contiguous vs paged concurrency, fragmentation accounting, prefix caching, copies."""

from __future__ import annotations

import pytest

import simulator
from simulator.config import load_experiment
from tests.helpers import experiment


def _run(**overrides):
    return simulator.run(load_experiment(experiment(**overrides)))


SATURATING = {
    "num_requests": 60, "arrival": {"kind": "poisson", "rate": 1000.0},
    "input_tokens": {"kind": "uniform", "min": 20, "max": 200}, "output_tokens": {"kind": "uniform", "min": 50,
                                                                                    "max": 300},
}


def test_reserving_max_model_len_caps_concurrency_at_capacity_over_max_len():
    """4096 token slots, slabs of max_model_len = 1000: at most floor(4096 / 1000) = 4 requests run at once."""
    result = _run(
        scheduler={"kind": "continuous", "max_num_seqs": 64, "max_model_len": 1000},
        kv_cache={"kind": "contiguous", "reserve": "max_model_len", "block_size": 16, "num_gpu_blocks": 256},
        workload=SATURATING,
    )
    assert result.summary["peak_running"] == 4096 // 1000
    # every slab is 1000 slots; the time-averaged slots in use can never exceed 4000 of 4096
    s = result.summary
    assert s["kv_real_frac"] + s["kv_internal_frac"] <= 4000 / 4096 + 1e-9


@pytest.mark.parametrize("scheduler", ["continuous", "chunked"])
def test_paged_runs_at_least_as_many_requests_as_contiguous(scheduler):
    runs = {}
    for name, kv in {"paged": {"kind": "paged"}, "requested": {"kind": "contiguous", "reserve": "requested"},
                     "max_len": {"kind": "contiguous", "reserve": "max_model_len"}}.items():
        runs[name] = _run(
            scheduler={"kind": scheduler, "max_num_seqs": 64, "max_model_len": 1000, "max_num_batched_tokens": 2048},
            kv_cache={**kv, "block_size": 16, "num_gpu_blocks": 256}, workload=SATURATING,
        ).summary
    assert runs["paged"]["mean_running"] >= runs["requested"]["mean_running"] >= runs["max_len"]["mean_running"]
    assert runs["paged"]["kv_waste_frac"] < 16 / 20  # at most a block's tail per sequence of >= 20 tokens
    for summary in runs.values():
        parts = [summary[f"kv_{p}_frac"] for p in ("real", "internal", "external", "cached", "free")]
        assert sum(parts) == pytest.approx(1.0)


def test_prefix_cache_skips_exactly_the_cached_full_blocks():
    """N requests, one at a time, each a 100-token shared prefix plus 30 own tokens, block size 16: the first
    computes all 130, each later one finds floor(100 / 16) = 6 blocks (96 tokens) cached and computes 34."""
    n, prefix, own, bs = 20, 100, 30, 16
    result = _run(
        kv_cache={"kind": "paged", "block_size": bs, "num_gpu_blocks": 256, "prefix_caching": True},
        workload={"num_requests": n, "arrival": {"kind": "constant", "rate": 1.0},  # never two at once
                  "prefix": {"tokens": prefix, "fraction": 1.0},
                  "input_tokens": {"kind": "fixed", "value": own}, "output_tokens": {"kind": "fixed", "value": 5}},
    )
    cached = (prefix // bs) * bs
    assert result.summary["prefill_tokens_computed"] == n * (prefix + own) - (n - 1) * cached
    assert result.summary["prefix_cache_hit_rate"] == pytest.approx((n - 1) * cached / (n * (prefix + own)))
    assert list(result.requests["cached_tokens"]) == [0] + [cached] * (n - 1)
    # TTFT = overhead + computed tokens × 0.1 ms: 2 + 13 ms for the first, 2 + 3.4 ms for the rest
    assert result.requests["ttft_ms"].iloc[0] == pytest.approx(2 + 130 * 0.1)
    assert result.requests["ttft_ms"].iloc[1:].to_numpy() == pytest.approx(2 + 34 * 0.1)


def test_prefix_cache_without_shared_prefixes_changes_nothing():
    """Distinct prefixes never hit (with room enough that no request is preempted and re-finds its own blocks)."""
    workload = {**experiment()["workload"], "prefix": {"tokens": 64, "fraction": 1.0, "groups": 10**9}}
    pool = {"kind": "paged", "block_size": 16, "num_gpu_blocks": 4096}
    off = _run(workload=workload, kv_cache=pool)
    on = _run(workload=workload, kv_cache={**pool, "prefix_caching": True})
    assert on.summary["prefix_cache_hit_rate"] == 0 and on.summary["num_preemptions"] == 0
    for key in ("mean_ttft_ms", "mean_e2el_ms", "prefill_tokens_computed"):
        assert on.summary[key] == off.summary[key]


def test_growing_slabs_charge_their_copies_as_hbm_time():
    """One request, prompt 100, 200 outputs, slabs double from 100: moves at 100→200 (copy 100 tokens) and
    200→400 (copy 200) unless the hole behind allows growing in place — alone in the pool, it always does."""
    config = experiment(
        scheduler={"kind": "continuous", "max_num_seqs": 4, "max_model_len": 1000},
        kv_cache={"kind": "contiguous", "reserve": "grow", "block_size": 16, "num_gpu_blocks": 256},
        workload={"num_requests": 1, "arrival": {"kind": "constant", "rate": 1.0},
                  "input_tokens": {"kind": "fixed", "value": 100}, "output_tokens": {"kind": "fixed", "value": 200}},
    )
    alone = simulator.run(load_experiment(config))
    assert alone.summary["copied_tokens"] == 0
    assert alone.requests["e2el_ms"].iloc[0] == pytest.approx(2 + 100 * 0.1 + 199 * (5.0 + 0.2))


def test_run_reports_the_memory_plan_of_a_gpu():
    """Llama-3-8B in bf16 on one H100: 8.03 B parameters × 2 B of weights, and the KV pool is what 90% of 80 GiB
    leaves after them and the activation workspace, in whole blocks."""
    import simulator
    from simulator.catalog import load_model

    summary = simulator.run(simulator.load({"model": "llama-3-8b", "hardware": "h100-sxm", "workload": {
        "num_requests": 3, "arrival": {"kind": "poisson", "rate": 1}, "input_tokens": {"kind": "fixed", "value": 8},
        "output_tokens": {"kind": "fixed", "value": 4}}})).summary
    assert summary["weights_gib_per_gpu"] * 2**30 == pytest.approx(load_model("llama-3-8b").num_params * 2)
    left = 80 * 0.9 - summary["weights_gib_per_gpu"] - summary["workspace_gib_per_gpu"]
    block_gib = 16 * 32 * 2 * 8 * 128 * 2 / 2**30
    assert left - block_gib < summary["kv_pool_gib_per_gpu"] <= left


def test_free_memory_fraction_sizes_the_pool_from_what_the_weights_leave():
    """TensorRT-LLM's free_gpu_memory_fraction f: the pool is f × (memory − weights − workspace), in whole blocks."""
    from simulator.catalog import load_hardware, load_model
    from simulator.kv import kv_budget

    model, hw = load_model("llama-3-8b"), load_hardware("h100-sxm")
    args = dict(tensor_parallel=1, weight_dtype="bf16", kv_dtype_name="bf16", gpu_memory_utilization=0.9,
                block_size=32, max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=8192)
    total = kv_budget(model, hw, **args)
    free = kv_budget(model, hw, **args, free_memory_fraction=0.5)
    left = hw.memory_bytes - free.weight_bytes - free.workspace_bytes
    assert free.num_blocks == int(0.5 * left // (32 * free.kv_bytes_per_token))
    assert total.num_blocks == int((0.9 * hw.memory_bytes - total.weight_bytes - total.workspace_bytes)
                                   // (32 * total.kv_bytes_per_token))
