"""Hostile input (issue 16): every bad file, value or override is one line naming what is wrong, exit status 2, no
traceback and no hang; a run that completes accounts for every request it generated."""

from __future__ import annotations

import pytest
import yaml

from simulator.cli import main
from tests.helpers import experiment


def _cli(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line_error(capsys, argv, expected):
    code, out, err = _cli(capsys, *argv)
    assert code == 2, err
    assert out == "" and err.startswith("llmsim: error: ") and err.count("\n") == 1, err[:500]
    assert "Traceback" not in err
    assert expected in err, err
    return err


def _file(tmp_path, text: str | bytes, name: str = "exp.yaml") -> str:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


SECTIONS_OF_THE_WRONG_TYPE = {
    "workload_5": ({"workload": 5}, "workload: "),
    "cluster_big": ({"cluster": "big"}, "cluster: "),
    "scheduler_list": ({"scheduler": [1, 2]}, "scheduler: "),
}


@pytest.mark.parametrize("case", sorted(SECTIONS_OF_THE_WRONG_TYPE))
def test_a_section_of_the_wrong_type_is_named(case, tmp_path, capsys):
    change, expected = SECTIONS_OF_THE_WRONG_TYPE[case]
    data = {**experiment(), **change}
    _one_line_error(capsys, ["run", _file(tmp_path, yaml.safe_dump(data))], expected)


NON_FINITE = {
    "swap_space_gib": ("kv_cache.swap_space_gib", ".inf"),
    "think_ms": ("workload.arrival", "{kind: closed_loop, users: 2, think_ms: .inf}"),
    "batch_timeout_ms": ("scheduler", "{kind: static, batch_timeout_ms: .inf}"),
    "linear_overhead": ("cost_model", "{kind: linear, prefill_ms_per_token: .inf, decode_ms_per_step: 1}"),
    "rate_inf": ("workload.arrival.rate", ".inf"),
    "rate_nan": ("workload.arrival.rate", ".nan"),
    "sigma": ("workload.input_tokens", "{kind: lognormal, mean: 100, sigma: .inf, max: 200}"),
}


@pytest.mark.parametrize("case", sorted(NON_FINITE))
def test_non_finite_numbers_are_refused(case, capsys):
    key, value = NON_FINITE[case]
    _one_line_error(capsys, ["run", "--set", f"{key}={value}"], "finite number")


def test_a_file_that_is_not_utf8_is_one_line(tmp_path, capsys):
    path = _file(tmp_path, b"name: caf\xe9\nseed: 0\n")
    _one_line_error(capsys, ["run", path], f"{path}:1: not UTF-8 text (byte 0xe9)")


def test_a_utf8_bom_is_read_as_text(tmp_path, capsys):
    data = experiment(workload={"num_requests": 3, "arrival": {"kind": "poisson", "rate": 5.0},
                                "input_tokens": {"kind": "fixed", "value": 10},
                                "output_tokens": {"kind": "fixed", "value": 2}})
    path = _file(tmp_path, b"\xef\xbb\xbf" + yaml.safe_dump(data).encode())
    code, _, err = _cli(capsys, "run", path)
    assert code == 0, err


def test_yaml_nested_too_deep_is_one_line(tmp_path, capsys):
    path = _file(tmp_path, "name: x\nseed: " + "[" * 3000 + "]" * 3000 + "\n")
    _one_line_error(capsys, ["run", path], "nested")


def test_duplicate_yaml_keys_are_refused(tmp_path, capsys):
    path = _file(tmp_path, yaml.safe_dump(experiment()) + "seed: 7\n")
    _one_line_error(capsys, ["run", path], "duplicate key 'seed'")


def test_sexagesimal_and_boolean_numbers_are_not_numbers(capsys):
    _one_line_error(capsys, ["run", "--set", "workload.arrival.rate=1:30"], "workload.arrival.rate")
    _one_line_error(capsys, ["run", "--set", "workload.num_requests=true"], "workload.num_requests")


HUGE = {
    "seed_digits": ("seed", "1" * 5000, "seed"),
    "fixed_length_beyond_int64": ("workload.input_tokens", "{kind: fixed, value: 99999999999999999999}",
                                  "workload.input_tokens.value"),
    "num_requests": ("workload.num_requests", "1000000000000", "workload.num_requests"),
    "replicas": ("cluster.replicas", str(2**62), "cluster.replicas"),
    "tensor_parallel": ("cluster.tensor_parallel", "1000000", "cluster.tensor_parallel"),
    "block_size": ("kv_cache", "{kind: paged, block_size: 1000000000, num_gpu_blocks: 1}", "kv_cache.block_size"),
}


@pytest.mark.parametrize("case", sorted(HUGE))
def test_values_beyond_the_stated_limits_are_refused(case, capsys):
    key, value, expected = HUGE[case]
    _one_line_error(capsys, ["run", "--set", f"{key}={value}"], expected)
