"""GPU descriptions: spec-sheet numbers plus two physically meaningful efficiency factors.

A profile is a YAML file in ``hardware_profiles/`` (catalog name = file stem) or any YAML given by path. Every number
comes from the vendor datasheet (cited in the file); ``flops_efficiency`` and ``bandwidth_efficiency`` are the
fractions of peak that large GEMMs and streaming reads actually reach.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from simulator.catalog.loading import read_mapping, validate
from simulator.catalog.paths import HARDWARE_DIR
from simulator.errors import LLMSimError


class PeakTflops(BaseModel):
    """Dense (not sparse) peak tensor throughput per numeric format, TFLOP/s."""

    model_config = ConfigDict(extra="forbid")
    bf16: float = Field(gt=0)
    fp16: float = Field(gt=0)
    fp8: float | None = Field(default=None, gt=0)
    int8: float | None = Field(default=None, gt=0)


class HardwareSpec(BaseModel):
    """One GPU model. Bandwidths are GB/s (10^9 bytes/s) per direction; memory is GiB."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    description: str = ""
    memory_gib: float = Field(gt=0)
    memory_bandwidth_gbps: float = Field(gt=0)
    peak_tflops: PeakTflops
    interconnect_gbps: float = Field(default=0.0, ge=0, description="GPU-GPU link per direction; 0 = none")
    interconnect_latency_us: float = Field(default=5.0, ge=0)
    host_link_gbps: float = Field(default=32.0, gt=0, description="PCIe to host, per direction")
    flops_efficiency: float = Field(default=0.75, gt=0, le=1)
    bandwidth_efficiency: float = Field(default=0.8, gt=0, le=1)
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


def hardware_names() -> list[str]:
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.yaml"))


def load_hardware(name_or_path: str) -> HardwareSpec:
    """A catalog name (``h100-sxm``) or a path to a hardware YAML."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = HARDWARE_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            raise LLMSimError(
                f"hardware: unknown GPU {name_or_path!r} (catalog: {', '.join(hardware_names())}; "
                "or a path to a hardware YAML)"
            )
    elif not path.is_file():
        raise LLMSimError(f"hardware: file not found: {name_or_path}")
    return validate(HardwareSpec, read_mapping(path), str(path))
