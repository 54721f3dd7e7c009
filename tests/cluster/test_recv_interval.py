"""The scheduler's poll for arrivals (``scheduler.recv_interval``, SGLang's ``--scheduler-recv-interval``): an arrival
during decode steps waits for the step at which ``recv_interval`` of them have run since the last poll, by hand, with
and without async scheduling; after a prompt step or on an idle replica it is taken in at once; the closed-form
decode runs reproduce one-step-at-a-time simulation with it; every request still ends; a deployment with attention
data-parallel ranks is refused, as SGLang refuses it."""

from __future__ import annotations

import numpy as np
import pytest

import simulator
from simulator.config import load_experiment
from simulator.errors import ConfigError
from tests.cluster.test_lockstep import _trace
from tests.helpers import experiment


def _pair(tmp_path, async_scheduling: bool, recv_interval: int):
    """Linear costs (prefill 2 ms + 0.1 ms per token, decode steps 5 + 0.2 ms per sequence): A (100-token prompt,
    50 outputs) at 0 s, B (2000-token prompt, 2 outputs) at 0.1 s, prefill-first continuous batching."""
    return load_experiment(experiment(
        workload=_trace(tmp_path, [(0.0, 100, 50), (0.1, 2000, 2)]),
        scheduler={"kind": "continuous", "max_num_seqs": 16, "max_model_len": 4096,
                   "async_scheduling": async_scheduling, "recv_interval": recv_interval}))


@pytest.mark.parametrize(("async_scheduling", "recv_interval", "b_ttft_ms"), [
    (False, 1, 0.4 + 202), (False, 10, 16 + 202), (True, 10, 16 + 5.2 + 202), (False, 7, 21.2 + 202)])
def test_an_arrival_waits_for_the_schedulers_next_poll(tmp_path, async_scheduling, recv_interval, b_ttft_ms):
    """A reaches an idle replica and is prefilled at once (2 + 10 = 12 ms): a prompt step, so the scheduler polls
    right after it; then A decodes alone in 5.2 ms steps, and every ``recv_interval`` of them it polls again: after
    step 10 (64 ms) and step 20 (116 ms) at an interval of 10, after steps 7, 14, 21 (48.4, 84.8, 121.2 ms) at 7.
    B arrives at 100 ms, during step 17: it is taken in at 116 ms (at 10; 121.2 ms at 7) and prefilled then (202 ms)
    — with async scheduling one step later, the batch after the poll being formed already. At an interval of 1, the
    step's end (100.4 ms). A's latency is 469 ms whatever the interval: its prefill (12), B's (202), one step shared
    with B (5.4) and its other 48 steps alone (5.2 each)."""
    a, b = simulator.run(_pair(tmp_path, async_scheduling, recv_interval)).requests.sort_values(
        "request_id").itertuples()
    assert a.ttft_ms == pytest.approx(12.0)
    assert b.ttft_ms == pytest.approx(b_ttft_ms)
    assert a.e2el_ms == pytest.approx(12 + 202 + 5.4 + 48 * 5.2)


def test_arrivals_after_a_prompt_step_or_at_an_idle_replica_are_taken_in_at_once(tmp_path):
    """Three 100-token prompts at 0, 1 and 30 ms, recv interval 50: the first reaches an idle replica (prefilled at
    once, 12 ms); the second arrives during that prompt step, after which the scheduler polls — it is prefilled
    next (12 ms more, prefill-first); the third arrives at 30 ms, during the decode steps after that prompt step
    (the poll at 24 ms found nothing), and waits for the 50th decode step."""
    config = load_experiment(experiment(
        workload=_trace(tmp_path, [(0.0, 100, 80), (0.001, 100, 80), (0.030, 100, 5)]),
        scheduler={"kind": "continuous", "max_num_seqs": 16, "max_model_len": 4096, "recv_interval": 50}))
    ttft = simulator.run(config).requests.sort_values("request_id")["ttft_ms"].to_numpy()
    step = 5 + 2 * 0.2  # two decoding
    assert ttft == pytest.approx([12.0, 24.0 - 1.0, 24.0 + 50 * step - 30.0 + 12.0])


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_closed_form_runs_match_stepping_and_every_request_ends(async_scheduling):
    """Poisson arrivals of random lengths through chunked prefill on the roofline, recv interval 7: the decode runs
    computed in closed form, cut at the polls, give the same token times as one step at a time; every request ends;
    newcomers wait longer than with a poll every step."""
    sections = {"scheduler": {"kind": "chunked", "max_num_seqs": 16, "max_num_batched_tokens": 512,
                              "max_model_len": 2048, "async_scheduling": async_scheduling, "recv_interval": 7},
                "cost_model": {"kind": "roofline"},
                "workload": {"num_requests": 60, "arrival": {"kind": "poisson", "rate": 20.0},
                             "input_tokens": {"kind": "uniform", "min": 10, "max": 900},
                             "output_tokens": {"kind": "uniform", "min": 1, "max": 120}}}
    config = load_experiment(experiment(**sections))
    fast = simulator.run(config).requests.sort_values("request_id")
    slow = simulator.run(config, fast_forward=False).requests.sort_values("request_id")
    assert len(fast) == 60 and set(fast["status"]) == {"finished"}
    for column in ("first_token_s", "finish_s"):
        assert np.allclose(fast[column], slow[column], rtol=1e-9)
    every_step = load_experiment(experiment(**{**sections, "scheduler": {**sections["scheduler"],
                                                                         "recv_interval": 1}}))
    assert fast["ttft_ms"].mean() > simulator.run(every_step).requests["ttft_ms"].mean()


def test_attention_dp_ranks_are_refused():
    with pytest.raises(ConfigError, match=r"scheduler\.recv_interval: needs cluster\.data_parallel 1"):
        load_experiment(experiment(model="qwen3-30b-a3b", cluster={"data_parallel": 2},
                                   scheduler={"kind": "continuous", "recv_interval": 10}))
