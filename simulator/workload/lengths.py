"""Token-length distributions (integers ≥ 1, with caps)."""

from __future__ import annotations

import math

import numpy as np

from simulator.config.schema import FixedLength, LengthConfig, LognormalLength, UniformLength


def sample_lengths(config: LengthConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` lengths. Lognormal: ``mean`` is the distribution's mean, so μ = ln(mean) − σ²/2; values are rounded
    and clipped to [min, max] (the clip moves the realised mean slightly)."""
    if isinstance(config, FixedLength):
        return np.full(n, config.value, dtype=np.int64)
    if isinstance(config, UniformLength):
        return rng.integers(config.min, config.max, endpoint=True, size=n, dtype=np.int64)
    if isinstance(config, LognormalLength):
        mu = math.log(config.mean) - config.sigma**2 / 2
        values = np.rint(rng.lognormal(mu, config.sigma, size=n))
        upper = config.max if config.max is not None else np.inf
        return np.clip(values, config.min, upper).astype(np.int64)
    raise TypeError(f"unsupported length config {config!r}")
