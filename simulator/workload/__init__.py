"""Workloads: when requests arrive, how long they are, and which prompt prefixes they share."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from simulator.config.schema import PrefixConfig, WorkloadConfig
from simulator.request import Prefix
from simulator.workload.arrivals import arrival_times
from simulator.workload.lengths import sample_lengths
from simulator.workload.trace import read_trace


class Workload(NamedTuple):
    """Per-request columns in arrival order; ``prefixes`` is None or an object array of ``Prefix | None``."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    prefixes: np.ndarray | None = None


def assign_prefixes(config: PrefixConfig, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Which requests carry a shared prefix (probability ``fraction``) and which of the ``groups`` one; returns
    the prefix of each request (None for none) and the tokens it adds to the input."""
    carries = rng.random(n) < config.fraction
    group = rng.integers(0, config.groups, size=n)
    used, index = np.unique(np.where(carries, group, -1), return_inverse=True)
    choices = np.empty(len(used), dtype=object)  # one shared Prefix object per group in use
    choices[:] = [Prefix((int(g),), config.tokens) if g >= 0 else None for g in used]
    return choices[index.reshape(-1)], np.where(carries, config.tokens, 0)


def generate_requests(config: WorkloadConfig, seed: np.random.SeedSequence) -> Workload:
    """The workload of an experiment; independent random streams per quantity, so changing one distribution
    leaves the others' draws unchanged."""
    if config.trace is not None:
        workload = Workload(*read_trace(config.trace.path, config.trace.time_scale, config.num_requests))
        n = len(workload.arrival_s)
    else:
        n = config.num_requests
    arrival_rng, input_rng, output_rng, prefix_rng = (np.random.default_rng(s) for s in seed.spawn(4))
    if config.trace is None:
        workload = Workload(
            arrival_times(config.arrival, n, arrival_rng),
            sample_lengths(config.input_tokens, n, input_rng),
            sample_lengths(config.output_tokens, n, output_rng),
        )
    if config.prefix is None:
        return workload
    prefixes, extra = assign_prefixes(config.prefix, n, prefix_rng)
    return workload._replace(input_tokens=workload.input_tokens + extra, prefixes=prefixes)


__all__ = ["Workload", "arrival_times", "assign_prefixes", "generate_requests", "read_trace", "sample_lengths"]
