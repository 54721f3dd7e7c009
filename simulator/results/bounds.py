"""Iteration bounds: per iteration of a run, what bound it (compute, memory or fixed) and how close it came to the
GPU's peaks — accumulated in closed form, and a bounded sample of iterations for the roofline plot.

Off unless ``metrics.iteration_bounds`` is set (``llmsim run`` sets it); the engine then pays one ``is None`` test
per work. With it, each work (an iteration, or a closed-form run of decode steps) costs O(1): the cost model's work
of the iteration (:mod:`simulator.cost.work`: FLOPs F, HBM bytes B, compute part c, memory part m), or for a run of
k decode steps the affine pair (w0, w1) with step j's work w0 + w1·(S0 + j·batch) (S0 its first context sum) while
step j lasts ``base + slope·j`` seconds (:mod:`simulator.cluster.replica`). Step j's fixed part is what its time
leaves: ``f_j = t_j − c_j − m_j`` — the cost model's fixed part, plus whatever the replica adds outside the served
model's forward pass (a speculative draft's passes, KV swaps and slab copies, LoRA adapters, a slow fault's
stretch, an attention-DP rank's wait for the slowest rank), none of whose FLOPs or bytes are counted. Its bound is
the largest of c_j, m_j, f_j (ties: compute, memory, fixed). All three are affine in j, so each bound leads one
interval of steps (or none): a work whose first and last steps have the same bound has it all along; otherwise
the steps of each bound are found from the lines' crossings, and the time summed over them in closed form
(:func:`bound_seconds`).

Iterations are told apart by phase (:func:`simulator.results.observers.iteration_phase`): ``prefill`` (prompt
chunks only), ``decode`` (decode sequences only) and ``mixed`` (both). Per phase the recorder keeps the iterations,
their seconds (GPU-busy time, summed over replicas), the seconds of each bound, and Σ F/P and Σ B/W (P the replica's
peak FLOP/s, W its peak HBM bytes/s: :func:`simulator.cost.work.gemm_peak`, ``memory_bandwidth_gb_per_s``) — the
seconds the work would take at the peaks, whose ratio to the busy seconds is the time-weighted mean fraction of
peak: Σ t·(F/t)/P / Σ t. :meth:`IterationBounds.summary` states them (the keys of :data:`BOUND_METRICS`, defined in
:mod:`simulator.results.metrics`).

Roofline points: one per work of some time (a decode run's totals over its steps: its mean step; the bound of its
totals), kept for at most
:data:`POINTS_PER_PHASE` × 2 works per phase — every one until there are twice that many, then every second, every
fourth, … (whenever the kept points reach twice the cap, every other one is dropped and the stride doubles), so the
sample is evenly spread over the run and the same run keeps the same points.
"""

from __future__ import annotations

import math
from itertools import combinations, pairwise
from typing import TYPE_CHECKING, Any, NamedTuple

from simulator.cost.work import BOUNDS, Work

if TYPE_CHECKING:
    import pandas as pd

PHASES = ("prefill", "decode", "mixed")
POINTS_PER_PHASE = 2000
# per phase P in PHASES and "all" (every iteration); see simulator.results.metrics for the definitions
BOUND_STATS = ("iterations", "busy_s", "compute_bound_frac", "memory_bound_frac", "fixed_bound_frac",
               "peak_flops_frac", "peak_hbm_frac")
BOUND_METRICS = tuple(f"iter_{phase}_{stat}" for phase in (*PHASES, "all") for stat in BOUND_STATS)
POINT_COLUMNS = ("replica", "phase", "start_s", "steps", "seconds", "flops", "hbm_bytes", "compute_s", "memory_s",
                 "fixed_s", "bound", "peak_format", "peak_flops", "peak_hbm_bytes_per_s")


class Roofs(NamedTuple):
    """A replica's peaks: its GEMMs' tensor-core format and that format's dense FLOP/s, and its HBM bytes/s; and its
    power (:mod:`simulator.results.energy`): its GPUs' idle watts, and the watts they add at activity 1 over idle,
    G·(P_board − P_idle) (NaN: the GPU states no board power)."""

    format: str
    flops: float
    hbm_bytes_per_s: float
    idle_w: float = math.nan
    active_w: float = math.nan


def _runs(steps: int, lines: list[tuple[float, float]]) -> list[tuple[int, int]]:
    """Cut the steps j = 0 … steps−1 into runs [u, v) in which no two of the affine ``lines`` (p + q·j each) cross:
    at the floor x of each crossing and at x + 1 and x + 2 (x may fall just short of a whole crossing) — at most
    3·C(lines, 2) + 1 runs, whatever the steps."""
    cuts = {0, steps}
    for (p1, q1), (p2, q2) in combinations(lines, 2):
        if q1 != q2:
            x = (p2 - p1) / (q1 - q2)
            if -1 < x < steps:
                cuts.update((math.floor(x), math.floor(x) + 1, math.floor(x) + 2))
    return list(pairwise(sorted(c for c in cuts if 0 <= c <= steps)))


def _line_sum(p: float, q: float, u: int, v: int) -> float:
    """Σ (p + q·j) over j = u … v−1."""
    n = v - u
    return n * p + q * (u + v - 1) * n / 2


def bound_seconds(steps: int, base: float, slope: float, lines: list[tuple[float, float]]) -> list[float]:
    """Seconds of the steps j = 0 … steps−1 (step j lasting ``base + slope·j``) whose largest of the affine parts
    ``lines`` (p + q·j each: compute, memory, fixed) is each one (ties to the earlier). A part's lead changes only
    where two lines cross (:func:`_runs`): O(1) per work."""
    seconds = [0.0] * len(lines)
    for u, v in _runs(steps, lines):
        values = [p + q * u for p, q in lines]
        seconds[values.index(max(values))] += _line_sum(base, slope, u, v)
    return seconds


def active_seconds(steps: int, time: tuple[float, float], flops_s: tuple[float, float],
                   hbm_s: tuple[float, float]) -> float:
    """Σ over the steps j = 0 … steps−1 of ``min(t_j, max(f_j, b_j))`` — step j's time ``t_j`` times its activity
    ``min(1, max(f_j, b_j) / t_j)`` (:mod:`simulator.results.energy`), where ``f_j`` and ``b_j`` are the seconds its
    FLOPs and HBM bytes would take at the GPU's peaks; each an affine line (p, q): p + q·j. Within a run of
    :func:`_runs` the three keep their order, so the sum is one line's there, in closed form (O(1) per work). When
    the same one of f and b is below t and the larger at both ends, it is so all along (the differences are
    affine): its sum at once."""
    last = steps - 1
    for line, other in ((hbm_s, flops_s), (flops_s, hbm_s)):
        if all(line[0] + line[1] * j >= other[0] + other[1] * j and line[0] + line[1] * j < time[0] + time[1] * j
               for j in (0, last)):
            return _line_sum(*line, 0, steps)
    lines = [time, flops_s, hbm_s]
    total = 0.0
    for u, v in _runs(steps, lines):
        t, f, b = (p + q * u for p, q in lines)
        line = time if t <= max(f, b) else flops_s if f >= b else hbm_s
        total += _line_sum(*line, u, v)
    return total


def _leader(compute: float, memory: float, fixed: float) -> int:
    """The index of the largest part (ties to the earlier)."""
    if compute >= memory:
        return 0 if compute >= fixed else 2
    return 1 if memory >= fixed else 2


class _Phase:
    """One phase's totals and its sample of points."""

    __slots__ = ("bound_s", "busy_s", "flops_at_peak_s", "hbm_at_peak_s", "iterations", "points", "seen", "stride")

    def __init__(self) -> None:
        self.iterations = 0
        self.busy_s = 0.0
        self.bound_s = [0.0, 0.0, 0.0]  # compute, memory, fixed
        self.flops_at_peak_s = 0.0  # Σ F / peak FLOP/s
        self.hbm_at_peak_s = 0.0  # Σ B / peak bytes/s
        self.points: list[tuple] = []
        self.seen = 0
        self.stride = 1

    def wants(self) -> bool:
        """Whether the next point is kept (every ``stride``-th); counts it either way."""
        self.seen += 1
        return (self.seen - 1) % self.stride == 0

    def keep(self, point: tuple) -> None:
        """A point :meth:`wants` kept; at twice the cap, every other one kept is dropped and the stride doubles."""
        self.points.append(point)
        if len(self.points) >= 2 * POINTS_PER_PHASE:
            self.points = self.points[::2]
            self.stride *= 2


class IterationBounds:
    """The run's iteration bounds (module docstring); the replicas record into one (``record``)."""

    def __init__(self) -> None:
        self.phases = {phase: _Phase() for phase in PHASES}
        # the energy over idle: Σ works G·(P_board − P_idle)·Σ_j min(t_j, max(f_j, b_j)), joules (NaN: no power)
        self.active_j = 0.0
        self.power: dict[int, tuple[int, float]] = {}  # per replica: its GPUs and their idle watts (in all)

    def record(self, roofs: Roofs, replica: int, phase: str, start_s: float, steps: int, base: float, slope: float,
               work: tuple[Work, Work], context_sum0: int, batch: int) -> None:
        """A finished work of ``steps`` steps on ``replica`` from ``start_s``: step j lasts ``base + slope·j``
        seconds and does ``work[0] + work[1]·(context_sum0 + j·batch)`` (one iteration: ``work[1]`` zero)."""
        w0, w1 = work
        # step j's compute and memory parts: c + dc·j, m + dm·j; its fixed part what its time leaves
        c, m = w0.compute_s + w1.compute_s * context_sum0, w0.memory_s + w1.memory_s * context_sum0
        dc, dm = w1.compute_s * batch, w1.memory_s * batch
        counts = steps * (steps - 1) / 2  # Σ j over the steps
        seconds = steps * base + slope * counts
        compute, memory = steps * c + dc * counts, steps * m + dm * counts
        tokens = steps * context_sum0 + batch * counts  # Σ context sums
        flops, nbytes = steps * w0.flops + w1.flops * tokens, steps * w0.hbm_bytes + w1.hbm_bytes * tokens
        totals = self.phases[phase]
        totals.iterations += steps
        totals.busy_s += seconds
        first = _leader(c, m, base - c - m)
        if steps == 1 or first == _leader(c + dc * (steps - 1), m + dm * (steps - 1),
                                          base + slope * (steps - 1) - c - m - (dc + dm) * (steps - 1)):
            totals.bound_s[first] += seconds  # one leader at both ends: all along (each leads an interval)
        else:
            lines = [(c, dc), (m, dm), (base - c - m, slope - dc - dm)]
            for i, part in enumerate(bound_seconds(steps, base, slope, lines)):
                totals.bound_s[i] += part
        totals.flops_at_peak_s += flops / roofs.flops
        totals.hbm_at_peak_s += nbytes / roofs.hbm_bytes_per_s
        f0 = (w0.flops + w1.flops * context_sum0) / roofs.flops
        b0 = (w0.hbm_bytes + w1.hbm_bytes * context_sum0) / roofs.hbm_bytes_per_s
        if steps == 1:
            active = min(seconds, max(f0, b0))
        else:
            active = active_seconds(steps, (base, slope), (f0, w1.flops * batch / roofs.flops),
                                    (b0, w1.hbm_bytes * batch / roofs.hbm_bytes_per_s))
        self.active_j += roofs.active_w * active
        if seconds > 0 and totals.wants():  # (none to plot: a disaggregated decode replica taking a request's KV)
            bound = BOUNDS[_leader(compute, memory, seconds - compute - memory)]
            totals.keep((replica, phase, start_s, steps, seconds, flops, nbytes, compute, memory,
                         seconds - compute - memory, bound, roofs.format, roofs.flops, roofs.hbm_bytes_per_s))

    def summary(self) -> dict[str, Any]:
        """``iter_<phase>_<stat>`` for each phase and ``all`` (:data:`BOUND_METRICS`; a phase without iterations
        has NaN shares and fractions)."""
        out: dict[str, Any] = {}
        rows = [(phase, [totals]) for phase, totals in self.phases.items()]
        for phase, parts in [*rows, ("all", list(self.phases.values()))]:
            busy = sum(p.busy_s for p in parts)
            bound = [sum(p.bound_s[i] for p in parts) for i in range(3)]

            def share(x: float, busy: float = busy) -> float:
                return x / busy if busy > 0 else math.nan

            out.update({
                f"iter_{phase}_iterations": sum(p.iterations for p in parts),
                f"iter_{phase}_busy_s": busy,
                f"iter_{phase}_compute_bound_frac": share(bound[0]),
                f"iter_{phase}_memory_bound_frac": share(bound[1]),
                f"iter_{phase}_fixed_bound_frac": share(bound[2]),
                f"iter_{phase}_peak_flops_frac": share(sum(p.flops_at_peak_s for p in parts)),
                f"iter_{phase}_peak_hbm_frac": share(sum(p.hbm_at_peak_s for p in parts)),
            })
        return out

    def points(self) -> pd.DataFrame:
        """The sampled works (:data:`POINT_COLUMNS`), phase by phase in completion order."""
        import pandas as pd

        rows = [point for totals in self.phases.values() for point in totals.points]
        return pd.DataFrame(rows, columns=list(POINT_COLUMNS))
