"""One request's state as it moves through a replica."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import NamedTuple, Protocol

WAITING, RUNNING, FINISHED, REJECTED, FAILED = "waiting", "running", "finished", "rejected", "failed"
CANCELLED = "cancelled"  # its client gave up on it (workload.cancel, workload.client_timeout_s)


class TokenIds(Protocol):
    """The ids a :class:`Prefix` names its units by: a tuple, a ``range`` (O(1) memory) or another sequence of ints
    (:class:`simulator.workload.sessions.BranchIds`)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> int: ...

    def __iter__(self) -> Iterator[int]: ...


class Prefix(NamedTuple):
    """Content identity of a prompt's leading tokens, for prefix caching.

    ``ids[i]`` names the content of tokens ``[0, (i + 1)·unit)`` — chained, like Mooncake's ``hash_ids``: two
    prompts with the same ``ids[i]`` agree on every token up to the end of unit i. A shared system prompt of P
    tokens is ``Prefix((group,), P)``.
    """

    ids: TokenIds
    unit: int

    def block_keys(self, block_size: int, tokens: int) -> list[tuple[int, int]]:
        """Keys of the full KV blocks among the first ``tokens`` tokens that lie inside the prefix: block j's key is
        (id of the unit holding its last token, j), which determines the content of tokens [0, (j + 1)·bs)."""
        end = min(len(self.ids) * self.unit, tokens)
        ids, unit = self.ids, self.unit
        return [(ids[((j + 1) * block_size - 1) // unit], j) for j in range(end // block_size)]


class Request:
    """A request and its timestamps (simulated seconds; NaN until they happen).

    ``generated`` counts output tokens emitted so far; while the request decodes, its scheduler keeps it lazily
    (``generated = gen_offset + scheduler.clock``) and writes it back when the request stops decoding.
    ``finish_clock`` is the scheduler clock at which a decoding request emits its last token.
    The KV cache of a running request holds ``input_tokens + generated - 1`` tokens after it emitted a token (the
    newest token is not yet written back), so a prefill processes ``input_tokens + generated`` tokens
    (``generated`` > 0 after a recompute preemption), possibly in chunks (``prefilled`` of them done), and emits one
    token when it completes.
    """

    __slots__ = (
        "adapter", "arrival_s", "asked_output_tokens", "cached_tokens", "class_id", "decode_admitted_s",
        "decode_output_tokens", "encoded",
        "finish_clock", "finish_s", "first_scheduled_s", "first_token_s", "gap_key", "gap_run", "gen_offset",
        "generated", "images", "input_tokens", "kv_arrived_s", "last_token_s", "max_itl_s", "output_tokens",
        "preempted_at", "preempted_s", "preemptions", "prefill_done_s", "prefilled", "prefix", "priority",
        "reject_reason", "remote_kv", "replica", "request_id", "retries", "session", "status", "swapped_tokens", "turn",
    )

    def __init__(
        self, request_id: int, arrival_s: float, input_tokens: int, output_tokens: int, prefix: Prefix | None = None,
        class_id: int = 0, priority: int = 0,
    ) -> None:
        self.request_id = request_id
        self.prefix = prefix
        self.class_id = class_id
        self.priority = priority  # lower is served first
        self.cached_tokens = 0  # prompt tokens found in the prefix cache at the last admission
        self.arrival_s = arrival_s
        self.input_tokens = input_tokens
        self.asked_output_tokens = output_tokens  # what its client asked for: never changes; its row states it
        self.output_tokens = output_tokens  # what the replica now running it generates (below the asked: a stop)
        self.replica = -1
        self.session, self.turn = -1, 0  # multi-turn workloads: the session and the turn in it (from 0)
        self.adapter = -1  # the LoRA adapter it names (lora), -1: the base model
        self.images: tuple[int, ...] = ()  # its images' tokens, each (part of input_tokens: workload.images)
        self.encoded = False  # its images went through the vision encoder (simulator.cost.vision)
        self.retries = 0  # times sent again after its replica crashed
        self.first_scheduled_s = math.nan
        self.first_token_s = math.nan
        self.last_token_s = math.nan
        self.finish_s = math.nan
        self.generated = 0
        self.gen_offset = 0
        self.finish_clock = -1
        self.prefilled = 0
        self.preemptions = 0
        self.preempted_at = math.nan
        self.preempted_s = 0.0  # time between preemptions and resuming (re-prefilled or swapped back in)
        self.swapped_tokens = 0  # KV tokens in host memory while swapped out
        self.remote_kv = False  # disaggregated: swapped_tokens of KV are arriving from a prefill replica
        self.prefill_done_s = math.nan  # disaggregated: when the prefill replica emitted the first token
        self.kv_arrived_s = math.nan  # disaggregated: when the KV reached the decode pool
        self.decode_admitted_s = math.nan  # and when a decode replica took it
        self.decode_output_tokens = output_tokens  # disaggregated: what its decode replica will generate
        self.gap_key = math.nan  # replica bookkeeping of inter-token gaps: the group it joined, and when
        self.gap_run = -1
        self.max_itl_s = 0.0  # its longest gap between two output tokens so far (simulator.cluster.longest_gap)
        self.status = WAITING
        self.reject_reason = ""

    def restart(self) -> None:
        """Forget a lost attempt (its replica crashed) so the request runs again from the start: the client sees
        its first token, and every later one, from the new attempt."""
        self.retries += 1
        self.status, self.replica = WAITING, -1
        self.first_scheduled_s = self.first_token_s = self.last_token_s = self.finish_s = math.nan
        self.generated = self.gen_offset = self.prefilled = self.cached_tokens = self.swapped_tokens = 0
        self.finish_clock, self.gap_key, self.gap_run, self.max_itl_s = -1, math.nan, -1, 0.0
        self.preempted_at = math.nan
        self.encoded = False  # the crashed replica's encoder output is lost with it

    @property
    def prefill_tokens(self) -> int:
        """Tokens the next prefill must process (prompt plus any output lost to preemption)."""
        return self.input_tokens + self.generated

    @property
    def total_tokens(self) -> int:
        """KV tokens held when the last token is emitted (the last one is never written back)."""
        return self.input_tokens + self.output_tokens - 1
