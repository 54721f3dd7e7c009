"""Faults (cluster.faults): crashed replicas lose their work and KV, their requests run again elsewhere or fail
with the reason, slow replicas take longer per step — timed by hand with linear costs — and every request is
accounted for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulator
from simulator.config import load_experiment
from simulator.errors import ConfigError
from tests.helpers import experiment


def _two_replicas(tmp_path, requests, faults, retries=1, replicas=2):
    """Linear costs (prefill 2 ms + 0.1 ms per token, decode steps of 5.2 ms for one sequence), round robin."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                     + "".join(f"{t!r},{i},{o}\n" for t, i, o in requests))
    return experiment(cluster={"replicas": replicas, "router": "round_robin", "faults": faults,
                               "fault_retries": retries},
                      workload={"trace": {"path": str(trace)}})


def test_a_crash_sends_the_running_request_to_another_replica(tmp_path):
    """A request starts on replica 0 at 0 s (100-token prompt, 101 tokens out); replica 0 crashes at 0.1 s. The
    request starts again on replica 1: first token at 0.1 s + 12 ms, then 100 steps of 5.2 ms."""
    config = _two_replicas(tmp_path, [(0.0, 100, 101)], [{"at_s": 0.1, "replica": 0, "kind": "crash",
                                                          "duration_s": 5.0}])
    row = simulator.run(load_experiment(config)).requests.iloc[0]
    assert (row["status"], row["replica"], row["retries"]) == ("finished", 1, 1)
    assert row["ttft_ms"] == pytest.approx(100 + 12)
    assert row["e2el_ms"] == pytest.approx(100 + 12 + 100 * 5.2)


def test_without_retries_the_lost_requests_fail_with_the_reason(tmp_path):
    """Two requests on replica 0 (round robin puts the 1st and 3rd there), one on replica 1; replica 0 crashes at
    0.05 s with no retries allowed: its two fail, the other completes; every request is counted once."""
    config = _two_replicas(tmp_path, [(0.0, 100, 101), (0.0, 100, 101), (0.01, 100, 101)],
                           [{"at_s": 0.05, "replica": 0, "kind": "crash", "duration_s": 1.0}], retries=0)
    result = simulator.run(load_experiment(config))
    rows = result.requests.sort_values("request_id")
    assert rows["status"].tolist() == ["failed", "finished", "failed"]
    assert (rows[rows["status"] == "failed"]["reject_reason"] == "replica 0 crashed at 0.05 s (after 0 retries)").all()
    s = result.summary
    assert (s["completed"], s["num_rejected"], s["num_failed"], s["num_requests"]) == (1, 0, 2, 3)


def test_requests_sent_while_every_replica_is_down_fail(tmp_path):
    config = _two_replicas(tmp_path, [(0.0, 10, 2), (0.5, 10, 2)], [{"at_s": 0.1, "replica": 0, "kind": "crash",
                                                                     "duration_s": 1.0}], replicas=1)
    row = simulator.run(load_experiment(config)).requests.sort_values("request_id").iloc[1]
    assert (row["status"], row["reject_reason"]) == ("failed", "no replica is up")


def test_a_crashed_replica_is_back_after_its_restart(tmp_path):
    """Replica 0 is down from 0.1 to 0.6 s: the request round robin sends there at 0.3 s goes to replica 1 instead,
    the one at 0.8 s (replica 0's turn again) is served by replica 0."""
    config = _two_replicas(tmp_path, [(0.0, 10, 2), (0.2, 10, 2), (0.3, 10, 2), (0.7, 10, 2), (0.8, 10, 2)],
                           [{"at_s": 0.1, "replica": 0, "kind": "crash", "duration_s": 0.5}])
    rows = simulator.run(load_experiment(config)).requests.sort_values("request_id")
    assert rows["replica"].tolist() == [0, 1, 1, 1, 0] and (rows["status"] == "finished").all()


def test_a_slow_replica_takes_longer_per_step(tmp_path):
    """Slowed 2× from 0.1 s for 1 s: the decode run in progress is cut at the step then running (the 17th ends at
    12 + 17 × 5.2 = 100.4 ms), the other 83 steps take 10.4 ms."""
    config = _two_replicas(tmp_path, [(0.0, 100, 101)], [{"at_s": 0.1, "replica": 0, "kind": "slow",
                                                          "duration_s": 1.0, "slowdown": 2.0}], replicas=1)
    row = simulator.run(load_experiment(config)).requests.iloc[0]
    assert row["e2el_ms"] == pytest.approx(12 + 17 * 5.2 + 83 * 10.4)


@pytest.mark.parametrize("cluster, message", [
    ({"replicas": 2, "faults": [{"at_s": 1, "replica": 2, "kind": "crash", "duration_s": 1}]},
     "replica 2 does not exist"),
    ({"replicas": 2, "faults": [{"at_s": 1, "replica": 0, "kind": "crash", "duration_s": 2},
                                {"at_s": 2.5, "replica": 0, "kind": "crash", "duration_s": 1}]},
     "the crash of replica 0 at 2.5 s overlaps the one at 1 s"),
])
def test_faults_that_cannot_be_modelled_say_so(cluster, message):
    with pytest.raises(ConfigError, match=message):
        load_experiment(experiment(cluster=cluster))


def test_every_request_ends_completed_rejected_or_failed_under_repeated_faults():
    """Three replicas, crashes (one of them while another is down) and a slowdown under Poisson load: the run's own
    accounting check passes and the counts add up to the requests generated."""
    config = experiment(cluster={"replicas": 3, "router": "least_outstanding", "fault_retries": 1, "faults": [
        {"at_s": 0.5, "replica": 0, "kind": "crash", "duration_s": 1.0},
        {"at_s": 0.8, "replica": 1, "kind": "crash", "duration_s": 0.5},
        {"at_s": 1.2, "replica": 2, "kind": "slow", "duration_s": 1.0, "slowdown": 4.0},
        {"at_s": 1.6, "replica": 0, "kind": "crash", "duration_s": 0.2},
        {"at_s": 2.0, "replica": 2, "kind": "crash", "duration_s": 0.3}]},
        workload={"num_requests": 400, "arrival": {"kind": "poisson", "rate": 100.0},
                  "input_tokens": {"kind": "uniform", "min": 10, "max": 300},
                  "output_tokens": {"kind": "uniform", "min": 1, "max": 100}})
    result = simulator.run(load_experiment(config))
    s = result.summary
    assert s["completed"] + s["num_rejected"] + s["num_failed"] == s["num_requests"] == 400
    assert s["num_failed"] > 0 and (result.requests["retries"] > 0).any()
    assert (result.requests.loc[result.requests["status"] == "failed", "reject_reason"] != "").all()


def test_replicas_fill_nodes_in_index_order():
    """8 GPUs per H100 node: TP 1 puts 8 replicas on a node, TP 4 two, TP 16 spans two nodes; each pool starts a
    fresh node."""
    from simulator.cluster.simulation import replica_nodes
    from simulator.config.cluster import PoolConfig
    from simulator.config.deployment import resolve

    deployment = resolve(load_experiment(experiment()))
    pools = [PoolConfig(replicas=10, tensor_parallel=1), PoolConfig(replicas=3, tensor_parallel=4),
             PoolConfig(replicas=2, tensor_parallel=16)]
    nodes = replica_nodes(deployment, pools)
    assert nodes[:10] == [frozenset({0})] * 8 + [frozenset({1})] * 2
    assert nodes[10:13] == [frozenset({2}), frozenset({2}), frozenset({3})]
    assert nodes[13:] == [frozenset({4, 5}), frozenset({6, 7})]


def test_a_node_crash_takes_down_every_replica_on_it(tmp_path):
    """TP 4 on H100 nodes: replicas 0–1 on node 0, 2–3 on node 1. Node 1 crashes with four requests running, one
    per replica: the two on replicas 2 and 3 run again on replicas 0 and 1 (never on a replica of the crashed
    node), the others finish where they started."""
    config = _two_replicas(tmp_path, [(0.0, 100, 101)] * 4, [{"at_s": 0.1, "node": 1, "kind": "crash",
                                                               "duration_s": 5.0}], replicas=4)
    config["cluster"]["tensor_parallel"] = 4
    result = simulator.run(load_experiment(config))
    rows = result.requests.sort_values("request_id")
    assert rows["retries"].tolist() == [0, 0, 1, 1]
    assert set(rows["replica"][rows["retries"] > 0]) <= {0, 1}
    assert (result.summary["replica_crashes"], result.summary["retried_requests"]) == (2, 2)


def test_a_node_that_does_not_exist_is_refused(tmp_path):
    config = _two_replicas(tmp_path, [(0.0, 10, 2)], [{"at_s": 0.1, "node": 1, "kind": "crash", "duration_s": 1}])
    with pytest.raises(ConfigError, match="node 1 does not exist"):
        simulator.run(load_experiment(config))


def test_random_failures_follow_the_renewal_rate():
    """mtbf_h per GPU: 4 replicas of 2 GPUs with mtbf 4 s per GPU are up 2 s on average between failures and down
    0.5 s after each, so over the run each fails about every 2.5 s: the crashes counted come within 25% of
    4 × run length / 2.5 s (a Poisson count of ~100 has a 10% standard deviation), and every request is
    accounted for."""
    config = experiment(cluster={"replicas": 4, "tensor_parallel": 2, "mtbf_h": 4 / 3600, "repair_s": 0.5,
                                 "fault_retries": 3, "router": "least_outstanding"},
                        workload={"num_requests": 3000, "arrival": {"kind": "poisson", "rate": 50.0},
                                  "input_tokens": {"kind": "uniform", "min": 10, "max": 300},
                                  "output_tokens": {"kind": "uniform", "min": 1, "max": 100}})
    result = simulator.run(load_experiment(config))
    s, rows = result.summary, result.requests
    end = rows["finish_s"].max()
    assert s["replica_crashes"] == pytest.approx(4 * end / 2.5, rel=0.25)
    assert s["completed"] + s["num_rejected"] + s["num_failed"] == 3000
    assert s["retried_requests"] == (rows["retries"] > 0).sum() > 0


def test_an_attention_dp_replica_crashes_with_all_its_ranks(tmp_path):
    """Two replicas of Qwen3-30B-A3B with 2 attention-DP ranks each (schedulers 0–1 and 2–3), round robin: a
    100-token request on each rank at 0 s, 101 tokens out. Replica 1 crashes at 0.1 s: both its ranks stop and
    their two requests start again on replica 0's ranks (the least loaded up), finishing one prefill (12 ms) and 100
    decode steps after the crash — the two ranks step together with one sequence each (5.2 ms a step); replica 0's
    own two requests, which share those steps, end later than they would have alone."""
    config = _two_replicas(tmp_path, [(0.0, 100, 101)] * 4, [{"at_s": 0.1, "replica": 1, "kind": "crash",
                                                               "duration_s": 5.0}])
    config.update(model="qwen3-30b-a3b")
    config["cluster"].update(replicas=2, data_parallel=2)
    result = simulator.run(load_experiment(config))
    rows = result.requests.sort_values("request_id")
    assert rows["retries"].tolist() == [0, 0, 1, 1]
    assert set(rows.loc[rows["retries"] > 0, "replica"]) <= {0, 1}
    assert (result.summary["replica_crashes"], result.summary["completed"]) == (1, 4)
    retried, own = rows[rows["retries"] > 0], rows[rows["retries"] == 0]
    assert (retried["finish_s"] > 0.1 + 0.012 + 100 * 0.0052 - 1e-9).all()
    assert (own["e2el_ms"] > 12 + 100 * 5.2 + 1).all()  # the retried prompts' prefill and batches of two


def test_random_failures_take_down_whole_attention_dp_replicas():
    config = experiment(model="qwen3-30b-a3b", cluster={"replicas": 2, "data_parallel": 2, "mtbf_h": 4 / 3600,
                                                        "repair_s": 0.5, "fault_retries": 3,
                                                        "router": "least_outstanding"},
                        workload={"num_requests": 600, "arrival": {"kind": "poisson", "rate": 50.0},
                                  "input_tokens": {"kind": "uniform", "min": 10, "max": 300},
                                  "output_tokens": {"kind": "uniform", "min": 1, "max": 100}})
    result = simulator.run(load_experiment(config))
    s = result.summary
    assert s["replica_crashes"] > 0 and s["completed"] + s["num_rejected"] + s["num_failed"] == 600


def test_before_the_health_check_the_router_keeps_sending_to_a_crashed_replica(tmp_path):
    """Replica 0 crashes at 0.1 s; the router learns it at 1.1 s (health_check_s 1). least_outstanding sees the
    empty crashed replica as the least loaded, so a request at 0.2 s goes there, waits out its 0.5 s connection
    timeout, is sent again at 0.7 s — there again — and at 1.2 s, the health check done, goes to replica 1: TTFT
    1.0 s + its 12 ms prefill, two retries. With one retry allowed it fails at 1.2 s with the reason."""
    faults = [{"at_s": 0.1, "replica": 0, "kind": "crash", "duration_s": 5.0}]
    config = _two_replicas(tmp_path, [(0.0, 10, 2), (0.2, 100, 2)], faults, retries=3)  # a trace starts at 0
    config["cluster"].update(router="least_outstanding", health_check_s=1.0, connect_timeout_s=0.5)
    row = simulator.run(load_experiment(config)).requests.sort_values("request_id").iloc[1]
    assert (row["status"], row["replica"], row["retries"]) == ("finished", 1, 2)
    assert row["ttft_ms"] == pytest.approx(1000 + 12)
    config["cluster"]["fault_retries"] = 1
    row = simulator.run(load_experiment(config)).requests.sort_values("request_id").iloc[1]
    assert row["status"] == "failed" and row["finish_s"] == pytest.approx(1.2)
    assert row["reject_reason"].startswith("sent to replica 0 while it was down, before its health check failed")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=st.lists(st.tuples(st.floats(0.0, 3.0), st.integers(0, 2), st.sampled_from(["crash", "slow"]),
                                   st.floats(0.05, 1.5)), min_size=1, max_size=6),
       retries=st.integers(0, 2), health=st.sampled_from([0.0, 0.2]), seed=st.integers(0, 20),
       asynchronous=st.booleans())
def test_any_fault_schedule_accounts_for_every_request_once_and_frees_the_kv(schedule, retries, health, seed,
                                                                            asynchronous):
    """Random crash / slow schedules over three replicas, with and without async scheduling (arrivals held for the
    batch after next, and lost with the replica when it crashes): each generated request has exactly one row,
    completed + rejected + failed is every request, at the end no replica holds KV blocks (a crash frees its pool),
    and every completed request's longest gap is the largest gap between its logged tokens (runs cut by slowdowns
    included)."""
    from simulator.cluster.simulation import simulate

    faults, busy = [], {}  # overlapping faults of one kind on one replica are refused: keep the first of each
    for at, replica, kind, duration in sorted(schedule):
        if at >= busy.get((replica, kind), -1.0):
            faults.append({"at_s": at, "replica": replica, "kind": kind, "duration_s": duration})
            busy[(replica, kind)] = at + duration
    config = load_experiment(experiment(seed=seed, cluster={
        "replicas": 3, "router": "power_of_two", "faults": faults, "fault_retries": retries, "health_check_s": health,
        "connect_timeout_s": 0.05}, scheduler={**experiment()["scheduler"], "async_scheduling": asynchronous},
        workload={"num_requests": 150, "arrival": {"kind": "poisson", "rate": 60.0},
                                            "input_tokens": {"kind": "uniform", "min": 10, "max": 300},
                                            "output_tokens": {"kind": "uniform", "min": 1, "max": 80}}))
    output = simulate(config)
    assert output.final_kv_used_blocks == [0, 0, 0]
    result = simulator.run(config, tokens=True)
    rows, s = result.requests, result.summary
    assert rows["request_id"].is_unique and len(rows) == 150
    assert s["completed"] + s["num_rejected"] + s["num_failed"] == 150
    rows = rows.set_index("request_id")
    several = rows.index[(rows["status"] == "finished") & (rows["output_tokens"] > 1)]
    gaps = result.tokens().groupby("request_id")["time_s"].apply(lambda t: t.diff().max() * 1000)
    assert np.allclose(rows.loc[several, "max_itl_ms"], gaps[several], rtol=1e-9, atol=1e-9)


def _disaggregated(tmp_path, requests, faults, retries=1, prefill=2, decode=1):
    """Prefill and decode pools with linear costs; a prompt's KV (Llama-3-8B: 131,072 bytes a token) crosses a
    13.1072 MB/s link, so 100 tokens take 1 s (+ 0.05 ms)."""
    config = _two_replicas(tmp_path, requests, faults, retries)
    config["cluster"] = {"kind": "disaggregated", "prefill": {"replicas": prefill}, "decode": {"replicas": decode},
                         "transfer": {"bandwidth_gb_per_s": 0.0131072}, "faults": faults,
                         "fault_retries": retries}
    return config


def test_a_prefill_crash_loses_the_kv_it_held_for_the_decode_pool(tmp_path):
    """A 100-token prompt prefills on prefill replica 0 by 12 ms; its KV is on the link until 1.012 s. Replica 0
    crashes at 0.5 s: the KV it held is gone, so the request starts again on prefill replica 1 (prefill done at
    0.512 s, KV at the decode replica at 1.512 s) and decodes its 9 other tokens there; nothing leaks."""
    from simulator.cluster.simulation import simulate

    config = load_experiment(_disaggregated(tmp_path, [(0.0, 100, 10)], [{"at_s": 0.5, "replica": 0,
                                                                          "kind": "crash", "duration_s": 5.0}]))
    row = simulator.run(config).requests.iloc[0]
    assert (row["status"], row["retries"], row["replica"], row["output_tokens"]) == ("finished", 1, 2, 10)
    assert row["prefill_done_s"] == pytest.approx(0.512)
    assert row["kv_arrived_s"] == pytest.approx(1.512 + 0.05e-3)
    assert simulate(config).final_kv_used_blocks == [0, 0, 0]


def test_a_decode_crash_sends_its_requests_back_to_prefill(tmp_path):
    """Two decode replicas; decode replica 2 (the first one) crashes while the request decodes there: it starts
    again from its prefill and finishes on decode replica 3."""
    config = load_experiment(_disaggregated(tmp_path, [(0.0, 100, 400)], [{"at_s": 1.5, "replica": 2,
                                                                           "kind": "crash", "duration_s": 10.0}],
                                            decode=2))
    row = simulator.run(config).requests.iloc[0]
    assert (row["status"], row["retries"], row["replica"], row["output_tokens"]) == ("finished", 1, 3, 400)
    assert row["prefill_done_s"] > 1.5


def test_a_kv_transfer_to_a_crashed_decode_replica_retries_from_prefill_after_the_connect_timeout(tmp_path):
    """Decode replica 2 crashes at 0.5 s and the router's health check would notice only after 10 s. The request's
    KV reaches the decode pool at 1.012 s, is sent to replica 2 and waits 0.2 s for the connection to fail; then it
    starts again from its prefill (its prefill replica frees the KV it held): prefill done 12 ms later, KV back at
    2.224 s, replica 2 still down, another 0.2 s, and with its one retry spent it fails at 2.424 s. No KV leaks."""
    from simulator.cluster.simulation import simulate

    config = _disaggregated(tmp_path, [(0.0, 100, 10)], [{"at_s": 0.5, "replica": 2, "kind": "crash",
                                                          "duration_s": 5.0}])
    config["cluster"].update(health_check_s=10.0, connect_timeout_s=0.2)
    config = load_experiment(config)
    assert simulate(config).final_kv_used_blocks == [0, 0, 0]
    row = simulator.run(config).requests.iloc[0]
    assert (row["status"], row["retries"], row["output_tokens"]) == ("failed", 1, 10)
    assert row["prefill_done_s"] == pytest.approx(1.012 + 0.05e-3 + 0.2 + 0.012)
    assert row["finish_s"] == pytest.approx(2 * (1.012 + 0.05e-3 + 0.2), rel=1e-9)


def test_a_prefill_crash_takes_its_request_out_of_a_busy_decode_replicas_intake(tmp_path):
    """Async scheduling: request 1's KV reaches the decode replica at 1.512 s while it decodes request 0, so it
    waits in the replica's intake for the next batch; its prefill replica (1) crashes 10 µs later, losing the KV.
    The request leaves the intake and starts again from its prefill on replica 0 (prefill at 1.512 s + 12 ms, its
    KV there 1 s later): it finishes once, with one retry, and nothing leaks."""
    from simulator.cluster.simulation import simulate

    config = _disaggregated(tmp_path, [(0.0, 100, 400), (0.5, 100, 10)],
                            [{"at_s": 1.51206, "replica": 1, "kind": "crash", "duration_s": 5.0}])
    config["scheduler"] = {**config["scheduler"], "async_scheduling": True}
    config = load_experiment(config)
    assert simulate(config).final_kv_used_blocks == [0, 0, 0]
    rows = simulator.run(config).requests
    assert list(rows["status"]) == ["finished", "finished"] and list(rows["retries"]) == [0, 1]
    assert rows.loc[1, "prefill_done_s"] == pytest.approx(1.51206 + 0.012)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=st.lists(st.tuples(st.floats(0.0, 2.0), st.integers(0, 3), st.floats(0.05, 1.0)), min_size=1,
                         max_size=5), retries=st.integers(0, 2), seed=st.integers(0, 20))
def test_disaggregated_crashes_account_for_every_request_and_free_every_kv(schedule, retries, seed):
    """Random crashes of 2 prefill and 2 decode replicas under load: one row per request, completed + rejected +
    failed is every request, and no replica of either pool ends holding KV (lost transfers free nothing twice)."""
    from simulator.cluster.simulation import simulate

    faults, busy = [], {}
    for at, replica, duration in sorted(schedule):
        if at >= busy.get(replica, -1.0):
            faults.append({"at_s": at, "replica": replica, "kind": "crash", "duration_s": duration})
            busy[replica] = at + duration
    config = load_experiment(experiment(seed=seed, cluster={
        "kind": "disaggregated", "prefill": {"replicas": 2}, "decode": {"replicas": 2}, "faults": faults,
        "fault_retries": retries, "transfer": {"bandwidth_gb_per_s": 2.0}},
        workload={"num_requests": 120, "arrival": {"kind": "poisson", "rate": 60.0},
                  "input_tokens": {"kind": "uniform", "min": 10, "max": 300},
                  "output_tokens": {"kind": "uniform", "min": 1, "max": 80}}))
    assert simulate(config).final_kv_used_blocks == [0, 0, 0, 0]
    result = simulator.run(config)
    rows, s = result.requests, result.summary
    assert rows["request_id"].is_unique and len(rows) == 120
    assert s["completed"] + s["num_rejected"] + s["num_failed"] == 120
    done = rows[rows["status"] == "finished"]
    assert (done["kv_arrived_s"] >= done["prefill_done_s"]).all() or (done["output_tokens"] == 1).any()
    several = done[done["output_tokens"] > 1]  # a longest gap between the mean gap and the whole decode
    assert (several["max_itl_ms"] >= several["tpot_ms"] * (1 - 1e-9)).all()
    assert (several["max_itl_ms"] <= (several["e2el_ms"] - several["ttft_ms"]) * (1 + 1e-9)).all()
