"""Capacity: the most load at which an SLO holds, by bisection on what the workload's load is made of.

An SLO is a set of bounds ``{metric: limit}`` on percentile metrics, written ``p99_ttft_ms`` or ``ttft_p99_ms``
(TTFT, TPOT, ITL, a request's longest gap ``max_itl``, E2EL; mean, median, p90, p95, p99). Without ``attainment``
every bound must hold for the run's percentile; with ``attainment`` = a, the bounds become per-request limits
(``slo.ttft_ms``, ``slo.tpot_ms``, ``slo.e2el_ms`` set from them, and an ITL or longest-gap bound as
``slo.max_itl_ms``: every gap of the request) and ``slo_attainment`` ≥ a must hold.

What the search varies (:func:`search_knob`) follows the workload:

- an open-loop arrival with a rate (poisson, gamma, constant, onoff): the **rate** (requests/s; sessions/s for
  multi-turn sessions); one with a ``mean_rate`` (diurnal, piecewise rates rescaled to one): that mean rate, the
  shape kept;
- ``arrival.kind: closed_loop``: the number of **users**, an integer (max concurrency);
- a replayed ``trace``: its **speed-up** (``workload.trace.speedup``: every gap divided by it).

Search: from the experiment's own value, double (or halve) until the SLO fails (holds), then bisect until
(high − low) / high ≤ ``tolerance``; users bisect on integers until high − low ≤ max(1, tolerance × high), so a
count below 1 / ``tolerance`` (50 users at the default 2%) is exact to one user and a larger one within the same
relative tolerance as a rate. The SLO is assumed to hold
below the capacity and fail above it; each probe is one whole simulation with the experiment's seed, so the answer
is deterministic.

Every probe is bounded: the workload's ``num_requests`` stays as the file gives it (a duration-only workload,
whose request count grows with the rate, is refused), and the search stops at the load where all of them are sent
at once — ``num_requests`` users (one per request; more add no load), a rate or a speed-up at which every request
arrives within :data:`ALL_AT_ONCE_S` (before a GPU finishes one iteration; ``MAX_RATE`` at most). If the SLO
still holds there, the workload cannot load the deployment past it: that is an error naming the bound, not an
answer. Below, a rate or speed-up of 1/``IDLE_FACTOR`` of the start, or one user, that misses the SLO ends the
search with no capacity (an idle server misses it).

One seed's capacity is one sample of a random quantity: :func:`capacity_over_seeds` repeats the search for
``seeds`` independent seeds (spawned from the experiment's, as a sweep's replicates) and reports their mean with a
95% confidence interval, mean ± t(0.975, n − 1) · s / √n (s the sample standard deviation), and their range.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.api import run as simulate
from simulator.config import ExperimentConfig
from simulator.config.base import MAX_RATE
from simulator.errors import ConfigError
from simulator.results.progress import progress_bar
from simulator.workload.trace import read_trace


@dataclass
class Probe:
    value: float  # the rate, users or speed-up probed
    holds: bool
    summary: dict[str, Any]

    @property
    def rate(self) -> float:
        """The probed value (named for the rate, the first thing searched)."""
        return self.value


IDLE_FACTOR = 1024  # searching down this far below the starting rate, requests no longer wait for one another
ALL_AT_ONCE_S = 1e-3  # every request arriving within this (less than one GPU iteration) is all of them at once


@dataclass(frozen=True)
class Knob:
    """What a capacity search varies (module docstring): ``name`` (``rate``, ``users`` or ``speedup``), its
    ``unit``, the experiment's own value (``start``, where the search starts) and the largest a probe takes
    (``bound``: the workload's requests all sent at once); ``requests`` the workload's request (or session) count;
    a trace's mean arrival rate at speed-up 1 (``trace_rate``, requests/s); ``field``: the arrival's field a rate
    sets (``rate``, or ``mean_rate`` for a time-varying arrival)."""

    name: str
    unit: str
    start: float
    bound: float
    requests: int
    trace_rate: float | None = None
    field: str = "rate"

    @property
    def integer(self) -> bool:
        return self.name == "users"

    def apply(self, config: ExperimentConfig, value: float) -> ExperimentConfig:
        """``config`` with the knob at ``value``."""
        workload = config.workload
        if self.name == "speedup":
            assert workload.trace is not None  # (search_knob chose the speed-up for a trace)
            workload = workload.model_copy(update={"trace": workload.trace.model_copy(update={"speedup": value})})
        else:
            assert workload.arrival is not None  # (search_knob chose a rate or users for an arrival)
            update = {"users": int(value)} if self.integer else {self.field: value}
            workload = workload.model_copy(update={"arrival": workload.arrival.model_copy(update=update)})
        return config.model_copy(update={"workload": workload})

    def bound_error(self) -> ConfigError:
        """The SLO still holds at the bound: this workload cannot load the deployment past it."""
        n, what = f"{self.requests:,}", "sessions" if self.unit == "sessions/s" else "requests"
        if self.name == "users":
            at = f"with {self.bound:,.0f} users, one per request of the workload's {n}, every request sent at once"
        elif self.name == "speedup":
            at = f"with the trace {self.bound:.4g}x faster, its {n} requests arriving within 1 ms (at once)"
        else:
            at = f"at {self.bound:.4g} {self.unit}, the workload's {n} {what} arriving within 1 ms (at once)"
        more = "a longer trace (or a larger workload.num_requests)" if self.name == "speedup" else (
            "a larger workload.num_requests")
        return ConfigError(f"capacity: the SLO still holds {at}; no more load is in this workload to find where it "
                           f"fails: give {more}")


def search_knob(config: ExperimentConfig, over: str | None = None) -> Knob:
    """What the search varies for this workload (module docstring), or a one-line refusal; ``over="rate"`` refuses
    everything but an arrival with a rate (for callers that report a rate)."""
    workload, arrival = config.workload, config.workload.arrival
    if workload.trace is not None and over is None:
        return _trace_knob(config)
    if arrival is not None and arrival.kind == "closed_loop" and over is None:
        assert workload.num_requests is not None  # (a closed loop is bounded by its request count: the schema)
        n = workload.num_requests
        return Knob("users", "users", min(arrival.users, n), n, n)
    field = "rate" if hasattr(arrival, "rate") else "mean_rate"
    start = getattr(arrival, field, None)
    if arrival is None or start is None:
        kind = "a trace" if arrival is None else f"arrival kind {arrival.kind!r}"
        searched = "" if over == "rate" else ", closed-loop users (closed_loop) or a trace's speed-up"
        raise ConfigError(f"capacity: the workload needs an arrival with a rate (poisson, gamma, constant, onoff) or "
                          f"a mean_rate (diurnal, piecewise){searched}, not {kind}"
                          + (" without mean_rate" if hasattr(arrival, "mean_rate") else ""))
    if workload.num_requests is None:
        raise ConfigError("capacity: a duration_s workload sends more requests the higher the rate; give "
                          "workload.num_requests to bound every probe (e.g. --set workload.num_requests=2000)")
    n = workload.num_requests
    unit = "sessions/s" if workload.sessions is not None else "req/s"  # the arrival process's rate
    bound = min(MAX_RATE, n / ALL_AT_ONCE_S)
    return Knob("rate", unit, min(start, bound), bound, n, field=field)


def _trace_knob(config: ExperimentConfig) -> Knob:
    trace_config = config.workload.trace
    assert trace_config is not None
    trace = read_trace(trace_config.model_copy(update={"speedup": 1.0}), config.workload.num_requests,
                       np.random.default_rng(config.seed))
    n, span_s = len(trace.arrival_s), float(trace.arrival_s[-1])
    if span_s <= 0:
        raise ConfigError(f"capacity: the trace's {n:,} requests all arrive at the same time: its speed-up changes "
                          "nothing to search")
    bound = span_s / ALL_AT_ONCE_S
    return Knob("speedup", "x trace speed", min(trace_config.speedup, bound), bound, n, (n - 1) / span_s)


@dataclass
class CapacityResult:
    value: float  # the most load found to meet the SLO, in the knob's unit (0 if none)
    summary: dict[str, Any] | None  # the run there
    probes: list[Probe]
    tolerance: float
    idle_misses: bool = False  # even the least load (1/IDLE_FACTOR of the start, or one user) misses the SLO
    knob: Knob | None = None  # what was searched

    @property
    def rate(self) -> float:
        """The capacity (named for the rate, the first thing searched; users or a speed-up for those knobs)."""
        return self.value

    @property
    def unit(self) -> str:
        return self.knob.unit if self.knob is not None else "req/s"

    @property
    def missed(self) -> float | None:
        """The least load probed above the capacity that misses the SLO: the top of the final bracket."""
        return min((p.value for p in self.probes if not p.holds and p.value > self.value), default=None)

    @property
    def goodput(self) -> float:
        return self.summary["request_goodput"] if self.summary else 0.0

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.summary["output_throughput"] / self.summary["num_gpus"] if self.summary else 0.0


def _with_rate(config: ExperimentConfig, rate: float) -> ExperimentConfig:
    """``config`` with its arrival at ``rate`` (or the refusal of a workload without one)."""
    return search_knob(config, over="rate").apply(config, rate)


def _slo_config(config: ExperimentConfig, slo: dict[str, float]) -> ExperimentConfig:
    """Per-request limits from the bounds (for attainment): TTFT, TPOT, E2EL, and ITL as the longest gap."""
    names = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "max_itl_ms", "max_itl": "max_itl_ms", "e2el": "e2el_ms"}
    # keys come normalised, <stat>_<metric>_ms (normalise_slo_key)
    limits = {names[key.split("_", 1)[1].removesuffix("_ms")]: limit for key, limit in slo.items()}
    return config.model_copy(update={"slo": config.slo.model_copy(update=limits)})


def find_capacity(
    config: ExperimentConfig, slo: dict[str, float], *, attainment: float | None = None, tolerance: float = 0.02,
    max_probes: int = 40, run: Callable[[ExperimentConfig], dict[str, Any]] | None = None, over: str | None = None,
) -> CapacityResult:
    """The most load meeting ``slo``: the highest arrival rate, the most closed-loop users or the fastest trace
    replay, as the workload is made (see the module docstring; ``over="rate"`` allows only a rate). A progress bar
    counts the probes on a terminal."""
    knob = search_knob(config, over)  # refuses a workload with nothing to search before anything runs
    bar = progress_bar(None, "capacity", "probe")
    try:
        return _search(config, knob, slo, attainment, tolerance, max_probes, run, bar)
    finally:
        bar.close()


def _narrow(knob: Knob, low: float, high: float, tolerance: float) -> bool:
    """Whether the bracket [low, high] is still wider than the search's precision."""
    if knob.integer:
        return high - low > max(1.0, tolerance * high)
    return (high - low) / high > tolerance


def _search(config: ExperimentConfig, knob: Knob, slo: dict[str, float], attainment: float | None,
            tolerance: float, max_probes: int, run: Callable[[ExperimentConfig], dict[str, Any]] | None,
            bar) -> CapacityResult:
    if run is None:
        def run(c: ExperimentConfig) -> dict[str, Any]:
            return simulate(c).summary

    if attainment is not None:
        config = _slo_config(config, slo)
    probes: list[Probe] = []

    def probe(value: float) -> Probe:
        summary = run(knob.apply(config, value))
        if attainment is not None:
            holds = summary["slo_attainment"] >= attainment
        else:
            holds = all(summary[key] == summary[key] and summary[key] <= limit for key, limit in slo.items())
        probes.append(Probe(value, holds, summary))
        bar.update(1)
        shown = f"{value:,.0f} users" if knob.integer else f"{value:.4g} {knob.unit}"
        bar.set_postfix_str(f"{shown} {'meets' if holds else 'misses'}")
        return probes[-1]

    least = 1 if knob.integer else knob.start / IDLE_FACTOR
    first = probe(knob.start)
    low, high = (first, None) if first.holds else (None, first)
    while low is None or high is None:
        if len(probes) >= max_probes:
            side = "holds" if high is None else "misses"
            value = probes[-1].value
            raise ConfigError(f"capacity: no bracket within {max_probes} probes: the SLO still {side} at {value:.4g} "
                              f"{knob.unit}; start the search nearer (the experiment's own value is where it starts)")
        if low is None:
            assert high is not None  # one side of the bracket is always known
            if high.value <= least:  # an idle server misses it: no load will meet it
                return CapacityResult(0.0, None, probes, tolerance, idle_misses=True, knob=knob)
            result = probe(max(least, high.value // 2) if knob.integer else high.value / 2)
            low, high = (result, high) if result.holds else (None, result)
        else:
            if low.value >= knob.bound:
                raise knob.bound_error()
            result = probe(min(low.value * 2, knob.bound))
            low, high = (result, None) if result.holds else (low, result)
    while _narrow(knob, low.value, high.value, tolerance) and len(probes) < max_probes:
        middle = (low.value + high.value) // 2 if knob.integer else (low.value + high.value) / 2
        result = probe(middle)
        low, high = (result, high) if result.holds else (low, result)
    return CapacityResult(low.value, low.summary, probes, tolerance, knob=knob)


# Student's t distribution, 0.975 quantile, by degrees of freedom (1 … 30); the normal 1.96 beyond
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


@dataclass
class SeedSpread:
    """The capacity of each seed and their summary (in the searched knob's unit: req/s, users, x trace speed)."""

    seeds: list[int]
    values: list[float]

    @property
    def rates(self) -> list[float]:
        """Each seed's capacity (named for the rate, the first thing searched)."""
        return self.values

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def half_width(self) -> float:
        """Half the 95% confidence interval of the mean (0 for one seed)."""
        n = len(self.values)
        if n < 2:
            return 0.0
        variance = sum((r - self.mean) ** 2 for r in self.values) / (n - 1)
        t = T_975[n - 2] if n - 1 <= len(T_975) else 1.96
        return t * (variance / n) ** 0.5


def capacity_over_seeds(config: ExperimentConfig, slo: dict[str, float], seeds: int, **search: Any) -> tuple[
        SeedSpread, list[CapacityResult]]:
    """:func:`find_capacity` for ``seeds`` independent seeds spawned from the experiment's (whatever it searches:
    a rate, users or a trace's speed-up)."""
    children = [config.seed] if seeds == 1 else [
        int(child.generate_state(1)[0]) for child in np.random.SeedSequence(config.seed).spawn(seeds)]
    results = [find_capacity(config.model_copy(update={"seed": seed}), slo, **search) for seed in children]
    return SeedSpread(children, [result.value for result in results]), results
