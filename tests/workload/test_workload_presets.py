"""Workload presets (workloads/*.yaml): each reproduces the statistics of its source, re-fits from it exactly, and
is used as workload: {preset: NAME, ...} with the section's own keys over it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.catalog.workloads import fit_preset, load_preset, preset_names
from simulator.cli import main
from simulator.config import load_experiment
from simulator.config.workload import QuantileLength
from simulator.errors import LLMSimError
from simulator.workload.lengths import sample_lengths
from tests.helpers import experiment

SOURCES = {"azure-conv": "azure_conv_2023.csv", "azure-code": "azure_code_2023.csv",
           "arxiv-summarization": "arxiv_summarization_lengths.csv"}


def test_the_library_has_the_sourced_presets():
    assert set(SOURCES) <= set(preset_names())
    for name in preset_names():
        preset = load_preset(name)
        assert preset["name"] == name and preset["description"] and preset["source"] and preset["fitted_by"]


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_presets_lengths_reproduce_its_sources_statistics(name):
    """200,000 draws of each length distribution against the percentiles and mean of the source it was fitted to
    (the statistics in the file): percentiles within 2%, means within 3%."""
    preset = load_preset(name)
    for part in ("input_tokens", "output_tokens"):
        drawn = sample_lengths(QuantileLength(**preset["workload"][part]), 200_000, np.random.default_rng(3))
        stats = preset["statistics"][part]
        for q in (50, 90, 99):
            assert np.percentile(drawn, q) == pytest.approx(stats[f"p{q}"], rel=0.02), (part, q)
        assert drawn.mean() == pytest.approx(stats["mean"], rel=0.03), part


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_preset_refits_from_its_source_exactly(name, shared_data):
    fitted = fit_preset(shared_data / "traces" / SOURCES[name], name)
    preset = load_preset(name)
    assert fitted["statistics"] == preset["statistics"] and fitted["workload"] == preset["workload"]


def test_a_preset_fits_lengths_under_their_other_names(tmp_path):
    """``input_length`` / ``output_length`` (mooncake traces, MLPerf dataset summaries) fit as the processed-trace
    columns do: 1…100 input and 2·(1…100) output tokens, rank correlation 1, median 50.5 and 101, no arrival."""
    path = tmp_path / "lengths.csv"
    path.write_text("input_length,output_length\n" + "".join(f"{i},{2 * i}\n" for i in range(1, 101)))
    preset = fit_preset(path, "lengths")
    stats = preset["statistics"]
    assert (stats["input_tokens"]["p50"], stats["output_tokens"]["p50"]) == (50.5, 101.0)
    assert stats["input_output_rank_correlation"] == 1.0 and "arrival" not in preset["workload"]
    assert preset["workload"]["input_tokens"]["values"][-1] == 100
    (tmp_path / "bad.csv").write_text("input_length,tokens\n1,2\n")
    with pytest.raises(LLMSimError, match=r"bad.csv: missing column\(s\) \['num_decode_tokens'\]"):
        fit_preset(tmp_path / "bad.csv", "bad")


def test_the_sections_own_keys_override_the_preset():
    """azure-conv with a Poisson arrival of 3 req/s: the lengths are the preset's, the arrival the section's;
    without one, the preset's gamma arrival (its trace's rate and burstiness)."""
    own = load_experiment(experiment(workload={"preset": "azure-conv", "num_requests": 50,
                                               "arrival": {"kind": "poisson", "rate": 3.0}}))
    assert own.workload.arrival.kind == "poisson" and own.workload.input_tokens.kind == "quantiles"
    preset = load_experiment(experiment(workload={"preset": "azure-conv", "num_requests": 50}))
    stats = load_preset("azure-conv")["statistics"]
    assert preset.workload.arrival.rate == stats["rate_per_s"]
    assert preset.workload.arrival.burstiness == pytest.approx(1 / stats["gap_cv"] ** 2, rel=0.01)
    again = load_experiment(preset.model_dump(mode="json"))  # the written config reads back the same
    assert again.workload == preset.workload


def test_an_unknown_preset_or_bad_quantiles_are_one_line(capsys):
    assert main(["run", "--set", "workload={preset: chat}"]) == 2
    err = capsys.readouterr().err
    assert "workload: unknown preset 'chat' (allowed: arxiv-summarization, azure-code, azure-conv" in err
    assert err.count("\n") == 1
    with pytest.raises(ValueError, match="values must not decrease"):
        QuantileLength(kind="quantiles", values=[5, 3])
    with pytest.raises(ValueError, match="probabilities must rise from 0 to 1"):
        QuantileLength(kind="quantiles", values=[1, 2, 3], probabilities=[0, 0.5])


def test_quantile_lengths_follow_their_inverse_cdf():
    """Values 1, 10, 100 at probabilities 0, 0.9, 1: 90% of draws fall in [1, 10], uniformly (the median at
    1 + 0.5 / 0.9 × 9 = 6)."""
    drawn = sample_lengths(QuantileLength(kind="quantiles", values=[1, 10, 100], probabilities=[0, 0.9, 1]),
                           100_000, np.random.default_rng(0))
    assert np.mean(drawn <= 10) == pytest.approx(0.9, abs=0.005)
    assert np.median(drawn) == pytest.approx(1 + 0.5 / 0.9 * 9, abs=0.5)  # draws are rounded


def test_llmsim_workloads_lists_them(capsys):
    assert main(["workloads", "--json"]) == 0
    listed = {preset["name"]: preset for preset in json.loads(capsys.readouterr().out)}
    assert set(SOURCES) <= set(listed) and "rate_per_s" in listed["azure-conv"]["statistics"]
    assert main(["workloads"]) == 0
    assert "azure-conv" in capsys.readouterr().out


MAX_ENTROPY = ("chat-sharegpt",)  # presets from a published mean and bounds (simulator.catalog.workloads)


@pytest.mark.parametrize("name", MAX_ENTROPY)
def test_a_max_entropy_preset_keeps_its_published_means_and_bounds_and_regenerates(name):
    """200,000 draws: the mean within 1% of the published one, every draw within the bounds; the file is what its
    statistics give (``fitted_by``'s command)."""
    from simulator.catalog.workloads import max_entropy_preset

    preset = load_preset(name)
    for part, stats in preset["statistics"].items():
        drawn = sample_lengths(QuantileLength(**preset["workload"][part]), 200_000, np.random.default_rng(5))
        assert drawn.mean() == pytest.approx(stats["mean"], rel=0.01), part
        assert stats["min"] <= drawn.min() and drawn.max() <= stats["max"], part
    published = {part: (s["mean"], s["min"], s["max"]) for part, s in preset["statistics"].items()}
    again = max_entropy_preset(name, published)
    assert again["workload"] == preset["workload"]


def test_the_max_entropy_law_by_hand():
    """Its mean at the middle of the bounds: uniform (the median at the middle); far bounds: the exponential of that
    mean above the low bound (median low + (mean − low)·ln 2); a mean above the middle leans the other way."""
    from simulator.catalog.workloads import max_entropy_lengths

    median = lambda q: q["values"][q["probabilities"].index(0.5)]  # noqa: E731
    assert median(max_entropy_lengths(514, 4, 1024)) == 514
    assert median(max_entropy_lengths(202, 4, 10**7)) == round(4 + 198 * np.log(2))
    high = max_entropy_lengths(900, 4, 1024)
    assert median(high) > 900 and high["values"][-1] == 1024 and high["values"][0] == 4


def test_max_entropy_on_the_command_line(capsys):
    assert main(["workloads", "--max-entropy", "input_tokens=300:10:2000", "--name", "mine"]) == 0
    out = capsys.readouterr().out
    assert "name: mine" in out and "--max-entropy input_tokens=300:10:2000" in out
    with pytest.raises(SystemExit) as exit_:
        main(["workloads", "--max-entropy", "input_tokens=5000:10:2000"])
    assert exit_.value.code == 2 and "need 1 <= MIN < MEAN < MAX" in capsys.readouterr().err
