"""The vision encoder (simulator.catalog.vision, simulator.cost.vision) against hand calculations, its import from
Hugging Face configs, its place in the memory budget, and images in a simulated run."""

from __future__ import annotations

import json

import pytest
import yaml

import simulator
from simulator.catalog import load_hardware, load_model
from simulator.catalog.hf_import import spec_from_hf_config
from simulator.catalog.vision import VisionSpec
from simulator.cost.vision import VisionCost
from simulator.errors import LLMSimError
from simulator.kv import kv_budget
from tests.cost.test_cost import TOY_GPU, TOY_MODEL, roof
from tests.helpers import experiment

# A tiny gated ViT (Qwen2.5-VL's shape) worked out by hand: d = 8, I = 16, two blocks, patches of 3 channels × 2
# frames × 2² pixels = 24 inputs, 2×2 patches merged into one token of the LM's width 12.
TINY = {"depth": 2, "hidden_size": 8, "intermediate_size": 16, "gated": True, "num_heads": 2, "patch_size": 2,
        "temporal_patch_size": 2, "in_channels": 3, "spatial_merge_size": 2, "out_hidden_size": 12}
# One image of T = 3 tokens: P = 4·3 = 12 patches.
#   patch embedding  2·12·24·8                          =  4,608
#   blocks           2·12·2·(4·8² + 3·8·16) = 48·640    = 30,720
#   attention        4·8·12·(2 blocks · 12 keys)        =  9,216
#   merger           2·3·(32² + 32·12) = 6·1,408        =  8,448
TINY_FLOPS = 4_608 + 30_720 + 9_216 + 8_448  # 52,992
# Weights: patch 24·8 = 192; a block 640 + biases (3·8 + 8 + 2·16 + 8 = 72) + two norms 16 = 728, two: 1,456;
# merger: norm 8 + 32² + 32 + 32·12 + 12 = 1,460.
TINY_PARAMS = 192 + 1_456 + 1_460  # 3,108
# GEMM rows in and out: a patch 24 + 8 (embedding) + 2 blocks × ((8+24) + (8+8) + (8+32) + (16+8) = 112) = 256,
# twelve of them 3,072; a token in the merger (32+32) + (32+12) = 108, three 324.
TINY_ACTIVATIONS = 3_072 + 324


def test_one_images_encoder_flops_and_weights_equal_the_closed_form():
    vision = VisionSpec(**TINY)
    assert vision.patches(3) == 12
    assert vision.image_flops(3) == TINY_FLOPS
    assert vision.params == TINY_PARAMS
    assert vision.image_activation_elements(3) == TINY_ACTIVATIONS


def test_windowed_blocks_attend_within_their_window():
    """One full block and one of 4-patch windows: attention 4·8·12·(12 + 4) = 6,144 instead of 9,216; a plain MLP
    (fc1, fc2) has 2·d·I instead of 3·d·I weights per block: 2·12·2·(256 + 256) = 24,576 block FLOPs."""
    windowed = VisionSpec(**TINY, full_attention_blocks=1, window_patches=4)
    assert windowed.image_flops(3) == TINY_FLOPS - 9_216 + 6_144
    plain = VisionSpec(**{**TINY, "gated": False})
    assert plain.image_flops(3) == TINY_FLOPS - 30_720 + 24_576
    with pytest.raises(ValueError, match="windowed blocks need window_patches"):
        VisionSpec(**TINY, full_attention_blocks=1)


def test_qwen2_5_vl_7b_has_its_published_weights():
    """Qwen/Qwen2.5-VL-7B-Instruct's checkpoint holds 8,292,166,656 parameters (its Hugging Face page, safetensors):
    the language model, the ViT and the language model's QKV biases, which the catalog's layer groups leave out
    (28 layers × (3,584 + 2 × 512))."""
    model = load_model("qwen2.5-vl-7b")
    assert model.vision is not None and model.vision.gated and model.vision.full_attention_blocks == 4
    assert model.vision.window_patches == (112 // 14) ** 2
    assert model.num_params + model.vision.params + 28 * (3_584 + 2 * 512) == 8_292_166_656
    assert load_model("Qwen/Qwen2.5-VL-7B-Instruct") is model
    assert load_model("qwen2.5-7b").vision is None


def test_a_qwen2_vl_config_imports_its_plain_vit():
    """Qwen2-VL names the ViT's width embed_dim and the LM's hidden_size, and its MLP mlp_ratio × embed_dim."""
    config = {"model_type": "qwen2_vl", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 512,
              "vision_config": {"depth": 3, "embed_dim": 32, "hidden_size": 64, "mlp_ratio": 4, "num_heads": 4,
                                "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}}
    vision = spec_from_hf_config(config, "toy-vl", "toy").vision
    assert (vision.hidden_size, vision.intermediate_size, vision.out_hidden_size) == (32, 128, 64)
    assert not vision.gated and vision.full_attention_blocks is None
    bad = {**config, "vision_config": {**config["vision_config"], "num_heads": 5}}
    with pytest.raises(LLMSimError, match=r"^toy: vision_config: .*num_heads 5 does not divide"):
        spec_from_hf_config(bad, "toy-vl", "toy")
    qwen25 = {**config, "vision_config": {"depth": 4, "hidden_size": 32, "intermediate_size": 64, "num_heads": 4,
                                          "out_hidden_size": 64, "patch_size": 14, "spatial_merge_size": 2,
                                          "window_size": 112, "fullatt_block_indexes": [3, 4]}}
    with pytest.raises(LLMSimError, match=r"^toy: vision_config: fullatt_block_indexes: \[3, 4\] names a block "
                                          r"outside 0 … 3 \(depth 4\)$"):
        spec_from_hf_config(qwen25, "toy-vl", "toy")
    no_vit = {**config, "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152}}
    assert spec_from_hf_config(no_vit, "toy-vl", "toy").vision is None  # another family's tower: text only


@pytest.fixture
def toy_vl(tmp_path):
    """The toy model of tests/cost/test_cost.py with the tiny ViT, and the toy GPU (1e11 FLOP/s, 1e10 B/s, no
    kernel overhead)."""
    model, gpu = tmp_path / "toy-vl.yaml", tmp_path / "toy-gpu.yaml"
    model.write_text(yaml.safe_dump({**TOY_MODEL, "name": "toy-vl", "vision": TINY}))
    gpu.write_text(yaml.safe_dump(TOY_GPU))
    return str(model), str(gpu)


def _one_request(model: str, gpu: str, text: int, images: dict | None) -> dict:
    workload = {"num_requests": 1, "arrival": {"kind": "constant", "rate": 1.0},
                "input_tokens": {"kind": "fixed", "value": text}, "output_tokens": {"kind": "fixed", "value": 2}}
    if images is not None:
        workload["images"] = images
    return experiment(model=model, hardware=gpu, cost_model={"kind": "roofline"}, engine="ideal",
                      kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 64},
                      scheduler={"kind": "continuous", "max_model_len": 512}, workload=workload)


def test_an_image_adds_its_encoder_to_the_prefill_of_an_equal_prompt(toy_vl):
    """One request on an idle GPU: 97 text tokens and one 3-token image prefill like 100 text tokens, and the
    iteration pays the encoder besides: roof(52,992 FLOPs, (3,108 weights + 3,396 activations) × 2 bytes)."""
    model, gpu = toy_vl
    image = {"per_request": {"kind": "fixed", "value": 1}, "tokens_per_image": {"kind": "fixed", "value": 3}}
    with_image = simulator.run(_one_request(model, gpu, 97, image)).requests.iloc[0]
    text_only = simulator.run(_one_request(model, gpu, 100, None)).requests.iloc[0]
    assert with_image["input_tokens"] == text_only["input_tokens"] == 100
    assert (with_image["images"], with_image["image_tokens"]) == (1, 3)
    assert (text_only["images"], text_only["image_tokens"]) == (0, 0)
    encoder = roof(TINY_FLOPS, (TINY_PARAMS + TINY_ACTIVATIONS) * 2)
    assert (with_image["ttft_ms"] - text_only["ttft_ms"]) / 1000 == pytest.approx(encoder, rel=1e-9)
    assert with_image["e2el_ms"] - with_image["ttft_ms"] == pytest.approx(
        text_only["e2el_ms"] - text_only["ttft_ms"], rel=1e-12)  # decoding does not re-encode


def test_the_encoders_work_reads_its_weights_once_per_iteration(toy_vl):
    """Two 3-token images in one iteration: twice the FLOPs and activations, the weights once; the time is the
    roofline of those totals, and its split (compute, memory, fixed) adds up to it."""
    cost = VisionCost(VisionSpec(**TINY), load_hardware(toy_vl[1]))
    one, two = cost.work([3]), cost.work([3, 3])
    assert (one.flops, one.hbm_bytes) == (TINY_FLOPS, (TINY_PARAMS + TINY_ACTIVATIONS) * 2)
    assert (two.flops, two.hbm_bytes) == (2 * TINY_FLOPS, (TINY_PARAMS + 2 * TINY_ACTIVATIONS) * 2)
    assert two.seconds == pytest.approx(roof(2 * TINY_FLOPS, (TINY_PARAMS + 2 * TINY_ACTIVATIONS) * 2), rel=1e-12)
    assert cost.work([]).seconds == 0
    assert two.seconds < 2 * one.seconds


def test_iteration_bounds_count_the_encoder(toy_vl):
    """With the iteration bounds recorded the run is the same, and the prefill's FLOPs include the encoder's."""
    model, gpu = toy_vl
    image = {"per_request": {"kind": "fixed", "value": 1}, "tokens_per_image": {"kind": "fixed", "value": 3}}
    plain = _one_request(model, gpu, 97, image)
    bounded = {**plain, "metrics": {"iteration_bounds": True}}
    with_bounds = simulator.run(bounded)
    assert with_bounds.requests["ttft_ms"].iloc[0] == simulator.run(plain).requests["ttft_ms"].iloc[0]
    text = simulator.run({**_one_request(model, gpu, 100, None), "metrics": {"iteration_bounds": True}})
    iterations = with_bounds.roofline, text.roofline
    prefill = [frame[frame["phase"] == "prefill"]["flops"].sum() for frame in iterations]
    assert prefill[0] - prefill[1] == pytest.approx(TINY_FLOPS, rel=1e-9)


@pytest.mark.parametrize(("count", "tokens"), [(1, 3), (2, 40), (5, 64)])
def test_images_never_make_the_first_token_sooner(toy_vl, count, tokens):
    """Monotonicity: the same text with images takes at least as long to its first token as without them."""
    model, gpu = toy_vl
    images = {"per_request": {"kind": "fixed", "value": count},
              "tokens_per_image": {"kind": "fixed", "value": tokens}}
    config = _one_request(model, gpu, 50, None)
    config["workload"] = {**config["workload"], "num_requests": 8, "arrival": {"kind": "poisson", "rate": 50.0}}
    plain = simulator.run(config).requests
    with_images = simulator.run({**config, "workload": {**config["workload"], "images": images}}).requests
    assert (with_images["input_tokens"] == plain["input_tokens"] + count * tokens).all()
    assert (with_images["ttft_ms"].to_numpy() >= plain["ttft_ms"].to_numpy()).all()


def test_a_run_with_images_is_deterministic(toy_vl):
    model, gpu = toy_vl
    images = {"per_request": {"kind": "pmf", "values": [0, 1, 3], "probabilities": [0.2, 0.5, 0.3]},
              "tokens_per_image": {"kind": "uniform", "min": 1, "max": 64}}
    config = _one_request(model, gpu, 50, images)
    config["workload"] = {**config["workload"], "num_requests": 20, "arrival": {"kind": "poisson", "rate": 50.0}}
    first, second = simulator.run(config), simulator.run(config)
    assert json.dumps(first.summary, sort_keys=True) == json.dumps(second.summary, sort_keys=True)
    assert first.requests.equals(second.requests)


def test_a_model_without_a_vision_config_refuses_images(capsys):
    """One line naming the model and the field it lacks, from the API and from the command line."""
    config = experiment(workload={**experiment()["workload"], "images": {
        "per_request": {"kind": "fixed", "value": 1}, "tokens_per_image": {"kind": "fixed", "value": 64}}})
    with pytest.raises(LLMSimError, match=r"^workload\.images: model llama-3-8b has no vision encoder \(no "
                                          r"vision_config in its config, or one of a family not modelled"):
        simulator.run(config)


def test_the_encoders_weights_take_gpu_memory():
    """vLLM loads the ViT beside the language model: its weights × 2 bytes (bf16) per GPU at TP 1. By hand (d 1,280,
    I 3,420, 32 blocks, patches of 3·2·14² = 1,176, m²d 5,120, LM width 3,584): patch 1,176·1,280 = 1,505,280; a
    block 4·1,280² + 3·1,280·3,420 = 19,686,400 + biases 13,240 + norms 2,560 = 19,702,200, 32 of them 630,470,400;
    merger 1,280 + 5,120² + 5,120 + 5,120·3,584 + 3,584 = 44,574,464: 676,550,144 in all."""
    vl, text = load_model("qwen2.5-vl-7b"), load_model("qwen2.5-7b")
    hardware = load_hardware("h100-sxm")
    args = {"tensor_parallel": 1, "weight_dtype": "bf16", "kv_dtype_name": "bf16", "gpu_memory_utilization": 0.9,
            "block_size": 16, "max_num_batched_tokens": 8192, "max_num_seqs": 256, "max_model_len": 8192}
    assert vl.vision.params == 676_550_144
    # Qwen2.5-7B's LM head is untied as Qwen2.5-VL-7B's is; the two language models are the same shape
    assert kv_budget(vl, hardware, **args).weight_bytes - kv_budget(text, hardware, **args).weight_bytes == (
        pytest.approx(676_550_144 * 2))
