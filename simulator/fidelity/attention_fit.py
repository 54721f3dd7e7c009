"""The attention kernels' fits on the frameworks' kernel tables, for :mod:`simulator.fidelity.kernel_fit`.

- the GPU generation's pooled attention parameters (:data:`ATTENTION_GRID`, fitted by
  :func:`simulator.fidelity.kernel_fit.fit_kernels` with :func:`pooled_attention_score`; the share of a prefill's
  exponentials only where the tables can tell it, :func:`without_unidentifiable`);
- each framework's own attention and MLA kernels (:func:`fit_framework_attention`, :func:`fit_framework_mla`): the
  pooled fit's attention parameters on its tables alone, its decode kernel's fixed cost, KV streaming rate and a
  block's streaming rate apart, its decode waves and KV tile and its prefill blocks' packing scanned (:data:`SCANS`),
  its prefill's additive costs solved by least squares before each descent (:func:`solve_linear_costs`, which the
  fused-MoE fits use too), the fallback kernels its profile states it dispatches to, and its kernels over fp8 caches
  apart from those over 16-bit ones (:func:`fit_kernels_over_caches`);
- what every kernel fit shares: a grid's steps, the sample of each table, the score per group and the report line.

The grids name the attention parameters by the engine profiles' fields
(:class:`simulator.catalog.engines.AttentionFields`: the flat names of a hardware profile's ``fit.prefill_attention``
and ``fit.decode_attention``, :data:`simulator.catalog.hardware_fit.FLAT_NAMES`), where a framework's fit goes; the
pooled fit sets them in a hardware profile by the same names (:func:`simulator.catalog.hardware.with_fit`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.catalog import HardwareSpec, load_hardware
from simulator.catalog.engines import load_engine
from simulator.catalog.hardware import with_fit
from simulator.cost.attention import FALLBACK_WIDTH, AttentionModel, decode_context, spread_over_sms
from simulator.fidelity.calibrate import DescentOptions, coordinate_descent, get_parameter, score, set_parameter
from simulator.fidelity.kernels import (
    GPUS,
    attention_kernel_errors,
    attention_kernel_table,
    mla_kernel_errors,
    mla_kernel_table,
    mla_kernel_times,
)


def _steps(low: float, high: float, step: float) -> list[float]:
    return [round(float(x), 4) for x in np.arange(low, high + step / 2, step)]


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
ATTENTION_DESCENT: DescentOptions = {"rounds": 20, "diagonal": True}
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
    "decode_attention_blocks_per_sm": [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0],
    "decode_attention_split_us": _steps(0.0, 10.0, 0.25),
    "decode_attention_split_tokens": [16, 32, 64, 128, 256, 512, 1024, 2048],
    "decode_attention_split_blocks_per_sm": [0.25, 0.5, 0.75, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0],
    "decode_attention_kv_tile": [0, 16, 32, 64, 128],
    "prefill_attention_packs_gqa": [False, True]}
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
    dispatch = {name: get_parameter(stated, name) for name in DISPATCH_FIELDS if get_parameter(stated, name)}
    costs = {"decode_attention_ns_per_query_token": fallback_rate(table, stated),
             "prefill_fallback_efficiency": fallback_efficiency(table, stated)}
    costs.update({name: get_parameter(stated, name) for name in MHA_KERNEL_COSTS})
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
    max_group = hardware.fit.decode_attention.max_group
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
    peak = hardware.achievable_flops("bf16") / hardware.fit.gemm.flops_efficiency
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
    profile = with_fit(hardware, {"decode_attention_bandwidth_efficiency": hardware.fit.bandwidth_efficiency,
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
        if split in parameters and not get_parameter(fitted, split):
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
    fitted: dict = {name: get_parameter(profile, name) for name in parameters}
    parts = [errors({gpu: profile}, sixteen)]
    if len(eight):
        phases = [phase for phase in PHASE_PARAMETERS if spans_the_shapes(eight, sixteen, phase)]
        grid = {name: OVER_8_BIT_RANGES.get(name, values) for name, values in parameters.items()
                if any(name in PHASE_PARAMETERS[phase] for phase in phases) and name not in KEPT_OVER_8_BIT}
        over_8bit = descend(profile, eight[eight["phase"].isin(phases)], grid) if grid else profile
        fitted["kv_8bit"] = {name: get_parameter(over_8bit, name) for name in parameters}
        parts.append(errors({gpu: over_8bit}, eight))
    return fitted, pd.concat(parts)


# a prefill kernel's costs that add to its time (simulator.cost.attention): per pair and head its FLOPs at 1 / the
# peak's fraction and its exposed exponential (the longest block's bound a smooth maximum of the same per-pair cost
# over more pairs, so these scale it too), its K/V bytes at 1 / the HBM fraction, its rows, its blocks and its fixed
# cost — for a given packing and blocks per SM, linear in these (the fractions in their reciprocals)
LINEAR_PREFILL = ("attention_efficiency", "prefill_attention_exp_exposed", "attention_io_efficiency",
                  "prefill_attention_ns_per_row", "prefill_attention_ns_per_tile", "attention_overhead_us")
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
    base = price(with_fit(profile, off))
    features = np.stack([price(with_fit(profile, {**off, name: 1.0})) - base for name in names], axis=1)
    solved = dict(zip(names, nonnegative_least_squares(features / measured[:, None], 1 - base / measured),
                      strict=True))
    for name in RECIPROCAL_COSTS:
        if name in solved:
            solved[name] = 1 / solved[name] if solved[name] > 0 else np.inf
    return with_fit(profile, {name: min(grid[name], key=lambda value: abs(value - solved[name])) for name in names})


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


def _pooled_attention_errors(kernels_dir: Path, hardware: dict[str, HardwareSpec], table: pd.DataFrame):
    """Attention errors with the hardware's parameters for every framework (no framework's own kernels)."""
    return attention_kernel_errors(kernels_dir, hardware, table, engines={})


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
