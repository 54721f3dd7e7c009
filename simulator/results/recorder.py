"""Collects what the simulation produces: one row per request, inter-token gaps, KV occupancy.

Request rows are kept in compact columnar chunks of NumPy arrays (or streamed to a Parquet file, keeping only the
columns the summary needs), so memory grows with requests in flight plus a few numbers per finished request; Arrow
(and, through it, pandas) is only loaded to write a file or build the table.
Inter-token gaps go into a :class:`~simulator.results.histogram.LogHistogram` per decode run, not per token.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simulator.request import Request
from simulator.results.histogram import LogHistogram

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow.parquet as pq

SUMMARY_COLUMNS = (
    "arrival_s", "first_token_s", "finish_s", "input_tokens", "output_tokens", "preemptions", "preempted_s",
    "class_id", "first_scheduled_s", "prefill_done_s", "kv_arrived_s", "decode_admitted_s", "session", "turn",
    "replica", "retries", "max_itl_s",
)
# every column of a request row, in order, with its type (int64, float64 or a string)
COLUMNS = (
    ("request_id", "int64"), ("arrival_s", "float64"), ("first_scheduled_s", "float64"),
    ("first_token_s", "float64"), ("finish_s", "float64"), ("input_tokens", "int64"), ("output_tokens", "int64"),
    ("replica", "int64"), ("preemptions", "int64"), ("preempted_s", "float64"), ("cached_tokens", "int64"),
    ("class_id", "int64"), ("prefill_done_s", "float64"), ("kv_arrived_s", "float64"),
    ("decode_admitted_s", "float64"), ("max_itl_s", "float64"), ("session", "int64"), ("turn", "int64"),
    ("retries", "int64"), ("adapter", "int64"), ("images", "int64"), ("image_tokens", "int64"),
    ("status", "string"), ("reject_reason", "string"),
)


def arrow_schema():
    """The request table's Arrow schema."""
    import pyarrow as pa

    return pa.schema([(name, pa.string() if kind == "string" else getattr(pa, kind)()) for name, kind in COLUMNS])


class RequestLog:
    """Rows of ended requests (finished, rejected, failed or cancelled), in the order they ended, chunked; optionally
    streamed to Parquet."""

    def __init__(self, parquet_path: str | Path | None = None, chunk_rows: int = 65536) -> None:
        self._rows: list[tuple] = []
        self._chunk_rows = chunk_rows
        self._chunks: list[dict[str, np.ndarray]] = []  # kept columns, when not streamed
        self._summary: dict[str, list[np.ndarray]] = {
            name: [] for name in (*SUMMARY_COLUMNS, "finished", "failed", "cancelled")}
        self._path = parquet_path
        self._writer: pq.ParquetWriter | None = None  # opened with the first chunk written
        self.streamed = parquet_path is not None
        self.num_rows = 0

    def append(self, request: Request) -> None:
        self.num_rows += 1
        self._rows.append((
            request.request_id, request.arrival_s, request.first_scheduled_s, request.first_token_s,
            request.finish_s, request.input_tokens, request.asked_output_tokens, request.replica, request.preemptions,
            request.preempted_s, request.cached_tokens, request.class_id, request.prefill_done_s,
            request.kv_arrived_s, request.decode_admitted_s, request.max_itl_s, request.session, request.turn,
            request.retries, request.adapter, len(request.images), sum(request.images), request.status,
            request.reject_reason,
        ))
        if len(self._rows) >= self._chunk_rows:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        chunk = {name: np.array(values, dtype=object if kind == "string" else kind)
                 for (name, kind), values in zip(COLUMNS, zip(*self._rows, strict=True), strict=True)}
        self._rows = []
        # a longest gap needs two tokens of a completed request (a request's 0.0 until it has one)
        chunk["max_itl_s"][(chunk["status"] != "finished") | (chunk["output_tokens"] < 2)] = np.nan
        for name in SUMMARY_COLUMNS:
            self._summary[name].append(chunk[name])
        self._summary["finished"].append(chunk["status"] == "finished")
        self._summary["failed"].append(chunk["status"] == "failed")
        self._summary["cancelled"].append(chunk["status"] == "cancelled")
        if self.streamed:
            self._write(chunk)
        else:
            self._chunks.append(chunk)

    def _write(self, chunk: dict[str, np.ndarray]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._writer is None:
            # dictionary encoding only where values repeat (status, reason): on times and ids it costs 3× the writing
            self._writer = pq.ParquetWriter(str(self._path), arrow_schema(), use_dictionary=["status", "reject_reason"])
        self._writer.write_table(pa.table(chunk, schema=arrow_schema()))

    def close(self) -> None:
        self._flush()
        if self.streamed:
            if self._writer is None:  # no rows: the file still has every column
                self._write({name: np.array([], dtype=object if kind == "string" else kind) for name, kind in COLUMNS})
            assert self._writer is not None  # opened by the first write
            self._writer.close()
            self._writer = None

    def summary_columns(self) -> dict[str, np.ndarray]:
        """The columns metrics need, for every request (completion order), plus ``finished``, ``failed`` and
        ``cancelled`` (bool; the others were rejected)."""
        self._flush()
        return {
            name: np.concatenate(chunks) if chunks
            else np.array([], dtype=bool if name in ("finished", "failed", "cancelled") else float)
            for name, chunks in self._summary.items()
        }

    def frame(self) -> pd.DataFrame | None:
        """All rows sorted by request id (None when they were streamed to a file)."""
        import pandas as pd

        if self.streamed:
            return None
        self._flush()
        columns = {name: (np.concatenate([chunk[name] for chunk in self._chunks]) if self._chunks
                          else np.array([], dtype=object if kind == "string" else kind)) for name, kind in COLUMNS}
        frame = pd.DataFrame(columns)
        return frame.sort_values("request_id", kind="stable").reset_index(drop=True)


class Recorder:
    def __init__(self, num_replicas: int, parquet_path: str | Path | None = None) -> None:
        self.requests = RequestLog(parquet_path)
        self.itl = LogHistogram()
        self.iterations = 0
        self.kv_token_seconds = [0.0] * num_replicas  # ∫ resident KV tokens dt
        self.peak_kv_blocks = [0] * num_replicas
        self.peak_running = [0] * num_replicas
        self.peak_batch_tokens = [0] * num_replicas  # most tokens (prompt chunks + decodes) in one iteration
        self.prefill_tokens = 0  # prompt tokens computed, recomputation after preemption included
        self.cancelled_output_tokens = 0  # output tokens generated for requests their clients then cancelled
        self.swapped_tokens = 0  # KV tokens moved to or from host memory
        # called in turn with each ended request (a client's connection pool, its clients, client cancellations)
        self.on_complete: list[Callable[[Request], None]] = []
        # called in turn with each ended request before its row is written (a client's stop after N tokens)
        self.on_end: list[Callable[[Request], None]] = []
        self.copied_tokens = 0  # KV tokens copied when contiguous slabs moved
        self.crashes: list[tuple[float, int]] = []  # (time, replica) of every crash (simulator.cluster.faults)
        self.adapter_totals: Counter[str] = Counter()  # LoRA: loads, storage_reads, load_s (simulator.schedulers.lora)
        self.tier_totals: defaultdict[str, float] = defaultdict(float)  # KV tiers below HBM (simulator.kv.tiers)
        # speculative decoding: verification steps (one per sequence and step) by the drafts accepted, 0 … k
        self.accepted_counts: np.ndarray | None = None
        self.running_seconds = [0.0] * num_replicas  # ∫ running sequences dt
        self.kv_breakdown_seconds = [[0.0] * 5 for _ in range(num_replicas)]  # ∫ MemoryBreakdown dt (token slots)
        # the per-replica numbers above are filled in by the replicas when the simulation ends

    def request_done(self, request: Request) -> None:
        """Record an ended request — finished, rejected, failed or cancelled — and tell each of ``on_complete`` (a
        client's connection pool, a closed-loop client), after each of ``on_end``."""
        for listener in self.on_end:
            listener(request)
        self.requests.append(request)
        for listener in self.on_complete:
            listener(request)
