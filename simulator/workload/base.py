"""The generated workload every source (arrivals and lengths, traces, datasets, sessions) produces."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Workload(NamedTuple):
    """Per-request columns in arrival order; ``prefixes`` is None or an object array of ``Prefix | None``."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    prefixes: np.ndarray | None = None
    skipped: int = 0  # malformed trace rows skipped
    classes: np.ndarray | None = None  # index into WorkloadConfig.classes per request
    sessions: np.ndarray | None = None  # multi-turn: each request's session (simulator.workload.sessions)
    turns: np.ndarray | None = None  # and its turn in it, from 0 (later turns' arrival_s are NaN until sent)
    images: np.ndarray | None = None  # object array: each request's images, a tuple of their tokens (in input_tokens)
