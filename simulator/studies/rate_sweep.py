"""``llmsim benchmark``: GuideLLM's sweep profile on the simulator — the load range found, not guessed.

A *synchronous* benchmark sends one request at a time (a closed loop of one client, no think time), a *throughput*
benchmark every request at once (as many clients as requests), and ``benchmarks − 2`` benchmarks follow at request
rates evenly spaced strictly between the two measured request throughputs, with ``constant`` (GuideLLM's default)
or ``poisson`` arrivals. Each benchmark is the experiment's own (model, deployment, lengths, ``num_requests``) with
only the arrival process replaced; one row each with the offered rate, the achieved throughputs and the latency
percentiles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.api import run
from simulator.config import ExperimentConfig
from simulator.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ("request_throughput", "output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
           "mean_itl_ms", "p99_itl_ms", "mean_e2el_ms", "p99_e2el_ms", "completed", "slo_attainment")


def _with_arrival(config: ExperimentConfig, arrival: dict[str, Any]) -> ExperimentConfig:
    data = config.model_dump(mode="json")
    data["workload"]["arrival"] = arrival
    return ExperimentConfig.model_validate(data)


def _row(strategy: str, rate: float, summary: dict[str, Any]) -> dict[str, Any]:
    return {"strategy": strategy, "rate": rate, **{column: summary.get(column, float("nan")) for column in COLUMNS}}


def rate_sweep(config: ExperimentConfig, benchmarks: int = 10, rate_type: str = "constant",
               jobs: int = 1) -> pd.DataFrame:
    """The sweep's rows: ``synchronous``, ``throughput``, then one per rate (module docstring)."""
    import pandas as pd
    from joblib import Parallel, delayed


    workload = config.workload
    if workload.trace is not None or workload.sessions is not None or workload.num_requests is None:
        raise ConfigError("benchmark: needs a synthetic workload of num_requests requests (not a trace or sessions): "
                          "the sweep replaces its arrival process")
    if benchmarks < 3:
        raise ConfigError(f"benchmark: --rates {benchmarks} must be at least 3 (synchronous, throughput, a rate)")
    if rate_type not in ("constant", "poisson"):
        raise ConfigError(f"benchmark: --rate-type must be constant or poisson, got {rate_type!r}")

    def summary(arrival: dict[str, Any]) -> dict[str, Any]:
        return run(_with_arrival(config, arrival)).summary

    anchors = Parallel(n_jobs=min(jobs, 2))(delayed(summary)(arrival) for arrival in (
        {"kind": "closed_loop", "users": 1}, {"kind": "closed_loop", "users": workload.num_requests}))
    low, high = (s["request_throughput"] for s in anchors)
    rates = np.linspace(low, high, benchmarks)[1:-1] if high > low else np.array([])
    results = Parallel(n_jobs=jobs)(delayed(summary)({"kind": rate_type, "rate": float(rate)}) for rate in rates)
    rows = [_row("synchronous", float("nan"), anchors[0]), _row("throughput", float("nan"), anchors[1])]
    rows += [_row(rate_type, float(rate), s) for rate, s in zip(rates, results, strict=True)]
    return pd.DataFrame(rows)
