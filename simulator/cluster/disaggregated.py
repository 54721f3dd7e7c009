"""Disaggregated prefill/decode (Splitwise, DistServe): the hand-off from a prefill replica to a decode replica.

A request first runs on a prefill replica as a one-token request: its prompt is prefilled and its first token
emitted there. Then its KV cache (the prompt's tokens, at the KV precision, all layers and heads) crosses the link of
that prefill replica — FIFO, one transfer at a time, ``latency + bytes / bandwidth`` — and is queued at the decode
replica the decode router picks, like a swapped-out request whose KV is ready: the decode scheduler admits it when
its memory allows (at no link cost there) and it decodes the remaining tokens.

With ``layer_overlap`` the transfer streams during the prefill, so after the prefill it only adds
max(transfer − prefill time, transfer / layers). The prefill replica keeps the request's KV until a decode replica
has taken it (vLLM's and Dynamo's connectors free the prefill blocks once the decode side has pulled them; SGLang's
prefill server keeps them until the decode server, which pre-allocated room, has received them), so a decode pool
that cannot admit backs up into the prefill pool's memory and queue. A request the decode replica refuses releases
it at once. Per request: ``prefill_done_s`` (the prefill replica emitted the first token), ``kv_arrived_s`` (the KV
reached the decode pool) and ``decode_admitted_s`` (a decode replica took it); ``first_token_s`` is the decode
admission (``cluster.first_token_from: decode``, how vLLM, SGLang and Dynamo stream) or the prefill's end
(``prefill``, as Splitwise and DistServe count TTFT).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import simpy

from simulator.cluster.replica import Replica
from simulator.cluster.router import Router
from simulator.cluster.wakeup import Wakeup
from simulator.config.cluster import TransferConfig
from simulator.request import FAILED, FINISHED, REJECTED, WAITING, Request
from simulator.results.recorder import Recorder

if TYPE_CHECKING:
    from simulator.results.observers import Observer


class PrefillToDecode:
    """Receives what prefill replicas finish and moves it to the decode pool."""

    def __init__(
        self, env: simpy.Environment, prefill_replicas: list[Replica], decode_replicas: list[Replica],
        decode_router: Router, transfer: TransferConfig, kv_bytes_per_token: float, num_layers: int,
        recorder: Recorder, first_token_from: str = "decode",
    ) -> None:
        self.env = env
        self.first_token_from_decode = first_token_from == "decode"
        self.decode_replicas = decode_replicas
        self._prefill_replicas = {replica.index: replica for replica in prefill_replicas}
        self._holder: dict[int, Replica] = {}  # request id -> the prefill replica that still holds its KV
        self._held: dict[int, Request] = {}  # request id -> the request of each entry of _holder
        for replica in prefill_replicas:
            replica.on_done, replica.hands_off = self, True
        for replica in decode_replicas:
            replica.scheduler.on_remote_admit = self._release
        self.router = decode_router
        self.transfer = transfer
        self.kv_bytes_per_token = kv_bytes_per_token
        self.num_layers = num_layers
        self.recorder = recorder
        self._link_free_at: dict[int, float] = {}  # prefill replica -> when its link is idle
        self.observer: Observer | None = None  # when the run is observed

    # --- faults (simulator.cluster.faults) -------------------------------------------------------------------
    def lost_with(self, prefill: Replica) -> list[Request]:
        """A prefill replica crashed: the requests whose KV it held (in transfer, or queued at a decode replica)
        lost it; returns them (taken out of any decode replica's queue or async intake; a transfer in flight
        arrives to nothing)."""
        lost = [request for request_id, holder in list(self._holder.items()) if holder is prefill
                for request in [self._held.pop(request_id)]]
        first = self.decode_replicas[0].index
        for request in lost:
            del self._holder[request.request_id]
            position = request.replica - first  # (not a decode replica's while it waits out a connection timeout)
            if request.kv_arrived_s == request.kv_arrived_s and 0 <= position < len(self.decode_replicas):
                self.decode_replicas[position].withdraw(request)  # arrived: waiting at its decode replica
        return lost

    def drop(self, request: Request) -> None:
        """A request queued at a crashed decode replica, or cancelled by its client, whose KV its prefill replica
        may still hold (in transfer or queued at a decode replica): free that KV there."""
        holder = self._holder.pop(request.request_id, None)
        if holder is not None:
            self._held.pop(request.request_id, None)
            holder.release_kv(request)

    def again(self, request: Request) -> Request:
        """A request sent again after a crash: from the start, as a fresh one-token request for the prefill pool."""
        request.output_tokens = request.decode_output_tokens
        request.restart()
        request.prefill_done_s = request.kv_arrived_s = request.decode_admitted_s = math.nan
        request.remote_kv = False
        return self.enter(request)

    def enter(self, request: Request) -> Request:
        """Make an arriving request a one-token request for its prefill replica."""
        request.decode_output_tokens = request.output_tokens
        request.output_tokens = 1
        return request

    def __call__(self, request: Request) -> None:
        """A prefill replica finished (or rejected) ``request``."""
        request.output_tokens = request.decode_output_tokens
        if request.status == REJECTED or request.output_tokens == 1:
            if request.status != REJECTED:
                request.status = FINISHED
            self.recorder.request_done(request)
            return
        now = self.env.now
        request.prefill_done_s = request.first_token_s
        self._holder[request.request_id] = self._prefill_replicas[request.replica]
        self._held[request.request_id] = request
        seconds = self.transfer.latency_ms / 1000 + request.input_tokens * self.kv_bytes_per_token / (
            self.transfer.bandwidth_gb_per_s * 1e9
        )
        if self.transfer.layer_overlap:
            prefill_time = request.first_token_s - request.first_scheduled_s
            seconds = max(seconds - prefill_time, seconds / self.num_layers)
        start = max(now, self._link_free_at.get(request.replica, -math.inf))
        self._link_free_at[request.replica] = start + seconds
        if self.observer is not None:
            self.observer.transfer(request.request_id, request.replica, start, start + seconds)
        attempt = request.retries
        Wakeup(self.env, lambda _event: self._arrive(request, attempt)).schedule(start + seconds - now)

    def _arrive(self, request: Request, attempt: int) -> None:
        if request.retries != attempt or request.request_id not in self._holder:
            return  # its prefill replica crashed meanwhile (it was sent again or failed), or its client cancelled it
        request.kv_arrived_s = self.env.now
        request.status, request.finish_s = WAITING, math.nan
        request.swapped_tokens = request.input_tokens  # KV of the prompt; the first token is not written back yet
        request.remote_kv = True
        self.decode_replicas[self.router.route(request)].submit(request)
        if request.status in (REJECTED, FAILED):  # refused, or no decode replica up (simulator.cluster.faults)
            self._release(request)

    def _release(self, request: Request) -> None:
        """The decode side took (or refused) ``request``: its prefill replica frees the KV; a taken request's first
        token reaches the client now when the decode replica streams it."""
        self._held.pop(request.request_id, None)
        self._holder.pop(request.request_id).release_kv(request)
        if self.first_token_from_decode and request.status not in (REJECTED, FAILED):
            request.first_token_s = request.last_token_s = self.env.now
