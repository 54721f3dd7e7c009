"""Async scheduling (``scheduler.async_scheduling``: each batch is formed while the one before runs): a request
that arrives during a step joins one step later, by hand; one that reaches an idle replica starts at once; the
closed-form decode runs reproduce one-step-at-a-time simulation with it; every request still ends. An engine whose
prompt batch holds the outputs of the batch before (SGLang's overlap loop) hands a prompt's first token out at
the end of the prompt batch after it, by hand."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

import simulator
from simulator.config import load_experiment
from tests.cluster.test_lockstep import _trace, _two_ranks
from tests.helpers import experiment


def _pair(tmp_path, async_scheduling):
    """Linear costs (prefill 2 ms + 0.1 ms per token, decode steps 5 + 0.2 ms per sequence): A (100-token prompt,
    50 outputs) at 0 s, B (2000-token prompt, 2 outputs) at 0.1 s, prefill-first continuous batching."""
    return load_experiment(experiment(
        workload=_trace(tmp_path, [(0.0, 100, 50), (0.1, 2000, 2)]),
        scheduler={"kind": "continuous", "max_num_seqs": 16, "max_model_len": 4096,
                   "async_scheduling": async_scheduling}))


@pytest.mark.parametrize(("async_scheduling", "b_ttft_ms"), [(False, 0.4 + 202), (True, 0.4 + 5.2 + 202)])
def test_an_arrival_during_a_step_joins_one_step_later(tmp_path, async_scheduling, b_ttft_ms):
    """A reaches an idle replica and prefills at once (2 + 10 = 12 ms) either way, then decodes alone in 5.2 ms
    steps; B arrives during step 17 (95.2 … 100.4 ms). Without async scheduling B's prefill (2 + 200 = 202 ms)
    starts when that step ends; with it the batch of step 18 (A alone) is formed already, so B starts one step
    later, at 105.6 ms. A ends at 469 ms either way: 12 + 17 · 5.2 + 202 + 5.4 (with B) + 31 · 5.2 without async,
    12 + 18 · 5.2 + 202 + 5.4 + 30 · 5.2 with it."""
    a, b = simulator.run(_pair(tmp_path, async_scheduling)).requests.sort_values("request_id").itertuples()
    assert a.ttft_ms == pytest.approx(12.0)
    assert b.ttft_ms == pytest.approx(b_ttft_ms)
    assert a.e2el_ms == pytest.approx(469.0)


def test_requests_that_reach_an_idle_replica_together_share_its_first_batch(tmp_path):
    """Two 100-token prompts at 0 s and a third at 1 ms, async scheduling on: the first two reach an idle replica at
    the same instant and are prefilled together (2 + 0.1 · 200 = 22 ms); the third arrives while that iteration
    runs, misses the batch formed after it (the two first tokens' decode step, 5 + 2 · 0.2 = 5.4 ms) and is
    prefilled after that step with the decodes, prefill-first: 22 − 1 + 5.4 + (2 + 10) ms."""
    config = load_experiment(experiment(
        workload=_trace(tmp_path, [(0.0, 100, 5), (0.0, 100, 5), (0.001, 100, 5)]),
        scheduler={"kind": "continuous", "max_num_seqs": 16, "max_model_len": 4096, "async_scheduling": True}))
    ttft = simulator.run(config).requests.sort_values("request_id")["ttft_ms"].to_numpy()
    assert ttft == pytest.approx([22.0, 22.0, 22.0 - 1.0 + 5.4 + 12.0])


def test_a_rank_with_async_scheduling_takes_the_newcomer_one_step_later(tmp_path):
    """The lock-step case of ``test_a_rank_decoding_waits_for_another_ranks_prefill``: rank 0 decodes (first token at
    3 ms, steps of 5.2 ms), a 1000-token prompt reaches the idle rank 1 at 50 ms, during step 10 (49.8 … 55 ms).
    With async scheduling the step after (55 … 60.2 ms) is formed already; the prompt's 102 ms step starts at
    60.2 ms: TTFT 10.2 + 102 ms (5 + 102 without). Rank 0 still waits for that prefill once."""
    config = _two_ranks(tmp_path, [(0.0, 10, 21), (0.05, 1000, 2)])
    config["scheduler"] = {**config["scheduler"], "async_scheduling": True}
    rows = simulator.run(load_experiment(config)).requests.sort_values("request_id")
    assert rows["ttft_ms"].iloc[1] == pytest.approx(10.2 + 102)
    assert rows["e2el_ms"].iloc[0] == pytest.approx(3 + 20 * 5.2 + 102 - 5.2)


@pytest.mark.parametrize("sections", [
    {},  # continuous batching, linear costs
    {"scheduler": {"kind": "chunked", "max_num_seqs": 16, "max_num_batched_tokens": 128, "max_model_len": 2048},
     "cost_model": {"kind": "roofline"}},
    {"kv_cache": {"kind": "paged", "block_size": 16, "num_gpu_blocks": 40}},  # recompute preemptions
    {"model": "qwen3-30b-a3b", "cluster": {"data_parallel": 2, "router": "round_robin"}},  # ranks in lock step
    {"cluster": {"replicas": 3, "router": "round_robin", "fault_retries": 2,
                 "faults": [{"at_s": 0.6, "replica": 1, "kind": "crash", "duration_s": 0.5}]}},
    {"engine": "sglang", "cost_model": {"kind": "roofline"}, "kv_cache": {"kind": "paged", "block_size": 16,
     "num_gpu_blocks": 150}, "scheduler": {"kind": "continuous", "max_num_seqs": 16, "max_model_len": 1024,
                                           "max_num_batched_tokens": 1024, "prefill_priority": True},
     "workload": {"num_requests": 50, "arrival": {"kind": "poisson", "rate": 800.0},
                  "input_tokens": {"kind": "uniform", "min": 10, "max": 600},
                  "output_tokens": {"kind": "uniform", "min": 1, "max": 100}}},  # held first tokens
])
def test_closed_form_runs_match_stepping_and_every_request_ends(sections):
    sections = {**sections}
    scheduler = sections.get("scheduler", experiment()["scheduler"])
    sections["scheduler"] = {**scheduler, "async_scheduling": True}
    config = load_experiment(experiment(**sections))
    fast = simulator.run(config).requests.sort_values("request_id")
    slow = simulator.run(config, fast_forward=False).requests.sort_values("request_id")
    assert len(fast) == config.workload.num_requests
    assert set(fast["status"]) <= {"finished", "failed", "rejected"}
    for column in ("first_token_s", "finish_s"):
        assert np.allclose(fast[column], slow[column], rtol=1e-9, equal_nan=True)
    plain = simulator.run(load_experiment(experiment(**{**sections, "scheduler": {**scheduler,
                                                                                  "async_scheduling": False}})))
    assert fast["ttft_ms"].mean() > plain.requests["ttft_ms"].mean()  # newcomers wait a step more


def test_every_server_default_names_its_async_scheduling():
    """TensorRT-LLM's PyTorch executor and SGLang overlap scheduling with the GPU by default; vLLM 0.11-0.12 does
    not (``--async-scheduling`` became its default later)."""
    from simulator.catalog.engines import load_engine

    defaults = {name: load_engine(name).server_defaults["scheduler"].get("async_scheduling", False)
                for name in ("vllm", "sglang", "trtllm")}
    assert defaults == {"vllm": False, "sglang": True, "trtllm": True}


@pytest.mark.parametrize(("holds", "async_scheduling", "ttft_ms"), [
    (True, True, [164.0, 164.0]), (True, False, [82.0, 164.0]), (False, True, [82.0, 164.0])])
def test_a_prompt_batch_holds_the_first_tokens_of_the_one_before(tmp_path, holds, async_scheduling, ttft_ms):
    """Two 800-token prompts at 0 s, 3 outputs each, a token budget of 1,000: A is prefilled alone (2 + 80 = 82 ms),
    then B (82 ms more, prefill-first), then both decode (2 steps of 5 + 2 · 0.2 = 5.4 ms, to 174.8 ms). An engine
    whose prompt batch holds the outputs of the batch before, with async scheduling, hands A's first token out when
    B's prompt batch ends (164 ms); B's leaves at once, as a decode step follows. The latencies stay: 174.8 ms, and
    A's gaps are the decode steps'."""
    profile = tmp_path / "held.yaml"
    profile.write_text(yaml.safe_dump({"name": "held", "prompt_batch_holds_outputs": holds}))
    config = load_experiment(experiment(
        engine=str(profile), workload=_trace(tmp_path, [(0.0, 800, 3), (0.0, 800, 3)]),
        scheduler={"kind": "continuous", "max_num_seqs": 16, "max_model_len": 1000, "max_num_batched_tokens": 1000,
                   "async_scheduling": async_scheduling}))
    result = simulator.run(config, tokens=True)
    rows = result.requests.sort_values("request_id")
    assert rows["ttft_ms"].to_numpy() == pytest.approx(ttft_ms)
    assert rows["e2el_ms"].to_numpy() == pytest.approx([174.8, 174.8])
    first = result.tokens().groupby("request_id")["time_s"].min().to_numpy() * 1000
    assert first == pytest.approx(ttft_ms)
    if holds and async_scheduling:
        assert result.summary["mean_itl_ms"] == pytest.approx(5.4)


def test_which_engines_hold_first_tokens():
    """SGLang's overlap loop waits for the next batch's launch before it hands results out; the other frameworks'
    H100 rows do not show it (their held-out TTFT gets worse with it: vLLM's Qwen3-32B 14.7 -> 30.4%)."""
    from simulator.catalog.engines import load_engine

    holds = {name: load_engine(name).prompt_batch_holds_outputs for name in ("vllm", "vllm-0.14", "sglang", "trtllm")}
    assert holds == {"vllm": False, "vllm-0.14": False, "sglang": True, "trtllm": False}
