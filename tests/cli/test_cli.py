"""The ``llmsim`` command: the main job, outputs, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import os
import warnings

import pandas as pd
import pytest
import yaml

from simulator.cli import main
from simulator.cost import collective_time
from tests.helpers import REPO, experiment


def run_cli(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_run_default_experiment_prints_summary(capsys):
    code, out, _ = run_cli(capsys, "run", "--set", "workload.num_requests=100")
    assert code == 0
    for label in ("TTFT", "TPOT", "ITL", "E2E", "throughput", "KV cache", "SLO"):
        assert label in out


def test_the_summary_names_the_resolved_weight_and_kv_formats(capsys):
    """``dtype: auto`` and ``kv_cache.dtype: auto`` resolve from the checkpoint; the summary says to what: DeepSeek-V3's
    block-fp8 release declares no KV format, so its cache is 16-bit; an explicit fp8 cache is shown as given."""
    argv = ["run", "--set", "model=deepseek-v3", "--set", "hardware=h200-sxm", "--set", "cluster.tensor_parallel=8",
            "--set", "workload.num_requests=5"]
    assert "(weights fp8_block, KV cache bf16)" in run_cli(capsys, *argv)[1]
    assert "(weights fp8_block, KV cache fp8)" in run_cli(capsys, *argv, "--set", "kv_cache.dtype=fp8")[1]


def test_run_writes_outputs(tmp_path, capsys):
    out_dir = tmp_path / "out"
    code, out, _ = run_cli(
        capsys, "run", str(REPO / "experiments" / "seed_ttft_example.yaml"), "--out", str(out_dir), "--json"
    )
    assert code == 0
    summary = json.loads(out)
    assert summary["mean_ttft_ms"] == pytest.approx(700)
    assert json.loads((out_dir / "summary.json").read_text()) == summary
    table = pd.read_parquet(out_dir / "requests.parquet")
    assert len(table) == 1 and {"request_id", "arrival_s", "first_token_s", "status"} <= set(table.columns)
    assert table["finish_s"][0] - table["arrival_s"][0] == pytest.approx(3.2)
    resolved = yaml.safe_load((out_dir / "config.yaml").read_text())
    assert resolved["cost_model"]["prefill_ms_per_token"] == 0.6


def test_set_overrides_are_typed_and_validated(capsys):
    code, out, _ = run_cli(capsys, "run", "--json", "--set", "workload.num_requests=20",
                           "--set", "scheduler.max_num_seqs=1", "--set", "workload.arrival.rate=50")
    assert code == 0
    assert json.loads(out)["peak_running"] == 1


def test_kv_size_worked_example(capsys):
    code, out, _ = run_cli(capsys, "kv-size", "--layers", "32", "--kv-heads", "32", "--head-dim", "128",
                           "--batch", "16", "--context", "4096", "--dtype", "fp16")
    assert code == 0
    assert "34.36 GB (32.00 GiB)" in out


def test_kv_size_from_catalog_model(capsys):
    code, out, _ = run_cli(capsys, "kv-size", "--model", "llama-3-8b", "--context", "8192", "--batch", "1")
    assert code == 0 and "131,072 B" in out


def _write(tmp_path, data) -> str:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data) if isinstance(data, dict) else data)
    return str(path)


BAD_CASES = {
    "negative rate": (["--set", "workload.arrival.rate=-1"], "workload.arrival.rate: must be >= 1e-06, got -1"),
    "unknown key": (["--set", "scheduler.max_batch=4"], "scheduler.max_batch: unknown key (allowed: max_num_seqs,"),
    "wrong type": (["--set", "workload.num_requests=lots"], "workload.num_requests: input should be a valid integer"),
    "neither a count nor auto": (["--set", "scheduler.max_num_seqs=lots"],
                                 "scheduler.max_num_seqs: must be 'auto' or a whole number of sequences from 1 to "
                                 "100,000,000, got 'lots'"),
    "unknown kind": (["--set", "workload.arrival.kind=weibull"], "workload.arrival: unknown kind 'weibull'"),
    "unknown model": (["--set", "model=gpt-9"], "model: unknown model 'gpt-9' (catalog:"),
    "unknown gpu": (["--set", "hardware=tpu-v9"], "hardware: unknown GPU 'tpu-v9' (catalog:"),
    "does not fit": (["--set", "model=llama-2-70b"], "GiB short of one 4096-token request"),
    "bad max_model_len": (["--set", "scheduler.max_model_len=100000"], "scheduler.max_model_len: 100000 exceeds"),
    "budget below max_model_len": (["--set", "scheduler={kind: continuous, max_num_batched_tokens: 1024}"],
                                   "scheduler.max_num_batched_tokens: 1024 is below max_model_len 8192"),
    "bad override syntax": (["--set", "seed"], "--set 'seed': expected dotted.key=value"),
    "unknown scheduler": (["--set", "scheduler.kind=fifo"],
                          "scheduler: unknown kind 'fifo' (allowed: 'chunked', 'continuous', 'static', or a class of"),
    "zero budget": (["--set", "scheduler.max_num_batched_tokens=0"],
                    "scheduler.max_num_batched_tokens: must be >= 1, got 0"),
    "chunk over budget": (["--set", "scheduler={kind: chunked, long_prefill_token_threshold: 4096, "
                                    "max_num_batched_tokens: 512}"],
                          "scheduler: long_prefill_token_threshold must be <= max_num_batched_tokens, got 4096 > 512"),
    "budget below seqs": (["--set", "scheduler={kind: chunked, max_num_batched_tokens: 64}"],
                          "scheduler.max_num_batched_tokens: 64 is below max_num_seqs 1024"),
    "negative timeout": (["--set", "scheduler={kind: static, batch_timeout_ms: -5}"],
                         "scheduler.batch_timeout_ms: must be >= 0.0, got -5"),
    "timeline without out": (["--timeline"], "run: --timeline writes timeline.parquet and iterations.parquet into"),
    "attention DP on a dense model": (["--set", "cluster.data_parallel=2"],
                                     "cluster.data_parallel: 2 attention-DP ranks need a mixture-of-experts"),
    "SLO admission without a bound": (["--set", "cluster.admission={kind: slo}", "--set", "slo={}"],
                                      "cluster.admission.ttft_ms: kind slo needs a TTFT bound; give ttft_ms or"),
    "unknown admission": (["--set", "cluster.admission={kind: leaky}"],
                          "cluster.admission: unknown kind 'leaky' (allowed: 'token_bucket', 'slo')"),
    "empty token bucket": (["--set", "cluster.admission={kind: token_bucket, rate: 5, burst: 0.5}"],
                           "cluster.admission.burst: must be >= 1.0, got 0.5"),
    "token bucket unit": (["--set", "cluster.admission={kind: token_bucket, rate: 5, burst: 5, unit: bytes}"],
                          "cluster.admission.unit: must be one of 'requests' or 'tokens', got 'bytes'"),
    "SLO margin of 1": (["--set", "cluster.admission={kind: slo, ttft_ms: 500, margin: 1}"],
                        "cluster.admission.margin: must be < 1.0, got 1"),
    "cancel fraction over 1": (["--set", "workload.cancel={fraction: 2, after_s: 1}"],
                               "workload.cancel.fraction: must be <= 1.0, got 2"),
    "cancel without when": (["--set", "workload.cancel={fraction: 0.5}"],
                            "workload.cancel: give after_s (seconds after the send), after_tokens (output tokens "
                            "received) or both"),
    "cancel after no tokens": (["--set", "workload.cancel={fraction: 0.5, after_tokens: 0}"],
                               "workload.cancel.after_tokens: must be a whole number of tokens from 1 to 10,000,000 or "
                               "a length distribution"),
    "negative client timeout": (["--set", "workload.client_timeout_s=-1"],
                                "workload.client_timeout_s: must be > 0.0, got -1"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_gives_one_line_and_exit_2(case, capsys):
    args, expected = BAD_CASES[case]
    code, out, err = run_cli(capsys, "run", *args)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("llmsim: error: ")
    assert expected in err
    assert "Traceback" not in err


def test_yaml_syntax_error_names_file_and_line(tmp_path, capsys):
    path = _write(tmp_path, "name: x\nseed: [1, 2\nmodel: llama-3-8b\n")
    code, _, err = run_cli(capsys, "run", path)
    assert code == 2 and f"{path}:" in err and "invalid YAML" in err and err.count("\n") == 1


def test_missing_file_and_missing_workload(tmp_path, capsys):
    code, _, err = run_cli(capsys, "run", str(tmp_path / "nope.yaml"))
    assert code == 2 and "experiment file not found" in err
    data = experiment()
    del data["workload"]["arrival"]
    code, _, err = run_cli(capsys, "run", _write(tmp_path, data))
    assert code == 2 and "workload: a synthetic workload needs ['arrival']" in err


def test_malformed_trace_row_names_file_and_line(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n0.5,ten,5\n")
    code, _, err = run_cli(capsys, "run", _write(tmp_path, experiment(workload={"trace": {"path": str(trace)}})))
    assert code == 2
    assert f"{trace}:3: column num_prefill_tokens: expected a positive integer, got 'ten'" in err


def test_relative_trace_path_resolves_against_the_experiment_file(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n")
    code, out, _ = run_cli(capsys, "run", "--json", _write(tmp_path, experiment(workload={"trace": {"path": "t.csv"}})))
    assert code == 0 and json.loads(out)["completed"] == 1


def test_steptime_adds_prediction_and_operator_groups(tmp_path, capsys):
    steps = tmp_path / "steps.csv"
    steps.write_text(
        "num_prefill_seqs,prefill_tokens_per_seq,num_decode_seqs,decode_context_per_seq\n1,2048,0,0\n0,0,64,1000\n"
    )
    out = tmp_path / "out.csv"
    code, _, _ = run_cli(capsys, "steptime", "--model", "llama-3-70b", "--hardware", "h100-sxm", "--tp", "4",
                         "--engine", "ideal", "--input", str(steps), "--output", str(out))
    assert code == 0
    table = pd.read_csv(out)
    groups = [c for c in table.columns if c.endswith("_ms") and c != "predicted_ms"]
    assert {"gemm_ms", "attention_ms", "communication_ms", "engine_ms"} <= set(groups)
    assert table["predicted_ms"].to_numpy() == pytest.approx(table[groups].sum(axis=1).to_numpy())
    # GEMMs dominate a 2048-token prefill; TP4 adds 80 layers × 2 all-reduces of 2048 × 8192 × 2 bytes
    assert table[groups].iloc[0].idxmax() == "gemm_ms"
    per_all_reduce = collective_time("h100-sxm", "all_reduce", 4, 2048 * 8192 * 2)
    assert table["communication_ms"][0] == pytest.approx(160 * per_all_reduce * 1000)
    assert table["engine_ms"].eq(0).all()


def test_steptime_says_why_each_step_costs_what_it_costs(tmp_path, capsys):
    """Llama-3-70B at TP 4 (hidden 8192, 80 layers, 64 query and 8 KV heads of 128, MLP 28672, vocab 128256): a
    2,048-token prompt does 2·(layer parameters)·2048 + the LM head's 2·8192·128256 + attention's 4·64·128 per causal
    pair and layer, a quarter on each GPU — compute-bound; 64 decodes stream the weights — memory-bound."""
    steps = tmp_path / "steps.csv"
    steps.write_text(
        "num_prefill_seqs,prefill_tokens_per_seq,num_decode_seqs,decode_context_per_seq\n1,2048,0,0\n0,0,64,1000\n"
    )
    out = tmp_path / "out.csv"
    assert run_cli(capsys, "steptime", "--model", "llama-3-70b", "--hardware", "h100-sxm", "--tp", "4",
                   "--engine", "vllm", "--input", str(steps), "--output", str(out))[0] == 0
    table = pd.read_csv(out)
    layer = 2 * 8192**2 + 2 * 8192 * 8 * 128 + 3 * 8192 * 28672
    flops = 2 * 80 * layer * 2048 + 2 * 8192 * 128256 + 4 * 64 * 128 * 2048 * 2049 / 2 * 80
    assert table["gflop_per_gpu"][0] == pytest.approx(flops / 4 / 1e9, rel=1e-6)
    assert list(table["bound"]) == ["compute", "memory"]
    assert (table[["compute_frac", "memory_frac", "fixed_frac"]].sum(axis=1)).to_numpy() == pytest.approx(1.0)


def test_steptime_bad_row_names_file_and_line(tmp_path, capsys):
    steps = tmp_path / "steps.csv"
    steps.write_text("num_prefill_seqs,prefill_tokens_per_seq,num_decode_seqs,decode_context_per_seq\n1,x,0,0\n")
    code, _, err = run_cli(capsys, "steptime", "--model", "llama-3-8b", "--hardware", "h100-sxm",
                           "--input", str(steps))
    assert code == 2 and f"{steps}:2: expected non-negative integers" in err


def test_engine_flag_changes_the_cost(capsys):
    code, ideal, _ = run_cli(capsys, "run", "--json", "--engine", "ideal", "--set", "workload.num_requests=50")
    code2, default, _ = run_cli(capsys, "run", "--json", "--set", "workload.num_requests=50")
    assert code == code2 == 0
    assert json.loads(ideal)["mean_tpot_ms"] < json.loads(default)["mean_tpot_ms"]
    code, _, err = run_cli(capsys, "run", "--engine", "nope")
    assert code == 2 and "unknown engine profile 'nope'" in err


def test_the_console_summary_says_when_no_slo_is_set_and_when_the_server_fell_behind(capsys):
    """No SLO: no '100% attainment'. Poisson arrivals at 40 req/s against a server that completes ~15 (quickstart):
    the unfinished requests grow through the run (about twice as many at the last arrival as halfway), and the
    summary warns; at 4 req/s it does not."""
    code, out, _ = run_cli(capsys, "run", "--set", "workload.num_requests=300", "--set", "workload.arrival.rate=40",
                           "--set", "slo={}")
    assert code == 0
    assert "SLO:        none set" in out and "attainment 100.0%" not in out
    assert "warning: the server fell behind at 40.00 req/s" in out
    code, out, _ = run_cli(capsys, "run", "--set", "workload.num_requests=300", "--set", "workload.arrival.rate=4")
    assert code == 0 and "warning" not in out and "attainment 100.0%" in out


def test_console_columns_never_run_together():
    """Wide numbers (a 20-minute E2E) widen the columns instead of touching their neighbours."""
    import simulator
    from simulator.report import format_summary

    summary = simulator.run(experiment(workload={"num_requests": 5, "arrival": {"kind": "poisson", "rate": 5.0},
                                                 "input_tokens": {"kind": "fixed", "value": 10},
                                                 "output_tokens": {"kind": "fixed", "value": 2}})).summary
    summary.update({"mean_e2el_ms": 1_234_567.89, "median_e2el_ms": 5.0, "p90_e2el_ms": 99_757.81,
                    "p99_e2el_ms": 103_631.34})
    row = next(line for line in format_summary("x", summary).splitlines() if line.startswith("E2E"))
    assert row.split()[1:] == ["1,234,567.89", "5.00", "99,757.81", "103,631.34"]


def test_a_reader_that_goes_away_is_not_an_error(monkeypatch, capsys):
    """``llmsim run | head -1``: the pipe closes while the summary is printed; no traceback, status 0."""
    import builtins
    import io

    class ClosedPipe(io.StringIO):
        def fileno(self):  # main points stdout at /dev/null so the interpreter's last flush goes nowhere
            return open(os.devnull, "w").fileno()

    def closed(*args, **kwargs):
        raise BrokenPipeError

    monkeypatch.setattr(builtins, "print", closed)
    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert main(["run", "--set", "workload.num_requests=5"]) == 0


def test_a_streamed_request_table_has_the_latency_columns_of_the_in_memory_one(tmp_path):
    """requests.parquet (streamed while the run goes) carries ttft_ms, tpot_ms, e2el_ms and slo_met, equal to the
    table the API returns for the same run."""
    import simulator

    config = simulator.load(experiment(slo={"ttft_ms": 50}))
    in_memory = simulator.run(config).requests
    path = tmp_path / "requests.parquet"
    assert simulator.run(config, requests_path=path).requests is None
    streamed = pd.read_parquet(path).sort_values("request_id").reset_index(drop=True)
    for column in ("ttft_ms", "tpot_ms", "e2el_ms", "slo_met"):
        pd.testing.assert_series_equal(streamed[column], in_memory[column], check_dtype=False)


def test_summary_json_says_what_it_describes(tmp_path, capsys):
    """Besides the metrics: the schema and llmsim versions, and which model, GPU, engine, deployment and load."""
    import simulator

    out = tmp_path / "out"
    code, text, _ = run_cli(capsys, "run", "--out", str(out), "--json", "--set", "workload.num_requests=10",
                            "--set", "cluster.tensor_parallel=2", "--set", "workload.arrival.rate=3")
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary == json.loads(text)
    assert (summary["schema_version"], summary["llmsim_version"]) == (1, simulator.__version__)
    about = summary["about"]
    assert (about["model"], about["hardware"], about["engine"], about["arrival"]["rate"]) == (
        "llama-3-8b", "h100-sxm", "vllm", 3.0)
    assert about["pools"] == [{"hardware": "h100-sxm", "replicas": 1, "tensor_parallel": 2, "pipeline_parallel": 1,
                               "data_parallel": 1, "expert_parallel": 1}]
    assert summary["completed"] == 10  # the metrics stay where they were
    assert (about["preset"], about["dataset"], about["sessions"]) == (None, None, None)
    code, text, _ = run_cli(capsys, "run", "--json", "--set", "workload={preset: azure-conv, num_requests: 4, "
                            "sessions: {turns: {kind: fixed, value: 2}}}")
    about = json.loads(text)["about"]
    assert code == 0 and about["preset"] == "azure-conv" and about["sessions"]["turns"]["value"] == 2


def test_quiet_drops_the_wrote_lines_but_keeps_results_and_errors(tmp_path, capsys):
    code, out, err = run_cli(capsys, "run", "--set", "workload.num_requests=20", "--out", str(tmp_path / "o"),
                             "--quiet")
    assert code == 0 and "TTFT" in out and err == ""
    code, _, err = run_cli(capsys, "run", "--set", "workload.num_requests=20", "--out", str(tmp_path / "p"))
    assert code == 0 and err.startswith("wrote ")
    code, _, err = run_cli(capsys, "run", "--set", "workload.num_requests=0", "--quiet")
    assert code == 2 and err.startswith("llmsim: error:")


def test_a_long_runs_progress_bar_changes_nothing(monkeypatch):
    """On a terminal a run of LONG_RUN requests or more ticks a bar; the ticks only read the recorder, so the
    request table is the one without them."""
    import io
    import sys

    import simulator
    import simulator.cluster.simulation as simulation
    from simulator.config import load_experiment

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(simulation, "LONG_RUN", 100)
    config = load_experiment(None, ["workload.num_requests=400"])
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    shown = simulator.run(config, progress=True).requests
    monkeypatch.undo()
    assert "request" in terminal.getvalue()  # the bar was drawn
    assert shown.equals(simulator.run(config).requests)


@pytest.mark.parametrize("path, kind, command", [
    ("policies/routers.yaml", "comparison", "llmsim compare"),
    ("sweeps/rate_by_scheduler.yaml", "sweep", "llmsim sweep"),
    ("sweeps/deployments.yaml", "plan", "llmsim plan"),
])
def test_running_a_spec_of_another_kind_names_its_command(capsys, path, kind, command):
    code, _, err = run_cli(capsys, "run", str(REPO / "experiments" / path))
    assert code == 2 and f"a {kind} (it has" in err and err.strip().endswith(f"run it with {command}")


def test_the_console_shows_the_queue_and_a_disaggregated_runs_transfer_and_decode_queue(tmp_path, capsys):
    config = experiment(cluster={"kind": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 1}})
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(config))
    code, out, _ = run_cli(capsys, "run", str(path))
    line = next(line for line in out.splitlines() if line.startswith("queue:"))
    assert code == 0 and "KV transfer mean" in line and "decode queue mean" in line
    _, out, _ = run_cli(capsys, "run", "--set", "workload.num_requests=20")
    assert "KV transfer" not in next(line for line in out.splitlines() if line.startswith("queue:"))


def test_outputs_state_six_significant_digits_and_carry_the_run_in_their_metadata(tmp_path, capsys):
    import pyarrow.parquet as pq

    import simulator
    from simulator.api import summary_json

    out = tmp_path / "o"
    code, _, _ = run_cli(capsys, "run", "--set", "workload.num_requests=30", "--out", str(out), "--timeline",
                         "--tokens")
    assert code == 0
    written = json.loads((out / "summary.json").read_text())
    exact = simulator.run(simulator.load(None, workload__num_requests=30)).summary
    assert written["mean_ttft_ms"] == float(f"{exact['mean_ttft_ms']:.6g}") != exact["mean_ttft_ms"]
    assert json.loads(summary_json({"x": 700.0000000000001}))["x"] == 700.0
    for name in ("requests", "timeline", "iterations", "tokens"):
        meta = json.loads(pq.read_schema(out / f"{name}.parquet").metadata[b"llmsim"])
        assert meta["about"]["name"] == "quickstart" and meta["schema_version"] == written["schema_version"]


def test_capacity_json_states_the_rate_and_every_probe(capsys):
    args = ["capacity", str(REPO / "experiments" / "quickstart.yaml"), "--slo", "p99_ttft_ms=300", "--tolerance",
            "0.2", "--set", "workload.num_requests=200", "--set", "slo={}"]  # the search holds --slo alone
    code, out, _ = run_cli(capsys, *args)
    rate = float(next(line for line in out.splitlines() if line.startswith("capacity:")).split()[1])
    code, out, _ = run_cli(capsys, *args, "--json")
    found = json.loads(out)
    assert code == 0 and found["rate"] == pytest.approx(rate, rel=1e-3) and found["unit"] == "req/s"
    assert any(p["rate"] == found["rate"] and p["meets"] for p in found["probes"])
    assert all((p["p99_ttft_ms"] <= 300) == p["meets"] for p in found["probes"])


def test_a_trace_may_go_into_the_out_folder_the_run_creates(tmp_path, monkeypatch):
    """The README's ``run --out results/q --timeline --trace results/q/trace.json`` on a fresh checkout, where
    results/q does not exist yet."""
    monkeypatch.chdir(tmp_path)
    code = main(["run", str(REPO / "experiments" / "quickstart.yaml"), "--set", "workload.num_requests=5",
                 "--out", "results/q", "--timeline", "--trace", "results/q/trace.json", "--quiet"])
    assert code == 0
    assert {"summary.json", "trace.json", "timeline.parquet"} <= {p.name for p in (tmp_path / "results/q").iterdir()}


def test_a_killed_runs_staging_folder_is_cleared_by_the_next_run(tmp_path):
    """A run killed before it cleaned up leaves .run-PID.tmp; the next run into the folder removes it when no
    process of that PID exists (PID 1 always does: its folder stays)."""
    out = tmp_path / "out"
    gone, live = out / ".run-4194305.tmp", out / ".run-1.tmp"  # above Linux's largest PID (2^22)
    gone.mkdir(parents=True)
    live.mkdir()
    assert main(["run", "--set", "workload.num_requests=3", "--out", str(out), "--quiet"]) == 0
    assert not gone.exists() and live.exists()


def test_an_error_quotes_a_huge_value_cut_to_a_readable_line(capsys):
    assert main(["run", "--set", "model=" + "x" * 5000]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 1000 and "(5,002 characters)" in err


def test_the_console_names_the_model_gpus_engine_and_workload(capsys):
    """What a printed summary describes, under its title: the quickstart's model, GPU, engine, policies and load."""
    code, out, _ = run_cli(capsys, "run", "--set", "workload.num_requests=20")
    assert code == 0
    title, setup, workload = out.splitlines()[:3]
    assert title == "== quickstart =="
    assert setup == "llama-3-8b (bf16) on 1 × h100-sxm (TP 1), engine vllm, scheduler chunked, KV cache paged"
    assert workload == ("workload:   poisson arrivals at 8 req/s, 20 requests, prompts lognormal mean 1,000, "
                        "outputs 200 tokens")


def test_the_console_states_a_presets_median_lengths(capsys):
    """A preset's quantile lengths crowd their points into the top percent (99.1 … 99.9): the median the console
    states is the value at probability 0.5 — azure-conv's 1,020 prompt and 129 output tokens, its trace's medians —
    not the middle point of the list (the 55th percentile)."""
    code, out, _ = run_cli(capsys, "run", "--set", "workload={preset: azure-conv, num_requests: 20}")
    assert code == 0
    assert out.splitlines()[2].endswith("prompts median 1,020, outputs median 129 tokens (preset azure-conv)")


def test_without_an_slo_the_summary_states_no_attainment(capsys):
    """No SLO, nothing to attain: summary.json says null, as the console says none (it had said 1.0)."""
    code, out, _ = run_cli(capsys, "run", "--set", "slo={}", "--set", "workload.num_requests=20", "--json")
    summary = json.loads(out)
    assert code == 0 and summary["slo_attainment"] is None and summary["request_goodput"] is None
    code, out, _ = run_cli(capsys, "run", "--set", "workload.num_requests=20", "--json")  # the quickstart's SLO
    assert code == 0 and 0 <= json.loads(out)["slo_attainment"] <= 1


def test_capacity_names_what_it_searched_on_the_console_and_in_its_report(capsys, tmp_path):
    """A capacity answer is a rate of what: the quickstart's model, GPU, engine, policies and lengths head the
    console output and the HTML report; the arrival rate is the search's, not the file's."""
    report = tmp_path / "capacity.html"
    code, out, _ = run_cli(capsys, "capacity", str(REPO / "experiments" / "quickstart.yaml"), "--slo",
                           "p99_ttft_ms=300", "--tolerance", "0.5", "--set", "workload.num_requests=60", "--set",
                           "slo={}", "--report", str(report))
    title, setup, workload = out.splitlines()[:3]
    setup_line = "llama-3-8b (bf16) on 1 × h100-sxm (TP 1), engine vllm, scheduler chunked, KV cache paged"
    assert code == 0 and title == "== capacity of quickstart ==" and setup == setup_line
    assert workload == ("workload:   poisson arrivals, 60 requests, prompts lognormal mean 1,000, outputs 200 tokens; "
                        "the search varies their rate")
    assert "goodput nan" not in out  # without an slo there is no goodput to state
    page = report.read_text()
    assert setup_line.replace("×", "&#215;") in page or setup_line in page


def test_capacity_says_when_the_experiments_own_slo_is_not_what_it_holds(capsys):
    """The quickstart states a per-request slo; a search over --slo percentiles without --attainment does not hold
    it, and says so (the README's example had reported a rate where 12% of requests met its TPOT bound)."""
    args = ["capacity", str(REPO / "experiments" / "quickstart.yaml"), "--slo", "p99_ttft_ms=500",
            "--set", "workload.num_requests=60", "--tolerance", "0.5"]
    with pytest.warns(UserWarning, match=r"the experiment's own slo \(ttft_ms <= 500, tpot_ms <= 50 per request\) is "
                      r"not what this search holds"):
        main(args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # with --attainment the search holds per-request limits: no warning
        main([*args, "--attainment", "0.9"])
    capsys.readouterr()


def test_a_trace_without_a_request_count_is_described_whole(tmp_path, capsys):
    """A trace replayed whole has neither num_requests nor duration_s: the workload line says so (it had raised a
    TypeError formatting the missing duration)."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n0.5,20,5\n")
    code, out, _ = run_cli(capsys, "run", "--set", f"workload={{trace: {{path: {trace}}}}}")
    assert code == 0 and out.splitlines()[2] == "workload:   trace t.csv, every request"


def test_run_prints_one_line_of_iteration_bounds_unless_the_experiment_says_not_to(tmp_path, capsys):
    """``llmsim run`` records iteration bounds (the quickstart: Llama-3-8B, bf16, an H100): one ``iterations:`` line
    whose figures are the summary's, decode streaming at a fraction of the HBM peak; none where the experiment turns
    them off or its cost model (linear) prices no FLOPs."""
    args = ["run", "--set", "workload.num_requests=100"]
    code, out, _ = run_cli(capsys, *args)
    lines = [line for line in out.splitlines() if line.startswith("iterations:")]
    code2, text, _ = run_cli(capsys, *args, "--json")
    summary = json.loads(text)
    assert code == code2 == 0 and len(lines) == 1
    decode = f"decode {100 * summary['iter_decode_memory_bound_frac']:.0f}% memory-bound at "
    assert decode + f"{100 * summary['iter_decode_peak_hbm_frac']:.0f}% of HBM peak" in lines[0]
    assert "% of BF16 peak" in lines[0] and summary["iter_all_iterations"] == summary["num_iterations"]
    code, out, _ = run_cli(capsys, *args, "--set", "metrics.iteration_bounds=false")
    assert code == 0 and "iterations:" not in out
    code, out, _ = run_cli(capsys, "run", _write(tmp_path, experiment()))
    assert code == 0 and "iterations:" not in out
