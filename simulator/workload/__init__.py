"""Workloads: when requests arrive and how long they are."""

from __future__ import annotations

import numpy as np

from simulator.config.schema import WorkloadConfig
from simulator.workload.arrivals import arrival_times
from simulator.workload.lengths import sample_lengths
from simulator.workload.trace import read_trace


def generate_requests(config: WorkloadConfig, seed: np.random.SeedSequence):
    """``(arrival_s, input_tokens, output_tokens)`` arrays; independent random streams per quantity."""
    if config.trace is not None:
        return read_trace(config.trace.path, config.trace.time_scale, config.num_requests)
    arrival_rng, input_rng, output_rng = (np.random.default_rng(s) for s in seed.spawn(3))
    n = config.num_requests
    return (
        arrival_times(config.arrival, n, arrival_rng),
        sample_lengths(config.input_tokens, n, input_rng),
        sample_lengths(config.output_tokens, n, output_rng),
    )


__all__ = ["arrival_times", "generate_requests", "read_trace", "sample_lengths"]
