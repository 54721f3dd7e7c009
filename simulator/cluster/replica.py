"""A replica: one SimPy process that runs iterations of its scheduler's batches on its cost model.

Decode-only batches are advanced in closed form: the scheduler says how many identical iterations can run
(``stable_steps``), the cost model gives a decode step as ``a + c·S`` (S = context sum, growing by B per step), and
the replica waits for the whole run in one SimPy timeout — or, if a request arrives meanwhile, until the end of the
iteration in progress, so the newcomer joins at the same boundary as with one iteration at a time
(``fast_forward=False``, kept for testing the equivalence).
"""

from __future__ import annotations

import math

import simpy

from simulator.cost.base import CostModel, IterationShape, decode_run_time
from simulator.recorder import Recorder
from simulator.request import REJECTED, Request
from simulator.schedulers.base import Batch, Scheduler


def steps_done_by(a: float, c: float, batch_size: int, context_sum0: int, elapsed: float, limit: int) -> int:
    """Smallest k in [1, limit] whose first k steps end at or after ``elapsed`` seconds (the step in progress)."""
    # decode_run_time(k) = (c·B/2)·k² + (a + c·S0 − c·B/2)·k is increasing in k; solve = elapsed, then fix rounding.
    qa, qb = c * batch_size / 2, a + c * context_sum0 - c * batch_size / 2
    root = elapsed / qb if qa == 0 else (-qb + math.sqrt(qb * qb + 4 * qa * elapsed)) / (2 * qa)
    k = min(max(1, math.ceil(root)), limit)
    while k > 1 and decode_run_time(a, c, batch_size, context_sum0, k - 1) >= elapsed:
        k -= 1
    while k < limit and decode_run_time(a, c, batch_size, context_sum0, k) < elapsed:
        k += 1
    return k


class Replica:
    def __init__(
        self, env: simpy.Environment, index: int, scheduler: Scheduler, cost: CostModel, recorder: Recorder,
        fast_forward: bool = True,
    ) -> None:
        self.env = env
        self.index = index
        self.scheduler = scheduler
        self.cost = cost
        self.recorder = recorder
        self.fast_forward = fast_forward
        self._wake: simpy.Event | None = None
        env.process(self._run())

    def submit(self, request: Request) -> None:
        """A request arrives at this replica (rejected at once if it can never run here)."""
        request.replica = self.index
        reason = self.scheduler.rejection_reason(request)
        if reason:
            request.status, request.reject_reason = REJECTED, reason
            self.recorder.request_done(request)
            return
        self.scheduler.enqueue(request)
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _run(self):
        scheduler, recorder, env = self.scheduler, self.recorder, self.env
        kv = scheduler.kv
        while True:
            batch = scheduler.schedule(env.now)
            if batch.empty:
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            if batch.prefills:
                yield from self._prefill(batch)
                steps = 1
            else:
                steps = yield from self._decode(batch)
            finished = scheduler.advance(batch, steps, env.now)
            recorder.iterations += steps
            recorder.peak_kv_blocks[self.index] = max(recorder.peak_kv_blocks[self.index], kv.used_blocks)
            scheduler.retire(finished, env.now)
            for request in finished:
                recorder.request_done(request)

    def _prefill(self, batch: Batch):
        """One iteration of prompt chunks (and any decodes riding along)."""
        shape = IterationShape(
            prefill_chunks=tuple((new, cached) for _, new, cached in batch.prefills),
            num_decodes=len(batch.decodes),
            decode_context_sum=sum(self.scheduler.kv.tokens_of(r.request_id) + 1 for r in batch.decodes),
        )
        duration = self.cost.iteration_time(shape)
        self._note_running(batch)
        yield self.env.timeout(duration)
        rec = self.recorder
        rec.kv_token_seconds[self.index] += duration * (self.scheduler.kv.used_tokens + len(batch.decodes))
        for request in batch.decodes:
            rec.itl_samples.append(self.env.now - request.last_token_s)
        for request, _, _ in batch.prefills:
            if request.generated > 0:  # re-prefill after preemption: a gap between two output tokens
                rec.itl_samples.append(self.env.now - request.last_token_s)

    def _decode(self, batch: Batch):
        """A run of identical decode iterations; returns how many ran."""
        env, kv, rec = self.env, self.scheduler.kv, self.recorder
        decodes = batch.decodes
        size = len(decodes)
        resident0 = kv.used_tokens
        context_sum0 = resident0 + size  # every running request decodes: Σ(tokens + 1)
        a, c = self.cost.decode_step_coefficients(size)
        self._note_running(batch)
        start = env.now
        if not self.fast_forward:
            shape = IterationShape(num_decodes=size, decode_context_sum=context_sum0)
            yield env.timeout(self.cost.iteration_time(shape))
            steps = 1
        else:
            limit = self.scheduler.stable_steps(batch)
            total = decode_run_time(a, c, size, context_sum0, limit)
            steps = limit
            if limit > 1:
                self._wake = env.event()
                yield env.timeout(total) | self._wake
                woken = self._wake.triggered
                self._wake = None
                if woken and env.now - start < total:
                    steps = steps_done_by(a, c, size, context_sum0, env.now - start, limit)
                    total = decode_run_time(a, c, size, context_sum0, steps)
                if start + total > env.now:
                    yield env.timeout(start + total - env.now)
            else:
                yield env.timeout(total)
        base, slope = a + c * context_sum0, c * size
        first_end = env.now if steps == 1 else start + base
        for request in decodes:
            rec.itl_samples.append(first_end - request.last_token_s)
        if steps > 1:
            rec.itl_runs.append((base, slope, steps - 1, size))
        # ∫ resident tokens dt over the run: step j (0-based) lasts base + slope·j with resident0 + (j+1)·size tokens.
        x, k = resident0 + size, steps
        rec.kv_token_seconds[self.index] += (
            k * base * x + (base * size + slope * x) * k * (k - 1) / 2 + slope * size * (k - 1) * k * (2 * k - 1) / 6
        )
        return steps

    def _note_running(self, batch: Batch) -> None:
        size = len(batch.prefills) + len(batch.decodes)
        self.recorder.peak_running[self.index] = max(self.recorder.peak_running[self.index], size)
