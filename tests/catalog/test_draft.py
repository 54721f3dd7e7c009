"""Multi-token-prediction modules kept from Hugging Face configs, and the draft heads of speculative decoding
(MTP, EAGLE, EAGLE-3), sized by hand from their published shapes."""

from __future__ import annotations

import json

import pytest

from simulator.catalog import load_model
from simulator.catalog.draft import draft_head
from simulator.catalog.hf_import import spec_from_hf_config
from simulator.errors import LLMSimError
from tests.helpers import SHARED_DATA

CONFIGS = SHARED_DATA / "model_configs"

# DeepSeek-V3's MoE layer by hand (config.json: hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512,
# qk_nope 128 + qk_rope 64, v_head_dim 128, 256 routed experts + 1 shared of width 2048, top-8)
D = 7168
MLA = (D * 1536 + 1536 * 128 * 192 + D * (512 + 64) + 512 * 128 * (128 + 128) + 128 * 128 * D
       + 1536 + 512)  # q_a, q_b, kv_a (latent + rope key), kv_b, o, and the two latent norms
EXPERTS = 257 * 3 * D * 2048
MTP_MODULE = MLA + EXPERTS + 256 * D + 2 * D * D + 5 * D  # + router, eh_proj (2D → D), 2 block norms + 3 MTP norms


def test_deepseek_v3_keeps_its_mtp_module_outside_the_published_671b():
    """DeepSeek-V3's README: 685B on Hugging Face = 671B of main model + 14B of MTP module (whose checkpoint also
    carries copies of the embeddings and the LM head, 2 × 129,280 × 7,168); the module is one MoE layer of MLA
    behind a 2D → D projection (num_nextn_predict_layers: 1)."""
    model = load_model("deepseek-v3")
    assert round(model.num_params / 1e9) == 671  # unchanged by the module
    assert model.mtp is not None and model.mtp.count == 1
    assert (model.mtp.attention.kind, model.mtp.ffn.kind) == ("mla", "moe")
    assert model.mtp_params == MTP_MODULE
    with_copies = model.mtp_params + 2 * model.vocab_size * model.hidden_size
    assert 13e9 < with_copies < 15e9  # "14B", both totals rounded to the billion


@pytest.mark.parametrize(("name", "count"), [("deepseek-r1", 1), ("glm-4.5", 1), ("glm-4.5-air", 1), ("glm-5", 1),
                                             ("qwen3-next-80b-a3b", 1), ("qwen3.5-35b-a3b", 1), ("kimi-k2", 0),
                                             ("llama-3-8b", 0), ("gpt-oss-120b", 0)])
def test_which_catalog_models_ship_mtp_modules(name, count):
    """num_nextn_predict_layers in DeepSeek's and GLM's configs (0 in Kimi-K2's), mtp_num_hidden_layers in
    Qwen3.5's; Qwen3-Next's config states none and vLLM's qwen3_next_mtp.py defaults it to 1."""
    mtp = load_model(name).mtp
    assert (mtp.count if mtp else 0) == count
    if mtp is not None:  # a whole-context attention layer, never a hybrid's linear or windowed kind
        assert mtp.attention.kind in ("full", "mla") and not mtp.attention.span


def _tiny(**fields) -> dict:
    return {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
            "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000, **fields}


def test_the_importer_reads_either_field_and_refuses_a_bad_count():
    assert spec_from_hf_config(_tiny(num_nextn_predict_layers=2), "t", "t.json").mtp.count == 2
    assert spec_from_hf_config(_tiny(mtp_num_hidden_layers=1), "t", "t.json").mtp.count == 1
    assert spec_from_hf_config(_tiny(num_nextn_predict_layers=0), "t", "t.json").mtp is None
    plain = spec_from_hf_config(_tiny(), "t", "t.json")
    assert plain.mtp is None and plain.mtp_params == 0
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(LLMSimError, match=r"t\.json: num_nextn_predict_layers must be a whole number of modules"):
            spec_from_hf_config(_tiny(num_nextn_predict_layers=bad), "t", "t.json")


@pytest.mark.parametrize(("file", "count"), [
    ("deepseek-ai--DeepSeek-V3_config.json", 1), ("zai-org--GLM-5_config.json", 1),
    ("Qwen--Qwen3.5-397B-A17B_config.json", 1), ("moonshotai--Kimi-K2.5_config.json", 0)])
def test_published_configs_give_their_mtp_modules(file, count):
    path = CONFIGS / file
    if not path.is_file():
        pytest.skip("../shared/data/model_configs is not here")
    model = spec_from_hf_config(json.loads(path.read_text()), file, str(path), path)
    assert (model.mtp.count if model.mtp else 0) == count


def test_mtp_on_a_model_without_modules_is_one_line_naming_model_and_field():
    with pytest.raises(LLMSimError, match=r"^scheduler\.speculative\.method: mtp needs .*; llama-3-8b has none"):
        draft_head(load_model("llama-3-8b"), "mtp")


def test_an_eagle3_head_of_llama_3_1_8b_by_hand():
    """EAGLE-3 (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: one Llama layer of the target's shape, draft_vocab_size
    32,000): attention D·(H + 2G)·d + H·d·D with the QKV reading 2D (one more D·(H + 2G)·d), the MLP 3·D·I, the
    low/mid/high fusion 3D → D, two block norms, its input norm and final norm, and its own 32,000-row LM head
    (the embeddings are the target's)."""
    D, H, G, d, inter = 4096, 32, 8, 128, 14336
    head = draft_head(load_model("llama-3.1-8b"), "eagle3")
    qkv = D * (H + 2 * G) * d
    assert sum(head.part_params().values()) == 2 * qkv + H * d * D + 3 * D * inter + 3 * D * D + 4 * D + 32_000 * D
    assert head.modules == 1 and head.own_head and head.model.vocab_size == 32_000
    assert head.kv_bytes_per_token(2.0) == 2 * G * d * 2  # one layer's K and V, 16-bit
    eagle = draft_head(load_model("llama-3.1-8b"), "eagle")  # EAGLE-1/2: fc 2D → D, the target's LM head
    assert sum(eagle.part_params().values()) == qkv + H * d * D + 3 * D * inter + 2 * D * D + 3 * D
    assert not eagle.own_head


def test_an_eagle_head_of_a_latent_attention_moe_is_a_llama_layer_of_its_width():
    """Without softmax attention in the target (MLA) the head's attention is D / 128 heads of 128 over 8 KV heads;
    without dense layers its MLP has the width a token runs (top-k experts and the shared ones)."""
    qwen = draft_head(load_model("qwen3-30b-a3b"), "eagle3")  # 8 experts of 768 per token, no shared one
    assert qwen.model.layers[0].ffn.intermediate_size == 8 * 768
    (layer,) = draft_head(load_model("kimi-k2"), "eagle").model.layers
    assert (layer.attention.num_heads, layer.attention.num_kv_heads, layer.attention.head_dim) == (56, 8, 128)
    assert layer.ffn.intermediate_size == 18432  # Kimi-K2's one dense layer
