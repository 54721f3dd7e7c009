"""``none``: a layer without an attention block (an MLP-only layer of a hybrid stack): no weights, no KV, no norm,
no kernels, nothing to split."""

from __future__ import annotations

from typing import ClassVar, Literal

from simulator.catalog.layers.base import AttentionShapes, AttentionSpec, attention_kind


@attention_kind
class NoAttention(AttentionSpec):
    """No attention block in this layer."""

    kind: Literal["none"] = "none"
    block: ClassVar[bool] = False

    def params(self, hidden: int) -> int:
        return 0

    def shapes(self, hidden: int, tensor_parallel: int) -> AttentionShapes:
        return AttentionShapes(0.0, [], 0, 0, 0, 0, 0)
