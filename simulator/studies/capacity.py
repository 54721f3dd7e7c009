"""Capacity: the highest request rate at which an SLO holds, by bisection on the arrival rate.

An SLO is a set of bounds ``{metric: limit}`` on percentile metrics, written ``p99_ttft_ms`` or ``ttft_p99_ms``
(TTFT, TPOT, ITL, a request's longest gap ``max_itl``, E2EL; mean, median, p90, p95, p99). Without ``attainment``
every bound must hold for the run's percentile; with ``attainment`` = a, the bounds become per-request limits
(``slo.ttft_ms``, ``slo.tpot_ms``, ``slo.e2el_ms`` set from them, and an ITL or longest-gap bound as
``slo.max_itl_ms``: every gap of the request) and ``slo_attainment`` ≥ a must hold.

Search: from the experiment's rate, double (or halve) until the SLO fails (holds), then bisect until
(high − low) / high ≤ ``tolerance``. The SLO is assumed to hold below the capacity and fail above it; each probe
is one whole simulation with the experiment's seed, so the answer is deterministic.

One seed's capacity is one sample of a random quantity: :func:`capacity_over_seeds` repeats the search for
``seeds`` independent seeds (spawned from the experiment's, as a sweep's replicates) and reports their mean with a
95% confidence interval, mean ± t(0.975, n − 1) · s / √n (s the sample standard deviation), and their range.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.api import run as simulate
from simulator.config import ExperimentConfig
from simulator.errors import ConfigError
from simulator.results.progress import progress_bar

_STATS = ("mean", "median", "p90", "p95", "p99")
_METRICS = ("ttft", "tpot", "itl", "max_itl", "e2el")


def normalise_slo_key(key: str) -> str:
    """``ttft_p99_ms`` or ``p99_ttft_ms`` → ``p99_ttft_ms``; anything else is an error listing the forms."""
    metrics = "|".join(sorted(_METRICS, key=len, reverse=True))  # max_itl before itl
    match = re.fullmatch(rf"(?:(\w+?)_({metrics})|({metrics})_(\w+?))_ms", key)
    if match:
        stat, metric = (match[1], match[2]) if match[1] else (match[4], match[3])
        if stat in _STATS:
            return f"{stat}_{metric}_ms"
    raise ConfigError(
        f"--slo {key}: expected <stat>_<metric>_ms or <metric>_<stat>_ms with stat in {list(_STATS)} and metric in "
        f"{list(_METRICS)}, e.g. p99_ttft_ms=500"
    )


def parse_slo(items: list[str]) -> dict[str, float]:
    slo = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            limit = float(value)
        except ValueError:
            limit = -1.0
        if not sep or limit <= 0:
            raise ConfigError(f"--slo {item!r}: expected METRIC=LIMIT with a positive limit in ms")
        slo[normalise_slo_key(key.strip())] = limit
    if not slo:
        raise ConfigError("capacity: give at least one --slo METRIC=LIMIT")
    return slo


@dataclass
class Probe:
    rate: float
    holds: bool
    summary: dict[str, Any]


@dataclass
class CapacityResult:
    rate: float  # highest rate found to meet the SLO (0 if none)
    summary: dict[str, Any] | None  # the run at that rate
    probes: list[Probe]
    tolerance: float
    idle_misses: bool = False  # even a rate 1/IDLE_FACTOR of the start (an idle server) misses the SLO

    @property
    def goodput(self) -> float:
        return self.summary["request_goodput"] if self.summary else 0.0

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.summary["output_throughput"] / self.summary["num_gpus"] if self.summary else 0.0


IDLE_FACTOR = 1024  # searching down this far below the starting rate, requests no longer wait for one another


def _with_rate(config: ExperimentConfig, rate: float) -> ExperimentConfig:
    arrival = config.workload.arrival
    if arrival is None or not hasattr(arrival, "rate"):
        kind = "a trace" if arrival is None else f"arrival kind {arrival.kind!r}"
        raise ConfigError(f"capacity: the workload needs an arrival with a rate (poisson, gamma, constant), not {kind}")
    workload = config.workload.model_copy(update={"arrival": arrival.model_copy(update={"rate": rate})})
    return config.model_copy(update={"workload": workload})


def _slo_config(config: ExperimentConfig, slo: dict[str, float]) -> ExperimentConfig:
    """Per-request limits from the bounds (for attainment): TTFT, TPOT, E2EL, and ITL as the longest gap."""
    names = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "max_itl_ms", "max_itl": "max_itl_ms", "e2el": "e2el_ms"}
    # keys come normalised, <stat>_<metric>_ms (normalise_slo_key)
    limits = {names[key.split("_", 1)[1].removesuffix("_ms")]: limit for key, limit in slo.items()}
    return config.model_copy(update={"slo": config.slo.model_copy(update=limits)})


def find_capacity(
    config: ExperimentConfig, slo: dict[str, float], *, attainment: float | None = None, tolerance: float = 0.02,
    max_probes: int = 40, run: Callable[[ExperimentConfig], dict[str, Any]] | None = None,
) -> CapacityResult:
    """The highest arrival rate meeting ``slo`` (see the module docstring); a progress bar counts the probes on a
    terminal."""
    bar = progress_bar(None, "capacity", "probe")
    try:
        return _search(config, slo, attainment, tolerance, max_probes, run, bar)
    finally:
        bar.close()


def _search(config: ExperimentConfig, slo: dict[str, float], attainment: float | None, tolerance: float,
            max_probes: int, run: Callable[[ExperimentConfig], dict[str, Any]] | None, bar) -> CapacityResult:
    if run is None:
        def run(c: ExperimentConfig) -> dict[str, Any]:
            return simulate(c).summary

    if attainment is not None:
        config = _slo_config(config, slo)
    probes: list[Probe] = []

    def probe(rate: float) -> Probe:
        summary = run(_with_rate(config, rate))
        if attainment is not None:
            holds = summary["slo_attainment"] >= attainment
        else:
            holds = all(summary[key] == summary[key] and summary[key] <= limit for key, limit in slo.items())
        probes.append(Probe(rate, holds, summary))
        bar.update(1)
        bar.set_postfix_str(f"{rate:.4g}/s {'meets' if holds else 'misses'}")
        return probes[-1]

    _with_rate(config, 1.0)  # refuses workloads without a rate before anything runs
    arrival = config.workload.arrival
    assert arrival is not None and hasattr(arrival, "rate")  # (refused above otherwise)
    first = probe(arrival.rate)
    low, high = (first, None) if first.holds else (None, first)
    while (low is None or high is None) and len(probes) < max_probes:
        if low is None:
            assert high is not None  # one side of the bracket is always known
            if high.rate <= first.rate / IDLE_FACTOR:  # an idle server misses it: no rate will meet it
                return CapacityResult(0.0, None, probes, tolerance, idle_misses=True)
            result = probe(high.rate / 2)
            low, high = (result, high) if result.holds else (None, result)
        else:
            result = probe(low.rate * 2)
            low, high = (result, None) if result.holds else (low, result)
    while low is not None and high is not None and (high.rate - low.rate) / high.rate > tolerance:
        if len(probes) >= max_probes:
            break
        result = probe((low.rate + high.rate) / 2)
        low, high = (result, high) if result.holds else (low, result)
    if low is None:
        return CapacityResult(0.0, None, probes, tolerance)
    return CapacityResult(low.rate, low.summary, probes, tolerance)


# Student's t distribution, 0.975 quantile, by degrees of freedom (1 … 30); the normal 1.96 beyond
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


@dataclass
class SeedSpread:
    """The capacity of each seed and their summary (req/s)."""

    seeds: list[int]
    rates: list[float]

    @property
    def mean(self) -> float:
        return sum(self.rates) / len(self.rates)

    @property
    def half_width(self) -> float:
        """Half the 95% confidence interval of the mean (0 for one seed)."""
        n = len(self.rates)
        if n < 2:
            return 0.0
        variance = sum((r - self.mean) ** 2 for r in self.rates) / (n - 1)
        t = T_975[n - 2] if n - 1 <= len(T_975) else 1.96
        return t * (variance / n) ** 0.5


def capacity_over_seeds(config: ExperimentConfig, slo: dict[str, float], seeds: int, **search: Any) -> tuple[
        SeedSpread, list[CapacityResult]]:
    """:func:`find_capacity` for ``seeds`` independent seeds spawned from the experiment's."""
    import numpy as np

    children = [config.seed] if seeds == 1 else [
        int(child.generate_state(1)[0]) for child in np.random.SeedSequence(config.seed).spawn(seeds)]
    results = [find_capacity(config.model_copy(update={"seed": seed}), slo, **search) for seed in children]
    return SeedSpread(children, [result.rate for result in results]), results
