"""Multi-turn sessions (workload.sessions): each turn resends the conversation, is sent when the previous one
ends plus a think time, hits the prefix cache for what the session left there, and every turn is accounted for."""

from __future__ import annotations

import pytest

import simulator
from simulator.config import load_experiment
from simulator.errors import ConfigError
from tests.helpers import experiment


def _sessions(num_sessions=1, turns=3, first=100, new=20, output=10, think_ms=0.0, **changes):
    return experiment(
        kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 256, "prefix_caching": True},
        workload={"num_requests": num_sessions, "arrival": {"kind": "constant", "rate": 1.0},
                  "input_tokens": {"kind": "fixed", "value": first},
                  "output_tokens": {"kind": "fixed", "value": output},
                  "sessions": {"turns": {"kind": "fixed", "value": turns}, "think_ms": think_ms,
                               "new_input_tokens": {"kind": "fixed", "value": new}}},
        **changes)


def test_each_turn_resends_the_conversation_and_reuses_its_cache():
    """Prompts of 100, 100 + 10 + 20 = 130 and 160 tokens; each turn is sent the moment the previous one ends
    (no think time). Linear costs: prefill 2 ms + 0.1 ms per uncached token, decode steps of 5.2 ms. Turn 1 leaves
    its prompt cached in whole 16-token blocks (96 tokens), so turn 2 prefills 130 − 96 tokens; turn 3 reuses
    turn 2's first 128."""
    rows = simulator.run(load_experiment(_sessions())).requests.sort_values("request_id")
    assert rows["input_tokens"].tolist() == [100, 130, 160]
    assert rows["turn"].tolist() == [0, 1, 2] and rows["session"].nunique() == 1
    assert rows["cached_tokens"].tolist() == [0, 96, 128]
    assert rows["ttft_ms"].tolist() == pytest.approx([2 + 10.0, 2 + 3.4, 2 + 3.2])
    finish = rows["finish_s"].to_numpy()
    assert rows["arrival_s"].iloc[1:].to_numpy() == pytest.approx(finish[:-1])  # sent when the last one ended
    assert rows["e2el_ms"].iloc[0] == pytest.approx(12 + 9 * 5.2)


def test_think_time_separates_the_turns():
    """Mean think time 2 s (exponential): the gaps between a turn's end and the next's send average about 2 s."""
    rows = simulator.run(load_experiment(_sessions(num_sessions=200, turns=4, think_ms=2000))).requests
    rows = rows.sort_values("request_id")
    later = rows[rows["turn"] > 0]
    previous = rows.set_index("request_id").loc[later["request_id"] - 1]
    gaps = later["arrival_s"].to_numpy() - previous["finish_s"].to_numpy()
    assert (gaps >= 0).all() and gaps.mean() == pytest.approx(2.0, rel=0.1)


@pytest.mark.parametrize("connections", [None, 1])
def test_a_rejected_turn_ends_its_session_and_every_turn_is_counted(connections):
    """max_model_len 150: turn 3's 160-token prompt is rejected, and turn 4 after it, with that reason (over one
    client connection too: a turn rejected at the client never held one)."""
    config = _sessions(num_sessions=2, turns=4)
    config["scheduler"]["max_model_len"] = 150
    config["workload"]["client_connections"] = connections
    result = simulator.run(load_experiment(config))
    rows = result.requests.sort_values("request_id")
    assert len(rows) == 8 and result.summary["completed"] + result.summary["num_rejected"] == 8
    rejected = rows[rows["status"] == "rejected"]
    assert rejected["turn"].tolist() == [2, 3, 2, 3]
    assert (rejected[rejected["turn"] == 3]["reject_reason"] == "turn 3 of its session was rejected").all()


def test_session_affinity_keeps_a_conversation_in_one_prefix_cache():
    """Two replicas, 100 sessions of 5 turns: session_affinity sends every turn to its first turn's replica, so
    later turns find the conversation cached; round robin splits sessions across replicas and hits less."""
    base = _sessions(num_sessions=100, turns=5, first=600, new=60, output=40, think_ms=500)
    base["workload"]["arrival"] = {"kind": "poisson", "rate": 4.0}
    base["kv_cache"]["num_gpu_blocks"] = 4096
    runs = {}
    for router in ("session_affinity", "round_robin"):
        base["cluster"] = {"replicas": 2, "router": router}
        runs[router] = simulator.run(load_experiment(base))
    affine = runs["session_affinity"].requests
    assert (affine.groupby("session")["replica"].nunique() == 1).all()
    assert runs["round_robin"].requests.groupby("session")["replica"].nunique().max() == 2
    hits = {router: run.summary["prefix_cache_hit_rate"] for router, run in runs.items()}
    assert hits["session_affinity"] > 1.3 * hits["round_robin"]
    summary = runs["session_affinity"].summary
    assert summary["sessions"] == 100 and summary["mean_ttft_later_turns_ms"] < summary["mean_ttft_first_turn_ms"]


@pytest.mark.parametrize("change, message", [
    ({"trace": {"path": "t.csv"}}, "do not combine with trace"),
    ({"arrival": {"kind": "closed_loop", "users": 4}}, "arrival.kind: closed_loop"),
    ({"max_concurrency": 4}, "max_concurrency"),
])
def test_sessions_that_cannot_be_combined_yet_say_so(change, message):
    config = _sessions()
    config["workload"].update(change)
    if "trace" in change:
        for key in ("arrival", "input_tokens", "output_tokens", "num_requests"):
            config["workload"].pop(key)
    with pytest.raises(ConfigError, match=message):
        load_experiment(config)


def test_the_same_seed_gives_the_same_sessions():
    config = load_experiment(_sessions(num_sessions=50, turns=3, think_ms=300))
    first, second = (simulator.run(config).requests for _ in range(2))
    assert first.equals(second)  # NaN where NaN


def test_a_two_turn_sessions_hit_rate_by_hand():
    """Idle cache, one session of two turns (100 then 130 prompt tokens): turn 2 finds turn 1's prompt in whole
    16-token blocks, 96 tokens; the run's hit rate is 96 / (100 + 130) prompt tokens, and turn 2's own 96 / 130."""
    result = simulator.run(load_experiment(_sessions(turns=2)))
    turn2 = result.requests.sort_values("request_id").iloc[1]
    assert turn2["cached_tokens"] / turn2["input_tokens"] == pytest.approx(96 / 130)
    assert result.summary["prefix_cache_hit_rate"] == pytest.approx(96 / 230)


def _agent(fan_out=3, branch=10, turns=3, think_ms=250.0, **changes):
    config = _sessions(turns=turns, think_ms=think_ms, **changes)
    config["workload"]["sessions"].update({"fan_out": {"kind": "fixed", "value": fan_out}, "think": "fixed",
                                           "branch_tokens": {"kind": "fixed", "value": branch}})
    return config


def test_a_fanned_out_turn_shares_its_context_and_the_next_turn_holds_every_answer():
    """3 sub-requests a turn, 10 own tokens each, 10-token answers: turn 0 sends 100 + 10; its context for turn 1 is
    100 + 3 × 10 = 130, so turn 1 sends 130 + 20 + 10 = 160 and turn 2 (130 + 20 + 30) + 20 + 10 = 210. Sibling
    prompts agree on their shared tokens' ids and differ on their own; a turn's shared ids begin the next turn's."""
    from simulator.workload import generate_requests

    config = load_experiment(_agent())
    rows = simulator.run(config).requests.sort_values("request_id")
    assert rows["input_tokens"].tolist() == [110] * 3 + [160] * 3 + [210] * 3
    assert rows["turn"].tolist() == [0] * 3 + [1] * 3 + [2] * 3
    prefixes = generate_requests(config.workload, __import__("numpy").random.SeedSequence(config.seed)).prefixes
    a, b, later = prefixes[3].ids, prefixes[4].ids, prefixes[6].ids
    assert [a[i] for i in range(150)] == [b[i] for i in range(150)] and a[150] != b[150]
    assert [a[i] for i in range(150)] == [later[i] for i in range(150)]


def test_the_next_turn_waits_for_the_last_sub_request_plus_the_tool_time():
    rows = simulator.run(load_experiment(_agent(turns=2))).requests.sort_values("request_id")
    first_turn, second_turn = rows[rows["turn"] == 0], rows[rows["turn"] == 1]
    assert (second_turn["arrival_s"] == first_turn["finish_s"].max() + 0.25).all()
    assert (first_turn["arrival_s"] == first_turn["arrival_s"].iloc[0]).all()  # sent together


def test_a_rejected_sub_request_ends_the_session():
    """max_model_len 170: turn 1's 160-token prompts (+ 10 answer tokens) fit, turn 2's 210 do not — the scheduler
    rejects its three sub-requests — and turn 3 is then rejected with the reason, never sent."""
    config = _agent(turns=4)
    config["scheduler"]["max_model_len"] = 170
    result = simulator.run(load_experiment(config))
    rows = result.requests.sort_values("request_id")
    assert result.summary["completed"] == 6 and result.summary["num_rejected"] == 6
    fourth = rows[rows["turn"] == 3]
    assert (fourth["reject_reason"] == "turn 3 of its session had a sub-request rejected").all()


@pytest.mark.parametrize(("sessions", "turns", "fan_out", "what"), [
    (1000, 200_000, None, "1,000 sessions of their drawn turns make 200,000,000 requests"),
    (1000, 1000, 1000, "1,000,000 turns fanning out into their drawn sub-requests make 1,000,000,000 requests"),
])
def test_sessions_times_turns_times_fan_out_stay_within_the_request_limit(sessions, turns, fan_out, what):
    """num_requests bounds the sessions; their drawn turns and fan-outs multiply them: the product is refused
    before the per-request arrays are built (a 7 GiB array before)."""
    spec = {"turns": {"kind": "fixed", "value": turns}}
    if fan_out is not None:
        spec["fan_out"] = {"kind": "fixed", "value": fan_out}
    config = simulator.load(experiment(workload={"num_requests": sessions, "arrival": {"kind": "poisson", "rate": 1},
                                                 "input_tokens": {"kind": "fixed", "value": 8},
                                                 "output_tokens": {"kind": "fixed", "value": 2}, "sessions": spec}))
    with pytest.raises(ConfigError, match=f"workload.sessions: {what}, above the limit of 100,000,000 per run"):
        simulator.run(config)
