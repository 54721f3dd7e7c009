"""Workloads: when requests arrive, how long they are, and which prompt prefixes they share."""

from __future__ import annotations

import numpy as np

from simulator.config.workload import ArrivalConfig, PrefixConfig, RequestClass, WorkloadConfig
from simulator.errors import LLMSimError
from simulator.request import Prefix
from simulator.workload.arrivals import arrival_times
from simulator.workload.base import Workload
from simulator.workload.dataset import sample_dataset
from simulator.workload.lengths import correlated_lengths, sample_images, sample_lengths
from simulator.workload.segments import segment_prefixes
from simulator.workload.sessions import generate_sessions
from simulator.workload.trace import Trace, read_trace, write_trace


def assign_prefixes(config: PrefixConfig, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Which requests carry a shared prefix (probability ``fraction``) and which of the ``groups`` one; returns
    the prefix of each request (None for none) and the tokens it adds to the input."""
    carries = rng.random(n) < config.fraction
    group = rng.integers(0, config.groups, size=n)
    used, index = np.unique(np.where(carries, group, -1), return_inverse=True)
    choices = np.empty(len(used), dtype=object)  # one shared Prefix object per group in use
    choices[:] = [Prefix((int(g),), config.tokens) if g >= 0 else None for g in used]
    return choices[index.reshape(-1)], np.where(carries, config.tokens, 0)


def assign_classes(classes: list[RequestClass], workload: Workload, seed: np.random.SeedSequence) -> Workload:
    """Draw each request's class by share; a class with its own lengths redraws them for its requests (one random
    stream per class and quantity, so changing one class leaves the others' draws unchanged)."""
    streams = [np.random.default_rng(s) for s in seed.spawn(1 + 2 * len(classes))]
    n = len(workload.arrival_s)
    shares = np.array([c.share for c in classes])
    index = streams[0].choice(len(classes), size=n, p=shares / shares.sum()).astype(np.int16)
    inputs, outputs = workload.input_tokens.copy(), workload.output_tokens.copy()
    for k, request_class in enumerate(classes):
        members = np.flatnonzero(index == k)
        if request_class.input_tokens is not None:
            inputs[members] = sample_lengths(request_class.input_tokens, members.size, streams[1 + 2 * k])
        if request_class.output_tokens is not None:
            outputs[members] = sample_lengths(request_class.output_tokens, members.size, streams[2 + 2 * k])
    return workload._replace(input_tokens=inputs, output_tokens=outputs, classes=index)


def arrivals_within(config: ArrivalConfig, duration_s: float, cap: int | None,
                    seed: np.random.SeedSequence) -> np.ndarray:
    """Every arrival of the (open-loop) process within ``duration_s`` seconds, at most ``cap``: drawn for a count
    doubled until the process passes the duration (each draw from the same seed, so the result is determined)."""
    n = 64 if cap is None else min(64, cap)
    while True:
        times = arrival_times(config, n, np.random.default_rng(seed))
        if times[-1] > duration_s or (cap is not None and n >= cap):
            break
        n = n * 2 if cap is None else min(n * 2, cap)
    kept = times[: int(np.searchsorted(times, duration_s, side="right"))]
    if not kept.size:
        raise LLMSimError(f"workload.duration_s: {duration_s:g} s holds no arrival (the first comes at "
                          f"{times[0]:.6g} s)")
    return kept


def with_images(config: WorkloadConfig, workload: Workload, seed: np.random.SeedSequence) -> Workload:
    """``workload`` with ``config.images`` drawn and their tokens added to the prompts (after the text and any
    prefix or segments: the images are the request's own content). Their seed is a child of ``seed`` at a key of
    its own (100), not a spawn, so adding images changes no other draw."""
    if config.images is None:
        return workload
    images_seed = np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, 100))
    tokens, images = sample_images(config.images, len(workload.arrival_s), images_seed)
    return workload._replace(input_tokens=workload.input_tokens + tokens, images=images)


def generate_requests(config: WorkloadConfig, seed: np.random.SeedSequence) -> Workload:
    """The workload of an experiment; independent random streams per quantity, so changing one distribution
    leaves the others' draws unchanged (the segments' stream is spawned last: adding segments changes no other
    draw; images have a stream of their own, :func:`with_images`)."""
    return with_images(config, _text_requests(config, seed), seed)


def _text_requests(config: WorkloadConfig, seed: np.random.SeedSequence) -> Workload:
    """:func:`generate_requests` without the images."""
    if config.sessions is not None:
        return generate_sessions(config, seed)
    streams = seed.spawn(7)
    arrival_rng, input_rng, output_rng, prefix_rng, trace_rng = (np.random.default_rng(s) for s in streams[:5])
    if config.trace is not None:
        workload = Workload(*read_trace(config.trace, config.num_requests, trace_rng))
        n = len(workload.arrival_s)
    else:
        # the schema's rules for a synthetic workload: an arrival process, and num_requests unless duration_s
        assert config.arrival is not None
        if config.duration_s is not None:
            arrivals = arrivals_within(config.arrival, config.duration_s, config.num_requests, streams[0])
        else:
            assert config.num_requests is not None
            arrivals = arrival_times(config.arrival, config.num_requests, arrival_rng)
        n = len(arrivals)
        if config.dataset is not None:
            inputs, outputs, skipped = sample_dataset(config.dataset, n, input_rng)
            workload = Workload(arrivals, inputs, outputs, skipped=skipped)
        elif config.length_correlation is not None:  # the schema: both lengths given
            assert config.input_tokens is not None and config.output_tokens is not None
            inputs, outputs = correlated_lengths(config.input_tokens, config.output_tokens,
                                                 config.length_correlation.spearman, n, input_rng, output_rng)
            workload = Workload(arrivals, inputs, outputs)
        else:
            workload = Workload(
                arrivals,
                sample_lengths(config.input_tokens, n, input_rng) if config.input_tokens else np.ones(n, np.int64),
                sample_lengths(config.output_tokens, n, output_rng) if config.output_tokens
                else np.ones(n, np.int64),
            )
    if config.classes:
        workload = assign_classes(config.classes, workload, streams[5])
    if config.segments:  # the schema keeps them apart from prefix and trace
        return workload._replace(prefixes=segment_prefixes(config.segments, workload.input_tokens, streams[6]))
    if config.prefix is None:
        return workload
    prefixes, extra = assign_prefixes(config.prefix, n, prefix_rng)
    return workload._replace(input_tokens=workload.input_tokens + extra, prefixes=prefixes)


__all__ = [
    "Trace", "Workload", "arrival_times", "assign_classes", "assign_prefixes", "generate_requests", "read_trace",
    "sample_lengths", "write_trace",
]
