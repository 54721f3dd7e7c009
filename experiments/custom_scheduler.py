"""A user's own batching policy, for ``scheduler: {kind: custom_scheduler.py:ShortestPromptFirst}``.

A scheduler subclasses :class:`simulator.schedulers.Scheduler` (or a built-in policy) and keeps its contract
(see ``simulator/schedulers/base.py``): ``schedule`` forms each iteration's batch by asking the KV allocator,
``wants_boundary`` says when an arrival may change the batch. Its own settings arrive in ``self.config.options``.
"""

from simulator.request import Request
from simulator.schedulers import ContinuousScheduler


class ShortestPromptFirst(ContinuousScheduler):
    """Continuous batching that admits the shortest waiting prompt first instead of the oldest.

    ``options: {max_wait_s: S}``: a request that has waited S seconds goes to the front anyway (no starvation).
    Preempted requests, which the base class puts at the head of the queue, stay there.
    """

    def enqueue(self, request: Request) -> None:
        waiting = self.waiting
        position = len(waiting)
        while position > 0 and waiting[position - 1].preemptions == 0 and (
            waiting[position - 1].input_tokens > request.input_tokens
        ):
            position -= 1
        waiting.insert(position, request)

    def schedule(self, now: float):
        max_wait = self.config.options.get("max_wait_s")
        if max_wait is not None:
            for request in [r for r in self.waiting if now - r.arrival_s > max_wait and r.preemptions == 0]:
                self.waiting.remove(request)
                self.waiting.appendleft(request)
        return super().schedule(now)
