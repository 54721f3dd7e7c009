"""Multi-turn sessions (``workload.sessions``): every turn of every session drawn up front, in session order.

Session s starts at the s-th time of the arrival process and has ``turns`` turns. Turn k (from 0) sends ``f_k``
sub-requests at once (``fan_out``, default 1): sub-request i sends ``C_k + n_k + b_{k,i}`` prompt tokens — the
context ``C_k = Σ_{j<k} (n_j + Σ_i o_{j,i})`` (every earlier turn's new input and all its sub-requests' answers),
the turn's new input ``n_k`` (``n_0`` from ``input_tokens``, later ones from ``new_input_tokens``) and, when the
turn fans out, its own ``b_{k,i}`` (``branch_tokens``, default 0) — and answers ``o_{k,i}`` tokens. Without
fan-out this is ``P_k = Σ_{j<k} (n_j + o_j) + n_k``. Only turn 0's arrivals are known in advance (the others: NaN,
set when they are sent). With a sharegpt ``dataset``, a session is one of its conversations: its turns, new inputs
and answers are the conversation's. A prompt is its session's content: its :class:`~simulator.request.Prefix` names each
token with the session's own chained ids (a ``range``: O(1) memory; a branch's own tokens get ids of their own
after the shared ones), so turn k + 1 finds turn k's shared prompt cached, in whole KV blocks (answers were never
prompt tokens of a cached request: they are recomputed), sibling sub-requests share their context, and no other
session shares anything.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from simulator.config.base import MAX_REQUESTS
from simulator.config.workload import WorkloadConfig
from simulator.errors import ConfigError
from simulator.request import Prefix
from simulator.workload.arrivals import arrival_times
from simulator.workload.base import Workload
from simulator.workload.dataset import sample_conversations
from simulator.workload.lengths import sample_lengths

SESSION_ID_BASE = 1 << 40  # session content ids lie above any trace's hash ids and the prefix groups
SESSION_ID_STRIDE = 1 << 24  # content ids (tokens) per session


class BranchIds:
    """The chained ids of a sub-request's prompt: the session's shared ids, then its branch's own (a sequence of
    two ranges, O(1) memory)."""

    __slots__ = ("branch", "shared")

    def __init__(self, shared: range, branch: range) -> None:
        self.shared, self.branch = shared, branch

    def __len__(self) -> int:
        return len(self.shared) + len(self.branch)

    def __getitem__(self, index: int) -> int:
        shared = len(self.shared)
        return self.shared[index] if index < shared else self.branch[index - shared]

    def __iter__(self) -> Iterator[int]:
        return itertools.chain(self.shared, self.branch)


BRANCH_ID_BASE = 1 << 60  # a branch's own token ids: above every session's


def _within_limit(requests: int, what: str) -> None:
    """Refuse a workload of more than MAX_REQUESTS requests before building it (the schema bounds the sessions;
    their turns and fan-outs are drawn)."""
    if requests > MAX_REQUESTS:
        raise ConfigError(f"workload.sessions: {what} make {requests:,} requests, above the limit of "
                          f"{MAX_REQUESTS:,} per run")


def generate_sessions(config: WorkloadConfig, seed: np.random.SeedSequence):
    """The :class:`~simulator.workload.Workload` of ``config.num_requests`` sessions (module docstring), with each
    request's ``sessions`` and ``turns`` index (sub-requests of one turn share it)."""
    sessions, n, arrival = config.sessions, config.num_requests, config.arrival
    # the schema's rules for sessions: an arrival process, num_requests (no duration_s), turns unless a dataset
    assert sessions is not None and n is not None and arrival is not None
    arrival_rng, turns_rng, first_rng, new_rng, output_rng = (np.random.default_rng(s) for s in seed.spawn(5))
    fan_rng, branch_rng = (np.random.default_rng(s) for s in seed.spawn(2))  # after the five above: new streams
    starts = arrival_times(arrival, n, arrival_rng)
    skipped, given_outputs = 0, None
    if config.dataset is not None:  # each session one of the dataset's conversations
        conversations, skipped = sample_conversations(config.dataset, n, first_rng)
        turns = np.array([len(news) for news, _ in conversations], dtype=np.int64)
        new = np.concatenate([news for news, _ in conversations])
        given_outputs = np.concatenate([answers for _, answers in conversations])
    else:
        assert sessions.turns is not None
        turns = sample_lengths(sessions.turns, n, turns_rng)
    _within_limit(int(turns.sum()), f"{n:,} sessions of their drawn turns")
    step_session = np.repeat(np.arange(n), turns)  # one entry per (session, turn)
    first_step = np.concatenate([[0], np.cumsum(turns)[:-1]])
    step_turn = np.arange(step_session.size) - first_step[step_session]
    if config.dataset is None:
        assert config.input_tokens is not None  # a synthetic workload's lengths are required
        new = sample_lengths(sessions.new_input_tokens or config.input_tokens, step_session.size, new_rng)
        new = np.where(step_turn == 0, sample_lengths(config.input_tokens, n, first_rng)[step_session], new)
    fan = (sample_lengths(sessions.fan_out, step_session.size, fan_rng) if sessions.fan_out is not None
           else np.ones(step_session.size, np.int64))
    _within_limit(int(fan.sum()), f"{step_session.size:,} turns fanning out into their drawn sub-requests")
    step = np.repeat(np.arange(step_session.size), fan)  # each request's (session, turn)
    if given_outputs is not None:
        outputs = given_outputs
    else:
        assert config.output_tokens is not None  # likewise
        outputs = sample_lengths(config.output_tokens, step.size, output_rng)
    branch = np.where(fan[step] > 1, sample_lengths(sessions.branch_tokens, step.size, branch_rng), 0) if (
        sessions.branch_tokens is not None) else np.zeros(step.size, np.int64)
    answers = np.bincount(step, weights=outputs, minlength=step_session.size).astype(np.int64)
    spent = np.cumsum(new + answers)  # every step's new input and answers up to and including it, all sessions
    before_session = (spent - new - answers)[first_step][step_session]
    shared = (spent - answers - before_session)[step]  # C_k + n_k within the session, per request
    inputs = shared + branch
    session = step_session[step]
    first_id = SESSION_ID_BASE + session * SESSION_ID_STRIDE
    prefixes = np.empty(step.size, dtype=object)
    prefixes[:] = [Prefix(range(start, start + p), 1) if not b else
                   Prefix(BranchIds(range(start, start + p), range(BRANCH_ID_BASE + i * SESSION_ID_STRIDE,
                                                                   BRANCH_ID_BASE + i * SESSION_ID_STRIDE + b)), 1)
                   for i, (start, p, b) in enumerate(zip(first_id.tolist(), shared.tolist(), branch.tolist(),
                                                         strict=True))]
    turn = step_turn[step]
    arrival_s = np.where(turn == 0, starts[session], np.nan)
    return Workload(arrival_s, inputs.astype(np.int64), outputs, prefixes, skipped=skipped, sessions=session,
                    turns=turn)
