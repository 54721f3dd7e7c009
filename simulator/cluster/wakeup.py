"""The engine's one kind of SimPy event: a timeout with a single callback, reusable once it has fired."""

from __future__ import annotations

from collections.abc import Callable

import simpy
from simpy.events import NORMAL


class Wakeup(simpy.events.Event):
    """A timeout with one callback, scheduled by :meth:`schedule` — and, once it has fired, scheduled again by the
    same call. Replicas and feeds keep one each, so the several wakeups per simulated request allocate nothing and
    skip the generic timeout's checks. (SimPy processes an event by taking its ``callbacks``, leaving None, and
    reading ``_ok``.) Same priority as ``env.timeout``: events due at the same instant keep their scheduling order.
    """

    def __init__(self, env: simpy.Environment, callback: Callable[[simpy.events.Event], None]) -> None:
        self.env = env
        self._callback = (callback,)
        self.callbacks = None
        self._value = None
        self._ok = True

    @property
    def due(self) -> bool:
        """Scheduled and not yet fired."""
        return self.callbacks is not None

    def schedule(self, delay: float) -> None:
        """Fire after ``delay`` seconds (only when not already due)."""
        self.callbacks = self._callback
        self.env.schedule(self, NORMAL, delay)
