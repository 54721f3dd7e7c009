"""KV-cache tiers below the GPU: prefix blocks kept in host DRAM, local NVMe or a remote store and loaded back.

Production stacks keep the prefix blocks HBM has to give up in cheaper memory and load them back on a later prefix
hit instead of computing them again: vLLM with LMCache or its native CPU offloading, SGLang's HiCache, Dynamo's KVBM,
the Mooncake store, TensorRT-LLM's host offload. ``kv_cache.offload`` (a paged cache with ``prefix_caching``) gives a
replica an ordered list of tiers — e.g. ``[cpu, ssd]`` — each a least-recently-used store of whole prefix blocks,
keyed by the same content identity HBM's prefix cache uses (:meth:`simulator.request.Prefix.block_keys`), so a key
names one content wherever it is: a block may be in HBM and in a tier at once, never two different contents.

**Writes.** ``policy: evicted`` (write-back, HiCache's and KVBM's default) writes a cached block to the first tier when
HBM evicts it; ``policy: all`` (write-through, LMCache's default) writes each prefix block when its sequence
registers it (at admission, as HBM's cache shares it; the real write follows the prefill — the same
simplification). A block already in the first tier is only refreshed. Writes are asynchronous and never stall an
iteration, but each tier's write link is a queue: a block's write starts when the link is free and takes

    bytes per GPU / ``write_gb_per_s``

(each GPU of the replica moves its own shard on its own link, in parallel); a write that could not start within the
tier's ``max_write_backlog_ms`` of being issued (default one second of queued writes) is dropped (counted), as
LMCache and HiCache drop what their full queues cannot take. A block is readable from its tier once written. When a
tier is full its least recently used block moves down to the next tier (written there the same way) or, from the
last, is dropped.

**Loads.** A prompt's leading blocks are matched in HBM first, then the run continues in the tiers: each next block
found in any tier (the highest that holds it) is loaded back, becomes an HBM block like one just computed (taken from
the pool, registered in HBM's cache) and its tokens skip the prefill, as HBM hits do. The iteration that admits the
prompt pays, per prompt and tier it reads from,

    L = latency_us + blocks × bytes per GPU / read_gb_per_s

summed over the prompts and tiers of the iteration (one link in turn: conservative where two tiers' links could run
at once). ``load_overlap: layerwise`` (LMCache's layer-wise pipeline, HiCache's per-layer overlap) loads layer i + 1
while layer i computes: of n layers, an iteration of compute time C then takes

    T = (L + C) / n + (n − 1) / n · max(L, C)

(a two-stage pipeline of n equal stages); ``none`` loads first: T = C + L.

Not modelled: loads that run while the request waits outside the batch (vLLM's asynchronous KV connectors), a tier
shared by the replicas of a node or cluster (each replica has its own), promotion of a lower tier's block into a
higher tier on a hit (under ``policy: all`` a block loaded from a lower tier is written to the first again, as every
block its prompt registers is), and the host memory the tiers take. The loads' time lengthens the iteration but is
not in its work (:mod:`simulator.cost.work`): iteration bounds and energy leave it out. On a model with
sliding-window or linear-attention layers a block's bytes are those of the layers whose KV grows with the context
(the pool's unit, :mod:`simulator.kv.sizing`).
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

from pydantic import Field, model_validator

from simulator.config.base import Strict

BlockKey = tuple[int, int]

MAX_TIER_GIB = 1_000_000.0  # a petabyte: bounds what a typo can make a tier hold (its blocks are never allocated)
MAX_LINK_GB_PER_S = 100_000.0
MAX_LATENCY_US = 10_000_000.0  # ten seconds

# Each medium's defaults, per GPU. cpu: the hardware profile's host link (PCIe), both directions, and 5 µs to set a
# copy up; ssd: one NVMe drive per GPU as in NVIDIA's DGX H100 (8 × 3.84 TB U.2 NVMe data drives for 8 GPUs),
# Samsung PM1733's sequential 7.0 GB/s read and 3.8 GB/s write, 100 µs per access; remote: one 400 Gb/s NIC per GPU
# (DGX H100's eight ConnectX-7), 50 GB/s each way over RDMA, 20 µs for a transfer with its metadata lookup.
MEDIUM_DEFAULTS: dict[str, tuple[float | None, float | None, float]] = {
    "cpu": (None, None, 5.0),
    "ssd": (7.0, 3.8, 100.0),
    "remote": (50.0, 50.0, 20.0),
}

# the summary's keys under kv_cache.offload (tier_summary), for each medium a run may have
TIER_METRICS = (*(f"kv_{medium}_{name}" for medium in MEDIUM_DEFAULTS
                  for name in ("hit_rate", "read_gib", "written_gib", "dropped_writes")),
                "kv_offload_load_s", "kv_offload_stall_s")


class OffloadTierConfig(Strict):
    """One tier: its medium, its size for the whole replica (summed over its GPUs, as vLLM's
    ``--kv-offloading-size``) and each GPU's link to it (defaults per medium: ``MEDIUM_DEFAULTS``)."""

    medium: Literal["cpu", "ssd", "remote"]
    capacity_gib: float = Field(gt=0, le=MAX_TIER_GIB, description="the tier's size for the replica, all GPUs")
    read_gb_per_s: float | None = Field(default=None, gt=0, le=MAX_LINK_GB_PER_S,
                                        description="per GPU (default: the medium's; cpu: the host link)")
    write_gb_per_s: float | None = Field(default=None, gt=0, le=MAX_LINK_GB_PER_S,
                                         description="per GPU (default: the medium's; cpu: the host link)")
    latency_us: float | None = Field(default=None, ge=0, le=MAX_LATENCY_US,
                                     description="per load of one prompt from this tier (default: the medium's)")
    max_write_backlog_ms: float = Field(
        default=1000.0, ge=0, le=MAX_LATENCY_US / 1000,
        description="a write that cannot start within this time of being issued is dropped")


class OffloadConfig(Strict):
    """``kv_cache.offload``: the tiers below HBM, highest first, and how they are written and read (module docs)."""

    tiers: list[OffloadTierConfig] = Field(min_length=1, max_length=3)
    policy: Literal["evicted", "all"] = Field(
        default="evicted", description="evicted: write a block when HBM evicts it; all: when it is computed")
    load_overlap: Literal["layerwise", "none"] = Field(
        default="layerwise", description="layerwise: loads overlap the iteration's layers; none: they precede it")

    @model_validator(mode="after")
    def _media_distinct(self) -> OffloadConfig:
        media = [tier.medium for tier in self.tiers]
        for medium in media:
            if media.count(medium) > 1:
                raise ValueError(f"tiers: medium {medium!r} given twice; each medium at most once "
                                 f"(got {', '.join(media)})")
        return self


class Tier:
    """One tier's blocks (least recently used first, each with the time its write completes) and its links, in
    seconds per block per GPU."""

    __slots__ = ("backlog_s", "blocks", "capacity", "latency_s", "medium", "read_s", "write_free_s", "write_s")

    def __init__(self, medium: str, capacity: int, read_s: float, write_s: float, latency_s: float,
                 backlog_s: float) -> None:
        self.medium = medium
        self.capacity = capacity  # blocks
        self.read_s, self.write_s, self.latency_s, self.backlog_s = read_s, write_s, latency_s, backlog_s
        self.blocks: OrderedDict[BlockKey, float] = OrderedDict()  # key -> time its write completes
        self.write_free_s = 0.0  # when the write link is next free


class KVTiers:
    """A replica's tiers below HBM. ``clock`` gives the simulated time; ``totals`` (shared by a run's replicas)
    counts, per medium m: ``{m}_written`` / ``{m}_dropped`` / ``{m}_loaded`` blocks and their bytes
    (``{m}_written_bytes``, ``{m}_read_bytes``: all the replica's GPUs), ``{m}_moved_down`` (blocks that left for
    the next tier or, from the last, were dropped), and ``load_s`` / ``stall_s`` (seconds of loads; what they added
    to iterations)."""

    __slots__ = ("block_bytes", "clock", "layers", "overlap", "pending_load_s", "policy", "tiers", "totals")

    def __init__(self, tiers: Sequence[Tier], *, policy: str, overlap: str, block_bytes: float, layers: int,
                 clock: Callable[[], float], totals: defaultdict[str, float]) -> None:
        self.tiers = list(tiers)
        self.policy, self.overlap = policy, overlap
        self.block_bytes = block_bytes  # one block, all the replica's GPUs together
        self.layers = max(layers, 1)
        self.clock = clock
        self.totals = totals
        self.pending_load_s = 0.0  # loads of the iteration being formed

    @classmethod
    def build(cls, config: OffloadConfig, *, block_size: int, kv_bytes_per_token: float, gpus: int,
              host_link_gb_per_s: float, layers: int, clock: Callable[[], float],
              totals: defaultdict[str, float]) -> KVTiers:
        """A replica's tiers: ``kv_bytes_per_token`` per GPU, ``gpus`` per replica (each holds its shard)."""
        per_gpu = block_size * kv_bytes_per_token
        tiers = []
        for tier in config.tiers:
            read, write, latency = MEDIUM_DEFAULTS[tier.medium]
            read = tier.read_gb_per_s or read or host_link_gb_per_s
            write = tier.write_gb_per_s or write or host_link_gb_per_s
            latency = tier.latency_us if tier.latency_us is not None else latency
            capacity = int(tier.capacity_gib * 2**30 // (per_gpu * gpus))
            tiers.append(Tier(tier.medium, capacity, per_gpu / (read * 1e9), per_gpu / (write * 1e9), latency * 1e-6,
                              tier.max_write_backlog_ms / 1000))
        return cls(tiers, policy=config.policy, overlap=config.load_overlap, block_bytes=per_gpu * gpus,
                   layers=layers, clock=clock, totals=totals)

    # --- writes -------------------------------------------------------------------------------------------------
    def write(self, keys: Iterable[BlockKey]) -> None:
        """Write blocks to the first tier (a block it holds already is only refreshed)."""
        now, first = self.clock(), self.tiers[0]
        for key in keys:
            if key in first.blocks:
                first.blocks.move_to_end(key)
            else:
                self._write(0, key, now)

    def _write(self, index: int, key: BlockKey, now: float) -> None:
        """Queue ``key``'s write on tier ``index``'s link; a full tier moves its least recently used block down."""
        tier = self.tiers[index]
        start = max(now, tier.write_free_s)
        if start - now > tier.backlog_s:
            self.totals[f"{tier.medium}_dropped"] += 1
            return
        tier.write_free_s = start + tier.write_s
        tier.blocks[key] = tier.write_free_s
        tier.blocks.move_to_end(key)
        self.totals[f"{tier.medium}_written"] += 1
        self.totals[f"{tier.medium}_written_bytes"] += self.block_bytes
        while len(tier.blocks) > tier.capacity:
            victim, _ = tier.blocks.popitem(last=False)
            self.totals[f"{tier.medium}_moved_down"] += 1
            if index + 1 < len(self.tiers):
                below = self.tiers[index + 1].blocks
                if victim in below:
                    below.move_to_end(victim)
                else:
                    self._write(index + 1, victim, now)

    # --- reads --------------------------------------------------------------------------------------------------
    def _holder(self, key: BlockKey, now: float) -> Tier | None:
        for tier in self.tiers:
            ready = tier.blocks.get(key)
            if ready is not None and ready <= now:
                return tier
        return None

    def run_length(self, keys: Sequence[BlockKey], start: int) -> int:
        """How many of ``keys[start:]``, in order, some tier holds readable now."""
        now, n = self.clock(), 0
        for key in keys[start:]:
            if self._holder(key, now) is None:
                break
            n += 1
        return n

    def load(self, keys: Sequence[BlockKey]) -> None:
        """Load ``keys`` (a run :meth:`run_length` found) back into HBM for one prompt: each from the highest tier
        holding it, refreshed there; their time (module docs) joins this iteration's."""
        now, per_tier = self.clock(), dict.fromkeys((tier.medium for tier in self.tiers), 0)
        for key in keys:
            tier = self._holder(key, now)
            assert tier is not None, "load() takes a run run_length() found"
            tier.blocks.move_to_end(key)
            per_tier[tier.medium] += 1
        seconds = 0.0
        for tier in self.tiers:
            if n := per_tier[tier.medium]:
                seconds += tier.latency_s + n * tier.read_s
                self.totals[f"{tier.medium}_loaded"] += n
                self.totals[f"{tier.medium}_read_bytes"] += n * self.block_bytes
        self.pending_load_s += seconds

    def iteration_time(self, compute_s: float) -> float:
        """An iteration of compute time ``compute_s`` with the loads of its prompts (module docs); the pending loads
        are charged to it and cleared."""
        load = self.pending_load_s
        if load <= 0.0:
            return compute_s
        self.pending_load_s = 0.0
        if self.overlap == "none":
            total = compute_s + load
        else:
            n = self.layers
            total = (load + compute_s) / n + (n - 1) / n * max(load, compute_s)
        self.totals["load_s"] += load
        self.totals["stall_s"] += total - compute_s
        return total


def tier_summary(config: OffloadConfig, totals: defaultdict[str, float], prompt_tokens: int, block_size: int
                 ) -> dict[str, float]:
    """Per tier m: ``kv_{m}_hit_rate`` (prompt tokens loaded from it / ``prompt_tokens``, the prompt tokens of the
    run's prefills, computed or not), ``kv_{m}_read_gib`` and ``kv_{m}_written_gib`` (all the replicas' GPUs),
    ``kv_{m}_dropped_writes``; and ``kv_offload_load_s`` / ``kv_offload_stall_s`` (:class:`KVTiers`)."""
    summary: dict[str, float] = {}
    for tier in config.tiers:
        m = tier.medium
        loaded = totals[f"{m}_loaded"]
        summary[f"kv_{m}_hit_rate"] = loaded * block_size / prompt_tokens if prompt_tokens else 0.0
        summary[f"kv_{m}_read_gib"] = totals[f"{m}_read_bytes"] / 2**30
        summary[f"kv_{m}_written_gib"] = totals[f"{m}_written_bytes"] / 2**30
        summary[f"kv_{m}_dropped_writes"] = int(totals[f"{m}_dropped"])
    summary["kv_offload_load_s"] = float(totals["load_s"])
    summary["kv_offload_stall_s"] = float(totals["stall_s"])
    return summary
