"""Cost models against hand calculations and physical bounds."""

from __future__ import annotations

import pytest
import yaml

import simulator
from simulator.catalog import load_hardware, load_model
from simulator.config.schema import LinearCostConfig
from simulator.cost import IterationShape, LinearCostModel, RooflineCostModel, decode_run_time
from tests.helpers import experiment

# A toy model and GPU with round numbers, so every operator can be worked out by hand below.
TOY_MODEL = {
    "name": "toy", "num_layers": 2, "hidden_size": 64, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
    "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 512,
}
TOY_GPU = {
    "name": "toy-gpu", "memory_gib": 1, "memory_bandwidth_gbps": 10, "peak_tflops": {"bf16": 0.1, "fp16": 0.1},
    "flops_efficiency": 1.0, "bandwidth_efficiency": 1.0,
}
F, BW = 1e11, 1e10  # FLOP/s and bytes/s: ridge point 10 FLOP/byte


def roof(flops: float, nbytes: float) -> float:
    return max(flops / F, nbytes / BW)


# Hand calculation, bf16 (2 bytes). Prefill of one 100-token prompt (T = 100):
#   QKV   m=100 n=(4+2·2)·16=128 k=64: FLOPs 2·100·128·64 = 1,638,400; bytes (6400+8192+12800)·2 = 54,784
#   attention I/O (queries in, outputs out): 2·100·64·2 = 25,600 bytes
#   attention: FLOPs 4·4·16·(100·101/2) = 1,292,800; K,V bytes 2·2·16·2·100 = 12,800
#   O     m=100 n=64 k=64: FLOPs 819,200; bytes (6400+4096+6400)·2 = 33,792
#   up    m=100 n=2·128 k=64: FLOPs 3,276,800; bytes (6400+16384+25600)·2 = 96,768
#   down  m=100 n=64 k=128: FLOPs 1,638,400; bytes (12800+8192+6400)·2 = 54,784
#   elementwise: norms 2×(read+write 64) + act (read 256, write 128) + 2 adds (read 128, write 64) = 1024 per token
#                → 100·1024·2 = 204,800 bytes
#   per model: embedding gather 100·64·2 = 12,800 bytes; LM head m=1 n=1000 k=64: FLOPs 128,000,
#              bytes (64+64000+1000)·2 = 130,128
PREFILL_LAYER = (
    roof(1_638_400, 54_784) + roof(0, 25_600) + roof(1_292_800, 12_800) + roof(819_200, 33_792)
    + roof(3_276_800, 96_768) + roof(1_638_400, 54_784) + roof(0, 204_800)
)
PREFILL = 2 * PREFILL_LAYER + roof(0, 12_800) + roof(128_000, 130_128)


def decode_step(context: int) -> float:
    """One token (T = 1) with ``context`` tokens of KV after this step's write."""
    layer = (
        roof(2 * 128 * 64, (64 + 8192 + 128) * 2)
        + roof(0, 2 * 64 * 2)
        + roof(4 * 4 * 16 * context, 2 * 2 * 16 * 2 * context)
        + roof(2 * 64 * 64, (64 + 4096 + 64) * 2) + roof(2 * 256 * 64, (64 + 16384 + 256) * 2)
        + roof(2 * 64 * 128, (128 + 8192 + 64) * 2) + roof(0, 1024 * 2)
    )
    return 2 * layer + roof(0, 64 * 2) + roof(128_000, 130_128)


@pytest.fixture
def toy_paths(tmp_path):
    model, gpu = tmp_path / "toy.yaml", tmp_path / "toy-gpu.yaml"
    model.write_text(yaml.safe_dump(TOY_MODEL))
    gpu.write_text(yaml.safe_dump(TOY_GPU))
    return str(model), str(gpu)


def test_one_request_on_idle_gpu_equals_hand_computed_roofline(toy_paths):
    model, gpu = toy_paths
    config = experiment(
        model=model, hardware=gpu, cost_model={"kind": "roofline"},
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


def test_llama2_7b_decode_streams_the_weights_once():
    """Batch-1 decode on A100 is memory-bound: (weights except the embedding table + KV) / bandwidth, within 1%.

    Llama-2-7B: 6.74 B parameters (published), 131 M in the embedding table (32000 × 4096), fp16;
    KV 524,288 bytes per token (2 × 32 layers × 32 heads × 128 × 2 B).
    """
    hardware = load_hardware("a100-80gb-sxm")
    cost = RooflineCostModel(load_model("llama-2-7b"), hardware, dtype="fp16")
    bandwidth = 2039e9 * hardware.bandwidth_efficiency
    for context in (1, 1000, 4000):
        expected = ((6.74e9 - 32000 * 4096) * 2 + 524_288 * context) / bandwidth
        actual = cost.iteration_time(IterationShape(num_decodes=1, decode_context_sum=context))
        assert actual == pytest.approx(expected, rel=0.01)


def test_llama3_8b_long_prefill_is_compute_bound():
    """A 4096-token prefill: 2 FLOPs per weight per token plus causal attention at peak×eff, plus the elementwise
    traffic (norms, activation, residual adds: 10·D + 3·I elements per token per layer) at bandwidth×eff.

    The elementwise share (~10%) matches measurement: on A100, Llama-3-8B at 4096 tokens spends 0.67 ms per layer in
    norms/act/adds vs 7.8 ms in GEMMs (../shared/data/calibration/a100_ops/Meta-Llama-3-8B.csv).
    """
    model = load_model("llama-3-8b")
    hardware = load_hardware("h100-sxm")
    cost = RooflineCostModel(model, hardware)
    tokens = 4096
    layer_weights = 4096 * (32 + 16) * 128 + 32 * 128 * 4096 + 3 * 4096 * 14336
    attention = 4 * 32 * 128 * tokens * (tokens + 1) / 2
    flops = 32 * (2 * tokens * layer_weights + attention)
    elementwise_bytes = 32 * tokens * (10 * 4096 + 3 * 14336) * 2
    compute = flops / (989.4e12 * hardware.flops_efficiency)
    expected = compute + elementwise_bytes / (3350e9 * hardware.bandwidth_efficiency)
    actual = cost.iteration_time(IterationShape(prefill_chunks=((tokens, 0),)))
    # the LM head, embedding and attention activations add well under 2%
    assert expected < actual < 1.02 * expected
    assert compute / actual > 0.85


def test_tensor_parallel_shards_work_and_adds_all_reduce():
    model, hardware = load_model("llama-3-70b"), load_hardware("h100-sxm")
    tp1, tp4 = RooflineCostModel(model, hardware, 1), RooflineCostModel(model, hardware, 4)
    shape = IterationShape(num_decodes=8, decode_context_sum=8 * 1000)
    # sharded weights make a step faster, but not 4× (all-reduces and replicated embedding reads remain)
    assert tp1.iteration_time(shape) / 4 < tp4.iteration_time(shape) < tp1.iteration_time(shape)
    # ring all-reduce: 2(t−1)/t · bytes / link + 2(t−1) · latency
    nbytes = 8 * 8192 * 2
    expected = 2 * 3 / 4 * nbytes / 450e9 + 6 * 5e-6
    assert tp4.all_reduce_time(nbytes) == pytest.approx(expected, rel=1e-12)


def test_linear_cost_model():
    cost = LinearCostModel(LinearCostConfig(
        kind="linear", prefill_ms_per_token=0.5, decode_ms_per_step=10, decode_ms_per_seq=1, overhead_ms=3,
    ))
    assert cost.iteration_time(IterationShape(prefill_chunks=((100, 0), (20, 0)))) == pytest.approx(0.063)
    assert cost.iteration_time(IterationShape(num_decodes=4, decode_context_sum=999)) == pytest.approx(0.014)
    assert cost.decode_step_coefficients(4) == pytest.approx((0.014, 0.0))
