"""Trace replay: read request traces in the formats users have, strictly, into one canonical form.

Formats (``TraceConfig.format``; ``auto`` picks by suffix and header):

- ``processed``: ``arrived_at`` (s), ``num_prefill_tokens``, ``num_decode_tokens`` and optionally ``hash_ids``
  (space-separated) — the Azure LLM-inference trace as Vidur/Splitwise ship it, and what ``llmsim convert-trace``
  writes;
- ``azure``: the original Azure release, ``TIMESTAMP`` (datetime), ``ContextTokens``, ``GeneratedTokens``;
- ``burstgpt``: ``Timestamp`` (s), ``Request tokens``, ``Response tokens`` (other columns ignored);
- ``mooncake``: JSON lines with ``timestamp`` (ms), ``input_length``, ``output_length`` and ``hash_ids``, one id per
  512-token block of the prompt, chained, so shared leading ids are shared prefixes (they become
  :class:`~simulator.request.Prefix` and feed the prefix cache);
- ``ragpulse``: JSON lines with ``timestamp_s`` (s), ``input_length``, ``output_length`` and ``parts: {name: {ids,
  tokens}}`` — RAGPulse's release: each part's chunks as content ids (same id = same text) with their tokens. The
  prompt is read as the parts in :data:`RAGPULSE_PART_ORDER` (the release does not document it; the ``rag-ragpulse``
  preset is fitted in the same order), then the tokens no part claims (the template's); a chunk's chain key is its
  content and every chunk before it (:func:`simulator.catalog.prompt_reuse.part_chains`), and the prefix gets one id
  per :data:`PART_UNIT_TOKENS` tokens: the chain key of the chunk holding the unit's last token and that token's
  offset in it — two prompts share a unit exactly when they agree on every token up to its end. (``auto`` reads a
  ``.jsonl`` whose first record has ``parts`` as ragpulse, else as mooncake.)
- ``csv``: any CSV, with ``columns: {arrival, input, output}`` and ``time_unit``.

A row with a missing field or a bad value (not a number, negative time, a length < 1) raises an error naming
``file:line``; with ``skip_bad`` it is skipped and counted. Then the ``[start_s, end_s)`` window (trace seconds
after the first arrival) and ``sample`` (keep each row with that probability) apply, rows are sorted by arrival
(stable), shifted to start at 0 and divided by ``speedup``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import numpy as np

from simulator.catalog.prompt_reuse import CONTENT_ID_LIMIT, HASH_BLOCK_TOKENS, chain_keys
from simulator.config.base import MAX_TOKENS
from simulator.config.workload import TraceConfig
from simulator.errors import LLMSimError
from simulator.request import Prefix

_EPOCH = datetime(1970, 1, 1)
RAGPULSE_PART_ORDER = ("sys_prompt", "passages", "web_search", "history", "user_input")
PART_UNIT_TOKENS = 16  # a ragpulse prefix's id granularity: the smallest KV block the engines use
MAX_PART_TOKENS = 1_048_576  # a ragpulse row's parts at most (its prefix ids are one per 16 of them)
_UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
# format -> (arrival column, input column, output column, how arrivals are written)
_CSV_FORMATS = {
    "processed": ("arrived_at", "num_prefill_tokens", "num_decode_tokens", "s"),
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens", "s"),
}


class Trace(NamedTuple):
    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    prefixes: np.ndarray | None  # object array of Prefix | None, or None when the trace has no prefix ids
    skipped: int  # malformed rows skipped (skip_bad)


class BadRow(ValueError):
    """A malformed row; the message names the column and the value."""


def _datetime_seconds(text: str) -> float:
    """Seconds since 1970 of ``2023-11-16 18:15:46.6805900`` (any number of fractional digits, no zone)."""
    base, _, fraction = text.strip().partition(".")
    stamp = datetime.fromisoformat(base)
    if stamp.tzinfo is not None:
        stamp = stamp.replace(tzinfo=None) - stamp.utcoffset()  # type: ignore[operator]  # aware: it has an offset
    return (stamp - _EPOCH).total_seconds() + (float(f"0.{fraction}") if fraction else 0.0)


def _time(text: str, unit: str, column: str) -> float:
    try:
        value = _datetime_seconds(text) if unit == "datetime" else float(text) * _UNIT_SECONDS[unit]
    except (TypeError, ValueError):
        expected = "a datetime" if unit == "datetime" else "a non-negative number"
        raise BadRow(f"column {column}: expected {expected}, got {text!r}") from None
    if not math.isfinite(value) or (value < 0 and unit != "datetime"):  # dates before 1970 are fine
        raise BadRow(f"column {column}: expected a non-negative number, got {text!r}")
    return value


def _length(text, column: str) -> int:
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise BadRow(f"column {column}: expected a positive integer, got {text!r}")
    if value > MAX_TOKENS:
        raise BadRow(f"column {column}: {text!r} tokens is beyond the limit of {MAX_TOKENS:,} per request")
    return int(value)


def _hash_ids(ids, column: str) -> Prefix | None:
    try:
        values = tuple(int(x) for x in (ids.split() if isinstance(ids, str) else ids))
    except (TypeError, ValueError):
        raise BadRow(f"column {column}: expected integer block ids, got {str(ids)[:80]!r}") from None
    if any(not 0 <= value < CONTENT_ID_LIMIT for value in values):
        raise BadRow(f"column {column}: block ids must be in [0, 2^63), got {str(ids)[:80]!r}")
    return Prefix(values, HASH_BLOCK_TOKENS) if values else None


def detect_format(path: Path) -> str:
    """The trace format from the suffix (``.jsonl``: ragpulse when its first record has ``parts``, else mooncake) or
    the CSV header."""
    if path.suffix in (".jsonl", ".json"):
        with _open(path) as handle:
            first = next((line for line in handle if line.strip()), "")
        try:
            record = json.loads(first)
        except (ValueError, RecursionError):
            return "mooncake"  # its reader names the line
        return "ragpulse" if isinstance(record, dict) and "parts" in record else "mooncake"
    header = _header(path)
    for name, (arrival, inputs, outputs, _) in _CSV_FORMATS.items():
        if {arrival, inputs, outputs} <= set(header):
            return name
    raise LLMSimError(
        f"{path}:1: unrecognised trace header {header}; known: processed (arrived_at, num_prefill_tokens, "
        "num_decode_tokens), azure (TIMESTAMP, ContextTokens, GeneratedTokens), burstgpt (Timestamp, Request "
        "tokens, Response tokens), mooncake (.jsonl); or give format: csv with columns"
    )


def _open(path: Path):
    """The trace as UTF-8 text (a byte-order mark dropped); decoding errors surface while reading, see
    :func:`read_trace`."""
    try:
        return path.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise LLMSimError(f"workload.trace.path: cannot read {path}: {exc.strerror}") from None


def _header(path: Path) -> list[str]:
    with _open(path) as handle:
        header = next(csv.reader(handle), None)
    if header is None:
        raise LLMSimError(f"{path}:1: empty trace")
    return [name.strip() for name in header]


def _csv_rows(path: Path, columns: tuple[str, str, str], unit: str) -> Iterator[tuple[int, tuple | BadRow]]:
    """(line, (arrival_s, input, output, prefix)) per data row, or (line, BadRow)."""
    with _open(path) as handle:
        reader = csv.reader(handle)
        header = [name.strip() for name in next(reader, [])]
        missing = [c for c in columns if c not in header]
        if missing:
            raise LLMSimError(f"{path}:1: missing column(s) {missing}; this format needs {list(columns)}")
        at, inp, out = (header.index(c) for c in columns)
        ids = header.index("hash_ids") if "hash_ids" in header else None
        # each physical line on its own: an unterminated quote then spoils its own row, not the rows after it
        for line, text in enumerate(handle, start=2):
            row = next(csv.reader([text]), [])
            if not row:
                continue
            try:
                if len(row) != len(header):
                    raise BadRow(f"expected {len(header)} fields, got {len(row)}")
                prefix = _hash_ids(row[ids], "hash_ids") if ids is not None else None
                yield line, (_time(row[at], unit, columns[0]), _length(row[inp], columns[1]),
                             _length(row[out], columns[2]), prefix)
            except BadRow as bad:
                yield line, bad


def _json_rows(path: Path, fields: tuple[str, ...], row) -> Iterator[tuple[int, tuple | BadRow]]:
    """Each non-blank line of a JSON-lines trace as ``(line, row(record))``, or ``(line, BadRow)`` for a line that
    is not a JSON object with every one of ``fields`` (or that ``row`` refuses)."""
    with _open(path) as handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                try:
                    record = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise BadRow(f"not valid JSON ({exc.msg})") from None
                except (RecursionError, ValueError):
                    raise BadRow("JSON nested too deeply or a number too long") from None
                if not isinstance(record, dict):
                    raise BadRow(f"expected a JSON object, got {text.strip()[:40]!r}")
                missing = [k for k in fields if k not in record]
                if missing:
                    raise BadRow(f"missing field(s) {missing}")
                yield line, row(record)
            except BadRow as bad:
                yield line, bad


def _mooncake_rows(path: Path) -> Iterator[tuple[int, tuple | BadRow]]:
    def row(record: dict) -> tuple:
        return (_time(str(record["timestamp"]), "ms", "timestamp"), _length(record["input_length"], "input_length"),
                _length(record["output_length"], "output_length"), _hash_ids(record.get("hash_ids", []), "hash_ids"))

    return _json_rows(path, ("timestamp", "input_length", "output_length"), row)


def _ragpulse_rows(path: Path) -> Iterator[tuple[int, tuple | BadRow]]:
    chains: dict[tuple[int, int, int], int] = {}  # (chain key before, part, content id) -> chain key

    def row(record: dict) -> tuple:
        inputs = _length(record["input_length"], "input_length")
        return (_time(str(record["timestamp_s"]), "s", "timestamp_s"), inputs,
                _length(record["output_length"], "output_length"), _part_prefix(record["parts"], inputs, chains))

    return _json_rows(path, ("timestamp_s", "input_length", "output_length", "parts"), row)


def _part_prefix(parts, inputs: int, chains: dict[tuple[int, int, int], int]) -> Prefix | None:
    """A ragpulse row's prefix (module docstring); ``chains`` numbers the chain keys across the file's rows
    (:func:`simulator.catalog.prompt_reuse.chain_keys`)."""
    if not isinstance(parts, dict):
        raise BadRow(f"column parts: expected an object of parts, got {str(parts)[:60]!r}")
    unknown = sorted(set(parts) - set(RAGPULSE_PART_ORDER))
    if unknown:
        raise BadRow(f"column parts: unknown part(s) {unknown} (known: {', '.join(RAGPULSE_PART_ORDER)})")
    checked: dict[str, tuple[list[int], list[int]]] = {}
    total = 0
    for name in RAGPULSE_PART_ORDER:
        part = parts.get(name, {"ids": [], "tokens": []})
        ids, sizes = (part.get("ids"), part.get("tokens")) if isinstance(part, dict) else (None, None)
        if not (isinstance(ids, list) and isinstance(sizes, list) and len(ids) == len(sizes)):
            raise BadRow(f"column parts.{name}: expected {{ids: [...], tokens: [...]}} of equal lengths")
        for content, size in zip(ids, sizes, strict=True):
            if not (isinstance(content, int) and not isinstance(content, bool) and 0 <= content < CONTENT_ID_LIMIT):
                raise BadRow(f"column parts.{name}.ids: expected integer ids in [0, 2^63), got {content!r}")
            if not (isinstance(size, int) and not isinstance(size, bool) and size >= 1):
                raise BadRow(f"column parts.{name}.tokens: expected positive integers, got {size!r}")
            total += size
            if total > min(inputs, MAX_PART_TOKENS):
                raise BadRow(f"column parts: the parts hold more than the prompt's {inputs:,} tokens"
                             if total > inputs else f"column parts: more than {MAX_PART_TOKENS:,} tokens")
        checked[name] = (ids, sizes)
    keys, sizes = chain_keys(checked, RAGPULSE_PART_ORDER, chains)
    if total < PART_UNIT_TOKENS:
        return None
    # unit i's id: the chunk holding token (i + 1)·unit − 1, and that token's offset in it
    ends = np.cumsum(sizes)
    lasts = np.arange(PART_UNIT_TOKENS - 1, total, PART_UNIT_TOKENS)
    chunk = np.searchsorted(ends, lasts, side="right")
    starts = ends[chunk] - np.asarray(sizes)[chunk]
    return Prefix(tuple((np.asarray(keys)[chunk] * MAX_PART_TOKENS + lasts - starts).tolist()), PART_UNIT_TOKENS)


def read_trace(config: TraceConfig | str | Path, limit: int | None = None,
               rng: np.random.Generator | None = None) -> Trace:
    """The requests of a trace (see the module docstring); ``limit`` keeps the first that many after the window
    and sampling; ``rng`` draws the sample (required when ``sample`` < 1)."""
    if not isinstance(config, TraceConfig):
        config = TraceConfig(path=str(config))
    path = Path(config.path)
    try:
        return _read_trace(config, path, limit, rng)
    except UnicodeDecodeError as exc:
        raise LLMSimError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start} of "
                          "its chunk)") from None


def _read_trace(config: TraceConfig, path: Path, limit: int | None, rng: np.random.Generator | None) -> Trace:
    fmt = detect_format(path) if config.format == "auto" else config.format
    if fmt == "mooncake":
        rows = _mooncake_rows(path)
    elif fmt == "ragpulse":
        rows = _ragpulse_rows(path)
    elif fmt == "csv":
        columns = config.columns
        assert columns is not None  # the schema requires them for csv
        rows = _csv_rows(path, (columns["arrival"], columns["input"], columns["output"]), config.time_unit)
    else:
        arrival_column, input_column, output_column, unit = _CSV_FORMATS[fmt]
        rows = _csv_rows(path, (arrival_column, input_column, output_column), unit)
    records, skipped = [], 0
    for line, row in rows:
        if isinstance(row, BadRow):
            if not config.skip_bad:
                raise LLMSimError(f"{path}:{line}: {row} (skip such rows with workload.trace.skip_bad: true)")
            skipped += 1
            continue
        records.append(row)
    if not records:
        raise LLMSimError(f"{path}: trace has no valid requests" + (f" ({skipped} skipped)" if skipped else ""))
    times = np.array([r[0] for r in records])
    order = np.argsort(times, kind="stable")
    offset = times[order] - times[order[0]]
    keep = order[(offset >= config.start_s) & (offset < (config.end_s if config.end_s is not None else np.inf))]
    if config.sample < 1:
        keep = keep[(rng if rng is not None else np.random.default_rng(0)).random(keep.size) < config.sample]
    keep = keep[:limit] if limit is not None else keep
    if keep.size == 0:
        raise LLMSimError(f"{path}: no requests in the window [{config.start_s}, {config.end_s}) s after sampling")
    arrivals = (times[keep] - times[keep[0]]) / config.speedup
    inputs = np.array([records[i][1] for i in keep], dtype=np.int64)
    outputs = np.array([records[i][2] for i in keep], dtype=np.int64)
    prefixes = None
    if any(r[3] is not None for r in records):
        prefixes = np.empty(keep.size, dtype=object)
        prefixes[:] = [records[i][3] for i in keep]
    return Trace(arrivals, inputs, outputs, prefixes, skipped)


def write_trace(trace: Trace, path: str | Path) -> None:
    """Write the canonical (processed) CSV, with ``hash_ids`` when the trace has prefix ids."""
    with Path(path).open("w", newline="") as handle:
        writer = csv.writer(handle)
        header = ["arrived_at", "num_prefill_tokens", "num_decode_tokens"]
        writer.writerow([*header, "hash_ids"] if trace.prefixes is not None else header)
        for i in range(len(trace.arrival_s)):
            row = [repr(float(trace.arrival_s[i])), int(trace.input_tokens[i]), int(trace.output_tokens[i])]
            if trace.prefixes is not None:
                prefix = trace.prefixes[i]
                row.append(" ".join(str(x) for x in prefix.ids) if prefix is not None else "")
            writer.writerow(row)
