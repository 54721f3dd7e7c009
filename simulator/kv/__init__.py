"""KV-cache memory: the allocator contract, the paged and contiguous allocators, prefix caching and sizing."""

from simulator.kv.base import KV_ALLOCATORS, KVAllocator, MemoryBreakdown
from simulator.kv.contiguous import ContiguousAllocator
from simulator.kv.paged import PagedAllocator, PrefixCachingAllocator
from simulator.kv.sizing import KVBudget, kv_budget, kv_cache_bytes, kv_dtype

__all__ = [
    "KV_ALLOCATORS", "ContiguousAllocator", "KVAllocator", "KVBudget", "MemoryBreakdown", "PagedAllocator",
    "PrefixCachingAllocator", "kv_budget", "kv_cache_bytes", "kv_dtype",
]
