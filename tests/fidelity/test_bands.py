"""Accuracy bands: the held-out error per slice that `llmsim validate --runs --bands` writes, and the expected-error
line `llmsim run`, `plan` and `capacity` print from it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simulator.catalog import load_model
from simulator.cli import main
from simulator.config import load_experiment
from simulator.fidelity.bands import (
    BANDS_PATH,
    COLUMNS,
    MIN_RUNS,
    band_line,
    measured_bands,
    model_family,
    read_bands,
    update_bands,
)
from tests.helpers import experiment


@pytest.mark.parametrize("model, family", [("deepseek-v3", "mla"), ("kimi-k2", "mla"), ("qwen3.5-35b-a3b", "hybrid"),
                                           ("nemotron-h-56b", "hybrid"), ("qwen3-30b-a3b", "moe"),
                                           ("llama-3.1-8b", "dense")])
def test_model_families(model, family):
    assert model_family(load_model(model)) == family


def _frame(errors: list[float], subset: str = "holdout", model: str = "meta-llama/Llama-3.1-8B",
           system: str = "h100_sxm", status: str = "ok") -> pd.DataFrame:
    return pd.DataFrame({"system": system, "engine": "vllm", "model_path": model, "mode": "agg", "subset": subset,
                         "status": status, "ttft_error": errors, "tpot_error": [e / 2 for e in errors]})


def test_a_band_is_the_held_out_rows_quantiles_per_slice():
    """Ten held-out H100 rows of dense Llama on vLLM with TTFT errors 1..10% (TPOT half those): the median 5.5%,
    the 90th percentile (linear between order statistics) 9.1%, to a tenth of a point; the fit rows, the rows that
    did not run state nothing, and a slice of fewer than MIN_RUNS rows its count alone."""
    errors = [i / 100 for i in range(1, 11)]
    frame = pd.concat([_frame(errors), _frame([0.9] * 10, subset="fit"), _frame([0.9] * 5, status="unsupported: x"),
                       _frame([0.1] * (MIN_RUNS - 1), model="Qwen/Qwen3-30B-A3B")], ignore_index=True)
    bands = measured_bands(frame)
    assert list(bands.columns) == COLUMNS and len(bands) == 2
    thin = bands[bands["family"] == "moe"].iloc[0]  # measured, too thinly for a band
    assert thin["runs"] == MIN_RUNS - 1 and thin[COLUMNS[-4:]].isna().all()
    band = bands[bands["family"] == "dense"].iloc[0]
    assert (band["generation"], band["engine"], band["family"], band["mode"], band["runs"], band["gpus"]) == (
        "hopper", "vllm", "dense", "agg", 10, "h100-sxm")
    assert (band["ttft_median_pct"], band["ttft_p90_pct"]) == (5.5, 9.1)
    assert band["tpot_median_pct"] == pytest.approx(2.75, abs=0.06)
    assert band["tpot_p90_pct"] == pytest.approx(4.55, abs=0.06)
    assert np.quantile(errors, 0.9) == pytest.approx(0.091)


def test_updating_bands_replaces_the_same_slices_and_keeps_the_others(tmp_path):
    path = tmp_path / "accuracy.csv"
    first = measured_bands(pd.concat([_frame([0.1] * 10), _frame([0.2] * 10, model="Qwen/Qwen3-30B-A3B")]))
    update_bands(path, first)
    again = measured_bands(_frame([0.3] * 10))  # the dense slice measured again
    merged = update_bands(path, again)
    assert sorted(zip(merged["family"], merged["ttft_median_pct"], strict=True)) == [("dense", 30.0), ("moe", 20.0)]
    assert read_bands(path).equals(merged)
    thin = measured_bands(_frame([0.4] * (MIN_RUNS - 1), model="Qwen/Qwen3-30B-A3B"))  # moe again, too few rows
    assert list(update_bands(path, thin)["family"]) == ["dense"]  # its old band is not kept


def test_the_expected_error_line_names_its_slice_and_where_it_was_measured(tmp_path):
    path = tmp_path / "accuracy.csv"
    update_bands(path, measured_bands(_frame([i / 100 for i in range(1, 11)])))
    h100 = load_experiment(experiment(model="llama-3.1-8b", hardware="h100-sxm", engine="vllm"))
    assert band_line(h100, path) == ("expected error (hopper × vllm × dense × agg: 10 held-out benchmark runs, this "
                                     "GPU): mean TTFT ±6% median, ±9% p90; mean TPOT ±3% median, ±5% p90")
    h200 = load_experiment(experiment(model="llama-3.1-8b", hardware="h200-sxm", engine="vllm"))
    assert "h100-sxm; this GPU from its spec sheet" in band_line(h200, path)
    moe = load_experiment(experiment(model="qwen3-30b-a3b", hardware="h100-sxm", engine="vllm"))
    assert band_line(moe, path) == ("expected error: not validated — no held-out benchmark runs of hopper × vllm × "
                                    "moe × agg (validated for hopper × vllm: dense × agg)")


@pytest.mark.parametrize(("gpu", "generation"), [("mi300x", "cdna3"), ("mi325x", "cdna3"), ("mi355x", "cdna4")])
def test_a_prediction_on_a_gpu_without_measurements_says_whose_fit_priced_it(tmp_path, gpu, generation):
    """AMD GPUs have no measurements: their generation borrows Ampere's fit, and every prediction says so."""
    config = load_experiment(experiment(model="llama-3.1-8b", hardware=gpu, engine="vllm"))
    assert band_line(config, tmp_path / "none.csv").endswith(
        f"; {generation} has no measurements of its own: its fitted parameters are ampere's")


def test_the_shipped_bands_read_and_a_run_prints_its_line(capsys):
    assert set(read_bands(BANDS_PATH).columns) >= set(COLUMNS)
    assert main(["run", "--set", "workload.num_requests=20"]) == 0
    assert "expected error" in capsys.readouterr().out


def test_bands_need_runs_rows_priced_as_their_own_generation(tmp_path, capsys):
    assert main(["validate", "--bands", str(tmp_path / "b.csv")]) == 2
    assert main(["validate", "--runs", str(tmp_path / "r.csv"), "--generation", "ampere", "--bands",
                 str(tmp_path / "b.csv")]) == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("generation,engine\nhopper,vllm\n")
    assert main(["validate", "--runs", str(tmp_path / "r.csv"), "--bands", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3
    assert "--bands writes the errors of benchmark runs: it needs --runs FILE" in err[0]
    assert "not with --generation" in err[1] and "bad.csv:1: missing column(s)" in err[2]
