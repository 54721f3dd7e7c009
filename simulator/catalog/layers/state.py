"""Mixers with a fixed state per sequence instead of KV per token: ``linear`` (Gated DeltaNet) and ``mamba``
(Mamba2). Neither keeps KV that grows with the context; both run a short convolution of ``conv_kernel`` and a
recurrence, priced by the GPU generation's pooled attention fit (``kernel_fit: pooled``).

- ``linear``: Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): ``num_kv_heads`` key heads of ``head_dim``,
  ``num_heads`` value heads of ``v_head_dim``. Weights ``D·(2·Hk·dk + 2·Hv·dv + 2·Hv)`` in (q, k, v, the output gate,
  β and α), the convolution ``(2·Hk·dk + Hv·dv)·c``, ``2·Hv + dv`` (A, dt bias, norm), ``Hv·dv·D`` out. Each sequence
  keeps a state of ``Hv·dk·dv + (c − 1)·(2·Hk·dk + Hv·dv)`` elements.
- ``mamba``: a Mamba2 mixer (Nemotron-H): ``num_heads`` heads of ``head_dim``, ``groups`` groups of B/C of
  ``state_size``. Weights ``D·(2·H·p + 2·G·N + H)`` in, ``(H·p + 2·G·N)·c`` convolution, ``3·H + H·p`` (A, D,
  dt bias, norm), ``H·p·D`` out; state ``H·p·N + (c − 1)·(H·p + 2·G·N)``.

On one of ``t`` tensor-parallel GPUs the heads, the state and the mixer's in- and out-projection GEMMs are split
``t`` ways (tensor parallelism must divide the heads, and split the key heads / B/C groups evenly or replicate each
over a whole number of ranks). The recurrence runs over a state of ``S`` elements per head: per token 4·H·S FLOPs
(update and read-out; ``S = dk·dv`` for linear attention, ``p·N`` for Mamba2) plus the chunked scan's intra-chunk
products, 2·H·(dk + dv)·``STATE_CHUNK`` (Mamba2: (N + p)); in decode a constant per sequence (the state read and
written). ``state_bytes``: the bytes of a state element where the checkpoint's SSM dtype says (default: the KV
cache's).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from simulator.catalog.layers.base import (
    AttentionShapes,
    AttentionSpec,
    attention_kind,
    grouped_heads_problem,
    grouping_problem,
    heads_problem,
    shared_problem,
)

# the chunk length of the chunked-scan kernels of linear attention and Mamba2 (their intra-chunk work per token)
STATE_CHUNK = 64


class StateMixer(AttentionSpec):
    """What the state mixers share: heads, the convolution, the state's element bytes."""

    num_heads: int = Field(default=1, gt=0)
    head_dim: int = Field(default=1, gt=0, description="linear: the key width per head; mamba: p, the head width")
    conv_kernel: int = Field(default=4, ge=1, description="the short convolution's width")
    state_bytes: float | None = Field(default=None, gt=0, description="bytes per state element (the checkpoint's "
                                      "SSM dtype; default: the KV cache's)")

    def state_element_bytes(self, kv_bytes: float) -> float:
        return self.state_bytes or kv_bytes


@attention_kind
class LinearAttention(StateMixer):
    """Gated DeltaNet (the module docstring gives its formulas)."""

    kind: Literal["linear"] = "linear"
    num_kv_heads: int = Field(default=1, gt=0, description="the key heads (num_heads: the value heads)")
    v_head_dim: int = Field(default=0, ge=0, description="value width per head")

    @model_validator(mode="after")
    def _consistent(self) -> LinearAttention:
        if self.v_head_dim <= 0:
            raise ValueError("a linear attention layer needs v_head_dim > 0")
        if problem := grouping_problem(self.num_heads, self.num_kv_heads):
            raise ValueError(problem)
        return self

    def params(self, hidden: int) -> int:
        h, d, D = self.num_heads, self.head_dim, hidden
        k, v = self.num_kv_heads * d, h * self.v_head_dim
        return D * (2 * k + 2 * v + 2 * h) + (2 * k + v) * self.conv_kernel + 2 * h + self.v_head_dim + v * D

    def state_elements(self, tensor_parallel: int = 1) -> float:
        h, d = self.num_heads, self.head_dim
        conv = (2 * self.num_kv_heads * d + h * self.v_head_dim) * (self.conv_kernel - 1)
        return (h * d * self.v_head_dim + conv) / tensor_parallel

    def shapes(self, hidden: int, tensor_parallel: int) -> AttentionShapes:
        t, D = tensor_parallel, hidden
        H = self.num_heads / t
        dk, dv, k = self.head_dim, self.v_head_dim, self.num_kv_heads * self.head_dim / t
        gemms = [(2 * k + 2 * H * dv + 2 * H, D), (D, H * dv)]
        flops = 4 * H * dk * dv + 2 * H * (dk + dv) * STATE_CHUNK
        return AttentionShapes(H, gemms, dk + dv, 2 * k + H * dv, 0, 0, int(H), self.state_elements(t), flops)

    def tensor_parallel_problem(self, tensor_parallel: int, model: str) -> str | None:
        return grouped_heads_problem(self.num_heads, self.num_kv_heads, tensor_parallel, model)


@attention_kind
class MambaMixer(StateMixer):
    """A Mamba2 mixer (the module docstring gives its formulas)."""

    kind: Literal["mamba"] = "mamba"
    state_size: int = Field(default=0, ge=0, description="N, the SSM state per head dimension")
    groups: int = Field(default=1, ge=1, description="groups sharing B and C")

    @model_validator(mode="after")
    def _consistent(self) -> MambaMixer:
        if self.state_size <= 0:
            raise ValueError("a mamba layer needs state_size > 0")
        return self

    def params(self, hidden: int) -> int:
        h, d, D = self.num_heads, self.head_dim, hidden
        inner, bc = h * d, 2 * self.groups * self.state_size
        return D * (2 * inner + bc + h) + (inner + bc) * self.conv_kernel + 3 * h + inner + inner * D

    def state_elements(self, tensor_parallel: int = 1) -> float:
        h, d = self.num_heads, self.head_dim
        conv = (h * d + 2 * self.groups * self.state_size) * (self.conv_kernel - 1)
        return (h * d * self.state_size + conv) / tensor_parallel

    def shapes(self, hidden: int, tensor_parallel: int) -> AttentionShapes:
        t, D = tensor_parallel, hidden
        H = self.num_heads / t
        p, N, bc = self.head_dim, self.state_size, 2 * self.groups * self.state_size / t
        gemms = [(2 * H * p + bc + H, D), (D, H * p)]
        flops = 4 * H * p * N + 2 * H * (N + p) * STATE_CHUNK
        return AttentionShapes(H, gemms, N + p, H * p + bc, 0, 0, int(H), self.state_elements(t), flops)

    def tensor_parallel_problem(self, tensor_parallel: int, model: str) -> str | None:
        return (heads_problem(self.num_heads, tensor_parallel, model)
                or shared_problem(self.groups, "B/C groups", tensor_parallel, model))
