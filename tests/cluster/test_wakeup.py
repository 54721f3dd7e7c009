"""The engine's SimPy plumbing: reusable wakeups, disarming, and the inlined event loop."""

from __future__ import annotations

import pytest
import simpy

from simulator.cluster.wakeup import Wakeup, run_all


def test_a_wakeup_fires_at_its_time_and_can_be_scheduled_again_once_fired():
    env, fired = simpy.Environment(), []
    wakeup = Wakeup(env, lambda event: fired.append((env.now, event.at)))
    assert wakeup.schedule(1.5) is wakeup
    run_all(env)
    assert wakeup.schedule(2.0) is wakeup  # fired: reused
    run_all(env)
    assert fired == [(1.5, 1.5), (3.5, 3.5)]


def test_rescheduling_a_due_wakeup_disarms_it_so_only_the_replacement_fires():
    env, fired = simpy.Environment(), []
    first = Wakeup(env, lambda event: fired.append(env.now))
    first.schedule(5.0)
    replacement = first.schedule(2.0)  # a plan changed before it fired
    assert replacement is not first
    run_all(env)
    assert fired == [2.0]  # the disarmed entry came up at 5.0 and called nothing
    assert env.now == 5.0


def test_events_due_at_the_same_instant_fire_in_scheduling_order_like_simpy_timeouts():
    env, order = simpy.Environment(), []
    a = Wakeup(env, lambda _: order.append("a"))
    env.timeout(1.0).callbacks.append(lambda _: order.append("timeout"))
    a.schedule(1.0)
    Wakeup(env, lambda _: order.append("b")).schedule(1.0)
    run_all(env)
    assert order == ["timeout", "a", "b"]


def test_the_loop_fails_like_simpy_on_a_failed_event_nobody_handled():
    env = simpy.Environment()
    env.event().fail(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        run_all(env)
