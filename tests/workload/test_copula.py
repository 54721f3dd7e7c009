"""Correlated input and output lengths (``workload.length_correlation``, a Gaussian copula): each marginal stays its
law (closed-form CDFs, Kolmogorov–Smirnov bounds derived from n), the sample Spearman lands on the target within a
tolerance derived from n, 0 reproduces independent draws exactly, and a seed determines the draws."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from simulator.catalog.workloads import load_preset
from simulator.cli import main
from simulator.config.workload import (
    GaussianCopula,
    LognormalLength,
    NormalLength,
    QuantileLength,
    UniformLength,
    WorkloadConfig,
)
from simulator.workload import generate_requests, sample_lengths
from simulator.workload.copula import (
    average_ranks,
    normal_cdf,
    normal_quantile,
    pearson_for_spearman,
    spearman,
)
from simulator.workload.lengths import correlated_lengths, length_quantiles

UNIFORM = UniformLength(kind="uniform", min=1, max=1000)
LOGNORMAL = LognormalLength(kind="lognormal", mean=250, sigma=0.6)
# Kolmogorov's limit law: P(sup |F_n − F| > c/√n) → 2·Σ(−1)^(k−1)·e^(−2k²c²) ≈ 2·e^(−2c²); c for a 1-in-1,000
# chance (for a discrete law the statistic is smaller still, so the bound is conservative)
KS_C = math.sqrt(math.log(2 / 1e-3) / 2)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_phi_and_its_inverse_match_the_standard_library():
    """Φ and Φ⁻¹ against ``statistics.NormalDist`` (Wichura's AS241, an independent implementation): Φ⁻¹ to 1e-14
    over the whole open interval, both tails included; Φ⁻¹(0) = −inf and Φ⁻¹(1) = +inf."""
    p = np.concatenate([np.linspace(1e-12, 1 - 1e-12, 20_001), [1e-300, 1e-20, 0.02425, 0.97575, 1 - 1e-16]])
    reference = np.array([NormalDist().inv_cdf(float(v)) for v in p])
    assert np.abs(normal_quantile(p) - reference).max() <= 1e-14 * np.abs(reference).max()
    z = np.linspace(-8, 8, 1601)
    assert normal_cdf(z) == pytest.approx([NormalDist().cdf(float(v)) for v in z], abs=1e-15)
    assert normal_quantile(np.array([0.0, 1.0])).tolist() == [-math.inf, math.inf]


def test_the_pearson_correlation_of_a_spearman_target_by_hand():
    """r = 2·sin(π·ρ_s/6): 0 → 0, ±1 → ±1, ½ → 2·sin(π/12) = 0.517638…; and back, ρ_s = (6/π)·arcsin(r/2)."""
    assert pearson_for_spearman(0) == 0
    assert pearson_for_spearman(1) == pytest.approx(1, abs=1e-15)
    assert pearson_for_spearman(-1) == pytest.approx(-1, abs=1e-15)
    assert pearson_for_spearman(0.5) == pytest.approx(0.5176380902050415, abs=1e-15)
    for rho in (-0.8, -0.343, 0.12, 0.42):
        assert 6 / math.pi * math.asin(pearson_for_spearman(rho) / 2) == pytest.approx(rho, abs=1e-12)


def test_average_ranks_and_spearman_by_hand():
    """Ties share their average rank: [10, 20, 20, 5] ranks [2, 3.5, 3.5, 1]; y = x² on positives is rank-identical
    (ρ_s = 1), reversed order gives −1; a constant has none (NaN)."""
    assert average_ranks(np.array([10, 20, 20, 5])).tolist() == [2, 3.5, 3.5, 1]
    x = np.array([3.0, 1.0, 4.0, 1.5, 9.0])
    assert spearman(x, x**2) == pytest.approx(1)
    assert spearman(x, -x) == pytest.approx(-1)
    # by hand: ranks x (2,1,4,3) and y (1,3,4,2): d = (1,−2,0,1), Σd² = 6, ρ = 1 − 6·6/(4·15) = 0.4
    assert spearman(np.array([2, 1, 4, 3]), np.array([1, 3, 4, 2])) == pytest.approx(0.4)
    assert math.isnan(spearman(np.ones(4), x[:4]))


def _ks_distance(sample: np.ndarray, cdf) -> float:
    """sup over the support's integers of |F_n(x) − F(x)| (a discrete law: the sup is at its values)."""
    values = np.unique(sample)
    empirical = np.searchsorted(np.sort(sample), values, side="right") / sample.size
    return float(np.abs(empirical - cdf(values)).max())


def _uniform_cdf(x: np.ndarray) -> np.ndarray:
    return (x - UNIFORM.min + 1) / (UNIFORM.max - UNIFORM.min + 1)


def _lognormal_cdf(x: np.ndarray) -> np.ndarray:
    """P(rint(e^(μ + σZ)) ≤ x) = Φ((ln(x + ½) − μ)/σ), μ = ln(mean) − σ²/2."""
    mu = math.log(LOGNORMAL.mean) - LOGNORMAL.sigma**2 / 2
    return np.array([NormalDist(mu, LOGNORMAL.sigma).cdf(math.log(v + 0.5)) for v in x])


@pytest.mark.parametrize("rho", [-0.9, 0.42, 1.0])
def test_the_marginals_keep_their_closed_form_laws(rho):
    """50,000 copula pairs (uniform inputs on 1…1,000, lognormal outputs of mean 250, σ 0.6): each marginal's
    empirical CDF lies within the 1-in-1,000 Kolmogorov–Smirnov bound c/√n of its closed-form CDF."""
    n = 50_000
    inputs, outputs = correlated_lengths(UNIFORM, LOGNORMAL, rho, n, _rng(1), _rng(2))
    assert _ks_distance(inputs, _uniform_cdf) <= KS_C / math.sqrt(n)
    assert _ks_distance(outputs, _lognormal_cdf) <= KS_C / math.sqrt(n)


def test_quantile_inputs_are_the_independent_draws_and_outputs_keep_their_law():
    """On rag-ragpulse's fitted quantile lengths: the copula's inputs are the very draws made without it (the same
    uniforms through the same inverse CDF), and its outputs have the independent outputs' law — the two samples'
    CDFs within the two-sample Kolmogorov–Smirnov bound c·√(2/n)."""
    preset = load_preset("rag-ragpulse")["workload"]
    inputs_law, outputs_law = (QuantileLength(**preset[part]) for part in ("input_tokens", "output_tokens"))
    n = 100_000
    inputs, outputs = correlated_lengths(inputs_law, outputs_law, 0.42, n, _rng(5), _rng(6))
    assert np.array_equal(inputs, sample_lengths(inputs_law, n, _rng(5)))
    independent = sample_lengths(outputs_law, n, _rng(7))
    grid = np.union1d(outputs, independent)
    distance = np.abs(np.searchsorted(np.sort(outputs), grid, side="right")
                      - np.searchsorted(np.sort(independent), grid, side="right")).max() / n
    assert distance <= KS_C * math.sqrt(2 / n)


@pytest.mark.parametrize("rho", [-0.9, -0.343, 0.12, 0.42, 0.8])
def test_the_sample_spearman_lands_on_the_target(rho):
    """20,000 pairs of two fine-grained laws (few ties): the sample Spearman is within 3/√n of ρ_s. Its standard
    error is below 1/√(n − 3) (Fieller, Hartley and Pearson 1957: var of Fisher's z of ρ̂_s ≈ 1.06/(n − 3), and
    |dρ/dz| = 1 − ρ² ≤ 1), so the bound is three of them."""
    n = 20_000
    inputs, outputs = correlated_lengths(LognormalLength(kind="lognormal", mean=3000, sigma=0.5), LOGNORMAL, rho, n,
                                         _rng(11), _rng(12))
    assert spearman(inputs, outputs) == pytest.approx(rho, abs=3 / math.sqrt(n))


def test_a_rank_correlation_of_one_is_comonotone():
    """ρ_s = 1: r = 1, so each output is its law's quantile at the input's level; sorted inputs give sorted
    outputs (ties of the inputs in any order of their outputs)."""
    inputs, outputs = correlated_lengths(UNIFORM, LOGNORMAL, 1.0, 5000, _rng(3), _rng(4))
    order = np.lexsort((outputs, inputs))
    assert (np.diff(outputs[order]) >= 0).all()


@pytest.mark.parametrize("law", [LOGNORMAL, UNIFORM, NormalLength(kind="normal", mean=100, std=50, min=20, max=300)])
def test_a_zero_rank_correlation_draws_exactly_as_without_the_copula(law):
    """ρ_s = 0 is the independent draw itself: the same lengths as ``sample_lengths`` from the same streams."""
    inputs, outputs = correlated_lengths(law, LOGNORMAL, 0.0, 1000, _rng(8), _rng(9))
    assert np.array_equal(inputs, sample_lengths(law, 1000, _rng(8)))
    assert np.array_equal(outputs, sample_lengths(LOGNORMAL, 1000, _rng(9)))


def test_the_truncated_normals_inverse_cdf_keeps_the_redrawn_law():
    """A normal truncated by redrawing (mean 100, std 50 on [20, 300]): its inverse CDF at 50,000 uniforms lies
    within the KS bound of P(L ≤ x) = (Φ((x + ½ − m)/s) − Φ(a)) / (Φ(b) − Φ(a)), a = (19.5 − m)/s, b = (300.5 −
    m)/s, and within [min, max]."""
    law = NormalLength(kind="normal", mean=100, std=50, min=20, max=300)
    sample = length_quantiles(law, _rng(10).random(50_000))
    dist = NormalDist(100, 50)
    low, high = dist.cdf(19.5), dist.cdf(300.5)
    assert sample.min() >= 20 and sample.max() <= 300
    cdf = lambda x: (np.array([dist.cdf(v + 0.5) for v in x]) - low) / (high - low)  # noqa: E731
    assert _ks_distance(sample, cdf) <= KS_C / math.sqrt(sample.size)


def test_the_same_seed_gives_the_same_draws():
    config = {"num_requests": 2000, "arrival": {"kind": "poisson", "rate": 1.0},
              "input_tokens": {"kind": "lognormal", "mean": 3000, "sigma": 0.5},
              "output_tokens": LOGNORMAL.model_dump(),
              "length_correlation": {"kind": "gaussian_copula", "spearman": 0.42}}
    first = generate_requests(WorkloadConfig(**config), np.random.SeedSequence(54))
    again = generate_requests(WorkloadConfig(**config), np.random.SeedSequence(54))
    other = generate_requests(WorkloadConfig(**config), np.random.SeedSequence(55))
    assert np.array_equal(first.input_tokens, again.input_tokens)
    assert np.array_equal(first.output_tokens, again.output_tokens)
    assert not np.array_equal(first.output_tokens, other.output_tokens)
    assert spearman(first.input_tokens, first.output_tokens) == pytest.approx(0.42, abs=3 / math.sqrt(2000))


@settings(max_examples=40, deadline=None)
@given(rho=st.floats(-1, 1), seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300))
def test_any_target_keeps_quantile_inputs_and_the_outputs_support(rho, seed, n):
    """For any ρ_s in [−1, 1]: the inputs are the independent draws (a quantile law), the outputs lie in their
    law's support."""
    law = QuantileLength(kind="quantiles", values=[1, 10, 100, 5000], probabilities=[0, 0.5, 0.9, 1])
    inputs, outputs = correlated_lengths(law, UNIFORM, rho, n, _rng(seed), _rng(seed + 1))
    assert np.array_equal(inputs, sample_lengths(law, n, _rng(seed)))
    assert outputs.min() >= UNIFORM.min and outputs.max() <= UNIFORM.max


@pytest.mark.parametrize("spearman_", [1.5, -1.01])
def test_a_rank_correlation_beyond_one_is_refused(spearman_):
    with pytest.raises(ValidationError, match="spearman"):
        GaussianCopula(kind="gaussian_copula", spearman=spearman_)
    with pytest.raises(ValidationError, match="length_correlation"):
        WorkloadConfig(num_requests=10, arrival={"kind": "poisson", "rate": 1.0}, input_tokens=UNIFORM.model_dump(),
                       output_tokens=UNIFORM.model_dump(),
                       length_correlation={"kind": "gaussian_copula", "spearman": spearman_})


def test_a_correlation_needs_both_lengths_of_the_section():
    """It pairs the section's two draws: not with a trace (its lengths are its own), nor without output_tokens;
    null takes a preset's away."""
    copula = {"kind": "gaussian_copula", "spearman": 0.5}
    with pytest.raises(ValidationError, match="not with trace"):
        WorkloadConfig(trace={"path": "t.csv"}, length_correlation=copula)
    with pytest.raises(ValidationError, match="no output_tokens"):
        WorkloadConfig(num_requests=10, arrival={"kind": "poisson", "rate": 1.0}, input_tokens=UNIFORM.model_dump(),
                       length_correlation=copula)
    assert WorkloadConfig(preset="rag-ragpulse", num_requests=10, length_correlation=None).length_correlation is None


def test_the_console_states_the_rank_correlation(capsys):
    """The run's workload line says the lengths are drawn together (and says nothing when they are not)."""
    assert main(["run", "--set", "workload.num_requests=20", "--set",
                 "workload.length_correlation={kind: gaussian_copula, spearman: 0.42}"]) == 0
    assert "outputs 200 tokens (rank correlation 0.42)" in capsys.readouterr().out


def test_a_class_with_its_own_lengths_is_refused_beside_a_copula():
    """A class that redraws its members' lengths draws them independently: with length_correlation that would drop
    the correlation for those requests unseen, so the pair is refused, naming the class."""
    section = {"num_requests": 10, "input_tokens": {"kind": "fixed", "value": 5},
               "output_tokens": {"kind": "fixed", "value": 5},
               "length_correlation": {"kind": "gaussian_copula", "spearman": 0.4},
               "classes": [{"name": "a", "share": 0.5}, {"name": "b", "share": 0.5,
                                                         "input_tokens": {"kind": "fixed", "value": 9}}]}
    with pytest.raises(ValueError, match=r"not with classes\[1\] \(its own lengths"):
        WorkloadConfig.model_validate(section)
