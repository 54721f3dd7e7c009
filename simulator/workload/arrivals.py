"""Arrival processes: times (seconds from the start) of n requests."""

from __future__ import annotations

import numpy as np

from simulator.config.schema import ArrivalConfig, ConstantArrival, PoissonArrival


def arrival_times(config: ArrivalConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """Poisson: cumulative sums of Exp(rate) gaps (the first request after one gap). Constant: i / rate."""
    if isinstance(config, PoissonArrival):
        return np.cumsum(rng.exponential(1.0 / config.rate, size=n))
    if isinstance(config, ConstantArrival):
        return np.arange(n, dtype=float) / config.rate
    raise TypeError(f"unsupported arrival config {config!r}")
