"""A log-binned histogram of positive values: bounded memory, exact count/mean/min/max, percentiles within a bin.

Bins have relative width ``rel_width`` (default 0.1%), so a reported percentile is within 0.1% of the exact one
(numpy's linear-interpolation percentile over the same values), and exact when all values in play are equal
(results are clamped to the exact min and max). Values arrive one at a time with a weight, or as arithmetic runs
``base + slope·j`` for j = 1 … n (how decode iterations come); both are buffered and binned, counted and summed in
vectorised batches.
"""

from __future__ import annotations

import math

import numpy as np


class LogHistogram:
    __slots__ = (
        "_buffered", "_count", "_log_min", "_log_step", "_max", "_min", "_num_bins", "_runs", "_total", "_values",
        "_weights", "counts",
    )

    def __init__(self, rel_width: float = 1e-3, min_value: float = 1e-7, max_value: float = 1e6) -> None:
        self._log_step = math.log1p(rel_width)
        self._log_min = math.log(min_value)
        self._num_bins = math.ceil((math.log(max_value) - self._log_min) / self._log_step) + 1
        self.counts = np.zeros(self._num_bins, dtype=np.int64)
        self._count = 0
        self._total = 0.0
        self._min = math.inf
        self._max = -math.inf
        self._values: list[float] = []
        self._weights: list[int] = []
        self._runs: list[tuple[float, float, int, int]] = []
        self._buffered = 0

    def add(self, value: float, weight: int = 1) -> None:
        """Add ``value`` ``weight`` times (weight ≥ 1)."""
        self._values.append(value)
        self._weights.append(weight)
        if len(self._values) >= 65536:
            self._flush()

    def add_run(self, base: float, slope: float, n: int, weight: int) -> None:
        """Add ``base + slope·j`` for j = 1 … n, each ``weight`` times (n ≥ 1, weight ≥ 1)."""
        self._runs.append((base, slope, n, weight))
        self._buffered += n
        if self._buffered >= 65536:
            self._flush()

    def _bin(self, values: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            index = np.floor((np.log(np.maximum(values, 1e-300)) - self._log_min) / self._log_step)
        return np.clip(index, 0, self._num_bins - 1).astype(np.int64)

    def _bin_into(self, values: np.ndarray, weights: np.ndarray) -> None:
        self._count += int(weights.sum())
        self._total += float(np.sum(values * weights))  # not a BLAS dot: its order follows the thread count
        self.counts += np.bincount(self._bin(values), weights=weights, minlength=self._num_bins).astype(np.int64)
        self._min = min(self._min, float(values.min()))
        self._max = max(self._max, float(values.max()))

    def _flush(self) -> None:
        if self._values:
            self._bin_into(np.asarray(self._values), np.asarray(self._weights))
            self._values, self._weights = [], []
        if self._runs:
            runs = np.array(self._runs)  # rows (base, slope, n, weight); counts are exact in float64
            base, slope = runs[:, 0], runs[:, 1]
            n, weight = runs[:, 2].astype(np.int64), runs[:, 3].astype(np.int64)
            starts = np.repeat(np.cumsum(n) - n, n)
            j = np.arange(int(n.sum())) - starts + 1
            self._bin_into(np.repeat(base, n) + np.repeat(slope, n) * j, np.repeat(weight, n))
            self._runs = []
        self._buffered = 0

    @property
    def count(self) -> int:
        self._flush()
        return self._count

    @property
    def mean(self) -> float:
        self._flush()
        return self._total / self._count if self._count else math.nan

    def _value_at_rank(self, cumulative: np.ndarray, rank: int) -> float:
        """Centre of the bin holding the value of this rank, clamped to the exact extremes."""
        index = int(np.searchsorted(cumulative, rank, side="right"))
        centre = math.exp(self._log_min + (index + 0.5) * self._log_step)
        return min(max(centre, self._min), self._max)

    def percentile(self, q: float) -> float:
        """The q-th percentile (0–100), linear interpolation between ranks as in ``numpy.percentile``."""
        count = self.count
        if count == 0:
            return math.nan
        cumulative = np.cumsum(self.counts)
        position = q / 100 * (count - 1)
        lower = math.floor(position)
        low = self._value_at_rank(cumulative, lower)
        high = self._value_at_rank(cumulative, min(lower + 1, count - 1))
        return low + (position - lower) * (high - low)
