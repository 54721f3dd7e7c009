"""Each request's longest inter-token gap (its worst streaming stall), kept per decode run, not per token.

A replica's decode runs are numbered w = 0, 1, …; every decoding request takes part in every run. In run w a request
sees its first-step gap (run start − its last token + d_0) and then d_1 … d_{k−1}, the longest of which is d_{k−1}
(step j lasts a + c·(S_0 + j·B), c ≥ 0). Requests that decoded in run w − 1 all share the first-step gap
F_w = start_w − end_{w−1} + d_0, so a request that joined at run j (after a prefill, a swap-in or a KV transfer)
has as its longest gap

    max(its own first-step gap in run j, d_{k−1} of run j, max over w > j of max(F_w, d_{k−1} of w))

The replica folds the first two terms into the request when run j starts and ends (work per joining request) and
keeps the last as a suffix maximum over runs (:class:`SuffixMax`), read once when the request stops decoding.
"""

from __future__ import annotations

import bisect
import math


class SuffixMax:
    """The largest value pushed at or after a given index, for indices pushed in increasing order.

    A stack of (index, value) with values strictly decreasing from bottom to top: pushing pops every entry the new
    value covers (amortised O(1)); the maximum since index i is the value of the first entry at or after i
    (a binary search)."""

    __slots__ = ("_indices", "_values")

    def __init__(self) -> None:
        self._indices: list[int] = []
        self._values: list[float] = []

    def push(self, index: int, value: float) -> None:
        """Record ``value`` at ``index`` (larger than every index pushed before)."""
        indices, values = self._indices, self._values
        while values and values[-1] <= value:
            values.pop()
            indices.pop()
        indices.append(index)
        values.append(value)

    def since(self, index: int) -> float:
        """The largest value pushed at an index ≥ ``index`` (−inf if none)."""
        at = bisect.bisect_left(self._indices, index)
        return self._values[at] if at < len(self._values) else -math.inf
