"""llmsim benchmark (GuideLLM's sweep profile): synchronous, throughput, then rates evenly between them."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from simulator.cli import main
from simulator.config import load_experiment
from simulator.errors import ConfigError
from simulator.studies.rate_sweep import rate_sweep
from tests.helpers import experiment


def test_the_sweep_spans_synchronous_to_throughput():
    """Synchronous: one request at a time, so by Little's law (one in the system) its request throughput is 1 /
    mean E2E; throughput: every request at once, far faster; the rates between are evenly spaced strictly inside,
    and a run at each offered rate achieves about it."""
    config = load_experiment(experiment(workload={"num_requests": 200, "arrival": {"kind": "poisson", "rate": 1.0},
                                                  "input_tokens": {"kind": "fixed", "value": 100},
                                                  "output_tokens": {"kind": "fixed", "value": 20}}))
    frame = rate_sweep(config, benchmarks=6, rate_type="constant", jobs=1)
    assert frame["strategy"].tolist() == ["synchronous", "throughput", *["constant"] * 4]
    sync, thru = frame.iloc[0], frame.iloc[1]
    assert sync["request_throughput"] * sync["mean_e2el_ms"] / 1000 == pytest.approx(1.0, rel=0.02)
    assert thru["request_throughput"] > 3 * sync["request_throughput"]
    expected = np.linspace(sync["request_throughput"], thru["request_throughput"], 6)[1:-1]
    assert frame["rate"].iloc[2:].to_numpy() == pytest.approx(expected)
    achieved = frame.iloc[2:]
    assert (achieved["request_throughput"] / achieved["rate"]).to_numpy() == pytest.approx(np.ones(4), rel=0.1)


@pytest.mark.parametrize("argv, message", [
    (["--rates", "2", "--set", "workload.num_requests=20"], "--rates 2 must be at least 3"),
    (["--rate-type", "bursty", "--set", "workload.num_requests=20"], "--rate-type must be constant or poisson"),
    (["--set", "workload={trace: {path: t.csv}}"], "needs a synthetic workload"),
])
def test_bad_benchmarks_are_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n")
    assert main(["benchmark", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_workload_without_a_request_count_is_refused():
    config = load_experiment(experiment())
    unsized = config.model_copy(update={"workload": config.workload.model_copy(update={"num_requests": None})})
    with pytest.raises(ConfigError, match="needs a synthetic workload"):
        rate_sweep(unsized)


def test_a_benchmark_folder_is_a_sweep_that_plot_and_report_read(tmp_path, capsys):
    """``--out`` writes benchmark.csv and a sweep's folder (a point per benchmark, index.parquet swept over the
    strategy and the offered rate, the rates evenly between the anchors' throughputs); ``llmsim plot`` draws its
    curves, ``llmsim report`` and ``--report`` make its page; a rerun reuses the finished benchmarks."""
    import html

    import pandas as pd

    from simulator.report.html import folder_page
    from simulator.report.plots import plot_folder

    path, out, report = tmp_path / "e.yaml", tmp_path / "bench", tmp_path / "b.html"
    path.write_text(yaml.safe_dump(experiment(workload={
        "num_requests": 30, "arrival": {"kind": "poisson", "rate": 1.0},
        "input_tokens": {"kind": "fixed", "value": 100}, "output_tokens": {"kind": "fixed", "value": 10}})))
    assert main(["benchmark", str(path), "--rates", "4", "--out", str(out), "--report", str(report)]) == 0
    capsys.readouterr()
    index = pd.read_parquet(out / "index.parquet")
    assert list(index.columns[:5]) == ["point", "strategy", "workload.arrival.rate", "seed", "error"]
    assert index["strategy"].tolist() == ["synchronous", "throughput", "constant", "constant"]
    low, high = index["request_throughput"].iloc[:2]
    assert index["workload.arrival.rate"].iloc[2:].to_numpy() == pytest.approx(np.linspace(low, high, 4)[1:-1])
    assert index["workload.arrival.rate"].iloc[:2].isna().all()  # the anchors offer no rate
    table = pd.read_csv(out / "benchmark.csv")
    assert table["rate"].iloc[2:].to_numpy() == pytest.approx(index["workload.arrival.rate"].iloc[2:].to_numpy())
    assert sorted(p.name for p in out.glob("point-*")) == [f"point-{i:05d}" for i in range(4)]
    assert {p.name for p in plot_folder(out)} == {"sweep.png", "sweep.svg"}
    page = html.unescape(folder_page(out))
    assert "<h1>llmsim benchmark: test</h1>" in page and "4 benchmarks, 0 failed." in page
    assert "<h1>llmsim benchmark: test</h1>" in html.unescape(report.read_text())
    stamp = (out / "point-00002" / "summary.json").stat().st_mtime_ns
    assert main(["benchmark", str(path), "--rates", "4", "--out", str(out)]) == 0
    assert (out / "point-00002" / "summary.json").stat().st_mtime_ns == stamp  # resumed, not rerun
    assert pd.read_parquet(out / "index.parquet").equals(index)
