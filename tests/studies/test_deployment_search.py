"""``llmsim plan`` from flags: what it searches, what it writes, and that its experiments reproduce its rows."""

from __future__ import annotations

import pandas as pd
import pytest

from simulator.api import load, run
from simulator.cli import main

SMALL = ["plan", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--max-gpus", "2", "--isl", "500", "--osl", "50",
         "--ttft", "1000", "--tpot", "40", "--requests-per-user", "2", "--top", "1", "--quiet"]


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan")
    assert main([*SMALL, "--out", str(out)]) == 0
    return out


def test_every_deployment_within_the_budget_is_listed_once(small_plan):
    plan = pd.read_csv(small_plan / "plan.csv")
    agg = plan[plan["mode"] == "agg"]
    # TP1, TP2, PP2 on at most 2 GPUs (a dense model: no attention DP)
    assert sorted(zip(agg["tp"], agg["pp"], strict=True)) == [(1, 1), (1, 2), (2, 1)]
    disagg = plan[plan["mode"] == "disagg"]
    assert (disagg["gpus"] == disagg["workers"] * disagg["tp"] * disagg["pp"]
            + disagg["prefill_workers"] * disagg["prefill_tp"] * disagg["prefill_pp"]).all()
    assert (plan["gpus"] <= 2).all() and plan["deployment"].is_unique
    assert "capacity_rps_ci95" not in plan  # one seed: no interval claimed


def test_the_top_experiment_reproduces_its_row(small_plan):
    plan = pd.read_csv(small_plan / "plan.csv")
    best = plan.iloc[0]
    summary = run(load(str(small_plan / "top" / f"1-{best['mode']}.yaml"))).summary
    assert summary["output_throughput"] / best["gpus"] == pytest.approx(best["tokens_per_s_per_gpu"], rel=1e-12)
    assert summary["p90_ttft_ms"] <= 1000 and summary["p90_tpot_ms"] <= 40  # it meets the SLO it was chosen under
    assert plan["tokens_per_s_per_gpu"].dropna().is_monotonic_decreasing  # best first


def test_the_pareto_front_is_the_undominated_points(small_plan):
    pareto = pd.read_csv(small_plan / "pareto.csv")
    assert len(pareto) > 3
    for row in pareto.itertuples():
        dominated = ((pareto["tokens_per_s_per_gpu"] >= row.tokens_per_s_per_gpu)
                     & (pareto["tokens_per_s_per_user"] >= row.tokens_per_s_per_user)
                     & ((pareto["tokens_per_s_per_gpu"] > row.tokens_per_s_per_gpu)
                        | (pareto["tokens_per_s_per_user"] > row.tokens_per_s_per_user))).any()
        assert row.on_front == (not dominated)
    assert (small_plan / "report.html").read_text().count("<svg") == 1


def test_the_plan_is_the_same_serial_or_parallel(small_plan, tmp_path):
    assert main([*SMALL, "--out", str(tmp_path), "--jobs", "2"]) == 0
    for name in ("plan.csv", "pareto.csv"):
        assert (tmp_path / name).read_bytes() == (small_plan / name).read_bytes()


@pytest.mark.parametrize(("args", "message"), [
    (["plan", "--model", "llama-3-8b"], "give a plan FILE, or --gpu, --ttft, --tpot, --max-gpus (or --gpus)"),
    ([*SMALL[:15], "--workload", "azure-conv"], "--workload sets the lengths"),
    ([*SMALL, "--modes", "agg,mixed"], "--modes 'agg,mixed'"),
    (["plan", "experiments/sweeps/deployments.yaml", "--model", "x"], "--model is for a plan from flags"),
])
def test_a_bad_question_is_one_line_and_status_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_rate_to_serve_gets_the_fewest_units_confirmed_by_simulation(tmp_path):
    assert main([*SMALL, "--modes", "agg", "--rate", "120", "--price", "2", "--seeds", "2", "--out",
                 str(tmp_path)]) == 0
    plan = pd.read_csv(tmp_path / "plan.csv")
    top = plan[plan["capacity_rps"].notna()]
    assert len(top) == 1
    row = top.iloc[0]
    # the search starts at the units whose summed capacity covers the rate, and adds one at a time
    assert row["units_for_target"] >= -(-120 // row["capacity_rps"])
    assert row["gpus_for_target"] == row["units_for_target"] * row["gpus"]
    assert row["usd_per_hour_for_target"] == pytest.approx(2 * row["gpus_for_target"])
    assert row["capacity_rps_ci95"] >= 0  # two seeds: the mean and half its 95% interval


def test_several_engines_are_searched_side_by_side(tmp_path):
    args = [*SMALL, "--modes", "agg", "--engine", "vllm,sglang", "--out", str(tmp_path)]
    assert main(args) == 0
    plan = pd.read_csv(tmp_path / "plan.csv")
    # the same three shapes on each engine, each labelled with its engine
    assert sorted(plan["engine"]) == ["sglang"] * 3 + ["vllm"] * 3
    assert all(label.startswith(f"{engine} agg") for label, engine in zip(plan["deployment"], plan["engine"],
                                                                           strict=True))
    best = plan.iloc[0]
    config = load(str(tmp_path / "top" / "1-agg.yaml"))
    assert config.engine == best["engine"]  # the experiment (and its launch commands) are on the winning engine


def test_only_deployments_whose_bound_cannot_win_are_pruned(tmp_path):
    """Branch and bound: the analytic bound is an upper bound on what a simulated deployment sustains, and a
    deployment is pruned only when its bound is below the best one simulated."""
    args = [*SMALL, "--max-gpus", "8", "--modes", "agg", "--out", str(tmp_path)]
    assert main(args) == 0
    plan = pd.read_csv(tmp_path / "plan.csv")
    simulated = plan[plan["tokens_per_s_per_gpu"].notna()]
    pruned = plan[plan["status"].str.startswith("pruned: analytic bound")]
    assert len(pruned) and len(simulated) >= 4  # the first round runs whatever the bounds say
    assert (simulated["tokens_per_s_per_gpu"] <= simulated["bound_tokens_per_s_per_gpu"]).all()
    assert (pruned["bound_tokens_per_s_per_gpu"] < simulated["tokens_per_s_per_gpu"].max()).all()
