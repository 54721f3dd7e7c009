"""The attention data-parallel ranks of one replica, stepping together.

With attention data parallelism (SGLang's and vLLM's DP attention, TensorRT-LLM's attention DP) every rank
schedules its own batch in its own KV pool, but every MoE layer exchanges tokens among all ranks, so the ranks run
their forward passes in lock step: a step ends when the slowest rank's does, a rank with nothing to run joins with
an empty (dummy) batch, and a request arriving at an idle rank starts at the next step boundary.

Each rank is a :class:`~simulator.cluster.replica.Replica` that plans its work (:meth:`Replica._plan`) and keeps its
own accounting; this group starts and ends them together. A rank's time is its own iteration with the routed
experts priced on every rank's tokens, not on ``data_parallel`` times its own (the rank cost models' default):
``t_r − X(n_r) + X(N / dp)``, ``X`` the cost model's :meth:`experts_time`, ``n_r`` the rank's tokens and ``N``
their sum. A step runs the slowest rank's time. When every working rank runs closed-form decode steps
(``a_r + c_r·S_r`` per step, its context sum growing by its batch), the group runs ``k`` = the fewest steps any
rank may take, cut where another rank's step would become the slowest: step times are affine in the step index,
so the rank slowest at the start stays slowest until the first crossing, and the run's time is that rank's closed
form. Every rank records the group's step times. With iteration bounds recorded (:mod:`simulator.results.bounds`)
a rank's work takes the same substitution of its experts' work, and the time it waits for the slowest rank is
fixed (its own rates would not shorten it).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import simpy

from simulator.cluster.replica import Replica, steps_done_by
from simulator.cluster.wakeup import Wakeup
from simulator.cost.base import CostModel, decode_run_time
from simulator.cost.work import Work


class Lockstep:
    """The ranks of one attention-DP replica; they start and end every step together."""

    def __init__(self, env: simpy.Environment, ranks: list[Replica], cost: CostModel) -> None:
        self.env, self.ranks = env, ranks
        self.data_parallel = len(ranks)
        self._experts: Callable[[float], float] | None = getattr(cost, "experts_time", None)
        self._experts_cache: dict[float, float] = {}
        # the same substitution in the ranks' work, when iteration bounds are recorded (simulator.cost.work)
        self._experts_work: Callable[[float], Work] | None = getattr(cost, "experts_work", None)
        self._experts_work_cache: dict[float, Work] = {}
        self.busy = False
        self._pending = Wakeup(env, self._on_timeout)
        self._start = 0.0
        self._steps = 0
        self._timing: tuple[float, float, int, int] = (0.0, 0.0, 0, 0)  # one working rank's (a, c, size, sum)
        self._working: list[Replica] = []
        for rank in ranks:
            rank.group = self

    @property
    def stepping(self) -> bool:
        """A step is running (not merely about to start at this instant)."""
        return self.busy and bool(self._working)

    def kick(self) -> None:
        """A rank has new work (an arrival, a timer, freed memory): start a step now if none is running, else cut
        a decode run at the next boundary if that rank's queue could change its batch."""
        if not self.busy:
            self.busy = True
            self._pending = self._pending.schedule(0.0)  # after every arrival of this instant
            return
        if self._steps > 1:
            deadlines = []
            for rank in self.ranks:
                if rank.scheduler.wants_boundary():
                    deadlines.append(self.env.now)
                elif (deadline := rank.scheduler.queue_deadline()) is not None:
                    deadlines.append(deadline)
            if deadlines:
                self._cut(min(deadlines))

    def stop(self) -> None:
        """The replica crashed (:mod:`simulator.cluster.faults`): the step in progress never ends; idle until a
        rank has work again."""
        if self._pending.callbacks is not None:
            self._pending.callbacks = ()
        self.busy, self._steps, self._working = False, 0, []

    def cut_now(self) -> None:
        """End a decode run in progress at the step running now (a rank's speed changed)."""
        if self.busy and self._steps > 1:
            self._cut(self.env.now)

    def _cut(self, at: float) -> None:
        """End the group's decode run at the first step boundary at or after ``at`` (if before its end)."""
        a, c, size, context_sum0 = self._timing
        steps = steps_done_by(a, c, size, context_sum0, at - self._start, self._steps)
        if steps < self._steps:
            self._steps = steps
            done = decode_run_time(a, c, size, context_sum0, steps)
            for rank in self._working:
                rank._shorten(steps, done)
            self._pending = self._pending.schedule(self._start + done - self.env.now)

    def _expert_seconds(self, tokens: float) -> float:
        cached = self._experts_cache.get(tokens)
        if cached is None:
            cached = self._experts_cache[tokens] = self._experts(tokens)  # type: ignore[misc]  # only when set
        return cached

    def _expert_work(self, tokens: float) -> Work:
        cached = self._experts_work_cache.get(tokens)
        if cached is None:
            cached = self._experts_work_cache[tokens] = self._experts_work(tokens)  # type: ignore[misc]  # when set
        return cached

    def _on_timeout(self, wakeup: Wakeup) -> None:
        now = wakeup.at
        for rank in self._working:
            rank._finish(rank._batch, rank._steps, now)  # type: ignore[arg-type]  # a working rank has its batch
        planned = {rank.index: plan for rank in self.ranks if (plan := rank._plan(now)) is not None}
        released = changes = False  # async scheduling: arrivals during the step, seen once the next is formed
        for rank in self.ranks:
            if rank._intake:
                released, changes = True, rank.release_intake() or changes
        if released and not planned:  # nothing to run without them: they start at once
            planned = {rank.index: plan for rank in self.ranks if (plan := rank._plan(now)) is not None}
        elif changes:  # they join after the first step
            planned = {index: (1, *plan[1:]) for index, plan in planned.items()}
        plans = [(rank, planned[rank.index]) for rank in self.ranks if rank.index in planned]
        self._working = [rank for rank, _ in plans]
        if not plans:
            self.busy, self._steps = False, 0
            return
        if self._experts is not None and self.data_parallel > 1:  # the experts see every rank's tokens
            everyone = sum(tokens for _, (_, _, tokens, _) in plans) / self.data_parallel
            shared = self._expert_seconds(everyone)
            plans = [(rank, (steps, (a - self._expert_seconds(tokens) + shared, c, size, total), tokens, is_run))
                     for rank, (steps, (a, c, size, total), tokens, is_run) in plans]
            if self._experts_work is not None and self.ranks[0].bounds is not None:
                for rank, (_, _, tokens, _) in plans:
                    w0, w1 = rank._work
                    rank._work = (w0 - self._expert_work(tokens) + self._expert_work(everyone), w1)
        if all(is_run for _, (_, _, _, is_run) in plans):
            steps, base, slope = self._slowest_run(plans)
        else:
            steps, slope = 1, 0.0
            base = max(a + c * total for _, (_, (a, c, _, total), _, _) in plans)
        for rank, (_, (_, _, size, total), _, _) in plans:
            per = slope / size if size else 0.0
            rank._settle(now, steps, (base - per * total, per, size, total))
        self._start, self._steps = now, steps
        self._timing = self._working[0]._run
        self._pending = self._pending.schedule(self._working[0]._duration)

    @staticmethod
    def _slowest_run(plans) -> tuple[int, float, float]:
        """(steps, first step, growth per step) of the slowest rank's decode run, cut where another's overtakes."""
        runs = [(a + c * total, c * size, steps) for _, (steps, (a, c, size, total), _, _) in plans]
        base, slope, _ = max(runs, key=lambda run: (run[0], run[1]))
        steps = min(run[2] for run in runs)
        for other_base, other_slope, _ in runs:
            if other_slope > slope:  # overtakes after step (base − other_base) / (other_slope − slope)
                steps = min(steps, math.floor((base - other_base) / (other_slope - slope)) + 1)
        return max(steps, 1), base, slope
