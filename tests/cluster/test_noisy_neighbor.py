"""The noisy_neighbor fault: while it lasts, each iteration's compute-limited part takes 1 / (1 − compute_share)
times as long and its memory-limited part 1 / (1 − bandwidth_share), its fixed part the same
(simulator.cost.work.contended, on the split of simulator.cost.work)."""

from __future__ import annotations

import pytest

import simulator
from simulator.catalog import load_engine, load_hardware, load_model
from simulator.config import load_experiment
from simulator.cost import IterationShape, RooflineCostModel
from simulator.cost.work import Work, contended
from simulator.errors import ConfigError
from tests.helpers import experiment, same_summaries


def test_contended_stretches_each_part_by_the_rate_left():
    """Half the bandwidth doubles the memory part; a third of the FLOP rate taken stretches compute by 3/2; the
    fixed part, the FLOPs and the bytes stay."""
    work = Work(flops=10.0, hbm_bytes=20.0, compute_s=1.0, memory_s=2.0, fixed_s=3.0)
    assert contended(work, 0.0, 0.5) == Work(10.0, 20.0, 1.0, 4.0, 3.0)
    assert contended(work, 1 / 3, 0.0) == pytest.approx(Work(10.0, 20.0, 1.5, 2.0, 3.0))


def _two_requests(faults, **cluster):
    """One request at 0 s, one at 5 s (1,000 prompt tokens, 33 out), alone on one H100 (roofline, ideal engine)."""
    return experiment(cost_model={"kind": "roofline"}, engine="ideal", cluster={"faults": faults, **cluster},
                      workload={"num_requests": 2, "arrival": {"kind": "constant", "rate": 0.2},
                                "input_tokens": {"kind": "fixed", "value": 1000},
                                "output_tokens": {"kind": "fixed", "value": 33}})


NEIGHBOUR = {"kind": "noisy_neighbor", "replica": 0, "at_s": 0.0, "duration_s": 2.0, "bandwidth_share": 0.5}


def test_half_the_bandwidth_doubles_the_memory_part_only_inside_the_window():
    """The first request runs inside [0, 2 s): its prefill takes t + m (the prefill's memory part again) and each
    of its 32 decode steps, with context sum S = 1000 + j, a + c·S + m0 + m1·S (w0 + w1·S the step's work); the
    second, at 5 s, runs as without the neighbour."""
    rows = simulator.run(load_experiment(_two_requests([NEIGHBOUR]))).requests.sort_values("request_id")
    alone = simulator.run(load_experiment(_two_requests([]))).requests.sort_values("request_id")
    cost = RooflineCostModel(load_model("llama-3-8b"), load_hardware("h100-sxm"), engine=load_engine("ideal"))
    prefill = cost.iteration_work(IterationShape(prefill_chunks=((1000, 0),)))
    (a, c), (w0, w1) = cost.decode_step_coefficients(1), cost.decode_step_work(1)
    decode = sum(a + c * s + w0.memory_s + w1.memory_s * s for s in range(1001, 1033))
    first, second = rows.iloc[0], rows.iloc[1]
    assert first["ttft_ms"] / 1000 == pytest.approx(prefill.seconds + prefill.memory_s, rel=1e-9)
    assert (first["e2el_ms"] - first["ttft_ms"]) / 1000 == pytest.approx(decode, rel=1e-9)
    assert first["e2el_ms"] > alone.iloc[0]["e2el_ms"]
    assert (second["ttft_ms"], second["e2el_ms"]) == (alone.iloc[1]["ttft_ms"], alone.iloc[1]["e2el_ms"])


def test_a_neighbour_that_takes_nothing_changes_nothing_and_runs_repeat():
    """Shares of 0 leave every time as it was (to rounding: the window's ends cut a decode run in two, whose
    closed-form sums round differently)."""
    idle = dict(NEIGHBOUR, bandwidth_share=0.0)
    rows = simulator.run(load_experiment(_two_requests([idle]))).requests.sort_values("request_id")
    alone = simulator.run(load_experiment(_two_requests([]))).requests.sort_values("request_id")
    assert rows["e2el_ms"].tolist() == pytest.approx(alone["e2el_ms"].tolist(), rel=1e-12)
    config = load_experiment(_two_requests([dict(NEIGHBOUR, compute_share=0.3)]))
    assert same_summaries(simulator.run(config).summary, simulator.run(config).summary)


@pytest.mark.parametrize("fault, message", [
    (dict(NEIGHBOUR, bandwidth_share=1.0), "bandwidth_share"),
    (dict(NEIGHBOUR, compute_share=-0.1), "compute_share"),
])
def test_shares_outside_zero_to_one_are_refused(fault, message):
    with pytest.raises(ConfigError, match=message):
        load_experiment(_two_requests([fault]))


def test_a_cost_model_without_the_split_is_refused():
    config = _two_requests([NEIGHBOUR]) | {"cost_model": experiment()["cost_model"]}
    with pytest.raises(ConfigError, match="noisy_neighbor needs a cost model that splits an iteration"):
        simulator.run(load_experiment(config))
