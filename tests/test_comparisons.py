"""Comparison files: loading, merging variants, checking findings, and the shipped policy comparisons."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.cli import main
from simulator.comparison import Finding, _merge, check_findings, load_comparison, run_experiments
from simulator.errors import ConfigError
from tests.helpers import REPO, experiment

POLICIES = sorted((REPO / "experiments" / "policies").glob("*.yaml"))


def _write(tmp_path: Path, **spec) -> Path:
    path = tmp_path / "comparison.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "base": experiment(), "variants": {"a": {}}, **spec}))
    return path


def test_variant_overrides_merge_into_the_base_and_a_new_kind_replaces_the_section():
    base = {"scheduler": {"kind": "continuous", "max_num_seqs": 8, "prefill_priority": False}, "seed": 1}
    same_kind = _merge(base, {"scheduler": {"max_num_seqs": 4}})
    assert same_kind["scheduler"] == {"kind": "continuous", "max_num_seqs": 4, "prefill_priority": False}
    new_kind = _merge(base, {"scheduler": {"kind": "chunked"}})
    assert new_kind["scheduler"] == {"kind": "chunked"}
    assert base["scheduler"]["max_num_seqs"] == 8  # the base is not modified


def test_findings_bound_one_variant_or_a_ratio():
    summaries = {"a": {"x": 10.0}, "b": {"x": 4.0}}
    results = check_findings([
        Finding(metric="x", variant="a", min=10), Finding(metric="x", variant="b", max=3.9),
        Finding(metric="x", ratio=("a", "b"), min=2, max=2.5), Finding(metric="x", ratio=("b", "a"), min=0.5),
    ], summaries)
    assert [r.holds for r in results] == [True, False, True, False]
    assert results[2].value == pytest.approx(2.5)


@pytest.mark.parametrize(("spec", "message"), [
    ({"metrics": ["nope"]}, "metrics: unknown metric 'nope'"),
    ({"findings": [{"metric": "mean_ttft_ms", "variant": "zz", "max": 1}]}, "findings[0]: unknown variant 'zz'"),
    ({"findings": [{"metric": "mean_ttft_ms", "variant": "a"}]}, "give min, max or both"),
    ({"variants": {"a": {"scheduler": {"max_num_seqs": 0}}}}, "variants.a: scheduler.max_num_seqs: must be >= 1"),
    ({"variants": {}}, "variants: "),
])
def test_bad_comparison_files_get_one_line_errors(tmp_path, spec, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_comparison(_write(tmp_path, **spec))


def test_results_do_not_depend_on_parallel_jobs(tmp_path):
    comparison = load_comparison(_write(tmp_path, variants={"a": {}, "b": {"seed": 2}}))
    assert run_experiments(comparison.experiments, jobs=1) == run_experiments(comparison.experiments, jobs=2)


def test_compare_command_exits_nonzero_on_a_broken_finding(tmp_path, capsys):
    holds = _write(tmp_path, findings=[{"metric": "completed", "variant": "a", "min": 50}])
    assert main(["compare", str(holds)]) == 0
    broken = _write(tmp_path, findings=[{"metric": "completed", "variant": "a", "min": 51}])
    assert main(["compare", str(broken)]) == 1
    assert "[BROKEN] completed of a >= 51: 50" in capsys.readouterr().out


@pytest.mark.parametrize("path", POLICIES, ids=[p.stem for p in POLICIES])
def test_shipped_policy_comparisons_hold(path):
    comparison = load_comparison(path)
    results = check_findings(comparison.spec.findings, run_experiments(comparison.experiments, jobs=2))
    assert comparison.spec.findings and comparison.spec.source
    broken = [f"{r.finding.describe()}: {r.value:.4g}" for r in results if not r.holds]
    assert not broken
