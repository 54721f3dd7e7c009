"""Trace replay: CSV files with ``arrived_at`` (seconds), ``num_prefill_tokens``, ``num_decode_tokens``.

This is the processed Azure LLM-inference trace format (as in ``../shared/data/traces``). Rows are read strictly:
a missing column or a bad value raises an error naming ``file:line``. Rows are sorted by arrival time.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from simulator.errors import LLMSimError

TRACE_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")


def _number(text: str, kind: type, where: str, column: str) -> float:
    try:
        value = kind(text)
    except (TypeError, ValueError):
        allowed = "a non-negative number" if kind is float else "a positive integer"
        raise LLMSimError(f"{where}: column {column}: expected {allowed}, got {text!r}") from None
    if not math.isfinite(value) or value < 0 or (kind is int and value < 1):
        allowed = "a non-negative number" if kind is float else "a positive integer"
        raise LLMSimError(f"{where}: column {column}: expected {allowed}, got {text!r}")
    return value


def read_trace(path: str | Path, time_scale: float = 1.0, limit: int | None = None):
    """Arrival times (divided by ``time_scale``, shifted to start at 0), input and output lengths."""
    path = Path(path)
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise LLMSimError(f"workload.trace.path: cannot read {path}: {exc.strerror}") from None
    arrivals, inputs, outputs = [], [], []
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise LLMSimError(f"{path}:1: empty trace")
        header = [name.strip() for name in header]
        missing = [c for c in TRACE_COLUMNS if c not in header]
        if missing:
            raise LLMSimError(f"{path}:1: missing column(s) {missing}; a trace needs {list(TRACE_COLUMNS)}")
        at, pre, dec = (header.index(c) for c in TRACE_COLUMNS)
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            where = f"{path}:{line}"
            if len(row) != len(header):
                raise LLMSimError(f"{where}: expected {len(header)} fields, got {len(row)}")
            arrivals.append(_number(row[at], float, where, "arrived_at"))
            inputs.append(_number(row[pre], int, where, "num_prefill_tokens"))
            outputs.append(_number(row[dec], int, where, "num_decode_tokens"))
            if limit is not None and len(arrivals) >= limit:
                break
    if not arrivals:
        raise LLMSimError(f"{path}: trace has no requests")
    times = np.asarray(arrivals, dtype=float)
    order = np.argsort(times, kind="stable")
    times = (times[order] - times[order[0]]) / time_scale
    return times, np.asarray(inputs, dtype=np.int64)[order], np.asarray(outputs, dtype=np.int64)[order]
