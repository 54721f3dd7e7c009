"""A workload preset's requests side by side with a trace's (``llmsim workloads --compare PRESET TRACE``).

The preset's side is drawn, not read from its file: ``workload: {preset: NAME, num_requests: N}`` generated with
seed :data:`SEED` (a preset without an arrival gets a Poisson one, which no statistic here looks at), N = the
trace's request count within [:data:`MIN_REQUESTS`, :data:`MAX_REQUESTS`] — enough for stable percentiles (at 20,000
draws a p99's rank moves by about √(0.99·0.01·n) ≈ 14 requests), bounded so a comparison takes seconds. The trace's
side is :func:`simulator.workload.trace.read_trace` of the file, every request (a CSV of lengths without arrival
times, the lengths-only sources some presets are fitted to, is read as ``--fit`` reads it: format ``lengths``).

Statistics of each side: the request count; mean, p50, p90 and p99 of the input and the output lengths (numpy's
linear percentiles); the input–output Spearman rank correlation (average ranks for ties,
:func:`simulator.workload.copula.spearman`); and, where both sides have prefix ids (a trace's ``hash_ids``, a preset's
``segments`` or ``prefix``), the share of prompt blocks seen before (:func:`blocks_seen_before`). Each row's
difference is relative: (preset − trace) / |trace| (none where the trace's value is 0 or undefined).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from simulator.catalog.paths import PROJECT_ROOT
from simulator.catalog.workloads import PRESETS_DIR, load_preset, read_lengths
from simulator.config.workload import TraceConfig, WorkloadConfig
from simulator.errors import LLMSimError
from simulator.request import Prefix
from simulator.workload import generate_requests, read_trace
from simulator.workload.copula import spearman
from simulator.workload.trace import detect_format

SEED = 0
MIN_REQUESTS, MAX_REQUESTS = 20_000, 200_000
BLOCK_TOKENS = 512  # Mooncake's hash blocks, the granularity a trace with hash_ids states its reuse in
SEEN_BEFORE = f"prompt blocks seen before ({BLOCK_TOKENS}-token)"


class Row(NamedTuple):
    statistic: str
    preset: float
    trace: float

    @property
    def relative_difference(self) -> float | None:
        """(preset − trace) / |trace|; None where the trace's value is 0 or not a number."""
        if not math.isfinite(self.trace) or self.trace == 0 or not math.isfinite(self.preset):
            return None
        return (self.preset - self.trace) / abs(self.trace)


class Comparison(NamedTuple):
    preset: str
    preset_path: Path
    trace: str
    trace_format: str
    requests: int  # drawn from the preset
    rows: list[Row]
    notes: list[str]  # what was not compared, and why


def blocks_seen_before(prefixes: np.ndarray, inputs: np.ndarray, block: int = BLOCK_TOKENS) -> float:
    """The share of prompt blocks whose content an earlier request's prompt held, requests in order: a prompt of I
    tokens has ⌈I / block⌉ blocks (the last one partial); block j, ending at e = min((j + 1)·block, I), counts as
    reusable when it lies inside the request's prefix (e ≤ the prefix's end) and its key — the chain id of its last
    token, j, and its length — was held before (a chain id names everything up to it). On Mooncake's hash ids this
    is the share of ids seen before; on a preset's segments, the blocks a prefix cache of that block size could hit
    with unbounded memory."""
    seen: set[tuple[int, int, int]] = set()
    hits = total = 0
    for prefix, tokens in zip(prefixes, inputs.tolist(), strict=True):
        count = -(-tokens // block)
        total += count
        if not isinstance(prefix, Prefix):
            continue
        ids, unit = prefix.ids, prefix.unit
        end = len(ids) * unit
        for j in range(count):
            stop = min((j + 1) * block, tokens)
            if stop > end:
                break
            key = (ids[(stop - 1) // unit], j, stop - j * block)
            hits += key in seen
            seen.add(key)
    return hits / total if total else math.nan


def statistics(inputs: np.ndarray, outputs: np.ndarray, prefixes: np.ndarray | None) -> dict[str, float]:
    """One side's statistics (module docstring), in the order the rows show them."""
    stats: dict[str, float] = {"requests": float(len(inputs))}
    for part, values in (("input", inputs), ("output", outputs)):
        stats[f"{part} mean (tokens)"] = float(values.mean())
        for q, value in zip((50, 90, 99), np.percentile(values, [50, 90, 99]), strict=True):
            stats[f"{part} p{q} (tokens)"] = float(value)
    stats["input-output Spearman"] = spearman(inputs, outputs)
    if prefixes is not None:
        stats[SEEN_BEFORE] = blocks_seen_before(prefixes, inputs)
    return stats


def _preset_requests(name: str, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    try:
        section = load_preset(name)["workload"]
    except ValueError as exc:
        raise LLMSimError(f"--compare: {exc}") from None
    missing = [part for part in ("input_tokens", "output_tokens") if part not in section]
    if missing:
        raise LLMSimError(f"--compare: preset {name!r} gives no {' or '.join(missing)} (it gives "
                          f"{', '.join(sorted(section))}): no lengths to compare with a trace's")
    arrival = {} if "arrival" in section else {"arrival": {"kind": "poisson", "rate": 1.0}}
    workload = generate_requests(WorkloadConfig(preset=name, num_requests=n, **arrival), np.random.SeedSequence(SEED))
    return workload.input_tokens, workload.output_tokens, workload.prefixes


def _trace_requests(trace: TraceConfig, path: Path) -> tuple[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """The trace's format and its requests' input lengths, output lengths and prefixes, read as replay reads it;
    ``auto`` on a CSV of lengths without arrival times (a preset's lengths-only source: MLPerf, arXiv) reads its
    lengths as ``--fit`` does (format ``lengths``)."""
    fmt: str = trace.format
    try:
        if fmt == "auto":
            try:
                fmt = detect_format(path)
            except LLMSimError:
                if path.suffix.lower() != ".csv" or not ({"num_prefill_tokens", "input_length"}
                                                         & set(_csv_header(path))):
                    raise
                return "lengths", (*read_lengths(path), None)
    except UnicodeDecodeError:
        raise LLMSimError(f"--compare: trace {path}: not UTF-8 text") from None
    read = read_trace(trace)
    return fmt, (read.input_tokens, read.output_tokens, read.prefixes)


def _csv_header(path: Path) -> list[str]:
    with path.open(newline="", encoding="utf-8-sig") as handle:
        return [name.strip() for name in next(csv.reader(handle), [])]


def compare(preset: str, trace: TraceConfig, requests: int | None = None) -> Comparison:
    """The preset ``preset`` against the trace ``trace`` (module docstring); ``requests`` overrides how many are
    drawn from the preset."""
    path = Path(trace.path)
    if not path.is_file():
        raise LLMSimError(f"--compare: trace {path}: " + ("is a folder" if path.is_dir() else "no such file"))
    fmt, (trace_inputs, trace_outputs, trace_prefixes) = _trace_requests(trace, path)
    n = requests if requests is not None else min(max(len(trace_inputs), MIN_REQUESTS), MAX_REQUESTS)
    inputs, outputs, prefixes = _preset_requests(preset, n)
    ours = statistics(inputs, outputs, prefixes)
    theirs = statistics(trace_inputs, trace_outputs, trace_prefixes)
    notes = []
    if (SEEN_BEFORE in ours) != (SEEN_BEFORE in theirs):
        which = "the preset" if SEEN_BEFORE not in ours else "the trace"
        notes.append(f"{SEEN_BEFORE}: not compared, {which} has no prefix ids")
    rows = [Row(key, value, theirs[key]) for key, value in ours.items() if key in theirs]
    return Comparison(preset, PRESETS_DIR / f"{preset}.yaml", str(path), fmt, n, rows, notes)


def _cell(statistic: str, value: float) -> str:
    if not math.isfinite(value):
        return "-"
    if statistic == "requests":
        return f"{value:,.0f}"
    if "tokens" in statistic and "seen" not in statistic:
        return f"{value:,.1f}"
    return f"{value:.3f}"


def table(comparison: Comparison) -> str:
    """The comparison as the console shows it: what each side is, then one row per statistic."""
    where = comparison.preset_path.relative_to(PROJECT_ROOT)
    lines = [f"preset {comparison.preset} ({where}: {comparison.requests:,} requests drawn, "
             f"seed {SEED}) against trace {comparison.trace} (format {comparison.trace_format})",
             f"{'statistic':36} {'preset':>11} {'trace':>11} {'difference':>11}"]
    for row in comparison.rows:
        change = row.relative_difference
        lines.append(f"{row.statistic:36} {_cell(row.statistic, row.preset):>11} "
                     f"{_cell(row.statistic, row.trace):>11} {'-' if change is None else f'{change:+.1%}':>11}")
    lines += comparison.notes
    lines.append("difference: (preset - trace) / |trace|; blocks seen before: the share of prompt blocks an earlier "
                 "request held (an unbounded prefix cache's hits)")
    return "\n".join(lines)


def csv_rows(comparison: Comparison) -> list[dict[str, Any]]:
    """One mapping per row: statistic, preset, trace, relative_difference (empty where there is none)."""
    return [{"preset_name": comparison.preset, "trace_path": comparison.trace, "statistic": row.statistic,
             "preset": row.preset, "trace": row.trace,
             "relative_difference": "" if row.relative_difference is None else row.relative_difference}
            for row in comparison.rows]
