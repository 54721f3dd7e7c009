"""A model as a stack of layer groups: each group is ``count`` equal layers of one attention kind and one FFN kind.

Everything downstream (memory, cost, KV sizing) iterates groups, never layers, so its work is independent of depth.

Attention kinds (per layer; ``t`` = tensor-parallel degree, ``d`` = head_dim, ``D`` = hidden):

- ``full``: multi-head / grouped-query / multi-query attention over the whole context.
  Weights ``D·(H + 2·G)·d`` (fused QKV) + ``H·d·D`` (O). KV elements per token: ``2·G·d``, split over ``t``
  (``ceil(G/t)`` heads per GPU: a KV head is replicated when ``t > G``).
- ``sliding``: the same over the last ``window`` tokens only (Mistral, Gemma 2/3, gpt-oss). A sequence holds at most
  ``window`` tokens of KV in such a layer. ``sinks`` (gpt-oss, full and sliding layers): one learned logit per head
  in the softmax's denominator — H parameters per layer, no KV, and no cost the kernel tables can resolve.
- ``chunked``: chunked local attention (Llama 4): a token sees the earlier tokens of its own chunk of ``window``
  tokens; KV held and attention span are at most ``window`` tokens (priced as ``sliding``: an upper bound).
- ``linear``: Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): ``num_kv_heads`` key heads of ``head_dim``,
  ``num_heads`` value heads of ``v_head_dim``, a short convolution of ``conv_kernel``. Weights
  ``D·(2·Hk·dk + 2·Hv·dv + 2·Hv)`` in (q, k, v, the output gate, β and α), the convolution
  ``(2·Hk·dk + Hv·dv)·c``, ``Hv·dv·D`` out. No KV grows with the context: each sequence keeps a state of
  ``Hv·dk·dv + (c − 1)·(2·Hk·dk + Hv·dv)`` elements (split over ``t``).
- ``mamba``: a Mamba2 mixer (Nemotron-H): ``num_heads`` heads of ``head_dim``, ``groups`` groups of B/C of
  ``state_size``, a convolution of ``conv_kernel``. Weights ``D·(2·H·p + 2·G·N + H)`` in, ``(H·p + 2·G·N)·c``
  convolution, ``3·H + H·p`` (A, D, dt bias, norm), ``H·p·D`` out; state ``H·p·N + (c − 1)·(H·p + 2·G·N)``.
- ``none``: no attention block in this layer (an MLP-only layer of a hybrid stack).
- ``mla``: multi-head latent attention (DeepSeek-V2/V3, Kimi-K2). Queries through a low-rank ``q_lora_rank``
  projection (or a full one when it is 0), keys and values from one compressed latent of ``kv_lora_rank`` plus a
  shared rotary key of ``qk_rope_head_dim``. Weights: ``D·r_q + r_q·H·(n + r)`` (or ``D·H·(n + r)``) for queries,
  ``D·(r_kv + r)`` for the latent, ``r_kv·H·(n + v)`` to decompress K and V, ``H·v·D`` (O), with ``n`` =
  qk_nope_head_dim, ``r`` = qk_rope_head_dim, ``v`` = v_head_dim. KV elements per token: ``r_kv + r`` — the same
  latent on every tensor-parallel rank (TP does not split it).
  With DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5: ``index_topk`` > 0) each query attends to the
  ``index_topk`` cached tokens a lightning indexer picks: ``index_heads`` heads of ``index_head_dim`` score every
  cached token (ReLU of query·key, weighted over the heads, in FP8) and the top ``index_topk`` are kept. Its
  weights ``r_q·H_I·d_I`` (``D·H_I·d_I`` without ``q_lora_rank``) for queries, ``D·d_I`` for its key, ``2·d_I``
  its key's LayerNorm, ``D·H_I`` the head weights — replicated on every tensor-parallel rank, as the engines run
  it; it caches one FP8 key of ``d_I`` elements and an fp32 scale (``d_I + 4`` bytes) per token on every rank. A
  layer with ``index_shared`` reuses the selection of the layer before (GLM-5.2's ``indexer_types``): no indexer.

FFN kinds:

- ``dense``: gated (SwiGLU/GeGLU: up, gate, down = ``3·D·I``) or not (``2·D·I``).
- ``none``: no FFN in this layer (a mixer-only layer of a hybrid stack).
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

MAX_LAYERS = 10_000  # layers of one model: the deepest served models have a few hundred

STATE_KINDS = ("linear", "mamba")  # a fixed state per sequence instead of KV per token
INDEX_SCALE_BYTES = 4  # DeepSeek Sparse Attention's cached index key: FP8 elements and one fp32 scale per token


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Attention(_Frozen):
    """One layer's attention (see the module docstring for the weight and KV formulas)."""

    kind: Literal["full", "sliding", "chunked", "mla", "linear", "mamba", "none"] = "full"
    num_heads: int = Field(default=1, gt=0)
    num_kv_heads: int = Field(default=1, gt=0)
    head_dim: int = Field(default=1, gt=0,
                          description="query/key width per head (MLA: qk_nope_head_dim + qk_rope_head_dim)")
    window: int = Field(default=0, ge=0, description="sliding: tokens kept; chunked: the chunk size")
    q_lora_rank: int = Field(default=0, ge=0)
    kv_lora_rank: int = Field(default=0, ge=0)
    qk_rope_head_dim: int = Field(default=0, ge=0)
    v_head_dim: int = Field(default=0, ge=0, description="MLA, linear: value width per head (others: head_dim)")
    output_gate: bool = Field(default=False, description="full: a sigmoid gate on the output (one more H·d proj.)")
    sinks: bool = Field(default=False, description="full, sliding: learned attention sinks (gpt-oss): one logit "
                        "per head added to the softmax's denominator — H parameters, no KV, no measurable kernel cost")
    qk_norm_across_heads: bool = Field(
        default=False, description="full, sliding, chunked: queries and keys RMS-normalised over all the layer's heads "
        "at once (MiniMax-M2's qk_norm_type per_layer), not head by head: under tensor parallelism each GPU holds some "
        "heads, so every token's sum of squares is all-reduced (simulator.cost.roofline)")
    conv_kernel: int = Field(default=4, ge=1, description="linear, mamba: the short convolution's width")
    state_size: int = Field(default=0, ge=0, description="mamba: N, the SSM state per head dimension")
    groups: int = Field(default=1, ge=1, description="mamba: groups sharing B and C")
    state_bytes: float | None = Field(default=None, gt=0, description="linear, mamba: bytes per state element "
                                      "(the checkpoint's SSM dtype; default: the KV cache's)")
    index_topk: int = Field(default=0, ge=0, description="mla: cached tokens each query attends to, picked by a "
                            "lightning indexer (DeepSeek Sparse Attention); 0 = all of them")
    index_heads: int = Field(default=0, ge=0, description="mla with index_topk: the indexer's heads")
    index_head_dim: int = Field(default=0, ge=0, description="mla with index_topk: the indexer's head width")
    index_shared: bool = Field(default=False, description="mla with index_topk: this layer reuses the selection of "
                               "the layer before (no indexer of its own)")

    @model_validator(mode="after")
    def _consistent(self) -> Attention:
        if self.qk_norm_across_heads and self.kind not in ("full", "sliding", "chunked"):
            raise ValueError(f"qk_norm_across_heads applies to full, sliding and chunked attention, not {self.kind}")
        if (self.index_topk or self.index_shared) and self.kind != "mla":
            raise ValueError(f"index_topk (sparse attention) applies to mla layers, not {self.kind}")
        if self.index_topk and not self.index_shared and (self.index_heads <= 0 or self.index_head_dim <= 0):
            raise ValueError("an mla layer with index_topk needs index_heads > 0 and index_head_dim > 0 (its indexer)")
        if self.index_shared and not self.index_topk:
            raise ValueError("index_shared reuses a sparse selection: it needs index_topk > 0")
        if self.kind in ("sliding", "chunked") and self.window <= 0:
            raise ValueError(f"a {self.kind} attention layer needs window > 0")
        if self.kind == "mla":
            if self.kv_lora_rank <= 0 or self.v_head_dim <= 0:
                raise ValueError("an mla attention layer needs kv_lora_rank > 0 and v_head_dim > 0")
            if self.qk_rope_head_dim >= self.head_dim:
                raise ValueError(f"qk_rope_head_dim ({self.qk_rope_head_dim}) must be smaller than head_dim "
                                 f"({self.head_dim} = qk_nope_head_dim + qk_rope_head_dim)")
        elif self.kind == "mamba" and self.state_size <= 0:
            raise ValueError("a mamba layer needs state_size > 0")
        elif self.kind == "linear" and self.v_head_dim <= 0:
            raise ValueError("a linear attention layer needs v_head_dim > 0")
        elif self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        return self

    def params(self, hidden: int) -> int:
        h, d, D = self.num_heads, self.head_dim, hidden
        if self.kind == "none":
            return 0
        if self.kind == "linear":
            k, v = self.num_kv_heads * d, h * self.v_head_dim
            return D * (2 * k + 2 * v + 2 * h) + (2 * k + v) * self.conv_kernel + 2 * h + self.v_head_dim + v * D
        if self.kind == "mamba":
            inner, bc = h * d, 2 * self.groups * self.state_size
            return D * (2 * inner + bc + h) + (inner + bc) * self.conv_kernel + 3 * h + inner + inner * D
        if self.kind != "mla":
            sinks = h if self.sinks else 0
            return D * (h * (2 if self.output_gate else 1) + 2 * self.num_kv_heads) * d + h * d * D + sinks
        query = hidden * self.q_lora_rank + self.q_lora_rank * h * d if self.q_lora_rank else hidden * h * d
        latent = hidden * (self.kv_lora_rank + self.qk_rope_head_dim)
        decompress = self.kv_lora_rank * h * (d - self.qk_rope_head_dim + self.v_head_dim)
        norms = self.kv_lora_rank + self.q_lora_rank
        return query + latent + decompress + h * self.v_head_dim * hidden + norms + self.indexer_params(hidden)

    @property
    def has_indexer(self) -> bool:
        """Does this layer run a lightning indexer of its own (DeepSeek Sparse Attention)?"""
        return self.index_topk > 0 and not self.index_shared

    def indexer_params(self, hidden: int) -> int:
        if not self.has_indexer:
            return 0
        heads, width = self.index_heads, self.index_head_dim
        query = (self.q_lora_rank or hidden) * heads * width
        return query + hidden * width + 2 * width + hidden * heads

    def kv_elements_per_token(self, tensor_parallel: int = 1) -> int:
        """K and V elements one token stores in this layer on one GPU (0 for layers with a state instead)."""
        if self.kind == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        if self.kind in (*STATE_KINDS, "none"):
            return 0
        return 2 * math.ceil(self.num_kv_heads / tensor_parallel) * self.head_dim

    def kv_bytes_per_token(self, bytes_per_element: float, tensor_parallel: int = 1) -> float:
        """Bytes one token stores in this layer on one GPU: its K and V elements, and an indexer's FP8 key and
        scale (whatever the KV cache's format)."""
        index = self.index_head_dim + INDEX_SCALE_BYTES if self.has_indexer else 0
        return bytes_per_element * self.kv_elements_per_token(tensor_parallel) + index

    def state_elements(self, tensor_parallel: int = 1) -> float:
        """Elements of the fixed state one sequence keeps in this layer on one GPU (0 for KV layers)."""
        h, d, t = self.num_heads, self.head_dim, tensor_parallel
        if self.kind == "linear":
            conv = (2 * self.num_kv_heads * d + h * self.v_head_dim) * (self.conv_kernel - 1)
            return (h * d * self.v_head_dim + conv) / t
        if self.kind == "mamba":
            conv = (h * d + 2 * self.groups * self.state_size) * (self.conv_kernel - 1)
            return (h * d * self.state_size + conv) / t
        return 0.0

    @property
    def span(self) -> int:
        """Most tokens a sequence keeps in this layer (0: the whole context)."""
        return self.window if self.kind in ("sliding", "chunked") else 0

    @property
    def attended(self) -> int:
        """Most cached tokens a query attends to (0: the whole context): the span, or a sparse selection's top-k."""
        return self.span or self.index_topk


class FFN(_Frozen):
    """One layer's feed-forward block."""

    kind: Literal["dense", "moe", "none"] = "dense"
    intermediate_size: int = Field(default=1, gt=0, description="dense: the MLP width; moe: each routed expert's")
    gated: bool = True
    num_experts: int = Field(default=1, ge=1)
    experts_per_token: int = Field(default=1, ge=1)
    shared_intermediate_size: int = Field(default=0, ge=0, description="moe: the shared experts' widths summed")

    @model_validator(mode="after")
    def _consistent(self) -> FFN:
        if self.kind != "moe" and (self.num_experts, self.experts_per_token, self.shared_intermediate_size) != (
                1, 1, 0):
            raise ValueError(f"a {self.kind} FFN has no experts (use kind: moe)")
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
        if self.kind == "none":
            return 0
        return (self.num_experts * self.expert_params(hidden) + self.shared_params(hidden)
                + self.router_params(hidden))


class LayerGroup(_Frozen):
    """``count`` equal layers, wherever they sit in the stack (order changes neither cost nor memory)."""

    count: int = Field(gt=0, le=MAX_LAYERS)
    attention: Attention
    ffn: FFN

    def params(self, hidden: int) -> int:
        """Per layer, with a norm before each of its blocks."""
        blocks = (self.attention.kind != "none") + (self.ffn.kind != "none")
        return self.attention.params(hidden) + self.ffn.params(hidden) + blocks * hidden


def group_layers(layers: list[tuple[Attention, FFN]]) -> tuple[LayerGroup, ...]:
    """Equal (attention, FFN) layers merged into groups, in order of first appearance."""
    counts: dict[tuple[Attention, FFN], int] = {}
    for layer in layers:
        counts[layer] = counts.get(layer, 0) + 1
    return tuple(LayerGroup(count=n, attention=a, ffn=f) for (a, f), n in counts.items())
