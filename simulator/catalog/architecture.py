"""A model as a stack of layer groups: each group is ``count`` equal layers of one attention kind and one FFN kind.

Everything downstream (memory, cost, KV sizing) iterates groups, never layers, so its work is independent of depth.
Each kind is a spec class of :mod:`simulator.catalog.layers` — its fields, its validation and its formulas
(weights, KV or state bytes, the tokens it keeps, the shapes the cost model prices), one module per family of
kinds: softmax attention (``full``, ``sliding``, ``chunked``: :mod:`~simulator.catalog.layers.softmax`), latent
attention (``mla``, with DeepSeek Sparse Attention: :mod:`~simulator.catalog.layers.mla`), the fixed-state mixers
(``linear``, ``mamba``: :mod:`~simulator.catalog.layers.state`), no attention (``none``:
:mod:`~simulator.catalog.layers.none`), and the FFNs (``dense``, ``moe``, ``none``:
:mod:`~simulator.catalog.layers.ffn`).

A layer's weights are its attention's and its FFN's plus a norm (``D`` weights) before each block it has. Total
parameters count every weight; active parameters all but the routed experts a token is not sent to
(:attr:`simulator.catalog.ModelSpec.active_params`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from simulator.catalog.layers import FFN, Attention

MAX_LAYERS = 10_000  # layers of one model: the deepest served models have a few hundred


class LayerGroup(BaseModel):
    """``count`` equal layers, wherever they sit in the stack (order changes neither cost nor memory)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    count: int = Field(gt=0, le=MAX_LAYERS)
    attention: Attention
    ffn: FFN

    def params(self, hidden: int) -> int:
        """Per layer, with a norm before each of its blocks."""
        blocks = self.attention.block + self.ffn.block
        return self.attention.params(hidden) + self.ffn.params(hidden) + blocks * hidden


def group_layers(layers: list[tuple[Attention, FFN]]) -> tuple[LayerGroup, ...]:
    """Equal (attention, FFN) layers merged into groups, in order of first appearance."""
    counts: dict[tuple[Attention, FFN], int] = {}
    for layer in layers:
        counts[layer] = counts.get(layer, 0) + 1
    return tuple(LayerGroup(count=n, attention=a, ffn=f) for (a, f), n in counts.items())
