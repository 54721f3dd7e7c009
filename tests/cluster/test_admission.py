"""Admission control (``cluster.admission``): a token bucket's count by its closed form, the SLO gate's refusals
by a hand-run D/D/1 queue."""

from __future__ import annotations

import pytest

import simulator
from simulator.cluster import simulate, simulation
from simulator.cluster.replica import Replica
from simulator.config import load_experiment
from tests.helpers import experiment


def _constant(num_requests: int, rate: float, prompt: int, output: int) -> dict:
    return {"num_requests": num_requests, "arrival": {"kind": "constant", "rate": rate},
            "input_tokens": {"kind": "fixed", "value": prompt}, "output_tokens": {"kind": "fixed", "value": output}}


@pytest.mark.parametrize("bucket", [
    {"kind": "token_bucket", "rate": 4, "burst": 5},
    # 110 tokens a request (100 prompt + 10 output): 440 tokens/s is 4 requests/s, a 550-token burst 5 requests
    {"kind": "token_bucket", "rate": 440, "burst": 550, "unit": "tokens"},
])
def test_token_bucket_admits_burst_plus_rate_times_time(bucket):
    """Deterministic arrivals at λ = 10/s against a bucket of b = 5 refilled at r = 4/s: in T seconds (from the
    first arrival to the last) it admits b + r·T of them, ± 1; the rest are rejected before routing."""
    config = experiment(cluster={"replicas": 2, "admission": bucket}, workload=_constant(200, 10.0, 100, 10))
    rows = simulator.run(simulator.load(config)).requests
    admitted = rows[rows["status"] != "rejected"]
    span = rows["arrival_s"].max() - rows["arrival_s"].min()  # 19.9 s
    assert abs(len(admitted) - (5 + 4 * span)) <= 1
    assert (admitted["status"] == "finished").all()  # the replicas keep up: the bucket alone refuses
    refused = rows[rows["status"] == "rejected"]
    assert set(refused["reject_reason"]) == {"admission: token bucket empty"}
    assert (refused["replica"] == -1).all()  # never routed
    first = rows.sort_values("arrival_s").head(5)
    assert (first["status"] == "finished").all()  # the full bucket takes the first burst


def test_token_bucket_below_its_rate_refuses_nothing():
    config = experiment(cluster={"admission": {"kind": "token_bucket", "rate": 4, "burst": 1}},
                        workload=_constant(40, 3.9, 100, 10))
    assert simulator.run(simulator.load(config)).summary["num_rejected"] == 0


PROMPT, OUTPUT, PREFILL_MS, DECODE_MS = 50, 11, 1.0, 10.75
SERVICE_S = (PROMPT * PREFILL_MS + (OUTPUT - 1) * DECODE_MS) / 1000  # 157.5 ms; arrivals every 100 ms
GAP_S = 0.1


def _hand_run_dd1(num_requests: int, limit_s: float) -> list[bool]:
    """Which of the arrivals at 0, 0.1, 0.2, ... the SLO gate admits to one server that runs one request at a
    time for SERVICE_S: arrival k sees Q = PROMPT × (admitted requests not yet started) tokens ahead and is
    admitted when (Q + PROMPT) × s ≤ limit, s = PREFILL_MS per token (linear costs, no overhead)."""
    starts: list[float] = []
    admitted, free_at = [], 0.0
    for k in range(num_requests):
        t = k * GAP_S
        waiting = sum(1 for start in starts if start > t)
        predicted = (waiting * PROMPT + PROMPT) * PREFILL_MS / 1000
        admitted.append(predicted <= limit_s)
        if admitted[-1]:
            start = max(t, free_at)
            starts.append(start)
            free_at = start + SERVICE_S
    return admitted


@pytest.mark.parametrize(("ttft_ms", "margin"), [(160.0, 0.0), (200.0, 0.2), (110.0, 0.0)])
def test_slo_gate_refuses_exactly_what_its_prediction_puts_over_the_bound(ttft_ms, margin):
    """A D/D/1-like server (static batches of one, linear costs: a request holds it 157.5 ms) offered one request
    every 100 ms: the queue grows, and the gate refuses an arrival exactly when (prompts waiting + its own) ×
    1 ms/token exceeds (1 − margin) × ttft_ms: with three requests waiting at a 160 ms limit (200 ms), with two at
    110 ms (150 ms)."""
    config = experiment(
        scheduler={"kind": "static", "max_num_seqs": 1, "max_model_len": 2048},
        cost_model={"kind": "linear", "prefill_ms_per_token": PREFILL_MS, "decode_ms_per_step": DECODE_MS},
        cluster={"admission": {"kind": "slo", "ttft_ms": ttft_ms, "margin": margin}},
        workload=_constant(30, 1 / GAP_S, PROMPT, OUTPUT))
    rows = simulator.run(simulator.load(config)).requests
    expected = _hand_run_dd1(30, (1 - margin) * ttft_ms / 1000)
    assert list(rows["status"] != "rejected") == expected
    assert 0 < expected.count(False) < 30
    waiting_ahead = int((1 - margin) * ttft_ms // (PROMPT * PREFILL_MS))  # the queue a refused arrival found
    predicted = (waiting_ahead + 1) * PROMPT * PREFILL_MS
    reasons = set(rows.loc[rows["status"] == "rejected", "reject_reason"])
    assert reasons == {f"admission: predicted TTFT {predicted:.0f} ms exceeds {(1 - margin) * ttft_ms:g} ms"}


def test_slo_gate_defaults_to_each_class_bound_and_the_cost_models_prefill_rate():
    """Without ttft_ms the gate holds each class to its own slo.ttft_ms, else the experiment's; without
    prefill_tokens_per_s it takes the cost model's time per prompt token at a full iteration: with overhead o and p
    ms per token over a budget of B tokens, (o + B·p) / B. An idle replica predicts (P + 0) tokens × that."""
    budget, overhead = 1000, 20.0  # 0.1 ms/token + 20 ms / 1000 tokens = 0.12 ms per token
    classes = [{"name": "tight", "share": 1, "slo": {"ttft_ms": 10}}, {"name": "loose", "share": 1}]
    config = experiment(
        scheduler={"kind": "chunked", "max_num_seqs": 16, "max_model_len": 2048, "max_num_batched_tokens": budget},
        cost_model={"kind": "linear", "prefill_ms_per_token": 0.1, "decode_ms_per_step": 5.0,
                    "overhead_ms": overhead},
        cluster={"admission": {"kind": "slo"}}, slo={"ttft_ms": 1000},
        workload={**_constant(40, 0.5, 100, 5), "classes": classes})  # 100 tokens: 12 ms on an idle replica
    rows = simulator.run(simulator.load(config)).requests
    tight = rows["class_id"] == 0
    assert (rows.loc[tight, "status"] == "rejected").all() and tight.any()
    assert (rows.loc[~tight, "status"] == "finished").all() and (~tight).any()
    assert set(rows.loc[tight, "reject_reason"]) == {"admission: predicted TTFT 12 ms exceeds 10 ms"}


def test_slo_gate_prices_prompts_at_a_given_prefill_rate_behind_the_network():
    """prefill_tokens_per_s replaces the cost model's rate; the time since the client sent it counts: a 1,000-token
    prompt at 10,000 tokens/s behind a 50 ms network predicts 150 ms."""
    config = experiment(cost_model={**experiment()["cost_model"], "network_ms": 50},
                        cluster={"admission": {"kind": "slo", "ttft_ms": 149.9, "prefill_tokens_per_s": 10_000}},
                        workload=_constant(3, 1.0, 1000, 5))
    rows = simulator.run(simulator.load(config)).requests
    assert set(rows["reject_reason"]) == {"admission: predicted TTFT 150 ms exceeds 149.9 ms"}


def test_admission_keeps_the_queue_caps_and_its_running_sum_returns_to_zero(monkeypatch):
    """The gate stacks with the scheduler's max_queue_len and max_queue_delay_ms; the never-scheduled prompt tokens
    it predicts from return to zero on every replica when the run ends (each admission, expiry and client
    timeout took its own)."""
    config = load_experiment(experiment(
        cluster={"replicas": 2, "admission": {"kind": "slo", "ttft_ms": 40}},
        scheduler={"kind": "chunked", "max_num_seqs": 4, "max_model_len": 2048, "max_num_batched_tokens": 256,
                   "max_queue_len": 5, "max_queue_delay_ms": 300},
        workload={**experiment()["workload"], "num_requests": 300, "arrival": {"kind": "poisson", "rate": 200.0},
                  "client_timeout_s": 0.5}))
    replicas: list[Replica] = []

    class Kept(Replica):  # the engine's replica, kept for a look at the end
        __slots__ = ()

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            replicas.append(self)

    monkeypatch.setattr(simulation, "Replica", Kept)
    frame = simulate(config).recorder.requests.frame()
    reasons = frame["reject_reason"]
    assert reasons.str.startswith("admission: predicted TTFT").any()
    assert (reasons.str.startswith("queue full") | reasons.str.startswith("waited")).any()
    assert (frame["status"] == "cancelled").any()
    assert [replica.scheduler.queued_prompt_tokens for replica in replicas] == [0, 0]
