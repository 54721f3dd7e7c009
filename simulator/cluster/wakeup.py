"""The engine's one kind of SimPy event: a timeout with a single callback."""

from __future__ import annotations

from collections.abc import Callable

import simpy
from simpy.events import NORMAL


class Wakeup(simpy.events.Event):
    """``env.timeout(delay)`` with ``callback`` attached, built without the generic path's checks and bound-class
    indirection (several per simulated request). Same priority as a timeout, so events due
    at the same instant keep their scheduling order."""

    def __init__(self, env: simpy.Environment, delay: float, callback: Callable[[simpy.events.Event], None]) -> None:
        self.env = env
        self.callbacks = [callback]
        self._value = None
        self._ok = True
        env.schedule(self, NORMAL, delay)
