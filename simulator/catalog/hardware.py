"""GPU descriptions: spec-sheet numbers plus two physically meaningful efficiency factors.

A profile is a YAML file in ``hardware_profiles/`` (catalog name = file stem) or any YAML given by path. Every
spec-sheet number comes from the vendor datasheet (cited in the file); the few fitted parameters are listed on
:class:`HardwareSpec`.

Which fitted parameters a GPU takes: those fitted on its own generation's measurements where ../shared/data has them,
else those of the newest earlier generation that has them — never values tuned toward guesses of the unseen part.
Today the defaults below are the Ampere fit (A100); a Hopper fit on the H100 kernel tables exists
(``simulator/fidelity``; bf16 GEMMs: flops_efficiency 0.79, bandwidth_efficiency 0.86, 4 µs, knee 4, tile 64) but is
not yet the H100/H200 default, so Hopper and Blackwell (no measurements) take the Ampere values for now.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from simulator.catalog.loading import catalog_names, load_catalog_entry
from simulator.catalog.paths import HARDWARE_DIR


class PeakTflops(BaseModel):
    """Dense (not sparse) peak tensor throughput per numeric format, TFLOP/s."""

    model_config = ConfigDict(extra="forbid")
    bf16: float = Field(gt=0)
    fp16: float = Field(gt=0)
    fp8: float | None = Field(default=None, gt=0)
    int8: float | None = Field(default=None, gt=0)
    fp4: float | None = Field(default=None, gt=0, description="NVFP4/MXFP4 where the part has FP4 tensor cores")


class NodeSpec(BaseModel):
    """How GPUs connect: within a node (``fabric``) and across nodes (one NIC per GPU).

    ``nvswitch``: every GPU pair at ``interconnect_gbps``; ``pairwise``: NVLink bridges join pairs, larger groups
    cross PCIe (``host_link_gbps``); ``pcie``: all traffic over PCIe.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    gpus_per_node: int = Field(default=8, ge=1)
    fabric: Literal["nvswitch", "pairwise", "pcie"] = "nvswitch"
    inter_node_gbps: float = Field(default=25.0, gt=0, description="per-GPU network bandwidth, per direction")


class HardwareSpec(BaseModel):
    """One GPU model. Bandwidths are GB/s (10^9 bytes/s) per direction; memory is GiB.

    Besides spec-sheet numbers, a profile holds a few fitted parameters with physical meaning (defaults fitted on
    A100 measurements, see ``simulator/cost/gemm.py`` and ``simulator/cost/collectives.py``):
    achievable fractions of peak compute, HBM bandwidth and link bandwidth; the GEMM row tile; a fixed cost per
    kernel; collective latencies.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    description: str = ""
    memory_gib: float = Field(gt=0)
    memory_bandwidth_gbps: float = Field(gt=0)
    peak_tflops: PeakTflops
    interconnect_gbps: float = Field(default=0.0, ge=0, description="GPU-GPU link per direction; 0 = none")
    host_link_gbps: float = Field(default=32.0, gt=0, description="PCIe to host, per direction")
    node: NodeSpec = NodeSpec()
    flops_efficiency: float = Field(default=0.73, gt=0, le=1, description="large GEMMs: fraction of peak FLOP/s")
    bandwidth_efficiency: float = Field(default=0.84, gt=0, le=1, description="streaming: fraction of HBM GB/s")
    gemm_knee: float = Field(default=2.0, ge=1, description="p of the smooth max (t_c^p + t_m^p)^(1/p)")
    gemm_tile_m: int = Field(default=64, ge=1, description="GEMM rows are computed in tiles of this many")
    kernel_overhead_us: float = Field(default=6.0, ge=0, description="fixed cost of every kernel")
    link_efficiency: float = Field(default=0.7, gt=0, le=1, description="ring all-reduce: fraction of link GB/s")
    p2p_efficiency: float = Field(default=0.9, gt=0, le=1, description="send/recv: fraction of link GB/s")
    collective_latency_us: float = Field(default=20.0, ge=0, description="fixed cost of one all-reduce")
    collective_step_latency_us: float = Field(default=4.0, ge=0, description="per ring step (2(n−1) steps)")
    p2p_latency_us: float = Field(default=8.0, ge=0, description="fixed cost of one send/recv")
    price_per_hour_usd: float | None = Field(
        default=None, gt=0, description="optional: what one GPU costs per hour, for llmsim plan"
    )
    sources: list[str] = Field(default_factory=list)

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    def achievable_flops(self, dtype: str) -> float:
        """FLOP/s a large GEMM reaches in ``dtype`` (fp8/int8 fall back to the 16-bit peak if the GPU lacks them)."""
        peak = getattr(self.peak_tflops, dtype, None) if dtype in ("fp8", "int8") else None
        peak = peak or (self.peak_tflops.fp16 if dtype == "fp16" else self.peak_tflops.bf16)
        return peak * 1e12 * self.flops_efficiency

    @property
    def achievable_bandwidth(self) -> float:
        """Bytes/s that streaming HBM reads reach."""
        return self.memory_bandwidth_gbps * 1e9 * self.bandwidth_efficiency


def resolve_hardware(hardware: str | HardwareSpec) -> HardwareSpec:
    """A profile, given itself or its catalog name / path."""
    return hardware if isinstance(hardware, HardwareSpec) else load_hardware(hardware)


def hardware_names() -> list[str]:
    return catalog_names(HARDWARE_DIR)


def load_hardware(name_or_path: str) -> HardwareSpec:
    """A catalog name (``h100-sxm``) or a path to a hardware YAML."""
    return load_catalog_entry(name_or_path, HARDWARE_DIR, HardwareSpec, "hardware", "GPU")
