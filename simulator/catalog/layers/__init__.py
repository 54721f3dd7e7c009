"""Layer kinds: one spec class per attention kind and per FFN kind (:mod:`simulator.catalog.layers.base` says what
each answers). A module registers its kinds when imported: a new kind is a module here whose class is imported
below (or a module of the user's, imported before the model loads)."""

from simulator.catalog.layers.base import (
    ATTENTION_KINDS,
    FFN,
    FFN_KINDS,
    Attention,
    AttentionShapes,
    AttentionSpec,
    FFNSpec,
    IndexerShape,
    Routing,
    attention_kind,
    ffn_kind,
)
from simulator.catalog.layers.ffn import DenseFFN, MoEFFN, NoFFN
from simulator.catalog.layers.mla import LatentAttention
from simulator.catalog.layers.none import NoAttention
from simulator.catalog.layers.softmax import ChunkedAttention, FullAttention, SlidingAttention
from simulator.catalog.layers.state import LinearAttention, MambaMixer

__all__ = [
    "ATTENTION_KINDS", "FFN", "FFN_KINDS", "Attention", "AttentionShapes", "AttentionSpec", "ChunkedAttention",
    "DenseFFN", "FFNSpec", "FullAttention", "IndexerShape", "LatentAttention", "LinearAttention", "MambaMixer",
    "MoEFFN", "NoAttention", "NoFFN", "Routing", "SlidingAttention", "attention_kind", "ffn_kind",
]
