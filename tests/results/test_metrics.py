"""Metric formulas against hand calculations and numpy."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.config.slo import SLOConfig
from simulator.results.histogram import LogHistogram
from simulator.results.metrics import add_latency_columns


@given(
    st.lists(st.tuples(st.floats(1e-6, 1e3), st.integers(1, 20)), max_size=30),
    st.lists(st.tuples(st.floats(1e-4, 1.0), st.floats(0, 1e-3), st.integers(1, 30), st.integers(1, 5)), max_size=5),
    st.floats(0, 100),
)
def test_histogram_percentiles_within_a_bin_of_numpy(singles, runs, q):
    """Percentiles within 0.1% of numpy's over the expanded values; mean and count exact."""
    histogram = LogHistogram()
    values = []
    for value, weight in singles:
        histogram.add(value, weight)
        values += [value] * weight
    for base, slope, n, weight in runs:
        histogram.add_run(base, slope, n, weight)
        values += [base + slope * j for j in range(1, n + 1)] * weight
    if not values:
        assert math.isnan(histogram.percentile(q)) and histogram.count == 0
        return
    assert histogram.count == len(values)
    assert histogram.mean == pytest.approx(np.mean(values), rel=1e-9)
    assert histogram.percentile(q) == pytest.approx(np.percentile(values, q), rel=2e-3)


def test_histogram_is_exact_for_equal_values():
    histogram = LogHistogram()
    histogram.add_run(0.025, 0.0, 100, 3)
    assert histogram.percentile(99) == 0.025 and histogram.percentile(0) == 0.025


def _table(rows):
    columns = ["request_id", "arrival_s", "first_token_s", "finish_s", "output_tokens", "status"]
    return pd.DataFrame(rows, columns=columns)


def test_latency_columns_and_slo_by_hand():
    requests = _table([
        # arrival 1.0, first token 1.3 → TTFT 300 ms; finish 2.3 → E2E 1300 ms; TPOT = 1000 / 10 = 100 ms
        (0, 1.0, 1.3, 2.3, 11, "finished"),
        # TTFT 100 ms, TPOT = 40 / 4 = 10 ms
        (1, 2.0, 2.1, 2.14, 5, "finished"),
        # one output token: no TPOT
        (2, 3.0, 3.2, 3.2, 1, "finished"),
        (3, 4.0, math.nan, math.nan, 7, "rejected"),
    ])
    out = add_latency_columns(requests, SLOConfig(ttft_ms=250, tpot_ms=50))
    np.testing.assert_allclose(out["ttft_ms"][:3], [300, 100, 200])
    np.testing.assert_allclose(out["e2el_ms"][:3], [1300, 140, 200])
    np.testing.assert_allclose(out["tpot_ms"][:2], [100, 10])
    assert math.isnan(out["tpot_ms"][2])
    assert list(out["slo_met"]) == [False, True, True, False]


def test_spread_tail_and_token_totals_follow_the_request_table():
    """std_* is numpy's population standard deviation of the completed requests' column, p99.9 its 99.9th
    percentile, and the token totals count the completed requests' prompts and outputs (fixed 300 + 40 here)."""
    import simulator

    config = simulator.load({"model": "llama-3-8b", "hardware": "h100-sxm", "seed": 3, "workload": {
        "num_requests": 400, "arrival": {"kind": "poisson", "rate": 30},
        "input_tokens": {"kind": "fixed", "value": 300}, "output_tokens": {"kind": "fixed", "value": 40}}})
    result = simulator.run(config)
    done = result.requests[result.requests["status"] == "finished"]
    summary = result.summary
    assert summary["total_input_tokens"] == 300 * len(done) and summary["total_output_tokens"] == 40 * len(done)
    for name in ("ttft", "tpot", "e2el"):
        values = done[f"{name}_ms"].to_numpy(float)
        assert summary[f"std_{name}_ms"] == pytest.approx(np.std(values), rel=1e-12)
        assert summary[f"p99.9_{name}_ms"] == pytest.approx(np.percentile(values, 99.9), rel=1e-12)
    assert summary["p99.9_itl_ms"] >= summary["p99_itl_ms"]


@given(st.lists(st.floats(0, 100), min_size=1, max_size=40), st.floats(0, 0.6), st.floats(0, 0.39))
def test_measured_mask_leaves_out_the_first_and_last_arrivals(arrivals, warmup, cooldown):
    """floor(w·N) earliest and floor(c·N) latest arrivals are left out, whatever order the table is in."""
    from simulator.config.slo import MetricsConfig
    from simulator.results.metrics import measured_mask

    n = len(arrivals)
    keep = measured_mask(np.array(arrivals), MetricsConfig(warmup_fraction=warmup, cooldown_fraction=cooldown))
    head, tail = math.floor(warmup * n), math.floor(cooldown * n)
    assert keep.sum() == n - head - tail
    ranked = np.argsort(np.array(arrivals), kind="stable")  # the rank of each request in arrival order
    rank = np.empty(n, dtype=int)
    rank[ranked] = np.arange(n)
    assert np.array_equal(keep, (rank >= head) & (rank < n - tail))


def test_trimmed_summary_describes_the_measured_requests_and_counts_all():
    """With warm-up and cool-down left out, the latency figures, token totals, duration and attainment are those of
    the measured requests computed from the request table by hand; the request counts still cover every request."""
    import simulator

    base = {"model": "llama-3-8b", "hardware": "h100-sxm", "seed": 5, "slo": {"ttft_ms": 60}, "workload": {
        "num_requests": 300, "arrival": {"kind": "poisson", "rate": 25},
        "input_tokens": {"kind": "uniform", "min": 100, "max": 900}, "output_tokens": {"kind": "fixed", "value": 30}}}
    whole = simulator.run(simulator.load(base))
    trimmed = simulator.run(simulator.load({**base, "metrics": {"warmup_fraction": 0.2, "cooldown_fraction": 0.1}}))
    requests = trimmed.requests.sort_values("arrival_s", kind="stable")
    measured = requests.iloc[60:270]  # 300 requests: the first 60 and the last 30 by arrival left out
    done = measured[measured["status"] == "finished"]
    s = trimmed.summary
    assert (s["num_requests"], s["completed"], s["num_rejected"]) == (
        whole.summary["num_requests"], whole.summary["completed"], whole.summary["num_rejected"])
    assert s["measured_requests"] == 210 and whole.summary["measured_requests"] == 300
    assert s["mean_ttft_ms"] == pytest.approx(done["ttft_ms"].mean(), rel=1e-12)
    assert s["p99_e2el_ms"] == pytest.approx(np.percentile(done["e2el_ms"], 99), rel=1e-12)
    assert s["total_input_tokens"] == done["input_tokens"].sum()
    assert s["duration_s"] == pytest.approx(done["finish_s"].max() - measured["arrival_s"].min(), rel=1e-12)
    assert s["slo_attainment"] == pytest.approx(measured["slo_met"].sum() / 210, rel=1e-12)
    assert s["mean_ttft_ms"] != whole.summary["mean_ttft_ms"]  # the trimming changed what is described


def test_metrics_fractions_that_leave_nothing_are_refused():
    from simulator.config.slo import MetricsConfig

    with pytest.raises(ValueError, match="warmup_fraction \\+ cooldown_fraction must be < 1"):
        MetricsConfig(warmup_fraction=0.5, cooldown_fraction=0.5)


def test_e2e_ms_is_the_old_spelling_of_e2el_ms():
    """slo.e2el_ms is named after the metric it bounds; e2e_ms still reads, with a FutureWarning naming the new
    name, and bounds the same thing; both at once is refused."""
    with pytest.warns(FutureWarning, match="slo.e2e_ms is renamed slo.e2el_ms"):
        old = SLOConfig.model_validate({"e2e_ms": 140})
    assert old == SLOConfig(e2el_ms=140)
    requests = _table([(0, 1.0, 1.1, 1.14, 5, "finished"), (1, 2.0, 2.1, 2.2, 5, "finished")])  # E2EL 140, 200
    assert list(add_latency_columns(requests, old)["slo_met"]) == [True, False]
    with pytest.raises(ValueError, match="give e2el_ms only"):
        SLOConfig.model_validate({"e2e_ms": 1, "e2el_ms": 2})
