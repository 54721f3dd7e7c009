"""Layer kinds: one spec class per attention kind and per FFN kind (:mod:`simulator.catalog.layers.base` says what
each answers). A module registers its kinds when imported, and this package imports every module it holds: a new
kind is one module here (or a module of the user's, imported before the model loads). The classes named below are
the public names."""

import importlib
import pkgutil

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

for _module in pkgutil.iter_modules(__path__):  # every kind's module registers itself, named here or not
    importlib.import_module(f"{__name__}.{_module.name}")
