"""KV-cache memory: the allocator contract, the paged allocator and sizing."""

from simulator.kv.base import KV_ALLOCATORS, KVAllocator
from simulator.kv.paged import PagedAllocator
from simulator.kv.sizing import KVBudget, kv_budget, kv_cache_bytes, kv_dtype

__all__ = ["KV_ALLOCATORS", "KVAllocator", "KVBudget", "PagedAllocator", "kv_budget", "kv_cache_bytes", "kv_dtype"]
