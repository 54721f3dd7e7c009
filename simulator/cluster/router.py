"""Routers: which replica an arriving request goes to."""

from __future__ import annotations

from abc import ABC, abstractmethod

from simulator.registry import Registry
from simulator.request import Request

ROUTERS: Registry[Router] = Registry("cluster.router")


class Router(ABC):
    def __init__(self, num_replicas: int) -> None:
        self.num_replicas = num_replicas

    @abstractmethod
    def route(self, request: Request) -> int:
        """Index of the replica that takes ``request``."""


@ROUTERS.register("round_robin")
class RoundRobinRouter(Router):
    """Replica 0, 1, …, N−1, 0, … in arrival order."""

    def __init__(self, num_replicas: int) -> None:
        super().__init__(num_replicas)
        self._next = 0

    def route(self, request: Request) -> int:
        index = self._next
        self._next = (index + 1) % self.num_replicas
        return index
