"""``llmsim calibrate --kernels DIR --gpu NAME``: fit a GPU generation's parameters to the frameworks' kernel tables.

The tables of vLLM, SGLang and TensorRT-LLM are pooled — the fitted parameters describe the GPU, not one
framework's kernels — with an equal sample of every (framework, dtype) or (framework, phase) table so that no table
outweighs the others. Three groups are fitted one after another, each by the coordinate descent of
:mod:`simulator.fidelity.calibrate` (minimising the mean |log(predicted / measured)|, deterministic):

- GEMMs (``fit.gemm``, and what every kernel shares): ``flops_efficiency`` (16-bit), the fp8 and fp8_block
  fractions of the fp8 peak, ``fit.bandwidth_efficiency``, ``fit.kernel_overhead_us``, ``quantize_overhead_us``, the
  main loop's ``k_latency_ns`` and the longest k a 16-bit GEMM's block walks, ``split_k`` (knee and row tile: the
  same grid as the operator fit); then, apart, the kernels of formats whose GEMMs are their own (W8A8 int8 and
  weight-only int4: ``kernel_by_dtype``, :func:`fit_format_kernels`), which the pooled fit leaves out;
- NCCL collectives on the node (``fit.comm``), each as two protocols (bandwidth and low-latency,
  :mod:`simulator.cost.collectives`): all-reduce (``link_efficiency``, ``latency_us``, ``step_latency_us``,
  ``all_reduce_low_latency``, and ``all_reduce_nvls`` — NVLink SHARP for 16-bit data — where the generation's switch
  reduces in the network: Hopper's, not Ampere's) and each of all-gather, reduce-scatter and all-to-all
  (``collectives``);
- attention (``fit.prefill_attention``: ``efficiency``, ``io_efficiency``, ``ns_per_row``, ``ns_per_tile``,
  ``blocks_per_sm``, ``exp_exposed`` where the tables hold several head widths,
  :func:`~simulator.fidelity.attention_fit.without_unidentifiable`, ``overhead_us``; ``fit.decode_attention``:
  ``efficiency``, ``ns_per_head``; :mod:`simulator.fidelity.attention_fit`, whose grids name them by their flat names,
  the engine profiles' fields);
- fused-MoE layers (``fit.moe``; balanced routing, no expert parallelism): ``tile_m``, ``tile_n``, ``knee``,
  ``gemm_efficiency``, ``bandwidth_efficiency``, ``expert_overhead_us`` (``kernels`` is a count, see
  :mod:`simulator.cost.moe`);
- DeepEP's dispatch and combine kernels (``fit.comm.deepep``: latency and link efficiency of each, by least squares,
  :func:`simulator.fidelity.kernels.fit_deepep`), where the GPU has DeepEP tables.

The result is what :mod:`simulator.catalog.generations` holds for the GPU's generation (:func:`generation_file`).
Five fits per framework complete it, each into that framework's engine profile (``llmsim calibrate --kernels DIR
--gpu G --framework F``, :func:`fit_framework_kernels`): its own all-reduce kernels (:func:`fit_custom_allreduce`),
its dense GEMMs' rates per format (:func:`fit_framework_gemm`), its own attention and MLA kernels
(:mod:`simulator.fidelity.attention_fit`: :func:`~simulator.fidelity.attention_fit.fit_framework_attention`,
:func:`~simulator.fidelity.attention_fit.fit_framework_mla`), and its fused-MoE kernel per expert format
(:func:`fit_framework_moe`, its linear costs solved before each descent as the attention fits' are,
:func:`~simulator.fidelity.attention_fit.solve_linear_costs`).

The frameworks' fused-MoE kernels differ among themselves by up to 3× for the same format (Triton, CUTLASS and
Marlin kernels, tuned or not: SGLang's MXFP4 layer takes 2–3× vLLM's gpt-oss Triton kernel; vLLM's FlashInfer
CUTLASS kernel for per-tensor fp8 streams its experts at a quarter of the rate of its Triton one for block fp8). A
per-framework scale does not help (it moves each framework's median by under 4 points): the spread is per
(framework, format), so each framework's kernel is fitted per format — its FLOP rate, its weight streaming rate and
its cost per touched expert, the tiles and knee staying the GPU's — on half of the model shapes of its table.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulator.catalog import HardwareSpec, load_hardware
from simulator.catalog.engines import load_engine
from simulator.catalog.hardware import OWN_SYSTEM_FIT, with_fit
from simulator.catalog.hardware_fit import GROUPS, ExchangeFit, GemmKernelFit, fit_path
from simulator.dtypes import compute_dtype
from simulator.errors import LLMSimError
from simulator.fidelity.attention_fit import (
    ATTENTION_DESCENT,
    ATTENTION_GRID,
    _pooled_attention_errors,
    _sample,
    _score_by,
    _steps,
    _summary,
    fit_framework_attention,
    fit_framework_mla,
    pooled_attention_score,
    solve_linear_costs,
    without_unidentifiable,
)
from simulator.fidelity.calibrate import DescentOptions, coordinate_descent, get_parameter, score
from simulator.fidelity.kernels import (
    GEMM_DTYPES,
    GPUS,
    attention_kernel_table,
    custom_allreduce_kernel_errors,
    custom_allreduce_kernel_table,
    deepep_kernel_errors,
    fit_deepep,
    gemm_kernel_errors,
    gemm_kernel_table,
    mla_kernel_table,
    moe_kernel_errors,
    moe_kernel_table,
    moe_routing_kernel_table,
    nccl_kernel_errors,
    nccl_kernel_table,
)

# the pooled fit's grids name the parameters by their place within a profile's fit (calibrate.set_parameter); the
# frameworks' fits (attention, MoE), whose values go in the engine profiles, by those profiles' (flat) field names
GEMM_GRID: dict[str, list[float]] = {
    "gemm.flops_efficiency": _steps(0.60, 0.95, 0.01),
    "gemm.flops_efficiency_by_dtype.fp8": _steps(0.40, 0.90, 0.01),
    "gemm.flops_efficiency_by_dtype.fp8_block": _steps(0.40, 0.90, 0.01),
    "gemm.flops_efficiency_by_dtype.fp4": _steps(0.30, 0.90, 0.01),  # nvfp4's W4A4 (Blackwell's FP4 tensor cores)
    "bandwidth_efficiency": _steps(0.70, 0.98, 0.01),
    "kernel_overhead_us": _steps(1.0, 8.0, 0.2),
    "gemm.quantize_overhead_us": _steps(0.0, 8.0, 0.5),
    "gemm.k_latency_ns": _steps(0.0, 4.0, 0.1),
    "gemm.split_k": [0, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 32768],
}
GEMM_SHAPES: dict[str, list[float]] = {"gemm.knee": [1.5, 2.0, 2.5, 3.0, 4.0], "gemm.tile_m": [32, 64, 128]}
BY_DTYPE = "gemm.flops_efficiency_by_dtype."  # a grid name's prefix: the fraction of its peak one format reaches
_LOW_LATENCY_GRID = (("efficiency", _steps(0.02, 0.60, 0.01)), ("latency_us", _steps(0.0, 20.0, 0.25)),
                     ("step_latency_us", _steps(0.0, 4.0, 0.05)))
COLLECTIVE_GRID: dict[str, list[float]] = {
    "comm.link_efficiency": _steps(0.40, 0.95, 0.01),
    "comm.latency_us": _steps(0.0, 60.0, 0.25),
    "comm.step_latency_us": _steps(0.0, 6.0, 0.05),
    **{f"comm.all_reduce_low_latency.{field}": values for field, values in _LOW_LATENCY_GRID},
    "comm.all_reduce_nvls.efficiency": _steps(0.30, 0.95, 0.01),
    "comm.all_reduce_nvls.latency_us": _steps(0.0, 120.0, 0.25),
    **{f"comm.collectives.{op}.{field}": values for op in ("all_gather", "reduce_scatter", "all_to_all")
       for field, values in (("efficiency", _steps(0.30, 0.95, 0.01)), ("latency_us", _steps(0.0, 60.0, 0.25)),
                             ("step_latency_us", _steps(0.0, 6.0, 0.05)))},
    **{f"comm.collectives.{op}.low_latency.{field}": values for op in ("all_gather", "reduce_scatter", "all_to_all")
       for field, values in _LOW_LATENCY_GRID},
}


MOE_GRID: dict[str, list[float]] = {
    "moe.tile_m": [8, 16, 32, 64, 128],
    "moe.tile_n": [1, 32, 64, 128],
    "moe.knee": [1.5, 2.0, 3.0, 4.0, 6.0, 8.0],
    "moe.gemm_efficiency": _steps(0.20, 1.50, 0.02),
    "moe.bandwidth_efficiency": _steps(0.40, 1.20, 0.02),
    "moe.expert_overhead_us": _steps(0.0, 3.0, 0.1),
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


# a fused-MoE layer's costs that add to its time (simulator.cost.moe): per touched expert, its passes over the tokens
# and over their copies, and what expert parallelism adds — for given rates, linear in these
LINEAR_MOE = ("moe_expert_overhead_us", "moe_token_pass_bytes", "moe_assignment_pass_bytes", "moe_ep_overhead_us")


FRAMEWORK_GEMM_GRID: dict[str, list[float]] = {name: GEMM_GRID[name] for name in (
    "gemm.flops_efficiency", f"{BY_DTYPE}fp8", f"{BY_DTYPE}fp8_block", f"{BY_DTYPE}fp4")}


def measured_formats(grid: dict[str, list[float]], dtypes) -> dict[str, list[float]]:
    """``grid`` without the per-format GEMM fractions of formats no table of ``dtypes`` (the tables' gemm_dtype
    names) computes in: a format measured nowhere keeps the nearest fitted one's fraction
    (:data:`simulator.catalog.hardware.UNFITTED_FORMAT_FRACTIONS`)."""
    measured = {compute_dtype(GEMM_DTYPES[dtype]) for dtype in dtypes}
    return {name: values for name, values in grid.items()
            if not name.startswith(BY_DTYPE) or name.removeprefix(BY_DTYPE) in measured}


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
    grid = measured_formats(FRAMEWORK_GEMM_GRID, table["dtype"].unique())

    def pooled_score(p: HardwareSpec) -> float:
        return _score_by(gemm_kernel_errors(kernels_dir, {gpu: p}, sample, engines={}), ["dtype"])

    profile = coordinate_descent(load_hardware(GPUS[gpu]), grid, pooled_score)
    fitted = {"flops_efficiency": profile.fit.gemm.flops_efficiency, "flops_efficiency_by_dtype": {
        name.removeprefix(BY_DTYPE): get_parameter(profile, name) for name in grid if name.startswith(BY_DTYPE)}}
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
MOE_DESCENT: DescentOptions = {"rounds": 20, "diagonal": True}
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
        fitted[dtype] = {name: get_parameter(profile, name) for name in grid}
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


def _pooled_moe_errors(kernels_dir: Path, hardware: dict[str, HardwareSpec], table: pd.DataFrame):
    """Fused-MoE errors with the hardware's parameters for every framework (no framework's own kernels)."""
    return moe_kernel_errors(kernels_dir, hardware, table, engines={})


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
        grid = {f"gemm.kernel_by_dtype.{fmt}.{name}": values for name, values in FORMAT_KERNEL_GRID.items()}
        start: dict[str, Any] = {}  # fitted parameters (with_fit)
        math_dtype = compute_dtype(fmt)
        if math_dtype == fmt and profile.has_peak(fmt):  # W8A8: its own tensor-core peak, at a fraction of it
            grid[f"{BY_DTYPE}{fmt}"] = FORMAT_FRACTIONS
            fractions = profile.fit.gemm.flops_efficiency_by_dtype
            start["gemm.flops_efficiency_by_dtype"] = {
                **fractions, fmt: profile.achievable_flops(fmt) / profile.peak_flops(fmt)}

        def evaluate(candidate: HardwareSpec, fit_rows: pd.DataFrame = fit_rows) -> float:
            return _score_by(gemm_kernel_errors(kernels_dir, {gpu: candidate}, fit_rows, engines={}), ["framework"])

        candidates = []
        for tile in FORMAT_TILES:
            kernel = GemmKernelFit(tile_m=tile, k_latency_ns=profile.fit.gemm.k_latency_ns, overhead_us=0.0)
            begin = with_fit(profile, {
                **start, "gemm.kernel_by_dtype": {**profile.fit.gemm.kernel_by_dtype, fmt: kernel}})
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
    gemm_grid = measured_formats(GEMM_GRID, gemm["dtype"].unique())
    if len(gemm):
        def gemm_score(p: HardwareSpec) -> float:
            return _score_by(gemm_kernel_errors(kernels_dir, {gpu: p}, gemm, engines={}), ["framework", "dtype"])

        shapes = [coordinate_descent(with_fit(profile, {"gemm.knee": knee, "gemm.tile_m": tile}), gemm_grid,
                                     gemm_score, rounds=1)
                  for knee in GEMM_SHAPES["gemm.knee"] for tile in GEMM_SHAPES["gemm.tile_m"]]
        profile = coordinate_descent(min(shapes, key=gemm_score), gemm_grid, gemm_score)
        report.append(_summary("GEMM", gemm_kernel_errors(kernels_dir, {gpu: profile}, gemm, engines={}),
                               ["framework", "dtype"]))
    profile, format_report = fit_format_kernels(profile, kernels_dir, gpu, tables[own_kernels])
    report.extend(format_report)
    nccl = nccl_kernel_table(kernels_dir)
    nccl = nccl[nccl["gpu"] == gpu].reset_index(drop=True)
    # NVLS where the generation has in-switch reduction (a fit to start from); Ampere's NVSwitch has none
    grid = {name: values for name, values in COLLECTIVE_GRID.items()
            if not name.startswith("comm.all_reduce_nvls.") or profile.fit.comm.all_reduce_nvls is not None}
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
        profile = with_fit(profile, {"comm.deepep": {**(profile.fit.comm.deepep or {}), **{
            kernel: ExchangeFit(**fit) for kernel, fit in deepep.items()}}})
        report.append(_summary("DeepEP", deepep_kernel_errors(kernels_dir, {gpu: profile}), ["kernel"]))
    fitted = [*GEMM_SHAPES, *(fitted_entry(n) for n in (*GEMM_GRID, *COLLECTIVE_GRID, *ATTENTION_GRID, *MOE_GRID)),
              "gemm.kernel_by_dtype"]
    values = {name: get_parameter(profile, name) for name in dict.fromkeys(fitted)}
    if deepep:
        values["comm.deepep"] = deepep
    report.insert(0, "fitted: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    return profile, report


def fitted_entry(name: str) -> str:
    """A fitted parameter's entry in a profile's fit, as the report of :func:`fit_kernels` names it: its dotted place
    (:func:`simulator.catalog.hardware_fit.fit_path`), a table's or sub-model's entry as the whole table
    (``comm.collectives.all_gather.latency_us``: ``comm.collectives``)."""
    path = fit_path(name)
    return ".".join(path[:2] if path[0] in GROUPS else path[:1])


def generation_file(profile: HardwareSpec) -> dict[str, Any]:
    """A generation file (``hardware_profiles/generations/NAME.yaml``) from a GPU's profile calibrated by
    :func:`fit_kernels`: its balance of exponentials to 16-bit tensor FLOPs (``sfu_exp_per_bf16_flop``: its spec
    sheet's ``sfu_exp_tera_per_s`` / bf16 peak), which a GPU of the generation whose spec sheet is silent about its
    exponentials keeps, and its ``fit`` (those parameters its tables do not identify as the profile it started from
    holds them; not its send/recv, :data:`simulator.catalog.hardware.OWN_SYSTEM_FIT`, the system's own), with the
    SMs its attention timings ran on (``fit.sm_count``: its ``sm_count``)."""
    fit = with_fit(profile, {"sm_count": profile.sm_count}).fit
    exclude = {"comm": {name.split(".")[1] for name in OWN_SYSTEM_FIT}}
    return {"name": profile.generation,
            "sfu_exp_per_bf16_flop": profile.sfu_exp_tera_per_s / profile.peak_tflops.bf16,
            "fit": fit.model_dump(mode="json", exclude_none=True, exclude=exclude)}
