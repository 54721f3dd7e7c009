"""llmsim benchmark (GuideLLM's sweep profile): synchronous, throughput, then rates evenly between them."""

from __future__ import annotations

import numpy as np
import pytest

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
