"""Named workload presets (``workloads/<name>.yaml``): a workload section fitted to a source, with the source and
the statistics it was fitted to, usable as ``workload: {preset: NAME, ...}`` (the experiment's own workload keys
override the preset's, key by key) and listed by ``llmsim workloads``.

A preset file holds ``name``, ``description``, ``source``, ``fitted_by`` (the command that reproduces it),
``statistics`` (the source's percentiles, rate and burstiness) and ``workload`` (the fitted section). Lengths are
fitted as their percentiles 0…99, 99.1…99.9 and 100 (:class:`simulator.config.workload.QuantileLength`), drawn
together by a Gaussian copula of the source's input–output Spearman rank correlation when it is at least
:data:`MIN_RANK_CORRELATION` in size (``length_correlation``, :mod:`simulator.workload.copula`; the statistics give
it either way), independently otherwise; arrivals, where
the source has timestamps, as vLLM bench's gamma process with the source's mean rate and ``burstiness`` = 1 / CV² of
its gaps (evenly spaced gaps, CV 0: constant arrivals). A source without timestamps whose arrivals are Poisson by
definition (MLPerf's Server scenario, at the rate under test) gets ``--poisson RATE``: a Poisson arrival at that
rate, a starting point that ``llmsim capacity`` searches from.

A source that publishes distributions rather than requests (ServeGen: a ``field,value,probability`` probability mass
function per length field) is fitted the same way from the PMF: its inverse CDF at the same percentiles, its mean and
percentiles as the statistics (no request count, no rank correlation: the fields are independent marginals, which
the statistics say as ``input_output_correlation``), and
every other field's mean and median recorded as documentation (DeepSeek-R1's ``reason_ratio``).

A source that publishes only a mean and the bounds of its lengths (a paper's or a blog's "average 202 tokens") gets
the maximum-entropy law for those facts (:func:`max_entropy_preset`): on ``[low, high]`` with mean ``m``, the
truncated exponential ``p(x) ∝ exp(−λ·(x − low))`` whose mean is ``m`` (λ < 0 when ``m`` lies above the middle) —
the least-informed shape that agrees with what is stated, not a fit to the dataset's own shape.

A source that publishes an arrival-rate series (ServeGen's ``*_rate.csv``: ``time_s``, the start of each bin, and
``rate_per_s``) gets its shape (:func:`_fit_rates`): a ``piecewise`` arrival whose rates are the series divided by
its mean (a shape of time-average 1), repeated every ``period_s`` = the series' span, at ``mean_rate`` = the
source's mean rate — the level the user sets, since such sources rescale their absolute rates. Such a preset holds
only an arrival: the lengths come from the experiment's own workload section.

A preset may state the SLO of the benchmark it reproduces (``--slo``: percentile bounds, ``p99_ttft_ms`` and the
like, as ``llmsim capacity --slo`` takes them; their source in ``source``), which ``llmsim capacity`` holds when it
is given no ``--slo`` of its own.

A source whose timestamps are too coarse to show burstiness (Mooncake's come in ~3 s steps) gets ``--rate-only``: a
Poisson arrival at its mean rate, the number of distinct arrival times recorded beside the gaps' CV it does not fit.

A source of JSON lines with content ids (one request per line: ``input_length``, ``output_length``, ``timestamp`` in
ms or ``timestamp_s`` in s, ``session_id``) is fitted the same way for its lengths and arrivals, and its prompts'
reuse becomes ``workload.segments`` (:mod:`simulator.catalog.prompt_reuse`): Mooncake's ``hash_ids`` (chained ids
of 512-token blocks) as a common head and a pool of shared contexts; RAGPulse's ``parts`` (content ids per part, in
the prompt order ``--order`` gives, which the release does not state) as a segment per template chunk or per list of
documents. The statistics add what the segments reproduce: the share of prompt tokens (or blocks) an earlier request
had — what an unbounded prefix cache would hit — and each part's share of the prompt.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from simulator.catalog import prompt_reuse
from simulator.catalog.paths import PROJECT_ROOT
from simulator.catalog.yaml_text import load_yaml
from simulator.errors import LLMSimError, shown

if TYPE_CHECKING:
    import pandas as pd

PRESETS_DIR = PROJECT_ROOT / "workloads"
# percentiles 0…99, then every 0.1 to 99.9, then 100: the top percent, where the longest requests sit, is resolved
PERCENTILES = np.concatenate([np.arange(100), np.arange(991, 1000) / 10, [100]])
PROBABILITIES = tuple(round(float(p) / 100, 4) for p in PERCENTILES)  # as a quantile length section states them
COLUMNS = {"arrival": "arrived_at", "input": "num_prefill_tokens", "output": "num_decode_tokens"}
# other names sources give the same columns (mooncake traces and MLPerf dataset summaries: input_length, ...)
ALIASES = {"input_length": COLUMNS["input"], "output_length": COLUMNS["output"]}
# a distribution file (ServeGen's *_length_pmf.csv): one row per field and value, the value's probability
PMF_COLUMNS = ("field", "value", "probability")
PMF_FIELDS = {"input_tokens": "input_tokens", "output_tokens": "output_tokens"}  # preset part: the PMF's field
# a multimodal PMF (ServeGen's mm-image): preset part (statistics key) -> its field; the text is the input
IMAGE_FIELDS = {"input_tokens": "text_tokens", "output_tokens": "output_tokens", "image_count": "image_count",
                "image_tokens": "image_tokens"}
JSON_LINES = (".jsonl", ".json")  # a source read as one JSON object per line
TIME_FIELDS = {"timestamp": 1e-3, "timestamp_s": 1.0}  # a JSON-lines source's arrival time: seconds per unit
LINE = "\0line"  # where a JSON-lines record keeps its line number (no source field is named so)
MAX_JSON_TOKENS = 10**9  # a JSON-lines request's input or output length (kept as a 64-bit integer)
RATE_COLUMNS = ("time_s", "rate_per_s")  # an arrival-rate series: each bin's start (s) and its rate (requests/s)
MAX_PIECES = 100_000  # rates of a piecewise arrival, so bins of a rate series (14 days of 600-s bins: 2,016)
# a source's input-output Spearman rank correlation at least this large (in size) is kept as a Gaussian copula; a
# smaller one is drawn independently (chat traces' ~0.07: below what a copula is worth stating)
MIN_RANK_CORRELATION = 0.1
MARGINALS_ONLY = "none: the source gives marginals only (drawn independently)"


def preset_names() -> list[str]:
    return sorted(path.stem for path in PRESETS_DIR.glob("*.yaml"))


def load_preset(name: str) -> dict[str, Any]:
    """The preset file ``name`` as a mapping (a ValueError naming the presets when there is none)."""
    path = PRESETS_DIR / f"{name}.yaml"
    if not isinstance(name, str) or not path.is_file():
        raise ValueError(f"unknown preset {name!r} (allowed: {', '.join(preset_names())})")
    return load_yaml(path.read_text(encoding="utf-8"))  # the C parser: a rate series is thousands of numbers


def with_preset(workload: Any) -> Any:
    """A workload section with its ``preset`` expanded: the preset's keys, then the section's own over them (the
    ``preset`` key stays, naming where the rest came from)."""
    if not isinstance(workload, dict) or workload.get("preset") is None:
        return workload
    return {**load_preset(workload["preset"])["workload"], **workload}


def _stats(values: np.ndarray) -> dict[str, float]:
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": round(float(p50), 1), "mean": round(float(values.mean()), 1), "p90": round(float(p90), 1),
            "p99": round(float(p99), 1)}


def _column(frame: pd.DataFrame, column: str, path: str | Path, minimum: float = -math.inf) -> np.ndarray:
    """``column`` as finite floats of at least ``minimum``; the first row that is not is an error naming its line
    (the header is line 1)."""
    import pandas as pd  # only for fitting: the catalog imports without it

    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    bad = ~(np.isfinite(values) & (values >= minimum))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        allowed = "a finite number" + (f" >= {minimum:g}" if minimum > -math.inf else "")
        raise LLMSimError(f"{path}:{row + 2}: {column}: {shown(frame[column].iloc[row], 40)} is not {allowed}")
    return values


def _read_csv(path: str | Path) -> pd.DataFrame:
    import pandas as pd

    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise LLMSimError(f"{path}: empty file (a preset is fitted to a CSV with a header and rows)") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise LLMSimError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None


def read_lengths(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """The input and output lengths of a CSV of one row per request (``num_prefill_tokens``, ``num_decode_tokens``
    or ``input_length``, ``output_length``; no arrival times needed), as a preset is fitted to them: the lengths-only
    sources (MLPerf summaries, arXiv) that trace replay does not read."""
    frame = _read_csv(path)
    frame = frame.rename(columns={k: v for k, v in ALIASES.items() if v not in frame.columns})
    missing = [c for c in (COLUMNS["input"], COLUMNS["output"]) if c not in frame.columns]
    if missing or frame.empty:
        raise LLMSimError(f"{path}: " + (f"missing column(s) {missing} (lengths are read from "
                                         f"{COLUMNS['input']}, {COLUMNS['output']} or {', '.join(ALIASES)})"
                                         if missing else "no rows"))
    inputs, outputs = (_column(frame, COLUMNS[k], path, minimum=1) for k in ("input", "output"))
    return inputs.astype(np.int64), outputs.astype(np.int64)


def fit_preset(path: str | Path, name: str, poisson_rate: float | None = None, order: list[str] | None = None,
               rate_only: bool = False, slo: dict[str, float] | None = None) -> dict[str, Any]:
    """A preset fitted to a CSV with ``num_prefill_tokens``, ``num_decode_tokens`` (or ``input_length``,
    ``output_length``) and optionally ``arrived_at`` (seconds; the processed-trace format of
    ``../shared/data/traces``), to a ``field,value,probability`` PMF (:func:`_fit_pmf`), or to JSON lines with
    content ids (:func:`_fit_json_lines`: the ``segments`` of its prompts' reuse; ``order``: a parts source's parts
    in prompt order); ``description`` is left for a person to write and ``source`` names the file.
    ``poisson_rate``: a Poisson arrival at that rate, for a source without arrival times; ``rate_only``: a Poisson
    arrival at the source's own mean rate, its gaps not fitted (timestamps too coarse to show burstiness). A CSV with
    ``time_s`` and ``rate_per_s`` is an arrival-rate series (:func:`_fit_rates`). ``slo``: percentile bounds
    (normalised ``<stat>_<metric>_ms`` keys, ms) the preset states as its benchmark's SLO."""
    if Path(path).suffix in JSON_LINES:
        statistics, workload = _fit_json_lines(path, order, rate_only)
    else:
        if order is not None:
            raise LLMSimError(f"--order: {path} is a CSV; the order of prompt parts is for JSON lines with parts")
        frame = _read_csv(path)
        if set(RATE_COLUMNS) <= set(frame.columns):
            if rate_only or poisson_rate is not None:
                raise LLMSimError(f"{'--rate-only' if rate_only else '--poisson'}: {path} is an arrival-rate series "
                                  f"({', '.join(RATE_COLUMNS)}): its arrival is its shape")
            statistics, workload = _fit_rates(frame, path)
        elif set(PMF_COLUMNS) <= set(frame.columns):
            if rate_only:
                raise LLMSimError(f"--rate-only: {path} is a PMF, without arrival times")
            statistics, workload = _fit_pmf(frame, path)
        else:
            statistics, workload = _fit_requests(frame, path, rate_only)
    if poisson_rate is not None:
        if "arrival" in workload:
            raise LLMSimError(f"{path}: has arrival times ({COLUMNS['arrival']}): its arrival is fitted to them; "
                              "--poisson is for a source without them")
        if not 0 < poisson_rate < math.inf:
            raise LLMSimError(f"--poisson: the rate must be a positive number of requests/s, got {poisson_rate}")
        workload["arrival"] = {"kind": "poisson", "rate": poisson_rate}
    flags = (f" --order {','.join(order)}" if order is not None else "") + (" --rate-only" if rate_only else "")
    flags += f" --poisson {poisson_rate:g}" if poisson_rate is not None else ""
    flags += "".join(f" --slo {key}={limit:g}" for key, limit in (slo or {}).items())
    preset: dict[str, Any] = {"name": name, "description": "", "source": str(path),
                              "fitted_by": f"llmsim workloads --fit {path} --name {name}{flags} (statistics and "
                                           "workload)"}
    if slo:
        preset["slo"] = dict(slo)
    return {**preset, "statistics": statistics, "workload": workload}


def _number(value: float) -> int | float:
    """``value`` as an int when it is whole (a preset's times written as the source gives them)."""
    return int(value) if float(value).is_integer() else float(value)


def _fit_rates(frame: pd.DataFrame, path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Statistics and workload of an arrival-rate series: bin i starts at ``time_s`` t_i (strictly increasing) and
    runs until t_{i+1}; the last bin is as wide as the one before it (a file states the starts only), so the span is
    T = t_n − t_1 + (t_n − t_{n−1}). The mean rate is the time-average m = Σ r_i · w_i / T (w_i the bins' widths;
    equal bins: the plain mean); the arrival is ``piecewise`` with rates r_i / m (rounded to 4 decimals) from
    t_i − t_1, ``period_s`` T and ``mean_rate`` m (4 significant digits). The statistics: bins, span, m, max/m and
    min/m, and the bins of rate 0. At most :data:`MAX_PIECES` bins, checked before any work on them."""
    if len(frame) > MAX_PIECES:
        raise LLMSimError(f"{path}: {len(frame):,} bins; a rate series is fitted to at most {MAX_PIECES:,} (one "
                          "rate of the piecewise arrival each)")
    if len(frame) < 2:
        raise LLMSimError(f"{path}: {len(frame)} bins; a rate series is fitted to at least 2 (the last bin is as "
                          "wide as the one before it)")
    times = _column(frame, RATE_COLUMNS[0], path)
    rates = _column(frame, RATE_COLUMNS[1], path, minimum=0)
    steps = np.diff(times)
    if (steps <= 0).any():
        row = int(np.flatnonzero(steps <= 0)[0]) + 1
        raise LLMSimError(f"{path}:{row + 2}: {RATE_COLUMNS[0]}: {shown(frame[RATE_COLUMNS[0]].iloc[row], 40)} is "
                          f"not after the bin before it ({times[row - 1]:g}): bin starts must increase")
    widths = np.append(steps, steps[-1])
    span = float(times[-1] - times[0] + steps[-1])
    mean = float((rates * widths).sum() / span)
    if mean == 0:
        raise LLMSimError(f"{path}: {RATE_COLUMNS[1]}: every rate is 0; a rate series needs one > 0")
    shape = [[_number(start), round(float(rate), 4)] for start, rate in zip(times - times[0], rates / mean,
                                                                            strict=True)]
    statistics = {"bins": len(rates), "span_s": _number(span), "rate_per_s": float(f"{mean:.4g}"),
                  "peak_to_mean": round(float(rates.max()) / mean, 3),
                  "min_to_mean": round(float(rates.min()) / mean, 3), "zero_bins": int((rates == 0).sum())}
    arrival = {"kind": "piecewise", "mean_rate": statistics["rate_per_s"], "period_s": _number(span),
               "rates": shape}
    return statistics, {"arrival": arrival}


def _lengths(values: np.ndarray, cap_share: float) -> dict[str, Any]:
    """The quantile length section of ``values`` (a length's percentiles, or its inverse CDF, at
    :data:`PERCENTILES`). ``cap_share``: the share of requests at the largest value; a cap holding more than the
    top percent (DeepSeek-R1's outputs at 32,768 tokens) gets one more point where it begins, at 1 − that share, so
    that the draws reach the cap as often as the source does instead of spreading them over the percent below."""
    lengths = [int(v) for v in np.rint(values)]
    probabilities = list(PROBABILITIES)
    start = round(1 - cap_share, 6)
    if cap_share > 0.01 and start not in probabilities:
        at = int(np.searchsorted(probabilities, start))
        if lengths[at] == lengths[-1]:  # the percentiles above the cap's start are the cap (they are, but for 1/n)
            lengths.insert(at, lengths[-1])
            probabilities.insert(at, start)
    return {"kind": "quantiles", "values": lengths, "probabilities": probabilities}


def _fit_requests(frame: pd.DataFrame, path: str | Path,
                  rate_only: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Statistics and workload of one row per request (module docstring); ``rate_only``: a Poisson arrival at the
    mean rate, with the number of distinct arrival times among the statistics (what shows timestamps too coarse for
    the gaps to mean anything)."""
    import pandas as pd

    frame = frame.rename(columns={k: v for k, v in ALIASES.items() if v not in frame.columns})
    missing = [c for c in (COLUMNS["input"], COLUMNS["output"]) if c not in frame.columns]
    if missing:
        raise LLMSimError(f"{path}: missing column(s) {missing} (a preset is fitted to {list(COLUMNS.values())}; "
                          f"{', '.join(ALIASES)} are taken for the lengths too; or to a PMF: "
                          f"{', '.join(PMF_COLUMNS)})")
    if len(frame) < 2:
        raise LLMSimError(f"{path}: {len(frame)} rows; a preset is fitted to at least 2")
    inputs, outputs = (_column(frame, COLUMNS[k], path, minimum=0) for k in ("input", "output"))
    ranks = np.corrcoef(pd.Series(inputs).rank(), pd.Series(outputs).rank())[0, 1]
    statistics: dict[str, Any] = {"requests": len(frame), "input_tokens": _stats(inputs),
                                  "output_tokens": _stats(outputs),
                                  "input_output_rank_correlation": round(float(ranks), 3)}
    workload: dict[str, Any] = {
        part: _lengths(np.percentile(values, PERCENTILES), float(np.mean(values == values.max())))
        for part, values in (("input_tokens", inputs), ("output_tokens", outputs))}
    if abs(statistics["input_output_rank_correlation"]) >= MIN_RANK_CORRELATION:
        workload["length_correlation"] = {"kind": "gaussian_copula",
                                          "spearman": statistics["input_output_rank_correlation"]}
    if COLUMNS["arrival"] not in frame.columns:
        if rate_only:
            raise LLMSimError(f"--rate-only: {path} has no arrival times ({COLUMNS['arrival']}); give --poisson RATE")
        return statistics, workload
    times = np.sort(_column(frame, COLUMNS["arrival"], path))
    if times[-1] == times[0]:
        raise LLMSimError(f"{path}: {COLUMNS['arrival']}: every request arrives at {times[0]:g} s; a rate needs "
                          "arrivals spread in time")
    gaps = np.diff(times)
    rate, cv = float(f"{len(times) / (times[-1] - times[0]):.4g}"), float(gaps.std() / gaps.mean())
    statistics.update({"rate_per_s": rate, "gap_cv": round(cv, 3)})
    if rate_only:
        statistics["distinct_arrival_times"] = len(np.unique(times))
        workload["arrival"] = {"kind": "poisson", "rate": rate}
    else:
        workload["arrival"] = ({"kind": "gamma", "rate": rate, "burstiness": round(1 / cv**2, 4)}
                               if cv > 0 else {"kind": "constant", "rate": rate})  # even gaps
    return statistics, workload


def _read_json_lines(path: str | Path) -> list[dict[str, Any]]:
    """One JSON object per line (blank lines skipped); a line that is not one is an error naming it."""
    try:
        lines = Path(path).read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise LLMSimError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise LLMSimError(f"{path}:{number}: not JSON ({exc.args[0].split(':')[0]})") from None
        if not isinstance(record, dict):
            raise LLMSimError(f"{path}:{number}: expected a JSON object, got {shown(record, 40)}")
        records.append({**record, LINE: number})
    if len(records) < 2:
        raise LLMSimError(f"{path}: {len(records)} requests; a preset is fitted to at least 2")
    return records


def _integers(record: dict[str, Any], field: str, path: str | Path, minimum: int) -> list[int]:
    """A record's list of integers of at least ``minimum`` (an error naming the line and field otherwise)."""
    values = record.get(field)
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum
                                               for v in values):
        raise LLMSimError(f"{path}:{record[LINE]}: {field}: expected a list of integers >= {minimum}, got "
                          f"{shown(values, 60)}")
    return values


def _content_ids(record: dict[str, Any], field: str, path: str | Path) -> list[int]:
    """A record's content ids (``hash_ids``, a part's ``ids``): integers in [0, 2^63), as the trace reader takes
    them (:data:`simulator.catalog.prompt_reuse.CONTENT_ID_LIMIT`)."""
    values = record.get(field)
    if not isinstance(values, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < prompt_reuse.CONTENT_ID_LIMIT
            for v in values):
        raise LLMSimError(f"{path}:{record[LINE]}: {field}: expected a list of integer ids in [0, 2^63), got "
                          f"{shown(values, 60)}")
    return values


def _json_parts(record: dict[str, Any], path: str | Path) -> dict[str, tuple[list[int], list[int]]]:
    """A record's ``parts``: name -> (content ids, tokens of each chunk, at least 1)."""
    parts = record.get("parts")
    if not isinstance(parts, dict) or not all(isinstance(part, dict) for part in parts.values()):
        raise LLMSimError(f"{path}:{record[LINE]}: parts: expected {{name: {{ids: [...], tokens: [...]}}}}, got "
                          f"{shown(parts, 60)}")
    out = {}
    for name, part in parts.items():
        ids = _content_ids({**part, LINE: record[LINE]}, "ids", path)
        tokens = _integers({**part, LINE: record[LINE]}, "tokens", path, minimum=1)
        if len(ids) != len(tokens):
            raise LLMSimError(f"{path}:{record[LINE]}: parts.{name}: {len(ids)} ids but {len(tokens)} tokens")
        out[str(name)] = (ids, tokens)
    return out


def _fit_json_lines(path: str | Path, order: list[str] | None,
                    rate_only: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Statistics and workload of JSON lines with ``input_length``, ``output_length``, optionally ``timestamp``
    (ms, as Mooncake's traces give it) or ``timestamp_s`` (s), and content ids: ``hash_ids`` (chained ids of
    512-token blocks) or ``parts`` (content ids and tokens of each part's chunks; ``order`` names the parts in
    prompt order), fitted as ``segments`` (:mod:`simulator.catalog.prompt_reuse`); ``session_id`` adds the
    sessions' statistics. Requests are taken in time order (stable)."""
    import pandas as pd

    records = _read_json_lines(path)
    columns: dict[str, list[float]] = {COLUMNS["input"]: [], COLUMNS["output"]: []}
    for field, column in (("input_length", COLUMNS["input"]), ("output_length", COLUMNS["output"])):
        for record in records:
            value = record.get(field)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= MAX_JSON_TOKENS:
                raise LLMSimError(f"{path}:{record[LINE]}: {field}: expected a number of tokens from 1 to "
                                  f"{MAX_JSON_TOKENS:,}, got {shown(value, 40)}")
            columns[column].append(float(value))
    clock = next((field for field in TIME_FIELDS if field in records[0]), None)
    if clock is not None:
        for record in records:
            value = record.get(clock)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                    or value < 0:
                raise LLMSimError(f"{path}:{record[LINE]}: {clock}: expected a time >= 0, got {shown(value, 40)}")
        times = np.array([record[clock] for record in records], dtype=float) * TIME_FIELDS[clock]
        keep = np.argsort(times, kind="stable")
        records = [records[i] for i in keep]
        columns = {column: [values[i] for i in keep] for column, values in columns.items()}
        columns[COLUMNS["arrival"]] = times[keep].tolist()
    statistics, workload = _fit_requests(pd.DataFrame(columns), path, rate_only)
    inputs = np.array(columns[COLUMNS["input"]], dtype=np.int64)
    if "session_id" in records[0]:
        turns = np.array(list(Counter(str(record.get("session_id")) for record in records).values()))
        statistics["sessions"] = {"sessions": len(turns), "mean_turns": round(float(turns.mean()), 3),
                                  "single_turn_share": round(float(np.mean(turns == 1)), 4),
                                  "max_turns": int(turns.max())}
    if "parts" in records[0]:
        parts = [_json_parts(record, path) for record in records]
        names = list(dict.fromkeys(name for request in parts for name in request))
        if order is None or sorted(order) != sorted(names) or len(set(order)) != len(order):
            raise LLMSimError(f"--order: {path} has prompt parts {names}; give each once, in their order in the "
                              f"prompt (--order {','.join(names)} in the file's order), got {order}")
        statistics.update(prompt_reuse.part_statistics(parts, order, inputs))
        segments = prompt_reuse.fit_parts(parts, order)
    elif "hash_ids" in records[0]:
        if order is not None:
            raise LLMSimError(f"--order: {path} has hash_ids, not prompt parts; leave --order out")
        blocks = [_content_ids(record, "hash_ids", path) for record in records]
        for record, ids, length in zip(records, blocks, inputs.tolist(), strict=True):
            if len(ids) != -(-length // prompt_reuse.HASH_BLOCK_TOKENS):
                raise LLMSimError(f"{path}:{record[LINE]}: hash_ids: {len(ids)} ids for {length} tokens (one per "
                                  f"{prompt_reuse.HASH_BLOCK_TOKENS}-token block: "
                                  f"{-(-length // prompt_reuse.HASH_BLOCK_TOKENS)})")
        fit = prompt_reuse.fit_hash_blocks(blocks, inputs)
        statistics["prefix_reuse"] = fit.statistics
        segments = fit.segments
        context = next((segment for segment in segments if segment.name == "context"), None)
        if context is not None:
            law = _segment_lengths(context.tokens)
            context.share = prompt_reuse.context_share(
                fit.statistics["seen_before_share"], fit.common_tokens,
                (workload["input_tokens"]["values"], workload["input_tokens"]["probabilities"]),
                (law["values"], law["probabilities"]) if law["kind"] == "quantiles" else ([law["value"]] * 2, [0, 1]))
    else:
        raise LLMSimError(f"{path}: JSON lines without content ids (hash_ids or parts): fit its lengths from a CSV "
                          "(llmsim convert-trace writes one)")
    if segments:
        workload["segments"] = [segment.section(_segment_lengths) for segment in segments]
    return statistics, workload


def _segment_lengths(sample: np.ndarray) -> dict[str, Any]:
    """The length section of a segment's documents: ``fixed`` when they all have one length, else quantiles."""
    if np.all(sample == sample[0]):
        return {"kind": "fixed", "value": int(sample[0])}
    return _lengths(np.percentile(sample, PERCENTILES), float(np.mean(sample == sample.max())))


def pmf_quantiles(values: np.ndarray, probabilities: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The inverse CDF of a PMF (``values`` increasing) at cumulative probabilities ``at``: the smallest value whose
    cumulative probability reaches each (the probabilities normalised to sum 1; 0 gives the smallest value with
    any probability, 1 the largest)."""
    cdf = np.cumsum(probabilities) / probabilities.sum()
    return values[np.minimum(np.searchsorted(cdf, np.asarray(at) - 1e-9), len(values) - 1)]


def _pmf_fields(frame: pd.DataFrame, path: str | Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each field of a ``field,value,probability`` PMF, in the file's order: its values with a positive probability
    (increasing) and those probabilities."""
    values, probabilities = _column(frame, "value", path, minimum=0), _column(frame, "probability", path, minimum=0)
    fields = frame["field"].astype(str).to_numpy()
    out = {}
    for field in dict.fromkeys(fields):  # the file's order
        mask = (fields == field) & (probabilities > 0)
        order = np.argsort(values[mask], kind="stable")
        v, p = values[mask][order], probabilities[mask][order]
        if len(v) == 0 or len(np.unique(v)) != len(v):
            raise LLMSimError(f"{path}: field {field!r}: " + ("no value with a positive probability" if len(v) == 0
                                                              else "a value is listed twice"))
        out[field] = (v, p)
    return out


def _pmf_statistics(v: np.ndarray, p: np.ndarray) -> dict[str, float]:
    p50, p90, p99 = pmf_quantiles(v, p, np.array([0.5, 0.9, 0.99]))
    return {"p50": round(float(p50), 1), "mean": round(float((v * p).sum() / p.sum()), 1),
            "p90": round(float(p90), 1), "p99": round(float(p99), 1)}


def _pmf_lengths(v: np.ndarray, p: np.ndarray) -> dict[str, Any]:
    """A length part drawn from a PMF's inverse CDF (its quantiles, the top value's share)."""
    return _lengths(pmf_quantiles(v, p, PERCENTILES / 100), float(p[-1] / p.sum()))


def _pmf_mean_median(v: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """A documented field's mean and median (not a length the workload draws)."""
    return {"mean": round(float((v * p).sum() / p.sum()), 3),
            "p50": round(float(pmf_quantiles(v, p, np.array([0.5]))[0]), 3)}


def _fit_pmf(frame: pd.DataFrame, path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Statistics and workload of a ``field,value,probability`` PMF: each length part from its field's inverse
    CDF, each other field's mean and median as documentation. A multimodal PMF (:data:`IMAGE_FIELDS`: ServeGen's
    mm-image) is fitted by :func:`_fit_image_pmf`."""
    pmfs = _pmf_fields(frame, path)
    if set(IMAGE_FIELDS.values()) <= set(pmfs):
        return _fit_image_pmf(pmfs)
    missing = [field for field in PMF_FIELDS.values() if field not in pmfs]
    if missing:
        raise LLMSimError(f"{path}: a PMF without field(s) {missing} (its fields: {sorted(pmfs)})")
    statistics: dict[str, Any] = {}
    workload: dict[str, Any] = {}
    for field, (v, p) in pmfs.items():
        if field in PMF_FIELDS.values():
            statistics[field] = _pmf_statistics(v, p)
            workload[field] = _pmf_lengths(v, p)
        else:
            statistics[field] = _pmf_mean_median(v, p)
    statistics["input_output_correlation"] = MARGINALS_ONLY
    return statistics, {part: workload[field] for part, field in PMF_FIELDS.items()}


def _fit_image_pmf(pmfs: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Statistics and workload of a multimodal PMF with :data:`IMAGE_FIELDS`: the text's tokens as
    ``input_tokens`` and the output's as ``output_tokens`` (quantiles, as any PMF's lengths; a request's prompt
    adds its images' tokens to its text's), and ``images``:
    ``per_request`` the image count's PMF itself (values and probabilities normalised, rounded to 7 decimals: 0
    images included) and ``tokens_per_image`` the quantiles of the image tokens' PMF without its value 0 (an image
    fills at least one token; ServeGen's zeros, 0.42% of its mass, come with the 0.57% of requests that have no
    image). The statistics, by the file's field names: each field's mean and percentiles as the file gives them
(zeros included), the share of
    zero image tokens left out, and the other fields' mean and median (ServeGen's audio and video: all 0)."""
    statistics: dict[str, Any] = {}
    for field in IMAGE_FIELDS.values():
        statistics[field] = _pmf_statistics(*pmfs[field])
    counts, shares = pmfs[IMAGE_FIELDS["image_count"]]
    statistics["image_count"]["mean"] = round(float((counts * shares).sum() / shares.sum()), 3)  # (about 1.6)
    tokens, weights = pmfs[IMAGE_FIELDS["image_tokens"]]
    statistics["image_tokens"]["zero_share"] = round(float(weights[tokens == 0].sum() / weights.sum()), 5)
    if (tokens > 0).any():  # what tokens_per_image draws: the same statistics without the zeros
        statistics["image_tokens"]["without_zeros"] = _pmf_statistics(tokens[tokens > 0], weights[tokens > 0])
    for field, (v, p) in pmfs.items():
        if field not in IMAGE_FIELDS.values():
            statistics[field] = _pmf_mean_median(v, p)
    workload: dict[str, Any] = {part: _pmf_lengths(*pmfs[IMAGE_FIELDS[part]])
                                for part in ("input_tokens", "output_tokens")}
    kept = tokens > 0
    if not kept.any():
        raise LLMSimError(f"field {IMAGE_FIELDS['image_tokens']!r}: every image has 0 tokens")
    workload["images"] = {
        "per_request": {"kind": "pmf", "values": [int(c) for c in counts],
                        "probabilities": [round(float(x), 7) for x in shares / shares.sum()]},
        "tokens_per_image": _pmf_lengths(tokens[kept], weights[kept]),
    }
    return statistics, workload


def _truncated_exponential_rate(mean: float, low: float, high: float) -> float:
    """λ with ``low + 1/λ − L/(e^{λL} − 1) = mean`` (L = high − low): the mean falls from (low + high)/2 at λ = 0
    towards ``low`` as λ grows (and rises towards ``high`` as λ falls below 0); found by bisection on λ·L."""
    span = high - low

    def mean_at(scaled: float) -> float:  # the mean for λ = scaled / span, as a fraction of the span
        if abs(scaled) < 1e-9:
            return 0.5
        tail = 0.0 if scaled > 50 else 1.0 if scaled < -50 else -1 / math.expm1(scaled)
        return 1 / scaled + tail

    target = (mean - low) / span
    hi = 2 / min(target, 1 - target) + 10  # a bracket: the mean is ≈ 1/(λL) for large λL, 1 + 1/(λL) for large −λL
    lo = -hi
    for _ in range(200):
        middle = (lo + hi) / 2
        lo, hi = (middle, hi) if mean_at(middle) > target else (lo, middle)
    return (lo + hi) / 2 / span


def max_entropy_lengths(mean: float, low: int, high: int) -> dict[str, Any]:
    """The quantile length section of the maximum-entropy law on ``[low, high]`` with ``mean`` (module docstring),
    at :data:`PERCENTILES`."""
    if not low < mean < high:
        raise LLMSimError(f"max-entropy lengths: the mean {mean} must lie strictly between low {low} and high {high}")
    rate = _truncated_exponential_rate(mean, low, high)
    p = PERCENTILES / 100
    span = high - low
    if abs(rate) * span < 1e-9:
        values = low + p * span
    else:
        # x_p = low − ln(1 − p·(1 − e^{−λL})) / λ for λ > 0; for λ < 0 the mirror image from high (so that e^{|λ|L}
        # never overflows when the mean lies close to high): x_p = high + ln(1 − (1 − p)·(1 − e^{−|λ|L})) / |λ|
        magnitude = abs(rate)
        tail = p if rate > 0 else 1 - p
        with np.errstate(divide="ignore"):  # p = 1 at a far bound: log1p(-1), the bound itself
            offset = -np.log1p(-tail * -np.expm1(-magnitude * span)) / magnitude
        values = np.clip(low + offset if rate > 0 else high - offset, low, high)
    return {"kind": "quantiles", "values": [int(v) for v in np.rint(values)],
            "probabilities": list(PROBABILITIES)}


def max_entropy_preset(name: str, lengths: dict[str, tuple[float, int, int]]) -> dict[str, Any]:
    """A preset from published means and bounds: ``lengths`` maps ``input_tokens`` / ``output_tokens`` to
    ``(mean, low, high)``; ``description`` and ``source`` are left for a person to write."""
    spec = " ".join(f"--max-entropy {part}={mean:g}:{low}:{high}" for part, (mean, low, high) in lengths.items())
    return {"name": name, "description": "", "source": "",
            "fitted_by": f"llmsim workloads {spec} --name {name} (workload)",
            "statistics": {**{part: {"mean": mean, "min": low, "max": high}
                              for part, (mean, low, high) in lengths.items()},
                           "input_output_correlation": MARGINALS_ONLY},
            "workload": {part: max_entropy_lengths(mean, low, high) for part, (mean, low, high) in lengths.items()}}


def preset_yaml(preset: dict[str, Any]) -> str:
    """A preset as the YAML of its file (quantile lists on one line each, segments one mapping each)."""

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # the shared probabilities list written out twice
            return True

    def flow_lists(dumper: yaml.SafeDumper, values: list) -> yaml.Node:  # lists of mappings stay in block style
        flow = not any(isinstance(value, dict) for value in values)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", values, flow_style=flow)

    Dumper.add_representer(list, flow_lists)
    return yaml.dump(preset, Dumper=Dumper, sort_keys=False, width=120, allow_unicode=True)
