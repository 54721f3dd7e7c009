"""LoRA adapters (``lora``): the slots' bytes derived by hand for Llama-3-8B, loads timed from bytes over the host
link and storage, vLLM's max_loras rule as an invariant over random runs, Zipf popularity, the shrink/expand
kernels' memory-bound slope, and the issue's identity: one adapter of rank 0 is the base model exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulator
from simulator.catalog import load_hardware, load_model
from simulator.config import load_experiment
from simulator.config.engine import LoRAConfig
from simulator.cost.lora import LoRACost
from simulator.errors import ConfigError, LLMSimError
from simulator.workload.adapters import adapter_popularity, assign_adapters
from tests.helpers import experiment

# Llama-3-8B, one layer, rank 16, TP 1: QKV 4096 → (32 + 2·8)·128 = 6144, output 4096 → 4096, gate+up 4096 → 28672,
# down 14336 → 4096; an adapter adds r·(k + n) parameters per projection: 16 · (10240 + 8192 + 32768 + 18432).
LLAMA3_8B_RANK16_BYTES = 32 * 16 * (10240 + 8192 + 32768 + 18432) * 2  # 32 layers, bf16: 71,303,168 bytes


def _lora(lora: dict | None, workload: dict | None = None, **sections) -> dict:
    base = experiment(workload=workload or {"num_requests": 300, "arrival": {"kind": "poisson", "rate": 40.0},
                                            "input_tokens": {"kind": "uniform", "min": 10, "max": 300},
                                            "output_tokens": {"kind": "uniform", "min": 1, "max": 100}}, **sections)
    if lora is not None:
        base["lora"] = lora
    return base


def test_an_adapters_bytes_by_hand():
    cost = LoRACost(load_model("llama-3-8b"), load_hardware("h100-sxm"), 1, 16, "all")
    assert cost.bytes_per_gpu == LLAMA3_8B_RANK16_BYTES
    attention_only = LoRACost(load_model("llama-3-8b"), load_hardware("h100-sxm"), 1, 16, "attention")
    assert attention_only.bytes_per_gpu == 32 * 16 * (10240 + 8192) * 2
    # TP 2: QKV and gate+up split their outputs, output and down their inputs
    halves = 32 * 16 * ((4096 + 3072) + (2048 + 4096) + (4096 + 14336) + (7168 + 4096)) * 2
    assert LoRACost(load_model("llama-3-8b"), load_hardware("h100-sxm"), 2, 16, "all").bytes_per_gpu == halves


def test_the_slots_come_out_of_the_kv_pool():
    """max_loras 4 reserves 4 adapters' bytes per GPU; the pool loses as many whole blocks as they cover."""
    cluster = {"replicas": 1}
    without = experiment(cluster=cluster, kv_cache={"kind": "paged", "block_size": 16})
    with_lora = {**without, "lora": {"adapters": 10, "rank": 16, "max_loras": 4}}
    a, b = (simulator.run(load_experiment(c)).summary for c in (without, with_lora))
    assert b["lora_gib_per_gpu"] * 2**30 == 4 * LLAMA3_8B_RANK16_BYTES
    kv_bytes_per_block = a["kv_pool_gib_per_gpu"] * 2**30 / a["kv_num_blocks"]
    lost = a["kv_num_blocks"] - b["kv_num_blocks"]
    assert lost == pytest.approx(4 * LLAMA3_8B_RANK16_BYTES / kv_bytes_per_block, abs=1)


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_one_adapter_of_rank_zero_is_the_base_model_exactly(router):
    base = _lora(None, cluster={"replicas": 2, "router": router})
    lora = _lora({"adapters": 1, "rank": 0, "max_loras": 1}, cluster={"replicas": 2, "router": router})
    a = simulator.run(load_experiment(base)).requests
    b = simulator.run(load_experiment(lora)).requests
    assert (b["adapter"] == 0).all() and (a["adapter"] == -1).all()
    assert a.drop(columns="adapter").equals(b.drop(columns="adapter"))


def test_a_load_costs_the_bytes_over_the_host_link_then_from_storage():
    """One adapter, two requests far apart on one replica: the first loads the adapter — from storage at 1 GB/s
    (host memory starts empty with max_cpu_loras) and over the 64 GB/s host link — the second finds it resident;
    their prompts are alike, so their TTFTs differ by exactly the load."""
    workload = {"num_requests": 2, "arrival": {"kind": "constant", "rate": 0.2},
                "input_tokens": {"kind": "fixed", "value": 100}, "output_tokens": {"kind": "fixed", "value": 5}}
    lora = {"adapters": 1, "rank": 16, "max_loras": 1, "max_cpu_loras": 1, "storage_gb_per_s": 1.0}
    result = simulator.run(load_experiment(_lora(lora, workload)))
    first, second = result.requests.sort_values("request_id")["ttft_ms"]
    load_s = LLAMA3_8B_RANK16_BYTES / 64e9 + LLAMA3_8B_RANK16_BYTES / 1e9
    assert (first - second) / 1000 == pytest.approx(load_s, rel=1e-9)
    s = result.summary
    assert (s["adapter_loads"], s["adapter_storage_reads"]) == (1, 1)
    assert s["adapter_load_time_s"] == pytest.approx(load_s)


def test_each_replica_loads_each_adapter_it_serves_once_when_the_slots_hold_them_all():
    result = simulator.run(load_experiment(_lora({"adapters": 6, "max_loras": 6},
                                                 cluster={"replicas": 3, "router": "round_robin"})))
    rows = result.requests
    assert result.summary["adapter_loads"] == rows.groupby("replica")["adapter"].nunique().sum()


def _intervals_respect_max_loras(rows, max_loras: int) -> None:
    """At no instant do more than max_loras distinct adapters run on one replica (running: first scheduled to
    finish; the runs below preempt nothing)."""
    for _, on in rows.groupby("replica"):
        times = np.unique(on["first_scheduled_s"])
        for t in times:
            running = on[(on["first_scheduled_s"] <= t) & (on["finish_s"] > t) & (on["adapter"] >= 0)]
            assert running["adapter"].nunique() <= max_loras, t


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(adapters=st.integers(1, 12), max_loras=st.integers(1, 4), popularity=st.sampled_from([0.0, 1.0, 2.0]),
       fraction=st.sampled_from([0.5, 1.0]), kind=st.sampled_from(["chunked", "continuous"]),
       seed=st.integers(0, 100))
def test_never_more_adapters_running_than_max_loras(adapters, max_loras, popularity, fraction, kind, seed):
    scheduler = {"kind": kind, "max_num_seqs": 16, "max_model_len": 2048}
    if kind == "chunked":
        scheduler["max_num_batched_tokens"] = 512
    config = _lora({"adapters": adapters, "max_loras": max_loras, "popularity": popularity, "fraction": fraction},
                   seed=seed, scheduler=scheduler, kv_cache={"kind": "paged", "block_size": 16,
                                                             "num_gpu_blocks": 4096})
    result = simulator.run(load_experiment(config))
    assert result.summary["num_preemptions"] == 0 and result.summary["completed"] == 300
    _intervals_respect_max_loras(result.requests, max_loras)


def test_a_request_whose_adapter_has_no_slot_is_passed_over():
    """max_loras 1 and two adapters: some request starts before an earlier arrival whose adapter was blocked
    (vLLM's scheduler passes it over rather than blocking the queue)."""
    result = simulator.run(load_experiment(_lora({"adapters": 2, "max_loras": 1, "popularity": 0.0})))
    rows = result.requests.sort_values("arrival_s")
    overtaken = (rows["first_scheduled_s"].cummax().shift(fill_value=0) > rows["first_scheduled_s"]).any()
    assert overtaken
    _intervals_respect_max_loras(rows, 1)


def test_popularity_is_zipf_and_sessions_keep_their_adapter():
    config = LoRAConfig(adapters=5, popularity=1.2, fraction=0.8)
    p = adapter_popularity(config)
    assert p[0] / p[1] == pytest.approx(2 ** 1.2) and p.sum() == pytest.approx(1)
    drawn = assign_adapters(config, 200_000, None, np.random.default_rng(0))
    assert (drawn == -1).mean() == pytest.approx(0.2, abs=0.005)
    named = drawn[drawn >= 0]
    assert np.bincount(named, minlength=5) / named.size == pytest.approx(p, abs=0.005)
    sessions = np.repeat(np.arange(1000), 3)
    per_turn = assign_adapters(config, sessions.size, sessions, np.random.default_rng(1)).reshape(1000, 3)
    assert (per_turn == per_turn[:, :1]).all()


def test_the_kernels_read_each_adapter_once():
    """At one token the shrink/expand kernels are memory-bound: each further distinct adapter adds its weights'
    bytes over the achievable bandwidth."""
    hardware = load_hardware("h100-sxm")
    cost = LoRACost(load_model("llama-3-8b"), hardware, 1, 64, "all")
    slope = (cost.time(1, 16) - cost.time(1, 8)) / 8
    assert slope == pytest.approx(cost.bytes_per_gpu / hardware.achievable_bandwidth, rel=0.05)
    assert cost.time(0, 4) == cost.time(8, 0) == LoRACost(load_model("llama-3-8b"), hardware, 1, 0, "all").time(8, 4)


@pytest.mark.parametrize("sections, message", [
    ({"scheduler": {"kind": "static", "max_num_seqs": 4, "max_model_len": 2048}}, "continuous or chunked"),
    ({"cluster": {"kind": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 1}}},
     "not modelled yet"),
])
def test_lora_where_it_is_not_modelled_says_so(sections, message):
    with pytest.raises(ConfigError, match=message):
        load_experiment(_lora({"adapters": 2}, **sections))


@pytest.mark.parametrize("lora, message", [
    ({"adapters": 10, "max_loras": 4, "max_cpu_loras": 2}, "below max_loras"),
    ({"adapters": 10, "max_loras": 2, "max_cpu_loras": 4}, "storage_gb_per_s"),
])
def test_inconsistent_adapter_tiers_are_refused(lora, message):
    with pytest.raises(ConfigError, match=message):
        load_experiment(_lora(lora))


def test_slots_larger_than_the_memory_left_are_refused():
    config = experiment(hardware="a10", kv_cache={"kind": "paged", "block_size": 16},
                        lora={"adapters": 64, "rank": 1024, "max_loras": 64})
    with pytest.raises(LLMSimError, match="LoRA slots"):
        simulator.run(load_experiment(config))
