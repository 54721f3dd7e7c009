"""``llmsim calibrate --kernels DIR --gpu NAME``: fit a GPU generation's parameters to the frameworks' kernel tables.

The tables of vLLM, SGLang and TensorRT-LLM are pooled — the fitted parameters describe the GPU, not one
framework's kernels — with an equal sample of every (framework, dtype) or (framework, phase) table so that no table
outweighs the others. Three groups are fitted one after another, each by the coordinate descent of
:mod:`simulator.fidelity.calibrate` (minimising the mean |log(predicted / measured)|, deterministic):

- GEMMs: ``flops_efficiency`` (16-bit), the fp8 and fp8_block fractions of the fp8 peak, ``bandwidth_efficiency``,
  ``kernel_overhead_us``, ``quantize_overhead_us``, the main loop's ``gemm_k_latency_ns`` and the longest k a
  16-bit GEMM's block walks, ``gemm_split_k`` (knee and row tile: the
  same grid as the operator fit); then, apart, the kernels of formats whose GEMMs are their own (W8A8 int8 and
  weight-only int4: ``gemm_kernel_by_dtype``, :func:`fit_format_kernels`), which the pooled fit leaves out;
- NCCL collectives on the node, each as two protocols (bandwidth and low-latency, :mod:`simulator.cost.collectives`):
  all-reduce (``link_efficiency``, ``collective_latency_us``, ``collective_step_latency_us``,
  ``all_reduce_low_latency``, and ``all_reduce_nvls`` — NVLink SHARP for 16-bit data — where the generation's switch
  reduces in the network: Hopper's, not Ampere's) and each of all-gather, reduce-scatter and all-to-all
  (``collectives``);
- attention: ``attention_efficiency``, ``attention_io_efficiency``, ``prefill_attention_ns_per_row``,
  ``prefill_attention_ns_per_tile``, ``prefill_attention_blocks_per_sm``, ``prefill_attention_exp_exposed`` (where
  the tables hold several head widths, :func:`without_unidentifiable`), ``decode_attention_efficiency``,
  ``decode_attention_ns_per_head``, ``attention_overhead_us``;
- fused-MoE layers (balanced routing, no expert parallelism): ``moe_tile_m``, ``moe_tile_n``, ``moe_knee``,
  ``moe_gemm_efficiency``, ``moe_bandwidth_efficiency``, ``moe_expert_overhead_us`` (``moe_kernels`` is a count, see
  :mod:`simulator.cost.moe`);
- DeepEP's dispatch and combine kernels (``deepep``: latency and link efficiency of each, by least squares,
  :func:`simulator.fidelity.kernels.fit_deepep`), where the GPU has DeepEP tables.

The result is what :mod:`simulator.catalog.generations` holds for the GPU's generation. Five fits per framework
complete it, each into that framework's engine profile (``llmsim calibrate --kernels DIR --gpu G --framework F``,
:func:`fit_framework_kernels`): its own all-reduce kernels (:func:`fit_custom_allreduce`), its dense GEMMs' rates per
format (:func:`fit_framework_gemm`), its own attention and MLA kernels (:func:`fit_framework_attention`,
:func:`fit_framework_mla`: the pooled fit's attention parameters on its tables alone, its decode kernel's fixed cost,
KV streaming rate and a block's streaming rate apart, its decode waves and KV tile and its prefill blocks' packing
scanned (:data:`SCANS`), its prefill's additive costs solved by least squares before each descent
(:func:`solve_linear_costs`), the fallback kernels its profile states it dispatches to, and its kernels over fp8
caches apart from those over 16-bit ones, :func:`fit_kernels_over_caches`), and its fused-MoE
kernel per expert format (:func:`fit_framework_moe`).

The frameworks' fused-MoE kernels differ among themselves by up to 3× for the same format (Triton, CUTLASS and
Marlin kernels, tuned or not: SGLang's MXFP4 layer takes 2–3× vLLM's gpt-oss Triton kernel; vLLM's FlashInfer CUTLASS
kernel for per-tensor fp8 streams its experts at a quarter of the rate of its Triton one for block fp8). A
per-framework scale does not help (it moves each framework's median by under 4 points): the spread is per
(framework, format), so each framework's kernel is fitted per format — its FLOP rate, its weight streaming rate and
its cost per touched expert, the tiles and knee staying the GPU's — on half of the model shapes of its table.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.catalog import HardwareSpec, load_hardware
from simulator.catalog.engines import load_engine
from simulator.catalog.hardware import ExchangeFit, GemmKernelFit
from simulator.cost.attention import FALLBACK_WIDTH, AttentionModel, decode_context, spread_over_sms
from simulator.dtypes import compute_dtype
from simulator.errors import LLMSimError
from simulator.fidelity.calibrate import coordinate_descent, score, set_parameter
from simulator.fidelity.kernels import (
    GEMM_DTYPES,
    GPUS,
    attention_kernel_errors,
    attention_kernel_table,
    custom_allreduce_kernel_errors,
    custom_allreduce_kernel_table,
    deepep_kernel_errors,
    fit_deepep,
    gemm_kernel_errors,
    gemm_kernel_table,
    mla_kernel_errors,
    mla_kernel_table,
    mla_kernel_times,
    moe_kernel_errors,
    moe_kernel_table,
    moe_routing_kernel_table,
    nccl_kernel_errors,
    nccl_kernel_table,
)


def _steps(low: float, high: float, step: float) -> list[float]:
    return [round(float(x), 4) for x in np.arange(low, high + step / 2, step)]


GEMM_GRID: dict[str, list[float]] = {
    "flops_efficiency": _steps(0.60, 0.95, 0.01),
    "flops_efficiency_by_dtype.fp8": _steps(0.40, 0.90, 0.01),
    "flops_efficiency_by_dtype.fp8_block": _steps(0.40, 0.90, 0.01),
    "bandwidth_efficiency": _steps(0.70, 0.98, 0.01),
    "kernel_overhead_us": _steps(1.0, 8.0, 0.2),
    "quantize_overhead_us": _steps(0.0, 8.0, 0.5),
    "gemm_k_latency_ns": _steps(0.0, 4.0, 0.1),
    "gemm_split_k": [0, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 32768],
}
GEMM_SHAPES: dict[str, list[float]] = {"gemm_knee": [1.5, 2.0, 2.5, 3.0, 4.0], "gemm_tile_m": [32, 64, 128]}
_LOW_LATENCY_GRID = (("efficiency", _steps(0.02, 0.60, 0.01)), ("latency_us", _steps(0.0, 20.0, 0.25)),
                     ("step_latency_us", _steps(0.0, 4.0, 0.05)))
COLLECTIVE_GRID: dict[str, list[float]] = {
    "link_efficiency": _steps(0.40, 0.95, 0.01),
    "collective_latency_us": _steps(0.0, 60.0, 0.25),
    "collective_step_latency_us": _steps(0.0, 6.0, 0.05),
    **{f"all_reduce_low_latency.{field}": values for field, values in _LOW_LATENCY_GRID},
    "all_reduce_nvls.efficiency": _steps(0.30, 0.95, 0.01), "all_reduce_nvls.latency_us": _steps(0.0, 120.0, 0.25),
    **{f"collectives.{op}.{field}": values for op in ("all_gather", "reduce_scatter", "all_to_all")
       for field, values in (("efficiency", _steps(0.30, 0.95, 0.01)), ("latency_us", _steps(0.0, 60.0, 0.25)),
                             ("step_latency_us", _steps(0.0, 6.0, 0.05)))},
    **{f"collectives.{op}.low_latency.{field}": values for op in ("all_gather", "reduce_scatter", "all_to_all")
       for field, values in _LOW_LATENCY_GRID},
}
ATTENTION_GRID: dict[str, list[float]] = {
    "attention_efficiency": _steps(0.30, 0.90, 0.01),
    "attention_io_efficiency": _steps(0.10, 0.90, 0.01),
    "prefill_attention_ns_per_row": _steps(0.0, 1.5, 0.01),
    "prefill_attention_ns_per_tile": _steps(0.0, 40.0, 0.25),
    "decode_attention_efficiency": _steps(0.02, 0.50, 0.01),
    "decode_attention_ns_per_head": _steps(0.0, 60.0, 0.5),
    "attention_overhead_us": _steps(0.0, 30.0, 0.2),
    "prefill_attention_blocks_per_sm": [0.0, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0],
    "prefill_attention_exp_exposed": _steps(0.0, 1.5, 0.05),
}
# the share of a prefill kernel's exponentials' time it does not hide: fitted only where the tables can tell it from
# the FLOP rate (without_unidentifiable)
EXP_SHARE = "prefill_attention_exp_exposed"
# the attention fits move two parameters at once where single moves stall (the two prefill costs per token, HBM
# bytes and rows, trade off), which takes more rounds
ATTENTION_DESCENT = {"rounds": 20, "diagonal": True}
# one framework's kernels: its decode kernel's fixed cost apart from its prefill kernel's (another kernel, which also
# combines its split-KV partials) and the HBM fraction it streams the KV cache at apart from the GEMMs' (the pooled fit
# keeps one fixed cost for both and the GEMMs' streaming: it prices the kernels no framework's fit covers), over wider
# ranges (MLA's absorbed decode reaches half the peak and more; SGLang's MLA prefill, over heads decompressed to width
# 192, a fifth of it; fp8 caches dequantised in registers stream at a fraction of the bandwidth), and the rate one
# (sequence, KV head) block streams at (0: no limit, then 5 GB/s doubling every two steps: TensorRT-LLM's A100 MLA
# decode, without split-KV, streams a sequence at ~10 GB/s)
FRAMEWORK_ATTENTION_GRID: dict[str, list[float]] = {
    **ATTENTION_GRID, "attention_efficiency": _steps(0.10, 0.90, 0.01),
    "attention_io_efficiency": _steps(0.05, 0.95, 0.01), "prefill_attention_ns_per_tile": _steps(0.0, 60.0, 0.25),
    "decode_attention_efficiency": _steps(0.02, 0.90, 0.01), "decode_attention_ns_per_head": _steps(0.0, 120.0, 0.5),
    "decode_attention_overhead_us": ATTENTION_GRID["attention_overhead_us"],
    "decode_attention_bandwidth_efficiency": _steps(0.05, 0.95, 0.01),
    "decode_attention_block_gb_per_s": [0.0, *(round(5 * 2 ** (i / 2)) for i in range(20))]}
# a framework's MLA kernels: its prefill reads K/V decompressed to its query heads' widths, so its bytes per token grow
# with the heads as its rows do — the two costs cannot be told apart on one cache's timings: the bytes' is fitted, the
# rows' is none (MLA_START); and its timings are of one head width, which cannot tell its exponentials from its FLOP
# rate (without_unidentifiable): they keep the pooled fit's share
FRAMEWORK_MLA_GRID: dict[str, list[float]] = {
    name: values for name, values in {**FRAMEWORK_ATTENTION_GRID, "prefill_attention_ns_per_row": [0.0]}.items()
    if name != EXP_SHARE}
MLA_START = {"prefill_attention_ns_per_row": 0.0}
# a framework's MHA/GQA decode kernel also pays per (sequence, query head) within a KV head's block: TensorRT-LLM's
# H100 and A100 kernels run a multi-head block (one query head) at a quarter to a third of a block of 8, which one cost
# per block cannot follow (MLA's absorbed decode has one block of all heads per sequence: its fit leaves it out); and,
# where its decode kernel serves at most decode_attention_max_group query heads per KV head, its fallback kernel's
# cost per (query head, token) for larger groups (fitted only then); its decode waves, their split's combine, the
# shortest context split, the occupancy below which a step splits, and the KV tile its loop reads the cache in
# (simulator.cost.attention)
FRAMEWORK_MHA_GRID: dict[str, list[float]] = {
    **FRAMEWORK_ATTENTION_GRID, "decode_attention_ns_per_query_head": _steps(0.0, 10.0, 0.1),
    "decode_attention_ns_per_query_token": _steps(0.0, 0.5, 0.002),
    "prefill_fallback_efficiency": _steps(0.01, 0.60, 0.01),
    "decode_attention_mha_ns_per_head": _steps(0.0, 40.0, 0.1),
    **{name: values for name, values in (
        ("decode_attention_blocks_per_sm", [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0]),
        ("decode_attention_split_us", _steps(0.0, 10.0, 0.25)),
        ("decode_attention_split_tokens", [16, 32, 64, 128, 256, 512, 1024, 2048]),
        ("decode_attention_split_blocks_per_sm", [0.25, 0.5, 0.75, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0]),
        ("decode_attention_kv_tile", [0, 16, 32, 64, 128]),
        ("prefill_attention_packs_gqa", [False, True]))}}
# a decode kernel's waves and its loop's KV tile: each value of its blocks per SM, then of the shortest context it
# splits, then of its tile, is descended from (coordinate descent alone stays at no waves, from which one wave's costs
# and its split's are no single move away; a tile moves the cost from the sequences to their tokens); and a prefill
# kernel's blocks: whether they pack a KV head's query heads, then how many share an SM (a pack moves the cost per
# block by the group's size; the longest block's bound moves the FLOP rate)
SCANS = {"decode": ("decode_attention_blocks_per_sm", "decode_attention_split_tokens", "decode_attention_kv_tile"),
         "prefill": ("prefill_attention_packs_gqa", "prefill_attention_blocks_per_sm")}
# what the kernels over an 8-bit cache, fitted by descent alone, keep of the 16-bit kernels' fit: their loop's KV tile
# (the same loop over the cache; a descent from it trades the tile against the costs per sequence and stalls where
# they fit best for the tile it started with — every framework's scan over its fp8 timings kept the 16-bit tile), and
# whether their prefill blocks pack a KV head's query heads (the same kernel's layout)
KEPT_OVER_8_BIT = ("decode_attention_kv_tile", "prefill_attention_packs_gqa")
# what the kernels over an 8-bit cache may reach beyond the 16-bit kernels' ranges: a prefill whose query-key and
# value products run on 8-bit tensor cores, whose peak is twice the 16-bit one (TensorRT-LLM's H100 fp8 context
# kernels: 1.3 of the 16-bit peak; capped at 0.9 of it, the fit had moved their time into the exponentials)
OVER_8_BIT_RANGES = {"attention_efficiency": _steps(0.10, 1.80, 0.01)}
# which kernel runs which shape: facts a framework's profile states (read off its tables), kept by its fits
DISPATCH_FIELDS = ("decode_attention_max_group", "decode_attention_query_tile", "prefill_fallback_head_dim",
                   "prefill_fallback_window_head_dim")
# the fallback kernels' costs: fitted only where the profile states their dispatch and the table has timings it sends
# there
FALLBACK_COSTS = ("decode_attention_ns_per_query_token", "prefill_fallback_efficiency")
# a multi-head decode kernel apart from the grouped one: its cost fitted only where the profile states it has one
# (a value to start from)
MHA_KERNEL_COSTS = ("decode_attention_mha_ns_per_head",)

MOE_GRID: dict[str, list[float]] = {
    "moe_tile_m": [8, 16, 32, 64, 128],
    "moe_tile_n": [1, 32, 64, 128],
    "moe_knee": [1.5, 2.0, 3.0, 4.0, 6.0, 8.0],
    "moe_gemm_efficiency": _steps(0.20, 1.50, 0.02),
    "moe_bandwidth_efficiency": _steps(0.40, 1.20, 0.02),
    "moe_expert_overhead_us": _steps(0.0, 3.0, 0.1),
}


CUSTOM_ALLREDUCE_GRID: dict[str, list[float]] = {
    "custom_allreduce_latency_us": _steps(0.5, 10.0, 0.1),
    "custom_allreduce_two_shot_latency_us": _steps(1.0, 30.0, 0.25),
    "custom_allreduce_max_mib": [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0],
}


def fit_custom_allreduce(kernels_dir: Path, framework: str, gpu: str = "h100_sxm") -> tuple[dict[str, float], str]:
    """A framework's own all-reduce fitted on its CUDA-graph table (``comm/<framework>/*/custom_allreduce_perf``) of
    one GPU: the one-shot and two-shot fixed costs and the largest message it takes (NCCL above), by coordinate
    descent on the mean |log(predicted / measured)|, starting from the shipped engine profile's values for that
    GPU's generation; with the fitted errors' summary (the values go in the profile's fields for Hopper, in
    ``custom_allreduce_by_generation`` for another generation).
    The bandwidth terms are the GPU's (link GB/s × ``link_efficiency``), so only the framework's costs are fitted."""
    table = custom_allreduce_kernel_table(kernels_dir)
    table = table[(table["gpu"] == gpu) & (table["framework"] == framework)].reset_index(drop=True)
    engine = load_engine(framework)
    start = engine.custom_allreduce(load_hardware(GPUS[gpu]).generation)
    # the fitted fields hold for every generation while fitting: the table of other generations' kernels is set aside
    engine = engine.model_copy(update={
        "custom_allreduce_by_generation": {},
        "custom_allreduce_latency_us": start.latency_us if start else 3.0,
        "custom_allreduce_two_shot_latency_us": start.two_shot_latency_us if start and start.two_shot_latency_us
        else 30.0,
        "custom_allreduce_max_mib": start.max_mib if start else 8.0})

    def evaluate(candidate) -> float:
        return score(custom_allreduce_kernel_errors(kernels_dir, engines={framework: candidate}, table=table))

    best = coordinate_descent(engine, CUSTOM_ALLREDUCE_GRID, evaluate)
    errors = custom_allreduce_kernel_errors(kernels_dir, engines={framework: best}, table=table)
    fitted = {name: getattr(best, name) for name in CUSTOM_ALLREDUCE_GRID}
    return fitted, _summary(f"{framework} all-reduce on {gpu}", errors, ["gpus"])


def fit_framework_attention(kernels_dir: Path, framework: str, gpu: str = "h100_sxm",
                            per_group: int = 2000) -> tuple[dict, str]:
    """A framework's own attention kernels fitted on its tables of one GPU (``attention/<framework>``: prefill and
    decode, ``per_group`` sampled timings of each, scored alike; the other timings are held out), by
    :func:`fit_kernels_over_caches`. Which kernel runs which shape is a fact its profile states for the generation
    (:data:`DISPATCH_FIELDS`: its decode kernel's largest query group and query tile, the head widths from which its
    prefill falls back); those are kept, and a fallback's cost is fitted where its timings exist, starting from
    :func:`fallback_rate` and :func:`fallback_efficiency` of them, and a multi-head decode kernel's where the
    profile states one (:data:`MHA_KERNEL_COSTS`), from its value. The values go in the engine profile's
    ``attention_by_generation`` under the GPU's generation."""
    table = attention_kernel_table(kernels_dir)
    table = table[(table["gpu"] == gpu) & (table["framework"] == framework)].reset_index(drop=True)
    hardware = load_hardware(GPUS[gpu])
    stated = load_engine(framework).attention_hardware(hardware)
    dispatch = {name: getattr(stated, name) for name in DISPATCH_FIELDS if getattr(stated, name)}
    costs = {"decode_attention_ns_per_query_token": fallback_rate(table, stated),
             "prefill_fallback_efficiency": fallback_efficiency(table, stated)}
    costs.update({name: getattr(stated, name) for name in MHA_KERNEL_COSTS})
    start = {**dispatch, **{name: value for name, value in costs.items() if value is not None}}
    grid = without_unidentifiable({name: values for name, values in FRAMEWORK_MHA_GRID.items()
                                   if name not in FALLBACK_COSTS + MHA_KERNEL_COSTS or name in start}, table, hardware)
    fitted, errors = fit_kernels_over_caches(table, gpu, per_group, pooled_attention_score,
                                             lambda hw, rows: _pooled_attention_errors(kernels_dir, hw, rows),
                                             grid, start)
    return {**fitted, **dispatch}, _summary(f"{framework} attention on {gpu}", errors, ["phase"])


def without_unidentifiable(grid: dict[str, list[float]], table: pd.DataFrame,
                           hardware: HardwareSpec) -> dict[str, list[float]]:
    """``grid`` without the share of a prefill kernel's exponentials' time it does not hide (:data:`EXP_SHARE`)
    where ``table``'s prefill timings cannot tell it from the FLOP rate — all of one head width (one exponential per
    query-key pair and head whatever the width, FLOPs in proportion to it: A100's tables, of width 128 only) — or
    where the GPU states no exponential rate (``sfu_exp_tera_per_s``): that share is then the starting profile's."""
    widths = table.loc[table["phase"] == "prefill", "head_dim"].nunique()
    if widths > 1 and hardware.sfu_exp_tera_per_s:
        return grid
    return {name: values for name, values in grid.items() if name != EXP_SHARE}


def fallback_rate(table: pd.DataFrame, hardware: HardwareSpec) -> float | None:
    """The median nanoseconds per (query head, cached token, 128 elements of head width) of the 16-bit decode
    timings whose groups exceed ``hardware``'s ``decode_attention_max_group`` query heads per KV head (None without a
    limit or such timings), as the profile states such a cost (over :func:`spread_over_sms`): where the decode fit of
    their fallback kernel starts."""
    max_group = hardware.decode_attention_max_group
    rows = table[(table["phase"] == "decode") & (table["kv_dtype"] != "fp8")
                 & (table["heads"] > max_group * table["kv_heads"])]
    if not max_group or rows.empty:
        return None
    context = decode_context(rows["seq_len"].to_numpy(float), rows["window"].to_numpy(float))
    work = rows["batch"] * context * rows["heads"] * np.ceil(rows["head_dim"] / FALLBACK_WIDTH)
    return float(np.median(rows["measured_s"] / work) * 1e9 / spread_over_sms(hardware))


def fallback_efficiency(table: pd.DataFrame, hardware: HardwareSpec) -> float | None:
    """The grid value nearest the median fraction of the 16-bit peak at which the 16-bit prefill timings that
    ``hardware``'s dispatch sends to its fallback kernel (:meth:`AttentionModel.prefill_falls_back`) compute every
    causal pair (None without such timings): where the prefill fit of that kernel starts."""
    rows = table[(table["phase"] == "prefill") & (table["kv_dtype"] != "fp8")]
    rows = rows[AttentionModel(hardware).prefill_falls_back(rows["head_dim"].to_numpy(), rows["window"].to_numpy() > 0)]
    if rows.empty:
        return None
    flops = 4 * rows["heads"] * rows["head_dim"] * rows["batch"] * rows["seq_len"] * (rows["seq_len"] + 1) / 2
    peak = hardware.achievable_flops("bf16") / hardware.flops_efficiency
    achieved = float(np.median(flops / rows["measured_s"]) / peak)
    return min(FRAMEWORK_MHA_GRID["prefill_fallback_efficiency"], key=lambda value: abs(value - achieved))


def fit_framework_mla(kernels_dir: Path, framework: str, gpu: str = "h100_sxm",
                      per_group: int = 2000) -> tuple[dict, str]:
    """A framework's own MLA kernels fitted on its MLA tables of one GPU (``mla/<framework>``, DeepSeek-V3's latent
    shapes: prefill decompressed, decode absorbed) as :func:`fit_framework_attention` fits its other attention
    kernels. The values go in the engine profile's ``mla_by_generation``."""
    table = mla_kernel_table(kernels_dir)
    table = table[(table["gpu"] == gpu) & (table["framework"] == framework)].reset_index(drop=True)
    fitted, errors = fit_kernels_over_caches(table, gpu, per_group, pooled_mla_score,
                                             lambda hw, rows: mla_kernel_errors(kernels_dir, hw, rows, engines={}),
                                             FRAMEWORK_MLA_GRID, MLA_START)
    return fitted, _summary(f"{framework} MLA on {gpu}", errors, ["phase"])


def fit_kernels_over_caches(table: pd.DataFrame, gpu: str, per_group: int,
                            scorer: Callable[[pd.DataFrame, list[str]], Callable[[HardwareSpec], float]],
                            errors: Callable[[dict[str, HardwareSpec], pd.DataFrame], pd.DataFrame],
                            parameters: dict[str, list[float]] = FRAMEWORK_ATTENTION_GRID, start: dict | None = None):
    """One framework's attention kernels of one kind on one GPU (``table``: its prefill and decode timings): the
    ``parameters`` (:data:`FRAMEWORK_ATTENTION_GRID`: those of the pooled fit, :data:`ATTENTION_GRID`, its decode
    kernel's own fixed cost, ``decode_attention_overhead_us``, from the shared one, its KV streaming rate,
    ``decode_attention_bandwidth_efficiency``, from the GEMMs', and a block's, ``decode_attention_block_gb_per_s``;
    :data:`FRAMEWORK_MHA_GRID` adds a cost per query head, the fallback kernels' costs and the decode kernel's
    waves), by the attention fits' coordinate descent (:data:`ATTENTION_DESCENT`) from the generation's pooled
    values on ``per_group`` sampled timings per phase over 16-bit caches (then, where the scanned parameters are
    fitted, those of each phase again from each value of its :data:`SCANS` in turn, the best kept); then, where the
    table has timings over fp8 caches, those of each phase they span (:func:`spans_the_shapes`) again on them alone,
    from the 16-bit kernels' values (``kv_8bit``: the frameworks' kernels over an 8-bit cache are other kernels, but for
    :data:`KEPT_OVER_8_BIT`, over the ranges of :data:`OVER_8_BIT_RANGES`); ``start``:
    fields of the starting profile besides the pooled ones (kept unless in ``parameters``). ``scorer(sample, by)``
    scores a profile on a sample; ``errors(hardware by GPU, rows)`` prices rows. Returns the fitted fields and every
    timing's errors."""
    sixteen, eight = table[table["kv_dtype"] != "fp8"], table[table["kv_dtype"] == "fp8"]
    hardware = load_hardware(GPUS[gpu])
    profile = hardware.model_copy(update={"decode_attention_bandwidth_efficiency": hardware.bandwidth_efficiency,
                                          **(start or {})})

    def descend(start: HardwareSpec, rows: pd.DataFrame, grid: dict[str, list[float]]) -> HardwareSpec:
        sample = _sample(rows.reset_index(drop=True), ["phase"], per_group)
        sample_score = scorer(sample, ["phase"])
        prefill = sample[sample["phase"] == "prefill"]
        if len(prefill) and any(name in grid for name in LINEAR_PREFILL):
            start = min(start, solve_linear_costs(start, prefill["measured_s"].to_numpy(),
                                                  lambda hw: errors({gpu: hw}, prefill)["predicted_s"].to_numpy(),
                                                  grid, LINEAR_PREFILL), key=sample_score)
        return coordinate_descent(start, grid, sample_score, **ATTENTION_DESCENT)

    def scan(fitted: HardwareSpec, rows: pd.DataFrame) -> HardwareSpec:
        """``fitted`` with each phase's parameters descended from each value of each of its :data:`SCANS` in turn
        (the best kept), the split's shortest context from the middle of its grid (unset, every context splits)."""
        split = SCANS["decode"][1]
        if split in parameters and not getattr(fitted, split):
            fitted = set_parameter(fitted, split, parameters[split][len(parameters[split]) // 2])
        for phase, names in SCANS.items():
            timings = rows[rows["phase"] == phase]
            if not len(timings):
                continue
            sample_score = scorer(_sample(timings.reset_index(drop=True), ["phase"], per_group), ["phase"])
            for scanned in (name for name in names if name in parameters):
                grid = {name: values for name, values in parameters.items()
                        if name in PHASE_PARAMETERS[phase] and name != scanned}
                fitted = min([fitted, *(descend(set_parameter(fitted, scanned, value), timings, grid)
                                        for value in parameters[scanned])], key=sample_score)
        return fitted

    profile = scan(descend(profile, sixteen, parameters), sixteen) if len(sixteen) else profile
    fitted: dict = {name: getattr(profile, name) for name in parameters}
    parts = [errors({gpu: profile}, sixteen)]
    if len(eight):
        phases = [phase for phase in PHASE_PARAMETERS if spans_the_shapes(eight, sixteen, phase)]
        grid = {name: OVER_8_BIT_RANGES.get(name, values) for name, values in parameters.items()
                if any(name in PHASE_PARAMETERS[phase] for phase in phases) and name not in KEPT_OVER_8_BIT}
        over_8bit = descend(profile, eight[eight["phase"].isin(phases)], grid) if grid else profile
        fitted["kv_8bit"] = {name: getattr(over_8bit, name) for name in parameters}
        parts.append(errors({gpu: over_8bit}, eight))
    return fitted, pd.concat(parts)


# a prefill kernel's costs that add to its time (simulator.cost.attention): per pair and head its FLOPs at 1 / the
# peak's fraction and its exposed exponential (the longest block's bound a smooth maximum of the same per-pair cost
# over more pairs, so these scale it too), its K/V bytes at 1 / the HBM fraction, its rows, its blocks and its fixed
# cost — for a given packing and blocks per SM, linear in these (the fractions in their reciprocals)
LINEAR_PREFILL = ("attention_efficiency", "prefill_attention_exp_exposed", "attention_io_efficiency",
                  "prefill_attention_ns_per_row", "prefill_attention_ns_per_tile", "attention_overhead_us")
# a fused-MoE layer's costs that add to its time (simulator.cost.moe): per touched expert, its passes over the tokens
# and over their copies, and what expert parallelism adds — for given rates, linear in these
LINEAR_MOE = ("moe_expert_overhead_us", "moe_token_pass_bytes", "moe_assignment_pass_bytes", "moe_ep_overhead_us")
# linear costs whose reciprocal is what adds (a fraction of a bandwidth)
RECIPROCAL_COSTS = ("attention_efficiency", "attention_io_efficiency")


def solve_linear_costs(profile: HardwareSpec, measured: np.ndarray, price: Callable[[HardwareSpec], np.ndarray],
                       grid: dict[str, list[float]], linear: tuple[str, ...]) -> HardwareSpec:
    """``profile`` with those of its ``linear`` costs that ``grid`` fits solved at once by non-negative least
    squares of the relative error against ``measured`` seconds, each then rounded to its ``grid``'s nearest value
    (a bandwidth fraction, :data:`RECIPROCAL_COSTS`, solved as none takes the grid's largest). The priced seconds are
    the rest plus Σ feature × cost; each feature is read off ``price`` (seconds per row under a profile) as what
    switching that cost alone on adds. A descent stalls in the valleys along which costs that grow with the same
    quantities trade off (a prefill's rows, blocks and K/V bytes all grow with the prompt; a fused-MoE layer's
    passes over tokens and over their copies both grow with the batch); this lands in them at once."""
    names = [name for name in linear if name in grid]
    if not names:
        return profile
    off = {name: np.inf if name in RECIPROCAL_COSTS else 0.0 for name in names}
    base = price(profile.model_copy(update=off))
    features = np.stack([price(profile.model_copy(update={**off, name: 1.0})) - base for name in names], axis=1)
    solved = dict(zip(names, nonnegative_least_squares(features / measured[:, None], 1 - base / measured),
                      strict=True))
    for name in RECIPROCAL_COSTS:
        if name in solved:
            solved[name] = 1 / solved[name] if solved[name] > 0 else np.inf
    return profile.model_copy(update={name: min(grid[name], key=lambda value: abs(value - solved[name]))
                                      for name in names})


def nonnegative_least_squares(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x ≥ 0 minimising |a·x − b|² for a few columns: least squares over the columns still free, the most negative
    one fixed at 0 until none is negative."""
    x, free = np.zeros(a.shape[1]), np.ones(a.shape[1], dtype=bool)
    while free.any():
        x[:] = 0.0
        x[free] = np.linalg.lstsq(a[:, free], b, rcond=None)[0]
        if (x >= 0).all():
            break
        free[np.argmin(x)] = False
    return np.maximum(x, 0.0)


# each phase's parameters of an attention fit (FRAMEWORK_MHA_GRID's, of which FRAMEWORK_ATTENTION_GRID is a part)
PHASE_PARAMETERS = {
    "prefill": ("attention_efficiency", "attention_io_efficiency", "prefill_attention_ns_per_row",
                "prefill_attention_ns_per_tile", "attention_overhead_us", "prefill_fallback_efficiency",
                "prefill_attention_packs_gqa", "prefill_attention_blocks_per_sm", "prefill_attention_exp_exposed"),
    "decode": ("decode_attention_efficiency", "decode_attention_ns_per_head", "decode_attention_ns_per_query_head",
               "decode_attention_overhead_us", "decode_attention_bandwidth_efficiency",
               "decode_attention_ns_per_query_token", "decode_attention_block_gb_per_s",
               "decode_attention_mha_ns_per_head", "decode_attention_blocks_per_sm", "decode_attention_split_us",
               "decode_attention_split_tokens", "decode_attention_split_blocks_per_sm", "decode_attention_kv_tile"),
}
SHAPE_COLUMNS = ("heads", "kv_heads", "head_dim", "window")


def spans_the_shapes(table: pd.DataFrame, reference: pd.DataFrame, phase: str) -> bool:
    """Whether ``table``'s timings of ``phase`` cover at least half the layer shapes (query and KV heads, head
    width, window) of ``reference``'s: what a fit on them may price. SGLang's H100 prefill timings over an fp8 cache
    hold 10 of its 147 (two head widths only: 256 with a 1024-token window, and 512, which its 16-bit kernels also
    run 5× off its others' rate), too few to stand for its fp8 prefill of every model: that phase keeps the 16-bit
    fit."""
    columns = [column for column in SHAPE_COLUMNS if column in table.columns]

    def shapes(frame: pd.DataFrame) -> set:
        rows = frame[frame["phase"] == phase]
        return set(map(tuple, rows[columns].drop_duplicates().to_numpy().tolist()))

    wanted = shapes(reference)
    return bool(wanted) and 2 * len(shapes(table) & wanted) >= len(wanted)


FRAMEWORK_GEMM_GRID: dict[str, list[float]] = {name: GEMM_GRID[name] for name in (
    "flops_efficiency", "flops_efficiency_by_dtype.fp8", "flops_efficiency_by_dtype.fp8_block")}


def fit_framework_gemm(kernels_dir: Path, framework: str, gpu: str = "h100_sxm",
                       per_group: int = 2000) -> tuple[dict, str]:
    """A framework's own dense GEMM rates fitted on its GEMM tables of one GPU (``gemm/<framework>``, ``per_group``
    sampled timings of each format, scored alike; the rest held out): the fraction of the tensor-core peak of each
    format it has a table of (16-bit; fp8 and fp8_block on GPUs with FP8 tensor cores), by coordinate descent from
    the generation's pooled values, the memory-bound side (bandwidth, knee, row tile, fixed costs) held at the
    GPU's; with the errors' summary over all of its timings. The values go in ``gemm_by_generation``."""
    table = gemm_kernel_table(kernels_dir)
    table = table[(table["gpu"] == gpu) & (table["framework"] == framework)].reset_index(drop=True)
    sample = _sample(table, ["dtype"], per_group)
    measured = {GEMM_DTYPES[dtype] for dtype in table["dtype"].unique()}
    grid = {name: values for name, values in FRAMEWORK_GEMM_GRID.items()
            if name == "flops_efficiency" or name.split(".")[1] in measured}

    def pooled_score(p: HardwareSpec) -> float:
        return _score_by(gemm_kernel_errors(kernels_dir, {gpu: p}, sample, engines={}), ["dtype"])

    profile = coordinate_descent(load_hardware(GPUS[gpu]), grid, pooled_score)
    fitted = {"flops_efficiency": profile.flops_efficiency, "flops_efficiency_by_dtype": {
        name.split(".")[1]: profile.flops_efficiency_by_dtype[name.split(".")[1]] for name in grid
        if name != "flops_efficiency"}}
    errors = gemm_kernel_errors(kernels_dir, {gpu: profile}, table, engines={})
    return fitted, _summary(f"{framework} GEMM on {gpu}", errors, ["dtype"])


FRAMEWORK_MOE_GRID: dict[str, list[float]] = {
    "moe_gemm_efficiency": _steps(0.10, 1.50, 0.02),
    "moe_bandwidth_efficiency": _steps(0.20, 1.20, 0.02),
    "moe_expert_overhead_us": _steps(0.0, 20.0, 0.1),
}
# where the framework's tables time its kernel under expert parallelism too, its passes over every token it is
# handed and what expert parallelism adds (simulator.cost.moe), which only those rows tell from the experts' work
FRAMEWORK_MOE_EP_GRID: dict[str, list[float]] = {
    "moe_token_pass_bytes": _steps(0.0, 80.0, 0.5),
    "moe_assignment_pass_bytes": _steps(0.0, 40.0, 0.5),
    "moe_ep_overhead_us": _steps(0.0, 30.0, 0.25),
}
MOE_EP_SAMPLE = 2000  # expert-parallel timings per format a fit prices at each step (of the fit shapes')
# the streaming rate and the per-expert cost trade off (both grow with the experts touched): moves of two at once
MOE_DESCENT = {"rounds": 20, "diagonal": True}
MOE_LINEAR_ROUNDS = 4  # at most this many (linear solve, descent) rounds
MOE_FIT_MIN_SHAPES = 4  # a format measured on fewer model shapes keeps the pooled fit (half of them are held out)
MOE_SHAPE = ["hidden", "inter", "topk", "experts"]


def moe_held_out(rows: pd.DataFrame) -> np.ndarray | None:
    """Which of one (GPU, framework, format) MoE table's rows :func:`fit_framework_moe` holds out: those of every
    other model shape (hidden, width, top-k, experts) in sorted order, starting with the second; None when the
    table has fewer than :data:`MOE_FIT_MIN_SHAPES` shapes (not fitted)."""
    keys = list(rows[MOE_SHAPE].itertuples(index=False, name=None))
    shapes = sorted(set(keys))
    if len(shapes) < MOE_FIT_MIN_SHAPES:
        return None
    fitted = set(shapes[::2])
    return np.array([key not in fitted for key in keys])


def fit_framework_moe(kernels_dir: Path, framework: str, gpu: str = "h100_sxm") -> tuple[dict, str]:
    """A framework's own fused-MoE kernel per expert weight format, fitted on its MoE tables of one GPU
    (``moe/<framework>``, balanced routing, no expert parallelism): for every format measured on at least
    :data:`MOE_FIT_MIN_SHAPES` model shapes (hidden, width, top-k, experts), :data:`FRAMEWORK_MOE_GRID`'s
    parameters by coordinate descent from the generation's pooled values on every other shape in sorted order
    (the rest held out, :func:`moe_held_out`: models the fit has not seen); where its tables also time the format
    under expert parallelism (:func:`moe_routing_kernel_table`) on that many shapes, :data:`FRAMEWORK_MOE_EP_GRID`'s
    too, on those rows of every other of their shapes besides (:data:`MOE_EP_SAMPLE` of them, each table scored
    alike) or alone where only they have the shapes; with the errors' summary per format, fitted and held-out shapes
    apart. The values go in the engine profile's ``moe_by_generation`` under the GPU's generation."""
    table = moe_kernel_table(kernels_dir)
    table = table[(table["gpu"] == gpu) & (table["framework"] == framework)].reset_index(drop=True)
    routing = moe_routing_kernel_table(kernels_dir)
    routing = routing[(routing["gpu"] == gpu) & (routing["framework"] == framework)]
    hardware = load_hardware(GPUS[gpu])
    fitted: dict[str, dict[str, float]] = {}
    parts = []
    for dtype in sorted({*table["dtype"], *routing["dtype"]}):
        rows = table[table["dtype"] == dtype].reset_index(drop=True)
        parallel = routing[routing["dtype"] == dtype].reset_index(drop=True)
        held_out, parallel_held_out = moe_held_out(rows), moe_held_out(parallel)
        if held_out is None and parallel_held_out is None:
            continue
        grid, tables = dict(FRAMEWORK_MOE_GRID), []
        if held_out is not None:
            tables.append(rows[~held_out].reset_index(drop=True))
        if parallel_held_out is not None:
            grid.update(FRAMEWORK_MOE_EP_GRID)
            fit_rows = parallel[~parallel_held_out]
            tables.append(fit_rows.sample(n=min(len(fit_rows), MOE_EP_SAMPLE), random_state=0).reset_index(drop=True))
        profile = _fit_moe_format(kernels_dir, gpu, hardware, tables, grid)
        fitted[dtype] = {name: getattr(profile, name) for name in grid}
        if held_out is not None:
            parts.append(_pooled_moe_errors(kernels_dir, {gpu: profile}, rows).assign(
                shapes=np.where(held_out, "held out", "fitted")))
        if parallel_held_out is not None:
            parts.append(_pooled_moe_errors(kernels_dir, {gpu: profile}, parallel).assign(
                shapes=np.where(parallel_held_out, "EP held out", "EP fitted")))
    if not parts:
        return {}, f"{framework} MoE on {gpu}: no format measured on {MOE_FIT_MIN_SHAPES} shapes or more"
    return fitted, _summary(f"{framework} MoE on {gpu}", pd.concat(parts), ["dtype", "shapes"])


def _moe_tables_any_parallelism(kernels_dir: Path) -> pd.DataFrame:
    """The (gpu, framework) of every fused-MoE timing, with expert parallelism or without (what
    :func:`fit_framework_moe` may fit on)."""
    columns = ["gpu", "framework"]
    return pd.concat([moe_kernel_table(kernels_dir)[columns], moe_routing_kernel_table(kernels_dir)[columns]])


def _fit_moe_format(kernels_dir: Path, gpu: str, start: HardwareSpec, tables: list[pd.DataFrame],
                    grid: dict[str, list[float]] = FRAMEWORK_MOE_GRID) -> HardwareSpec:
    """``start`` with ``grid``'s parameters fitted on one framework's MoE ``tables`` of one format (each scored
    alike): coordinate descent, its linear costs (:data:`LINEAR_MOE`) solved at once before each round of it
    (:func:`solve_linear_costs`, for the rates the last round reached) until a round changes nothing."""
    rows = pd.concat(tables, ignore_index=True)

    def evaluate(profile: HardwareSpec) -> float:
        return sum(score(_pooled_moe_errors(kernels_dir, {gpu: profile}, table)) for table in tables)

    def price(profile: HardwareSpec) -> np.ndarray:
        return _pooled_moe_errors(kernels_dir, {gpu: profile}, rows)["predicted_s"].to_numpy()

    profile = start
    for _ in range(MOE_LINEAR_ROUNDS):
        solved = solve_linear_costs(profile, rows["measured_s"].to_numpy(), price, grid, LINEAR_MOE)
        descended = coordinate_descent(min(profile, solved, key=evaluate), grid, evaluate, **MOE_DESCENT)
        if descended == profile:
            break
        profile = descended
    return profile


def fit_framework_kernels(kernels_dir: Path, framework: str, gpu: str = "h100_sxm") -> tuple[dict, list[str]]:
    """A framework's own kernels on one GPU, as the engine-profile fields for the GPU's generation: its all-reduce
    (:func:`fit_custom_allreduce`, into ``custom_allreduce_by_generation``), its dense GEMM rates
    (:func:`fit_framework_gemm`, into ``gemm_by_generation``), its attention (:func:`fit_framework_attention`,
    into ``attention_by_generation``), its MLA (:func:`fit_framework_mla`, into ``mla_by_generation``) and its
    fused-MoE kernel per expert format (:func:`fit_framework_moe`, into ``moe_by_generation``), each where
    ``kernels_dir`` has the framework's tables for that GPU; with one report line per fit. Raises LLMSimError when
    it has none of them."""
    generation = load_hardware(GPUS[gpu]).generation
    load_engine(framework)  # the profile the all-reduce fit starts from: an unknown name fails here, in one line
    fields: dict = {}
    report: list[str] = []
    allreduce = custom_allreduce_kernel_table(kernels_dir)
    if ((allreduce["gpu"] == gpu) & (allreduce["framework"] == framework)).any():
        fitted, summary = fit_custom_allreduce(kernels_dir, framework, gpu)
        fields["custom_allreduce_by_generation"] = {generation: {
            "latency_us": fitted["custom_allreduce_latency_us"],
            "two_shot_latency_us": fitted["custom_allreduce_two_shot_latency_us"],
            "max_mib": fitted["custom_allreduce_max_mib"]}}
        report.append(summary)
    gemm = gemm_kernel_table(kernels_dir)
    if ((gemm["gpu"] == gpu) & (gemm["framework"] == framework)).any():
        fitted, summary = fit_framework_gemm(kernels_dir, framework, gpu)
        fields["gemm_by_generation"] = {generation: fitted}
        report.append(summary)
    for name, read, fit in (("attention_by_generation", attention_kernel_table, fit_framework_attention),
                            ("mla_by_generation", mla_kernel_table, fit_framework_mla),
                            ("moe_by_generation", _moe_tables_any_parallelism, fit_framework_moe)):
        table = read(kernels_dir)
        if ((table["gpu"] == gpu) & (table["framework"] == framework)).any():
            fitted, summary = fit(kernels_dir, framework, gpu)
            if fitted:
                fields[name] = {generation: fitted}
            report.append(summary)
    if not fields:
        raise LLMSimError(f"calibrate: no custom_allreduce, GEMM, attention, MLA or MoE tables of framework "
                          f"{framework!r} for GPU {gpu!r} under {kernels_dir}")
    return fields, report


def _pooled_attention_errors(kernels_dir: Path, hardware: dict[str, HardwareSpec], table: pd.DataFrame):
    """Attention errors with the hardware's parameters for every framework (no framework's own kernels)."""
    return attention_kernel_errors(kernels_dir, hardware, table, engines={})


def _pooled_moe_errors(kernels_dir: Path, hardware: dict[str, HardwareSpec], table: pd.DataFrame):
    """Fused-MoE errors with the hardware's parameters for every framework (no framework's own kernels)."""
    return moe_kernel_errors(kernels_dir, hardware, table, engines={})


def pooled_attention_score(table: pd.DataFrame, by: list[str]) -> Callable[[HardwareSpec], float]:
    """The score of one GPU's attention ``table`` at a profile's own attention parameters, each ``by`` group scored
    alike: what :func:`_score_by` gives for :func:`_pooled_attention_errors`, the same numbers, with the table split
    into its kernels' columns once — the attention fits evaluate it thousands of times, and grouping the frame
    anew each time took most of theirs."""
    def kernel_times(profile: HardwareSpec, kv: str, phase: str, *columns: np.ndarray) -> np.ndarray:
        return AttentionModel(profile, kv).kernel_times(phase, *columns)

    columns = ["batch", "seq_len", "heads", "kv_heads", "head_dim", "window"]
    return _prepared_score(table, by, ["kv_dtype", "phase"], columns, kernel_times)


def pooled_mla_score(table: pd.DataFrame, by: list[str]) -> Callable[[HardwareSpec], float]:
    """:func:`pooled_attention_score` for one GPU's MLA ``table`` (what :func:`_score_by` gives for
    :func:`simulator.fidelity.kernels.mla_kernel_errors` with the pooled fit)."""
    def kernel_times(profile: HardwareSpec, kv: str, phase: str, heads: float, *columns: np.ndarray) -> np.ndarray:
        return mla_kernel_times(AttentionModel(profile, kv), int(heads), phase, *columns)

    return _prepared_score(table, by, ["kv_dtype", "phase", "heads"], ["batch", "seq_len"], kernel_times)


def _prepared_score(table: pd.DataFrame, by: list[str], keys: list[str], columns: list[str],
                    kernel_times: Callable[..., np.ndarray]) -> Callable[[HardwareSpec], float]:
    """The summed mean |log error| of each ``by`` group of ``table`` at a profile, priced per ``keys`` group by
    ``kernel_times(profile, *key, *column arrays)``, with the groups' arrays prepared once."""
    measured = table["measured_s"].to_numpy(float)
    kernels = [(key, table.index.get_indexer(rows.index), [rows[column].to_numpy(float) for column in columns])
               for key, rows in table.groupby(keys)]
    groups = [table.index.get_indexer(rows.index) for _, rows in table.groupby(by, sort=True)]

    def score(profile: HardwareSpec) -> float:
        predicted = np.zeros(len(table))
        for key, at, arrays in kernels:
            predicted[at] = kernel_times(profile, *key, *arrays)
        errors = np.abs(np.log(predicted / measured))
        return sum(float(errors[at].mean()) for at in groups)

    return score


def _sample(table: pd.DataFrame, by: list[str], per_group: int) -> pd.DataFrame:
    """At most ``per_group`` rows of every ``by`` group (an empty table: itself, so that a folder without one kind
    of table fits the others)."""
    parts = [rows.sample(n=min(len(rows), per_group), random_state=0) for _, rows in table.groupby(by, sort=True)]
    return pd.concat(parts).reset_index(drop=True) if parts else table.reset_index(drop=True)


def _score_by(frame: pd.DataFrame, by: list[str]) -> float:
    return sum(score(rows) for _, rows in frame.groupby(by, sort=True))


def _summary(name: str, frame: pd.DataFrame, by: list[str]) -> str:
    parts = [f"{'/'.join(map(str, key))} {rows['error'].median():.1%}/{rows['error'].quantile(0.9):.1%}"
             for key, rows in frame.groupby(by, sort=True)]
    return f"{name} median/p90: " + ", ".join(parts)


def _fit_group(profile: HardwareSpec, name: str, table: pd.DataFrame, by: list[str], grid: dict[str, list[float]],
               errors: Callable[..., pd.DataFrame], kernels_dir: Path, gpu: str, report: list[str],
               score: Callable[[HardwareSpec], float] | None = None, **descent) -> HardwareSpec:
    """``profile`` with ``grid``'s parameters fitted (coordinate descent, ``descent`` its options) on ``table``'s
    kernels, each ``by`` group scored alike (by ``score`` where given: the same number, faster), and the fitted
    errors' summary appended to ``report``; unchanged when ``table`` is empty."""
    if not len(table):
        return profile

    def group_score(p: HardwareSpec) -> float:
        return _score_by(errors(kernels_dir, {gpu: p}, table), by)

    profile = coordinate_descent(profile, grid, score or group_score, **descent)
    report.append(_summary(name, errors(kernels_dir, {gpu: profile}, table), by))
    return profile


# quantised weight formats whose GEMMs run kernels of their own (:func:`fit_format_kernels`), not the 16-bit library's
# nor the W8A8 fp8 kernels the pooled GEMM fit prices: SmoothQuant's W8A8 int8 and weight-only int4
FORMAT_KERNEL_DTYPES = ("int8", "int4")
FORMAT_KERNEL_GRID: dict[str, list[float]] = {
    "k_latency_ns": _steps(0.0, 4.0, 0.1),
    "overhead_us": _steps(0.0, 20.0, 0.5),
}
FORMAT_TILES = (8, 16, 32, 64, 128)  # row tiles scanned: each descended from, the best kept
FORMAT_FRACTIONS = _steps(0.40, 0.95, 0.01)  # a W8A8 format's fraction of its tensor-core peak


def format_held_out(rows: pd.DataFrame) -> np.ndarray:
    """Which of one format's GEMM timings :func:`fit_format_kernels` holds out: those of every other weight shape
    (n, k) in sorted order, starting with the second (weights the fit has not seen)."""
    keys = list(rows[["n", "k"]].itertuples(index=False, name=None))
    fitted = set(sorted(set(keys))[::2])
    return np.array([key not in fitted for key in keys], dtype=bool)


def fit_format_kernels(profile: HardwareSpec, kernels_dir: Path, gpu: str,
                       table: pd.DataFrame | None = None) -> tuple[HardwareSpec, list[str]]:
    """``profile`` with the GEMM kernels of each format of :data:`FORMAT_KERNEL_DTYPES` that ``gpu``'s tables
    measure fitted (``gemm_kernel_by_dtype``: their main loop's latency along k and fixed work, their row tile
    scanned over :data:`FORMAT_TILES`; a W8A8 format's fraction of its peak too), by coordinate descent on every
    other weight shape (:func:`format_held_out`), every framework's table of the format scored alike, the
    generation's other GEMM parameters held; and one report line per format, fitted and held-out shapes apart."""
    table = gemm_kernel_table(kernels_dir) if table is None else table
    table = table[table["gpu"] == gpu]
    formats = table["dtype"].map(GEMM_DTYPES)
    report = []
    for fmt in FORMAT_KERNEL_DTYPES:
        rows = table[formats == fmt].reset_index(drop=True)
        if rows.empty:
            continue
        held_out = format_held_out(rows)
        fit_rows = rows[~held_out].reset_index(drop=True)
        grid = {f"gemm_kernel_by_dtype.{fmt}.{name}": values for name, values in FORMAT_KERNEL_GRID.items()}
        start = {}
        math_dtype = compute_dtype(fmt)
        if math_dtype == fmt and profile.has_peak(fmt):  # W8A8: its own tensor-core peak, at a fraction of it
            grid[f"flops_efficiency_by_dtype.{fmt}"] = FORMAT_FRACTIONS
            start["flops_efficiency_by_dtype"] = {
                **profile.flops_efficiency_by_dtype, fmt: profile.achievable_flops(fmt) / profile.peak_flops(fmt)}

        def evaluate(candidate: HardwareSpec, fit_rows: pd.DataFrame = fit_rows) -> float:
            return _score_by(gemm_kernel_errors(kernels_dir, {gpu: candidate}, fit_rows, engines={}), ["framework"])

        candidates = []
        for tile in FORMAT_TILES:
            kernel = GemmKernelFit(tile_m=tile, k_latency_ns=profile.gemm_k_latency_ns, overhead_us=0.0)
            begin = profile.model_copy(update={
                **start, "gemm_kernel_by_dtype": {**profile.gemm_kernel_by_dtype, fmt: kernel}})
            candidates.append(coordinate_descent(begin, grid, evaluate))
        profile = min(candidates, key=evaluate)
        errors = gemm_kernel_errors(kernels_dir, {gpu: profile}, rows, engines={})
        report.append(_summary(f"{fmt} GEMM kernels", errors.assign(
            shapes=np.where(held_out, "held out", "fitted")), ["framework", "shapes"]))
    return profile, report


def fit_kernels(base: HardwareSpec, kernels_dir: Path, gpu: str, per_group: int = 2000) -> tuple[HardwareSpec,
                                                                                                 list[str]]:
    """The profile with its GEMM, collective and attention parameters fitted on ``kernels_dir/gpu``, and one report
    line per group."""
    report = []
    profile = base
    tables = gemm_kernel_table(kernels_dir)
    tables = tables[tables["gpu"] == gpu]
    own_kernels = tables["dtype"].map(GEMM_DTYPES).isin(FORMAT_KERNEL_DTYPES)  # fitted apart, after the pooled fit
    gemm = _sample(tables[~own_kernels], ["framework", "dtype"], per_group)
    if len(gemm):
        def gemm_score(p: HardwareSpec) -> float:
            return _score_by(gemm_kernel_errors(kernels_dir, {gpu: p}, gemm, engines={}), ["framework", "dtype"])

        shapes = [coordinate_descent(profile.model_copy(update={"gemm_knee": knee, "gemm_tile_m": tile}), GEMM_GRID,
                                     gemm_score, rounds=1)
                  for knee in GEMM_SHAPES["gemm_knee"] for tile in GEMM_SHAPES["gemm_tile_m"]]
        profile = coordinate_descent(min(shapes, key=gemm_score), GEMM_GRID, gemm_score)
        report.append(_summary("GEMM", gemm_kernel_errors(kernels_dir, {gpu: profile}, gemm, engines={}),
                               ["framework", "dtype"]))
    profile, format_report = fit_format_kernels(profile, kernels_dir, gpu, tables[own_kernels])
    report.extend(format_report)
    nccl = nccl_kernel_table(kernels_dir)
    nccl = nccl[nccl["gpu"] == gpu].reset_index(drop=True)
    # NVLS where the generation has in-switch reduction (a fit to start from); Ampere's NVSwitch has none
    grid = {name: values for name, values in COLLECTIVE_GRID.items()
            if not name.startswith("all_reduce_nvls.") or profile.all_reduce_nvls is not None}
    profile = _fit_group(profile, "NCCL", nccl, ["op"], grid, nccl_kernel_errors, kernels_dir, gpu, report)
    attention = attention_kernel_table(kernels_dir)
    attention = _sample(attention[attention["gpu"] == gpu], ["framework", "phase"], per_group)
    by = ["framework", "phase"]
    grid = without_unidentifiable(ATTENTION_GRID, attention, profile)
    profile = _fit_group(profile, "attention", attention, by, grid, _pooled_attention_errors, kernels_dir, gpu,
                         report, pooled_attention_score(attention, by), **ATTENTION_DESCENT)
    moe = moe_kernel_table(kernels_dir)
    moe = _sample(moe[moe["gpu"] == gpu], ["framework", "dtype"], per_group)
    profile = _fit_group(profile, "MoE", moe, ["framework", "dtype"], MOE_GRID, _pooled_moe_errors, kernels_dir, gpu,
                         report)
    deepep = fit_deepep(kernels_dir, gpu)
    if deepep:
        profile = profile.model_copy(update={"deepep": {**(profile.deepep or {}), **{
            kernel: ExchangeFit(**fit) for kernel, fit in deepep.items()}}})
        report.append(_summary("DeepEP", deepep_kernel_errors(kernels_dir, {gpu: profile}), ["kernel"]))
    fitted = [*GEMM_SHAPES, *(n.split(".")[0] for n in (*GEMM_GRID, *COLLECTIVE_GRID, *ATTENTION_GRID, *MOE_GRID)),
              "gemm_kernel_by_dtype"]
    values = {name: getattr(profile, name) for name in dict.fromkeys(fitted)}
    if deepep:
        values["deepep"] = deepep
    report.insert(0, "fitted: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    return profile, report

