"""Model and hardware catalogs: derived parameter counts, file loading, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.catalog import hardware_names, load_hardware, load_model, model_names
from simulator.errors import LLMSimError


@pytest.mark.parametrize(
    ("name", "published_billions"),
    # Published parameter counts (../shared/reference/models.csv, from each model card).
    [("llama-2-7b", 6.74), ("llama-2-70b", 68.98), ("llama-3-8b", 8.03), ("llama-3-70b", 70.55),
     ("qwen2.5-7b", 7.61), ("phi-2", 2.78)],
)
def test_parameter_count_from_architecture(name, published_billions):
    assert load_model(name).num_params / 1e9 == pytest.approx(published_billions, rel=0.01)


def test_required_catalog_entries():
    assert {"llama-2-7b", "llama-3-8b", "llama-2-70b"} <= set(model_names())
    assert {"a100-80gb-sxm", "h100-sxm"} <= set(hardware_names())
    h100 = load_hardware("h100-sxm")
    assert (h100.peak_tflops.bf16, h100.memory_bandwidth_gb_per_s, h100.memory_gib) == (989.4, 3350, 80)
    assert h100.sources


def test_amd_profiles_are_their_spec_sheets():
    """MI355X: 256 CUs at 2.4 GHz doing 8,192 dense FP8 FLOPs per CU per clock (AMD, ISSCC 2026), half that at
    BF16, twice at MXFP4; MI325X: MI300X's CDNA3 compute with 256 GB at 6 TB/s; both 8-GPU Infinity Fabric nodes."""
    mi355x, mi325x, mi300x = (load_hardware(name) for name in ("mi355x", "mi325x", "mi300x"))
    fp8 = 256 * 8192 * 2.4e9 / 1e12
    assert mi355x.peak_tflops.fp8 == pytest.approx(fp8, rel=1e-4)
    assert mi355x.peak_tflops.bf16 == pytest.approx(fp8 / 2, rel=1e-4)
    assert mi355x.peak_tflops.fp4 == pytest.approx(2 * fp8, rel=1e-4)
    assert (mi355x.memory_gib, mi355x.memory_bandwidth_gb_per_s, mi355x.generation) == (288, 8000, "cdna4")
    assert mi355x.interconnect_gb_per_s == pytest.approx(7 * 153.6 / 2)  # per direction, of the aggregate
    assert mi325x.peak_tflops == mi300x.peak_tflops and mi325x.generation == mi300x.generation == "cdna3"
    assert (mi325x.memory_gib, mi325x.memory_bandwidth_gb_per_s) == (256, 6000)


def test_every_hardware_profile_loads_and_cites_a_source():
    for name in hardware_names():
        profile = load_hardware(name)
        assert profile.name == name and profile.sources


def test_hugging_face_config_json(tmp_path):
    """A Mistral-7B-v0.1 config.json (published values): 32 layers, 8 KV heads, head_dim = 4096 / 32."""
    folder = tmp_path / "Mistral-7B-v0.1"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
        "max_position_embeddings": 32768, "tie_word_embeddings": False,
    }))
    spec = load_model(str(folder / "config.json"))
    (group,) = spec.layers
    assert spec.name == "Mistral-7B-v0.1" and group.attention.head_dim == 128 and group.ffn.gated
    assert spec.num_params / 1e9 == pytest.approx(7.24, rel=0.01)


@pytest.mark.parametrize("model_id, base, dtype", [
    ("nvidia/DeepSeek-R1-NVFP4", "deepseek-r1", "nvfp4"), ("nvidia/Qwen3-32B-FP4", "qwen3-32b", "nvfp4"),
    ("RedHatAI/Llama-3.1-8B-FP8-dynamic", "llama-3.1-8b", "fp8"), ("someone/Mistral-7B-AWQ", "mistral-7b", "int4"),
])
def test_a_quantised_checkpoint_id_is_its_base_model_in_its_format(model_id, base, dtype):
    """NVIDIA's (and most publishers') quantised checkpoints are named <base>-<format>: the base's architecture,
    weights in the format — 4.5 bits per weight for NVFP4 (one fp8 scale per 16 values), so the
    checkpoint's quantised parts weigh 4.5/16 of the base's 16-bit ones."""
    spec, original = load_model(model_id), load_model(base)
    assert spec.layers == original.layers and spec.quantization.dtype == dtype
    assert spec.name == model_id
    bits = {"nvfp4": 4.5, "fp8": 8, "int4": 4}[dtype]
    quantised = sum(n for part, n in original.part_params().items() if part != "other")
    assert spec.weight_bytes(bits / 8) == pytest.approx(original.weight_bytes(2.0) - quantised * (2 - bits / 8))


def test_a_quantised_id_of_no_catalog_model_is_unknown():
    with pytest.raises(LLMSimError, match=r"unknown model 'nvidia/GPT-7-NVFP4'.*ending -NVFP4/-FP4"):
        load_model("nvidia/GPT-7-NVFP4")


def test_unknown_names_and_bad_files(tmp_path):
    with pytest.raises(LLMSimError, match=r"unknown model 'gpt-5'.*llama-3-8b"):
        load_model("gpt-5")
    with pytest.raises(LLMSimError, match=r"unknown GPU 'h900'.*h100-sxm"):
        load_hardware("h900")
    bad = tmp_path / "gpu.yaml"
    bad.write_text("name: x\nmemory_gib: -1\n")
    with pytest.raises(LLMSimError, match=r"gpu.yaml: memory_gib: must be > 0"):
        load_hardware(str(bad))
    incomplete = tmp_path / "config.json"
    incomplete.write_text(json.dumps({"num_experts": 60, "shared_expert_intermediate_size": 5632}))
    with pytest.raises(LLMSimError, match=r"config\.json: Hugging Face config lacks required key 'num_hidden_layers'"):
        load_model(str(incomplete))


def test_mixtral_config_json(tmp_path):
    """Mixtral-8x7B-v0.1 config.json (published values): 8 local experts, 2 per token, 46.7 B parameters."""
    path = tmp_path / "Mixtral-8x7B-v0.1" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({
        "model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 32768,
        "num_local_experts": 8, "num_experts_per_tok": 2,
    }))
    spec = load_model(str(path))
    (group,) = spec.layers
    assert (group.ffn.kind, group.ffn.num_experts, group.ffn.experts_per_token) == ("moe", 8, 2)
    assert spec.num_params == load_model("mixtral-8x7b").num_params


@pytest.mark.parametrize("fields, problem", [
    ({"layer_types": ["linear_attention", "full_attention"]}, "lacks required key 'linear_num_value_heads'"),
    ({"hybrid_override_pattern": "M*"}, "lacks required key 'mamba_num_heads'"),
    ({"hybrid_override_pattern": "M*X"}, r"hybrid_override_pattern must be a string of one character per layer"),
    ({"hybrid_override_pattern": "MX"}, "hybrid_override_pattern: unknown block 'X'"),
    ({"hybrid_override_pattern": "-E"}, "has E .mixture-of-experts. layers but the config names no routed experts"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": "1"},
     "first_k_dense_replace must be a non-negative integer"),
    ({"layer_types": ["full_attention", "cross_attention"]}, "layer_types: unknown layer kind 'cross_attention'"),
    ({"layer_types": ["full_attention"]}, r"layer_types must list one kind per layer \(num_hidden_layers = 2\)"),
    ({"quantization_config": {"quant_method": "bitsandbytes"}}, "quant_method 'bitsandbytes' is not modelled"),
    ({"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"g": {
        "weights": {"type": "int", "num_bits": 8}, "input_activations": None}}}},
     "compressed-tensors weights of 8 bit int .without quantised activations. are not modelled"),
    ({"num_local_experts": 4, "num_experts_per_tok": 8}, "num_experts_per_tok must be <= num_local_experts, got 8 > 4"),
    ({"sliding_window": 0, "layer_types": ["sliding_attention"] * 2}, "sliding_window must be a positive integer"),
])
def test_configs_the_importer_cannot_honour_are_one_line_naming_the_field(tmp_path, fields, problem):
    config = {"num_attention_heads": 8, "hidden_size": 512, "num_hidden_layers": 2, "vocab_size": 1000, **fields}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(LLMSimError, match=problem):
        load_model(str(path))


@pytest.mark.parametrize("weights, activations, fmt, dtype", [
    ({"type": "int", "num_bits": 4, "group_size": 32, "strategy": "group"}, None, "pack-quantized", "int4"),
    ({"type": "float", "num_bits": 4, "group_size": 16}, {"type": "float", "num_bits": 4}, "nvfp4-pack-quantized",
     "nvfp4"),
    ({"type": "float", "num_bits": 8, "strategy": "channel"}, {"type": "float", "num_bits": 8}, "float-quantized",
     "fp8"),
    ({"type": "float", "num_bits": 8, "strategy": "block", "block_structure": [128, 128]}, None, "float-quantized",
     "fp8_block"),
    ({"type": "int", "num_bits": 8, "strategy": "channel"}, {"type": "int", "num_bits": 8}, "int-quantized", "int8"),
])
def test_a_compressed_tensors_checkpoint_names_its_weights_in_its_scheme(tmp_path, weights, activations, fmt, dtype):
    """compressed-tensors states its weights per scheme (``config_groups``): 4-bit integers are weight-only int4 (as
    Kimi-K2's quantisation-aware checkpoints ship), 4-bit floats in groups of 16 NVIDIA's nvfp4, 8-bit floats fp8 (in
    128 x 128 blocks fp8_block), 8-bit integers with 8-bit activations int8. A multimodal wrapper may nest the whole
    config, quantisation included, in ``text_config``; an ``re:`` entry of its ignore list keeps what it matches in
    16 bits: ``re:.*self_attn.*`` attention, ``re:.*mlp\\.(gate|up|down)_proj.*`` the dense MLPs but not the experts
    (``mlp.experts.N.gate_proj``)."""
    text = {"model_type": "deepseek_v3", "num_attention_heads": 8, "hidden_size": 512, "num_hidden_layers": 2,
            "vocab_size": 1000, "intermediate_size": 1024, "moe_intermediate_size": 128, "n_routed_experts": 8,
            "num_experts_per_tok": 2, "first_k_dense_replace": 1, "quantization_config": {
                "quant_method": "compressed-tensors", "format": fmt,
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                              "input_activations": activations}},
                "ignore": ["lm_head", "re:.*self_attn.*", r"re:.*mlp\.(gate|up|gate_up|down)_proj.*"]}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "wrapper_vl", "text_config": text}))
    quantization = load_model(str(path)).quantization
    assert (quantization.dtype, quantization.parts) == (dtype, ("experts",))


def test_sliding_window_switched_off_is_a_dense_model(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_attention_heads": 8, "hidden_size": 512, "num_hidden_layers": 2,
                                "vocab_size": 1000, "sliding_window": 4096, "use_sliding_window": False}))
    assert load_model(str(path)).num_layers == 2


def test_generation_rule_gives_every_gpu_of_a_generation_its_fit(tmp_path):
    """B200 and GB200 take every fitted parameter of the Blackwell fit (B200's tables) and keep their own spec sheet;
    Ada (L40S), without measurements, takes Ampere's (A100's); a profile's own value wins over its generation's; an
    unknown generation is a one-line error. A profile silent about its special-function units' exponential rate
    keeps the balance of the GPU its generation's fit comes from — B200: 5.0 × 10^12 exponentials/s per 2,250 ×
    10^12 16-bit FLOP/s, so 1 TFLOP/s of a Blackwell part of its own gets 5 / 2,250 × 10^12/s — since that fit
    prices its exponentials apart from its FLOP rate."""
    from simulator.catalog.generations import generation_fit

    h100, b200, gb200 = load_hardware("h100-sxm"), load_hardware("b200"), load_hardware("gb200")
    a100, l40s = load_hardware("a100-80gb-sxm"), load_hardware("l40s")
    assert b200.fit == gb200.fit == generation_fit("blackwell")
    assert l40s.fit == generation_fit("ampere")  # the A100's fit (its profile's but for the send/recv it measured)
    assert l40s.fit.gemm == a100.fit.gemm and l40s.fit.sm_count == a100.fit.sm_count
    assert b200.fit.sm_count == b200.sm_count == 148  # its attention timings are its own SMs'
    assert (b200.memory_bandwidth_gb_per_s, b200.peak_tflops.fp4) == (8000, 9000)
    assert b200.fit.gemm.flops_efficiency != h100.fit.gemm.flops_efficiency != a100.fit.gemm.flops_efficiency
    own = tmp_path / "mine.yaml"
    own.write_text("name: mine\ngeneration: blackwell\nmemory_gib: 1\nmemory_bandwidth_gb_per_s: 1\n"
                   "peak_tflops: {bf16: 1, fp16: 1}\nfit: {kernel_overhead_us: 9}\n")
    mine = load_hardware(str(own))
    assert (mine.fit.kernel_overhead_us, mine.fit.gemm.flops_efficiency) == (9, b200.fit.gemm.flops_efficiency)
    assert mine.sfu_exp_tera_per_s == pytest.approx(5.0 / 2250) and b200.sfu_exp_tera_per_s == 5.0  # stated: kept
    own.write_text(own.read_text() + "sfu_exp_tera_per_s: 0\n")  # stated as none: none
    assert load_hardware(str(own)).sfu_exp_tera_per_s == 0
    own.write_text("name: mine\ngeneration: volta\nmemory_gib: 1\nmemory_bandwidth_gb_per_s: 1\n"
                   "peak_tflops: {bf16: 1, fp16: 1}\n")
    with pytest.raises(LLMSimError, match="generation: unknown 'volta'"):
        load_hardware(str(own))


def test_a_gpu_priced_as_another_generation_keeps_its_spec_sheet_and_takes_that_fit():
    """``with_generation``: the A100 priced as if it were an unmeasured Hopper part keeps its spec sheet (memory,
    bandwidth, peaks, node) and takes every fitted parameter Hopper's H100 has — as B200 priced as Hopper does; an
    unknown generation is refused."""
    from simulator.catalog.hardware import with_generation

    a100, h100 = load_hardware("a100-80gb-sxm"), load_hardware("h100-sxm")
    as_hopper = with_generation(a100, "hopper")
    assert as_hopper.generation == "hopper"
    b200_as_hopper = with_generation(load_hardware("b200"), "hopper")
    assert as_hopper.fit.model_dump(exclude={"comm"}) == b200_as_hopper.fit.model_dump(exclude={"comm"})
    # all but the send/recv each measured on its own system's network (the A100 DGX's; B200: none, the default)
    assert as_hopper.fit.comm.model_copy(update={"p2p_efficiency": 0.9, "p2p_latency_us": 8.0}) == \
        b200_as_hopper.fit.comm
    assert (as_hopper.fit.comm.p2p_efficiency, as_hopper.fit.comm.p2p_latency_us) == (0.95, 10.0)
    sheet = ("memory_gib", "memory_bandwidth_gb_per_s", "peak_tflops", "interconnect_gb_per_s", "node", "name")
    assert all(getattr(as_hopper, field) == getattr(a100, field) for field in sheet)
    assert as_hopper.fit.gemm.flops_efficiency == h100.fit.gemm.flops_efficiency != a100.fit.gemm.flops_efficiency
    assert with_generation(as_hopper, "ampere") == a100  # and back: the A100 profile sets no fitted parameter
    with pytest.raises(ValueError, match="generation: unknown 'volta'"):
        with_generation(a100, "volta")


def test_hardware_named_with_a_generation(tmp_path):
    """``<gpu>@<generation>`` (a catalog name or a path, which may itself hold an "@") loads that GPU priced with the
    generation's fit; an unknown generation is one line naming it."""
    from simulator.catalog.hardware import with_generation

    h100 = load_hardware("h100-sxm")
    assert load_hardware("h100-sxm@ampere") == with_generation(h100, "ampere")
    folder = tmp_path / "a@b"
    folder.mkdir()
    (folder / "gpu.yaml").write_text((Path(__file__).parents[2] / "hardware_profiles" / "h100-sxm.yaml").read_text())
    assert load_hardware(str(folder / "gpu.yaml")) == h100
    assert load_hardware(f"{folder / 'gpu.yaml'}@ampere").generation == "ampere"
    with pytest.raises(LLMSimError, match=r"hardware: unknown generation 'volta' in 'h100-sxm@volta' \(allowed: "):
        load_hardware("h100-sxm@volta")
