"""Input and output lengths drawn together: a Gaussian copula of a given Spearman rank correlation
(``workload.length_correlation: {kind: gaussian_copula, spearman}``).

For a bivariate normal of Pearson correlation r, Spearman's rank correlation is ρ_s = (6/π)·arcsin(r/2) (Pearson
1907; Kruskal 1958), so the copula of rank correlation ρ_s takes r = 2·sin(π·ρ_s/6) (:func:`pearson_for_spearman`).
A request's pair: u₁ the input's uniform draw (its stream, as without the copula), z₁ = Φ⁻¹(u₁), z₂ = r·z₁ +
√(1 − r²)·ε with ε a standard normal from the output's stream, u₂ = Φ(z₂); each length is its law's inverse CDF at
its uniform (:func:`simulator.workload.lengths.correlated_lengths`). So each marginal is exactly its law — quantile
inputs are even the same draws as without the copula — and only the pairing changes. Ranks survive the monotone
maps, so the lengths' Spearman is ρ_s but for the ties that rounding to integers makes (a coarse law, or a cap
holding many requests, ties many: their average ranks pull the sample correlation towards 0). ρ_s = 0 draws the
lengths independently, exactly as without the copula.

Φ is ½·erfc(−z/√2) (``math.erfc``, elementwise); Φ⁻¹ is Acklam's rational approximation (relative error
1.15e−9) refined by one Halley step on Φ, to about 1e−15: no SciPy.
"""

from __future__ import annotations

import math

import numpy as np

_ERFC = np.frompyfunc(math.erfc, 1, 1)
# Acklam's coefficients (P. J. Acklam, "An algorithm for computing the inverse normal cumulative distribution
# function"; checked against the standard library's Φ⁻¹ in tests/workload/test_copula.py): central region
# |p − ½| ≤ ½ − P_LOW, tails below P_LOW and above 1 − P_LOW
_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
      -3.066479806614716e01, 2.506628277459239e00)
_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
      -1.328068155288572e01)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
      4.374664141464968e00, 2.938163982698783e00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
_P_LOW = 0.02425


def normal_cdf(z: np.ndarray) -> np.ndarray:
    """Φ(z) = ½·erfc(−z/√2), elementwise (±inf give 1 and 0)."""
    z = np.asarray(z, dtype=float)
    return 0.5 * np.asarray(_ERFC(-z / math.sqrt(2)), dtype=float)


def _polynomial(coefficients: tuple[float, ...], x: np.ndarray) -> np.ndarray:
    value = np.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        value = value * x + c
    return value


def normal_quantile(p: np.ndarray) -> np.ndarray:
    """Φ⁻¹(p), elementwise: −inf at 0, +inf at 1 (module docstring)."""
    p = np.asarray(p, dtype=float)
    x = np.empty_like(p)
    inside = (p > 0) & (p < 1)
    x[p <= 0], x[p >= 1] = -np.inf, np.inf
    q = p[inside]
    out = np.empty_like(q)
    low, high = q < _P_LOW, q > 1 - _P_LOW
    middle = ~(low | high)
    r = q[middle] - 0.5
    s = r * r
    out[middle] = _polynomial(_A, s) * r / (_polynomial(_B, s) * s + 1)
    for tail, sign, tail_p in ((low, 1.0, q[low]), (high, -1.0, 1 - q[high])):
        t = np.sqrt(-2 * np.log(tail_p))
        out[tail] = sign * _polynomial(_C, t) / (_polynomial(_D, t) * t + 1)
    # one Halley step on Φ(x) − p, computed above ½ as (1 − p) − Φ(−x), exact there, so the upper tail keeps digits
    upper = q > 0.5
    error = np.where(upper, (1 - q) - normal_cdf(-out), normal_cdf(out) - q)
    step = error * math.sqrt(2 * math.pi) * np.exp(out * out / 2)
    x[inside] = out - step / (1 + out * step / 2)
    return x


def pearson_for_spearman(spearman: float) -> float:
    """The Pearson correlation r of a bivariate normal whose Spearman rank correlation is ``spearman``:
    2·sin(π·ρ_s/6), in [−1, 1]."""
    return max(-1.0, min(1.0, 2 * math.sin(math.pi * spearman / 6)))


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, tied values sharing their average rank."""
    _, inverse, counts = np.unique(np.asarray(values), return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return ((ends - counts + 1 + ends) / 2)[inverse.reshape(-1)]


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """The sample Spearman rank correlation: the Pearson correlation of the average ranks (NaN when either is
    constant)."""
    rx, ry = average_ranks(x), average_ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])
