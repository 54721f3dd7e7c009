"""A router written as a built-in one is, in one module (as a new module of ``simulator/cluster/`` would be): its
config class, with a knob of its own, beside its class. A fixture of :mod:`tests.plugins.test_recipes`.

Every request goes to replica ``replica`` (the last one if there are fewer).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from simulator.cluster.router import ROUTERS, Router
from simulator.config.cluster import RouterConfig
from simulator.request import Request


class PinnedRouterConfig(RouterConfig):
    kind: Literal["pinned"]
    replica: int = Field(ge=0, description="the replica that takes every request")


@ROUTERS.register("pinned", config=PinnedRouterConfig)
class PinnedRouter(Router):
    def route(self, request: Request) -> int:
        assert isinstance(self.config, PinnedRouterConfig)  # picked by its kind
        return min(self.config.replica, self.num_replicas - 1)
