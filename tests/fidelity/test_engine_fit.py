"""`llmsim calibrate --runs FILE --engine PROFILE`: an engine profile's fixed costs fitted on the fit half of the
rows that run it, both halves reported, the fitted profile written."""

from __future__ import annotations

import pytest
import yaml

from simulator.catalog.engines import load_engine
from simulator.cli import main
from simulator.errors import LLMSimError
from simulator.fidelity import engine_fit
from simulator.fidelity.clients import CLIENTS
from simulator.fidelity.engine_fit import fit_engine
from simulator.fidelity.silicon import RunSettings, validate_runs
from simulator.fidelity.split import Split
from tests.helpers import write_csv

HEADER = ["id", "backend", "backend_version", "model_path", "system", "mode", "isl", "osl", "gemm_quant_mode",
          "batch_size", "tp_size", "silicon_ttft_ms", "silicon_tpot_ms"]
# vllm as shipped runs 2 ms per iteration, 40 us per sequence and a 3 us kernel floor (engine_profiles/vllm.yaml)
PLANTED = {"per_iteration_ms": 1.5, "per_sequence_us": 20.0, "kernel_overhead_us": 4.0}
GRID = {"per_iteration_ms": [0.5, 1.5, 3.0], "per_sequence_us": [0.0, 20.0], "kernel_overhead_us": [3.0, 4.0]}
CLIENT_COUNTS = (1, 2, 4, 8, 16, 32, 3, 6, 12)  # distinct: with planted costs, distinct measurements (Split)


def _rows(model: str = "meta-llama/Llama-3.1-8B") -> list[dict[str, str]]:
    """vLLM serving ``model`` on a GPU this repository never fitted (placeholder measurements, one per row), and
    beside them rows of other engine profiles (SGLang's; vLLM 0.18, which runs ``vllm-0.14``) whose placeholders
    would spoil a fit."""
    mine = [{"id": f"run-{i}", "backend": "vllm", "backend_version": "", "model_path": model, "system": "l40s",
             "mode": "agg", "isl": "256", "osl": "16", "gemm_quant_mode": "", "batch_size": str(clients),
             "tp_size": "1", "silicon_ttft_ms": str(10 + i), "silicon_tpot_ms": "5"}
            for i, clients in enumerate(CLIENT_COUNTS)]
    others = [{**mine[0], "id": "other-sglang", "backend": "sglang", "silicon_ttft_ms": "1"},
              {**mine[0], "id": "other-vllm-0.18", "backend_version": "0.18.0", "silicon_ttft_ms": "2"}]
    return mine + others


def _runs(tmp_path, costs: dict[str, float] | None = PLANTED, client: str = "aiperf", rows=None):
    """A runs file of :func:`_rows`, the vLLM rows' measurements what vLLM with ``costs`` predicts under ``client``
    (None: placeholders)."""
    rows = rows or _rows()
    path = tmp_path / "runs.csv"
    _write(path, rows)
    if costs is not None:
        planted = tmp_path / "planted.yaml"
        planted.write_text(yaml.safe_dump({"extends": "vllm", **costs}))
        settings = RunSettings(engines=(("vllm", str(planted)),)).with_client(CLIENTS[client])
        frame = validate_runs(path, settings=settings, keep=lambda row: row["id"].startswith("run-"))
        assert list(frame["status"]) == ["ok"] * len(CLIENT_COUNTS)
        for row, ttft, tpot in zip(rows, frame["predicted_ttft_ms"], frame["predicted_tpot_ms"], strict=False):
            row.update(silicon_ttft_ms=repr(ttft), silicon_tpot_ms=repr(tpot))
        _write(path, rows)
    return path


def _write(path, rows) -> None:
    write_csv(path, HEADER, rows)


def _fit_half_size() -> int:
    split = Split.of(_rows())
    return sum(split.in_fit_half(row) for row in _rows() if row["id"].startswith("run-"))


def test_the_halves_are_the_parity_of_the_ids_crc32():
    """CRC-32's check value (of "123456789", 0xCBF43926) is even, that of "a" (0xE8B7BE43) odd; the test rows have
    rows in both halves, and more in one than the other (so a report that swapped them would say so)."""
    assert Split.of([]).in_fit_half({"id": "123456789"}) and not Split.of([]).in_fit_half({"id": "a"})
    assert 0 < _fit_half_size() < len(CLIENT_COUNTS) and 2 * _fit_half_size() != len(CLIENT_COUNTS)


def test_the_fit_recovers_the_costs_that_made_the_measurements(tmp_path):
    """Rows measured as vLLM with known fixed costs are fitted back to exactly those costs, the rows of other
    profiles left out: the best grid point predicts every row of both halves as measured, and the shipped
    profile does not."""
    fit = fit_engine(_runs(tmp_path), None, "vllm", grid=GRID, jobs=1)
    assert fit.values == PLANTED
    assert fit.table["score"].iloc[0] == 0.0 and (fit.table["score"].iloc[1:] > 0).all()
    for half in ("fit", "holdout"):
        assert fit.fitted[half]["tpot_error"].max() == pytest.approx(0.0, abs=1e-12)
        assert fit.shipped[half]["tpot_error"].median() > 0.01
    assert len(fit.fitted["fit"]) == _fit_half_size()


def test_the_fit_simulates_the_rows_benchmark_client(tmp_path, capsys):
    """Rows measured under InferenceX's client are recovered exactly when fitted under it; under aiperf's (the
    default), which sends other lengths and numbers of requests, no grid point predicts them exactly."""
    runs = _runs(tmp_path, client="inferencex")
    assert fit_engine(runs, None, "vllm", grid=GRID, jobs=1).table["score"].iloc[0] > 0
    output = tmp_path / "ix.yaml"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_fit, "GRID", GRID)
        assert main(["calibrate", "--runs", str(runs), "--engine", "vllm", "--client", "inferencex", "--output",
                     str(output)]) == 0
    assert "benchmark client inferencex" in capsys.readouterr().out
    assert {k: v for k, v in yaml.safe_load(output.read_text()).items() if k in PLANTED} == PLANTED


def test_calibrate_runs_writes_a_profile_that_extends_the_fitted_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(engine_fit, "GRID", GRID)
    output = tmp_path / "my-vllm.yaml"
    assert main(["calibrate", "--runs", str(_runs(tmp_path)), "--engine", "vllm", "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "per_iteration_ms 1.5, per_sequence_us 20, kernel_overhead_us 4" in printed
    fit_rows, held_out = _fit_half_size(), len(CLIENT_COUNTS) - _fit_half_size()
    assert f"  fit half: {fit_rows} of {fit_rows} rows ran: " in printed
    assert f"-> {held_out} of {held_out} rows ran: TPOT 0.0% / 0.0%" in printed  # the held-out half, as fitted
    assert "kernel_overhead_us 4 is at the grid's edge" in printed  # the largest the grid has
    document = yaml.safe_load(output.read_text())
    assert document["extends"] == "vllm" and document["name"] == "my-vllm"
    profile, base = load_engine(str(output)), load_engine("vllm")
    assert (profile.per_iteration_ms, profile.per_sequence_us, profile.kernel_overhead_us) == (1.5, 20.0, 4.0)
    assert profile.server_defaults == base.server_defaults  # everything else is the profile it extends


@pytest.mark.parametrize(("arguments", "message"), [
    (["--engine", "trtllm"], "no row runs engine profile 'trtllm' (its rows run: vllm (9), sglang (1), vllm-0.14 (1))"),
    (["--engine", "sglang"],
     "none of the 1 rows that run 'sglang' is in the fit half (ids of even CRC-32 and their copies)"),
    (["--engine", "no-such-engine"], "calibrate: --engine: "),
    (["--engine", "engine_profiles/vllm.yaml"], "name the catalog profile the rows run"),
    ([], "--runs FILE and --engine PROFILE go together"),
    (["--engine", "vllm", "--kernels", "."], "not with --kernels"),
    (["--engine", "vllm", "--network-system", "a100_dgx"], "not with --network-system"),
])
def test_calibrate_runs_refuses_in_one_line(tmp_path, capsys, arguments, message):
    runs = _runs(tmp_path, costs=None)
    code = main(["calibrate", "--runs", str(runs), *arguments, "--output", str(tmp_path / "out.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.yaml").exists()


def test_the_fitted_profile_is_a_yaml_file(tmp_path, capsys):
    code = main(["calibrate", "--runs", str(_runs(tmp_path, costs=None)), "--engine", "vllm", "--output",
                 str(tmp_path / "my-vllm")])
    assert code == 2 and "an engine profile is a .yaml (or .yml) file" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [["--model-configs", "."], ["--jobs", "1"], ["--client", "aiperf"]])
def test_the_run_flags_go_with_runs(tmp_path, capsys, flag):
    code = main(["calibrate", "--hardware", "h100-sxm", "--ops", str(tmp_path), *flag, "--output",
                 str(tmp_path / "out.yaml")])
    assert code == 2 and f"{flag[0]} goes with --runs FILE --engine PROFILE" in capsys.readouterr().err


@pytest.mark.parametrize(("drop", "half"), [(False, "fit"), (True, "held-out")])
def test_a_half_without_rows_of_the_engine_is_refused(tmp_path, drop, half):
    """A fit needs rows to fit on and rows to report on: a file whose rows of the profile all fall in one half (a
    file without ids puts them all in the fit half) is refused."""
    split = Split.of(_rows())
    rows = [row for row in _rows() if row["backend"] != "vllm" or row["backend_version"]
            or split.in_fit_half(row) == drop]
    with pytest.raises(LLMSimError, match=f"rows that run 'vllm' is in the {half} half"):
        fit_engine(_runs(tmp_path, costs=None, rows=rows), None, "vllm", grid=GRID)


def test_copies_of_fit_rows_are_not_held_out(tmp_path):
    """Rows of odd ids that repeat an even id's measurement (copies of a run the fit sees) are in the fit half:
    a file whose every held-out vLLM row is such a copy has no held-out half."""
    first = next(row for row in _rows() if Split.of([]).in_fit_half(row) and row["id"].startswith("run-"))
    rows = [row if Split.of([]).in_fit_half(row) or not row["id"].startswith("run-")
            else {**row, "silicon_ttft_ms": first["silicon_ttft_ms"], "silicon_tpot_ms": first["silicon_tpot_ms"]}
            for row in _rows()]
    with pytest.raises(LLMSimError, match="rows that run 'vllm' is in the held-out half"):
        fit_engine(_runs(tmp_path, costs=None, rows=rows), None, "vllm", grid=GRID)


def test_rows_that_cannot_be_simulated_are_refused_with_their_reason(tmp_path, capsys):
    runs = _runs(tmp_path, costs=None, rows=_rows(model="nobody/no-such-model"))
    code = main(["calibrate", "--runs", str(runs), "--engine", "vllm", "--output", str(tmp_path / "out.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and f"none of the {_fit_half_size()} fit rows that run 'vllm' could be simulated" in err
    assert "no-such-model" in err and not (tmp_path / "out.yaml").exists()
