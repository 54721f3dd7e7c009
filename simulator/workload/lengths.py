"""Token-length distributions (integers ≥ 1, with caps)."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simulator.config.workload import (
    CountConfig,
    EmpiricalLength,
    FixedCount,
    FixedLength,
    ImagesConfig,
    LengthConfig,
    LognormalLength,
    NormalLength,
    PMFCount,
    QuantileLength,
    UniformLength,
)
from simulator.errors import LLMSimError

if TYPE_CHECKING:
    pass


@cache
def _column(path: str, column: str) -> np.ndarray:
    """The positive integer values of one CSV column (read once per process)."""
    import pandas as pd

    try:
        frame = pd.read_csv(path, usecols=[column], encoding="utf-8-sig")
    except OSError as exc:  # missing, a folder, unreadable
        raise LLMSimError(f"empirical lengths: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise LLMSimError(f"{path}: not UTF-8 text") from None
    except ValueError:
        header = list(pd.read_csv(path, nrows=0).columns)
        raise LLMSimError(f"{path}: no column {column!r} (columns: {', '.join(header)})") from None
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy()
    bad = np.flatnonzero(~(values >= 1))
    if bad.size:
        line, value = int(bad[0]) + 2, frame[column].iloc[bad[0]]  # the header is line 1
        raise LLMSimError(f"{path}:{line}: column {column}: expected a positive integer, got {value!r}")
    return np.rint(values).astype(np.int64)


def sample_lengths(config: LengthConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` lengths. Lognormal: ``mean`` is the distribution's mean, so μ = ln(mean) − σ²/2; values are rounded
    and clipped to [min, max] (the clip moves the realised mean slightly). Normal: rounded draws outside
    [min, max] are redrawn (a truncated normal). Empirical: resampled with replacement, clipped to max. Quantiles:
    the inverse CDF through the given quantiles, linear between them, rounded and clipped to max."""
    if isinstance(config, FixedLength):
        return np.full(n, config.value, dtype=np.int64)
    if isinstance(config, UniformLength):
        return rng.integers(config.min, config.max, endpoint=True, size=n, dtype=np.int64)
    if isinstance(config, LognormalLength):
        mu = math.log(config.mean) - config.sigma**2 / 2
        values = np.rint(rng.lognormal(mu, config.sigma, size=n))
        upper = config.max if config.max is not None else np.inf
        return np.clip(values, config.min, upper).astype(np.int64)
    if isinstance(config, NormalLength):
        upper = config.max if config.max is not None else np.inf
        values = np.rint(rng.normal(config.mean, config.std, size=n))
        while (bad := np.flatnonzero((values < config.min) | (values > upper))).size:
            values[bad] = np.rint(rng.normal(config.mean, config.std, size=bad.size))
        return values.astype(np.int64)
    if isinstance(config, EmpiricalLength):
        pool = _column(str(Path(config.path)), config.column)
        values = pool[rng.integers(0, pool.size, size=n)]
        return np.minimum(values, config.max) if config.max is not None else values
    if isinstance(config, QuantileLength):
        probabilities = config.probabilities or np.linspace(0, 1, len(config.values))
        values = np.rint(np.interp(rng.random(size=n), probabilities, config.values))
        return np.minimum(values, config.max if config.max is not None else np.inf).astype(np.int64)
    raise TypeError(f"unsupported length config {config!r}")


def sample_counts(config: CountConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` counts (integers ≥ 0): fixed, or drawn from a PMF (its probabilities normalised to sum 1)."""
    if isinstance(config, FixedCount):
        return np.full(n, config.value, dtype=np.int64)
    if isinstance(config, PMFCount):
        p = np.asarray(config.probabilities, dtype=float)
        return np.asarray(config.values, dtype=np.int64)[rng.choice(len(p), size=n, p=p / p.sum())]
    raise TypeError(f"unsupported count config {config!r}")


def sample_images(config: ImagesConfig, n: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
    """Each of ``n`` requests' images: ``(tokens, images)`` — the tokens they add to its prompt, and an object array
    of tuples, each image's tokens. The counts and the tokens per image come from two streams of ``seed``, the
    images' tokens drawn in request order."""
    count_rng, token_rng = (np.random.default_rng(s) for s in seed.spawn(2))
    counts = sample_counts(config.per_request, n, count_rng)
    tokens = sample_lengths(config.tokens_per_image, int(counts.sum()), token_rng)
    ends = np.cumsum(counts)
    starts = ends - counts
    flat = tokens.tolist()
    images = np.empty(n, dtype=object)
    images[:] = [tuple(flat[a:b]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    totals = np.concatenate([[0], np.cumsum(tokens)])
    return totals[ends] - totals[starts], images
