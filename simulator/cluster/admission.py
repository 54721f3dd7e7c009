"""Admission control at the cluster's front door (``cluster.admission``), before a request reaches a replica.

- :class:`TokenBucket` (``kind: token_bucket``), before routing. The bucket holds at most b = ``burst`` tokens and
  starts full; between arrivals it refills at r = ``rate`` tokens per second. A request arriving at t finds

      level(t) = min(b, level(t_prev) + r · (t − t_prev))

  and is admitted, taking its cost c (1, or with ``unit: tokens`` its prompt plus the output tokens it asked for —
  a client's later stop, ``workload.cancel.after_tokens``, is not known at the door), when level(t) ≥ c (to a
  relative 1e-9, so that the floating-point sum of refills never refuses a request the exact bucket admits);
  otherwise it is rejected: ``admission: token bucket empty``. Arrivals at a rate λ > r for T seconds are admitted
  b + r·T times, ± 1 (Envoy's local rate limit and the classic token-bucket policer).
- :class:`SLOGate` (``kind: slo``), after routing, on the replica the router chose. The request's predicted TTFT is

      TTFT̂ = (now − arrival_s) + (Q + P) · s

  with Q the prompt tokens of the requests waiting there that were never scheduled (a running sum the scheduler
  keeps, so the prediction is O(1) per arrival), P its own prompt tokens and s the replica's seconds per prompt
  token: 1 / ``prefill_tokens_per_s`` if given, else the cost model's time for one iteration of B prompt tokens
  over B (B = the replica's ``max_num_batched_tokens``), times the replica's current slowdown. It is admitted when
  TTFT̂ ≤ (1 − ``margin``) × its TTFT bound, else rejected with the prediction in the reason. The estimate counts
  every waiting request as ahead of it (FCFS; with priority classes it overestimates for the higher tiers) and
  leaves out the prefills in progress, the decodes that share the iterations, prefix-cache hits and, when
  disaggregated, the KV transfer: it bounds what FCFS queueing alone costs, as a gateway's SLO-aware admission
  estimates from queue depth.

A rejected request is recorded as any rejection is (status ``rejected``, the reason in the request table); the
scheduler's own ``max_queue_len`` and ``max_queue_delay_ms`` still bound each replica's queue behind it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import simpy

from simulator.cluster.replica import Replica
from simulator.cluster.router import Router
from simulator.config.cluster import SLOAdmission, TokenBucketAdmission
from simulator.config.experiment import ExperimentConfig
from simulator.config.slo import SLOConfig
from simulator.cost.base import IterationShape
from simulator.request import REJECTED, Request
from simulator.results.recorder import Recorder

TOKEN_BUCKET_EMPTY = "admission: token bucket empty"


class TokenBucket:
    """``cluster.admission: {kind: token_bucket}`` (module docstring)."""

    def __init__(self, config: TokenBucketAdmission) -> None:
        self.rate, self.burst = config.rate, config.burst
        self.per_token = config.unit == "tokens"
        self._level, self._at = config.burst, 0.0  # tokens in the bucket at time _at

    def admits(self, request: Request, now: float) -> bool:
        """Whether ``request``, arriving at ``now`` (not before the last arrival), gets its tokens; takes them."""
        level = min(self.burst, self._level + (now - self._at) * self.rate)
        self._at = now
        cost = request.input_tokens + request.asked_output_tokens if self.per_token else 1
        if level >= cost * (1 - 1e-9):
            self._level = max(level - cost, 0.0)
            return True
        self._level = level
        return False


class SLOGate:
    """``cluster.admission: {kind: slo}`` (module docstring): TTFT̂ against each request's bound."""

    def __init__(self, config: SLOAdmission, bounds_s: list[float]) -> None:
        """``bounds_s[k]``: the TTFT bound, in seconds, of the requests of class k (one entry without classes)."""
        self.config = config
        self._limits = [(1 - config.margin) * bound for bound in bounds_s]
        self._per_token: dict[int, float] = {}  # id(cost model) -> seconds per prompt token, computed once

    def seconds_per_token(self, replica: Replica) -> float:
        """s for ``replica``, before its slowdown."""
        if self.config.prefill_tokens_per_s is not None:
            return 1 / self.config.prefill_tokens_per_s
        key = id(replica.cost)
        seconds = self._per_token.get(key)
        if seconds is None:
            budget = replica.scheduler.max_num_batched_tokens
            seconds = self._per_token[key] = replica.cost.iteration_time(IterationShape(((budget, 0),))) / budget
        return seconds

    def reason(self, replica: Replica, request: Request, now: float) -> str:
        """Why ``request`` is refused at ``replica`` (the router's choice) at ``now``; '' when admitted."""
        predicted = now - request.arrival_s + (replica.queued_prompt_tokens + request.input_tokens) * (
            self.seconds_per_token(replica) * replica.slowdown)
        limit = self._limits[request.class_id]
        if predicted <= limit:
            return ""
        return f"admission: predicted TTFT {predicted * 1000:.0f} ms exceeds {limit * 1000:g} ms"


class FrontDoor:
    """Hands each arriving request on through admission control: the token bucket before routing, the SLO gate
    on the router's choice; a refused request is recorded as rejected with the reason."""

    def __init__(self, env: simpy.Environment, router: Router, entries: Sequence, recorder: Recorder,
                 bucket: TokenBucket | None, gate: SLOGate | None) -> None:
        """``entries``: what the router's choice is submitted to (its replicas, or their front ends; a list an
        autoscaler edits in place)."""
        self.env, self.router, self.entries, self.recorder = env, router, entries, recorder
        self.bucket, self.gate = bucket, gate

    @classmethod
    def build(cls, config: ExperimentConfig, env: simpy.Environment, router: Router, entries: Sequence,
              recorder: Recorder) -> FrontDoor | None:
        """The front door of ``config.cluster.admission`` (None without one)."""
        admission = config.cluster.admission
        if admission is None:
            return None
        if admission.kind == "token_bucket":
            return cls(env, router, entries, recorder, TokenBucket(admission), None)
        slos = [c.slo for c in config.workload.classes or []] or [None]  # a run without classes: one, class 0

        def bound_s(own: SLOConfig | None) -> float:
            ms = admission.ttft_ms or (own.ttft_ms if own is not None else None) or config.slo.ttft_ms
            assert ms is not None  # the schema requires a bound for every request
            return ms / 1000

        gate = SLOGate(admission, [bound_s(slo) for slo in slos])
        return cls(env, router, entries, recorder, None, gate)

    def send(self, request: Request) -> None:
        now = self.env.now
        if self.bucket is not None and not self.bucket.admits(request, now):
            self._refuse(request, TOKEN_BUCKET_EMPTY)
            return
        index = self.router.route(request)
        if self.gate is not None:
            replica = cast(Replica, self.router.replicas[index])  # the routers of a run route over its replicas
            reason = self.gate.reason(replica, request, now)
            if reason:
                request.replica = replica.index  # where it would have queued
                self._refuse(request, reason)
                return
        self.entries[index].submit(request)

    def _refuse(self, request: Request, reason: str) -> None:
        request.status, request.reject_reason = REJECTED, reason
        self.recorder.request_done(request)
