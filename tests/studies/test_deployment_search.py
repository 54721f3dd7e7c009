"""``llmsim plan`` from flags: what it searches, what it writes, and that its experiments reproduce its rows."""

from __future__ import annotations

import pandas as pd
import pytest

from simulator.api import load, run
from simulator.cli import main
from simulator.studies.deployment_search import PlanQuestion, plan_lengths
from simulator.studies.plan_workload import lengths_section

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
    ([*SMALL[:15], "--workload", "azure-conv"], "give the request shapes once: --isl/--osl, --workload or --trace "
                                                "(got --isl/--osl and --workload)"),
    ([*SMALL[:7], *SMALL[11:15], "--workload", "no/such.yaml"], "--workload no/such.yaml: file not found"),
    ([*SMALL[:7], *SMALL[11:15], "--trace", "no/such.csv"], "--trace: file not found: no/such.csv"),
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


def _trace(path, rows):
    """A processed trace of ``rows`` (arrival s, prompt tokens, output tokens)."""
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                    + "".join(f"{t},{i},{o}\n" for t, i, o in rows), encoding="utf-8")
    return str(path)


def test_a_trace_gives_the_lengths_and_its_own_rate_to_serve(tmp_path):
    """40 requests 0.25 s apart (a mean rate of 39 / 9.75 s = 4 req/s), prompts 400 and 600 and outputs 40 and 60
    alternating: the search runs on the trace's lengths, and the top deployment's units are confirmed by replaying
    the trace itself at its own times."""
    rows = [(0.25 * i, 400 if i % 2 else 600, 40 if i % 2 else 60) for i in range(40)]
    trace = _trace(tmp_path / "t.csv", rows)
    question = PlanQuestion("llama-3-8b", "h100-sxm", 1, 1000, 40, trace=trace)
    # the means of the alternating lengths, from 10,000 draws: within 3 standard errors (100 / sqrt(10,000) = 1)
    assert plan_lengths(question) == (pytest.approx(500, abs=3), pytest.approx(50, abs=1))
    assert question.target_rate == pytest.approx(4.0)
    section = lengths_section(None, trace)
    assert section["input_tokens"]["values"][0] == 400 and section["input_tokens"]["values"][-1] == 600
    assert main([*SMALL[:7], *SMALL[11:], "--trace", trace, "--modes", "agg", "--out", str(tmp_path / "p")]) == 0
    plan = pd.read_csv(tmp_path / "p" / "plan.csv")
    top = plan[plan["capacity_rps"].notna()].iloc[0]
    assert top["units_for_target"] >= 1 and top["gpus_for_target"] == top["units_for_target"] * top["gpus"]
    assert top["target_p90_ttft_ms"] <= 1000 and top["target_p90_tpot_ms"] <= 40  # the replay met the SLO


def test_a_workload_file_gives_the_shapes_and_the_planner_the_arrivals(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("workload:\n  arrival: {kind: poisson, rate: 1000}\n  num_requests: 7\n"
                    "  input_tokens: {kind: fixed, value: 320}\n  output_tokens: {kind: fixed, value: 32}\n",
                    encoding="utf-8")
    question = PlanQuestion("llama-3-8b", "h100-sxm", 1, 1000, 40, workload=str(path))
    assert plan_lengths(question) == (320, 32)
    assert lengths_section(str(path), None) == {"input_tokens": {"kind": "fixed", "value": 320},
                                                "output_tokens": {"kind": "fixed", "value": 32}}


@pytest.mark.parametrize(("content", "message"), [
    ("workload:\n  trace: {path: t.csv}\n", "its workload replays a trace; give the trace with --trace"),
    ("- 1\n- 2\n", "expected a workload section (a mapping, or a mapping with a workload: key), got list"),
    ("workload: [\n", "not YAML"),
])
def test_a_bad_workload_file_is_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "w.yaml"
    path.write_text(content, encoding="utf-8")
    assert main([*SMALL[:7], *SMALL[11:15], "--workload", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_trace_without_a_rate_is_one_line(tmp_path, capsys):
    trace = _trace(tmp_path / "t.csv", [(0, 100, 10), (0, 200, 20)])
    assert main([*SMALL[:7], *SMALL[11:15], "--trace", trace]) == 2
    err = capsys.readouterr().err
    assert "arrive at one instant, so it has no arrival rate to serve; give --rate or --users" in err


def test_token_budgets_are_searched_for_each_aggregated_unit(tmp_path):
    """``--token-budgets 128,8192``: each shape twice. A 500-token prompt in 128-token chunks takes four iterations
    before its first token where 8,192 takes one, so at the same users its TTFT cannot be lower; a budget below the
    engine's running-request limit (vLLM's 1,024) lowers that limit to it, as vLLM requires."""
    assert main([*SMALL, "--modes", "agg", "--token-budgets", "128,8192", "--keep", "12", "--out", str(tmp_path)]) == 0
    plan = pd.read_csv(tmp_path / "plan.csv")
    assert sorted(plan["token_budget"]) == [128] * 3 + [8192] * 3
    pareto = pd.read_csv(tmp_path / "pareto.csv")
    for shape in ("TP1 × PP1", "TP2 × PP1"):
        small, large = (pareto[pareto["deployment"] == f"agg 1 × ({shape}), {budget} tokens per step"]
                        for budget in ("128", "8,192"))
        both = small.merge(large, on="users", suffixes=("_small", "_large"))
        assert len(both) and (both["p90_ttft_ms_small"] >= both["p90_ttft_ms_large"]).all()
    best = plan.iloc[0]
    config = load(str(tmp_path / "top" / f"1-{best['mode']}.yaml"))
    assert config.scheduler.max_num_batched_tokens == best["token_budget"]
    assert config.scheduler.max_num_seqs <= best["token_budget"]


@pytest.mark.parametrize(("budgets", "message"), [
    ("x,2", "--token-budgets 'x,2': expected whole numbers of tokens separated by commas"),
    ("0", "--token-budgets 0: at most 8 budgets, each 1 to 1,048,576 tokens"),
    (",".join(str(2**i) for i in range(4, 14)), "at most 8 budgets"),
])
def test_bad_token_budgets_are_one_line(budgets, message, capsys):
    assert main([*SMALL, "--token-budgets", budgets]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.slow
def test_a_plan_on_ray_is_the_plan_on_local_processes(small_plan, tmp_path):
    """Byte-identical plan.csv and pareto.csv whether the simulations ran here or on a (local) Ray cluster."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert main([*SMALL, "--out", str(tmp_path), "--backend", "ray"]) == 0
    finally:
        ray.shutdown()
    for name in ("plan.csv", "pareto.csv"):
        assert (tmp_path / name).read_bytes() == (small_plan / name).read_bytes()


def test_the_energy_per_token_of_each_best_level_is_its_run_s(small_plan):
    """plan.csv's energy_j_per_output_token is the best level's (:mod:`simulator.results.energy`): the top
    experiment, run with its iteration bounds, gives it again."""
    plan = pd.read_csv(small_plan / "plan.csv")
    simulated = plan[plan["max_users"].notna()]
    assert (simulated["energy_j_per_output_token"] > 0).all()
    assert plan.loc[plan["max_users"].isna(), "energy_j_per_output_token"].isna().all()
    best = plan.iloc[0]
    config = load(str(small_plan / "top" / f"1-{best['mode']}.yaml"))
    config = config.model_copy(update={"metrics": config.metrics.model_copy(update={"iteration_bounds": True})})
    assert run(config).summary["energy_j_per_output_token"] == pytest.approx(best["energy_j_per_output_token"],
                                                                            rel=1e-12)
