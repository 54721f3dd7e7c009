"""The contract every batching policy keeps.

A scheduler owns a replica's waiting queue and its running requests. At each iteration boundary the replica calls
``schedule(now)`` and runs the returned :class:`Batch`; afterwards it calls ``advance(batch, steps, now)``, which
returns the requests that finished, and ``retire(finished, now)``. The scheduler asks its
:class:`~simulator.kv.base.KVAllocator` whether memory allows, through the allocator's declared interface only (the
block counts of its admission rules too: ``blocks_for``, ``blocks_to_extend``, ``fits_commitment``), so every
policy runs with every allocator.

Running requests are either *prefilling* (admitted; their prompt — plus any output lost to preemption — is being
processed, whole or in chunks) or *decoding* (they emitted a token and generate one per decode iteration). The
decoding set is tracked lazily with a clock (decode steps run so far) and a heap of the clock values at which each
request finishes, so running n decode steps costs O(log B), not O(B).

Speed contract (what keeps every policy fast):

- ``stable_steps(batch)``: for a decode-only batch, how many consecutive iterations would run this same batch if
  no request arrived — the iterations until it changes (a completion, or memory that forces a preemption). The
  replica advances that many at once in closed form.
- ``wants_boundary()``: after an arrival, whether the queue could change the batch at the next iteration boundary.
  Only then does the replica cut a run short (at the end of the iteration in progress).
- ``wake_at(now)``: when an empty batch should be reconsidered without an arrival (a batching timeout), or None.
- ``queue_deadline()``: the earliest time a waiting request expires (``max_queue_delay_ms``), or None. The replica
  ends runs at the first iteration boundary at or after it, where ``expire_waiting`` rejects the request.

Client cancellation (:mod:`simulator.cluster.cancellation`): ``withdraw`` takes a waiting request out of the queue
at once; ``abort`` drops a running one, at an iteration boundary, freeing its KV. ``queued_prompt_tokens`` (the
prompt tokens of the waiting requests never scheduled, kept by ``enqueue``, ``admit``, ``expire_waiting`` and
``withdraw``) is what ``cluster.admission: slo`` predicts a newcomer's wait from; a policy that takes requests out
of ``waiting`` other than through ``admit`` or ``swap_in`` must keep it too.

Results equal one-iteration-at-a-time stepping; a policy whose decision may change for any other reason must say
so through these methods.
"""

from __future__ import annotations

import functools
import heapq
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable

import numpy as np

from simulator.config.engine import SchedulerBase, SpeculativeConfig
from simulator.errors import ConfigError
from simulator.kv.base import KVAllocator
from simulator.registry import Registry
from simulator.request import FINISHED, REJECTED, RUNNING, WAITING, Request
from simulator.schedulers.lora import AdapterSlots


class Batch:
    """One iteration's work: prompt chunks ``(request, new tokens, tokens already prefilled)`` and, if ``decode``,
    one token for every request of the decoding set (``num_decodes`` of them, whose KV after this step's write sums
    to ``decode_context_sum`` tokens); ``preempted`` lists ``(request, was decoding)`` evicted while forming it;
    ``swap_ins`` are swapped-out requests whose KV comes back during the iteration, and ``swap_tokens`` counts the
    KV tokens moved over the host link either way; ``resized``: the allocator reshaped free memory to let the
    decodes grow (contiguous slabs); ``decode_positions``: positions each decode runs through (k + 1 when
    verifying k drafted tokens) and ``extra_tokens``: tokens the step emitted beyond one per decoding request."""

    __slots__ = (
        "decode", "decode_context_sum", "decode_positions", "extra_tokens", "num_decodes", "preempted", "prefills",
        "resized", "swap_ins", "swap_tokens",
    )

    def __init__(self) -> None:
        self.prefills: list[tuple[Request, int, int]] = []
        self.decode = False
        self.num_decodes = 0
        self.decode_context_sum = 0
        self.preempted: list[tuple[Request, bool]] = []
        self.swap_ins: list[Request] = []
        self.swap_tokens = 0
        self.resized = False
        self.decode_positions = 1  # k + 1 with speculative decoding
        self.extra_tokens = 0  # tokens beyond one per decoding request that this step emitted (speculation)

    @property
    def empty(self) -> bool:
        return not self.prefills and not self.decode and not self.swap_ins


def completes_prefill(request: Request, new: int, done: int) -> bool:
    """Whether a chunk of ``new`` tokens after ``done`` finishes the request's prefill (and so emits a token)."""
    return done + new == request.prefill_tokens


class Scheduler(ABC):
    def __init__(
        self, kv: KVAllocator, config: SchedulerBase, max_model_len: int, max_num_batched_tokens: int,
        swap_capacity_tokens: int = 0, seed: int = 0,
    ):
        self.kv = kv
        self.speculative: SpeculativeConfig | None = getattr(config, "speculative", None)
        self._seed = seed
        self.config = config
        delay_ms = getattr(config, "max_queue_delay_ms", None)
        self.queue_delay_s = None if delay_ms is None else delay_ms / 1000  # reject requests waiting longer
        max_num_seqs = config.max_num_seqs
        if isinstance(max_num_seqs, str):  # "auto": the pool sets the number before building its schedulers
            raise ConfigError("scheduler.max_num_seqs: auto must be resolved from the KV pool before a scheduler "
                              "is built")
        self.max_num_seqs: int = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self.prefilling: dict[int, Request] = {}
        self.decoding: dict[int, Request] = {}
        self.clock = 0  # decode steps run so far
        self._finishes: list[tuple[int, int, Request]] = []  # (finish clock, request id, request)
        self.swap_capacity_tokens = swap_capacity_tokens if config.preemption == "swap" else 0
        self.swapped_tokens = 0  # KV tokens in host memory
        self.watermark_blocks = int(getattr(config, "watermark", 0.0) * kv.num_blocks)
        # guaranteed_no_evict: the blocks every request holding KV here will hold at its end (prompt + output)
        self.no_evict = getattr(config, "capacity_policy", "max_utilization") == "guaranteed_no_evict"
        self.committed_blocks = 0
        self.queued_prompt_tokens = 0  # prompt tokens of the waiting requests never scheduled (admission: slo)
        self.on_remote_admit: Callable[[Request], None] | None = None  # disaggregated: a prefill replica's KV taken
        self.lora: AdapterSlots | None = None  # LoRA adapters (simulator.schedulers.lora), set by the replica's pool
        # speculating: verification steps by accepted drafts (index A = 0 … k), shared with the run's recorder
        self.accepted_counts: np.ndarray | None = None

    @property
    def chunks_prompts(self) -> bool:
        """Whether a prompt longer than the iteration's token budget is prefilled in chunks (else it is refused on
        arrival: TensorRT-LLM without chunked context)."""
        return False

    # --- arrivals ------------------------------------------------------------------------------------------------
    def rejection_reason(self, request: Request, arriving: int = 0) -> str:
        """Why ``request`` cannot be taken now or ever ('' if it can); ``arriving``: requests queued at the replica
        that this scheduler has not seen yet (async scheduling's intake), which count against ``max_queue_len``."""
        total = request.input_tokens + request.output_tokens
        if total > self.max_model_len:
            return f"prompt + output = {total} tokens exceeds max_model_len {self.max_model_len}"
        if request.input_tokens > self.max_num_batched_tokens and not self.chunks_prompts:
            return (f"prompt of {request.input_tokens} tokens exceeds max_num_batched_tokens "
                    f"{self.max_num_batched_tokens}: without chunked prefill a prompt must fit one iteration")
        if not self.kv.can_ever_fit(request.total_tokens):
            return f"{request.total_tokens} tokens of KV never fit the cache of {self.kv.capacity_tokens} tokens"
        limit, queued = self.config.max_queue_len, len(self.waiting) + arriving
        if limit is not None and queued >= limit:
            return f"queue full: {queued} requests waiting (max_queue_len {limit})"
        return ""

    def enqueue(self, request: Request) -> None:
        """Queue in priority order (lower first), FCFS within a priority."""
        waiting = self.waiting
        if request.first_scheduled_s != request.first_scheduled_s:  # NaN: never scheduled, its whole prompt to go
            self.queued_prompt_tokens += request.input_tokens
        if not waiting or waiting[-1].priority <= request.priority:
            waiting.append(request)
            return
        position = len(waiting) - 1
        while position > 0 and waiting[position - 1].priority > request.priority:
            position -= 1
        waiting.insert(position, request)

    def _requeue_front(self, request: Request) -> None:
        """Put a preempted request first among the waiting requests of its priority."""
        waiting = self.waiting
        position = 0
        while position < len(waiting) and waiting[position].priority < request.priority:
            position += 1
        waiting.insert(position, request)

    def queue_deadline(self) -> float | None:
        """When the first waiting request that was never scheduled runs out of ``max_queue_delay_ms``."""
        delay = self.queue_delay_s
        if delay is None:
            return None
        deadlines = [r.arrival_s + delay for r in self.waiting if r.first_scheduled_s != r.first_scheduled_s]
        return min(deadlines) if deadlines else None

    def expire_waiting(self, now: float) -> list[Request]:
        """Reject (and return) the waiting requests never scheduled whose ``max_queue_delay_ms`` has run out."""
        delay = self.queue_delay_s
        if delay is None or not self.waiting:
            return []
        expired = [r for r in self.waiting if r.first_scheduled_s != r.first_scheduled_s and now >= r.arrival_s + delay]
        if expired:
            gone = {r.request_id for r in expired}
            self.waiting = deque(r for r in self.waiting if r.request_id not in gone)
            self.queued_prompt_tokens -= sum(r.input_tokens for r in expired)
            limit = self.config.max_queue_delay_ms
            for request in expired:
                request.status = REJECTED
                request.reject_reason = (
                    f"waited {(now - request.arrival_s) * 1000:.0f} ms in the queue (max_queue_delay_ms {limit:g})"
                )
        return expired

    def withdraw(self, request: Request) -> bool:
        """Take ``request`` out of the waiting queue (its client cancelled it); False when it is not there. A
        swapped-out request's KV leaves host memory with it. O(queue length): a scan of the deque."""
        try:
            self.waiting.remove(request)
        except ValueError:
            return False
        if request.first_scheduled_s != request.first_scheduled_s:
            self.queued_prompt_tokens -= request.input_tokens
        if request.swapped_tokens and not request.remote_kv:
            self.swapped_tokens -= request.swapped_tokens
            request.swapped_tokens = 0
        return True

    def abort(self, request: Request) -> int:
        """Drop a running request its client cancelled, at an iteration boundary — prefilling, decoding, or just
        finished by the work that ended and not yet retired: it leaves its set, its KV is freed (the allocator's
        ``free`` also releases its prefix-cache references) and its LoRA slot is left. Returns the output tokens it
        had generated."""
        request_id = request.request_id
        if self.decoding.pop(request_id, None) is not None:
            if not self.speculative:
                request.generated = request.gen_offset + self.clock
                request.finish_clock = -1  # its heap entry is now stale
        elif self.prefilling.pop(request_id, None) is not None:
            request.prefilled = 0
        self.kv.free(request_id)
        if self.no_evict:
            self.committed_blocks -= self.kv.blocks_for(request.total_tokens)
        if self.lora is not None:
            self.lora.leave(request.adapter)
        return request.generated

    # --- iterations ----------------------------------------------------------------------------------------------
    @abstractmethod
    def schedule(self, now: float) -> Batch:
        """The next iteration's batch (empty when nothing can run until something arrives or ``wake_at``)."""

    def stable_steps(self, batch: Batch) -> int:
        """Iterations (≥ 1) this batch can repeat unchanged, absent arrivals: for a decode-only batch, until the
        first completion or the first step the KV cache cannot hold — or just one if a slab reallocation, or a
        preemption that the queue's head could fill, changed the memory after admission was tried."""
        if batch.prefills or batch.swap_ins or batch.swap_tokens or batch.resized or self.speculative or (
            batch.preempted and self.wants_boundary()
        ):
            return 1
        return self.kv.max_grow(self.steps_to_next_finish())

    @abstractmethod
    def wants_boundary(self) -> bool:
        """Whether queued requests could change the batch at the next iteration boundary."""

    def wake_at(self, now: float) -> float | None:
        """A time to call ``schedule`` again although nothing arrives (None: only arrivals matter)."""
        return None

    def steps_to_next_finish(self) -> int:
        """Decode steps until the first decoding request emits its last token."""
        finishes = self._finishes
        while finishes[0][2].finish_clock != finishes[0][0]:  # stale entry of a preempted request
            heapq.heappop(finishes)
        return finishes[0][0] - self.clock

    def decode_batch(self, batch: Batch) -> Batch:
        """Make ``batch`` advance every decoding request by one token (or, speculating, by 1 + accepted drafts:
        the KV of the k + 1 positions its verification writes — its newest token and k drafts, at most what is left
        of its output — is reserved now, and :meth:`advance` releases the rejected drafts')."""
        kv = self.kv
        if self.speculative:
            positions = self.speculative.num_speculative_tokens + 1
            context = 0
            for request_id, request in self.decoding.items():
                context += kv.tokens_of(request_id)
                kv.append(request_id, min(positions, request.output_tokens - request.generated))
            batch.decode = True
            batch.num_decodes = len(self.decoding)
            batch.decode_context_sum = context + batch.num_decodes
            batch.decode_positions = positions
            return batch
        batch.resized = kv.prepare_growth()
        batch.decode = True
        batch.num_decodes = size = kv.num_growing
        batch.decode_context_sum = kv.growing_tokens + size
        return batch

    def advance(self, batch: Batch, steps: int, now: float) -> list[Request]:
        """Account ``steps`` iterations of ``batch`` ending at ``now``; return the requests that finished."""
        finished = []
        if batch.decode and self.speculative:
            finished = self._advance_speculative(batch)
        elif batch.decode:
            self.kv.grow(steps)
            self.clock += steps
            finishes = self._finishes
            while finishes and finishes[0][0] <= self.clock:
                finish_clock, _, request = heapq.heappop(finishes)
                if request.finish_clock == finish_clock:
                    request.generated = request.output_tokens
                    request.finish_clock = -1
                    del self.decoding[request.request_id]
                    finished.append(request)
        for request in batch.swap_ins:
            if request.remote_kv:  # KV that came from a prefill replica, not this host
                request.remote_kv = False
            else:
                self.swapped_tokens -= request.swapped_tokens
            request.swapped_tokens = 0
            self._resume(request, now)
            self._start_decoding(request)
        if not batch.prefills:
            return finished
        for request, new, done in batch.prefills:
            request.prefilled = done + new
            if request.prefilled < request.prefill_tokens:
                continue  # more chunks to come
            del self.prefilling[request.request_id]
            request.prefilled = 0
            if request.preemptions:
                self._resume(request, now)
            request.generated += 1
            if request.generated == 1:
                request.first_token_s = now
            request.last_token_s = now
            if request.generated == request.output_tokens:
                finished.append(request)
            else:
                self._start_decoding(request)
        return finished

    def retire(self, finished: list[Request], now: float, hand_off: bool = False) -> None:
        """Release finished requests' memory (``hand_off``: a disaggregated prefill replica keeps the KV of the
        requests that go on decoding elsewhere until the decode side has taken it)."""
        for request in finished:
            if not (hand_off and request.decode_output_tokens > 1):
                self.kv.free(request.request_id)
            request.status = FINISHED
            request.finish_s = now
            if self.no_evict:
                self.committed_blocks -= self.kv.blocks_for(request.total_tokens)
        if self.lora is not None:
            for request in finished:
                self.lora.leave(request.adapter)

    # --- helpers for policies ------------------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.decoding) + len(self.prefilling)

    def _resume(self, request: Request, now: float) -> None:
        if request.preempted_at == request.preempted_at:  # not NaN: it was preempted
            request.preempted_s += now - request.preempted_at
            request.preempted_at = float("nan")

    def can_swap_in(self, request: Request) -> bool:
        """Room for the request's KV and its next token while every decoding request also grows by one: a swap-in
        that could not take its next step would only be swapped out again. (Both the placement that will happen and
        one more token are checked: a contiguous allocator places a slab of exactly the tokens it is given.)"""
        kv, tokens, final = self.kv, request.swapped_tokens, request.total_tokens
        if self.no_evict and not self._commitment_fits(request):
            return False
        if self.speculative:
            positions = self.speculative.num_speculative_tokens + 1
            return self._fits_beside_speculation(kv.blocks_for(tokens + positions))
        return kv.can_allocate(tokens, reserve_growth=True, final_tokens=final) and kv.can_allocate(
            tokens + 1, reserve_growth=True, final_tokens=final
        )

    def swap_in(self, request: Request, batch: Batch, now: float) -> None:
        """Take a swapped-out request (or one whose KV arrived from a prefill replica) from the head of the queue;
        its KV comes back during this iteration."""
        self.waiting.popleft()
        self.kv.allocate(request.request_id, request.swapped_tokens, final_tokens=request.total_tokens)
        if self.no_evict:
            self.committed_blocks += self.kv.blocks_for(request.total_tokens)
        request.status = RUNNING
        if self.lora is not None:
            self.lora.join(request.adapter)
        batch.swap_ins.append(request)
        if request.remote_kv:  # transferred from a prefill replica already: admitted at no link cost here
            request.decode_admitted_s = now
            if self.on_remote_admit is not None:
                self.on_remote_admit(request)
        else:
            batch.swap_tokens += request.swapped_tokens

    def fits(self, request: Request, tokens: int, reserve_growth: bool = False) -> bool:
        """Whether the allocator could admit ``request`` with KV for its first ``tokens`` now (``reserve_growth``:
        leaving the decodes room for their next step) and, while other requests run, leave ``watermark`` of the
        blocks free (counted without prefix-cache hits: conservative). Under ``guaranteed_no_evict``: whether its
        whole length fits beside the running requests' whole lengths, and its first ``tokens`` in the blocks free
        now (the decodes' growth is reserved already, the watermark moot)."""
        kv = self.kv
        if self.no_evict:
            return self._commitment_fits(request) and kv.can_allocate(
                tokens, final_tokens=request.total_tokens, prefix=request.prefix)
        if self.watermark_blocks and (self.prefilling or self.decoding) and (
            # free − blocks_for(tokens), inlined over the declared members: this runs at every admission check
            kv.free_blocks + tokens // -kv.block_size < self.watermark_blocks
        ):
            return False
        if self.speculative and reserve_growth:
            return self._fits_beside_speculation(kv.blocks_for(tokens))
        return kv.can_allocate(tokens, reserve_growth, final_tokens=request.total_tokens, prefix=request.prefix)

    def _commitment_fits(self, request: Request) -> bool:
        """guaranteed_no_evict: the blocks of ``request``'s whole length fit beside the running requests' whole
        lengths (prefix-cache hits not counted: conservative)."""
        return self.kv.fits_commitment(self.committed_blocks, request.total_tokens)

    def pass_over_lora_blocked(self, passed: list[Request]) -> bool:
        """vLLM's max_loras rule at the head of the queue: while the head's adapter would exceed the GPU slots, move
        it to ``passed`` (to go back in front, in order, by :meth:`restore_passed`); False when the queue empties."""
        lora, waiting = self.lora, self.waiting
        while waiting and not lora.admissible(waiting[0].adapter):  # type: ignore[union-attr]  # called with LoRA
            passed.append(waiting.popleft())
        return bool(waiting)

    def restore_passed(self, passed: list[Request]) -> None:
        """Put the passed-over requests back at the front of the queue, in their order."""
        self.waiting.extendleft(reversed(passed))

    def cached_tokens(self, request: Request) -> int:
        """Leading prompt tokens the prefix cache holds now (their prefill is skipped)."""
        return self.kv.cached_prefix_tokens(request.prefix, request.prefill_tokens) if request.prefix else 0

    def admit(self, request: Request, now: float, tokens: int) -> int:
        """Take the head of the waiting queue into the prefilling set with KV for its first ``tokens``; return how
        many of them the prefix cache already held (their prefill is skipped)."""
        self.waiting.popleft()
        cached = self.kv.allocate(
            request.request_id, tokens, final_tokens=request.total_tokens, prefix=request.prefix
        )
        if self.no_evict:
            self.committed_blocks += self.kv.blocks_for(request.total_tokens)
        request.cached_tokens = cached
        request.status = RUNNING
        if self.lora is not None:
            self.lora.join(request.adapter)
        if request.first_scheduled_s != request.first_scheduled_s:  # NaN: first time scheduled
            request.first_scheduled_s = now
            self.queued_prompt_tokens -= request.input_tokens
        self.prefilling[request.request_id] = request
        return cached

    def _speculative_room(self) -> int:
        """Blocks the decoding requests need for their next speculative step (k + 1 positions, or what is left of
        their output): drafted tokens occupy KV blocks until verified (paged pools only)."""
        kv, positions = self.kv, self.speculative.num_speculative_tokens + 1  # type: ignore[union-attr]  # speculating
        needed = 0
        for request_id, request in self.decoding.items():
            room = min(positions, request.output_tokens - request.generated)
            needed += kv.blocks_to_extend(kv.tokens_of(request_id), room)
        return needed

    def decodes_can_grow(self) -> bool:
        """Whether every decoding request has KV room for its next step (one token, or k + 1 when speculating)."""
        if not self.speculative:
            return self.kv.can_grow_one()
        return self._speculative_room() <= self.kv.free_blocks

    def _fits_beside_speculation(self, new_blocks: int) -> bool:
        """Speculating, an allocation that must leave the decodes their next step's room (prefix-cache hits are
        ignored: conservative)."""
        return new_blocks + self._speculative_room() <= self.kv.free_blocks

    def fits_append(self, request: Request, n: int, reserve_growth: bool = False) -> bool:
        """Whether a prefilling request could take ``n`` more prompt tokens now."""
        kv = self.kv
        if self.speculative and reserve_growth:
            return self._fits_beside_speculation(kv.blocks_to_extend(kv.tokens_of(request.request_id), n))
        return kv.can_append(request.request_id, n, reserve_growth)

    def continue_chunks(self, batch: Batch, budget: int, reserve_growth: bool,
                        chunk: int | None = None) -> tuple[int, bool]:
        """Each prompt being prefilled, in admission order, takes its next chunk (its rest, at most ``chunk`` tokens)
        within ``budget``, until one does not fit the budget or memory; returns what is left of the budget and
        whether every one took its chunk."""
        for request in list(self.prefilling.values()):
            n = min(request.prefill_tokens - request.prefilled, budget)
            if chunk is not None:
                n = min(n, chunk)
            if n <= 0 or not self.fits_append(request, n, reserve_growth):
                return budget, False
            self.kv.append(request.request_id, n)
            batch.prefills.append((request, n, request.prefilled))
            budget -= n
        return budget, True

    @property
    def decode_budget_tokens(self) -> int:
        """Tokens of the iteration's budget that the decodes take (k + 1 each when speculating)."""
        positions = self.speculative.num_speculative_tokens + 1 if self.speculative else 1
        return len(self.decoding) * positions

    @functools.cached_property
    def _rng(self) -> np.random.Generator:
        """Speculative acceptance draws, seeded when first needed (a cluster of many replicas need not seed each)."""
        return np.random.default_rng(self._seed)

    @functools.cached_property
    def _rates(self) -> np.ndarray:
        """a_1 … a_k of :attr:`SpeculativeConfig.rates`, as one row to compare each step's draws with."""
        return np.array(self.speculative.rates)  # type: ignore[union-attr]  # set: only read while speculating

    def _accepted(self, count: int) -> np.ndarray:
        """Accepted drafted tokens for ``count`` sequences: the leading successes of k independent trials, trial i
        a success with probability a_i (so P(A ≥ i) = Π_{j≤i} a_j and E[A] = Σ_{i=1..k} Π_{j≤i} a_j; with one rate a,
        a truncated geometric law: P(j) = a^j (1 − a) for j < k, P(k) = a^k). One (count × k) draw per step:
        the work grows with steps, not tokens. Each draw is counted in ``accepted_counts`` when it is kept."""
        trials = self._rng.random((count, len(self._rates))) < self._rates
        accepted = np.cumprod(trials, axis=1).sum(axis=1)
        if self.accepted_counts is not None:
            self.accepted_counts += np.bincount(accepted, minlength=len(self.accepted_counts))
        return accepted

    def _advance_speculative(self, batch: Batch) -> list[Request]:
        """Each decoding request emits 1 + accepted tokens (capped at its output): of the positions reserved for its
        verification its KV keeps the newest token and the accepted drafts, and releases the rejected ones."""
        finished, extra, kv = [], 0, self.kv
        positions = batch.decode_positions
        accepted = self._accepted(len(self.decoding)).tolist()
        for request, more in zip(list(self.decoding.values()), accepted, strict=True):
            left = request.output_tokens - request.generated
            emitted = min(1 + more, left)
            reserved = min(positions, left)
            if reserved > emitted:
                kv.release(request.request_id, reserved - emitted)
            request.generated += emitted
            extra += emitted - 1
            if request.generated == request.output_tokens:
                del self.decoding[request.request_id]
                finished.append(request)
        batch.extra_tokens = extra
        return finished

    def _start_decoding(self, request: Request) -> None:
        if self.speculative:  # each request advances by its own accepted tokens: no shared clock
            self.decoding[request.request_id] = request
            return
        self.kv.start_growing(request.request_id)
        request.gen_offset = request.generated - self.clock
        request.finish_clock = self.clock + request.output_tokens - request.generated
        self.decoding[request.request_id] = request
        heapq.heappush(self._finishes, (request.finish_clock, request.request_id, request))

    def preempt_latest(self, batch: Batch, now: float) -> None:
        """Preempt the running request of the lowest priority that arrived last (vLLM's rule): a decoding one is
        swapped out when ``preemption: swap`` and the host has room, otherwise (and always mid-prefill) recomputed
        later. It returns to the front of its priority in the queue."""
        victim = max(
            (*self.decoding.values(), *self.prefilling.values()),
            key=lambda r: (r.priority, r.arrival_s, r.request_id),
        )
        was_decoding = victim.request_id in self.decoding
        if was_decoding and not self.speculative:
            victim.generated = victim.gen_offset + self.clock
            victim.finish_clock = -1  # its heap entry is now stale
        if was_decoding:
            del self.decoding[victim.request_id]
            tokens = self.kv.tokens_of(victim.request_id)
            if self.swapped_tokens + tokens <= self.swap_capacity_tokens:
                victim.swapped_tokens = tokens
                self.swapped_tokens += tokens
                batch.swap_tokens += tokens
        else:
            del self.prefilling[victim.request_id]
            victim.prefilled = 0
        self.kv.free(victim.request_id)
        if self.no_evict:
            self.committed_blocks -= self.kv.blocks_for(victim.total_tokens)
        if self.lora is not None:
            self.lora.leave(victim.adapter)
        victim.status = WAITING
        victim.preemptions += 1
        victim.preempted_at = now
        self._requeue_front(victim)
        batch.preempted.append((victim, was_decoding))


SCHEDULERS: Registry[Scheduler] = Registry("scheduler")
