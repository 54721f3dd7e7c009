"""Fit an engine profile's fixed costs on the benchmark rows that run it (its framework's, of the version range it
stands for: :func:`simulator.fidelity.silicon.row_engine`), on the fit half of them
(:func:`simulator.fidelity.silicon.in_fit_half`), and report both halves before and after (``llmsim calibrate
--runs FILE --engine PROFILE``).

The fitted parameters have physical meaning: the engine's CPU time per iteration (``per_iteration_ms``: scheduling,
input preparation, the launch of the CUDA graph), per sequence in the batch (``per_sequence_us``: sampling,
detokenization, bookkeeping), and the GPU-side floor of one kernel (``kernel_overhead_us``). They are stated as the
profile states them: on a GPU generation whose hosts run faster (``fit.host_speedup``) the simulation divides them
by that. Every combination of a grid is simulated on the fit rows; the score is the median
|log(predicted / measured)| of TPOT, the metric these costs set (TTFT is dominated by how the benchmark's requests
bunch, which they barely move); the first grid point of the lowest score wins. Deterministic. The work is the grid's
points times the fit rows' simulations, plus the two halves simulated with the profile as shipped and as fitted:
the 90 points of :data:`GRID` over the H100 file's 41 fit rows of ``vllm-0.14`` take about 75 s with 2 jobs.
"""

from __future__ import annotations

import itertools
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from simulator.catalog.engines import load_engine
from simulator.errors import LLMSimError
from simulator.fidelity.silicon import RunSettings, in_fit_half, read_runs, row_engine, validate_runs

GRID: dict[str, list[float]] = {
    "per_iteration_ms": [0.0, 0.5, 1.0, 1.5, 2.0, 3.0],
    "per_sequence_us": [0.0, 10.0, 20.0, 40.0, 80.0],
    "kernel_overhead_us": [2.0, 3.0, 4.0],
}


def score(frame: pd.DataFrame) -> float:
    """Median |log(predicted / measured)| of TPOT over the rows that ran."""
    ok = frame[frame["status"] == "ok"]
    if ok.empty:
        return float("inf")
    return float(np.median(np.abs(np.log(ok["predicted_tpot_ms"] / ok["silicon_tpot_ms"]))))


@dataclass(frozen=True)
class EngineFit:
    """A fit's outcome: the best grid point, every point's score, and each half of the rows simulated with the
    profile as shipped and as fitted (``validate_runs`` frames; a half with no rows is None)."""

    profile: str
    values: dict[str, float]
    table: pd.DataFrame
    shipped: dict[str, pd.DataFrame | None]  # "fit", "holdout"
    fitted: dict[str, pd.DataFrame | None]


def fit_engine(
    runs: str | Path, model_dir: str | Path | None, profile: str, grid: dict[str, list[float]] | None = None,
    jobs: int = 2, settings: RunSettings | None = None,
) -> EngineFit:
    """The best grid point for the engine ``profile`` (the shipped one's other fields kept), fitted on the fit half
    of the rows that run it, each simulated under ``settings`` (its benchmark client, :class:`RunSettings`; None:
    the defaults).
    Raises :class:`LLMSimError` when no row runs ``profile`` or none of them falls in the fit half."""
    base = load_engine(profile).model_dump()
    grid, settings = grid or GRID, settings or RunSettings()
    rows = [row for _, row in read_runs(runs)]
    engines = pd.Series([row_engine(row) for row in rows]).value_counts()
    if profile not in engines:
        ran = ", ".join(f"{name or '(no backend)'} ({count})" for name, count in engines.items())
        raise LLMSimError(f"{runs}: no row runs engine profile {profile!r} (its rows run: {ran})")
    halves = {"fit": True, "holdout": False}
    counts = {half: sum(row_engine(row) == profile and in_fit_half(row) == side for row in rows)
              for half, side in halves.items()}
    if not counts["fit"]:
        raise LLMSimError(f"{runs}: none of the {counts['holdout']} rows that run {profile!r} is in the fit half "
                          "(an id of even CRC-32): give more rows")

    def simulate(fields: dict[str, float], half: str, path: Path) -> pd.DataFrame | None:
        if not counts[half]:
            return None
        path.write_text(yaml.safe_dump({**base, **fields}))
        return validate_runs(runs, model_dir, jobs, replace(settings, engines=((profile, str(path)),)),
                             keep=lambda row: row_engine(row) == profile and in_fit_half(row) == halves[half])

    names = list(grid)
    records, best_frame, best_score = [], None, float("inf")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{profile}.yaml"
        for point in itertools.product(*(grid[n] for n in names)):
            fields = dict(zip(names, point, strict=True))
            frame = simulate(fields, "fit", path)
            assert frame is not None  # the fit half has rows (checked above)
            records.append({**fields, "score": score(frame)})
            if best_frame is None or records[-1]["score"] < best_score:
                best_frame, best_score = frame, records[-1]["score"]
        table = pd.DataFrame(records).sort_values("score", kind="stable")
        values = {n: float(table.iloc[0][n]) for n in names}
        shipped = {half: simulate({}, half, path) for half in halves}
        fitted = {"fit": best_frame, "holdout": simulate(values, "holdout", path)}
    return EngineFit(profile, values, table, shipped, fitted)


def errors(frame: pd.DataFrame | None) -> str:
    """``n rows: TPOT median / p90, TTFT median / p90`` absolute percentage errors of a frame's rows that ran."""
    if frame is None:
        return "no rows"
    ok = frame[frame["status"] == "ok"]
    if ok.empty:
        return f"none of {len(frame)} rows ran"
    tpot, ttft = 100 * ok["tpot_error"], 100 * ok["ttft_error"]
    return (f"{len(ok)} of {len(frame)} rows ran: TPOT {tpot.median():.1f} / {tpot.quantile(0.9):.1f}%, "
            f"TTFT {ttft.median():.1f} / {ttft.quantile(0.9):.1f}%")


def fit_report(fit: EngineFit, runs: str | Path, client: str) -> list[str]:
    """The lines ``calibrate --runs`` prints and writes above the fitted profile."""
    grid = ", ".join(f"{name} {min(fit.table[name]):g}-{max(fit.table[name]):g}" for name in fit.values)
    chosen = ", ".join(f"{name} {value:g}" for name, value in fit.values.items())
    lines = [f"{fit.profile}'s fixed costs fitted on the fit half of the rows of {runs} that run it (ids of even "
             f"CRC-32; benchmark client {client}; grid of {len(fit.table)} points: {grid}; score: median TPOT "
             f"|log error| {fit.table['score'].iloc[0]:.4f}): {chosen}",
             "median / p90 absolute error, as shipped -> as fitted:"]
    for half, label in (("fit", "fit half"), ("holdout", "held-out half")):
        lines.append(f"  {label}: {errors(fit.shipped[half])} -> {errors(fit.fitted[half])}")
    return lines


def fitted_profile(fit: EngineFit, name: str, runs: str | Path) -> dict:
    """The engine profile the fit makes: ``fit.profile`` (``extends``) with the fitted fields."""
    return {"extends": fit.profile, "name": name,
            "description": f"{fit.profile} with its fixed costs fitted on {Path(runs).name} (llmsim calibrate --runs)",
            **fit.values}
