"""The engine's SimPy plumbing: its one kind of event (a timeout with a single callback, reusable once it has
fired) and the loop that processes events."""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush

import simpy
from simpy.events import NORMAL


class Wakeup(simpy.events.Event):
    """A timeout with one callback, scheduled by :meth:`schedule` — and, once it has fired, scheduled again by the
    same call. Replicas and feeds keep one each, so the several wakeups per simulated request mostly allocate nothing
    and skip the generic timeout's checks. (SimPy processes an event by taking its ``callbacks``, leaving None, and
    reading ``_ok``.) Same priority as ``env.timeout``: events due at the same instant keep their scheduling order.
    """

    # SimPy annotates ``callbacks`` as a list, yet sets it to None once the event is processed (as this class does);
    # here it is the one callback while scheduled, () when disarmed and None when fired or never scheduled
    callbacks: tuple[Callable[[Wakeup], None], ...] | None  # type: ignore[assignment]  # wider than SimPy's list

    def __init__(self, env: simpy.Environment, callback: Callable[[Wakeup], None]) -> None:
        self.env = env
        self.at = env.now  # when it fires (last) — the clock its callback sees, cheaper to read than ``env.now``
        self._callback = (callback,)
        self.callbacks = None
        self._value = None
        self._ok = True

    def schedule(self, delay: float) -> Wakeup:
        """Fire after ``delay`` seconds, and return self — or, if this wakeup is still due (a plan changed), disarm
        it and return a new one with the same callback, scheduled instead. A queue entry cannot be withdrawn, so a
        disarmed wakeup stays queued with no callbacks: when it comes up, nothing is called."""
        if self.callbacks is None:
            wakeup = self
        else:
            self.callbacks = ()
            wakeup = Wakeup(self.env, self._callback[0])
        wakeup.callbacks = wakeup._callback
        env = self.env
        wakeup.at = at = env._now + delay
        heappush(env._queue, (at, NORMAL, next(env._eid), wakeup))  # what env.schedule does
        return wakeup


def run_all(env: simpy.Environment) -> None:
    """``env.run()`` until no event is left, with SimPy's ``Environment.step`` inlined (one Python call less per
    event, several million per large run): pop the earliest event, set the clock, call the event's callbacks, and
    fail like SimPy if a failed event was not defused."""
    queue = env._queue
    while queue:
        env._now, _, _, event = heappop(queue)
        callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]  # as SimPy's own step does
        for callback in callbacks:
            callback(event)
        if not event._ok and not hasattr(event, "_defused"):
            error = type(event._value)(*event._value.args)
            error.__cause__ = event._value
            raise error
