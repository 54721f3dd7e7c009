"""Routers and trace replay across replicas."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import simulator
from simulator.cluster.router import ROUTERS
from simulator.config import load_experiment
from simulator.config.cluster import RouterConfig
from simulator.errors import ConfigError, LLMSimError
from simulator.request import Prefix, Request
from simulator.workload import read_trace
from tests.helpers import experiment, same_summaries


def _router(kind, loads, **config):
    replicas = [SimpleNamespace(outstanding=o, kv_load=k) for o, k in loads]
    return ROUTERS.get(kind)(replicas, RouterConfig(kind=kind, **config), np.random.default_rng(0)), replicas


def _request(i=0, prefix=None):
    return Request(i, 0.0, 10, 10, prefix)


def test_least_outstanding_and_least_kv_load_pick_the_emptiest_replica_lowest_index_first():
    router, _ = _router("least_outstanding", [(3, 0.1), (1, 0.9), (1, 0.2)])
    assert router.route(_request()) == 1
    router, _ = _router("least_kv_load", [(3, 0.5), (1, 0.9), (0, 0.5)])
    assert router.route(_request()) == 2  # equal KV load: fewer outstanding


@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.0, 0.25, 0.5, 1.0])), min_size=1, max_size=12))
def test_the_early_exit_scans_pick_the_first_least_key(loads):
    """The routers stop at the first idle replica; the pick is still the first minimum over every replica."""
    outstanding = [o for o, _ in loads]
    keys = [(k, o) for o, k in loads]
    assert _router("least_outstanding", loads)[0].route(_request()) == outstanding.index(min(outstanding))
    assert _router("least_kv_load", loads)[0].route(_request()) == keys.index(min(keys))


def test_power_of_two_never_picks_the_busier_of_its_two_samples():
    router, _ = _router("power_of_two", [(i, 0.0) for i in range(8)])
    picks = [router.route(_request()) for _ in range(2000)]
    assert 7 not in picks  # the busiest replica loses every comparison
    assert np.bincount(picks, minlength=8)[0] == pytest.approx(2000 * 7 / 28, rel=0.15)  # P(min) = 2(n−1−i)/n(n−1)


def test_prefix_affinity_keeps_a_group_home_until_it_is_overloaded():
    router, replicas = _router("prefix_affinity", [(0, 0.0), (0, 0.0), (0, 0.0)], load_cap=2.0)
    group = Prefix((42, 43), 512)
    home = router.route(_request(prefix=group))
    replicas[home].outstanding = 1
    assert router.route(_request(prefix=group)) == home  # 1 <= 2 × 1/3 + 1
    replicas[home].outstanding = 10
    assert router.route(_request(prefix=group)) != home  # 10 > 2 × 10/3 + 1: spill to the least loaded
    assert router.route(_request(prefix=None)) != home


def test_unknown_router_is_a_clear_error():
    with pytest.raises(LLMSimError, match=r"cluster\.router: unknown kind .nearest."):
        simulator.run(load_experiment(experiment(cluster={"replicas": 2, "router": "nearest"})))


def test_users_own_router_by_file_path(tmp_path):
    (tmp_path / "my_router.py").write_text(
        "from simulator.cluster.router import Router\n"
        "class LastReplica(Router):\n"
        "    def route(self, request):\n"
        "        return self.num_replicas - 1\n"
    )
    config = experiment(cluster={"replicas": 3, "router": {"kind": f"{tmp_path / 'my_router.py'}:LastReplica"}})
    result = simulator.run(load_experiment(config))
    assert set(result.requests["replica"]) == {2}
    config["cluster"]["router"]["kind"] = "simulator.request.Request"
    with pytest.raises(ConfigError, match=r"is not a subclass of simulator\.cluster\.router\.Router"):
        simulator.run(load_experiment(config))


@pytest.mark.parametrize("kind", ["random", "least_outstanding", "least_kv_load", "power_of_two", "prefix_affinity"])
def test_every_router_is_deterministic_and_serves_everyone(kind):
    config = load_experiment(experiment(cluster={"replicas": 3, "router": kind}))
    first, second = simulator.run(config), simulator.run(config)
    assert same_summaries(first.summary, second.summary) and first.summary["completed"] == 50


def test_azure_conversation_trace_through_four_replicas_offers_the_trace_load(shared_data):
    path = shared_data / "traces" / "azure_conv_2023.csv"
    trace = read_trace(path)
    config = experiment(
        model="llama-3-8b", hardware="h100-sxm", cluster={"replicas": 4, "router": "least_outstanding"},
        scheduler={"kind": "chunked", "max_num_seqs": 128}, kv_cache={"kind": "paged"},
        cost_model={"kind": "roofline"}, workload={"trace": {"path": str(path)}},
    )
    result = simulator.run(load_experiment(config))
    requests = result.requests
    assert result.summary["num_requests"] == len(trace.arrival_s) == 19_366
    rejected = requests[requests["status"] == "rejected"]  # prompts beyond Llama-3-8B's 8,192 positions
    assert len(rejected) <= 5 and rejected["reject_reason"].str.contains("max_model_len").all()
    np.testing.assert_allclose(requests["arrival_s"], trace.arrival_s)
    offered_rate = (len(requests) - 1) / requests["arrival_s"].iloc[-1]
    assert offered_rate == pytest.approx((len(trace.arrival_s) - 1) / trace.arrival_s[-1], rel=1e-12)
    assert requests["input_tokens"].mean() == pytest.approx(trace.input_tokens.mean(), rel=1e-12)
    assert requests["output_tokens"].mean() == pytest.approx(trace.output_tokens.mean(), rel=1e-12)
    # and the trace's own statistics (../shared/data/README.md: prefill mean 1,155, decode mean 211 overall)
    assert requests["input_tokens"].mean() == pytest.approx(1155, rel=0.01)
    assert requests["output_tokens"].mean() == pytest.approx(211, rel=0.01)
    assert requests.groupby("replica").size().min() > 4000  # every replica took its share


TWO_TIERS = [
    {"name": "premium", "share": 1, "priority": 0, "slo": {"ttft_ms": 1e9},
     "input_tokens": {"kind": "fixed", "value": 50}, "output_tokens": {"kind": "fixed", "value": 5}},
    {"name": "batch", "share": 3, "priority": 1, "slo": {"ttft_ms": 1e-3},
     "input_tokens": {"kind": "fixed", "value": 500}, "output_tokens": {"kind": "fixed", "value": 20}},
]


def test_classes_split_requests_by_share_with_their_own_lengths_and_slos():
    config = experiment(workload={"num_requests": 4000, "arrival": {"kind": "poisson", "rate": 1.0},
                                  "classes": TWO_TIERS}, scheduler={"kind": "continuous", "max_num_seqs": 64})
    result = simulator.run(load_experiment(config))
    requests, s = result.requests, result.summary
    premium = requests["class_id"] == 0
    assert premium.mean() == pytest.approx(0.25, abs=4 * np.sqrt(0.25 * 0.75 / 4000))
    assert set(requests.loc[premium, "input_tokens"]) == {50} and set(requests.loc[~premium, "input_tokens"]) == {500}
    # each tier is held to its own SLO: premium's is unreachable to miss, batch's impossible to meet
    assert s["premium.slo_attainment"] == 1.0 and s["batch.slo_attainment"] == 0.0
    assert s["slo_attainment"] == pytest.approx(premium.mean())
    assert s["premium.num_requests"] + s["batch.num_requests"] == 4000


def test_lower_priority_value_is_served_first_fcfs_within_a_priority():
    """Everything queued at once behind one slot: all premium requests start before any batch request."""
    config = experiment(workload={"num_requests": 200, "arrival": {"kind": "constant", "rate": 1e7},
                                  "classes": TWO_TIERS}, scheduler={"kind": "continuous", "max_num_seqs": 1})
    requests = simulator.run(load_experiment(config)).requests.iloc[1:]  # the first starts before others arrive
    order = requests.sort_values("first_scheduled_s")
    classes = order["class_id"].to_numpy()
    assert (np.diff(classes) >= 0).all()  # premium (0) block, then batch (1)
    for _, group in order.groupby("class_id"):
        assert group["request_id"].is_monotonic_increasing


def test_tokenization_counts_in_ttft_and_can_reorder_arrivals(tmp_path):
    """10 µs per prompt token: a 3,000-token prompt sent at 0 reaches the server at 30 ms, after a 100-token one
    sent at 1 ms (2 ms). TTFT of the short one = 1 ms tokenizing + 2 + 100 × 0.1 ms."""
    path = tmp_path / "t.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.000,3000,2\n0.001,100,2\n")
    config = experiment(workload={"trace": {"path": str(path)}},
                        scheduler={"kind": "continuous", "max_num_seqs": 1, "max_model_len": 8192},
                        cost_model={**experiment()["cost_model"], "tokenize_us_per_token": 10.0})
    requests = simulator.run(load_experiment(config)).requests
    long, short = requests.iloc[0], requests.iloc[1]
    assert short["first_scheduled_s"] == pytest.approx(0.002) and short["ttft_ms"] == pytest.approx(1 + 2 + 10)
    assert long["first_scheduled_s"] > short["first_scheduled_s"]


@pytest.mark.parametrize("users", [1, 4])
def test_closed_loop_obeys_the_interactive_response_time_law(users):
    """N users thinking Z on average: throughput X = N / (R + Z) with R the mean response time (Little's law on
    the whole loop). With one user nothing queues: R is the bare service time 2 + 200 × 0.1 + 9 × 5.2 ms."""
    config = experiment(
        scheduler={"kind": "static", "max_num_seqs": 1},
        workload={"num_requests": 3000, "arrival": {"kind": "closed_loop", "users": users, "think_ms": 100},
                  "input_tokens": {"kind": "fixed", "value": 200}, "output_tokens": {"kind": "fixed", "value": 10}},
    )
    result = simulator.run(load_experiment(config))
    s = result.summary
    response_s, think_s = s["mean_e2el_ms"] / 1000, 0.1
    assert s["request_throughput"] == pytest.approx(users / (response_s + think_s), rel=0.03)
    if users == 1:
        assert result.requests["e2el_ms"].to_numpy() == pytest.approx(2 + 20 + 9 * 5.2)
    else:
        assert response_s > (2 + 20 + 9 * 5.2) / 1000  # users queue behind each other


@pytest.mark.parametrize(("limits", "ttft_ms"), [
    ({}, [42.0] * 4),
    ({"client_connections": 2}, [22.0, 22.0, 44.0, 44.0]),
    ({"max_concurrency": 2}, [22.0] * 4),
])
def test_a_client_connection_pool_counts_the_wait_for_a_connection(tmp_path, limits, ttft_ms):
    """Four 100-token prompts of one output token at 0 s (prefill 2 ms + 0.1 ms per token). Unlimited: prefilled
    together in 2 + 40 = 42 ms. Two client connections: two go out and end at 22 ms, the other two then, ending at
    44 ms, their wait counted (sent at 0). ``max_concurrency`` 2 holds them back instead and sends them at 22 ms:
    22 ms each from its send."""
    from tests.cluster.test_lockstep import _trace

    workload = {**_trace(tmp_path, [(0.0, 100, 1)] * 4), **limits}
    rows = simulator.run(load_experiment(experiment(workload=workload))).requests.sort_values("request_id")
    assert rows["ttft_ms"].to_numpy() == pytest.approx(ttft_ms)
    assert rows["first_token_s"].to_numpy() * 1000 == pytest.approx([22.0, 22.0, 44.0, 44.0] if limits else [42.0] * 4)


def test_closed_loop_clients_over_fewer_connections_wait_their_turn():
    """Six clients without think time over two connections, fixed 100-token prompts of one output token: requests go
    out in pairs, each pair's prefill 2 + 0.1 · 200 = 22 ms. A client's request waits for the two pairs ahead of it
    (Little's law: 6 in the loop, 2 served per 22 ms), so past the first round each request's latency is 3 × 22 ms,
    and never more than two requests run at once."""
    workload = {"num_requests": 60, "client_connections": 2, "arrival": {"kind": "closed_loop", "users": 6},
                "input_tokens": {"kind": "fixed", "value": 100}, "output_tokens": {"kind": "fixed", "value": 1}}
    result = simulator.run(load_experiment(experiment(workload=workload)))
    rows = result.requests.sort_values("request_id")
    assert result.summary["completed"] == 60 and result.summary["peak_running"] <= 2
    assert rows["e2el_ms"].to_numpy()[:6] == pytest.approx([22, 22, 44, 44, 66, 66])
    assert rows["e2el_ms"].to_numpy()[6:] == pytest.approx(66.0)


def test_max_concurrency_caps_the_requests_outstanding_and_counts_latency_from_the_send():
    """Arrivals far faster than the server with max_concurrency 2: never more than two requests running, every
    request completes, each is sent when an earlier one ends (in arrival order), and its TTFT is one unqueued
    prefill — no server-side queue forms."""
    import simulator

    def config(cap):
        workload = {"num_requests": 60, "arrival": {"kind": "poisson", "rate": 500},
                    "input_tokens": {"kind": "fixed", "value": 200}, "output_tokens": {"kind": "fixed", "value": 20}}
        if cap is not None:
            workload["max_concurrency"] = cap
        return simulator.load({"model": "llama-3-8b", "hardware": "h100-sxm", "workload": workload})

    capped, free = simulator.run(config(2)), simulator.run(config(None))
    assert capped.summary["completed"] == 60 and capped.summary["peak_running"] <= 2
    sent = capped.requests.sort_values("request_id")["arrival_s"].to_numpy()
    assert (sent[1:] >= sent[:-1]).all()  # the waiting requests go out in order
    assert capped.summary["p99_ttft_ms"] < 0.2 * free.summary["p99_ttft_ms"]
    with pytest.raises(Exception, match="max_concurrency caps open-loop arrivals"):
        simulator.load({"model": "llama-3-8b", "hardware": "h100-sxm", "workload": {
            "num_requests": 4, "max_concurrency": 2, "arrival": {"kind": "closed_loop", "users": 2},
            "input_tokens": {"kind": "fixed", "value": 8}, "output_tokens": {"kind": "fixed", "value": 8}}})


@pytest.mark.parametrize("policy", ["max_utilization", "guaranteed_no_evict"])
def test_guaranteed_no_evict_admits_whole_lengths_and_never_preempts(tmp_path, policy):
    """Eight requests at 0 s of 100 prompt and 300 output tokens (399 KV tokens at the end: 25 blocks of 16) on a
    pool of 100 blocks. guaranteed_no_evict (TensorRT-LLM's default) admits four — their whole lengths fill the
    pool — which prefill together (2 + 0.1 · 400 = 42 ms) and decode 299 steps of 5 + 0.2 · 4 = 5.8 ms, ending at
    1,776.2 ms; the other four start then (TTFT 1,776.2 + 42 ms) and nothing is preempted. max_utilization (vLLM's
    way) admits on the blocks free now, runs more at once and preempts as they grow."""
    from tests.cluster.test_lockstep import _trace

    config = experiment(workload=_trace(tmp_path, [(0.0, 100, 300)] * 8),
                        kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 100},
                        scheduler={"kind": "continuous", "max_num_seqs": 16, "max_model_len": 2048,
                                   "capacity_policy": policy})
    result = simulator.run(load_experiment(config))
    rows = result.requests.sort_values("request_id")
    assert result.summary["completed"] == 8
    if policy == "guaranteed_no_evict":
        assert result.summary["num_preemptions"] == 0 and result.summary["peak_running"] == 4
        assert rows["ttft_ms"].to_numpy() == pytest.approx([42.0] * 4 + [1776.2 + 42.0] * 4)
        assert rows["e2el_ms"].to_numpy()[:4] == pytest.approx(1776.2)
    else:
        assert result.summary["num_preemptions"] > 0 and result.summary["peak_running"] > 4


def test_without_chunked_prefill_no_evict_refuses_only_prompts_longer_than_the_budget(tmp_path):
    """TensorRT-LLM without chunked context: a context must fit max_num_tokens, but with guaranteed_no_evict nothing
    is preempted, so nothing ever re-prefills its prompt and output — max_model_len may exceed the budget. Of prompts
    of 600, 1,024 and 1,025 tokens under a 1,024-token budget the last is refused on arrival, with the reason; the
    others complete. With max_utilization (preemption by recompute) the same budget is a configuration error."""
    from tests.cluster.test_lockstep import _trace

    scheduler = {"kind": "continuous", "prefill_priority": False, "max_num_seqs": 16, "max_model_len": 4096,
                 "max_num_batched_tokens": 1024, "capacity_policy": "guaranteed_no_evict"}
    config = experiment(workload=_trace(tmp_path, [(0.0, 600, 50), (0.0, 1024, 50), (0.0, 1025, 50)]),
                        kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 1000}, scheduler=scheduler)
    rows = simulator.run(load_experiment(config)).requests.sort_values("request_id")
    assert rows["status"].tolist() == ["finished", "finished", "rejected"]
    assert rows["reject_reason"].iloc[2] == ("prompt of 1025 tokens exceeds max_num_batched_tokens 1024: without "
                                             "chunked prefill a prompt must fit one iteration")
    with pytest.raises(ConfigError, match=r"max_num_batched_tokens: 1024 is below max_model_len 4096.*"
                                          r"guaranteed_no_evict"):
        simulator.run(load_experiment({**config, "scheduler": {**scheduler, "capacity_policy": "max_utilization"}}))


def test_guaranteed_no_evict_needs_a_paged_cache():
    config = experiment(kv_cache={"kind": "contiguous", "block_size": 16, "num_gpu_blocks": 256},
                        scheduler={"kind": "continuous", "max_num_seqs": 16, "max_model_len": 2048,
                                   "capacity_policy": "guaranteed_no_evict"})
    with pytest.raises(ConfigError, match=r"guaranteed_no_evict needs kv_cache\.kind: paged"):
        simulator.run(load_experiment(config))
