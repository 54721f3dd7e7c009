"""A model as a stack of layer groups: each group is ``count`` equal layers of one attention kind and one FFN kind.

Everything downstream (memory, cost, KV sizing) iterates groups, never layers, so its work is independent of depth.

Attention kinds (per layer; ``t`` = tensor-parallel degree, ``d`` = head_dim, ``D`` = hidden):

- ``full``: multi-head / grouped-query / multi-query attention over the whole context.
  Weights ``D·(H + 2·G)·d`` (fused QKV) + ``H·d·D`` (O). KV elements per token: ``2·G·d``, split over ``t``
  (``ceil(G/t)`` heads per GPU: a KV head is replicated when ``t > G``).
- ``sliding``: the same over the last ``window`` tokens only (Mistral, Gemma 2/3, gpt-oss). A sequence holds at most
  ``window`` tokens of KV in such a layer.
- ``chunked``: chunked local attention (Llama 4): a token sees the earlier tokens of its own chunk of ``window``
  tokens; KV held and attention span are at most ``window`` tokens (priced as ``sliding``: an upper bound).
- ``mla``: multi-head latent attention (DeepSeek-V2/V3, Kimi-K2). Queries through a low-rank ``q_lora_rank``
  projection (or a full one when it is 0), keys and values from one compressed latent of ``kv_lora_rank`` plus a
  shared rotary key of ``qk_rope_head_dim``. Weights: ``D·r_q + r_q·H·(n + r)`` (or ``D·H·(n + r)``) for queries,
  ``D·(r_kv + r)`` for the latent, ``r_kv·H·(n + v)`` to decompress K and V, ``H·v·D`` (O), with ``n`` =
  qk_nope_head_dim, ``r`` = qk_rope_head_dim, ``v`` = v_head_dim. KV elements per token: ``r_kv + r`` — the same
  latent on every tensor-parallel rank (TP does not split it).

FFN kinds:

- ``dense``: gated (SwiGLU/GeGLU: up, gate, down = ``3·D·I``) or not (``2·D·I``).
- ``moe``: ``num_experts`` routed experts of ``intermediate_size`` each, ``experts_per_token`` per token, a router
  ``D·E``, and optionally shared experts that every token runs (one dense FFN of ``shared_intermediate_size``, the
  shared experts' sizes summed).

Total parameters count every weight; active parameters all but the routed experts a token is not sent to
(:attr:`simulator.catalog.ModelSpec.active_params`).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ATTENTION_KINDS = ("full", "sliding", "chunked", "mla")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Attention(_Frozen):
    """One layer's attention (see the module docstring for the weight and KV formulas)."""

    kind: Literal["full", "sliding", "chunked", "mla"] = "full"
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0, description="query/key width per head (MLA: qk_nope_head_dim + qk_rope_head_dim)")
    window: int = Field(default=0, ge=0, description="sliding: tokens kept; chunked: the chunk size")
    q_lora_rank: int = Field(default=0, ge=0)
    kv_lora_rank: int = Field(default=0, ge=0)
    qk_rope_head_dim: int = Field(default=0, ge=0)
    v_head_dim: int = Field(default=0, ge=0, description="MLA: value width per head (others: head_dim)")

    @model_validator(mode="after")
    def _consistent(self) -> Attention:
        if self.kind in ("sliding", "chunked") and self.window <= 0:
            raise ValueError(f"a {self.kind} attention layer needs window > 0")
        if self.kind == "mla":
            if self.kv_lora_rank <= 0 or self.v_head_dim <= 0:
                raise ValueError("an mla attention layer needs kv_lora_rank > 0 and v_head_dim > 0")
            if self.qk_rope_head_dim >= self.head_dim:
                raise ValueError(f"qk_rope_head_dim ({self.qk_rope_head_dim}) must be smaller than head_dim "
                                 f"({self.head_dim} = qk_nope_head_dim + qk_rope_head_dim)")
        elif self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        return self

    @property
    def value_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    def params(self, hidden: int) -> int:
        h, d = self.num_heads, self.head_dim
        if self.kind != "mla":
            return hidden * (h + 2 * self.num_kv_heads) * d + h * d * hidden
        query = hidden * self.q_lora_rank + self.q_lora_rank * h * d if self.q_lora_rank else hidden * h * d
        latent = hidden * (self.kv_lora_rank + self.qk_rope_head_dim)
        decompress = self.kv_lora_rank * h * (d - self.qk_rope_head_dim + self.v_head_dim)
        norms = self.kv_lora_rank + self.q_lora_rank
        return query + latent + decompress + h * self.v_head_dim * hidden + norms

    def kv_elements_per_token(self, tensor_parallel: int = 1) -> int:
        """K and V elements one token stores in this layer on one GPU."""
        if self.kind == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * math.ceil(self.num_kv_heads / tensor_parallel) * self.head_dim

    @property
    def span(self) -> int:
        """Most tokens a query attends to and a sequence keeps (0: the whole context)."""
        return self.window if self.kind in ("sliding", "chunked") else 0


class FFN(_Frozen):
    """One layer's feed-forward block."""

    kind: Literal["dense", "moe"] = "dense"
    intermediate_size: int = Field(gt=0, description="dense: the MLP width; moe: each routed expert's width")
    gated: bool = True
    num_experts: int = Field(default=1, ge=1)
    experts_per_token: int = Field(default=1, ge=1)
    shared_intermediate_size: int = Field(default=0, ge=0, description="moe: the shared experts' widths summed")

    @model_validator(mode="after")
    def _consistent(self) -> FFN:
        if self.kind == "dense" and (self.num_experts, self.experts_per_token, self.shared_intermediate_size) != (
                1, 1, 0):
            raise ValueError("a dense FFN has no experts (use kind: moe)")
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"experts_per_token must be <= num_experts, got {self.experts_per_token} > "
                             f"{self.num_experts}")
        return self

    @property
    def matrices(self) -> int:
        return 3 if self.gated else 2

    def expert_params(self, hidden: int) -> int:
        """One routed expert (or the dense MLP)."""
        return self.matrices * hidden * self.intermediate_size

    def shared_params(self, hidden: int) -> int:
        return self.matrices * hidden * self.shared_intermediate_size

    def router_params(self, hidden: int) -> int:
        return hidden * self.num_experts if self.kind == "moe" else 0

    def params(self, hidden: int) -> int:
        return (self.num_experts * self.expert_params(hidden) + self.shared_params(hidden)
                + self.router_params(hidden))


class LayerGroup(_Frozen):
    """``count`` equal layers, wherever they sit in the stack (order changes neither cost nor memory)."""

    count: int = Field(gt=0)
    attention: Attention
    ffn: FFN

    def params(self, hidden: int) -> int:
        """Per layer, with its two norms."""
        return self.attention.params(hidden) + self.ffn.params(hidden) + 2 * hidden


def group_layers(layers: list[tuple[Attention, FFN]]) -> tuple[LayerGroup, ...]:
    """Equal (attention, FFN) layers merged into groups, in order of first appearance."""
    counts: dict[tuple[Attention, FFN], int] = {}
    for layer in layers:
        counts[layer] = counts.get(layer, 0) + 1
    return tuple(LayerGroup(count=n, attention=a, ffn=f) for (a, f), n in counts.items())
