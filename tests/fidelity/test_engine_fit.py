"""`llmsim calibrate --runs FILE --engine PROFILE`: an engine profile's fixed costs fitted on the fit half of the
rows that run it, both halves reported, the fitted profile written."""

from __future__ import annotations

import csv

import pytest
import yaml

from simulator.catalog.engines import load_engine
from simulator.cli import main
from simulator.errors import LLMSimError
from simulator.fidelity import engine_fit
from simulator.fidelity.engine_fit import fit_engine
from simulator.fidelity.silicon import RunSettings, in_fit_half, validate_runs

HEADER = ["id", "backend", "model_path", "system", "mode", "isl", "osl", "gemm_quant_mode", "batch_size", "tp_size",
          "silicon_ttft_ms", "silicon_tpot_ms"]
PLANTED = {"per_iteration_ms": 1.5, "per_sequence_us": 20.0, "kernel_overhead_us": 3.0}
GRID = {"per_iteration_ms": [0.5, 1.5, 3.0], "per_sequence_us": [0.0, 20.0], "kernel_overhead_us": [3.0]}


def _runs(tmp_path, costs: dict[str, float] | None = PLANTED):
    """Rows of vLLM serving Llama-3.1-8B on a GPU this repository never fitted, their measurements what vLLM with
    ``costs`` predicts (None: placeholders)."""
    rows = [{"id": f"run-{i}", "backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B", "system": "l40s",
             "mode": "agg", "isl": "256", "osl": "16", "gemm_quant_mode": "", "batch_size": str(clients),
             "tp_size": "1", "silicon_ttft_ms": "10", "silicon_tpot_ms": "5"}
            for i, clients in enumerate((1, 2, 4, 8, 16, 32, 1, 8))]
    path = tmp_path / "runs.csv"
    _write(path, rows)
    if costs is not None:
        planted = tmp_path / "planted.yaml"
        planted.write_text(yaml.safe_dump({"extends": "vllm", **costs}))
        frame = validate_runs(path, settings=RunSettings(engines=(("vllm", str(planted)),)))
        assert list(frame["status"]) == ["ok"] * len(rows)
        for row, ttft, tpot in zip(rows, frame["predicted_ttft_ms"], frame["predicted_tpot_ms"], strict=True):
            row.update(silicon_ttft_ms=repr(ttft), silicon_tpot_ms=repr(tpot))
        _write(path, rows)
    halves = [in_fit_half(row) for row in rows]
    assert any(halves) and not all(halves)  # both halves have rows
    return path


def _write(path, rows) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=HEADER)
        writer.writeheader()
        writer.writerows(rows)


def test_the_fit_recovers_the_costs_that_made_the_measurements(tmp_path):
    """Rows measured as vLLM with known fixed costs are fitted back to exactly those costs: the best grid point
    predicts every row of both halves as measured, and the shipped profile (1 ms per iteration) does not."""
    fit = fit_engine(_runs(tmp_path), None, "vllm", grid=GRID, jobs=1)
    assert fit.values == PLANTED
    assert fit.table["score"].iloc[0] == 0.0 and (fit.table["score"].iloc[1:] > 0).all()
    for half in ("fit", "holdout"):
        assert fit.fitted[half]["tpot_error"].max() == pytest.approx(0.0, abs=1e-12)
        assert fit.shipped[half]["tpot_error"].median() > 0.01


def test_calibrate_runs_writes_a_profile_that_extends_the_fitted_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(engine_fit, "GRID", GRID)
    output = tmp_path / "my-vllm.yaml"
    assert main(["calibrate", "--runs", str(_runs(tmp_path)), "--engine", "vllm", "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "per_iteration_ms 1.5, per_sequence_us 20, kernel_overhead_us 3" in printed and "held-out half" in printed
    document = yaml.safe_load(output.read_text())
    assert document["extends"] == "vllm" and document["name"] == "my-vllm"
    profile = load_engine(str(output))
    base = load_engine("vllm")
    assert (profile.per_iteration_ms, profile.per_sequence_us, profile.kernel_overhead_us) == (1.5, 20.0, 3.0)
    assert profile.server_defaults == base.server_defaults  # everything else is the profile it extends


@pytest.mark.parametrize(("arguments", "message"), [
    (["--engine", "sglang"], "no row runs engine profile 'sglang' (its rows run: vllm (8))"),
    (["--engine", "no-such-engine"], "no-such-engine"),
    ([], "--runs FILE and --engine PROFILE go together"),
    (["--engine", "vllm", "--kernels", "."], "not with --kernels"),
])
def test_calibrate_runs_refuses_in_one_line(tmp_path, capsys, arguments, message):
    runs = _runs(tmp_path, costs=None)
    code = main(["calibrate", "--runs", str(runs), *arguments, "--output", str(tmp_path / "out.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.yaml").exists()


def test_the_run_flags_go_with_runs(tmp_path, capsys):
    code = main(["calibrate", "--hardware", "h100-sxm", "--ops", str(tmp_path), "--model-configs", str(tmp_path),
                 "--output", str(tmp_path / "out.yaml")])
    assert code == 2 and "--model-configs goes with --runs FILE --engine PROFILE" in capsys.readouterr().err


def test_rows_of_the_engine_but_none_in_the_fit_half_are_refused(tmp_path):
    runs = _runs(tmp_path, costs=None)
    with open(runs, newline="") as handle:
        rows = list(csv.DictReader(handle))
    _write(runs, [row for row in rows if not in_fit_half(row)])
    with pytest.raises(LLMSimError, match="rows that run 'vllm' is in the fit half"):
        fit_engine(runs, None, "vllm", grid=GRID)
