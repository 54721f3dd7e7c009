"""Which LoRA adapter each request names (``lora``): Zipf popularity over the adapters, per request or per
session."""

from __future__ import annotations

import numpy as np

from simulator.catalog.prompt_reuse import zipf_probabilities
from simulator.config.engine import LoRAConfig


def adapter_popularity(config: LoRAConfig) -> np.ndarray:
    """P(adapter i) ∝ (i + 1)^−popularity for i = 0 … adapters − 1 (0: uniform)."""
    return zipf_probabilities(config.adapters, config.popularity)


def assign_adapters(config: LoRAConfig, n: int, sessions: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """Each request's adapter (−1: the base model): drawn from :func:`adapter_popularity` with probability
    ``fraction``; requests of one session (``sessions``: each request's session id) share their session's draw."""
    units = int(sessions.max()) + 1 if sessions is not None and sessions.size else n
    named = rng.random(units) < config.fraction
    drawn = rng.choice(config.adapters, size=units, p=adapter_popularity(config))
    per_unit = np.where(named, drawn, -1).astype(np.int64)
    return per_unit[sessions] if sessions is not None else per_unit
