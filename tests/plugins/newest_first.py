"""A batching policy written as a built-in one is, in one module (as ``simulator/schedulers/newest_first.py`` would
be): its config class beside its class, registered together. A fixture of :mod:`tests.plugins.test_recipes`.

Continuous batching that admits the newest waiting request first: an arrival overtakes up to ``max_jump`` of the
requests waiting (never a preempted one, which the base class puts at the head of the queue).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from simulator.config.engine import SchedulerBase
from simulator.request import Request
from simulator.schedulers.base import SCHEDULERS
from simulator.schedulers.continuous import ContinuousScheduler


class NewestFirstConfig(SchedulerBase):
    """Continuous batching, newest request first."""

    kind: Literal["newest_first"]
    max_jump: int = Field(default=1_000_000, ge=0, description="waiting requests an arrival may overtake")


@SCHEDULERS.register("newest_first", config=NewestFirstConfig)
class NewestFirstScheduler(ContinuousScheduler):
    def enqueue(self, request: Request) -> None:
        assert isinstance(self.config, NewestFirstConfig)  # picked by its kind
        waiting, position = self.waiting, len(self.waiting)
        while position > 0 and len(waiting) - position < self.config.max_jump and (
            waiting[position - 1].preemptions == 0
        ):
            position -= 1
        waiting.insert(position, request)
