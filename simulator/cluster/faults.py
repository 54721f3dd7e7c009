"""Faults (``cluster.faults``): replicas that crash or slow down while the cluster serves.

A ``crash`` at ``at_s`` stops its replica: the iteration in progress is lost, and so is its KV pool. Every request
queued or running there is sent again from the start (:meth:`~simulator.request.Request.restart`) to a replica
that is up — the router's choice, or if that one is down too the least loaded one up — at most
``cluster.fault_retries`` times; after that, or when no replica is up, it fails with the reason (status
``failed``). The replica is back, empty, ``duration_s`` later (its restart and cold start). A request the router
sends to a replica that is down goes to the least loaded replica up (a router's health check), without counting
a retry. A ``slow`` fault makes its replica run
``slowdown`` times slower for ``duration_s`` (from the next iteration boundary). Every request ends completed,
rejected or failed.
"""

from __future__ import annotations

import simpy

from simulator.cluster.replica import Replica
from simulator.cluster.router import Router
from simulator.cluster.wakeup import Wakeup
from simulator.config.schema import FaultConfig
from simulator.recorder import Recorder
from simulator.request import FAILED, Request


class Faults:
    """Schedules the faults of a colocated cluster and re-places the requests they displace."""

    def __init__(self, env: simpy.Environment, replicas: list[Replica], router: Router, recorder: Recorder,
                 faults: list[FaultConfig], retries: int) -> None:
        self.env, self.replicas, self.router, self.recorder, self.retries = env, replicas, router, recorder, retries
        for replica in replicas:
            replica.on_down = self._redirect
        for fault in sorted(faults, key=lambda f: f.at_s):
            Wakeup(env, lambda _event, fault=fault: self._begin(fault)).schedule(fault.at_s)

    def _begin(self, fault: FaultConfig) -> None:
        replica = self.replicas[fault.replica]
        if fault.kind == "slow":
            replica.set_slowdown(fault.slowdown)
            Wakeup(self.env, lambda _event: replica.set_slowdown(1.0)).schedule(fault.duration_s)
            return
        if not replica.up:
            return  # already down
        reason = f"replica {fault.replica} crashed at {self.env.now:.6g} s"
        for request in replica.crash():
            if request.retries >= self.retries:
                self._fail(request, f"{reason} (after {request.retries} retries)")
            else:
                request.restart()
                self._place(request, reason)
        Wakeup(self.env, lambda _event: replica.restart()).schedule(fault.duration_s)

    def _place(self, request: Request, reason: str) -> None:
        """Send a displaced request to the router's replica if it is up, else to the least loaded replica up; fail
        it when none is."""
        chosen = self.replicas[self.router.route(request)]
        if chosen.up:
            chosen.submit(request)
        else:
            self._redirect(request, reason)

    def _redirect(self, request: Request, reason: str = "") -> None:
        """A request routed to a replica that is down: the least loaded replica up takes it, else it fails."""
        up = [replica for replica in self.replicas if replica.up]
        if not up:
            self._fail(request, reason or "no replica is up")
            return
        min(up, key=lambda replica: (replica.outstanding, replica.index)).submit(request)

    def _fail(self, request: Request, reason: str) -> None:
        request.status, request.reject_reason, request.finish_s = FAILED, reason, self.env.now
        self.recorder.request_done(request)
