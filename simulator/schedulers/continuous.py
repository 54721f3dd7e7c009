"""Continuous (iteration-level) batching with whole-prompt prefill: Orca and vLLM v0 without chunked prefill.

Admission is FCFS without overtaking (except, with LoRA, past requests whose adapter would exceed ``max_loras``,
as vLLM passes them over): requests join while the running requests stay within ``max_num_seqs``, the
iteration's tokens fit ``max_num_batched_tokens`` and the KV allocator has room for each whole prompt.

- ``prefill_priority: true`` (prefill-first, vLLM v0): if requests can be admitted, the iteration prefills exactly
  those, and running requests wait a step; otherwise every running request decodes one token.
- ``prefill_priority: false`` (decode-first, Orca): every iteration decodes all running requests, and admits the
  whole prompts that fit the remaining token budget and memory into the same iteration.
- ``chunk_long_prompts: true`` (prefill-first, SGLang's ``chunked_prefill_size``): the head of the queue whose prompt
  exceeds what is left of the budget is admitted with a chunk of that size, which ends the iteration's admissions;
  each prefill iteration after it starts with that prompt's next chunk, until it completes. Decodes wait while a
  prompt is being chunked, as they do for any prefill iteration.

If the KV cache cannot grow by one token for every decoding request, the running request that arrived last is
preempted until it can (recomputed later, or swapped out to host memory with ``preemption: swap``; a swapped-out
request at the head of the queue is swapped back in when a slot and the memory allow, without using token budget).
Between completions nothing lets a waiting request in (free memory only shrinks while decoding; slots and budget
free up only at completions), so a decode-only batch is stable until then, and an arrival matters only if the head
of the queue could be admitted now.
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from simulator.config.engine import SchedulerBase
from simulator.request import Request
from simulator.schedulers.base import SCHEDULERS, Batch, Scheduler


class ContinuousSchedulerConfig(SchedulerBase):
    """Iteration-level batching (Orca / vLLM v0): FCFS admission, whole-prompt prefill.

    ``prefill_priority``: true = prefill-first (vLLM v0: an iteration prefills newcomers while decodes wait);
    false = decode-first (Orca: every iteration decodes all running requests and adds whole prompts that fit).
    ``chunk_long_prompts`` (prefill-first only): a prompt longer than what is left of the iteration's token budget is
    prefilled in chunks over the prefill iterations that follow, its next chunk first in each (SGLang's
    chunked_prefill_size); otherwise a whole prompt must fit one iteration.
    """

    kind: Literal["continuous"] = "continuous"
    prefill_priority: bool = True
    chunk_long_prompts: bool = False

    @model_validator(mode="after")
    def _chunks_need_prefill_first(self) -> ContinuousSchedulerConfig:
        if self.chunk_long_prompts and not self.prefill_priority:
            raise ValueError("chunk_long_prompts applies to prefill-first batching (prefill_priority: true); "
                             "decode-first batching with prompt chunks is kind: chunked")
        return self


@SCHEDULERS.register("continuous", config=ContinuousSchedulerConfig)
class ContinuousScheduler(Scheduler):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # a user's subclass may run with a custom config: then the knobs keep their defaults
        self.prefill_priority = getattr(self.config, "prefill_priority", True)
        self.chunk_long_prompts = getattr(self.config, "chunk_long_prompts", False)

    @property
    def chunks_prompts(self) -> bool:
        return self.chunk_long_prompts

    def _admitted_tokens(self, request: Request, budget: int) -> int:
        """Prompt tokens (cached ones included) the head of the queue would be admitted with: its whole prompt when
        the budget holds it, else — chunking long prompts — a chunk of what is left of the budget; 0 for none."""
        tokens = request.prefill_tokens
        cached = self.cached_tokens(request) if request.prefix else 0  # no call without a prefix: runs per arrival
        if tokens - cached <= budget:
            return tokens
        return cached + budget if self.chunk_long_prompts and budget > 0 else 0

    def _admissible(self, request: Request, budget: int, running: int, reserve_growth: bool = False) -> bool:
        """A free slot, then memory for a swap-in, or the prompt (or its first chunk) within the token budget and
        memory for it."""
        if running >= self.max_num_seqs:
            return False
        if request.swapped_tokens:
            return self.can_swap_in(request)
        tokens = self._admitted_tokens(request, budget)
        return tokens > 0 and self.fits(request, tokens, reserve_growth)

    def _admit_prompts(self, batch: Batch, now: float, budget: int, reserve_growth: bool) -> None:
        # requests whose adapter must wait for a GPU slot
        passed: list[Request] | None = [] if self.lora is not None else None
        try:
            while self.waiting and (passed is None or self.pass_over_lora_blocked(passed)) and self._admissible(
                self.waiting[0], budget, self.num_running + len(batch.swap_ins), reserve_growth
            ):
                request = self.waiting[0]
                if request.swapped_tokens:
                    self.swap_in(request, batch, now)
                    continue
                tokens = self._admitted_tokens(request, budget)
                cached = self.admit(request, now, tokens)
                batch.prefills.append((request, tokens - cached, cached))
                budget -= tokens - cached
                if tokens < request.prefill_tokens:
                    return  # a chunk took the rest of the budget
        finally:
            if passed:
                self.restore_passed(passed)

    def _grow_or_preempt(self, batch: Batch, now: float) -> None:
        while self.decoding and not self.decodes_can_grow():
            self.preempt_latest(batch, now)

    def schedule(self, now: float) -> Batch:
        batch = Batch()
        if self.prefill_priority:
            if self.waiting or self.prefilling:
                reserve = bool(self.decoding)  # leaving the decodes their next step: an admission they would evict
                budget = self.max_num_batched_tokens  # at once is none
                if self.prefilling:
                    budget, _ = self.continue_chunks(batch, budget, reserve)
                self._admit_prompts(batch, now, budget, reserve_growth=reserve)
                if batch.prefills:
                    return batch
            self._grow_or_preempt(batch, now)
            return self.decode_batch(batch) if self.decoding else batch
        self._grow_or_preempt(batch, now)
        decodes = len(self.decoding)
        self._admit_prompts(batch, now, self.max_num_batched_tokens - self.decode_budget_tokens,
                            reserve_growth=decodes > 0)
        return self.decode_batch(batch) if decodes else batch

    def wants_boundary(self) -> bool:
        if not self.waiting:
            return False
        if self.lora is not None:  # the head may wait for an adapter slot while a newcomer behind it could go
            return self.num_running < self.max_num_seqs
        budget = self.max_num_batched_tokens - (0 if self.prefill_priority else self.decode_budget_tokens)
        return self._admissible(self.waiting[0], budget, self.num_running, reserve_growth=bool(self.decoding))
