"""The API-server front end (a FIFO single server in front of a replica) and the engine features the framework
profiles use: custom all-reduce, fused elementwise kernels, the CUDA-graph kernel floor, client ramp."""

from __future__ import annotations

import pytest
import simpy

from simulator.api import run
from simulator.catalog import load_hardware, load_model
from simulator.catalog.engines import EngineProfile
from simulator.catalog.hardware import with_fit
from simulator.cluster.frontend import FrontEnd
from simulator.cluster.wakeup import run_all
from simulator.cost import collective_time
from simulator.cost.base import IterationShape
from simulator.cost.roofline import RooflineCostModel
from simulator.request import Request
from tests.helpers import experiment


class _Sink:
    def __init__(self, env):
        self.env, self.seen = env, []

    def submit(self, request):
        self.seen.append((self.env.now, request.request_id))


def test_front_end_serves_a_burst_one_at_a_time():
    env = simpy.Environment()
    sink = _Sink(env)
    front = FrontEnd(env, sink, per_request_s=0.002, per_prompt_token_s=1e-6)
    for i in range(3):
        front.submit(Request(i, 0.0, 1000, 10))  # each costs 2 ms + 1000 × 1 µs = 3 ms
    env.timeout(0.020).callbacks.append(lambda _e: front.submit(Request(3, 0.020, 0, 10)))  # idle again: 2 ms
    run_all(env)
    times = [t for t, _ in sink.seen]
    assert [i for _, i in sink.seen] == [0, 1, 2, 3]
    assert times == pytest.approx([0.003, 0.006, 0.009, 0.022])


def test_front_end_cost_adds_to_ttft_at_low_load(tmp_path):
    engine = tmp_path / "slow_frontend.yaml"
    engine.write_text("name: slow_frontend\nfrontend_ms_per_request: 7\n")
    fast = run(experiment(workload={"num_requests": 5, "arrival": {"kind": "constant", "rate": 1.0},
                                    "input_tokens": {"kind": "fixed", "value": 100},
                                    "output_tokens": {"kind": "fixed", "value": 5}}))
    slow = run(experiment(engine=str(engine), workload=fast.config.workload.model_dump()))
    # one request a second on an idle server: every TTFT is 7 ms longer, nothing else changes
    assert (slow.requests["ttft_ms"] - fast.requests["ttft_ms"]).to_numpy() == pytest.approx([7.0] * 5)
    assert slow.requests["tpot_ms"].to_numpy() == pytest.approx(fast.requests["tpot_ms"].to_numpy())


def test_custom_all_reduce_takes_small_messages():
    """By hand on an H100 node (link 450 GB/s; Hopper's link efficiency 0.70: 315 GB/s; NCCL as three protocols,
    Simple 19.5 µs + 0.5 µs per ring step at 0.70, LL 5.0 µs + 0.8 µs at 0.28: 126 GB/s, NVLS 59.5 µs + b at 0.55:
    247.5 GB/s), TP 8, an engine with a 4.3 µs one-shot and a 9 µs two-shot kernel up to 8 MiB: one-shot 4.3 µs +
    7·b / 315 GB/s, two-shot 9 µs + 1.75·b / 315 GB/s, NCCL min(19.5 + 7, 5.0 + 11.2 µs + 1.75·b at each bandwidth,
    59.5 µs + b / 247.5 GB/s)."""
    hw = load_hardware("h100-sxm")
    engine = EngineProfile(name="e", custom_allreduce_latency_us=4.3, custom_allreduce_two_shot_latency_us=9.0)
    cost = RooflineCostModel(load_model("llama-3-70b"), hw, 8, engine=engine)
    link = 450e9 * 0.70

    def ring(b):
        return min(1.75 * b / link + 26.5e-6, 1.75 * b / (450e9 * 0.28) + 16.2e-6, b / (450e9 * 0.55) + 59.5e-6)

    # 16 KiB: the one-shot kernel's latency wins (4.3 + 0.36 µs against 9.1 and 16.4)
    assert cost.all_reduce_time(2**14) == pytest.approx(4.3e-6 + 7 * 2**14 / link)
    # 1 MiB: one-shot 4.3 + 23.3 = 27.6 µs, two-shot 9 + 5.8 = 14.8 µs, NCCL 30.8 µs: the two-shot kernel
    assert cost.all_reduce_time(2**20) == pytest.approx(9e-6 + 1.75 * 2**20 / link)
    assert ring(2**20) > cost.all_reduce_time(2**20)
    # without a two-shot kernel the one-shot competes with NCCL alone
    one_shot_only = RooflineCostModel(load_model("llama-3-70b"), hw, 8,
                                      engine=EngineProfile(name="e1", custom_allreduce_latency_us=4.3))
    assert one_shot_only.all_reduce_time(2**20) == pytest.approx(min(4.3e-6 + 7 * 2**20 / link, ring(2**20)))
    # beyond custom_allreduce_max_mib (8 MiB) only NCCL is used: at 64 MiB its in-switch reduction (331 µs against
    # the ring's 399)
    big = 64 * 2**20
    assert cost.all_reduce_time(big) == pytest.approx(ring(big)) == pytest.approx(big / (450e9 * 0.55) + 59.5e-6)
    # 16 GPUs span two 8-GPU nodes: the custom kernels cannot read peers across nodes, so NCCL's ring runs, though
    # the one-shot formula would be far faster
    wide = RooflineCostModel(load_model("llama-3-70b"), hw, 16, engine=engine)
    assert wide.all_reduce_time(2**14) == collective_time(hw, "all_reduce", 16, 2**14) > 20e-6
    # nor among GPUs that are not all connected: four PCIe A100s with NVLink pairs use the ring, two use the kernel
    pcie = load_hardware("a100-80gb-pcie")
    four = RooflineCostModel(load_model("llama-3-70b"), pcie, 4, engine=engine)
    assert four.all_reduce_time(2**14) == collective_time(pcie, "all_reduce", 4, 2**14)
    two = RooflineCostModel(load_model("llama-3-70b"), pcie, 2, engine=engine)
    assert two.all_reduce_time(2**14) < collective_time(pcie, "all_reduce", 2, 2**14)


def test_custom_all_reduce_kernels_follow_the_gpu_generation():
    """An engine's all-reduce kernels are its own fields on the generation it was fitted on and on any generation not
    listed (Blackwell); a listed generation takes its entry, and a generation that borrows another's fitted
    parameters (Ada borrows Ampere's) takes that one's. By hand at TP 2 on a 16 KiB message: one-shot latency + 1 ×
    16 KiB over the link."""
    engine = EngineProfile(name="e", custom_allreduce_latency_us=3.0, custom_allreduce_two_shot_latency_us=9.0,
                           custom_allreduce_by_generation={"ampere": {"latency_us": 5.5, "max_mib": 1.0}})
    assert engine.custom_allreduce("hopper").latency_us == 3.0
    assert engine.custom_allreduce("blackwell").two_shot_latency_us == 9.0
    assert engine.custom_allreduce("ampere").latency_us == 5.5 == engine.custom_allreduce("ada").latency_us
    assert engine.custom_allreduce("ampere").two_shot_latency_us is None
    assert EngineProfile(name="none").custom_allreduce("hopper") is None
    model = load_model("llama-3-8b")
    for hardware, latency in (("a100-80gb-sxm", 5.5e-6), ("h100-sxm", 3.0e-6)):
        hw = load_hardware(hardware)
        cost = RooflineCostModel(model, hw, 2, engine=engine)
        link = hw.interconnect_gb_per_s * 1e9 * hw.fit.comm.link_efficiency
        assert cost.all_reduce_time(2**14) == pytest.approx(latency + 2**14 / link)
    # above Ampere's 1 MiB limit the A100 runs NCCL's ring
    a100 = load_hardware("a100-80gb-sxm")
    cost = RooflineCostModel(model, a100, 2, engine=engine)
    assert cost.all_reduce_time(2 * 2**20) == collective_time(a100, "all_reduce", 2, 2 * 2**20)


def test_a_frameworks_attention_kernels_follow_the_gpu_generation():
    """``attention_by_generation``: a listed generation takes its entry (fields left out keep the pooled fit), a
    generation that borrows another's fitted parameters takes that one's (Ada: Ampere's), any other none.
    In the roofline they price grouped-query attention only: a decode step's attention per cached token of Llama-3
    8B is the one of the framework's decode rate, while DeepSeek-V3's latent attention keeps the pooled fit."""
    from simulator.cost.attention import AttentionModel

    fit = {"decode_attention_efficiency": 0.3, "decode_attention_ns_per_head": 5.0}
    engine = EngineProfile(name="e", attention_by_generation={"hopper": fit})
    h100, b200, a100 = load_hardware("h100-sxm"), load_hardware("b200"), load_hardware("a100-80gb-sxm")
    assert engine.attention_hardware(h100).fit.decode_attention.efficiency == 0.3
    assert engine.attention_hardware(h100).fit.prefill_attention.efficiency == h100.fit.prefill_attention.efficiency
    assert engine.attention_hardware(b200) == b200 and engine.attention_hardware(a100) == a100
    ampere = EngineProfile(name="e", attention_by_generation={"ampere": fit})
    assert ampere.attention_hardware(load_hardware("l40s")).fit.decode_attention.ns_per_head == 5.0
    # its kernels over an 8-bit cache, where other kernels: those fields over an fp8 or int8 KV cache only
    eight_bit = EngineProfile(name="e", attention_by_generation={"hopper": {
        **fit, "kv_8bit": {"decode_attention_ns_per_head": 2.0, "decode_attention_bandwidth_efficiency": 0.7}}})
    for kv, per_head, streaming in (("bf16", 5.0, None), ("fp8", 2.0, 0.7), ("int8", 2.0, 0.7)):
        kernels = eight_bit.attention_hardware(h100, kv)
        assert (kernels.fit.decode_attention.ns_per_head, kernels.fit.decode_attention.bandwidth_efficiency) == (
            per_head, streaming)
        assert kernels.fit.decode_attention.efficiency == 0.3
    own = AttentionModel(with_fit(h100, fit))
    pooled = AttentionModel(h100)
    dense = RooflineCostModel(load_model("llama-3-8b"), h100, 1, engine=engine)
    group = dense.groups[0]
    assert group.decode_terms(1)[1] == pytest.approx(group.count * own.decode_per_token(32, 256, 2 * 8 * 128))
    assert own.decode_per_token(32, 256, 2048) != pooled.decode_per_token(32, 256, 2048)
    fp8_cache = RooflineCostModel(load_model("llama-3-8b"), h100, 1, kv_dtype="fp8", engine=eight_bit).groups[0]
    slower = AttentionModel(with_fit(h100, {**fit, "decode_attention_bandwidth_efficiency": 0.7}), "fp8")
    assert fp8_cache.decode_terms(1)[1] == pytest.approx(fp8_cache.count * slower.decode_per_token(32, 256, 2048))
    latent = RooflineCostModel(load_model("deepseek-v3"), h100, 8, engine=engine)
    plain = RooflineCostModel(load_model("deepseek-v3"), h100, 8, engine=EngineProfile(name="none"))
    assert latent.decode_attention_terms(1) == plain.decode_attention_terms(1)
    # its own MLA kernels (mla_by_generation) price the latent attention, and only that (DeepSeek-V3 at TP 8: 16
    # heads per GPU, absorbed decode widths 576 + 512 over a latent of 576 elements per token)
    own_mla = EngineProfile(name="e", mla_by_generation={"hopper": fit})
    mla = RooflineCostModel(load_model("deepseek-v3"), h100, 8, engine=own_mla)
    assert mla.decode_attention_terms(1)[1] == pytest.approx(plain.decode_attention_terms(1)[1] * own.decode_per_token(
        16, 1088, 576) / pooled.decode_per_token(16, 1088, 576))
    assert RooflineCostModel(load_model("llama-3-8b"), h100, 1, engine=own_mla).groups[0].decode_terms(1) == (
        RooflineCostModel(load_model("llama-3-8b"), h100, 1).groups[0].decode_terms(1))
    with pytest.raises(ValueError, match="unknown GPU generation 'hoper'"):
        EngineProfile(name="e", attention_by_generation={"hoper": fit})
    with pytest.raises(ValueError, match="attention_speed"):
        EngineProfile(name="e", attention_by_generation={"hopper": {"attention_speed": 1.0}})
    # a prefill over an 8-bit cache on 8-bit tensor cores (twice the 16-bit peak) may pass the 16-bit peak; over a
    # 16-bit cache it may not
    fast = EngineProfile(name="e", attention_by_generation={"hopper": {"kv_8bit": {"attention_efficiency": 1.3}}})
    assert fast.attention_hardware(h100, "fp8").fit.prefill_attention.efficiency == 1.3
    assert fast.attention_hardware(h100, "bf16").fit.prefill_attention == h100.fit.prefill_attention
    with pytest.raises(ValueError, match="at most the 16-bit peak"):
        EngineProfile(name="e", attention_by_generation={"hopper": {"attention_efficiency": 1.3}})


def test_a_frameworks_gemm_rates_price_its_dense_gemms_only():
    """``gemm_by_generation``: the framework's fraction of each format's peak replaces the pooled one for its dense
    GEMMs (a format left out keeps the pooled rate; Ada borrows Ampere's entry), while its fused-MoE layers
    keep the pooled fit. By hand: Llama-3 8B's QKV GEMM of 4096 tokens at TP 1 is compute-bound, so its time at
    0.5 of the 16-bit peak is the pooled one's × 0.81 / 0.5 within the knee's share."""
    from simulator.cost.gemm import GemmModel

    engine = EngineProfile(name="e", gemm_by_generation={"hopper": {"flops_efficiency": 0.5,
                                                                    "flops_efficiency_by_dtype": {"fp8": 0.3}}})
    h100 = load_hardware("h100-sxm")
    own = engine.gemm_hardware(h100)
    assert (own.fit.gemm.flops_efficiency, own.fit.gemm.flops_efficiency_by_dtype["fp8"]) == (0.5, 0.3)
    assert own.fit.gemm.flops_efficiency_by_dtype["fp8_block"] == h100.fit.gemm.flops_efficiency_by_dtype["fp8_block"]
    assert engine.gemm_hardware(load_hardware("a100-80gb-sxm")) == load_hardware("a100-80gb-sxm")
    ampere = EngineProfile(name="e", gemm_by_generation={"ampere": {"flops_efficiency": 0.5}})
    assert ampere.gemm_hardware(load_hardware("l40s")).fit.gemm.flops_efficiency == 0.5
    cost = RooflineCostModel(load_model("llama-3-8b"), h100, 1, engine=engine)
    assert cost.gemm.flops == pytest.approx(GemmModel(own).flops)
    assert cost.gemm.flops == pytest.approx(h100.peak_tflops.bf16 * 1e12 * 0.5)
    slow, fast = GemmModel(own).time(4096, 6144, 4096), GemmModel(h100).time(4096, 6144, 4096)
    assert 1.4 < slow / fast <= h100.fit.gemm.flops_efficiency / 0.5
    moe = RooflineCostModel(load_model("qwen3-30b-a3b"), h100, 1, engine=engine)
    plain = RooflineCostModel(load_model("qwen3-30b-a3b"), h100, 1, engine=EngineProfile(name="none"))
    assert moe.experts_time(64) == plain.experts_time(64)
    with pytest.raises(ValueError, match="fp8_block"):
        EngineProfile(name="e", gemm_by_generation={"hopper": {"flops_efficiency_by_dtype": {"fp9": 0.5}}})


def test_a_frameworks_moe_kernel_prices_its_experts_of_that_format_only():
    """``moe_by_generation``: the framework's fused-MoE kernel for the experts' weight format replaces the pooled
    fit's rates and per-expert cost (a format left out, another generation: the pooled fit; Ada borrows Ampere's
    entry). DeepSeek-V3 at TP 8, one token: its 58 MoE layers each read 8 experts' 7168 x 256 slices,
    memory-bound, so half the streaming rate and no per-expert cost make each layer slower, by less than twice."""
    from simulator.cost.moe import ExpertsModel

    h100 = load_hardware("h100-sxm")
    entry = {"moe_bandwidth_efficiency": h100.fit.moe.bandwidth_efficiency / 2, "moe_expert_overhead_us": 0.0}
    engine = EngineProfile(name="e", moe_by_generation={"hopper": {"fp8_block": entry}})
    own = engine.moe_hardware(h100, "fp8_block")
    assert (own.fit.moe.bandwidth_efficiency, own.fit.moe.expert_overhead_us) == (
        entry["moe_bandwidth_efficiency"], 0.0)
    assert own.fit.moe.gemm_efficiency == h100.fit.moe.gemm_efficiency
    assert engine.moe_hardware(h100, "bf16") == h100
    assert engine.moe_hardware(load_hardware("a100-80gb-sxm"), "fp8_block") == load_hardware("a100-80gb-sxm")
    ampere = EngineProfile(name="e", moe_by_generation={"ampere": {"fp8_block": entry}})
    assert ampere.moe_hardware(load_hardware("l40s"), "fp8_block").fit.moe.expert_overhead_us == 0.0
    model, plain = load_model("deepseek-v3"), EngineProfile(name="none")
    cost = RooflineCostModel(model, h100, 8, dtype="fp8_block", engine=engine)
    pooled = RooflineCostModel(model, h100, 8, dtype="fp8_block", engine=plain)
    layers = sum(group.count for group in cost.groups if group.moe)
    one_layer = ExpertsModel(own, "fp8_block").time(1, 7168, 2048 / 8, 2, 8, 256)
    assert layers == 58 and cost.experts_time(1) == pytest.approx(layers * one_layer)
    assert 1.0 < cost.experts_time(1) / pooled.experts_time(1) < 2.0
    assert RooflineCostModel(model, h100, 8, dtype="bf16", engine=engine).experts_time(1) == (
        RooflineCostModel(model, h100, 8, dtype="bf16", engine=plain).experts_time(1))
    with pytest.raises(ValueError, match="nvfp4"):
        EngineProfile(name="e", moe_by_generation={"hopper": {"fp9": entry}})


def test_fused_elementwise_kernels_and_kernel_floor_lower_a_decode_step():
    hw, model = load_hardware("h100-sxm"), load_model("llama-3-8b")
    plain = RooflineCostModel(model, hw, 1, engine=EngineProfile(name="eager"))
    fused = RooflineCostModel(model, hw, 1, engine=EngineProfile(name="fused", elementwise_kernels_per_layer=3))
    floor = RooflineCostModel(model, hw, 1, engine=EngineProfile(name="graphs", kernel_overhead_us=2.0))
    shape = IterationShape((), 1, 1000)
    # 2 fewer elementwise kernels per layer save 2 × 32 × 2.8 µs (Hopper's kernel overhead) of fixed costs
    saved = plain.iteration_time(shape) - fused.iteration_time(shape)
    assert saved == pytest.approx(2 * 32 * 2.8e-6, rel=1e-6)
    assert floor.iteration_time(shape) < plain.iteration_time(shape)


def test_ramp_spreads_the_first_requests():
    config = experiment(workload={"num_requests": 4, "arrival": {"kind": "closed_loop", "users": 4, "ramp_s": 2.0},
                                  "input_tokens": {"kind": "fixed", "value": 10},
                                  "output_tokens": {"kind": "fixed", "value": 2}})
    arrivals = sorted(run(config).requests["arrival_s"])
    assert arrivals == pytest.approx([0.0, 0.5, 1.0, 1.5])
