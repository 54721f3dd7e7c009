"""Which requests their clients give up on, and when (``workload.cancel``, ``workload.client_timeout_s``)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from simulator.config.workload import WorkloadConfig
from simulator.workload.lengths import sample_lengths

# the reasons a cancelled request's row gives: cancelled after_s after its send, abandoned at the timeout, or
# stopped by its client once it had received after_tokens output tokens
CLIENT_CANCEL, CLIENT_TIMEOUT, CLIENT_STOP = "client cancel", "client timeout", "client stop"


class ClientDeadlines(NamedTuple):
    """Per request (by id): ``delays`` the seconds after its send at which its client abandons it (``inf``:
    never), ``chosen`` whether that is a chosen cancellation (else the timeout), ``stops`` the output tokens after
    which its client stops it (0: none)."""

    delays: np.ndarray
    chosen: np.ndarray
    stops: np.ndarray


def client_deadlines(config: WorkloadConfig, n: int, rng: np.random.Generator) -> ClientDeadlines | None:
    """When the clients of ``n`` requests give up (:class:`ClientDeadlines`); None when the workload has neither
    ``cancel`` nor ``client_timeout_s``.

    Request i is chosen when ``u_i < cancel.fraction``, u_i the i-th uniform draw of ``rng`` (one per request, so
    the chosen ones do not depend on the lengths or arrivals); its deadline is min(``cancel.after_s`` if chosen,
    ``client_timeout_s``), a tie going to the cancellation. With ``cancel.after_tokens`` a chosen request stops
    after N output tokens, N drawn for every request after the uniforms (a fixed count draws nothing), so the
    chosen requests and their deadlines are those of the same config without it."""
    cancel, timeout = config.cancel, config.client_timeout_s
    if cancel is None and timeout is None:
        return None
    delays = np.full(n, np.inf if timeout is None else timeout)
    chosen = np.zeros(n, dtype=bool)
    stops = np.zeros(n, dtype=np.int64)
    if cancel is not None:
        picked = rng.random(n) < cancel.fraction
        if cancel.after_s is not None:
            chosen = picked & (cancel.after_s <= delays)
            delays[chosen] = cancel.after_s
        if cancel.after_tokens is not None:
            stops[picked] = sample_lengths(cancel.after_tokens, n, rng)[picked]
    return ClientDeadlines(delays, chosen, stops)
