"""Comparison files: loading, merging variants, checking findings, and the shipped policy comparisons."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simulator.cli import main
from simulator.errors import ConfigError
from simulator.studies.comparison import Finding, _merge, check_findings, load_comparison, run_experiments
from simulator.studies.regression import load_suite
from tests.helpers import experiment, same_summaries


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
    ({"variants": {"a": {"scheduler": {"max_num_seqs": 0}}}},
     "variants.a: scheduler.max_num_seqs: must be 'auto' or a whole number of sequences from 1"),
    ({"variants": {}}, "variants: "),
])
def test_bad_comparison_files_get_one_line_errors(tmp_path, spec, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_comparison(_write(tmp_path, **spec))


def test_results_do_not_depend_on_parallel_jobs(tmp_path):
    comparison = load_comparison(_write(tmp_path, variants={"a": {}, "b": {"seed": 2}}))
    assert same_summaries(run_experiments(comparison.experiments, jobs=1),
                          run_experiments(comparison.experiments, jobs=2))


def test_compare_command_exits_nonzero_on_a_broken_finding(tmp_path, capsys):
    holds = _write(tmp_path, findings=[{"metric": "completed", "variant": "a", "min": 50}])
    assert main(["compare", str(holds)]) == 0
    broken = _write(tmp_path, findings=[{"metric": "completed", "variant": "a", "min": 51}])
    assert main(["compare", str(broken)]) == 1
    assert "[BROKEN] completed of a >= 51: 50" in capsys.readouterr().out


def _suite(tmp_path: Path, findings_min: float = 50) -> Path:
    folder = tmp_path / "suite"
    folder.mkdir(exist_ok=True)
    (folder / "one.yaml").write_text(yaml.safe_dump({
        "name": "one", "source": "test", "base": experiment(), "variants": {"a": {}, "b": {"seed": 2}},
        "metrics": ["completed", "mean_ttft_ms"], "tolerances": {"mean_ttft_ms": 0.001},
        "findings": [{"metric": "completed", "variant": "a", "min": findings_min}],
    }))
    return folder


def test_regress_blesses_then_passes_then_catches_changes(tmp_path, capsys):
    suite = _suite(tmp_path)
    assert main(["regress", "--suite", str(suite)]) == 1  # nothing blessed yet: every metric is new
    assert "NEW     one/a: completed = 50" in capsys.readouterr().out
    assert main(["regress", "--suite", str(suite), "--update"]) == 0
    assert main(["regress", "--suite", str(suite), "--jobs", "2"]) == 0
    assert "PASS  1 comparisons, 1 findings (0 broken), 4 metrics" in capsys.readouterr().out
    baseline = json.loads((suite / "baseline.json").read_text())
    baseline["one"]["b"]["mean_ttft_ms"] *= 1.01  # outside the comparison's 0.1% tolerance
    (suite / "baseline.json").write_text(json.dumps(baseline))
    assert main(["regress", "--suite", str(suite)]) == 1
    assert "CHANGED one/b: mean_ttft_ms" in capsys.readouterr().out


def test_regress_fails_on_a_broken_finding(tmp_path, capsys):
    suite = _suite(tmp_path, findings_min=51)
    assert main(["regress", "--suite", str(suite), "--update"]) == 1
    assert "BROKEN  one: completed of a >= 51: got 50" in capsys.readouterr().out


def test_regress_refuses_a_missing_or_empty_suite(tmp_path):
    with pytest.raises(ConfigError, match="has no comparison files"):
        load_suite(tmp_path)
    with pytest.raises(ConfigError, match="is not a folder"):
        load_suite(tmp_path / "nope")
