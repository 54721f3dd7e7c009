"""A replica: runs its scheduler's batches on its cost model, driven by SimPy timeouts.

Each iteration (or run of identical decode iterations) is one SimPy timeout whose callback accounts it and starts
the next. A decode-only batch runs ``stable_steps`` iterations at once: the cost model gives a step as ``a + c·S``
(S = context sum, growing by B per step), so the run ends at a closed-form time. If a request arrives meanwhile and
the scheduler says the queue could change the batch (``wants_boundary``), the run is cut at the end of the iteration
in progress — where the newcomer would join with one iteration at a time (``fast_forward=False``, kept to test the
equivalence). A superseded wakeup is disarmed: it stays queued but calls nothing.

Callbacks on timeouts rather than a generator process per replica: the same SimPy clock and event order, with less
overhead per event (see benchmarks/bench_scale.py).

Memory accounting: the allocator's :class:`~simulator.kv.base.MemoryBreakdown` (through its cheap affine summary,
``memory_state``) is taken when work starts (after the scheduler allocated) and when it ends (after the run's
growth, before completions free memory) and integrated over time by the trapezoid rule — exact for contiguous slabs
(constant during a run) and for idle time, within a block's sawtooth for paged last blocks. Running sequences are
integrated exactly (constant during a run).

Async scheduling (``scheduler.async_scheduling``: vLLM's ``--async-scheduling``, TensorRT-LLM's overlap scheduler,
SGLang's overlap schedule): the CPU forms each batch while the one before runs on the GPU, so a request that
arrives during a step misses the batch formed already and joins the one after — one step later than without it
(a decode run in progress is cut at the step running, the next batch runs one step, then the newcomer is
scheduled). A request that reaches an idle replica starts at once. The CPU time this hides stays in the engine
profile's fitted per-iteration cost.

The scheduler's poll (``scheduler.recv_interval`` N > 1: SGLang's ``--scheduler-recv-interval``, whose recv skipper
weighs a decode step 1 and any other step, or none, 1,000): arrivals during work wait in the intake until the
scheduler polls — at once after work with prompt tokens or on an idle replica, after decode steps when N of them
have run since its last poll — and a decode run is cut at the first poll after an arrival, not at the step running.
What it took in then joins the batch formed at that poll (with async scheduling, the one after). Lock-step groups
(attention DP) are refused by the config, as SGLang refuses them.

Held first tokens (``EngineProfile.prompt_batch_holds_outputs``, with async scheduling: SGLang's overlap loop hands
a batch's outputs out only once the next batch is launched, ``resolve_last_batch_result`` waiting on its
``launch_done``, and a batch with prompt tokens runs eagerly, its launch done only as its GPU work ends): the first
token of a prompt that completes in one piece of work leaves at the end of the next when that one has prompt
tokens too (prefill-priority engines run prompt batches back to back), else at once. The request's first gap
shrinks by as much, so TTFT plus its gaps is still its latency. Without it, SGLang's H100 rows measure a longer
TTFT than predicted by what the predicted TPOT exceeds the measured one times the output tokens — the same latency,
the first token later (Qwen3-32B at TP 2, 16 clients, 1,024 / 128 tokens: 841 ms and 16.5 ms measured, 606 and
18.0 ms predicted without it, 793 and 17.0 ms with it and the profile's fixed costs refitted). Decode tokens before
a prompt batch are held the same way; they are left at their step's end here (their gaps keep their sizes, the
stall counted in the gap after them instead of before), as are the tokens of a prompt that finishes with its
first token and of a re-prefill after preemption.

Inter-token gaps: decoding requests are grouped by the time of their last token (the end of the last decode run, or
the prefill that started them). A run's first step gives each group one gap, ``run start − last token + d_0``
(which includes any prefill stall); the remaining steps give ``d_1 … d_{k−1}`` to every request of the batch.
Each request's longest gap is kept the same way, per run (:mod:`simulator.cluster.longest_gap`).

Client cancellation (:meth:`Replica.withdraw`, :mod:`simulator.cluster.cancellation`): a cancelled request waiting
here leaves the queue at once; a running one leaves at the end of the iteration in progress — an engine applies an
abort between steps, as vLLM's engine core does — where a run of decode steps in progress is cut, and its KV is
freed then (at once when no work is in progress). Its gap group and longest-gap bookkeeping are left as a
preempted request's are.

Iteration bounds (``metrics.iteration_bounds``): a work's FLOPs, bytes and time split are taken from the cost model
as it is planned (an iteration's, or a decode run's affine pair) and recorded, with its steps' times, as it ends
(:mod:`simulator.results.bounds`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import simpy

from simulator.cluster.longest_gap import SuffixMax
from simulator.cluster.wakeup import Wakeup
from simulator.cost.base import CostModel, IterationShape, decode_run_time
from simulator.cost.draft import Draft
from simulator.cost.lora import LoRACost
from simulator.cost.vision import VisionCost
from simulator.cost.work import Work, contended
from simulator.request import CANCELLED, REJECTED, WAITING, Request
from simulator.results.observers import iteration_phase
from simulator.results.recorder import Recorder
from simulator.schedulers.base import Batch, Scheduler, completes_prefill

if TYPE_CHECKING:
    from simulator.cluster.lockstep import Lockstep
    from simulator.results.bounds import IterationBounds, Roofs
    from simulator.results.observers import Observer
    from simulator.results.token_log import TokenLog
    from simulator.schedulers.lora import AdapterSlots

NO_RUN = -math.inf  # the end of the last decode run, before any
NO_WORK = Work()


def steps_done_by(a: float, c: float, batch_size: int, context_sum0: int, elapsed: float, limit: int) -> int:
    """Smallest k in [1, limit] whose first k steps end at or after ``elapsed`` seconds (the step in progress)."""
    # decode_run_time(k) = (c·B/2)·k² + (a + c·S0 − c·B/2)·k is increasing in k; solve = elapsed, then fix rounding.
    qa, qb = c * batch_size / 2, a + c * context_sum0 - c * batch_size / 2
    root = elapsed / qb if qa == 0 else (-qb + math.sqrt(qb * qb + 4 * qa * elapsed)) / (2 * qa)
    k = min(max(1, math.ceil(root)), limit)
    # the rounding fixes evaluate decode_run_time inline (the same expression, so the same floats)
    while k > 1 and (k - 1) * a + c * ((k - 1) * context_sum0 + batch_size * (k - 1) * (k - 2) / 2) >= elapsed:
        k -= 1
    while k < limit and k * a + c * (k * context_sum0 + batch_size * k * (k - 1) / 2) < elapsed:
        k += 1
    return k


class Replica:
    __slots__ = (
        "_batch", "_busy", "_cancelling", "_copied", "_decode_runs", "_duration", "_gap_groups", "_held", "_intake",
        "_iterations", "_joiners", "_kv_token_seconds", "_last_decode_end", "_longest", "_memory", "_memory_seconds",
        "_peak_batch_tokens", "_peak_kv_blocks", "_peak_running", "_pending", "_run", "_running", "_running_seconds",
        "_since_poll", "_start", "_state_seconds", "_steps", "_work", "async_scheduling", "bounds",
        "copy_seconds_per_token", "cost", "draft", "env", "fast_forward", "group", "hands_off", "holds_first_tokens",
        "index", "lora_cost", "neighbour", "new_scheduler", "observer", "on_done", "on_down", "on_left", "recorder",
        "recv_interval", "scheduler", "slowdown", "swap_seconds_per_token", "tokens", "up", "vision_cost",
    )

    def __init__(
        self, env: simpy.Environment, index: int, scheduler: Scheduler, cost: CostModel, recorder: Recorder,
        fast_forward: bool = True, swap_seconds_per_token: float = 0.0, copy_seconds_per_token: float = 0.0,
    ) -> None:
        """``swap_seconds_per_token``: host-link time to move one token of KV (per GPU) in or out;
        ``copy_seconds_per_token``: HBM time to copy one token of KV when a contiguous slab moves."""
        self.env = env
        self.swap_seconds_per_token = swap_seconds_per_token
        self.copy_seconds_per_token = copy_seconds_per_token
        self._running = 0  # running sequences during the current work
        self._copied = 0  # the allocator's copied_tokens already charged
        self._memory: tuple[float, tuple[float, ...]] | None = None  # (time, memory state) at the start of the work
        self._state_seconds = [0.0] * len(scheduler.kv.memory_state())  # ∫ memory state dt
        self._memory_seconds = 0.0  # the time that integral covers
        self.index = index
        self.scheduler = scheduler
        self.cost = cost
        self.recorder = recorder
        self.on_done = recorder.request_done  # where finished and rejected requests go (a disaggregated prefill
        # replica hands them on to the decode pool instead)
        self.fast_forward = fast_forward
        self.async_scheduling = False  # each batch is formed while the one before runs (module docstring)
        self.holds_first_tokens = False  # a prompt batch after a prompt batch holds its first tokens (docstring)
        self._held: list[Request] = []  # the first tokens of the work just ended, until the next work is known
        # arrivals the scheduler sees only after the next batch is formed, or at its next poll (recv_interval)
        self._intake: list[Request] = []
        self.recv_interval = 1  # the scheduler takes in arrivals every this many decode steps (module docstring)
        self._since_poll = 0  # decode steps since it last took them in, as of the current work's start
        self.hands_off = False  # a disaggregated prefill replica: finished prompts keep their KV until released
        self.group: Lockstep | None = None  # the lock step of an attention-DP rank: it times the steps
        self.up = True  # False while crashed (simulator.cluster.faults)
        # where a request sent here while down goes instead (set by what takes replicas down: faults, autoscaler)
        self.on_down: Callable[[Request], None] | None = None
        # builds an empty scheduler (and KV pool) for a restart after a crash
        self.new_scheduler: Callable[[], Scheduler] | None = None
        # told when cancelled requests have left (the autoscaler releases a drained replica then)
        self.on_left: Callable[[], None] | None = None
        self.slowdown = 1.0  # a slow fault: every step takes this many times longer
        # a noisy_neighbor fault: the (compute, bandwidth) shares of the GPU its neighbour takes
        self.neighbour: tuple[float, float] | None = None
        self.observer: Observer | None = None  # when the run is observed
        # when iteration bounds are recorded: where to, and this replica's peaks
        self.bounds: tuple[IterationBounds, Roofs] | None = None
        self._work: tuple[Work, Work] = (NO_WORK, NO_WORK)  # the current work's (w0, w1), when bounds are recorded
        self.tokens: TokenLog | None = None  # when every token's time is kept
        self.draft: Draft | None = None  # speculative decoding: what its drafts add to an iteration
        self.lora_cost: LoRACost | None = None  # LoRA adapters: their GEMMs (the scheduler's lora: their slots)
        self.vision_cost: VisionCost | None = None  # a vision model's image encoder (workload.images)
        self._busy = False  # an iteration is running or about to start
        self._pending = Wakeup(env, self._on_timeout)  # the wakeup that ends the current work
        self._batch: Batch | None = None
        self._start = 0.0
        self._steps = 0  # iterations in the current work
        self._duration = 0.0  # and their seconds
        self._run: tuple[float, float, int, int] = (0.0, 0.0, 0, 0)  # decode run: a, c, batch size, context sum
        self._gap_groups: dict[float, int] = {}  # last-token time -> decoding requests
        self._last_decode_end = NO_RUN
        self._decode_runs = 0  # decode runs finished so far
        self._longest = SuffixMax()  # per decode run, the longest gap of the requests that decoded in the run before
        self._joiners: list[Request] = []  # requests that start decoding at the next decode run
        self._cancelling: list[Request] = []  # running requests cancelled during the work in progress
        # this replica's totals, kept here (cheaper than the recorder's per-replica lists) until record_totals
        self._iterations = 0
        self._kv_token_seconds = 0.0  # ∫ resident KV tokens dt
        self._running_seconds = 0.0  # ∫ running sequences dt
        self._peak_kv_blocks = self._peak_running = self._peak_batch_tokens = 0

    # --- what routers see ---------------------------------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        """Requests waiting or running here."""
        scheduler = self.scheduler
        return len(self._intake) + len(scheduler.waiting) + len(scheduler.decoding) + len(scheduler.prefilling)

    @property
    def kv_load(self) -> float:
        """Fraction of the KV pool in use now: within a closed-form run of decode steps, after the steps completed
        by now (as one-step-at-a-time simulation would have it), not as of the run's start."""
        kv = self.scheduler.kv
        free = kv.free_blocks
        if self._busy and self._steps > 1:
            a, c, size, context_sum0 = self._run
            elapsed = self.env.now - self._start
            k = steps_done_by(a, c, size, context_sum0, elapsed, self._steps)
            completed = k if decode_run_time(a, c, size, context_sum0, k) <= elapsed else k - 1
            free = kv.free_blocks_after_growth(completed)
        return 1 - free / kv.num_blocks

    @property
    def queued_prompt_tokens(self) -> int:
        """Prompt tokens of the requests waiting here that were never scheduled (async scheduling's intake
        included): what ``cluster.admission: slo`` predicts a newcomer's wait from."""
        queued = self.scheduler.queued_prompt_tokens
        for request in self._intake:  # the arrivals of one step at most
            queued += request.input_tokens
        return queued

    def has_adapter(self, adapter: int) -> bool:
        """Whether LoRA adapter ``adapter`` is in one of this replica's GPU slots."""
        lora = self.scheduler.lora
        return lora is not None and adapter in lora.gpu

    def cached_prefix_tokens(self, request: Request) -> int:
        """Leading prompt tokens of ``request`` this replica's prefix cache holds now (0 without a prefix or with
        caching off): the scheduler's own answer, so a lower KV tier that the scheduler counts is counted here."""
        return self.scheduler.cached_tokens(request) if request.prefix else 0

    # --- arrivals ----------------------------------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        """A request arrives at this replica (rejected at once if it can never run here; dropped if its client
        cancelled it on its way here)."""
        if request.status == CANCELLED:
            return
        if not self.up:
            self.on_down(request)  # type: ignore[misc]  # set by whatever took the replica down
            return
        request.replica = self.index
        reason = self.scheduler.rejection_reason(request, len(self._intake))
        if reason:
            request.status, request.reject_reason = REJECTED, reason
            self.on_done(request)
            return
        if self.recv_interval > 1 and self._busy:  # it waits for the scheduler's next poll (no lock-step groups)
            self._intake.append(request)
            if self._steps > 1:
                self._cut_run(self.env.now, at_poll=True)
            return
        if self.async_scheduling and (self._batch is not None if self.group is None else self.group.stepping):
            self._intake.append(request)  # the next batch is formed already: it joins the one after
            if self.group is not None:
                self.group.cut_now()
            elif self._steps > 1:
                self._cut_run(self.env.now)
            return
        self.scheduler.enqueue(request)
        if self.group is not None:
            self.group.kick()
        elif not self._busy:
            self._busy = True
            self._wait(0.0)  # start after every arrival of this instant is queued
        elif self._steps > 1:
            if self.scheduler.wants_boundary():
                self._cut_run(self.env.now)
            elif (deadline := self.scheduler.queue_deadline()) is not None:
                self._cut_run(deadline)  # its expiry may unblock the queue behind it

    # --- requests that leave early: client cancellation, KV lost upstream ---------------------------------------
    def withdraw(self, request: Request) -> None:
        """``request`` leaves this replica — its client cancelled it (simulator.cluster.cancellation), or the
        prefill replica that held its KV crashed — its status still what it was: out of the intake or the waiting
        queue at once; if it runs here, dropped at the end of the iteration in progress (a decode run is cut at the
        step running), or at once when no work is in progress. Nothing when it is not here."""
        scheduler, request_id = self.scheduler, request.request_id
        batch = self._batch
        if scheduler.prefilling.get(request_id) is request or scheduler.decoding.get(request_id) is request or (
            batch is not None and request in batch.swap_ins
        ):
            if batch is None:  # nothing in progress: it leaves now
                now, kv = self.env.now, scheduler.kv
                if self._memory is not None:
                    self._close_memory(now, self._memory[1])
                self._drop(request)
                self._memory = (now, kv.memory_state())
                self._queue_changed()
            else:
                self._cancelling.append(request)
                if self.group is not None:
                    self.group.cut_now()
                elif self._steps > 1:
                    self._cut_run(self.env.now)
        elif request in self._intake:
            self._intake.remove(request)
            if self.on_left is not None:
                self.on_left()
        elif request.status == WAITING and scheduler.withdraw(request):
            self._queue_changed()

    def _queue_changed(self) -> None:
        """A request left the queue or the batch between iterations: requests still waiting on an idle replica are
        tried again now (the one that left may have blocked them), and a run of decode steps is cut where the
        scheduler says the queue could change the batch."""
        if self.group is not None:
            self.group.kick()
        elif not self._busy:
            if self.scheduler.waiting:
                self._busy = True
                self._wait(0.0)
        elif self._steps > 1 and self.scheduler.wants_boundary():
            self._cut_run(self.env.now)
        if self.on_left is not None:
            self.on_left()

    def _drop(self, request: Request) -> None:
        """Take a cancelled running request out at an iteration boundary: out of its gap group (as a preempted
        one) if it decodes, out of the held first tokens, its KV freed; its output tokens so far count as
        wasted (``cancelled_output_tokens``)."""
        if request.request_id in self.scheduler.decoding:
            self._forget(request)
        if request in self._held:
            self._held.remove(request)
        self.recorder.cancelled_output_tokens += self.scheduler.abort(request)

    def _without_cancelled(self, finished: list[Request]) -> list[Request]:
        """The requests a work finished, less those cancelled during it: these never complete; they leave, their KV
        freed."""
        kept = [request for request in finished if request.status != CANCELLED]
        if len(kept) < len(finished):
            for request in finished:
                if request.status == CANCELLED:
                    self.recorder.cancelled_output_tokens += self.scheduler.abort(request)
        return kept

    def release_intake(self) -> bool:
        """At a boundary once the next batch is formed (async scheduling) or the scheduler polls (recv_interval):
        the scheduler sees the requests held in the intake. Whether they could change the batch at the next boundary
        (so a decode run must stop after one step)."""
        for request in self._intake:
            self.scheduler.enqueue(request)
        self._intake = []
        return self.scheduler.wants_boundary()

    def release_kv(self, request: Request) -> None:
        """The decode side took ``request``'s KV: free it here and, if idle with requests waiting, start on them
        (the memory integral is closed at this instant when idle; within a work it is closed at the work's end)."""
        kv, now = self.scheduler.kv, self.env.now
        if not self._busy and self._memory is not None:
            self._close_memory(now, self._memory[1])
        kv.free(request.request_id)
        if not self._busy:
            self._memory = (now, kv.memory_state())
            if self.scheduler.waiting:
                if self.group is not None:
                    self.group.kick()
                else:
                    self._busy = True
                    self._wait(0.0)

    # --- faults (simulator.cluster.faults) ------------------------------------------------------------------
    def crash(self) -> list[Request]:
        """Stop now, losing the work in progress and the KV pool; returns the requests that were queued or running
        here (the caller sends them elsewhere or fails them). The replica stays down until :meth:`restart`."""
        now, scheduler = self.env.now, self.scheduler
        if self._busy and self._batch is not None:
            self._running_seconds -= self._running * max(self._start + self._duration - now, 0.0)
        lost = [*self._intake, *scheduler.waiting, *scheduler.prefilling.values(), *scheduler.decoding.values()]
        if self._busy and self._batch is not None:
            lost += self._batch.swap_ins  # their KV was coming back (or in from a prefill replica) this iteration
        self._stop(now)
        self._fresh_scheduler()
        self._memory = (now, self.scheduler.kv.memory_state())  # an empty pool while down
        return lost

    def restart(self) -> None:
        """Back up, empty, taking work again."""
        self.up = True

    # --- autoscaling (simulator.cluster.autoscaler) --------------------------------------------------------------
    def power_off(self) -> None:
        """Released by the autoscaler (drained: nothing waiting or running): down, its memory no longer
        integrated (a released replica holds no GPUs)."""
        self._stop(self.env.now)
        self._memory = None

    def power_on(self) -> None:
        """Provisioned anew (weights loaded): up with an empty scheduler, KV pool and prefix cache."""
        self._fresh_scheduler()
        self._memory = (self.env.now, self.scheduler.kv.memory_state())
        self.up = True

    def _fresh_scheduler(self) -> None:
        """An empty scheduler and KV pool in place of the old, keeping the hook the pool's hand-off set on it."""
        hook = self.scheduler.on_remote_admit
        if self.new_scheduler is None:
            raise RuntimeError(f"replica {self.index} has no new_scheduler to restart with")
        self.scheduler = self.new_scheduler()
        self.scheduler.on_remote_admit = hook

    def _stop(self, now: float) -> None:
        """Down now: the work in progress never ends, the memory integral is closed, the iteration state cleared."""
        if self._pending.callbacks is not None:
            self._pending.callbacks = ()
        if self._memory is not None:
            self._close_memory(now, self._memory[1])
        self._batch, self._busy, self._steps, self._copied = None, False, 0, 0
        self._gap_groups, self._last_decode_end, self._joiners, self._intake, self._held = {}, NO_RUN, [], [], []
        self._cancelling = []
        self.up = False

    def set_slowdown(self, factor: float) -> None:
        """Run every step ``factor`` times slower from the next iteration boundary on (a run of decode steps in
        progress is cut at its current step)."""
        self.slowdown = factor
        self._cut_now()

    def set_neighbour(self, shares: tuple[float, float] | None) -> None:
        """From the next iteration boundary on (a run of decode steps in progress is cut at its current step), a
        neighbour takes ``shares`` = (compute, bandwidth) of the GPU (None: no neighbour), each step's parts
        stretched by :func:`~simulator.cost.work.contended`."""
        self.neighbour = shares
        self._cut_now()

    def _cut_now(self) -> None:
        """Make the step in progress the last of its work: what the next one costs has changed."""
        if self.group is not None:  # an attention-DP rank: its group's run is cut (every rank slows together)
            self.group.cut_now()
        elif self._busy and self._steps > 1:
            self._cut_run(self.env.now)

    def _cut_run(self, at: float, at_poll: bool = False) -> None:
        """End the decode run at the first iteration boundary at or after ``at`` — with ``at_poll``, the first there
        at which the scheduler polls for arrivals: after the run's step ``recv_interval − since_poll``, then every
        ``recv_interval`` steps (:meth:`_poll`) — if that is before its end."""
        a, c, size, context_sum0 = self._run
        start, limit = self._start, self._steps
        steps = steps_done_by(a, c, size, context_sum0, at - start, limit)
        if at_poll:
            every = self.recv_interval
            first = every - self._since_poll
            steps = first if steps <= first else first + -(-(steps - first) // every) * every
        if steps < limit:
            done = decode_run_time(a, c, size, context_sum0, steps)
            self._shorten(steps, done)
            self._wait(start + done - self.env.now)

    def _poll(self) -> bool:
        """At a boundary, with ``recv_interval`` > 1: whether the scheduler takes in the arrivals now — after work
        with prompt tokens, or none (idle), at once (SGLang's recv skipper weighs those 1,000 steps); after decode
        steps, every ``recv_interval`` of them since it last did — and the count carried into the next work."""
        batch = self._batch
        if batch is None or batch.prefills:
            self._since_poll = 0
            return True
        count, every = self._since_poll + self._steps, self.recv_interval
        if count < every:
            self._since_poll = count
            return False
        self._since_poll = (count - every) % every  # polls at the steps where the count reached every
        return self._since_poll == 0

    def _shorten(self, steps: int, seconds: float) -> None:
        """The decode run in progress ends after ``steps`` steps, ``seconds`` after its start."""
        self._steps = steps
        self._running_seconds -= self._running * (self._duration - seconds)
        self._duration = seconds

    # --- iterations --------------------------------------------------------------------------------------------
    def _wait(self, delay: float) -> None:
        """End the current work after ``delay`` seconds (a wakeup still pending is disarmed)."""
        self._pending = self._pending.schedule(delay)  # a new one if a cut left this one queued (disarmed)

    def _on_timeout(self, wakeup: Wakeup) -> None:
        if self.group is not None:  # a rank's own timer (a batching timeout, a queue deadline): the group's step
            self.group.kick()
            return
        batch, now = self._batch, wakeup.at
        if batch is not None:
            self._finish(batch, self._steps, now)
        self._begin(now)

    def _close_memory(self, now: float, end: tuple[float, ...]) -> None:
        """Integrate the memory state since the work started, by the trapezoid rule up to ``end``."""
        if self._memory is None:
            return
        start_time, a = self._memory
        half = (now - start_time) / 2
        if half > 0:
            self._memory_seconds += now - start_time
            s = self._state_seconds
            if len(s) == 2:  # a paged pool's (tokens, blocks), unrolled: this runs at every boundary
                s[0] += (a[0] + end[0]) * half
                s[1] += (a[1] + end[1]) * half
                return
            for i, x in enumerate(a):
                s[i] += (x + end[i]) * half

    def record_totals(self) -> None:
        """Write this replica's totals into the recorder (once, when the simulation ends)."""
        rec, index = self.recorder, self.index
        rec.iterations += self._iterations
        rec.kv_token_seconds[index] = self._kv_token_seconds
        rec.running_seconds[index] = self._running_seconds
        rec.peak_kv_blocks[index] = self._peak_kv_blocks
        rec.peak_running[index] = self._peak_running
        rec.peak_batch_tokens[index] = self._peak_batch_tokens
        rec.kv_breakdown_seconds[index] = list(
            self.scheduler.kv.breakdown_integral(self._state_seconds, self._memory_seconds)
        )

    def _begin(self, now: float) -> None:
        polled = self.recv_interval == 1 or self._poll()
        if polled and self._intake and not self.async_scheduling:  # taken in for the batch formed now
            self.release_intake()
        plan = self._plan(now)
        if self._intake and (polled or plan is None):  # (nothing to run: the idle scheduler polls at once)
            if not polled:
                self._since_poll = 0
            changes = self.release_intake()
            if plan is None:  # nothing to run without them: they start at once
                plan = self._plan(now)
            elif changes and plan[0] > 1:  # they join after this work's first step
                plan = (1, *plan[1:])
        elif self._intake and plan is not None and plan[0] > 1:  # held until the next poll: the run stops there
            plan = (min(plan[0], self.recv_interval - self._since_poll), *plan[1:])
        if plan is not None:
            self._settle(now, plan[0], plan[1])
            self._wait(self._duration)

    def _plan(self, now: float) -> tuple[int, tuple[float, float, int, int], int, bool] | None:
        """Schedule the next work from ``now``: ``(steps, (a, c, batch size, context sum), tokens, is_run)`` — step
        j of it lasts ``a + c·(context sum + j·batch size)`` (one iteration: ``c`` = 0, ``a`` its duration),
        ``tokens`` the rows of its first pass, ``is_run`` a closed-form run of decode steps — or None when there
        is nothing to run (the replica is idle then, with a wakeup set if the scheduler asks for one)."""
        scheduler = self.scheduler
        kv = scheduler.kv
        if self._batch is None and self._memory is not None:  # idle until now: memory did not change
            self._close_memory(now, self._memory[1])
        if scheduler.queue_delay_s is not None:
            for request in scheduler.expire_waiting(now):
                self.on_done(request)
        batch = scheduler.schedule(now)
        self._memory = (now, kv.memory_state())
        copy_tokens = kv.copied_tokens - self._copied
        self._copied = kv.copied_tokens
        for victim, was_decoding in batch.preempted:
            if was_decoding:
                self._forget(victim)
        if (observer := self.observer) is not None:
            self._observe_start(observer, batch, now)
        if not batch.prefills and not batch.decode and not batch.swap_ins:  # empty
            self._busy, self._batch, self._steps = False, None, 0
            if self._held:  # nothing launches after them: they leave now
                self._release_first_tokens(now)
            wake = min((t for t in (scheduler.wake_at(now), scheduler.queue_deadline()) if t is not None),
                       default=None)
            if wake is not None:
                self._wait(wake - now)  # e.g. a batching timeout; an arrival meanwhile supersedes it
            return None
        self._busy, self._batch = True, batch
        num_decodes, context_sum = batch.num_decodes, batch.decode_context_sum
        positions = batch.decode_positions
        self._running = running = len(scheduler.decoding) + len(scheduler.prefilling) + len(batch.swap_ins)
        if batch.prefills or batch.swap_ins or batch.swap_tokens or copy_tokens or positions > 1 or (
            not self.fast_forward
        ):
            pieces: list[tuple[int, int]] = []  # prompt chunks (new, cached)
            tokens = num_decodes * positions  # and the iteration's tokens
            for _, new, cached in batch.prefills:
                pieces.append((new, cached))
                tokens += new
            chunks = tuple(pieces)
            if running > self._peak_running:
                self._peak_running = running
            if tokens > self._peak_batch_tokens:
                self._peak_batch_tokens = tokens
            shape = IterationShape(chunks, num_decodes, context_sum, positions)
            duration = self.cost.iteration_time(shape)
            if self.bounds is not None:
                self._work = (self.cost.iteration_work(shape), NO_WORK)
            encoder = NO_WORK
            if self.vision_cost is not None:  # the images of the prompts that start here go through the encoder
                images: list[int] = []
                for request, _, _ in batch.prefills:
                    if request.images and not request.encoded:
                        request.encoded = True
                        images.extend(request.images)
                if images:
                    encoder = self.vision_cost.work(images)
                    duration += encoder.seconds
                    if self.bounds is not None:
                        self._work = (self._work[0] + encoder, NO_WORK)
            if self.neighbour is not None:  # its parts stretched by the rates left (simulator.cost.work.contended)
                work = self._work[0] if self.bounds is not None else self.cost.iteration_work(shape) + encoder
                slowed = contended(work, *self.neighbour)
                duration += slowed.seconds - work.seconds
                if self.bounds is not None:
                    self._work = (slowed, NO_WORK)
            if self.draft is not None:  # speculating: the drafts around the target pass (simulator.cost.draft)
                duration += self.draft.time(shape)
            duration += batch.swap_tokens * self.swap_seconds_per_token  # transfers block the iteration
            duration += copy_tokens * self.copy_seconds_per_token
            if self.lora_cost is not None:  # the adapters' GEMMs, and the loads of those that joined (blocking)
                lora: AdapterSlots = scheduler.lora  # type: ignore[assignment]  # set with lora_cost by the pool
                duration += self.lora_cost.time(tokens, len(lora.running)) + lora.take_pending()
            tiers = kv.tiers
            if tiers is not None and tiers.pending_load_s:  # prompts' KV loaded from below HBM (simulator.kv.tiers)
                duration = tiers.iteration_time(duration)
            self.recorder.copied_tokens += copy_tokens
            return 1, (duration, 0.0, num_decodes, context_sum), tokens, False
        if num_decodes > self._peak_batch_tokens:
            self._peak_batch_tokens = num_decodes
        a, c = self.cost.decode_step_coefficients(num_decodes)
        if self.bounds is not None:
            self._work = self.cost.decode_step_work(num_decodes)
        if self.neighbour is not None:  # w0 + w1·S stretched part by part: still affine in S
            w0, w1 = self._work if self.bounds is not None else self.cost.decode_step_work(num_decodes)
            s0, s1 = contended(w0, *self.neighbour), contended(w1, *self.neighbour)
            a, c = a + s0.seconds - w0.seconds, c + s1.seconds - w1.seconds
            if self.bounds is not None:
                self._work = (s0, s1)
        if self.lora_cost is not None:  # no adapter joins a decode-only batch: nothing to load
            a += self.lora_cost.time(num_decodes, len(scheduler.lora.running))  # type: ignore[union-attr]  # likewise
        steps = scheduler.stable_steps(batch)
        if scheduler.queue_delay_s is not None and steps > 1:
            deadline = scheduler.queue_deadline()
            if deadline is not None:  # end at the first boundary at or after it
                steps = steps_done_by(a, c, num_decodes, context_sum, deadline - now, steps)
        return steps, (a, c, num_decodes, context_sum), num_decodes, True

    def _settle(self, now: float, steps: int, run: tuple[float, float, int, int]) -> None:
        """Start the planned work at ``now``: ``steps`` steps timed by ``run`` (:meth:`_plan`; a lock-step group
        passes the group's timing)."""
        if self.slowdown != 1.0:
            run = (run[0] * self.slowdown, run[1] * self.slowdown, run[2], run[3])
        a, c, num_decodes, context_sum = run
        batch: Batch = self._batch  # type: ignore[assignment]  # set by the plan being settled
        self._start, self._steps, self._run = now, steps, run
        first_step = a + c * context_sum
        duration = first_step if steps == 1 else decode_run_time(a, c, num_decodes, context_sum, steps)
        if self._held:
            self._release_first_tokens(now + duration if batch.prefills else now)
        if batch.decode:
            for last_token, count in self._gap_groups.items():
                self.recorder.itl.add(now - last_token + first_step, count)
        self._running_seconds += self._running * duration
        self._duration = duration

    def _finish(self, batch: Batch, steps: int, now: float) -> None:
        scheduler, rec = self.scheduler, self.recorder
        kv = scheduler.kv
        a, c, size, context_sum0 = self._run
        base, slope = a + c * context_sum0, c * size
        resident = kv.used_tokens + size
        if batch.decode:  # its gaps: each one's first step (from its last token), then d_1 … d_{k−1}, d_{k−1} longest
            if steps > 1:
                rec.itl.add_run(base, slope, steps - 1, size)
            start, last_step = self._start, base + slope * (steps - 1)  # one step: d_0, no first gap is shorter
            for request in self._joiners:
                gap = start - request.gap_key + base
                if last_step > gap:
                    gap = last_step
                if gap > request.max_itl_s:
                    request.max_itl_s = gap
            # the first step's gap of the requests that decoded in the run before (none after a stop)
            first = start - self._last_decode_end + base if self._last_decode_end != NO_RUN else NO_RUN
            self._longest.push(self._decode_runs, first if first > last_step else last_step)
        starting = self._note_prompts(batch, now) if batch.prefills or batch.swap_ins or batch.swap_tokens else ()
        if self.holds_first_tokens and batch.prefills:
            self._held = [request for request in starting if request.generated == 0]  # their first token
        if self.observer is not None:
            prefill_tokens = sum(new for _, new, _ in batch.prefills)
            self.observer.iteration(self.index, self._start, now, steps, prefill_tokens, batch.num_decodes)
        if self.bounds is not None:
            bounds, roofs = self.bounds
            phase = iteration_phase(sum(new for _, new, _ in batch.prefills), batch.num_decodes)
            bounds.record(roofs, self.index, phase, self._start, steps, base, slope, self._work, context_sum0, size)
        if self.tokens is not None:
            held = {request.request_id for request in self._held}
            self.tokens.record(self.index, self._start, now, self._run, steps,
                               list(scheduler.decoding) if batch.decode else [],
                               [r.request_id for r, new, done in batch.prefills
                                if completes_prefill(r, new, done) and r.request_id not in held])
        finished = scheduler.advance(batch, steps, now)
        if finished:
            self._stopped_decoding(finished)
        if batch.extra_tokens:
            rec.itl.add(0.0, batch.extra_tokens)  # tokens accepted together arrive together
        # prompts allocated already; _plan took the memory state as this work started
        self._close_memory(now, kv.memory_state() if batch.decode else self._memory[1])  # type: ignore[index]
        self._iterations += steps
        # ∫ resident KV tokens dt: step j (0-based) lasts base + slope·j with resident + j·size tokens.
        k = steps
        if k == 1:
            self._kv_token_seconds += base * resident
        else:
            self._kv_token_seconds += (
                k * base * resident + (base * size + slope * resident) * k * (k - 1) / 2
                + slope * size * (k - 1) * k * (2 * k - 1) / 6
            )
        used_blocks = kv.num_blocks - kv.free_blocks
        if used_blocks > self._peak_kv_blocks:
            self._peak_kv_blocks = used_blocks
        if finished and self._cancelling:
            finished = self._without_cancelled(finished)
        if finished:
            scheduler.retire(finished, now, self.hands_off)
            for request in finished:
                self.on_done(request)
        groups = self._gap_groups
        if batch.decode:
            self._last_decode_end = now
            self._decode_runs += 1
            running = len(scheduler.decoding) - len(starting)
            groups = self._gap_groups = {now: running} if running else {}
            self._joiners = []
        # newly decoding requests join the group of their last token (a swapped-in one: from before the swap)
        for request in starting:
            request.gap_key, request.gap_run = request.last_token_s, self._decode_runs
            groups[request.gap_key] = groups.get(request.gap_key, 0) + 1
        self._joiners += starting
        if self._cancelling:  # the running requests cancelled during this work leave now
            cancelling, self._cancelling = self._cancelling, []
            for request in cancelling:
                request_id = request.request_id
                if scheduler.decoding.get(request_id) is request or scheduler.prefilling.get(request_id) is request:
                    self._drop(request)
            if self.on_left is not None:
                self.on_left()

    def _release_first_tokens(self, at: float) -> None:
        """The held first tokens leave at ``at`` (at or after the end of the work that produced them): their
        requests' first and last token times move there, and the gap group of those still decoding here (one
        preempted by the batch just formed has left its group: :meth:`_forget`)."""
        held, self._held = self._held, []
        groups = self._gap_groups
        for request in held:
            if at == request.first_token_s:
                continue
            if request.gap_run >= 0:
                remaining = groups[request.gap_key] - 1
                if remaining:
                    groups[request.gap_key] = remaining
                else:
                    del groups[request.gap_key]
                request.gap_key = at
                groups[at] = groups.get(at, 0) + 1
            request.first_token_s = request.last_token_s = at
        if self.tokens is not None:
            self.tokens.record(self.index, at, at, (0.0, 0.0, 0, 0), 0, [], [r.request_id for r in held])

    def _stopped_decoding(self, requests: Iterable[Request]) -> None:
        """``requests`` decode here no more (finished or preempted): fold in, for those that decoded, the longest gap
        of the decode runs after the one they joined at (simulator.cluster.longest_gap)."""
        since = self._longest.since
        for request in requests:
            if request.gap_run >= 0:
                gap = since(request.gap_run + 1)
                if gap > request.max_itl_s:
                    request.max_itl_s = gap
                request.gap_run = -1

    def _observe_start(self, observer: Observer, batch: Batch, now: float) -> None:
        scheduler = self.scheduler
        for victim, _ in batch.preempted:
            observer.preemption(now, self.index, victim.request_id)
        kv = scheduler.kv
        tokens = sum(new for _, new, _ in batch.prefills) + batch.num_decodes
        observer.sample(now, self.index, len(scheduler.waiting), scheduler.num_running + len(batch.swap_ins), tokens,
                        1 - kv.free_blocks / kv.num_blocks)

    def _note_prompts(self, batch: Batch, now: float) -> list[Request]:
        """Count prompt and swap work; record re-prefill gaps; return the requests that will start decoding."""
        rec = self.recorder
        rec.swapped_tokens += batch.swap_tokens
        starting = list(batch.swap_ins)
        for request, new, done in batch.prefills:
            rec.prefill_tokens += new
            if not completes_prefill(request, new, done):
                continue
            if request.generated > 0:  # re-prefill after preemption: a gap between two output tokens
                rec.itl.add(now - request.last_token_s)
                if now - request.last_token_s > request.max_itl_s:
                    request.max_itl_s = now - request.last_token_s
            if request.generated + 1 < request.output_tokens:
                starting.append(request)
        return starting

    def _forget(self, victim: Request) -> None:
        """A preempted request leaves its gap group: the one it joined, or the last decode run's if it ran since."""
        joining = victim.gap_run == self._decode_runs
        last_token = victim.gap_key if joining else self._last_decode_end
        victim.last_token_s = last_token
        if joining:
            self._joiners.remove(victim)
            victim.gap_run = -1
        else:
            self._stopped_decoding((victim,))
        remaining = self._gap_groups[last_token] - 1
        if remaining:
            self._gap_groups[last_token] = remaining
        else:
            del self._gap_groups[last_token]
