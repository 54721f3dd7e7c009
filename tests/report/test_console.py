"""The console's line of iteration bounds (simulator.report.console.iterations_line)."""

from __future__ import annotations

import math

from simulator.report.console import iterations_line


def _phase(name: str, iterations: int, compute: float, memory: float, flops: float, hbm: float) -> dict:
    return {f"iter_{name}_iterations": iterations, f"iter_{name}_busy_s": 0.01 * iterations,
            f"iter_{name}_compute_bound_frac": compute,
            f"iter_{name}_memory_bound_frac": memory, f"iter_{name}_fixed_bound_frac": 1 - compute - memory,
            f"iter_{name}_peak_flops_frac": flops, f"iter_{name}_peak_hbm_frac": hbm}


def test_each_phase_that_ran_by_its_commonest_bound_and_that_bounds_peak():
    """Decode mostly memory-bound: its HBM fraction; prefill mostly compute-bound: its FLOP fraction of the named
    format's peak; mixed mostly fixed: both; a phase that did not run is left out."""
    summary = {**_phase("decode", 900, 0.02, 0.92, 0.03, 0.614), **_phase("prefill", 40, 0.88, 0.1, 0.47, 0.2),
               **_phase("mixed", 10, 0.2, 0.1, 0.1, 0.25),
               **_phase("all", 950, 0.5, 0.5, 0.1, 0.5)}
    assert iterations_line(summary, "fp8") == (
        "iterations: decode 92% memory-bound at 61% of HBM peak; prefill 88% compute-bound at 47% of FP8 peak; "
        "mixed 70% fixed-bound at 25% of HBM peak, 10% of FP8 peak")
    summary.update(_phase("prefill", 0, math.nan, math.nan, math.nan, math.nan))
    summary.update(_phase("mixed", 0, math.nan, math.nan, math.nan, math.nan))
    assert iterations_line(summary, "bf16") == "iterations: decode 92% memory-bound at 61% of HBM peak"


def test_no_line_without_iteration_bounds():
    assert iterations_line({"completed": 10}) == ""
