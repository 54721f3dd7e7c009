"""The per-token table (``run(..., tokens=True)``, ``llmsim run --tokens``): every figure of the summary that
describes tokens is recomputed from it — first and last token times exactly, the ITL mean exactly, its percentiles
within the histogram's 0.1% bins — and the closed-form decode runs give the same token times as stepping one
iteration at a time."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import simulator
from simulator.cli import main
from simulator.config import load_experiment
from simulator.errors import ConfigError
from tests.helpers import experiment


def _recomputed(result):
    tokens, rows = result.tokens(), result.requests.set_index("request_id")
    times = tokens.groupby("request_id")["time_s"]
    return tokens, rows, times


@pytest.mark.parametrize("sections", [
    {},  # continuous batching, linear costs
    {"scheduler": {"kind": "chunked", "max_num_seqs": 16, "max_num_batched_tokens": 128, "max_model_len": 2048},
     "cost_model": {"kind": "roofline"}},
    {"kv_cache": {"kind": "paged", "block_size": 16, "num_gpu_blocks": 40}},  # preemptions
    {"engine": "sglang", "cost_model": {"kind": "roofline"},  # held first tokens (7 of 50), preemptions (5)
     "kv_cache": {"kind": "paged", "block_size": 16, "num_gpu_blocks": 150},
     "scheduler": {"kind": "continuous", "max_num_seqs": 16, "max_model_len": 1024, "max_num_batched_tokens": 1024,
                   "prefill_priority": True, "async_scheduling": True},
     "workload": {"num_requests": 50, "arrival": {"kind": "poisson", "rate": 800.0},
                  "input_tokens": {"kind": "uniform", "min": 10, "max": 600},
                  "output_tokens": {"kind": "uniform", "min": 1, "max": 100}}},
    {"cluster": {"replicas": 3, "router": "round_robin", "fault_retries": 2,
                 "faults": [{"at_s": 0.6, "replica": 1, "kind": "crash", "duration_s": 0.5}]}},
])
def test_the_tokens_recompute_the_summary(sections):
    result = simulator.run(load_experiment(experiment(**sections)), tokens=True)
    tokens, rows, times = _recomputed(result)
    done = rows[rows["status"] == "finished"]
    assert (times.size()[done.index] == done["output_tokens"]).all()
    assert np.array_equal(times.min()[done.index], done["first_token_s"])
    assert np.array_equal(times.max()[done.index], done["finish_s"])
    tpot = (times.max() - times.min()) / (times.size() - 1) * 1000
    several = done.index[done["output_tokens"] > 1]
    assert np.allclose(tpot[several], done.loc[several, "tpot_ms"], rtol=1e-12)
    assert (tokens.groupby("request_id")["token"].max() + 1).equals(times.size())
    s = result.summary
    if sections.get("cluster"):  # the summary's ITL pools the lost attempts' gaps too (simulator.results.metrics)
        assert (rows["retries"] > 0).any()
        return
    gaps = tokens.groupby("request_id")["time_s"].diff().dropna().to_numpy() * 1000
    assert gaps.mean() == pytest.approx(s["mean_itl_ms"], rel=1e-9)
    for label, q in (("median", 50), ("p90", 90), ("p99", 99)):
        assert np.percentile(gaps, q) == pytest.approx(s[f"{label}_itl_ms"], rel=2e-3), label
    if sections.get("kv_cache"):
        assert s["num_preemptions"] > 0


def test_closed_form_runs_give_the_token_times_of_stepping():
    config = load_experiment(experiment(cost_model={"kind": "roofline"}))
    fast = simulator.run(config, tokens=True).tokens()
    slow = simulator.run(config, tokens=True, fast_forward=False).tokens()
    assert fast[["request_id", "token", "replica"]].equals(slow[["request_id", "token", "replica"]])
    assert np.allclose(fast["time_s"], slow["time_s"], rtol=1e-12, atol=1e-12)


def test_run_tokens_writes_the_table(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "--set", "workload.num_requests=50", "--out", str(out), "--tokens"]) == 0
    capsys.readouterr()
    tokens = pd.read_parquet(out / "tokens.parquet")
    summary = json.loads((out / "summary.json").read_text())
    assert len(tokens) == summary["total_output_tokens"]
    assert list(tokens.columns) == ["request_id", "token", "time_s", "replica"]
    assert main(["run", "--tokens"]) == 2
    assert "give --out" in capsys.readouterr().err


def test_tokens_where_they_are_not_logged_say_so():
    config = load_experiment(experiment(cluster={"kind": "disaggregated", "prefill": {"replicas": 1},
                                                 "decode": {"replicas": 1}}))
    with pytest.raises(ConfigError, match="colocated clusters without speculative decoding"):
        simulator.run(config, tokens=True)


def test_a_request_that_finally_fails_keeps_no_tokens_as_a_retried_one_keeps_its_last_attempts(tmp_path):
    """One rule for lost work. Replica 0 crashes at 0.05 s with two requests decoding on it: without retries
    both fail and keep no token (their first tokens were emitted before the crash); with a retry each finishes
    on replica 1 and keeps exactly its output's tokens, all from that last attempt."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,100,101\n0.001,100,101\n")
    for retries in (0, 1):
        config = load_experiment(experiment(
            cluster={"replicas": 2, "router": "round_robin", "fault_retries": retries,
                     "faults": [{"at_s": 0.05, "replica": 0, "kind": "crash", "duration_s": 1.0}]},
            workload={"trace": {"path": str(trace)}}))
        result = simulator.run(config, tokens=True)
        rows, tokens = result.requests.set_index("request_id"), result.tokens()
        assert rows.loc[0, "status"] == ("failed" if retries == 0 else "finished")
        lost = tokens[tokens["request_id"] == 0]
        if retries == 0:
            assert lost.empty
        else:
            assert len(lost) == 101 and (lost["time_s"] >= rows.loc[0, "first_scheduled_s"]).all()
            assert set(lost["replica"]) == {1}
