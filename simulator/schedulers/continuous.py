"""Continuous (iteration-level) batching as in Orca and vLLM v0 without chunked prefill.

Each iteration, prefill-first:

1. If requests wait, admit them in FCFS order while the running requests stay within ``max_num_seqs``, the
   prompts fit ``max_num_batched_tokens`` together, and the KV allocator has room for each prompt; stop at the first
   that does not fit (no overtaking). If any were admitted, the iteration prefills exactly those (whole prompts).
2. Otherwise every running request decodes one token. If the KV cache cannot grow by one token for each, the
   running request that arrived last is preempted (recompute) until it can.

Between completions nothing lets a waiting request in (free memory only shrinks while decoding, and the slot and
token budgets are unchanged), so a decode batch is stable until the first completion or the first step that would
run out of blocks, and an arrival matters only if the head of the queue could be admitted now.
"""

from __future__ import annotations

from simulator.request import Request
from simulator.schedulers.base import SCHEDULERS, Batch, Scheduler


@SCHEDULERS.register("continuous")
class ContinuousScheduler(Scheduler):
    def _admissible(self, request: Request, budget: int, running: int) -> bool:
        tokens = request.prefill_tokens
        return running < self.max_num_seqs and tokens <= budget and self.kv.can_allocate(tokens)

    def schedule(self, now: float) -> Batch:
        batch = Batch()
        budget = self.max_num_batched_tokens
        while self.waiting and self._admissible(self.waiting[0], budget, self.num_running + len(batch.prefills)):
            request = self.waiting.popleft()
            self.admit(request, now)
            batch.prefills.append((request, request.prefill_tokens, 0))
            budget -= request.prefill_tokens
        if batch.prefills or not self.decoding:
            return batch
        while not self.kv.can_grow_one():
            victim = max(self.decoding.values(), key=lambda r: (r.arrival_s, r.request_id))
            self.preempt_by_recompute(victim)
            batch.preempted.append(victim)
        return self.decode_batch(batch)

    def stable_steps(self, batch: Batch) -> int:
        if batch.prefills:
            return 1
        return self.kv.max_grow(self.steps_to_next_finish())

    def wants_boundary(self) -> bool:
        return bool(self.waiting) and self._admissible(self.waiting[0], self.max_num_batched_tokens, self.num_running)
