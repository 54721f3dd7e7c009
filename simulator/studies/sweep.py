"""Parameter sweeps: many experiments from one base, run in parallel, stored so that a killed sweep resumes.

A sweep (YAML file or the arguments of :func:`sweep`)::

    base: experiments/quickstart.yaml          # or an experiment mapping
    grid:                                      # cartesian product over dotted paths
      workload.arrival.rate: {start: 2, last: 12, step: 2}     # or a list
      scheduler.kind: [continuous, chunked]
    zip:                                       # axes that move together (equal lengths)
      scheduler.max_num_seqs: [64, 128]
      scheduler.max_num_batched_tokens: [4096, 8192]
    replicates: 3                              # independent seeds spawned from the base seed

Points are the grid × zip × replicates combinations, in a fixed order. Every point is validated before anything
runs. With an output folder each point gets ``point-NNNNN/`` (``config.yaml``, ``summary.json``,
``requests.parquet``, or ``error.txt`` if it failed), written to a temporary folder and renamed, and
``index.parquet`` (one row per point) is rewritten atomically at the end; rerunning skips finished points.
``backend``: ``local`` (joblib processes) or ``ray`` (``pip install -e '.[ray]'``); results do not depend on it.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field, model_validator

from simulator.api import ABOUT_KEYS, config_yaml, run
from simulator.config import ExperimentConfig, load_experiment
from simulator.config.base import MAX_SEED, Strict
from simulator.config.loader import apply_overrides, load_spec, resolve_base
from simulator.errors import ConfigError, LLMSimError, renamed
from simulator.results.progress import progress_bar
from simulator.studies.parallel import ray_session

if TYPE_CHECKING:
    import pandas as pd

MAX_POINTS = 100_000  # points of one sweep (grid × zip × replicates), checked before anything is expanded


class SweepRange(Strict):
    """``start``, ``start + step``, … up to and including ``last`` (named so: NumPy's and Python's ``stop`` is
    excluded; ``stop`` is read as ``last`` with a warning)."""

    start: float
    last: float
    step: float = Field(gt=0)

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, value: Any) -> Any:
        return renamed(value, "sweep axis", {"stop": "last"})

    @property
    def count(self) -> int:
        return max(math.floor((self.last - self.start) / self.step + 1e-9) + 1, 0)

    def values(self) -> list[float]:
        """start, start + step, … up to and including last (within rounding); integers stay integers."""
        count = self.count
        values = [self.start + i * self.step for i in range(max(count, 0))]
        if all(float(v).is_integer() for v in (self.start, self.step)):
            return [int(v) for v in values]
        return [round(v, 12) for v in values]


Axis = list[Any] | SweepRange


class SweepConfig(Strict):
    base: dict[str, Any] | str
    grid: dict[str, Axis] = Field(default_factory=dict)
    zip: dict[str, Axis] = Field(default_factory=dict)
    replicates: int = Field(default=1, ge=1, le=MAX_POINTS)


def _size(values: Axis) -> int:
    return values.count if isinstance(values, SweepRange) else len(values)


def _axis(values: Axis, where: str) -> list[Any]:
    values = values.values() if isinstance(values, SweepRange) else list(values)
    if not values:
        raise ConfigError(f"{where}: empty axis (give a list or {{start, last, step}} with start <= last)")
    return values


@dataclass
class Point:
    """One simulation of a sweep: its swept values (dotted path → value), seed and validated config."""

    index: int
    values: dict[str, Any]
    seed: int
    config: ExperimentConfig

    @property
    def name(self) -> str:
        return f"point-{self.index:05d}"


def _overrides(values: dict[str, Any]) -> list[str]:
    return [f"{path}={json.dumps(value)}" for path, value in values.items()]


def expand(spec: SweepConfig, base: dict[str, Any], base_dir: Path | None = None, where: str = "sweep") -> list[Point]:
    """Every point of a sweep, validated (one-line errors naming the point's values)."""
    zip_size = max((_size(v) for v in spec.zip.values()), default=1)
    total = math.prod(_size(v) for v in spec.grid.values()) * zip_size * spec.replicates
    if total > MAX_POINTS:
        raise ConfigError(f"{where}: {total:,} points (grid × zip × replicates) is beyond the limit of "
                          f"{MAX_POINTS:,}; split the sweep")
    seed = base.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"{where}: base seed must be an integer in [0, 2^63), got {seed!r}")
    grid = {path: _axis(values, f"{where}: grid.{path}") for path, values in spec.grid.items()}
    zipped = {path: _axis(values, f"{where}: zip.{path}") for path, values in spec.zip.items()}
    lengths = {len(v) for v in zipped.values()}
    if len(lengths) > 1:
        raise ConfigError(f"{where}: zip axes must have equal lengths, got {sorted(lengths)}")
    zip_rows = [dict(zip(zipped, row, strict=True)) for row in zip(*zipped.values(), strict=True)] or [{}]
    grid_rows = [dict(zip(grid, row, strict=True)) for row in itertools.product(*grid.values())]
    base_seed = seed
    seeds = [base_seed] if spec.replicates == 1 else [
        int(child.generate_state(1)[0]) for child in np.random.SeedSequence(base_seed).spawn(spec.replicates)
    ]
    points: list[Point] = []
    for grid_row, zip_row, seed in itertools.product(grid_rows, zip_rows, seeds):
        values = {**grid_row, **zip_row}
        try:
            data = apply_overrides(base, [*_overrides(values), f"seed={seed}"])
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        label = ", ".join(f"{k}={v}" for k, v in values.items()) or "base"
        config = load_experiment(data, base_dir=base_dir, where=f"{where}: point {label}")
        points.append(Point(len(points), values, seed, config))
    return points


def load_sweep(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> list[Point]:
    """Read, validate and expand a sweep file; ``overrides`` (``dotted.key=value``, as ``llmsim run --set``)
    change its base experiment before the grid applies."""
    spec, folder = load_spec(path, SweepConfig, "sweep")
    base, base_dir = resolve_base(spec.base, folder, str(path))
    if overrides:
        try:
            base = apply_overrides(base, overrides)
        except ConfigError as exc:
            raise ConfigError(f"{path}: base: {exc}") from None
    return expand(spec, base, base_dir, str(path))


# --- running ---------------------------------------------------------------------------------------------------
def _finished_with(folder: Path, config_text: str) -> bool:
    """Whether ``folder`` holds a finished run of exactly this config (a changed grid value or base is rerun)."""
    try:
        return (folder / "summary.json").is_file() and (folder / "config.yaml").read_text() == config_text
    except (OSError, UnicodeDecodeError):
        return False


class Orphaned(Exception):
    """The sweep process that started this worker is gone: its results would be written for nobody."""


def _check_parent(parent_pid: int | None) -> None:
    if parent_pid is not None and os.getppid() != parent_pid:
        raise Orphaned(f"the sweep process {parent_pid} is gone")


def _metrics(saved: dict[str, Any]) -> dict[str, Any]:
    """A point's metrics as its summary.json states them (to its significant digits; no value: None)."""
    return {key: value for key, value in saved.items() if key not in ABOUT_KEYS}


def run_point(point: Point, out: Path | None, parent_pid: int | None = None) -> dict[str, Any]:
    """Simulate one point (writing its folder when ``out`` is given); returns its index row. A failure is
    recorded in the row's ``error`` and, with ``out``, in ``error.txt``. A worker process passes the sweep's
    ``parent_pid``: once that process is gone (killed), the worker stops instead of writing into a folder that a
    rerun may be using."""
    _check_parent(parent_pid)
    row = {"point": point.index, **point.values, "seed": point.seed, "error": ""}
    folder = out / point.name if out is not None else None
    if folder is not None and _finished_with(folder, config_yaml(point.config)):
        return {**row, **_metrics(json.loads((folder / "summary.json").read_text()))}  # finished in an earlier run
    temporary = out / f".{point.name}.tmp" if out is not None else None
    try:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
            temporary.mkdir(parents=True)
        result = run(point.config, requests_path=temporary / "requests.parquet" if temporary else None)
        if temporary is not None:  # the row states what the point's summary.json states, resumed or not
            result.save(temporary)
            row.update(_metrics(json.loads((temporary / "summary.json").read_text())))
        else:
            row.update(result.summary)
    except Orphaned:
        raise
    except Exception as exc:  # one point's failure is recorded, and the sweep goes on
        row["error"] = f"{type(exc).__name__}: {exc}"
        if temporary is not None:
            (temporary / "config.yaml").write_text(config_yaml(point.config))
            (temporary / "error.txt").write_text(row["error"] + "\n")
    if temporary is not None:
        try:
            _check_parent(parent_pid)
        except Orphaned:
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        assert folder is not None  # as temporary: both with out
        shutil.rmtree(folder, ignore_errors=True)  # a failed earlier attempt
        temporary.rename(folder)
    return row


def _run_local(points: list[Point], out: Path | None, jobs: int, progress) -> list[dict[str, Any]]:
    if jobs <= 1:
        rows = []
        for point in points:
            rows.append(run_point(point, out))
            progress.update(1)
        return rows
    from joblib import Parallel, delayed

    rows = []
    parent = os.getpid()  # the workers' parent: they stop when it is gone
    for row in Parallel(n_jobs=jobs, return_as="generator")(delayed(run_point)(p, out, parent) for p in points):
        rows.append(row)
        progress.update(1)
    return rows


def _run_ray(points: list[Point], out: Path | None, address: str | None, progress) -> list[dict[str, Any]]:
    with ray_session(address) as ray:
        remote = ray.remote(run_point)
        pending = {remote.remote(point, out): point.index for point in points}
        rows = []
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            rows.append(ray.get(done[0]))
            del pending[done[0]]
            progress.update(1)
        return rows


def run_points(
    points: list[Point], out: str | Path | None = None, *, jobs: int = 1, backend: str = "local",
    address: str | None = None, progress: bool = False,
) -> pd.DataFrame:
    """Run the points; one row per point (in point order) with the swept values, the seed, ``error`` and every
    summary metric. With ``out``, also writes the point folders and ``index.parquet``."""
    folder = Path(out) if out is not None else None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    bar = progress_bar(len(points), "sweep", "point", progress)
    try:
        if backend == "local":
            rows = _run_local(points, folder, jobs, bar)
        elif backend == "ray":
            rows = _run_ray(points, folder, address, bar)
        else:
            raise LLMSimError(f"--backend: must be local or ray, got {backend!r}")
    finally:
        bar.close()
    import pandas as pd

    frame = pd.DataFrame(sorted(rows, key=lambda row: row["point"]))
    leading = list(dict.fromkeys(["point", *(points[0].values if points else {}), "seed", "error"]))
    frame = frame[[*leading, *sorted(c for c in frame.columns if c not in leading)]]  # the same after a resume
    if folder is not None:
        temporary = folder / ".index.parquet.tmp"
        frame.to_parquet(temporary, index=False)
        temporary.replace(folder / "index.parquet")
    return frame


def sweep(
    base: str | Path | dict[str, Any] | ExperimentConfig, grid: dict[str, Iterable] | None = None, *,
    zip: dict[str, Iterable] | None = None, replicates: int = 1, jobs: int = 1, out: str | Path | None = None,
    backend: str = "local", progress: bool = False,
) -> pd.DataFrame:
    """The notebook entry point: a base experiment (path, mapping, or one :func:`simulator.load` returned), grid
    and zipped axes over dotted paths, ``replicates`` seeds; returns one row per point (see :func:`run_points`)."""
    if isinstance(base, (str, Path)):
        data, base_dir = resolve_base(str(base), Path.cwd(), "sweep")
    elif isinstance(base, ExperimentConfig):
        data, base_dir = base.model_dump(mode="json"), None
    else:
        data, base_dir = dict(base), None
    spec = SweepConfig(
        base=data, grid={k: list(v) for k, v in (grid or {}).items()},
        zip={k: list(v) for k, v in (zip or {}).items()}, replicates=replicates,
    )
    return run_points(expand(spec, data, base_dir), out, jobs=jobs, backend=backend, progress=progress)
