"""The contract every batching policy keeps.

A scheduler owns a replica's waiting queue and running set. At each iteration boundary the replica calls
``schedule(now)`` and runs the returned :class:`Batch`; afterwards it calls ``advance(batch, steps, now)`` and then
``retire(finished)``. The scheduler asks its :class:`~simulator.kv.base.KVAllocator` whether memory allows; it never
does block arithmetic itself.

Speed contract: for a decode-only batch, ``stable_steps(batch)`` returns how many consecutive iterations would run
this same batch if no request arrived — i.e. the iterations until the batch changes (a completion, or memory that
forces a preemption). The replica then advances that many iterations at once in closed form, cutting the run short
at the first iteration boundary after an arrival and calling ``advance`` with the number of steps actually run.
Results equal iteration-by-iteration stepping; a policy whose decision may change between completions for any
other reason must return 1 there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field

from simulator.kv.base import KVAllocator
from simulator.registry import Registry
from simulator.request import FINISHED, RUNNING, WAITING, Request


@dataclass(slots=True)
class Batch:
    """One iteration's work: prompt chunks ``(request, new tokens, cached tokens)`` and decoding requests."""

    prefills: list[tuple[Request, int, int]] = field(default_factory=list)
    decodes: list[Request] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.prefills and not self.decodes


class Scheduler(ABC):
    def __init__(self, kv: KVAllocator, max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int) -> None:
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    # --- arrivals ------------------------------------------------------------------------------------------------
    def rejection_reason(self, request: Request) -> str:
        """Why ``request`` can never run here ('' if it can)."""
        total = request.input_tokens + request.output_tokens
        if total > self.max_model_len:
            return f"prompt + output = {total} tokens exceeds max_model_len {self.max_model_len}"
        if not self.kv.can_ever_fit(request.total_tokens):
            return f"{request.total_tokens} tokens of KV never fit the cache of {self.kv.capacity_tokens} tokens"
        return ""

    def enqueue(self, request: Request) -> None:
        self.waiting.append(request)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # --- iterations ----------------------------------------------------------------------------------------------
    @abstractmethod
    def schedule(self, now: float) -> Batch:
        """The next iteration's batch (empty when nothing can run until something arrives)."""

    @abstractmethod
    def stable_steps(self, batch: Batch) -> int:
        """Iterations (≥ 1) this decode-only batch can repeat unchanged, absent arrivals."""

    def advance(self, batch: Batch, steps: int, now: float) -> list[Request]:
        """Account ``steps`` iterations of ``batch`` ending at ``now``; return the requests that finished."""
        finished = []
        for request, _new, _cached in batch.prefills:
            request.generated += 1
            if request.generated == 1:
                request.first_token_s = now
            request.last_token_s = now
            if request.remaining_tokens == 0:
                finished.append(request)
        for request in batch.decodes:
            self.kv.append(request.request_id, steps)
            request.generated += steps
            request.last_token_s = now
            if request.remaining_tokens == 0:
                finished.append(request)
        return finished

    def retire(self, finished: list[Request], now: float) -> None:
        """Release finished requests' memory and slots."""
        if not finished:
            return
        for request in finished:
            self.kv.free(request.request_id)
            request.status = FINISHED
            request.finish_s = now
        self.running = [r for r in self.running if r.status == RUNNING]

    # --- helpers for policies ------------------------------------------------------------------------------------
    def admit(self, request: Request, now: float) -> None:
        """Move the head of the waiting queue into the running set, allocating its prefill's KV."""
        self.kv.allocate(request.request_id, request.prefill_tokens)
        request.status = RUNNING
        if request.first_scheduled_s != request.first_scheduled_s:  # NaN: first time scheduled
            request.first_scheduled_s = now
        self.running.append(request)

    def preempt_by_recompute(self, victim: Request) -> None:
        """Free the victim's KV; it waits at the head of the queue and re-prefills prompt + generated tokens."""
        self.kv.free(victim.request_id)
        victim.status = WAITING
        victim.preemptions += 1
        self.running.remove(victim)
        self.waiting.appendleft(victim)


SCHEDULERS: Registry[Scheduler] = Registry("scheduler")
