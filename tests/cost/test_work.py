"""An iteration's FLOPs, HBM bytes, time split and bound (simulator.cost.work) against hand calculations, the
spec sheets and the time's own sensitivity to the GPU's rates."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import load_engine, load_hardware, load_model
from simulator.cost import IterationShape, RooflineCostModel
from simulator.cost.gemm import GemmModel
from simulator.cost.work import Work, gemm_peak, smooth_max_work
from tests.cost.test_cost import toy_paths  # noqa: F401  (a fixture)

# Llama-3-8B (config.json): hidden 4096, 32 layers, 32 query heads and 8 KV heads of 128, MLP 14336 (gated), vocab
# 128256, untied embeddings. Per layer: q and o 4096², k and v 4096·1024 each, gate, up and down 4096·14336 each.
D, L, H, G, HEAD, MLP, V = 4096, 32, 32, 8, 128, 14336, 128256
LAYER_PARAMS = 2 * D * D + 2 * D * G * HEAD + 3 * D * MLP
KV_BYTES_PER_TOKEN = L * 2 * G * HEAD * 2  # K and V of every layer, bf16


def llama_8b(engine: str = "vllm", **kwargs) -> RooflineCostModel:
    return RooflineCostModel(load_model("llama-3-8b"), load_hardware("h100-sxm"), engine=load_engine(engine), **kwargs)


def test_smooth_maximum_splits_by_euler_rule():
    """Each term t of M = (Σ t^p)^(1/p) takes t^p / M^(p−1): the parts sum to M; equal terms split it evenly."""
    work = smooth_max_work(2, 3.0, 4.0)
    assert work.seconds == pytest.approx(5.0, rel=1e-15)
    assert (work.compute_s, work.memory_s) == pytest.approx((9 / 5, 16 / 5), rel=1e-15)
    even = smooth_max_work(4, 1.0, 1.0, 1.0)
    assert even.compute_s == pytest.approx(even.memory_s) == pytest.approx(even.fixed_s) == pytest.approx(3 ** 0.25 / 3)
    assert smooth_max_work(2, 0.0, 0.0, flops=5.0) == Work(flops=5.0)


def test_bound_is_the_largest_part_ties_to_compute_then_memory():
    assert Work(compute_s=1, memory_s=2, fixed_s=1.5).bound == "memory"
    assert Work(compute_s=2, memory_s=2, fixed_s=2).bound == "compute"
    assert Work(compute_s=0, memory_s=3, fixed_s=3).bound == "memory"
    assert Work(fixed_s=1e-9).bound == "fixed"


def test_one_gemm_by_hand(toy_paths):  # noqa: F811  (the fixture)
    """The toy GPU (0.1 TFLOP/s, 10 GB/s, knee 2, no floors): QKV of 100 tokens, (100 × 64)·(64 ×
    128) bf16: 1,638,400 FLOPs, (6400 + 12800)·2 + 8192·2 = 54,784 bytes; t_c = 16.384 µs, t_m = 5.4784 µs."""
    gemm = GemmModel(load_hardware(toy_paths[1]))
    work = gemm.work(100, 128, 64)
    t_c, t_m = 1_638_400 / 1e11, 54_784 / 1e10
    total = math.hypot(t_c, t_m)
    assert (work.flops, work.hbm_bytes) == (1_638_400, 54_784)
    assert work.compute_s == pytest.approx(t_c**2 / total, rel=1e-12)
    assert work.memory_s == pytest.approx(t_m**2 / total, rel=1e-12)
    assert work.seconds == pytest.approx(gemm.time(100, 128, 64), rel=1e-12)


def test_toy_prefill_flops_and_bytes_by_hand(toy_paths):  # noqa: F811
    """The hand calculation of tests/cost/test_cost.py, one 100-token prompt on the toy model (2 layers): per layer
    QKV 1,638,400 + attention 4·4·16·5050 = 1,292,800 + O 819,200 + up 3,276,800 + down 1,638,400 FLOPs, and the
    LM head 128,000 once; bytes per layer 54,784 + K/V 12,800 + 33,792 + 96,768 + 54,784 + elementwise 204,800, per
    model embedding 12,800 + final norm 25,600 + LM head 130,128 + sampling 8,000."""
    cost = RooflineCostModel(load_model(toy_paths[0]), load_hardware(toy_paths[1]))
    work = cost.iteration_work(IterationShape(((100, 0),)))
    layer_flops = 1_638_400 + 1_292_800 + 819_200 + 3_276_800 + 1_638_400
    layer_bytes = 54_784 + 12_800 + 33_792 + 96_768 + 54_784 + 204_800
    assert work.flops == pytest.approx(2 * layer_flops + 128_000, rel=1e-12)
    assert work.hbm_bytes == pytest.approx(2 * layer_bytes + 12_800 + 25_600 + 130_128 + 8_000, rel=1e-12)


def test_toy_decode_bytes_grow_by_the_kv_read(toy_paths):  # noqa: F811
    """A decode step over a context of c reads 2 layers × K and V of 2 heads × 16 × 2 bytes = 256 bytes per cached
    token more: w0 + w1·S with w1's bytes 256 and FLOPs 2 layers × 4·(4 heads)·16 = 512 per token."""
    cost = RooflineCostModel(load_model(toy_paths[0]), load_hardware(toy_paths[1]))
    _, per_token = cost.decode_step_work(1)
    assert (per_token.flops, per_token.hbm_bytes) == pytest.approx((512, 256), rel=1e-12)
    step = cost.iteration_work(IterationShape((), 1, 300))
    layer = (64 + 8192 + 128) * 2 + (64 + 4096 + 64) * 2 + (64 + 16384 + 256) * 2 + (128 + 8192 + 64) * 2 + 1024 * 2
    assert step.hbm_bytes == pytest.approx(2 * layer + 256 * 300 + 64 * 2 + 2 * 64 * 2 + 130_128 + 8_000, rel=1e-12)


@pytest.mark.parametrize("tokens", [512, 4096])
def test_dense_prefill_flops_are_twice_the_parameters_per_token_plus_attention(tokens):
    """One prompt of n tokens on Llama-3-8B: 2·(layer parameters)·n, the LM head on its last token 2·D·V, and
    attention's QKᵀ and PV over the n(n+1)/2 causal pairs, 4·H·d per pair per layer (the embedding is a gather)."""
    work = llama_8b().iteration_work(IterationShape(((tokens, 0),)))
    attention = 4 * H * HEAD * tokens * (tokens + 1) / 2 * L
    assert work.flops == pytest.approx(2 * L * LAYER_PARAMS * tokens + 2 * D * V + attention, rel=1e-12)


def test_tensor_parallelism_splits_the_flops_over_the_gpus():
    """At TP 4 each GPU computes a quarter of the GEMMs and of the heads (its share of the LM head's vocabulary)."""
    shape = IterationShape(((1024, 0),))
    one, four = llama_8b().iteration_work(shape), llama_8b(tensor_parallel=4).iteration_work(shape)
    assert four.flops == pytest.approx(one.flops / 4, rel=1e-12)


@pytest.mark.parametrize("context", [1024, 8192])
def test_decode_bytes_are_the_weights_plus_the_kv_read(context):
    """A one-sequence decode step reads every weight but the embedding table (bf16: 2 bytes each, the LM head's
    D·V included) and its cached K/V; activations, norms and logits add under 0.3%."""
    work = llama_8b().iteration_work(IterationShape((), 1, context))
    weights = (L * LAYER_PARAMS + D * V) * 2
    assert work.hbm_bytes == pytest.approx(weights + KV_BYTES_PER_TOKEN * context, rel=0.003)
    assert work.hbm_bytes > weights + KV_BYTES_PER_TOKEN * context


def test_one_token_decode_is_memory_bound_and_a_long_prefill_compute_bound():
    """Llama-3-8B on an H100 under vLLM: a decode step of one sequence streams 16 GB of weights for 16 GFLOP (1
    FLOP per byte, far below the ridge of 989 TFLOP/s / 3.35 TB/s ≈ 295); a 4,096-token prompt does ~2·8e9·4096 FLOPs
    for about the same weights (thousands of FLOPs per byte)."""
    big = RooflineCostModel(load_model("llama-3-70b"), load_hardware("h100-sxm"), tensor_parallel=4,
                            engine=load_engine("vllm"))  # Llama-3-70B at TP 4 as well
    for cost in (llama_8b(), big):
        assert cost.iteration_work(IterationShape((), 1, 1000)).bound == "memory"
        assert cost.iteration_work(IterationShape(((4096, 0),))).bound == "compute"


def _scaled(hardware, flops: float = 1.0, bandwidth: float = 1.0):
    """``hardware`` with every compute rate (tensor cores and exponentials) or its HBM bandwidth scaled."""
    peaks = {name: value * flops if value else value for name, value in hardware.peak_tflops.model_dump().items()}
    return hardware.model_copy(update={
        "peak_tflops": hardware.peak_tflops.model_copy(update=peaks),
        "sfu_exp_tera_per_s": hardware.sfu_exp_tera_per_s * flops,
        "memory_bandwidth_gb_per_s": hardware.memory_bandwidth_gb_per_s * bandwidth})


@pytest.mark.parametrize("model, tp, engine", [("llama-3-8b", 1, "vllm"), ("llama-3-70b", 4, "ideal"),
                                               ("mixtral-8x7b", 2, "sglang")])
def test_compute_and_memory_parts_are_the_time_saved_by_faster_rates(model, tp, engine):
    """compute_s = −∂t/∂ln(FLOP rate) and memory_s = −∂t/∂ln(HBM bandwidth): rates 1 + ε times higher save
    ε·compute_s and ε·memory_s (a one-sided difference; decode kernels' per-block streaming limit is a fitted rate
    of its own that stays put, so memory within 0.1%)."""
    spec, hardware, eps = load_model(model), load_hardware("h100-sxm"), 1e-6
    kwargs = {"tensor_parallel": tp, "engine": load_engine(engine)}
    base = RooflineCostModel(spec, hardware, **kwargs)
    faster = RooflineCostModel(spec, _scaled(hardware, flops=1 + eps), **kwargs)
    wider = RooflineCostModel(spec, _scaled(hardware, bandwidth=1 + eps), **kwargs)
    for shape in (IterationShape(((4096, 0),)), IterationShape((), 64, 64 * 1000),
                  IterationShape(((512, 0),), 16, 16 * 2000), IterationShape((), 1, 100)):
        time, work = base.iteration_time(shape), base.iteration_work(shape)
        assert (time - faster.iteration_time(shape)) / eps == pytest.approx(work.compute_s, rel=1e-4, abs=1e-9)
        assert (time - wider.iteration_time(shape)) / eps == pytest.approx(work.memory_s, rel=1e-3, abs=1e-9)


# Deployments of every attention and FFN kind, parallelism and engine quirk the roofline prices.
DEPLOYMENTS = [
    ("llama-3-8b", "h100-sxm", {"engine": "vllm"}),
    ("llama-3-70b", "h100-sxm", {"tensor_parallel": 4, "pipeline_parallel": 2, "engine": "vllm"}),
    ("llama-3-70b", "a100-80gb-sxm", {"tensor_parallel": 2, "pipeline_parallel": 2, "engine": "vllm-0.14"}),
    ("deepseek-v3.2", "h100-sxm", {"tensor_parallel": 8, "dtype": "fp8_block", "engine": "sglang"}),
    ("deepseek-v3", "h100-sxm", {"tensor_parallel": 8, "dtype": "fp8_block", "engine": "trtllm",
                                 "expert_parallel": 8}),
    ("deepseek-v3", "h100-sxm", {"dtype": "fp8_block", "engine": "sglang", "expert_parallel": 8, "data_parallel": 8,
                                 "two_batch_overlap": True, "all_to_all": "deepep", "expert_load_cv": 1.25,
                                 "eplb_redundant_experts": 32}),
    ("gemma-3-27b", "a100-80gb-sxm", {"tensor_parallel": 2, "engine": "vllm"}),
    ("gpt-oss-120b", "h100-sxm", {"tensor_parallel": 2, "dtype": "mxfp4", "engine": "trtllm"}),
    ("nemotron-h-56b", "h100-sxm", {"tensor_parallel": 2, "engine": "splitwise"}),
    ("qwen3-next-80b-a3b", "h100-sxm", {"tensor_parallel": 4, "engine": "vllm"}),
    ("mixtral-8x7b", "a100-80gb-sxm", {"tensor_parallel": 2, "dtype": "int4", "engine": "vllm"}),
    ("minimax-m2.5", "h100-sxm", {"tensor_parallel": 4, "dtype": "fp8_block", "engine": "sglang"}),
]
_MODELS: dict[int, RooflineCostModel] = {}


def _deployment(index: int) -> RooflineCostModel:
    if index not in _MODELS:
        model, gpu, kwargs = DEPLOYMENTS[index]
        kwargs = dict(kwargs)
        engine = load_engine(kwargs.pop("engine"))
        _MODELS[index] = RooflineCostModel(load_model(model), load_hardware(gpu), engine=engine, **kwargs)
    return _MODELS[index]


chunks = st.lists(st.tuples(st.integers(1, 6000), st.integers(0, 30000)), max_size=3).map(tuple)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, len(DEPLOYMENTS) - 1), chunks, st.integers(0, 300), st.integers(1, 9000),
       st.sampled_from([1, 1, 4]))
def test_the_parts_add_up_to_the_iteration_time(index, prompt_chunks, decodes, context, positions):
    """For any iteration of any deployment the three parts sum to the time the engine waits (every kernel, floor
    and collective is in one of them), none is negative, and the work is that of its kernels."""
    cost = _deployment(index)
    shape = IterationShape(prompt_chunks, decodes, decodes * context, positions)
    time, work = cost.iteration_time(shape), cost.iteration_work(shape)
    assert work.seconds == pytest.approx(time, rel=1e-12, abs=1e-15)
    assert min(work.compute_s, work.memory_s, work.fixed_s) >= -1e-12 * time
    assert (work.flops > 0) == (work.hbm_bytes > 0) == (time > 0)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, len(DEPLOYMENTS) - 1), st.integers(1, 400), st.integers(1, 20000))
def test_a_decode_step_does_affine_work_in_the_context_sum(index, decodes, context):
    """decode_step_work gives (w0, w1) with the step's work w0 + w1·S, its time a + c·S (the closed-form runs'
    contract), and without pipeline micro-batches the work of that iteration itself."""
    cost = _deployment(index)
    (a, c), (w0, w1) = cost.decode_step_coefficients(decodes), cost.decode_step_work(decodes)
    work = w0 + w1 * (decodes * context)
    assert work.seconds == pytest.approx(a + c * decodes * context, rel=1e-12)
    if not cost.micro_batching:
        whole = cost.iteration_work(IterationShape((), decodes, decodes * context))
        assert (work.flops, work.hbm_bytes, work.compute_s, work.memory_s) == pytest.approx(
            (whole.flops, whole.hbm_bytes, whole.compute_s, whole.memory_s), rel=1e-12)


def test_the_peak_is_the_gemms_tensor_core_format():
    """The spec sheet's dense peak of the format the GEMMs compute in: H100 989.4 TFLOP/s bf16, 1978.9 fp8 (block fp8
    too); int4 weights are dequantised to 16-bit math; an A100 has no fp8 tensor cores (16-bit, 312) but int8 (624)."""
    h100, a100 = load_hardware("h100-sxm"), load_hardware("a100-80gb-sxm")
    assert gemm_peak(h100, "bf16") == ("bf16", pytest.approx(989.4e12))
    assert gemm_peak(h100, "fp8_block") == ("fp8", pytest.approx(1978.9e12))
    assert gemm_peak(h100, "int4") == ("bf16", pytest.approx(989.4e12))
    assert gemm_peak(a100, "fp8") == ("bf16", pytest.approx(312e12))
    assert gemm_peak(a100, "int8") == ("int8", pytest.approx(624e12))
