"""Hugging Face ``config.json`` -> :class:`~simulator.catalog.ModelSpec` (a stack of layer groups).

One alias table maps each architecture fact to the names families give it (``n_routed_experts | num_experts |
num_local_experts``, ...); a nested ``text_config`` (multimodal wrappers: Llama 4, Gemma 3) is read in place of the
top level. Per-family *layer patterns*, never per-model branches, decide each layer's kind:

- attention: ``kv_lora_rank`` -> MLA; ``layer_types`` (``full_attention``, ``sliding_attention``,
  ``chunked_attention``, ``linear_attention``: Gated DeltaNet from the ``linear_*`` fields; ``attn_output_gate``;
  Granite-4.0-H's ``attention`` and ``mamba``) or ``attn_layer_indices`` (Bamba: attention there, Mamba2 elsewhere)
  or ``full_attention_interval`` (Qwen3-Next: every N-th layer full, the others Gated DeltaNet; 4 for the family
  where the config does not say, as transformers derives it) or ``sliding_window_pattern`` (every N-th layer
  global: Gemma 3's 6, and Gemma 2's 2 where the config does not say; or a string of L and G, EXAONE 4's "LLLG")
  or ``no_rope_layers`` with
  ``attention_chunk_size`` (Llama 4: RoPE layers chunked, NoPE layers global) or ``sliding_window`` on every layer
  (Mistral; Qwen's ``use_sliding_window`` with ``max_window_layers`` full layers first);
- FFN: mixture-of-experts when there are routed experts, except the first ``first_k_dense_replace`` (DeepSeek) or
  ``moe_layer_start_index`` (ERNIE 4.5) layers, those after ``moe_layer_end_index``, layers off ``moe_layer_freq``
  (every N-th layer, or one 0 or 1 per layer: MiMo-V2-Flash, MiniMax-M3) / ``decoder_sparse_step`` /
  ``interleave_moe_layer_step`` / ``moe_layer_interval``, and ``mlp_only_layers``; routed
  experts of ``moe_intermediate_size`` (else ``intermediate_size``), as many per token as the config says (routed
  experts without a top-k are one line, not a silent 1); dense layers of ``intermediate_size_mlp`` (Llama 4) or
  ``intermediate_size``; shared experts of ``shared_expert_intermediate_size`` or ``n_shared_experts`` × the expert
  width (Llama 4 runs one shared expert per MoE layer), or ``moe_shared_expert_intermediate_size``; experts at a
  ``moe_latent_size`` (LatentMoE, Nemotron-3-Super) between a down and an up projection every token runs; with
  ``enable_moe_block`` (Gemma 4) the experts run beside the layer's dense MLP of ``intermediate_size``, which counts
  as a shared expert (``false``: dense);
- Gemma 4's global (full-attention) layers: ``global_head_dim``, ``num_global_key_value_heads``, and
  ``attention_k_eq_v`` (keys serving as values: no value projection);
- a ``hybrid_override_pattern`` (Nemotron-H) gives one block per layer: ``M`` a Mamba2 mixer (``mamba_*``,
  ``ssm_state_size``, ``n_groups``, ``conv_kernel``), ``*`` attention, ``-`` an MLP, ``E`` a mixture of experts.
  A Mamba2 mixer's heads × head width is ``mamba_expand`` × ``hidden_size``, so a config may give either (or a
  head width of ``"auto"``); ``num_local_experts: 0`` (Granite-4.0-H's dense models) runs the shared MLP alone;
- DeepSeek Sparse Attention (``index_topk``: each query attends to the cached tokens a lightning indexer of
  ``index_n_heads`` × ``index_head_dim`` picks; over MLA only), its fields defaulting where a family's model code
  runs the indexer whatever the config states (GLM-5's ``glm_moe_dsa``, DeepSeek-V3.2's ``deepseek_v32``);
- multi-token-prediction modules (``num_nextn_predict_layers`` / ``mtp_num_hidden_layers``; Qwen3-Next's one,
  which its config does not state) are kept beside the layers (:attr:`~simulator.catalog.ModelSpec.mtp`), each one
  decoder layer shaped like the model's last full-attention layer with the last layer's FFN: the draft of
  ``scheduler.speculative.method: mtp``;
- mixers not modelled are refused in one line naming the field, never priced as full attention:
  ``attn_type_list`` (lightning attention), ``linear_attn_config`` (Kimi Delta Attention), ``attn_layer_period``
  (Jamba's Mamba-1), ``compress_ratios`` and ``hc_mult`` (DeepSeek-V4's compressed attention and hyper-connections),
  and Mamba fields no layer pattern places (Falcon-H1's attention and Mamba side by side); so are features switched
  on that are not modelled (:data:`UNMODELLED_FEATURES`: cross-layer KV sharing, per-layer input embeddings);
- every field the importer reads is checked wherever the config gives it (:func:`_check_fields`, and
  :func:`_check_quantization` for the quantisation's): a mistyped or out-of-range one is one line naming the field,
  its value and what is allowed; a spec's validation error names the config's fields (:func:`_checked`).

``quantization_config`` (or a ModelOpt ``hf_quant_config.json`` beside the file) sets the checkpoint's weight dtype:
``fp8`` (``fp8_block`` with a ``weight_block_size``), ``mxfp4``, ModelOpt ``FP8`` / ``NVFP4``, compressed-tensors
8- and 4-bit float, 4-bit int (``int4``) and 8-bit int weights, 4-bit AWQ/GPTQ (``int4``) — at the top level or in
a multimodal wrapper's ``text_config``; ``modules_to_not_convert`` naming attention keeps attention 16-bit, as
does a compressed-tensors ``re:`` pattern matching attention or dense MLP modules (:func:`_leaves_out`). A
declared 8-bit float KV cache (ModelOpt ``kv_cache_quant_algo: FP8``, compressed-tensors ``kv_cache_scheme`` of
8-bit floats) is the checkpoint's KV format (:attr:`simulator.catalog.model_spec.Quantization.kv_cache`).
A window at least as long as the context (Phi-3's 262,144 on 131,072 positions) is full attention. Fields nested in
an ``attn_config`` or ``ffn_config`` (DBRX, MPT) read as if at the top level. A field the importer cannot honour
(an unknown layer kind or quantisation, ...) is one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import re2
from pydantic import ValidationError

from simulator.catalog.architecture import MAX_LAYERS, LayerGroup, group_layers
from simulator.catalog.layers import ATTENTION_KINDS, FFN, Attention, DenseFFN, MoEFFN, NoAttention, NoFFN
from simulator.catalog.loading import validate
from simulator.catalog.model_spec import ModelSpec
from simulator.catalog.vision import vision_from_hf
from simulator.errors import LLMSimError, format_validation_error

ALIASES: dict[str, tuple[str, ...]] = {
    "num_layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "hidden_size": ("hidden_size", "d_model", "n_embd", "dim"),
    "num_heads": ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    "num_kv_heads": ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num", "kv_n_heads"),
    "head_dim": ("head_dim", "kv_channels", "attention_head_dim"),
    "intermediate_size": ("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim"),
    "dense_intermediate_size": ("intermediate_size_mlp",),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length",
                                "max_seq_len"),
    "num_experts": ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts"),
    "experts_per_token": ("num_experts_per_tok", "experts_per_token", "top_k_experts", "moe_top_k", "moe_k",
                          "moe_topk"),
    "expert_intermediate_size": ("moe_intermediate_size", "expert_intermediate_size"),
    "shared_experts": ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts", "num_shared_expert"),
    "shared_intermediate_size": ("shared_expert_intermediate_size", "shared_intermediate_size",
                                 "moe_shared_expert_intermediate_size"),
    "expert_latent_size": ("moe_latent_size",),
    "global_head_dim": ("global_head_dim",),
    "global_kv_heads": ("num_global_key_value_heads",),
    "window": ("sliding_window", "attention_window"),
    "chunk": ("attention_chunk_size",),
    **{key: (key,) for key in ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                               "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                               "linear_value_head_dim")},
    "mamba_num_heads": ("mamba_num_heads", "mamba_n_heads"),
    "mamba_head_dim": ("mamba_head_dim", "mamba_d_head"),
    "ssm_state_size": ("ssm_state_size", "mamba_d_state"),
    "index_topk": ("index_topk",),
    "index_heads": ("index_n_heads", "index_num_heads"),
    "index_head_dim": ("index_head_dim",),
    "linear_conv": ("linear_conv_kernel_dim",),
    "mamba_conv": ("conv_kernel", "mamba_d_conv"),
    "mamba_groups": ("n_groups", "mamba_n_groups"),
}
# model types whose MLP is not gated (the rest are SwiGLU/GeGLU-style)
UNGATED_MODEL_TYPES = {"phi", "gpt2", "gpt_neox", "opt", "bloom", "falcon", "gpt_bigcode", "nemotron_h"}
# families that tie the LM head to the embeddings when the config does not say
TIED_BY_DEFAULT = ("gemma",)
# families whose sliding and global layers alternate without a pattern field: every N-th layer global
SLIDING_PATTERN_BY_FAMILY = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6, "cohere2": 4}
# families with shared experts not named in their config: experts per MoE layer
SHARED_EXPERTS_BY_FAMILY = {"llama4": 1}
# families whose linear and full attention layers alternate without a layer_types list: every N-th layer full
# (transformers' Qwen3NextConfig derives its layer_types so, with 4 where full_attention_interval is absent)
FULL_ATTENTION_INTERVAL_BY_FAMILY = {"qwen3_next": 4}
# families whose sparse-attention indexer runs whether or not the config states its fields: the model code's defaults
# (transformers' GlmMoeDsaConfig: 2,048 tokens picked by 32 indexer heads of width 128; DeepSeek-V3.2's: 64 heads)
INDEXER_DEFAULTS_BY_FAMILY = {"glm_moe_dsa": {"index_topk": 2048, "index_n_heads": 32, "index_head_dim": 128},
                              "deepseek_v32": {"index_topk": 2048, "index_n_heads": 64, "index_head_dim": 128}}
# layer_types values: transformers' names, and Granite-4.0-H's ("attention", "mamba")
LAYER_KINDS = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked",
               "linear_attention": "linear", "attention": "full", "mamba": "mamba"}
HYBRID_BLOCKS = {"M": ("mamba", "none"), "*": ("full", "none"), "-": ("none", "dense"), "E": ("none", "moe")}
# layouts of sequence mixers the importer does not model: the field that declares one, and what it declares
UNMODELLED_LAYOUTS = {"compress_ratios": "compressed and heavily compressed sparse attention layers (DeepSeek-V4's "
                                         "CSA and HCA)",
                      "hc_mult": "manifold-constrained hyper-connections in place of residuals (DeepSeek-V4's mHC)",
                      "attn_type_list": "lightning (linear) attention layers (MiniMax-Text-01, MiniMax-M1)",
                      "linear_attn_config": "Kimi Delta Attention layers (Kimi-Linear)",
                      "attn_layer_period": "Mamba-1 layers between attention layers (Jamba)"}
# the fields that place layers of each kind (the model_type where the family decides)
PATTERN_FIELDS = ("hybrid_override_pattern", "layer_types", "attn_layer_indices", "full_attention_interval")
# fields read as names (a family, a norm's kind, a dtype)
TEXT_FIELDS = ("model_type", "qk_norm_type", "mamba_ssm_dtype")
# features a config switches on (a true or a count above 0) that the importer does not model: the field, and what it is
UNMODELLED_FEATURES = {"use_cla": "KV caches shared across layers (Hunyuan's cross-layer attention)",
                       "num_kv_shared_layers": "KV caches shared across layers (Gemma 3n, Gemma 4 E2B/E4B)",
                       "hidden_size_per_layer_input": "per-layer input embeddings (Gemma 3n, Gemma 4 E2B/E4B)"}
# the fields that count a checkpoint's multi-token-prediction modules (DeepSeek-V3/R1, GLM-4.5 and GLM-5, MiMo:
# num_nextn_predict_layers; Qwen3.5: mtp_num_hidden_layers), and the families that ship them without saying how many
# (vLLM's qwen3_next_mtp.py reads num_nextn_predict_layers with a default of 1: Qwen3-Next's config has none)
MTP_FIELDS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
MTP_LAYERS_BY_FAMILY = {"qwen3_next": 1}
MAMBA_FIELDS = ("mamba_num_heads", "mamba_n_heads", "mamba_head_dim", "mamba_d_head", "ssm_state_size",
                "mamba_d_state", "mamba_d_ssm")


def _shown(value: Any, limit: int = 40) -> str:
    """A config value as the user wrote it (repr: strings quoted), shortened."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Bounds on what a config states, checked before any work grows with it: the importer builds one entry per layer
# (at most MAX_LAYERS); every other count or width stays far below overflow.
MAX_COUNT = 2**40


def _get(config: dict[str, Any], fact: str, where: str, default: Any = ...) -> Any:
    """The first alias of ``fact`` present (not null) as a positive integer (a list of one value per layer, as
    Hunyuan writes its expert fields, when every layer has the same); absent gives ``default``."""
    for key in ALIASES[fact]:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, list) and value:
            if any(item != value[0] for item in value):
                raise LLMSimError(f"{where}: {key} varies from layer to layer ({_shown(value, 40)}): not modelled yet")
            value = value[0]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise LLMSimError(f"{where}: {key} must be a positive integer, got {_shown(value, 40)}")
        limit = MAX_LAYERS if fact == "num_layers" else MAX_COUNT
        if value > limit:
            raise LLMSimError(f"{where}: {key}: {value:,} is above {limit:,}, more than any model has")
        return value
    if default is ...:
        raise LLMSimError(f"{where}: Hugging Face config lacks required key {ALIASES[fact][0]!r}"
                          + (f" (or {', '.join(ALIASES[fact][1:])})" if len(ALIASES[fact]) > 1 else ""))
    return default


# the fields the importer reads beside the :data:`ALIASES`, by what each must be: checked wherever a config gives one
# (not null), whether or not its layer pattern reads it, so a mistyped field is never silently dropped
COUNT_FIELDS = ("decoder_sparse_step", "interleave_moe_layer_step", "moe_layer_interval", "full_attention_interval",
                "index_topk_freq", "mamba_expand")
WHOLE_FIELDS = ("first_k_dense_replace", "moe_layer_start_index", "moe_layer_end_index", "max_window_layers",
                "index_skip_topk_offset")  # (the MTP fields: always read, by _mtp)
FLAG_FIELDS = ("use_sliding_window", "tie_word_embeddings", "attn_output_gate", "use_qk_norm", "attention_k_eq_v",
               "enable_moe_block")
INDEX_FIELDS = ("mlp_only_layers", "attn_layer_indices")
# facts a config may state as 0 (no routed or no shared experts), and a Mamba head width of "auto" (Granite-4.0-H)
ZERO_MEANS_NONE = ("num_experts", "shared_experts", "shared_intermediate_size")


def _check_fields(config: dict[str, Any], layers: int, where: str) -> None:
    """Every field the importer reads that the config gives, checked against what it must be before any is used: a
    one-line refusal names the field, its value and what is allowed."""
    for fact, keys in ALIASES.items():
        for key in keys:
            value = config.get(key)
            if value is None or (fact in ZERO_MEANS_NONE and value == 0 and not isinstance(value, bool)) or (
                    key == "mamba_d_head" and value == "auto"):
                continue
            if fact in ZERO_MEANS_NONE and isinstance(value, list) and value and all(
                    v == 0 and not isinstance(v, bool) for v in value):
                continue
            _get({key: value}, fact, where)  # that field alone: each alias a config gives is checked
    for key in COUNT_FIELDS:
        _whole(config, key, where, 1)
    for key in WHOLE_FIELDS:
        _whole(config, key, where, 0)
    for key in FLAG_FIELDS:
        _flag(config, key, where, False)
    for key in INDEX_FIELDS:
        indices = _int_list(config, key, where) or []
        if any(not 0 <= i < layers for i in indices):
            raise LLMSimError(f"{where}: {key} must list layer indices in [0, {layers}) ({_depth(config, layers)}), "
                              f"got {_shown(indices, 60)}")
    _int_list(config, "no_rope_layers", where, layers)
    _moe_layer_list(config, layers, where)


def _depth(config: dict[str, Any], layers: int) -> str:
    """The config's layer count as it names it (``num_hidden_layers = 36``): what a per-layer field must match."""
    return f"{_key(config, 'num_layers')} = {layers}"


@contextmanager
def _needed_by(what: str) -> Iterator[None]:
    """A required key found missing (or not positive) inside is named with what needs it (the field that switched a
    layer kind on)."""
    try:
        yield
    except LLMSimError as exc:
        if ("lacks required key" not in str(exc) and "must be a positive integer" not in str(exc)) or (
                "needed by" in str(exc)):
            raise
        raise LLMSimError(f"{exc}, needed by {what}") from None


def _key(config: dict[str, Any], fact: str) -> str:
    """The config's name for ``fact``: the first of its aliases the config gives (else the first alias)."""
    return next((key for key in ALIASES[fact] if config.get(key) is not None), ALIASES[fact][0])


def _checked(cls: Any, fields: dict[str, Any], where: str, config: dict[str, Any], names: dict[str, str]) -> Any:
    """``fields`` validated as ``cls``; a refusal names the config's fields, not the spec's: ``names`` maps a spec
    field to the fact (:data:`ALIASES`) it was read from."""
    try:
        return cls.model_validate(fields)
    except ValidationError as exc:
        message = format_validation_error(exc, cls).removeprefix("(top level): ")
    keys = {field: _key(config, fact) for field, fact in names.items()}
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(keys, key=len, reverse=True))) + r")\b")
    raise LLMSimError(f"{where}: {pattern.sub(lambda match: keys[match.group(1)], message)}")


def _flag(config: dict[str, Any], key: str, where: str, default: bool) -> bool:
    value = config.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise LLMSimError(f"{where}: {key} must be true or false, got {_shown(value, 40)}")
    return value


def _int_list(config: dict[str, Any], key: str, where: str, length: int | None = None) -> list[int] | None:
    value = config.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise LLMSimError(f"{where}: {key} must be a list of integers, got {_shown(value, 60)}")
    if length is not None and len(value) != length:
        raise LLMSimError(f"{where}: {key} has {len(value)} entries for {length} layers ({_depth(config, length)})")
    return value


# sections some families nest their attention and FFN fields in (DBRX, MPT), read as if at the top level
NESTED_SECTIONS = ("attn_config", "ffn_config")


def text_config(config: dict[str, Any], where: str) -> dict[str, Any]:
    """The language model's fields: a nested ``text_config`` over the top level (which keeps the quantisation), and
    the fields of its :data:`NESTED_SECTIONS` where the top level does not give them."""
    nested = config.get("text_config")
    if nested is not None and not isinstance(nested, dict):
        raise LLMSimError(f"{where}: text_config must be a mapping, got {_shown(nested, 40)}")
    text = config if nested is None else {**config, **nested}
    sections = {key: text[key] for key in NESTED_SECTIONS if text.get(key) is not None}
    for key, section in sections.items():
        if not isinstance(section, dict):
            raise LLMSimError(f"{where}: {key} must be a mapping, got {_shown(section, 40)}")
    if not sections:
        return text
    merged: dict[str, Any] = {}
    for section in sections.values():
        merged.update(section)
    return {**merged, **text}


def _attention_kinds(config: dict[str, Any], layers: int, where: str) -> list[str]:
    """Each layer's attention kind from the family's layer pattern."""
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) for t in types):
            raise LLMSimError(f"{where}: layer_types must list one kind per layer ({_depth(config, layers)}), got "
                              f"{_shown(types, 60)}")
        for kind in types:
            if kind not in LAYER_KINDS:
                raise LLMSimError(f"{where}: layer_types: unknown layer kind {kind!r} (known: "
                                  f"{', '.join(LAYER_KINDS)})")
        return [LAYER_KINDS[kind] for kind in types]
    indices = _int_list(config, "attn_layer_indices", where)
    if indices is not None:  # Bamba: attention on these layers, Mamba2 on the others (in range: _check_fields)
        return ["full" if i in indices else "mamba" for i in range(layers)]
    family = str(config.get("model_type", ""))
    interval = config.get("full_attention_interval", FULL_ATTENTION_INTERVAL_BY_FAMILY.get(family))
    if interval is not None:
        if isinstance(interval, bool) or not isinstance(interval, int) or interval <= 0:
            raise LLMSimError(f"{where}: full_attention_interval must be a positive integer, got {_shown(interval)}")
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)]
    if _get(config, "chunk", where, None):
        no_rope = _int_list(config, "no_rope_layers", where, layers)
        if no_rope is None:  # Llama 4's default: every 4th layer is a global NoPE layer
            no_rope = [int((i + 1) % 4 != 0) for i in range(layers)]
        return ["chunked" if uses_rope else "full" for uses_rope in no_rope]
    pattern = _get(config, "window", where, None) and config.get("sliding_window_pattern",
                                                                 SLIDING_PATTERN_BY_FAMILY.get(family))
    if pattern:
        if isinstance(pattern, str) and set(pattern) <= {"L", "G"}:  # EXAONE 4: "LLLG", repeated over the layers
            return ["sliding" if pattern[i % len(pattern)] == "L" else "full" for i in range(layers)]
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern <= 0:
            raise LLMSimError(f"{where}: sliding_window_pattern must be a positive integer or a string of L (local) "
                              f"and G (global), got {pattern!r}")
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(layers)]
    if _get(config, "window", where, None) and _flag(config, "use_sliding_window", where, True):
        full_first = (_whole(config, "max_window_layers", where, 0, 0) or 0) if "use_sliding_window" in config else 0
        return ["full" if i < full_first else "sliding" for i in range(layers)]
    return ["full"] * layers


# families whose every attention layer has learned sinks (their configs do not say so: the modelling code does)
SINK_FAMILIES = ("gpt_oss",)


def _index_shared(config: dict[str, Any], layers: int, where: str) -> list[bool]:
    """Which layers of a sparse-attention model reuse the selection of the layer before instead of running an
    indexer: ``indexer_types`` ("full" / "shared" per layer, GLM-5.2), or every layer but the first
    ``index_skip_topk_offset`` and each ``index_topk_freq``-th after them; none where the config says neither."""
    types = config.get("indexer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or any(t not in ("full", "shared") for t in types):
            raise LLMSimError(f"{where}: indexer_types must list 'full' or 'shared' for each of the {layers} layers "
                              f"({_depth(config, layers)}), "
                              f"got {_shown(types, 60)}")
        return [t == "shared" for t in types]
    freq, offset = config.get("index_topk_freq", 1), config.get("index_skip_topk_offset", 0)
    for key, value in (("index_topk_freq", freq), ("index_skip_topk_offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if key == "index_topk_freq" else 0):
            raise LLMSimError(f"{where}: {key} must be a {'positive' if key == 'index_topk_freq' else 'non-negative'} "
                              f"integer, got {_shown(value)}")
    return [i >= offset and (i - offset + 1) % freq != 0 for i in range(layers)]


def _attention(config: dict[str, Any], kind: str, where: str, index_shared: bool = False,
               placed_by: str = "model_type") -> Attention:
    """One layer's attention of ``kind``; ``placed_by``: the field whose layer pattern put it there."""
    if kind in ("linear", "mamba"):
        with _needed_by(f"the {kind} layers of {placed_by}"):
            return _state_mixer(config, kind, where)
    if kind == "none":
        return NoAttention()
    fields: dict[str, Any] = {"num_heads": _get(config, "num_heads", where)}
    if config.get("kv_lora_rank") is not None:
        with _needed_by("kv_lora_rank's latent attention"):
            return _latent(config, fields, where, index_shared)
    return _softmax(config, kind, fields, where)


def _latent(config: dict[str, Any], fields: dict[str, Any], where: str, index_shared: bool) -> Attention:
    """Multi-head latent attention (DeepSeek), with its sparse-attention indexer where ``index_topk`` asks."""
    heads = fields["num_heads"]
    rope = _get(config, "qk_rope_head_dim", where)
    fields.update(
        kind="mla", num_kv_heads=heads, q_lora_rank=_get(config, "q_lora_rank", where, 0),
        kv_lora_rank=_get(config, "kv_lora_rank", where), qk_rope_head_dim=rope,
        head_dim=_get(config, "qk_nope_head_dim", where) + rope, v_head_dim=_get(config, "v_head_dim", where),
    )
    topk = _get(config, "index_topk", where, 0)
    if topk:  # DeepSeek Sparse Attention: a lightning indexer picks each query's cached tokens
        fields.update(index_topk=topk, index_shared=index_shared)
        if not index_shared:
            with _needed_by("index_topk's sparse attention"):
                fields.update(index_heads=_get(config, "index_heads", where),
                              index_head_dim=_get(config, "index_head_dim", where))
    return _checked(ATTENTION_KINDS.get("mla"), fields, where, config, {
        "num_heads": "num_heads", "q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank",
        "qk_rope_head_dim": "qk_rope_head_dim", "head_dim": "qk_nope_head_dim", "v_head_dim": "v_head_dim",
        "index_topk": "index_topk", "index_heads": "index_heads", "index_head_dim": "index_head_dim"})


def _softmax(config: dict[str, Any], kind: str, fields: dict[str, Any], where: str) -> Attention:
    """Softmax attention of ``kind`` (``full``, ``sliding``, ``chunked``): a window as long as the context is full;
    a global layer shaped apart from the local ones where the config says so (:func:`_global_layer`)."""
    heads, hidden = fields["num_heads"], _get(config, "hidden_size", where)
    values_are_keys = False
    output_gate = _flag(config, "attn_output_gate", where, False)
    names = {"num_heads": "num_heads", "num_kv_heads": "num_kv_heads", "head_dim": "head_dim",
             "window": "window" if kind == "sliding" else "chunk"}
    if kind == "full" and any(config.get(key) is not None for key in ("global_head_dim", "num_global_key_value_heads",
                                                                      "attention_k_eq_v")):
        names.update({field: fact for field, fact in (("head_dim", "global_head_dim"),
                                                      ("num_kv_heads", "global_kv_heads"))
                      if _get(config, fact, where, None) is not None})
        source = config
        config, values_are_keys = _global_layer(config, where)
    else:
        source = config
    if hidden % heads and _get(config, "head_dim", where, None) is None:
        raise LLMSimError(f"{where}: hidden_size {hidden} is not a multiple of num_attention_heads {heads} and "
                          "head_dim is not given")
    fields.update(kind=kind, output_gate=output_gate, num_kv_heads=_get(config, "num_kv_heads", where, heads),
                  head_dim=_get(config, "head_dim", where, hidden // heads),
                  sinks=config.get("model_type") in SINK_FAMILIES,
                  values_are_keys=values_are_keys,
                  qk_norm_across_heads=_flag(config, "use_qk_norm", where, False)
                  and str(config.get("qk_norm_type", "")).lower() == "per_layer")
    if kind in ("sliding", "chunked"):
        window = _get(config, "window" if kind == "sliding" else "chunk", where)
        if window < _get(config, "max_position_embeddings", where, 2048):  # else it sees the whole context
            fields["window"] = window
        else:
            fields["kind"] = "full"
    return _checked(ATTENTION_KINDS.get(fields["kind"]), fields, where, source, names)


def _global_layer(config: dict[str, Any], where: str) -> tuple[dict[str, Any], bool]:
    """The fields of a global (full-attention) layer where the config shapes them apart from its local ones (Gemma 4:
    ``global_head_dim``, ``num_global_key_value_heads``), and whether its keys serve as values
    (``attention_k_eq_v``)."""
    config = dict(config)
    for fact, key in (("global_head_dim", "head_dim"), ("global_kv_heads", "num_key_value_heads")):
        value = _get(config, fact, where, None)
        if value is not None:
            for alias in ALIASES["head_dim" if key == "head_dim" else "num_kv_heads"]:
                config.pop(alias, None)
            config[key] = value
    return config, _flag(config, "attention_k_eq_v", where, False)


def _state_mixer(config: dict[str, Any], kind: str, where: str) -> Attention:
    """A Gated DeltaNet (``linear``) or Mamba2 (``mamba``) layer; the state in fp32 when the checkpoint says so."""
    state_bytes = 4.0 if str(config.get("mamba_ssm_dtype", "")).lower() in ("float32", "fp32") else None
    if kind == "linear":
        fields = {"kind": "linear", "num_heads": _get(config, "linear_num_value_heads", where),
                  "num_kv_heads": _get(config, "linear_num_key_heads", where),
                  "head_dim": _get(config, "linear_key_head_dim", where),
                  "v_head_dim": _get(config, "linear_value_head_dim", where),
                  "conv_kernel": _get(config, "linear_conv", where, 4), "state_bytes": state_bytes}
    else:
        heads, head_dim = _mamba_heads(config, where)
        fields = {"kind": "mamba", "num_heads": heads, "head_dim": head_dim,
                  "state_size": _get(config, "ssm_state_size", where),
                  "groups": _get(config, "mamba_groups", where, 1), "conv_kernel": _get(config, "mamba_conv", where, 4),
                  "state_bytes": state_bytes}
    names = ({"num_heads": "linear_num_value_heads", "num_kv_heads": "linear_num_key_heads",
              "head_dim": "linear_key_head_dim", "v_head_dim": "linear_value_head_dim", "conv_kernel": "linear_conv"}
             if kind == "linear" else
             {"num_heads": "mamba_num_heads", "head_dim": "mamba_head_dim", "state_size": "ssm_state_size",
              "groups": "mamba_groups", "conv_kernel": "mamba_conv"})
    return _checked(ATTENTION_KINDS.get(kind), fields, where, config, names)


def _mamba_heads(config: dict[str, Any], where: str) -> tuple[int, int]:
    """A Mamba2 mixer's heads and head width. Their product is its inner width, ``mamba_expand`` (default 2) ×
    ``hidden_size``, so either one (or a head width of ``"auto"``, Granite-4.0-H's) follows from the other."""
    if config.get("mamba_d_head") == "auto":
        config = {key: value for key, value in config.items() if key != "mamba_d_head"}
    heads, head_dim = _get(config, "mamba_num_heads", where, None), _get(config, "mamba_head_dim", where, None)
    if heads is not None and head_dim is not None:
        return heads, head_dim
    expand = config.get("mamba_expand", 2)
    if isinstance(expand, bool) or not isinstance(expand, int) or expand <= 0:
        raise LLMSimError(f"{where}: mamba_expand must be a positive integer, got {_shown(expand)}")
    inner = expand * _get(config, "hidden_size", where)
    if heads is None and head_dim is None:
        _get(config, "mamba_num_heads", where)  # raises: the required key, named
    known = heads if heads is not None else head_dim
    if inner % known:
        raise LLMSimError(f"{where}: the Mamba inner width mamba_expand × hidden_size = {inner} is not a multiple of "
                          f"{'mamba_num_heads' if heads is not None else 'mamba_head_dim'} {known}")
    return (heads, inner // heads) if heads is not None else (inner // head_dim, head_dim)


def _hybrid_blocks(config: dict[str, Any], layers: int, where: str) -> list[tuple[str, str]] | None:
    """(attention kind, FFN kind) per layer from a ``hybrid_override_pattern``, or None without one."""
    pattern = config.get("hybrid_override_pattern")
    if pattern is None:
        return None
    if not isinstance(pattern, str) or len(pattern) != layers:
        raise LLMSimError(f"{where}: hybrid_override_pattern must be a string of one character per layer "
                          f"({_depth(config, layers)}),"
                          f" got {_shown(pattern, 60)}")
    unknown = sorted(set(pattern) - set(HYBRID_BLOCKS))
    if unknown:
        raise LLMSimError(f"{where}: hybrid_override_pattern: unknown block {unknown[0]!r} (known: M = Mamba2, "
                          "* = attention, - = MLP, E = mixture of experts)")
    return [HYBRID_BLOCKS[char] for char in pattern]


def _mtp(config: dict[str, Any], kinds: list[str], ffns: list[FFN], where: str) -> LayerGroup | None:
    """The checkpoint's multi-token-prediction modules (:data:`MTP_FIELDS`; 0 or absent: none, unless the family
    ships them, :data:`MTP_LAYERS_BY_FAMILY`): each one decoder layer shaped like the model's last full-attention
    layer (its whole-context attention kind, MLA where the model has it, a sparse-attention indexer of its own) with
    the last layer's FFN — DeepSeek-V3's MTP module is a MoE layer of MLA, Qwen3-Next's a full-attention MoE layer
    between its Gated DeltaNet layers."""
    key = next((key for key in MTP_FIELDS if config.get(key) is not None), None)
    count = config[key] if key else MTP_LAYERS_BY_FAMILY.get(str(config.get("model_type", "")), 0)
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_LAYERS:
        raise LLMSimError(f"{where}: {key} must be a whole number of modules from 0 to {MAX_LAYERS:,}, got "
                          f"{_shown(count)}")
    if not count:
        return None
    last_full = max((i for i, kind in enumerate(kinds) if kind == "full"), default=len(kinds) - 1)
    return LayerGroup(count=count, attention=_attention(config, kinds[last_full], where), ffn=ffns[-1])


def _whole(config: dict[str, Any], key: str, where: str, low: int, default: int | None = None) -> int | None:
    """``key`` as a whole number of at least ``low`` (at most :data:`MAX_COUNT`), ``default`` when absent or null;
    anything else is one line naming the field, its value and what is allowed."""
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        allowed = "a positive integer" if low == 1 else "a non-negative integer"
        raise LLMSimError(f"{where}: {key} must be {allowed}, got {_shown(value)}")
    if value > MAX_COUNT:
        raise LLMSimError(f"{where}: {key}: {value:,} is above {MAX_COUNT:,}, more than any model has")
    return value


def _moe_layer_list(config: dict[str, Any], layers: int, where: str) -> list[bool] | None:
    """``moe_layer_freq`` written as one 0 or 1 (or false / true) per layer (MiMo-V2-Flash, MiniMax-M3): which layers
    run the routed experts; None when it is absent or one integer (every N-th layer, read by :func:`_moe_layers`)."""
    value = config.get("moe_layer_freq")
    allowed = (f"allowed: a positive integer (every N-th layer) or a list of one 0 or 1 per layer "
               f"({_depth(config, layers)})")
    if not isinstance(value, list):
        if value is None or (isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_COUNT):
            return None
        raise LLMSimError(f"{where}: moe_layer_freq: {_shown(value)} is not a layer pattern; {allowed}")
    bad = next((v for v in value if not isinstance(v, int) or v not in (0, 1)), None)
    if bad is not None or len(value) != layers:
        problem = f"entry {_shown(bad)}" if bad is not None else f"{len(value)} entries"
        raise LLMSimError(f"{where}: moe_layer_freq: {problem} in {_shown(value, 60)}; {allowed}")
    return [bool(v) for v in value]


def _moe_layers(config: dict[str, Any], layers: int, where: str) -> list[bool]:
    """Which layers (0-based) run the routed experts, by the family's pattern fields: not the first
    ``first_k_dense_replace`` / ``moe_layer_start_index``, none after ``moe_layer_end_index``, none listed in
    ``mlp_only_layers``, and only those ``moe_layer_freq`` marks (a per-layer list) or every N-th by
    ``moe_layer_freq`` / ``decoder_sparse_step`` / ``interleave_moe_layer_step`` / ``moe_layer_interval``."""
    first = max(_whole(config, key, where, 0, 0) or 0 for key in ("first_k_dense_replace", "moe_layer_start_index"))
    last = _whole(config, "moe_layer_end_index", where, 0)
    dense_only = _int_list(config, "mlp_only_layers", where) or []  # in range: _check_fields
    listed = _moe_layer_list(config, layers, where)
    steps = [(key, offset, _whole(config, key, where, 1))
             for key, offset in (("moe_layer_freq", 0), ("decoder_sparse_step", 1), ("interleave_moe_layer_step", 1),
                                 ("moe_layer_interval", 1)) if not (key == "moe_layer_freq" and listed is not None)]
    mask = [first <= i and (last is None or i <= last) for i in range(layers)]
    for i in dense_only:
        mask[i] = False
    if listed is not None:
        mask = [m and on for m, on in zip(mask, listed, strict=True)]
    for _, offset, step in steps:
        if step is not None:
            mask = [m and (i + offset) % step == 0 for i, m in enumerate(mask)]
    return mask


def _no_routed_experts(config: dict[str, Any]) -> bool:
    """The config says, with a 0, that its mixture-of-experts blocks have no routed experts (Granite-4.0-H's dense
    models: ``num_local_experts: 0``, every layer's MLP its shared one)."""
    stated = [config[key] for key in ALIASES["num_experts"] if config.get(key) is not None]
    return bool(stated) and stated[0] == 0 and not isinstance(stated[0], bool)


def _dense_ffn(config: dict[str, Any], where: str) -> FFN:
    """A dense layer's MLP: ``intermediate_size_mlp`` (Llama 4), the shared MLP's width where the config names no
    routed experts with a 0, else ``intermediate_size``."""
    gated = config.get("model_type") not in UNGATED_MODEL_TYPES
    inter = _get(config, "intermediate_size", where, 4 * _get(config, "hidden_size", where))
    if _no_routed_experts(config):
        with _needed_by(f"{_key(config, 'num_experts')} = 0 (no routed experts: the shared MLP alone)"):
            inter = _get(config, "shared_intermediate_size", where, inter)
    return _checked(DenseFFN, {"intermediate_size": _get(config, "dense_intermediate_size", where, inter),
                               "gated": gated}, where, config, {"intermediate_size": "intermediate_size"})


def _moe_ffn(config: dict[str, Any], where: str) -> FFN | None:
    """The routed-experts FFN the config describes, or None without routed experts (none named, one, or 0, or
    ``enable_moe_block: false``). With ``enable_moe_block: true`` (Gemma 4) the experts run beside the layer's dense
    MLP of ``intermediate_size``, which every token runs: a shared expert of that width."""
    beside_dense = config.get("enable_moe_block")
    if beside_dense is not None and not isinstance(beside_dense, bool):
        raise LLMSimError(f"{where}: enable_moe_block must be true or false, got {_shown(beside_dense)}")
    if _no_routed_experts(config) or beside_dense is False:
        return None
    experts = _get(config, "num_experts", where, 1)
    if experts == 1:
        if beside_dense:
            raise LLMSimError(f"{where}: enable_moe_block is true but the config names no routed experts "
                              f"({' / '.join(ALIASES['num_experts'])})")
        return None
    if _get(config, "experts_per_token", where, None) is None:
        raise LLMSimError(f"{where}: the config names {experts} routed experts ({_key(config, 'num_experts')}) but "
                          f"not how many each token is sent to ({' / '.join(ALIASES['experts_per_token'])})")
    expert_width = _get(config, "expert_intermediate_size", where,
                        _get(config, "intermediate_size", where, 4 * _get(config, "hidden_size", where)))
    family = str(config.get("model_type", "")).split("_")[0]
    stated = {key: config[key] for key in (*ALIASES["shared_intermediate_size"], *ALIASES["shared_experts"])
              if config.get(key) is not None}
    if any((value == 0 and not isinstance(value, bool))
           or (isinstance(value, list) and value and all(v == 0 and not isinstance(v, bool) for v in value))
           for value in stated.values()):
        shared = 0  # "no shared experts", said explicitly
    else:
        shared = _get(config, "shared_intermediate_size", where, None)
        if shared is None:
            shared = _get(config, "shared_experts", where, SHARED_EXPERTS_BY_FAMILY.get(family, 0)) * expert_width
    if beside_dense:  # Gemma 4: every layer's dense MLP runs beside its experts, as a shared expert would
        shared += _get(config, "intermediate_size", where)
    return _checked(MoEFFN, {
        "kind": "moe", "intermediate_size": expert_width, "gated": config.get("model_type") not in UNGATED_MODEL_TYPES,
        "num_experts": experts, "experts_per_token": _get(config, "experts_per_token", where, 1),
        "shared_intermediate_size": shared, "latent_size": _get(config, "expert_latent_size", where, 0),
    }, where, config, {"intermediate_size": "expert_intermediate_size", "num_experts": "num_experts",
                       "experts_per_token": "experts_per_token", "shared_intermediate_size": "shared_intermediate_size",
                       "latent_size": "expert_latent_size"})


def _ffns(config: dict[str, Any], layers: int, where: str) -> list[FFN]:
    dense, moe = _dense_ffn(config, where), _moe_ffn(config, where)
    if moe is None:
        return [dense] * layers
    return [moe if is_moe else dense for is_moe in _moe_layers(config, layers, where)]


def quantization(config: dict[str, Any], path: Path | None, where: str) -> dict[str, Any] | None:
    """The checkpoint's weight format from ``quantization_config`` or a ModelOpt ``hf_quant_config.json``."""
    method = config.get("quantization_config")
    if method is None and path is not None:
        for sibling in (path.with_name(path.name.replace("config.json", "hf_quant_config.json")),
                        path.with_name("hf_quant_config.json")):
            if sibling != path and sibling.is_file():
                try:
                    modelopt = json.loads(sibling.read_text(encoding="utf-8")).get("quantization") or {}
                except (OSError, ValueError, AttributeError):
                    raise LLMSimError(f"{sibling}: not a ModelOpt hf_quant_config.json") from None
                if not isinstance(modelopt, dict):
                    raise LLMSimError(f"{sibling}: quantization must be a mapping, got {_shown(modelopt)}")
                method = {"quant_method": "modelopt", **modelopt}
                break
    if method is None:
        return None
    if not isinstance(method, dict):
        raise LLMSimError(f"{where}: quantization_config must be a mapping, got {_shown(method, 40)}")
    _check_quantization(method, where)
    name = str(method.get("quant_method", "")).lower()
    algo = str(method.get("quant_algo", "")).upper()
    bits = method.get("bits") or method.get("w_bit")
    if name == "fp8":
        dtype = "fp8_block" if method.get("weight_block_size") else "fp8"
    elif name == "mxfp4":
        dtype = "mxfp4"
    elif name == "modelopt" and algo in ("FP8", "FP8_BLOCK", "NVFP4"):
        dtype = {"FP8": "fp8", "FP8_BLOCK": "fp8_block", "NVFP4": "nvfp4"}[algo]
    elif name in ("awq", "gptq") and bits == 4:
        dtype = "int4"
    elif name == "compressed-tensors":
        dtype = compressed_tensors_dtype(method, where)
    else:
        raise LLMSimError(f"{where}: quantization_config: quant_method {name or '?'!r}{f' {algo}' if algo else ''} "
                          "is not modelled (known: fp8, fp8 with weight_block_size, mxfp4, modelopt FP8/NVFP4, "
                          "4-bit awq/gptq, compressed-tensors)")
    kept = method.get("modules_to_not_convert") or method.get("exclude_modules") or method.get("ignore") or []
    kept = [str(module) for module in kept] if isinstance(kept, list) else []
    parts = [part for part in ("attention", "dense_ffn", "experts") if not any(
        _leaves_out(module, part) for module in kept)]
    return {"dtype": dtype, "parts": parts, "kv_cache": declared_kv_cache(method)}


# what each quantisation field the importer reads must be (null: not given)
QUANTIZATION_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    **dict.fromkeys(("quant_method", "quant_algo", "format", "kv_cache_quant_algo"), ((str,), "a string")),
    **dict.fromkeys(("bits", "w_bit"), ((int,), "an integer")),
    **dict.fromkeys(("modules_to_not_convert", "exclude_modules", "ignore"), ((list,), "a list of module names")),
    **dict.fromkeys(("config_groups", "kv_cache_scheme"), ((dict,), "a mapping")),
}
SCHEME_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "type": ((str,), "a string"), "num_bits": ((int,), "an integer"), "strategy": ((str,), "a string"),
    "group_size": ((int,), "an integer"), "block_structure": ((list,), "a list")}


def _check_quantization(method: dict[str, Any], where: str) -> None:
    """The quantisation fields the importer reads, each what it must be: one line naming the one that is not."""
    def check(section: dict[str, Any], fields: dict[str, tuple[tuple[type, ...], str]], prefix: str) -> None:
        for key, (types, what) in fields.items():
            value = section.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
                raise LLMSimError(f"{where}: quantization_config: {prefix}{key} must be {what}, got {_shown(value)}")

    check(method, QUANTIZATION_FIELDS, "")
    for key in ("modules_to_not_convert", "exclude_modules", "ignore"):
        if any(not isinstance(module, str) for module in method.get(key) or []):
            raise LLMSimError(f"{where}: quantization_config: {key} must be a list of module names, got "
                              f"{_shown(method[key])}")
    block = method.get("weight_block_size")
    if block is not None and (not isinstance(block, list) or len(block) != 2 or any(
            isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= MAX_COUNT for n in block)):
        raise LLMSimError(f"{where}: quantization_config: weight_block_size must be a list of two positive integers "
                          f"(rows, columns), got {_shown(block)}")
    for name, group in (method.get("config_groups") or {}).items():
        if not isinstance(group, dict):
            raise LLMSimError(f"{where}: quantization_config: config_groups: {name} must be a mapping, got "
                              f"{_shown(group)}")
        for part in ("weights", "input_activations"):
            scheme = group.get(part)
            if scheme is not None and not isinstance(scheme, dict):
                raise LLMSimError(f"{where}: quantization_config: config_groups: {name}: {part} must be a mapping, "
                                  f"got {_shown(scheme)}")
            check(scheme or {}, SCHEME_FIELDS, f"config_groups: {name}: {part}: ")
    check(method.get("kv_cache_scheme") or {}, SCHEME_FIELDS, "kv_cache_scheme: ")


# a module of each quantisable part, as checkpoints name them (the expert's of DeepSeek-style and Mixtral-style MoE)
PART_MODULES = {"attention": ("model.layers.0.self_attn.q_proj",), "dense_ffn": ("model.layers.0.mlp.gate_proj",),
                "experts": ("model.layers.0.mlp.experts.0.gate_proj", "model.layers.0.block_sparse_moe.experts.0.w1")}


_RE2_QUIET = re2.Options()
_RE2_QUIET.log_errors = False  # a pattern RE2 refuses is answered here, not printed to stderr


def _leaves_out(module: str, part: str) -> bool:
    """Whether an entry of a checkpoint's unquantised-module list keeps ``part`` in 16 bits: a compressed-tensors
    ``re:`` pattern matching that part's modules (``re:.*mlp\\.(gate|up|down)_proj.*`` keeps dense MLPs, not
    experts); otherwise, for attention, a name through ``self_attn`` or ending in ``.attn`` (ModelOpt lists it per
    layer, ``model.layers.3.self_attn*``)."""
    if module.startswith("re:"):
        try:  # RE2 matches in linear time: a pattern from a checkpoint cannot backtrack for minutes
            pattern = re2.compile(module[3:], options=_RE2_QUIET)
        except re2.error:  # not a pattern RE2 takes (a backreference, a look-around): it names no module
            return False
        return any(pattern.fullmatch(name) for name in PART_MODULES[part])
    return part == "attention" and ("self_attn" in module or module.endswith(".attn"))


def compressed_tensors_dtype(method: dict[str, Any], where: str) -> str:
    """A compressed-tensors checkpoint's weight format, from its first scheme's weights (``config_groups``) or,
    without one, its ``format``: 8-bit floats ``fp8`` (``fp8_block`` in blocks), 4-bit floats ``nvfp4`` (groups of
    16) or ``mxfp4``, 4-bit integers ``int4`` (weight-only, as Kimi-K2's quantisation-aware checkpoints), 8-bit
    integers with quantised activations ``int8``."""
    groups = method.get("config_groups")
    scheme = next(iter(groups.values()), None) if isinstance(groups, dict) and groups else None
    weights = scheme.get("weights") if isinstance(scheme, dict) else None
    fmt = str(method.get("format", "")).lower()
    if not isinstance(weights, dict):
        if "float" in fmt:
            return "fp8"
        raise LLMSimError(f"{where}: quantization_config: compressed-tensors format {fmt or '?'!r} without "
                          "config_groups weights is not modelled")
    kind, bits = str(weights.get("type", "")).lower(), weights.get("num_bits")
    activations = (scheme or {}).get("input_activations")  # scheme is a dict here: it gave the weights
    if kind == "float" and bits == 8:
        return "fp8_block" if weights.get("strategy") == "block" or weights.get("block_structure") else "fp8"
    if kind == "float" and bits == 4:
        return "mxfp4" if "mxfp4" in fmt or weights.get("group_size") == 32 else "nvfp4"
    if kind == "int" and bits == 4:
        return "int4"
    if kind == "int" and bits == 8 and isinstance(activations, dict):
        return "int8"
    raise LLMSimError(f"{where}: quantization_config: compressed-tensors weights of {bits} bit {kind or '?'} "
                      f"({'with' if activations else 'without'} quantised activations) are not modelled (known: "
                      "8-bit float, 4-bit float, 4-bit int, 8-bit int with 8-bit activations)")


def declared_kv_cache(method: dict[str, Any]) -> str | None:
    """The KV-cache format a quantisation config declares: ``fp8`` for ModelOpt's ``kv_cache_quant_algo: FP8`` or a
    compressed-tensors ``kv_cache_scheme`` of 8-bit floats; None when it declares none (or another format)."""
    if str(method.get("kv_cache_quant_algo") or "").upper() == "FP8":
        return "fp8"
    scheme = method.get("kv_cache_scheme")
    if isinstance(scheme, dict) and scheme.get("type") == "float" and scheme.get("num_bits") == 8:
        return "fp8"
    return None


def spec_from_hf_config(config: dict[str, Any], name: str, where: str, path: Path | None = None) -> ModelSpec:
    """Map a Hugging Face ``config.json`` onto a :class:`~simulator.catalog.ModelSpec`."""
    for key in ("model_type", "sliding_window", "use_sliding_window", "tie_word_embeddings"):
        value = config.get(key)
        if isinstance(value, list | dict):
            raise LLMSimError(f"{where}: {key} must be a single value, got {_shown(value, 60)}")
    text = text_config(config, where)
    for key in TEXT_FIELDS:
        if text.get(key) is not None and not isinstance(text[key], str):
            raise LLMSimError(f"{where}: {key} must be a string, got {_shown(text[key])}")
    text = {**INDEXER_DEFAULTS_BY_FAMILY.get(str(text.get("model_type", "")), {}), **text}
    for key, layout in UNMODELLED_LAYOUTS.items():
        if text.get(key) is not None:
            raise LLMSimError(f"{where}: {key}: {layout} are not modelled yet")
    for key, feature in UNMODELLED_FEATURES.items():
        value = text.get(key)
        if value is None or value is False or (value == 0 and isinstance(value, int)):
            continue
        if value is True or (isinstance(value, int) and 0 < value <= MAX_COUNT):
            raise LLMSimError(f"{where}: {key}: {feature} are not modelled yet")
        raise LLMSimError(f"{where}: {key} must be true / false or a non-negative integer, got {_shown(value)}")
    layers = _get(text, "num_layers", where)
    _check_fields(text, layers, where)
    blocks = _hybrid_blocks(text, layers, where)
    if blocks is None:
        kinds, ffns = _attention_kinds(text, layers, where), _ffns(text, layers, where)
        named = next((key for key in MAMBA_FIELDS if text.get(key) is not None), None)
        if named and "mamba" not in kinds:
            raise LLMSimError(f"{where}: {named}: the config describes Mamba mixers but no layer pattern placing them "
                              "(hybrid_override_pattern, layer_types, attn_layer_indices); a layer running attention "
                              "and a Mamba mixer side by side (Falcon-H1) is not modelled yet")
    else:
        dense, moe = _dense_ffn(text, where), _moe_ffn(text, where)
        if moe is None and any(f == "moe" for _, f in blocks):
            raise LLMSimError(f"{where}: hybrid_override_pattern has E (mixture-of-experts) layers but the config "
                              "names no routed experts (n_routed_experts / num_experts)")
        by_kind: dict[str, FFN] = {"dense": dense, "none": NoFFN()} | ({"moe": moe} if moe else {})
        kinds, ffns = [a for a, _ in blocks], [by_kind[f] for _, f in blocks]
    sparse = _get(text, "index_topk", where, 0)
    if sparse and text.get("kv_lora_rank") is None:
        raise LLMSimError(f"{where}: index_topk: sparse attention over other than latent (MLA) attention is not "
                          "modelled yet")
    shared = _index_shared(text, layers, where) if sparse else [False] * layers
    placed_by = next((key for key in PATTERN_FIELDS if text.get(key) is not None), "model_type")
    attentions = {(kind, reuse): _attention(text, kind, where, reuse, placed_by)
                  for kind, reuse in set(zip(kinds, shared, strict=True))}
    family = str(text.get("model_type", ""))
    fields = {
        "mtp": _mtp(text, kinds, ffns, where),
        "name": name,
        "hidden_size": _get(text, "hidden_size", where),
        "vocab_size": _get(text, "vocab_size", where),
        "max_position_embeddings": _get(text, "max_position_embeddings", where, 2048),
        "tie_word_embeddings": _flag(text, "tie_word_embeddings", where, family.startswith(TIED_BY_DEFAULT)),
        "layers": group_layers([(attentions[kind, reuse], ffn)
                                for kind, reuse, ffn in zip(kinds, shared, ffns, strict=True)]),
        "quantization": quantization(text, path, where),  # a multimodal wrapper may nest it in text_config
        "vision": vision_from_hf(config, where),  # Qwen2-VL / Qwen2.5-VL's image encoder (None without one)
        "source": where,
    }
    return validate(ModelSpec, fields, where)
