"""Scheduling policies against queueing theory, hand calculations and the serving literature's directions."""

from __future__ import annotations

import numpy as np
import pytest

import simulator
from simulator.config import load_experiment
from simulator.errors import ConfigError
from tests.helpers import REPO, SHARED_DATA, experiment, same_summaries

PROMPT, OUTPUT, PREFILL_MS, DECODE_MS, OVERHEAD_MS = 100, 20, 0.5, 4.0, 10.0
SERVICE_S = (OVERHEAD_MS + PROMPT * PREFILL_MS + (OUTPUT - 1) * DECODE_MS) / 1000


@pytest.mark.slow
@pytest.mark.parametrize(("rho", "num_requests"), [(0.5, 100_000), (0.8, 300_000)])
def test_static_single_server_is_md1(rho, num_requests):
    """static, max_num_seqs 1, fixed lengths, linear costs, Poisson arrivals: an M/D/1 queue, whose mean wait is
    ρ·S / (2(1 − ρ)) (Pollaczek–Khinchine). The sample mean's standard error is under 1% at these sizes."""
    config = experiment(
        seed=3,
        scheduler={"kind": "static", "max_num_seqs": 1, "max_model_len": 2048},
        cost_model={"kind": "linear", "prefill_ms_per_token": PREFILL_MS, "decode_ms_per_step": DECODE_MS,
                    "overhead_ms": OVERHEAD_MS},
        workload={"num_requests": num_requests, "arrival": {"kind": "poisson", "rate": rho / SERVICE_S},
                  "input_tokens": {"kind": "fixed", "value": PROMPT},
                  "output_tokens": {"kind": "fixed", "value": OUTPUT}},
    )
    requests = simulator.run(simulator.load(config)).requests
    wait = (requests["first_scheduled_s"] - requests["arrival_s"]).mean()
    assert wait == pytest.approx(rho * SERVICE_S / (2 * (1 - rho)), rel=0.03)


def _azure_conversation_workload(num_requests: int) -> dict:
    """The Azure conversation trace replayed 1000× faster (saturation); a lognormal fit of it when absent
    (input mean 1,155 / median 1,020 → σ 0.50; output mean 211 / median 129 → σ 0.99)."""
    trace = SHARED_DATA / "traces" / "azure_conv_2023.csv"
    if trace.is_file():
        return {"trace": {"path": str(trace), "speedup": 1000}, "num_requests": num_requests}
    return {"num_requests": num_requests, "arrival": {"kind": "poisson", "rate": 5000.0},
            "input_tokens": {"kind": "lognormal", "mean": 1155, "sigma": 0.5, "max": 6000},
            "output_tokens": {"kind": "lognormal", "mean": 211, "sigma": 0.99, "max": 2000}}


def test_continuous_batching_at_least_doubles_static_throughput_at_saturation():
    """Orca and vLLM: iteration-level batching beats request-level batching by far more than 2× in throughput,
    because a static batch waits for its longest member (../shared/reference/papers.csv)."""
    throughput = {}
    for kind in ("static", "continuous"):
        config = {"name": kind, "seed": 0, "model": "llama-3-8b", "hardware": "h100-sxm",
                  "scheduler": {"kind": kind, "max_num_seqs": 64}, "workload": _azure_conversation_workload(3000)}
        throughput[kind] = simulator.run(simulator.load(config)).summary["output_throughput"]
    assert throughput["continuous"] >= 2 * throughput["static"]


def test_chunked_prefill_cuts_tail_itl_when_long_prompts_arrive():
    """Sarathi-Serve: with long prompts arriving among many decodes, prefill-first iterations stall every decode
    for a whole long prefill; a 512-token budget bounds each iteration. p99 ITL drops, TTFT rises."""
    summaries = {}
    for scheduler in ({"kind": "continuous"}, {"kind": "chunked", "max_num_batched_tokens": 512, "max_num_seqs": 256}):
        config = {"name": scheduler["kind"], "seed": 0, "model": "llama-3-8b", "hardware": "h100-sxm",
                  "scheduler": scheduler,
                  "workload": {"num_requests": 2000, "arrival": {"kind": "poisson", "rate": 12},
                               "input_tokens": {"kind": "lognormal", "mean": 800, "sigma": 1.4, "max": 7000},
                               "output_tokens": {"kind": "fixed", "value": 300}}}
        summaries[scheduler["kind"]] = simulator.run(simulator.load(config)).summary
    continuous, chunked = summaries["continuous"], summaries["chunked"]
    assert continuous["p99_itl_ms"] > 3 * chunked["p99_itl_ms"]
    assert chunked["mean_ttft_ms"] > continuous["mean_ttft_ms"]
    assert chunked["completed"] == continuous["completed"] == 2000


def test_static_batch_timeout_waits_for_the_batch_to_fill():
    """Arrivals every 10 ms, batches of up to 8, timeout 25 ms: the first batch starts 25 ms after the first
    arrival with the three requests that arrived by then (0, 10, 20 ms)."""
    config = experiment(
        scheduler={"kind": "static", "max_num_seqs": 8, "batch_timeout_ms": 25, "max_model_len": 2048},
        workload={"num_requests": 3, "arrival": {"kind": "constant", "rate": 100.0},
                  "input_tokens": {"kind": "fixed", "value": 10}, "output_tokens": {"kind": "fixed", "value": 2}},
    )
    requests = simulator.run(simulator.load(config)).requests
    np.testing.assert_allclose(requests["first_scheduled_s"], 0.025)


def test_static_slots_stay_idle_until_the_whole_batch_finishes():
    """Batches of 2 with a 1 ms timeout: requests 0 and 1 (arriving 1 µs apart) fill a batch, which starts as soon as
    it is full; request 2, arriving 2 µs in, waits until the longer of the two has finished, although a slot frees
    earlier."""
    config = experiment(
        scheduler={"kind": "static", "max_num_seqs": 2, "batch_timeout_ms": 1, "max_model_len": 2048},
        workload={"num_requests": 3, "arrival": {"kind": "constant", "rate": 1e6},
                  "input_tokens": {"kind": "fixed", "value": 10},
                  "output_tokens": {"kind": "uniform", "min": 2, "max": 9}},
    )
    requests = simulator.run(simulator.load(config)).requests.set_index("request_id")
    np.testing.assert_allclose(requests.loc[[0, 1], "first_scheduled_s"], requests.loc[1, "arrival_s"])
    assert requests.loc[0, "finish_s"] != requests.loc[1, "finish_s"]  # seed 1 gives different lengths
    assert requests.loc[2, "first_scheduled_s"] == pytest.approx(requests.loc[[0, 1], "finish_s"].max())


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_max_queue_len_rejects_arrivals_with_a_reason(async_scheduling):
    """One slot, at most 3 waiting: of 10 requests arriving 1 µs apart, request 0 runs, 1–3 wait, 4–9 are
    rejected as the queue is full — with async scheduling too, where 1–3 wait unseen by the scheduler until the
    next batch is formed."""
    config = experiment(
        scheduler={"kind": "continuous", "max_num_seqs": 1, "max_queue_len": 3, "max_model_len": 2048,
                   "async_scheduling": async_scheduling},
        workload={"num_requests": 10, "arrival": {"kind": "constant", "rate": 1e6},
                  "input_tokens": {"kind": "fixed", "value": 10}, "output_tokens": {"kind": "fixed", "value": 5}},
    )
    result = simulator.run(simulator.load(config))
    requests = result.requests.set_index("request_id")
    assert list(requests.index[requests["status"] == "finished"]) == [0, 1, 2, 3]
    assert requests.loc[4:, "reject_reason"].str.contains(r"queue full: 3 requests waiting \(max_queue_len 3\)").all()
    assert result.summary["num_rejected"] == 6


def test_users_own_scheduler_by_file_path():
    """experiments/custom_scheduler.py: shortest prompt first. SJF minimises the mean wait of a queue, so near
    capacity its mean TTFT is below FCFS's."""
    path = REPO / "experiments" / "custom_scheduler.yaml"
    mine = simulator.run(simulator.load(path)).summary
    fcfs = simulator.run(simulator.load(path, scheduler={"kind": "continuous", "max_num_seqs": 32})).summary
    assert mine["completed"] == fcfs["completed"] == 2000
    assert mine["mean_ttft_ms"] < 0.8 * fcfs["mean_ttft_ms"]


@pytest.mark.parametrize(("kind", "message"), [
    ("no_such_file.py:Policy", "cannot import"),
    ("simulator.request.Request", "is not a subclass of simulator.schedulers.Scheduler"),
])
def test_bad_custom_scheduler_paths(kind, message):
    with pytest.raises(simulator.LLMSimError, match=message):
        simulator.run(simulator.load(experiment(scheduler={"kind": kind, "max_model_len": 2048})))


@pytest.mark.parametrize("kind", ["continuous", "chunked"])
def test_recompute_costs_compute_and_swap_costs_host_link_time(kind):
    """Under memory pressure both complete every request. Recompute re-prefills each victim's prompt and output so
    far; swap moves a decoding victim's KV out and back over the host link instead. With whole-prompt prefill every
    victim is decoding, so swap computes each prompt token exactly once; with chunked prefill a victim caught
    mid-prompt is still recomputed (its partial KV is not worth a round trip), so swap only computes less."""
    runs = {}
    for preemption in ("recompute", "swap"):
        config = experiment(
            seed=5, cost_model={"kind": "roofline"},
            scheduler={"kind": kind, "max_num_seqs": 32, "max_model_len": 2048, "preemption": preemption,
                       **({"max_num_batched_tokens": 512} if kind == "chunked" else {})},
            kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 200},
            workload={"num_requests": 200, "arrival": {"kind": "poisson", "rate": 200.0},
                      "input_tokens": {"kind": "uniform", "min": 100, "max": 600},
                      "output_tokens": {"kind": "uniform", "min": 50, "max": 400}},
        )
        runs[preemption] = simulator.run(simulator.load(config))
    for result in runs.values():
        assert result.summary["completed"] == 200 and result.summary["num_preemptions"] > 0
        assert result.summary["preempted_time_s"] == pytest.approx(result.requests["preempted_s"].sum())
        assert (result.requests.loc[result.requests["preemptions"] > 0, "preempted_s"] > 0).all()
    recompute, swap = runs["recompute"].summary, runs["swap"].summary
    prompts = int(runs["swap"].requests["input_tokens"].sum())
    if kind == "continuous":
        assert swap["prefill_tokens_computed"] == prompts
    assert swap["prefill_tokens_computed"] < recompute["prefill_tokens_computed"] and swap["swapped_tokens"] > 0
    assert swap["swapped_tokens"] % 2 == 0  # every token swapped out came back in
    assert recompute["prefill_tokens_computed"] > prompts and recompute["swapped_tokens"] == 0


@pytest.mark.parametrize(("delay_ms", "rejected"), [(500, [1, 2, 3]), (2000, [3]), (3000, [])])
def test_max_queue_delay_rejects_requests_that_wait_too_long(delay_ms, rejected):
    """One slot; each request holds it for 10 ms + 199 × 5 ms = 1.005 s; requests 1–3 arrive at 0.1, 0.2, 0.3 s and
    would start at 1.005, 2.010, 3.015 s (waits of 0.905, 1.81, 2.715 s). With 500 ms allowed all three expire; with
    2 s only request 3; with 3 s none."""
    config = experiment(
        scheduler={"kind": "continuous", "max_num_seqs": 1, "max_model_len": 2048, "max_queue_delay_ms": delay_ms},
        cost_model={"kind": "linear", "prefill_ms_per_token": 0.1, "decode_ms_per_step": 5.0},
        workload={"num_requests": 4, "arrival": {"kind": "constant", "rate": 10.0},
                  "input_tokens": {"kind": "fixed", "value": 100}, "output_tokens": {"kind": "fixed", "value": 200}},
    )
    result = simulator.run(simulator.load(config))
    requests = result.requests.set_index("request_id")
    assert list(requests.index[requests["status"] == "rejected"]) == rejected
    assert requests.loc[rejected, "reject_reason"].str.contains(f"max_queue_delay_ms {delay_ms}").all()
    assert requests.loc[0, "finish_s"] == pytest.approx(0.010 + 199 * 0.005)


def _speculative(acceptance: float, k: int = 4, ratio: float = 0.1, outputs: int = 1001, n: int = 20):
    spec = None if acceptance is None else {"num_speculative_tokens": k, "acceptance_rate": acceptance,
                                            "draft_cost_ratio": ratio}
    config = experiment(
        scheduler={"kind": "continuous", "max_num_seqs": 8, "max_model_len": 2048, "speculative": spec},
        kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 512},
        cost_model={"kind": "linear", "prefill_ms_per_token": 0.01, "decode_ms_per_step": 5.0,
                    "decode_ms_per_seq": 0.0},
        workload={"num_requests": n, "arrival": {"kind": "constant", "rate": 0.05},  # one at a time
                  "input_tokens": {"kind": "fixed", "value": 100},
                  "output_tokens": {"kind": "fixed", "value": outputs}},
    )
    return simulator.run(load_experiment(config))


def test_speculative_decoding_cuts_tpot_by_the_expected_accepted_tokens_net_of_draft_cost():
    """Alone on a replica, a step costs 5 ms × (1 + k·r) with k = 4 drafts at r = 0.1 of a step each, and emits
    1 + A tokens, A truncated geometric: E[1 + A] = (1 − a^(k+1)) / (1 − a) = 3.36 at a = 0.8. So TPOT falls from
    5 ms to about 5 × 1.4 / 3.36 = 2.08 ms."""
    plain, fast = _speculative(None), _speculative(0.8)
    expected_tokens = (1 - 0.8**5) / (1 - 0.8)
    assert plain.summary["mean_tpot_ms"] == pytest.approx(5.0)
    assert fast.summary["mean_tpot_ms"] == pytest.approx(5.0 * 1.4 / expected_tokens, rel=0.03)
    assert (fast.requests["output_tokens"] == 1001).all() and fast.summary["completed"] == 20
    assert same_summaries(fast.summary, _speculative(0.8).summary)  # seeded: same config, same draws


@pytest.mark.parametrize(("acceptance", "tokens_per_step"), [(0.0, 1), (1.0, 5)])
def test_speculative_decoding_at_the_acceptance_extremes(acceptance, tokens_per_step):
    """a = 0: every step emits one token and pays for the drafts (TPOT 5 × 1.4 = 7 ms, worse than 5 ms).
    a = 1: every step emits k + 1 = 5 tokens: 1,000 tokens after the first take 200 steps of 7 ms."""
    result = _speculative(acceptance)
    steps = -(-1000 // tokens_per_step)
    assert result.summary["mean_tpot_ms"] == pytest.approx(steps * 7.0 / 1000)


def test_speculative_decoding_needs_a_paged_cache():
    config = experiment(scheduler={"kind": "continuous", "speculative": {
                            "num_speculative_tokens": 2, "acceptance_rate": 0.5, "draft_cost_ratio": 0.1}},
                        kv_cache={"kind": "contiguous", "num_gpu_blocks": 256})
    with pytest.raises(ConfigError, match=r"scheduler\.speculative: needs kv_cache\.kind: paged"):
        simulator.run(load_experiment(config))


def test_a_draft_model_is_priced_by_the_cost_model():
    """Drafting with the target model itself costs exactly one target decode step per drafted token (the same
    pool of blocks in both runs: the draft model's weights and KV, which the generic draft has not, size only the
    memory plan, compared in tests/cluster/test_speculative.py)."""
    def run(spec):
        config = experiment(model="llama-3-8b", cost_model={"kind": "roofline"},
                            kv_cache={"kind": "paged", "num_gpu_blocks": 4096},
                            scheduler={"kind": "continuous", "max_num_seqs": 16, "speculative": {
                                "num_speculative_tokens": 3, "acceptance_rate": 0.7, **spec}})
        summary = simulator.run(load_experiment(config)).summary
        return {k: v for k, v in summary.items() if not k.endswith("_gib_per_gpu")}

    assert same_summaries(run({"draft_model": "llama-3-8b"}), run({"draft_cost_ratio": 1.0}))


def test_the_mtp_experiment_reproduces_sglangs_batch_32_speed_up():
    """experiments/mtp_speculation.yaml: DeepSeek-V3 on 8 H200s, 32 clients, one MTP draft at 0.875. SGLang's DeepSeek
    docs report 1.5x decoding at batch 32 on H200 TP 8 (docs/references/deepseek.md, Multi-token Prediction); within
    15% of it, and its steps emit 1 + 0.875 tokens (the accepted draft and the bonus token)."""
    path = REPO / "experiments" / "mtp_speculation.yaml"
    mtp = simulator.run(simulator.load(path)).summary
    plain = simulator.run(simulator.load(path, scheduler={"max_model_len": 4096, "max_num_seqs": 32})).summary
    assert 1.5 * 0.85 < plain["mean_tpot_ms"] / mtp["mean_tpot_ms"] < 1.5 * 1.15
    assert mtp["mean_accepted_tokens"] == pytest.approx(1.875, abs=0.02)
    assert mtp["weights_gib_per_gpu"] > plain["weights_gib_per_gpu"]


@pytest.mark.parametrize("scheduler", [{"kind": "continuous"}, {"kind": "chunked"}])
def test_offline_delivers_at_least_the_best_sustained_rate_under_kv_pressure(scheduler):
    """Every request at t = 0 (offline) keeps the server at least as busy as any sustained arrival rate, so its
    output throughput is at least the best sustained one, also when memory, not compute, limits the batch and
    requests are preempted (a scheduler that re-admits requests only to evict them again would lose this)."""
    def run(rate: float) -> dict:
        return simulator.run(simulator.load(experiment(
            cost_model={"kind": "roofline"}, engine="vllm",
            scheduler={**scheduler, "max_num_seqs": 256, "max_num_batched_tokens": 8192, "max_model_len": 3000},
            kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 4000},  # 64k tokens: ~70 requests
            workload={"num_requests": 600, "arrival": {"kind": "constant", "rate": rate},
                      "input_tokens": {"kind": "lognormal", "mean": 500, "sigma": 0.8, "max": 2000},
                      "output_tokens": {"kind": "fixed", "value": 400}},
        ))).summary

    offline = run(1e9)
    sustained = [run(rate) for rate in (5.0, 10.0, 20.0, 40.0)]
    assert offline["num_preemptions"] > 0  # memory-bound, as intended
    assert offline["output_throughput"] >= 0.99 * max(s["output_throughput"] for s in sustained)


@pytest.mark.parametrize("scheduler", [{"kind": "continuous"}, {"kind": "continuous", "prefill_priority": False},
                                       {"kind": "chunked"}])
@pytest.mark.parametrize("seed", [0, 1])
def test_admission_leaves_the_watermark_and_the_decodes_next_step(monkeypatch, scheduler, seed):
    """vLLM's admission rules under KV pressure, checked at every admission of a memory-bound run: while other
    requests run, an admission leaves at least ``watermark`` of the blocks free and every decoding request room for
    its next token (else it would be the next victim at once); an iteration that had to preempt admits no one
    (vLLM v1). A request alone is always admitted (no hang), and every request completes."""
    from simulator.schedulers.base import SCHEDULERS, Scheduler

    checked = {"admissions": 0, "preempting_iterations": 0}
    admit = Scheduler.admit

    def checked_admit(self, request, now, tokens):
        others = bool(self.prefilling or self.decoding)
        cached = admit(self, request, now, tokens)
        if others:
            assert self.kv.free_blocks >= self.watermark_blocks
            assert not self.decoding or self.decodes_can_grow()
        checked["admissions"] += 1
        return cached

    def checking(original):
        def schedule(self, now):
            before = checked["admissions"]
            batch = original(self, now)
            if batch.preempted and self.config.kind == "chunked":
                assert checked["admissions"] == before
                checked["preempting_iterations"] += 1
            return batch
        return schedule

    monkeypatch.setattr(Scheduler, "admit", checked_admit)
    for kind in ("continuous", "chunked"):
        cls = SCHEDULERS.get(kind)
        monkeypatch.setattr(cls, "schedule", checking(cls.schedule))

    result = simulator.run(simulator.load(experiment(
        seed=seed, scheduler={**scheduler, "max_num_seqs": 64, "max_num_batched_tokens": 4096, "max_model_len": 2048},
        kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 600},  # 9,600 tokens, watermark 6 blocks
        workload={"num_requests": 200, "arrival": {"kind": "poisson", "rate": 50.0},
                  "input_tokens": {"kind": "lognormal", "mean": 300, "sigma": 0.8, "max": 1500},
                  "output_tokens": {"kind": "lognormal", "mean": 200, "sigma": 0.8, "max": 500}},
    )))
    assert checked["admissions"] >= 200 and result.summary["num_preemptions"] > 0
    assert (result.requests["status"] == "finished").all()


def test_prefill_first_batching_chunks_a_long_prompt_as_sglang_does():
    """SGLang's chunked_prefill_size: prefill-first, a prompt of 2,500 tokens with a 1,000-token budget takes three
    prefill iterations (1,000, 1,000, 500). By hand with linear costs (10 ms + 0.1 ms a token per prefill
    iteration): alone, its TTFT is 3 × 10 + 2,500 × 0.1 = 280 ms. With a second such request 50 ms behind it, the
    chunked prompt keeps its chunk first and the newcomer takes the rest of the third iteration (500 + 500 tokens:
    110 ms), so the first TTFT is 110 + 110 + 110 = 330 ms, and the second prompt's two remaining chunks (1,000 and
    1,000) follow before any decode: its TTFT is 330 + 110 + 110 − 50 = 500 ms. Without chunk_long_prompts the same
    configuration is refused in one line; decode-first batching has no such knob."""
    def config(requests: int, chunks: bool = True, priority: bool = True) -> dict:
        return experiment(
            scheduler={"kind": "continuous", "prefill_priority": priority, "chunk_long_prompts": chunks,
                       "max_num_batched_tokens": 1000, "max_model_len": 4000},
            kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 1024},  # room for both prompts
            cost_model={"kind": "linear", "prefill_ms_per_token": 0.1, "decode_ms_per_step": 5.0,
                        "overhead_ms": 10.0},
            workload={"num_requests": requests, "arrival": {"kind": "constant", "rate": 20.0},
                      "input_tokens": {"kind": "fixed", "value": 2500},
                      "output_tokens": {"kind": "fixed", "value": 3}})

    alone = simulator.run(simulator.load(config(1))).requests
    assert alone["ttft_ms"].tolist() == pytest.approx([280.0])
    pair = simulator.run(simulator.load(config(2))).requests.sort_values("arrival_s")
    assert pair["ttft_ms"].tolist() == pytest.approx([330.0, 500.0])
    assert (pair["status"] == "finished").all()
    with pytest.raises(ConfigError, match="max_num_batched_tokens: 1000 is below max_model_len 4000"):
        simulator.run(simulator.load(config(1, chunks=False)))
    with pytest.raises(ConfigError, match="chunk_long_prompts applies to prefill-first batching"):
        simulator.load(config(1, priority=False))
