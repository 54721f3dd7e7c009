"""Softmax attention over K/V heads: ``full``, ``sliding`` and ``chunked`` (priced by the framework's own kernels).

Per layer, with ``t``-way tensor parallelism, ``H`` heads, ``G`` KV heads, ``d`` = head_dim, ``D`` = hidden:

- ``full``: multi-head / grouped-query / multi-query attention over the whole context.
  Weights ``D·(H + 2·G)·d`` (fused QKV) + ``H·d·D`` (O); ``output_gate`` (Qwen3-Next) adds ``D·H·d``, a sigmoid gate
  on the output; ``sinks`` (gpt-oss) one learned logit per head in the softmax's denominator — H parameters, no KV,
  and no cost the kernel tables can resolve. KV elements per token: ``2·G·d``, split over ``t`` (``ceil(G/t)`` heads
  per GPU: a KV head is replicated when ``t > G``).
  ``values_are_keys`` (Gemma 4's ``attention_k_eq_v`` on its global layers): no value projection — the keys serve
  as values — so ``D·G·d`` fewer weights and QKV columns; the cache is still taken to hold both, as the engines'
  attention kernels read a K and a V.
- ``sliding``: the same over the last ``window`` tokens only (Mistral, Gemma 2/3, gpt-oss): a sequence holds at
  most ``window`` tokens of KV in such a layer.
- ``chunked``: chunked local attention (Llama 4): a token sees the earlier tokens of its own chunk of ``window``
  tokens; KV held and attention span are at most ``window`` tokens (priced as ``sliding``: an upper bound).

GEMMs per GPU (``H/t`` heads, ``ceil(G/t)`` KV heads): QKV (T × D)·(D × (H + 2G)·d) (the gate's ``H·d`` more
columns with ``output_gate``), output (T × H·d)·(H·d × D). ``qk_norm_across_heads`` (MiniMax-M2's ``qk_norm_type:
per_layer``): queries and keys RMS-normalised over all the layer's heads at once, so under tensor parallelism every
token's sum of squares is all-reduced (:mod:`simulator.cost.roofline`). Tensor parallelism must divide the heads,
and split the KV heads evenly or replicate each over a whole number of ranks.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from simulator.catalog.layers.base import (
    AttentionShapes,
    AttentionSpec,
    KernelFit,
    attention_kind,
    grouped_heads_problem,
    grouping_problem,
)


class SoftmaxAttention(AttentionSpec):
    """What the three softmax kinds share: heads, KV heads and their width."""

    kernel_fit: ClassVar[KernelFit] = "framework"
    num_heads: int = Field(default=1, gt=0)
    num_kv_heads: int = Field(default=1, gt=0)
    head_dim: int = Field(default=1, gt=0, description="query/key/value width per head")
    output_gate: bool = Field(default=False, description="a sigmoid gate on the output (one more H·d projection)")
    sinks: bool = Field(default=False, description="learned attention sinks (gpt-oss): one logit per head added to "
                        "the softmax's denominator — H parameters, no KV, no measurable kernel cost")
    qk_norm_across_heads: bool = Field(
        default=False, description="queries and keys RMS-normalised over all the layer's heads at once (MiniMax-M2's "
        "qk_norm_type per_layer), not head by head: under tensor parallelism each GPU holds some heads, so every "
        "token's sum of squares is all-reduced (simulator.cost.roofline)")

    values_are_keys: bool = Field(default=False, description="no value projection: the keys serve as values "
                                  "(Gemma 4's attention_k_eq_v)")

    @model_validator(mode="after")
    def _grouped(self) -> SoftmaxAttention:
        if problem := grouping_problem(self.num_heads, self.num_kv_heads):
            raise ValueError(problem)
        return self

    def params(self, hidden: int) -> int:
        h, d, D = self.num_heads, self.head_dim, hidden
        sinks = h if self.sinks else 0
        projections = h * (2 if self.output_gate else 1) + self.kv_projections * self.num_kv_heads
        return D * projections * d + h * d * D + sinks

    @property
    def kv_projections(self) -> int:
        """Projections per KV head: a key and a value, or the key alone where it serves as the value."""
        return 1 if self.values_are_keys else 2

    def kv_elements_per_token(self, tensor_parallel: int = 1) -> int:
        return 2 * math.ceil(self.num_kv_heads / tensor_parallel) * self.head_dim

    def shapes(self, hidden: int, tensor_parallel: int) -> AttentionShapes:
        t, D = tensor_parallel, hidden
        H = self.num_heads / t
        G, d = math.ceil(self.num_kv_heads / t), self.head_dim
        queries = H * (2 if self.output_gate else 1)
        return AttentionShapes(H, [((queries + self.kv_projections * G) * d, D), (D, H * d)], 2 * d, 2 * G * d, 2 * d,
                               2 * G * d, G,
                               head_dim=d)

    @property
    def cross_head_norm(self) -> bool:
        return self.qk_norm_across_heads

    def tensor_parallel_problem(self, tensor_parallel: int, model: str) -> str | None:
        return grouped_heads_problem(self.num_heads, self.num_kv_heads, tensor_parallel, model)


@attention_kind
class FullAttention(SoftmaxAttention):
    """Attention over the whole context."""

    kind: Literal["full"] = "full"


class WindowedAttention(SoftmaxAttention):
    """Attention over at most ``window`` tokens, which is all a sequence keeps."""

    window: int = Field(gt=0, description="sliding: the tokens kept; chunked: the chunk size")

    @property
    def span(self) -> int:
        return self.window


@attention_kind
class SlidingAttention(WindowedAttention):
    """A sliding window of the last ``window`` tokens."""

    kind: Literal["sliding"] = "sliding"


@attention_kind
class ChunkedAttention(WindowedAttention):
    """Chunked local attention: the earlier tokens of the token's own chunk of ``window``."""

    kind: Literal["chunked"] = "chunked"
