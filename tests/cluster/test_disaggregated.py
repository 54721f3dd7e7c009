"""Disaggregated prefill/decode and heterogeneous pools, against hand calculations."""

from __future__ import annotations

import pytest

import simulator
from simulator.config import load_experiment
from simulator.errors import ConfigError
from simulator.kv import kv_cache_bytes
from tests.helpers import experiment

KV_PER_TOKEN = kv_cache_bytes(32, 8, 128, "bf16", 1, 1)  # Llama-3-8B: 128 KiB


def _disaggregated(num_requests=1, rate=1.0, inputs=1000, outputs=11, **transfer):
    return experiment(
        cluster={"kind": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 1},
                 "transfer": {"bandwidth_gb_per_s": 10, "latency_ms": 1.0, **transfer}},
        workload={"num_requests": num_requests, "arrival": {"kind": "constant", "rate": rate},
                  "input_tokens": {"kind": "fixed", "value": inputs},
                  "output_tokens": {"kind": "fixed", "value": outputs}},
    )


def test_one_request_prefills_transfers_then_decodes():
    """Prefill = 2 ms overhead + 1000 × 0.1 ms; transfer = 1 ms + 1000 × 128 KiB / 10 GB/s; then 10 decode steps of
    5 + 0.2 ms on the decode replica, which joins the next iteration at no cost. The client's first token comes
    from the decode replica when it takes the KV (TTFT = prefill + transfer), or with ``first_token_from: prefill``
    as the prefill ends; the end-to-end latency is the same."""
    transfer_ms = 1.0 + 1000 * KV_PER_TOKEN / 10e9 * 1000
    for first_token_from, ttft_ms in (("decode", 102.0 + transfer_ms), ("prefill", 102.0)):
        config = _disaggregated()
        config["cluster"]["first_token_from"] = first_token_from
        result = simulator.run(load_experiment(config))
        row, s = result.requests.iloc[0], result.summary
        assert row["ttft_ms"] == pytest.approx(ttft_ms)
        assert row["prefill_done_s"] * 1000 == pytest.approx(102.0)
        assert s["mean_kv_transfer_ms"] == pytest.approx(transfer_ms)
        assert row["e2el_ms"] == pytest.approx(102.0 + transfer_ms + 10 * 5.2)
        assert row["tpot_ms"] == pytest.approx((transfer_ms if first_token_from == "prefill" else 0) / 10 + 5.2)
        assert row["replica"] == 1 and s["num_gpus"] == 2 and s["mean_decode_queue_ms"] == 0


def test_a_prefill_replicas_link_sends_one_transfer_at_a_time():
    """At 0.1 GB/s a transfer takes T = 1 + 1000 × 128 KiB / 0.1 GB/s ms. Prompt 1 is prefilled by 102 ms and sent
    until 102 + T; prompt 2 is prefilled by 204 ms but its transfer waits for the link: it arrives at 102 + 2T."""
    result = simulator.run(load_experiment(_disaggregated(num_requests=2, rate=1e9, bandwidth_gb_per_s=0.1)))
    rows = result.requests.sort_values("request_id")
    transfer_s = 1e-3 + 1000 * KV_PER_TOKEN / 0.1e9
    assert list(rows["prefill_done_s"]) == pytest.approx([0.102, 0.204])
    assert list(rows["kv_arrived_s"]) == pytest.approx([0.102 + transfer_s, 0.102 + 2 * transfer_s])


def test_layer_overlap_hides_the_transfer_behind_the_prefill():
    """Transfer 14.1 ms < prefill 102 ms: only one layer's share (14.1 / 32 ms) remains after the prefill."""
    result = simulator.run(load_experiment(_disaggregated(layer_overlap=True)))
    transfer_ms = 1.0 + 1000 * KV_PER_TOKEN / 10e9 * 1000
    assert result.summary["mean_kv_transfer_ms"] == pytest.approx(transfer_ms / 32)


def test_single_token_requests_finish_on_the_prefill_side():
    result = simulator.run(load_experiment(_disaggregated(num_requests=3, outputs=1)))
    assert (result.requests["replica"] == 0).all() and result.summary["completed"] == 3
    assert result.requests["kv_arrived_s"].isna().all()


def test_decode_pool_memory_gates_admission():
    """A decode pool that holds one request's KV at a time: the second waits in the decode queue."""
    config = _disaggregated(num_requests=2, rate=1e9, inputs=600, outputs=50)
    config["kv_cache"] = {"kind": "paged", "block_size": 16, "num_gpu_blocks": 45}  # 720 tokens
    result = simulator.run(load_experiment(config))
    assert result.summary["completed"] == 2
    later = result.requests.sort_values("decode_admitted_s").iloc[1]
    assert later["decode_admitted_s"] > later["kv_arrived_s"]
    assert result.summary["mean_decode_queue_ms"] > 0


@pytest.mark.parametrize(("cluster", "message"), [
    ({"kind": "disaggregated", "prefill": {"replicas": 1}}, "needs ['decode'] pools"),
    ({"prefill": {"replicas": 1}, "decode": {"replicas": 1}}, "need kind: disaggregated"),
    ({"kind": "disaggregated", "prefill": {}, "decode": {}, "pools": [{}]}, "pools is for colocated"),
])
def test_bad_cluster_shapes_are_refused(cluster, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_experiment(experiment(cluster=cluster))


def test_heterogeneous_pools_serve_with_their_own_hardware():
    """One A100 and one H100 replica behind least_outstanding: the faster H100 finishes its requests sooner."""
    config = experiment(
        cluster={"pools": [{"hardware": "a100-80gb-sxm", "replicas": 1}, {"hardware": "h100-sxm", "replicas": 1}],
                 "router": "round_robin"},
        cost_model={"kind": "roofline"}, kv_cache={"kind": "paged"},
        workload={"num_requests": 40, "arrival": {"kind": "poisson", "rate": 2.0},
                  "input_tokens": {"kind": "fixed", "value": 1000}, "output_tokens": {"kind": "fixed", "value": 50}},
    )
    result = simulator.run(load_experiment(config))
    by_replica = result.requests.groupby("replica")["e2el_ms"].median()
    assert by_replica[1] < by_replica[0] and result.summary["num_gpus"] == 2


def test_each_pool_batches_within_its_own_limits():
    """Prefill workers limited to one request, decode workers to one: three 1000-token prompts sent together are
    prefilled one after another (done at 102, 204, 306 ms: 2 + 1000 × 0.1 ms each; with the experiment's 16 and 2048
    tokens the two behind the first share an iteration: 102 + 2 + 2000 × 0.1 = 304 ms) and each decodes only when
    the one before has finished."""
    config = _disaggregated(num_requests=3, rate=1e9, outputs=11)
    config["cluster"]["prefill"]["max_num_seqs"] = 1
    config["cluster"]["decode"]["max_num_seqs"] = 1
    rows = simulator.run(load_experiment(config)).requests.sort_values("prefill_done_s")
    assert (rows["prefill_done_s"] * 1000).tolist() == pytest.approx([102.0, 204.0, 306.0])
    admitted, finished = rows["decode_admitted_s"].to_numpy(), rows["finish_s"].to_numpy()
    assert (admitted[1:] >= finished[:-1] - 1e-12).all()
    shared = simulator.run(load_experiment(_disaggregated(num_requests=3, rate=1e9, outputs=11))).requests
    assert sorted(shared["prefill_done_s"] * 1000) == pytest.approx([102.0, 304.0, 304.0])


def test_a_pool_limit_is_checked_like_the_scheduler_section():
    config = _disaggregated()
    config["scheduler"] = {"kind": "chunked", "max_num_batched_tokens": 2048, "long_prefill_token_threshold": 1024,
                           "max_model_len": 2048}
    config["cluster"]["decode"]["max_num_batched_tokens"] = 512
    with pytest.raises(ConfigError, match=r"^cluster.decode: long_prefill_token_threshold must be <= max_num_batched"):
        simulator.run(load_experiment(config))


def test_a_full_decode_pool_backs_up_into_the_prefill_pool():
    """Each pool holds one 300-token request (30 blocks of 16; a prompt takes 19, a decoding request up to 25). The
    prefill replica keeps a prompt's KV until the decode side takes it, so the third prompt of three sent together
    waits for the second to leave, which waits for the first to finish decoding: with prefill P = 2 + 300 × 0.1 ms,
    transfer T = 1 ms + 300 × 128 KiB / 10 GB/s and 99 decode steps D of 5.2 ms, the third's prefill ends at
    2P + T + D (the first is taken at P + T, done at P + T + D; the second is taken then and the third starts)."""
    config = _disaggregated(num_requests=3, rate=1e9, inputs=300, outputs=100)
    config["kv_cache"] = {"kind": "paged", "block_size": 16, "num_gpu_blocks": 30}
    config["scheduler"]["watermark"] = 0
    result = simulator.run(load_experiment(config))
    rows = result.requests.sort_values("request_id")
    prefill, transfer, decode = 32.0, 1.0 + 300 * KV_PER_TOKEN / 10e9 * 1000, 99 * 5.2
    assert rows["prefill_done_s"].iloc[2] * 1000 == pytest.approx(2 * prefill + transfer + decode)
    assert rows["decode_admitted_s"].iloc[1] * 1000 == pytest.approx(prefill + transfer + decode)
    assert result.summary["completed"] == 3
