"""Calibration recovers known parameters from timings synthesised with them."""

from __future__ import annotations

import pandas as pd
import pytest

from simulator.catalog import load_hardware
from simulator.catalog.hardware import with_fit
from simulator.cost.gemm import GemmModel
from simulator.fidelity.calibrate import calibrate
from simulator.fidelity.operators import GEMM_OPS


def _write_ops(folder, truth):
    """Operator CSVs in the a100_ops format for a Llama-3-8B-shaped layer at TP 1 and 2, timed with ``truth``."""
    gemm = GemmModel(truth, "fp16")
    rows = []
    for tp in (1, 2):
        for tokens in (1, 3, 17, 64, 100, 256, 700, 1024, 2048, 4096, 8192):
            heads, kv, hidden, inter = 32 / tp, 8 / tp, 4096, 14336 / tp
            shapes = {"attn_pre_proj": (tokens, (heads + 2 * kv) * 128, hidden),
                      "attn_post_proj": (tokens, hidden, heads * 128),
                      "mlp_up_proj": (tokens, 2 * inter, hidden), "mlp_down_proj": (tokens, hidden, inter)}
            row = {f"time_stats.{op}.median": gemm.time(*shapes[op]) * 1e3 for op in GEMM_OPS}
            row.update(n_head=32, n_kv_head=8, n_embd=4096, n_expanded_embd=14336, vocab_size=128256,
                       use_gated_mlp=True, num_tokens=tokens, num_tensor_parallel_workers=tp)
            rows.append(row)
    folder.mkdir()
    pd.DataFrame(rows).to_csv(folder / "synthetic.csv", index=False)


@pytest.mark.slow
def test_calibrate_recovers_gemm_parameters(tmp_path):
    truth = with_fit(load_hardware("h100-sxm"), {
        "gemm.flops_efficiency": 0.6, "bandwidth_efficiency": 0.7, "kernel_overhead_us": 4, "gemm.knee": 3.0,
        "gemm.tile_m": 32,
    })
    _write_ops(tmp_path / "ops", truth)
    fitted, report = calibrate(load_hardware("h100-sxm"), tmp_path / "ops")
    assert fitted.fit.gemm.flops_efficiency == pytest.approx(0.6)
    assert fitted.fit.bandwidth_efficiency == pytest.approx(0.7)
    assert fitted.fit.kernel_overhead_us == 4 and fitted.fit.gemm.knee == 3.0 and fitted.fit.gemm.tile_m == 32
    assert fitted.peak_tflops == truth.peak_tflops  # spec-sheet numbers untouched
    assert "median error 0.0%" in report[0]


def test_set_parameter_walks_tables_and_sub_models():
    """A dotted name reaches a collective's low-latency protocol and the all-reduce's, leaving the rest as it was;
    a flat name of before the groups (an engine profile's kernel field) reaches its place in the fit."""
    from simulator.fidelity.calibrate import get_parameter, set_parameter

    h100 = load_hardware("h100-sxm")
    changed = set_parameter(h100, "comm.collectives.all_to_all.low_latency.latency_us", 7.5)
    assert changed.fit.comm.collectives["all_to_all"].low_latency.latency_us == 7.5
    assert changed.fit.comm.collectives["all_to_all"].latency_us == h100.fit.comm.collectives["all_to_all"].latency_us
    assert changed.fit.comm.collectives["all_gather"] == h100.fit.comm.collectives["all_gather"]
    assert h100.fit.comm.collectives["all_to_all"].low_latency.latency_us != 7.5  # the original is not modified
    changed = set_parameter(h100, "comm.all_reduce_low_latency.efficiency", 0.3)
    assert changed.fit.comm.all_reduce_low_latency.efficiency == 0.3
    assert changed.fit.comm.all_reduce_low_latency.latency_us == h100.fit.comm.all_reduce_low_latency.latency_us
    assert set_parameter(h100, "all_reduce_low_latency.efficiency", 0.3) == changed  # the flat name's place
    changed = set_parameter(h100, "decode_attention_kv_tile", 64)
    assert changed.fit.decode_attention.kv_tile == get_parameter(changed, "decode_attention.kv_tile") == 64
    assert changed.fit.prefill_attention == h100.fit.prefill_attention
    with pytest.raises(ValueError, match="no field 'kv_tiles'"):
        set_parameter(h100, "decode_attention.kv_tiles", 64)


def test_diagonal_moves_leave_a_valley_that_single_moves_cannot():
    """Two parameters that trade off: score 100·|a − b| + |a + b − 1| on a grid of tenths, from a = b = 0.2. Moving
    either alone costs 100 per unit and gains at most 1, so coordinate descent stays; moving both one step at a time
    follows the valley a = b down to its minimum, a = b = 0.5."""
    from simulator.fidelity.calibrate import coordinate_descent

    grid = {name: [round(0.1 * i, 1) for i in range(1, 10)]
            for name in ("attention_efficiency", "attention_io_efficiency")}
    start = with_fit(load_hardware("h100-sxm"), {"attention_efficiency": 0.2, "attention_io_efficiency": 0.2})

    def valley(p) -> float:
        a, b = p.fit.prefill_attention.efficiency, p.fit.prefill_attention.io_efficiency
        return 100 * abs(a - b) + abs(a + b - 1)

    single = coordinate_descent(start, grid, valley)
    assert (single.fit.prefill_attention.efficiency, single.fit.prefill_attention.io_efficiency) == (0.2, 0.2)
    both = coordinate_descent(start, grid, valley, diagonal=True)
    assert (both.fit.prefill_attention.efficiency, both.fit.prefill_attention.io_efficiency) == (0.5, 0.5)


def test_the_attention_fits_fast_score_is_the_frames_score(shared_data):
    """The attention fits score a profile with the table split once (pooled_attention_score, and
    pooled_mla_score for the MLA tables); it gives the very number the kernel-table errors do (the score of each
    framework and phase, summed), on both GPUs and with parameters away from the fitted ones."""
    from simulator.fidelity.attention_fit import (
        _pooled_attention_errors,
        _sample,
        _score_by,
        pooled_attention_score,
        pooled_mla_score,
    )
    from simulator.fidelity.kernels import attention_kernel_table, mla_kernel_errors, mla_kernel_table

    kernels, by = shared_data / "kernels", ["framework", "phase"]
    table = attention_kernel_table(kernels)
    for gpu, name in (("h100_sxm", "h100-sxm"), ("a100_sxm", "a100-80gb-sxm")):
        sample = _sample(table[table["gpu"] == gpu], by, 300)
        fast = pooled_attention_score(sample, by)
        for update in ({}, {"attention_efficiency": 0.4, "prefill_attention_ns_per_row": 1.0,
                            "decode_attention_overhead_us": 3.0}):
            profile = with_fit(load_hardware(name), update)
            assert fast(profile) == _score_by(_pooled_attention_errors(kernels, {gpu: profile}, sample), by)
    # and the MLA fits' (pooled_mla_score) the MLA tables' frame's
    mla = mla_kernel_table(kernels)
    for gpu, name in (("h100_sxm", "h100-sxm"), ("a100_sxm", "a100-80gb-sxm")):
        sample = _sample(mla[mla["gpu"] == gpu], by, 300)
        profile = with_fit(load_hardware(name), {"decode_attention_overhead_us": 3.0})
        assert pooled_mla_score(sample, by)(profile) == _score_by(
            mla_kernel_errors(kernels, {gpu: profile}, sample, engines={}), by)


def test_custom_allreduce_fit_recovers_a_frameworks_costs(tmp_path):
    """A custom all-reduce table timed with known one-shot and two-shot costs and a 2 MiB limit (the layout of
    ../shared/data/kernels: message sizes in bfloat16 elements, latency in ms, a graph and an eager backend) is
    fitted back to those values from the shipped profile's."""
    from simulator.catalog.engines import load_engine
    from simulator.cost.roofline import engine_network, framework_all_reduce_time
    from simulator.fidelity.kernel_fit import fit_custom_allreduce

    hw = load_hardware("h100-sxm")
    truth = load_engine("vllm").model_copy(update={"custom_allreduce_latency_us": 3.3,
                                                   "custom_allreduce_two_shot_latency_us": 12.5,
                                                   "custom_allreduce_max_mib": 2.0})
    network, kernels = engine_network(hw, truth), truth.custom_allreduce("hopper")
    rows = [{"num_gpus": n, "message_size": size, "allreduce_dtype": "bfloat16", "backend": backend,
             "latency": framework_all_reduce_time(network, kernels, n, 2 * size) * 1e3 * (1 if backend == "vllm_graph"
                                                                                          else 10)}
            for n in (2, 4, 8) for size in [2**k for k in range(8, 24, 1)] for backend in ("vllm_graph", "vllm_eager")]
    folder = tmp_path / "h100_sxm" / "comm" / "vllm" / "1.0"
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(folder / "custom_allreduce_perf.parquet")
    fitted, summary = fit_custom_allreduce(tmp_path, "vllm")
    assert fitted == {"custom_allreduce_latency_us": 3.3, "custom_allreduce_two_shot_latency_us": 12.5,
                      "custom_allreduce_max_mib": 2.0}
    assert "2 0.0%/0.0%" in summary


# a framework's attention kernels, as the fits below should find them again (the H100's spec sheet beneath)
ATTENTION_TRUTH = {"attention_efficiency": 0.62, "attention_io_efficiency": 0.33, "prefill_attention_ns_per_row": 0.2,
                   "prefill_attention_ns_per_tile": 12.5, "decode_attention_efficiency": 0.2,
                   "decode_attention_bandwidth_efficiency": 0.9, "decode_attention_ns_per_head": 10.0,
                   "decode_attention_ns_per_query_head": 2.0, "attention_overhead_us": 8.0,
                   "decode_attention_overhead_us": 5.0, "decode_attention_block_gb_per_s": 320,
                   # a wave of 66 blocks on the H100's 132 SMs; contexts of 2,048 tokens or more split in steps
                   # of fewer than 132 blocks
                   "decode_attention_blocks_per_sm": 0.5, "decode_attention_split_us": 2.0,
                   "decode_attention_split_tokens": 2048, "decode_attention_split_blocks_per_sm": 1.0,
                   # its decode loop reads the cache in tiles of 32 tokens (contexts of 16 and 200: not whole tiles)
                   "decode_attention_kv_tile": 32,
                   # its prefill blocks pack a KV head's query heads, and half a block per SM runs at once (one
                   # 1,024-token prompt of 32 heads: 256 blocks, the longest 128 queries over 1,024 keys)
                   "prefill_attention_packs_gqa": True, "prefill_attention_blocks_per_sm": 0.5,
                   # half its softmax's exponentials' time not hidden (the width-64 shape tells it from the FLOP rate)
                   "prefill_attention_exp_exposed": 0.5}
# its decode kernel over an fp8 cache, another kernel
ATTENTION_8_BIT_DECODE = {"decode_attention_efficiency": 0.25, "decode_attention_bandwidth_efficiency": 0.7,
                          "decode_attention_ns_per_head": 4.0, "decode_attention_overhead_us": 7.0}
# (query heads, KV heads, window[, head width: 128]): MHA, GQA, a group of 32 (decode compute counts) and a sliding
# window; prefill also a narrower head (one exponential per pair whatever the width, FLOPs in proportion to it)
ATTENTION_SHAPES = ((32, 8, 0), (64, 2, 0), (32, 32, 0), (32, 8, 512))
NARROW_HEAD = (16, 4, 0, 64)


def phase_shapes(phase: str, shapes=ATTENTION_SHAPES):
    """``shapes``, with the narrow head where ``phase`` is prefill."""
    return (*shapes, NARROW_HEAD) if phase == "prefill" else shapes


def attention_rows(model, phase: str, shapes):
    """Timings of ``model`` (an AttentionModel) over ``shapes`` (query heads, KV heads, window[, head width: 128])
    in the layout of ``../shared/data/kernels`` (latency in ms), batches 1–64, 16–8,192 tokens (200 and 16: not
    whole query tiles)."""
    for batch in (1, 8, 64):
        for seq in (16, 200, 1024, 8192):
            for heads, kv_heads, window, *width in shapes:
                head_dim = width[0] if width else 128
                isl, step = (seq, 0) if phase == "prefill" else (1, seq - 1)
                latency = model.kernel_times(phase, batch, seq, heads, kv_heads, head_dim, window) * 1e3
                yield {"batch_size": batch, "isl": isl, "step": step, "num_heads": heads,
                       "num_key_value_heads": kv_heads, "head_dim": head_dim, "window_size": window,
                       "attn_dtype": "bfloat16", "latency": float(latency)}


@pytest.mark.slow
def test_framework_attention_fit_recovers_a_frameworks_kernels(tmp_path):
    """Prefill and decode tables of one framework (the layout of ``../shared/data/kernels``) timed with known attention
    parameters, bf16 and fp8 KV, MHA, GQA (a group of 32 makes decode compute count) and a sliding window, the
    decode kernel's fixed cost and KV streaming rate apart from the prefill kernel's and the GEMMs', another decode
    kernel over the fp8 cache (slower streaming, a lower cost per KV head) and a prefill kernel over it on 8-bit
    tensor cores (1.3 of the 16-bit peak, beyond the 16-bit kernels' range), a decode cost per query-head row within
    a KV head's block besides the block's own, in whole tiles of 16 of which the block's own cost covers the first
    (the groups of 4 and 32, one tile and two, tell the two apart), a multi-head kernel of its own for one query
    head per block at 6 ns per (sequence, head) (the group of 1), which also runs a group of 64 beyond the grouped
    kernel's largest (32; TensorRT-LLM's profile states both, and the tile) as a fallback at 0.08 ns per (query
    head, token), a decode step of fewer blocks than one wave paying one wave's block costs and, from 2,048 cached
    tokens in a step of fewer than 132 blocks, a split's combine (1–64 sequences of 1–32 KV heads: 1–2,048 blocks
    about a wave of 66), the cache read in whole tiles of 32 tokens (the profile's start: 64), and a prefill cost
    per query row and per query tile (prompts of 200 and 16 tokens, which are not whole query tiles, tell the two
    apart) whose tiles pack a KV head's query heads, half a block per SM at once (the longest block a bound), and
    half of its softmax's exponentials' time exposed (a head of width 64 beside those of 128 tells it from the FLOP
    rate): fitted back to those values from the generation's pooled ones and the profile's multi-head cost, with no
    error left."""
    from simulator.fidelity.attention_fit import DISPATCH_FIELDS, FRAMEWORK_MHA_GRID, fit_framework_attention

    truth = {**ATTENTION_TRUTH, "decode_attention_max_group": 32, "decode_attention_query_tile": 16,
             "decode_attention_ns_per_query_token": 0.08, "decode_attention_mha_ns_per_head": 6.0}
    eight_bit = {**ATTENTION_8_BIT_DECODE, "decode_attention_ns_per_query_head": 0.5,
                 "decode_attention_mha_ns_per_head": 3.0, "attention_efficiency": 1.3}
    write_timed_tables(tmp_path / "h100_sxm" / "attention" / "trtllm" / "1.0", "attention", truth, eight_bit,
                       lambda model, phase: attention_rows(model, phase,
                                                           phase_shapes(phase, (*ATTENTION_SHAPES, (64, 1, 0)))))
    fitted, summary = fit_framework_attention(tmp_path, "trtllm")
    # the fp8 kernels' fit states the fields it fits; which kernel runs which group is the 16-bit entry's, shared
    over_8bit = {key: value for key, value in {**truth, **eight_bit}.items() if key not in DISPATCH_FIELDS}
    assert fitted.pop("kv_8bit") == pytest.approx(over_8bit)
    assert fitted == pytest.approx(truth)
    # no prefill fallback stated: its cost is not fitted
    assert set(fitted) == ({*FRAMEWORK_MHA_GRID, "decode_attention_max_group", "decode_attention_query_tile"}
                           - {"prefill_fallback_efficiency"})
    assert "decode 0.0%/0.0%" in summary and "prefill 0.0%/0.0%" in summary


@pytest.mark.slow
def test_an_8_bit_table_of_too_few_shapes_leaves_its_phase_to_the_16_bit_fit(tmp_path):
    """A framework whose prefill timings over an fp8 cache hold one of its four layer shapes, timed by a slower
    kernel (a quarter of the 16-bit one's compute rate: another kernel for that shape), while its decode timings
    over fp8 span all four: the fp8 decode kernel is fitted back to its values, its fp8 prefill keeps the 16-bit
    fit's rather than take that one shape's for every model's (``spans_the_shapes``: half the shapes or more)."""
    from simulator.cost.attention import AttentionModel
    from simulator.fidelity.attention_fit import fit_framework_attention, spans_the_shapes

    other_kernel = {"attention_efficiency": 0.155}
    h100 = with_fit(load_hardware("h100-sxm"), ATTENTION_TRUTH)
    folder = tmp_path / "h100_sxm" / "attention" / "sglang" / "0.5"
    folder.mkdir(parents=True)
    for stem, phase in (("context", "prefill"), ("generation", "decode")):
        table = []
        for kv in ("bfloat16", "fp8"):
            fields = {"decode": ATTENTION_8_BIT_DECODE, "prefill": other_kernel}[phase] if kv == "fp8" else {}
            model = AttentionModel(with_fit(h100, fields), {"bfloat16": "bf16", "fp8": "fp8"}[kv])
            shapes = ATTENTION_SHAPES[:1] if (kv, phase) == ("fp8", "prefill") else phase_shapes(phase)
            table += [{**row, "kv_cache_dtype": kv} for row in attention_rows(model, phase, shapes)]
        pd.DataFrame(table).to_parquet(folder / f"{stem}_attention_perf.parquet")
    fitted, _ = fit_framework_attention(tmp_path, "sglang")
    assert fitted.pop("kv_8bit") == pytest.approx({**ATTENTION_TRUTH, **ATTENTION_8_BIT_DECODE})
    assert fitted == pytest.approx({**ATTENTION_TRUTH, **SGLANG_PREFILL_DISPATCH})  # no timing falls back: no cost
    table = pd.DataFrame({"phase": ["prefill"] * 4, "heads": [32, 64, 32, 32], "kv_heads": [8, 2, 32, 8],
                          "head_dim": [128] * 4, "window": [0, 0, 0, 512]})
    assert spans_the_shapes(table.iloc[:2], table, "prefill") and not spans_the_shapes(table.iloc[:1], table,
                                                                                         "prefill")


# the head widths from which SGLang's H100 prefill runs its fallback kernel (its profile states them), and a window
SGLANG_PREFILL_DISPATCH = {"prefill_fallback_head_dim": 512, "prefill_fallback_window_head_dim": 256}


def test_the_exponentials_share_is_fitted_only_where_the_tables_can_tell_it():
    """One exponential per query-key pair and head whatever the width, FLOPs in proportion to it: prefill timings of
    one head width cannot tell the exposed exponentials from the FLOP rate (A100's tables), nor can a GPU whose spec
    sheet states no exponential rate price them; the grid keeps the share only with two widths and a stated rate."""
    from simulator.fidelity.attention_fit import ATTENTION_GRID, EXP_SHARE, without_unidentifiable

    h100 = load_hardware("h100-sxm")
    one_width = pd.DataFrame({"phase": ["prefill", "prefill", "decode"], "head_dim": [128, 128, 64]})
    two_widths = pd.DataFrame({"phase": ["prefill", "prefill"], "head_dim": [128, 64]})
    assert EXP_SHARE in without_unidentifiable(ATTENTION_GRID, two_widths, h100)
    assert EXP_SHARE not in without_unidentifiable(ATTENTION_GRID, one_width, h100)
    unstated = h100.model_copy(update={"sfu_exp_tera_per_s": 0.0})
    assert EXP_SHARE not in without_unidentifiable(ATTENTION_GRID, two_widths, unstated)
    assert set(without_unidentifiable(ATTENTION_GRID, one_width, h100)) == set(ATTENTION_GRID) - {EXP_SHARE}


@pytest.mark.slow
def test_a_prefill_fallback_kernels_rate_is_fitted_back(tmp_path):
    """A framework whose prefill of head width 512, or of 256 under a window, runs a fallback kernel computing every
    causal pair at 0.1 of the peak (SGLang's H100 dispatch, which its profile states), beside its kernels at
    head width 128 with and without a window: the fit keeps the dispatch and finds the fallback's rate again, the
    other parameters too, with no error left."""
    from simulator.fidelity.attention_fit import fit_framework_attention

    truth = {**ATTENTION_TRUTH, **SGLANG_PREFILL_DISPATCH, "prefill_fallback_efficiency": 0.1}
    shapes = (*ATTENTION_SHAPES, (16, 8, 0, 512), (16, 8, 1024, 256), (16, 8, 0, 256))
    write_timed_tables(tmp_path / "h100_sxm" / "attention" / "sglang" / "0.5", "attention", truth, {},
                       lambda model, phase: attention_rows(model, phase, shapes))
    fitted, summary = fit_framework_attention(tmp_path, "sglang")
    fitted.pop("kv_8bit")
    assert fitted == pytest.approx(truth)
    assert "prefill 0.0%/0.0%" in summary


@pytest.mark.slow
def test_a_shipped_profiles_kernel_fits_are_reproduced_from_the_cli(shared_data, tmp_path, capsys):
    """``llmsim calibrate --kernels --gpu a100_sxm --framework sglang`` writes engine-profile fields that are the
    shipped SGLang profile's Ampere entries (its all-reduce, GEMM, attention and MoE kernels were fitted this way)."""
    import yaml

    from simulator.catalog.engines import EngineProfile, load_engine
    from simulator.cli import main

    out = tmp_path / "sglang_a100.yaml"
    assert main(["calibrate", "--kernels", str(shared_data / "kernels"), "--gpu", "a100_sxm", "--framework", "sglang",
                 "--output", str(out)]) == 0
    fitted = EngineProfile(name="fitted", **yaml.safe_load(out.read_text()))
    shipped = load_engine("sglang")
    assert fitted.custom_allreduce_by_generation["ampere"] == shipped.custom_allreduce_by_generation["ampere"]
    assert fitted.attention_by_generation["ampere"] == shipped.attention_by_generation["ampere"]
    assert fitted.gemm_by_generation["ampere"] == shipped.gemm_by_generation["ampere"]
    assert fitted.moe_by_generation["ampere"] == shipped.moe_by_generation["ampere"]
    assert "sglang attention on a100_sxm" in capsys.readouterr().out


def test_framework_gemm_fit_recovers_a_frameworks_rates(tmp_path):
    """A framework's GEMM table (bf16, fp8 and fp8_block, the layout of ``../shared/data/kernels``) timed at known
    fractions of each format's peak, the GPU's memory-bound side unchanged: fitted back to those rates from the
    pooled ones, with no error left."""
    from simulator.fidelity.kernel_fit import fit_framework_gemm

    truth = with_fit(load_hardware("h100-sxm"), {
        "flops_efficiency": 0.7, "flops_efficiency_by_dtype": {"fp8": 0.5, "fp8_block": 0.65}})
    folder = tmp_path / "h100_sxm" / "gemm" / "sglang" / "1.0"
    folder.mkdir(parents=True)
    rows = [{"gemm_dtype": table, "m": m, "n": n, "k": k,
             "latency": GemmModel(truth, dtype).time(m, n, k) * 1e3}
            for table, dtype in (("bfloat16", "bf16"), ("fp8", "fp8"), ("fp8_block", "fp8_block"))
            for m in (1, 64, 512, 4096, 16384) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))]
    pd.DataFrame(rows).to_parquet(folder / "gemm_perf.parquet")
    fitted, summary = fit_framework_gemm(tmp_path, "sglang")
    assert fitted == {"flops_efficiency": 0.7, "flops_efficiency_by_dtype": {"fp8": 0.5, "fp8_block": 0.65}}
    assert "bfloat16 0.0%/0.0%" in summary and "fp8_block 0.0%/0.0%" in summary


def test_framework_gemm_fit_recovers_the_fp4_rate_where_a_table_measures_it(tmp_path):
    """A B200 table of bf16 and nvfp4 GEMMs timed at known fractions of the 16-bit and FP4 peaks: both fitted back;
    no fp8 fraction is fitted (nothing measures it: the profile keeps the generation's)."""
    from simulator.fidelity.kernel_fit import fit_framework_gemm

    truth = with_fit(load_hardware("b200"), {
        "flops_efficiency": 0.7, "flops_efficiency_by_dtype": {"fp8": 0.5, "fp8_block": 0.65, "fp4": 0.45}})
    folder = tmp_path / "b200_sxm" / "gemm" / "trtllm" / "1.2"
    folder.mkdir(parents=True)
    rows = [{"gemm_dtype": table, "m": m, "n": n, "k": k,
             "latency": GemmModel(truth, dtype).time(m, n, k) * 1e3}
            for table, dtype in (("bfloat16", "bf16"), ("nvfp4", "nvfp4"))
            for m in (1, 64, 512, 4096, 16384) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))]
    pd.DataFrame(rows).to_parquet(folder / "gemm_perf.parquet")
    fitted, summary = fit_framework_gemm(tmp_path, "trtllm", "b200_sxm")
    assert fitted == {"flops_efficiency": 0.7, "flops_efficiency_by_dtype": {"fp4": 0.45}}
    assert "nvfp4 0.0%/0.0%" in summary


def test_a_generation_file_holds_the_fit_the_spec_sheet_balance_and_the_sms(tmp_path, capsys):
    """``generation_file``: the fit of a calibrated profile in its groups, with the SMs its attention timings ran on
    (its own) and its exponentials per 16-bit FLOP (spec sheet: 5 × 10^12/s over 2,250 TFLOP/s for B200), which
    loads back as a generation file holding that very fit; not the system's own send/recv (A100's, fitted on its
    network's timings); ``--generation-file`` refuses an output not named after the generation, and needs --kernels
    without --framework."""
    import yaml

    from simulator.catalog.generations import GenerationFile
    from simulator.cli import main
    from simulator.fidelity.kernel_fit import generation_file

    b200 = load_hardware("b200")
    document = generation_file(b200)
    assert document["name"] == "blackwell" and document["sfu_exp_per_bf16_flop"] == pytest.approx(5.0 / 2250)
    assert document["fit"]["sm_count"] == 148
    assert document["fit"]["gemm"]["flops_efficiency"] == b200.fit.gemm.flops_efficiency
    assert GenerationFile.model_validate(yaml.safe_load(yaml.safe_dump(document))).fit == b200.fit
    a100 = load_hardware("a100-80gb-sxm")
    assert a100.fit.comm.p2p_efficiency == 0.95 and "p2p_efficiency" not in generation_file(a100)["fit"]["comm"]
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    assert main(["calibrate", "--kernels", str(kernels), "--gpu", "b200_sxm", "--generation-file",
                 "--output", str(tmp_path / "hopper.yaml")]) == 2
    assert main(["calibrate", "--kernels", str(kernels), "--gpu", "b200_sxm", "--generation-file", "--framework",
                 "vllm", "--output", str(tmp_path / "blackwell.yaml")]) == 2
    assert main(["calibrate", "--hardware", "b200", "--generation-file", "--ops", str(kernels),
                 "--output", str(tmp_path / "blackwell.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "b200_sxm is of generation 'blackwell': --output must be named blackwell.yaml, got hopper.yaml" in err[0]
    assert "writes a GPU generation's fit, not --framework's" in err[1] and "it needs --kernels DIR" in err[2]


@pytest.mark.slow
def test_kernel_fit_recovers_the_gemm_main_loop_latency(tmp_path):
    """A GPU's GEMM tables (bf16 and fp8, the layout of ``../shared/data/kernels``) timed with a known serial latency
    along k (1.5 ns per element), a 16-bit split of k at 4,096 (the fp8 kernels walk all of it) and fixed cost
    (2 µs): small GEMMs through narrow weights grow with k where their bytes do not, which only that latency
    explains, and the bf16 ones stop growing past 4,096 while the fp8 ones go on; the generation fit finds all three
    again (from the shipped split, 6,144), with no error left — its weight-only int4 table, timed with int4 kernels
    of their own, left out of that fit and fitted apart."""
    from simulator.catalog.hardware_fit import GemmKernelFit
    from simulator.fidelity.kernel_fit import fit_kernels

    truth = with_fit(load_hardware("h100-sxm"), {
        "gemm.k_latency_ns": 1.5, "kernel_overhead_us": 2.0, "gemm.split_k": 4096,
        "gemm.kernel_by_dtype": {"int4": GemmKernelFit(tile_m=8, k_latency_ns=3.0, overhead_us=9.0)}})
    folder = tmp_path / "h100_sxm" / "gemm" / "sglang" / "1.0"
    folder.mkdir(parents=True)
    rows = [{"gemm_dtype": name, "m": m, "n": n, "k": k, "latency": GemmModel(truth, dtype).time(m, n, k) * 1e3}
            for name, dtype in (("bfloat16", "bf16"), ("fp8", "fp8"), ("int4_wo", "int4"))
            for m in (1, 8, 96, 512, 2000, 4000) for n in (256, 1024, 4096, 14336)
            for k in (256, 1024, 4096, 8192, 14336)]
    pd.DataFrame(rows).to_parquet(folder / "gemm_perf.parquet")
    assert load_hardware("h100-sxm").fit.gemm.split_k != 4096
    fitted, report = fit_kernels(load_hardware("h100-sxm"), tmp_path, "h100_sxm")
    assert (fitted.fit.gemm.k_latency_ns, fitted.fit.gemm.split_k, fitted.fit.kernel_overhead_us) == (1.5, 4096, 2.0)
    assert "sglang/bfloat16 0.0%/0.0%" in report[1] and "sglang/fp8 0.0%/0.0%" in report[1]
    # the int4 table, its kernels its own, is fitted apart after the pooled GEMMs (which it would have pulled)
    assert fitted.fit.gemm.kernel_by_dtype == truth.fit.gemm.kernel_by_dtype
    assert report[2].startswith("int4 GEMM kernels")


@pytest.mark.slow
def test_format_kernel_fit_recovers_the_int8_and_int4_kernels(tmp_path):
    """A GPU's W8A8 int8 (``sq``) and weight-only int4 (``int4_wo``) tables, the layout of ``../shared/data/kernels``,
    timed with known kernels of their own — 16- and 8-row tiles, 1.2 and 2.4 ns per element of k, 4 and 7 µs of
    fixed work, int8 at 0.7 of its peak: each format's kernels are fitted back from the 16-bit ones on every other
    weight shape, with no error left on the held-out shapes either."""
    from simulator.catalog.hardware_fit import GemmKernelFit
    from simulator.fidelity.kernel_fit import fit_format_kernels

    base = with_fit(load_hardware("a100-80gb-sxm"), {"gemm.kernel_by_dtype": {}, "gemm.flops_efficiency_by_dtype": {}})
    kernels = {"int8": GemmKernelFit(tile_m=16, k_latency_ns=1.2, overhead_us=4.0),
               "int4": GemmKernelFit(tile_m=8, k_latency_ns=2.4, overhead_us=7.0)}
    truth = with_fit(base, {"gemm.kernel_by_dtype": kernels, "gemm.flops_efficiency_by_dtype": {"int8": 0.7}})
    folder = tmp_path / "a100_sxm" / "gemm" / "trtllm" / "1.0"
    folder.mkdir(parents=True)
    rows = [{"gemm_dtype": name, "m": m, "n": n, "k": k, "latency": GemmModel(truth, dtype).time(m, n, k) * 1e3}
            for name, dtype in (("sq", "int8"), ("int4_wo", "int4"))
            for m in (1, 4, 16, 48, 256, 2048, 8192) for n in (256, 1024, 4096, 14336)
            for k in (256, 1024, 4096, 14336)]
    pd.DataFrame(rows).to_parquet(folder / "gemm_perf.parquet")
    fitted, report = fit_format_kernels(base, tmp_path, "a100_sxm")
    assert fitted.fit.gemm.kernel_by_dtype == kernels and fitted.fit.gemm.flops_efficiency_by_dtype == {"int8": 0.7}
    assert report == [f"{fmt} GEMM kernels median/p90: trtllm/fitted 0.0%/0.0%, trtllm/held out 0.0%/0.0%"
                      for fmt in ("int8", "int4")]


@pytest.mark.slow
def test_the_shipped_int8_and_int4_kernels_are_the_fit_on_the_a100_tables(shared_data):
    """Ampere's int8 and int4 GEMM kernels (``simulator.catalog.generations``) are what ``fit_format_kernels`` finds
    on TensorRT-LLM's A100 tables from the shipped A100 profile (a fixed point of the fit), and the held-out weight
    shapes stay within docs/accuracy.md's figures (int8 9.9%, int4 11.3% median)."""
    from simulator.fidelity.kernel_fit import fit_format_kernels

    shipped = load_hardware("a100-80gb-sxm")
    fitted, report = fit_format_kernels(shipped, shared_data / "kernels", "a100_sxm")
    assert fitted.fit.gemm.kernel_by_dtype == shipped.fit.gemm.kernel_by_dtype
    assert fitted.fit.gemm.flops_efficiency_by_dtype == shipped.fit.gemm.flops_efficiency_by_dtype
    held_out = [float(line.split("trtllm/held out ")[1].split("%")[0]) for line in report]
    assert held_out[0] <= 10.0 and held_out[1] <= 11.5


@pytest.mark.slow
def test_framework_moe_fit_recovers_a_frameworks_kernel_per_format(tmp_path):
    """A framework's MoE table (the layout of ``../shared/data/kernels``: balanced routing, EP 1) timed with known
    kernels per format — bf16 at a third of the dense FLOP rate, block fp8 streaming slowly with a large cost per
    expert — on four model shapes each, and mxfp4 on two: each format with four shapes is fitted back to its
    kernel from two of them, with no error left on the two held out; mxfp4 keeps the pooled fit (too few)."""
    from simulator.cost.moe import moe_time
    from simulator.fidelity.kernel_fit import fit_framework_moe

    h100 = load_hardware("h100-sxm")
    truth = {"bf16": {"moe_gemm_efficiency": 0.3, "moe_bandwidth_efficiency": 0.9, "moe_expert_overhead_us": 0.5},
             "fp8_block": {"moe_gemm_efficiency": 0.8, "moe_bandwidth_efficiency": 0.6, "moe_expert_overhead_us": 2.5},
             "mxfp4": {"moe_gemm_efficiency": 0.5, "moe_bandwidth_efficiency": 0.5, "moe_expert_overhead_us": 1.0}}
    shapes = [(2048, 768, 8, 128), (4096, 1536, 8, 128), (7168, 2048, 8, 256), (2880, 2880, 4, 128)]
    tables = {"bfloat16": ("bf16", shapes), "fp8_block": ("fp8_block", shapes), "w4a16_mxfp4": ("mxfp4", shapes[:2])}
    rows = [{"moe_dtype": table, "num_tokens": tokens, "hidden_size": hidden, "inter_size": inter, "topk": topk,
             "num_experts": experts, "moe_tp_size": tp, "moe_ep_size": 1, "distribution": "balanced",
             "latency": moe_time(with_fit(h100, truth[dtype]), tokens, hidden, inter, topk, experts, tp,
                                 dtype=dtype) * 1e3}
            for table, (dtype, measured) in tables.items() for hidden, inter, topk, experts in measured
            for tokens in (1, 16, 128, 1024, 8192, 32768) for tp in (1, 4)]
    folder = tmp_path / "h100_sxm" / "moe" / "vllm" / "1.0"
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(folder / "moe_perf.parquet")
    fitted, summary = fit_framework_moe(tmp_path, "vllm")
    assert fitted == {"bf16": pytest.approx(truth["bf16"]), "fp8_block": pytest.approx(truth["fp8_block"])}
    assert "bf16/held out 0.0%/0.0%" in summary and "fp8_block/held out 0.0%/0.0%" in summary
    assert "mxfp4" not in summary


@pytest.mark.slow
def test_framework_moe_fit_recovers_its_token_passes_from_expert_parallel_tables(tmp_path):
    """A framework whose MoE tables also time its kernel under expert parallelism (TensorRT-LLM's: balanced
    routing, EP 2–16, every GPU handed all the tokens) timed with known passes over every token (14 bytes per
    (token, hidden element)) and over the token copies its experts receive (5 bytes per (assignment, element): EP
    1–16 tells the two apart, and a narrow expert, width 256, among the fitted shapes tells the copies' pass from
    the experts' compute, which grows with the width) and a cost expert parallelism adds (6 µs), besides its
    experts' rates: fitted back to all six from every other shape of each table, with no error left on the others;
    a format timed only under expert parallelism (its A100 tables' bf16) is fitted on those rows alone."""
    from simulator.cost.moe import moe_time
    from simulator.fidelity.kernel_fit import FRAMEWORK_MOE_EP_GRID, FRAMEWORK_MOE_GRID, fit_framework_moe

    truth = {"bf16": {"moe_gemm_efficiency": 0.6, "moe_bandwidth_efficiency": 0.9, "moe_expert_overhead_us": 0.4,
                      "moe_token_pass_bytes": 14.0, "moe_assignment_pass_bytes": 5.0, "moe_ep_overhead_us": 6.0},
             "fp8_block": {"moe_gemm_efficiency": 0.5, "moe_bandwidth_efficiency": 1.0, "moe_expert_overhead_us": 0.8,
                           "moe_token_pass_bytes": 20.0, "moe_assignment_pass_bytes": 9.0, "moe_ep_overhead_us": 3.0}}
    h100 = load_hardware("h100-sxm")
    shapes = [(2048, 256, 8, 128), (4096, 1536, 8, 128), (7168, 2048, 8, 256), (2880, 2880, 4, 128)]
    tables = {"bfloat16": ("bf16", (1, 2, 4, 16)), "fp8_block": ("fp8_block", (2, 4, 16))}
    rows = [{"moe_dtype": table, "num_tokens": tokens, "hidden_size": hidden, "inter_size": inter,
             "topk": topk, "num_experts": experts, "moe_tp_size": 1, "moe_ep_size": ep, "distribution": "balanced",
             "latency": moe_time(with_fit(h100, truth[dtype]), tokens, hidden, inter, topk, experts, 1, ep,
                                 dtype=dtype) * 1e3}
            for table, (dtype, eps) in tables.items() for hidden, inter, topk, experts in shapes
            for tokens in (1, 16, 128, 1024, 8192) for ep in eps]
    folder = tmp_path / "h100_sxm" / "moe" / "trtllm" / "1.0"
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(folder / "moe_perf.parquet")
    fitted, summary = fit_framework_moe(tmp_path, "trtllm")
    assert set(fitted["bf16"]) == set(fitted["fp8_block"]) == {*FRAMEWORK_MOE_GRID, *FRAMEWORK_MOE_EP_GRID}
    assert fitted == {dtype: pytest.approx(fields) for dtype, fields in truth.items()}
    assert "bf16/held out 0.0%/0.0%" in summary and "bf16/EP held out 0.0%/0.0%" in summary
    assert "fp8_block/EP held out 0.0%/0.0%" in summary and "fp8_block/held out" not in summary


@pytest.mark.slow
def test_a_gpu_whose_moe_tables_time_only_expert_parallelism_gets_its_moe_fit(tmp_path):
    """``calibrate --framework`` (``fit_framework_kernels``) on a GPU folder whose MoE tables time the framework's
    kernel only under expert parallelism (TensorRT-LLM's A100 tables): its fused-MoE kernel is fitted from them and
    written under the GPU's generation."""
    from simulator.cost.moe import moe_time
    from simulator.fidelity.kernel_fit import fit_framework_kernels

    truth = {"moe_gemm_efficiency": 0.5, "moe_bandwidth_efficiency": 1.0, "moe_expert_overhead_us": 0.8,
             "moe_token_pass_bytes": 20.0, "moe_assignment_pass_bytes": 9.0, "moe_ep_overhead_us": 3.0}
    a100 = with_fit(load_hardware("a100-80gb-sxm"), truth)
    shapes = [(2048, 256, 8, 128), (4096, 1536, 8, 128), (7168, 2048, 8, 256), (2880, 2880, 4, 128)]
    rows = [{"moe_dtype": "bfloat16", "num_tokens": tokens, "hidden_size": hidden, "inter_size": inter,
             "topk": topk, "num_experts": experts, "moe_tp_size": 1, "moe_ep_size": ep, "distribution": "balanced",
             "latency": moe_time(a100, tokens, hidden, inter, topk, experts, 1, ep) * 1e3}
            for hidden, inter, topk, experts in shapes for tokens in (1, 16, 128, 1024, 8192) for ep in (2, 4, 16)]
    folder = tmp_path / "a100_sxm" / "moe" / "trtllm" / "1.0"
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(folder / "moe_perf.parquet")
    fields, report = fit_framework_kernels(tmp_path, "trtllm", "a100_sxm")
    assert fields == {"moe_by_generation": {"ampere": {"bf16": pytest.approx(truth)}}}
    assert any("bf16/EP held out 0.0%/0.0%" in line for line in report)


@pytest.mark.slow
def test_framework_mla_fit_recovers_a_frameworks_kernels(tmp_path):
    """An MLA table of one framework (the layout of ``../shared/data/kernels``: DeepSeek-V3's latent shapes, heads
    per GPU, a decode row's context ``isl + step``) timed with known parameters — MLA's absorbed decode near half
    the peak, each sequence's latent cache streamed at 40 GB/s at most (one block per sequence: 1–64 sequences do
    not reach the GPU's bandwidth), its prefill blocks three quarters of a block per SM at once (a prompt of 16
    heads is 16 blocks per 128 tokens: its longest block a bound), and over the fp8 cache another decode kernel
    streaming slower — is fitted back to them: the 16-bit
    kernels' values, and ``kv_8bit`` with the same prefill and that decode kernel (its prefill's K/V bytes per token
    grow with the heads as its rows do: the bytes' cost is fitted, the rows' is none)."""
    from simulator.fidelity.attention_fit import fit_framework_mla
    from simulator.fidelity.kernels import mla_kernel_times

    truth_fields = {"attention_efficiency": 0.55, "attention_io_efficiency": 0.5, "prefill_attention_ns_per_row": 0.0,
                    "prefill_attention_ns_per_tile": 10.0, "decode_attention_efficiency": 0.6,
                    "decode_attention_bandwidth_efficiency": 0.9, "decode_attention_ns_per_head": 30.0,
                    "attention_overhead_us": 12.0, "decode_attention_overhead_us": 9.0,
                    "decode_attention_block_gb_per_s": 40, "prefill_attention_blocks_per_sm": 0.75}
    eight_bit = {"decode_attention_bandwidth_efficiency": 0.3, "decode_attention_overhead_us": 14.0}
    def rows(model, phase: str):
        for heads in (16, 128):
            for batch in (1, 8, 64):
                for seq in (16, 200, 1024, 8192):
                    isl, step = (seq, 0) if phase == "prefill" else (1, seq - 1)
                    seconds = mla_kernel_times(model, heads, phase, float(batch), float(seq))
                    yield {"mla_dtype": "bfloat16", "num_heads": heads, "batch_size": batch, "isl": isl,
                           "step": step, "latency": float(seconds) * 1e3}

    write_timed_tables(tmp_path / "h100_sxm" / "mla" / "sglang" / "1.0", "mla", truth_fields, eight_bit, rows)
    fitted, summary = fit_framework_mla(tmp_path, "sglang")
    assert fitted.pop("kv_8bit") == pytest.approx({**truth_fields, **eight_bit})
    assert fitted == pytest.approx(truth_fields)
    assert "decode 0.0%/0.0%" in summary and "prefill 0.0%/0.0%" in summary


def write_timed_tables(folder, kind: str, fields: dict, eight_bit: dict, rows) -> None:
    """A framework's ``<phase>_<kind>_perf.parquet`` tables (the layout of ``../shared/data/kernels``) timed by the
    H100 with ``fields``, over bf16 and fp8 caches; the kernels over the fp8 cache with ``eight_bit`` over those.
    ``rows(model, phase)`` yields the rows of one cache format (latency in ms)."""
    from simulator.cost.attention import AttentionModel

    truth = with_fit(load_hardware("h100-sxm"), fields)
    folder.mkdir(parents=True)
    for stem, phase in (("context", "prefill"), ("generation", "decode")):
        table = []
        for kv in ("bfloat16", "fp8"):
            kernels = with_fit(truth, eight_bit) if kv == "fp8" else truth
            table += [{**row, "kv_cache_dtype": kv}
                      for row in rows(AttentionModel(kernels, {"bfloat16": "bf16", "fp8": "fp8"}[kv]), phase)]
        pd.DataFrame(table).to_parquet(folder / f"{stem}_{kind}_perf.parquet")


@pytest.mark.slow
def test_kernel_fit_recovers_nvls_from_the_16_bit_all_reduces(tmp_path):
    """An NCCL table (the layout of ``../shared/data/kernels``: message sizes in elements of ``nccl_dtype``, latency
    in ms) timed with a known in-switch reduction (0.62 of the link, 40 µs) where 16-bit all-reduces beat the ring,
    and int8 all-reduces of the same bytes on the ring: the generation fit finds NVLS again from the shipped Hopper
    values, the ring's parameters untouched, with no error left. Ampere's NVSwitch has no NVLS fit, so its grid
    leaves NVLS out rather than fitting a protocol its switch does not run."""
    from simulator.cost.collectives import collective_time
    from simulator.fidelity.kernel_fit import fit_kernels

    shipped = load_hardware("h100-sxm")
    truth = with_fit(shipped, {"comm.all_reduce_nvls": shipped.fit.comm.all_reduce_nvls.model_copy(
        update={"efficiency": 0.62, "latency_us": 40.0})})
    folder = tmp_path / "h100_sxm" / "comm" / "nccl" / "2.0"
    folder.mkdir(parents=True)
    types = {"half": ("fp16", 2), "int8": ("int8", 1)}
    rows = [{"op_name": "all_reduce", "nccl_dtype": name, "num_gpus": n, "message_size": nbytes // types[name][1],
             "latency": collective_time(truth, "all_reduce", n, nbytes, types[name][0]) * 1e3}
            for name in types for n in (2, 4, 8) for nbytes in (2**k for k in range(12, 30))]
    pd.DataFrame(rows).to_parquet(folder / "nccl_perf.parquet")
    fitted, report = fit_kernels(shipped, tmp_path, "h100_sxm")
    assert (fitted.fit.comm.all_reduce_nvls.efficiency, fitted.fit.comm.all_reduce_nvls.latency_us) == (0.62, 40.0)
    assert (fitted.fit.comm.link_efficiency, fitted.fit.comm.latency_us) == (shipped.fit.comm.link_efficiency,
                                                                              shipped.fit.comm.latency_us)
    assert "all_reduce 0.0%/0.0%" in report[1]
    a100 = load_hardware("a100-80gb-sxm")
    (tmp_path / "h100_sxm").rename(tmp_path / "a100_sxm")
    fitted, _ = fit_kernels(a100, tmp_path, "a100_sxm")
    assert fitted.fit.comm.all_reduce_nvls is None
