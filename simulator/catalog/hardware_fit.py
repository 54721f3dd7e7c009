"""A GPU's fitted parameters (:attr:`simulator.catalog.hardware.HardwareSpec.fit`), in groups with physical meaning.

Beside its spec sheet a hardware profile holds what the kernel tables measure of how close each kind of kernel comes
to it, one group per kind (:class:`HardwareFit`): ``gemm`` (dense GEMMs, :mod:`simulator.cost.gemm`),
``prefill_attention`` and ``decode_attention`` (:mod:`simulator.cost.attention`), ``moe`` (fused-MoE layers,
:mod:`simulator.cost.moe`) and ``comm`` (NCCL collectives, send/recv and DeepEP,
:mod:`simulator.cost.collectives`, :mod:`simulator.cost.expert_exchange`); and what every kernel shares: the
fraction of HBM bandwidth streaming reaches, the fixed cost of a kernel, the host's speed and the SMs of the GPU the
fit was measured on. Those a profile leaves out come from its ``generation`` (:mod:`simulator.catalog.generations`),
field by field (:func:`merged_fit`).

Before the groups these were flat fields of the profile (``gemm_tile_m``, ``attention_efficiency``, ...):
:data:`FLAT_NAMES` maps each onto its place. A profile or generation file in the flat spelling still reads
(:func:`grouped`, with a one-line ``FutureWarning``), and the engine profiles' per-framework kernel fields
(:class:`simulator.catalog.engines.AttentionFields`, ``GemmKernels``, ``MoEKernels``) keep those names: they replace
these parameters through :func:`simulator.catalog.hardware.with_fit`, which takes a flat name or a dotted place
within ``fit`` (``gemm.tile_m``, ``comm.collectives.all_gather.latency_us``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field


class StrictCopy(BaseModel):
    """A frozen model whose ``model_copy(update=...)`` refuses a name that is not one of its fields (pydantic's would
    store it unseen: an old flat name of a fitted parameter would change nothing)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        unknown = sorted(set(update or ()) - set(type(self).model_fields))
        if unknown:
            raise ValueError(f"{type(self).__name__} has no field {unknown[0]!r} (a fitted parameter: "
                             "simulator.catalog.hardware.with_fit)")
        return super().model_copy(update=update, deep=deep)


class ProtocolFit(StrictCopy):
    """One NCCL protocol of a collective on NVSwitch: ``latency_us`` + ``step_latency_us`` · (n − 1) + bus bytes /
    (link GB/s × ``efficiency``), bus bytes (n − 1)/n of the buffer (see :mod:`simulator.cost.collectives`)."""

    latency_us: float = Field(ge=0)
    step_latency_us: float = Field(ge=0)
    efficiency: float = Field(gt=0, le=1)


class CollectiveFit(ProtocolFit):
    """One NCCL collective: its bandwidth protocol (Simple: the fields above) and, where fitted, its low-latency
    protocol (LL / LL128: less fixed cost, a fraction of the bandwidth); NCCL runs whichever is faster."""

    low_latency: ProtocolFit | None = None


class ExchangeFit(StrictCopy):
    """One DeepEP kernel: ``latency_us`` + the bytes it moves off the GPU / (link GB/s × ``efficiency``) (see
    :mod:`simulator.cost.expert_exchange`)."""

    latency_us: float = Field(ge=0)
    efficiency: float = Field(gt=0, le=1)


DeepEPKernel = Literal["ll_dispatch", "ll_combine", "normal_dispatch", "normal_combine"]


class GemmKernelFit(StrictCopy):
    """The GEMM kernels of one quantised weight format where they are not the 16-bit library's (a W8A8 int8 kernel
    with its per-token scales, a weight-only kernel that dequantises in its main loop): the rows one tile computes,
    its main loop's serial latency per element of k, and the fixed GPU work of each such GEMM beyond the kernel
    floor (its prologue, scales, a reduction of split partials) — :mod:`simulator.cost.gemm`."""

    tile_m: int | None = Field(default=None, ge=1, description="rows computed per tile (None: gemm.tile_m)")
    k_latency_ns: float | None = Field(
        default=None, ge=0, description="serial latency of one output tile's main loop per element of k, ns (None: "
        "gemm.k_latency_ns); these kernels do not split k")
    overhead_us: float = Field(default=0.0, ge=0, description="fixed GPU work per GEMM beyond the kernel floor")


QuantisedFormat = Literal["fp8", "fp8_block", "int8", "int4", "mxfp4", "nvfp4"]


class GemmFit(StrictCopy):
    """Dense GEMMs (:mod:`simulator.cost.gemm`): the fraction of the tensor-core peak large ones reach per numeric
    format, the smooth maximum of their compute and memory times (the attention kernels take its knee too), the row
    tile, the main loop's latency along k (the MoE layers' too) and the kernels of quantised formats that are their
    own."""

    flops_efficiency: float = Field(gt=0, le=1, description="large 16-bit GEMMs: fraction of peak")
    flops_efficiency_by_dtype: dict[Literal["fp8", "fp8_block", "int8", "fp4"], float] = Field(
        description="large GEMMs in that format: fraction of its peak (else flops_efficiency)")
    knee: float = Field(ge=1, description="p of the smooth max (t_c^p + t_m^p)^(1/p)")
    tile_m: int = Field(ge=1, description="rows are computed in tiles of this many")
    k_latency_ns: float = Field(
        default=0.0, ge=0, description="serial latency of one output tile's main loop per element of k, ns (small "
        "GEMMs cannot hide it)")
    split_k: int = Field(
        default=0, ge=0, description="GEMMs of 16-bit weights: the longest stretch of k one output tile's main loop "
        "walks (the 16-bit library splits a longer k over more thread blocks when the output has too few tiles; the "
        "kernels for quantised weights do not); 0: no split")
    kernel_by_dtype: dict[QuantisedFormat, GemmKernelFit] = Field(
        default_factory=dict, description="a quantised weight format's GEMM kernels where they are their own: row "
        "tile, main-loop latency, fixed work (else the 16-bit GEMMs' tile and latency)")
    quantize_overhead_us: float = Field(ge=0, description="W8A8 GEMMs: fixed cost of quantising the activations")


class PrefillAttentionFit(StrictCopy):
    """The prefill attention kernel (:mod:`simulator.cost.attention`): its FLOP and HBM rates, its whole-GPU costs
    per row and per thread block, how many blocks an SM runs, the exponentials it does not hide, the fallback kernel
    of wide heads, and the fixed cost of an attention kernel."""

    efficiency: float = Field(gt=0, le=1, description="fraction of the 16-bit peak")
    io_efficiency: float = Field(gt=0, le=1, description="fraction of HBM GB/s")
    ns_per_row: float = Field(
        default=0.0, ge=0, description="per (query token, head) row (Q in, output out, softmax normalisation), "
        "whole-GPU ns")
    ns_per_tile: float = Field(
        default=0.0, ge=0, description="per (query tile, head) thread block (its prologue and epilogue), whole-GPU "
        "ns")
    blocks_per_sm: float = Field(
        default=0.0, ge=0, description="thread blocks (one per query tile of a chunk and head, or KV head where "
        "packed) each SM runs at once, each at 1 / (sm_count times this) of the kernel's FLOP rate, so a kernel takes "
        "at least its longest block (the last query tile of the longest chunk) at that rate; 0: no such bound")
    packs_gqa: bool = Field(
        default=False, description="a thread block's query tile holds the rows of all query heads of one KV head "
        "(grouped-query attention packed), not of one head")
    exp_exposed: float = Field(
        default=0.0, ge=0, description="the share of its softmax's exponentials' time (one per query-key pair and "
        "head at sfu_exp_tera_per_s) the kernel does not hide behind its tensor-core work (the softmax's other "
        "per-pair work, on the FP32 units, rides along in it)")
    fallback_head_dim: int = Field(
        default=0, ge=0, description="the head width from which its kernel is a fallback that computes every causal "
        "query-key pair at fallback_efficiency (0: none)")
    fallback_window_head_dim: int = Field(
        default=0, ge=0, description="the head width from which a windowed (or chunked local) prefill runs that "
        "fallback, its window unused (0: none)")
    fallback_efficiency: float = Field(
        default=0.0, ge=0, le=1, description="the fallback kernel: fraction of the 16-bit peak")
    overhead_us: float = Field(ge=0, description="fixed cost of an attention kernel launched eagerly (decode's too, "
                               "unless decode_attention.overhead_us)")


class DecodeAttentionFit(StrictCopy):
    """The decode attention kernel (:mod:`simulator.cost.attention`): its FLOP and KV streaming rates, its whole-GPU
    costs per block and per query head, its waves and split-KV, its loop's KV tile, and the kernels it falls back to
    for large groups or multi-head attention."""

    efficiency: float = Field(gt=0, le=1, description="fraction of 16-bit peak")
    ns_per_head: float = Field(ge=0, description="per (sequence, KV head)")
    ns_per_query_head: float = Field(
        default=0.0, ge=0, description="per (sequence, query head) — each query head's softmax and output within its "
        "KV head's block (0: a block costs the same whatever its group)")
    block_gb_per_s: float = Field(
        default=0.0, ge=0, description="the HBM rate one (sequence, KV head) block of its kernel streams the cache at "
        "(with its split-KV partitions), so a step of few blocks does not reach the GPU's bandwidth; 0: no limit")
    max_group: int = Field(
        default=0, ge=0, description="the most query heads per KV head its kernel serves from one read of the KV "
        "head; a larger group runs a fallback kernel (ns_per_query_token); 0: any")
    query_tile: int = Field(
        default=0, ge=0, description="the rows of the matrix-multiply tiles its kernel computes a KV head's query "
        "heads in (a block's first tile is in ns_per_head, every row of its further tiles pays ns_per_query_head); 0: "
        "every query head pays it")
    mha_ns_per_head: float | None = Field(
        default=None, ge=0, description="per (sequence, query head) of the kernel that runs one query head per block "
        "(multi-head attention, and groups above max_group), instead of the grouped kernel's block costs; None: that "
        "kernel is the grouped one")
    ns_per_query_token: float = Field(
        default=0.0, ge=0, description="the fallback kernel (groups above max_group): per (query head, cached token, "
        "128 elements of head width), whole-GPU ns")
    bandwidth_efficiency: float | None = Field(
        default=None, gt=0, le=1, description="fraction of HBM GB/s it streams the KV cache at; None: "
        "fit.bandwidth_efficiency")
    blocks_per_sm: float = Field(
        default=0.0, ge=0, description="thread blocks (one per sequence and KV head, or query head where its "
        "multi-head kernel runs) that run at once per SM; a step of fewer than sm_count times as many still pays one "
        "wave's block costs; 0: no waves (and no splits)")
    split_us: float = Field(
        default=0.0, ge=0, description="what a step that splits (fewer blocks than split_blocks_per_sm allows) pays to "
        "combine the split-KV partials of contexts of split_tokens or more")
    split_tokens: int = Field(default=0, ge=0, description="the shortest context its kernel splits")
    split_blocks_per_sm: float | None = Field(
        default=None, ge=0, description="a step of fewer blocks than sm_count times this splits its contexts "
        "(FlashAttention's heuristic: fewer than 0.8 of the SMs); None: blocks_per_sm, the wave")
    kv_tile: int = Field(
        default=0, ge=0, description="the cached tokens a block's loop reads at once; a context is read in whole "
        "tiles (0: token by token)")
    overhead_us: float | None = Field(
        default=None, ge=0, description="fixed cost of a decode attention kernel launched eagerly (its split-KV "
        "partials and their combine); None: prefill_attention.overhead_us")


class MoEFit(StrictCopy):
    """Fused-MoE layers (:mod:`simulator.cost.moe`): their grouped expert GEMMs' tiles, knee and rates relative to
    the dense GEMMs', their fixed costs per touched expert and per layer, and their passes over the tokens."""

    tile_m: int = Field(ge=1, description="grouped expert GEMMs compute each expert's rows in tiles of this many")
    tile_n: int = Field(ge=1, description="grouped expert GEMMs compute an expert's width in tiles of this many")
    knee: float = Field(ge=1, description="p of the smooth max of a fused-MoE layer's compute and memory times")
    gemm_efficiency: float = Field(gt=0, le=1.5, description="grouped expert GEMMs: their FLOP rate relative to a "
                                   "dense GEMM of the same format")
    bandwidth_efficiency: float = Field(gt=0, le=1.2, description="grouped expert GEMMs: their weight streaming "
                                        "relative to a dense GEMM's")
    expert_overhead_us: float = Field(ge=0, description="grouped expert GEMMs: a fixed cost per expert the batch "
                                      "touches (its tiles' prologue and epilogue, scale loads, scheduling)")
    kernels: int = Field(ge=0, description="kernels one fused-MoE layer launches (routing, sorting, GEMMs, ...)")
    token_pass_bytes: float = Field(
        default=0.0, ge=0, description="its passes over every token it is handed, whatever its experts: bytes per "
        "(token, hidden element) streamed at its bandwidth (its permutation and combine)")
    assignment_pass_bytes: float = Field(
        default=0.0, ge=0, description="its passes over each token copy its experts receive: bytes per (assignment, "
        "hidden element) streamed at its bandwidth (the copies permuted to their experts and combined back)")
    ep_overhead_us: float = Field(
        default=0.0, ge=0, description="what it adds under expert parallelism (its local-expert selection kernels)")


class CommFit(StrictCopy):
    """Communication between GPUs (:mod:`simulator.cost.collectives`): NCCL's all-reduce (its bandwidth protocol in
    the first three fields, its low-latency and in-switch ones apart), its other collectives, send/recv, and
    DeepEP's kernels (:mod:`simulator.cost.expert_exchange`)."""

    link_efficiency: float = Field(gt=0, le=1, description="ring all-reduce (bandwidth protocol): fraction of link "
                                   "GB/s")
    latency_us: float = Field(ge=0, description="fixed cost of one all-reduce (bandwidth protocol)")
    step_latency_us: float = Field(ge=0, description="all-reduce: per ring step (2(n−1) steps)")
    all_reduce_low_latency: ProtocolFit | None = Field(
        default=None, description="all-reduce's low-latency protocol (NCCL's LL / LL128), where fitted; steps 2(n−1)")
    inter_node_step_latency_us: float = Field(
        default=2.0, ge=0, description="all-reduce across nodes by NCCL's tree: what each of its 2⌈log2 N⌉ steps "
        "between N nodes adds to a step (the NICs and the switch between them)")
    all_reduce_nvls: ProtocolFit | None = Field(
        default=None, description="all-reduce by NVLink SHARP (NCCL's NVLS: the NVSwitch reduces 16- and 32-bit "
        "floats), within one NVSwitch node, where fitted (None: a switch without in-network reduction); whole "
        "buffer over the link, no steps")
    collectives: dict[Literal["all_gather", "reduce_scatter", "all_to_all"], CollectiveFit] = Field(
        description="NCCL collectives besides all-reduce (all-reduce: the fields above)")
    p2p_efficiency: float = Field(default=0.9, gt=0, le=1, description="send/recv: fraction of link GB/s")
    p2p_latency_us: float = Field(default=8.0, ge=0, description="fixed cost of one send/recv")
    deepep: dict[DeepEPKernel, ExchangeFit] | None = Field(
        default=None, description="DeepEP's dispatch and combine kernels (None: a generation DeepEP does not run on)")


class HardwareFit(StrictCopy):
    """A GPU's fitted parameters: what every kernel shares, then one group per kind of kernel."""

    bandwidth_efficiency: float = Field(gt=0, le=1, description="streaming: fraction of HBM GB/s")
    kernel_overhead_us: float = Field(ge=0, description="fixed cost of every kernel")
    host_speedup: float = Field(
        default=1.0, gt=0, le=10,
        description="how much faster the serving engine's host work (its per-iteration, per-sequence and per-prompt "
        "CPU time, and the dispatch of an eager iteration's kernels) runs on this GPU's servers than on the H100 "
        "servers the engine profiles' fixed costs were fitted on: newer host CPUs and the engine releases measured on "
        "them; fitted per generation on its benchmark rows")
    sm_count: int = Field(
        default=0, ge=0, description="the SMs of the GPU whose timings fitted the attention kernels' whole-GPU costs "
        "per work item (prefill rows and query tiles; decode blocks, query heads and fallback tokens): work spread "
        "over the SMs, so a GPU of sm_count SMs pays them x fit.sm_count / sm_count; 0: as stated")
    gemm: GemmFit
    prefill_attention: PrefillAttentionFit
    decode_attention: DecodeAttentionFit
    moe: MoEFit
    comm: CommFit


GROUPS = ("gemm", "prefill_attention", "decode_attention", "moe", "comm")
# a group's tables: a profile's entries replace the generation's entry by entry (its other fields replace them whole)
TABLES = {"gemm": ("flops_efficiency_by_dtype", "kernel_by_dtype"), "comm": ("collectives",)}

# every fitted parameter's flat name of before the groups (still the engine profiles' kernel fields) -> its place
FLAT_NAMES: dict[str, str] = {
    "bandwidth_efficiency": "bandwidth_efficiency",
    "kernel_overhead_us": "kernel_overhead_us",
    "host_speedup": "host_speedup",
    "fitted_sm_count": "sm_count",
    "flops_efficiency": "gemm.flops_efficiency",
    "flops_efficiency_by_dtype": "gemm.flops_efficiency_by_dtype",
    "gemm_knee": "gemm.knee",
    "gemm_tile_m": "gemm.tile_m",
    "gemm_k_latency_ns": "gemm.k_latency_ns",
    "gemm_split_k": "gemm.split_k",
    "gemm_kernel_by_dtype": "gemm.kernel_by_dtype",
    "quantize_overhead_us": "gemm.quantize_overhead_us",
    "attention_efficiency": "prefill_attention.efficiency",
    "attention_io_efficiency": "prefill_attention.io_efficiency",
    "prefill_attention_ns_per_row": "prefill_attention.ns_per_row",
    "prefill_attention_ns_per_tile": "prefill_attention.ns_per_tile",
    "prefill_attention_blocks_per_sm": "prefill_attention.blocks_per_sm",
    "prefill_attention_packs_gqa": "prefill_attention.packs_gqa",
    "prefill_attention_exp_exposed": "prefill_attention.exp_exposed",
    "prefill_fallback_head_dim": "prefill_attention.fallback_head_dim",
    "prefill_fallback_window_head_dim": "prefill_attention.fallback_window_head_dim",
    "prefill_fallback_efficiency": "prefill_attention.fallback_efficiency",
    "attention_overhead_us": "prefill_attention.overhead_us",
    "decode_attention_efficiency": "decode_attention.efficiency",
    "decode_attention_ns_per_head": "decode_attention.ns_per_head",
    "decode_attention_ns_per_query_head": "decode_attention.ns_per_query_head",
    "decode_attention_block_gb_per_s": "decode_attention.block_gb_per_s",
    "decode_attention_max_group": "decode_attention.max_group",
    "decode_attention_query_tile": "decode_attention.query_tile",
    "decode_attention_mha_ns_per_head": "decode_attention.mha_ns_per_head",
    "decode_attention_ns_per_query_token": "decode_attention.ns_per_query_token",
    "decode_attention_bandwidth_efficiency": "decode_attention.bandwidth_efficiency",
    "decode_attention_blocks_per_sm": "decode_attention.blocks_per_sm",
    "decode_attention_split_us": "decode_attention.split_us",
    "decode_attention_split_tokens": "decode_attention.split_tokens",
    "decode_attention_split_blocks_per_sm": "decode_attention.split_blocks_per_sm",
    "decode_attention_kv_tile": "decode_attention.kv_tile",
    "decode_attention_overhead_us": "decode_attention.overhead_us",
    "moe_tile_m": "moe.tile_m",
    "moe_tile_n": "moe.tile_n",
    "moe_knee": "moe.knee",
    "moe_gemm_efficiency": "moe.gemm_efficiency",
    "moe_bandwidth_efficiency": "moe.bandwidth_efficiency",
    "moe_expert_overhead_us": "moe.expert_overhead_us",
    "moe_kernels": "moe.kernels",
    "moe_token_pass_bytes": "moe.token_pass_bytes",
    "moe_assignment_pass_bytes": "moe.assignment_pass_bytes",
    "moe_ep_overhead_us": "moe.ep_overhead_us",
    "link_efficiency": "comm.link_efficiency",
    "collective_latency_us": "comm.latency_us",
    "collective_step_latency_us": "comm.step_latency_us",
    "all_reduce_low_latency": "comm.all_reduce_low_latency",
    "inter_node_step_latency_us": "comm.inter_node_step_latency_us",
    "all_reduce_nvls": "comm.all_reduce_nvls",
    "collectives": "comm.collectives",
    "p2p_efficiency": "comm.p2p_efficiency",
    "p2p_latency_us": "comm.p2p_latency_us",
    "deepep": "comm.deepep",
}


def fit_path(name: str) -> list[str]:
    """The place within ``fit`` of a fitted parameter named by its flat name (:data:`FLAT_NAMES`) or by its dotted
    place (``gemm.tile_m``), either followed by the keys of a table or sub-model (``flops_efficiency_by_dtype.fp8``,
    ``comm.collectives.all_gather.low_latency.efficiency``)."""
    head, _, rest = name.partition(".")
    return FLAT_NAMES.get(head, head).split(".") + (rest.split(".") if rest else [])


def replaced(holder: Any, path: list[str], value: Any) -> Any:
    """A copy of ``holder`` (a pydantic model or a dict) with the entry at ``path`` replaced (not validated, as
    ``model_copy``; an entry of a table may be new)."""
    key, rest = path[0], path[1:]
    if isinstance(holder, dict):
        return {**holder, key: replaced(holder[key], rest, value) if rest else value}
    if key not in type(holder).model_fields:
        raise ValueError(f"{type(holder).__name__} has no field {key!r}")
    return holder.model_copy(update={key: replaced(getattr(holder, key), rest, value) if rest else value})


def value_at(holder: Any, path: list[str]) -> Any:
    """The entry of ``holder`` (a pydantic model or a dict) at ``path``."""
    for key in path:
        holder = holder[key] if isinstance(holder, dict) else getattr(holder, key)
    return holder


MAX_NAMED = 3  # old spellings a warning names before it counts the rest


def grouped(data: dict[str, Any], section: str, under: str | None = None) -> dict[str, Any]:
    """``data`` with every flat name of :data:`FLAT_NAMES` among its keys moved to its place in the nested groups:
    under the key ``under`` (a profile's top level: ``fit``), else within ``data`` itself (a generation file's
    ``fit``); with one ``FutureWarning`` naming the old spellings (``section``: where they sit, for the messages).
    Raises ``ValueError`` for a parameter given in both spellings. A part that is not a mapping is left for
    validation to name."""
    old = [key for key in data if key in FLAT_NAMES and (under is not None or FLAT_NAMES[key] != key)]
    result = {key: value for key, value in data.items() if key not in old}
    fit = result if under is None else result.get(under, {})
    if not old or not isinstance(fit, dict) or not all(isinstance(fit.get(group, {}), dict) for group in GROUPS):
        return data
    fit = {**fit, **{group: dict(fit[group]) for group in GROUPS if group in fit}}  # copies, filled below
    prefix = "" if under is None else f"{under}."
    for key in old:
        group, _, field = FLAT_NAMES[key].rpartition(".")
        holder = fit.setdefault(group, {}) if group else fit
        if field in holder:
            raise ValueError(f"give {prefix}{FLAT_NAMES[key]} only ({key} is its old spelling)")
        holder[field] = data[key]
    if under is not None:
        result[under] = fit
    else:
        result = fit
    pairs = [f"{key} -> {prefix}{FLAT_NAMES[key]}" for key in old]
    more = f" and {len(pairs) - MAX_NAMED} more" if len(pairs) > MAX_NAMED else ""
    warnings.warn(f"{section}: the fitted parameters are grouped ({', '.join(pairs[:MAX_NAMED])}{more}); the old "
                  "flat spelling goes in the next release", FutureWarning, stacklevel=2)
    return result


def merged_fit(base: Mapping[str, Any], over: Any) -> Any:
    """A profile's ``fit`` (``over``, as given: any part of the groups) over its generation's (``base``, a
    :class:`HardwareFit` dumped): field by field within each group, entry by entry within a group's tables
    (:data:`TABLES`); whatever is not a mapping is left for validation to refuse."""
    if not isinstance(over, dict):
        return over
    merged = dict(base)
    for key, value in over.items():
        if key in GROUPS and isinstance(value, dict) and isinstance(base.get(key), dict):
            group = {**base[key], **value}
            for table in TABLES.get(key, ()):
                if isinstance(value.get(table), dict) and isinstance(base[key].get(table), dict):
                    group[table] = {**base[key][table], **value[table]}
            merged[key] = group
        else:
            merged[key] = value
    return merged
