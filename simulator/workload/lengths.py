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
from simulator.workload.copula import normal_cdf, normal_quantile, pearson_for_spearman

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


def length_quantiles(config: LengthConfig, u: np.ndarray) -> np.ndarray:
    """Each law's inverse CDF at the uniforms ``u`` (in [0, 1]): lengths with the same law as
    :func:`sample_lengths` draws, a monotone function of ``u`` (what a copula pairs). Uniform: min + ⌊u·(max − min
    + 1)⌋. Lognormal: exp(μ + σ·Φ⁻¹(u)), rounded and clipped. Normal: the normal truncated to [min − ½, max + ½]
    (the draws whose rounding lies in [min, max], as the redrawing keeps), Φ⁻¹ of Φ(a) + u·(Φ(b) − Φ(a)).
    Empirical: the sorted column at ⌊u·N⌋. Quantiles: as :func:`sample_lengths` maps its uniforms (the same
    uniforms give the same lengths)."""
    u = np.asarray(u, dtype=float)
    if isinstance(config, FixedLength):
        return np.full(u.shape, config.value, dtype=np.int64)
    if isinstance(config, UniformLength):
        span = config.max - config.min + 1
        return np.minimum(config.min + np.floor(u * span), config.max).astype(np.int64)
    if isinstance(config, LognormalLength):
        mu = math.log(config.mean) - config.sigma**2 / 2
        values = np.rint(np.exp(mu + config.sigma * normal_quantile(u)))
        upper = config.max if config.max is not None else np.inf
        return np.clip(values, config.min, upper).astype(np.int64)
    if isinstance(config, NormalLength):
        upper = config.max if config.max is not None else np.inf
        low, high = normal_cdf(np.array([config.min - 0.5 - config.mean, upper + 0.5 - config.mean]) / config.std)
        values = np.rint(config.mean + config.std * normal_quantile(low + u * (high - low)))
        return np.clip(values, config.min, upper).astype(np.int64)
    if isinstance(config, EmpiricalLength):
        pool = np.sort(_column(str(Path(config.path)), config.column))
        values = pool[np.minimum((u * pool.size).astype(np.int64), pool.size - 1)]
        return np.minimum(values, config.max) if config.max is not None else values
    if isinstance(config, QuantileLength):
        probabilities = config.probabilities or np.linspace(0, 1, len(config.values))
        values = np.rint(np.interp(u, probabilities, config.values))
        return np.minimum(values, config.max if config.max is not None else np.inf).astype(np.int64)
    raise TypeError(f"unsupported length config {config!r}")


def correlated_lengths(inputs: LengthConfig, outputs: LengthConfig, rank_correlation: float, n: int,
                       input_rng: np.random.Generator,
                       output_rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` input and output lengths paired by the Gaussian copula of Spearman ``rank_correlation``
    (:mod:`simulator.workload.copula`); 0 draws them as :func:`sample_lengths` does, independently."""
    if rank_correlation == 0:
        return sample_lengths(inputs, n, input_rng), sample_lengths(outputs, n, output_rng)
    r = pearson_for_spearman(rank_correlation)
    u_in = input_rng.random(size=n)
    z_in = normal_quantile(u_in)
    with np.errstate(invalid="ignore"):  # z_in = −inf (u = 0, once in 2^53) stays infinite
        z_out = r * z_in + math.sqrt(max(0.0, 1 - r * r)) * output_rng.standard_normal(size=n)
    # Φ(z) rounds to 1 past z ≈ 8.3 (once in 10^16): kept below 1 so an unbounded law's quantile stays finite
    u_out = np.minimum(normal_cdf(z_out), np.nextafter(1.0, 0.0))
    return length_quantiles(inputs, u_in), length_quantiles(outputs, u_out)


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
