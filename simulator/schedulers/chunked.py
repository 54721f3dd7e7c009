"""Chunked prefill with stall-free batching (Sarathi-Serve; vLLM v1's default scheduler).

Each iteration has a budget of ``max_num_batched_tokens``. Every decoding request gets its one token first; the rest
of the budget goes to prompt chunks of at most ``long_prefill_token_threshold`` tokens (vLLM's name for this cap):
first the prompts already being prefilled (in admission order), then new requests from the queue (FCFS, within
``max_num_seqs``; with LoRA, requests whose adapter would exceed ``max_loras`` are passed over), so several
prompts may share an iteration and a long prompt spreads over several. A prompt's KV is allocated chunk by chunk,
keeping room for the decodes' next token; if nothing can make progress for lack of memory, the running request
that arrived last is preempted (recompute). An iteration with prompt chunks is never repeated unchanged; a
decode-only batch is stable until a completion (which frees budget, slots and memory) or a memory shortfall.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from simulator.config.base import MAX_TOKENS
from simulator.config.engine import SchedulerBase
from simulator.errors import renamed
from simulator.request import Request
from simulator.schedulers.base import SCHEDULERS, Batch, Scheduler


class ChunkedSchedulerConfig(SchedulerBase):
    """Stall-free batching (Sarathi-Serve / vLLM v1): decodes first, the rest of the token budget in prompt chunks."""

    kind: Literal["chunked"]
    max_num_batched_tokens: int = Field(
        default=8192, ge=1, le=MAX_TOKENS, description="tokens per iteration (vLLM v1's default)"
    )
    long_prefill_token_threshold: int | None = Field(
        default=None, ge=1, le=MAX_TOKENS,
        description="most tokens of one prompt in an iteration (vLLM's --long-prefill-token-threshold); default: "
        "the budget",
    )

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, value: Any) -> Any:
        return renamed(value, "scheduler", {"chunk_size": "long_prefill_token_threshold"})

    @model_validator(mode="after")
    def _chunk_fits_budget(self) -> ChunkedSchedulerConfig:
        budget, threshold = self.max_num_batched_tokens, self.long_prefill_token_threshold
        if threshold is not None and threshold > budget:
            raise ValueError(f"long_prefill_token_threshold must be <= max_num_batched_tokens, got {threshold} > "
                             f"{budget}")
        return self


@SCHEDULERS.register("chunked", config=ChunkedSchedulerConfig)
class ChunkedScheduler(Scheduler):
    chunks_prompts = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        cap = getattr(self.config, "long_prefill_token_threshold", None)
        self.prompt_chunk_cap = cap or self.max_num_batched_tokens

    def _fill_chunks(self, batch: Batch, now: float) -> None:
        chunk, reserve = self.prompt_chunk_cap, bool(self.decoding)
        budget, every_chunk = self.continue_chunks(batch, self.max_num_batched_tokens - self.decode_budget_tokens,
                                                   reserve, chunk)
        if not every_chunk:
            return
        # requests whose adapter must wait for a GPU slot
        passed: list[Request] | None = [] if self.lora is not None else None
        try:
            # as vLLM v1: no new admissions in an iteration that had to preempt (they would be the next victims)
            while not batch.preempted and self.waiting and self.num_running + len(batch.swap_ins) < self.max_num_seqs:
                if passed is not None and not self.pass_over_lora_blocked(passed):
                    return
                request = self.waiting[0]
                if request.swapped_tokens:
                    if not self.can_swap_in(request):
                        return
                    self.swap_in(request, batch, now)
                    continue
                hit = self.cached_tokens(request)
                n = min(chunk, request.prefill_tokens - hit, budget)
                if n <= 0 or not self.fits(request, hit + n, reserve):
                    return
                cached = self.admit(request, now, hit + n)
                batch.prefills.append((request, hit + n - cached, cached))
                budget -= hit + n - cached
        finally:
            if passed:
                self.restore_passed(passed)

    def schedule(self, now: float) -> Batch:
        batch = Batch()
        while self.decoding and not self.decodes_can_grow():
            self.preempt_latest(batch, now)
        self._fill_chunks(batch, now)
        while not batch.prefills and not batch.swap_ins and not self.decoding and self.prefilling:
            self.preempt_latest(batch, now)  # prompts hold memory none of them can extend: make room
            self._fill_chunks(batch, now)
        return self.decode_batch(batch) if self.decoding else batch

    def wants_boundary(self) -> bool:
        return bool(self.waiting) and self.num_running < self.max_num_seqs and (
            self.decode_budget_tokens < self.max_num_batched_tokens
        )
