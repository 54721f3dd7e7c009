"""The policy-comparison regression suite: every comparison in a folder, its findings, and a reviewed baseline.

``llmsim regress`` runs every variant of every comparison file in the suite folder (in parallel), checks each
comparison's stated findings, and compares each table metric with the baseline (a JSON file committed with the
suite: ``{comparison: {variant: {metric: value}}}``) within a relative tolerance — the comparison's
``tolerances: {metric: rtol}`` or the default. It fails (exit 1) on a broken finding, a metric out of tolerance, or
a comparison, variant or metric missing from the baseline; ``--update`` re-blesses the baseline on purpose.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError
from simulator.studies.comparison import Comparison, FindingResult, check_findings, load_comparison, run_experiments

DEFAULT_RTOL = 0.02
BASELINE_NAME = "baseline.json"


@dataclass
class MetricCheck:
    comparison: str
    variant: str
    metric: str
    baseline: float | None
    value: float
    rtol: float

    @property
    def ok(self) -> bool:
        if self.baseline is None:
            return False
        if math.isnan(self.value) or math.isnan(self.baseline):
            return math.isnan(self.value) and math.isnan(self.baseline)
        return math.isclose(self.value, self.baseline, rel_tol=self.rtol, abs_tol=1e-12)


@dataclass
class SuiteResult:
    values: dict[str, dict[str, dict[str, float]]]  # comparison -> variant -> metric -> value
    findings: dict[str, list[FindingResult]]
    checks: list[MetricCheck] = field(default_factory=list)

    @property
    def broken_findings(self) -> list[tuple[str, FindingResult]]:
        return [(name, r) for name, results in self.findings.items() for r in results if not r.holds]

    @property
    def failed_checks(self) -> list[MetricCheck]:
        return [check for check in self.checks if not check.ok]

    @property
    def passed(self) -> bool:
        return not self.broken_findings and not self.failed_checks


def load_suite(folder: str | Path) -> list[Comparison]:
    """Every ``*.yaml`` comparison in a folder, validated before anything runs."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"--suite: {folder} is not a folder")
    files = sorted(folder.glob("*.yaml"))
    if not files:
        raise ConfigError(f"--suite: {folder} has no comparison files (*.yaml)")
    comparisons = [load_comparison(path) for path in files]
    names = [c.spec.name for c in comparisons]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"--suite: comparison names must be unique, repeated: {duplicates}")
    return comparisons


def run_suite(comparisons: list[Comparison], jobs: int = 1) -> SuiteResult:
    """Run every variant of every comparison (one parallel pool) and check the findings."""
    experiments = {
        f"{c.spec.name}/{variant}": config for c in comparisons for variant, config in c.experiments.items()
    }
    summaries = run_experiments(experiments, jobs=jobs)
    values, findings = {}, {}
    for comparison in comparisons:
        name = comparison.spec.name
        own = {variant: summaries[f"{name}/{variant}"] for variant in comparison.experiments}
        findings[name] = check_findings(comparison.spec.findings, own)
        values[name] = {
            variant: {metric: float(summary.get(metric, math.nan)) for metric in comparison.spec.metrics}
            for variant, summary in own.items()
        }
    return SuiteResult(values, findings)


def read_baseline(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None


def compare_with_baseline(
    result: SuiteResult, comparisons: list[Comparison], baseline: dict[str, Any], default_rtol: float = DEFAULT_RTOL
) -> None:
    """Fill ``result.checks``: each metric against the baseline (None there = missing, which fails)."""
    for comparison in comparisons:
        name = comparison.spec.name
        tolerances = comparison.spec.tolerances
        for variant, metrics in result.values[name].items():
            for metric, value in metrics.items():
                expected = baseline.get(name, {}).get(variant, {}).get(metric)
                result.checks.append(MetricCheck(
                    name, variant, metric, None if expected is None else float(expected), value,
                    tolerances.get(metric, default_rtol),
                ))


def write_baseline(result: SuiteResult, path: Path) -> None:
    """Write the baseline atomically (a temporary file, then a rename)."""
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(json.dumps(result.values, indent=2, sort_keys=True) + "\n")
    temporary.replace(path)


def format_report(result: SuiteResult) -> str:
    """What broke and what changed, then a one-line verdict."""
    lines = []
    for name, finding in result.broken_findings:
        lines.append(f"BROKEN  {name}: {finding.finding.describe()}: got {finding.value:.4g}")
    for check in result.failed_checks:
        where = f"{check.comparison}/{check.variant}: {check.metric}"
        if check.baseline is None:
            lines.append(f"NEW     {where} = {check.value:.6g} (not in the baseline; bless it with --update)")
        else:
            change = (check.value / check.baseline - 1) * 100 if check.baseline else math.inf
            lines.append(f"CHANGED {where}: {check.baseline:.6g} -> {check.value:.6g} ({change:+.1f}%, "
                         f"tolerance {check.rtol * 100:g}%)")
    findings = sum(len(r) for r in result.findings.values())
    verdict = (
        f"{len(result.findings)} comparisons, {findings} findings ({len(result.broken_findings)} broken), "
        f"{len(result.checks)} metrics ({len(result.failed_checks)} out of tolerance or new)"
    )
    return "\n".join([*lines, ("PASS  " if result.passed else "FAIL  ") + verdict])
