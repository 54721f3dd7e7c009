"""Collects what the simulation produces: one row per request, inter-token gaps, KV occupancy.

Request rows are kept in compact columnar chunks (or streamed to a Parquet file, keeping only the columns the
summary needs), so memory grows with requests in flight plus a few numbers per finished request.
Inter-token gaps go into a :class:`~simulator.histogram.LogHistogram` per decode run, not per token.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from simulator.histogram import LogHistogram
from simulator.request import Request

SUMMARY_COLUMNS = (
    "arrival_s", "first_token_s", "finish_s", "input_tokens", "output_tokens", "preemptions", "preempted_s",
    "class_id", "first_scheduled_s", "prefill_done_s", "kv_arrived_s", "decode_admitted_s", "session", "turn",
)
_SCHEMA = pa.schema([
    ("request_id", pa.int64()), ("arrival_s", pa.float64()), ("first_scheduled_s", pa.float64()),
    ("first_token_s", pa.float64()), ("finish_s", pa.float64()), ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()), ("replica", pa.int64()), ("preemptions", pa.int64()),
    ("preempted_s", pa.float64()), ("cached_tokens", pa.int64()), ("class_id", pa.int64()),
    ("prefill_done_s", pa.float64()), ("kv_arrived_s", pa.float64()), ("decode_admitted_s", pa.float64()),
    ("session", pa.int64()), ("turn", pa.int64()), ("status", pa.string()),
    ("reject_reason", pa.string()),
])
_ROW = pa.struct(list(_SCHEMA))


class RequestLog:
    """Rows of finished and rejected requests, in completion order, chunked; optionally streamed to Parquet."""

    def __init__(self, parquet_path: str | Path | None = None, chunk_rows: int = 65536) -> None:
        self._rows: list[tuple] = []
        self._chunk_rows = chunk_rows
        self._tables: list[pa.Table] = []
        self._summary: dict[str, list[np.ndarray]] = {name: [] for name in (*SUMMARY_COLUMNS, "finished")}
        # dictionary encoding only where values repeat (status, reason): on times and ids it costs 3× the writing
        self._writer = pq.ParquetWriter(
            str(parquet_path), _SCHEMA, use_dictionary=["status", "reject_reason"]
        ) if parquet_path is not None else None
        self.streamed = parquet_path is not None
        self.num_rows = 0

    def append(self, request: Request) -> None:
        self.num_rows += 1
        self._rows.append((
            request.request_id, request.arrival_s, request.first_scheduled_s, request.first_token_s,
            request.finish_s, request.input_tokens, request.output_tokens, request.replica, request.preemptions,
            request.preempted_s, request.cached_tokens, request.class_id, request.prefill_done_s,
            request.kv_arrived_s, request.decode_admitted_s, request.session, request.turn, request.status,
            request.reject_reason,
        ))
        if len(self._rows) >= self._chunk_rows:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        table = pa.Table.from_struct_array(pa.array(self._rows, type=_ROW))  # rows → columns, in C
        self._rows = []
        for name in SUMMARY_COLUMNS:
            self._summary[name].append(table.column(name).to_numpy())
        self._summary["finished"].append(pc.equal(table.column("status"), "finished").to_numpy())
        if self._writer is not None:
            self._writer.write_table(table)
        else:
            self._tables.append(table)

    def close(self) -> None:
        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def summary_columns(self) -> dict[str, np.ndarray]:
        """The columns metrics need, for every request (completion order), plus ``finished`` (bool; the others
        were rejected)."""
        self._flush()
        return {
            name: np.concatenate(chunks) if chunks else np.array([], dtype=bool if name == "finished" else float)
            for name, chunks in self._summary.items()
        }

    def frame(self) -> pd.DataFrame | None:
        """All rows sorted by request id (None when they were streamed to a file)."""
        if self.streamed:
            return None
        self._flush()
        table = pa.concat_tables(self._tables) if self._tables else _SCHEMA.empty_table()
        return table.to_pandas().sort_values("request_id", kind="stable").reset_index(drop=True)


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
        self.swapped_tokens = 0  # KV tokens moved to or from host memory
        self.on_complete = None  # called with each finished or rejected request
        self.copied_tokens = 0  # KV tokens copied when contiguous slabs moved
        self.running_seconds = [0.0] * num_replicas  # ∫ running sequences dt
        self.kv_breakdown_seconds = [[0.0] * 5 for _ in range(num_replicas)]  # ∫ MemoryBreakdown dt (token slots)
        # the per-replica numbers above are filled in by the replicas when the simulation ends

    def request_done(self, request: Request) -> None:
        """Record a finished or rejected request (and tell ``on_complete``, e.g. a closed-loop client)."""
        self.requests.append(request)
        if self.on_complete is not None:
            self.on_complete(request)
