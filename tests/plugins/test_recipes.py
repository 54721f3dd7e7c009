"""The recipes of docs/extending.md for a built-in scheduler, router and KV allocator: each is one module (this
folder's ``newest_first.py``, ``pinned_router.py``, ``headroom_kv.py``, written as a module of the family's package
would be), found by its registry without being listed anywhere, and its experiment section is validated by the
config class it declares: its own fields accepted, unknown fields and kinds refused in one line naming the field.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import simulator
from simulator.cluster.router import ROUTERS
from simulator.config import ExperimentConfig, load_experiment
from simulator.errors import ConfigError
from simulator.kv.base import KV_ALLOCATORS
from simulator.registry import family
from simulator.schedulers.base import SCHEDULERS
from tests.helpers import experiment

FIXTURES = ("newest_first", "pinned_router", "headroom_kv")


@pytest.fixture
def built_in(monkeypatch):
    """For one test, this folder is the package of built-ins of the scheduler, router and KV-allocator families:
    asked for their kinds, the registries import every module of it, as they do their own packages' (the
    registries are restored after the test)."""
    for registry in (SCHEDULERS, ROUTERS, KV_ALLOCATORS):
        registry.kinds()  # the family's own built-ins first
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
        monkeypatch.setattr(registry, "_configs", dict(registry._configs))
        monkeypatch.setattr(registry, "_package", __package__)
    for name in FIXTURES:  # imported afresh, so that they register in the registries of this test
        monkeypatch.delitem(sys.modules, f"{__package__}.{name}", raising=False)


def _error(data: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        load_experiment(data)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_module_of_the_package_is_a_kind_without_being_listed(built_in):
    for name, kind in (("scheduler", "newest_first"), ("cluster.router", "pinned"), ("kv_cache", "headroom")):
        registry = family(name)
        assert kind in registry.kinds()
        assert registry.config_class(kind).__module__ == f"{__package__}.{registry.get(kind).__module__.split('.')[-1]}"


def test_without_the_module_its_kinds_are_unknown():
    assert "newest_first" not in SCHEDULERS.kinds()
    message = _error(experiment(scheduler={"kind": "newest_first"}))
    assert message.endswith("scheduler: unknown kind 'newest_first' (allowed: 'chunked', 'continuous', 'static', or "
                            "a class of your own (file.py:Class or a dotted path))")


def test_a_scheduler_section_takes_its_own_fields_and_refuses_others(built_in):
    config = load_experiment(experiment(scheduler={"kind": "newest_first", "max_num_seqs": 4, "max_jump": 3}))
    assert type(config.scheduler).__name__ == "NewestFirstConfig"
    assert (config.scheduler.max_num_seqs, config.scheduler.max_jump) == (4, 3)
    assert config.model_dump()["scheduler"]["max_jump"] == 3  # dumped as its own class
    assert _error(experiment(scheduler={"kind": "newest_first", "max_jump": -1})).endswith(
        "scheduler.max_jump: must be >= 0, got -1")
    unknown = _error(experiment(scheduler={"kind": "newest_first", "prefill_priority": False}))
    assert "scheduler.prefill_priority: unknown key (" in unknown and unknown.endswith("kind, max_jump)")
    assert "(allowed: 'chunked', 'continuous', 'newest_first', 'static', or a class" in _error(
        experiment(scheduler={"kind": "newest"}))


def _scheduled_newest_first(table) -> bool:
    """Whether each request, when scheduled, was the newest of the requests waiting then."""
    arrival, start = np.asarray(table["arrival_s"]), np.asarray(table["first_scheduled_s"])
    for i in range(len(arrival)):
        waiting = (arrival < start[i]) & (start > start[i])  # arrived before i was scheduled, scheduled after it
        if np.any(arrival[waiting] > arrival[i]):
            return False
    return True


@pytest.mark.parametrize(("max_jump", "newest_first"), [(1_000_000, True), (0, False)])
def test_the_scheduler_runs_its_policy(built_in, max_jump, newest_first):
    """One request at a time under a queue: newest first schedules, each time, the newest waiting request; with
    max_jump 0 it is FCFS, which schedules in arrival order (and so not newest first)."""
    workload = {**experiment()["workload"], "arrival": {"kind": "poisson", "rate": 100.0}}
    result = simulator.run(load_experiment(experiment(
        scheduler={"kind": "newest_first", "max_num_seqs": 1, "max_model_len": 2048, "max_jump": max_jump},
        workload=workload)))
    table = result.requests
    assert len(table) == 50 and table["status"].eq("finished").all()
    assert _scheduled_newest_first(table) is newest_first
    in_order = np.all(np.diff(np.asarray(table.sort_values("arrival_s")["first_scheduled_s"])) >= 0)
    assert bool(in_order) is (not newest_first)


def test_a_router_section_takes_its_own_fields_and_refuses_others(built_in):
    config = load_experiment(experiment(cluster={"replicas": 3, "router": {"kind": "pinned", "replica": 1}}))
    assert type(config.cluster.router).__name__ == "PinnedRouterConfig" and config.cluster.router.replica == 1
    assert set(simulator.run(config).requests["replica"]) == {1}
    assert _error(experiment(cluster={"router": "pinned"})).endswith(
        "cluster.router.replica: required field is missing")
    assert _error(experiment(cluster={"router": {"kind": "pinned", "replica": 0, "replicas": 2}})).endswith(
        "cluster.router.replicas: unknown key (did you mean 'replica'? allowed: kind, load_cap, replica)")
    assert "(allowed: 'adapter_affinity', 'least_kv_load', 'least_outstanding', 'pinned', 'power_of_two'" in (
        _error(experiment(cluster={"decode_router": "pin"})))


def test_a_kv_allocator_section_takes_its_own_fields_and_refuses_others(built_in):
    """Prompts of 1,000 tokens take 63 blocks of 16 tokens: a pool of 256 blocks serves them, and refuses them
    all when 200 of its blocks are held back (56 are left)."""
    workload = {**experiment()["workload"], "input_tokens": {"kind": "fixed", "value": 1000},
                "output_tokens": {"kind": "fixed", "value": 10}, "num_requests": 5}

    def statuses(headroom: int) -> set[str]:
        config = load_experiment(experiment(kv_cache={"kind": "headroom", "block_size": 16, "num_gpu_blocks": 256,
                                                      "headroom_blocks": headroom}, workload=workload))
        assert type(config.kv_cache).__name__ == "HeadroomKVConfig" and config.kv_cache.headroom_blocks == headroom
        return set(simulator.run(config).requests["status"])

    assert statuses(0) == {"finished"} and statuses(200) == {"rejected"}
    assert _error(experiment(kv_cache={"kind": "headroom"})).endswith(
        "kv_cache.headroom_blocks: required field is missing")
    assert "kv_cache.prefix_caching: unknown key (" in _error(
        experiment(kv_cache={"kind": "headroom", "headroom_blocks": 1, "prefix_caching": True}))
    assert _error(experiment(kv_cache={"kind": "slab"})).endswith(
        "kv_cache: unknown kind 'slab' (allowed: 'contiguous', 'headroom', 'paged')")


def test_the_json_schema_is_the_union_of_the_registered_kinds(built_in):
    schema = ExperimentConfig.model_json_schema()
    scheduler = schema["properties"]["scheduler"]
    assert {ref["$ref"].rpartition("/")[2] for ref in scheduler["oneOf"]} == {
        "ChunkedSchedulerConfig", "ContinuousSchedulerConfig", "StaticSchedulerConfig", "NewestFirstConfig",
        "CustomSchedulerConfig"}
    assert scheduler["default"]["kind"] == "continuous" and "max_jump" in schema["$defs"]["NewestFirstConfig"][
        "properties"]
    router = schema["$defs"]["ClusterConfig"]["properties"]["decode_router"]
    assert router["default"]["kind"] == "least_outstanding"  # the field's own default
    assert {ref["$ref"].rpartition("/")[2] for ref in router["oneOf"]} == {
        "RouterConfig", "PinnedRouterConfig", "PrecisePrefixRouterConfig"}
