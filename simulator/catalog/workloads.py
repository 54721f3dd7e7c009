"""Named workload presets (``workloads/<name>.yaml``): a workload section fitted to a source, with the source and
the statistics it was fitted to, usable as ``workload: {preset: NAME, ...}`` (the experiment's own workload keys
override the preset's, key by key) and listed by ``llmsim workloads``.

A preset file holds ``name``, ``description``, ``source``, ``fitted_by`` (the command that reproduces it),
``statistics`` (the source's percentiles, rate and burstiness) and ``workload`` (the fitted section). Lengths are
fitted as their percentiles 0…99, 99.1…99.9 and 100 (:class:`simulator.config.schema.QuantileLength`, drawn
independently for input and output: the statistics give the source's rank correlation between them); arrivals,
where the source has timestamps, as vLLM bench's gamma process with the source's mean rate and ``burstiness`` =
1 / CV² of its gaps.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from simulator.catalog.paths import PROJECT_ROOT
from simulator.errors import LLMSimError

if TYPE_CHECKING:
    pass

PRESETS_DIR = PROJECT_ROOT / "workloads"
# percentiles 0…99, then every 0.1 to 99.9, then 100: the top percent, where the longest requests sit, is resolved
PERCENTILES = np.concatenate([np.arange(100), np.arange(991, 1000) / 10, [100]])
COLUMNS = {"arrival": "arrived_at", "input": "num_prefill_tokens", "output": "num_decode_tokens"}


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


def fit_preset(path: str | Path, name: str) -> dict[str, Any]:
    """A preset fitted to a CSV with ``num_prefill_tokens``, ``num_decode_tokens`` and optionally ``arrived_at``
    (seconds; the processed-trace format of ``../shared/data/traces``); ``description`` is left for a person to
    write and ``source`` names the file."""
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise LLMSimError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    missing = [c for c in (COLUMNS["input"], COLUMNS["output"]) if c not in frame.columns]
    if missing:
        raise LLMSimError(f"{path}: missing column(s) {missing} (a preset is fitted to {list(COLUMNS.values())})")
    inputs, outputs = (frame[COLUMNS[k]].to_numpy(dtype=float) for k in ("input", "output"))
    ranks = np.corrcoef(pd.Series(inputs).rank(), pd.Series(outputs).rank())[0, 1]
    statistics: dict[str, Any] = {"requests": len(frame), "input_tokens": _stats(inputs),
                                  "output_tokens": _stats(outputs),
                                  "input_output_rank_correlation": round(float(ranks), 3)}
    probabilities = [round(float(p) / 100, 4) for p in PERCENTILES]
    workload: dict[str, Any] = {
        part: {"kind": "quantiles", "values": [int(v) for v in np.rint(np.percentile(values, PERCENTILES))],
               "probabilities": probabilities}
        for part, values in (("input_tokens", inputs), ("output_tokens", outputs))}
    if COLUMNS["arrival"] in frame.columns:
        times = np.sort(frame[COLUMNS["arrival"]].to_numpy(dtype=float))
        gaps = np.diff(times)
        rate, cv = len(times) / (times[-1] - times[0]), gaps.std() / gaps.mean()
        statistics.update({"rate_per_s": round(float(rate), 3), "gap_cv": round(float(cv), 3)})
        workload["arrival"] = {"kind": "gamma", "rate": round(float(rate), 3),
                               "burstiness": round(float(1 / cv**2), 4)}
    return {"name": name, "description": "", "source": str(path),
            "fitted_by": f"llmsim workloads --fit {path} --name {name} (statistics and workload)",
            "statistics": statistics, "workload": workload}


def preset_yaml(preset: dict[str, Any]) -> str:
    """A preset as the YAML of its file (quantile lists on one line each)."""

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # the shared probabilities list written out twice
            return True

    def flow_lists(dumper: yaml.SafeDumper, values: list) -> yaml.Node:
        return dumper.represent_sequence("tag:yaml.org,2002:seq", values, flow_style=True)

    Dumper.add_representer(list, flow_lists)
    return yaml.dump(preset, Dumper=Dumper, sort_keys=False, width=120, allow_unicode=True)
