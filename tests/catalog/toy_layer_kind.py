"""A new attention kind in one file, as docs/extending.md's recipe adds one: ``toy``, multi-query attention over
one shared KV vector of ``latent`` elements per token (whole on every tensor-parallel rank), optionally over a
sliding ``window``. Importing this module registers it.

With ``H`` heads of ``head_dim`` d and ``D`` = hidden: weights ``D·H·d`` (Q) + ``D·latent`` (the shared KV) +
``H·d·D`` (O); KV elements per token ``latent``; GEMMs per GPU (H/t heads): (T × D)·(D × H·d/t),
(T × D)·(D × latent), (T × H·d/t)·(H·d/t × D); the generation's pooled attention fit prices its kernels.
Tensor parallelism must divide the heads."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from simulator.catalog.layers import AttentionShapes, AttentionSpec, attention_kind
from simulator.catalog.layers.base import heads_problem


@attention_kind
class ToyAttention(AttentionSpec):
    kind: Literal["toy"] = "toy"
    num_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    latent: int = Field(gt=0, description="KV elements per token, shared by every head")
    window: int = Field(default=0, ge=0, description="tokens kept (0: the whole context)")

    def params(self, hidden: int) -> int:
        return hidden * self.num_heads * self.head_dim + hidden * self.latent + self.num_heads * self.head_dim * hidden

    def kv_elements_per_token(self, tensor_parallel: int = 1) -> int:
        return self.latent

    @property
    def span(self) -> int:
        return self.window

    def shapes(self, hidden: int, tensor_parallel: int) -> AttentionShapes:
        H, d = self.num_heads / tensor_parallel, self.head_dim
        gemms = [(H * d, hidden), (self.latent, hidden), (hidden, H * d)]
        return AttentionShapes(H, gemms, 2 * d, self.latent, 2 * d, self.latent, 1)

    def tensor_parallel_problem(self, tensor_parallel: int, model: str) -> str | None:
        return heads_problem(self.num_heads, tensor_parallel, model)
