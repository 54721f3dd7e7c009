"""Optional observation of a run: replica timelines, iterations and KV transfers, and the Chrome trace built from them.

Off by default (the engine then pays one ``is None`` test per event). With ``run(..., observe=True)``:

- ``Result.timeline``: one row each time a replica starts work or goes idle — ``time_s``, ``replica``,
  ``waiting``, ``running``, ``batch_tokens`` (tokens of the iteration starting: prompt chunks + decodes),
  ``kv_used`` (fraction of the pool's blocks in use, as of that boundary);
- ``Result.iterations``: one row per iteration, or per closed-form run of identical decode iterations (``steps``),
  with ``start_s``, ``end_s``, ``prefill_tokens``, ``decode_seqs``, ``phase`` (prefill / decode / mixed);
- preemptions (time, replica, request) and disaggregated KV transfers (request, from, start, end).

:func:`write_chrome_trace` turns them into Chrome trace JSON (open in Perfetto or chrome://tracing): one process
per replica with a complete event per iteration (or run) and counters for queue, batch and KV use; preemptions as
instant events; KV transfers on a "KV links" process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def iteration_phase(prefill_tokens: int, decode_seqs: int) -> str:
    """``mixed`` (prompt tokens and decodes), ``prefill`` (prompt tokens only) or ``decode`` (the rest: decodes, or
    a work of swap-ins only)."""
    return "mixed" if prefill_tokens and decode_seqs else "prefill" if prefill_tokens else "decode"


class Observer:
    def __init__(self) -> None:
        self.samples: list[tuple] = []
        self.iterations: list[tuple] = []
        self.preemptions: list[tuple] = []
        self.transfers: list[tuple] = []

    def sample(self, time_s: float, replica: int, waiting: int, running: int, batch_tokens: int,
               kv_used: float) -> None:
        self.samples.append((time_s, replica, waiting, running, batch_tokens, kv_used))

    def iteration(self, replica: int, start_s: float, end_s: float, steps: int, prefill_tokens: int,
                  decode_seqs: int) -> None:
        self.iterations.append((replica, start_s, end_s, steps, prefill_tokens, decode_seqs,
                                iteration_phase(prefill_tokens, decode_seqs)))

    def preemption(self, time_s: float, replica: int, request_id: int) -> None:
        self.preemptions.append((time_s, replica, request_id))

    def transfer(self, request_id: int, source: int, start_s: float, end_s: float) -> None:
        self.transfers.append((request_id, source, start_s, end_s))

    def timeline(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.samples, columns=["time_s", "replica", "waiting", "running", "batch_tokens",
                                                  "kv_used"])

    def iteration_table(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.iterations, columns=["replica", "start_s", "end_s", "steps", "prefill_tokens",
                                                     "decode_seqs", "phase"])


def chrome_trace(observer: Observer) -> dict:
    """The Chrome trace event format (times in µs)."""
    events: list[dict] = []
    replicas = sorted({row[0] for row in observer.iterations} | {row[1] for row in observer.samples})
    for replica in replicas:
        events.append({"name": "process_name", "ph": "M", "pid": replica, "args": {"name": f"replica {replica}"}})
    for replica, start, end, steps, prefill, decodes, phase in observer.iterations:
        events.append({
            "name": phase, "ph": "X", "pid": replica, "tid": 0, "ts": start * 1e6, "dur": (end - start) * 1e6,
            "args": {"steps": steps, "prefill_tokens": prefill, "decode_seqs": decodes},
        })
    for time_s, replica, waiting, running, batch_tokens, kv_used in observer.samples:
        events.append({"name": "state", "ph": "C", "pid": replica, "ts": time_s * 1e6,
                       "args": {"waiting": waiting, "running": running, "batch_tokens": batch_tokens}})
        events.append({"name": "kv_used", "ph": "C", "pid": replica, "ts": time_s * 1e6, "args": {"kv": kv_used}})
    for time_s, replica, request_id in observer.preemptions:
        events.append({"name": f"preempt {request_id}", "ph": "i", "s": "p", "pid": replica, "tid": 0,
                       "ts": time_s * 1e6})
    if observer.transfers:
        links = (max(replicas) + 1) if replicas else 0
        events.append({"name": "process_name", "ph": "M", "pid": links, "args": {"name": "KV links"}})
        for request_id, source, start, end in observer.transfers:
            events.append({"name": f"KV of request {request_id}", "ph": "X", "pid": links, "tid": source,
                           "ts": start * 1e6, "dur": (end - start) * 1e6, "args": {"from_replica": source}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(observer: Observer, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(chrome_trace(observer)))
    return path
