"""``cluster.router: precise_prefix``: the weighted sum of the prefix, KV-load and queue scores, hand-derived on small
clusters, its stale view of the load, its validation, and runs through the simulator."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import simulator
from simulator.cluster.precise_prefix import PrecisePrefixRouterConfig
from simulator.cluster.router import ROUTERS
from simulator.config import load_experiment
from simulator.errors import ConfigError
from simulator.request import Prefix, Request
from tests.helpers import experiment, same_summaries


class FakeReplica:
    """What the router reads of a replica: its index, its queue, its KV load and how much of a prompt its cache
    holds (each fake a new index, as a run numbers its replicas)."""

    made = 0

    def __init__(self, outstanding: int = 0, kv_load: float = 0.0, cached: int = 0) -> None:
        self.outstanding, self.kv_load, self.cached = outstanding, kv_load, cached
        self.index = FakeReplica.made
        FakeReplica.made += 1

    def cached_prefix_tokens(self, request: Request) -> int:
        return self.cached if request.prefix is not None else 0


def _router(replicas, clock=None, **config):
    router = ROUTERS.get("precise_prefix")(
        replicas, PrecisePrefixRouterConfig(kind="precise_prefix", **config), np.random.default_rng(0))
    if clock is not None:
        router.clock = clock
    return router


PREFIX = Prefix((7,), 512)


def _request(prompt=1000, prefix=PREFIX):
    """A request of ``prompt`` prompt tokens (prefill_tokens) with a prefix."""
    return Request(0, 0.0, prompt, 10, prefix)


ONLY_PREFIX = {"prefix": 1, "kv_load": 0, "queue": 0}
ONLY_KV = {"prefix": 0, "kv_load": 1, "queue": 0}
ONLY_QUEUE = {"prefix": 0, "kv_load": 0, "queue": 1}


def test_each_scorer_alone_picks_its_own_replica():
    """Replica 1 holds 512 of the prompt's 1,000 tokens but is the busier; replica 0 has the shorter queue, replica 2
    the emptier KV pool."""
    replicas = [FakeReplica(outstanding=1, kv_load=0.5), FakeReplica(outstanding=6, kv_load=0.8, cached=512),
                FakeReplica(outstanding=4, kv_load=0.1)]
    assert _router(replicas, scorers=ONLY_PREFIX).route(_request()) == 1
    assert _router(replicas, scorers=ONLY_QUEUE).route(_request()) == 0
    assert _router(replicas, scorers=ONLY_KV).route(_request()) == 2


def test_scores_are_the_weighted_sum_of_the_normalised_scorers():
    """prefix 512/1,000 = 0.512 on replica 1; KV 1 − load; queues 2, 6, 4 min-max: (6−q)/4 = 1, 0, 0.5."""
    replicas = [FakeReplica(2, 0.5), FakeReplica(6, 0.75, cached=512), FakeReplica(4, 0.25)]
    scores = _router(replicas, scorers={"prefix": 4, "kv_load": 2, "queue": 3}).scores(_request())
    assert scores == pytest.approx([0 + 2 * 0.5 + 3 * 1.0, 4 * 0.512 + 2 * 0.25 + 0, 0 + 2 * 0.75 + 3 * 0.5])


def test_the_prefix_weight_against_the_queue_weight_decides_where_the_cached_prompt_goes():
    """Replica 0 holds half the prompt (prefix score 0.5) and has 4 queued; replica 1 is idle (queue score 1 against
    0). With queue weight 2 the cached replica wins once 0.5 × w_prefix exceeds 2: w_prefix 3 → 1.5 < 2 goes to
    replica 1, 5 → 2.5 > 2 to replica 0, and 4 → 2.0 = 2.0 is a tie, which the lower index takes."""
    replicas = [FakeReplica(outstanding=4, cached=500), FakeReplica(outstanding=0)]
    picks = {w: _router(replicas, scorers={"prefix": w, "kv_load": 0, "queue": 2}).route(_request())
             for w in (3, 4, 5)}
    assert picks == {3: 1, 4: 0, 5: 0}


def test_ties_go_to_the_lowest_index_and_equal_queues_score_one():
    replicas = [FakeReplica(3, 0.5), FakeReplica(3, 0.5), FakeReplica(3, 0.5)]
    router = _router(replicas, scorers=ONLY_QUEUE)
    assert router.scores(_request()) == [1.0, 1.0, 1.0] and router.route(_request()) == 0
    assert _router(replicas, scorers=ONLY_PREFIX).route(_request(prefix=None)) == 0  # nothing cached anywhere


def test_a_request_without_a_prefix_scores_no_prefix():
    replicas = [FakeReplica(outstanding=5), FakeReplica(outstanding=0, cached=800)]
    assert _router(replicas, scorers=ONLY_PREFIX).scores(_request(prefix=None)) == [0.0, 0.0]


def test_with_staleness_the_decision_is_made_on_the_snapshot_not_the_live_state():
    """S = 100 ms. At t = 0 the router sees queues (0, 3) and picks replica 0; the replicas then change to (5, 0).
    At t = 50 ms the snapshot still says (0, 3): replica 0 again, where the live state says 1. At t = 100 ms the
    snapshot is S old and is taken again: replica 1. Without staleness, t = 50 ms already picks replica 1."""
    clock = SimpleNamespace(now=0.0)
    replicas = [FakeReplica(outstanding=0), FakeReplica(outstanding=3)]
    stale = _router(replicas, clock, scorers=ONLY_QUEUE, state_staleness_ms=100)
    exact = _router(replicas, clock, scorers=ONLY_QUEUE)
    assert stale.route(_request()) == 0 and exact.route(_request()) == 0
    replicas[0].outstanding, replicas[1].outstanding = 5, 0
    clock.now = 0.05
    assert stale.route(_request()) == 0
    assert exact.route(_request()) == 1
    clock.now = 0.1
    assert stale.route(_request()) == 1


def test_staleness_covers_kv_load_but_not_the_prefix_cache():
    """The KV load is read from the snapshot; the prefix scores stay live (KV events stream to llm-d's indexer)."""
    clock = SimpleNamespace(now=0.0)
    replicas = [FakeReplica(kv_load=0.2), FakeReplica(kv_load=0.6)]
    router = _router(replicas, clock, scorers={"prefix": 1, "kv_load": 1, "queue": 0}, state_staleness_ms=1000)
    assert router.route(_request()) == 0
    replicas[0].kv_load, replicas[1].kv_load = 0.9, 0.1  # live: replica 1 is now far emptier
    clock.now = 0.5
    assert router.scores(_request()) == pytest.approx([0.8, 0.4])  # the snapshot's 1 − 0.2, 1 − 0.6
    replicas[1].cached = 800  # 0.8 of the prompt: seen at once
    assert router.scores(_request()) == pytest.approx([0.8, 1.2])


def test_a_replica_that_joins_after_the_snapshot_is_read_when_first_seen():
    clock = SimpleNamespace(now=0.0)
    replicas = [FakeReplica(outstanding=2)]
    router = _router(replicas, clock, scorers=ONLY_QUEUE, state_staleness_ms=1000)
    assert router.route(_request()) == 0
    replicas.append(FakeReplica(outstanding=0))  # an autoscaler's new replica
    assert router.route(_request()) == 1


@given(st.lists(st.tuples(st.integers(0, 8), st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.integers(0, 999)),
                min_size=1, max_size=8),
       st.tuples(*[st.sampled_from([0.0, 0.5, 1.0, 3.0])] * 3).filter(any))
def test_the_pick_is_a_valid_replica_with_no_higher_score_before_or_after_it(states, weights):
    replicas = [FakeReplica(o, k, c) for o, k, c in states]
    router = _router(replicas, scorers=dict(zip(("prefix", "kv_load", "queue"), weights, strict=True)))
    pick = router.route(_request())
    scores = router.scores(_request())
    assert 0 <= pick < len(replicas)
    assert all(score <= scores[pick] for score in scores) and all(score < scores[pick] for score in scores[:pick])


@pytest.mark.parametrize(("router", "message"), [
    ({"scorers": {"prefix": -1}}, r"cluster\.router\.scorers\.prefix: must be >= 0"),
    ({"scorers": {"prefix": 0, "kv_load": 0, "queue": 0}},
     r"cluster\.router\.scorers: every weight is 0; give at least one scorer"),
    ({"scorers": {"prefx": 1}}, r"cluster\.router\.scorers\.prefx: unknown key \(did you mean 'prefix'"),
    ({"state_staleness_ms": -5}, r"cluster\.router\.state_staleness_ms: must be >= 0"),
    ({"state_staleness_ms": 3_600_000}, r"cluster\.router\.state_staleness_ms: must be <= 60000"),
    ({"load_cap": 3}, r"cluster\.router: load_cap: not a knob of precise_prefix"),
])
def test_bad_settings_are_one_line_errors_naming_the_field(router, message):
    with pytest.raises(ConfigError, match=message) as error:
        load_experiment(experiment(cluster={"replicas": 2, "router": {"kind": "precise_prefix", **router}}))
    assert "\n" not in str(error.value)


def _one_prefix_run(router, rate=0.2, **workload):
    """Five requests sharing one 160-token prefix (10 blocks of 16), 5 s apart on average, two replicas with
    prefix caching (each request is done long before the next arrives)."""
    base = experiment()
    config = experiment(
        cluster={"replicas": 2, "router": router},
        kv_cache={**base["kv_cache"], "prefix_caching": True},
        workload={**base["workload"], "num_requests": 5, "arrival": {"kind": "poisson", "rate": rate},
                  "prefix": {"tokens": 160, "fraction": 1.0, "groups": 1}, **workload})
    return simulator.run(load_experiment(config))


def test_a_run_sends_every_request_to_the_replica_holding_the_prefix():
    """With only the prefix scorer, the first request goes to replica 0 (a tie at 0) and leaves the prefix's 10
    blocks cached there; each later one finds all 160 tokens on replica 0 and none on replica 1. Round robin puts
    the second request on replica 1, whose cache is cold: two misses instead of one."""
    precise = _one_prefix_run({"kind": "precise_prefix", "scorers": ONLY_PREFIX}).requests.sort_values("arrival_s")
    assert list(precise["replica"]) == [0] * 5
    assert list(precise["cached_tokens"]) == [0] + [160] * 4
    cyclic = _one_prefix_run("round_robin").requests.sort_values("arrival_s")
    assert list(cyclic["replica"]) == [0, 1, 0, 1, 0] and list(cyclic["cached_tokens"]) == [0, 0, 160, 160, 160]


def test_a_run_is_deterministic_and_serves_everyone():
    config = load_experiment(experiment(cluster={"replicas": 3, "router": {
        "kind": "precise_prefix", "state_staleness_ms": 20}}))
    first, second = simulator.run(config), simulator.run(config)
    assert same_summaries(first.summary, second.summary) and first.summary["completed"] == 50
    assert first.requests["replica"].nunique() == 3
