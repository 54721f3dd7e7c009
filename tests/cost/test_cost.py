"""Cost models against hand calculations and physical bounds."""

from __future__ import annotations

import math

import pytest
import yaml

import simulator
from simulator.catalog import EngineProfile, load_engine, load_hardware, load_model
from simulator.catalog.hardware import with_fit
from simulator.cost import (
    IterationShape,
    LinearCostModel,
    RooflineCostModel,
    collective_time,
    decode_run_time,
    gemm_time,
)
from simulator.cost.gemm import GemmModel
from simulator.cost.linear import LinearCostConfig
from simulator.errors import LLMSimError
from tests.helpers import experiment

# A toy model and GPU with round numbers, so every operator can be worked out by hand below.
TOY_MODEL = {
    "name": "toy", "num_layers": 2, "hidden_size": 64, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
    "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 512,
}
TOY_GPU = {
    "name": "toy-gpu", "memory_gib": 1, "memory_bandwidth_gb_per_s": 10, "peak_tflops": {"bf16": 0.1, "fp16": 0.1},
    "fit": {"bandwidth_efficiency": 1.0, "kernel_overhead_us": 0,
            "gemm": {"flops_efficiency": 1.0, "knee": 2, "tile_m": 1},
            "prefill_attention": {"efficiency": 1.0, "io_efficiency": 1.0, "overhead_us": 0, "ns_per_row": 100,
                                  "ns_per_tile": 1000},
            "decode_attention": {"efficiency": 1.0, "ns_per_head": 1000}},
}
F, BW = 1e11, 1e10  # FLOP/s and bytes/s: ridge point 10 FLOP/byte


def roof(flops: float, nbytes: float) -> float:
    """The smooth roofline with p = 2: sqrt(t_compute² + t_memory²)."""
    return ((flops / F) ** 2 + (nbytes / BW) ** 2) ** 0.5


# Hand calculation, bf16 (2 bytes). Prefill of one 100-token prompt (T = 100):
#   QKV   m=100 n=(4+2·2)·16=128 k=64: FLOPs 2·100·128·64 = 1,638,400; bytes (6400+8192+12800)·2 = 54,784
#   attention: FLOPs 4·4·16·(100·101/2) = 1,292,800, plus (not overlapped) its K,V bytes 2·2·16·2·100 = 12,800;
#              plus, for each of the 100·4 (query, head) rows, 100 ns per 128 elements of its query and output
#              widths (16 + 16: 12.5 ns), and 1 µs for each of the 4 heads' one 128-query tile: 9 µs
#   O     m=100 n=64 k=64: FLOPs 819,200; bytes (6400+4096+6400)·2 = 33,792
#   up    m=100 n=2·128 k=64: FLOPs 3,276,800; bytes (6400+16384+25600)·2 = 96,768
#   down  m=100 n=64 k=128: FLOPs 1,638,400; bytes (12800+8192+6400)·2 = 54,784
#   elementwise: norms 2×(read+write 64) + act (read 256, write 128) + 2 adds (read 128, write 64) = 1024 per token
#                → 100·1024·2 = 204,800 bytes
#   per model: embedding gather 100·64·2 = 12,800 bytes; final norm (read + write) 25,600 bytes;
#              LM head m=1 n=1000 k=64: FLOPs 128,000, bytes (64+64000+1000)·2 = 130,128;
#              sampling: read + write 1 × 1000 fp32 logits = 8,000 bytes
PREFILL_LAYER = (
    roof(1_638_400, 54_784) + 1_292_800 / F + 12_800 / BW + 9e-6 + roof(819_200, 33_792)
    + roof(3_276_800, 96_768) + roof(1_638_400, 54_784) + roof(0, 204_800)
)
PER_MODEL = roof(0, 12_800) + roof(0, 25_600) + roof(128_000, 130_128) + roof(0, 8_000)
PREFILL = 2 * PREFILL_LAYER + PER_MODEL


def decode_step(context: int) -> float:
    """One token (T = 1) with ``context`` tokens of KV after this step's write; decode attention also pays 1 µs for
    each of the sequence's 2 KV heads."""
    layer = (
        roof(2 * 128 * 64, (64 + 8192 + 128) * 2)
        + roof(4 * 4 * 16 * context, 2 * 2 * 16 * 2 * context) + 2 * 1e-6
        + roof(2 * 64 * 64, (64 + 4096 + 64) * 2) + roof(2 * 256 * 64, (64 + 16384 + 256) * 2)
        + roof(2 * 64 * 128, (128 + 8192 + 64) * 2) + roof(0, 1024 * 2)
    )
    return 2 * layer + roof(0, 64 * 2) + roof(0, 2 * 64 * 2) + roof(128_000, 130_128) + roof(0, 8_000)


@pytest.fixture
def toy_paths(tmp_path):
    model, gpu = tmp_path / "toy.yaml", tmp_path / "toy-gpu.yaml"
    model.write_text(yaml.safe_dump(TOY_MODEL))
    gpu.write_text(yaml.safe_dump(TOY_GPU))
    return str(model), str(gpu)


def test_one_request_on_idle_gpu_equals_hand_computed_roofline(toy_paths):
    model, gpu = toy_paths
    config = experiment(
        model=model, hardware=gpu, cost_model={"kind": "roofline"}, engine="ideal",
        kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 64},
        scheduler={"kind": "continuous", "max_model_len": 512},
        workload={
            "num_requests": 1, "arrival": {"kind": "constant", "rate": 1.0},
            "input_tokens": {"kind": "fixed", "value": 100}, "output_tokens": {"kind": "fixed", "value": 3},
        },
    )
    row = simulator.run(simulator.load(config)).requests.iloc[0]
    assert row["ttft_ms"] / 1000 == pytest.approx(PREFILL, rel=1e-12)
    # two decode steps: KV grows to 101, then 102 tokens
    assert row["e2el_ms"] / 1000 == pytest.approx(PREFILL + decode_step(101) + decode_step(102), rel=1e-12)


def test_decode_step_is_affine_in_context_sum(toy_paths):
    cost = RooflineCostModel(load_model(toy_paths[0]), load_hardware(toy_paths[1]))
    for batch in (1, 3, 17):
        a, c = cost.decode_step_coefficients(batch)
        for context_sum in (batch, 100 * batch, 5000 * batch):
            shape = IterationShape(num_decodes=batch, decode_context_sum=context_sum)
            assert cost.iteration_time(shape) == pytest.approx(a + c * context_sum, rel=1e-12)
    a, c = cost.decode_step_coefficients(4)
    steps = [a + c * (400 + 4 * j) for j in range(25)]
    assert decode_run_time(a, c, 4, 400, 25) == pytest.approx(sum(steps), rel=1e-12)


def test_llama2_7b_decode_is_weight_streaming_plus_kernel_overheads():
    """Batch-1 decode on A100 is memory-bound: (weights except the embedding table + KV) / bandwidth, plus 6 µs for
    each of the 32 × 11 + 4 = 356 kernels (per layer: QKV, attention I/O, attention, O, up, down, 5 elementwise;
    per model: embedding, final norm, LM head, sampling). With one row in a 64-row tile, the smooth knee adds at most
    ~10% to a weight-streaming GEMM (the tile's compute time is under half its memory time).

    Llama-2-7B: 6.74 B parameters (published), 131 M in the embedding table (32000 × 4096), fp16;
    KV 524,288 bytes per token (2 × 32 layers × 32 heads × 128 × 2 B).
    """
    hardware = load_hardware("a100-80gb-sxm")
    cost = RooflineCostModel(load_model("llama-2-7b"), hardware, dtype="fp16")
    bandwidth = 2039e9 * hardware.fit.bandwidth_efficiency
    for context in (1, 1000, 4000):
        streaming = ((6.74e9 - 32000 * 4096) * 2 + 524_288 * context) / bandwidth + 356 * 6e-6
        actual = cost.iteration_time(IterationShape(num_decodes=1, decode_context_sum=context))
        assert streaming * 0.99 < actual < streaming * 1.12


def test_llama3_8b_long_prefill_is_compute_bound():
    """A 4096-token prefill: 2 FLOPs per weight per token at peak × flops_efficiency plus causal attention at peak ×
    attention_efficiency, its exposed exponentials (one per pair and head at 3.9 × 10^12/s) and its cost per
    (query, head) row and per (128-query tile, head), plus the elementwise
    traffic (norms, activation, residual adds: 10·D + 3·I elements per token per layer) at bandwidth×eff.

    The elementwise share (~10%) matches measurement: on A100, Llama-3-8B at 4096 tokens spends 0.67 ms per layer in
    norms/act/adds vs 7.8 ms in GEMMs (../shared/data/calibration/a100_ops/Meta-Llama-3-8B.csv).
    """
    model = load_model("llama-3-8b")
    hardware = load_hardware("h100-sxm")
    cost = RooflineCostModel(model, hardware)
    tokens = 4096
    layer_weights = 4096 * (32 + 16) * 128 + 32 * 128 * 4096 + 3 * 4096 * 14336
    attention = 32 * 4 * 32 * 128 * tokens * (tokens + 1) / 2
    elementwise_bytes = 32 * tokens * (10 * 4096 + 3 * 14336) * 2
    exponentials = 32 * 32 * tokens * (tokens + 1) / 2 * hardware.fit.prefill_attention.exp_exposed / 3.9e12
    compute = 32 * 2 * tokens * layer_weights / (989.4e12 * hardware.fit.gemm.flops_efficiency) + attention / (
        989.4e12 * hardware.fit.prefill_attention.efficiency) + exponentials
    rows_and_tiles = 32 * 32 * (tokens * hardware.fit.prefill_attention.ns_per_row
                                + tokens / 128 * hardware.fit.prefill_attention.ns_per_tile) * 1e-9
    expected = compute + rows_and_tiles + elementwise_bytes / (3350e9 * hardware.fit.bandwidth_efficiency)
    actual = cost.iteration_time(IterationShape(prefill_chunks=((tokens, 0),)))
    # the knee, kernel overheads, LM head, embedding and the attention's K/V bytes add a few percent
    assert expected < actual < 1.05 * expected
    assert compute / actual > 0.85


def test_gemm_time_by_hand():
    """A100 (312 TFLOP/s × 0.73, 2039 GB/s × 0.84, p = 2, 64-row tiles, 6 µs per kernel)."""
    F, B = 312e12 * 0.73, 2039e9 * 0.84
    # 4096 × 4096 × 4096: compute-bound; t_c = 2·4096³/F, t_m = 3·4096²·2/B
    tc, tm = 2 * 4096**3 / F, 3 * 4096**2 * 2 / B
    assert gemm_time("a100-80gb-sxm", 4096, 4096, 4096, "fp16") == pytest.approx((tc**2 + tm**2) ** 0.5 + 6e-6)
    # one row computes a whole 64-row tile: t_c = 2·64·n·k/F; memory reads the k × n weights
    tc, tm = 2 * 64 * 8192 * 8192 / F, (8192 + 8192**2 + 8192) * 2 / B
    assert gemm_time("a100-80gb-sxm", 1, 8192, 8192, "fp16") == pytest.approx((tc**2 + tm**2) ** 0.5 + 6e-6)
    # 65 rows take two tiles: the compute part of 65 rows equals that of 128
    fast_memory = load_hardware("a100-80gb-sxm").model_copy(update={"memory_bandwidth_gb_per_s": 1e12})
    assert gemm_time(fast_memory, 65, 4096, 4096) == pytest.approx(gemm_time(fast_memory, 128, 4096, 4096), rel=1e-6)
    assert gemm_time("a100-80gb-sxm", 0, 4096, 4096) == 0.0


def test_a_small_gemm_pays_its_main_loop_along_k():
    """H100 (989.4 TFLOP/s × 0.81, 3350 GB/s × 0.85, p = 2, 32-row tiles, 2.8 µs per kernel, 0.9 ns per element of
    k, a 16-bit block walking at most 6,144 of it): one row through a 512-wide weight takes the smooth maximum of its
    compute, its weight read and its main loop's serial latency (0.9 ns · k) — at k = 4096, 3.7 µs, more than the
    1.5 µs of bytes it streams — so it grows with k even where the bytes stay small, and a large GEMM hides it. A
    16-bit GEMM's library splits a longer k over more blocks: at k = 12,288 its serial latency is 0.9 ns · 6,144,
    while the same GEMM with fp8 weights (8-bit kernels do not split) pays 0.9 ns · 12,288 and its quantisation
    pass."""
    F, B, serial = 989.4e12 * 0.81, 3350e9 * 0.85, 0.9e-9
    for k in (256, 4096, 12288):
        tc, tm = 2 * 32 * 512 * k / F, ((k + 512) * 2 + k * 512 * 2) / B
        expected = (tc**2 + tm**2 + (serial * min(k, 6144)) ** 2) ** 0.5 + 2.8e-6
        assert gemm_time("h100-sxm", 1, 512, k) == pytest.approx(expected)
    fp8, k = 1978.9e12 * 0.54, 12288
    tc, tm = 2 * 32 * 512 * k / fp8, ((k + 512) * 2 + k * 512 * 1) / B  # 16-bit activations, fp8 weights
    quantise = k * (2 + 1) / B + 3.0e-6  # the activations read at 16 bits and written at 8, and its fixed cost
    expected = (tc**2 + tm**2 + (serial * k) ** 2) ** 0.5 + 2.8e-6 + quantise
    assert gemm_time("h100-sxm", 1, 512, k, "fp8") == pytest.approx(expected)
    assert gemm_time("h100-sxm", 1, 512, 4096) > gemm_time("h100-sxm", 1, 4096, 512) + 1e-6  # same bytes
    without = with_fit(load_hardware("h100-sxm"), {"gemm.k_latency_ns": 0.0})
    assert gemm_time(without, 1, 512, 4096) < gemm_time("h100-sxm", 1, 512, 4096) - 1e-6
    # 3.7 µs of serial latency against 171 µs of compute: hidden (under 0.03%)
    assert gemm_time("h100-sxm", 4096, 4096, 4096) == pytest.approx(gemm_time(without, 4096, 4096, 4096), rel=3e-4)


def test_collective_time_by_hand():
    """NCCL runs the faster of two protocols. Bandwidth (Simple): 2(n−1)/n · bytes / (B · e) + latency + 2(n−1) ·
    step; low-latency (LL): the same with its own three numbers. Hopper's fit (generations/hopper.yaml): Simple e 0.70,
    19.5 µs, 0.5 µs per step; LL e 0.28, 5.0 µs, 0.8 µs per step. So 4 GPUs (6 steps) cross over where
    9.8 µs + 1.5·b / 126 GB/s = 22.5 µs + 1.5·b / 315 GB/s: b = 12.7 µs / (1.5 · (1/126 − 1/315) ns/B) ≈ 1.78 MB.
    send/recv bytes / (B · 0.9) + 8 µs; all-gather per its own fit, (n−1)/n of the bytes. (NVLS, which beats both
    above 51 MB at 4 GPUs, is test_nvls_all_reduce_by_hand's: these messages stay below it.)"""
    h100 = load_hardware("h100-sxm")  # NVSwitch, 450 GB/s per direction, 8 GPUs per node, 50 GB/s per GPU NIC
    e, lat, step = 0.70, 19.5e-6, 0.5e-6
    e_ll, lat_ll, step_ll = 0.28, 5.0e-6, 0.8e-6
    assert (h100.fit.comm.link_efficiency, h100.fit.comm.latency_us, h100.fit.comm.step_latency_us) == (0.70, 19.5, 0.5)
    low = h100.fit.comm.all_reduce_low_latency
    assert (low.efficiency, low.latency_us, low.step_latency_us) == (0.28, 5.0, 0.8)

    def simple(n, b, bandwidth=450e9):
        return 2 * (n - 1) / n * b / (bandwidth * e) + lat + 2 * (n - 1) * step

    def ll(n, b, bandwidth=450e9):
        return 2 * (n - 1) / n * b / (bandwidth * e_ll) + lat_ll + 2 * (n - 1) * step_ll

    nbytes = 64 * 2**20
    assert collective_time(h100, "all_reduce", 4, nbytes / 4) == pytest.approx(simple(4, nbytes / 4))
    assert collective_time(h100, "all_reduce", 4, 1024) == pytest.approx(ll(4, 1024))
    crossover = 12.7e-6 / (1.5 * (1 / (450e9 * e_ll) - 1 / (450e9 * e)))
    assert crossover == pytest.approx(1.78e6, rel=0.01)
    assert collective_time(h100, "all_reduce", 4, 0.9 * crossover) == pytest.approx(ll(4, 0.9 * crossover))
    assert collective_time(h100, "all_reduce", 4, 1.1 * crossover) == pytest.approx(simple(4, 1.1 * crossover))
    assert collective_time(h100, "send_recv", 2, nbytes) == pytest.approx(nbytes / (450e9 * 0.9) + 8e-6)
    # 16 GPUs span two nodes: the ring runs at 8 NICs × 50 GB/s; NCCL's tree takes 2·7 steps within each node and
    # 2·⌈log2 2⌉ = 2 between the nodes, each of those 2 µs more (fit.comm.inter_node_step_latency_us): 16 steps, not
    # the ring's 30; 64 GPUs (8 nodes): 14 + 6 steps, not 126
    inter = h100.fit.comm.inter_node_step_latency_us * 1e-6
    assert inter == 2e-6

    def tree(n, b, across, bandwidth=400e9):
        return 2 * (n - 1) / n * b / (bandwidth * e) + lat + (14 + across) * step + across * inter

    assert collective_time(h100, "all_reduce", 16, nbytes) == pytest.approx(tree(16, nbytes, 2))
    assert collective_time(h100, "all_reduce", 64, nbytes) == pytest.approx(tree(64, nbytes, 6))
    assert simple(64, nbytes, 400e9) - tree(64, nbytes, 6) == pytest.approx((126 - 20) * step - 6 * inter)
    ag = h100.fit.comm.collectives["all_gather"]
    assert collective_time(h100, "all_gather", 8, nbytes) == pytest.approx(
        7 / 8 * nbytes / (450e9 * ag.efficiency) + (ag.latency_us + 7 * ag.step_latency_us) * 1e-6)
    agl = ag.low_latency
    assert collective_time(h100, "all_gather", 8, 4096) == pytest.approx(
        7 / 8 * 4096 / (450e9 * agl.efficiency) + (agl.latency_us + 7 * agl.step_latency_us) * 1e-6)
    # pairwise NVLink: a pair uses the bridge, four GPUs cross PCIe (64 GB/s per direction on H100 PCIe)
    h100_pcie = load_hardware("h100-pcie")
    assert collective_time(h100_pcie, "all_reduce", 2, nbytes) == pytest.approx(simple(2, nbytes, 300e9))
    assert collective_time(h100_pcie, "all_reduce", 4, nbytes) == pytest.approx(simple(4, nbytes, 64e9))
    # a profile without the low-latency protocol (A100 PCIe, fitted with one formula) is the one formula
    a100_pcie = load_hardware("a100-80gb-pcie")
    assert a100_pcie.fit.comm.all_reduce_low_latency is None
    assert collective_time(a100_pcie, "all_reduce", 2, 1024) == pytest.approx(
        1024 / (300e9 * 0.7) + (30 + 2 * 4) * 1e-6)
    assert collective_time(h100, "all_reduce", 1, nbytes) == 0.0
    with pytest.raises(ValueError, match="unknown collective"):
        collective_time(h100, "broadcast", 2, nbytes)


def test_nvls_all_reduce_by_hand():
    """NVLink SHARP (Hopper's fit: 0.55 of the link, 59.5 µs): bytes / (B · 0.55) + 59.5 µs, the buffer once into the
    switch and once back, against the ring's 2(n−1)/n · bytes. On 8 GPUs it wins where 1.75·b / (450 GB/s · 0.70)
    + 26.5 µs > b / (450 GB/s · 0.55) + 59.5 µs, i.e. b · (5.556 − 4.040) ps/B > 33 µs: b > 21.8 MB; on 4 GPUs
    (1.5·b, 22.5 µs) b · (4.762 − 4.040) ps/B > 37 µs: b > 51.3 MB. It reduces 16- and 32-bit floats only (int8
    takes the ring), within one NVSwitch node only (16 GPUs: the NICs' ring), and not on Ampere's NVSwitch, which
    has no in-switch reduction (no fit: 16-bit and int8 alike)."""
    h100 = load_hardware("h100-sxm")
    nvls = h100.fit.comm.all_reduce_nvls
    assert (nvls.efficiency, nvls.latency_us) == (0.55, 59.5)

    def ring(n, b):
        return 2 * (n - 1) / n * b / (450e9 * 0.70) + 19.5e-6 + 2 * (n - 1) * 0.5e-6

    def in_switch(b):
        return b / (450e9 * 0.55) + 59.5e-6

    crossover = 33e-6 / (1.75 / (450e9 * 0.70) - 1 / (450e9 * 0.55))
    assert crossover == pytest.approx(21.8e6, rel=0.01)
    big = 128 * 2**20
    assert collective_time(h100, "all_reduce", 8, big) == pytest.approx(in_switch(big))
    assert collective_time(h100, "all_reduce", 8, big, "fp16") == pytest.approx(in_switch(big))
    assert collective_time(h100, "all_reduce", 8, big, "int8") == pytest.approx(ring(8, big))
    assert collective_time(h100, "all_reduce", 8, 0.9 * crossover) == pytest.approx(ring(8, 0.9 * crossover))
    assert collective_time(h100, "all_reduce", 8, 1.1 * crossover) == pytest.approx(in_switch(1.1 * crossover))
    four = 37e-6 / (1.5 / (450e9 * 0.70) - 1 / (450e9 * 0.55))
    assert four == pytest.approx(51.3e6, rel=0.01)
    assert collective_time(h100, "all_reduce", 4, 0.9 * four) == pytest.approx(ring(4, 0.9 * four))
    assert collective_time(h100, "all_reduce", 4, 1.1 * four) == pytest.approx(in_switch(1.1 * four))
    assert collective_time(h100, "all_gather", 8, big) == collective_time(h100, "all_gather", 8, big, "int8")
    assert collective_time(h100, "all_reduce", 16, big) == collective_time(h100, "all_reduce", 16, big, "int8")
    a100 = load_hardware("a100-80gb-sxm")
    assert a100.fit.comm.all_reduce_nvls is None
    assert collective_time(a100, "all_reduce", 8, big) == collective_time(a100, "all_reduce", 8, big, "int8")
    # a Blackwell NVL72 rack takes Blackwell's fit (B200's tables) within its one NVLink domain of 72 GPUs
    gb200 = load_hardware("gb200")
    assert gb200.fit.comm.all_reduce_nvls == load_hardware("b200").fit.comm.all_reduce_nvls
    assert gb200.node.gpus_per_node == 72
    assert collective_time(gb200, "all_reduce", 72, big) < collective_time(gb200, "all_reduce", 72, big, "int8")


def test_tensor_parallel_shards_work_and_adds_all_reduce():
    model, hardware = load_model("llama-3-70b"), load_hardware("h100-sxm")
    tp1, tp4 = RooflineCostModel(model, hardware, 1), RooflineCostModel(model, hardware, 4)
    shape = IterationShape(num_decodes=8, decode_context_sum=8 * 1000)
    # sharded weights make a step faster, but not 4× (all-reduces and per-kernel costs remain)
    assert tp1.iteration_time(shape) / 4 < tp4.iteration_time(shape) < tp1.iteration_time(shape)
    assert tp4.breakdown(shape)["communication_s"] == pytest.approx(
        80 * 2 * collective_time(hardware, "all_reduce", 4, 8 * 8192 * 2))


def test_engine_profiles():
    """vllm: 2.0 ms per iteration and 40 µs per sequence; vllm-0.14 (its later versions): 1.0 ms and none.
    splitwise: prompts prefilled one after another (b prompts = b × one prompt), all-reduces at 0.447 of the NCCL
    bandwidth with its stack's fixed cost, 40 µs + 4 µs per ring step and no low-latency protocol (a 2-byte
    all-reduce over 4 GPUs: 40 + 6 × 4 = 64 µs; the current NCCL fit, which the other engines' rings use, takes its
    LL protocol: 8.75 + 6 × 0.95 = 14.45 µs), 5.0 ms per pass, 5 ms per prompt and 347 µs per sequence. Groups sum
    to the total."""
    model, hardware = load_model("llama-3-70b"), load_hardware("a100-80gb-sxm")
    default = RooflineCostModel(model, hardware, 4, engine=load_engine("vllm"))
    ideal = RooflineCostModel(model, hardware, 4, engine=load_engine("ideal"))
    splitwise = RooflineCostModel(model, hardware, 4, engine=load_engine("splitwise"))
    shape = IterationShape(((500, 0),) * 3, 16, 16 * 800)
    for cost in (default, ideal, splitwise):
        assert sum(cost.breakdown(shape).values()) == pytest.approx(cost.iteration_time(shape), rel=1e-12)
    assert default.breakdown(shape)["engine_s"] == pytest.approx(2.0e-3 + 19 * 40e-6)  # 3 prompts + 16 decodes
    later = RooflineCostModel(model, hardware, 4, engine=load_engine("vllm-0.14"))
    assert later.breakdown(shape)["engine_s"] == pytest.approx(1.0e-3)
    assert ideal.breakdown(shape)["engine_s"] == 0.0
    # splitwise: four passes (three prompts, then the decodes), three prompts, 19 sequences
    assert splitwise.breakdown(shape)["engine_s"] == pytest.approx(4 * 5.0e-3 + 3 * 5e-3 + 19 * 347e-6)
    one = IterationShape(((500, 0),))
    assert splitwise.iteration_time(IterationShape(((500, 0),) * 3)) == pytest.approx(3 * splitwise.iteration_time(one))
    assert default.iteration_time(IterationShape(((500, 0),) * 3)) < 3 * default.iteration_time(one)
    slower = with_fit(hardware, {"comm.link_efficiency": hardware.fit.comm.link_efficiency * 0.447,
                                         "comm.latency_us": 40.0, "comm.step_latency_us": 4.0,
                                         "comm.all_reduce_low_latency": None})
    assert splitwise.breakdown(one)["communication_s"] == pytest.approx(
        80 * 2 * collective_time(slower, "all_reduce", 4, 500 * 8192 * 2))
    assert collective_time(splitwise.network, "all_reduce", 4, 2) == pytest.approx(64e-6, rel=1e-3)
    assert collective_time(ideal.network, "all_reduce", 4, 2) == pytest.approx(14.45e-6, rel=1e-3)
    with pytest.raises(LLMSimError, match="unknown engine profile 'vllm-9'"):
        load_engine("vllm-9")


def test_an_eager_iteration_takes_at_least_its_host_dispatches():
    """``eager_kernel_us``: an iteration with prompt chunks runs outside CUDA graphs, so its layers take at least
    their operations × the host's dispatch time. Llama-3-8B at TP 2 dispatches, per layer, its two attention GEMMs
    (QKV, O), one attention kernel, E = 3 elementwise kernels, two FFN GEMMs (gate-up, down) and two all-reduces:
    10, so 32 × 10 × 100 µs = 32 ms for a short prompt; at TP 1 (no all-reduces) 32 × 8 × 100 µs. Qwen3-30B-A3B's
    MoE layers dispatch the router GEMM and one fused-MoE operation in place of the FFN GEMMs: 48 × 8 at TP 1.
    A decode-only step (CUDA graph) and a prompt long enough to keep the GPU busier than the host do not change;
    the breakdown names the wait."""
    hardware = load_hardware("h100-sxm")
    engine = EngineProfile(name="test", elementwise_kernels_per_layer=3, eager_kernel_us=100.0)
    plain = EngineProfile(name="test", elementwise_kernels_per_layer=3)
    short, decode, long = IterationShape(((16, 0),)), IterationShape((), 8, 8 * 500), IterationShape(((16000, 0),))
    for model, tp, kernels in (("llama-3-8b", 2, 32 * 10), ("llama-3-8b", 1, 32 * 8), ("qwen3-30b-a3b", 1, 48 * 8)):
        eager = RooflineCostModel(load_model(model), hardware, tp, engine=engine)
        graphs = RooflineCostModel(load_model(model), hardware, tp, engine=plain)
        assert eager.eager_floor == pytest.approx(kernels * 100e-6)
        parts = eager.breakdown(short)
        layers = sum(v for k, v in parts.items() if k not in ("lm_head_sampling_s", "engine_s"))
        assert layers == pytest.approx(kernels * 100e-6, rel=1e-12)
        assert parts["eager_launch_s"] > 0
        assert sum(parts.values()) == pytest.approx(eager.iteration_time(short), rel=1e-12)
        assert eager.iteration_time(decode) == graphs.iteration_time(decode)
        assert eager.iteration_time(long) == graphs.iteration_time(long) > kernels * 100e-6
        assert eager.breakdown(long)["eager_launch_s"] == 0.0


def test_attention_efficiency_slows_only_attention_flops():
    """Prefill attention of one 4096-token prompt on Llama-3-8B (A100, TP 1): 32 layers × (the smooth maximum
    (p = 2) of 4·32·128·4096·4097/2 FLOPs and of its longest block's, one head's last 128 queries over 4096 keys,
    2·256·128·4096 FLOPs at 1 / (108 SMs × 0.75 blocks per SM) of the rate, both at F · a; plus 4096·128·2·8·2 K/V
    bytes at B; plus 32 heads × (4096 rows × 0.52 ns + 32 query tiles × 4.75 ns); plus 13.8 µs per kernel), with
    Ampere's fitted attention parameters (F: 0.58 of the 16-bit peak, B: 0.27 of HBM bandwidth); an engine at
    a = 0.5 changes nothing else."""
    model, hardware = load_model("llama-3-8b"), load_hardware("a100-80gb-sxm")
    F, B = 312e12 * 0.58, 2039e9 * 0.27
    flops, longest, nbytes = 4 * 32 * 128 * 4096 * 4097 / 2, 2 * 256 * 128 * 4096 * 108 * 0.75, 4096 * 128 * 2 * 8 * 2
    rows_and_tiles = 32 * (4096 * 0.52e-9 + 32 * 4.75e-9)
    shape = IterationShape(((4096, 0),))
    parts = {}
    for a in (1.0, 0.5):
        engine = EngineProfile(name="test", attention_efficiency=a)
        parts[a] = RooflineCostModel(model, hardware, 1, engine=engine).breakdown(shape)
        compute = ((flops / (F * a)) ** 2 + (longest / (F * a)) ** 2) ** 0.5
        expected = 32 * (compute + nbytes / B + rows_and_tiles + 13.8e-6)
        assert parts[a]["attention_s"] == pytest.approx(expected, rel=1e-9)
    assert {k: v for k, v in parts[0.5].items() if k != "attention_s"} == {
        k: v for k, v in parts[1.0].items() if k != "attention_s"
    }


def test_linear_cost_model():
    cost = LinearCostModel(LinearCostConfig(
        kind="linear", prefill_ms_per_token=0.5, decode_ms_per_step=10, decode_ms_per_seq=1, overhead_ms=3,
    ))
    assert cost.iteration_time(IterationShape(prefill_chunks=((100, 0), (20, 0)))) == pytest.approx(0.063)
    assert cost.iteration_time(IterationShape(num_decodes=4, decode_context_sum=999)) == pytest.approx(0.014)
    assert cost.decode_step_coefficients(4) == pytest.approx((0.014, 0.0))


def test_weight_precision_changes_bytes_and_peak():
    """fp8 weights halve the bytes of every block GEMM and run at the fp8 peak where the GPU has one (H100: 2× the
    16-bit peak, at Hopper's fitted fractions 0.54 vs 0.81), after one quantisation pass over the activations (read
    2, write 1 byte each, plus 3 µs); int4 is weight-only (a quarter of the bytes, 16-bit math); embeddings and
    the LM head stay 16-bit."""
    h100, a100 = load_hardware("h100-sxm"), load_hardware("a100-80gb-sxm")
    n = k = 8192
    bandwidth, overhead, serial = 3350e9 * 0.85, 2.8e-6, 0.9e-9 * k  # quantised weights' kernels walk all of k
    # compute-bound: 2·m·n·k at each peak, and the fp8 GEMM's quantisation pass over its 4096 × 8192 activations
    t_bf16, t_fp8 = 2 * 4096 * n * k / (989.4e12 * 0.81), 2 * 4096 * n * k / (1978.9e12 * 0.54)
    expected = (t_fp8 + 4096 * k * 3 / bandwidth + 3e-6) / t_bf16
    assert gemm_time(h100, 4096, n, k, "fp8") / gemm_time(h100, 4096, n, k, "bf16") == pytest.approx(expected, rel=0.03)
    assert gemm_time(a100, 4096, n, k, "fp8") > 0.95 * gemm_time(a100, 4096, n, k, "bf16")  # A100: no fp8 peak
    quantize = k * 3 / bandwidth + 3e-6  # one row of activations
    one_row = {d: gemm_time(h100, 1, n, k, d) - overhead for d in ("bf16", "fp8", "int4")}  # weight streaming
    assert one_row["fp8"] - quantize == pytest.approx(one_row["bf16"] / 2, rel=0.08)
    # int4 at one row: the weight read (k·n/2 bytes), the 16-bit math of one 32-row tile and the main loop along k,
    # smooth maximum
    read, math_ = k * n * 0.5 / bandwidth, 2 * 32 * n * k / (989.4e12 * 0.81)
    assert one_row["int4"] == pytest.approx((read**2 + math_**2 + serial**2) ** 0.5, rel=0.01)
    model = load_model("llama-3-8b")
    unquantised = 2 * 128256 * 4096 + (2 * 32 + 1) * 4096  # embeddings, LM head, norms
    assert model.weight_bytes(1.0) == (model.num_params - unquantised) * 1.0 + unquantised * 2


def test_a_quantised_formats_own_gemm_kernels_price_its_gemms():
    """A format with GEMM kernels of its own (``gemm_kernel_by_dtype``; the A100's int8 and int4, fitted on
    TensorRT-LLM's tables) computes rows in its own tiles and walks all of k at its own latency, and pays its fixed
    work beyond the kernel floor; by hand on A100 (312 TFLOP/s 16-bit at 0.73, 624 int8 at its 0.78; 2,039 GB/s at
    0.84; knee 2; 6 µs floor): one row of int4 through 8,192 × 8,192 is its weight read, 8 rows of 16-bit math and
    2.4 ns per element of k, plus 6 + 6 µs — the 64-row tile of the 16-bit library had priced that row's math at
    twice its weight read. Other formats, and the memory-bound kernels of the same model, are untouched."""
    a100 = load_hardware("a100-80gb-sxm")
    n = k = 8192
    bandwidth = 2039e9 * 0.84
    read = ((k + n) * 2 + k * n * 0.5) / bandwidth
    math_, serial = 2 * 8 * n * k / (312e12 * 0.73), 2.4e-9 * k
    assert gemm_time(a100, 1, n, k, "int4") == pytest.approx((read**2 + math_**2 + serial**2) ** 0.5 + 12e-6)
    # W8A8 int8 at 4,096 rows: compute-bound at its own fraction of the int8 peak, then the activations' quantisation
    # pass (read 2, write 1 byte each; the A100's fit has no fixed cost for it)
    m = 4096
    int8 = ((2 * m * n * k / (624e12 * 0.78)) ** 2 + (((m * k + m * n) * 2 + k * n) / bandwidth) ** 2
            + (1.6e-9 * k) ** 2) ** 0.5 + 6e-6 + 5e-6 + m * k * 3 / bandwidth
    assert gemm_time(a100, m, n, k, "int8") == pytest.approx(int8)
    without = with_fit(a100, {"gemm.kernel_by_dtype": {}})
    assert gemm_time(a100, 1, n, k, "bf16") == gemm_time(without, 1, n, k, "bf16")
    assert GemmModel(a100, "int4").memory_kernel(1e6) == GemmModel(without, "int4").memory_kernel(1e6)
    # the 16-bit library's 64-row tile priced that row's math above its weight read
    math_64 = 2 * 64 * n * k / (312e12 * 0.73)
    assert math_64 > 1.9 * read and gemm_time(without, 1, n, k, "int4") > math_64


def test_mixture_of_experts_runs_grouped_gemms_over_the_experts_the_batch_touches():
    """Mixtral-8x7B (46.7 B parameters, top-2 of 8 experts) at TP 2: T tokens touch U = 8·(1 − (6/8)^T) experts in
    expectation, each on T·2/U rows (whole row tiles per expert); the fused up (2·7168 wide) and down (7168 -> 4096)
    projections read the U experts' weights and the rows' activations, their compute and memory times combine by
    the fitted MoE knee (with their main loops' serial latency), plus a fixed cost per touched expert and the MoE
    layer's kernels; the router is a 16-bit (T × 4096)·(4096 × 8) GEMM."""
    model = load_model("mixtral-8x7b")
    assert model.num_params / 1e9 == pytest.approx(46.7, rel=0.01)
    hw = load_hardware("h100-sxm")
    cost = RooflineCostModel(model, hw, 2)
    (group,) = cost.groups
    flops = hw.achievable_flops("bf16") * hw.fit.moe.gemm_efficiency
    bandwidth = hw.achievable_bandwidth * hw.fit.moe.bandwidth_efficiency
    width, tile, p = 14336 / 2, hw.fit.moe.tile_m, hw.fit.moe.knee
    padded = math.ceil(width / hw.fit.moe.tile_n) * hw.fit.moe.tile_n

    def experts(tokens):
        touched = 8 * (1 - 0.75**tokens)
        rows = math.ceil(tokens * 2 / touched / tile) * tile
        compute = 2 * touched * rows * 4096 * 3 * padded / flops
        memory = (touched * 3 * 4096 * width * 2 + tokens * 2 * (2 * 4096 + 3 * width) * 2) / bandwidth
        serial = hw.fit.gemm.k_latency_ns * 1e-9 * (4096 + width)  # the up GEMM's main loop over k = 4096, the down's
        return ((compute**p + memory**p + serial**p) ** (1 / p) + touched * hw.fit.moe.expert_overhead_us * 1e-6
                + hw.fit.moe.kernels * hw.fit.kernel_overhead_us * 1e-6)

    def attention_gemms(tokens):
        return cost.gemm.time(tokens, (16 + 2 * 4) * 128, 4096) + cost.gemm.time(tokens, 4096, 16 * 128)

    for tokens in (1, 64, 4096):
        expected = 32 * (attention_gemms(tokens) + experts(tokens) + cost.head_gemm.time(tokens, 8, 4096))
        assert group.gemm_time(tokens) == pytest.approx(expected, rel=1e-9)
    # one token reads exactly its two experts' weights: twice the weight bytes of a dense MLP of the same shape
    one = experts(1) - hw.fit.moe.kernels * hw.fit.kernel_overhead_us * 1e-6
    assert one >= 2 * 3 * 4096 * width * 2 / bandwidth


def test_pipeline_parallel_adds_stage_transfers_and_splits_memory():
    """p stages: the same kernels plus (p − 1) send/recv of the T × D hidden states; weights and KV layers split."""
    from simulator.kv import kv_budget

    model, hardware = load_model("llama-2-70b"), load_hardware("a100-80gb-sxm")
    one, four = RooflineCostModel(model, hardware, 2), RooflineCostModel(model, hardware, 2, pipeline_parallel=4)
    shape = IterationShape(((1000, 0),), 8, 8 * 500)
    hidden = (1000 + 8) * 8192 * 2
    assert four.iteration_time(shape) == pytest.approx(
        one.iteration_time(shape) + 3 * collective_time(hardware, "send_recv", 2, hidden))
    common = dict(tensor_parallel=1, weight_dtype="fp16", kv_dtype_name="fp16", gpu_memory_utilization=0.9,
                  block_size=16, max_num_batched_tokens=4096, max_num_seqs=256, max_model_len=4096)
    with pytest.raises(LLMSimError, match="PP1"):
        kv_budget(model, hardware, **common)
    budget = kv_budget(model, hardware, pipeline_parallel=4, **common)
    assert budget.weight_bytes == pytest.approx(model.weight_bytes(2.0) / 4)
    assert budget.kv_bytes_per_token == 2 * 20 * 8 * 128 * 2  # 20 of 80 layers per stage


def test_pipeline_micro_batches_price_one_pass_of_the_heaviest_micro_batch():
    """An engine with one micro-batch per stage in flight (vLLM v1, TensorRT-LLM, SGLang) splits an iteration's
    sequences into k = min(pp, sequences) micro-batches; each sequence advances once per pass of its micro-batch, so
    the iteration costs what one batch-in-turn pass of the heaviest micro-batch costs: 64 decodes over 4 stages are
    16 of them with a quarter of the cached context; 3 prompts of 4,000, 1,000 and 500 tokens with 10 decodes over 2
    stages are {4,000} + 5 decodes and {1,000, 500} + 5; one prompt alone cannot be split."""
    model, hardware = load_model("llama-2-70b"), load_hardware("a100-80gb-sxm")
    micro, in_turn = EngineProfile(name="mb", pipeline_micro_batches=True), EngineProfile(name="turn")
    for pp in (2, 4):
        pipelined = RooflineCostModel(model, hardware, 2, engine=micro, pipeline_parallel=pp)
        single = RooflineCostModel(model, hardware, 2, engine=in_turn, pipeline_parallel=pp)
        assert pipelined.iteration_time(IterationShape((), 64, 64 * 900)) == pytest.approx(
            single.iteration_time(IterationShape((), 64 // pp, 64 // pp * 900)), rel=1e-12)
        a, c = pipelined.decode_step_coefficients(64)
        a1, c1 = single.decode_step_coefficients(64 // pp)
        assert (a, c) == pytest.approx((a1, c1 / pp), rel=1e-12)
        lone = IterationShape(((3000, 0),))
        assert pipelined.iteration_time(lone) == single.iteration_time(lone)
    two = RooflineCostModel(model, hardware, 2, engine=micro, pipeline_parallel=2)
    mixed = IterationShape(((4000, 0), (1000, 0), (500, 0)), 10, 10 * 700)
    assert two.heaviest_micro_batch(mixed) == IterationShape(((4000, 0),), 5, 5 * 700)
    one_stage = RooflineCostModel(model, hardware, 2, engine=micro)
    assert one_stage.iteration_time(mixed) == RooflineCostModel(model, hardware, 2, engine=in_turn).iteration_time(
        mixed)


def test_the_engines_host_work_runs_at_the_generations_host_speedup():
    """An engine's CPU time per iteration and per sequence, and its eager dispatch floor, on servers whose host work
    runs twice as fast as on those it was fitted on (``host_speedup`` 2, Blackwell's): halved, nothing else moved —
    a decode step of 16 sequences saves (2 ms + 16 × 40 µs) / 2."""
    engine = EngineProfile(name="e", per_iteration_ms=2.0, per_sequence_us=40.0, eager_kernel_us=90.0)
    h100 = load_hardware("h100-sxm")
    fast = with_fit(h100, {"host_speedup": 2.0})
    model = load_model("llama-3.1-8b")
    slow_cost, fast_cost = RooflineCostModel(model, h100, 1, engine=engine), RooflineCostModel(model, fast, 1,
                                                                                               engine=engine)
    decode = IterationShape((), 16, 16 * 500)
    saved = slow_cost.iteration_time(decode) - fast_cost.iteration_time(decode)
    assert saved == pytest.approx((2e-3 + 16 * 40e-6) / 2, rel=1e-9)
    assert fast_cost.eager_floor == pytest.approx(slow_cost.eager_floor / 2, rel=1e-12)
    assert (load_hardware("b200").fit.host_speedup, h100.fit.host_speedup) == (2.0, 1.0)


def test_an_engine_that_fuses_activation_quantisation_pays_no_quantisation_pass():
    """A W8A8 GEMM quantises its activations first — reads m·k 16-bit values, writes m·k fp8 ones, plus the
    hardware's fixed quantisation cost — unless the engine fuses that into the kernel before it: then the GEMM costs
    what it costs with the pass taken away, and a 16-bit GEMM is the same either way."""
    from simulator.cost.gemm import GemmModel

    h100 = load_hardware("h100-sxm")
    m, n, k = 64, 8192, 8192
    separate, fused = GemmModel(h100, "fp8"), GemmModel(h100, "fp8", fused_quantization=True)
    bandwidth = 3350e9 * h100.fit.bandwidth_efficiency
    assert separate.time(m, n, k) - fused.time(m, n, k) == pytest.approx(
        m * k * (2 + 1) / bandwidth + h100.fit.gemm.quantize_overhead_us * 1e-6, rel=1e-9)
    assert GemmModel(h100, "bf16", fused_quantization=True).time(m, n, k) == GemmModel(h100, "bf16").time(m, n, k)
    engine = EngineProfile(name="e", fuses_activation_quantization=True)
    assert RooflineCostModel(load_model("llama-3.1-8b"), h100, 1, "fp8", engine=engine).gemm.quantize_overhead == 0


def test_attention_time_by_hand():
    """H100 (Hopper fit: prefill at 0.88 of 989.4 TFLOP/s plus 0.7 of an exponential per query-key pair and head at
    3.9 × 10^12/s — its longest block, one head's last 128 queries, at 1 / (132 SMs × 1.0) of that, smooth maximum
    p = 2 — its K/V at 0.3 of 3.35 TB/s, 0.28 ns per (query, head) row of a 128-wide head and 19.75 ns per
    (128-query tile, head), 12.0 µs per kernel; decode FLOPs at 0.09 of the peak, KV reads at 0.85 of the bandwidth,
    21.0 ns per sequence and KV head, the smooth maximum p = 2 of the two, 12.0 µs per kernel)."""
    from simulator.cost import attention_time  # the public name

    peak, bw = 989.4e12, 3350e9
    h, g, d = 32, 8, 128
    per_pair = 2 * 2 * d / (peak * 0.88) + 0.7 / 3.9e12  # one head's FLOPs and exposed exponential
    # prefill: 4 sequences of 2048 tokens, full causal; then a 512-token window (pairs 512·513/2 + 1536·512, the
    # longest block's last query over 512 keys)
    for window, pairs, keys in ((0, 2048 * 2049 / 2, 2048), (512, 512 * 513 / 2 + 1536 * 512, 512)):
        tc = 4 * h * pairs * per_pair
        longest = 128 * keys * 132 * per_pair
        tm = 4 * 2048 * d * 2 * g * 2 / (bw * 0.3)
        expected = (tc**2 + longest**2) ** 0.5 + tm + 4 * h * (2048 * 0.28e-9 + 16 * 19.75e-9) + 12.0e-6
        assert attention_time("h100-sxm", "prefill", 4, 2048, h, g, d, window=window) == pytest.approx(expected)
    # decode: 16 sequences over 4096 cached tokens, fp8 KV (1 byte); a 1024 window caps what is read
    def decode_kernel(context: int, fixed_s: float, streaming: float = 0.85) -> float:
        tc, tm = 4 * h * d * context / (peak * 0.09), 2 * g * d * 1 * context / (bw * streaming)
        return 16 * (tc**2 + tm**2) ** 0.5 + 16 * g * 21.0e-9 + fixed_s

    for window, context in ((0, 4096), (1024, 1024)):
        got = attention_time("h100-sxm", "decode", 16, 4096, h, g, d, kv_dtype="fp8", window=window)
        assert got == pytest.approx(decode_kernel(context, 12.0e-6))
    assert attention_time("h100-sxm", "decode", 0, 4096, h, g, d) == 0.0
    # a decode kernel with its own fixed cost (a framework's fit) pays that instead; the prefill kernel keeps
    # 12.0 µs (the 512-window case above); a CUDA-graph floor replaces both
    from simulator.catalog import load_hardware
    from simulator.cost.attention import AttentionModel

    own = with_fit(load_hardware("h100-sxm"), {"decode_attention.overhead_us": 5.0})
    assert attention_time(own, "decode", 16, 4096, h, g, d, kv_dtype="fp8", window=1024) == pytest.approx(
        decode_kernel(1024, 5.0e-6))
    assert attention_time(own, "prefill", 4, 2048, h, g, d, window=512) == pytest.approx(expected)
    graph = AttentionModel(own, "fp8", overhead_us=2.0)
    assert graph.kernel_times("decode", 16, 4096, h, g, d, 1024) == pytest.approx(decode_kernel(1024, 2.0e-6))
    # a decode kernel that streams the cache at its own fraction of the bandwidth (a framework's fit) reads at that
    streaming = with_fit(load_hardware("h100-sxm"), {"decode_attention.bandwidth_efficiency": 0.7})
    assert attention_time(streaming, "decode", 16, 4096, h, g, d, kv_dtype="fp8") == pytest.approx(
        decode_kernel(4096, 12.0e-6, 0.7))
    with pytest.raises(ValueError, match="phase"):
        attention_time("h100-sxm", "append", 1, 1, h, g, d)
    with pytest.raises(ValueError, match=r"kv_dtype: 'int3' is not a numeric format .*\(allowed: bf16, "):
        attention_time("h100-sxm", "decode", 1, 1, h, g, d, kv_dtype="int3")


def test_gemm_time_takes_the_formats_the_api_names():
    """``gemm_time`` prices bf16, fp16, fp8, fp8_block, int8 and fp4 (issue 15's API; fp4 is NVFP4, the format of the
    spec sheets' FP4 peak) and the other weight formats; another name is one ValueError naming it and the allowed
    ones, not a KeyError."""
    b200 = load_hardware("b200")
    assert gemm_time(b200, 4096, 8192, 8192, "fp4") == gemm_time(b200, 4096, 8192, 8192, "nvfp4")
    for dtype in ("bf16", "fp16", "fp8", "fp8_block", "int8", "int4", "mxfp4"):
        assert gemm_time(b200, 4096, 8192, 8192, dtype) > 0
    with pytest.raises(ValueError, match=r"^dtype: 'fp6' is not a numeric format llmsim prices \(allowed: bf16, "):
        gemm_time(b200, 1, 1, 1, "fp6")


def test_fp4_weights_use_fp4_tensor_cores_only_where_the_gpu_has_them():
    """nvfp4 (0.5 + 1/16 bytes per weight) runs W4A4: on B200 a compute-bound GEMM runs at the FP4 peak (9,000 vs
    2,250 TFLOP/s bf16) at the fraction of it Blackwell's fit measured on B200's nvfp4 tables (f4), after quantising
    its activations (read 2, write 0.5625 bytes each, plus the fit's quantisation overhead); on H100 (no FP4) at
    16-bit math. NVIDIA quotes cuBLAS 12.9's FP4 at "up to 2.3x" FP8 on Blackwell and 4.6x FP8 on Hopper; the fitted
    fractions give 9,000 · f4 / (4,500 · f8) and 9,000 · f4 / (1,978.9 · Hopper's f8), within 20% of those. mxfp4
    (gpt-oss's format) is weight-only: dequantised to 16-bit math on either GPU, with no activation pass."""
    b200, h100 = load_hardware("b200"), load_hardware("h100-sxm")
    f4, f8 = b200.fit.gemm.flops_efficiency_by_dtype["fp4"], b200.fit.gemm.flops_efficiency_by_dtype["fp8"]
    h8 = h100.fit.gemm.flops_efficiency_by_dtype["fp8"]
    assert b200.achievable_flops("fp4") / b200.achievable_flops("fp8") == pytest.approx(9000 * f4 / (4500 * f8))
    assert b200.achievable_flops("fp4") / h100.achievable_flops("fp8") == pytest.approx(9000 * f4 / (1978.9 * h8))
    assert 9000 * f4 / (4500 * f8) == pytest.approx(2.3, rel=0.2)
    assert 9000 * f4 / (1978.9 * h8) == pytest.approx(4.6, rel=0.2)
    m = n = k = 8192
    bandwidth, p = 8000e9 * b200.fit.bandwidth_efficiency, b200.fit.gemm.knee
    serial = b200.fit.gemm.k_latency_ns * 1e-9 * k  # quantised weights: the main loop walks all of k
    f16 = b200.fit.gemm.flops_efficiency
    for dtype, q, peak, fraction, quantised in (("nvfp4", 0.5 + 1 / 16, 9000e12, f4, True),
                                                ("mxfp4", 0.5 + 1 / 32, 2250e12, f16, False)):
        tc = 2 * m * n * k / (peak * fraction)
        tm = ((m * k + m * n) * 2 + k * n * q) / bandwidth
        quantise = m * k * (2 + q) / bandwidth + b200.fit.gemm.quantize_overhead_us * 1e-6 if quantised else 0.0
        expected = (tc**p + tm**p + serial**p) ** (1 / p) + b200.fit.kernel_overhead_us * 1e-6 + quantise
        assert gemm_time(b200, m, n, k, dtype) == pytest.approx(expected), dtype
    assert gemm_time(h100, m, n, k, "mxfp4") == pytest.approx(gemm_time(h100, m, n, k, "bf16"), rel=0.03)
    # one row on H100: the weight read (0.53125 or 0.5625 bytes each), the 16-bit math of one 32-row tile and the
    # main loop, smooth maximum, as int4 (no activation quantisation: the weights are dequantised)
    serial = 0.9e-9 * k  # Hopper's fit: 0.9 ns per k, 0.85 of the HBM, 0.81 of the peak, 2.8 µs per kernel
    for dtype, q in (("mxfp4", 0.5 + 1 / 32), ("nvfp4", 0.5 + 1 / 16)):
        read = ((k + n) * 2 + k * n * q) / (3350e9 * 0.85)
        math_ = 2 * 32 * n * k / (989.4e12 * 0.81)
        assert gemm_time(h100, 1, n, k, dtype) == pytest.approx((read**2 + math_**2 + serial**2) ** 0.5 + 2.8e-6)


def test_mxfp4_experts_run_weight_only_or_against_mxfp8_as_the_engine_runs_them():
    """gpt-oss's MXFP4 experts: weight-only at the 16-bit rate (the kernel tables' w4a16_mxfp4), or — where the
    engine runs MXFP4 x MXFP8 (``mxfp4_experts_by_generation``: on Blackwell TensorRT-LLM's TRTLLM MoE backend,
    SGLang's default and vLLM's FlashInfer kernel) — at the FP8 peak, its activations MXFP8 (1 + 1/32 bytes). On
    Hopper, without the entry, weight-only whatever the engine, and a profile without one (Splitwise's) everywhere."""
    from simulator.catalog import load_engine
    from simulator.cost.moe import ExpertsModel

    b200 = load_hardware("b200")
    trtllm, splitwise = load_engine("trtllm"), load_engine("splitwise")
    assert {load_engine(name).expert_format("mxfp4", "blackwell") for name in ("trtllm", "sglang", "vllm")} == {
        "mxfp4_mxfp8"}
    assert trtllm.expert_format("mxfp4", "hopper") == splitwise.expert_format("mxfp4", "blackwell") == "mxfp4"
    assert trtllm.expert_format("nvfp4", "blackwell") == "nvfp4"  # W4A4 already: its own format
    moe = b200.fit.moe
    weight_only, w4a8 = ExpertsModel(b200, "mxfp4"), ExpertsModel(b200, "mxfp4_mxfp8")
    assert weight_only.flops == pytest.approx(2250e12 * b200.fit.gemm.flops_efficiency * moe.gemm_efficiency)
    assert w4a8.flops == pytest.approx(4500e12 * b200.fit.gemm.flops_efficiency_by_dtype["fp8"] * moe.gemm_efficiency)
    assert (weight_only.w, weight_only.a) == (0.5 + 1 / 32, 2.0)
    assert (w4a8.w, w4a8.a) == (0.5 + 1 / 32, 1 + 1 / 32)


def test_a_decode_cost_per_query_head_within_each_kv_head_block():
    """``decode_attention_ns_per_query_head`` (TensorRT-LLM's kernels: a block's work on each query head of its
    group) adds, per sequence and layer, that cost for each query head on the GPU, beside the per-(sequence, KV head)
    block cost: by hand, B × heads × x per kernel, and in a decode step B × L × (H / t) × x — a constant per sequence,
    so the step stays affine in the context sum."""
    from simulator.cost.attention import AttentionModel
    from simulator.cost.roofline import RooflineCostModel

    hw = load_hardware("h100-sxm")
    with_cost = with_fit(hw, {"decode_attention.ns_per_query_head": 3.0})
    batch, heads = 16, 32
    difference = (AttentionModel(with_cost).kernel_times("decode", batch, 1000, heads, 8, 128, 0)
                  - AttentionModel(hw).kernel_times("decode", batch, 1000, heads, 8, 128, 0))
    assert difference == pytest.approx(batch * heads * 3e-9)
    model, tp, decodes = load_model("llama-3-8b"), 2, 24
    a0, c0 = RooflineCostModel(model, hw, tp).decode_step_coefficients(decodes)
    a1, c1 = RooflineCostModel(model, with_cost, tp).decode_step_coefficients(decodes)
    assert c1 == c0 and a1 - a0 == pytest.approx(decodes * model.num_layers * (32 / tp) * 3e-9)


def test_a_decode_group_beyond_the_kernels_largest_runs_its_fallback_per_query_head(tmp_path):
    """``decode_attention_max_group`` (TensorRT-LLM's XQA: up to 32 query heads per KV head from one read of it):
    a larger group is priced per (query head, cached token, 128 elements of head width) at
    ``decode_attention_ns_per_query_token`` instead of streaming the KV, by hand: 999 more cached tokens of 4
    sequences at 64 heads cost 4 × 999 × 64 × 0.08 ns (twice that at head width 256, the same at 64); a group of 32
    keeps the streaming price; and in a serving decode step a multi-query model's 2 layers of 48 query heads over
    one KV head cost 2 × 48 × 0.08 ns per cached token (the step stays affine in the context sum)."""
    import json

    from simulator.cost.attention import AttentionModel
    from simulator.cost.roofline import RooflineCostModel

    hw = load_hardware("h100-sxm")
    fallback = with_fit(hw, {"decode_attention.max_group": 32, "decode_attention.ns_per_query_token": 0.08})
    model = AttentionModel(fallback)
    for head_dim, widths in ((64, 1), (128, 1), (256, 2)):
        longer = (model.kernel_times("decode", 4, 1000, 64, 1, head_dim, 0)
                  - model.kernel_times("decode", 4, 1, 64, 1, head_dim, 0))
        assert longer == pytest.approx(4 * 999 * 64 * widths * 0.08e-9)
    assert model.kernel_times("decode", 4, 1000, 32, 1, 128, 0) == AttentionModel(hw).kernel_times(
        "decode", 4, 1000, 32, 1, 128, 0)
    config = tmp_path / "mqa.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 6144, "num_attention_heads": 48,
                                  "num_key_value_heads": 1, "num_hidden_layers": 2, "intermediate_size": 16384,
                                  "vocab_size": 32000, "max_position_embeddings": 8192}))
    _, slope = RooflineCostModel(load_model(str(config)), fallback, 1).decode_step_coefficients(8)
    assert slope == pytest.approx(2 * 48 * 0.08e-9)


def test_a_decode_kernels_query_tiles_and_its_multi_head_kernel():
    """``decode_attention_query_tile`` (TensorRT-LLM's XQA: a group's query heads as 16-row MMA tiles) and
    ``decode_attention_mha_ns_per_head`` (its masked multi-head kernel for one query head per block, and for groups
    above ``decode_attention_max_group``), by hand at 31 ns a block, 1.1 ns a row of each further tile, 8.5 ns a
    multi-head (sequence, head), per sequence: groups of 2 and 16 one tile, 8 × 31 and 2 × 31 ns; a group of 17 and
    of 32 two tiles, 2 × (31 + 16 × 1.1) and 1 × (31 + 16 × 1.1) ns; multi-head 32 × 8.5; a group of 64 beyond 32
    64 × 8.5. Without them (the pooled fit), a block and each query head pay: KV heads × 31 + heads × 1.1. In a
    decode step the same per sequence and layer (the step stays affine in the context sum)."""
    from simulator.cost.attention import AttentionModel
    from simulator.cost.roofline import RooflineCostModel

    costs = {"decode_attention.ns_per_head": 31.0, "decode_attention.ns_per_query_head": 1.1}
    pooled = with_fit(load_hardware("h100-sxm"), costs)
    trt = with_fit(pooled, {"decode_attention.query_tile": 16, "decode_attention.mha_ns_per_head": 8.5,
                                    "decode_attention.max_group": 32})
    for heads, kv_heads, by_hand in ((16, 8, 8 * 31), (32, 2, 2 * 31), (34, 2, 2 * (31 + 16 * 1.1)),
                                     (32, 1, 31 + 16 * 1.1), (32, 32, 32 * 8.5), (64, 1, 64 * 8.5)):
        assert AttentionModel(trt).decode_block_cost(heads, kv_heads) == pytest.approx(by_hand * 1e-9)
        assert AttentionModel(pooled).decode_block_cost(heads, kv_heads) == pytest.approx(
            (kv_heads * 31 + heads * 1.1) * 1e-9)
    # a kernel of 4 sequences: the blocks' cost 4 × theirs beside the same streaming
    difference = (AttentionModel(trt).kernel_times("decode", 4, 1000, 32, 8, 128, 0)
                  - AttentionModel(pooled).kernel_times("decode", 4, 1000, 32, 8, 128, 0))
    assert difference == pytest.approx(4 * (8 * 31 - (8 * 31 + 32 * 1.1)) * 1e-9)
    model, tp, decodes = load_model("llama-3-8b"), 2, 24  # 32 query heads, 8 KV heads: 16 and 4 per GPU, one tile
    a0, c0 = RooflineCostModel(model, pooled, tp).decode_step_coefficients(decodes)
    a1, c1 = RooflineCostModel(model, trt, tp).decode_step_coefficients(decodes)
    assert c1 == c0 and a0 - a1 == pytest.approx(decodes * model.num_layers * 16 * 1.1e-9)


def test_a_prefill_fallback_kernel_computes_every_causal_pair_at_its_own_rate(tmp_path):
    """``prefill_fallback_head_dim`` / ``prefill_fallback_window_head_dim`` (SGLang's H100 prefill of head width
    512, or 256 under a window): such a prefill computes every causal pair at ``prefill_fallback_efficiency`` of the
    peak, its window unused — priced as the same kernel without a window at that efficiency; a narrower windowed
    head keeps the window and the kernel's own rate. In serving, a sliding-window model of head width 256 prefills
    a prompt as the same model without a window would at that efficiency."""
    import json

    from simulator.cost.attention import AttentionModel
    from simulator.cost.roofline import RooflineCostModel

    hw = load_hardware("h100-sxm")
    dispatch = {"prefill_attention.fallback_head_dim": 512, "prefill_attention.fallback_window_head_dim": 256,
                "prefill_attention.fallback_efficiency": 0.1}
    fallback, slow = with_fit(hw, dispatch), with_fit(hw, {"prefill_attention.efficiency": 0.1})

    def prefill(profile, head_dim, window):
        return AttentionModel(profile).kernel_times("prefill", 2, 4096, 16, 8, head_dim, window)

    assert prefill(fallback, 256, 1024) == pytest.approx(prefill(slow, 256, 0))
    assert prefill(fallback, 512, 0) == pytest.approx(prefill(slow, 512, 0))
    assert prefill(fallback, 256, 0) == prefill(hw, 256, 0)
    assert prefill(fallback, 128, 1024) == prefill(hw, 128, 1024) < prefill(hw, 128, 0)

    def model(window):
        config = tmp_path / f"window{window}.json"
        config.write_text(json.dumps({"model_type": "mistral", "hidden_size": 2048, "num_attention_heads": 8,
                                      "num_key_value_heads": 4, "head_dim": 256, "num_hidden_layers": 2,
                                      "intermediate_size": 8192, "vocab_size": 32000, "sliding_window": window,
                                      "max_position_embeddings": 32768}))
        return load_model(str(config))

    windowed = RooflineCostModel(model(1024), fallback, 1).prefill_attention_time(((4096, 0),))
    assert windowed == pytest.approx(RooflineCostModel(model(None), slow, 1).prefill_attention_time(((4096, 0),)))
    assert windowed > RooflineCostModel(model(1024), hw, 1).prefill_attention_time(((4096, 0),))


def test_a_decode_step_of_few_blocks_streams_at_their_rate():
    """``decode_attention_block_gb_per_s``: each (sequence, KV head) block streams the cache at most at that rate,
    so the memory side of a decode kernel is the smooth maximum (the GPU's knee p) of the cache's bytes at its HBM
    fraction and at the blocks' rate — by hand for one sequence of one KV head and for 4 × 8 blocks; and in serving
    a step's cost per cached token falls toward the unlimited one as its sequences (blocks) grow, the step affine
    in the context sum at each batch."""
    from simulator.cost.attention import AttentionModel
    from simulator.cost.base import IterationShape
    from simulator.cost.roofline import RooflineCostModel

    hw = load_hardware("h100-sxm")
    limited = with_fit(hw, {"decode_attention.block_gb_per_s": 40.0})
    p, bandwidth = hw.fit.gemm.knee, hw.memory_bandwidth_gb_per_s * 1e9 * hw.fit.bandwidth_efficiency
    flops = hw.achievable_flops("bf16") / hw.fit.gemm.flops_efficiency * hw.fit.decode_attention.efficiency
    for batch, kv_heads in ((1, 1), (4, 8)):
        per_token_bytes = 2 * kv_heads * 128 * 2
        memory = ((per_token_bytes / bandwidth) ** p + (per_token_bytes / (batch * kv_heads * 40e9)) ** p) ** (1 / p)
        compute = 2 * 8 * kv_heads * 256 / flops
        per_token = (compute**p + memory**p) ** (1 / p)
        longer = (AttentionModel(limited).kernel_times("decode", batch, 10_001, 8 * kv_heads, kv_heads, 128, 0)
                  - AttentionModel(limited).kernel_times("decode", batch, 1, 8 * kv_heads, kv_heads, 128, 0))
        assert longer == pytest.approx(batch * 10_000 * per_token)
    model = load_model("llama-3-8b")
    plain, slow = RooflineCostModel(model, hw, 1), RooflineCostModel(model, limited, 1)
    slopes = [slow.decode_step_coefficients(batch)[1] / plain.decode_step_coefficients(batch)[1]
              for batch in (1, 8, 64, 512)]
    assert slopes[0] > slopes[1] > slopes[2] > slopes[3] > 1 and slopes[3] == pytest.approx(1, abs=0.01)
    a, c = slow.decode_step_coefficients(8)
    assert slow.iteration_time(IterationShape((), 8, 8 * 4000)) == pytest.approx(a + c * 8 * 4000)


def test_a_decode_step_of_less_than_one_wave_of_blocks_pays_one_wave_and_its_split():
    """``decode_attention_blocks_per_sm`` × the GPU's ``sm_count`` (spec sheet) blocks run at once: a decode step of
    fewer (sequence, KV head) blocks pays one wave's block costs, and ``decode_attention_split_us`` to combine the
    split-KV partials of contexts of ``decode_attention_split_tokens`` or more. By hand on H100 (132 SMs) at half a
    block per SM (a wave of 66 blocks), 20 ns a block, 8 KV heads (160 ns a sequence), a 2 µs split from 128 tokens:
    4 sequences (32 blocks) pay the block costs of 66 / 8 = 8.25 sequences and, at 1,024 cached tokens, the split
    (at 64, none); 16 sequences (128 blocks) pay their own, unsplit. In serving, a step of 4 sequences pays per layer
    8.25 × 160 ns + 2 µs (every context taken as split) and one of 16 none of it, the step affine in the context
    sum; under CUDA graphs the combine costs at most the kernels' floor; a GPU without a stated SM count has no
    waves."""
    from simulator.cost.attention import AttentionModel
    from simulator.cost.base import IterationShape
    from simulator.cost.roofline import RooflineCostModel

    hw = with_fit(load_hardware("h100-sxm"), {"decode_attention.ns_per_head": 20.0,
                                                       "decode_attention.ns_per_query_head": 0.0})
    waves = with_fit(hw, {"decode_attention.blocks_per_sm": 0.5, "decode_attention.split_us": 2.0,
                                  "decode_attention.split_tokens": 128})
    assert hw.sm_count == 132

    def extra(batch, context):
        return (AttentionModel(waves).kernel_times("decode", batch, context, 32, 8, 128, 0)
                - AttentionModel(hw).kernel_times("decode", batch, context, 32, 8, 128, 0))

    assert extra(4, 1024) == pytest.approx((8.25 - 4) * 160e-9 + 2e-6)
    assert extra(4, 64) == pytest.approx((8.25 - 4) * 160e-9)
    assert extra(16, 1024) == pytest.approx(0, abs=1e-15)
    # under CUDA-graph replay at a 1 µs kernel floor the combine, a kernel, costs at most that floor
    replayed = (AttentionModel(waves, overhead_us=1.0).kernel_times("decode", 4, 1024, 32, 8, 128, 0)
                - AttentionModel(hw, overhead_us=1.0).kernel_times("decode", 4, 1024, 32, 8, 128, 0))
    assert replayed == pytest.approx((8.25 - 4) * 160e-9 + 1e-6)
    model, tp = load_model("llama-3-8b"), 1  # 32 layers of 32 query heads over 8 KV heads
    for decodes, by_hand in ((4, (8.25 - 4) * 160e-9 + 2e-6), (16, 0.0)):
        a0, c0 = RooflineCostModel(model, hw, tp).decode_step_coefficients(decodes)
        a1, c1 = RooflineCostModel(model, waves, tp).decode_step_coefficients(decodes)
        assert c1 == c0 and a1 - a0 == pytest.approx(model.num_layers * by_hand, abs=1e-15)
    a, c = RooflineCostModel(model, waves, tp).decode_step_coefficients(4)
    assert RooflineCostModel(model, waves, tp).iteration_time(IterationShape((), 4, 4 * 3000)) == pytest.approx(
        a + c * 4 * 3000)
    unstated = waves.model_copy(update={"sm_count": 0})
    assert AttentionModel(unstated).kernel_times("decode", 4, 1024, 32, 8, 128, 0) == pytest.approx(
        AttentionModel(hw).kernel_times("decode", 4, 1024, 32, 8, 128, 0))


def test_a_decode_kernel_reads_the_cache_in_whole_tiles():
    """``decode_attention_kv_tile``: a decode kernel's loop reads the cache a tile at a step, a partial tile as a
    whole one. With a 64-token tile every context of 1–64 tokens costs what 64 cost, 65 costs 64 tokens more than 64
    (the untiled kernel's cost per token, read off its own slope), and a 100-token window reads 128. In serving the
    step stays affine in the context sum: each sequence pays its tiles' mean padding, (64 − 1) / 2 tokens — the exact
    mean of ceil(S / 64) · 64 − S over contexts spread evenly over whole tiles."""
    import numpy as np

    from simulator.cost.attention import AttentionModel
    from simulator.cost.roofline import RooflineCostModel

    hw = load_hardware("h100-sxm")
    assert hw.fit.decode_attention.blocks_per_sm == 0  # the pooled fit: no waves, no splits
    tiled = with_fit(hw, {"decode_attention.kv_tile": 64})

    def kernel(profile, context, window=0):
        return float(AttentionModel(profile).kernel_times("decode", 8, context, 32, 8, 128, window))

    per_token = (kernel(hw, 3000) - kernel(hw, 2000)) / (8 * 1000)  # seconds per cached token of all 8 sequences
    assert {round(kernel(tiled, s) * 1e12) for s in (1, 17, 63, 64)} == {round(kernel(hw, 64) * 1e12)}
    assert kernel(tiled, 65) - kernel(tiled, 64) == pytest.approx(8 * 64 * per_token)
    assert kernel(tiled, 5000, window=100) == pytest.approx(kernel(hw, 128))
    assert kernel(tiled, 1024) == pytest.approx(kernel(hw, 1024))  # whole tiles: nothing to pad
    contexts = np.arange(1, 64 * 40 + 1)
    assert np.mean(np.ceil(contexts / 64) * 64 - contexts) == pytest.approx((64 - 1) / 2)
    model = load_model("llama-3-8b")  # every layer full attention
    for decodes in (1, 8, 64):
        a0, c0 = RooflineCostModel(model, hw, 1).decode_step_coefficients(decodes)
        a1, c1 = RooflineCostModel(model, tiled, 1).decode_step_coefficients(decodes)
        assert c1 == pytest.approx(c0) and a1 - a0 == pytest.approx(decodes * 31.5 * c0)


def test_a_prefill_kernel_waits_for_its_longest_block():
    """``prefill_attention_blocks_per_sm``: a prefill kernel takes at least its longest thread block — one head's
    last 128 queries over every key — at 1 / (SMs × blocks per SM) of its FLOP rate. By hand on H100 (132 SMs, one
    block per SM, p = 2, every other cost off): one 16,384-token prompt of one 128-wide head is 128 blocks, its FLOPs
    4·128·16,384·16,385/2 and its longest block's 2·256·128·16,384 × 132, 1.55 times more: the kernel takes
    √(1 + 1.55²) = 1.84 times its FLOPs' time (vLLM's H100 table: 309 TFLOP/s for this prompt, 543 for two of
    them, whose longest block is the same); a 2,048-token window bounds the longest block's keys; and the bound
    scales with the rate as the FLOPs do (a fallback kernel's too)."""
    from simulator.cost.attention import AttentionModel

    hw = with_fit(load_hardware("h100-sxm"), {
        "prefill_attention.io_efficiency": float("inf"), "prefill_attention.ns_per_row": 0.0,
        "prefill_attention.ns_per_tile": 0.0, "prefill_attention.overhead_us": 0.0, "gemm.knee": 2.0,
        "prefill_attention.blocks_per_sm": 0.0, "prefill_attention.exp_exposed": 0.0})
    bound = with_fit(hw, {"prefill_attention.blocks_per_sm": 1.0})
    rate = 989.4e12 * hw.fit.prefill_attention.efficiency
    s = 16_384
    flops, longest = 4 * 128 * s * (s + 1) / 2, 2 * 256 * 128 * s * 132

    def kernel(profile, batch, window=0):
        return float(AttentionModel(profile).kernel_times("prefill", batch, s, 1, 1, 128, window))

    assert kernel(hw, 1) == pytest.approx(flops / rate)
    assert kernel(bound, 1) == pytest.approx(((flops / rate) ** 2 + (longest / rate) ** 2) ** 0.5)
    assert kernel(bound, 1) / kernel(hw, 1) == pytest.approx((1 + (longest / flops) ** 2) ** 0.5)
    assert kernel(bound, 2) == pytest.approx(((2 * flops / rate) ** 2 + (longest / rate) ** 2) ** 0.5)
    pairs = 2048 * 2049 / 2 + (s - 2048) * 2048
    windowed = ((4 * 128 * pairs / rate) ** 2 + (2 * 256 * 128 * 2048 * 132 / rate) ** 2) ** 0.5
    assert kernel(bound, 1, window=2048) == pytest.approx(windowed)
    half = AttentionModel(bound, compute_scale=0.5).kernel_times("prefill", 1, s, 1, 1, 128, 0)
    assert half == pytest.approx(2 * kernel(bound, 1))


def test_a_prefill_kernel_adds_its_bytes_and_may_pack_a_groups_heads():
    """A prefill kernel adds its K/V bytes' time to its FLOPs' (not a smooth maximum: the frameworks' tables grow by
    a cost per KV head and token at every prompt length); and its blocks, one per (128 query rows, head), are with
    ``prefill_attention_packs_gqa`` one per (128 rows of a KV head's query heads, KV head). By hand on H100: a
    one-token chunk over 8 KV heads with 64 query heads is 64 blocks, packed 8 (at 1 µs a block: 64 and 8 µs); a
    1,000-token prompt of 32 heads over 8 is 32 × 8 = 256 blocks, packed 8 × ceil(4,000 / 128) = 256. In serving
    (:func:`simulator.cost.layers.span_totals`) the tiles and the longest block follow the same rows: chunks of 100
    new tokens and of 300 after 1,000 cached, 4 rows per token: ceil(400 / 128) + ceil(1,200 / 128) = 14 tiles per KV
    head, the longest block 128 rows over 1,300 keys (under a 512-token span, over 512)."""
    from simulator.cost.attention import AttentionModel
    from simulator.cost.layers import span_totals

    hw = with_fit(load_hardware("h100-sxm"), {
        "prefill_attention.efficiency": 1.0, "prefill_attention.ns_per_row": 0.0,
        "prefill_attention.ns_per_tile": 1000.0, "prefill_attention.overhead_us": 0.0,
        "prefill_attention.blocks_per_sm": 0.0, "prefill_attention.exp_exposed": 0.0})
    packed = with_fit(hw, {"prefill_attention.packs_gqa": True})

    def blocks(profile, seq, heads, kv_heads):  # the kernel's time with its FLOPs and bytes taken out, in µs
        model = AttentionModel(profile)
        rest = 4 * heads * 128 * seq * (seq + 1) / 2 / model.prefill_flops + seq * 2 * kv_heads * 128 * 2 / (
            model.io_bandwidth)
        return (float(model.kernel_times("prefill", 1, seq, heads, kv_heads, 128, 0)) - rest) * 1e6

    assert blocks(hw, 1, 64, 8) == pytest.approx(64) and blocks(packed, 1, 64, 8) == pytest.approx(8)
    assert blocks(hw, 1000, 32, 8) == pytest.approx(256) and blocks(packed, 1000, 32, 8) == pytest.approx(256)
    chunks = ((100, 0), (300, 1000))
    assert span_totals(chunks, 0, 4.0)[4:] == (14, 128 * 1300)
    assert span_totals(chunks, 512, 4.0)[4:] == (14, 128 * 512)
    assert span_totals(chunks)[4:] == (1 + 3, 128 * 1300)  # one row per token: 1 + 3 tiles per head
    # serving prices a prompt as the kernel does: Llama-3-8B (32 query heads over 8) on one GPU, a 40-token prompt
    # is 8 × ceil(160 / 128) = 16 blocks packed (32 unpacked), in each of 32 layers
    model = load_model("llama-3-8b")
    for profile in (hw, packed):
        served = RooflineCostModel(model, profile, 1, engine=EngineProfile(name="test")).breakdown(
            IterationShape(((40, 0),)))["attention_s"]
        assert served == pytest.approx(32 * float(AttentionModel(profile).kernel_times("prefill", 1, 40, 32, 8, 128,
                                                                                       0)))


def test_a_prefill_kernel_pays_its_softmaxs_exponentials_and_its_rows_by_their_width():
    """Every query-key pair of every head takes one exponential (the softmax) on the special-function units, whatever
    the head width, while its FLOPs grow with the width: ``prefill_attention_exp_exposed`` of that time is not hidden
    behind the tensor cores. By hand on H100 (3.9 × 10^12 exponentials/s; FLOPs at the full 16-bit peak, every other
    cost off): a 4,096-token prompt of one head has 4,096 · 4,097 / 2 pairs; at width 64 its exponentials take
    989.4 / (3.9 · 256) = 0.99 of its FLOPs' time, at width 128 half of that, so fully exposed a width-64 head costs
    1.99 times its FLOPs and a width-128 head 1.50; on B300 (10.7 × 10^12/s, twice B200's 5.0) the exponentials'
    time is 5.0 / 10.7 of B200's. A (query, head) row pays ``prefill_attention_ns_per_row`` per 128 elements of its
    head's width (the query read, the output written): 4,096 rows at 1 ns cost 2.05 µs at width 64, 8.19 at 256."""
    from simulator.cost.attention import AttentionModel

    off = {"prefill_attention.efficiency": 1.0, "prefill_attention.io_efficiency": float("inf"),
           "prefill_attention.ns_per_row": 0.0, "prefill_attention.ns_per_tile": 0.0,
           "prefill_attention.overhead_us": 0.0, "prefill_attention.blocks_per_sm": 0.0}
    hw = with_fit(load_hardware("h100-sxm"), {**off, "prefill_attention.exp_exposed": 0.0})
    exposed = with_fit(hw, {"prefill_attention.exp_exposed": 1.0})
    s = 4096
    pairs = s * (s + 1) / 2

    def kernel(profile, head_dim):
        return float(AttentionModel(profile).kernel_times("prefill", 1, s, 1, 1, head_dim, 0))

    for head_dim in (64, 128):
        flops = 4 * head_dim * pairs / 989.4e12
        assert kernel(hw, head_dim) == pytest.approx(flops)
        assert kernel(exposed, head_dim) == pytest.approx(flops + pairs / 3.9e12)
    assert kernel(exposed, 64) / kernel(hw, 64) == pytest.approx(1 + 989.4 / (3.9 * 256))
    assert kernel(exposed, 128) / kernel(hw, 128) == pytest.approx(1 + 989.4 / (3.9 * 512))

    def exponentials(gpu):
        profile = with_fit(load_hardware(gpu), {**off, "prefill_attention.exp_exposed": 1.0})
        model = AttentionModel(profile)
        return float(model.kernel_times("prefill", 1, s, 1, 1, 128, 0)) - 4 * 128 * pairs / model.prefill_flops

    assert exponentials("b300") == pytest.approx(pairs / 10.7e12)
    assert exponentials("b300") / exponentials("b200") == pytest.approx(5.0 / 10.7)
    rows = with_fit(hw, {"prefill_attention.ns_per_row": 1.0})
    for head_dim, micros in ((64, 2.048), (128, 4.096), (256, 8.192)):
        assert (kernel(rows, head_dim) - kernel(hw, head_dim)) * 1e6 == pytest.approx(micros)


def test_an_attention_kernels_work_items_are_spread_over_the_gpus_sms():
    """The per-item costs (decode blocks, prefill rows and query tiles) are whole-GPU nanoseconds of work spread over
    the SMs of the GPU they were fitted on (``fitted_sm_count``): a GPU of other SMs pays them × fitted / its own. By
    hand on H100 (132 SMs, 21 ns per decode block as fitted) against the same GPU with 66 and 264 SMs: 1,024
    sequences of 8 KV heads (8,192 blocks, many waves either way) over 16 cached tokens pay 8,192 · 21 ns = 172 µs of
    block costs on 132 SMs, twice that on 66, half on 264; a 4,096-token prefill of 32 heads pays its 131,072 rows at
    1 ns each (131 µs) and its 32 · 32 query tiles at 10 ns (10.2 µs) twice over on 66 SMs. The H100 and A100
    profiles, whose timings fitted their generations, pay them as fitted."""
    from simulator.cost.attention import AttentionModel

    h100 = with_fit(load_hardware("h100-sxm"), {
        "prefill_attention.blocks_per_sm": 0.0, "prefill_attention.ns_per_row": 1.0,
        "prefill_attention.ns_per_tile": 10.0})
    assert (h100.fit.sm_count, h100.fit.decode_attention.ns_per_head) == (132, 21.0)
    assert load_hardware("a100-80gb-sxm").fit.sm_count == load_hardware("a100-80gb-sxm").sm_count == 108

    def kernel(sm_count, phase, batch, seq_len, heads):
        profile = h100.model_copy(update={"sm_count": sm_count})
        return float(AttentionModel(profile).kernel_times(phase, batch, seq_len, heads, 8, 128, 0))

    blocks = 1024 * 8 * 21e-9
    decode = {sms: kernel(sms, "decode", 1024, 16, 32) for sms in (66, 132, 264)}
    assert decode[66] - decode[132] == pytest.approx(blocks)
    assert decode[132] - decode[264] == pytest.approx(blocks / 2)
    items = 4096 * 32 * 1e-9 + 32 * 32 * 10e-9
    assert kernel(66, "prefill", 1, 4096, 32) - kernel(132, "prefill", 1, 4096, 32) == pytest.approx(items)


def test_a_decode_kernel_may_split_below_another_occupancy_than_its_wave():
    """``decode_attention_split_blocks_per_sm``: a step of fewer blocks than ``sm_count`` × it splits (as
    FlashAttention's heuristic splits below 0.8 of the SMs), whatever its wave. By hand on H100 (132 SMs), a wave of
    half a block per SM (66 blocks), splitting below 0.8 (105.6 blocks), 8 KV heads: 8 sequences (64 blocks) pay one
    wave's block costs (8.25 sequences' at 20 ns a block) and the 2 µs split, 12 (96 blocks) their own block costs
    and still the split, 16 (128 blocks) neither; unstated, the split follows the wave (12 sequences: no split)."""
    from simulator.cost.attention import AttentionModel

    hw = with_fit(load_hardware("h100-sxm"), {"decode_attention.ns_per_head": 20.0,
                                                       "decode_attention.ns_per_query_head": 0.0})
    waves = with_fit(hw, {"decode_attention.blocks_per_sm": 0.5, "decode_attention.split_us": 2.0,
                                  "decode_attention.split_tokens": 128})
    split_wider = with_fit(waves, {"decode_attention.split_blocks_per_sm": 0.8})

    def extra(profile, batch):
        return (AttentionModel(profile).kernel_times("decode", batch, 1024, 32, 8, 128, 0)
                - AttentionModel(hw).kernel_times("decode", batch, 1024, 32, 8, 128, 0))

    assert extra(split_wider, 8) == pytest.approx((8.25 - 8) * 160e-9 + 2e-6)
    assert extra(split_wider, 12) == pytest.approx(2e-6)
    assert extra(split_wider, 16) == pytest.approx(0, abs=1e-15)
    assert extra(waves, 12) == pytest.approx(0, abs=1e-15)
