"""Transformer architectures: the built-in catalog, model YAML files and Hugging Face ``config.json``.

Parameter counts and KV sizes are derived from the architecture, not stored:

- attention weights per layer = hidden × (heads + 2 × kv_heads) × head_dim  (fused QKV)  + heads × head_dim × hidden (O)
- MLP weights per layer = experts × (3 if gated else 2) × hidden × intermediate (+ hidden × experts for the router
  of a mixture-of-experts layer, Mixtral-style: every token goes to ``experts_per_token`` of ``num_experts``)
- embeddings = vocab × hidden, plus the same again for an untied LM head
- KV bytes per token = 2 (K and V) × layers × kv_heads × head_dim × bytes per element
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.catalog.loading import read_mapping, validate
from simulator.errors import LLMSimError


class ModelSpec(BaseModel):
    """Architecture of a decoder-only transformer (dense)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_position_embeddings: int = Field(gt=0)
    gated_mlp: bool = True
    tie_word_embeddings: bool = False
    num_experts: int = Field(default=1, ge=1)
    experts_per_token: int = Field(default=1, ge=1)
    source: str = ""

    @model_validator(mode="after")
    def _experts(self) -> ModelSpec:
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"experts_per_token must be <= num_experts, got {self.experts_per_token} > {self.num_experts}"
            )
        return self

    @property
    def attention_params_per_layer(self) -> int:
        qkv = self.hidden_size * (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        return qkv + self.num_heads * self.head_dim * self.hidden_size

    @property
    def mlp_params_per_layer(self) -> int:
        expert = (3 if self.gated_mlp else 2) * self.hidden_size * self.intermediate_size
        router = self.hidden_size * self.num_experts if self.num_experts > 1 else 0
        return self.num_experts * expert + router

    @property
    def num_params(self) -> int:
        """Weights, norms included (two per layer plus the final one)."""
        per_layer = self.attention_params_per_layer + self.mlp_params_per_layer + 2 * self.hidden_size
        return self.num_layers * per_layer + self.embedding_params + self.hidden_size

    @property
    def embedding_params(self) -> int:
        """The token embedding table plus an untied LM head."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def weight_bytes(self, block_bytes: float, embedding_bytes: float = 2.0) -> float:
        """Bytes of all weights: transformer blocks (and norms) at ``block_bytes`` per parameter, embeddings and the
        LM head at ``embedding_bytes`` (quantised checkpoints keep those in 16-bit)."""
        return (self.num_params - self.embedding_params) * block_bytes + self.embedding_params * embedding_bytes

    def kv_bytes_per_token(self, bytes_per_element: float) -> float:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * bytes_per_element


def _spec(name, layers, hidden, heads, kv_heads, head_dim, inter, vocab, max_pos, source, **kw) -> ModelSpec:
    return ModelSpec(
        name=name, num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        intermediate_size=inter, vocab_size=vocab, max_position_embeddings=max_pos, source=source, **kw,
    )


_HF = "https://huggingface.co/{}/blob/main/config.json"
# Values from each model's published config.json (also tabulated in ../shared/reference/models.csv).
BUILTIN_MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        _spec("llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000, 4096, _HF.format("meta-llama/Llama-2-7b-hf")),
        _spec("llama-2-13b", 40, 5120, 40, 40, 128, 13824, 32000, 4096, _HF.format("meta-llama/Llama-2-13b-hf")),
        _spec("llama-2-70b", 80, 8192, 64, 8, 128, 28672, 32000, 4096, _HF.format("meta-llama/Llama-2-70b-hf")),
        _spec("llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256, 8192, _HF.format("meta-llama/Meta-Llama-3-8B")),
        _spec("llama-3-70b", 80, 8192, 64, 8, 128, 28672, 128256, 8192, _HF.format("meta-llama/Meta-Llama-3-70B")),
        _spec("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, 131072, _HF.format("meta-llama/Llama-3.1-8B")),
        _spec("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, 131072, _HF.format("meta-llama/Llama-3.1-70B")),
        _spec("mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000, 32768, _HF.format("mistralai/Mistral-7B-v0.1")),
        _spec("mixtral-8x7b", 32, 4096, 32, 8, 128, 14336, 32000, 32768, _HF.format("mistralai/Mixtral-8x7B-v0.1"),
              num_experts=8, experts_per_token=2),
        _spec("qwen2.5-7b", 28, 3584, 28, 4, 128, 18944, 152064, 131072, _HF.format("Qwen/Qwen2.5-7B")),
        _spec("qwen2.5-72b", 80, 8192, 64, 8, 128, 29568, 152064, 131072, _HF.format("Qwen/Qwen2.5-72B")),
        _spec("llama-3.1-405b", 126, 16384, 128, 8, 128, 53248, 128256, 131072,
              _HF.format("meta-llama/Llama-3.1-405B")),
        _spec("phi-2", 32, 2560, 32, 32, 80, 10240, 51200, 2048, _HF.format("microsoft/phi-2"), gated_mlp=False),
        # Qwen v1 config.json says intermediate_size 49152 for the gate and up projections together: 24576 each.
        _spec("qwen-72b", 80, 8192, 64, 64, 128, 24576, 152064, 32768, _HF.format("Qwen/Qwen-72B")),
        _spec("codellama-34b", 48, 8192, 64, 8, 128, 22016, 32000, 16384, _HF.format("codellama/CodeLlama-34b-hf")),
        _spec("internlm-20b", 60, 5120, 40, 40, 128, 13824, 103168, 4096, _HF.format("internlm/internlm-20b")),
        # OPT: ReLU MLP (not gated), LM head tied to the embeddings; the PagedAttention paper's model.
        _spec("opt-13b", 40, 5120, 40, 40, 128, 20480, 50272, 2048, _HF.format("facebook/opt-13b"),
              gated_mlp=False, tie_word_embeddings=True),
        # BLOOM: GELU MLP (not gated), word embeddings tied to the LM head.
        _spec("bloom-176b", 70, 14336, 112, 112, 128, 57344, 250880, 2048, _HF.format("bigscience/bloom"),
              gated_mlp=False, tie_word_embeddings=True),
    ]
}

# Hugging Face model types whose MLP is not gated (everything else we accept is SwiGLU/GeGLU-style).
_UNGATED_MODEL_TYPES = {"phi", "gpt2", "gpt_neox", "opt", "bloom", "falcon", "gpt_bigcode"}


def model_names() -> list[str]:
    return sorted(BUILTIN_MODELS)


def unmodelled_features(config: dict[str, Any]) -> list[str]:
    """Architecture features of a Hugging Face config that :class:`ModelSpec` cannot represent yet (the importer
    refuses them rather than size and cost the model as something it is not)."""
    features = []
    if "text_config" in config:
        features.append("a nested text_config (multimodal / hybrid configs)")
    if "kv_lora_rank" in config:
        features.append("multi-head latent attention (kv_lora_rank)")
    if any(key in config for key in ("shared_expert_intermediate_size", "n_shared_experts", "moe_intermediate_size")):
        features.append("fine-grained or shared-expert mixture-of-experts (moe_intermediate_size / shared experts)")
    layer_types = config.get("layer_types") or []
    if not isinstance(layer_types, list) or any(t != "full_attention" for t in layer_types) or (
        config.get("sliding_window") and config.get("use_sliding_window", True)
    ):
        features.append("sliding-window attention layers (sliding_window / layer_types)")
    if "hybrid_override_pattern" in config or config.get("attention_chunk_size"):
        features.append("hybrid state-space or chunked attention layers")
    quantization = config.get("quantization_config") or {}
    method = quantization.get("quant_method", "") if isinstance(quantization, dict) else quantization
    if method and method not in ("fp8",):
        features.append(f"{str(method)[:40]} quantisation (quantization_config)")
    return features


def _count(config: dict[str, Any], key: str, where: str, default: Any = ...) -> int | None:
    """``config[key]`` as a positive integer; absent or null gives ``default`` (required when it is ``...``)."""
    value = config.get(key)
    if value is None:
        if default is ...:
            raise LLMSimError(f"{where}: Hugging Face config lacks required key {key!r}")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise LLMSimError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


def spec_from_hf_config(config: dict[str, Any], name: str, where: str) -> ModelSpec:
    """Map a Hugging Face ``config.json`` onto :class:`ModelSpec` (Llama/Mistral/Mixtral/Qwen/Phi-style names).
    Null optional fields take their Hugging Face defaults (``num_key_value_heads``: the attention heads)."""
    features = unmodelled_features(config)
    if features:
        raise LLMSimError(f"{where}: not modelled yet: {'; '.join(features)}")
    for key in ("model_type", "sliding_window", "use_sliding_window", "tie_word_embeddings"):
        value = config.get(key)
        if isinstance(value, list | dict):
            raise LLMSimError(f"{where}: {key} must be a single value, got {str(value)[:60]}")
    heads, hidden = _count(config, "num_attention_heads", where), _count(config, "hidden_size", where)
    if hidden % heads and config.get("head_dim") is None:
        raise LLMSimError(f"{where}: hidden_size {hidden} is not a multiple of num_attention_heads {heads} and "
                          "head_dim is not given")
    fields = {
        "name": name,
        "num_layers": _count(config, "num_hidden_layers", where),
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": _count(config, "num_key_value_heads", where, heads),
        "head_dim": _count(config, "head_dim", where, hidden // heads),
        "intermediate_size": _count(config, "intermediate_size", where, 4 * hidden),
        "vocab_size": _count(config, "vocab_size", where),
        "max_position_embeddings": _count(config, "max_position_embeddings", where, 2048),
        "gated_mlp": config.get("model_type") not in _UNGATED_MODEL_TYPES,
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", False)),
        "num_experts": _count(config, "num_local_experts", where, None) or _count(config, "num_experts", where, 1),
        "experts_per_token": _count(config, "num_experts_per_tok", where, 1),
        "source": where,
    }
    return validate(ModelSpec, fields, where)


def load_model(name_or_path: str) -> ModelSpec:
    """A catalog name (``llama-3-8b``), a model YAML (ModelSpec fields) or a Hugging Face ``config.json``."""
    if name_or_path.lower() in BUILTIN_MODELS:
        return BUILTIN_MODELS[name_or_path.lower()]
    path = Path(name_or_path)
    if path.suffix not in (".json", ".yaml", ".yml"):
        raise LLMSimError(
            f"model: unknown model {name_or_path!r} (catalog: {', '.join(model_names())}; "
            "or a path to a model YAML or a Hugging Face config.json)"
        )
    if not path.is_file():
        raise LLMSimError(f"model: file not found: {name_or_path}")
    data = read_mapping(path)
    if path.suffix == ".json":
        return spec_from_hf_config(data, name=path.parent.name or path.stem, where=str(path))
    return validate(ModelSpec, data, str(path))
