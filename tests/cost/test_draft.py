"""What speculative decoding costs: the verification pass over k + 1 positions per sequence and the draft heads'
passes (:mod:`simulator.cost.draft`), derived by hand."""

from __future__ import annotations

import pytest

from simulator.catalog import load_engine, load_hardware, load_model
from simulator.catalog.draft import draft_head
from simulator.catalog.hardware import with_fit
from simulator.config import load_experiment
from simulator.cost.base import IterationShape
from simulator.cost.draft import HeadDraft, HostDraft, build_draft
from simulator.cost.roofline import RooflineCostModel
from tests.helpers import experiment


def _compute_bound(name: str) -> RooflineCostModel:
    """A model on an H100 whose memory is unboundedly fast and whose kernels cost nothing fixed and compute rows one
    by one: every GEMM takes exactly its FLOPs at the GEMM's rate."""
    fast = load_hardware("h100-sxm").model_copy(update={"memory_bandwidth_gb_per_s": 1e15})
    fast = with_fit(fast, {"kernel_overhead_us": 0.0, "gemm.k_latency_ns": 0.0, "gemm.tile_m": 1})
    return RooflineCostModel(load_model(name), fast)


@pytest.mark.parametrize("k", [1, 4])
def test_a_verification_pass_runs_the_flops_of_k_plus_1_tokens_per_sequence(k):
    """Llama-3-8B (D 4096, 32 heads, 8 KV heads of 128, MLP 14336, 32 layers, vocab 128,256): a token costs
    2·(D·(H + 2G)·d + H·d·D + 3·D·I) FLOPs per layer in the GEMMs and 2·V·D in the LM head; verifying k drafts for
    B sequences runs B·(k + 1) tokens through both, whatever their context."""
    D, H, G, d, inter, L, V, B = 4096, 32, 8, 128, 14336, 32, 128256, 4
    cost = _compute_bound("llama-3-8b")
    parts = cost.breakdown(IterationShape((), B, B * 1000, k + 1))
    tokens = B * (k + 1)
    assert parts["gemm_s"] * cost.gemm.flops == pytest.approx(2 * tokens * L * (D * (H + 2 * G) * d + H * d * D
                                                                                 + 3 * D * inter), rel=1e-9)
    assert parts["lm_head_sampling_s"] * cost.head_gemm.flops == pytest.approx(2 * tokens * V * D, rel=1e-6)


def test_verification_turns_compute_bound_at_large_batch():
    """On a real H100 a decode step's GEMMs read the weights once whatever the rows, so verifying 4 drafts costs about
    one step at batch 1; at a batch of 1,024 the GEMMs are compute-bound and the same verification costs nearly the
    k + 1 = 5 steps it computes: why speculation stops paying at high concurrency."""
    cost = RooflineCostModel(load_model("llama-3-8b"), load_hardware("h100-sxm"))

    def ratio(batch: int) -> float:
        shapes = [IterationShape((), batch, batch * 1000, positions) for positions in (5, 1)]
        verify, decode = (cost.breakdown(shape)["gemm_s"] for shape in shapes)
        return verify / decode

    assert ratio(1) < 1.01
    assert 4 < ratio(1024) < 5


def test_verification_attention_reads_the_cache_once_and_computes_every_query():
    """With memory free, attention's per-token cost is its FLOPs: 2·H·(d_qk + d_v) per query, k + 1 queries."""
    cost = _compute_bound("llama-3-8b")
    assert cost.decode_attention_terms(8, 5)[1] == pytest.approx(5 * cost.decode_attention_terms(8, 1)[1], rel=1e-6)


def _deepseek_draft(k: int) -> tuple[HeadDraft, RooflineCostModel]:
    config = load_experiment(experiment(
        model="deepseek-v3", hardware="h200-sxm", engine="sglang", cluster={"tensor_parallel": 8},
        cost_model={"kind": "roofline"},
        scheduler={"kind": "continuous", "speculative": {"method": "mtp", "num_speculative_tokens": k,
                                                         "acceptance_rate": 0.9}}))
    hardware, engine, model = load_hardware("h200-sxm"), load_engine("sglang"), load_model("deepseek-v3")
    target = RooflineCostModel.from_config(config, model, hardware, engine)
    draft = build_draft(config.scheduler.speculative, config, target, hardware, engine, draft_head(model, "mtp"))
    assert isinstance(draft, HeadDraft)
    return draft, target


def test_each_draft_beyond_the_first_reruns_the_one_mtp_module():
    """DeepSeek-V3 has one MTP module: k drafts run it k times (vLLM and SGLang reuse it autoregressively), the first
    over the verified positions, each further one over one token per sequence — its network's decode step plus its
    2D → D projection (column-parallel over 8 GPUs)."""
    three, _ = _deepseek_draft(3)
    two, _ = _deepseek_draft(2)
    shape = IterationShape((), 16, 16 * 2000, 4)
    once_more = three.network.iteration_time(IterationShape((), 16, 16 * 2000)) + three.gemm.time(16, 7168 / 8,
                                                                                                  2 * 7168)
    assert three.time(shape) - two.time(shape) == pytest.approx(once_more, rel=1e-9)


def test_a_draft_pass_pays_no_host_scheduling_of_its_own():
    """The head runs inside the engine's iteration: SGLang's 2 ms per iteration of host work is the target pass's, so
    one draft pass of DeepSeek-V3's MTP layer and LM head on 8 H200s costs a fraction of it."""
    draft, target = _deepseek_draft(1)
    shape = IterationShape((), 1, 2000, 2)
    assert draft.time(shape) < 0.5 * load_engine("sglang").per_iteration_ms * 1e-3
    assert draft.time(shape) < 0.1 * target.iteration_time(shape)


def test_ngram_drafts_on_the_host_only():
    assert HostDraft(5e-6).time(IterationShape((), 7, 700, 4)) == pytest.approx(35e-6)
    assert HostDraft(5e-6).time(IterationShape(((100, 0),))) == 0.0  # no decodes: nothing to look up
