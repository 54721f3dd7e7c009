"""Autoscaling (cluster.autoscaler): Kubernetes HPA's rule checked by hand on a closed loop whose concurrency is
known, cold starts timed from the weight bytes and the load bandwidth, replica-hours integrated by hand, the
predictive rate's line, drained replicas that take no new work, and conservation under random policies."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulator
from simulator.cluster.autoscaler import demand_in_replicas, desired_count
from simulator.config import load_experiment
from simulator.config.cluster import AutoscalerConfig
from simulator.errors import ConfigError
from simulator.results.metrics import Scaling
from tests.helpers import experiment


def _scaled(autoscaler: dict, replicas: int = 1, workload: dict | None = None, router: str = "round_robin") -> dict:
    return experiment(cluster={"replicas": replicas, "router": router, "autoscaler": autoscaler},
                      workload=workload or {"num_requests": 2000, "arrival": {"kind": "closed_loop", "users": 40},
                                            "input_tokens": {"kind": "fixed", "value": 100},
                                            "output_tokens": {"kind": "fixed", "value": 50}})


def test_concurrency_target_scales_a_closed_loop_to_users_over_target():
    """40 clients with no think time keep 40 requests outstanding; with a concurrency target of 10 the first tick
    (1 s) asks ceil(40 / 10) = 4 replicas and starts 3; from then on D / current = 1, within the tolerance, so
    the count holds (the cooldown outlasts the run, so the tail's falling concurrency releases nothing)."""
    config = _scaled({"kind": "concurrency", "target": 10, "max_replicas": 8, "interval_s": 1.0,
                      "scale_up_delay_s": 0.5, "load_gb_per_s": 1000, "cooldown_s": 1e6})
    result = simulator.run(load_experiment(config))
    s = result.summary
    assert (s["peak_replicas"], s["scale_ups"], s["scale_downs"]) == (4, 3, 0)
    starts = result.scaling.query("event == 'start'")
    assert (starts["time_s"] == 1.0).all() and sorted(starts["replica"]) == [1, 2, 3]
    assert s["completed"] == 2000


def test_a_cold_start_is_the_delay_plus_the_weights_over_the_load_bandwidth():
    """load_from storage at 2 GB/s: a new replica (tensor_parallel 2) is ready scale_up_delay_s + its whole
    weights (2 GPUs × the per-GPU shard) / 2e9 s after the decision; nothing runs on it before."""
    config = _scaled({"kind": "concurrency", "target": 10, "max_replicas": 2, "interval_s": 1.0,
                      "scale_up_delay_s": 3.0, "load_from": "storage", "load_gb_per_s": 2.0, "cooldown_s": 1e6})
    config["cluster"]["tensor_parallel"] = 2
    result = simulator.run(load_experiment(config))
    shard = result.summary["weights_gib_per_gpu"] * 2**30
    events = result.scaling.set_index("event")
    assert events.loc["ready", "time_s"] - events.loc["start", "time_s"] == pytest.approx(3.0 + 2 * shard / 2e9)
    on_new = result.requests.query("replica == 1")
    assert len(on_new) and on_new["first_scheduled_s"].min() >= events.loc["ready", "time_s"]
    assert result.summary["cold_start_requests"] == len(on_new)


@pytest.mark.parametrize("source, bandwidth", [("host", "host_link_gb_per_s"), ("peer", "inter_node_gb_per_s")])
def test_host_and_peer_loads_move_each_gpus_shard_over_its_own_link(source, bandwidth):
    from simulator.catalog import load_hardware

    hardware = load_hardware("h100-sxm")
    gb_per_s = getattr(hardware, bandwidth, None) or getattr(hardware.node, bandwidth)
    config = _scaled({"kind": "concurrency", "target": 10, "max_replicas": 2, "interval_s": 1.0,
                      "scale_up_delay_s": 0.0, "load_from": source, "cooldown_s": 1e6})
    config["cluster"]["tensor_parallel"] = 2
    result = simulator.run(load_experiment(config))
    events = result.scaling.set_index("event")
    shard = result.summary["weights_gib_per_gpu"] * 2**30
    assert events.loc["ready", "time_s"] - events.loc["start", "time_s"] == pytest.approx(shard / (gb_per_s * 1e9))


def test_with_min_equal_to_max_the_run_is_the_fixed_cluster():
    """An autoscaler that can change nothing leaves every request's row as it is without one."""
    workload = {"num_requests": 300, "arrival": {"kind": "poisson", "rate": 40.0},
                "input_tokens": {"kind": "uniform", "min": 10, "max": 300},
                "output_tokens": {"kind": "uniform", "min": 1, "max": 100}}
    for router in ("round_robin", "least_outstanding", "power_of_two"):
        fixed = experiment(cluster={"replicas": 3, "router": router}, workload=workload)
        scaled = _scaled({"kind": "queue_length", "target": 1, "min_replicas": 3, "max_replicas": 3,
                          "interval_s": 0.5}, replicas=3, workload=workload, router=router)
        a = simulator.run(load_experiment(fixed)).requests
        b = simulator.run(load_experiment(scaled)).requests
        assert a.equals(b), router


def test_replica_hours_and_mean_replicas_by_hand():
    """Replica 1 starts at 10 s, is ready at 40 s, drains at 100 s and is off at 110 s; the run ends at 200 s.
    Provisioned: 1 × 10 + 2 × 100 + 1 × 90 = 300 replica-seconds (× 4 GPUs / 3600 = 1/3 GPU-hour); ready:
    1 × 40 + 2 × 60 + 1 × 100 = 260 (mean 1.3); replica 1 was powered 70 s, replica 0 all 200 s."""
    events = [(0.0, "init", -1, 1, 1), (10.0, "start", 1, 1, 2), (40.0, "ready", 1, 2, 2),
              (100.0, "drain", 1, 1, 2), (110.0, "off", 1, 1, 1)]
    scaling = Scaling(events, gpus_per_replica=4)
    columns = {"arrival_s": np.array([5.0, 20.0, 50.0, 120.0]), "first_scheduled_s": np.array([5.0, 20.0, 50.0,
                                                                                                120.0]),
               "replica": np.array([0, 0, 1, 0])}
    met = np.array([True, False, True, True])
    s = scaling.summary(columns, met, np.ones(4, dtype=bool), 200.0)
    assert s["gpu_hours"] == pytest.approx(300 * 4 / 3600)
    assert s["mean_replicas"] == pytest.approx(1.3)
    assert (s["peak_replicas"], s["scale_ups"], s["scale_downs"], s["cold_start_requests"]) == (2, 1, 1, 1)
    assert s["slo_attainment_while_scaling"] == 0.0  # only the request at 20 s arrived between 10 and 40 s
    assert scaling.powered_seconds(2, 200.0) == [200.0, 70.0]


def test_the_predictive_rate_extrapolates_the_window_to_when_a_replica_would_be_ready():
    """Rates 10, 20, 30 req/s at −30, −15, 0 s rise 2/3 req/s per second; 45 s ahead: 60 req/s, 6 replicas of
    10 req/s. The plain rate policy takes the window's mean, 20 req/s: 2 replicas."""
    samples = [(70.0, 10.0), (85.0, 20.0), (100.0, 30.0)]
    predictive = AutoscalerConfig(kind="rate_predictive", target=10, max_replicas=8)
    plain = AutoscalerConfig(kind="rate", target=10, max_replicas=8)
    assert demand_in_replicas(predictive, samples, 100.0, 45.0) == pytest.approx(6.0)
    assert demand_in_replicas(plain, samples, 100.0, 45.0) == pytest.approx(2.0)


@pytest.mark.parametrize("demand, current, desired", [(4.3, 4, 4), (4.5, 4, 5), (3.5, 4, 4), (3.59, 4, 4),
                                                      (3.5, 5, 4), (0.2, 3, 1), (20.0, 3, 8)])
def test_hpa_rule_with_its_tolerance_and_bounds(demand, current, desired):
    """ceil(D) unless |D / current − 1| ≤ 0.1, within [1, 8]."""
    config = AutoscalerConfig(kind="queue_length", target=1, max_replicas=8)
    assert desired_count(config, demand, current) == desired


def test_scale_down_drains_after_the_cooldown_and_drained_replicas_take_no_new_requests():
    """A burst (60 req/s for 6 s), then a trickle (1 req/s): the rate policy scales up for the burst and, a
    cooldown after the last high recommendation, releases down to min_replicas; a replica takes no request
    between its drain and its next start."""
    workload = {"num_requests": 420, "arrival": {"kind": "piecewise", "rates": [[0, 60.0], [6, 1.0]]},
                "input_tokens": {"kind": "fixed", "value": 200}, "output_tokens": {"kind": "fixed", "value": 20}}
    config = _scaled({"kind": "rate", "target": 15, "max_replicas": 6, "interval_s": 1.0, "cooldown_s": 10.0,
                      "scale_up_delay_s": 0.5, "load_gb_per_s": 1000}, workload=workload,
                     router="least_outstanding")
    result = simulator.run(load_experiment(config))
    events, rows = result.scaling, result.requests
    assert result.summary["peak_replicas"] >= 4
    drains = events.query("event == 'drain'")
    last_high = events.query("event == 'start'")["time_s"].max()
    assert len(drains) and drains["time_s"].min() >= last_high + 10.0 - 1e-9
    assert events["ready"].iloc[-1] == 1
    for replica, drained_at in zip(drains["replica"], drains["time_s"], strict=True):
        restarts = events[(events["replica"] == replica) & (events["event"] == "start")
                          & (events["time_s"] > drained_at)]["time_s"]
        until = restarts.min() if len(restarts) else np.inf
        scheduled = rows.loc[rows["replica"] == replica, "first_scheduled_s"]
        assert not ((scheduled > drained_at) & (scheduled < until)).any()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["queue_length", "kv_utilization", "concurrency", "rate", "rate_predictive"]),
       initial=st.integers(1, 3), extra=st.integers(0, 3), interval=st.sampled_from([0.05, 0.2, 1.0]),
       cooldown=st.sampled_from([0.0, 0.5, 5.0]), delay=st.sampled_from([0.0, 0.1, 2.0]),
       window=st.sampled_from([0.0, 1.0]), seed=st.integers(0, 50))
def test_every_request_is_served_by_a_replica_that_was_ready(kind, initial, extra, interval, cooldown, delay,
                                                             window, seed):
    """Under any policy: the run accounts for every request (``simulator.run`` checks), no request is scheduled on
    a replica while it is off or starting, at least one replica is ready and no more than max are provisioned,
    and every ready comes a cold start after its start."""
    target = {"kv_utilization": 0.3, "rate": 10.0, "rate_predictive": 10.0}.get(kind, 2.0)
    config = experiment(seed=seed, cluster={"replicas": initial, "router": "least_outstanding", "autoscaler": {
        "kind": kind, "target": target, "min_replicas": 1, "max_replicas": initial + extra, "interval_s": interval,
        "cooldown_s": cooldown, "scale_up_delay_s": delay, "window_s": window, "load_gb_per_s": 1000}},
        workload={"num_requests": 150, "arrival": {"kind": "piecewise", "rates": [[0, 80.0], [1, 5.0]]},
                  "input_tokens": {"kind": "uniform", "min": 10, "max": 300},
                  "output_tokens": {"kind": "uniform", "min": 1, "max": 60}})
    result = simulator.run(load_experiment(config))
    events, rows = result.scaling, result.requests
    assert (events["ready"] >= 1).all() and (events["provisioned"] <= initial + extra).all()
    powered = {r: [[0.0, np.inf]] if r < initial else [] for r in range(initial + extra)}
    starts, load_s = {}, result.summary["weights_gib_per_gpu"] * 2**30 / 1e12  # the shard at 1,000 GB/s
    for t, event, replica, _, _ in events.itertuples(index=False):
        if event == "start":
            starts[replica] = t
        elif event == "ready":
            assert t - starts.pop(replica) == pytest.approx(delay + load_s)
            powered[replica].append([t, np.inf])
        elif event == "off":
            powered[replica][-1][1] = t
    served = rows.dropna(subset=["first_scheduled_s"])
    for replica, t in zip(served["replica"], served["first_scheduled_s"], strict=True):
        assert any(a <= t <= b for a, b in powered[replica]), (replica, t)


@pytest.mark.parametrize("cluster, message", [
    ({"replicas": 1, "autoscaler": {"kind": "rate", "target": 1, "min_replicas": 3, "max_replicas": 2}},
     "min_replicas 3 exceeds max_replicas 2"),
    ({"replicas": 4, "autoscaler": {"kind": "rate", "target": 1, "max_replicas": 2}}, "outside the autoscaler"),
    ({"replicas": 1, "autoscaler": {"kind": "rate", "target": 1, "max_replicas": 2, "load_from": "storage"}},
     "load_gb_per_s"),
    ({"replicas": 1, "autoscaler": {"kind": "kv_utilization", "target": 80, "max_replicas": 2}}, "KV fraction"),
    ({"kind": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 1},
      "autoscaler": {"kind": "rate", "target": 1, "max_replicas": 2}}, "not modelled yet"),
])
def test_autoscalers_that_cannot_work_say_why(cluster, message):
    with pytest.raises(ConfigError, match=message):
        load_experiment(experiment(cluster=cluster))


def test_a_front_ends_late_delivery_to_a_released_replica_goes_to_a_ready_one(tmp_path):
    """A serial front end (an engine profile's frontend_ms_per_request) still holds requests for a replica the
    autoscaler drains and releases; when they come out they go to a ready replica instead, and every request
    ends."""
    engine = tmp_path / "slow_frontend.yaml"
    engine.write_text("name: slow-frontend\ndescription: a serial front end of 200 ms per request\n"
                      "frontend_ms_per_request: 200\n")
    workload = {"num_requests": 200, "arrival": {"kind": "piecewise", "rates": [[0, 60.0], [2, 2.0]]},
                "input_tokens": {"kind": "fixed", "value": 50}, "output_tokens": {"kind": "fixed", "value": 5}}
    config = _scaled({"kind": "rate", "target": 10, "max_replicas": 4, "interval_s": 0.5, "cooldown_s": 0.0,
                      "scale_up_delay_s": 0.1, "load_gb_per_s": 1000}, replicas=4, workload=workload)
    config["engine"] = str(engine)
    result = simulator.run(load_experiment(config))
    assert result.summary["completed"] == 200 and result.summary["scale_downs"] > 0
