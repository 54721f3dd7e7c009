"""Clients that give up (``workload.cancel``, ``workload.client_timeout_s``): one timer per cancellable request.

When a request is sent (:class:`~simulator.cluster.feeds.RequestFactory`), a request with a deadline gets one
wakeup at ``arrival_s + deadline``; no polling. If the request has ended by then (finished, rejected, failed), the
wakeup does nothing. Otherwise its client cancels it there and then:

- it ends with status ``cancelled`` and its reason (``client cancel`` / ``client timeout``) at that instant: its row
  is written (``finish_s`` = the cancellation), and whatever waits for its end hears of it now — a closed-loop
  client sends its next request after its think time, as after a completion; a connection or concurrency slot
  frees; a session's later turns are rejected, as after any turn that did not complete;
- the cluster lets go of it (:meth:`~simulator.cluster.replica.Replica.withdraw`): out of its replica's queue at once,
  or out of the batch at the end of the iteration in progress, its KV freed (prefix-cache references released)
  and its output tokens so far counted as wasted (``cancelled_output_tokens``); disaggregated, the copy of its KV
  its prefill replica still holds (in transfer, or queued at a decode replica) is freed at once;
- one on its way (at the client's connection pool, in a front end, in a KV transfer, waiting out a connection
  timeout to a crashed replica) is dropped where it arrives next: replicas take no cancelled request and faults
  retry none.

A client that stops after N output tokens (``workload.cancel.after_tokens``) sets no timer: the server would have
generated up to N tokens when the client's cancellation reaches it, so its request runs as one of N output tokens
(the same work, the same iterations) and, when its N-th token is emitted, ends there as cancelled, reason
``client stop``, its KV freed as at any completion and its N tokens counted in ``cancelled_output_tokens``; its row
states the output it asked for (``Request.asked_output_tokens``), and a token bucket at the gateway charges it
that. The engine does not know the cut ahead: nothing it decides (routing, batching) reads more than a request's
remaining output — but a contiguous cache's ``reserve: requested`` and ``capacity_policy: guaranteed_no_evict``,
which reserve a request's whole length, reserve N tokens, not what it asked for. A request of at most N output
tokens completes; one whose ``after_s`` or timeout comes first is cancelled then, as above. The work stays
proportional to the events: one cut per request when it is sent.

Every generated request still ends exactly once: completed, rejected, failed or cancelled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import simpy

from simulator.cluster.replica import Replica
from simulator.cluster.wakeup import Wakeup
from simulator.request import CANCELLED, FINISHED, Request
from simulator.results.recorder import Recorder
from simulator.workload.cancellation import CLIENT_CANCEL, CLIENT_STOP, CLIENT_TIMEOUT

if TYPE_CHECKING:
    from simulator.cluster.disaggregated import PrefillToDecode


class ClientCancellations:
    """Arms each cancellable request's timer and carries the cancellation out."""

    def __init__(self, env: simpy.Environment, replicas: list[Replica], recorder: Recorder, delays: np.ndarray,
                 chosen: np.ndarray, stops: np.ndarray | None = None, handoff: PrefillToDecode | None = None) -> None:
        """``replicas``: every replica, by index; ``delays[i]``: seconds from request i's send to its cancellation
        (``inf``: none); ``chosen[i]``: a chosen cancellation (else a timeout); ``stops[i]``: the output tokens
        after which request i's client stops it (0: none); ``handoff``: a disaggregated cluster's
        prefill-to-decode hand-off."""
        self.env, self.replicas, self.recorder, self.handoff = env, replicas, recorder, handoff
        self._delays = delays.tolist()
        self._chosen = chosen.tolist()
        self._stops = stops.tolist() if stops is not None and stops.any() else None
        self._live: set[int] = set()  # ids of the requests with a timer set that have not ended
        recorder.on_complete.append(self._ended)
        if self._stops is not None:
            recorder.on_end.append(self._stopped)

    def watch(self, request: Request) -> None:
        """``request`` was just sent: cut its output at its client's stop and set its timer, if its client has
        them."""
        if self._stops is not None:
            self._cut(request, self._stops[request.request_id])
        delay = self._delays[request.request_id]
        if delay == float("inf"):
            return
        self._live.add(request.request_id)
        Wakeup(self.env, lambda _event: self._cancel(request)).schedule(
            max(request.arrival_s + delay - self.env.now, 0.0))

    def _ended(self, request: Request) -> None:
        self._live.discard(request.request_id)

    def _cut(self, request: Request, stop: int) -> None:
        """Make ``request`` one of ``stop`` output tokens where it asked for more (disaggregated: the output its
        decode replica runs; its prefill replica's one token stays)."""
        if not 0 < stop < request.asked_output_tokens:
            return
        if request.output_tokens == request.asked_output_tokens:
            request.output_tokens = stop
        else:
            request.decode_output_tokens = stop

    def _stopped(self, request: Request) -> None:
        """``request`` is about to be recorded: one cut at its client's stop that ran to it ends cancelled there,
        its ``stop`` tokens wasted (its row states the output it asked for, as every row does)."""
        assert self._stops is not None  # registered only with stops
        stop = self._stops[request.request_id]
        if request.status == FINISHED and 0 < stop < request.asked_output_tokens:
            request.status, request.reject_reason = CANCELLED, CLIENT_STOP
            self.recorder.cancelled_output_tokens += stop

    def _cancel(self, request: Request) -> None:
        if request.request_id not in self._live:
            return  # it ended first
        if self.handoff is not None:
            self.handoff.drop(request)  # the KV its prefill replica holds for it (in transfer or queued)
        if request.replica >= 0:
            self.replicas[request.replica].withdraw(request)
        request.status, request.finish_s = CANCELLED, self.env.now
        request.reject_reason = CLIENT_CANCEL if self._chosen[request.request_id] else CLIENT_TIMEOUT
        self.recorder.request_done(request)
