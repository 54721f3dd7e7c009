"""Which requests their clients give up on, and when (``workload.cancel``, ``workload.client_timeout_s``)."""

from __future__ import annotations

import numpy as np

from simulator.config.workload import WorkloadConfig

CLIENT_CANCEL, CLIENT_TIMEOUT = "client cancel", "client timeout"  # the reasons a cancelled request's row gives


def client_deadlines(config: WorkloadConfig, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray] | None:
    """For each of ``n`` requests (by id), the seconds after its send at which its client abandons it (``inf``:
    never) and whether that is a chosen cancellation (else the timeout); None when the workload has neither.

    Request i is chosen when ``u_i < cancel.fraction``, u_i the i-th uniform draw of ``rng`` (one per request, so
    the chosen ones do not depend on the lengths or arrivals); its deadline is min(``cancel.after_s`` if chosen,
    ``client_timeout_s``), a tie going to the cancellation."""
    cancel, timeout = config.cancel, config.client_timeout_s
    if cancel is None and timeout is None:
        return None
    delays = np.full(n, np.inf if timeout is None else timeout)
    chosen = np.zeros(n, dtype=bool)
    if cancel is not None:
        chosen = (rng.random(n) < cancel.fraction) & (cancel.after_s <= delays)
        delays[chosen] = cancel.after_s
    return delays, chosen
