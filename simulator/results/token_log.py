"""The per-token table (``run(..., tokens=True)``, ``llmsim run --tokens``): when every output token reached the
client, from which TTFT, TPOT and every inter-token gap can be recomputed.

The engine advances runs of identical decode steps in closed form, so it never visits a token; this log keeps, per
piece of work that emitted tokens, what they follow from: its replica, its start, its timing ``(a, c, B, S0)``
(step j ends ``decode_run_time(a, c, B, S0, j)`` after the start; the last step at the work's end exactly), its
steps, the requests that decoded through it (every one emits a token per step) and the requests whose prefill it
completed (one token each, at its end). Memory grows with the requests per work, and the table with the tokens —
which is why it is off unless asked for. One rule for lost work: only a finished request's tokens are kept, and
only its last attempt's (those from its final first scheduling on), as its latencies are; a request that finally
failed or was rejected keeps none, whatever its crashed attempts emitted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simulator.cost.base import decode_run_time

if TYPE_CHECKING:
    import pandas as pd


class TokenLog:
    def __init__(self) -> None:
        self._works: list[tuple] = []  # (replica, start, end, (a, c, B, S0), steps, decoding ids, prefilled ids)

    def record(self, replica: int, start: float, end: float, run: tuple[float, float, int, int], steps: int,
               decoding: list[int], prefilled: list[int]) -> None:
        """A work that ended at ``end``: ``decoding`` requests emitted a token at each of its ``steps`` steps,
        ``prefilled`` ones one token at its end."""
        if decoding or prefilled:
            self._works.append((replica, start, end, run, steps, decoding, prefilled))

    def frame(self, first_scheduled: dict[int, float]) -> pd.DataFrame:
        """One row per token: ``request_id``, ``token`` (0 = the first), ``time_s``, ``replica``; sorted by request
        and token. ``first_scheduled``: each finished request's final first-scheduling time (earlier tokens belong
        to a lost attempt; a request not in it did not finish, and none of its tokens are kept)."""
        import pandas as pd

        ids, times, replicas = [], [], []
        for replica, start, end, (a, c, size, context_sum0), steps, decoding, prefilled in self._works:
            if decoding:
                ends = np.array([start + decode_run_time(a, c, size, context_sum0, j) for j in range(1, steps)]
                                + [end])
                ids.append(np.repeat(np.asarray(decoding, dtype=np.int64), steps))
                times.append(np.tile(ends, len(decoding)))
                replicas.append(np.full(len(decoding) * steps, replica, dtype=np.int64))
            if prefilled:
                ids.append(np.asarray(prefilled, dtype=np.int64))
                times.append(np.full(len(prefilled), end))
                replicas.append(np.full(len(prefilled), replica, dtype=np.int64))
        if not ids:
            return pd.DataFrame({"request_id": np.array([], np.int64), "token": np.array([], np.int64),
                                 "time_s": np.array([]), "replica": np.array([], np.int64)})
        frame = pd.DataFrame({"request_id": np.concatenate(ids), "time_s": np.concatenate(times),
                              "replica": np.concatenate(replicas)})
        since = frame["request_id"].map(first_scheduled)  # NaN where the request did not finish: no token kept
        frame = frame[frame["time_s"] >= since].sort_values(["request_id", "time_s"], kind="stable")
        frame.insert(1, "token", frame.groupby("request_id").cumcount().to_numpy())
        return frame.reset_index(drop=True)
