"""The features of a changing cluster together — autoscaling, LoRA adapters, agentic sessions, faults and random
failures, async scheduling, the per-token table — under random settings: every request ends completed, rejected
or failed (the run checks it), a rerun gives the same table, and the token table agrees with the request table."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulator
from simulator.cluster import simulate
from simulator.config import load_experiment
from tests.helpers import experiment


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lora=st.booleans(), sessions=st.booleans(), scaling=st.booleans(), crashes=st.booleans(),
       max_loras=st.integers(1, 3), fan_out=st.integers(1, 3), seed=st.integers(0, 30),
       scheduler=st.sampled_from(["continuous", "chunked"]), asynchronous=st.booleans())
def test_features_together_account_for_every_request(lora, sessions, scaling, crashes, max_loras, fan_out, seed,
                                                     scheduler, asynchronous):
    workload = {"num_requests": 60, "arrival": {"kind": "poisson", "rate": 40.0},
                "input_tokens": {"kind": "uniform", "min": 10, "max": 200},
                "output_tokens": {"kind": "uniform", "min": 1, "max": 40}}
    if sessions:
        workload["num_requests"] = 20
        workload["sessions"] = {"turns": {"kind": "uniform", "min": 1, "max": 3}, "think_ms": 20.0,
                                "fan_out": {"kind": "fixed", "value": fan_out},
                                "branch_tokens": {"kind": "fixed", "value": 8}}
    cluster = {"replicas": 2, "router": "least_outstanding"}
    if scaling:
        cluster["autoscaler"] = {"kind": "concurrency", "target": 4, "max_replicas": 4, "interval_s": 0.2,
                                 "cooldown_s": 0.4, "scale_up_delay_s": 0.1, "load_gb_per_s": 1000}
    elif crashes:
        cluster.update(mtbf_h=2 / 3600, repair_s=0.3, fault_retries=2, health_check_s=0.1, connect_timeout_s=0.05)
    sched = {"kind": scheduler, "max_num_seqs": 16, "max_model_len": 2048, "async_scheduling": asynchronous}
    if scheduler == "chunked":
        sched["max_num_batched_tokens"] = 256
    config = experiment(seed=seed, cluster=cluster, workload=workload, scheduler=sched)
    if lora:
        config["lora"] = {"adapters": 5, "max_loras": max_loras, "popularity": 1.0}
    config = load_experiment(config)
    first = simulator.run(config, tokens=True)
    again = simulator.run(config).requests
    assert first.requests.equals(again)
    s, rows = first.summary, first.requests
    assert s["completed"] + s["num_rejected"] + s["num_failed"] == s["num_requests"]
    tokens = first.tokens().groupby("request_id")["time_s"]
    done = rows[rows["status"] == "finished"].set_index("request_id")
    assert np.array_equal(tokens.max()[done.index], done["finish_s"])
    assert (tokens.size()[done.index] == done["output_tokens"]).all()


SCHEDULERS = [
    {"kind": "continuous"},
    {"kind": "continuous", "preemption": "swap"},
    {"kind": "chunked", "max_num_batched_tokens": 128},
    {"kind": "chunked", "max_num_batched_tokens": 256, "preemption": "swap", "max_queue_delay_ms": 150},
    {"kind": "static", "batch_timeout_ms": 20},
]
KV_CACHES = [{"kind": "paged"}, {"kind": "paged", "prefix_caching": True},
             {"kind": "contiguous", "reserve": "requested"}]
ADMISSIONS = [None, {"kind": "token_bucket", "rate": 30, "burst": 5},
              {"kind": "token_bucket", "rate": 6000, "burst": 1500, "unit": "tokens"},
              {"kind": "slo", "ttft_ms": 150, "margin": 0.2}]
CLIENTS = ["open", "closed_loop", "sessions", "max_concurrency", "client_connections"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), scheduler=st.sampled_from(SCHEDULERS), kv=st.sampled_from(KV_CACHES),
       admission=st.sampled_from(ADMISSIONS), clients=st.sampled_from(CLIENTS),
       fraction=st.sampled_from([0.0, 0.3, 1.0]), after_s=st.one_of(st.none(), st.floats(0.001, 0.5)),
       after_tokens=st.one_of(st.none(), st.integers(1, 60)),
       timeout_s=st.one_of(st.none(), st.floats(0.01, 1.0)), topology=st.sampled_from(["one", "three",
                                                                                         "disaggregated"]),
       crashes=st.booleans(), scaling=st.booleans(), asynchronous=st.booleans(), blocks=st.integers(40, 300),
       speculative=st.sampled_from([None, {"num_speculative_tokens": 2, "acceptance": [0.8, 0.5],
                                           "draft_cost_ratio": 0.05}]))
def test_cancellation_and_admission_account_for_every_request(seed, scheduler, kv, admission, clients, fraction,
                                                              after_s, after_tokens, timeout_s, topology, crashes,
                                                              scaling, asynchronous, blocks, speculative):
    """Client cancellations (after a time, after a number of output tokens, or whichever comes first) and timeouts
    with admission control, faults and retries, disaggregation, autoscaling, speculative decoding on a paged cache
    (its drafts' KV reserved and released) and every kind of client: each generated request ends exactly once —
    completed, rejected, cancelled (with its reason, when its deadline came or, stopped after N tokens, no later) or
    failed; all KV is returned; a rerun gives the same table."""
    if after_s is None and after_tokens is None:
        after_s = 0.1
    cancel = {"fraction": fraction, "after_s": after_s, "after_tokens": after_tokens}
    workload = {"num_requests": 40, "arrival": {"kind": "poisson", "rate": 60.0},
                "input_tokens": {"kind": "uniform", "min": 10, "max": 300},
                "output_tokens": {"kind": "uniform", "min": 1, "max": 80},
                "cancel": {key: value for key, value in cancel.items() if value is not None},
                "client_timeout_s": timeout_s}
    if clients == "closed_loop":
        workload["arrival"] = {"kind": "closed_loop", "users": 6, "think_ms": 5.0}
    elif clients == "sessions":
        workload.update(num_requests=12, sessions={"turns": {"kind": "uniform", "min": 1, "max": 4},
                                                   "think_ms": 10.0})
    elif clients == "max_concurrency":
        workload["max_concurrency"] = 5
    elif clients == "client_connections":
        workload["client_connections"] = 5
    cluster: dict = {"replicas": 1 if topology == "one" else 3, "router": "least_outstanding",
                     "admission": admission}
    if topology == "disaggregated":
        cluster = {"kind": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 2},
                   "admission": admission}
    if crashes:
        cluster.update(mtbf_h=2 / 3600, repair_s=0.3, fault_retries=1, health_check_s=0.05, connect_timeout_s=0.02)
    elif scaling and topology == "three":
        cluster["autoscaler"] = {"kind": "concurrency", "target": 3, "max_replicas": 4, "interval_s": 0.1,
                                 "cooldown_s": 0.2, "scale_up_delay_s": 0.05, "load_gb_per_s": 1000}
    config = load_experiment(experiment(
        seed=seed, cluster=cluster, workload=workload, kv_cache={**kv, "block_size": 16, "num_gpu_blocks": blocks},
        scheduler={**scheduler, "max_num_seqs": 8, "max_model_len": 512, "async_scheduling": asynchronous,
                   **({"speculative": speculative} if speculative and kv["kind"] == "paged" else {})}))
    output = simulate(config)
    assert output.final_kv_used_blocks == [0] * len(output.final_kv_used_blocks)
    result = simulator.run(config)
    rows, s = result.requests, result.summary
    assert sorted(rows["request_id"]) == list(range(s["num_requests"]))
    assert set(rows["status"]) <= {"finished", "rejected", "cancelled", "failed"}
    assert s["completed"] + s["num_rejected"] + s["num_cancelled"] + s["num_failed"] == s["num_requests"]
    assert (rows.loc[rows["status"] != "finished", "reject_reason"] != "").all()
    cancelled = rows[rows["status"] == "cancelled"]
    assert set(cancelled["reject_reason"]) <= {"client cancel", "client timeout", "client stop"}
    stopped = cancelled["reject_reason"] == "client stop"
    timed = cancelled[~stopped]
    deadline = np.where(timed["reject_reason"] == "client cancel", after_s or np.inf, timeout_s or np.inf)
    np.testing.assert_allclose(timed["finish_s"] - timed["arrival_s"], deadline, rtol=1e-9, atol=1e-9)
    if stopped.any():  # stopped at its N-th token: it had asked for more, and no deadline had come
        first = min(after_s or np.inf, timeout_s or np.inf)
        assert (cancelled.loc[stopped, "output_tokens"] > after_tokens).all()
        assert ((cancelled.loc[stopped, "finish_s"] - cancelled.loc[stopped, "arrival_s"]) <= first + 1e-9).all()
        assert s["cancelled_output_tokens"] >= after_tokens * stopped.sum()
    if after_tokens is not None and fraction == 1.0:  # every client stops after N: no request completes longer
        assert (rows.loc[rows["status"] == "finished", "output_tokens"] <= after_tokens).all()
    done = rows[rows["status"] == "finished"]
    limit = timeout_s if timeout_s is not None else np.inf
    assert ((done["finish_s"] - done["arrival_s"]) <= limit + 1e-9).all()  # none outlived its client's timeout
    assert simulator.run(config).requests.equals(rows)
