"""Clients that give up (``workload.cancel``, ``workload.client_timeout_s``): hand-timed single requests, every
request timed out, a binomial count, closed-loop and session clients, determinism, closed-form equivalence."""

from __future__ import annotations

import math

import numpy as np
import pytest

import simulator
from simulator.api import summary_json
from simulator.cluster import simulate
from simulator.config import load_experiment
from tests.helpers import experiment

LINEAR = {"kind": "linear", "prefill_ms_per_token": 1.0, "decode_ms_per_step": 10.0}


def _fixed(num_requests: int, rate: float, prompt: int, output: int, **extra) -> dict:
    return {"num_requests": num_requests, "arrival": {"kind": "constant", "rate": rate},
            "input_tokens": {"kind": "fixed", "value": prompt}, "output_tokens": {"kind": "fixed", "value": output},
            **extra}


def test_a_timed_out_request_leaves_at_its_deadline_with_the_tokens_of_its_last_step():
    """One request at a time (1 s apart): 100 prompt tokens at 1 ms each, then 10 ms decode steps. A 155 ms timeout
    comes 5.5 steps after the first token (100 ms): 6 tokens are out, the step in progress (150–160 ms) makes the
    7th, and the replica drops the request at its end. The client saw the end at 155 ms."""
    config = load_experiment(experiment(cost_model=LINEAR, workload=_fixed(5, 1.0, 100, 50, client_timeout_s=0.155)))
    output = simulate(config)
    assert output.final_kv_used_blocks == [0]
    result = simulator.run(config)
    rows, s = result.requests, result.summary
    assert (rows["status"] == "cancelled").all() and set(rows["reject_reason"]) == {"client timeout"}
    np.testing.assert_allclose(rows["finish_s"] - rows["arrival_s"], 0.155, rtol=1e-12)
    np.testing.assert_allclose(rows["first_token_s"] - rows["arrival_s"], 0.100, rtol=1e-12)
    assert (s["completed"], s["num_cancelled"], s["num_rejected"]) == (0, 5, 0)
    assert s["cancelled_output_tokens"] == 5 * 7
    assert math.isnan(s["mean_e2el_ms"])  # a cancelled request is no latency sample


@pytest.mark.parametrize("kv", [{"kind": "paged"}, {"kind": "paged", "prefix_caching": True},
                                {"kind": "contiguous", "reserve": "max_model_len"}])
@pytest.mark.parametrize("scheduler", [{"kind": "continuous"}, {"kind": "chunked", "max_num_batched_tokens": 64},
                                       {"kind": "static"}, {"kind": "continuous", "preemption": "swap"}])
def test_a_timeout_shorter_than_any_service_cancels_every_request_and_returns_all_kv(kv, scheduler):
    """Every request needs at least 80 ms (≥ 80 prompt tokens at 1 ms); a 50 ms timeout abandons each of them —
    queued or running, under load that preempts — and every KV block comes back."""
    config = load_experiment(experiment(
        cost_model=LINEAR, kv_cache={**kv, "block_size": 16, "num_gpu_blocks": 60},
        scheduler={**scheduler, "max_num_seqs": 8, "max_model_len": 512},
        workload={"num_requests": 200, "arrival": {"kind": "poisson", "rate": 100.0}, "client_timeout_s": 0.05,
                  "prefix": {"tokens": 32, "fraction": 0.5},
                  "input_tokens": {"kind": "uniform", "min": 48, "max": 400},
                  "output_tokens": {"kind": "uniform", "min": 1, "max": 60}}))
    output = simulate(config)
    assert output.final_kv_used_blocks == [0]
    summary = simulator.run(config).summary
    assert summary["num_cancelled"] == 200 and summary["completed"] == 0
    assert summary["num_requests"] == 200


def test_a_quarter_of_the_requests_cancelled_within_the_binomial_bound():
    """fraction 0.25 of 4,000 requests, each cancelled 1 ms after its send (before any could finish): the count is
    Binomial(4000, 0.25), mean 1,000, sd √(4000 · 0.25 · 0.75) = 27.4; within 4 sd. The draw is one per request in
    id order, so other lengths choose the same requests."""
    workload = {"num_requests": 4000, "arrival": {"kind": "poisson", "rate": 2000.0},
                "input_tokens": {"kind": "fixed", "value": 20}, "output_tokens": {"kind": "fixed", "value": 3},
                "cancel": {"fraction": 0.25, "after_s": 0.001}}
    config = experiment(cost_model={"kind": "linear", "prefill_ms_per_token": 0.1, "decode_ms_per_step": 1.0},
                        cluster={"replicas": 4}, workload=workload)
    rows = simulator.run(simulator.load(config)).requests
    cancelled = rows["status"] == "cancelled"
    assert abs(cancelled.sum() - 1000) <= 4 * math.sqrt(4000 * 0.25 * 0.75)
    assert set(rows.loc[cancelled, "reject_reason"]) == {"client cancel"}
    assert set(rows.loc[~cancelled, "status"]) == {"finished"}
    longer = simulator.run(simulator.load({**config, "workload": {**workload, "output_tokens": {
        "kind": "fixed", "value": 30}}})).requests
    assert (longer["status"] == "cancelled").equals(cancelled)


def test_a_cancelled_closed_loop_clients_next_request_follows_its_think_time():
    """One user, fixed 100 ms think time, every request timed out at 50 ms (it needs 590 ms): request k + 1 is sent
    think time after request k's cancellation, k·150 ms + 100 ms."""
    config = experiment(cost_model=LINEAR, workload={
        **_fixed(6, 1.0, 100, 50, client_timeout_s=0.05),
        "arrival": {"kind": "closed_loop", "users": 1, "think_ms": 100.0, "think": "fixed"}})
    rows = simulator.run(simulator.load(config)).requests
    np.testing.assert_allclose(rows["arrival_s"], [0.1 + 0.15 * k for k in range(6)], rtol=1e-12)
    assert (rows["status"] == "cancelled").all()


def test_requests_cancelled_while_queued_never_run_and_the_rest_run_back_to_back():
    """A static server of batch one holds each request 590 ms (100 ms prefill, 49 steps of 10 ms); five requests
    sent 100 ms apart; half are chosen to be cancelled 50 ms after their send — all while queued behind request 0
    (seed 12 chooses 1, 2 and 3; 0 and 4 are not). The chosen leave the queue unscheduled; 0 runs from 0 s, 4 from
    its end at 0.59 s."""
    config = experiment(seed=12, cost_model=LINEAR,
                        scheduler={"kind": "static", "max_num_seqs": 1, "max_model_len": 1024},
                        workload=_fixed(5, 10.0, 100, 50, cancel={"fraction": 0.5, "after_s": 0.05}))
    rows = simulator.run(simulator.load(config)).requests.set_index("request_id")
    chosen = rows["reject_reason"] == "client cancel"
    assert list(chosen) == [False, True, True, True, False]
    assert rows.loc[chosen, "first_scheduled_s"].isna().all()
    np.testing.assert_allclose(rows.loc[chosen, "finish_s"], [0.15, 0.25, 0.35], rtol=1e-12)
    np.testing.assert_allclose(rows.loc[[0, 4], "first_scheduled_s"], [0.0, 0.59], rtol=1e-12)
    np.testing.assert_allclose(rows.loc[[0, 4], "finish_s"], [0.59, 1.18], rtol=1e-12)


def test_a_cancelled_turn_ends_its_session():
    """A session's turn cancelled by its client ends the session: the later turns are rejected with the reason."""
    config = experiment(cost_model=LINEAR, workload={
        "num_requests": 1, "arrival": {"kind": "constant", "rate": 1.0},
        "input_tokens": {"kind": "fixed", "value": 100}, "output_tokens": {"kind": "fixed", "value": 50},
        "sessions": {"turns": {"kind": "fixed", "value": 3}}, "client_timeout_s": 0.2})
    rows = simulator.run(simulator.load(config)).requests
    assert list(rows["status"]) == ["cancelled", "rejected", "rejected"]
    assert list(rows["reject_reason"]) == ["client timeout", "turn 1 of its session was cancelled",
                                           "turn 2 of its session was rejected"]


MIXED = experiment(
    seed=11, cluster={"replicas": 2, "router": "least_outstanding",
                      "admission": {"kind": "token_bucket", "rate": 80, "burst": 10}},
    scheduler={"kind": "chunked", "max_num_seqs": 8, "max_model_len": 1024, "max_num_batched_tokens": 128},
    kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 80},
    workload={"num_requests": 300, "arrival": {"kind": "poisson", "rate": 100.0}, "client_timeout_s": 0.4,
              "cancel": {"fraction": 0.3, "after_s": 0.08},
              "input_tokens": {"kind": "uniform", "min": 10, "max": 400},
              "output_tokens": {"kind": "uniform", "min": 1, "max": 150}})


def test_same_seed_gives_a_byte_identical_summary():
    config = simulator.load(MIXED)
    first, second = simulator.run(config), simulator.run(config)
    assert summary_json(first.summary, config) == summary_json(second.summary, config)
    assert first.summary["num_cancelled"] > 0 and first.summary["num_rejected"] > 0


@pytest.mark.parametrize("disaggregated", [False, True])
def test_cancellation_in_closed_form_runs_equals_one_iteration_at_a_time(disaggregated):
    """A cancellation cuts a closed-form decode run at the step in progress: the same as stepping one iteration at
    a time."""
    config = dict(MIXED)
    if disaggregated:
        config["cluster"] = {"kind": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 2}}
    config = load_experiment(config)
    fast, slow = simulator.run(config), simulator.run(config, fast_forward=False)
    for column in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(fast.requests[column], slow.requests[column], rtol=1e-9, atol=1e-12)
    assert fast.requests["status"].equals(slow.requests["status"])
    assert fast.summary["cancelled_output_tokens"] == slow.summary["cancelled_output_tokens"]


@pytest.mark.parametrize("cluster", [{}, {"kind": "disaggregated", "prefill": {"replicas": 1},
                                          "decode": {"replicas": 1}}])
@pytest.mark.parametrize("speculative", [False, True])
def test_a_client_that_stops_after_n_tokens_ends_every_request_there(cluster, speculative):
    """fraction 1, after_tokens 7, every request asking for 50: each runs to its 7th token and ends there,
    cancelled (reason client stop), with exactly 7 tokens generated — 5 × 7 wasted — and its KV freed; its row
    states the 50 it asked for. Colocated, one request at a time: the 7th token comes 100 ms of prefill and 6
    decode steps of 10 ms after the send (160 ms). Speculating (two drafts, always accepted: 3 tokens a step) the
    cut still falls on the 7th token."""
    scheduler = {"kind": "continuous", "max_num_seqs": 16, "max_model_len": 2048}
    if speculative:
        scheduler["speculative"] = {"num_speculative_tokens": 2, "acceptance_rate": 1.0, "draft_cost_ratio": 0.0}
    config = load_experiment(experiment(
        cost_model=LINEAR, scheduler=scheduler, **({"cluster": cluster} if cluster else {}),
        workload=_fixed(5, 1.0, 100, 50, cancel={"fraction": 1.0, "after_tokens": 7})))
    output = simulate(config)
    assert output.final_kv_used_blocks == [0] * len(output.final_kv_used_blocks)
    result = simulator.run(config)
    rows, s = result.requests, result.summary
    assert (rows["status"] == "cancelled").all() and set(rows["reject_reason"]) == {"client stop"}
    assert (rows["output_tokens"] == 50).all()
    assert rows["tpot_ms"].isna().all() and rows["ttft_ms"].notna().all()  # 7 tokens generated, not the 50 stated
    assert (s["completed"], s["num_cancelled"], s["num_rejected"], s["num_failed"]) == (0, 5, 0, 0)
    assert s["cancelled_output_tokens"] == 5 * 7
    if not cluster and not speculative:
        np.testing.assert_allclose(rows["finish_s"] - rows["arrival_s"], 0.100 + 6 * 0.010, rtol=1e-12)


@pytest.mark.parametrize("cluster", [{}, {"kind": "disaggregated", "prefill": {"replicas": 1},
                                          "decode": {"replicas": 1}}])
def test_a_token_bucket_charges_a_stopped_request_the_output_it_asked_for(cluster):
    """The gateway cannot know a client will stop: five requests of 100 prompt tokens asking for 50, each stopped
    after 7, against a bucket of 330 tokens refilled at 0.001 a second (4 seconds of arrivals refill 0.004) cost
    150 each, so two are admitted (300 ≤ 330 < 450) and three rejected — where charging the 107 tokens each runs
    would admit three (321 ≤ 330). Colocated and disaggregated alike."""
    admission = {"kind": "token_bucket", "rate": 0.001, "burst": 330, "unit": "tokens"}
    config = load_experiment(experiment(
        cost_model=LINEAR, cluster={**cluster, "admission": admission},
        workload=_fixed(5, 1.0, 100, 50, cancel={"fraction": 1.0, "after_tokens": 7})))
    rows = simulator.run(config).requests.sort_values("request_id")
    assert list(rows["status"]) == ["cancelled"] * 2 + ["rejected"] * 3
    assert list(rows["reject_reason"]) == ["client stop"] * 2 + ["admission: token bucket empty"] * 3
    assert (rows["output_tokens"] == 50).all()


def test_stopping_after_n_tokens_is_the_work_of_n_token_requests():
    """The server generates up to N tokens before the client's cancellation reaches it: under load (two replicas,
    chunked prefill, preemptions on a small cache) every request stopped after 20 tokens runs exactly as the same
    request asking for 20 — the same first token, end, preemptions and replica — and those that asked for fewer
    complete as they would have."""
    def run(workload: dict):
        return simulator.run(load_experiment(experiment(
            seed=5, cost_model=LINEAR, cluster={"replicas": 2, "router": "least_outstanding"},
            scheduler={"kind": "chunked", "max_num_seqs": 8, "max_model_len": 1024, "max_num_batched_tokens": 128},
            kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 60},
            workload={"num_requests": 200, "arrival": {"kind": "poisson", "rate": 40.0},
                      "input_tokens": {"kind": "uniform", "min": 10, "max": 300}, **workload}))).requests

    stopped = run({"output_tokens": {"kind": "uniform", "min": 20, "max": 200},
                   "cancel": {"fraction": 1.0, "after_tokens": 20}})
    short = run({"output_tokens": {"kind": "fixed", "value": 20}})
    for column in ("first_scheduled_s", "first_token_s", "finish_s", "preemptions", "replica"):
        np.testing.assert_allclose(stopped[column], short[column], rtol=1e-12)
    asked_more = stopped["output_tokens"] > 20
    assert (stopped.loc[asked_more, "reject_reason"] == "client stop").all()
    assert (stopped.loc[~asked_more, "status"] == "finished").all() and (~asked_more).any()


def test_a_drawn_stop_cancels_the_requests_that_asked_for_more_and_counts_their_tokens():
    """after_tokens drawn uniformly from 1–100 for the chosen half of 400 requests asking for 1–100 tokens: a
    chosen request is cancelled exactly when its draw is below what it asked for, and the tokens wasted are the
    draws of those; the chosen requests are those of the same config cancelled after a time instead."""
    from simulator.workload.cancellation import client_deadlines

    workload = {"num_requests": 400, "arrival": {"kind": "poisson", "rate": 50.0},
                "input_tokens": {"kind": "uniform", "min": 10, "max": 200},
                "output_tokens": {"kind": "uniform", "min": 1, "max": 100},
                "cancel": {"fraction": 0.5, "after_tokens": {"kind": "uniform", "min": 1, "max": 100}}}
    config = load_experiment(experiment(seed=3, cost_model=LINEAR, cluster={"replicas": 2}, workload=workload))
    result = simulator.run(config)
    rows = result.requests.set_index("request_id").sort_index()
    deadlines = client_deadlines(config.workload, 400, np.random.default_rng(np.random.SeedSequence([3, 8])))
    assert deadlines is not None
    stops = deadlines.stops
    cut = (stops > 0) & (stops < rows["output_tokens"].to_numpy())
    assert list(rows["status"] == "cancelled") == list(cut)
    assert abs(cut.sum() - 99) < 4 * math.sqrt(400 * 0.2475 * 0.7525)  # P(chosen, draw < asked) = ½ · 0.495
    assert result.summary["cancelled_output_tokens"] == stops[cut].sum()
    timed = load_experiment(experiment(seed=3, cost_model=LINEAR, cluster={"replicas": 2}, workload={
        **workload, "cancel": {"fraction": 0.5, "after_s": 1e-6}}))
    assert list(client_deadlines(timed.workload, 400, np.random.default_rng(np.random.SeedSequence([3, 8]))).chosen) \
        == list(stops > 0)
