"""Continuous (iteration-level) batching as in Orca and vLLM v0 without chunked prefill.

Each iteration, prefill-first:

1. If requests wait, admit them in FCFS order while the running set stays within ``max_num_seqs``, the prompts
   fit ``max_num_batched_tokens`` together, and the KV allocator has room for each prompt; stop at the first that
   does not fit (no overtaking). If any were admitted, the iteration prefills exactly those (whole prompts).
2. Otherwise every running request decodes one token. If the KV cache cannot grow by one token for each, the
   running request that arrived last is preempted (recompute) until it can.

Between completions nothing lets a waiting request in (free memory only shrinks while decoding, and the slot and
token budgets are unchanged), so a decode batch is stable until the first completion or the first step that would
run out of blocks.
"""

from __future__ import annotations

from simulator.schedulers.base import SCHEDULERS, Batch, Scheduler


@SCHEDULERS.register("continuous")
class ContinuousScheduler(Scheduler):
    def schedule(self, now: float) -> Batch:
        batch = Batch()
        budget = self.max_num_batched_tokens
        while self.waiting and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            tokens = request.prefill_tokens
            if tokens > budget or not self.kv.can_allocate(tokens):
                break
            self.waiting.popleft()
            self.admit(request, now)
            batch.prefills.append((request, tokens, 0))
            budget -= tokens
        if batch.prefills:
            return batch
        while self.running and self.kv.max_appends([r.request_id for r in self.running], 1) < 1:
            self.preempt_by_recompute(max(self.running, key=lambda r: (r.arrival_s, r.request_id)))
        batch.decodes = list(self.running)
        return batch

    def stable_steps(self, batch: Batch) -> int:
        if batch.prefills:
            return 1
        until_completion = min(r.remaining_tokens for r in batch.decodes)
        return self.kv.max_appends([r.request_id for r in batch.decodes], until_completion)
