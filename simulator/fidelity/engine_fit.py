"""Fit an engine profile's fixed costs on the benchmark rows that run it (its framework's, of the version range it
stands for: :func:`simulator.fidelity.silicon.row_engine`; the ``fit`` subset of
:func:`simulator.fidelity.silicon.is_fit_row`).

The fitted parameters have physical meaning: the engine's CPU time per iteration (``per_iteration_ms``: scheduling,
input preparation, the launch of the CUDA graph), per sequence in the batch (``per_sequence_us``: sampling,
detokenization, bookkeeping), and the GPU-side floor of one kernel (``kernel_overhead_us``). Every combination of a
grid is simulated on the fit rows; the score is the median |log(predicted / measured)| of TPOT, the metric these
costs set (TTFT is dominated by how the benchmark's requests bunch, which they barely move). Deterministic; a few
minutes per framework on 2 cores.
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from simulator.catalog.engines import load_engine
from simulator.fidelity.silicon import RunSettings, is_fit_row, row_engine, validate_runs

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


def fit_engine(
    runs: str | Path, model_dir: str | Path, profile: str, grid: dict[str, list[float]] | None = None, jobs: int = 2,
) -> tuple[dict[str, float], pd.DataFrame]:
    """The best grid point for the engine ``profile`` (starting from the shipped one), fitted on the fit rows that
    run it (:func:`simulator.fidelity.silicon.row_engine`: its backend's, of its version range), and every point's
    score."""
    base = load_engine(profile).model_dump()
    grid = grid or GRID
    names = list(grid)
    records = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{profile}.yaml"
        for values in itertools.product(*(grid[n] for n in names)):
            path.write_text(yaml.safe_dump({**base, **dict(zip(names, values, strict=True))}))
            frame = validate_runs(
                runs, model_dir, jobs, RunSettings(engines=((profile, str(path)),)),
                keep=lambda row: row_engine(row) == profile and is_fit_row(row),
            )
            records.append({**dict(zip(names, values, strict=True)), "score": score(frame)})
    table = pd.DataFrame(records).sort_values("score", kind="stable")
    best = table.iloc[0]
    return {n: float(best[n]) for n in names}, table
