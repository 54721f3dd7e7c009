"""Feeds: what puts requests into the cluster.

- :class:`ArrivalFeed` (open loop): every request at its arrival time plus its client-side delay (one-way network
  latency and tokenization, ``cost_model.network_ms`` + ``tokenize_us_per_token`` × prompt tokens), in the order
  they reach the server. One SimPy timeout per distinct delivery instant; requests delivered at the same instant are
  all queued before any replica starts its next iteration. The workload arrays become Python numbers a chunk at a
  time.
- :class:`CappedArrivalFeed`: the same arrivals with at most ``workload.max_concurrency`` requests outstanding; a
  request due while the cap is reached waits at the client (FIFO) and is sent — its ``arrival_s`` — when one ends.
- :class:`ClosedLoopFeed`: ``users`` clients, each sending its next request a think time after its previous one
  ended (finished, rejected, failed or cancelled); lengths are taken from the workload in send order.
- :class:`SessionFeed`: multi-turn sessions: a session's first turn at its start, each later turn a think time
  after the previous one finished (all of its sub-requests, when it fanned out); a turn that did not complete
  (rejected, failed or cancelled) rejects the rest of its session (with the reason).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import simpy

from simulator.cluster.wakeup import Wakeup
from simulator.config.workload import ClosedLoopArrival
from simulator.request import FINISHED, REJECTED, Request
from simulator.results.recorder import Recorder

Send = Callable[[Request], None]  # hands a request to the cluster: routes it to a replica of the entry pool


class RequestFactory:
    """Builds request ``i`` of a workload (lengths, prefix, class, priority and adapter), prepared for the entry
    pool."""

    def __init__(self, workload, priorities: list[int], enter=None, adapters: np.ndarray | None = None,
                 watch: Send | None = None) -> None:
        """``adapters``: each request's LoRA adapter (−1: none), or None without ``lora``; ``watch``: told of each
        request sent (client cancellations arm its timer)."""
        self.workload = workload
        self.total = len(workload.input_tokens)
        self._priorities = priorities
        self._enter = enter  # disaggregated: turns the request into a one-token prefill request
        self._adapters = adapters.tolist() if adapters is not None else None
        self._images = workload.images  # each request's images (a tuple of their tokens), or None without images
        self._watch = watch

    def columns(self, index: np.ndarray) -> tuple[list, list, list | None, list | None]:
        """Python lists of (inputs, outputs, prefixes or None, classes or None) for these request indices."""
        w = self.workload
        return (
            w.input_tokens[index].tolist(), w.output_tokens[index].tolist(),
            w.prefixes[index].tolist() if w.prefixes is not None else None,
            w.classes[index].tolist() if w.classes is not None else None,
        )

    def make(self, request_id: int, arrival_s: float, input_tokens: int, output_tokens: int, prefix, class_id,
             sent: bool = True):
        """The request; ``sent=False``: one recorded without reaching the cluster (not prepared for its pool)."""
        request = Request(request_id, arrival_s, input_tokens, output_tokens, prefix)
        if class_id is not None:
            request.class_id = class_id
            request.priority = self._priorities[class_id]
        if self._adapters is not None:
            request.adapter = self._adapters[request_id]
        if self._images is not None:
            request.images = self._images[request_id]
        if self._enter is not None and sent:
            self._enter(request)
        if self._watch is not None and sent:
            self._watch(request)
        return request


class ArrivalFeed:
    CHUNK = 4096

    def __init__(self, env: simpy.Environment, factory: RequestFactory, delay_s: np.ndarray, send: Send) -> None:
        self.env, self.factory, self.send = env, factory, send
        due = factory.workload.arrival_s + delay_s
        # requests reach the server in due order (tokenization can reorder them); ties keep arrival order
        self._order = np.argsort(due, kind="stable") if np.any(np.diff(due) < 0) else None
        self._due_all = due if self._order is None else due[self._order]
        self._wakeup = Wakeup(env, self._deliver)  # one delivery instant at a time
        self._offset = 0  # index of the first request of the current chunk
        self._next = 0  # index within the chunk
        self._load_chunk()
        if self._due:
            self._schedule(env.now)

    def _load_chunk(self) -> None:
        start, stop = self._offset, min(self._offset + self.CHUNK, self.factory.total)
        index = np.arange(start, stop) if self._order is None else self._order[start:stop]
        self._ids = index.tolist()
        self._arrivals = self.factory.workload.arrival_s[index].tolist()
        self._due = self._due_all[start:stop].tolist()
        self._inputs, self._outputs, self._prefixes, self._classes = self.factory.columns(index)

    def _schedule(self, now: float) -> None:
        self._wakeup.schedule(max(self._due[self._next] - now, 0.0))

    def _deliver(self, wakeup: Wakeup) -> None:
        now, arrive = wakeup.at, self._arrive
        while True:
            due, i = self._due, self._next
            while i < len(due) and due[i] <= now:
                arrive(self._ids[i], self._arrivals[i], self._inputs[i], self._outputs[i],
                       self._prefixes[i] if self._prefixes is not None else None,
                       self._classes[i] if self._classes is not None else None)
                i += 1
            self._next = i
            if i < len(due):
                break
            self._offset += len(due)
            if self._offset >= self.factory.total:
                return
            self._next = 0
            self._load_chunk()
        self._schedule(now)

    def _arrive(self, request_id: int, sent_s: float, input_tokens: int, output_tokens: int, prefix, class_id) -> None:
        """A request reaches the server, sent by its client at ``sent_s``."""
        self.send(self.factory.make(request_id, sent_s, input_tokens, output_tokens, prefix, class_id))


class CappedArrivalFeed(ArrivalFeed):
    """:class:`ArrivalFeed` with at most ``cap`` requests outstanding (sent and not yet finished or rejected); the cap
    is checked when a request would reach the server (with a network delay, that much after its client sent it)."""

    def __init__(self, env: simpy.Environment, factory: RequestFactory, delay_s: np.ndarray, send: Send,
                 recorder: Recorder, cap: int) -> None:
        self.cap, self.outstanding = cap, 0
        self._waiting: deque[tuple] = deque()  # (id, inputs, outputs, prefix, class) due while at the cap
        self._delays = delay_s
        recorder.on_complete.append(self._ended)
        super().__init__(env, factory, delay_s, send)

    def _arrive(self, request_id: int, sent_s: float, *lengths_prefix_class) -> None:
        if self.outstanding < self.cap:
            self.outstanding += 1
            super()._arrive(request_id, sent_s, *lengths_prefix_class)
        else:
            self._waiting.append((request_id, *lengths_prefix_class))

    def _ended(self, request: Request) -> None:
        if not self._waiting:
            self.outstanding -= 1
            return
        request_id, *rest = self._waiting.popleft()  # the slot passes to the oldest waiting request
        sent_s = self.env.now
        Wakeup(self.env, lambda _event: ArrivalFeed._arrive(self, request_id, sent_s, *rest)).schedule(
            float(self._delays[request_id]))


class ClosedLoopFeed:
    """``users`` clients in a loop: send, wait for the end, think (exponential or fixed, mean ``think_ms``), send.
    Each user's first request goes out after one think time (user u also waits u/users × ``ramp_s``). Stops after
    the workload's ``num_requests``."""

    def __init__(
        self, env: simpy.Environment, factory: RequestFactory, delay_s: np.ndarray, send: Send, recorder: Recorder,
        config: ClosedLoopArrival, rng: np.random.Generator,
    ) -> None:
        self.env, self.factory, self.send = env, factory, send
        self.config, self.rng = config, rng
        self._delay = delay_s.tolist()  # client-side delay of each request (network, tokenization)
        self._sent = 0
        self._user_of: dict[int, int] = {}
        recorder.on_complete.append(self._ended)
        users = min(config.users, factory.total)
        for user in range(users):
            self._after_think(user, user / config.users * config.ramp_s)

    def _think_s(self) -> float:
        mean = self.config.think_ms / 1000
        if mean == 0:
            return 0.0
        return float(self.rng.exponential(mean)) if self.config.think == "exponential" else mean

    def _after_think(self, user: int, start_s: float = 0.0) -> None:
        if self._sent >= self.factory.total:
            return
        request_id = self._sent
        self._sent += 1
        send_at = self.env.now + start_s + self._think_s()
        Wakeup(self.env, lambda _event: self._deliver(user, request_id, send_at)).schedule(
            send_at - self.env.now + self._delay[request_id])

    def _deliver(self, user: int, request_id: int, sent_s: float) -> None:
        inputs, outputs, prefixes, classes = self.factory.columns(np.array([request_id]))
        request = self.factory.make(request_id, sent_s, inputs[0], outputs[0],
                                    prefixes[0] if prefixes else None, classes[0] if classes else None)
        self._user_of[request_id] = user
        self.send(request)

    def _ended(self, request: Request) -> None:
        user = self._user_of.pop(request.request_id, None)
        if user is not None:
            self._after_think(user)


class SessionFeed:
    """Multi-turn sessions (:mod:`simulator.workload.sessions`): every session's first turn at its start time (plus
    its client-side delay), each later turn a think time (``think_ms``: exponential with that mean, or fixed) after
    the previous turn finished — after the last of its sub-requests, when it fanned out (all of a turn's
    sub-requests are sent together). A turn with a sub-request that did not complete ends its session: the later turns
    are rejected at once, with the reason, and so on to the session's end: every generated turn is accounted for."""

    def __init__(
        self, env: simpy.Environment, factory: RequestFactory, delay_s: np.ndarray, send: Send, recorder: Recorder,
        think_ms: float, rng: np.random.Generator, fixed_think: bool = False,
    ) -> None:
        self.env, self.factory, self.send, self.recorder = env, factory, send, recorder
        workload = factory.workload
        self._sessions, self._turns = workload.sessions.tolist(), workload.turns.tolist()
        # a turn's requests are consecutive: [first, end) of each request's turn
        change = np.flatnonzero(np.diff(workload.sessions) | np.diff(workload.turns)) + 1
        bounds = np.concatenate([[0], change, [workload.sessions.size]])
        sizes = np.diff(bounds)
        self._first = np.repeat(bounds[:-1], sizes).tolist()
        self._end = np.repeat(bounds[1:], sizes).tolist()
        self._left: dict[int, int] = {}  # first request of a turn in flight -> its requests not ended yet
        self._broken: dict[int, str] = {}  # turns (by first request) with a rejected or failed request: its status
        self._delay = delay_s.tolist()
        self._think_s, self.rng, self._fixed = think_ms / 1000, rng, fixed_think
        recorder.on_complete.append(self._ended)
        self._firsts = np.flatnonzero(workload.turns == 0).tolist()
        self._firsts = [i for i in self._firsts if self._first[i] == i]  # each session's first turn, in start order
        self._starts = workload.arrival_s[self._firsts].tolist()
        self._next = 0
        self._wakeup = Wakeup(env, self._start_sessions)
        if self._firsts:
            self._wakeup.schedule(self._starts[0] + self._delay[self._firsts[0]])

    def _start_sessions(self, wakeup: Wakeup) -> None:
        """Send every first turn due by now, then wait for the next one."""
        now, firsts = wakeup.at, self._firsts
        while self._next < len(firsts) and self._starts[self._next] + self._delay[firsts[self._next]] <= now:
            self._send_turn(firsts[self._next], self._starts[self._next])
            self._next += 1
        if self._next < len(firsts):
            due = self._starts[self._next] + self._delay[firsts[self._next]]
            self._wakeup.schedule(due - now)

    def _request(self, request_id: int, sent_s: float, sent: bool = True) -> Request:
        inputs, outputs, prefixes, classes = self.factory.columns(np.array([request_id]))
        request = self.factory.make(request_id, sent_s, inputs[0], outputs[0], prefixes[0] if prefixes else None,
                                    classes[0] if classes else None, sent)
        request.session, request.turn = self._sessions[request_id], self._turns[request_id]
        return request

    def _send_turn(self, first: int, sent_s: float) -> None:
        """Send every request of the turn starting at ``first``."""
        self._left[first] = self._end[first] - first
        for request_id in range(first, self._end[first]):
            self.send(self._request(request_id, sent_s))

    def _ended(self, request: Request) -> None:
        first = self._first[request.request_id]
        if request.status != FINISHED:
            self._broken.setdefault(first, request.status)
        self._left[first] -= 1
        if self._left[first]:
            return  # a sibling still runs
        del self._left[first]
        following = self._end[first]
        if following >= len(self._sessions) or self._sessions[following] != request.session:
            self._broken.pop(first, None)
            return  # the session's last turn
        now = self.env.now
        if first in self._broken:  # the session ends here: its next turn is rejected, which rejects the next, ...
            what = "was" if self._end[first] - first == 1 else "had a sub-request"
            reason = f"turn {request.turn + 1} of its session {what} {self._broken.pop(first)}"
            self._left[following] = self._end[following] - following
            for request_id in range(following, self._end[following]):
                skipped = self._request(request_id, now, sent=False)
                skipped.status, skipped.reject_reason = REJECTED, reason
                self.recorder.request_done(skipped)
            return
        think = self._think_s if self._fixed else (float(self.rng.exponential(self._think_s)) if self._think_s
                                                   else 0.0)
        sent_s = now + think
        Wakeup(self.env, lambda _event: self._send_turn(following, sent_s)).schedule(
            sent_s - now + self._delay[following])
