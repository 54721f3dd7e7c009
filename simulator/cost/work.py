"""Why a step costs what it costs: an iteration's FLOPs and HBM bytes, its seconds split into compute-, memory- and
fixed-limited parts, and the bound that names it.

The split follows the time's sensitivity to the GPU's two rates. ``compute_s`` is the part of an iteration's time
that scales with the FLOP rate — were every compute rate (tensor cores, and the special-function units that take the
softmax's exponentials) ``1 + ε`` times faster, the iteration would take ``ε·compute_s`` less, to first order:
``compute_s = −∂t / ∂ln(FLOP rate)`` —, ``memory_s`` likewise the part that scales with HBM bandwidth, and
``fixed_s = t − compute_s − memory_s`` the rest, which neither rate changes: kernel launch floors, per-work-item
costs (a prefill kernel's per row and per tile, a decode kernel's per thread block, a fused-MoE layer's per expert),
a GEMM's serial main-loop latency, the engine's host costs, the host's eager launches an iteration waits for, and
communication (collectives, pipeline transfers, expert exchanges: link time, not HBM).

Each kernel's roofline term is a smooth maximum ``M = (Σ t_i^p)^(1/p)`` of its compute time, its memory time and (a
GEMM's) its serial latency (:mod:`simulator.cost.gemm`); it is homogeneous of degree one in them, so Euler's rule
splits it exactly: term i takes ``t_i·∂M/∂t_i = t_i^p / M^(p−1)`` (:func:`smooth_max_work`) — the shares sum to M,
the larger term takes nearly all of it away from the knee, and each of two equal terms half at it. Where a maximum
or minimum of whole parts decides (the eager-launch floor, two-batch overlap), the branch that decides takes it.

FLOPs count useful work on one GPU of the tensor-parallel group: a GEMM's 2·m·n·k (its rows as given, not the padded
tile rows it is timed at), attention's 2·(d_qk + d_v) per query-key pair and head, a sparse-attention indexer's
2·H_I·d_I per pair, a recurrence's FLOPs per token; elementwise kernels count bytes only. HBM bytes are the bytes
the kernels are priced on: weights, activations in and out of the GEMMs, K/V read and written, elementwise traffic,
logits. Both describe the kernels whose times sum to the iteration's time (:mod:`simulator.cost.roofline`: with
pipeline parallelism the pass of its heaviest micro-batch, as one GPU group runs it; with expert parallelism the
busiest rank's experts).

The bound of an iteration is its largest part: ``argmax(compute_s, memory_s, fixed_s)``, ties going to compute, then
memory (:meth:`Work.bound`).
"""

from __future__ import annotations

from typing import NamedTuple

from simulator.catalog import HardwareSpec
from simulator.dtypes import compute_dtype

BOUNDS = ("compute", "memory", "fixed")  # the labels, in the order ties are broken


class Work(NamedTuple):
    """What kernels do and where their time goes (module docstring): FLOPs, HBM bytes, and the seconds limited by
    compute, by memory and by neither. ``+`` and ``*`` (by a number) add and scale them field by field — not the
    tuple's concatenation and repetition: a tuple, for speed, as one is built per kernel while bounds are recorded —
    so a group of kernels is the sum of its own, exactly."""

    flops: float = 0.0
    hbm_bytes: float = 0.0
    compute_s: float = 0.0
    memory_s: float = 0.0
    fixed_s: float = 0.0

    def __add__(self, other: Work) -> Work:  # type: ignore[override]  # field by field (class docstring)
        return Work(self[0] + other[0], self[1] + other[1], self[2] + other[2], self[3] + other[3],
                    self[4] + other[4])

    def __sub__(self, other: Work) -> Work:
        return Work(self[0] - other[0], self[1] - other[1], self[2] - other[2], self[3] - other[3],
                    self[4] - other[4])

    def __mul__(self, factor: float) -> Work:  # type: ignore[override]  # a scaling (class docstring)
        return Work(self[0] * factor, self[1] * factor, self[2] * factor, self[3] * factor, self[4] * factor)

    @property
    def seconds(self) -> float:
        """The time the parts add up to."""
        return self.compute_s + self.memory_s + self.fixed_s

    @property
    def bound(self) -> str:
        """``compute``, ``memory`` or ``fixed``: the largest part (ties in that order)."""
        parts = (self.compute_s, self.memory_s, self.fixed_s)
        return BOUNDS[parts.index(max(parts))]


def fixed(seconds: float) -> Work:
    """Seconds that neither rate changes."""
    return Work(fixed_s=seconds)


def smooth_max_work(p: float, compute_s: float, memory_s: float, serial_s: float = 0.0, flops: float = 0.0,
                    hbm_bytes: float = 0.0, fixed_s: float = 0.0) -> Work:
    """The smooth maximum ``(compute^p + memory^p + serial^p)^(1/p)`` split by Euler's rule (module docstring): each
    term ``t`` takes ``t^p / M^(p−1)``; the serial latency is fixed. ``flops`` and ``hbm_bytes``: the kernel's work;
    ``fixed_s``: its fixed costs besides (launch floor, per-item costs)."""
    total = (compute_s**p + memory_s**p + serial_s**p) ** (1 / p)
    if total <= 0:
        return Work(flops, hbm_bytes, fixed_s=fixed_s)
    scale = total ** (1 - p)
    return Work(flops, hbm_bytes, compute_s**p * scale, memory_s**p * scale, serial_s**p * scale + fixed_s)


def memory_kernel_work(nbytes: float, bandwidth: float, overhead_s: float) -> Work:
    """A memory-bound kernel: ``nbytes`` at ``bandwidth`` bytes/s, plus its launch floor (none for no bytes)."""
    return Work(hbm_bytes=nbytes, memory_s=nbytes / bandwidth, fixed_s=overhead_s) if nbytes > 0 else Work()


def gemm_peak(hardware: HardwareSpec, weight_dtype: str) -> tuple[str, float]:
    """The spec sheet's dense peak that an iteration's FLOPs are measured against: the tensor-core format its GEMMs
    compute in (:func:`simulator.dtypes.compute_dtype` of the weights: fp8 and int8 W8A8, fp4 W4A4, the rest 16-bit;
    fp8_block on the fp8 peak; a format the GPU lacks on its 16-bit peak) — its name and FLOP/s per GPU."""
    math_dtype = compute_dtype(weight_dtype)
    if not hardware.has_peak(math_dtype):
        math_dtype = "bf16"
    name = "fp8" if math_dtype == "fp8_block" else math_dtype
    return name, hardware.peak_flops(math_dtype)
