"""Metric formulas against hand calculations and numpy."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.config.schema import SLOConfig
from simulator.metrics import add_latency_columns, weighted_percentile


@given(
    st.lists(st.tuples(st.floats(-1e6, 1e6), st.integers(0, 20)), min_size=1, max_size=30),
    st.floats(0, 100),
)
def test_weighted_percentile_equals_numpy_on_the_repetition(pairs, q):
    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs])
    if weights.sum() == 0:
        assert math.isnan(weighted_percentile(values, weights, q))
        return
    expected = np.percentile(np.repeat(values, weights), q)
    assert weighted_percentile(values, weights, q) == pytest.approx(expected, rel=1e-9, abs=1e-9)


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
