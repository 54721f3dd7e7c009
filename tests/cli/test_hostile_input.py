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


def test_piecewise_rates_that_end_at_zero_forever_are_refused(capsys):
    _one_line_error(capsys, ["run", "--set", "workload.arrival={kind: piecewise, rates: [[0, 5], [10, 0]]}"],
                    "the last rate (from 10.0 s on) is 0")


def test_an_error_quotes_at_most_a_short_part_of_a_huge_value(capsys):
    err = _one_line_error(capsys, ["run", "--set", f"workload.num_requests=[{','.join(['1'] * 5000)}]"],
                          "workload.num_requests")
    assert len(err) < 400


def test_every_generated_request_is_accounted_for_or_the_run_fails(monkeypatch):
    """A request that vanished (neither completed nor rejected) makes the run fail loudly, never a quiet summary."""
    import simulator
    from simulator.cluster.replica import Replica
    from simulator.errors import LLMSimError

    submit = Replica.submit
    dropped = []

    def lossy(self, request):
        if not dropped:
            dropped.append(request.request_id)  # the first request is silently lost
            return None
        return submit(self, request)

    monkeypatch.setattr(Replica, "submit", lossy)
    with pytest.raises(LLMSimError, match="20 requests generated but 19 accounted for"):
        simulator.run(experiment(workload={"num_requests": 20, "arrival": {"kind": "poisson", "rate": 5.0},
                                           "input_tokens": {"kind": "fixed", "value": 10},
                                           "output_tokens": {"kind": "fixed", "value": 2}}))


def test_summary_json_is_strict_json_with_null_for_metrics_without_a_value(tmp_path, capsys):
    import json

    out = tmp_path / "out"
    code, text, _ = _cli(capsys, "run", "--json", "--out", str(out), "--set", "workload.num_requests=20",
                         "--set", "workload.input_tokens={kind: fixed, value: 9000}")  # beyond the context: rejected
    assert code == 0

    def refuse(name):
        raise AssertionError(f"bare {name} in JSON")

    for document in (text, (out / "summary.json").read_text()):
        summary = json.loads(document, parse_constant=refuse)
        assert summary["num_rejected"] == 20 and summary["mean_ttft_ms"] is None  # no request has a TTFT


def test_run_out_is_replaced_only_by_a_run_that_finished(tmp_path, capsys, monkeypatch):
    import simulator.api

    out = tmp_path / "out"
    assert _cli(capsys, "run", "--out", str(out), "--set", "workload.num_requests=20")[0] == 0
    before = {path.name: path.read_bytes() for path in out.iterdir()}

    def broken(*args, **kwargs):
        raise MemoryError("the machine ran out of memory")

    monkeypatch.setattr(simulator.api, "simulate", broken)
    with pytest.raises(MemoryError):
        main(["run", "--out", str(out), "--set", "workload.num_requests=30"])
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before  # no staging left, nothing changed


@pytest.mark.parametrize("option", ["--out", "--trace"])
def test_output_paths_that_cannot_be_written_fail_before_the_run(option, tmp_path, capsys):
    file = tmp_path / "a_file"
    file.write_text("x")
    target = {"--out": file, "--trace": tmp_path}[option]
    _one_line_error(capsys, ["run", option, str(target), "--set", "workload.num_requests=5"], f"{option} {target}")


def test_sweep_out_naming_a_file_is_one_line(tmp_path, capsys):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"base": experiment(), "grid": {"seed": [1, 2]}}))
    file = tmp_path / "a_file"
    file.write_text("x")
    _one_line_error(capsys, ["sweep", str(sweep), "--out", str(file)], "is a file; give a folder")


def test_a_sweep_point_that_raises_an_unexpected_error_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    import simulator.studies.sweep
    from simulator.studies.sweep import load_sweep, run_points

    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"base": experiment(), "grid": {"seed": [1, 2]}}))
    run, calls = simulator.studies.sweep.run, []

    def sometimes(config, **kwargs):
        calls.append(config.seed)
        if len(calls) == 1:
            raise ZeroDivisionError("an unforeseen bug")
        return run(config, **kwargs)

    monkeypatch.setattr(simulator.studies.sweep, "run", sometimes)
    frame = run_points(load_sweep(sweep), tmp_path / "out", jobs=1)
    assert list(frame["error"]) == ["ZeroDivisionError: an unforeseen bug", ""]
    assert (tmp_path / "out" / "index.parquet").is_file()


def test_a_fixed_kv_pool_still_needs_the_weights_to_fit(capsys):
    """Llama-3-70B in bf16 (141 GB of weights) cannot run on one 80 GB H100, num_gpu_blocks or not."""
    _one_line_error(capsys, ["run", "--set", "model=llama-3-70b", "--set", "kv_cache.num_gpu_blocks=100"],
                    "exceed the 72.00 GiB usable per GPU")


def _trace_run(capsys, tmp_path, name: str, content: bytes, *extra):
    path = tmp_path / name
    path.write_bytes(content)
    data = experiment(workload={"trace": {"path": str(path), **dict(extra)}})
    return _cli(capsys, "run", "--json", _file(tmp_path, yaml.safe_dump(data)))


def test_traces_a_bom_is_dropped_and_other_bytes_are_one_line(tmp_path, capsys):
    import json

    header = b"arrived_at,num_prefill_tokens,num_decode_tokens\n"
    code, out, err = _trace_run(capsys, tmp_path, "bom.csv", b"\xef\xbb\xbf" + header + b"0.0,10,5\n0.5,10,5\n")
    assert code == 0 and json.loads(out)["completed"] == 2, err
    code, _, err = _trace_run(capsys, tmp_path, "latin.csv", header + b"0.0,10,5\n0.1,caf\xe9,5\n")
    assert code == 2 and "latin.csv: not UTF-8 text" in err and err.count("\n") == 1


def test_trace_rows_beyond_the_limits_or_nested_too_deep_are_bad_rows(tmp_path, capsys):
    import json

    rows = b'{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
    deep = b'{"timestamp": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    huge = b'{"timestamp": 1, "input_length": 99999999999999999999, "output_length": 5}\n'
    ids = b'{"timestamp": 2, "input_length": 10, "output_length": 5, "hash_ids": [99999999999999999999]}\n'
    code, out, err = _trace_run(capsys, tmp_path, "t.jsonl", rows + deep + huge + ids, ("skip_bad", True))
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["completed"], summary["trace_rows_skipped"]) == (1, 3)
    code, _, err = _trace_run(capsys, tmp_path, "t2.jsonl", rows + huge)
    assert code == 2 and "t2.jsonl:2: column input_length" in err and "beyond the limit" in err


def test_an_unterminated_quote_spoils_only_its_own_row(tmp_path, capsys):
    import json

    header = b"arrived_at,num_prefill_tokens,num_decode_tokens\n"
    body = b'0.0,10,5\n0.1,"10,5\n' + b"".join(b"%d.5,10,5\n" % i for i in range(1, 17))
    code, out, err = _trace_run(capsys, tmp_path, "q.csv", header + body, ("skip_bad", True))
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["completed"], summary["trace_rows_skipped"]) == (17, 1)


def test_azure_timestamps_before_1970_are_dates_not_negative_numbers(tmp_path, capsys):
    import json

    text = b"TIMESTAMP,ContextTokens,GeneratedTokens\n1969-12-31 23:59:59.5,10,5\n1970-01-01 00:00:00.5,10,5\n"
    code, out, err = _trace_run(capsys, tmp_path, "azure.csv", text)
    assert code == 0 and json.loads(out)["completed"] == 2, err


def test_hugging_face_configs_with_zero_string_or_boolean_counts_are_one_line(tmp_path, capsys):
    import json

    base = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64,
            "num_attention_heads": 4, "num_key_value_heads": None, "intermediate_size": 128, "vocab_size": 1000,
            "max_position_embeddings": 512}
    for change, expected in (({"num_attention_heads": 0}, "num_attention_heads must be a positive integer, got 0"),
                             ({"num_hidden_layers": "2"}, "num_hidden_layers must be a positive integer, got '2'"),
                             ({"vocab_size": True}, "vocab_size must be a positive integer, got True"),
                             ({"hidden_size": None}, "lacks required key 'hidden_size'")):
        path = _file(tmp_path, json.dumps({**base, **change}), "m_config.json")
        _one_line_error(capsys, ["run", "--set", f"model={path}", "--set", "workload.num_requests=2"], expected)
    path = _file(tmp_path, json.dumps(base), "ok_config.json")  # null num_key_value_heads: as many as the heads
    assert _cli(capsys, "run", "--set", f"model={path}", "--set", "workload.num_requests=2")[0] == 0


def test_plug_ins_that_fail_to_import_are_one_line_and_the_standard_library_is_never_imported(tmp_path, capsys):
    syntax = _file(tmp_path, "import x(\n", "syntax.py")
    raising = _file(tmp_path, "x = 1\nraise RuntimeError('boom')\n", "raising.py")
    _one_line_error(capsys, ["run", "--set", f"scheduler={{kind: '{syntax}:X'}}"], f"{syntax}:1: syntax error")
    _one_line_error(capsys, ["run", "--set", f"scheduler={{kind: '{raising}:X'}}"],
                    f"{raising}:2: importing '{raising}:X' raised RuntimeError: boom")
    _one_line_error(capsys, ["run", "--set", "cluster.router={kind: this.x}"], "standard-library module")
    _one_line_error(capsys, ["run", "--set", f"cluster.router={{kind: '{tmp_path}:X'}}"], "no Python file at")


def test_an_empirical_length_file_that_is_a_folder_is_one_line(tmp_path, capsys):
    _one_line_error(capsys, ["run", "--set", f"workload.input_tokens={{kind: empirical, path: '{tmp_path}', "
                                             "column: x}"], f"empirical lengths: cannot read {tmp_path}")


@pytest.mark.parametrize(("argv", "expected"), [
    (["capacity", "experiments/quickstart.yaml", "--slo", "ttft_ms=100", "--tolerance", "-1"],
     "argument --tolerance: must be between 0 and 1 (exclusive), got -1"),
    (["capacity", "experiments/quickstart.yaml", "--slo", "ttft_ms=100", "--attainment", "2"],
     "argument --attainment: must be > 0 and <= 1, got 2"),
])
def test_command_line_arguments_out_of_range_are_one_line(argv, expected, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1 and expected in err


@pytest.mark.parametrize(("sweep", "expected"), [
    ({"grid": {"workload.arrival.rate": {"start": 1, "last": 2, "step": 1e-9}}}, "is beyond the limit of 100,000"),
    ({"grid": {"seed": list(range(1000))}, "replicates": 1000}, "1,000,000 points"),
    ({"grid": {"workload.arrival.rate": {"start": 1, "last": ".inf", "step": 1}}}, "finite number"),
    ({"base_seed": "text"}, "base seed must be an integer"),
    ({"base_seed": 1.5, "replicates": 2}, "base seed must be an integer"),
    ({"base_seed": -3, "replicates": 2}, "base seed must be an integer"),
])
def test_sweeps_beyond_the_limits_or_with_bad_seeds_fail_before_anything_runs(sweep, expected, tmp_path, capsys):
    base = experiment()
    if "base_seed" in sweep:
        base["seed"] = sweep.pop("base_seed")
    text = yaml.safe_dump({"base": base, **{"grid": {"seed": [1]}, **sweep}})
    path = _file(tmp_path, text.replace("'.inf'", ".inf"), "sweep.yaml")
    _one_line_error(capsys, ["sweep", path, "--out", str(tmp_path / "out")], expected)
    assert not (tmp_path / "out" / "index.parquet").exists()


def test_set_addresses_list_elements_and_names_missing_ones(tmp_path, capsys):
    import json

    data = experiment(workload={"num_requests": 40, "arrival": {"kind": "poisson", "rate": 5.0},
                                "classes": [{"name": "a", "share": 1, "input_tokens": {"kind": "fixed", "value": 10},
                                             "output_tokens": {"kind": "fixed", "value": 2}},
                                            {"name": "b", "share": 1, "input_tokens": {"kind": "fixed", "value": 10},
                                             "output_tokens": {"kind": "fixed", "value": 2}}]})
    path = _file(tmp_path, yaml.safe_dump(data))
    code, out, err = _cli(capsys, "run", path, "--json", "--set", "workload.classes[1].share=3")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["b.num_requests"] > summary["a.num_requests"]  # 3 : 1
    _one_line_error(capsys, ["run", path, "--set", "workload.classes[5].share=3"],
                    "workload.classes[5]: no such element (a list of 2)")


def test_plot_of_a_truncated_run_folder_and_convert_trace_into_a_folder_are_one_line(tmp_path, capsys):
    run = tmp_path / "killed"
    run.mkdir()
    (run / "requests.parquet").write_bytes(b"PAR1 cut off by kill -9")
    _one_line_error(capsys, ["plot", str(run)], "requests.parquet: not a complete Parquet file")
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n")
    _one_line_error(capsys, ["convert-trace", str(trace), str(tmp_path)], "is a folder; give a file name")


def test_a_decode_router_plug_in_resolves_beside_the_experiment_and_its_errors_name_it(tmp_path, capsys):
    (tmp_path / "mine.py").write_text("from simulator.cluster.router import Router\n\n"
                                      "class First(Router):\n    def route(self, request):\n        return 0\n")
    cluster = {"kind": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 2},
               "decode_router": {"kind": "mine.py:First"}}
    path = _file(tmp_path, yaml.safe_dump(experiment(cluster=cluster)))
    code, _, err = _cli(capsys, "run", path)
    assert code == 0, err
    cluster["decode_router"] = {"kind": "mine.py:Missing"}
    path = _file(tmp_path, yaml.safe_dump(experiment(cluster=cluster)))
    _one_line_error(capsys, ["run", path], "cluster.decode_router: cannot import")


@pytest.mark.parametrize("option", ["model", "hardware", "file"])
def test_file_names_the_system_refuses_are_one_line(option, capsys):
    long = "a" * 300 + ".yaml"
    argv = ["run", long] if option == "file" else ["run", "--set", f"{option}={long}"]
    _one_line_error(capsys, argv, "File name too long")


def test_duplicate_keys_in_a_json_config_are_refused(tmp_path, capsys):
    path = _file(tmp_path, '{"num_hidden_layers": 2, "num_hidden_layers": 4}', "dup_config.json")
    _one_line_error(capsys, ["run", "--set", f"model={path}"], "duplicate key 'num_hidden_layers'")


@pytest.mark.parametrize(("kind", "text"), [
    ("hardware", "name: g\nmemory_gib: 80\nmemory_bandwidth_gb_per_s: .inf\npeak_tflops: {bf16: 1, fp16: 1}\n"),
    ("engine", "name: e\nper_iteration_ms: .nan\n"),
    ("model", "name: m\nnum_layers: 2\nhidden_size: 64\nnum_heads: 4\nnum_kv_heads: 4\nhead_dim: 16\n"
              "intermediate_size: 128\nvocab_size: 100\nmax_position_embeddings: .inf\n"),
])
def test_catalog_files_with_non_finite_numbers_are_one_line(kind, text, tmp_path, capsys):
    path = _file(tmp_path, text, f"{kind}.yaml")
    field = {"hardware": "memory_bandwidth_gb_per_s", "engine": "per_iteration_ms", "model": "max_position_embeddings"}
    err = _one_line_error(capsys, ["run", "--set", f"{kind}={path}", "--set", "workload.num_requests=2"], path)
    assert f"{field[kind]}: input should be a finite number" in err, err


MODEL_24_HEADS = ("name: m24\nnum_layers: 4\nhidden_size: 1536\nnum_heads: 24\nnum_kv_heads: 6\nhead_dim: 64\n"
                  "intermediate_size: 4096\nvocab_size: 1000\nmax_position_embeddings: 4096\n")


@pytest.mark.parametrize(("overrides", "expected"), [
    (["cluster.tensor_parallel=3"], "cluster.tensor_parallel: 3 does not divide the 32 attention heads of llama-3-8b "
                                    "(allowed: 1, 2, 4, 8, 16, 32)"),
    (["model=M24", "cluster.tensor_parallel=4"], "4 and the 6 KV heads of m24 do not split evenly"),
    (["cluster.pipeline_parallel=33"], "33 stages for the 32 layers"),
])
def test_parallelism_the_model_cannot_split_into_is_one_line(overrides, expected, tmp_path, capsys):
    """vLLM's rules: the heads divide over the TP ranks; the KV heads divide or replicate evenly (24 heads over 4
    ranks is fine, 6 KV heads over 4 is not); every pipeline stage gets a layer."""
    model = _file(tmp_path, MODEL_24_HEADS, "m24.yaml")
    argv = ["run"] + [item for o in overrides for item in ("--set", o.replace("M24", model))]
    _one_line_error(capsys, argv, expected)


def test_misspelt_keys_get_a_suggestion_and_gpu_names_are_case_insensitive(capsys):
    _one_line_error(capsys, ["run", "--set", "scheduler.max_num_seq=4"], "did you mean 'max_num_seqs'?")
    assert _cli(capsys, "run", "--set", "hardware=H100-SXM", "--set", "workload.num_requests=3")[0] == 0


OLD_SPELLINGS = [  # (model, section as written before, the same section spelled anew, the warning's text)
    ("hardware", {"memory_bandwidth_gbps": 3350, "interconnect_gbps": 450, "host_link_gbps": 64},
     {"memory_bandwidth_gb_per_s": 3350, "interconnect_gb_per_s": 450, "host_link_gb_per_s": 64},
     "hardware.memory_bandwidth_gbps is renamed hardware.memory_bandwidth_gb_per_s"),
    ("node", {"inter_node_gbps": 50}, {"inter_node_gb_per_s": 50}, "node.inter_node_gbps is renamed"),
    ("transfer", {"bandwidth_gbps": 25}, {"bandwidth_gb_per_s": 25}, "cluster.transfer.bandwidth_gbps is renamed"),
    ("chunked", {"kind": "chunked", "chunk_size": 512}, {"kind": "chunked", "long_prefill_token_threshold": 512},
     "scheduler.chunk_size is renamed scheduler.long_prefill_token_threshold"),
    ("trace", {"path": "t.csv", "time_scale": 2}, {"path": "t.csv", "speedup": 2}, "workload.trace.time_scale is"),
    ("sweep", {"start": 1, "stop": 3, "step": 1}, {"start": 1, "last": 3, "step": 1}, "sweep axis.stop is renamed"),
    ("slo", {"e2e_ms": 140}, {"e2el_ms": 140}, "slo.e2e_ms is renamed slo.e2el_ms"),
]


def _model(name):
    from simulator.catalog.hardware import HardwareSpec, NodeSpec
    from simulator.config.cluster import TransferConfig
    from simulator.config.slo import SLOConfig
    from simulator.config.workload import TraceConfig
    from simulator.schedulers.chunked import ChunkedSchedulerConfig
    from simulator.studies.sweep import SweepRange

    return {"hardware": HardwareSpec, "node": NodeSpec, "transfer": TransferConfig, "chunked": ChunkedSchedulerConfig,
            "trace": TraceConfig, "sweep": SweepRange, "slo": SLOConfig}[name]


@pytest.mark.parametrize("name, old, new, warning", OLD_SPELLINGS, ids=[case[0] for case in OLD_SPELLINGS])
def test_renamed_keys_still_read_with_a_warning_and_not_twice(name, old, new, warning):
    """Names that said something else than they meant were renamed (GB/s fields were ``*_gbps``, which reads as
    gigabits; ``chunk_size`` capped one prompt's chunk, vLLM's ``long_prefill_token_threshold``; a trace's
    ``time_scale`` divided timestamps; a sweep axis's ``stop`` was included). The old spelling gives the same
    section with a FutureWarning naming the new one; both spellings at once are refused."""
    base = {"name": "g", "memory_gib": 80, "peak_tflops": {"bf16": 1, "fp16": 1}} if name == "hardware" else {}
    model = _model(name)
    with pytest.warns(FutureWarning) as caught:
        read = model.model_validate({**base, **old})
    assert any(warning in str(w.message) for w in caught) and len(caught) == sum(k not in new for k in old)
    assert read == model.model_validate({**base, **new})
    first_old, first_new = next((k, v) for k, v in zip(old, new, strict=True) if k != v)
    with pytest.raises(ValueError, match=f"give {first_new} only"):
        model.model_validate({**base, **old, first_new: old[first_old]})


def test_an_old_spelling_on_the_command_line_runs_and_warns_in_one_line(capsys):
    import warnings

    from simulator.cli.main import warning_line as _warning_line

    with pytest.warns(FutureWarning, match="scheduler.chunk_size is renamed") as caught:
        code = main(["run", "--set", "scheduler={kind: chunked, chunk_size: 512}", "--set", "workload.num_requests=5"])
    assert code == 0 and "completed" in capsys.readouterr().out
    line = warnings.formatwarning(caught[0].message, FutureWarning, "x.py", 1)
    assert line == _warning_line(caught[0].message, FutureWarning, "x.py", 1)
    assert line.startswith("llmsim: warning: scheduler.chunk_size is renamed") and line.count("\n") == 1


def test_calibrating_a_frameworks_kernels_refuses_what_it_cannot_fit(tmp_path, capsys):
    """``calibrate --framework``: an unknown framework, no --kernels, a folder without that framework's tables."""
    out = str(tmp_path / "out.yaml")
    (tmp_path / "kernels").mkdir()
    _one_line_error(capsys, ["calibrate", "--kernels", str(tmp_path / "kernels"), "--framework", "foo", "--output",
                             out], "unknown engine profile 'foo'")
    _one_line_error(capsys, ["calibrate", "--hardware", "h100-sxm", "--ops", str(tmp_path), "--framework", "vllm",
                             "--output", out], "--framework fits a framework's kernels: it needs --kernels DIR")
    _one_line_error(capsys, ["calibrate", "--kernels", str(tmp_path / "kernels"), "--framework", "vllm", "--output",
                             out], "no custom_allreduce, GEMM, attention, MLA or MoE tables of framework 'vllm'")


def test_calibrating_on_files_that_are_not_operator_timings_says_which(tmp_path, capsys):
    """``calibrate --ops DIR`` over CSVs without the operator-timing columns, or not CSV at all: one line naming the
    file, not a KeyError from its first missing column."""
    out = str(tmp_path / "out.yaml")
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "a.csv").write_text("model,latency\nx,1\n")
    _one_line_error(capsys, ["calibrate", "--hardware", "h100-sxm", "--ops", str(tmp_path / "ops"), "--output", out],
                    "a.csv: not an operator-timing file (format of calibration/a100_ops): no column "
                    "num_tensor_parallel_workers, num_tokens, n_embd, ...")
    (tmp_path / "ops" / "a.csv").write_bytes(b"\xff\xfe\x00bad")
    _one_line_error(capsys, ["calibrate", "--hardware", "h100-sxm", "--ops", str(tmp_path / "ops"), "--output", out],
                    "a.csv: not a CSV file")


# Found by the input fuzzers (issue 57), each with its minimal input.

@pytest.mark.parametrize(("name", "text", "expected"), [
    ("config.yaml", "name: x\n  bad: [", "config.yaml:2: not YAML"),
    ("config.yaml", "- a\n", "config.yaml: a run's config is a YAML mapping, got list"),
    ("summary.json", '{"about": "x"}', "summary.json: 'about' is a JSON object, got str"),
])
def test_a_corrupt_run_folder_is_reported_in_one_line(tmp_path, capsys, name, text, expected):
    (tmp_path / "summary.json").write_text('{"about": {"name": "x"}, "completed": 1}')
    (tmp_path / name).write_text(text)
    _one_line_error(capsys, ["report", str(tmp_path), "--quiet"], expected)


@pytest.mark.parametrize("kind", [".", "./notes.txt", "x."])
def test_a_relative_or_empty_dotted_plugin_path_is_not_imported(capsys, kind):
    _one_line_error(capsys, ["run", "--set", f"scheduler.kind={kind}"],
                    f"cannot import {kind!r}: a dotted path is package.module.Class")


def test_plan_refuses_a_deployment_unit_too_large_to_search(capsys):
    _one_line_error(capsys, ["plan", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--ttft", "1000", "--tpot", "50",
                             "--isl", "8", "--osl", "2", "--max-gpus", "100000"],
                    "--max-gpus (or --gpus) 100000: a deployment unit of at most 1024 GPUs is searched")


def test_a_runs_row_of_too_many_clients_is_refused_before_it_simulates(tmp_path, capsys):
    from simulator.fidelity.silicon import REQUIRED

    row = {"backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm", "mode": "agg",
           "isl": "8", "osl": "2", "batch_size": "1000000", "tp_size": "1", "silicon_ttft_ms": "1",
           "silicon_tpot_ms": "1", "silicon_data_source": "silicon_concurrency=1000000"}
    header = [*REQUIRED, "silicon_data_source"]
    path = _file(tmp_path, ",".join(header) + "\n" + ",".join(row[k] for k in header) + "\n", "runs.csv")
    out_csv = tmp_path / "rows.csv"
    code, _, _ = _cli(capsys, "validate", "--runs", path, "--jobs", "1", "--quiet", "--output", str(out_csv))
    assert code == 0
    assert "1,000,000 clients (silicon_concurrency, else batch_size); at most 32,768" in out_csv.read_text()
