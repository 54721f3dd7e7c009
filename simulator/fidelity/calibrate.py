"""``llmsim calibrate``: fit a hardware profile's physical parameters to measurements.

GEMM parameters (``fit.gemm.flops_efficiency``, ``fit.bandwidth_efficiency``, ``fit.kernel_overhead_us``,
``fit.gemm.knee``, ``fit.gemm.tile_m``) are fitted to per-layer operator timings (the format of
``../shared/data/calibration/a100_ops``); network parameters (``fit.comm``'s ``link_efficiency``, ``latency_us``,
``step_latency_us``, ``p2p_efficiency``, ``p2p_latency_us``, and ``node.inter_node_gb_per_s``) to NCCL timings (the
format of ``../shared/data/network``). Spec-sheet numbers are never changed.

The fit minimises the mean |log(predicted / measured)| (smooth, and zero only at a perfect fit), evaluated by the
same code as ``llmsim validate``: every combination of the discrete parameters (GEMM knee × row tile), each with
coordinate descent over a grid of physically plausible values of the others, on a fixed subsample of at most 4,000
timings; then one more descent on all of them. Deterministic; seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypedDict, TypeVar

import numpy as np
import pandas as pd
from pydantic import BaseModel

from simulator.catalog import HardwareSpec
from simulator.catalog.hardware import fit_value, with_fit
from simulator.catalog.hardware_fit import replaced, value_at
from simulator.fidelity.network import network_errors, network_measurements
from simulator.fidelity.operators import gemm_errors, gemm_measurements

Profile = TypeVar("Profile", bound=BaseModel)  # a hardware profile, or an engine profile (its fitted fields)


class DescentOptions(TypedDict, total=False):
    """:func:`coordinate_descent`'s options, as a fit states them once for all its descents."""

    rounds: int
    diagonal: bool

GEMM_GRID: dict[str, list] = {
    "gemm.flops_efficiency": [round(x, 2) for x in np.arange(0.40, 0.96, 0.01)],
    "bandwidth_efficiency": [round(x, 2) for x in np.arange(0.50, 0.98, 0.02)],
    "kernel_overhead_us": [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15],
}
GEMM_SHAPES: dict[str, list] = {"gemm.knee": [1.5, 2.0, 2.5, 3.0, 4.0], "gemm.tile_m": [16, 32, 64, 128]}
NETWORK_GRID: dict[str, list] = {
    "comm.link_efficiency": [round(x, 2) for x in np.arange(0.4, 0.96, 0.05)],
    "comm.latency_us": [0, 5, 10, 15, 20, 25, 30, 40],
    "comm.step_latency_us": [0, 1, 2, 3, 4, 6, 8],
    "comm.p2p_efficiency": [round(x, 2) for x in np.arange(0.5, 0.96, 0.05)],
    "comm.p2p_latency_us": [2, 4, 6, 8, 10, 15, 20],
    "inter_node_gb_per_s": [2, 4, 6, 8, 10, 12.5, 20, 25, 50],
}


def set_parameter(profile: Profile, name: str, value) -> Profile:
    """``profile`` with one fitted parameter replaced. A hardware profile's are named by their place within its
    ``fit`` or their flat names (:func:`simulator.catalog.hardware.with_fit`: ``gemm.tile_m``,
    ``gemm.flops_efficiency_by_dtype.fp8``, ``comm.collectives.all_to_all.low_latency.latency_us``,
    ``attention_efficiency``), but for ``inter_node_gb_per_s``, in its ``node``; an engine profile's by its field
    names, dotted through its tables."""
    if isinstance(profile, HardwareSpec):
        if name == "inter_node_gb_per_s":
            return profile.model_copy(update={"node": profile.node.model_copy(update={name: value})})
        return with_fit(profile, {name: value})  # type: ignore[return-value]  # a hardware profile: its Profile
    return replaced(profile, name.split("."), value)


def score(frame: pd.DataFrame) -> float:
    """What calibration minimises: mean |log(predicted / measured)|."""
    return float(np.abs(np.log(frame["predicted_s"] / frame["measured_s"])).mean())


def score_per_collective(frame: pd.DataFrame) -> float:
    """:func:`score` summed over the collectives, so all-reduce and send/recv count alike."""
    return sum(score(rows) for _, rows in frame.groupby("op"))


def get_parameter(profile: Profile, name: str):
    """The value :func:`set_parameter` would replace."""
    if isinstance(profile, HardwareSpec):
        return profile.node.inter_node_gb_per_s if name == "inter_node_gb_per_s" else fit_value(profile, name)
    return value_at(profile, name.split("."))


def coordinate_descent(profile: Profile, grid: dict[str, list], evaluate: Callable[[Profile], float],
                       rounds: int = 3, diagonal: bool = False) -> Profile:
    """Best profile (a hardware or an engine profile: the grid names its fields, :func:`set_parameter`) found by
    trying every grid value of one parameter at a time, for a few rounds. With ``diagonal``, a round in which no
    single parameter improves the score also tries moving two parameters one grid step each at once (every pair,
    four directions) and follows the best such direction while it improves: two parameters that trade off against
    each other (two costs per token) leave a valley along which no single move descends."""
    best_score = evaluate(profile)
    for _ in range(rounds):
        improved = False
        for name, values in grid.items():
            for value in values:
                candidate = set_parameter(profile, name, value)
                candidate_score = evaluate(candidate)
                if candidate_score < best_score - 1e-12:
                    profile, best_score, improved = candidate, candidate_score, True
        if not improved and diagonal:
            # _diagonal_moves yields the moves that stay on the grid, so _stepped gives a profile (not None)
            moves = [(move, evaluate(_stepped(profile, grid, move)))  # type: ignore[arg-type]
                     for move in _diagonal_moves(profile, grid)]
            move, move_score = min(moves, key=lambda m: m[1], default=(None, best_score))
            while move is not None and move_score < best_score - 1e-12:
                stepped = _stepped(profile, grid, move)
                assert stepped is not None  # (scored on the grid: off it, the score best_score ends the walk)
                profile, best_score, improved = stepped, move_score, True
                ahead = _stepped(profile, grid, move)
                move_score = evaluate(ahead) if ahead is not None else best_score
        if not improved:
            break
    return profile


def _grid_index(profile: Profile, grid: dict[str, list], name: str) -> int:
    """The index of the grid value nearest the profile's value of ``name``."""
    value = get_parameter(profile, name)
    return min(range(len(grid[name])), key=lambda i: abs(grid[name][i] - value))


def _diagonal_moves(profile: Profile, grid: dict[str, list]):
    """Every pair of grid parameters with a step of ±1 grid value each that stays on the grid (a parameter still
    unset, None, has no neighbours yet)."""
    names = [name for name in grid if get_parameter(profile, name) is not None]
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            for moves in (((first, -1), (second, -1)), ((first, -1), (second, 1)), ((first, 1), (second, -1)),
                          ((first, 1), (second, 1))):
                if all(0 <= _grid_index(profile, grid, name) + step < len(grid[name]) for name, step in moves):
                    yield moves


def _stepped(profile: Profile, grid: dict[str, list], moves) -> Profile | None:
    """``profile`` with each (parameter, step) of ``moves`` moved that many grid values; None off the grid."""
    for name, step in moves:
        index = _grid_index(profile, grid, name) + step
        if not 0 <= index < len(grid[name]):
            return None
        profile = set_parameter(profile, name, grid[name][index])
    return profile


def calibrate(
    base: HardwareSpec, ops_dir: Path | None = None, data_dir: Path | None = None, network_system: str | None = None
) -> tuple[HardwareSpec, list[str]]:
    """A profile with fitted parameters, and one line per fitted group saying what was fitted and how well."""
    report = []
    profile = base
    if ops_dir is not None:
        frame = gemm_measurements(ops_dir)
        sample = frame.sample(n=min(len(frame), 4000), random_state=0)

        def fit_on(rows: pd.DataFrame, start: HardwareSpec) -> tuple[HardwareSpec, float]:
            fitted = coordinate_descent(start, GEMM_GRID, lambda p: score(gemm_errors(ops_dir, p, rows)))
            return fitted, score(gemm_errors(ops_dir, fitted, rows))

        candidates = [
            fit_on(sample, with_fit(profile, {"gemm.knee": knee, "gemm.tile_m": tile}))
            for knee in GEMM_SHAPES["gemm.knee"] for tile in GEMM_SHAPES["gemm.tile_m"]
        ]
        profile, _ = fit_on(frame, min(candidates, key=lambda c: c[1])[0])
        errors = gemm_errors(ops_dir, profile, frame)["error"]
        report.append(
            f"GEMM ({len(frame):,} timings): "
            + ", ".join(f"{n}={get_parameter(profile, n)}" for n in (*GEMM_GRID, *GEMM_SHAPES))
            + f"; median error {errors.median():.1%}, p90 {errors.quantile(0.9):.1%}"
        )
    if data_dir is not None and network_system is not None:
        frame = network_measurements(data_dir, (network_system,))

        def evaluate(p: HardwareSpec) -> pd.DataFrame:
            return network_errors(data_dir, {network_system: p}, frame)

        profile = coordinate_descent(profile, NETWORK_GRID, lambda p: score_per_collective(evaluate(p)))
        errors = evaluate(profile)
        values = [f"{n}={get_parameter(profile, n)}" for n in NETWORK_GRID]
        by_op = ", ".join(f"{op} median {e.median():.1%}" for op, e in errors.groupby("op")["error"])
        report.append(f"network ({len(frame):,} timings of {network_system}): {', '.join(values)}; {by_op}")
    return profile, report
