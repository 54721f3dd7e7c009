"""Speculative decoding end to end: steps, acceptance per position, the verification's KV, the cost of drafts, and
the speed-up against published figures."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import yaml

import simulator
from simulator.catalog import load_hardware
from simulator.cli import main
from simulator.config import load_experiment
from simulator.errors import LLMSimError
from simulator.kv import PagedAllocator
from simulator.request import Request
from simulator.schedulers.continuous import ContinuousScheduler, ContinuousSchedulerConfig
from tests.helpers import experiment, same_summaries


def _one_at_a_time(spec: dict | None, *, outputs: int, n: int = 4, **overrides) -> dict:
    """``n`` requests of 100 prompt tokens and ``outputs`` output tokens, each alone on the replica."""
    config = experiment(**{
        "scheduler": {"kind": "continuous", "max_num_seqs": 8, "max_model_len": 4096, "speculative": spec},
        "kv_cache": {"kind": "paged", "block_size": 16, "num_gpu_blocks": 1024},
        "workload": {"num_requests": n, "arrival": {"kind": "closed_loop", "users": 1},
                     "input_tokens": {"kind": "fixed", "value": 100},
                     "output_tokens": {"kind": "fixed", "value": outputs}}, **overrides})
    return simulator.run(load_experiment(config)).summary


DEEPSEEK = {"model": "deepseek-v3", "hardware": "h200-sxm", "engine": "sglang", "cluster": {"tensor_parallel": 8},
            "cost_model": {"kind": "roofline"}}


@pytest.mark.parametrize("outputs", [101, 100])
def test_one_mtp_module_at_full_acceptance_halves_the_decode_steps(outputs):
    """A request's first token comes from its prefill, the other outputs − 1 from decode steps: one each without
    speculation, two each (the accepted draft and the bonus token) with one MTP draft always accepted, so
    ceil((outputs − 1) / 2) steps — exactly half for 100 decoded tokens, 50 for 99."""
    plain = _one_at_a_time(None, outputs=outputs, n=1, **DEEPSEEK)
    mtp = _one_at_a_time({"method": "mtp", "num_speculative_tokens": 1, "acceptance_rate": 1.0}, outputs=outputs,
                         n=1, **DEEPSEEK)
    assert plain["num_iterations"] == 1 + (outputs - 1)
    assert mtp["num_iterations"] == 1 + math.ceil((outputs - 1) / 2)
    assert mtp["mean_accepted_tokens"] == 2.0 and mtp["acceptance_rate_pos1"] == 1.0


def test_accepted_tokens_per_step_follow_the_per_position_rates():
    """With conditional rates a = [0.9, 0.6, 0.3], P(A ≥ i) = Π_{j≤i} a_j, so E[1 + A] = 1 + 0.9 + 0.54 + 0.162 =
    2.602 and Var A = E[A²] − E[A]² = (0.36 + 4·0.378 + 9·0.162) − 1.602² = 0.7636. Over n verification steps the
    mean is within 4·sqrt(0.7636 / n) of it, and each conditional rate within 4·sqrt(a(1 − a) / m) of a_i over the
    m steps that reached position i (CLT bounds; n ≈ 15,000 here). Drafted on the host at no cost (ngram), a step
    costs the linear model's 5 ms whatever it emits, so TPOT = steps × 5 ms / (outputs − 1) follows too."""
    rates = [0.9, 0.6, 0.3]
    summary = _one_at_a_time({"method": "ngram", "num_speculative_tokens": 3, "acceptance": rates,
                              "ngram_us_per_sequence": 0}, outputs=2001, n=20,
                             cost_model={"kind": "linear", "prefill_ms_per_token": 0.0, "decode_ms_per_step": 5.0})
    steps = 20 * 2000 / summary["mean_accepted_tokens"]  # every decoded token came from some step
    assert summary["mean_accepted_tokens"] == pytest.approx(2.602, abs=4 * math.sqrt(0.7636 / steps))
    reached = steps
    for i, a in enumerate(rates, start=1):
        assert summary[f"acceptance_rate_pos{i}"] == pytest.approx(a, abs=4 * math.sqrt(a * (1 - a) / reached))
        reached *= a
    assert summary["draft_acceptance_rate"] == pytest.approx((summary["mean_accepted_tokens"] - 1) / 3)
    assert summary["mean_tpot_ms"] == pytest.approx(5.0 / 2.602, rel=4 * math.sqrt(0.7636 / steps) / 2.602 + 0.001)


@pytest.mark.parametrize(("method", "model"), [("mtp", DEEPSEEK), ("eagle3", {"cost_model": {"kind": "roofline"}}),
                                               ("ngram", {"cost_model": {"kind": "roofline"}})])
def test_at_acceptance_0_speculation_only_adds_cost(method, model):
    """Nothing accepted: every step emits one token, as without speculation, and pays for the drafts and a
    verification over k + 1 positions — the same steps, each longer."""
    plain = _one_at_a_time(None, outputs=200, **model)
    spec = _one_at_a_time({"method": method, "num_speculative_tokens": 3, "acceptance_rate": 0.0}, outputs=200,
                          **model)
    assert spec["num_iterations"] == plain["num_iterations"] and spec["mean_accepted_tokens"] == 1.0
    assert spec["mean_tpot_ms"] > plain["mean_tpot_ms"]
    assert spec["output_throughput"] < plain["output_throughput"]


def test_the_verification_reserves_k_plus_1_positions_and_releases_the_rejected():
    """Blocks of 4 tokens; a request of 10 prompt tokens and 20 outputs, 3 drafts of which the first two are always
    accepted. After its prefill its KV holds 10 tokens (its first output is not written yet); a step reserves the
    4 positions its verification writes (14 tokens, 4 blocks), then keeps the newest token and 2 accepted drafts
    (13 tokens) and releases the rejected one; the next step reserves 17 (5 blocks) and keeps 16 (4 blocks)."""
    kv = PagedAllocator(num_blocks=100, block_size=4)
    config = ContinuousSchedulerConfig(kind="continuous", speculative={
        "method": "ngram", "num_speculative_tokens": 3, "acceptance": [1.0, 1.0, 0.0]})
    scheduler = ContinuousScheduler(kv, config, max_model_len=100, max_num_batched_tokens=100)
    scheduler.accepted_counts = np.zeros(4, dtype=np.int64)
    request = Request(0, 0.0, 10, 20)
    scheduler.enqueue(request)
    scheduler.advance(scheduler.schedule(0.0), 1, 0.1)
    assert request.generated == 1 and kv.tokens_of(0) == 10
    for reserved, kept, blocks in ((14, 13, 4), (17, 16, 4)):
        batch = scheduler.schedule(0.2)
        assert batch.decode_positions == 4 and kv.tokens_of(0) == reserved
        assert kv.free_blocks == 100 - math.ceil(reserved / 4)
        scheduler.advance(batch, 1, 0.3)
        assert kv.tokens_of(0) == kept and kv.free_blocks == 100 - blocks
    assert request.generated == 1 + 2 * 3 and list(scheduler.accepted_counts) == [0, 0, 2, 0]


def test_speculation_runs_with_sliding_window_layers():
    """A model with windowed layers keeps a per-sequence reserve around its block pool; drafts are released
    through it (gpt-oss-20b: sliding and full layers, an EAGLE-3 head)."""
    summary = _one_at_a_time({"method": "eagle3", "num_speculative_tokens": 2, "acceptance_rate": 0.7},
                             outputs=100, model="gpt-oss-20b", cost_model={"kind": "roofline"})
    assert summary["completed"] == 4 and 1 < summary["mean_accepted_tokens"] < 3


def test_mtp_sizes_its_module_into_the_memory_budget():
    """DeepSeek-V3's MTP module on 8 H200s: its FP8 MLA attention and experts (1 byte per weight and an fp32 scale
    per 128 × 128 block), its router, projection and norms (2 bytes) split over the 8 GPUs join the weights; its
    latent KV, (512 + 64) × 2 bytes per token whole on every GPU, joins the 61 layers' per token (1 / 61 more), so
    the pool holds fewer tokens."""
    plain = simulator.run(load_experiment(experiment(**DEEPSEEK, workload={
        "num_requests": 1, "arrival": {"kind": "poisson", "rate": 1.0}, "input_tokens": {"kind": "fixed", "value": 10},
        "output_tokens": {"kind": "fixed", "value": 2}}, kv_cache={"kind": "paged"}))).summary
    mtp = simulator.run(load_experiment(experiment(**DEEPSEEK, workload={
        "num_requests": 1, "arrival": {"kind": "poisson", "rate": 1.0}, "input_tokens": {"kind": "fixed", "value": 10},
        "output_tokens": {"kind": "fixed", "value": 2}}, kv_cache={"kind": "paged"}, scheduler={
        "kind": "continuous", "speculative": {"method": "mtp", "num_speculative_tokens": 1,
                                              "acceptance_rate": 0.9}}))).summary
    D = 7168
    mla = D * 1536 + 1536 * 128 * 192 + D * 576 + 512 * 128 * 256 + 128 * 128 * D + 1536 + 512
    experts, other = 257 * 3 * D * 2048, 256 * D + 2 * D * D + 5 * D
    added = ((mla + experts) * (1 + 4 / 128**2) + 2 * other) / 8 / 2**30
    assert mtp["weights_gib_per_gpu"] - plain["weights_gib_per_gpu"] == pytest.approx(added, rel=1e-9)
    assert mtp["draft_gib_per_gpu"] == pytest.approx(added, rel=1e-12)  # the draft's share, reported apart
    per_token = 61 * 576 * 2
    pool = plain["kv_pool_gib_per_gpu"] - added  # the same memory less the module's weights
    assert mtp["kv_capacity_tokens"] == pytest.approx(
        pool * 2**30 / (per_token + 576 * 2), rel=2e-3)  # whole blocks of the pool


def _llama_70b_tp4(spec: dict | None) -> dict:
    """Llama-3.1-70B on 4 H100s (vLLM's profile, a pool sized by gpu_memory_utilization 0.9), 4 short requests."""
    return simulator.run(load_experiment(experiment(
        model="llama-3.1-70b", cluster={"tensor_parallel": 4}, cost_model={"kind": "roofline"}, engine="vllm",
        kv_cache={"kind": "paged", "block_size": 16},
        scheduler={"kind": "continuous", "max_num_seqs": 16, "max_model_len": 4096, "speculative": spec},
        workload={"num_requests": 4, "arrival": {"kind": "poisson", "rate": 2.0},
                  "input_tokens": {"kind": "fixed", "value": 100},
                  "output_tokens": {"kind": "fixed", "value": 20}}))).summary


LLAMA_8B_PARAMS = 32 * (  # Llama-3.1-8B's config.json: 32 layers, D 4096, 32 heads and 8 KV heads of 128, FFN 14336
    4096 * 32 * 128 * 2 + 2 * 4096 * 8 * 128  # q and o, k and v
    + 3 * 4096 * 14336 + 2 * 4096) + 2 * 128_256 * 4096 + 4096  # SwiGLU, 2 norms; embeddings, LM head, final norm


@pytest.mark.parametrize("draft_tp", [None, 1])
def test_a_draft_model_sizes_its_weights_and_kv_into_the_memory_budget(draft_tp):
    """vLLM loads a draft model beside the target before it profiles what is left for KV, split over
    draft_tensor_parallel_size GPUs (default the target's 4; 1: whole on one GPU, the fullest). Llama-3.1-8B
    drafting for Llama-3.1-70B: 8,030,261,248 parameters in bf16 over d GPUs join the weights; the pool is the
    memory the weights left, less the draft's, in blocks of 16 tokens of the target's KV (80 layers × 2 × 8/4 KV
    heads × 128 × 2 bytes) and the draft's (32 layers × 2 × 8/d heads × 128 × 2 bytes)."""
    assert LLAMA_8B_PARAMS == 8_030_261_248  # the published count
    plain = _llama_70b_tp4(None)
    spec = {"method": "draft_model", "draft_model": "llama-3.1-8b", "num_speculative_tokens": 3,
            "acceptance_rate": 0.7, **({"draft_tensor_parallel_size": draft_tp} if draft_tp else {})}
    drafted = _llama_70b_tp4(spec)
    d = draft_tp or 4
    draft_gib = LLAMA_8B_PARAMS * 2 / d / 2**30
    assert drafted["draft_gib_per_gpu"] == pytest.approx(draft_gib, rel=1e-12)
    assert drafted["weights_gib_per_gpu"] - plain["weights_gib_per_gpu"] == pytest.approx(draft_gib, rel=1e-9)
    assert drafted["workspace_gib_per_gpu"] == plain["workspace_gib_per_gpu"]
    pool = (load_hardware("h100-sxm").memory_bytes * 0.9
            - (plain["weights_gib_per_gpu"] + draft_gib + plain["workspace_gib_per_gpu"]) * 2**30)
    per_token = 80 * 2 * 2 * 128 * 2 + 32 * 2 * (8 // d) * 128 * 2
    assert drafted["kv_capacity_tokens"] == math.floor(pool / (16 * per_token)) * 16
    plain_per_token = 80 * 2 * 2 * 128 * 2
    assert plain["kv_capacity_tokens"] == math.floor((pool + draft_gib * 2**30) / (16 * plain_per_token)) * 16
    assert "draft_gib_per_gpu" not in plain


def test_a_draft_models_tensor_parallelism_is_one_or_the_targets():
    config = experiment(cluster={"tensor_parallel": 4}, scheduler={"kind": "continuous", "speculative": {
        "method": "draft_model", "draft_model": "llama-3.1-8b", "num_speculative_tokens": 2, "acceptance_rate": 0.5,
        "draft_tensor_parallel_size": 2}})
    with pytest.raises(LLMSimError, match=r"scheduler\.speculative\.draft_tensor_parallel_size: 2 must be 1 or "
                                          r"cluster's tensor_parallel 4"):
        simulator.run(load_experiment(config))
    config["scheduler"]["speculative"] = {"method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": 0.5,
                                          "draft_tensor_parallel_size": 1}
    with pytest.raises(LLMSimError, match=r"draft_tensor_parallel_size: 1 shards a draft model; method eagle has none"):
        load_experiment(config)


def test_deepseek_mtp_speeds_decoding_as_published():
    """DeepSeek-V3 technical report (arXiv 2412.19437, §5.4.3): its MTP module's second token is accepted 85–90% of
    the time, "1.8 times TPS". SGLang's DeepSeek docs (docs/references/deepseek.md, Multi-token Prediction, with
    --speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2): decoding "1.8x for batch
    size 1 and 1.5x for batch size 32 respectively on H200 TP8". Simulated with one MTP draft at 0.875 on 8 H200s
    under the SGLang profile: within 12% of 1.8 at one request (and below the 1.875 tokens a step emits), within
    15% of 1.5 at 32 concurrent requests, and smaller there."""
    def speedup(users: int) -> float:
        plain = _concurrent(None, users)
        mtp = _concurrent({"method": "mtp", "num_speculative_tokens": 1, "acceptance_rate": 0.875}, users)
        return plain["mean_tpot_ms"] / mtp["mean_tpot_ms"]

    one, many = speedup(1), speedup(32)
    assert 1.8 * 0.88 < one < 1.875
    assert 1.5 * 0.85 < many < 1.5 * 1.15
    assert many < one


def _concurrent(spec: dict | None, users: int) -> dict:
    """DeepSeek-V3 on 8 H200s (SGLang profile), ``users`` closed-loop clients of 1,000 prompt and 500 output tokens."""
    config = experiment(**DEEPSEEK, scheduler={"kind": "continuous", "max_num_seqs": max(users, 8),
                                               "speculative": spec},
                        kv_cache={"kind": "paged"},
                        workload={"num_requests": 2 * users, "arrival": {"kind": "closed_loop", "users": users},
                                  "input_tokens": {"kind": "fixed", "value": 1000},
                                  "output_tokens": {"kind": "fixed", "value": 500}})
    return simulator.run(load_experiment(config)).summary


@pytest.mark.parametrize(("spec", "message"), [
    ({"method": "mtp", "num_speculative_tokens": 2, "acceptance": [0.9]},
     r"scheduler\.speculative: acceptance: \[0\.9\] has 1 rates for num_speculative_tokens 2"),
    ({"method": "mtp", "num_speculative_tokens": 1, "acceptance": [1.5]},
     r"scheduler\.speculative\.acceptance\[0\]: must be <= 1"),
    ({"method": "medusa", "num_speculative_tokens": 1, "acceptance_rate": 0.5},
     r"scheduler\.speculative\.method: must be one of 'mtp', 'eagle', 'eagle3', 'draft_model' or 'ngram', got "
     r"'medusa'"),
    ({"method": "eagle", "num_speculative_tokens": 1, "acceptance_rate": 0.5, "draft_cost_ratio": 0.1},
     r"draft_cost_ratio: 0\.1 prices the generic draft of no method"),
    ({"num_speculative_tokens": 1, "draft_cost_ratio": 0.1}, r"give acceptance .* or acceptance_rate"),
    ({"method": "mtp", "num_speculative_tokens": 1, "acceptance_rate": 0.5},
     r"scheduler\.speculative\.method: mtp needs the model's multi-token-prediction modules; llama-3-8b has none"),
])
def test_bad_speculation_is_one_line_with_exit_status_2(capsys, tmp_path, spec, message):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(experiment(scheduler={"kind": "continuous", "speculative": spec})))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert re.search(message, err), err


def test_a_draft_head_needs_the_roofline_cost_model():
    config = experiment(scheduler={"kind": "continuous", "speculative": {
        "method": "eagle3", "num_speculative_tokens": 2, "acceptance_rate": 0.5}})
    with pytest.raises(LLMSimError, match=r"method: eagle3 prices its draft head from its shapes: it needs "
                                          r"cost_model\.kind: roofline, got 'linear'"):
        simulator.run(load_experiment(config))


def test_old_configs_load_and_run_unchanged():
    """The generic draft of no method with one acceptance_rate is what it was: draws compared with the same rate at
    every position give the same draws (seeded), so the same run as the list of that rate."""
    old = {"num_speculative_tokens": 3, "acceptance_rate": 0.7, "draft_cost_ratio": 0.1}
    new = {"num_speculative_tokens": 3, "acceptance": [0.7, 0.7, 0.7], "draft_cost_ratio": 0.1}
    assert same_summaries(_one_at_a_time(old, outputs=300), _one_at_a_time(new, outputs=300))


def test_under_pipeline_parallelism_a_vision_encoder_and_a_draft_sit_on_different_stages():
    """A vision model's encoder (Qwen2.5-VL-7B's: 676,550,144 bf16 weights, 1.26 GiB) runs on the first stage, a draft
    model after the last: with one stage the GPU holds both, so the draft adds its whole size; with two the fullest
    GPU holds the larger of the two — the draft (Qwen2.5-7B), which replaces the encoder as the stage's extra."""
    def summary(pp, draft):
        scheduler = {"kind": "continuous", "max_num_seqs": 8, "max_model_len": 4096}
        if draft:
            scheduler["speculative"] = {"method": "draft_model", "draft_model": "qwen2.5-7b",
                                        "num_speculative_tokens": 2, "acceptance_rate": 0.7}
        return simulator.run(load_experiment(experiment(
            model="qwen2.5-vl-7b", cost_model={"kind": "roofline"}, engine="vllm", scheduler=scheduler,
            cluster={"pipeline_parallel": pp}, workload={
                "num_requests": 4, "arrival": {"kind": "poisson", "rate": 5.0},
                "input_tokens": {"kind": "fixed", "value": 300}, "output_tokens": {"kind": "fixed", "value": 4}}))
        ).summary

    vision_gib = 676_550_144 * 2 / 2**30
    for pp, extra in ((1, 0.0), (2, -vision_gib)):
        plain, drafted = summary(pp, False), summary(pp, True)
        assert drafted["draft_gib_per_gpu"] > vision_gib
        assert drafted["weights_gib_per_gpu"] - plain["weights_gib_per_gpu"] == pytest.approx(
            drafted["draft_gib_per_gpu"] + extra, rel=1e-9)
