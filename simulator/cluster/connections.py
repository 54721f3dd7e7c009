"""The benchmark client's connection pool (``workload.client_connections``): at most ``limit`` requests on the wire.

A request that reaches the pool while every connection carries one waits there (FIFO) and goes out when one ends;
its latencies count from when its client sent it, the wait included — as a client that starts a request's clock
before it asks its HTTP session for a connection reports them. aiohttp's session, which vLLM's ``benchmark_serving``
client long used without a connector limit, keeps 100 connections, so such a client runs at most 100 requests at
once however many clients it is told to run, and the others' TTFT holds their wait. (``workload.max_concurrency``
is the other cap: the client holds a request back and starts its clock when it sends it.) The wait happens where
the request would reach the server (its network delay taken before it), and a freed connection carries the next
waiting request at once.
"""

from __future__ import annotations

from collections import deque

from simulator.cluster.feeds import Send
from simulator.request import CANCELLED, Request
from simulator.results.recorder import Recorder


class ConnectionPool:
    """Sends through at most ``limit`` connections; a request ends (finished, rejected, failed or cancelled) and
    frees its connection for the oldest waiting one that its client has not cancelled meanwhile. Register before
    the feed, so the freed connection goes to a waiting request before a client whose request ended sends its next
    one."""

    def __init__(self, limit: int, send: Send, recorder: Recorder) -> None:
        self.limit, self._send = limit, send
        self._on_wire: set[int] = set()  # request ids holding a connection
        self._waiting: deque[Request] = deque()
        recorder.on_complete.append(self._ended)

    def send(self, request: Request) -> None:
        if len(self._on_wire) < self.limit:
            self._on_wire.add(request.request_id)
            self._send(request)
        else:
            self._waiting.append(request)

    def _ended(self, request: Request) -> None:
        if request.request_id not in self._on_wire:
            return  # never sent (a session's turn rejected at the client)
        self._on_wire.discard(request.request_id)
        while self._waiting:
            waiting = self._waiting.popleft()
            if waiting.status != CANCELLED:
                self.send(waiting)
                return
