"""A model as the simulator reads it: :class:`ModelSpec`, a stack of layer groups
(:mod:`simulator.catalog.architecture`), and :class:`Quantization`, how a quantised checkpoint stores its weights.

Parameter counts and KV sizes are derived from the architecture, not stored (the per-kind formulas are in the
kinds' modules, :mod:`simulator.catalog.layers`): total = Σ groups × layers × (attention + FFN + a norm per block) +
the final norm + the embedding table + an untied LM head; KV bytes per token = Σ groups × layers × KV elements per
token × bytes per element; a quantised checkpoint's parts are stored in its dtype, the rest (norms, routers, embeddings,
LM head) in 16-bit.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.catalog.architecture import LayerGroup
from simulator.catalog.vision import VisionSpec

QuantizablePart = Literal["attention", "dense_ffn", "experts"]
QUANTIZABLE_PARTS: tuple[QuantizablePart, ...] = ("attention", "dense_ffn", "experts")


class Quantization(BaseModel):
    """How a quantised checkpoint stores its weights: ``dtype`` for the linear layers of ``parts`` (the others, the
    router, norms, embeddings and the LM head stay 16-bit). The experiment's ``dtype: auto`` takes ``dtype``.
    ``kv_cache``: the KV-cache format the checkpoint declares (calibrated KV scales: ModelOpt's
    ``kv_cache_quant_algo``, compressed-tensors' ``kv_cache_scheme``), which vLLM, SGLang and TensorRT-LLM serve
    with under ``--kv-cache-dtype auto``; None: the cache keeps the activations' 16-bit format."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    dtype: str
    parts: tuple[QuantizablePart, ...] = QUANTIZABLE_PARTS
    kv_cache: Literal["fp8"] | None = None


class ModelSpec(BaseModel):
    """A decoder-only transformer as a stack of layer groups (:mod:`simulator.catalog.architecture`).

    The flat fields (``num_layers``, ``num_heads``, ``num_kv_heads``, ``head_dim``, ``intermediate_size``,
    ``gated_mlp``, ``num_experts``, ``experts_per_token``) are a shorthand for a model of one group of equal
    full-attention layers; give either them or ``layers``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str
    hidden_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_position_embeddings: int = Field(gt=0)
    tie_word_embeddings: bool = False
    layers: tuple[LayerGroup, ...]
    # The multi-token-prediction modules the checkpoint ships (``num_nextn_predict_layers``): ``count`` of them, each
    # one decoder layer of this shape behind a projection of [embedding; hidden] (2D → D) with two norms before it
    # and one after, sharing the embeddings and the LM head. They serve only as a speculative draft
    # (``scheduler.speculative.method: mtp``), so num_params leaves them out as the published sizes do
    # (DeepSeek-V3: 671B of main model, 14B of MTP module with its copies of the embeddings and head); mtp_params
    # counts them.
    mtp: LayerGroup | None = None
    quantization: Quantization | None = None
    # A vision-language model's image encoder (:mod:`simulator.catalog.vision`), priced per image of a workload's
    # ``images``; None: the model takes text only. num_params leaves it out (the language model's weights).
    vision: VisionSpec | None = None
    source: str = ""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        """The flat fields of a uniform model become its one layer group."""
        if not isinstance(data, dict) or not any(key in data for key in _SHORTHAND):
            return data
        data = dict(data)
        if "layers" in data:
            raise ValueError(f"give either layers or the flat fields {sorted(k for k in _SHORTHAND if k in data)}, "
                             "not both")
        flat = {key: data.pop(key) for key in _SHORTHAND if key in data}
        missing = [key for key in ("num_layers", "num_heads", "intermediate_size") if key not in flat]
        if missing:
            raise ValueError(f"a uniform model needs {missing} (or give layers)")
        heads = flat["num_heads"]
        head_dim = flat.get("head_dim")
        if head_dim is None and isinstance(heads, int) and heads > 0 and isinstance(data.get("hidden_size"), int):
            head_dim = data["hidden_size"] // heads
        experts = flat.get("num_experts", 1)
        ffn = {"intermediate_size": flat["intermediate_size"], "gated": flat.get("gated_mlp", True)}
        if experts != 1:
            ffn.update(kind="moe", num_experts=experts, experts_per_token=flat.get("experts_per_token", 1))
        data["layers"] = [{
            "count": flat["num_layers"],
            "attention": {"num_heads": heads, "num_kv_heads": flat.get("num_kv_heads", heads), "head_dim": head_dim},
            "ffn": ffn,
        }]
        return data

    @model_validator(mode="after")
    def _has_layers(self) -> ModelSpec:
        if not self.layers:
            raise ValueError("layers: a model needs at least one layer group")
        return self

    @property
    def num_layers(self) -> int:
        return sum(group.count for group in self.layers)

    @property
    def is_moe(self) -> bool:
        return any(group.ffn.routing is not None for group in self.layers)

    @property
    def embedding_params(self) -> int:
        """The token embedding table plus an untied LM head."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    @property
    def num_params(self) -> int:
        """Every weight: layers (norms included), the final norm, the embeddings and an untied LM head."""
        layers = sum(g.count * g.params(self.hidden_size) for g in self.layers)
        return layers + self.embedding_params + self.hidden_size

    @property
    def mtp_params(self) -> int:
        """Weights of the multi-token-prediction modules (0 without): per module its layer, the 2D × D projection
        and three norms of D (the embeddings and LM head are the main model's)."""
        if self.mtp is None:
            return 0
        D = self.hidden_size
        return self.mtp.count * (self.mtp.params(D) + 2 * D * D + 3 * D)

    @property
    def active_params(self) -> int:
        """Weights one token uses: all but the routed experts it is not sent to (Mixtral, Qwen and DeepSeek count
        so, embeddings included; OpenAI's gpt-oss card leaves the embedding table out: subtract
        ``vocab_size × hidden_size`` for its convention)."""
        idle = sum(g.count * g.ffn.idle_params(self.hidden_size) for g in self.layers)
        return self.num_params - idle

    def part_params(self) -> dict[str, int]:
        """Weights by what a checkpoint may quantise (``attention``, ``dense_ffn``, ``experts``) and what it keeps
        16-bit (``other``: norms, routers, embeddings and the LM head); they sum to :attr:`num_params`."""
        D = self.hidden_size
        parts = dict.fromkeys((*QUANTIZABLE_PARTS, "other"), 0)
        for g in self.layers:
            parts["attention"] += g.count * g.attention.params(D)
            for part, n in g.ffn.part_params(D).items():
                parts[part] += g.count * n
            parts["other"] += g.count * (g.attention.block + g.ffn.block) * D
        parts["other"] += self.embedding_params + D
        return parts

    def part_bytes(self, block_bytes: float, embedding_bytes: float = 2.0) -> dict[str, float]:
        """Bytes of each part's weights (:meth:`part_params`): the quantisable parts (:attr:`Quantization.parts`;
        all three without a quantisation) at ``block_bytes`` per parameter, the rest at ``embedding_bytes``."""
        quantized = self.quantization.parts if self.quantization else QUANTIZABLE_PARTS
        return {part: n * (block_bytes if part in quantized else embedding_bytes)
                for part, n in self.part_params().items()}

    def weight_bytes(self, block_bytes: float, embedding_bytes: float = 2.0) -> float:
        """Bytes of all weights (:meth:`part_bytes` summed)."""
        return sum(self.part_bytes(block_bytes, embedding_bytes).values())

    def quantized(self, part: str) -> bool:
        """Does the experiment's weight dtype apply to this part's GEMMs (else they run 16-bit)?"""
        return self.quantization is None or part in self.quantization.parts

    def kv_layout(self, bytes_per_element: float, tensor_parallel: int = 1) -> tuple[float, list[tuple[int, float]]]:
        """KV bytes per token on one GPU of the layers whose KV grows with the context, and (span, bytes per token)
        of the groups a sequence holds a bounded amount of: sliding windows and local chunks at most ``span``
        tokens; linear-attention and Mamba layers their fixed state, written as a span of 1 token of the state's
        bytes."""
        growing = 0.0
        spans: dict[int, float] = {}
        for g in self.layers:
            a = g.attention
            nbytes = g.count * a.kv_bytes_per_token(bytes_per_element, tensor_parallel)
            if a.span:
                spans[a.span] = spans.get(a.span, 0.0) + nbytes
            elif state := a.state_elements(tensor_parallel):
                spans[1] = spans.get(1, 0.0) + g.count * state * a.state_element_bytes(bytes_per_element)
            else:
                growing += nbytes
        return growing, sorted(spans.items())

    def kv_bytes_per_token(self, bytes_per_element: float, tensor_parallel: int = 1) -> float:
        """KV bytes one token holds on one GPU, over every layer (window layers counted as if full: the most a
        token can hold while it is inside the window)."""
        return sum(g.count * g.attention.kv_bytes_per_token(bytes_per_element, tensor_parallel) for g in self.layers)


_SHORTHAND = ("num_layers", "num_heads", "num_kv_heads", "head_dim", "intermediate_size", "gated_mlp", "num_experts",
              "experts_per_token")
