"""``cluster.router: precise_prefix`` — precise prefix-cache-aware routing, as llm-d's inference scheduler does it.

llm-d's endpoint picker filters the candidate replicas, runs a set of scorers over them, each giving every replica a
score in [0, 1], and picks the replica with the highest weighted sum. Its precise prefix-cache scorer reads which KV
blocks each vLLM instance holds from the KV-cache events vLLM streams, so it knows the cache itself rather than
guessing from past routing (as ``prefix_affinity`` does). Here, for a request of P prompt tokens (``prefill_tokens``)
on replica i:

- ``prefix``: c_i / P, where c_i is the leading prompt tokens replica i's prefix cache holds now (whole blocks, at
  most P − 1: one token is always computed) in HBM and, under ``kv_cache.offload``, in the tiers below it
  (:mod:`simulator.kv.tiers`) — asked through :meth:`Replica.cached_prefix_tokens`; 0 without a prefix or with
  caching off;
- ``kv_load``: 1 − u_i, u_i the fraction of its KV blocks in use (llm-d's kv-cache-utilization scorer);
- ``queue``: with q_i its requests waiting or running, (q_max − q_i) / (q_max − q_min) over the replicas, and 1 for
  every replica when all q_i are equal (llm-d's queue scorer normalises its waiting queue the same min-max way).

The pick maximises Σ_s w_s · score_s(i); ties go to the lowest index, so a run is a function of its config and seed.

``state_staleness_ms`` (S): the load signals (u_i, q_i) are read from a snapshot, as llm-d scrapes each pod's
metrics every refresh interval. The snapshot is taken at the first routing decision at least S ms after the one
before it took one, so a decision sees the replicas as they were 0 to S ms earlier, and taking it costs one scan per
decision at most (none between arrivals: the work follows the arrivals, not simulated time). A replica that joined
after the snapshot is read live when first seen. The prefix scores stay exact: KV events stream to llm-d's indexer
as blocks are stored and evicted, and copying every replica's cache index per snapshot would cost its size. S = 0:
every decision reads the replicas live.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from simulator.cluster.router import ROUTERS, Router
from simulator.config.base import Strict
from simulator.config.cluster import RouterConfig
from simulator.request import Request

MAX_WEIGHT = 1e6
MAX_STALENESS_MS = 60_000.0  # a minute: scrape intervals are tens of ms to seconds


class PrecisePrefixScorers(Strict):
    """Each scorer's weight in the sum (≥ 0, not all 0). The defaults are the weights llm-d's example profiles give
    the prefix-cache (3), KV-cache-utilisation (2) and queue (2) scorers."""

    prefix: float = Field(default=3.0, ge=0, le=MAX_WEIGHT,
                          description="the fraction of the prompt the replica's prefix cache holds")
    kv_load: float = Field(default=2.0, ge=0, le=MAX_WEIGHT, description="1 − the replica's KV utilisation")
    queue: float = Field(default=2.0, ge=0, le=MAX_WEIGHT,
                         description="its waiting + running requests, min-max normalised (fewest: 1, most: 0)")

    @model_validator(mode="after")
    def _some_weight(self) -> PrecisePrefixScorers:
        if not (self.prefix or self.kv_load or self.queue):
            raise ValueError("every weight is 0; give at least one scorer (prefix, kv_load, queue) a "
                             "positive weight")
        return self


class PrecisePrefixRouterConfig(RouterConfig):
    """``precise_prefix``: the highest weighted sum of the ``scorers`` (prefix, kv_load, queue), the load signals
    seen as of up to ``state_staleness_ms`` earlier (:mod:`simulator.cluster.precise_prefix`)."""

    kind: Literal["precise_prefix"]
    scorers: PrecisePrefixScorers = PrecisePrefixScorers()
    state_staleness_ms: float = Field(
        default=0.0, ge=0, le=MAX_STALENESS_MS,
        description="the router's view of each replica's KV use and queue is a snapshot refreshed at most every "
        "this many ms (llm-d's metrics refresh interval); 0: exact")

    @model_validator(mode="after")
    def _no_load_cap(self) -> PrecisePrefixRouterConfig:
        if "load_cap" in self.model_fields_set:
            raise ValueError("load_cap: not a knob of precise_prefix (it weighs load through scorers.kv_load and "
                             "scorers.queue)")
        return self


@ROUTERS.register("precise_prefix", config=PrecisePrefixRouterConfig)
class PrecisePrefixRouter(Router):
    """The replica with the highest weighted sum of the prefix, KV-load and queue scores (module docstring)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        config = self.config
        assert isinstance(config, PrecisePrefixRouterConfig)  # picked by its kind
        scorers = config.scorers
        self._weights = (scorers.prefix, scorers.kv_load, scorers.queue)
        self._staleness_s = config.state_staleness_ms / 1000
        self._taken_s = -1.0  # when the snapshot was taken (−1: never)
        self._snapshot: dict[int, tuple[int, float]] = {}  # replica index -> (outstanding, kv_load) then

    def _loads(self) -> list[tuple[int, float]]:
        """Each replica's (outstanding, KV load) as the router sees it: live, or from the snapshot."""
        replicas = self.replicas
        if not self._staleness_s:
            return [(replica.outstanding, replica.kv_load) for replica in replicas]
        now = self.clock.now
        snapshot = self._snapshot
        if self._taken_s < 0 or now - self._taken_s >= self._staleness_s:
            snapshot.clear()
            self._taken_s = now
        loads = []
        for replica in replicas:
            seen = snapshot.get(replica.index)
            if seen is None:  # a new snapshot, or a replica that joined since
                seen = snapshot[replica.index] = (replica.outstanding, replica.kv_load)
            loads.append(seen)
        return loads

    def scores(self, request: Request) -> list[float]:
        """Every replica's weighted score for ``request``, in ``replicas`` order."""
        w_prefix, w_kv, w_queue = self._weights
        replicas = self.replicas
        loads = self._loads()
        totals = [0.0] * len(replicas)
        if w_prefix and request.prefix is not None and request.prefill_tokens > 0:
            tokens = request.prefill_tokens
            for i, replica in enumerate(replicas):
                totals[i] += w_prefix * replica.cached_prefix_tokens(request) / tokens
        if w_kv:
            for i, (_, load) in enumerate(loads):
                totals[i] += w_kv * (1.0 - load)
        if w_queue:
            queues = [outstanding for outstanding, _ in loads]
            low, high = min(queues), max(queues)
            for i, queue in enumerate(queues):
                totals[i] += w_queue * ((high - queue) / (high - low) if high > low else 1.0)
        return totals

    def route(self, request: Request) -> int:
        totals = self.scores(request)
        best = 0
        for i in range(1, len(totals)):
            if totals[i] > totals[best]:  # strictly: ties keep the lowest index
                best = i
        return best
