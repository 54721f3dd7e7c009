"""Collects what the simulation produces: one row per request, inter-token gaps, KV occupancy.

Inter-token latencies are kept per iteration, not per token: a run of k decode iterations of a batch of B requests
with durations d_j = base + slope·j contributes each request's first gap individually (it may include a stall before
the run) and the gaps d_1 … d_{k−1} once each with weight B. :func:`simulator.metrics.summarize` expands them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.request import Request

REQUEST_COLUMNS = (
    "request_id", "arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "input_tokens", "output_tokens",
    "replica", "preemptions", "status", "reject_reason",
)


class Recorder:
    def __init__(self, num_replicas: int) -> None:
        self._rows: dict[str, list] = {name: [] for name in REQUEST_COLUMNS}
        self.itl_samples: list[float] = []
        self.itl_runs: list[tuple[float, float, int, int]] = []  # (base, slope, count, weight): d_j, j = 1..count
        self.iterations = 0
        self.kv_token_seconds = [0.0] * num_replicas  # ∫ resident KV tokens dt
        self.peak_kv_blocks = [0] * num_replicas
        self.peak_running = [0] * num_replicas

    def request_done(self, request: Request) -> None:
        """Record a finished or rejected request."""
        rows = self._rows
        for name in REQUEST_COLUMNS:
            rows[name].append(getattr(request, name))

    def requests_frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(self._rows, columns=list(REQUEST_COLUMNS))
        return frame.sort_values("request_id", kind="stable").reset_index(drop=True)

    def itl_values_and_weights(self) -> tuple[np.ndarray, np.ndarray]:
        """Every inter-token gap as (value, multiplicity) pairs."""
        values = [np.asarray(self.itl_samples, dtype=float)]
        weights = [np.ones(len(self.itl_samples), dtype=np.int64)]
        for base, slope, count, weight in self.itl_runs:
            values.append(base + slope * np.arange(1, count + 1, dtype=float))
            weights.append(np.full(count, weight, dtype=np.int64))
        return np.concatenate(values), np.concatenate(weights)
