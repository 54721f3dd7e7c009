"""Observed runs: the timeline, the iteration table, the Chrome trace, and the plots drawn from them."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import simulator
from simulator.cli import main
from simulator.config import load_experiment
from simulator.results.observers import chrome_trace
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
    first = {p.name: p.read_bytes() for p in (out / "plots").iterdir()}
    assert main(["plot", str(out)]) == 0  # drawn again: the same bytes (no dates, no random SVG ids)
    assert {p.name: p.read_bytes() for p in (out / "plots").iterdir()} == first


def test_latency_cdfs_use_log_axes_mark_percentiles_and_the_slo():
    import pandas as pd

    from simulator.report.plots import latency_cdfs

    requests = pd.DataFrame({"status": ["finished"] * 100, "ttft_ms": np.arange(1, 101) * 2.0,
                             "tpot_ms": np.full(100, 10.0), "e2el_ms": np.arange(1, 101) * 50.0})
    figure = latency_cdfs(requests, {"ttft_ms": 150.0}, "demo")
    ttft = figure.axes[0]
    assert ttft.get_xscale() == "log" and figure._suptitle.get_text().startswith("demo: 100 finished")
    labels = {line.get_label(): line.get_xdata()[0] for line in ttft.get_lines()}
    assert labels["SLO 150 ms"] == 150.0 and labels["p99 198 ms"] == pytest.approx(np.percentile(
        np.arange(1, 101) * 2.0, 99))
    assert not any(label.startswith("SLO") for label in (line.get_label() for line in figure.axes[1].get_lines()))
    assert [ax.get_title() for ax in figure.axes] == ["TTFT CDF", "TPOT CDF", "E2E latency CDF"]  # no max_itl_ms
    requests["max_itl_ms"] = np.arange(1, 101) * 3.0
    figure = latency_cdfs(requests, {"max_itl_ms": 100.0}, "demo")
    assert [ax.get_title() for ax in figure.axes][2] == "longest ITL CDF"
    assert "SLO 100 ms" in {line.get_label() for line in figure.axes[2].get_lines()}


def test_sweep_curves_title_the_policies_drop_constants_bar_replicates_and_mark_failures():
    """Two schedulers × two rates × two seeds, a constant num_requests column, one failed point: the legend is
    titled 'scheduler.kind' with one line per scheduler, every point has an error bar, the failed point is an x at
    its rate and the title counts it."""
    import pandas as pd

    from simulator.report.plots import sweep_curves

    rows = []
    for point, (kind, rate, seed) in enumerate((k, r, s) for k in ("continuous", "chunked") for r in (4, 8)
                                               for s in (1, 2)):
        rows.append({"point": point, "scheduler.kind": kind, "workload.arrival.rate": rate,
                     "workload.num_requests": 500, "seed": seed, "error": "", "output_throughput": 100.0 * rate + seed,
                     "p99_ttft_ms": 50.0 * rate + seed, "p99_tpot_ms": 10.0 + seed, "request_goodput": rate - 0.1})
    rows.append({**rows[-1], "point": 8, "workload.arrival.rate": 16, "error": "out of memory"})
    figure = sweep_curves(pd.DataFrame(rows))
    legend = figure.axes[0].get_legend()
    assert legend.get_title().get_text() == "scheduler.kind"
    assert sorted(text.get_text() for text in legend.get_texts()) == ["chunked", "continuous"]
    assert all(len(ax.containers) == 2 for ax in figure.axes)  # one errorbar series per scheduler
    failed = [line for line in figure.axes[3].get_lines() if line.get_label() == "failed point"]
    assert failed and list(failed[0].get_xdata()) == [16] and "1 failed" in figure._suptitle.get_text()
    assert figure.axes[0].get_xscale() == "log" and figure.axes[2].get_yscale() == "log"
    assert "±1 std over replicates" in figure._suptitle.get_text()
    one_seed = pd.DataFrame([row for row in rows if row["seed"] == 1])  # no replicates: no bars promised
    assert "std" not in sweep_curves(one_seed)._suptitle.get_text()


def test_the_phases_chart_shows_idle_time():
    """Replica 0 busy 6 s of a 10 s span (4 s decode, 2 s prefill), replica 1 busy 10 s: idle shares 0.4 and 0."""
    import pandas as pd

    from simulator.report.plots import phase_shares

    iterations = pd.DataFrame({"replica": [0, 0, 1], "start_s": [0.0, 5.0, 0.0], "end_s": [4.0, 7.0, 10.0],
                               "phase": ["decode", "prefill", "mixed"]})
    figure = phase_shares(iterations)
    bars = {container.get_label(): [patch.get_height() for patch in container]
            for container in figure.axes[0].containers}
    assert bars["idle"] == pytest.approx([0.4, 0.0]) and bars["decode"] == pytest.approx([0.4, 0.0])


def test_a_phase_keeps_its_colour_whichever_phases_a_run_has():
    import pandas as pd
    from matplotlib.colors import to_hex

    from simulator.report.plots import phase_shares

    def colours(phases):
        iterations = pd.DataFrame({"replica": [0] * len(phases), "start_s": range(len(phases)),
                                   "end_s": [t + 1 for t in range(len(phases))], "phase": phases})
        axes = phase_shares(iterations).axes[0]
        return {c.get_label(): to_hex(c.patches[0].get_facecolor()) for c in axes.containers}

    decode_only, all_kinds = colours(["decode"]), colours(["prefill", "mixed", "decode"])
    assert decode_only["decode"] == all_kinds["decode"] and decode_only["idle"] == all_kinds["idle"]
    assert len(set(all_kinds.values())) == 4  # prefill, mixed, decode, idle: four colours


def test_the_kernel_validation_figure_wraps_its_panels():
    """13 datasets in rows of at most 4 panels, not 13 in one 65-inch row."""
    import pandas as pd

    from simulator.fidelity.report import kernels_figure

    frame = pd.DataFrame({"measured_s": [1e-4, 2e-4], "predicted_s": [1.1e-4, 1.9e-4], "error": [0.1, 0.05]})
    figure = kernels_figure({f"set{i}": frame for i in range(13)})
    visible = [axis for axis in figure.axes if axis.get_visible()]
    assert len(visible) == 13 and figure.get_size_inches()[0] <= 15
    assert {round(axis.get_position().x0, 3) for axis in visible}.__len__() == 4


def test_legends_print_latencies_as_people_write_them():
    from simulator.report.plots import milliseconds

    assert milliseconds(2400.0) == "2,400 ms" and milliseconds(123.6) == "124 ms" and milliseconds(12.34) == "12.3 ms"


def test_an_idle_queue_is_a_flat_line_on_a_count_axis():
    import pandas as pd

    from simulator.report.plots import timeline_figure

    timeline = pd.DataFrame({"replica": [0, 0], "time_s": [0.0, 1.0], "waiting": [0, 0], "running": [0, 3]})
    queue, running = timeline_figure(timeline).axes[:2]
    assert queue.get_ylim() == (0.0, 1.0) and running.get_ylim()[0] == 0.0 and running.get_ylim()[1] >= 3
    assert all(float(tick).is_integer() for tick in running.get_yticks())
