"""Autoscaling (``cluster.autoscaler``): replicas provisioned and released while the cluster serves.

The pool is built at ``max_replicas``; the first ``cluster.replicas`` are ready at time 0, the rest off. The router
and the feed see only the ready replicas (``active`` and ``entries``: lists this class edits in place, in the same
order). Every ``interval_s`` the policy (:class:`~simulator.config.cluster.AutoscalerConfig` states the rules)
turns its metric into a desired count:

- up: off replicas (lowest index first) start; each is ready a cold start later — provisioning plus its weight
  bytes over the load bandwidth (:func:`cold_start_s`) — with an empty KV pool and prefix cache;
- down (the highest desired count of the last ``cooldown_s``): starting replicas are cancelled, newest first, then
  ready ones drain, fewest outstanding first (ties: highest index) — out of the router's view at once, released
  when their last request ends. At least one replica stays ready.

Every change is an event ``(time_s, event, replica, ready, provisioned)`` — event ``start``, ``ready``, ``cancel``,
``drain`` or ``off``, after a first ``init`` row (time 0, replica −1: the starting count); provisioned counts
starting, ready and draining replicas (the ones holding GPUs) — kept in ``events``, from which the summary's
GPU-hours, cold-start and while-scaling figures are taken. The ticks stop once every generated request has ended.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import simpy

from simulator.catalog.hardware import HardwareSpec
from simulator.cluster.replica import Replica
from simulator.cluster.router import Router
from simulator.cluster.wakeup import Wakeup
from simulator.config.cluster import AutoscalerConfig
from simulator.results.recorder import Recorder

OFF, STARTING, READY, DRAINING = "off", "starting", "ready", "draining"
RATE_KINDS = ("rate", "rate_predictive")


def cold_start_s(config: AutoscalerConfig, hardware: HardwareSpec, weight_bytes_per_gpu: float,
                 gpus_per_replica: int) -> float:
    """Seconds from a scale-up decision to a ready replica: ``scale_up_delay_s`` plus the weights' load time —
    ``storage``: all the replica's weight bytes over ``load_gb_per_s`` (one node's read bandwidth); ``host``: each
    GPU's shard over its host link (``load_gb_per_s`` or the spec sheet's); ``peer``: each GPU's shard over its
    inter-node link (the same)."""
    if config.load_from == "storage":
        assert config.load_gb_per_s is not None  # the schema requires it for storage
        seconds = weight_bytes_per_gpu * gpus_per_replica / (config.load_gb_per_s * 1e9)
    else:
        spec = hardware.host_link_gb_per_s if config.load_from == "host" else hardware.node.inter_node_gb_per_s
        seconds = weight_bytes_per_gpu / ((config.load_gb_per_s or spec) * 1e9)
    return config.scale_up_delay_s + seconds


def demand_in_replicas(config: AutoscalerConfig, samples: list[tuple[float, float]], now: float,
                       lead_s: float) -> float:
    """The demand D in replicas from the window's ``(tick time, metric)`` samples: their mean / target; for
    ``rate_predictive`` with two samples or more, the least-squares line through them evaluated ``lead_s`` after
    ``now`` (when a replica started now is ready), not below 0, / target."""
    if config.kind == "rate_predictive" and len(samples) > 1:
        times, values = np.array([t - now for t, _ in samples]), np.array([v for _, v in samples])
        slope, intercept = np.polyfit(times, values, 1)
        return max(float(intercept + slope * lead_s), 0.0) / config.target
    return sum(value for _, value in samples) / len(samples) / config.target


def desired_count(config: AutoscalerConfig, demand: float, current: int) -> int:
    """Kubernetes HPA's rule: ceil(D), unless D / current is within ``tolerance`` of 1; clamped to [min, max]."""
    desired = current if abs(demand / current - 1) <= config.tolerance else math.ceil(demand - 1e-9)
    return min(max(desired, config.min_replicas), config.max_replicas)


class Autoscaler:
    """Decides the replica count every tick and carries it out (see the module docstring)."""

    def __init__(self, env: simpy.Environment, replicas: list[Replica], entries: list, config: AutoscalerConfig,
                 initial: int, cold_start: float, recorder: Recorder, total_requests: int, router: Router) -> None:
        """``replicas``: all ``max_replicas`` of the pool (``replica.index`` = position); ``entries``: what the
        feed submits to for each (the replica or its front end); ``router``: sees :attr:`active`, the ready
        replicas."""
        self.env, self.config, self.recorder, self.total = env, config, recorder, total_requests
        self.replicas, self._entries, self.cold_start = replicas, entries, cold_start
        self.active = replicas[:initial]  # the router's list
        self.entries = entries[:initial]  # the feed's list, aligned with active
        self.state = [READY if i < initial else OFF for i in range(len(replicas))]
        self._starts: dict[int, tuple[float, Wakeup]] = {}  # starting replica -> (since, the wakeup making it ready)
        self._samples: deque[tuple[float, float]] = deque()  # (tick time, metric)
        self._desired: deque[tuple[float, int]] = deque()  # (tick time, desired count): the cooldown window
        self.events: list[tuple[float, str, int, int, int]] = []
        self._arrived = 0  # requests routed since the last tick (rate policies)
        for replica in replicas[initial:]:
            replica.up = False
        for replica in replicas:
            # (a lambda binding its loop variable by default: mypy cannot infer it)
            replica.on_done = lambda request, replica=replica: self._done(replica, request)  # type: ignore[misc]
            replica.on_down = self._reroute  # a front end's late delivery to a replica released meanwhile
            replica.on_left = lambda replica=replica: self._left(replica)  # type: ignore[misc]  # (likewise)
        self.router = router
        if config.kind in RATE_KINDS:
            route = router.route

            def counted(request):
                self._arrived += 1
                return route(request)

            router.route = counted  # type: ignore[method-assign]  # this router counts what it routes
        router.replicas = self.active
        self._record("init", -1)
        self._tick_wakeup = Wakeup(env, self._tick)
        self._tick_wakeup.schedule(config.interval_s)

    # --- the policy ------------------------------------------------------------------------------------------
    def _metric(self) -> float:
        """This tick's sample: summed over the ready replicas (rate policies: requests/s since the last tick)."""
        kind = self.config.kind
        if kind in RATE_KINDS:
            rate, self._arrived = self._arrived / self.config.interval_s, 0
            return rate
        if kind == "queue_length":
            return float(sum(len(replica.scheduler.waiting) for replica in self.active))
        if kind == "kv_utilization":
            return sum(replica.kv_load for replica in self.active)
        return float(sum(replica.outstanding for replica in self.active))  # concurrency

    def _tick(self, _event) -> None:
        if self.recorder.requests.num_rows >= self.total:
            return  # every request has ended: no more ticks
        now, config = self.env.now, self.config
        self._samples.append((now, self._metric()))
        window = max(config.window_s, config.interval_s) if config.kind in RATE_KINDS else config.window_s
        while len(self._samples) > 1 and self._samples[0][0] <= now - window + 1e-9 * config.interval_s:
            self._samples.popleft()
        current = len(self.active) + len(self._starts)  # ready plus starting
        demand = demand_in_replicas(config, list(self._samples), now, self.cold_start)
        desired = desired_count(config, demand, current)
        self._desired.append((now, desired))
        while self._desired[0][0] < now - config.cooldown_s:
            self._desired.popleft()
        if desired > current:
            for index in [i for i, state in enumerate(self.state) if state == OFF][:desired - current]:
                self._start(index)
        else:
            self._scale_down(current - max(count for _, count in self._desired))
        self._tick_wakeup.schedule(config.interval_s)

    # --- carrying it out -------------------------------------------------------------------------------------
    def _record(self, event: str, index: int) -> None:
        ready = len(self.active)
        provisioned = sum(state != OFF for state in self.state)
        self.events.append((self.env.now, event, index, ready, provisioned))

    def _start(self, index: int) -> None:
        self.state[index] = STARTING
        wakeup = Wakeup(self.env, lambda _event: self._ready(index)).schedule(self.cold_start)
        self._starts[index] = (self.env.now, wakeup)
        self._record("start", index)

    def _ready(self, index: int) -> None:
        del self._starts[index]
        self.state[index] = READY
        self.replicas[index].power_on()
        self.active.append(self.replicas[index])
        self.entries.append(self._entries[index])
        self._record("ready", index)

    def _scale_down(self, excess: int) -> None:
        newest_first = sorted(self._starts, key=lambda i: (self._starts[i][0], i), reverse=True)
        for index in newest_first[:max(excess, 0)]:
            self._starts.pop(index)[1].callbacks = ()  # the cold start never completes
            self.state[index] = OFF
            self._record("cancel", index)
            excess -= 1
        while excess > 0 and len(self.active) > 1:
            position = min(range(len(self.active)),
                           key=lambda p: (self.active[p].outstanding, -self.active[p].index))
            replica = self.active.pop(position)
            del self.entries[position]
            index = replica.index
            self.state[index] = DRAINING
            self._record("drain", index)
            if not replica.outstanding:
                self._release(index)
            excess -= 1

    def _done(self, replica: Replica, request) -> None:
        self.recorder.request_done(request)
        self._left(replica)

    def _left(self, replica: Replica) -> None:
        """A request left ``replica`` (ended, or cancelled by its client): a draining replica with none left is
        released."""
        index = replica.index
        if self.state[index] == DRAINING and not replica.outstanding:
            Wakeup(self.env, lambda _event: self._release(index)).schedule(0.0)  # after its iteration's bookkeeping

    def _reroute(self, request) -> None:
        """A request that reached a released replica (it was on its way through a front end): the router's choice
        among the ready ones takes it."""
        self.entries[self.router.route(request)].submit(request)

    def _release(self, index: int) -> None:
        replica = self.replicas[index]
        if self.state[index] != DRAINING or replica.outstanding:
            return
        replica.power_off()
        self.state[index] = OFF
        self._record("off", index)
