"""GPU descriptions: spec-sheet numbers plus a few fitted parameters with physical meaning.

A profile is a YAML file in ``hardware_profiles/`` (catalog name = file stem) or any YAML given by path. Every
spec-sheet number comes from the vendor datasheet (cited in the file); the fitted parameters are listed on
:class:`HardwareSpec`.

Which fitted parameters a GPU takes: those its profile sets itself (``llmsim calibrate`` writes them), else those of
its ``generation`` (:mod:`simulator.catalog.generations`): fitted on that generation's measurements where
../shared/data has them, else on the newest earlier generation that has them (Blackwell takes Hopper's) — never
values tuned toward guesses of the unseen part.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.catalog.generations import generation_fit, generation_names
from simulator.catalog.loading import catalog_names, load_catalog_entry
from simulator.catalog.paths import HARDWARE_DIR
from simulator.errors import LLMSimError, renamed


class PeakTflops(BaseModel):
    """Dense (not sparse) peak tensor throughput per numeric format, TFLOP/s."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    bf16: float = Field(gt=0)
    fp16: float = Field(gt=0)
    fp8: float | None = Field(default=None, gt=0)
    int8: float | None = Field(default=None, gt=0)
    fp4: float | None = Field(default=None, gt=0, description="NVFP4/MXFP4 where the part has FP4 tensor cores")


class NodeSpec(BaseModel):
    """How GPUs connect: within a node (``fabric``) and across nodes (one NIC per GPU).

    ``nvswitch``: every GPU pair at ``interconnect_gb_per_s``; ``pairwise``: NVLink bridges join pairs, larger groups
    cross PCIe (``host_link_gb_per_s``); ``pcie``: all traffic over PCIe.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    gpus_per_node: int = Field(default=8, ge=1)
    fabric: Literal["nvswitch", "pairwise", "pcie"] = "nvswitch"
    inter_node_gb_per_s: float = Field(default=25.0, gt=0,
                                       description="per-GPU network bandwidth, gigabytes per second per direction")

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, value: Any) -> Any:
        return renamed(value, "node", {"inter_node_gbps": "inter_node_gb_per_s"})


class ProtocolFit(BaseModel):
    """One NCCL protocol of a collective on NVSwitch: ``latency_us`` + ``step_latency_us`` · (n − 1) + bus bytes /
    (link GB/s × ``efficiency``), bus bytes (n − 1)/n of the buffer (see :mod:`simulator.cost.collectives`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    latency_us: float = Field(ge=0)
    step_latency_us: float = Field(ge=0)
    efficiency: float = Field(gt=0, le=1)


class CollectiveFit(ProtocolFit):
    """One NCCL collective: its bandwidth protocol (Simple: the fields above) and, where fitted, its low-latency
    protocol (LL / LL128: less fixed cost, a fraction of the bandwidth); NCCL runs whichever is faster."""

    low_latency: ProtocolFit | None = None


class ExchangeFit(BaseModel):
    """One DeepEP kernel: ``latency_us`` + the bytes it moves off the GPU / (link GB/s × ``efficiency``) (see
    :mod:`simulator.cost.expert_exchange`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    latency_us: float = Field(ge=0)
    efficiency: float = Field(gt=0, le=1)


DeepEPKernel = Literal["ll_dispatch", "ll_combine", "normal_dispatch", "normal_combine"]


class GemmKernelFit(BaseModel):
    """The GEMM kernels of one quantised weight format where they are not the 16-bit library's (a W8A8 int8 kernel
    with its per-token scales, a weight-only kernel that dequantises in its main loop): the rows one tile computes,
    its main loop's serial latency per element of k, and the fixed GPU work of each such GEMM beyond the kernel
    floor (its prologue, scales, a reduction of split partials) — :mod:`simulator.cost.gemm`."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    tile_m: int | None = Field(default=None, ge=1, description="rows computed per tile (None: gemm_tile_m)")
    k_latency_ns: float | None = Field(
        default=None, ge=0, description="serial latency of one output tile's main loop per element of k, ns (None: "
        "gemm_k_latency_ns); these kernels do not split k")
    overhead_us: float = Field(default=0.0, ge=0, description="fixed GPU work per GEMM beyond the kernel floor")


QuantisedFormat = Literal["fp8", "fp8_block", "int8", "int4", "mxfp4", "nvfp4"]

FITTED_FIELDS = (
    "flops_efficiency", "flops_efficiency_by_dtype", "bandwidth_efficiency", "gemm_knee", "gemm_tile_m",
    "gemm_k_latency_ns", "gemm_split_k", "gemm_kernel_by_dtype", "kernel_overhead_us", "quantize_overhead_us",
    "link_efficiency", "collective_latency_us", "collective_step_latency_us", "all_reduce_low_latency",
    "all_reduce_nvls", "collectives", "attention_efficiency", "attention_io_efficiency", "prefill_attention_ns_per_row",
    "prefill_attention_ns_per_tile", "prefill_attention_blocks_per_sm", "prefill_attention_packs_gqa",
    "prefill_attention_exp_exposed", "decode_attention_efficiency", "decode_attention_ns_per_head",
    "decode_attention_ns_per_query_head", "decode_attention_max_group", "decode_attention_ns_per_query_token",
    "decode_attention_block_gb_per_s", "decode_attention_query_tile", "decode_attention_mha_ns_per_head",
    "decode_attention_blocks_per_sm", "decode_attention_split_us", "decode_attention_split_tokens",
    "decode_attention_split_blocks_per_sm", "decode_attention_kv_tile", "prefill_fallback_head_dim",
    "prefill_fallback_window_head_dim", "prefill_fallback_efficiency", "attention_overhead_us", "moe_tile_m",
    "moe_tile_n", "moe_knee", "moe_gemm_efficiency", "moe_bandwidth_efficiency", "moe_expert_overhead_us",
    "moe_kernels", "moe_token_pass_bytes", "moe_assignment_pass_bytes", "moe_ep_overhead_us", "deepep",
    "fitted_sm_count", "host_speedup",
)


# A quantised GEMM format measured nowhere takes the fraction of its peak of the nearest format that was: block-scaled
# 4-bit floats (nvfp4, mxfp4; Blackwell) that of block-scaled fp8, then per-tensor fp8; 8-bit integers (W8A8) that
# of fp8. Quantised kernels reach less of their peak than 16-bit ones (Hopper's fit: fp8 0.54, fp8_block 0.58, bf16
# 0.81): with the 16-bit fraction a B200's fp4 GEMM would run 3.0x its fp8 one, where NVIDIA's cuBLAS 12.9 reaches
# "up to 2.3x" (2.15x with fp8_block's fraction; 4.9x an H100's fp8 GEMM, against its "4.6x").
UNFITTED_FORMAT_FRACTIONS: dict[str, tuple[str, ...]] = {"fp4": ("fp8_block", "fp8"), "int8": ("fp8",)}


class HardwareSpec(BaseModel):
    """One GPU model. Bandwidths are GB/s (10^9 bytes/s) per direction; memory is GiB.

    Besides spec-sheet numbers, a profile holds a few fitted parameters with physical meaning (see
    ``simulator/cost/gemm.py`` and ``simulator/cost/collectives.py``): achievable fractions of peak compute (per
    numeric format), HBM bandwidth and link bandwidth; the GEMM row tile and its main loop's latency along k (and
    those of a quantised format's own kernels, with their fixed work); a fixed cost per kernel and per activation
    quantisation; collective latencies. Those the profile leaves out come from its ``generation``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str
    description: str = ""
    generation: str = Field(default="ampere", description="GPU architecture whose fitted parameters this GPU takes")
    memory_gib: float = Field(gt=0)
    memory_bandwidth_gb_per_s: float = Field(gt=0)
    peak_tflops: PeakTflops
    interconnect_gb_per_s: float = Field(default=0.0, ge=0, description="GPU-GPU link per direction; 0 = none")
    host_link_gb_per_s: float = Field(default=32.0, gt=0, description="PCIe to host, per direction")
    sm_count: int = Field(default=0, ge=0, description="streaming multiprocessors (compute units) the kernels' thread "
                          "blocks run on; 0: not stated (no decode-attention waves)")
    fitted_sm_count: int = Field(
        default=0, ge=0, description="the SMs of the GPU whose timings fitted the attention kernels' whole-GPU costs "
        "per work item (prefill rows and query tiles; decode blocks, query heads and fallback tokens): work spread "
        "over the SMs, so a GPU of sm_count SMs pays them x fitted_sm_count / sm_count; 0: as stated")
    host_speedup: float = Field(
        default=1.0, gt=0, le=10,
        description="how much faster the serving engine's host work (its per-iteration, per-sequence and per-prompt "
        "CPU time, and the dispatch of an eager iteration's kernels) runs on this GPU's servers than on the H100 "
        "servers the engine profiles' fixed costs were fitted on: newer host CPUs and the engine releases measured on "
        "them; fitted per generation on its benchmark rows")
    sfu_exp_tera_per_s: float = Field(
        default=0.0, ge=0, description="exponentials per second of the special-function units (MUFU.EX2), 10^12/s: "
        "sm_count x 16 per clock x boost clock (Blackwell Ultra: 32 per clock); unstated, the 16-bit peak times the "
        "exponentials per 16-bit FLOP of the GPU its generation's fit comes from; 0: the exponentials not priced")
    node: NodeSpec = NodeSpec()
    flops_efficiency: float = Field(gt=0, le=1, description="large 16-bit GEMMs: fraction of peak")
    flops_efficiency_by_dtype: dict[Literal["fp8", "fp8_block", "int8", "fp4"], float] = Field(
        description="large GEMMs in that format: fraction of its peak (else flops_efficiency)")
    bandwidth_efficiency: float = Field(gt=0, le=1, description="streaming: fraction of HBM GB/s")
    gemm_knee: float = Field(ge=1, description="p of the smooth max (t_c^p + t_m^p)^(1/p)")
    gemm_tile_m: int = Field(ge=1, description="GEMM rows are computed in tiles of this many")
    gemm_k_latency_ns: float = Field(
        default=0.0, ge=0, description="GEMM: serial latency of one output tile's main loop per element of k, ns "
        "(small GEMMs cannot hide it)")
    gemm_split_k: int = Field(
        default=0, ge=0, description="GEMMs of 16-bit weights: the longest stretch of k one output tile's main loop "
        "walks (the 16-bit library splits a longer k over more thread blocks when the output has too few tiles; the "
        "kernels for quantised weights do not); 0: no split")
    gemm_kernel_by_dtype: dict[QuantisedFormat, GemmKernelFit] = Field(
        default_factory=dict, description="a quantised weight format's GEMM kernels where they are their own: row "
        "tile, main-loop latency, fixed work (else the 16-bit GEMMs' tile and latency)")
    kernel_overhead_us: float = Field(ge=0, description="fixed cost of every kernel")
    quantize_overhead_us: float = Field(ge=0, description="W8A8 GEMMs: fixed cost of quantising the activations")
    attention_efficiency: float = Field(gt=0, le=1, description="prefill attention: fraction of the 16-bit peak")
    attention_io_efficiency: float = Field(gt=0, le=1, description="prefill attention: fraction of HBM GB/s")
    prefill_attention_ns_per_row: float = Field(
        default=0.0, ge=0, description="prefill attention: per (query token, head) row (Q in, output out, softmax "
        "normalisation), whole-GPU ns")
    prefill_attention_ns_per_tile: float = Field(
        default=0.0, ge=0, description="prefill attention: per (query tile, head) thread block (its prologue and "
        "epilogue), whole-GPU ns")
    prefill_attention_blocks_per_sm: float = Field(
        default=0.0, ge=0, description="prefill attention: thread blocks (one per query tile of a chunk and head, or "
        "KV head where packed) each SM runs at once, each at 1 / (sm_count times this) of the kernel's FLOP rate, so "
        "a kernel takes at least its longest block (the last query tile of the longest chunk) at that rate; 0: no "
        "such bound")
    prefill_attention_packs_gqa: bool = Field(
        default=False, description="prefill attention: a thread block's query tile holds the rows of all query heads "
        "of one KV head (grouped-query attention packed), not of one head")
    prefill_attention_exp_exposed: float = Field(
        default=0.0, ge=0, description="prefill attention: the share of its softmax's exponentials' time (one per "
        "query-key pair and head at sfu_exp_tera_per_s) the kernel does not hide behind its tensor-core work (the "
        "softmax's other per-pair work, on the FP32 units, rides along in it)")
    prefill_fallback_head_dim: int = Field(
        default=0, ge=0, description="prefill attention: the head width from which its kernel is a fallback that "
        "computes every causal query-key pair at prefill_fallback_efficiency (0: none)")
    prefill_fallback_window_head_dim: int = Field(
        default=0, ge=0, description="prefill attention: the head width from which a windowed (or chunked local) "
        "prefill runs that fallback, its window unused (0: none)")
    prefill_fallback_efficiency: float = Field(
        default=0.0, ge=0, le=1, description="prefill attention's fallback kernel: fraction of the 16-bit peak")
    decode_attention_efficiency: float = Field(gt=0, le=1, description="decode attention: fraction of 16-bit peak")
    decode_attention_ns_per_head: float = Field(ge=0, description="decode attention: per (sequence, KV head)")
    decode_attention_ns_per_query_head: float = Field(
        default=0.0, ge=0, description="decode attention: per (sequence, query head) — each query head's softmax and "
        "output within its KV head's block (0: a block costs the same whatever its group)")
    decode_attention_block_gb_per_s: float = Field(
        default=0.0, ge=0, description="decode attention: the HBM rate one (sequence, KV head) block of its kernel "
        "streams the cache at (with its split-KV partitions), so a step of few blocks does not reach the GPU's "
        "bandwidth; 0: no limit")
    decode_attention_max_group: int = Field(
        default=0, ge=0, description="decode attention: the most query heads per KV head its kernel serves from one "
        "read of the KV head; a larger group runs a fallback kernel (decode_attention_ns_per_query_token); 0: any")
    decode_attention_query_tile: int = Field(
        default=0, ge=0, description="decode attention: the rows of the matrix-multiply tiles its kernel computes a "
        "KV head's query heads in (a block's first tile is in decode_attention_ns_per_head, every row of its further "
        "tiles pays decode_attention_ns_per_query_head); 0: every query head pays it")
    decode_attention_mha_ns_per_head: float | None = Field(
        default=None, ge=0, description="decode attention: per (sequence, query head) of the kernel that runs one "
        "query head per block (multi-head attention, and groups above decode_attention_max_group), instead of the "
        "grouped kernel's block costs; None: that kernel is the grouped one")
    decode_attention_ns_per_query_token: float = Field(
        default=0.0, ge=0, description="decode attention's fallback kernel (groups above decode_attention_max_group):"
        " per (query head, cached token, 128 elements of head width), whole-GPU ns")
    decode_attention_bandwidth_efficiency: float | None = Field(
        default=None, gt=0, le=1, description="decode attention: fraction of HBM GB/s it streams the KV cache at; "
        "None: bandwidth_efficiency")
    decode_attention_blocks_per_sm: float = Field(
        default=0.0, ge=0, description="decode attention: thread blocks (one per sequence and KV head, or query head "
        "where its multi-head kernel runs) that run at once per SM; a step of fewer than sm_count times as many still "
        "pays one wave's block costs; 0: no waves (and no splits)")
    decode_attention_split_us: float = Field(
        default=0.0, ge=0, description="decode attention: what a step that splits (fewer blocks than "
        "decode_attention_split_blocks_per_sm allows) pays to combine the split-KV partials of contexts of "
        "decode_attention_split_tokens or more")
    decode_attention_split_tokens: int = Field(
        default=0, ge=0, description="decode attention: the shortest context its kernel splits")
    decode_attention_split_blocks_per_sm: float | None = Field(
        default=None, ge=0, description="decode attention: a step of fewer blocks than sm_count times this splits "
        "its contexts (FlashAttention's heuristic: fewer than 0.8 of the SMs); None: decode_attention_blocks_per_sm, "
        "the wave")
    decode_attention_kv_tile: int = Field(
        default=0, ge=0, description="decode attention: the cached tokens a block's loop reads at once; a context is "
        "read in whole tiles (0: token by token)")
    attention_overhead_us: float = Field(ge=0, description="fixed cost of an attention kernel launched eagerly")
    decode_attention_overhead_us: float | None = Field(
        default=None, ge=0, description="fixed cost of a decode attention kernel launched eagerly (its split-KV "
        "partials and their combine); None: attention_overhead_us")
    moe_tile_m: int = Field(ge=1, description="grouped expert GEMMs compute each expert's rows in tiles of this many")
    moe_tile_n: int = Field(ge=1, description="grouped expert GEMMs compute an expert's width in tiles of this many")
    moe_knee: float = Field(ge=1, description="p of the smooth max of a fused-MoE layer's compute and memory times")
    moe_gemm_efficiency: float = Field(gt=0, le=1.5, description="grouped expert GEMMs: their FLOP rate relative to "
                                       "a dense GEMM of the same format")
    moe_bandwidth_efficiency: float = Field(gt=0, le=1.2, description="grouped expert GEMMs: their weight streaming "
                                            "relative to a dense GEMM's")
    moe_expert_overhead_us: float = Field(ge=0, description="grouped expert GEMMs: a fixed cost per expert the batch "
                                          "touches (its tiles' prologue and epilogue, scale loads, scheduling)")
    moe_kernels: int = Field(ge=0, description="kernels one fused-MoE layer launches (routing, sorting, GEMMs, ...)")
    moe_token_pass_bytes: float = Field(
        default=0.0, ge=0, description="a fused-MoE layer's passes over every token it is handed, whatever its "
        "experts: bytes per (token, hidden element) streamed at its bandwidth (its permutation and combine)")
    moe_assignment_pass_bytes: float = Field(
        default=0.0, ge=0, description="a fused-MoE layer's passes over each token copy its experts receive: bytes per "
        "(assignment, hidden element) streamed at its bandwidth (the copies permuted to their experts and combined "
        "back)")
    moe_ep_overhead_us: float = Field(
        default=0.0, ge=0, description="what a fused-MoE layer adds under expert parallelism (its local-expert "
        "selection kernels)")
    link_efficiency: float = Field(gt=0, le=1, description="ring all-reduce (bandwidth protocol): fraction of link "
                                   "GB/s")
    p2p_efficiency: float = Field(default=0.9, gt=0, le=1, description="send/recv: fraction of link GB/s")
    collective_latency_us: float = Field(ge=0, description="fixed cost of one all-reduce (bandwidth protocol)")
    collective_step_latency_us: float = Field(ge=0, description="per ring step (2(n−1) steps)")
    all_reduce_low_latency: ProtocolFit | None = Field(
        default=None, description="all-reduce's low-latency protocol (NCCL's LL / LL128), where fitted; steps 2(n−1)")
    all_reduce_nvls: ProtocolFit | None = Field(
        default=None, description="all-reduce by NVLink SHARP (NCCL's NVLS: the NVSwitch reduces 16- and 32-bit "
        "floats), within one NVSwitch node, where fitted (None: a switch without in-network reduction); whole "
        "buffer over the link, no steps")
    p2p_latency_us: float = Field(default=8.0, ge=0, description="fixed cost of one send/recv")
    collectives: dict[Literal["all_gather", "reduce_scatter", "all_to_all"], CollectiveFit] = Field(
        description="NCCL collectives besides all-reduce (all-reduce: the fields above)")
    deepep: dict[DeepEPKernel, ExchangeFit] | None = Field(
        default=None, description="DeepEP's dispatch and combine kernels (None: a generation DeepEP does not run on)")
    price_per_hour_usd: float | None = Field(
        default=None, gt=0, description="optional: what one GPU costs per hour, for llmsim plan"
    )
    sources: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _generation_defaults(cls, data: Any) -> Any:
        """Fill the fitted parameters the profile leaves out from its generation's fit (old spellings first)."""
        if not isinstance(data, dict):
            return data
        data = renamed(data, "hardware", {f"{name}_gbps": f"{name}_gb_per_s"
                                          for name in ("memory_bandwidth", "interconnect", "host_link")})
        generation = data.get("generation", "ampere")
        try:
            fit = generation_fit(generation)
        except (KeyError, TypeError):
            raise ValueError(f"generation: unknown {generation!r} (allowed: {', '.join(generation_names())})") from None
        merged = {**{name: fit[name] for name in FITTED_FIELDS if name in fit}, **data}
        for table in ("flops_efficiency_by_dtype", "gemm_kernel_by_dtype", "collectives"):  # some entries of a table
            if isinstance(data.get(table), dict):
                merged[table] = {**fit.get(table, {}), **data[table]}
        peaks = data.get("peak_tflops")
        bf16 = peaks.get("bf16") if isinstance(peaks, dict) else None
        if "sfu_exp_tera_per_s" not in data and isinstance(bf16, int | float):
            # unstated: the balance of exponentials to 16-bit FLOPs of the GPU the generation's fit comes from
            merged["sfu_exp_tera_per_s"] = bf16 * fit["sfu_exp_per_bf16_flop"]
        return merged

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    def achievable_flops(self, dtype: str) -> float:
        """FLOP/s a large GEMM reaches computing in ``dtype`` (fp8_block runs on the fp8 tensor cores; a format the
        GPU lacks falls back to the 16-bit peak and efficiency). A quantised format without a fraction of its own
        takes the nearest fitted one (:data:`UNFITTED_FORMAT_FRACTIONS`), not the 16-bit GEMMs'."""
        if dtype in ("bf16", "fp16") or not self.has_peak(dtype):
            return self.peak_flops(dtype) * self.flops_efficiency
        fitted = self.flops_efficiency_by_dtype
        fraction = next((fitted[name] for name in (dtype, *UNFITTED_FORMAT_FRACTIONS.get(dtype, ())) if name in fitted),
                        self.flops_efficiency)
        return self.peak_flops(dtype) * fraction

    def peak_flops(self, dtype: str) -> float:
        """The spec sheet's dense FLOP/s computing in ``dtype`` (fp8_block on the fp8 tensor cores; a format the GPU
        lacks on the 16-bit ones)."""
        if dtype in ("bf16", "fp16") or not self.has_peak(dtype):
            return (self.peak_tflops.fp16 if dtype == "fp16" else self.peak_tflops.bf16) * 1e12
        return getattr(self.peak_tflops, "fp8" if dtype == "fp8_block" else dtype) * 1e12

    def has_peak(self, dtype: str) -> bool:
        """Whether the GPU has tensor cores for ``dtype`` (16-bit always)."""
        return dtype in ("bf16", "fp16") or getattr(self.peak_tflops, "fp8" if dtype == "fp8_block" else dtype,
                                                    None) is not None

    @property
    def achievable_bandwidth(self) -> float:
        """Bytes/s that streaming HBM reads reach."""
        return self.memory_bandwidth_gb_per_s * 1e9 * self.bandwidth_efficiency


def with_generation(spec: HardwareSpec, generation: str) -> HardwareSpec:
    """``spec``'s spec sheet with every fitted parameter taken from ``generation``'s fit: what the GPU would be
    priced with if it had no measurements of its own and belonged to that generation (``llmsim validate --data
    --generation``; raises ``ValueError`` for an unknown generation)."""
    sheet = spec.model_dump(exclude={*FITTED_FIELDS, "generation"})
    return HardwareSpec.model_validate({**sheet, "generation": generation})


def resolve_hardware(hardware: str | HardwareSpec) -> HardwareSpec:
    """A profile, given itself or its catalog name / path."""
    return hardware if isinstance(hardware, HardwareSpec) else load_hardware(hardware)


def hardware_names() -> list[str]:
    return catalog_names(HARDWARE_DIR)


def load_hardware(name_or_path: str) -> HardwareSpec:
    """A catalog name (``h100-sxm``) or a path to a hardware YAML; ``<either>@<generation>`` prices that GPU with
    another generation's fitted parameters (:func:`with_generation`: ``h100-sxm@ampere`` is the H100's spec sheet
    as if Hopper had no measurements and took Ampere's fit)."""
    base, at, generation = name_or_path.rpartition("@")
    if not at or "/" in generation or generation.endswith((".yaml", ".yml")):  # a path may hold an "@"
        return load_catalog_entry(name_or_path, HARDWARE_DIR, HardwareSpec, "hardware", "GPU")
    spec = load_catalog_entry(base, HARDWARE_DIR, HardwareSpec, "hardware", "GPU")
    if generation not in generation_names():
        raise LLMSimError(f"hardware: unknown generation {generation!r} in {name_or_path!r} "
                          f"(allowed: {', '.join(generation_names())})")
    return with_generation(spec, generation)
