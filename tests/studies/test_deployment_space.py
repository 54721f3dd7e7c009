"""The deployments enumerated for a model on a GPU, and their analytic steady state against hand calculations and
against the simulation it bounds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from simulator.api import load, run
from simulator.catalog import load_hardware, load_model
from simulator.cluster.pool_setup import setup_pool
from simulator.config.deployment import resolve
from simulator.cost.base import IterationShape
from simulator.studies.deployment_space import (
    Candidate,
    Shape,
    agg_steady_state,
    balanced_ratios,
    decode_rate,
    disagg_steady_state,
    prefill_rate,
    prefill_seconds,
    worker_shapes,
)


def test_a_dense_model_gets_every_tp_and_pp_of_powers_of_two_within_the_budget():
    shapes = worker_shapes(load_model("llama-3-8b"), load_hardware("h100-sxm"), 8)
    expected = {(t, p) for t in (1, 2, 4, 8) for p in (1, 2, 4, 8) if t * p <= 8}
    assert {(s.tensor_parallel, s.pipeline_parallel) for s in shapes} == expected
    assert all(s.data_parallel == 1 and s.expert_parallel == 1 for s in shapes)  # no experts: no DP attention


def test_a_moe_model_adds_attention_dp_with_experts_over_all_its_gpus():
    shapes = worker_shapes(load_model("deepseek-v3"), load_hardware("h100-sxm"), 16)
    wide = [s for s in shapes if s.data_parallel > 1]
    assert wide and all(s.expert_parallel == s.data_parallel * s.tensor_parallel and s.pipeline_parallel == 1
                        for s in wide)
    assert Shape(1, 1, 16, 16) in shapes and Shape(8, 1, 2, 16) in shapes
    assert max(s.tensor_parallel for s in shapes) == 16  # two 8-GPU nodes, as SGLang's TP16
    assert all(s.gpus <= 16 for s in shapes)


class LinearCost:
    """An iteration takes 10 ms, plus 0.1 ms per prompt token and 1 ms per decoding sequence."""

    def iteration_time(self, shape: IterationShape) -> float:
        return 0.01 + 1e-4 * shape.prefill_tokens + 0.001 * shape.num_decodes


def _setup(max_num_seqs: int = 64, kv_tokens: int = 10**6, budget: int = 8192):
    return SimpleNamespace(scheduler=SimpleNamespace(max_num_seqs=max_num_seqs), max_num_batched_tokens=budget,
                           budget=SimpleNamespace(capacity_tokens=kv_tokens), cost=LinearCost())


def test_the_aggregated_steady_state_is_the_closed_form_and_keeps_littles_law():
    # isl 900 rides in the decode steps: P(b) = 900 × 0.1 ms = 0.09 s; at b = 10, s = 0.02 s; osl 100:
    # λ = 1 / (0.09 + 100 × 0.02 / 10) = 1 / 0.29; TPOT = 0.02 / (1 − 0.09 / 0.29) = 0.029 s
    points = {p.batch: p for p in agg_steady_state(_setup(max_num_seqs=10), Shape(1), 900, 100)}
    assert sorted(points) == [1, 2, 4, 8, 10]
    assert points[10].rate == pytest.approx(1 / 0.29)
    assert points[10].tpot_s == pytest.approx(0.029)
    assert points[10].ttft_s == pytest.approx(0.1)  # alone, the prompt's iteration pays its 10 ms too
    for p in points.values():  # Little's law: b sequences decoding = λ × osl × TPOT
        assert p.batch == pytest.approx(p.rate * 100 * p.tpot_s)


def test_the_kv_pool_caps_the_batch_and_attention_dp_multiplies_the_rate():
    # 4,000 KV tokens hold 4 sequences of 900 + 100
    one = agg_steady_state(_setup(kv_tokens=4000), Shape(1), 900, 100)
    assert [p.batch for p in one] == [1, 2, 4]
    four = agg_steady_state(_setup(kv_tokens=4000), Shape(1, 1, 4, 4), 900, 100)
    assert [p.rate for p in four] == pytest.approx([4 * p.rate for p in one])


def test_a_prompt_longer_than_the_budget_prefills_in_chunks():
    # 10,000 tokens in chunks of 4,096: 3 iterations of 0.01 s + 1e-4 s per token
    assert prefill_seconds(_setup(budget=4096), 10_000) == pytest.approx(3 * 0.01 + 1.0)
    # 8,192 // 900 = 9 prompts per iteration: 9 / (0.01 + 0.81)
    assert prefill_rate(_setup(), 900) == pytest.approx(9 / 0.82)
    # riding in steps of 8 decodes, the chunks add only their tokens' time
    assert prefill_seconds(_setup(budget=4096), 10_000, 8, 1000.0) == pytest.approx(1.0)


def test_the_disaggregated_pair_serves_the_slower_of_its_two_sides():
    candidate = Candidate("disagg", Shape(1), 2, Shape(1), 1)
    points = {p.batch: p for p in disagg_steady_state(_setup(), _setup(), candidate, 900, 100)}
    prompts = 9 / 0.82  # one prefill worker
    # b = 1: 2 decode workers × 1 / (100 × 0.011) = 1.82/s, below the prefill side
    assert points[1].rate == pytest.approx(2 / 1.1) and points[1].tpot_s == pytest.approx(0.011)
    # b = 64: 2 × 64 / (100 × 0.074) = 17.3/s, above it: the prefill side bounds
    assert points[64].rate == pytest.approx(prompts)


def test_balanced_ratios_pick_the_decode_workers_that_match_the_prefill_rate():
    # a prefill worker (2 GPUs) serves 3/s, a decode worker (4 GPUs) 2/s: x = 1 wants 1.5 decoders → 1 or 2
    # (6 and 10 GPUs), x = 2 wants 3 (16 GPUs), x = 3 wants 4.5 → 4 or 5 (22, 26 GPUs: over the 16)
    assert balanced_ratios(3.0, 2.0, 2, 4, 16) == [(1, 1), (1, 2), (2, 3)]


def test_the_analytic_steady_state_bounds_what_the_simulation_sustains():
    """Optimistic by construction (no queueing, prefills at their best, all b users decoding at once): every
    simulated closed-loop level of b users of a real deployment stays at or below λ(b)'s throughput."""
    config = load({"model": "llama-3-8b", "hardware": "h100-sxm", "engine": "vllm", "seed": 0,
                   "scheduler": {"max_model_len": 1200},
                   "workload": {"num_requests": 10, "arrival": {"kind": "poisson", "rate": 1.0},
                                "input_tokens": {"kind": "fixed", "value": 1000},
                                "output_tokens": {"kind": "fixed", "value": 200}}})
    setup = setup_pool(config, resolve(config), config.cluster.replica_pools()[0])
    for point in agg_steady_state(setup, Shape(1), 1000, 200)[2::3]:
        users = point.batch
        closed = load(config.model_dump(mode="json") | {"workload": {
            "num_requests": 4 * users, "arrival": {"kind": "closed_loop", "users": users},
            "input_tokens": {"kind": "fixed", "value": 1000}, "output_tokens": {"kind": "fixed", "value": 200}}})
        summary = run(closed).summary
        assert summary["output_throughput"] <= point.rate * 200, users
        assert summary["output_throughput"] >= point.rate * 200 * 0.5, users  # and a bound worth pruning with


def test_a_decode_worker_runs_its_largest_batch_within_the_tpot_limit():
    # s(b) = 10 ms + 1 ms·b within 30 ms: b = 16 (26 ms; 32 takes 42 ms): 16 / (100 × 0.026) per rank
    assert decode_rate(_setup(), Shape(1), 900, 100, 0.030) == pytest.approx(16 / 2.6)
    assert decode_rate(_setup(), Shape(1, 1, 2, 2), 900, 100, 0.030) == pytest.approx(2 * 16 / 2.6)
    assert decode_rate(_setup(), Shape(1), 900, 100, 0.010) == 0.0  # not even one sequence decodes that fast
