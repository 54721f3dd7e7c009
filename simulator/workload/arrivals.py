"""Arrival processes: times (seconds from the start) of n requests.

- poisson: cumulative sums of Exp(1/rate) gaps (the first request after one gap)
- constant: i / rate
- gamma: cumulative sums of Gamma(shape = burstiness, scale = 1 / (rate · burstiness)) gaps — mean 1/rate, squared
  coefficient of variation 1/burstiness (vLLM benchmark_serving's ``--burstiness``)
- onoff: a Poisson process at ``rate`` on an "on" clock; each on_s of it is followed by off_s of silence, so
  on-clock time u maps to u + floor(u / on_s) · off_s
- piecewise, diurnal: a Poisson process with rate λ(t), drawn by thinning (Lewis & Shedler): candidates at
  λmax, each kept with probability λ(t)/λmax (piecewise: its rates rescaled to ``mean_rate`` if given,
  :meth:`PiecewiseArrival.scaled_rates`)
- closed_loop: NaN here; the run decides (:class:`simulator.cluster.feeds.ClosedLoopFeed`)
"""

from __future__ import annotations

import math

import numpy as np

from simulator.config.workload import (
    ArrivalConfig,
    ClosedLoopArrival,
    ConstantArrival,
    DiurnalArrival,
    GammaArrival,
    OnOffArrival,
    PiecewiseArrival,
    PoissonArrival,
)


def _thinned(rate_at, rate_max: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """The first n points of a Poisson process with intensity ``rate_at(t)`` ≤ ``rate_max`` (vectorised rate)."""
    kept: list[np.ndarray] = []
    count, start = 0, 0.0
    batch = max(1024, 2 * n)
    while count < n:
        times = start + np.cumsum(rng.exponential(1.0 / rate_max, size=batch))
        accept = rng.random(batch) * rate_max < rate_at(times)
        kept.append(times[accept])
        count += int(accept.sum())
        start = float(times[-1])
    return np.concatenate(kept)[:n]


def _piecewise_rate(config: PiecewiseArrival):
    starts = np.array([start for start, _ in config.rates])
    rates = np.array(config.scaled_rates())

    def rate_at(t: np.ndarray) -> np.ndarray:
        phase = np.mod(t, config.period_s) if config.period_s is not None else t
        return rates[np.searchsorted(starts, phase, side="right") - 1]

    return rate_at


def arrival_times(config: ArrivalConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(config, PoissonArrival):
        return np.cumsum(rng.exponential(1.0 / config.rate, size=n))
    if isinstance(config, ConstantArrival):
        return np.arange(n, dtype=float) / config.rate
    if isinstance(config, GammaArrival):
        shape = config.burstiness
        return np.cumsum(rng.gamma(shape, 1.0 / (config.rate * shape), size=n))
    if isinstance(config, OnOffArrival):
        on_clock = np.cumsum(rng.exponential(1.0 / config.rate, size=n))
        return on_clock + np.floor(on_clock / config.on_s) * config.off_s
    if isinstance(config, PiecewiseArrival):
        return _thinned(_piecewise_rate(config), max(config.scaled_rates()), n, rng)
    if isinstance(config, DiurnalArrival):
        c = config

        def rate_at(t: np.ndarray) -> np.ndarray:
            return c.mean_rate * (1 + c.amplitude * np.cos(2 * math.pi * (t - c.peak_s) / c.period_s))

        return _thinned(rate_at, c.mean_rate * (1 + c.amplitude), n, rng)
    if isinstance(config, ClosedLoopArrival):
        return np.full(n, np.nan)  # decided during the run, by when each user's previous request ends
    raise TypeError(f"unsupported arrival config {config!r}")
