"""A KV allocator written as a built-in one is, in one module (as ``simulator/kv/headroom.py`` would be): its
config class beside its class, registered together. A fixture of :mod:`tests.plugins.test_recipes`.

A paged pool that leaves ``headroom_blocks`` of its blocks unused (say, for another tenant's cache).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from simulator.config.engine import KVCacheBase
from simulator.kv.base import KV_ALLOCATORS
from simulator.kv.paged import PagedAllocator


class HeadroomKVConfig(KVCacheBase):
    kind: Literal["headroom"]
    headroom_blocks: int = Field(ge=0, description="blocks of the pool no sequence may take")


@KV_ALLOCATORS.register("headroom", config=HeadroomKVConfig)
class HeadroomAllocator(PagedAllocator):
    @classmethod
    def from_config(cls, config, num_blocks: int, block_size: int, max_model_len: int) -> PagedAllocator:
        return cls(num_blocks - config.headroom_blocks, block_size)
