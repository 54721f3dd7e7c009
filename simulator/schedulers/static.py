"""Static (request-level) batching, as in FasterTransformer-era serving.

When no batch is running, take up to ``max_num_seqs`` requests from the queue (FCFS, whole prompts within
``max_num_batched_tokens`` and the KV memory) and prefill them together; then decode until every member has
finished. Finished members leave the decode batch, but their slots stay idle: nobody joins until the whole batch is
done. With ``batch_timeout_ms`` > 0, a batch that is not full waits until its oldest request has waited that long
(or the batch fills) before starting.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from simulator.config.engine import SchedulerBase
from simulator.schedulers.base import SCHEDULERS, Batch, Scheduler


class StaticSchedulerConfig(SchedulerBase):
    """Request-level batching: a batch of up to max_num_seqs runs until all its members finish."""

    kind: Literal["static"]
    batch_timeout_ms: float = Field(default=0.0, ge=0, description="wait this long for a batch to fill")


@SCHEDULERS.register("static", config=StaticSchedulerConfig)
class StaticScheduler(Scheduler):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.batch_timeout_s = getattr(self.config, "batch_timeout_ms", 0.0) / 1000

    def _still_filling(self, now: float) -> bool:
        timeout = self.batch_timeout_s
        return timeout > 0 and len(self.waiting) < self.max_num_seqs and now < self.waiting[0].arrival_s + timeout

    def schedule(self, now: float) -> Batch:
        batch = Batch()
        if self.num_running:
            while self.decoding and not self.decodes_can_grow():
                self.preempt_latest(batch, now)
            return self.decode_batch(batch) if self.decoding else batch
        if not self.waiting or self._still_filling(now):
            return batch
        budget = self.max_num_batched_tokens
        while self.waiting and len(batch.prefills) + len(batch.swap_ins) < self.max_num_seqs:
            request = self.waiting[0]
            if request.swapped_tokens:
                if not self.can_swap_in(request):
                    break
                self.swap_in(request, batch, now)
                continue
            tokens = request.prefill_tokens
            new = tokens - self.cached_tokens(request)
            if new > budget or not self.fits(request, tokens):
                break
            cached = self.admit(request, now, tokens)
            batch.prefills.append((request, tokens - cached, cached))
            budget -= tokens - cached
        return batch

    def wants_boundary(self) -> bool:
        return False  # arrivals never join a running batch

    def wake_at(self, now: float) -> float | None:
        if self.num_running or not self.waiting or not self._still_filling(now):
            return None
        return self.waiting[0].arrival_s + self.batch_timeout_s
