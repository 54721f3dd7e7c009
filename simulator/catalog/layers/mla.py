"""``mla``: multi-head latent attention (DeepSeek-V2/V3, Kimi-K2), optionally sparse (DeepSeek Sparse Attention).

Queries go through a low-rank ``q_lora_rank`` projection (or a full one when it is 0), keys and values come from one
compressed latent of ``kv_lora_rank`` plus a shared rotary key of ``qk_rope_head_dim``. With ``H`` heads, ``D`` =
hidden, ``n`` = qk_nope_head_dim, ``r`` = qk_rope_head_dim (``head_dim`` = n + r), ``v`` = v_head_dim:

- weights ``D·r_q + r_q·H·(n + r)`` (or ``D·H·(n + r)``) for queries, ``D·(r_kv + r)`` for the latent,
  ``r_kv·H·(n + v)`` to decompress K and V, ``H·v·D`` (O), and the two latents' norms ``r_kv + r_q``;
- KV elements per token ``r_kv + r``: the same latent on every tensor-parallel rank (TP does not split it; it
  splits the heads only). ``num_kv_heads`` is accepted and unused: the latent is one.
- GEMMs per GPU (``H/t`` heads): queries (T × D)·(D × r_q) then (T × r_q)·(r_q × H·d_qk) (one (D × H·d_qk) GEMM
  without ``q_lora_rank``); the latent (T × D)·(D × (r_kv + r)) on every rank; the up-projection of the latent to
  the heads' keys and values (T × r_kv)·(r_kv × H·(n + v)) — decompression in prefill, and in decode the same weights
  absorbed into the query and the output (the same FLOPs per token and weight bytes); output (T × H·v)·(H·v × D).
  Prefill attention runs decompressed (H heads, d_qk + v wide, K/V of H·(d_qk + v) elements per new token; cached
  latent tokens of a later chunk are read, not re-decompressed); decode
  attention runs over the latent as multi-query attention (one KV "head" of r_kv + r elements, d_qk = r_kv + r,
  d_v = r_kv). Priced by the framework's MLA kernels (``kernel_fit: latent``).

With DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5: ``index_topk`` > 0) each query attends to the ``index_topk``
cached tokens a lightning indexer picks: ``index_heads`` heads of ``index_head_dim`` score every cached token (ReLU
of query·key, weighted over the heads, in FP8) and the top ``index_topk`` are kept. Its weights ``r_q·H_I·d_I``
(``D·H_I·d_I`` without ``q_lora_rank``) for queries, ``D·d_I`` for its key, ``2·d_I`` its key's LayerNorm, ``D·H_I``
the head weights — replicated on every tensor-parallel rank, as the engines run it, and so are its GEMMs: queries
(T × r_q)·(r_q × H_I·d_I), its key (T × D)·(D × d_I), the head weights (T × D)·(D × H_I). It caches one FP8 key of
``d_I`` elements and an fp32 scale (``d_I + 4`` bytes) per token on every rank. A layer with ``index_shared`` reuses
the selection of the layer before (GLM-5.2's ``indexer_types``): no indexer.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from simulator.catalog.layers.base import (
    AttentionShapes,
    AttentionSpec,
    IndexerShape,
    KernelFit,
    attention_kind,
    heads_problem,
)

INDEX_SCALE_BYTES = 4  # DeepSeek Sparse Attention's cached index key: FP8 elements and one fp32 scale per token


@attention_kind
class LatentAttention(AttentionSpec):
    """Multi-head latent attention (the module docstring gives its formulas)."""

    kind: Literal["mla"] = "mla"
    kernel_fit: ClassVar[KernelFit] = "latent"
    num_heads: int = Field(default=1, gt=0)
    num_kv_heads: int = Field(default=1, gt=0, description="unused: the latent is one, whole on every rank")
    head_dim: int = Field(default=1, gt=0, description="query/key width per head: qk_nope_head_dim + qk_rope_head_dim")
    q_lora_rank: int = Field(default=0, ge=0)
    kv_lora_rank: int = Field(default=0, ge=0)
    qk_rope_head_dim: int = Field(default=0, ge=0)
    v_head_dim: int = Field(default=0, ge=0, description="value width per head")
    index_topk: int = Field(default=0, ge=0, description="cached tokens each query attends to, picked by a "
                            "lightning indexer (DeepSeek Sparse Attention); 0 = all of them")
    index_heads: int = Field(default=0, ge=0, description="with index_topk: the indexer's heads")
    index_head_dim: int = Field(default=0, ge=0, description="with index_topk: the indexer's head width")
    index_shared: bool = Field(default=False, description="with index_topk: this layer reuses the selection of the "
                               "layer before (no indexer of its own)")

    @model_validator(mode="after")
    def _consistent(self) -> LatentAttention:
        if self.index_topk and not self.index_shared and (self.index_heads <= 0 or self.index_head_dim <= 0):
            raise ValueError("an mla layer with index_topk needs index_heads > 0 and index_head_dim > 0 (its indexer)")
        if self.index_shared and not self.index_topk:
            raise ValueError("index_shared reuses a sparse selection: it needs index_topk > 0")
        if self.kv_lora_rank <= 0 or self.v_head_dim <= 0:
            raise ValueError("an mla attention layer needs kv_lora_rank > 0 and v_head_dim > 0")
        if self.qk_rope_head_dim >= self.head_dim:
            raise ValueError(f"qk_rope_head_dim ({self.qk_rope_head_dim}) must be smaller than head_dim "
                             f"({self.head_dim} = qk_nope_head_dim + qk_rope_head_dim)")
        return self

    @property
    def has_indexer(self) -> bool:
        """Does this layer run a lightning indexer of its own?"""
        return self.index_topk > 0 and not self.index_shared

    def params(self, hidden: int) -> int:
        h, d = self.num_heads, self.head_dim
        query = hidden * self.q_lora_rank + self.q_lora_rank * h * d if self.q_lora_rank else hidden * h * d
        latent = hidden * (self.kv_lora_rank + self.qk_rope_head_dim)
        decompress = self.kv_lora_rank * h * (d - self.qk_rope_head_dim + self.v_head_dim)
        norms = self.kv_lora_rank + self.q_lora_rank
        return query + latent + decompress + h * self.v_head_dim * hidden + norms + self.indexer_params(hidden)

    def indexer_params(self, hidden: int) -> int:
        if not self.has_indexer:
            return 0
        heads, width = self.index_heads, self.index_head_dim
        query = (self.q_lora_rank or hidden) * heads * width
        return query + hidden * width + 2 * width + hidden * heads

    def kv_elements_per_token(self, tensor_parallel: int = 1) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    def kv_bytes_per_token(self, bytes_per_element: float, tensor_parallel: int = 1) -> float:
        """The latent's elements, and an indexer's FP8 key and scale (whatever the KV cache's format)."""
        index = self.index_head_dim + INDEX_SCALE_BYTES if self.has_indexer else 0
        return bytes_per_element * self.kv_elements_per_token(tensor_parallel) + index

    def shapes(self, hidden: int, tensor_parallel: int) -> AttentionShapes:
        D, H = hidden, self.num_heads / tensor_parallel
        rope, nope, v = self.qk_rope_head_dim, self.head_dim - self.qk_rope_head_dim, self.v_head_dim
        query = ([(self.q_lora_rank, D), (H * self.head_dim, self.q_lora_rank)] if self.q_lora_rank
                 else [(H * self.head_dim, D)])
        gemms = [*query, (self.kv_lora_rank + rope, D), (H * (nope + v), self.kv_lora_rank), (D, H * v)]
        if self.has_indexer:  # replicated: every GPU scores every cached token for all of its queries
            gemms += [(self.index_heads * self.index_head_dim, self.q_lora_rank or D), (self.index_head_dim, D),
                      (self.index_heads, D)]
        latent = self.kv_lora_rank + rope
        return AttentionShapes(H, gemms, self.head_dim + v, H * (self.head_dim + v), latent + self.kv_lora_rank,
                               latent, 1)

    @property
    def attended(self) -> int:
        return self.index_topk

    @property
    def indexer(self) -> IndexerShape | None:
        if not self.has_indexer:
            return None
        return IndexerShape(self.index_heads, self.index_head_dim, self.index_head_dim + INDEX_SCALE_BYTES)

    @property
    def label(self) -> str:
        return f"mla(top-{self.index_topk})" if self.index_topk else "mla"

    def tensor_parallel_problem(self, tensor_parallel: int, model: str) -> str | None:
        return heads_problem(self.num_heads, tensor_parallel, model)
