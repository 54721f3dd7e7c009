"""Named workload presets (``workloads/<name>.yaml``): a workload section fitted to a source, with the source and
the statistics it was fitted to, usable as ``workload: {preset: NAME, ...}`` (the experiment's own workload keys
override the preset's, key by key) and listed by ``llmsim workloads``.

A preset file holds ``name``, ``description``, ``source``, ``fitted_by`` (the command that reproduces it),
``statistics`` (the source's percentiles, rate and burstiness) and ``workload`` (the fitted section). Lengths are
fitted as their percentiles 0…99, 99.1…99.9 and 100 (:class:`simulator.config.workload.QuantileLength`, drawn
independently for input and output: the statistics give the source's rank correlation between them); arrivals, where
the source has timestamps, as vLLM bench's gamma process with the source's mean rate and ``burstiness`` = 1 / CV² of
its gaps (evenly spaced gaps, CV 0: constant arrivals). A source without timestamps whose arrivals are Poisson by
definition (MLPerf's Server scenario, at the rate under test) gets ``--poisson RATE``: a Poisson arrival at that
rate, a starting point that ``llmsim capacity`` searches from.

A source that publishes distributions rather than requests (ServeGen: a ``field,value,probability`` probability mass
function per length field) is fitted the same way from the PMF: its inverse CDF at the same percentiles, its mean and
percentiles as the statistics (no request count, no rank correlation: the fields are independent marginals), and
every other field's mean and median recorded as documentation (DeepSeek-R1's ``reason_ratio``).

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
# a distribution file (ServeGen's *_length_pmf.csv): one row per field and value, the value's probability
PMF_COLUMNS = ("field", "value", "probability")
PMF_FIELDS = {"input_tokens": "input_tokens", "output_tokens": "output_tokens"}  # preset part: the PMF's field


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


def _read_csv(path: str | Path) -> pd.DataFrame:
    import pandas as pd

    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise LLMSimError(f"{path}: empty file (a preset is fitted to a CSV with a header and rows)") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise LLMSimError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None


def fit_preset(path: str | Path, name: str, poisson_rate: float | None = None) -> dict[str, Any]:
    """A preset fitted to a CSV with ``num_prefill_tokens``, ``num_decode_tokens`` (or ``input_length``,
    ``output_length``) and optionally ``arrived_at`` (seconds; the processed-trace format of
    ``../shared/data/traces``), or to a ``field,value,probability`` PMF (:func:`_fit_pmf`); ``description`` is left
    for a person to write and ``source`` names the file. ``poisson_rate``: a Poisson arrival at that rate, for a
    source without arrival times."""
    frame = _read_csv(path)
    if set(PMF_COLUMNS) <= set(frame.columns):
        statistics, workload = _fit_pmf(frame, path)
    else:
        statistics, workload = _fit_requests(frame, path)
    if poisson_rate is not None:
        if "arrival" in workload:
            raise LLMSimError(f"{path}: has arrival times ({COLUMNS['arrival']}): its arrival is fitted to them; "
                              "--poisson is for a source without them")
        if not 0 < poisson_rate < math.inf:
            raise LLMSimError(f"--poisson: the rate must be a positive number of requests/s, got {poisson_rate}")
        workload["arrival"] = {"kind": "poisson", "rate": poisson_rate}
    poisson = f" --poisson {poisson_rate:g}" if poisson_rate is not None else ""
    return {"name": name, "description": "", "source": str(path),
            "fitted_by": f"llmsim workloads --fit {path} --name {name}{poisson} (statistics and workload)",
            "statistics": statistics, "workload": workload}


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


def _fit_requests(frame: pd.DataFrame, path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Statistics and workload of one row per request (module docstring)."""
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
    if COLUMNS["arrival"] in frame.columns:
        times = np.sort(_column(frame, COLUMNS["arrival"], path))
        if times[-1] == times[0]:
            raise LLMSimError(f"{path}: {COLUMNS['arrival']}: every request arrives at {times[0]:g} s; a rate needs "
                              "arrivals spread in time")
        gaps = np.diff(times)
        rate, cv = len(times) / (times[-1] - times[0]), gaps.std() / gaps.mean()
        statistics.update({"rate_per_s": round(float(rate), 3), "gap_cv": round(float(cv), 3)})
        workload["arrival"] = ({"kind": "gamma", "rate": round(float(rate), 3),
                                "burstiness": round(float(1 / cv**2), 4)}
                               if cv > 0 else {"kind": "constant", "rate": round(float(rate), 3)})  # even gaps
    return statistics, workload


def pmf_quantiles(values: np.ndarray, probabilities: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The inverse CDF of a PMF (``values`` increasing) at cumulative probabilities ``at``: the smallest value whose
    cumulative probability reaches each (the probabilities normalised to sum 1; 0 gives the smallest value with
    any probability, 1 the largest)."""
    cdf = np.cumsum(probabilities) / probabilities.sum()
    return values[np.minimum(np.searchsorted(cdf, np.asarray(at) - 1e-9), len(values) - 1)]


def _fit_pmf(frame: pd.DataFrame, path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Statistics and workload of a ``field,value,probability`` PMF: each length part from its field's inverse
    CDF, each other field's mean and median as documentation."""
    values, probabilities = _column(frame, "value", path, minimum=0), _column(frame, "probability", path, minimum=0)
    fields = frame["field"].astype(str).to_numpy()
    missing = [field for field in PMF_FIELDS.values() if field not in set(fields)]
    if missing:
        raise LLMSimError(f"{path}: a PMF without field(s) {missing} (its fields: {sorted(set(fields))})")
    statistics: dict[str, Any] = {}
    workload: dict[str, Any] = {}
    for field in dict.fromkeys(fields):  # the file's order
        mask = (fields == field) & (probabilities > 0)
        order = np.argsort(values[mask], kind="stable")
        v, p = values[mask][order], probabilities[mask][order]
        if len(v) == 0 or len(np.unique(v)) != len(v):
            raise LLMSimError(f"{path}: field {field!r}: " + ("no value with a positive probability" if len(v) == 0
                                                              else "a value is listed twice"))
        mean = float((v * p).sum() / p.sum())
        if field in PMF_FIELDS.values():
            p50, p90, p99 = pmf_quantiles(v, p, np.array([0.5, 0.9, 0.99]))
            statistics[field] = {"p50": round(float(p50), 1), "mean": round(mean, 1), "p90": round(float(p90), 1),
                                 "p99": round(float(p99), 1)}
            workload[field] = _lengths(pmf_quantiles(v, p, PERCENTILES / 100), float(p[-1] / p.sum()))
        else:
            median = pmf_quantiles(v, p, np.array([0.5]))[0]
            statistics[field] = {"mean": round(mean, 3), "p50": round(float(median), 3)}
    return statistics, {part: workload[field] for part, field in PMF_FIELDS.items()}


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
