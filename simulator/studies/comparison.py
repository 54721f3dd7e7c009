"""Policy comparisons: one base experiment, named variants, and the findings they are expected to show.

A comparison file (YAML)::

    name: paged_vs_contiguous
    claim: contiguous reservation wastes most KV memory, paging almost none   # the expected finding, in words
    source: ../shared/reference/papers.csv, vLLM/PagedAttention rows            # where the claim comes from
    base: {model: opt-13b, ...}            # an experiment mapping, or a path to an experiment YAML
    variants:                              # name -> overrides deep-merged into the base
      contiguous: {kv_cache: {kind: contiguous}}
      paged: {kv_cache: {kind: paged}}
    metrics: [kv_waste_frac, mean_running, output_throughput]   # the table's rows
    findings:
      - {metric: kv_waste_frac, variant: paged, max: 0.04}               # a bound on one variant
      - {metric: output_throughput, ratio: [paged, contiguous], min: 2}  # a factor range between two

Every variant is validated before anything runs. Variants run in parallel processes with ``jobs`` > 1 (joblib);
each is a pure function of its config, so results do not depend on ``jobs``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from simulator.api import run
from simulator.config import ExperimentConfig, load_experiment
from simulator.config.base import Strict
from simulator.config.loader import load_spec, resolve_base
from simulator.config.slo import SLOConfig
from simulator.errors import ConfigError
from simulator.kv.tiers import TIER_METRICS
from simulator.results.bounds import BOUND_METRICS
from simulator.results.energy import ENERGY_METRICS
from simulator.results.histogram import LogHistogram
from simulator.results.metrics import (
    AUTOSCALER_METRICS,
    CLASS_METRICS,
    DISAGGREGATED_METRICS,
    DRAFT_MEMORY_METRICS,
    FAULT_METRICS,
    LORA_METRICS,
    MEMORY_PLAN_METRICS,
    MIG_METRICS,
    SESSION_METRICS,
    SPECULATIVE_METRICS,
    SPECULATIVE_POSITION,
    RunTotals,
    summarize,
)
from simulator.results.progress import progress_bar
from simulator.results.recorder import SUMMARY_COLUMNS


class Finding(Strict):
    """``metric`` of one ``variant`` within [min, max], or the ratio ``ratio[0] / ratio[1]`` of two variants'."""

    metric: str
    variant: str | None = None
    ratio: tuple[str, str] | None = None
    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _well_formed(self) -> Finding:
        if (self.variant is None) == (self.ratio is None):
            raise ValueError("give exactly one of variant or ratio: [numerator, denominator]")
        if self.min is None and self.max is None:
            raise ValueError("give min, max or both")
        return self

    def describe(self) -> str:
        # (ratio is set where variant is not: the validator above)
        subject = f"{self.variant}" if self.variant else f"{self.ratio[0]} / {self.ratio[1]}"  # type: ignore[index]
        bounds = " and ".join(
            text for text in (f">= {self.min:g}" if self.min is not None else "",
                              f"<= {self.max:g}" if self.max is not None else "") if text
        )
        return f"{self.metric} of {subject} {bounds}"


class ComparisonConfig(Strict):
    name: str
    claim: str = ""
    source: str = ""
    base: dict[str, Any] | str
    variants: dict[str, dict[str, Any]] = Field(min_length=1)
    metrics: list[str] = Field(default_factory=lambda: [
        "output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "slo_attainment",
    ])
    findings: list[Finding] = Field(default_factory=list)
    tolerances: dict[str, float] = Field(
        default_factory=dict, description="llmsim regress: relative tolerance per metric against the baseline"
    )


def summary_keys() -> list[str]:
    """Every key a run's summary can have (from the summary of an empty run, plus the disaggregated and the
    multi-turn, autoscaling, LoRA, fault, speculative-decoding, iteration-bound, MIG, energy and KV-tier ones, and the
    memory plan; not the per-position ``acceptance_rate_pos<i>``, one per drafted token)."""
    empty = {name: np.array([]) for name in SUMMARY_COLUMNS}
    empty["finished"] = empty["failed"] = empty["cancelled"] = np.array([], dtype=bool)
    totals = RunTotals(kv_num_blocks=1, kv_block_size=1, peak_kv_blocks=[0], kv_token_seconds=[0.0], peak_running=[0],
                       iterations=0, num_gpus=1)
    summary = summarize(empty, LogHistogram(), totals, SLOConfig())
    return [*summary, *DISAGGREGATED_METRICS, *SESSION_METRICS, *AUTOSCALER_METRICS, *LORA_METRICS, *FAULT_METRICS,
            *MEMORY_PLAN_METRICS, *DRAFT_MEMORY_METRICS, *SPECULATIVE_METRICS, *BOUND_METRICS, *MIG_METRICS,
            *ENERGY_METRICS, *TIER_METRICS]


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` merged in, recursively for mappings (a ``kind`` change replaces the mapping,
    since the other keys belong to the old kind)."""
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        old = merged.get(key)
        if isinstance(value, dict) and isinstance(old, dict) and value.get("kind", old.get("kind")) == old.get("kind"):
            merged[key] = _merge(old, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


@dataclass
class Comparison:
    """A loaded comparison: its spec, the folder it came from, and every variant's validated experiment."""

    spec: ComparisonConfig
    path: Path
    experiments: dict[str, ExperimentConfig]


def load_comparison(path: str | Path) -> Comparison:
    """Read and validate a comparison file and all its variants (one-line errors naming the field)."""
    path = Path(path)
    spec, folder = load_spec(path, ComparisonConfig, "comparison")
    base, base_dir = resolve_base(spec.base, folder, str(path))
    experiments = {
        name: load_experiment(_merge(base, overrides), base_dir=base_dir, where=f"{path}: variants.{name}")
        for name, overrides in spec.variants.items()
    }
    known = set(summary_keys()) | {
        f"{c.name}.{metric}" for config in experiments.values() for c in config.workload.classes or []
        for metric in CLASS_METRICS
    }
    for where, metric in [("metrics", m) for m in spec.metrics] + [("findings", f.metric) for f in spec.findings]:
        position = metric.removeprefix(SPECULATIVE_POSITION)  # acceptance_rate_pos<i>: one per drafted token
        if metric not in known and not (position != metric and position.isdigit() and int(position) >= 1):
            raise ConfigError(f"{path}: {where}: unknown metric {metric!r} (allowed: {', '.join(sorted(known))}, "
                              f"{SPECULATIVE_POSITION}<i>)")
    for i, finding in enumerate(spec.findings):
        # (ratio is set where variant is not: Finding's validator)
        for name in [finding.variant] if finding.variant else list(finding.ratio):  # type: ignore[arg-type]
            if name not in experiments:
                raise ConfigError(
                    f"{path}: findings[{i}]: unknown variant {name!r} (variants: {', '.join(experiments)})"
                )
    return Comparison(spec, path, experiments)


def _summary_of(config: ExperimentConfig) -> dict[str, Any]:
    return run(config).summary


def run_experiments(experiments: dict[str, ExperimentConfig], jobs: int = 1) -> dict[str, dict[str, Any]]:
    """Each experiment's summary, by name; ``jobs`` > 1 runs them in parallel processes."""
    names = list(experiments)
    bar = progress_bar(len(names), "variants", "run")
    try:
        if jobs > 1 and len(names) > 1:
            from joblib import Parallel, delayed

            summaries = []
            for summary in Parallel(n_jobs=min(jobs, len(names)), return_as="generator")(
                    delayed(_summary_of)(experiments[n]) for n in names):
                summaries.append(summary)
                bar.update(1)
        else:
            summaries = []
            for name in names:
                summaries.append(_summary_of(experiments[name]))
                bar.update(1)
    finally:
        bar.close()
    return dict(zip(names, summaries, strict=True))


@dataclass
class FindingResult:
    finding: Finding
    value: float
    holds: bool


def check_findings(findings: list[Finding], summaries: dict[str, dict[str, Any]]) -> list[FindingResult]:
    """Evaluate each finding on the summaries (a NaN value never holds)."""
    results = []
    for finding in findings:
        if finding.variant is not None:
            value = float(summaries[finding.variant].get(finding.metric, math.nan))
        else:
            assert finding.ratio is not None  # one of variant or ratio (Finding's validator)
            top, bottom = (float(summaries[name].get(finding.metric, math.nan)) for name in finding.ratio)
            value = top / bottom if bottom else math.inf if top > 0 else math.nan
        holds = not math.isnan(value) and (finding.min is None or value >= finding.min) and (
            finding.max is None or value <= finding.max
        )
        results.append(FindingResult(finding, value, holds))
    return results


def format_table(metrics: list[str], summaries: dict[str, dict[str, Any]]) -> str:
    """Metrics as rows, variants as columns."""
    names = list(summaries)
    width = max(12, *(len(n) + 2 for n in names))
    label = max(len(m) for m in metrics) + 2
    lines = [f"{'':<{label}}" + "".join(f"{n:>{width}}" for n in names)]
    for metric in metrics:
        cells = []
        for name in names:
            value = summaries[name].get(metric)  # e.g. transfer metrics exist only in disaggregated runs
            if value is None:
                cells.append(f"{'-':>{width}}")
            else:
                cells.append(f"{value:>{width},.4g}" if isinstance(value, float) else f"{value:>{width},}")
        lines.append(f"{metric:<{label}}" + "".join(cells))
    return "\n".join(lines)


def format_findings(results: list[FindingResult]) -> str:
    return "\n".join(
        f"  [{'ok' if r.holds else 'BROKEN'}] {r.finding.describe()}: {r.value:.4g}" for r in results
    )
