"""Models as stacks of layer groups: the importer's layer patterns, parameter counts against the published ones,
KV bytes by hand, and the cost of fine-grained experts against the bound of the weights they read."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.catalog import load_hardware, load_model
from simulator.catalog.hardware import with_fit
from simulator.catalog.layers import FullAttention
from simulator.cost.layers import causal_pairs, span_totals
from simulator.cost.roofline import RooflineCostModel
from simulator.errors import LLMSimError

CONFIGS = Path(__file__).resolve().parents[3] / "shared" / "data" / "model_configs"
needs_configs = pytest.mark.skipif(not CONFIGS.is_dir(), reason="../shared/data/model_configs not present")


def _config(name: str):
    return load_model(str(CONFIGS / f"{name}_config.json"))


# (config, published total, published active, active counts the embedding table, source)
PUBLISHED = [
    ("deepseek-ai--DeepSeek-V3", 671, 37, True, "DeepSeek-V3 technical report: 671B total, 37B activated"),
    ("Qwen--Qwen3-235B-A22B", 235, 22, True, "Qwen3 technical report: 235B total, 22B activated"),
    # its card's "3.3B activated" sits between the counts with (3.35B) and without (3.04B) the embedding table
    ("Qwen--Qwen3-30B-A3B", 30.5, None, True, "Qwen3-30B-A3B model card: 30.5B total"),
    ("openai--gpt-oss-120b", 116.83, 5.13, False, "gpt-oss model card: 116.83B total, 5.13B active (no embedding)"),
    ("openai--gpt-oss-20b", 20.91, 3.61, False, "gpt-oss model card: 20.91B total, 3.61B active (no embedding)"),
    ("mistralai--Mixtral-8x7B-v0.1", 46.7, 12.9, True, "Mistral: 46.7B total, 12.9B active"),
    ("mistralai--Mixtral-8x22B-v0.1", 141, 39, True, "Mistral: 141B total, 39B active"),
    ("meta-llama--Llama-4-Scout-17B-16E-Instruct", 109, 17, True, "Meta: 109B total (with vision), 17B active"),
    ("Qwen--Qwen3.5-35B-A3B", 35, 3, False, "Qwen3.5-35B-A3B: 35B total, 3B activated"),
    ("nvidia--Nemotron-H-56B-Base-8K", 56, None, True, "Nemotron-H technical report: 56B"),
]


def _close(value: float, published: float) -> bool:
    """Within 1.5%, or within the published figure's rounding (half a unit of its last digit)."""
    digits = len(str(published).split(".")[1]) if "." in str(published) else 0
    return abs(value - published) <= max(0.015 * published, 0.5 * 10**-digits)


@needs_configs
@pytest.mark.parametrize("name, total, active, with_embedding, source", PUBLISHED)
def test_parameter_counts_match_the_published_ones(name, total, active, with_embedding, source):
    model = _config(name)
    counted = model.active_params - (0 if with_embedding else model.vocab_size * model.hidden_size)
    assert _close(model.num_params / 1e9, total), (model.num_params / 1e9, source)
    assert active is None or _close(counted / 1e9, active), (counted / 1e9, source)


# catalog entries built from their published config fields (no data files needed)
CATALOG_PUBLISHED = [
    ("deepseek-r1", 671, 37, "DeepSeek-R1 model card: 671B total, 37B activated"),
    ("kimi-k2", 1040, None, "Kimi-K2 technical report: 1.04T total (its 32B activated excludes the embeddings)"),
    ("llama-4-maverick", 400, 17, "Meta: 400B total, 17B active"),
    ("gemma-3-27b", 27, None, "Google: 27B (the 0.4B vision encoder not modelled)"),
    ("qwen3-next-80b-a3b", 80, None, "Qwen3-Next-80B-A3B model card: 80B total (3B activated: test above)"),
    ("qwen3-235b-a22b", 235, 22, "Qwen3 technical report: 235B total, 22B activated"),
    ("gpt-oss-120b", 116.83, 5.71, "gpt-oss model card: 116.83B total; 5.13B active without the 0.58B embedding"),
    # GLM's activated counts leave out both the embedding and the output table: 2 × 151552 × hidden
    ("glm-4.5", 355, 32 + 2 * 151552 * 5120 / 1e9, "GLM-4.5 report: 355B total, 32B activated"),
    ("glm-4.5-air", 106, 12 + 2 * 151552 * 4096 / 1e9, "GLM-4.5 report: Air 106B total, 12B activated"),
    ("glm-5", 744, 40 + 2 * 154880 * 6144 / 1e9, "GLM-5 release: 744B total, 40B activated"),
]


@pytest.mark.parametrize("name, total, active, source", CATALOG_PUBLISHED)
def test_catalog_models_match_their_published_sizes(name, total, active, source):
    model = load_model(name)
    assert _close(model.num_params / 1e9, total), (model.num_params / 1e9, source)
    assert active is None or _close(model.active_params / 1e9, active), (model.active_params / 1e9, source)


def test_catalog_models_are_found_by_hugging_face_id_in_any_case():
    assert load_model("meta-llama/Llama-3.1-70B") is load_model("llama-3.1-70b")
    assert load_model("DEEPSEEK-AI/DeepSeek-V3") is load_model("deepseek-v3")
    assert load_model("openai/gpt-oss-120b").quantization.dtype == "mxfp4"
    assert "deepseek-v3" in __import__("simulator").catalog.model_names()


def test_dtype_auto_serves_the_checkpoint_as_published(tmp_path):
    """No dtype (or ``auto``) takes the checkpoint's quantisation; a 16-bit model gets bf16; an explicit dtype
    wins; ``auto`` with a model the catalog cannot load is one line."""
    from simulator.config import load_experiment
    from simulator.errors import ConfigError

    base = {"hardware": "h100-sxm", "workload": {
        "num_requests": 1, "arrival": {"kind": "poisson", "rate": 1}, "input_tokens": {"kind": "fixed", "value": 8},
        "output_tokens": {"kind": "fixed", "value": 8}}}
    assert load_experiment({**base, "model": "gpt-oss-120b"}).dtype == "mxfp4"
    assert load_experiment({**base, "model": "deepseek-v3", "dtype": "auto"}).dtype == "fp8_block"
    assert load_experiment({**base, "model": "llama-3-8b"}).dtype == "bf16"
    assert load_experiment({**base, "model": "gpt-oss-120b", "dtype": "bf16"}).dtype == "bf16"
    with pytest.raises(ConfigError, match="experiment: dtype: auto needs the model's checkpoint format: model: unkn"):
        load_experiment({**base, "model": "gpt-5", "dtype": "auto"})


@needs_configs
def test_layer_patterns_of_the_families():
    """DeepSeek-V3: 3 dense layers then 58 MoE layers, all MLA; gpt-oss: sliding (128) and full attention
    alternating, MXFP4 experts with 16-bit attention; Llama 4 Scout: RoPE layers chunked (8192), every 4th layer
    global, a shared expert in every MoE layer; Qwen3-235B-FP8: block-FP8 everywhere."""
    deepseek = _config("deepseek-ai--DeepSeek-V3")
    assert [(g.count, g.attention.kind, g.ffn.kind) for g in deepseek.layers] == [(3, "mla", "dense"),
                                                                                 (58, "mla", "moe")]
    moe = deepseek.layers[1].ffn
    assert (moe.num_experts, moe.experts_per_token, moe.intermediate_size, moe.shared_intermediate_size) == (
        256, 8, 2048, 2048)
    assert deepseek.layers[0].ffn.intermediate_size == 18432
    oss = _config("openai--gpt-oss-120b")
    assert sorted((g.count, g.attention.kind, g.attention.span) for g in oss.layers) == [(18, "full", 0),
                                                                                          (18, "sliding", 128)]
    assert oss.quantization.dtype == "mxfp4" and not oss.quantized("attention") and oss.quantized("experts")
    scout = _config("meta-llama--Llama-4-Scout-17B-16E-Instruct")
    kinds = {(g.attention.kind, g.attention.span): g.count for g in scout.layers}
    assert kinds == {("chunked", 8192): 36, ("full", 0): 12}
    assert all(g.ffn.shared_intermediate_size == 8192 and g.ffn.num_experts == 16 for g in scout.layers)
    fp8 = _config("Qwen--Qwen3-235B-A22B-FP8")
    assert fp8.quantization.dtype == "fp8_block" and fp8.quantized("attention")


@needs_configs
def test_every_bundled_config_imports_or_fails_with_one_line():
    for path in sorted(CONFIGS.glob("*_config.json")):
        if path.name.endswith("_hf_quant_config.json"):
            continue
        try:
            model = load_model(str(path))
        except LLMSimError as exc:
            message = str(exc)
            assert "\n" not in message and message.startswith(str(path)) and "not modelled yet" in message, message
        else:
            assert model.num_params > 0 and model.kv_bytes_per_token(2.0) > 0


@pytest.mark.parametrize("fields, expected", [
    ({"model_type": "gemma2", "sliding_window": 4096}, {("sliding", 4096): 2, ("full", 0): 2}),
    ({"model_type": "gemma3_text", "sliding_window": 1024, "sliding_window_pattern": 2},
     {("sliding", 1024): 2, ("full", 0): 2}),
    ({"model_type": "mistral", "sliding_window": 4096}, {("sliding", 4096): 4}),
    ({"model_type": "phi3", "sliding_window": 262144, "max_position_embeddings": 131072}, {("full", 0): 4}),
    ({"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": True, "max_window_layers": 1},
     {("full", 0): 1, ("sliding", 4096): 3}),
    ({"model_type": "exaone4", "sliding_window": 4096, "sliding_window_pattern": "LLLG"},
     {("sliding", 4096): 3, ("full", 0): 1}),
])
def test_sliding_window_patterns_of_the_families(tmp_path, fields, expected):
    config = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 100,
              "max_position_embeddings": 8192, **fields}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    layers = load_model(str(path)).layers
    assert {(g.attention.kind, g.attention.span): g.count for g in layers} == expected


def test_interleaved_dense_and_moe_layers_and_a_modelopt_sibling(tmp_path):
    """``decoder_sparse_step: 2`` puts the experts on every second layer (1-based: layers 2, 4, ...), minus
    ``mlp_only_layers``; a ModelOpt ``hf_quant_config.json`` beside a config sets its dtype."""
    config = {"model_type": "qwen2_moe", "num_hidden_layers": 8, "hidden_size": 256, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 512, "moe_intermediate_size": 64, "num_experts": 16,
              "num_experts_per_tok": 2, "shared_expert_intermediate_size": 128, "decoder_sparse_step": 2,
              "mlp_only_layers": [3], "vocab_size": 1000}
    path = tmp_path / "m_config.json"
    path.write_text(json.dumps(config))
    (tmp_path / "m_hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    model = load_model(str(path))
    counts = {g.ffn.kind: g.count for g in model.layers}
    assert counts == {"dense": 5, "moe": 3}  # MoE at indices 1, 5, 7 (3 is listed dense)
    assert model.quantization.dtype == "fp8"
    per_layer_moe = 16 * 3 * 256 * 64 + 3 * 256 * 128 + 256 * 16
    attention = 256 * (4 + 2 * 2) * 64 + 4 * 64 * 256
    expected = 5 * (attention + 3 * 256 * 512 + 512) + 3 * (attention + per_layer_moe + 512) + 2 * 1000 * 256 + 256
    assert model.num_params == expected


@needs_configs
def test_kv_bytes_per_token_by_hand():
    """MLA keeps one latent of kv_lora_rank + qk_rope_head_dim per token and layer, whole on every tensor-parallel
    rank: DeepSeek-V3 61 × (512 + 64) × 2 B = 70,272 B. gpt-oss-120b: 36 layers × 2 × 8 KV heads × 64 × 2 B =
    73,728 B while a token is inside the 128-token window, 18 × 2 × 8 × 64 × 2 = 36,864 B of it for good."""
    deepseek = _config("deepseek-ai--DeepSeek-V3")
    assert deepseek.kv_bytes_per_token(2.0) == 61 * 576 * 2 == deepseek.kv_bytes_per_token(2.0, tensor_parallel=8)
    oss = _config("openai--gpt-oss-120b")
    assert oss.kv_bytes_per_token(2.0) == 73728
    assert oss.kv_bytes_per_token(2.0, tensor_parallel=8) == 36 * 2 * 1 * 64 * 2


@needs_configs
def test_hybrid_state_layers_by_hand():
    """Qwen3.5-35B-A3B: 30 Gated DeltaNet layers (32 value heads, 16 key heads, 128 × 128) and 10 full-attention
    layers (2 KV heads of 256); each sequence keeps a float32 state of 32·128·128 + 3·(2·16·128 + 32·128) elements
    per linear layer. Nemotron-H-56B: 54 Mamba2 mixers (256 heads of 64, state 256, 8 groups), 54 MLPs and 10
    attention layers (8 KV heads of 128); a bf16 state of 256·64·256 + 3·(256·64 + 2·8·256) per mixer."""
    qwen = _config("Qwen--Qwen3.5-35B-A3B")
    assert {(g.count, g.attention.kind) for g in qwen.layers} == {(30, "linear"), (10, "full")}
    state = 30 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 4
    assert qwen.kv_layout(2.0) == (10 * 2 * 2 * 256 * 2, [(1, state)])
    nemotron = _config("nvidia--Nemotron-H-56B-Base-8K")
    assert {(g.count, g.attention.kind, g.ffn.kind) for g in nemotron.layers} == {
        (54, "mamba", "none"), (54, "none", "dense"), (10, "full", "none")}
    state = 54 * (256 * 64 * 256 + 3 * (256 * 64 + 2 * 8 * 256)) * 2
    assert nemotron.kv_layout(2.0) == (10 * 2 * 8 * 128 * 2, [(1, state)])
    assert nemotron.kv_layout(2.0, tensor_parallel=8) == (10 * 2 * 1 * 128 * 2, [(1, state / 8)])


@needs_configs
def test_state_layers_cost_a_constant_per_sequence_in_decode():
    """A decode step stays affine in the context sum: the linear-attention layers add a per-sequence constant
    (their state read and written), only the full-attention layers grow with the context."""
    from simulator.cost.base import IterationShape

    model, hw = _config("Qwen--Qwen3.5-35B-A3B"), load_hardware("h100-sxm")
    cost = RooflineCostModel(model, hw, 2)
    linear, full = (g for g in cost.groups if g.count == 30), (g for g in cost.groups if g.count == 10)
    linear, full = next(linear), next(full)
    (linear_per_sequence, linear_per_token), (_, full_per_token) = linear.decode_terms(16), full.decode_terms(16)
    assert linear_per_token == 0 and linear_per_sequence > 0 and full_per_token > 0
    state_bytes = 30 * (16 * 128 * 128 + 3 * (2 * 8 * 128 + 16 * 128)) * 4  # TP 2 halves the heads
    assert linear_per_sequence >= 2 * state_bytes / (hw.memory_bandwidth_gb_per_s * 1e9)
    a, c = cost.decode_step_coefficients(16)
    for context in (1000, 50_000):
        assert cost.iteration_time(IterationShape((), 16, 16 * context)) == pytest.approx(a + c * 16 * context)


def test_kv_size_reports_each_group(capsys):
    from simulator.cli import main

    path = CONFIGS / "openai--gpt-oss-120b_config.json"
    if not path.is_file():
        pytest.skip("../shared/data/model_configs not present")
    assert main(["kv-size", "--model", str(path), "--context", "4096", "--batch", "2", "--dtype", "bf16",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    by_kind = {g["attention"]: g for g in report["groups"]}
    assert by_kind["sliding"]["tokens_held"] == 128 and by_kind["full"]["tokens_held"] == 4096
    assert report["kv_bytes"] == 36864 * (4096 + 128) * 2
    assert report["total_params"] == load_model(str(path)).num_params


@given(st.integers(0, 3000), st.integers(0, 3000), st.integers(0, 2000))
def test_causal_pairs_under_a_span_count_every_visible_key(new, cached, span):
    """Σ over the new tokens at positions cached+1 … cached+new of min(position, span) (span 0: no limit)."""
    brute = sum(min(i, span) if span else i for i in range(cached + 1, cached + new + 1))
    assert causal_pairs(new, cached, span) == pytest.approx(brute, rel=1e-12, abs=1e-9)


@needs_configs
@pytest.mark.parametrize("name, dtype, tp", [("Qwen--Qwen3-235B-A22B", "fp8_block", 8),
                                             ("openai--gpt-oss-120b", "mxfp4", 2),
                                             ("deepseek-ai--DeepSeek-V3", "fp8_block", 8)])
def test_fine_grained_experts_cost_at_least_reading_their_weights(name, dtype, tp):
    """At every batch the MoE layers take at least the time to read the touched experts' weights at the spec
    sheet's HBM bandwidth; at small batch (memory-bound) not more than twice that (the fitted knee is soft) plus
    the layers' fixed kernel costs — where pricing every touched expert as its own GEMM cost 5×."""
    model, hw = _config(name), load_hardware("h100-sxm")
    cost = RooflineCostModel(model, hw, tp, dtype)
    from simulator.dtypes import bytes_per_element

    for batch in (1, 2, 8, 32, 128, 512):
        bound, overheads, moe_time = 0.0, 0.0, 0.0
        for group, priced in zip(model.layers, cost.groups, strict=True):
            ffn = group.ffn
            if ffn.kind != "moe":
                continue
            touched = ffn.num_experts * (1 - (1 - ffn.experts_per_token / ffn.num_experts) ** batch)
            weight_bytes = touched * ffn.expert_params(model.hidden_size) / tp * bytes_per_element(dtype)
            bound += group.count * weight_bytes / (hw.memory_bandwidth_gb_per_s * 1e9)
            overheads += group.count * hw.fit.moe.kernels * hw.fit.kernel_overhead_us * 1e-6
            moe_time += priced.experts_time(batch)
        assert moe_time >= bound
        if batch <= 8:
            assert moe_time <= 2 * bound + overheads


def test_a_layer_stack_model_yaml(tmp_path):
    """A model YAML may list its layer groups; the flat fields are the shorthand of one group."""
    path = tmp_path / "tiny.yaml"
    path.write_text("""
name: tiny-hybrid
hidden_size: 512
vocab_size: 1000
max_position_embeddings: 4096
layers:
  - {count: 3, attention: {kind: sliding, window: 256, num_heads: 8, num_kv_heads: 2, head_dim: 64},
     ffn: {intermediate_size: 1024}}
  - {count: 1, attention: {num_heads: 8, num_kv_heads: 2, head_dim: 64},
     ffn: {kind: moe, intermediate_size: 256, num_experts: 8, experts_per_token: 2}}
""")
    model = load_model(str(path))
    assert model.num_layers == 4 and model.is_moe
    assert model.kv_bytes_per_token(2.0) == 4 * 2 * 2 * 64 * 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nhidden_size: 8\nvocab_size: 8\nmax_position_embeddings: 8\nnum_layers: 2\n"
                   "num_heads: 2\nintermediate_size: 8\nlayers: []\n")
    with pytest.raises(LLMSimError, match="give either layers or the flat fields"):
        load_model(str(bad))
    assert math.isfinite(RooflineCostModel(model, load_hardware("h100-sxm")).decode_step_coefficients(4)[0])


def test_expert_parallelism_inside_the_tensor_parallel_group():
    """Qwen3-235B at TP 4: with expert_parallel 4 each GPU holds 32 whole experts (width 1536) and receives a quarter
    of the token-expert assignments; without, every GPU holds all 128 at a quarter of the width. The same weight
    bytes either way, so decode at batch 1 costs about the same; the grouped GEMMs are what the EP model prices."""
    from simulator.cost.moe import ExpertsModel

    model, hw = load_model("qwen3-235b-a22b"), load_hardware("h100-sxm")
    tp_only = RooflineCostModel(model, hw, 4)
    with_ep = RooflineCostModel(model, hw, 4, expert_parallel=4)
    (group_tp,), (group_ep,) = tp_only.groups, with_ep.groups
    experts = ExpertsModel(hw, "bf16")
    for tokens in (1, 64, 4096):
        assert group_ep.experts_time(tokens) == pytest.approx(94 * experts.time(tokens, 4096, 1536, 2, 8, 128, 4))
        assert group_tp.experts_time(tokens) == pytest.approx(94 * experts.time(tokens, 4096, 384, 2, 8, 128, 1))
    assert with_ep.decode_step_coefficients(1)[0] == pytest.approx(tp_only.decode_step_coefficients(1)[0], rel=0.25)


def test_a_fused_moe_kernels_passes_over_the_tokens_it_is_handed():
    """``moe_token_pass_bytes`` and ``moe_ep_overhead_us`` (TensorRT-LLM's kernel: passes over every token it is
    handed, whatever its experts, and what expert parallelism adds), by hand on H100 for Qwen3-235B's layer (hidden
    4,096, top-8 of 128): 12 bytes per (token, hidden element) of 1,000 tokens at the MoE streaming bandwidth,
    12 · 1000 · 4096 / (3,350 GB/s · 0.85 · moe_bandwidth_efficiency), and 5 µs more under expert parallelism;
    ``moe_assignment_pass_bytes`` the same per token copy its experts receive (T·k/ep on a GPU). At
    TP 4 with EP 4 every GPU is handed every token; with attention data parallelism 4 and EP 4 the all-to-all hands
    each GPU the assignments it serves, T·k/ep of the ranks' T tokens."""
    from simulator.cost.moe import ExpertsModel

    hw = load_hardware("h100-sxm")
    passes = with_fit(hw, {"moe.token_pass_bytes": 12.0, "moe.ep_overhead_us": 5.0})
    plain, with_passes = ExpertsModel(hw, "bf16"), ExpertsModel(passes, "bf16")
    pass_s = 12 * 1000 * 4096 / (3350e9 * 0.85 * hw.fit.moe.bandwidth_efficiency)
    shape = (4096, 1536, 2, 8, 128)
    assert with_passes.time(1000, *shape, 1) - plain.time(1000, *shape, 1) == pytest.approx(pass_s)
    assert with_passes.time(1000, *shape, 4) - plain.time(1000, *shape, 4) == pytest.approx(pass_s + 5e-6)
    handed = with_passes.time(1000, *shape, 4, handed=250) - plain.time(1000, *shape, 4)
    assert handed == pytest.approx(pass_s / 4 + 5e-6)
    # and 6 bytes per (assignment, hidden element) over the token copies its experts receive: 1,000 tokens × 8 of
    # them over EP 4, balanced (no rank busier than the mean), 2,000 copies on each GPU
    copies = with_fit(hw, {"moe.assignment_pass_bytes": 6.0})
    balanced = (*shape, 4, "balanced")
    added = ExpertsModel(copies, "bf16").time(1000, *balanced) - plain.time(1000, *balanced)
    assert added == pytest.approx(6 * 2000 * 4096 / (3350e9 * 0.85 * hw.fit.moe.bandwidth_efficiency))
    model = load_model("qwen3-235b-a22b")
    (tp_group,) = RooflineCostModel(model, passes, 4, expert_parallel=4).groups
    (dp_group,) = RooflineCostModel(model, passes, 1, expert_parallel=4, data_parallel=4).groups
    for tokens in (64, 1000):
        assert tp_group.experts_time(tokens) == pytest.approx(
            94 * ExpertsModel(passes, "bf16").time(tokens, 4096, 1536, 2, 8, 128, 4))
        # 4 ranks of `tokens` each: 4·tokens routed, each GPU handed 4·tokens·8/4 assignments
        assert dp_group.experts_time(tokens) == pytest.approx(
            94 * ExpertsModel(passes, "bf16").time(4 * tokens, 4096, 1536, 2, 8, 128, 4, handed=8 * tokens))


@pytest.mark.parametrize("cluster, problem", [
    ({"tensor_parallel": 4, "expert_parallel": 3}, r"expert_parallel \(3\) must divide data_parallel × tensor_par"),
    ({"tensor_parallel": 2, "expert_parallel": 2, "model": "llama-3-8b"}, "needs a mixture-of-experts model"),
    ({"tensor_parallel": 8, "expert_parallel": 8, "model": "mixtral-8x7b", "dtype": "bf16"}, None),
    ({"tensor_parallel": 16, "expert_parallel": 16, "model": "mixtral-8x7b"}, "does not divide the 8 experts"),
    ({"data_parallel": 2, "model": "llama-3-8b"}, "attention-DP ranks need a mixture-of-experts model"),
    ({"data_parallel": 4, "expert_parallel": 4, "dtype": "bf16"}, None),
])
def test_expert_parallel_is_validated(cluster, problem):
    import simulator
    from simulator.errors import LLMSimError

    model = cluster.pop("model", "qwen3-30b-a3b")
    config = {"model": model, "hardware": "h100-sxm", "cluster": cluster, "workload": {
        "num_requests": 4, "arrival": {"kind": "poisson", "rate": 4}, "input_tokens": {"kind": "fixed", "value": 64},
        "output_tokens": {"kind": "fixed", "value": 8}}}
    if "dtype" in cluster:
        config["dtype"] = cluster.pop("dtype")
    if problem is None:
        assert simulator.run(simulator.load(config)).summary["completed"] == 4
        return
    with pytest.raises(LLMSimError, match=problem):
        simulator.run(simulator.load(config))


def test_models_and_gpus_list_the_catalogs(capsys):
    from simulator.cli import main

    assert main(["models", "--json"]) == 0
    models = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert models["deepseek-v3"]["checkpoint_dtype"] == "fp8_block"
    assert models["deepseek-v3"]["kv_bytes_per_token"] == 61 * 576 * 2
    assert models["gpt-oss-120b"]["total_params"] == load_model("gpt-oss-120b").num_params
    assert main(["gpus", "--json"]) == 0
    gpus = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert gpus["h100-sxm"]["generation"] == "hopper" and gpus["gb200"]["gpus_per_node"] == 72
    assert (gpus["a100-80gb-sxm"]["sm_count"], gpus["h100-sxm"]["sm_count"]) == (108, 132)  # the whitepapers'
    assert all(row["sm_count"] > 0 for row in gpus.values())  # every catalog GPU states its SMs
    assert main(["gpus"]) == 0 and "h200-sxm" in capsys.readouterr().out


def test_wide_expert_parallel_memory_per_gpu_by_hand():
    """DeepSeek-R1 (fp8 blocks) with attention DP 8 + EP 8 on 8 H200s: every GPU holds all non-expert weights
    (attention, the 3 dense FFNs, norms, router, embeddings and LM head at 16-bit) and an eighth of the 58 × (256
    routed + 1 shared) experts; its KV pool keeps MLA's 61 × 576-element latent per token (bf16) for its own rank.
    On 8 H100s the same layout does not fit (671 GB of weights over 640 GB of HBM)."""
    from simulator.errors import LLMSimError
    from simulator.kv import kv_budget

    model = load_model("deepseek-r1")
    fp8 = 1 + 4 / 16384
    experts = 58 * 257 * 3 * 7168 * 2048
    embeddings = 2 * 129280 * 7168
    norms_and_routers = 61 * 2 * 7168 + 7168 + 58 * 7168 * 256
    quantised_rest = model.num_params - experts - embeddings - norms_and_routers
    per_gpu = quantised_rest * fp8 + (embeddings + norms_and_routers) * 2 + experts * fp8 / 8
    args = dict(tensor_parallel=1, weight_dtype="fp8_block", kv_dtype_name="bf16", gpu_memory_utilization=0.9,
                block_size=64, max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=16384, expert_shards=8)
    h200 = kv_budget(model, load_hardware("h200-sxm"), **args)
    assert h200.weight_bytes == pytest.approx(per_gpu, rel=1e-9)
    assert h200.kv_bytes_per_token == 61 * 576 * 2
    pool = load_hardware("h200-sxm").memory_bytes * 0.9 - per_gpu - h200.workspace_bytes
    assert h200.capacity_tokens == math.floor(pool / (64 * 61 * 576 * 2)) * 64
    with pytest.raises(LLMSimError, match=r"weights .* GiB"):
        kv_budget(model, load_hardware("h100-sxm"), **args)


def test_a_hybrid_pattern_with_mixture_of_experts_layers(tmp_path):
    """``E`` blocks take the routed experts (named here by DeepSeek's alias), ``-`` the dense MLP, ``M`` Mamba2, ``*``
    attention; a mixer-only layer has one norm, no FFN."""
    config = {"model_type": "nemotron_h", "num_hidden_layers": 4, "hybrid_override_pattern": "ME*-",
              "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "intermediate_size": 512, "moe_intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2,
              "mamba_num_heads": 8, "mamba_head_dim": 32, "ssm_state_size": 16, "n_groups": 1, "vocab_size": 100}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    model = load_model(str(path))
    blocks = {(g.attention.kind, g.ffn.kind): g for g in model.layers}
    assert set(blocks) == {("mamba", "none"), ("none", "moe"), ("full", "none"), ("none", "dense")}
    moe = blocks[("none", "moe")].ffn
    assert (moe.num_experts, moe.experts_per_token, moe.intermediate_size, moe.gated) == (8, 2, 128, False)
    assert blocks[("none", "dense")].ffn.intermediate_size == 512
    assert blocks[("mamba", "none")].params(256) == blocks[("mamba", "none")].attention.params(256) + 256


def test_a_layer_without_ffn_has_no_ffn_weights_or_activations(tmp_path):
    """A mixer-only layer (``M``) and an attention-only one (``*``) have no FFN: none of its weights counts in any
    part (the parts sum to the total), and its elementwise kernels see no activation width. Here: one Mamba2 layer
    and one attention layer, each without FFN, beside one dense MLP of 512 (ungated, Nemotron-H's squared ReLU:
    2 × 256 × 512 weights)."""
    config = {"model_type": "nemotron_h", "num_hidden_layers": 3, "hybrid_override_pattern": "M*-",
              "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "intermediate_size": 512, "mamba_num_heads": 8, "mamba_head_dim": 32, "ssm_state_size": 16,
              "n_groups": 1, "vocab_size": 100}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    model = load_model(str(path))
    parts = model.part_params()
    assert parts["dense_ffn"] == 2 * 256 * 512 and parts["experts"] == 0
    assert sum(parts.values()) == model.num_params
    cost = RooflineCostModel(model, load_hardware("h100-sxm"), 2)
    widths = sorted(group.activation_width for group in cost.groups)
    assert widths == [0.0, 0.0, 512 / 2]  # the dense MLP's I / t: its up-projection's output per token


def test_the_busiest_expert_parallel_rank_matches_sampled_routing():
    """The closed-form busiest rank against sampling the routing it describes (seeded): every token picks k distinct
    of E experts, uniformly (the binomial term) or by popularities of a stated spread (E = 128, k = 8; the expected
    largest rank load over 400 draws). Equal popularity and no sampling is exactly balanced; a rank never holds
    more than every token's assignments to its experts."""
    import numpy as np

    from simulator.cost.moe import busiest_rank_factor

    rng = np.random.default_rng(7)
    experts, topk = 128, 8
    for tokens, ep, cv in ((64, 4, 0.0), (256, 8, 0.0), (16, 16, 0.0), (512, 8, 0.5), (2048, 16, 0.8)):
        popularity = np.ones(experts) if cv == 0 else rng.gamma(1 / cv**2, cv**2, experts)  # mean 1, spread cv
        largest = []
        for _ in range(400):
            keys = np.log(rng.random((tokens, experts))) / (popularity / popularity.mean())  # weighted, distinct
            chosen = np.argsort(keys, axis=1)[:, -topk:]
            loads = np.bincount(chosen.ravel() // (experts // ep), minlength=ep)
            largest.append(loads.max() / (tokens * topk / ep))
        assert busiest_rank_factor(tokens, topk, experts, ep, cv) == pytest.approx(np.mean(largest), rel=0.10)
    assert busiest_rank_factor(64, 8, 128, 8, 0.0, sampled=False) == 1.0
    assert busiest_rank_factor(1, 8, 16, 16, 5.0) == 2.0  # one expert per rank: a token sends it 1 of its 8, mean 0.5


def test_touched_experts_match_sampled_routing_by_popularity():
    """The expected share of experts a batch touches against sampling the routing it describes (seeded): every token
    picks k distinct of E experts with probability by popularity (lognormal, mean 1, the stated spread; E = 128,
    k = 8, 300 draws of popularities and tokens each). Equal popularity is the closed form 1 − (1 − k/E)^T by hand;
    a spread gathers the tokens on fewer experts."""
    import numpy as np

    from simulator.cost.moe import touched_share

    assert touched_share(8 / 128, 16) == pytest.approx(1 - (15 / 16) ** 16)  # 0.6439
    rng = np.random.default_rng(11)
    experts, topk = 128, 8
    for tokens, cv in ((4, 1.0), (16, 0.5), (16, 1.25), (64, 1.25), (32, 2.0)):
        sigma = math.sqrt(math.log1p(cv * cv))
        shares = []
        for _ in range(300):
            popularity = np.exp(sigma * rng.standard_normal(experts) - sigma * sigma / 2)
            keys = np.log(rng.random((tokens, experts))) / popularity  # weighted picks without replacement
            chosen = np.argsort(keys, axis=1)[:, -topk:]
            shares.append(len(np.unique(chosen)) / experts)
        assert touched_share(topk / experts, tokens, cv) == pytest.approx(np.mean(shares), rel=0.05)
        assert touched_share(topk / experts, tokens, cv) < touched_share(topk / experts, tokens)


@given(st.floats(0.001, 0.5), st.integers(1, 4096), st.floats(0.0, 3.0), st.floats(0.01, 1.0))
def test_touched_share_is_a_share_that_falls_with_the_spread(pick, tokens, cv, more):
    """Between 0 and 1, never more than with equal popularity (Jensen: 1 − (1 − p)^T is concave in p), falling as
    the popularity spreads and growing with the tokens."""
    from simulator.cost.moe import touched_share

    share = touched_share(pick, tokens, cv)
    assert 0.0 <= share <= touched_share(pick, tokens) + 1e-12
    assert touched_share(pick, tokens, cv + more) <= share + 1e-12
    assert touched_share(pick, tokens + 1, cv) >= share - 1e-12


def test_expert_load_spread_loads_the_busiest_rank_and_gathers_a_decode_batch():
    """cost_model.expert_load_cv: under expert parallelism the busiest rank's experts set a MoE layer's time, so a
    prompt, which touches (almost) every expert either way, takes longer; without it every GPU holds every expert
    and the prompt's time barely changes (its 4096 tokens miss a few cold experts, and the rest get whole tiles of
    rows). A decode batch of a few tokens per expert gathers on the popular experts and
    reads fewer experts' weights: faster without expert parallelism."""
    from simulator.cost.base import IterationShape
    from simulator.cost.moe import moe_time

    hw = load_hardware("h100-sxm")
    model = load_model("qwen3-235b-a22b")
    prompt = IterationShape(((4096, 0),), 0, 0)
    even = RooflineCostModel(model, hw, 8, expert_parallel=8)
    skewed = RooflineCostModel(model, hw, 8, expert_parallel=8, expert_load_cv=1.0)
    assert skewed.iteration_time(prompt) > 1.05 * even.iteration_time(prompt)
    assert RooflineCostModel(model, hw, 8, expert_load_cv=1.0).iteration_time(prompt) == pytest.approx(
        RooflineCostModel(model, hw, 8).iteration_time(prompt), rel=0.02)
    assert (RooflineCostModel(model, hw, 8, expert_load_cv=1.0).decode_step_coefficients(16)[0]
            < RooflineCostModel(model, hw, 8).decode_step_coefficients(16)[0])
    assert moe_time(hw, 4096, 4096, 1536, 8, 128, moe_ep=8, load_cv=1.0) > moe_time(hw, 4096, 4096, 1536, 8, 128,
                                                                                      moe_ep=8)
    with pytest.raises(ValueError, match="load_cv: -1"):
        moe_time(hw, 16, 4096, 1536, 8, 128, load_cv=-1)


def test_deepep_exchanges_attention_dp_tokens_by_iteration_kind():
    """cost_model.all_to_all: deepep. A decode step's MoE exchange is DeepEP's low-latency pair (latency +
    T·k·(n−1)/n·D bytes, FP8 out, bf16 back); an iteration with a prompt uses the normal kernels, which send a
    token once per GPU it reaches — far fewer bytes than NCCL's all-to-all of every pair in 16-bit. Ampere is
    refused (DeepEP needs Hopper)."""
    from simulator.cost.base import IterationShape
    from simulator.cost.expert_exchange import deepep_time, exchange_time
    from simulator.errors import ConfigError

    hw, model = load_hardware("h100-sxm"), load_model("qwen3-30b-a3b")
    deepep = RooflineCostModel(model, hw, 1, expert_parallel=4, data_parallel=4, all_to_all="deepep")
    nccl = RooflineCostModel(model, hw, 1, expert_parallel=4, data_parallel=4)
    layers, D = model.num_layers, model.hidden_size
    ll = sum(deepep_time(hw, f"ll_{d}", 4, 64, 8, D) for d in ("dispatch", "combine"))
    fit = hw.fit.comm.deepep["ll_dispatch"]  # 4 tokens × 8 pairs, 3 of 4 to other GPUs
    link = hw.interconnect_gb_per_s * 1e9 * fit.efficiency
    by_hand = fit.latency_us * 1e-6 + 4 * 8 * 3 / 4 * D * (1 + 4 / 128) / link
    assert deepep_time(hw, "ll_dispatch", 4, 4, 8, D) == pytest.approx(by_hand)
    step = deepep.decode_step_coefficients(64)[0] - nccl.decode_step_coefficients(64)[0]
    assert step == pytest.approx(layers * (ll - exchange_time(deepep.network, "nccl", 4, 64, 8, D, 2, True)))
    prompt = IterationShape(((4096, 0),))
    assert deepep.iteration_time(prompt) < nccl.iteration_time(prompt)
    normal = exchange_time(hw, "deepep", 4, 4096, 8, D, 2, False)
    assert normal < 0.5 * exchange_time(nccl.network, "nccl", 4, 4096, 8, D, 2, False)
    with pytest.raises(ConfigError, match="deepep needs a GPU DeepEP runs on"):
        RooflineCostModel(model, load_hardware("a100-80gb-sxm"), 1, expert_parallel=4, data_parallel=4,
                          all_to_all="deepep")


def test_gpt_oss_attention_sinks_are_one_parameter_per_head():
    """gpt-oss's learned sinks: 64 heads × 36 layers = 2,304 parameters, no KV; other families have none."""
    with_sinks = FullAttention(num_heads=64, num_kv_heads=8, head_dim=64, sinks=True)
    without = with_sinks.model_copy(update={"sinks": False})
    assert with_sinks.params(2880) - without.params(2880) == 64
    assert with_sinks.kv_elements_per_token() == without.kv_elements_per_token()
    model = load_model("gpt-oss-120b")
    assert all(group.attention.sinks for group in model.layers)
    assert sum(group.count * group.attention.num_heads for group in model.layers) == 2304
    assert not any(group.attention.sinks for group in load_model("llama-3-8b").layers)


def test_eplb_slots_hold_the_redundant_experts_weights():
    """DeepSeek-R1 on 8 H200s (DP 8 + EP 8) with 32 redundant experts (288 slots): every GPU holds 36 routed experts
    instead of 32 in each of the 58 MoE layers, 58 × 4 × 3 × 7168 × 2048 fp8-block bytes more; the shared expert is
    not replicated."""
    import simulator
    from simulator.config import load_experiment

    def weights(eplb):
        config = {"model": "deepseek-r1", "hardware": "h200-sxm", "dtype": "fp8_block",
                  "cluster": {"data_parallel": 8, "expert_parallel": 8},
                  "cost_model": {"kind": "roofline", "eplb_redundant_experts": eplb},
                  "workload": {"num_requests": 2, "arrival": {"kind": "poisson", "rate": 1.0},
                               "input_tokens": {"kind": "fixed", "value": 64},
                               "output_tokens": {"kind": "fixed", "value": 4}}}
        return simulator.run(load_experiment(config)).summary["weights_gib_per_gpu"] * 2**30

    extra = 58 * 4 * 3 * 7168 * 2048 * (1 + 4 / 16384)
    assert weights(32) - weights(None) == pytest.approx(extra, rel=1e-9)


def test_slots_that_do_not_divide_over_the_ranks_are_refused():
    import simulator
    from simulator.config import load_experiment
    from simulator.errors import ConfigError

    config = {"model": "deepseek-r1", "hardware": "h200-sxm", "dtype": "fp8_block",
              "cluster": {"data_parallel": 8, "expert_parallel": 8},
              "cost_model": {"kind": "roofline", "eplb_redundant_experts": 30},
              "workload": {"num_requests": 1, "arrival": {"kind": "poisson", "rate": 1.0},
                           "input_tokens": {"kind": "fixed", "value": 8},
                           "output_tokens": {"kind": "fixed", "value": 2}}}
    with pytest.raises(ConfigError, match="286 expert slots, which do not divide over expert_parallel 8"):
        simulator.run(load_experiment(config))


def test_eplb_busiest_rank_matches_sampled_routing_over_balanced_placements():
    """EPLB places the experts by popularity (largest first onto the least loaded rank with room: DeepSeek's
    balanced packing, equal experts per rank); then sampled routing (E = 128, k = 8, 200 draws; popularities
    lognormal of spread 0.8, the closed form's assumption) loads the busiest rank as the closed form says: the
    binomial spread alone while the ranks hold many experts (within 5%; without EPLB it would be 1.25), the hottest
    expert's share once they hold two (within 10%)."""
    import numpy as np

    from simulator.cost.moe import busiest_rank_factor

    rng = np.random.default_rng(11)
    experts, topk, cv, tokens = 128, 8, 0.8, 2048
    sigma = np.sqrt(np.log1p(cv**2))
    popularity = rng.lognormal(-sigma**2 / 2, sigma, experts)
    for ep, low, high in ((8, 0.95, 1.05), (64, 0.9, 1.1)):
        per_rank = experts // ep  # balanced packing: largest first onto the least loaded rank with room
        rank_of, loads, counts = np.empty(experts, dtype=int), np.zeros(ep), np.zeros(ep, dtype=int)
        for expert in np.argsort(-popularity):
            rank = min((r for r in range(ep) if counts[r] < per_rank), key=lambda r: loads[r])
            rank_of[expert], loads[rank], counts[rank] = rank, loads[rank] + popularity[expert], counts[rank] + 1
        largest = []
        for _ in range(200):
            keys = np.log(rng.random((tokens, experts))) / (popularity / popularity.mean())
            chosen = np.argsort(keys, axis=1)[:, -topk:]
            largest.append(np.bincount(rank_of[chosen.ravel()], minlength=ep).max() / (tokens * topk / ep))
        closed = busiest_rank_factor(tokens, topk, experts, ep, float(popularity.std() / popularity.mean()),
                                     slots=experts)
        assert low <= closed / np.mean(largest) <= high, (ep, closed, np.mean(largest))
    assert busiest_rank_factor(4096, 8, 256, 16, 1.0, slots=256) == busiest_rank_factor(4096, 8, 256, 16, 0.0)
    assert busiest_rank_factor(4096, 8, 256, 256, 1.0, slots=256) == pytest.approx(
        busiest_rank_factor(4096, 8, 256, 256, 1.0, sampled=False), rel=0.02)  # one expert per rank: nothing to move


def test_two_batch_overlap_hides_half_the_shorter_of_compute_and_exchange():
    """DeepSeek-V3 on 8 H200s, DP 8 + EP 8 with DeepEP: two micro-batches pipeline compute C and exchange X, so the
    body takes max(C, X) + min(C, X)/2 — between the longer stage alone and the two in series — and without
    attention data parallelism there is nothing to overlap (the all-reduces stay in series)."""
    from simulator.catalog import load_hardware
    from simulator.catalog.engines import load_engine
    from simulator.cost.roofline import RooflineCostModel

    model, hardware, engine = load_model("deepseek-v3"), load_hardware("h200-sxm"), load_engine("sglang")
    plain, overlapped = (RooflineCostModel(model, hardware, 1, "fp8_block", None, engine, 1, 8, 8, 0.0, "deepep",
                                           None, tbo) for tbo in (False, True))
    for tokens in (64, 1024, 8192):
        parts = plain.body_parts(tokens)
        compute, exchange = parts["gemm_s"] + parts["elementwise_s"], plain.exchange_time(tokens)
        serial, piped = sum(parts.values()), sum(overlapped.body_parts(tokens).values())
        assert piped == pytest.approx(serial - min(compute, exchange) / 2, rel=1e-12)
        assert serial - min(compute, exchange) < piped < serial  # never more hidden than the shorter stage
    tp = RooflineCostModel(model, hardware, 8, "fp8_block", None, engine, 1, 8, 1, 0.0, "nccl", None, True)
    assert tp.exchange_time(1024) == 0.0


def test_a_query_key_norm_over_all_heads_all_reduces_under_tensor_parallelism(tmp_path):
    """``use_qk_norm`` with ``qk_norm_type: per_layer`` (MiniMax-M2) normalises queries and keys over all heads: at
    TP 4 every layer all-reduces each token's two fp32 sums of squares (one fused all-reduce of T·8 bytes) and runs
    one kernel more; per-head norms and a single GPU cost nothing extra. The difference is rebuilt by hand from the
    cost model's own all-reduce and elementwise-kernel prices."""
    from simulator.cost.base import IterationShape

    base = {"model_type": "minimax_m2", "num_hidden_layers": 6, "hidden_size": 1024, "num_attention_heads": 16,
            "num_key_value_heads": 4, "head_dim": 64, "intermediate_size": 2048, "vocab_size": 1000}
    models = {}
    for name, extra in (("across", {"use_qk_norm": True, "qk_norm_type": "per_layer"}),
                        ("per_head", {"use_qk_norm": True, "qk_norm_type": "per_head"}), ("none", {})):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({**base, **extra}))
        models[name] = load_model(str(path))
    assert [m.layers[0].attention.qk_norm_across_heads for m in models.values()] == [True, False, False]
    hw, step = load_hardware("h100-sxm"), IterationShape((), 32, 32 * 1000)
    plain = RooflineCostModel(models["none"], hw, 4)
    across = RooflineCostModel(models["across"], hw, 4)
    assert RooflineCostModel(models["per_head"], hw, 4).iteration_time(step) == plain.iteration_time(step)
    group = plain.groups[0]
    tokens_bytes = 32 * (10 * 1024 + 3 * 2048 / 4) * plain.w
    kernels, memory_kernel = group.elementwise_kernels, group.attention_gemm.memory_kernel
    kernel = ((kernels + 1) * memory_kernel(tokens_bytes / (kernels + 1))
              - kernels * memory_kernel(tokens_bytes / kernels))
    by_hand = 6 * (plain.all_reduce_time(32 * 8) + kernel)
    assert across.iteration_time(step) - plain.iteration_time(step) == pytest.approx(by_hand, rel=1e-9)
    assert by_hand > 6 * plain.all_reduce_time(32 * 8) > 0
    single = RooflineCostModel(models["across"], hw, 1)
    assert single.iteration_time(step) == RooflineCostModel(models["none"], hw, 1).iteration_time(step)
    latent = tmp_path / "latent.yaml"  # a norm over heads is a property of multi-head attention, not of MLA's latent
    latent.write_text("name: m\nhidden_size: 512\nvocab_size: 100\nmax_position_embeddings: 4096\nlayers:\n"
                      "  - {count: 2, attention: {kind: mla, num_heads: 4, num_kv_heads: 4, head_dim: 96, "
                      "kv_lora_rank: 64, qk_rope_head_dim: 32, v_head_dim: 64, qk_norm_across_heads: true}, "
                      "ffn: {intermediate_size: 256}}\n")
    with pytest.raises(LLMSimError, match=r"layers\[0\]\.attention\.qk_norm_across_heads: unknown key \(allowed: kind, "
                                          "num_heads"):
        load_model(str(latent))


def _load(tmp_path, config: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return load_model(str(path))


# Qwen/Qwen3-Next-80B-A3B-Instruct's config.json (architecture fields): no layer_types, a full_attention_interval
QWEN3_NEXT = {"model_type": "qwen3_next", "num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 16,
              "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 5120, "moe_intermediate_size": 512,
              "num_experts": 512, "num_experts_per_tok": 10, "shared_expert_intermediate_size": 512,
              "decoder_sparse_step": 1, "mlp_only_layers": [], "full_attention_interval": 4,
              "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
              "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "vocab_size": 151936,
              "max_position_embeddings": 262144, "tie_word_embeddings": False}


def test_qwen3_next_puts_full_attention_on_every_fourth_layer(tmp_path):
    """Qwen3-Next names no layer_types: every full_attention_interval-th layer is full attention, the others Gated
    DeltaNet (transformers derives its layer_types so, with 4 when the interval is absent). Its model card: 80B
    parameters, 79B without the embeddings, 3B activated. KV per token by hand: 12 full layers × (K, V) × 2 KV heads
    × 256 × 2 bytes; before the interval was read, all 48 layers were priced as full attention (4× the KV)."""
    model = _load(tmp_path, QWEN3_NEXT)
    assert {(g.count, g.attention.kind) for g in model.layers} == {(36, "linear"), (12, "full")}
    assert model.kv_bytes_per_token(2.0) == 12 * 2 * 2 * 256 * 2
    embeddings = 2 * model.vocab_size * model.hidden_size
    assert _close(model.num_params / 1e9, 80) and _close((model.num_params - embeddings) / 1e9, 79)
    assert _close((model.active_params - model.vocab_size * model.hidden_size) / 1e9, 3)
    without = _load(tmp_path, {key: value for key, value in QWEN3_NEXT.items() if key != "full_attention_interval"})
    assert without.layers == model.layers
    halves = _load(tmp_path, {**QWEN3_NEXT, "full_attention_interval": 2})
    assert {(g.count, g.attention.kind) for g in halves.layers} == {(24, "linear"), (24, "full")}
    with pytest.raises(LLMSimError, match="full_attention_interval must be a positive integer, got 0"):
        _load(tmp_path, {**QWEN3_NEXT, "full_attention_interval": 0})


# ibm-granite/granite-4.0-h-small's architecture fields: Mamba2 and attention layers named by layer_types (4 of 40
# attention), experts on every layer; its Mamba head width "auto" (the inner width 2 × 4096 over 128 heads)
GRANITE_4_H_SMALL = {"model_type": "granitemoehybrid", "num_hidden_layers": 40, "hidden_size": 4096,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 768,
                     "num_local_experts": 72, "num_experts_per_tok": 10, "shared_intermediate_size": 1536,
                     "mamba_n_heads": 128, "mamba_d_head": "auto", "mamba_d_state": 128, "mamba_n_groups": 1,
                     "mamba_d_conv": 4, "mamba_expand": 2, "vocab_size": 100352, "max_position_embeddings": 131072,
                     "tie_word_embeddings": True,
                     "layer_types": (["mamba"] * 9 + ["attention"]) * 4}


def test_granite_4_hybrid_layers_and_its_dense_sibling(tmp_path):
    """Granite-4.0-H-Small (IBM: 32B total, 9B active): 36 Mamba2 mixers of 128 heads × 64 (mamba_d_head "auto" =
    2 × 4096 / 128) and state 128, 4 attention layers, 72 routed experts of 768 (10 per token) and a 1536-wide shared
    expert on every layer. KV per token by hand: 4 layers × (K, V) × 8 KV heads × 128 × 2 bytes. With
    num_local_experts 0 (its dense models) every layer runs the shared MLP alone."""
    model = _load(tmp_path, GRANITE_4_H_SMALL)
    assert {(g.count, g.attention.kind, g.ffn.kind) for g in model.layers} == {(36, "mamba", "moe"), (4, "full", "moe")}
    mamba = next(g.attention for g in model.layers if g.attention.kind == "mamba")
    assert (mamba.num_heads, mamba.head_dim, mamba.state_size, mamba.groups) == (128, 64, 128, 1)
    moe = model.layers[0].ffn
    assert (moe.num_experts, moe.experts_per_token, moe.intermediate_size, moe.shared_intermediate_size) == (
        72, 10, 768, 1536)
    assert model.kv_bytes_per_token(2.0) == 4 * 2 * 8 * 128 * 2
    assert _close(model.num_params / 1e9, 32) and _close(model.active_params / 1e9, 9)
    dense = _load(tmp_path, {**GRANITE_4_H_SMALL, "num_local_experts": 0, "shared_intermediate_size": 8192})
    assert {(g.ffn.kind, g.ffn.intermediate_size) for g in dense.layers} == {("dense", 8192)}
    heads_only = _load(tmp_path, {**GRANITE_4_H_SMALL, "mamba_d_head": None, "mamba_n_heads": 64})
    assert {(g.attention.num_heads, g.attention.head_dim) for g in heads_only.layers if g.attention.kind == "mamba"} \
        == {(64, 128)}


def test_attention_layer_indices_place_attention_among_mamba_layers(tmp_path):
    """Bamba's attn_layer_indices: attention on those layers, Mamba2 on the rest."""
    config = {"model_type": "bamba", "num_hidden_layers": 6, "hidden_size": 256, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 512, "attn_layer_indices": [2, 5],
              "mamba_n_heads": 8, "mamba_d_head": 64, "mamba_d_state": 16, "vocab_size": 100}
    kinds = [g.attention.kind for g in _load(tmp_path, config).layers for _ in range(g.count)]
    assert sorted(kinds) == ["full"] * 2 + ["mamba"] * 4
    with pytest.raises(LLMSimError, match=r"attn_layer_indices must list layer indices in \[0, 6\)"):
        _load(tmp_path, {**config, "attn_layer_indices": [6]})


@pytest.mark.parametrize("fields, key", [
    ({"attn_type_list": [0, 0, 0, 1]}, "attn_type_list"),
    ({"linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4]}}, "linear_attn_config"),
    ({"attn_layer_period": 2, "attn_layer_offset": 1, "mamba_d_state": 16}, "attn_layer_period"),
    ({"model_type": "falcon_h1", "mamba_d_ssm": 1024, "mamba_n_heads": 16, "mamba_d_state": 128}, "mamba_n_heads"),
])
def test_a_sequence_mixer_layout_not_modelled_is_one_line_naming_its_field(tmp_path, fields, key):
    """A config declaring mixers the importer does not model (lightning attention, Kimi Delta Attention, Mamba-1
    between attention layers, attention and Mamba side by side) is refused, not priced as full attention."""
    config = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 100, **fields}
    with pytest.raises(LLMSimError) as caught:
        _load(tmp_path, config)
    message = str(caught.value)
    assert "\n" not in message and f": {key}:" in message and "not modelled yet" in message, message


def test_deepseek_sparse_attention_weights_and_cache_by_hand():
    """DeepSeek-V3.2 is DeepSeek-V3 plus a lightning indexer per layer: 64 heads of 128 from the 1536-wide query
    latent, one 128-wide key (and its LayerNorm), 64 head weights — 1536·64·128 + 7168·128 + 2·128 + 7168·64 =
    13,959,424 parameters a layer — and one FP8 key of 128 and an fp32 scale cached per token and layer, on every
    tensor-parallel rank, whatever the latent's format."""
    sparse, dense = load_model("deepseek-v3.2"), load_model("deepseek-v3")
    assert sparse.num_params - dense.num_params == 61 * (1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64)
    for element, tp in ((2.0, 1), (1.0, 8)):
        assert sparse.kv_bytes_per_token(element, tp) == 61 * (576 * element + 128 + 4)
    assert {(g.attention.index_topk, g.attention.attended, g.attention.span) for g in sparse.layers} == {
        (2048, 2048, 0)}  # it attends to 2048 cached tokens and keeps them all
    assert sparse.kv_layout(2.0) == (61 * (576 * 2 + 132), [])


def test_sparse_attention_decode_reads_a_fraction_of_the_dense_latents():
    """Per cached token a dense MLA decode reads the 576-element latent (1,152 bytes in 16 bits) for 128 heads; the
    sparse one only scores it (64 FP8 dot products of 128 over a 132-byte key, an fp32 logit written and read) and
    attends to a fixed 2048 per sequence. So a decode step stays affine in the context sum, its slope at least the
    indexer's bytes at HBM speed and under a quarter of the dense slope, and beyond ~7k tokens of context the sparse
    step is the cheaper one."""
    from simulator.cost.base import IterationShape

    hw = load_hardware("h100-sxm")
    sparse = RooflineCostModel(load_model("deepseek-v3.2"), hw, 8, "fp8_block")
    dense = RooflineCostModel(load_model("deepseek-v3"), hw, 8, "fp8_block")
    (a_s, c_s), (a_d, c_d) = sparse.decode_step_coefficients(32), dense.decode_step_coefficients(32)
    assert c_s >= 61 * (128 + 4 + 8) / (hw.memory_bandwidth_gb_per_s * 1e9)
    assert c_s < c_d / 4 and a_s > a_d  # the fixed 2048 tokens per sequence, the indexer's GEMMs and kernels
    for context in (2048, 50_000, 100_000):
        assert sparse.iteration_time(IterationShape((), 32, 32 * context)) == pytest.approx(a_s + c_s * 32 * context)
    crossover = (a_s - a_d) / (c_d - c_s) / 32
    assert 2048 < crossover < 20_000, crossover


def test_the_indexer_is_replicated_over_tensor_parallel_gpus():
    """The engines run the indexer's projections unsplit on every tensor-parallel GPU, so its GEMMs cost a TP 8 GPU
    what they cost one GPU; its prefill kernels score all causal pairs, the MLA kernel only each query's top 2048
    (a prompt within 2048 tokens attends to all of them either way)."""
    from simulator.cost.base import IterationShape

    hw = load_hardware("h100-sxm")
    shape = IterationShape(((1000, 0),))
    extra = {}
    for tp in (1, 8):
        parts = [RooflineCostModel(load_model(name), hw, tp, "fp8_block").breakdown(shape)
                 for name in ("deepseek-v3.2", "deepseek-v3")]
        extra[tp] = parts[0]["gemm_s"] - parts[1]["gemm_s"]
    assert extra[1] == pytest.approx(extra[8]) and extra[1] > 0
    sparse = RooflineCostModel(load_model("deepseek-v3.2"), hw, 8, "fp8_block")
    group = sparse.groups[0]
    assert group.span == 2048 and group.indexer is not None
    long = group.prefill_attention_time(*span_totals(((32_000, 0),), 2048))
    full = group.prefill_attention_time(*span_totals(((32_000, 0),), 0))
    assert long < full / 5  # the MLA kernel over 32,000 × 2048-ish pairs, not 32,000²/2


def test_layers_sharing_a_selection_run_no_indexer(tmp_path):
    """GLM-5.2's indexer_types (or index_topk_freq after index_skip_topk_offset layers): a "shared" layer attends to
    the tokens the layer before picked — no indexer weights, no index key cached."""
    config = {"model_type": "glm_moe_dsa", "num_hidden_layers": 8, "hidden_size": 256, "num_attention_heads": 4,
              "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
              "v_head_dim": 16, "index_topk": 64, "index_n_heads": 4, "index_head_dim": 16, "vocab_size": 100}
    every = _load(tmp_path, config)
    freq = _load(tmp_path, {**config, "index_topk_freq": 4, "index_skip_topk_offset": 3})
    listed = _load(tmp_path, {**config, "indexer_types": ["full"] * 3 + ["shared", "shared", "shared", "full",
                                                                          "shared"]})
    assert freq.layers == listed.layers  # layers 0-2 and 6 run their own indexer
    indexer = 64 * 4 * 16 + 256 * 16 + 2 * 16 + 256 * 4
    assert every.num_params - listed.num_params == 4 * indexer
    assert every.kv_bytes_per_token(2.0) - listed.kv_bytes_per_token(2.0) == 4 * (16 + 4)
    with pytest.raises(LLMSimError, match="indexer_types must list 'full' or 'shared' for each of the 8 layers"):
        _load(tmp_path, {**config, "indexer_types": ["full"]})
    with pytest.raises(LLMSimError, match="index_topk: sparse attention over other than latent"):
        _load(tmp_path, {key: value for key, value in config.items() if key != "kv_lora_rank"})


def test_a_sparse_attention_family_runs_its_indexer_where_the_config_leaves_it_out(tmp_path):
    """GLM-5's model code (``glm_moe_dsa``) runs its indexer whatever its config states, with transformers' defaults
    (2,048 tokens picked by 32 heads of 128): a config that leaves the index fields out (as the one aiconfigurator
    bundles does) is sparse attention, not dense MLA — per layer the indexer's 64·32·128 + 256·128 + 2·128 + 256·32
    weights and a 128-wide FP8 key with its fp32 scale cached per token; fields the config states win."""
    config = {"model_type": "glm_moe_dsa", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
              "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
              "v_head_dim": 16, "vocab_size": 100}
    defaulted = _load(tmp_path, config)
    dense = _load(tmp_path, {**config, "model_type": "deepseek_v3"})
    assert {(g.attention.index_topk, g.attention.index_heads, g.attention.index_head_dim)
            for g in defaulted.layers} == {(2048, 32, 128)}
    assert defaulted.num_params - dense.num_params == 4 * (64 * 32 * 128 + 256 * 128 + 2 * 128 + 256 * 32)
    assert defaulted.kv_bytes_per_token(2.0) - dense.kv_bytes_per_token(2.0) == 4 * (128 + 4)
    stated = _load(tmp_path, {**config, "index_topk": 64, "index_n_heads": 4, "index_head_dim": 16})
    assert {(g.attention.index_topk, g.attention.index_heads) for g in stated.layers} == {(64, 4)}


def test_ernie_moe_layer_range_and_top_k(tmp_path):
    """ERNIE-4.5-21B-A3B's own names (its config.json): experts from moe_layer_start_index on, every
    moe_layer_interval-th layer, up to moe_layer_end_index; moe_k per token; moe_num_shared_experts × the expert
    width shared. Routed experts with no top-k at all are refused rather than read as one per token."""
    config = {"model_type": "ernie4_5_moe", "num_hidden_layers": 28, "hidden_size": 2560, "num_attention_heads": 20,
              "num_key_value_heads": 4, "intermediate_size": 12288, "moe_num_experts": 64, "moe_k": 6,
              "moe_intermediate_size": 1536, "moe_layer_start_index": 1, "moe_layer_interval": 1,
              "moe_layer_end_index": None, "moe_num_shared_experts": 2, "vocab_size": 103424,
              "tie_word_embeddings": True}
    model = _load(tmp_path, config)
    assert [(g.count, g.ffn.kind) for g in model.layers] == [(1, "dense"), (27, "moe")]
    moe = model.layers[1].ffn
    assert (moe.num_experts, moe.experts_per_token, moe.intermediate_size, moe.shared_intermediate_size) == (
        64, 6, 1536, 2 * 1536)
    ranged = _load(tmp_path, {**config, "moe_layer_end_index": 20, "moe_layer_interval": 2})
    assert sorted(g.count for g in ranged.layers if g.ffn.kind == "moe") == [10]  # layers 1, 3, ..., 19
    with pytest.raises(LLMSimError, match=r"names 64 routed experts \(moe_num_experts\) but not how many each token"):
        _load(tmp_path, {key: value for key, value in config.items() if key != "moe_k"})


def test_fields_nested_in_attention_and_ffn_sections(tmp_path):
    """DBRX nests its experts and KV heads (ffn_config, attn_config) and names its context max_seq_len; read as if
    at the top level it is what Databricks published: 132B total, 36B active, 16 experts of 10752, 4 per token."""
    config = {"model_type": "dbrx", "d_model": 6144, "n_heads": 48, "n_layers": 40, "max_seq_len": 32768,
              "vocab_size": 100352, "tie_word_embeddings": False,
              "attn_config": {"kv_n_heads": 8, "clip_qkv": 8, "rope_theta": 500000, "model_type": ""},
              "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4, "model_type": ""}}
    model = _load(tmp_path, config)
    group = model.layers[0]
    assert (group.count, group.attention.num_kv_heads, group.ffn.num_experts, group.ffn.experts_per_token,
            group.ffn.intermediate_size) == (40, 8, 16, 4, 10752)
    assert model.max_position_embeddings == 32768
    assert _close(model.num_params / 1e9, 132) and _close(model.active_params / 1e9, 36)
    with pytest.raises(LLMSimError, match="ffn_config must be a mapping"):
        _load(tmp_path, {**config, "ffn_config": [16, 4]})


def test_expert_fields_given_per_layer(tmp_path):
    """Hunyuan-A13B writes its top-k, shared experts and expert width once per layer; the same on every layer, they
    read as one value, and the model is what Tencent published: 80B total, 13B active. Values that differ from layer
    to layer, and KV caches shared across layers (use_cla), are refused in one line."""
    layers = 32
    config = {"model_type": "hunyuan_v1_moe", "hidden_size": 4096, "num_hidden_layers": layers,
              "num_attention_heads": 32, "num_key_value_heads": 8, "attention_head_dim": 128,
              "intermediate_size": 3072, "num_experts": 64, "moe_topk": [8] * layers,
              "num_shared_expert": [1] * layers, "moe_intermediate_size": [3072] * layers, "use_cla": False,
              "cla_share_factor": 2, "vocab_size": 128167, "max_position_embeddings": 32768,
              "tie_word_embeddings": True}
    model = _load(tmp_path, config)
    moe = model.layers[0].ffn
    assert (moe.experts_per_token, moe.intermediate_size, moe.shared_intermediate_size) == (8, 3072, 3072)
    assert _close(model.num_params / 1e9, 80) and _close(model.active_params / 1e9, 13)
    with pytest.raises(LLMSimError, match=r"moe_topk varies from layer to layer .*not modelled yet"):
        _load(tmp_path, {**config, "moe_topk": [8] * (layers - 1) + [4]})
    with pytest.raises(LLMSimError, match="use_cla: KV caches shared across layers"):
        _load(tmp_path, {**config, "use_cla": True})


def test_moe_layer_freq_given_per_layer(tmp_path):
    """MiMo-V2-Flash and MiniMax-M3 write moe_layer_freq as one 0 or 1 per layer: the experts run where it says 1
    (a list of true / false reads the same); the integer form keeps DeepSeek's meaning (every N-th layer from layer
    0). A list of the wrong length or with other values is refused in one line naming the field and the value."""
    config = {"model_type": "mimo_v2_flash", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
              "intermediate_size": 512, "moe_intermediate_size": 64, "n_routed_experts": 8,
              "num_experts_per_tok": 2, "vocab_size": 100, "moe_layer_freq": [0, 1, 1, 0]}
    kinds = [g.ffn.kind for g in _load(tmp_path, config).layers for _ in range(g.count)]
    assert sorted(kinds) == ["dense", "dense", "moe", "moe"]
    assert _load(tmp_path, {**config, "moe_layer_freq": [False, True, True, False]}).layers == \
        _load(tmp_path, config).layers
    every_other = _load(tmp_path, {**config, "moe_layer_freq": 2})
    assert {g.ffn.kind: g.count for g in every_other.layers} == {"moe": 2, "dense": 2}
    dense_first = _load(tmp_path, {**config, "moe_layer_freq": [1, 1, 1, 1], "first_k_dense_replace": 1})
    assert {g.ffn.kind: g.count for g in dense_first.layers} == {"dense": 1, "moe": 3}
    for bad, problem in (([0, 1, 1], "3 entries"), ([0, 2, 1, 0], "entry 2"), ([0, 1, "1", 0], "entry '1'"),
                         ("1", "'1' is not a layer pattern; allowed: a positive integer"),
                         (0, "0 is not a layer pattern")):
        with pytest.raises(LLMSimError) as caught:
            _load(tmp_path, {**config, "moe_layer_freq": bad})
        message = str(caught.value)
        assert "\n" not in message and "moe_layer_freq" in message and problem in message, message


def test_mlp_only_layers_out_of_range_is_refused(tmp_path):
    config = {"model_type": "qwen3_moe", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
              "intermediate_size": 512, "moe_intermediate_size": 64, "num_experts": 8, "num_experts_per_tok": 2,
              "vocab_size": 100, "mlp_only_layers": [4]}
    with pytest.raises(LLMSimError, match=r"mlp_only_layers must list layer indices in \[0, 4\) "
                                          r"\(num_hidden_layers = 4\), got \[4\]"):
        _load(tmp_path, config)


# nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16's config.json (https://huggingface.co/nvidia/
# NVIDIA-Nemotron-3-Super-120B-A12B-BF16/blob/main/config.json; its NVFP4 sibling's is the same), architecture fields
NEMOTRON_3_SUPER = {
    "model_type": "nemotron_h", "num_hidden_layers": 88, "hidden_size": 4096, "vocab_size": 131072,
    "hybrid_override_pattern": "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*"
                               "EMEMEMEM*EMEMEMEME",
    "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "ssm_state_size": 128, "conv_kernel": 4,
    "expand": 2, "mamba_ssm_cache_dtype": "float32", "num_attention_heads": 32, "num_key_value_heads": 2,
    "head_dim": 128, "intermediate_size": 2688, "n_routed_experts": 512, "n_shared_experts": 1,
    "num_experts_per_tok": 22, "moe_latent_size": 1024, "moe_intermediate_size": 2688,
    "moe_shared_expert_intermediate_size": 5376, "mlp_hidden_act": "relu2", "mtp_hybrid_override_pattern": "*E",
    "num_nextn_predict_layers": 1, "tie_word_embeddings": False, "max_position_embeddings": 262144}


def test_latent_experts_of_nemotron_3_super(tmp_path):
    """LatentMoE (moe_latent_size L = 1024): the 512 routed experts (relu2, up and down) work at width L between a
    4096 → 1024 and a 1024 → 4096 projection every token runs; the router and the 5376-wide shared expert stay at
    4096. NVIDIA publishes 120B total and 12B active (research.nvidia.com/labs/nemotron/Nemotron-3-Super: "a 12B
    active 120B total parameter Mixture-of-Experts hybrid Mamba-Transformer model"); read at the hidden width, as
    before moe_latent_size was read, it was 457.7B and 26.1B. Its MTP module (one attention and one MoE layer) is
    kept apart, as the published count does."""
    model = _load(tmp_path, NEMOTRON_3_SUPER)
    moe = next(g.ffn for g in model.layers if g.ffn.kind == "moe")
    D, L = 4096, 1024
    assert (moe.latent_size, moe.intermediate_size, moe.shared_intermediate_size, moe.gated) == (L, 2688, 5376, False)
    assert moe.params(D) == 512 * 2 * L * 2688 + 2 * D * 5376 + 2 * D * L + D * 512
    assert moe.idle_params(D) == (512 - 22) * 2 * L * 2688
    assert abs(model.num_params / 120e9 - 1) <= 0.06, model.num_params
    assert abs(model.active_params / 12e9 - 1) <= 0.10, model.active_params
    assert model.mtp is not None and model.mtp.ffn == moe
    wide = _load(tmp_path, {key: value for key, value in NEMOTRON_3_SUPER.items() if key != "moe_latent_size"})
    assert wide.num_params > 3 * model.num_params


def test_latent_experts_cost_their_latent_width():
    """Priced at the latent width, a latent MoE layer's grouped GEMMs read L/D of the weights the same experts at the
    hidden width would, so its decode step is cheaper; its projections are two more GEMMs every token runs; under
    attention data parallelism its tokens cross the all-to-all at width L."""
    from simulator.catalog.layers import MoEFFN, NoAttention
    from simulator.catalog.model_spec import ModelSpec
    from simulator.cost.base import IterationShape

    def model(latent):
        ffn = MoEFFN(intermediate_size=2688, gated=False, num_experts=512, experts_per_token=22, latent_size=latent)
        return ModelSpec(name=f"latent-{latent}", hidden_size=4096, vocab_size=1000, max_position_embeddings=4096,
                         layers=[{"count": 4, "attention": NoAttention(), "ffn": ffn}])

    hw = load_hardware("h100-sxm")
    latent, wide = (RooflineCostModel(model(L), hw, 1, "bf16") for L in (1024, 0))
    shape = IterationShape((), 64, 64 * 100)
    assert latent.groups[0].expert_hidden == 1024 and wide.groups[0].expert_hidden == 4096
    assert latent.iteration_time(shape) < wide.iteration_time(shape) / 2
    assert model(1024).num_params - model(0).num_params == 4 * (512 * 2 * 2688 * (1024 - 4096) + 2 * 4096 * 1024)


# google/gemma-4-26B-A4B-it's config.json (https://huggingface.co/google/gemma-4-26B-A4B-it/blob/main/config.json),
# the architecture fields of its text_config (its vision tower is not modelled)
GEMMA_4_26B_A4B = {"model_type": "gemma4", "tie_word_embeddings": True, "text_config": {
    "model_type": "gemma4_text", "num_hidden_layers": 30, "hidden_size": 2816, "intermediate_size": 2112,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "global_head_dim": 512,
    "num_global_key_value_heads": 2, "attention_k_eq_v": True, "num_kv_shared_layers": 0,
    "hidden_size_per_layer_input": 0, "use_double_wide_mlp": False, "vocab_size": 262144,
    "max_position_embeddings": 262144, "sliding_window": 1024, "tie_word_embeddings": True,
    "enable_moe_block": True, "num_experts": 128, "top_k_experts": 8, "moe_intermediate_size": 704,
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5}}


def test_gemma_4_moe_runs_its_experts_beside_a_dense_mlp(tmp_path):
    """Gemma 4's enable_moe_block: each layer runs its dense MLP (intermediate_size 2112) and, beside it, 8 of 128
    routed experts of 704 — the dense MLP counts as a shared expert every token runs. Its 5 global layers have their
    own shape: 2 KV heads of global_head_dim 512, the keys serving as values (attention_k_eq_v: no value projection).
    Google's model card (google/gemma-4-26B-A4B-it): 25.2B total, 3.8B active; before enable_moe_block and the
    global layers' fields were read, the dense MLP was left out and it was 24.6B total, 3.2B active. Its dense
    sibling Gemma-4-31B (the same global-layer fields; model card: 30.7B) was 30.1B."""
    model = _load(tmp_path, GEMMA_4_26B_A4B)
    moe = model.layers[0].ffn
    assert (moe.num_experts, moe.experts_per_token, moe.intermediate_size, moe.shared_intermediate_size) == (
        128, 8, 704, 2112)
    full = next(g.attention for g in model.layers if g.attention.kind == "full")
    assert (full.num_kv_heads, full.head_dim, full.values_are_keys) == (2, 512, True)
    assert full.params(2816) == 2816 * (16 + 2) * 512 + 16 * 512 * 2816
    assert full.kv_elements_per_token() == 2 * 2 * 512
    assert {(g.attention.kind, g.attention.head_dim, g.count) for g in model.layers} == {("sliding", 256, 25),
                                                                                        ("full", 512, 5)}
    assert abs(model.num_params / 25.2e9 - 1) <= 0.06, model.num_params
    assert abs(model.active_params / 3.8e9 - 1) <= 0.10, model.active_params
    dense = _load(tmp_path, {**GEMMA_4_26B_A4B, "text_config": {**GEMMA_4_26B_A4B["text_config"],
                                                                "enable_moe_block": False}})
    assert {g.ffn.kind for g in dense.layers} == {"dense"}
    # google/gemma-4-31B-it's config.json: no experts (enable_moe_block false, num_experts null), 60 layers
    dense_31b = {**GEMMA_4_26B_A4B["text_config"], "num_hidden_layers": 60, "hidden_size": 5376,
                 "intermediate_size": 21504, "num_attention_heads": 32, "num_key_value_heads": 16,
                 "num_global_key_value_heads": 4, "enable_moe_block": False, "num_experts": None,
                 "top_k_experts": None, "moe_intermediate_size": None,
                 "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10}
    assert _close(_load(tmp_path, {**GEMMA_4_26B_A4B, "text_config": dense_31b}).num_params / 1e9, 30.7)


@pytest.mark.parametrize("field, value, problem", [
    ("num_kv_shared_layers", 20, "num_kv_shared_layers: KV caches shared across layers"),
    ("hidden_size_per_layer_input", 256, "hidden_size_per_layer_input: per-layer input embeddings"),
    ("enable_moe_block", "yes", "enable_moe_block must be true or false, got 'yes'"),
    ("attention_k_eq_v", 1, "attention_k_eq_v must be true or false, got 1"),
    ("global_head_dim", "512", "global_head_dim must be a positive integer, got '512'"),
])
def test_gemma_4_fields_not_modelled_or_mistyped_are_one_line(tmp_path, field, value, problem):
    """Gemma 4 E2B/E4B's per-layer embeddings and layers sharing another layer's KV cache are refused, not counted
    as the plain model they are not."""
    config = {**GEMMA_4_26B_A4B, "text_config": {**GEMMA_4_26B_A4B["text_config"], field: value}}
    with pytest.raises(LLMSimError) as caught:
        _load(tmp_path, config)
    assert "\n" not in str(caught.value) and problem in str(caught.value), str(caught.value)
