"""A runs file given to ``validate --runs`` that cannot be judged is one line, or a row unsupported with its
reason, never a traceback."""

from __future__ import annotations

import csv

import pytest

from simulator.cli import main
from simulator.errors import LLMSimError
from simulator.fidelity.silicon import REQUIRED, validate_runs

ROW = {"backend": "vllm", "model_path": "meta-llama/Meta-Llama-3-8B", "system": "h100_sxm", "mode": "agg",
       "isl": "1000", "osl": "200", "batch_size": "4", "tp_size": "1", "silicon_ttft_ms": "50",
       "silicon_tpot_ms": "8"}


def _runs(tmp_path, rows):
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(REQUIRED))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_a_header_only_runs_file_is_one_line(tmp_path, capsys):
    path = _runs(tmp_path, [])
    with pytest.raises(LLMSimError, match=r"runs\.csv: no rows to simulate"):
        validate_runs(path)
    assert main(["validate", "--runs", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize(("cell", "problem"), [("abc", "a number"), ("", "a number"), ("-3", "a positive number"),
                                                ("nan", "a positive number")])
def test_a_row_whose_measurement_is_not_a_number_is_unsupported_with_its_reason(tmp_path, capsys, cell, problem):
    path = _runs(tmp_path, [{**ROW, "silicon_ttft_ms": cell}, ROW])
    frame = validate_runs(path)
    assert list(frame["status"]) == [f"unsupported: {path}:2: silicon_ttft_ms must be {problem}, got {cell!r}", "ok"]
    assert main(["validate", "--runs", str(path)]) == 0
    assert f"silicon_ttft_ms must be {problem}" in capsys.readouterr().out
