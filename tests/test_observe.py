"""Observed runs: the timeline, the iteration table, the Chrome trace, and the plots drawn from them."""

from __future__ import annotations

import itertools
import json

import pytest

import simulator
from simulator.cli import main
from simulator.config import load_experiment
from simulator.observe import chrome_trace
from tests.helpers import experiment


@pytest.fixture(scope="module")
def observed():
    config = experiment(
        cluster={"kind": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 2}},
        kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 40},  # tight: preemptions happen
        workload={"num_requests": 120, "arrival": {"kind": "poisson", "rate": 40.0},
                  "input_tokens": {"kind": "uniform", "min": 10, "max": 300},
                  "output_tokens": {"kind": "uniform", "min": 20, "max": 200}},
    )
    return simulator.run(load_experiment(config), observe=True)


def test_iteration_table_accounts_for_every_iteration(observed):
    iterations = observed.iterations
    assert iterations["steps"].sum() == observed.summary["num_iterations"]
    assert (iterations["end_s"] >= iterations["start_s"]).all()  # a decode replica admitting KV takes no time
    assert set(iterations["phase"]) <= {"prefill", "decode", "mixed"}
    assert set(iterations.loc[iterations["replica"] == 0, "phase"]) == {"prefill"}  # the prefill pool


def test_timeline_samples_are_within_bounds(observed):
    timeline = observed.timeline
    assert set(timeline["replica"]) == {0, 1, 2}
    assert timeline["kv_used"].between(0, 1).all() and (timeline["waiting"] >= 0).all()
    assert timeline.groupby("replica")["time_s"].apply(lambda t: t.is_monotonic_increasing).all()


def test_chrome_trace_structure_and_no_overlap_on_a_replica(observed):
    trace = json.loads(json.dumps(chrome_trace(observed.observer)))  # survives a JSON round trip
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"replica 0", "replica 1", "replica 2", "KV links"} <= names
    spans = [e for e in events if e["ph"] == "X" and e["name"] in ("prefill", "decode", "mixed")]
    assert len(spans) == len(observed.iterations)
    for pid in {e["pid"] for e in spans}:
        own = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if e["pid"] == pid)
        assert all(end <= next_start + 1e-6 for (_, end), (next_start, _) in itertools.pairwise(own))
    assert any(e["ph"] == "C" for e in events)
    transfers = [e for e in events if e["ph"] == "X" and e["name"].startswith("KV of request")]
    assert len(transfers) == observed.requests["kv_arrived_s"].notna().sum()
    assert observed.summary["num_preemptions"] == sum(e["ph"] == "i" for e in events)


def test_run_writes_trace_and_plot_draws_every_picture(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(json.dumps(experiment()))
    out, trace = tmp_path / "out", tmp_path / "trace.json"
    assert main(["run", str(path), "--out", str(out), "--timeline", "--trace", str(trace)]) == 0
    assert json.loads(trace.read_text())["traceEvents"]
    assert main(["plot", str(out)]) == 0
    assert {p.name for p in (out / "plots").iterdir()} == {
        f"{name}.{suffix}" for name in ("latency_cdfs", "timeline", "phases") for suffix in ("png", "svg")
    }
