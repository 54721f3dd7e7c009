"""Iteration bounds (simulator.results.bounds): the closed form over decode runs against step-by-step counting, the
summary's invariants, the roofline sample, and whole runs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator
from simulator.api import summary_json
from simulator.config import load_experiment
from simulator.cost.work import Work
from simulator.errors import ConfigError
from simulator.results import bounds as bounds_module
from simulator.results.bounds import BOUND_METRICS, IterationBounds, Roofs, bound_seconds
from tests.helpers import experiment, roofline_experiment

ROOFS = Roofs("bf16", 1e15, 3e12)
NO_WORK = Work()


def _brute_force(steps: int, base: float, slope: float, lines: list[tuple[float, float]]) -> list[float]:
    """Step by step: each step's time to the largest of the lines at it (ties to the earlier)."""
    seconds = [0.0] * len(lines)
    for j in range(steps):
        values = [p + q * j for p, q in lines]
        seconds[values.index(max(values))] += base + slope * j
    return seconds


def test_bound_seconds_by_hand():
    """Four steps of 1, 2, 3, 4 s; compute 0.5 + 0.2·j, memory 1 − 0.4·j, fixed 0: memory leads at j = 0 (1 > 0.5),
    compute from j = 1 on (0.7 > 0.6): memory 1 s, compute 2 + 3 + 4 = 9 s."""
    lines = [(0.5, 0.2), (1.0, -0.4), (0.0, 0.0)]
    assert bound_seconds(4, 1.0, 1.0, lines) == pytest.approx([9.0, 1.0, 0.0])


# binary fractions, so that a line's value at a step is exact and a tie is a tie both ways
offsets, growths = st.integers(-1024, 1024).map(lambda k: k / 1024), st.integers(-64, 64).map(lambda k: k / 4096)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 300), st.floats(1e-4, 1.0), st.floats(0.0, 1e-2),
       st.lists(st.tuples(offsets, growths), min_size=3, max_size=3))
def test_bound_seconds_match_step_by_step_and_share_out_all_the_time(steps, base, slope, lines):
    """The shares of the busy time sum to 1 (every step has one bound), and the closed form gives each bound the
    steps that counting them one by one does (crossings at whole steps and ties included)."""
    closed, counted = bound_seconds(steps, base, slope, lines), _brute_force(steps, base, slope, lines)
    total = steps * base + slope * steps * (steps - 1) / 2
    assert sum(closed) == pytest.approx(total, rel=1e-12)
    assert closed == pytest.approx(counted, rel=1e-9, abs=1e-12 * total)


def _step_work(j: int, w0: Work, w1: Work, context0: int, batch: int) -> Work:
    return w0 + w1 * (context0 + j * batch)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 60), st.floats(1e-4, 1e-2), st.floats(0, 1e-4), st.floats(0, 1e-2), st.floats(0, 1e-2),
       st.floats(0, 1e-6), st.floats(0, 1e-6), st.integers(1, 64), st.integers(0, 20000))
def test_a_run_records_as_its_steps_one_by_one(steps, base, slope, c0, m0, c1, m1, batch, context0):
    """A closed-form run of k decode steps gives the summary that its k steps recorded one at a time give."""
    w0, w1 = Work(1e12, 1e9, c0, m0), Work(1e6, 1e3, c1, m1)
    run, one_by_one = IterationBounds(), IterationBounds()
    run.record(ROOFS, 0, "decode", 0.0, steps, base, slope, (w0, w1), context0, batch)
    for j in range(steps):
        one_by_one.record(ROOFS, 0, "decode", 0.0, 1, base + slope * j, 0.0,
                          (_step_work(j, w0, w1, context0, batch), NO_WORK), 0, 0)
    closed, counted = run.summary(), one_by_one.summary()
    for key in BOUND_METRICS:
        assert closed[key] == pytest.approx(counted[key], rel=1e-9, abs=1e-12, nan_ok=True), key


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["prefill", "decode", "mixed"]), st.integers(1, 30), st.floats(1e-4, 1.0),
                          st.floats(0, 1e-3), st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=20))
def test_the_shares_of_each_phase_sum_to_one(records):
    """Whatever the works, each phase's compute-, memory- and fixed-bound shares sum to 1 (NaN for a phase that did
    not run), and ``all`` counts every iteration and second."""
    recorder = IterationBounds()
    for phase, steps, base, slope, c, m in records:
        recorder.record(ROOFS, 0, phase, 0.0, steps, base, slope, (Work(1e9, 1e9, c * base, m * base), NO_WORK), 0, 0)
    summary = recorder.summary()
    for phase in ("prefill", "decode", "mixed", "all"):
        shares = [summary[f"iter_{phase}_{bound}_bound_frac"] for bound in ("compute", "memory", "fixed")]
        if summary[f"iter_{phase}_iterations"]:
            assert sum(shares) == pytest.approx(1.0, rel=1e-12)
        else:
            assert all(math.isnan(share) for share in shares)
    assert summary["iter_all_iterations"] == sum(r[1] for r in records)
    assert summary["iter_all_busy_s"] == pytest.approx(sum(s * b + sl * s * (s - 1) / 2 for _, s, b, sl, _, _
                                                           in records))


def test_fractions_of_peak_are_the_work_at_the_peaks_over_the_time():
    """Two iterations of 1 s and 3 s doing 500 and 300 TFLOP (peak 1 PFLOP/s: 0.5 s and 0.3 s at the peak) and
    1.5 and 0 TB (3 TB/s: 0.5 s, 0 s): (0.5 + 0.3) / 4 of the peak FLOP/s, 0.5 / 4 of the HBM bandwidth."""
    recorder = IterationBounds()
    recorder.record(ROOFS, 0, "prefill", 0.0, 1, 1.0, 0.0, (Work(5e14, 1.5e12, 0.6, 0.3), NO_WORK), 0, 0)
    recorder.record(ROOFS, 1, "prefill", 0.0, 1, 3.0, 0.0, (Work(3e14, 0.0, 0.4, 0.0), NO_WORK), 0, 0)
    summary = recorder.summary()
    assert summary["iter_prefill_peak_flops_frac"] == pytest.approx(0.8 / 4)
    assert summary["iter_prefill_peak_hbm_frac"] == pytest.approx(0.5 / 4)
    # the first is compute-bound (0.6 of 1 s), the second fixed-bound (2.6 of 3 s outside compute and memory)
    assert summary["iter_prefill_compute_bound_frac"] == pytest.approx(1 / 4)
    assert summary["iter_prefill_fixed_bound_frac"] == pytest.approx(3 / 4)


def test_the_roofline_sample_is_bounded_even_and_the_same_every_time(monkeypatch):
    """10,000 works with a cap of 100 per phase: between 100 and 200 points kept, evenly spaced (every 64th), the
    same ones in a second recording."""
    monkeypatch.setattr(bounds_module, "POINTS_PER_PHASE", 100)

    def sample() -> list[float]:
        recorder = IterationBounds()
        for i in range(10_000):
            recorder.record(ROOFS, 0, "decode", float(i), 1, 1e-3, 0.0, (Work(1e9, 1e9, 0, 5e-4), NO_WORK), 0, 0)
        return recorder.points()["start_s"].tolist()

    first = sample()
    assert 100 <= len(first) < 200 and first == sample()
    assert set(np.diff(first)) == {64.0}


def _check_invariants(summary: dict, roofline) -> None:
    for phase in ("prefill", "decode", "mixed", "all"):
        if not summary[f"iter_{phase}_iterations"]:
            continue
        shares = [summary[f"iter_{phase}_{bound}_bound_frac"] for bound in ("compute", "memory", "fixed")]
        assert sum(shares) == pytest.approx(1.0, rel=1e-9) and min(shares) >= 0
        for roof in ("flops", "hbm"):
            assert 0 < summary[f"iter_{phase}_peak_{roof}_frac"] <= 1 + 1e-9
    assert (roofline["flops"] / roofline["seconds"] <= roofline["peak_flops"] * (1 + 1e-9)).all()
    assert (roofline["hbm_bytes"] / roofline["seconds"] <= roofline["peak_hbm_bytes_per_s"] * (1 + 1e-9)).all()
    assert (roofline["fixed_s"] >= -1e-12 * roofline["seconds"]).all()


def test_a_run_records_every_iteration_within_the_peaks():
    """Every iteration is counted once, in one phase; shares sum to 1; no iteration beats the GPU's peaks."""
    result = simulator.run(load_experiment(roofline_experiment()))
    s = result.summary
    assert s["iter_all_iterations"] == s["num_iterations"]
    assert s["iter_all_iterations"] == sum(s[f"iter_{p}_iterations"] for p in ("prefill", "decode", "mixed"))
    assert s["iter_mixed_iterations"] > 0 and s["iter_decode_iterations"] > 0
    assert s["iter_all_busy_s"] <= result.requests["finish_s"].max()  # one replica, busy at most all along
    _check_invariants(s, result.roofline)
    assert set(result.roofline["bound"]) <= {"compute", "memory", "fixed"}


def test_runs_of_decode_steps_record_as_one_step_at_a_time():
    """The closed-form decode runs give the bounds that stepping every iteration gives."""
    config = load_experiment(roofline_experiment())
    fast, slow = simulator.run(config).summary, simulator.run(config, fast_forward=False).summary
    for key in BOUND_METRICS:
        assert fast[key] == pytest.approx(slow[key], rel=1e-9, nan_ok=True), key


def test_the_same_seed_gives_byte_identical_bounds():
    config = load_experiment(roofline_experiment())
    assert summary_json(simulator.run(config).summary, config) == summary_json(simulator.run(config).summary, config)


def test_off_unless_asked_for():
    result = simulator.run(load_experiment(roofline_experiment(metrics={})))
    assert not any(key.startswith("iter_") for key in result.summary) and result.roofline is None


def test_a_cost_model_without_flops_says_so_in_one_line():
    with pytest.raises(ConfigError, match="metrics.iteration_bounds: needs a cost model that prices FLOPs and bytes "
                                          r"\(roofline\); linear does not"):
        simulator.run(load_experiment(experiment(metrics={"iteration_bounds": True})))


def test_attention_dp_ranks_and_disaggregated_pools_record_their_own():
    """Attention-DP ranks wait for the slowest rank (fixed time, never negative); a disaggregated run's prefill
    pool runs prompt-only iterations and its decode pool the rest."""
    dp = simulator.run(load_experiment(roofline_experiment(
        model="qwen3-30b-a3b", cluster={"data_parallel": 4, "expert_parallel": 4, "router": "round_robin"})))
    _check_invariants(dp.summary, dp.roofline)
    assert dp.roofline["replica"].nunique() == 4
    split = simulator.run(load_experiment(roofline_experiment(
        cluster={"kind": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 1}},
        scheduler={"kind": "continuous", "max_num_seqs": 64, "max_model_len": 8192})))
    _check_invariants(split.summary, split.roofline)
    by_replica = split.roofline.groupby("replica")["phase"].unique()
    assert set(by_replica[0]) == {"prefill"} and "prefill" not in set(by_replica[1])
