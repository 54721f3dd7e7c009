"""The serving framework's front end: the API-server process between the clients and a replica's engine.

It takes requests one at a time — parsing the HTTP request, tokenizing the prompt, handing it to the engine — so
each request costs it ``per_request_s + per_prompt_token_s × prompt tokens`` of serial work (a FIFO single server):

    handed to the engine at  h_i = max(a_i, h_{i−1}) + s_i          (a_i: when it reached the server)

A burst of requests that arrive together (closed-loop clients whose requests finished in the same iteration) reaches
the engine spread out by the service times, as it does in a real server; at low load it adds s_i to TTFT. With no
front-end cost the replica is called directly and this class is not used.
"""

from __future__ import annotations

from collections import deque

import simpy

from simulator.cluster.wakeup import Wakeup
from simulator.request import Request


class FrontEnd:
    """A FIFO stage in front of ``replica`` (anything with ``submit(request)``)."""

    def __init__(self, env: simpy.Environment, replica, per_request_s: float, per_prompt_token_s: float) -> None:
        self.env, self.replica = env, replica
        self.per_request_s, self.per_prompt_token_s = per_request_s, per_prompt_token_s
        self._free_at = 0.0  # when the front end finishes the last request it has taken
        self._queue: deque[tuple[float, Request]] = deque()  # (handed to the engine at, request)
        self._wakeup = Wakeup(env, self._release)

    def submit(self, request: Request) -> None:
        now = self.env.now
        self._free_at = max(now, self._free_at) + self.per_request_s + self.per_prompt_token_s * request.input_tokens
        self._queue.append((self._free_at, request))
        if len(self._queue) == 1:
            self._wakeup = self._wakeup.schedule(self._free_at - now)

    def _release(self, wakeup: Wakeup) -> None:
        queue, now = self._queue, wakeup.at
        while queue and queue[0][0] <= now:
            self.replica.submit(queue.popleft()[1])
        if queue:
            self._wakeup = self._wakeup.schedule(queue[0][0] - now)
