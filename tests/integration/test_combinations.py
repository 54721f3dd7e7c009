"""The features of a changing cluster together — autoscaling, LoRA adapters, agentic sessions, faults and random
failures, async scheduling, the per-token table — under random settings: every request ends completed, rejected
or failed (the run checks it), a rerun gives the same table, and the token table agrees with the request table."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulator
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
