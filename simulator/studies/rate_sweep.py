"""``llmsim benchmark``: GuideLLM's sweep profile on the simulator — the load range found, not guessed.

A *synchronous* benchmark sends one request at a time (a closed loop of one client, no think time), a *throughput*
benchmark every request at once (as many clients as requests), and ``benchmarks − 2`` benchmarks follow at request
rates evenly spaced strictly between the two measured request throughputs, with ``constant`` (GuideLLM's default)
or ``poisson`` arrivals. Each benchmark is the experiment's own (model, deployment, lengths, ``num_requests``) with
only the arrival process replaced; one row each with the offered rate, the achieved throughputs and the latency
percentiles.

The benchmarks are a sweep's points (:func:`simulator.studies.sweep.run_points`): with an output folder each gets
``point-NNNNN/`` and the folder an ``index.parquet`` whose swept columns are ``strategy`` and the offered rate
(``workload.arrival.rate``, none for the two anchors), so ``llmsim plot`` and ``llmsim report`` read it as a sweep;
rerunning into the same folder reuses the benchmarks already finished.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.config import ExperimentConfig
from simulator.errors import ConfigError, LLMSimError
from simulator.studies.sweep import Point, run_points

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ("request_throughput", "output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
           "mean_itl_ms", "p99_itl_ms", "mean_e2el_ms", "p99_e2el_ms", "completed", "slo_attainment")
RATE = "workload.arrival.rate"  # the offered rate's column in the index: a sweep's, so a sweep's plots read it


def _with_arrival(config: ExperimentConfig, arrival: dict[str, Any]) -> ExperimentConfig:
    data = config.model_dump(mode="json")
    data["workload"]["arrival"] = arrival
    return ExperimentConfig.model_validate(data)


def _point(config: ExperimentConfig, index: int, strategy: str, arrival: dict[str, Any]) -> Point:
    return Point(index, {"strategy": strategy, RATE: arrival.get("rate", float("nan"))}, config.seed,
                 _with_arrival(config, arrival))


def run_benchmark(config: ExperimentConfig, benchmarks: int = 10, rate_type: str = "constant", jobs: int = 1,
                  out: str | Path | None = None) -> pd.DataFrame:
    """Every benchmark (module docstring) as a sweep's index: one row per benchmark with ``point``, ``strategy``,
    the offered rate (``workload.arrival.rate``), ``seed``, ``error`` and every summary metric; with ``out``, the
    point folders and ``index.parquet`` written there."""
    import pandas as pd

    workload = config.workload
    if workload.trace is not None or workload.sessions is not None or workload.num_requests is None:
        raise ConfigError("benchmark: needs a synthetic workload of num_requests requests (not a trace or sessions): "
                          "the sweep replaces its arrival process")
    if benchmarks < 3:
        raise ConfigError(f"benchmark: --rates {benchmarks} must be at least 3 (synchronous, throughput, a rate)")
    if rate_type not in ("constant", "poisson"):
        raise ConfigError(f"benchmark: --rate-type must be constant or poisson, got {rate_type!r}")
    anchors = [_point(config, 0, "synchronous", {"kind": "closed_loop", "users": 1}),
               _point(config, 1, "throughput", {"kind": "closed_loop", "users": workload.num_requests})]
    first = run_points(anchors, out, jobs=min(jobs, 2))
    for _, row in first[first["error"] != ""].iterrows():
        raise LLMSimError(f"benchmark: the {row['strategy']} benchmark failed: {row['error']}")
    low, high = (float(value) for value in first["request_throughput"])
    rates = np.linspace(low, high, benchmarks)[1:-1] if high > low else np.array([])
    points = [_point(config, 2 + i, rate_type, {"kind": rate_type, "rate": float(rate)})
              for i, rate in enumerate(rates)]
    if out is not None:  # the anchors again: resumed from their folders, so that the index holds every benchmark
        return run_points([*anchors, *points], out, jobs=jobs)
    if not points:
        return first
    return pd.concat([first, run_points(points, jobs=jobs)], ignore_index=True)


def benchmark_table(index: pd.DataFrame) -> pd.DataFrame:
    """The benchmarks as ``llmsim benchmark`` prints them: strategy, offered ``rate`` and :data:`COLUMNS`."""
    table = index.rename(columns={RATE: "rate"}).reindex(columns=["strategy", "rate", *COLUMNS])
    return table.reset_index(drop=True)


def rate_sweep(config: ExperimentConfig, benchmarks: int = 10, rate_type: str = "constant",
               jobs: int = 1) -> pd.DataFrame:
    """The sweep's rows: ``synchronous``, ``throughput``, then one per rate (module docstring)."""
    return benchmark_table(run_benchmark(config, benchmarks, rate_type, jobs))
