"""Sweeps (expansion, storage, resume, failures, backends) and capacity search against queueing theory."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
import yaml

import simulator
from simulator.cli import main
from simulator.config import load_experiment
from simulator.config.slo import normalise_slo_key
from simulator.errors import ConfigError
from simulator.studies.capacity import find_capacity
from simulator.studies.plan import load_plan, run_plan
from simulator.studies.sweep import load_sweep, run_points
from tests.helpers import experiment


def _sweep_file(tmp_path, **spec):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": experiment(), **spec}))
    return path


def test_grid_zip_and_replicates_expand_in_a_fixed_order(tmp_path):
    points = load_sweep(_sweep_file(
        tmp_path, grid={"workload.arrival.rate": {"start": 10, "last": 30, "step": 10}},
        zip={"scheduler.max_num_seqs": [4, 8], "workload.num_requests": [20, 30]}, replicates=2,
    ))
    assert len(points) == 3 * 2 * 2
    assert points[0].values == {"workload.arrival.rate": 10, "scheduler.max_num_seqs": 4, "workload.num_requests": 20}
    assert points[0].config.workload.arrival.rate == 10 and points[3].config.scheduler.max_num_seqs == 8
    assert points[0].seed != points[1].seed and points[0].seed == points[2].seed  # replicates spawn seeds


@pytest.mark.parametrize(("spec", "message"), [
    ({"grid": {"workload.arrival.rate": []}}, "grid.workload.arrival.rate: empty axis"),
    ({"grid": {"scheduler.max_num_sequences": [4]}}, "scheduler.max_num_sequences: unknown key"),
    ({"zip": {"seed": [1, 2], "workload.num_requests": [3]}}, "zip axes must have equal lengths"),
    ({"grid": {"workload.arrival.rate": [-1]}},
     "point workload.arrival.rate=-1: workload.arrival.rate: must be >= 1e-06"),
    ({"gird": {}}, "gird: unknown key"),
])
def test_bad_sweeps_fail_before_anything_runs(tmp_path, spec, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_sweep(_sweep_file(tmp_path, **spec))


def test_sweep_stores_points_resumes_and_records_failures(tmp_path):
    points = load_sweep(_sweep_file(tmp_path, grid={"workload.arrival.rate": [10, 20]},
                                    zip={"model": ["llama-3-8b", "llama-3-70b"],  # 70B does not fit one H100
                                         "kv_cache": [experiment()["kv_cache"], {"kind": "paged"}]}))
    out = tmp_path / "out"
    frame = run_points(points, out, jobs=2)
    assert list(frame["error"] == "") == [True, False, True, False]
    assert frame["error"].iloc[1].startswith("MemoryShortError: llama-3-70b on h100-sxm")  # the error's own class
    assert (out / "point-00001" / "error.txt").is_file()
    index = pd.read_parquet(out / "index.parquet")
    assert list(index["point"]) == [0, 1, 2, 3] and index["completed"].iloc[0] == 50
    summary = json.loads((out / "point-00000" / "summary.json").read_text())
    assert pd.read_parquet(out / "point-00000" / "requests.parquet").shape[0] == summary["num_requests"]
    # a rerun keeps finished points (even if their result were different) and redoes only the missing one
    (out / "point-00000" / "summary.json").write_text(json.dumps({**summary, "completed": -1}))
    for leftover in (out / "point-00002").iterdir():
        leftover.unlink()
    (out / "point-00002").rmdir()
    again = run_points(points, out)
    assert again["completed"].iloc[0] == -1 and again["completed"].iloc[2] == 50


def test_sweep_api_is_deterministic_across_jobs():
    grid = {"workload.arrival.rate": [5, 40]}
    serial = simulator.sweep(experiment(), grid, replicates=2, jobs=1)
    parallel = simulator.sweep(experiment(), grid, replicates=2, jobs=2)
    pd.testing.assert_frame_equal(serial, parallel)
    assert serial["mean_ttft_ms"].iloc[3] > serial["mean_ttft_ms"].iloc[0]  # 40/s queues more than 5/s


@pytest.mark.slow
def test_ray_backend_gives_the_same_results(tmp_path):
    """Byte-identical outputs: the index, every point's summary and request table."""
    ray = pytest.importorskip("ray")
    points = load_sweep(_sweep_file(tmp_path, grid={"workload.arrival.rate": [5, 40]}))
    local = run_points(points, tmp_path / "local", jobs=1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = run_points(points, tmp_path / "ray", backend="ray")
    finally:
        ray.shutdown()
    pd.testing.assert_frame_equal(local, remote)
    for name in ("index.parquet", "point-00000/summary.json", "point-00001/summary.json",
                 "point-00001/requests.parquet"):
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "ray" / name).read_bytes(), name


def test_sweep_command(tmp_path, capsys):
    path = _sweep_file(tmp_path, grid={"workload.arrival.rate": [5, 10]})
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    assert "2 points, 0 failed" in capsys.readouterr().err


def test_sweep_set_overrides_the_base_under_the_grid(tmp_path, capsys):
    """``--set`` changes the base experiment (here its model and request count); the grid still varies the rate;
    a bad override is one line naming it."""
    path = _sweep_file(tmp_path, grid={"workload.arrival.rate": [5, 10]})
    points = load_sweep(path, ["model=mistral-7b", "workload.num_requests=7"])
    assert [(p.config.model, p.config.workload.num_requests, p.values["workload.arrival.rate"]) for p in points] == [
        ("mistral-7b", 7, 5), ("mistral-7b", 7, 10)]
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--set", "seed"]) == 2
    assert "base: --set 'seed': expected dotted.key=value" in capsys.readouterr().err


@pytest.mark.parametrize(("key", "normal"), [("ttft_p99_ms", "p99_ttft_ms"), ("p99_ttft_ms", "p99_ttft_ms"),
                                               ("e2el_mean_ms", "mean_e2el_ms")])
def test_slo_keys_in_either_order(key, normal):
    assert normalise_slo_key(key) == normal


@pytest.mark.slow
def test_capacity_of_a_single_server_matches_pollaczek_khinchine():
    """One slot, service S = 2 + 100 × 0.1 = 12 ms per one-token request, Poisson arrivals: mean TTFT = S + W with
    W = ρS / (2(1 − ρ)) (M/D/1). A 30 ms mean-TTFT limit gives ρ = 0.75, so the capacity is 0.75 / S = 62.5 req/s."""
    config = load_experiment(experiment(
        scheduler={"kind": "static", "max_num_seqs": 1},
        workload={"num_requests": 40_000, "arrival": {"kind": "poisson", "rate": 20.0},
                  "input_tokens": {"kind": "fixed", "value": 100}, "output_tokens": {"kind": "fixed", "value": 1}},
    ))
    result = find_capacity(config, {"mean_ttft_ms": 30.0}, tolerance=0.01)
    assert result.rate == pytest.approx(62.5, rel=0.04)
    assert result.summary["mean_ttft_ms"] <= 30.0
    assert all(p.holds == (p.rate <= result.rate) for p in result.probes)


def test_capacity_command_reports_rate_goodput_and_tokens_per_gpu(tmp_path, capsys):
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(experiment()))
    assert main(["capacity", str(path), "--slo", "p99_ttft_ms=200"]) == 0
    out = capsys.readouterr().out
    assert "capacity:" in out and "output tok/s per GPU" in out
    with pytest.raises(ConfigError, match="needs an arrival with a rate"):  # piecewise rates without a mean_rate
        find_capacity(load_experiment(experiment(workload={"num_requests": 5, "arrival": {
            "kind": "piecewise", "rates": [[0, 2]]}, "input_tokens": {"kind": "fixed", "value": 5},
            "output_tokens": {"kind": "fixed", "value": 5}})), {"p99_ttft_ms": 1.0})


def test_plan_ranks_deployments_by_requests_per_dollar_and_marks_the_pareto_front(tmp_path):
    base = experiment(model="llama-3-8b", cost_model={"kind": "roofline"}, kv_cache={"kind": "paged"},
                      workload={"num_requests": 300, "arrival": {"kind": "poisson", "rate": 5.0},
                                "input_tokens": {"kind": "fixed", "value": 500},
                                "output_tokens": {"kind": "fixed", "value": 100}})
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({
        "base": base, "grid": {"hardware": ["a100-80gb-sxm", "h100-sxm"]}, "slo": {"ttft_p99_ms": 300},
        "prices": {"a100-80gb-sxm": 1.0, "h100-sxm": 100.0}, "tolerance": 0.05,
    }))
    spec, points = load_plan(path)
    frame = run_plan(spec, points)
    by_hw = frame.set_index("hardware")
    assert by_hw.loc["h100-sxm", "capacity_rps"] > by_hw.loc["a100-80gb-sxm", "capacity_rps"]
    # at 100× the price the H100 cannot win on cost: the A100 ranks first
    assert frame["hardware"].iloc[0] == "a100-80gb-sxm"
    assert by_hw.loc["a100-80gb-sxm", "requests_per_usd"] == pytest.approx(
        by_hw.loc["a100-80gb-sxm", "capacity_rps"] * 3600 / 1.0)
    assert by_hw.loc["a100-80gb-sxm", "pareto"]  # cheapest; the H100 stays on the front only if faster
    assert main(["plan", str(path), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "pareto.png").is_file()


def test_a_resumed_sweep_reruns_points_whose_config_changed(tmp_path):
    """Results are reused only for a point whose resolved config is the same: a changed base (here num_requests)
    reruns every point instead of relabelling the old results."""
    out = tmp_path / "out"
    first = run_points(load_sweep(_sweep_file(tmp_path, grid={"seed": [1, 2]})), out)
    assert list(first["completed"]) == [50, 50]
    changed = experiment()
    changed["workload"]["num_requests"] = 30
    path = tmp_path / "changed.yaml"
    path.write_text(yaml.safe_dump({"base": changed, "grid": {"seed": [1, 2]}}))
    second = run_points(load_sweep(path), out)
    assert list(second["completed"]) == [30, 30]


def test_sweeps_are_byte_identical_serial_and_parallel_whatever_the_blas_threads(tmp_path, monkeypatch):
    points = load_sweep(_sweep_file(tmp_path, grid={"workload.arrival.rate": [5, 40]}))
    run_points(points, tmp_path / "serial", jobs=1)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")  # the workers' reductions must not follow the thread count
    run_points(points, tmp_path / "parallel", jobs=2)
    for name in ("index.parquet", "point-00000/summary.json", "point-00001/summary.json",
                 "point-00001/requests.parquet"):
        assert (tmp_path / "serial" / name).read_bytes() == (tmp_path / "parallel" / name).read_bytes(), name


def test_index_columns_keep_their_order_after_a_resume(tmp_path):
    points = load_sweep(_sweep_file(tmp_path, grid={"seed": [1, 2]}))
    out = tmp_path / "out"
    run_points(points, out)
    first = pd.read_parquet(out / "index.parquet")
    resumed = run_points(points, out)  # every point read back from its summary.json
    assert list(resumed.columns) == list(first.columns) == list(pd.read_parquet(out / "index.parquet").columns)
    assert list(first.columns[:3]) == ["point", "seed", "error"]


def test_a_resumed_sweep_writes_the_same_index_bytes(tmp_path):
    """A sweep resumed with every point, or all but one, already finished writes the index a fresh sweep writes:
    every row states its point's summary.json, whether the point ran now or before."""
    import shutil

    points = load_sweep(_sweep_file(tmp_path, grid={"seed": [1, 2, 3]}))
    out = tmp_path / "out"
    run_points(points, out)
    fresh = (out / "index.parquet").read_bytes()
    run_points(points, out)
    assert (out / "index.parquet").read_bytes() == fresh
    shutil.rmtree(out / points[1].name)
    run_points(points, out)
    assert (out / "index.parquet").read_bytes() == fresh


def test_a_worker_whose_sweep_process_is_gone_writes_nothing(tmp_path):
    """After kill -9 of ``sweep --jobs N`` its workers live on (parent PID 1); they must not rename points into a
    folder that a rerun is using."""
    from simulator.studies.sweep import Orphaned, run_point

    point = load_sweep(_sweep_file(tmp_path, grid={"seed": [1]}))[0]
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(Orphaned):
        run_point(point, out, parent_pid=-1)  # not this process's parent: as if the sweep had died
    assert list(out.iterdir()) == []
    assert run_point(point, out, parent_pid=os.getppid())["error"] == ""  # the live parent: runs as usual
    assert (out / "point-00000" / "summary.json").is_file()


def test_capacity_says_when_even_an_idle_server_misses_the_slo():
    """A server whose p99 TTFT is 100 ms at any rate never meets 50 ms: the search stops once the rate is 1/1024 of
    the start (10 halvings: 11 probes, not 40 down to 1e-11 req/s) and says an idle server misses it."""
    config = load_experiment(experiment(cost_model={"kind": "roofline"}))
    rates = []

    def run(c):
        rates.append(c.workload.arrival.rate)
        return {"p99_ttft_ms": 100.0, "request_goodput": 0.0, "output_throughput": 0.0, "num_gpus": 1}

    result = find_capacity(config, {"p99_ttft_ms": 50.0}, run=run)
    assert result.idle_misses and result.summary is None
    start = config.workload.arrival.rate
    assert rates == [start / 2**i for i in range(11)]


def test_capacity_over_seeds_reports_the_mean_and_a_t_interval():
    """Each seed's capacity (a fake server whose SLO holds up to a seed-dependent rate) is found to the bisection
    tolerance; the spread is their mean ± t(0.975, 3) = 3.182 × s/√4, s the sample standard deviation."""
    from simulator.studies.capacity import capacity_over_seeds

    config = load_experiment(experiment(workload={"num_requests": 10, "arrival": {"kind": "poisson", "rate": 8.0},
                                                  "input_tokens": {"kind": "fixed", "value": 10},
                                                  "output_tokens": {"kind": "fixed", "value": 2}}))

    def capacity_of(seed: int) -> float:
        return 10.0 + seed % 7

    def fake_run(c):
        return {"p99_ttft_ms": 100.0 if c.workload.arrival.rate <= capacity_of(c.seed) else 900.0}

    spread, results = capacity_over_seeds(config, {"p99_ttft_ms": 500.0}, 4, run=fake_run, tolerance=0.001)
    assert len(set(spread.seeds)) == 4 and all(r.summary is not None for r in results)
    for seed, rate in zip(spread.seeds, spread.rates, strict=True):
        assert rate == pytest.approx(capacity_of(seed), rel=0.002) and rate <= capacity_of(seed)
    true = [capacity_of(seed) for seed in spread.seeds]
    mean = sum(true) / 4
    s = (sum((x - mean) ** 2 for x in true) / 3) ** 0.5
    assert spread.mean == pytest.approx(mean, rel=0.002)
    assert spread.half_width == pytest.approx(3.182 * s / 2, rel=0.01, abs=0.02)


def test_a_sweep_over_a_loaded_experiment_equals_one_over_its_file():
    """``simulator.sweep(simulator.load(path), grid)``, as a notebook writes it, runs the same points as the path."""
    loaded = simulator.sweep(simulator.load("experiments/quickstart.yaml", workload__num_requests=40),
                             {"workload.arrival.rate": [4, 8]})
    by_path = simulator.sweep("experiments/quickstart.yaml", {"workload.arrival.rate": [4, 8],
                                                              "workload.num_requests": [40]})
    assert loaded["p99_ttft_ms"].tolist() == by_path["p99_ttft_ms"].tolist()
    assert loaded["completed"].tolist() == [40, 40]
