"""Deployment planning: the capacity of every deployment in a grid, ranked per GPU and per dollar.

A plan file is a sweep (``base``, ``grid``, ``zip``; see :mod:`simulator.studies.sweep`) over deployment knobs —
hardware, replicas, tensor parallelism, scheduler settings — plus the SLO and, optionally, prices::

    base: ../quickstart.yaml
    grid: {hardware: [a100-80gb-sxm, h100-sxm], cluster.tensor_parallel: [1, 2]}
    slo: {p99_ttft_ms: 500, p99_tpot_ms: 50}
    attainment: 0.9            # optional: share of requests within the limits instead of percentile bounds
    prices: {h100-sxm: 3.0}    # USD per GPU-hour; else the hardware profile's price_per_hour_usd

For each deployment: the capacity (highest rate meeting the SLO, :func:`simulator.studies.capacity.find_capacity`),
GPUs, capacity per GPU, and with a price the cost per hour, requests per dollar and dollars per million output tokens at
capacity. Rows are ranked by requests per dollar when every deployment has a price, else by capacity per GPU;
``pareto`` marks deployments that no other beats on both cost (per million tokens, or per GPU) and p99 E2E latency.
This is Vidur-Search's question, answered from spec sheets instead of profiles.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import Field

from simulator.catalog import load_hardware
from simulator.config.loader import load_spec, resolve_base
from simulator.config.slo import normalise_slo_key
from simulator.studies.capacity import find_capacity
from simulator.studies.parallel import map_in_order
from simulator.studies.sweep import Point, SweepConfig, expand


class PlanConfig(SweepConfig):
    slo: dict[str, float] = Field(min_length=1)
    attainment: float | None = Field(default=None, gt=0, le=1)
    prices: dict[str, float] = Field(default_factory=dict, description="USD per GPU-hour by hardware name")
    tolerance: float = Field(default=0.02, gt=0, lt=1)


def load_plan(path: str | Path) -> tuple[PlanConfig, list[Point]]:
    spec, folder = load_spec(path, PlanConfig, "plan")
    spec = spec.model_copy(update={"slo": {normalise_slo_key(k): v for k, v in spec.slo.items()}})
    base, base_dir = resolve_base(spec.base, folder, str(path))
    return spec, expand(spec, base, base_dir, str(path))


def _price(point: Point, prices: dict[str, float]) -> float | None:
    """USD per GPU-hour: the plan's price for the hardware name, else the profile's; None if neither."""
    name = point.config.hardware
    if name in prices:
        return prices[name]
    return load_hardware(name).price_per_hour_usd


def _plan_row(point: Point, spec: PlanConfig) -> dict[str, Any]:
    row: dict[str, Any] = {"point": point.index, **point.values}
    result = find_capacity(point.config, spec.slo, attainment=spec.attainment, tolerance=spec.tolerance,
                           over="rate")
    summary = result.summary or {}
    gpus = summary.get("num_gpus") or 0
    price = _price(point, spec.prices)
    row.update({
        "capacity_rps": result.rate, "gpus": gpus, "capacity_per_gpu": result.rate / gpus if gpus else 0.0,
        "tokens_per_s_per_gpu": result.tokens_per_s_per_gpu, "goodput_rps": result.goodput,
        "p99_ttft_ms": summary.get("p99_ttft_ms"), "p99_tpot_ms": summary.get("p99_tpot_ms"),
        "p99_e2el_ms": summary.get("p99_e2el_ms"), "usd_per_gpu_hour": price,
    })
    if price is not None and gpus and result.rate:
        hourly = price * gpus
        row["usd_per_hour"] = hourly
        row["requests_per_usd"] = result.rate * 3600 / hourly
        row["usd_per_million_tokens"] = hourly / (summary["output_throughput"] * 3600 / 1e6)
    return row


def run_plan(spec: PlanConfig, points: list[Point], jobs: int = 1, backend: str = "local",
             address: str | None = None) -> pd.DataFrame:
    """The capacity of every deployment, ranked (see the module docstring); the deployments searched on ``jobs``
    processes or a Ray cluster (:func:`simulator.studies.parallel.map_in_order`)."""
    frame = pd.DataFrame(map_in_order(_plan_row, [(point, spec) for point in points], jobs, backend, address))
    priced = "requests_per_usd" in frame and frame["requests_per_usd"].notna().all()
    cost = frame["usd_per_million_tokens"] if priced else 1 / frame["capacity_per_gpu"].where(
        frame["capacity_per_gpu"] > 0)
    latency = frame["p99_e2el_ms"].astype(float)
    frame["pareto"] = [
        bool(c == c) and not any((c2 <= c) and (l2 <= lat) and ((c2 < c) or (l2 < lat))
                                 for c2, l2 in zip(cost, latency, strict=True) if c2 == c2)
        for c, lat in zip(cost, latency, strict=True)
    ]
    key = "requests_per_usd" if priced else "capacity_per_gpu"
    return frame.sort_values(key, ascending=False, kind="stable").reset_index(drop=True)


def pareto_figure(frame: pd.DataFrame):
    """Cost (per million output tokens, or GPUs per req/s) against p99 E2E latency at capacity, front highlighted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    priced = "usd_per_million_tokens" in frame and frame["usd_per_million_tokens"].notna().all()
    x = frame["usd_per_million_tokens"] if priced else 1 / frame["capacity_per_gpu"]
    figure, ax = plt.subplots(figsize=(7, 4.5))
    ax.scatter(x, frame["p99_e2el_ms"], c=["tab:red" if p else "tab:grey" for p in frame["pareto"]])
    front = frame.assign(x=x)[frame["pareto"]].sort_values("x")
    ax.plot(front["x"], front["p99_e2el_ms"], color="tab:red", label="Pareto front")
    swept = [c for c in frame.columns[1:list(frame.columns).index("capacity_rps")]]
    for (_, row), xv in zip(frame.iterrows(), x, strict=True):
        ax.annotate(", ".join(str(row[c]) for c in swept), (xv, row["p99_e2el_ms"]), fontsize="x-small")
    ax.set(xlabel="USD per million output tokens" if priced else "GPUs per (req/s) of capacity",
           ylabel="p99 E2E latency at capacity (ms)", title="deployments: cost vs latency")
    ax.legend()
    ax.grid(alpha=0.3)
    figure.tight_layout()
    return figure
