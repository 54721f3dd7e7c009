"""Faults (``cluster.faults``, ``cluster.mtbf_h``): replicas that crash or slow down while the cluster serves.

A ``crash`` at ``at_s`` stops its replica (a ``node`` fault: every replica with a GPU on that node; an
attention-DP replica: all its ranks, whose lock step stops): the iteration in progress is lost, and so is its KV
pool. Every request queued or running there is sent again from the start
(:meth:`~simulator.request.Request.restart`) to a replica that is up — the router's choice, or if that one is down
too the least loaded one up — at most ``cluster.fault_retries`` times; after that, or when no replica is up, it
fails with the reason (status ``failed``). The replica is back, empty, ``duration_s`` later (its restart and cold
start). A request the router sends to a replica that is down goes to the least loaded replica up, without counting
a retry — once the router's health check knows: for ``cluster.health_check_s`` after the crash it does not, and
such a request waits ``cluster.connect_timeout_s`` for its connection to fail, then is sent again as a retry (or
fails). A ``slow`` fault makes its replica run ``slowdown`` times slower for
``duration_s`` (from the next iteration boundary). A ``noisy_neighbor`` fault, from the next iteration boundary
for ``duration_s``, stretches each iteration's compute-limited part by 1 / (1 − ``compute_share``) and its
memory-limited part by 1 / (1 − ``bandwidth_share``) (:func:`simulator.cost.work.contended`, on the cost model's
split of the iteration, :mod:`simulator.cost.work`): a step of compute, memory and fixed parts C, M, F takes
C / (1 − compute_share) + M / (1 − bandwidth_share) + F. With ``mtbf_h``, every replica also crashes at random: the gaps
between its failures are exponential with mean ``mtbf_h`` hours / its GPUs (any GPU's failure stops the
replica), counted from when it is up, and it is back ``repair_s`` later; failures stop once every request has
ended. Disaggregated: a request sent to a crashed replica goes to another of its pool; a crashed prefill replica
also loses the KV it held for the decode pool (:meth:`PrefillToDecode.lost_with`), a crashed decode replica what it
had queued or decoded, and those requests start again from their prefill. A request its client cancelled
(:mod:`simulator.cluster.cancellation`) has ended: a crash does not send it again. Every request ends completed,
rejected, failed or cancelled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import simpy

from simulator.cluster.replica import Replica
from simulator.cluster.router import Router
from simulator.cluster.wakeup import Wakeup
from simulator.config.cluster import FaultConfig
from simulator.request import CANCELLED, FAILED, Request
from simulator.results.recorder import Recorder

if TYPE_CHECKING:
    from simulator.cluster.disaggregated import PrefillToDecode


class Faults:
    """Schedules the faults of a colocated cluster and re-places the requests they displace."""

    def __init__(self, env: simpy.Environment, replicas: list[Replica], router: Router, recorder: Recorder,
                 faults: list[FaultConfig], retries: int, nodes: list[frozenset[int]],
                 ranks: list[list[int]] | None = None, health_check_s: float = 0.0,
                 connect_timeout_s: float = 0.0) -> None:
        """``replicas``: every scheduler (an attention-DP replica has one per rank); ``ranks``: the schedulers of
        each replica (default: one each); ``nodes``: the nodes each replica's GPUs are on; ``health_check_s``: how
        long after a crash the router still sends requests there, each failing after ``connect_timeout_s``."""
        self.env, self.replicas, self.router, self.recorder, self.retries = env, replicas, router, recorder, retries
        self.nodes = nodes
        self.ranks = ranks or [[index] for index in range(len(replicas))]
        self.health_check_s, self.connect_timeout_s = health_check_s, connect_timeout_s
        self._down_since: dict[int, float] = {}  # crashed scheduler -> when
        self.handoff: PrefillToDecode | None = None  # disaggregated: its prefill replicas hold KV for decode
        self._pool_of = {id(replica): replicas for replica in replicas}  # where a redirected request may go
        self._mean_up_s: list[float] = []  # random failures (random_failures): mean up time per replica
        self._repair_s, self._total = 0.0, 0
        self._rng: np.random.Generator | None = None
        for replica in replicas:
            replica.on_down = lambda request, replica=replica: self._sent_to_down(request, replica)
        for fault in sorted(faults, key=lambda f: f.at_s):
            # (type: ignore[misc] here and below: mypy cannot infer a lambda whose default binds a loop variable)
            Wakeup(env, lambda _event, fault=fault: self._begin(fault)).schedule(fault.at_s)  # type: ignore[misc]

    def random_failures(self, mean_up_s: list[float], repair_s: float, rng: np.random.Generator,
                        total_requests: int) -> None:
        """Crash replica i after exponential gaps of mean ``mean_up_s[i]`` of up time, back ``repair_s`` later,
        until ``total_requests`` have ended."""
        self._mean_up_s, self._repair_s, self._rng, self._total = mean_up_s, repair_s, rng, total_requests
        for index in range(len(self.ranks)):
            self._next_failure(index)

    def _next_failure(self, index: int) -> None:
        """Replica ``index``'s next random failure."""
        if self.recorder.requests.num_rows >= self._total:
            return
        assert self._rng is not None  # random_failures set it
        gap = self._rng.exponential(self._mean_up_s[index])
        Wakeup(self.env, lambda _event: self._random_crash(index)).schedule(gap)

    def _random_crash(self, index: int) -> None:
        if self.recorder.requests.num_rows >= self._total:
            return  # every request has ended
        if self.replicas[self.ranks[index][0]].up:
            self._crash(self.ranks[index], self._repair_s, f"replica {index} failed at {self.env.now:.6g} s (mtbf)")
        Wakeup(self.env, lambda _event: self._next_failure(index)).schedule(self._repair_s)

    def targets(self, fault: FaultConfig) -> list[int]:
        """The schedulers a fault hits: every rank of its replica, or of every replica on its node."""
        if fault.replica is not None:
            return list(self.ranks[fault.replica])
        return [rank for index, nodes in enumerate(self.nodes) if fault.node in nodes for rank in self.ranks[index]]

    def _begin(self, fault: FaultConfig) -> None:
        targets = self.targets(fault)
        if fault.kind == "slow":
            for index in targets:
                replica = self.replicas[index]
                replica.set_slowdown(fault.slowdown)
                Wakeup(self.env, lambda _event, replica=replica: replica.set_slowdown(1.0)  # type: ignore[misc]
                       ).schedule(fault.duration_s)
            return
        if fault.kind == "noisy_neighbor":
            for index in targets:
                replica = self.replicas[index]
                replica.set_neighbour((fault.compute_share, fault.bandwidth_share))
                Wakeup(self.env, lambda _event, replica=replica: replica.set_neighbour(None)  # type: ignore[misc]
                       ).schedule(fault.duration_s)
            return
        where = f"replica {fault.replica}" if fault.replica is not None else f"node {fault.node}"
        up = [index for index in targets if self.replicas[index].up]  # a replica already down stays as it is
        self._crash(up, fault.duration_s, f"{where} crashed at {self.env.now:.6g} s")

    def _crash(self, indices: list[int], down_s: float, reason: str) -> None:
        """Crash these replicas together, then send their requests elsewhere (never to one of them)."""
        lost = []
        for group in {id(g): g for g in (self.replicas[i].group for i in indices) if g is not None}.values():
            group.stop()  # the attention-DP ranks' step in progress never ends
        for index in indices:
            replica = self.replicas[index]
            if replica.group is None or replica is replica.group.ranks[0]:
                self.recorder.crashes.append((self.env.now, index))
            lost += replica.crash()
            if self.handoff is not None:
                if replica.hands_off:  # a prefill replica: the KV it held for the decode pool is gone too
                    lost += self.handoff.lost_with(replica)
                else:  # a decode replica: what it had queued no longer needs its prefill replica's KV
                    for request in lost:
                        self.handoff.drop(request)
            self._down_since[index] = self.env.now
            Wakeup(self.env, lambda _event, replica=replica: self._back(replica)).schedule(down_s)  # type: ignore[misc]
        for request in lost:
            if request.status == CANCELLED:
                continue  # ended already: its replica was still to drop it
            if request.retries >= self.retries:
                self._fail(request, f"{reason} (after {request.retries} retries)")
            else:
                if self.handoff is not None:
                    self.handoff.again(request)  # from its prefill, as a new one-token request
                else:
                    request.restart()
                self._place(request, reason)

    def _back(self, replica: Replica) -> None:
        self._down_since.pop(replica.index, None)
        replica.restart()

    def _place(self, request: Request, reason: str) -> None:
        """Send a displaced request to the router's replica if it is up, else as any request sent to a replica
        that is down."""
        chosen = self.replicas[self.router.route(request)]
        if chosen.up:
            chosen.submit(request)
        else:
            self._sent_to_down(request, chosen, reason)

    def _sent_to_down(self, request: Request, replica: Replica, reason: str = "") -> None:
        """A request sent to a crashed replica: within ``health_check_s`` of the crash the router does not know,
        so the request waits ``connect_timeout_s`` for a connection that fails, then is sent again (a retry) or
        fails; after it, the router's health check sends it to the least loaded replica up at once."""
        since = self._down_since.get(replica.index)
        if since is not None and self.env.now < since + self.health_check_s:
            attempt = request.retries
            Wakeup(self.env, lambda _event: self._timed_out(request, replica, attempt)).schedule(
                self.connect_timeout_s)
            return
        self._redirect(request, reason, self._pool_of[id(replica)])

    def _timed_out(self, request: Request, replica: Replica, attempt: int) -> None:
        """The connection of ``request`` (its ``attempt``-th retry) to a crashed replica failed: it is sent again
        from the start (disaggregated: from its prefill, the KV a prefill replica held for it freed) or fails —
        unless it was dealt with meanwhile (a prefill replica's crash lost its KV, or its client cancelled it)."""
        if request.retries != attempt or request.status in (FAILED, CANCELLED):
            return
        reason = f"sent to replica {replica.index} while it was down, before its health check failed"
        if self.handoff is not None:
            self.handoff.drop(request)
        if request.retries >= self.retries:
            self._fail(request, f"{reason} (after {request.retries} retries)")
        else:
            if self.handoff is not None:
                self.handoff.again(request)
            else:
                request.restart()
            self._place(request, reason)

    def _redirect(self, request: Request, reason: str = "", pool: list[Replica] | None = None) -> None:
        """A request routed to a replica that is down: the least loaded replica up of the same pool (of the
        router's replicas by default) takes it, else it fails."""
        up = [replica for replica in (pool or self.router.replicas) if replica.up]
        if not up:
            self._fail(request, reason or "no replica is up")
            return
        min(up, key=lambda replica: (replica.outstanding, replica.index)).submit(request)

    def pools(self, pools: list[list[Replica]]) -> None:
        """Disaggregated: requests sent to a crashed replica go to another replica of its own pool."""
        for pool in pools:
            for replica in pool:
                self._pool_of[id(replica)] = pool

    def _fail(self, request: Request, reason: str) -> None:
        request.status, request.reject_reason, request.finish_s = FAILED, reason, self.env.now
        self.recorder.request_done(request)
