"""Arrival processes and length distributions against their definitions; trace parsing."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config.workload import (
    ConstantArrival,
    FixedLength,
    LognormalLength,
    PoissonArrival,
    UniformLength,
    WorkloadConfig,
)
from simulator.errors import LLMSimError
from simulator.workload import arrival_times, generate_requests, read_trace, sample_lengths


def test_poisson_gaps_are_exponential_with_the_rate():
    times = arrival_times(PoissonArrival(kind="poisson", rate=4.0), 200_000, np.random.default_rng(0))
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(0.25, rel=0.01)
    assert gaps.std() == pytest.approx(0.25, rel=0.01)  # exponential: std = mean
    assert (gaps > 0).all()


def test_constant_arrivals():
    times = arrival_times(ConstantArrival(kind="constant", rate=2.0), 4, np.random.default_rng(0))
    assert list(times) == [0.0, 0.5, 1.0, 1.5]


def test_lognormal_mean_is_the_distribution_mean():
    lengths = sample_lengths(LognormalLength(kind="lognormal", mean=1000, sigma=0.8), 400_000, np.random.default_rng(1))
    assert lengths.mean() == pytest.approx(1000, rel=0.01)
    # median of a lognormal = exp(μ) = mean · exp(−σ²/2)
    assert np.median(lengths) == pytest.approx(1000 * np.exp(-0.32), rel=0.01)


def test_length_caps_and_bounds():
    rng = np.random.default_rng(2)
    capped = sample_lengths(LognormalLength(kind="lognormal", mean=1000, sigma=1.5, min=5, max=2000), 50_000, rng)
    assert capped.min() >= 5 and capped.max() == 2000
    uniform = sample_lengths(UniformLength(kind="uniform", min=3, max=7), 10_000, rng)
    assert set(uniform) == {3, 4, 5, 6, 7}
    assert set(sample_lengths(FixedLength(kind="fixed", value=9), 5, rng)) == {9}


def test_same_seed_same_workload_and_independent_streams():
    config = WorkloadConfig.model_validate({
        "num_requests": 100, "arrival": {"kind": "poisson", "rate": 1},
        "input_tokens": {"kind": "uniform", "min": 1, "max": 1000}, "output_tokens": {"kind": "fixed", "value": 5},
    })
    first = generate_requests(config, np.random.SeedSequence(5))
    second = generate_requests(config, np.random.SeedSequence(5))
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    # changing the output distribution leaves arrivals and inputs untouched
    other = generate_requests(
        config.model_copy(update={"output_tokens": UniformLength(kind="uniform", min=1, max=9)}),
        np.random.SeedSequence(5),
    )
    np.testing.assert_array_equal(first[0], other[0])
    np.testing.assert_array_equal(first[1], other[1])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("arrived_at,num_prefill_tokens\n0,1\n", "t.csv:1: unrecognised trace header"),
        ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n1,2\n", "t.csv:3: expected 3 fields, got 2"),
        ("arrived_at,num_prefill_tokens,num_decode_tokens\n-1,1,1\n", "t.csv:2: column arrived_at"),
        ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,0,1\n", "t.csv:2: column num_prefill_tokens"),
        ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,2.5\n", "t.csv:2: column num_decode_tokens"),
        ("arrived_at,num_prefill_tokens,num_decode_tokens\n", "trace has no valid requests"),
    ],
)
def test_malformed_traces(tmp_path, content, message):
    path = tmp_path / "t.csv"
    path.write_text(content)
    with pytest.raises(LLMSimError, match=None) as info:
        read_trace(path)
    assert message in str(info.value)


def test_real_azure_trace_statistics(shared_data):
    """The README of ../shared/data: conversation prefill mean 1,155, decode mean 211, 19,366 requests."""
    times, inputs, outputs, prefixes, skipped = read_trace(shared_data / "traces" / "azure_conv_2023.csv")
    assert prefixes is None and skipped == 0
    assert len(times) == 19_366
    assert inputs.mean() == pytest.approx(1155, rel=0.01)
    assert outputs.mean() == pytest.approx(211, rel=0.01)
    assert times[0] == 0 and np.all(np.diff(times) >= 0)
