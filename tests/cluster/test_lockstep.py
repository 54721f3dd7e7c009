"""Attention data-parallel ranks step together (simulator.cluster.lockstep), against hand calculations and the
one-step-at-a-time simulation."""

from __future__ import annotations

import numpy as np
import pytest

import simulator
from simulator.config import load_experiment
from tests.helpers import experiment


def _trace(tmp_path, requests) -> dict:
    """A workload of ``requests`` = [(arrival s, input tokens, output tokens)] (a Vidur-format trace file)."""
    path = tmp_path / "trace.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                    + "".join(f"{t!r},{i},{o}\n" for t, i, o in requests))
    return {"trace": {"path": str(path)}}


def _two_ranks(tmp_path, requests):
    """Qwen3-30B-A3B on two attention-DP ranks with linear costs: prefill 2 ms + 0.1 ms per token, decode steps of
    5 + 0.2 ms per sequence; the requests dealt to the ranks in turn."""
    return experiment(model="qwen3-30b-a3b", cluster={"data_parallel": 2, "router": "round_robin"},
                      workload=_trace(tmp_path, requests))


def test_a_rank_decoding_waits_for_another_ranks_prefill(tmp_path):
    """Rank 0 decodes a 20-step answer (first token at 3 ms, steps of 5.2 ms); a 1000-token prompt reaches rank 1
    at 50 ms. The decode run is cut at the end of the step in progress (3 + 10 × 5.2 = 55 ms); the next step lasts
    as long as rank 1's prefill (102 ms instead of 5.2), then both decode at 5.2 ms: rank 0 ends at
    3 + 20 × 5.2 + 102 − 5.2 ms instead of 3 + 20 × 5.2, and the prompt's TTFT is 5 + 102 ms."""
    rows = simulator.run(load_experiment(_two_ranks(tmp_path, [(0.0, 10, 21), (0.05, 1000, 2)]))).requests
    rows = rows.sort_values("request_id")
    assert rows["e2el_ms"].iloc[0] == pytest.approx(3 + 20 * 5.2 + 102 - 5.2)
    assert rows["ttft_ms"].iloc[1] == pytest.approx(5 + 102)
    assert rows["e2el_ms"].iloc[1] == pytest.approx(5 + 102 + 5.2)


def test_runs_of_decode_steps_match_one_step_at_a_time(tmp_path):
    """The group's closed-form decode runs (cut where another rank's step becomes the slowest) give the same
    latencies as stepping every iteration, for a roofline MoE model on four ranks with skewed prompts."""
    rng = np.random.default_rng(5)
    requests = [(float(t), int(i), int(o)) for t, i, o in zip(
        np.cumsum(rng.exponential(0.02, 120)), rng.integers(10, 3000, 120), rng.integers(2, 300, 120),
        strict=True)]
    config = _two_ranks(tmp_path, requests)
    config["cluster"] = {"data_parallel": 4, "expert_parallel": 4, "router": "round_robin"}
    config["cost_model"] = {"kind": "roofline"}
    config["dtype"] = "bf16"
    config["scheduler"] = {"kind": "chunked", "max_num_seqs": 64, "max_num_batched_tokens": 2048}
    fast = simulator.run(load_experiment(config)).requests.sort_values("request_id")
    slow = simulator.run(load_experiment(config), fast_forward=False).requests.sort_values("request_id")
    assert fast["replica"].nunique() == 4 and (fast["status"] == "finished").all()
    for column in ("first_token_s", "finish_s"):
        assert fast[column].to_numpy() == pytest.approx(slow[column].to_numpy(), rel=1e-9)


def test_the_experts_see_every_ranks_tokens(tmp_path):
    """One prompt on one of four ranks: its step is the rank's iteration with the routed experts priced on its own
    tokens (the three others are idle), not on four ranks' worth."""
    from simulator.config.deployment import resolve
    from simulator.cost import build_cost_model
    from simulator.cost.base import IterationShape

    config = load_experiment(experiment(
        model="qwen3-30b-a3b", dtype="bf16", engine="ideal", cluster={"data_parallel": 4, "expert_parallel": 4},
        cost_model={"kind": "roofline"},
        workload=_trace(tmp_path, [(0.0, 2000, 1)])))
    deployment = resolve(config)
    cost = build_cost_model(config, deployment.model, deployment.gpu(), deployment.engine)
    alone = cost.iteration_time(IterationShape(((2000, 0),))) - cost.experts_time(2000) + cost.experts_time(500)
    ttft = simulator.run(config).requests["ttft_ms"].iloc[0]
    assert ttft == pytest.approx(alone * 1000) and ttft < cost.iteration_time(IterationShape(((2000, 0),))) * 1000


def test_a_run_ends_where_another_rank_becomes_the_slowest():
    """Two decoding ranks: A's steps take 10 + 1·j ms, B's 5 + 2·j ms (a larger batch, so a faster-growing
    context). A is the slowest for steps 0…5 (B overtakes when 5 + 2j > 10 + j, j > 5): a run of 6 steps at A's
    times, even if both could run 100; equal at the start, the faster-growing one is the slowest."""
    from simulator.cluster.lockstep import Lockstep

    def plan(base, slope, steps=100):  # one sequence of context 0 ... as (a, c, size, context sum)
        return None, (steps, (base, slope, 1, 0), 1, True)

    assert Lockstep._slowest_run([plan(10, 1), plan(5, 2)]) == (6, 10, 1)
    assert Lockstep._slowest_run([plan(5, 2), plan(10, 1, steps=4)]) == (4, 10, 1)
    assert Lockstep._slowest_run([plan(7, 1), plan(7, 3)]) == (100, 7, 3)


def test_runs_that_change_their_slowest_rank_match_one_step_at_a_time(tmp_path):
    """Rank 0 decodes 32 sequences of 2,400-token prompts, rank 1 sixty-four of 100 tokens (rank 0's other 32
    requests end at their prefill): rank 0's steps are the slower (its context sum is 70,000 tokens longer, 2.5 ms
    at the roofline's 35 ns per token, against 1.7 ms more for rank 1's 32 extra sequences) until rank 1's context,
    growing by 64 tokens a step against 32, overtakes it 681 steps in; the runs cut there reproduce the stepped
    simulation."""
    requests = [(0.0, 2400, 1000) if i % 4 == 0 else (0.0, 100, 1) if i % 4 == 2 else (0.0, 100, 1000)
                for i in range(128)]
    config = experiment(model="qwen3-30b-a3b", dtype="bf16", cost_model={"kind": "roofline"},
                        cluster={"data_parallel": 2, "expert_parallel": 2, "router": "round_robin"},
                        scheduler={"kind": "chunked", "max_num_seqs": 64, "max_num_batched_tokens": 8192,
                                   "max_model_len": 4096},
                        kv_cache={"kind": "paged", "block_size": 16}, workload=_trace(tmp_path, requests))
    fast = simulator.run(load_experiment(config)).requests.sort_values("request_id")
    slow = simulator.run(load_experiment(config), fast_forward=False).requests.sort_values("request_id")
    assert fast["finish_s"].to_numpy() == pytest.approx(slow["finish_s"].to_numpy(), rel=1e-9)
