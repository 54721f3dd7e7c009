"""Current models of the catalog, as the architecture fields of their published Hugging Face ``config.json``
(``https://huggingface.co/<id>/blob/main/config.json``), imported by :mod:`simulator.catalog.hf_import` like any
user's config. Only the fields the importer reads are kept; the checkpoint's ``quantization_config`` too, so that
``dtype: auto`` serves it as published (FP8 blocks for DeepSeek and Kimi, MXFP4 experts for gpt-oss).
"""

from __future__ import annotations

from typing import Any

_FP8_BLOCK = {"quant_method": "fp8", "weight_block_size": [128, 128]}
_MXFP4 = {"quant_method": "mxfp4",
          "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                     "lm_head"]}


def _deepseek(experts: int, heads: int, dense_layers: int, vocab: int, max_positions: int,
              mtp: int = 1) -> dict[str, Any]:
    """DeepSeek-V3's shape of model; ``mtp``: its multi-token-prediction modules (``num_nextn_predict_layers``: 1 in
    DeepSeek-V3's, R1's and V3.2's configs, 0 in Kimi-K2's)."""
    return {
        "model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": heads,
        "num_key_value_heads": heads, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "n_routed_experts": experts, "num_experts_per_tok": 8, "n_shared_experts": 1,
        "first_k_dense_replace": dense_layers, "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": vocab,
        "max_position_embeddings": max_positions, "tie_word_embeddings": False, "quantization_config": _FP8_BLOCK,
        "num_nextn_predict_layers": mtp,
    }


def _qwen3(layers: int, hidden: int, heads: int, kv_heads: int, inter: int, **moe: Any) -> dict[str, Any]:
    return {"model_type": "qwen3_moe" if moe else "qwen3", "num_hidden_layers": layers, "hidden_size": hidden,
            "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": 128,
            "intermediate_size": inter, "vocab_size": 151936, "max_position_embeddings": 40960,
            "tie_word_embeddings": False, "use_sliding_window": False, **moe}


def _gpt_oss(layers: int, experts: int) -> dict[str, Any]:
    return {"model_type": "gpt_oss", "num_hidden_layers": layers, "hidden_size": 2880, "num_attention_heads": 64,
            "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "num_local_experts": experts,
            "num_experts_per_tok": 4, "vocab_size": 201088, "max_position_embeddings": 131072,
            "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * (layers // 2),
            "tie_word_embeddings": False, "quantization_config": _MXFP4}


def _llama4(experts: int, step: int) -> dict[str, Any]:
    return {"model_type": "llama4_text", "num_hidden_layers": 48, "hidden_size": 5120, "num_attention_heads": 40,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
            "num_local_experts": experts, "num_experts_per_tok": 1, "interleave_moe_layer_step": step,
            "attention_chunk_size": 8192, "vocab_size": 202048, "max_position_embeddings": 10485760,
            "tie_word_embeddings": False}


def _glm4_moe(layers: int, hidden: int, dense_layers: int, inter: int, moe_inter: int, experts: int) -> dict[str, Any]:
    """GLM-4.5 and -Air (``zai-org``): GQA with 96 query heads, dense first layers, one shared expert, and one
    multi-token-prediction layer (``num_nextn_predict_layers``), the draft of ``scheduler.speculative.method: mtp``."""
    return {"model_type": "glm4_moe", "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": 96,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": inter, "moe_intermediate_size": moe_inter,
            "n_routed_experts": experts, "num_experts_per_tok": 8, "n_shared_experts": 1,
            "first_k_dense_replace": dense_layers, "vocab_size": 151552, "max_position_embeddings": 131072,
            "tie_word_embeddings": False, "num_nextn_predict_layers": 1}


_LLAMA_70B = {"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
              "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256,
              "max_position_embeddings": 131072, "tie_word_embeddings": False}

# Qwen2.5-VL-7B-Instruct: a Qwen2.5-7B language model behind a 32-block ViT of width 1280 (windows of 112 pixels,
# full attention in 4 blocks), 2×2 patches of 14 pixels merged into one token of width 3584.
_QWEN25_VL_7B = {
    "model_type": "qwen2_5_vl", "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
    "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "max_position_embeddings": 128000,
    "tie_word_embeddings": False, "use_sliding_window": False,
    "vision_config": {"model_type": "qwen2_5_vl", "depth": 32, "hidden_size": 1280, "intermediate_size": 3420,
                      "num_heads": 16, "in_channels": 3, "out_hidden_size": 3584, "patch_size": 14,
                      "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
                      "fullatt_block_indexes": [7, 15, 23, 31], "hidden_act": "silu"}}

# short name -> (Hugging Face id, config fields)
CURRENT_MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", _deepseek(256, 128, 3, 129280, 163840)),
    "deepseek-r1": ("deepseek-ai/DeepSeek-R1", _deepseek(256, 128, 3, 129280, 163840)),
    "kimi-k2": ("moonshotai/Kimi-K2-Instruct", _deepseek(384, 64, 1, 163840, 131072, mtp=0)),
    "deepseek-v3.2": ("deepseek-ai/DeepSeek-V3.2", {  # DeepSeek Sparse Attention: a lightning indexer's top 2048
        **_deepseek(256, 128, 3, 129280, 163840), "model_type": "deepseek_v32", "index_topk": 2048,
        "index_n_heads": 64, "index_head_dim": 128}),
    "qwen3-8b": ("Qwen/Qwen3-8B", _qwen3(36, 4096, 32, 8, 12288)),
    "qwen2.5-vl-7b": ("Qwen/Qwen2.5-VL-7B-Instruct", _QWEN25_VL_7B),
    "qwen3-32b": ("Qwen/Qwen3-32B", _qwen3(64, 5120, 64, 8, 25600)),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B", _qwen3(48, 2048, 32, 4, 6144, moe_intermediate_size=768,
                                                   num_experts=128, num_experts_per_tok=8, decoder_sparse_step=1)),
    "qwen3-235b-a22b": ("Qwen/Qwen3-235B-A22B", _qwen3(94, 4096, 64, 4, 12288, moe_intermediate_size=1536,
                                                       num_experts=128, num_experts_per_tok=8,
                                                       decoder_sparse_step=1)),
    "qwen3-32b-fp8": ("Qwen/Qwen3-32B-FP8", {**_qwen3(64, 5120, 64, 8, 25600), "quantization_config": _FP8_BLOCK}),
    "qwen3-235b-a22b-fp8": ("Qwen/Qwen3-235B-A22B-FP8", {
        **_qwen3(94, 4096, 64, 4, 12288, moe_intermediate_size=1536, num_experts=128, num_experts_per_tok=8,
                 decoder_sparse_step=1), "quantization_config": _FP8_BLOCK}),
    "gpt-oss-20b": ("openai/gpt-oss-20b", _gpt_oss(24, 32)),
    "gpt-oss-120b": ("openai/gpt-oss-120b", _gpt_oss(36, 128)),
    "llama-3.3-70b": ("meta-llama/Llama-3.3-70B-Instruct", _LLAMA_70B),
    "llama-4-scout": ("meta-llama/Llama-4-Scout-17B-16E-Instruct", _llama4(16, 1)),
    "llama-4-maverick": ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", _llama4(128, 2)),
    "gemma-3-27b": ("google/gemma-3-27b-it", {
        "model_type": "gemma3_text", "num_hidden_layers": 62, "hidden_size": 5376, "num_attention_heads": 32,
        "num_key_value_heads": 16, "head_dim": 128, "intermediate_size": 21504, "vocab_size": 262208,
        "max_position_embeddings": 131072, "sliding_window": 1024, "sliding_window_pattern": 6}),
    "qwen3.5-35b-a3b": ("Qwen/Qwen3.5-35B-A3B", {
        "model_type": "qwen3_5_moe_text", "num_hidden_layers": 40, "hidden_size": 2048, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256, "attn_output_gate": True, "moe_intermediate_size": 512,
        "num_experts": 256, "num_experts_per_tok": 8, "shared_expert_intermediate_size": 512,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 10,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "mamba_ssm_dtype": "float32",
        "mtp_num_hidden_layers": 1, "vocab_size": 248320, "max_position_embeddings": 262144,
        "tie_word_embeddings": False}),
    "qwen3-next-80b-a3b": ("Qwen/Qwen3-Next-80B-A3B-Instruct", {  # no layer_types: every 4th layer full attention
        "model_type": "qwen3_next", "num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 5120, "moe_intermediate_size": 512,
        "num_experts": 512, "num_experts_per_tok": 10, "shared_expert_intermediate_size": 512,
        "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "vocab_size": 151936,
        "max_position_embeddings": 262144, "tie_word_embeddings": False}),
    "nemotron-h-56b": ("nvidia/Nemotron-H-56B-Base-8K", {
        "model_type": "nemotron_h", "num_hidden_layers": 118, "hidden_size": 8192, "num_attention_heads": 64,
        "num_key_value_heads": 8, "attention_head_dim": 128, "intermediate_size": 32768,
        "hybrid_override_pattern": "M-M-M-M*-" + "M-M-M-M-M*-" * 9 + "M-M-M-M-M-",
        "mamba_num_heads": 256, "mamba_head_dim": 64, "ssm_state_size": 256, "n_groups": 8, "conv_kernel": 4,
        "vocab_size": 131072, "max_position_embeddings": 8192, "tie_word_embeddings": False}),
    "glm-4.5": ("zai-org/GLM-4.5", _glm4_moe(92, 5120, 3, 12288, 1536, 160)),
    "glm-4.5-air": ("zai-org/GLM-4.5-Air", _glm4_moe(46, 4096, 1, 10944, 1408, 128)),
    "glm-5": ("zai-org/GLM-5", {  # DeepSeek-V3's shape of layers, its sparse attention's indexer 32 heads of 128
        "model_type": "glm_moe_dsa", "num_hidden_layers": 78, "hidden_size": 6144, "num_attention_heads": 64,
        "num_key_value_heads": 64, "intermediate_size": 12288, "moe_intermediate_size": 2048, "n_routed_experts": 256,
        "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3, "q_lora_rank": 2048,
        "kv_lora_rank": 512, "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256, "index_topk": 2048,
        "index_n_heads": 32, "index_head_dim": 128, "vocab_size": 154880, "max_position_embeddings": 202752,
        "tie_word_embeddings": False, "num_nextn_predict_layers": 1}),
    "minimax-m2.5": ("MiniMaxAI/MiniMax-M2.5", {
        "model_type": "minimax_m2", "num_hidden_layers": 62, "hidden_size": 3072, "num_attention_heads": 48,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 1536, "num_local_experts": 256,
        "num_experts_per_tok": 8, "shared_intermediate_size": 0, "use_qk_norm": True, "qk_norm_type": "per_layer",
        "vocab_size": 200064, "max_position_embeddings": 196608, "tie_word_embeddings": False,
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}),
}

# Hugging Face ids published with the same architecture as a catalog entry (instruct and renamed checkpoints)
HF_ALIASES: dict[str, str] = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b", "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Meta-Llama-3.1-70B": "llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Meta-Llama-3.1-405B": "llama-3.1-405b", "meta-llama/Meta-Llama-3-8B-Instruct": "llama-3-8b",
    "meta-llama/Meta-Llama-3-70B-Instruct": "llama-3-70b", "Qwen/Qwen3-235B-A22B-Instruct-2507": "qwen3-235b-a22b",
    "deepseek-ai/DeepSeek-V3-0324": "deepseek-v3", "deepseek-ai/DeepSeek-R1-0528": "deepseek-r1",
    "Qwen/Qwen3-Next-80B-A3B-Thinking": "qwen3-next-80b-a3b", "deepseek-ai/DeepSeek-V3.2-Exp": "deepseek-v3.2",
}
