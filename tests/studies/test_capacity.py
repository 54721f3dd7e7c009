"""``llmsim capacity`` over closed-loop users and a trace's speed-up: hand calculations, a brute-force scan, the
bracket, the bounds and the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from simulator import run
from simulator.cli import main
from simulator.config import load_experiment
from simulator.errors import ConfigError
from simulator.studies.capacity import ALL_AT_ONCE_S, capacity_over_seeds, find_capacity, search_knob
from simulator.workload import generate_requests
from tests.helpers import experiment

# linear costs (tests/helpers.py): a prefill iteration 2 ms + 0.1 ms per prompt token, a decode step 5 ms + 0.2 ms
# per decoding sequence
STEP_MS, PER_SEQ_MS = 5.0, 0.2


def lockstep(users: int = 4, num_requests: int = 400) -> dict:
    """Closed-loop users with fixed lengths and no think time: they prefill together, decode together (one step
    per token for all of them) and finish together, so every request's TPOT is one decode step of ``users``
    sequences, 5 + 0.2 × users ms (while they fit in max_num_seqs = 64 and their prompts in one iteration's 8,192
    tokens)."""
    return experiment(scheduler={"kind": "continuous", "max_num_seqs": 64, "max_model_len": 2048,
                                 "max_num_batched_tokens": 8192},
                      kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 4096},
                      workload={"num_requests": num_requests, "arrival": {"kind": "closed_loop", "users": users},
                                "input_tokens": {"kind": "fixed", "value": 100},
                                "output_tokens": {"kind": "fixed", "value": 20}})


@pytest.mark.parametrize("limit_ms", [8.1, 11.1])
def test_users_capacity_is_the_lockstep_decode_step_within_the_limit(limit_ms):
    """TPOT = 5 + 0.2 u ms ≤ limit ⇔ u ≤ (limit − 5) / 0.2: 15 users for 8.1 ms, 30 for 11.1 ms (below 1/tolerance
    = 50 users, so exact to one user)."""
    expected = int((limit_ms - STEP_MS) / PER_SEQ_MS)
    result = find_capacity(load_experiment(lockstep()), {"p99_tpot_ms": limit_ms})
    assert result.value == expected and result.missed == expected + 1 and result.unit == "users"
    assert result.summary["p99_tpot_ms"] == pytest.approx(STEP_MS + PER_SEQ_MS * expected)
    assert all(p.holds == (p.value <= expected) for p in result.probes)
    assert all(float(p.value).is_integer() for p in result.probes)
    assert [p.value for p in result.probes[:3]] == [4, 8, 16]  # doubling from the file's 4 users


def queueing() -> dict:
    """Four batch slots, mixed lengths: past four users requests queue, and TTFT grows with the users."""
    return experiment(scheduler={"kind": "continuous", "max_num_seqs": 4, "max_model_len": 2048},
                      workload={"num_requests": 48, "arrival": {"kind": "closed_loop", "users": 3},
                                "input_tokens": {"kind": "uniform", "min": 50, "max": 300},
                                "output_tokens": {"kind": "uniform", "min": 5, "max": 40}})


@pytest.mark.parametrize(("slo", "attainment"), [
    ({"p99_ttft_ms": 1000.0}, None),
    ({"p99_ttft_ms": 600.0, "mean_e2el_ms": 600.0}, None),
    ({"p99_ttft_ms": 500.0}, 0.9),  # 90% of requests within a 500 ms TTFT
])
def test_users_capacity_equals_a_brute_force_scan(slo, attainment):
    """Every user count from 1 to num_requests simulated, each held to the rule by hand: the SLO holds up to a
    count and fails beyond it (the monotone bracket the search assumes), and the search finds that count with a
    fraction of the runs, the same on a second search (one seed: deterministic)."""
    config = load_experiment(queueing())
    knob = search_knob(config)
    assert (knob.name, knob.start, knob.bound) == ("users", 3, 48)
    holds = []
    for users in range(1, 49):
        probe = knob.apply(config, users)
        if attainment is None:
            summary = run(probe).summary
            holds.append(all(summary[key] <= limit for key, limit in slo.items()))
        else:
            per_request = probe.model_copy(update={"slo": probe.slo.model_copy(update={"ttft_ms": slo["p99_ttft_ms"]})})
            holds.append(run(per_request).summary["slo_attainment"] >= attainment)
    best = sum(holds)
    assert 1 < best < 48 and holds == [True] * best + [False] * (48 - best)
    result = find_capacity(config, slo, attainment=attainment)
    assert result.value == best and len(result.probes) < 12
    again = find_capacity(config, slo, attainment=attainment)
    assert [(p.value, p.holds) for p in again.probes] == [(p.value, p.holds) for p in result.probes]


def fake(threshold: float, key: str = "workload.arrival.users"):
    """A server meeting the SLO up to ``threshold`` (users, a rate or a speed-up) and missing it beyond; records what
    was probed."""
    probed: list[float] = []

    def value_of(c) -> float:
        if key == "speedup":
            return c.workload.trace.speedup
        return c.workload.arrival.users if key.endswith("users") else c.workload.arrival.rate

    def run_(c):
        probed.append(value_of(c))
        ok = value_of(c) <= threshold
        return {"p99_ttft_ms": 100.0 if ok else 900.0, "request_goodput": 1.0, "output_throughput": 1.0,
                "num_gpus": 1}

    return run_, probed


def closed_loop(users: int, num_requests: int) -> dict:
    return experiment(workload={"num_requests": num_requests, "arrival": {"kind": "closed_loop", "users": users},
                                "input_tokens": {"kind": "fixed", "value": 10},
                                "output_tokens": {"kind": "fixed", "value": 2}})


@pytest.mark.parametrize(("threshold", "tolerance"), [(37, 0.02), (1, 0.02), (5_000, 0.02), (5_000, 0.0001)])
def test_users_bisection_is_exact_below_one_over_the_tolerance_and_relative_above(threshold, tolerance):
    """The final bracket [capacity, missed] has missed − capacity ≤ max(1, tolerance × missed): one user for 37
    users at 2% (below 50), about 2% of 5,000 at 2%, one user again at 0.01% (below 10,000)."""
    run_, probed = fake(threshold)
    result = find_capacity(load_experiment(closed_loop(8, 100_000)), {"p99_ttft_ms": 500.0}, tolerance=tolerance,
                           run=run_)
    assert result.value <= threshold < result.missed
    assert result.missed - result.value <= max(1.0, tolerance * result.missed)
    if threshold < 1 / tolerance:
        assert result.value == threshold
    assert all(float(value).is_integer() and 1 <= value <= 100_000 for value in probed)


def test_one_user_missing_the_slo_ends_the_search_with_no_capacity():
    run_, probed = fake(0)
    result = find_capacity(load_experiment(closed_loop(8, 50)), {"p99_ttft_ms": 500.0}, run=run_)
    assert result.idle_misses and result.summary is None and result.value == 0
    assert probed == [8, 4, 2, 1]


def test_users_stop_at_one_per_request_with_a_one_line_error(tmp_path, capsys):
    """Users beyond num_requests add no load (each user sends at least one of them): an SLO that still holds at 50
    users for 50 requests is an error naming the bound, reached by doubling from 3 (3, 6, …, 48, then 50), never
    beyond it."""
    run_, probed = fake(10**9)
    with pytest.raises(ConfigError, match="still holds with 50 users, one per request of the workload's 50"):
        find_capacity(load_experiment(closed_loop(3, 50)), {"p99_ttft_ms": 500.0}, run=run_)
    assert probed == [3, 6, 12, 24, 48, 50]
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(closed_loop(3, 12)))
    assert main(["capacity", str(path), "--slo", "p99_e2el_ms=1e9"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("llmsim: error:")]
    assert len(errors) == 1 and errors[0].endswith("give a larger workload.num_requests")


def test_a_rate_search_stops_where_every_request_arrives_within_a_millisecond():
    run_, probed = fake(10**12, key="rate")
    with pytest.raises(ConfigError, match=r"at 1e\+04 req/s, the workload's 10 requests arriving within 1 ms"):
        find_capacity(load_experiment(experiment(workload={
            "num_requests": 10, "arrival": {"kind": "poisson", "rate": 20.0},
            "input_tokens": {"kind": "fixed", "value": 10}, "output_tokens": {"kind": "fixed", "value": 2}})),
            {"p99_ttft_ms": 500.0}, run=run_)
    assert max(probed) == 10 / ALL_AT_ONCE_S


def test_capacity_over_seeds_searches_users_too():
    def seeded(c):  # a server whose capacity depends on the seed: 20 to 26 users
        ok = c.workload.arrival.users <= 20 + c.seed % 7
        return {"p99_ttft_ms": 100.0 if ok else 900.0}

    spread, results = capacity_over_seeds(load_experiment(closed_loop(8, 1000)), {"p99_ttft_ms": 500.0}, 3,
                                          run=seeded)
    assert spread.values == [20 + seed % 7 for seed in spread.seeds]
    assert spread.mean == pytest.approx(sum(spread.values) / 3) and all(r.unit == "users" for r in results)


def write_trace(path, gaps_s, input_tokens: int = 100, output_tokens: int = 1) -> None:
    times = np.concatenate([[0.0], np.cumsum(gaps_s)])
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                    + "".join(f"{float(t)!r},{input_tokens},{output_tokens}\n" for t in times))


def test_a_speedup_that_halves_every_gap_doubles_the_arrival_rate(tmp_path):
    """The arrival times of a trace replayed at speed-up 2 are those at 1 halved (irregular gaps), so its mean rate,
    (n − 1) / span, doubles."""
    path = tmp_path / "t.csv"
    write_trace(path, np.random.default_rng(3).exponential(0.5, 99))

    def arrivals(speedup: float) -> np.ndarray:
        config = load_experiment(experiment(workload={"trace": {"path": str(path), "speedup": speedup}}))
        return generate_requests(config.workload, np.random.SeedSequence(1)).arrival_s

    slow, fast = arrivals(1.0), arrivals(2.0)
    assert fast == pytest.approx(slow / 2) and np.diff(fast) == pytest.approx(np.diff(slow) / 2)
    assert (len(fast) - 1) / fast[-1] == pytest.approx(2 * (len(slow) - 1) / slow[-1])


def single_slot_trace(tmp_path, requests: int = 200, gap_s: float = 0.1) -> dict:
    """Evenly spaced requests into one slot serving each in S = 2 + 100 × 0.1 = 12 ms (one prompt of 100 tokens,
    one output token): replayed at speed-up s the gap is 100/s ms, so nothing waits while s ≤ 100/12."""
    path = tmp_path / "even.csv"
    write_trace(path, [gap_s] * (requests - 1))
    return experiment(scheduler={"kind": "static", "max_num_seqs": 1, "max_model_len": 2048},
                      workload={"trace": {"path": str(path)}})


def test_speedup_capacity_of_an_evenly_spaced_trace_into_one_slot(tmp_path):
    """D/D/1: at speed-up s > 100/12 request k waits k (12 − 100/s) ms. p99 of 200 TTFTs (numpy's interpolation:
    rank 0.99 × 199 = 197.01) stays within 12.5 ms while 197.01 (12 − 100/s) ≤ 0.5, i.e. s ≤ 100 / (12 − 0.5 /
    197.01) = 8.3351; the search (0.1% tolerance) lands just below."""
    config = load_experiment(single_slot_trace(tmp_path))
    knob = search_knob(config)
    assert (knob.name, knob.unit, knob.start) == ("speedup", "x trace speed", 1.0)
    assert knob.trace_rate == pytest.approx(10.0) and knob.bound == pytest.approx(19.9 / ALL_AT_ONCE_S)
    threshold = 100 / (12 - 0.5 / 197.01)
    result = find_capacity(config, {"p99_ttft_ms": 12.5}, tolerance=0.001)
    assert threshold * 0.998 <= result.value <= threshold < result.missed
    assert all(p.holds == (p.value <= threshold) for p in result.probes)


def test_a_speedup_search_is_bounded_by_the_trace_arriving_at_once(tmp_path, capsys):
    config = load_experiment(single_slot_trace(tmp_path, requests=20))
    run_, probed = fake(1e12, key="speedup")
    with pytest.raises(ConfigError, match=r"still holds with the trace 1900x faster, its 20 requests"):
        find_capacity(config, {"p99_ttft_ms": 500.0}, run=run_)
    assert max(probed) == pytest.approx(1.9 / ALL_AT_ONCE_S) and len(probed) == 12  # 1, 2, …, 1024, then the bound


@pytest.mark.parametrize(("workload", "message"), [
    ({"duration_s": 10, "arrival": {"kind": "poisson", "rate": 5}, "input_tokens": {"kind": "fixed", "value": 5},
      "output_tokens": {"kind": "fixed", "value": 5}}, "a duration_s workload sends more requests the higher the rate"),
    ({"num_requests": 5, "arrival": {"kind": "piecewise", "rates": [[0, 5]]},
      "input_tokens": {"kind": "fixed", "value": 5}, "output_tokens": {"kind": "fixed", "value": 5}},
     "needs an arrival with a rate (poisson, gamma, constant, onoff) or a mean_rate (diurnal, piecewise), "
     "closed-loop users (closed_loop) or a trace's speed-up, not arrival kind 'piecewise' without mean_rate"),
    ({"trace": {"path": "same.csv"}}, "the trace's 3 requests all arrive at the same time"),
])
def test_a_workload_with_nothing_to_search_is_one_line(workload, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "same.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "1.0,10,5\n" * 3)
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(experiment(workload=workload)))
    assert main(["capacity", str(path), "--slo", "p99_ttft_ms=500"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_the_command_names_users_in_its_lines_json_and_report(tmp_path, capsys):
    path, report = tmp_path / "e.yaml", tmp_path / "c.html"
    path.write_text(yaml.safe_dump(lockstep()))
    assert main(["capacity", str(path), "--slo", "p99_tpot_ms=8.1", "--report", str(report)]) == 0
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert "the users start together (ramp_s 0)" in captured.err  # lock-step is what this file asks for
    assert out[2].endswith("; the search varies the number of users")
    assert "capacity: 15 users meets p99_tpot_ms <= 8.1 (16 users miss it)" in out
    page = report.read_text()
    assert "capacity: 15 users meets" in page and "closed-loop users" in page  # the probes' axis
    assert main(["capacity", str(path), "--slo", "p99_tpot_ms=8.1", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert (found["searched"], found["unit"], found["users"]) == ("users", "users", 15)
    assert [p["users"] for p in found["probes"]] == [4, 8, 16, 12, 14, 15]
    assert all(p["meets"] == (p["p99_tpot_ms"] <= 8.1) for p in found["probes"])


def test_the_command_states_a_speedup_and_the_rate_it_means(tmp_path, capsys):
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(single_slot_trace(tmp_path)))
    assert main(["capacity", str(path), "--slo", "p99_ttft_ms=12.5", "--tolerance", "0.01"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("capacity:"))
    speedup = float(line.split()[1])
    assert line.startswith(f"capacity: {speedup:.4g} x trace speed meets p99_ttft_ms <= 12.5")
    assert f"the trace's mean arrival rate {10 * speedup:.4g} req/s" in out
    assert "the search varies the trace's speed-up" in out


def test_a_time_varying_arrival_is_searched_over_its_mean_rate():
    """A piecewise shape with ``mean_rate`` 4 (and a diurnal one, mean_rate 4): the search varies the mean rate, the
    shape kept — a server meeting the SLO up to 10 req/s on average is found within 2% (4, 8, 16, then bisection),
    and every probe's rates are the shape times mean_rate / 1.5 (the shape's time-average: (1·100 + 4·50 + 0·50)
    / 200)."""
    shape = {"kind": "piecewise", "rates": [[0, 1.0], [100, 4.0], [150, 0.0]], "period_s": 200, "mean_rate": 4}
    for arrival in (shape, {"kind": "diurnal", "mean_rate": 4}):
        config = load_experiment(experiment(workload={
            "num_requests": 50, "arrival": arrival, "input_tokens": {"kind": "fixed", "value": 10},
            "output_tokens": {"kind": "fixed", "value": 2}}))
        knob = search_knob(config)
        assert (knob.name, knob.field, knob.start) == ("rate", "mean_rate", 4)
        probed: list[float] = []

        def run_(c, probed=probed):
            probed.append(c.workload.arrival.mean_rate)
            if c.workload.arrival.kind == "piecewise":
                assert c.workload.arrival.scaled_rates() == pytest.approx(
                    [probed[-1] / 1.5, 4 * probed[-1] / 1.5, 0.0])
            ok = probed[-1] <= 10
            return {"p99_ttft_ms": 100.0 if ok else 900.0, "request_goodput": 1.0, "output_throughput": 1.0,
                    "num_gpus": 1}

        result = find_capacity(config, {"p99_ttft_ms": 500.0}, run=run_)
        assert probed[:3] == [4, 8, 16] and 10 * 0.98 <= result.value <= 10


def test_capacity_holds_the_presets_slo_without_an_slo_of_its_own(tmp_path, capsys):
    """No --slo: an MLPerf preset's Server limits (p99 TTFT 6,000 ms, p99 TPOT 175 ms for Llama-3.1-405B) are the
    SLO, said as such; a workload whose preset states none (or no preset) still needs --slo, in one line."""
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(experiment(workload={"preset": "mlperf-llama3.1-405b", "num_requests": 50})))
    assert main(["capacity", str(path), "--tolerance", "0.5", "--json"]) in (0, 1)  # 1: even idle misses it
    assert json.loads(capsys.readouterr().out)["slo"] == {"p99_ttft_ms": 6000, "p99_tpot_ms": 175}
    path.write_text(yaml.safe_dump(experiment(workload={"preset": "azure-conv", "num_requests": 50})))
    assert main(["capacity", str(path)]) == 2
    err = capsys.readouterr().err
    assert "give at least one --slo METRIC=LIMIT (or a workload preset that states an slo)" in err
    assert err.count("\n") == 1
