"""MIG slices (simulator.catalog.mig): NVIDIA's profile names, a slice's spec sheet, and what a step costs on one,
against the MIG user guide's lists and hand calculations."""

from __future__ import annotations

import pytest

import simulator
from simulator.catalog import load_engine, load_hardware, load_model
from simulator.catalog.mig import mig_profiles, mig_slice
from simulator.config import load_experiment
from simulator.cost import IterationShape, RooflineCostModel
from simulator.errors import ConfigError, LLMSimError
from tests.helpers import experiment, same_summaries

# https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html
NVIDIA_PROFILES = {
    "h100-sxm": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "h200-sxm": ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
    "b200": ["1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"],
    "a100-40gb-sxm": ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
}
MIG_GPUS = ["a100-40gb-sxm", "a100-80gb-pcie", "a100-80gb-sxm", "h100-pcie", "h100-sxm", "h200-sxm", "b200", "b300",
            "gb200", "gb300"]


@pytest.mark.parametrize("gpu, names", NVIDIA_PROFILES.items())
def test_profile_names_are_nvidias(gpu, names):
    """m/8 of the memory rounded half up: 141/8 = 17.625 → 18, 141·4/8 = 70.5 → 71, 180/8 = 22.5 → 23."""
    assert list(mig_profiles(load_hardware(gpu))) == names


def test_the_mig_gpus_say_so_and_the_others_do_not():
    assert all(load_hardware(gpu).mig_instances == 7 for gpu in MIG_GPUS)
    assert mig_profiles(load_hardware("l40s")) == {}


def test_a_1g_slice_of_an_h100_by_hand():
    """1/7 of 132 SMs (18 whole) and of 989.4 / 1978.9 TFLOP/s; 1/8 of 80 GiB and of 3,350 GB/s; no NVLink; the
    fitted efficiencies the whole GPU's."""
    gpu = load_hardware("h100-sxm")
    one = mig_slice(gpu, "1g.10gb")
    assert one.sm_count == 18
    assert one.peak_tflops.bf16 == pytest.approx(989.4 / 7) and one.peak_tflops.fp8 == pytest.approx(1978.9 / 7)
    assert one.sfu_exp_tera_per_s == pytest.approx(3.9 / 7)
    assert (one.memory_gib, one.memory_bandwidth_gb_per_s) == (10.0, 3350 / 8)
    assert one.interconnect_gb_per_s == 0 and one.node.gpus_per_node == 7 * 8  # seven slices of each of 8 GPUs
    assert one.fit == gpu.fit
    assert (one.mig.compute_sevenths, one.mig.memory_eighths, one.name) == (1, 1, "h100-sxm/1g.10gb")
    assert one.achievable_bandwidth == pytest.approx(gpu.achievable_bandwidth / 8)


def test_a_gpu_holds_the_slices_nvidia_lists():
    """Seven 1g.10gb, four 1g.20gb, three 2g.20gb, two 3g.40gb, one 4g.40gb or one 7g.80gb per H100."""
    gpu = load_hardware("h100-sxm")
    per_gpu = [mig_slice(gpu, name).node.gpus_per_node // 8 for name in mig_profiles(gpu)]
    assert per_gpu == [7, 4, 3, 2, 1, 1]


def _work(gpu, shape):
    return RooflineCostModel(load_model("llama-3-8b"), gpu, engine=load_engine("ideal")).iteration_work(shape)


def test_a_memory_bound_decode_step_on_3g_takes_twice_the_memory_part():
    """4/8 of the bandwidth: every byte takes twice as long, so the step's memory part doubles (to the smooth
    maximum's share, 1%), and its time is the full GPU's plus that part again, within its fixed part (the decode
    kernels' blocks and waves change with the SMs; compute is 1% of the step)."""
    gpu = load_hardware("h100-sxm")
    shape = IterationShape(num_decodes=1, decode_context_sum=1000)
    full, three = _work(gpu, shape), _work(mig_slice(gpu, "3g.40gb"), shape)
    assert full.bound == three.bound == "memory"
    assert three.hbm_bytes == full.hbm_bytes
    assert three.memory_s == pytest.approx(2 * full.memory_s, rel=0.01)
    assert abs(three.seconds - (full.seconds + full.memory_s)) <= full.fixed_s


def test_a_compute_bound_prefill_on_3g_takes_seven_thirds_of_the_compute_part():
    gpu = load_hardware("h100-sxm")
    shape = IterationShape(prefill_chunks=((4096, 0),))
    full, three = _work(gpu, shape), _work(mig_slice(gpu, "3g.40gb"), shape)
    assert full.bound == three.bound == "compute"
    assert three.flops == full.flops
    assert three.compute_s == pytest.approx(7 / 3 * full.compute_s, rel=0.01)


def _mig_run(**cluster):
    return experiment(cluster={"replicas": 2, "mig": "3g.40gb", **cluster}, cost_model={"kind": "roofline"},
                      workload={"num_requests": 40, "arrival": {"kind": "poisson", "rate": 10.0},
                                "input_tokens": {"kind": "fixed", "value": 500},
                                "output_tokens": {"kind": "fixed", "value": 50}})


def test_a_run_on_slices_counts_its_share_of_a_gpu_and_is_deterministic():
    """Two 3g replicas use 6/7 of a GPU; the same seed gives a byte-identical summary."""
    first = simulator.run(load_experiment(_mig_run())).summary
    assert first["num_gpus"] == pytest.approx(6 / 7) and first["mig"] == "3g.40gb"
    assert same_summaries(first, simulator.run(load_experiment(_mig_run())).summary)
    seven = simulator.run(load_experiment(_mig_run(replicas=7, mig="1g.20gb") | {"model": "phi-2"})).summary
    assert seven["num_gpus"] == 1 and isinstance(seven["num_gpus"], int)


@pytest.mark.parametrize("config, error, message", [
    (_mig_run(mig="5g.50gb"), LLMSimError, r"cluster\.mig: unknown profile '5g\.50gb' for h100-sxm \(allowed: "
     r"1g\.10gb, 1g\.20gb, 2g\.20gb, 3g\.40gb, 4g\.40gb, 7g\.80gb\)"),
    (_mig_run() | {"hardware": "l40s"}, LLMSimError, "cluster.mig: '3g.40gb' needs a MIG-capable GPU; l40s has no MIG"),
    (_mig_run(tensor_parallel=2), ConfigError, "tensor_parallel, pipeline_parallel, data_parallel and "
     r"expert_parallel must be 1 \(got tensor_parallel 2\)"),
    (experiment(cluster={"kind": "disaggregated", "mig": "3g.40gb", "prefill": {}, "decode": {}}), ConfigError,
     "give each pool its own mig"),
])
def test_bad_mig_settings_are_one_line_errors(config, error, message):
    with pytest.raises(error, match=message):
        simulator.run(load_experiment(config))


def test_a_disaggregated_cluster_sets_mig_per_pool():
    """A prefill replica on a 3g slice and a decode replica on a whole GPU: 3/7 + 1 GPUs."""
    config = _mig_run() | {"cluster": {"kind": "disaggregated", "prefill": {"mig": "3g.40gb"}, "decode": {}}}
    summary = simulator.run(load_experiment(config)).summary
    assert summary["mig"] == "3g.40gb, full" and summary["num_gpus"] == pytest.approx(10 / 7)
    assert summary["completed"] == 40


def test_a_slice_draws_its_share_of_the_board_power():
    """Seven 1g slices of an H100 (700 W board, idle 15% of it) draw what the whole GPU does: 100 W and 15 W each;
    a 3g slice 3/7 of both."""
    h100 = load_hardware("h100-sxm")
    one, three = mig_slice(h100, "1g.10gb"), mig_slice(h100, "3g.40gb")
    assert 7 * one.board_power_w == pytest.approx(h100.board_power_w)
    assert 7 * one.idle_watts == pytest.approx(h100.idle_watts)
    assert three.board_power_w == pytest.approx(3 / 7 * h100.board_power_w)
