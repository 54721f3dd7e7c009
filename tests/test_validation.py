"""Accuracy against the real measurements in ../shared/data (skipped when absent).

The bounds are the issue's targets — median ≤ 8% and p90 ≤ 20% (GEMMs; whole-iteration prefill and decode),
all-reduce median ≤ 15% — except whole-iteration prefill p90, which is 24% today: its bound (25%) guards against
regressions until the model meets 20% (see README, "Accuracy").
"""

from __future__ import annotations

import pytest

from simulator.catalog import load_hardware
from simulator.fidelity.errors import overall
from simulator.fidelity.network import network_errors
from simulator.fidelity.operators import gemm_errors
from simulator.fidelity.splitwise import splitwise_errors


@pytest.mark.slow
def test_gemm_errors_on_a100_operator_timings(shared_data):
    frame = gemm_errors(shared_data, load_hardware("a100-80gb-sxm"))
    assert len(frame) > 10_000
    for op, rows in frame.groupby("op"):
        median, p90 = overall(rows)
        assert median <= 0.08 and p90 <= 0.20, op


@pytest.mark.slow
def test_all_reduce_errors_on_nccl_timings(shared_data):
    frame = network_errors(shared_data)
    median, _ = overall(frame[frame["op"] == "all_reduce"])
    assert median <= 0.15


@pytest.mark.slow
def test_whole_iteration_errors_on_splitwise(shared_data):
    frame = splitwise_errors(shared_data, load_hardware("a100-80gb-sxm"), "splitwise")
    for phase, rows in frame.groupby("phase"):
        median, p90 = overall(rows)
        assert median <= 0.08, phase
        assert p90 <= 0.20, phase
