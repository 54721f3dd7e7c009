"""The roofline figure of a run's iterations (simulator.report.plots.roofline_figure)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simulator.report import plots
from simulator.report.plots import roofline_figure
from simulator.results.bounds import POINT_COLUMNS

PEAK, BANDWIDTH = 1e15, 2e12  # ridge at 500 FLOP/byte


def _points(phase: str, intensity: float, tflops: float, count: int = 1) -> list[tuple]:
    """``count`` works of 1 s at ``intensity`` FLOP/byte and ``tflops`` TFLOP/s."""
    flops = tflops * 1e12
    return [(0, phase, float(i), 1, 1.0, flops, flops / intensity, 0.5, 0.4, 0.1, "compute", "fp8", PEAK, BANDWIDTH)
            for i in range(count)]


def test_clouds_per_phase_under_the_roof_on_labelled_log_axes():
    """Decode at 10 FLOP/byte and 15 TFLOP/s, prefill at 2,000 and 600: one cloud each at those coordinates, the
    roof min(1,000 TFLOP/s, x × 2 TB/s) drawn and named, the axes log-log with their units."""
    frame = pd.DataFrame(_points("decode", 10, 15) + _points("prefill", 2000, 600), columns=list(POINT_COLUMNS))
    ax = roofline_figure(frame, "demo").axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert "FLOP per byte" in ax.get_xlabel() and "TFLOP/s" in ax.get_ylabel() and ax.get_title().startswith("demo")
    clouds = {c.get_label(): c.get_offsets() for c in ax.collections}
    assert np.allclose(clouds["decode-only iterations"], [[10, 15]]) and np.allclose(
        clouds["prefill-only iterations"], [[2000, 600]])
    (roof,) = ax.get_lines()
    assert roof.get_label() == "roof: 2,000 GB/s HBM, 1,000 TFLOP/s FP8"
    x, y = roof.get_data()
    assert np.allclose(y, np.minimum(1000, x * 2))
    assert x[0] < 10 and x[-1] > 2000  # the ridge and every point within the axis


def test_many_points_are_thinned_evenly_and_the_same_each_time(monkeypatch):
    monkeypatch.setattr(plots, "ROOFLINE_POINTS", 50)
    frame = pd.DataFrame(_points("decode", 20, 30, count=1000), columns=list(POINT_COLUMNS))
    frame["flops"] *= np.linspace(1, 2, 1000)  # each its own intensity and rate
    first = roofline_figure(frame).axes[0].collections[0].get_offsets()
    assert len(first) == 50 and np.array_equal(first, roofline_figure(frame).axes[0].collections[0].get_offsets())
    assert first[0][0] == pytest.approx(20) and first[-1][0] == pytest.approx(40)


def test_llmsim_plot_draws_a_runs_roofline_the_same_bytes_each_time(tmp_path, capsys):
    from simulator.cli import main

    out = tmp_path / "out"
    assert main(["run", "--set", "workload.num_requests=60", "--out", str(out)]) == 0
    assert main(["plot", str(out)]) == 0
    drawn = {p.name: p.read_bytes() for p in (out / "plots").iterdir()}
    assert {"roofline.png", "roofline.svg"} <= set(drawn)
    assert main(["plot", str(out)]) == 0
    assert {p.name: p.read_bytes() for p in (out / "plots").iterdir()} == drawn
    capsys.readouterr()
