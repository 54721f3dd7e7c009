"""KV tiers below HBM (simulator.kv.tiers): write queues, capacity, loads and their time, derived by hand; the
bookkeeping under random traffic; and one replica whose prompt comes back from host memory."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

import simulator
from simulator.config import ExperimentConfig
from simulator.kv.paged import TieredPrefixCachingAllocator
from simulator.kv.tiers import KVTiers, Tier
from tests.helpers import experiment
from tests.kv.test_kv_allocators import PrefixCacheMachine


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def tiers(*specs: tuple[str, int, float, float, float, float], policy: str = "evicted", overlap: str = "none",
          layers: int = 1, clock: Clock | None = None) -> KVTiers:
    """Tiers from (medium, capacity blocks, read s, write s, latency s, backlog s) per block, one GPU of 1 byte
    blocks."""
    return KVTiers([Tier(*spec) for spec in specs], policy=policy, overlap=overlap, block_bytes=1.0, layers=layers,
                   clock=clock or Clock(), totals=defaultdict(float))


def test_writes_queue_on_the_link_and_past_the_backlog_are_dropped():
    """10 ms per block, 25 ms of backlog: blocks issued together start at 0, 10, 20 ms; the fourth would start at
    30 ms > 25 ms and is dropped, as is the fifth. A block is readable once its write ends."""
    clock = Clock()
    store = tiers(("cpu", 100, 0.001, 0.010, 0.0, 0.025), clock=clock)
    keys = [(k, k) for k in range(5)]
    store.write(keys)
    assert store.totals["cpu_written"] == 3 and store.totals["cpu_dropped"] == 2
    assert list(store.tiers[0].blocks.values()) == pytest.approx([0.010, 0.020, 0.030])
    clock.now = 0.020
    assert store.run_length(keys, 0) == 2  # the third lands at 30 ms
    clock.now = 0.030
    assert store.run_length(keys, 0) == 3 and store.run_length(keys, 1) == 2


def test_a_full_tier_moves_its_least_recently_used_block_down_and_the_last_drops_it():
    """Capacity 2 over capacity 1: writing a, b, c moves a down; then d moves b down, which pushes a out."""
    clock = Clock()
    store = tiers(("cpu", 2, 0.0, 0.0, 0.0, 1.0), ("ssd", 1, 0.0, 0.0, 0.0, 1.0), clock=clock)
    a, b, c, d = [(k, 0) for k in range(4)]
    store.write([a, b, c])
    assert list(store.tiers[0].blocks) == [b, c] and list(store.tiers[1].blocks) == [a]
    store.write([b])  # refreshed, not written again: c is now the least recently used
    store.write([d])
    assert list(store.tiers[0].blocks) == [b, d] and list(store.tiers[1].blocks) == [c]
    assert store.totals["cpu_written"] == 4 and store.totals["cpu_moved_down"] == 2
    assert store.totals["ssd_written"] == 2 and store.totals["ssd_moved_down"] == 1


def test_a_load_costs_latency_plus_bytes_over_bandwidth_per_tier():
    """3 blocks from the cpu tier (2 ms each, 1 ms latency) and 2 from ssd (5 ms each, 4 ms latency): L = 1 + 6 +
    4 + 10 = 21 ms. Without overlap an iteration of 10 ms takes 31; layer-wise over 4 layers (21 + 10) / 4 + 3/4 ·
    21 = 23.5 ms; loads that overlap a longer compute (100 ms) cost one layer's load: (21 + 100) / 4 + 75 = 105.25."""
    ssd_keys, cpu_keys = [(1, 0), (1, 1)], [(2, 0), (2, 1), (2, 2)]
    for overlap, compute, expected in (("none", 0.010, 0.031), ("layerwise", 0.010, 0.0235),
                                       ("layerwise", 0.100, 0.10525)):
        store = tiers(("cpu", 10, 0.002, 0.0, 0.001, 1.0), ("ssd", 10, 0.005, 0.0, 0.004, 1.0), overlap=overlap,
                      layers=4)
        store.tiers[1].blocks.update(dict.fromkeys(ssd_keys, 0.0))
        store.tiers[0].blocks.update(dict.fromkeys(cpu_keys, 0.0))
        store.load(cpu_keys + ssd_keys)
        assert store.pending_load_s == pytest.approx(0.021)
        assert store.iteration_time(compute) == pytest.approx(expected)
        assert store.pending_load_s == 0.0 and store.iteration_time(compute) == compute  # charged once
        assert store.totals["stall_s"] == pytest.approx(expected - compute)
        assert (store.totals["cpu_loaded"], store.totals["ssd_loaded"]) == (3, 2)


class TieredPrefixCacheMachine(PrefixCacheMachine):
    """The prefix-cache machine over two small tiers, time moving on: HBM's invariants hold, no tier exceeds its
    capacity, and each tier's blocks are exactly those written less those moved down."""

    def __init__(self):
        super().__init__()
        self.clock = Clock()
        self.kv = TieredPrefixCachingAllocator(self.BLOCKS, self.BS)
        self.kv.tiers = tiers(("cpu", 6, 0.001, 0.002, 0.0, 0.005), ("ssd", 9, 0.004, 0.003, 0.001, 0.01),
                              clock=self.clock)

    @rule(seconds=st.sampled_from([0.0, 0.001, 0.004, 0.02]), write_through=st.booleans())
    def tick(self, seconds, write_through):
        self.clock.now += seconds
        self.kv.tiers.policy = "all" if write_through else "evicted"

    @invariant()
    def tiers_hold_what_was_written_within_capacity(self):
        totals = self.kv.tiers.totals
        for tier in self.kv.tiers.tiers:
            assert len(tier.blocks) <= tier.capacity
            assert len(tier.blocks) == totals[f"{tier.medium}_written"] - totals[f"{tier.medium}_moved_down"]
            assert totals[f"{tier.medium}_read_bytes"] == totals[f"{tier.medium}_loaded"]  # 1-byte blocks
        assert self.kv.tier_hit_tokens == self.BS * sum(totals[f"{m}_loaded"] for m in ("cpu", "ssd"))


TestTieredPrefixCache = TieredPrefixCacheMachine.TestCase
TestTieredPrefixCache.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)


def _trace(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


@pytest.mark.parametrize("offload, expected_ttft_ms", [
    # C's prompt: 1 block still in HBM, 62 loaded, 16 tokens computed: 2 + 0.1·16 ms of iteration. Each block is 16
    # tokens of Llama-3-8B's KV (2 K/V × 32 layers × 8 heads × 128 × 2 bytes = 131,072 B/token): 2 MiB, read at
    # 25 GB/s in 83.886 µs; with 10 µs of latency L = 0.01 + 62 · 0.083886 = 5.2109 ms.
    (None, 2 + 0.1 * 1008),
    ({"tiers": [{"medium": "cpu", "capacity_gib": 64, "read_gb_per_s": 25, "latency_us": 10}],
      "load_overlap": "none"}, 2 + 0.1 * 16 + 0.01 + 62 * 2**21 / 25e6),
    # layer-wise over 32 layers: (L + C) / 32 + 31/32 · max(L, C)
    ({"tiers": [{"medium": "cpu", "capacity_gib": 64, "read_gb_per_s": 25, "latency_us": 10}]},
     (3.6 + 0.01 + 62 * 2**21 / 25e6) / 32 + 31 / 32 * (0.01 + 62 * 2**21 / 25e6)),
])
def test_a_prompt_evicted_from_hbm_comes_back_from_host_memory(tmp_path, offload, expected_ttft_ms):
    """A (1,024 tokens) runs; B (1,100, other content) takes 69 of the pool's 70 blocks, so HBM evicts A's cached
    blocks but its first (its head is evicted last) and writes them to the cpu tier; C repeats A's prompt."""
    path = _trace(tmp_path / "t.jsonl", [
        {"timestamp": 0, "input_length": 1024, "output_length": 2, "hash_ids": [1, 2]},
        {"timestamp": 1000, "input_length": 1100, "output_length": 2, "hash_ids": [3, 4, 5]},
        {"timestamp": 2000, "input_length": 1024, "output_length": 2, "hash_ids": [1, 2]},
    ])
    kv = {"kind": "paged", "block_size": 16, "num_gpu_blocks": 70, "prefix_caching": True}
    if offload is not None:
        kv["offload"] = offload
    result = simulator.run(ExperimentConfig.model_validate(experiment(
        kv_cache=kv, workload={"trace": {"path": path}})))
    ttft = result.requests["ttft_ms"].to_numpy()
    assert ttft[2] == pytest.approx(expected_ttft_ms, rel=1e-9)
    if offload is not None:
        s = result.summary
        assert s["kv_cpu_read_gib"] == pytest.approx(62 * 2**21 / 2**30)
        assert s["kv_cpu_written_gib"] >= 63 * 2**21 / 2**30  # A's 63 evicted blocks (and later B's)
        assert s["kv_cpu_hit_rate"] == pytest.approx(62 * 16 / (1024 + 1100 + 1024))
        assert s["kv_offload_stall_s"] == pytest.approx((ttft[2] - 3.6) / 1000)


def test_offload_needs_prefix_caching_and_distinct_media():
    for kv, message in (
        ({"offload": {"tiers": [{"medium": "cpu", "capacity_gib": 1}]}}, "offload: needs prefix_caching: true"),
        ({"prefix_caching": True, "offload": {"tiers": [{"medium": "cpu", "capacity_gib": 1},
                                                         {"medium": "cpu", "capacity_gib": 2}]}},
         "medium 'cpu' given twice"),
        ({"prefix_caching": True, "offload": {"tiers": [{"medium": "tape", "capacity_gib": 1}]}}, "medium"),
    ):
        with pytest.raises(simulator.ConfigError, match=message):
            simulator.load(experiment(kv_cache={"kind": "paged", **kv}))


def test_a_windowed_models_prefix_cache_keeps_its_tiers():
    """gpt-oss-20b alternates sliding-window and full layers, so its pool is wrapped in a bounded-span reserve: the
    tiers go on the prefix cache inside it. 50 system prompts of 256 tokens over a pool of 300 blocks evict and
    write prefix blocks, and later requests load some back."""
    summary = simulator.run(ExperimentConfig.model_validate(experiment(
        model="gpt-oss-20b",
        kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 300, "prefix_caching": True,
                  "offload": {"tiers": [{"medium": "cpu", "capacity_gib": 16}]}},
        workload={"num_requests": 300, "arrival": {"kind": "poisson", "rate": 20.0},
                  "prefix": {"tokens": 256, "groups": 50},
                  "input_tokens": {"kind": "uniform", "min": 10, "max": 100},
                  "output_tokens": {"kind": "uniform", "min": 1, "max": 20}}))).summary
    assert summary["completed"] == 300
    assert summary["kv_cpu_written_gib"] > 0 and summary["kv_cpu_hit_rate"] > 0
