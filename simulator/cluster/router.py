"""Routers: which replica an arriving request goes to.

A router sees the replicas it feeds (``outstanding``: requests waiting or running there; ``kv_load``: the fraction
of its KV pool in use, as of its last iteration boundary — what a real router scrapes is stale too) and returns an
index into ``replicas``, a list that an autoscaler edits in place (replicas join at the end and leave from
anywhere; affinity routers therefore remember replicas, not positions). Ties go to the lowest index, so routing is
deterministic; random choices use the experiment's seed.
A user's router is a subclass named by dotted path or ``file.py:Class`` in ``cluster.router.kind``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from simulator.config.cluster import RouterConfig
from simulator.registry import Registry
from simulator.request import Request


class ReplicaView(Protocol):
    """What routers, and whatever places requests by their choice (faults' redirects), use of a replica
    (:class:`~simulator.cluster.replica.Replica` is one)."""

    @property
    def index(self) -> int:
        """Its position in the cluster (not in a router's ``replicas``, which an autoscaler edits)."""

    @property
    def up(self) -> bool:
        """False while crashed or released."""

    @property
    def outstanding(self) -> int:
        """Requests waiting or running there."""

    @property
    def kv_load(self) -> float:
        """Fraction of its KV pool in use."""

    def has_adapter(self, adapter: int) -> bool:
        """Whether LoRA adapter ``adapter`` is in one of its GPU slots."""

    def cached_prefix_tokens(self, request: Request) -> int:
        """Leading prompt tokens of ``request`` its prefix cache holds now (0 without a prefix or a cache)."""

    def submit(self, request: Request) -> None:
        """Hand it a request."""


ROUTERS: Registry[Router] = Registry("cluster.router")


class Clock(Protocol):
    """What tells a router the simulated time (a ``simpy.Environment`` is one)."""

    @property
    def now(self) -> float: ...


class _TimeZero:
    now = 0.0


class Router(ABC):
    def __init__(self, replicas: Sequence[ReplicaView], config: RouterConfig, rng: np.random.Generator) -> None:
        self.replicas = replicas
        self.config = config
        self.rng = rng
        # the simulated time, for routers that keep state over time (the run sets it to its SimPy environment)
        self.clock: Clock = _TimeZero()

    @property
    def num_replicas(self) -> int:
        return len(self.replicas)

    @abstractmethod
    def route(self, request: Request) -> int:
        """Index of the replica that takes ``request``."""

    def position(self, replica: ReplicaView | None) -> int | None:
        """Where ``replica`` is in ``replicas`` now (None: not given, or no longer there)."""
        if replica is None:
            return None
        try:
            return self.replicas.index(replica)
        except ValueError:
            return None

    def least_outstanding(self) -> int:
        """The first replica with the fewest outstanding requests; the scan stops at the first idle one (nothing
        beats 0), so a large mostly idle cluster costs what its busy replicas do."""
        best, fewest = 0, -1
        for index, replica in enumerate(self.replicas):
            count = replica.outstanding
            if count == 0:
                return index
            if fewest < 0 or count < fewest:
                best, fewest = index, count
        return best


@ROUTERS.register("round_robin", config=RouterConfig)
class RoundRobinRouter(Router):
    """Replica 0, 1, …, N−1, 0, … in arrival order."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self._next = 0

    def route(self, request: Request) -> int:
        index = self._next % self.num_replicas
        self._next = index + 1
        return index


@ROUTERS.register("random", config=RouterConfig)
class RandomRouter(Router):
    """Uniformly at random."""

    def route(self, request: Request) -> int:
        return int(self.rng.integers(self.num_replicas))


@ROUTERS.register("least_outstanding", config=RouterConfig)
class LeastOutstandingRouter(Router):
    """Join the shortest queue: the replica with the fewest requests waiting or running."""

    def route(self, request: Request) -> int:
        return self.least_outstanding()


@ROUTERS.register("least_kv_load", config=RouterConfig)
class LeastKVLoadRouter(Router):
    """The replica whose KV pool is least used (ties: fewest outstanding)."""

    def route(self, request: Request) -> int:
        """The first replica of the least (KV load, outstanding); the scan stops at the first with neither (nothing
        beats it)."""
        best, least = 0, (math.inf, 0)
        for index, replica in enumerate(self.replicas):
            load = replica.kv_load
            if load > least[0]:
                continue
            key = (load, replica.outstanding)
            if key == (0.0, 0):
                return index
            if key < least:
                best, least = index, key
        return best


@ROUTERS.register("power_of_two", config=RouterConfig)
class PowerOfTwoRouter(Router):
    """Two distinct replicas at random; the one with fewer outstanding requests (Mitzenmacher's power of two
    choices)."""

    def route(self, request: Request) -> int:
        if self.num_replicas == 1:
            return 0
        a, b = (int(i) for i in self.rng.choice(self.num_replicas, size=2, replace=False))
        return a if (self.replicas[a].outstanding, a) <= (self.replicas[b].outstanding, b) else b


@ROUTERS.register("session_affinity", config=RouterConfig)
class SessionAffinityRouter(Router):
    """Every turn of a session goes where its first turn went (the least outstanding replica then), so the
    conversation's KV stays in one prefix cache — vLLM production-stack's session routing; requests outside
    sessions go to the least outstanding replica."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self._home: dict[int, ReplicaView] = {}

    def route(self, request: Request) -> int:
        if request.session < 0:
            return self.least_outstanding()
        position = self.position(self._home.get(request.session))
        if position is None:  # a new session, or its replica left
            position = self.least_outstanding()
            self._home[request.session] = self.replicas[position]
        return position


@ROUTERS.register("prefix_affinity", config=RouterConfig)
class PrefixAffinityRouter(Router):
    """Requests sharing a prompt prefix go to the replica that took the first of them (so its prefix cache holds
    it), unless that replica has more than ``load_cap`` × the mean outstanding requests (+1); then, and for
    requests without a prefix, the least outstanding replica. The first prefix id names the group."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self._home: dict[int, ReplicaView] = {}

    def route(self, request: Request) -> int:
        if request.prefix is None or not request.prefix.ids:
            return self.least_outstanding()
        group = request.prefix.ids[0]
        home = self.position(self._home.get(group))
        if home is not None:
            mean = sum(replica.outstanding for replica in self.replicas) / self.num_replicas
            if self.replicas[home].outstanding <= self.config.load_cap * mean + 1:
                return home
        index = self.least_outstanding()
        if home is None:  # a new group, or its replica left
            self._home[group] = self.replicas[index]
        return index


@ROUTERS.register("adapter_affinity", config=RouterConfig)
class AdapterAffinityRouter(Router):
    """LoRA-aware routing: a request naming an adapter goes to its adapter's home replica (where the last request
    naming it went), else to the least outstanding replica holding the adapter in a GPU slot, else to the least
    outstanding replica — skipping any replica with more than ``load_cap`` × the mean outstanding (+1); its
    choice becomes the adapter's home. Requests for the base model go to the least outstanding replica. Fewer
    replicas load each adapter, so loads are rarer and batches share adapters (vLLM production-stack's and
    Punica's motivation)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self._home: dict[int, ReplicaView] = {}

    def route(self, request: Request) -> int:
        adapter = request.adapter
        if adapter < 0:
            return self.least_outstanding()
        replicas = self.replicas
        cap = self.config.load_cap * sum(replica.outstanding for replica in replicas) / self.num_replicas + 1
        home = self.position(self._home.get(adapter))
        if home is None or replicas[home].outstanding > cap:
            holding = [(replica.outstanding, position) for position, replica in enumerate(replicas)
                       if replica.outstanding <= cap and replica.has_adapter(adapter)]
            home = min(holding)[1] if holding else self.least_outstanding()
            self._home[adapter] = replicas[home]
        return home
