"""`validate --ranking`: tokens/s per GPU and per user derived from a row's TTFT and TPOT, and whether the deployment
predicted best at a per-user speed floor is within 10% of the measured best — on hand-made rows with the answers
worked out by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from simulator.cli import main
from simulator.fidelity.ranking import label, rank, row_rates, speed_floors, summary_table
from simulator.fidelity.silicon import row_experiment, row_gpus


def _row(**changes) -> dict:
    row = {"id": "r", "backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B", "system": "h100_sxm",
           "precision": "", "mode": "agg", "isl": 100, "osl": 1, "gemm_quant_mode": "", "batch_size": 1,
           "tp_size": 1, "pp_size": 1, "attention_dp_size": math.nan, "moe_tp_size": 1, "moe_ep_size": 1,
           "silicon_data_source": "", "silicon_ttft_ms": 10.0, "silicon_tpot_ms": 10.0, "predicted_ttft_ms": 10.0,
           "predicted_tpot_ms": 10.0, "status": "ok", "subset": "fit"}
    row.update(changes)
    return row


def test_tokens_per_s_per_gpu_and_per_user_of_a_closed_loop_benchmark():
    """8 clients, TP 2, 11 output tokens: a request lasts 100 + 10 · 10 = 200 ms measured, so 8 · 11 / 0.2 s = 440
    tokens/s, 220 per GPU, at 1000 / 10 = 100 per user; predicted 50 + 10 · 20 = 250 ms: 352 tokens/s, 176 per GPU,
    50 per user."""
    rates = row_rates(pd.DataFrame([_row(batch_size=8, tp_size=2, osl=11, silicon_ttft_ms=100.0,
                                         silicon_tpot_ms=10.0, predicted_ttft_ms=50.0, predicted_tpot_ms=20.0)]))
    got = rates.iloc[0]
    assert (got["gpus"], got["clients"]) == (2, 8)
    assert got["measured_tok_s_gpu"] == pytest.approx(220) and got["measured_tok_s_user"] == pytest.approx(100)
    assert got["predicted_tok_s_gpu"] == pytest.approx(176) and got["predicted_tok_s_user"] == pytest.approx(50)
    skipped = row_rates(pd.DataFrame([_row(status="unsupported: no")])).iloc[0]
    assert math.isnan(skipped["gpus"]) and math.isnan(skipped["measured_tok_s_gpu"])


MOE = "Qwen/Qwen3-30B-A3B"
LAYOUTS = [
    # vLLM "DEP8": tp_size per rank, 8 ranks of 4 clients: 8 GPUs, 32 clients
    (dict(model_path=MOE, tp_size="1", attention_dp_size="8", moe_tp_size="1", moe_ep_size="8", batch_size="4",
          silicon_data_source="silicon_concurrency=32"), 8, 32),
    # TensorRT-LLM tp_size 8 split into 8 ranks (its MoE columns span 8 GPUs, not 64)
    (dict(backend="trtllm", model_path=MOE, tp_size="8", attention_dp_size="8", moe_tp_size="1", moe_ep_size="8",
          batch_size="4", silicon_data_source="silicon_concurrency=32"), 8, 32),
    # TP 2 × PP 2, 6 clients
    (dict(tp_size="2", pp_size="2", batch_size="6"), 4, 6),
    # disaggregated: 2 prefill workers of TP 2 and 1 decode worker of 4 ranks of TP 1: 4 + 4 GPUs, 24 clients
    (dict(mode="disagg", model_path=MOE, batch_size="", silicon_data_source="silicon_concurrency=24",
          prefill_num_workers="2", prefill_tp_size="2", prefill_attention_dp_size="1", prefill_moe_tp_size="2",
          prefill_moe_ep_size="1", prefill_batch_size="1", decode_num_workers="1", decode_tp_size="1",
          decode_attention_dp_size="4", decode_moe_tp_size="1", decode_moe_ep_size="4", decode_batch_size="6"), 8, 24),
]


@pytest.mark.parametrize("changes, gpus, clients", LAYOUTS)
def test_a_rows_gpus_are_those_its_simulation_runs_on(changes, gpus, clients):
    row = {key: ("" if isinstance(value, float) and math.isnan(value) else str(value))
           for key, value in _row(**changes).items()}
    assert row_gpus(row, "x:2") == (gpus, clients)
    cluster = row_experiment(row, "x:2", None).cluster
    pools = [cluster.prefill, cluster.decode] if cluster.kind == "disaggregated" else [cluster]
    assert sum(p.replicas * p.data_parallel * p.tensor_parallel * p.pipeline_parallel for p in pools) == gpus


def test_a_label_shows_the_layout_as_simulated():
    """A B200 row stating ``tp_size`` 64 with ``moe_tp_size`` 8 × ``moe_ep_size`` 8 runs on 8 GPUs
    (simulator.fidelity.silicon.tensor_parallel): its label says TP 8 with EP 8, not the stated TP 64."""
    stated = _row(model_path=MOE, system="b200_sxm", tp_size=64, moe_tp_size=8, moe_ep_size=8, batch_size=16,
                  gemm_quant_mode="fp8")
    rated = row_rates(pd.DataFrame([stated, {**stated, "tp_size": 4, "moe_tp_size": 4, "moe_ep_size": 1}]))
    assert [label(row) for _, row in rated.iterrows()] == ["agg TP8·EP8 c16 fp8 (8 GPUs)",
                                                           "agg TP4 c16 fp8 (4 GPUs)"]


def test_a_label_shows_the_attention_ranks_as_simulated():
    """A TensorRT-LLM DEP 8 row written as ``attention_dp_size`` 64 with ``moe_tp_size`` 8 × ``moe_ep_size`` 8 and
    256 clients runs on 8 GPUs of 8 ranks (simulator.fidelity.silicon.attention_ranks): so says its label."""
    stated = _row(backend="trtllm", model_path=MOE, system="b200_sxm", tp_size=1, attention_dp_size=64,
                  moe_tp_size=8, moe_ep_size=8, batch_size=4, gemm_quant_mode="fp8",
                  silicon_data_source="silicon_concurrency=256")
    rated = row_rates(pd.DataFrame([stated]))
    assert [label(row) for _, row in rated.iterrows()] == ["agg TP1·DP8·EP8 c256 fp8 (8 GPUs)"]


# One group, 1 GPU and 1 output token each, so tokens/s per GPU = clients · 1000 / TTFT and per user 1000 / TPOT:
#        measured: per user, per GPU     predicted: per user, per GPU
#   A               10      1000                    12.5      800
#   B               20       800                    40       1000
#   C               40       400                    50        500
#   D               80       100                    50        100
GROUP = [
    _row(id="A", batch_size=10, silicon_tpot_ms=100.0, predicted_tpot_ms=80.0, predicted_ttft_ms=12.5),
    _row(id="B", batch_size=8, silicon_tpot_ms=50.0, predicted_tpot_ms=25.0, predicted_ttft_ms=8.0),
    _row(id="C", batch_size=4, silicon_tpot_ms=25.0, predicted_tpot_ms=20.0, predicted_ttft_ms=8.0, subset="holdout"),
    _row(id="D", batch_size=1, silicon_tpot_ms=12.5, predicted_tpot_ms=20.0, subset="holdout"),
    _row(id="E", batch_size=64, status="unsupported: x"),  # not ok: never a candidate
    _row(id="F", isl=200),  # a group of one row: nothing to rank
]


def test_the_speed_floors_are_zero_and_midpoints_between_measured_speeds():
    assert speed_floors(pd.Series([20.0, 10.0, 20.0, 40.0]).to_numpy()) == pytest.approx(
        [0, math.sqrt(200), math.sqrt(800)])


def test_each_floor_is_a_hit_a_miss_a_too_slow_pick_or_no_pick():
    """Floors 0, √200, √800, √3200. At 0 the best is A (1000) and the pick B (predicted 1000): 800 / 1000, a miss
    losing 20%; at √200 ≈ 14.1 (A predicted at 12.5: out) the best and the pick are B: a hit; at √800 ≈ 28.3 the best
    is C (400) but the pick B (predicted at 40 per user) runs 20: too slow; at √3200 ≈ 56.6 the best is D and nothing
    is predicted that fast. Random among the rows truly fast enough: 1/4 (A of four), 1/3 (B of B, C, D), 1/2 (C of
    C, D), 1; among those predicted fast enough: 1/4, 1/3, 1/3 (B, C, D: only C hits), 0 (none)."""
    decisions = rank(pd.DataFrame(GROUP))
    every = decisions[decisions["scope"] == "all"]
    assert list(every["isl"]) == [100] * 4  # F's group of one is left out
    assert list(every["floor_tok_s_user"]) == pytest.approx([0, math.sqrt(200), math.sqrt(800), math.sqrt(3200)])
    assert list(every["outcome"]) == ["miss", "hit", "too_slow", "none"]
    assert list(every["best_id"]) == ["A", "B", "C", "D"]
    assert list(every["pick_id"][:3]) == ["B", "B", "B"] and pd.isna(every["pick_id"].iloc[3])
    assert every["loss"].iloc[0] == pytest.approx(0.2) and every["loss"].iloc[1:].isna().all()
    assert list(every["random"]) == pytest.approx([1 / 4, 1 / 3, 1 / 2, 1])
    assert list(every["random_predicted"]) == pytest.approx([1 / 4, 1 / 3, 1 / 3, 0])
    assert list(every["measured_eligible"]) == [4, 3, 2, 1] and list(every["predicted_eligible"]) == [4, 3, 3, 0]
    assert every["best"].iloc[0] == "agg TP1 c10 bf16 (1 GPUs)"


def test_held_out_rows_are_ranked_among_themselves():
    """C and D (held out): floors 0 and √3200. At 0 the best is C (400) and so is the pick (500 against 100): a hit;
    at √3200 nothing is predicted fast enough."""
    held = rank(pd.DataFrame(GROUP)).query("scope == 'holdout'")
    assert list(held["outcome"]) == ["hit", "none"] and list(held["best_id"]) == ["C", "D"]
    table = summary_table(rank(pd.DataFrame(GROUP)))
    overall = table.loc[("all", "all")]
    assert (overall["groups"], overall["decisions"], overall["miss"], overall["too_slow"], overall["none"]) == (
        1, 4, 1, 1, 1)
    assert overall["hit_pct"] == 25.0 and overall["loss_median_pct"] == 20.0
    assert overall["random_pct"] == pytest.approx(round(100 * (1 / 4 + 1 / 3 + 1 / 2 + 1) / 4, 1))
    assert table.loc[("holdout", "all"), "hit_pct"] == 50.0
    assert ("all", "backend vllm") in table.index and ("all", "modes agg") in table.index


def test_an_aggregated_and_a_disaggregated_deployment_are_ranked_together():
    """One group, an aggregated row of 4 GPUs and a disaggregated one of 8 (LAYOUTS' last), 24 clients of 100
    prompt tokens and one output token each: measured 24 · 1000 / 100 ms = 240 tokens/s, 60 per GPU aggregated and
    30 disaggregated, both at 100 per user; predicted 40 and 60 per GPU. At the one floor (0) the best is the
    aggregated row and the pick the disaggregated one: a miss losing half."""
    agg = _row(id="A", model_path=MOE, batch_size=24, tp_size=4, moe_tp_size=4, silicon_ttft_ms=100.0,
               predicted_ttft_ms=150.0)
    disagg = _row(id="D", predicted_ttft_ms=50.0, **LAYOUTS[3][0])
    disagg.update(silicon_ttft_ms=100.0)
    decisions = rank(pd.DataFrame([agg, disagg]))
    every = decisions[decisions["scope"] == "all"]
    assert list(every["modes"]) == ["agg+disagg"] and list(every["outcome"]) == ["miss"]
    assert (every["best_id"].iloc[0], every["pick_id"].iloc[0]) == ("A", "D")
    assert every["loss"].iloc[0] == pytest.approx(0.5)
    assert every["pick"].iloc[0] == "disagg 2×TP2 + 1×TP1·DP4·EP4 c24 bf16 (8 GPUs)"


def test_cli_ranks_an_earlier_validate_output(tmp_path, capsys):
    validated, decisions = tmp_path / "val.csv", tmp_path / "rank.csv"
    pd.DataFrame(GROUP).to_csv(validated, index=False)
    assert main(["validate", "--ranking-from", str(validated), "--ranking", str(decisions)]) == 0
    out = capsys.readouterr().out
    assert "== ranking:" in out and "backend vllm" in out
    written = pd.read_csv(decisions)
    assert len(written) == 6 and list(written["outcome"][:4]) == ["miss", "hit", "too_slow", "none"]


def test_cli_ranking_needs_runs_and_a_validated_file(tmp_path, capsys):
    assert main(["validate", "--ranking"]) == 2
    assert "--ranking ranks benchmark runs: it needs --runs" in capsys.readouterr().err
    bare = tmp_path / "bare.csv"
    pd.DataFrame([{"id": "a"}]).to_csv(bare, index=False)
    assert main(["validate", "--ranking-from", str(bare)]) == 2
    assert "missing column(s)" in capsys.readouterr().err


def test_the_largest_batches_are_reported_apart_from_the_rest():
    """Clients 1-4 of one model on one GPU: the top quartile (clients >= the 0.75 quantile, 3.25) is the row of 4
    clients; its TPOT error 40% stands alone, the rest's median is that of 10, 20, 30%."""
    from simulator.fidelity.runs_report import load_table

    rows = [_row(id=f"r{c}", batch_size=c, predicted_tpot_ms=10.0 * (1 + error), tpot_error=error, ttft_error=0.0)
            for c, error in ((1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4))]
    table = load_table(pd.DataFrame(rows))
    top = table.loc[("h100_sxm", "fit", "top quartile of clients")]
    rest = table.loc[("h100_sxm", "fit", "rest")]
    assert (top["ok"], rest["ok"]) == (1, 3)
    assert top["tpot_median_pct"] == pytest.approx(40.0) and rest["tpot_median_pct"] == pytest.approx(20.0)
    assert top["tpot_bias_pct"] == pytest.approx(40.0)  # predicted 14 ms against 10 measured
