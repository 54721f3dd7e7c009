"""GPU descriptions: the spec sheet, plus fitted parameters with physical meaning in one nested ``fit``.

A profile is a YAML file in ``hardware_profiles/`` (catalog name = file stem) or any YAML given by path. Every
spec-sheet number comes from the vendor datasheet (cited in the file); the fitted parameters are grouped by kind of
kernel under ``fit`` (:class:`simulator.catalog.hardware_fit.HardwareFit`: ``fit.gemm``, ``fit.prefill_attention``,
``fit.decode_attention``, ``fit.moe``, ``fit.comm`` and the few every kernel shares).

Which fitted parameters a GPU takes: those its profile sets itself (``llmsim calibrate`` writes them), else those of
its ``generation`` (:mod:`simulator.catalog.generations`), field by field: fitted on that generation's measurements
where ../shared/data has them, else on the newest earlier generation that has them (Blackwell takes Hopper's) —
never values tuned toward guesses of the unseen part. A profile in the flat spelling of before the groups
(``gemm_tile_m: 64``) still reads, with a ``FutureWarning`` (:data:`simulator.catalog.hardware_fit.FLAT_NAMES`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.catalog.generations import generation_exp_balance, generation_fit, generation_names
from simulator.catalog.hardware_fit import HardwareFit, StrictCopy, fit_path, grouped, merged_fit, replaced, value_at
from simulator.catalog.loading import catalog_names, load_catalog_entry
from simulator.catalog.paths import HARDWARE_DIR
from simulator.errors import LLMSimError, renamed

# A GPU's idle draw, where its profile states none, as a share of its board power. No spec sheet states idle power;
# published readings put an idle H100/H200 with an engine's CUDA context at 10-15% of board power: a serving GPU
# stays in a high clock state between iterations, its context alone adding 26-50 W over bare idle on HBM parts
# (arXiv:2605.23918, 18 days of nvidia-smi telemetry on 14 H100s); an H200 measured 80.3 W idle against 700 W
# (https://api.serialalice.pt/alice-benchmark, 11.5%); hardware guides tabulate idle at ~15% of TDP
# (https://nemulai.com/blog/gpu-electricity-cost-per-training-run). The upper end: idle counts in every second.
IDLE_POWER_FRACTION = 0.15


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


class MigSlice(BaseModel):
    """What a MIG GPU instance is a slice of (:mod:`simulator.catalog.mig`): ``compute_sevenths`` of the GPU's
    compute (its SMs, tensor peaks) and ``memory_eighths`` of its memory and HBM bandwidth."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    profile: str = Field(description="NVIDIA's profile name, e.g. 3g.40gb")
    gpu: str = Field(description="the whole GPU's profile name")
    compute_sevenths: int = Field(ge=1, le=7, description="compute slices of the GPU's 7 (the g of the profile)")
    memory_eighths: int = Field(ge=1, le=8, description="memory slices of the GPU's 8")


# A quantised GEMM format measured nowhere takes the fraction of its peak of the nearest format that was: block-scaled
# 4-bit floats (nvfp4's W4A4; Blackwell) that of block-scaled fp8, then per-tensor fp8; 8-bit integers (W8A8) that
# of fp8. Quantised kernels reach less of their peak than 16-bit ones (Hopper's fit: fp8 0.54, fp8_block 0.58, bf16
# 0.81): with the 16-bit fraction a B200's fp4 GEMM would run 3.0x its fp8 one, where NVIDIA's cuBLAS 12.9 reaches
# "up to 2.3x" (2.15x with fp8_block's fraction; 4.9x an H100's fp8 GEMM, against its "4.6x").
UNFITTED_FORMAT_FRACTIONS: dict[str, tuple[str, ...]] = {"fp4": ("fp8_block", "fp8"), "int8": ("fp8",)}


class HardwareSpec(StrictCopy):
    """One GPU model. Bandwidths are GB/s (10^9 bytes/s) per direction; memory is GiB.

    The spec sheet, and in ``fit`` the parameters fitted on kernel timings, grouped by kind of kernel
    (:class:`~simulator.catalog.hardware_fit.HardwareFit`): achievable fractions of peak compute (per numeric
    format), HBM bandwidth and link bandwidth; the GEMM row tile and its main loop's latency along k; the attention
    kernels' costs per work item; the fused-MoE layers' tiles and rates; collective latencies. Those the profile
    leaves out come from its ``generation``; :func:`with_fit` replaces some.
    """

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
    sfu_exp_tera_per_s: float = Field(
        default=0.0, ge=0, description="exponentials per second of the special-function units (MUFU.EX2), 10^12/s: "
        "sm_count x 16 per clock x boost clock (Blackwell Ultra: 32 per clock); unstated, the 16-bit peak times the "
        "exponentials per 16-bit FLOP of the GPU its generation's fit comes from; 0: the exponentials not priced")
    node: NodeSpec = NodeSpec()
    mig_instances: int = Field(
        default=0, ge=0, le=7, description="Multi-Instance GPU: the most GPU instances the GPU splits into (7 on "
        "NVIDIA's A100, H100, H200 and Blackwell parts; 0: no MIG), which lets cluster.mig run a replica on a slice")
    mig: MigSlice | None = Field(default=None, description="set on a MIG slice derived from a whole GPU "
                                 "(simulator.catalog.mig.mig_slice), never in a profile")
    fit: HardwareFit = Field(description="the fitted parameters, by kind of kernel (those the profile leaves out: its "
                             "generation's)")
    price_per_hour_usd: float | None = Field(
        default=None, gt=0, description="optional: what one GPU costs per hour, for llmsim plan"
    )
    board_power_w: float | None = Field(
        default=None, gt=0, description="the spec sheet's TDP / maximum board power of one GPU, watts (cited in the "
        "profile); unstated: no energy figures (simulator.results.energy)")
    idle_power_w: float | None = Field(
        default=None, gt=0, description="what one GPU draws between iterations with the engine's CUDA context "
        "loaded, watts; unstated: IDLE_POWER_FRACTION (0.15) of board_power_w")
    sources: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _generation_defaults(cls, data: Any) -> Any:
        """Fill the fitted parameters the profile leaves out from its generation's fit (old spellings first: the
        ``_gbps`` bandwidths, the flat fitted names)."""
        if not isinstance(data, dict):
            return data
        data = renamed(data, "hardware", {f"{name}_gbps": f"{name}_gb_per_s"
                                          for name in ("memory_bandwidth", "interconnect", "host_link")})
        data = grouped(data, "hardware", under="fit")
        generation = data.get("generation", "ampere")
        try:
            fit = generation_fit(generation)
        except (KeyError, TypeError):
            raise ValueError(f"generation: unknown {generation!r} (allowed: {', '.join(generation_names())})") from None
        merged = {**data, "fit": merged_fit(fit.model_dump(), data.get("fit", {}))}
        peaks = data.get("peak_tflops")
        bf16 = peaks.get("bf16") if isinstance(peaks, dict) else None
        if "sfu_exp_tera_per_s" not in data and isinstance(bf16, int | float):
            # unstated: the balance of exponentials to 16-bit FLOPs of the GPU the generation's fit comes from
            merged["sfu_exp_tera_per_s"] = bf16 * generation_exp_balance(generation)
        return merged

    @model_validator(mode="after")
    def _idle_below_board(self) -> HardwareSpec:
        """An idle draw needs a board power above it."""
        if self.idle_power_w is not None and (self.board_power_w is None or self.idle_power_w >= self.board_power_w):
            board = "not given" if self.board_power_w is None else f"{self.board_power_w:g} W"
            raise ValueError(f"idle_power_w: {self.idle_power_w:g} W needs a board_power_w above it (board_power_w: "
                             f"{board})")
        return self

    @property
    def idle_watts(self) -> float | None:
        """Watts one GPU draws idle: ``idle_power_w``, else :data:`IDLE_POWER_FRACTION` × ``board_power_w`` (None
        without a board power)."""
        if self.idle_power_w is not None:
            return self.idle_power_w
        return IDLE_POWER_FRACTION * self.board_power_w if self.board_power_w is not None else None

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    def achievable_flops(self, dtype: str) -> float:
        """FLOP/s a large GEMM reaches computing in ``dtype`` (fp8_block runs on the fp8 tensor cores; a format the
        GPU lacks falls back to the 16-bit peak and efficiency). A quantised format without a fraction of its own
        takes the nearest fitted one (:data:`UNFITTED_FORMAT_FRACTIONS`), not the 16-bit GEMMs'."""
        if dtype in ("bf16", "fp16") or not self.has_peak(dtype):
            return self.peak_flops(dtype) * self.fit.gemm.flops_efficiency
        fitted = self.fit.gemm.flops_efficiency_by_dtype
        fraction = next((fitted[name] for name in (dtype, *UNFITTED_FORMAT_FRACTIONS.get(dtype, ())) if name in fitted),
                        self.fit.gemm.flops_efficiency)
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
        return self.memory_bandwidth_gb_per_s * 1e9 * self.fit.bandwidth_efficiency


def with_fit(spec: HardwareSpec, update: Mapping[str, Any]) -> HardwareSpec:
    """``spec`` with the fitted parameters of ``update`` replaced, each named by its place within ``fit``
    (``{"gemm.tile_m": 64}``, ``{"comm.collectives.all_gather.latency_us": 20.0}``) or by its flat name of before the
    groups, which the engine profiles' kernel fields keep (``{"gemm_tile_m": 64}``,
    :data:`~simulator.catalog.hardware_fit.FLAT_NAMES`); like ``model_copy``, not validated (an engine's kernels over
    an 8-bit cache may exceed the 16-bit peak). An unknown name raises ``ValueError``."""
    fit = spec.fit
    for name, value in update.items():
        fit = replaced(fit, fit_path(name), value)
    return spec.model_copy(update={"fit": fit})


def fit_value(spec: HardwareSpec, name: str) -> Any:
    """The fitted parameter ``name`` of ``spec`` (named as :func:`with_fit` takes it)."""
    return value_at(spec.fit, fit_path(name))


# what :func:`with_generation` keeps of a GPU's own fit: its send/recv, measured with the system's network (as its
# node's bandwidth across nodes), not fitted per generation
OWN_SYSTEM_FIT = ("comm.p2p_efficiency", "comm.p2p_latency_us")


def with_generation(spec: HardwareSpec, generation: str) -> HardwareSpec:
    """``spec``'s spec sheet with every fitted parameter but its send/recv (:data:`OWN_SYSTEM_FIT`) taken from
    ``generation``'s fit: what the GPU would be priced with if it had no measurements of its own and belonged to
    that generation (``llmsim validate --data --generation``; raises ``ValueError`` for an unknown generation)."""
    sheet = spec.model_dump(exclude={"fit", "generation"})
    own: dict[str, Any] = {}
    for name in OWN_SYSTEM_FIT:
        group, field = name.split(".")
        own.setdefault(group, {})[field] = fit_value(spec, name)
    return HardwareSpec.model_validate({**sheet, "generation": generation, "fit": own})


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
