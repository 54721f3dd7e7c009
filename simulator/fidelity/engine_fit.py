"""Fit an engine profile's fixed costs on the benchmark rows that run it (its framework's, of the version range it
stands for: :func:`simulator.fidelity.silicon.row_engine`), on the fit half of them
(:meth:`simulator.fidelity.split.Split.in_fit_half`), and report both halves before and after (``llmsim calibrate
--runs FILE --engine PROFILE``).

The fitted parameters have physical meaning: the engine's CPU time per iteration (``per_iteration_ms``: scheduling,
input preparation, the launch of the CUDA graph), per sequence in the batch (``per_sequence_us``: sampling,
detokenization, bookkeeping), and the GPU-side floor of one kernel (``kernel_overhead_us``). They are stated as the
profile states them: on a GPU generation whose hosts run faster (``fit.host_speedup``) the simulation divides the
two CPU costs by that. Every combination of a grid is simulated on the fit rows, the profile's other fields as
shipped; the score is the median |log(predicted / measured)| of TPOT, the metric these costs set (TTFT is dominated
by how the benchmark's requests bunch, which they barely move); the first grid point of the lowest score wins.
Deterministic. The work is the grid's points times the fit rows' simulations, plus both halves simulated with the
profile as shipped and the held-out half as fitted: the 90 points of :data:`GRID` over the H100 file's 41 fit rows of
``vllm-0.14`` take about 75 s with 2 jobs, over its 286 of ``trtllm`` about 12 minutes.
"""

from __future__ import annotations

import itertools
import math
import tempfile
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from simulator.catalog.engines import load_engine
from simulator.errors import LLMSimError
from simulator.fidelity.runs_report import overall_errors, reason_counts
from simulator.fidelity.silicon import RunSettings, read_runs, row_engine, stated_client, validate_runs
from simulator.fidelity.split import Split
from simulator.results.progress import progress_bar

GRID: dict[str, list[float]] = {
    "per_iteration_ms": [0.0, 0.5, 1.0, 1.5, 2.0, 3.0],
    "per_sequence_us": [0.0, 10.0, 20.0, 40.0, 80.0],
    "kernel_overhead_us": [2.0, 3.0, 4.0],
}
HALVES = {"fit": True, "holdout": False}  # each half's Split.in_fit_half


def score(frame: pd.DataFrame) -> float:
    """Median |log(predicted / measured)| of TPOT over the rows that ran."""
    ok = frame[frame["status"] == "ok"]
    if ok.empty:
        return float("inf")
    return float(np.median(np.abs(np.log(ok["predicted_tpot_ms"] / ok["silicon_tpot_ms"]))))


@dataclass(frozen=True)
class EngineFit:
    """A fit's outcome: the best grid point, every point's score (best first), each half of the rows simulated with
    the profile as shipped and as fitted (``validate_runs`` frames, whose own ``subset`` column is this repository's
    split, :meth:`~simulator.fidelity.split.Split.is_fit_row`; the halves here are ``Split.in_fit_half``'s), and
    how many of the rows named their own benchmark client."""

    profile: str
    values: dict[str, float]
    table: pd.DataFrame
    shipped: dict[str, pd.DataFrame]  # "fit", "holdout"
    fitted: dict[str, pd.DataFrame]
    own_clients: int


def fit_engine(
    runs: str | Path, model_dir: str | Path | None, profile: str, grid: dict[str, list[float]] | None = None,
    jobs: int = 2, settings: RunSettings | None = None,
) -> EngineFit:
    """The best grid point for the engine ``profile`` (the shipped one's other fields kept), fitted on the fit half
    of the rows that run it, each simulated under ``settings`` (its benchmark client, :class:`RunSettings`; None:
    the defaults). Raises :class:`LLMSimError` when no row runs ``profile``, when either half has none of them, or
    when none of the fit half's can be simulated (with the commonest reason)."""
    base = load_engine(profile).model_dump()
    grid, settings = grid or GRID, settings or RunSettings()
    rows = [row for _, row in read_runs(runs)]
    if not rows:
        raise LLMSimError(f"{runs}: no rows to simulate (a runs file has a header and one row per run)")
    engines = Counter(row_engine(row) for row in rows)
    if profile not in engines:
        ran = ", ".join(f"{name or '(no backend)'} ({count})"
                        for name, count in sorted(engines.items(), key=lambda item: (-item[1], item[0])))
        raise LLMSimError(f"{runs}: no row runs engine profile {profile!r} (its rows run: {ran})")
    mine, split = [row for row in rows if row_engine(row) == profile], Split.of(rows)
    for side in HALVES.values():
        if not any(split.in_fit_half(row) == side for row in mine):
            label, which = (("fit", "ids of even CRC-32 and their copies") if side
                            else ("held-out", "ids of odd CRC-32 whose measurement no fit row repeats"))
            raise LLMSimError(f"{runs}: none of the {len(mine)} rows that run {profile!r} is in the {label} half "
                              f"({which}): give more rows, with distinct ids and measurements")

    def simulate(fields: dict[str, float], half: str, path: Path) -> pd.DataFrame:
        path.write_text(yaml.safe_dump({**base, **fields}))
        return validate_runs(runs, model_dir, jobs, replace(settings, engines=((profile, str(path)),)),
                             keep=lambda row: row_engine(row) == profile and split.in_fit_half(row) == HALVES[half],
                             progress=False)

    names = list(grid)
    points = list(itertools.product(*(grid[n] for n in names)))
    records, best_frame, best_score = [], None, math.inf
    bar = progress_bar(len(points) + 3, f"calibrate {profile}", "simulation")
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"{profile}.yaml"
            for point in points:
                fields = dict(zip(names, point, strict=True))
                frame = simulate(fields, "fit", path)
                records.append({**fields, "score": score(frame)})
                if best_frame is None or records[-1]["score"] < best_score:
                    best_frame, best_score = frame, records[-1]["score"]
                bar.update(1)
            assert best_frame is not None  # the grid has points
            if not math.isfinite(best_score):
                reasons = reason_counts(best_frame)
                raise LLMSimError(f"{runs}: none of the {len(best_frame)} fit rows that run {profile!r} could be "
                                  f"simulated ({reasons.iloc[0]} of them: {reasons.index[0]})")
            table = pd.DataFrame(records).sort_values("score", kind="stable")
            values = {n: float(table.iloc[0][n]) for n in names}
            shipped = {}
            for half in HALVES:
                shipped[half] = simulate({}, half, path)
                bar.update(1)
            fitted = {"fit": best_frame, "holdout": simulate(values, "holdout", path)}
            bar.update(1)
    finally:
        bar.close()
    return EngineFit(profile, values, table, shipped, fitted, sum(bool(stated_client(row)) for row in mine))


def errors(frame: pd.DataFrame) -> str:
    """``k of n rows ran: TPOT median / p90, TTFT median / p90`` (absolute percentage errors of the rows that ran)."""
    ok = int((frame["status"] == "ok").sum())
    if not ok:
        return f"none of {len(frame)} rows ran"
    e = overall_errors(frame)
    return (f"{ok} of {len(frame)} rows ran: TPOT {e['tpot_median']:.1%} / {e['tpot_p90']:.1%}, "
            f"TTFT {e['ttft_median']:.1%} / {e['ttft_p90']:.1%}")


def fit_report(fit: EngineFit, runs: str | Path, client: str) -> list[str]:
    """The lines ``calibrate --runs`` prints and writes above the fitted profile: the choice, each half's errors
    as shipped and as fitted, a fitted value at an edge of the grid that a wider one might move (an upper edge, or
    a lower one above zero), and the commonest reason of rows that did not run."""
    grid = {name: sorted(set(fit.table[name])) for name in fit.values}  # the values the fit tried
    span = ", ".join(f"{name} {min(grid[name]):g}-{max(grid[name]):g}" for name in fit.values)
    chosen = ", ".join(f"{name} {value:g}" for name, value in fit.values.items())
    clients = f"benchmark client {client}" + (f" ({fit.own_clients} rows named their own)" if fit.own_clients else "")
    lines = [f"{fit.profile}'s fixed costs fitted on the fit half of the rows of {runs} that run it (ids of even "
             f"CRC-32 and their measurements' copies; {clients}; grid of {len(fit.table)} points: {span}; score: "
             f"median TPOT |log error| {fit.table['score'].iloc[0]:.4f}): {chosen}",
             "median / p90 absolute error, as shipped -> as fitted:"]
    for half, label in (("fit", "fit half"), ("holdout", "held-out half")):
        lines.append(f"  {label}: {errors(fit.shipped[half])} -> {errors(fit.fitted[half])}")
    for name, value in fit.values.items():
        if len(grid[name]) > 1 and (value == max(grid[name]) or 0 < value == min(grid[name])):
            lines.append(f"{name} {value:g} is at the grid's edge: the best value may lie beyond it")
    failed = reason_counts(pd.concat([fit.fitted["fit"], fit.fitted["holdout"]]))
    if len(failed):
        lines.append(f"{int(failed.sum())} rows did not run; the commonest reason ({failed.iloc[0]}): "
                     f"{failed.index[0]}")
    return lines


def fitted_profile(fit: EngineFit, name: str, runs: str | Path) -> dict:
    """The engine profile the fit makes: ``fit.profile`` (``extends``) with the fitted fields."""
    return {"extends": fit.profile, "name": name,
            "description": f"{fit.profile} with its fixed costs fitted on {Path(runs).name} (llmsim calibrate --runs)",
            **fit.values}
