"""Named workload presets (``workloads/<name>.yaml``): a workload section fitted to a source, with the source and
the statistics it was fitted to, usable as ``workload: {preset: NAME, ...}`` (the experiment's own workload keys
override the preset's, key by key) and listed by ``llmsim workloads``.

A preset file holds ``name``, ``description``, ``source``, ``fitted_by`` (the command that reproduces it),
``statistics`` (the source's percentiles, rate and burstiness) and ``workload`` (the fitted section). Lengths are
fitted as their percentiles 0…99, 99.1…99.9 and 100 (:class:`simulator.config.workload.QuantileLength`, drawn
independently for input and output: the statistics give the source's rank correlation between them); arrivals,
where the source has timestamps, as vLLM bench's gamma process with the source's mean rate and ``burstiness`` =
1 / CV² of its gaps.

A source that publishes only a mean and the bounds of its lengths (a paper's or a blog's "average 202 tokens") gets
the maximum-entropy law for those facts (:func:`max_entropy_preset`): on ``[low, high]`` with mean ``m``, the
truncated exponential ``p(x) ∝ exp(−λ·(x − low))`` whose mean is ``m`` (λ < 0 when ``m`` lies above the middle) —
the least-informed shape that agrees with what is stated, not a fit to the dataset's own shape.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from simulator.catalog.paths import PROJECT_ROOT
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


def preset_names() -> list[str]:
    return sorted(path.stem for path in PRESETS_DIR.glob("*.yaml"))


def load_preset(name: str) -> dict[str, Any]:
    """The preset file ``name`` as a mapping (a ValueError naming the presets when there is none)."""
    path = PRESETS_DIR / f"{name}.yaml"
    if not isinstance(name, str) or not path.is_file():
        raise ValueError(f"unknown preset {name!r} (allowed: {', '.join(preset_names())})")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


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


def fit_preset(path: str | Path, name: str) -> dict[str, Any]:
    """A preset fitted to a CSV with ``num_prefill_tokens``, ``num_decode_tokens`` (or ``input_length``,
    ``output_length``) and optionally ``arrived_at`` (seconds; the processed-trace format of
    ``../shared/data/traces``); ``description`` is left for a person to write and ``source`` names the file."""
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise LLMSimError(f"{path}: empty file (a preset is fitted to a CSV with a header and rows)") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise LLMSimError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    frame = frame.rename(columns={k: v for k, v in ALIASES.items() if v not in frame.columns})
    missing = [c for c in (COLUMNS["input"], COLUMNS["output"]) if c not in frame.columns]
    if missing:
        raise LLMSimError(f"{path}: missing column(s) {missing} (a preset is fitted to {list(COLUMNS.values())}; "
                          f"{', '.join(ALIASES)} are taken for the lengths too)")
    if len(frame) < 2:
        raise LLMSimError(f"{path}: {len(frame)} rows; a preset is fitted to at least 2")
    inputs, outputs = (_column(frame, COLUMNS[k], path, minimum=0) for k in ("input", "output"))
    ranks = np.corrcoef(pd.Series(inputs).rank(), pd.Series(outputs).rank())[0, 1]
    statistics: dict[str, Any] = {"requests": len(frame), "input_tokens": _stats(inputs),
                                  "output_tokens": _stats(outputs),
                                  "input_output_rank_correlation": round(float(ranks), 3)}
    workload: dict[str, Any] = {
        part: {"kind": "quantiles", "values": [int(v) for v in np.rint(np.percentile(values, PERCENTILES))],
               "probabilities": list(PROBABILITIES)}
        for part, values in (("input_tokens", inputs), ("output_tokens", outputs))}
    if COLUMNS["arrival"] in frame.columns:
        times = np.sort(_column(frame, COLUMNS["arrival"], path))
        if times[-1] == times[0]:
            raise LLMSimError(f"{path}: {COLUMNS['arrival']}: every request arrives at {times[0]:g} s; a rate needs "
                              "arrivals spread in time")
        gaps = np.diff(times)
        rate, cv = len(times) / (times[-1] - times[0]), gaps.std() / gaps.mean()
        statistics.update({"rate_per_s": round(float(rate), 3), "gap_cv": round(float(cv), 3)})
        workload["arrival"] = {"kind": "gamma", "rate": round(float(rate), 3),
                               "burstiness": round(float(1 / cv**2), 4)}
    return {"name": name, "description": "", "source": str(path),
            "fitted_by": f"llmsim workloads --fit {path} --name {name} (statistics and workload)",
            "statistics": statistics, "workload": workload}


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
            "statistics": {part: {"mean": mean, "min": low, "max": high}
                           for part, (mean, low, high) in lengths.items()},
            "workload": {part: max_entropy_lengths(mean, low, high) for part, (mean, low, high) in lengths.items()}}


def preset_yaml(preset: dict[str, Any]) -> str:
    """A preset as the YAML of its file (quantile lists on one line each)."""

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # the shared probabilities list written out twice
            return True

    def flow_lists(dumper: yaml.SafeDumper, values: list) -> yaml.Node:
        return dumper.represent_sequence("tag:yaml.org,2002:seq", values, flow_style=True)

    Dumper.add_representer(list, flow_lists)
    return yaml.dump(preset, Dumper=Dumper, sort_keys=False, width=120, allow_unicode=True)
