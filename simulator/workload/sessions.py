"""Multi-turn sessions (``workload.sessions``): every turn of every session drawn up front, in session order.

Session s starts at the s-th time of the arrival process and has ``turns`` turns. Turn k (from 0) sends
``P_k = Σ_{j<k} (n_j + o_j) + n_k`` prompt tokens — every earlier turn's new input ``n_j`` and output ``o_j``,
then its own new input (``n_0`` drawn from ``input_tokens``, later ones from ``new_input_tokens``) — and answers
``o_k`` tokens. Only turn 0's arrival is known in advance (the others: NaN, set when they are sent). A turn's
prompt is its session's content: its :class:`~simulator.request.Prefix` names each of its tokens with the
session's own chained ids (a ``range``: O(1) memory), so turn k + 1 finds turn k's whole prompt cached, in whole
KV blocks (earlier turns' outputs were never prompt tokens of a cached request: they are recomputed), and no other
session shares anything.
"""

from __future__ import annotations

import numpy as np

from simulator.config.schema import WorkloadConfig
from simulator.request import Prefix
from simulator.workload.arrivals import arrival_times
from simulator.workload.lengths import sample_lengths

SESSION_ID_BASE = 1 << 40  # session content ids lie above any trace's hash ids and the prefix groups
SESSION_ID_STRIDE = 1 << 24  # content ids (tokens) per session


def generate_sessions(config: WorkloadConfig, seed: np.random.SeedSequence):
    """The :class:`~simulator.workload.Workload` of ``config.num_requests`` sessions (module docstring), with each
    request's ``sessions`` and ``turns`` index."""
    from simulator.workload import Workload

    sessions = config.sessions
    arrival_rng, turns_rng, first_rng, new_rng, output_rng = (np.random.default_rng(s) for s in seed.spawn(5))
    n = config.num_requests
    starts = arrival_times(config.arrival, n, arrival_rng)
    turns = sample_lengths(sessions.turns, n, turns_rng)
    session = np.repeat(np.arange(n), turns)
    first_of = np.concatenate([[0], np.cumsum(turns)[:-1]])
    turn = np.arange(session.size) - first_of[session]
    new = sample_lengths(sessions.new_input_tokens or config.input_tokens, session.size, new_rng)
    new = np.where(turn == 0, sample_lengths(config.input_tokens, n, first_rng)[session], new)
    outputs = sample_lengths(config.output_tokens, session.size, output_rng)
    spent = np.cumsum(new + outputs)  # tokens of every turn up to and including this one, over all sessions
    before_session = (spent - new - outputs)[first_of][session]
    inputs = spent - outputs - before_session  # Σ_{j<k}(n_j + o_j) + n_k within the session
    prefixes = np.empty(session.size, dtype=object)
    first_id = SESSION_ID_BASE + session * SESSION_ID_STRIDE
    prefixes[:] = [Prefix(range(start, start + p), 1) for start, p in zip(first_id.tolist(), inputs.tolist(),
                                                                          strict=True)]
    arrival_s = np.where(turn == 0, starts[session], np.nan)
    return Workload(arrival_s, inputs.astype(np.int64), outputs, prefixes, sessions=session, turns=turn)
