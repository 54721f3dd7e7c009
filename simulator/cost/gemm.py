"""Kernel-level costs: GEMMs with a smooth roofline knee, and memory-bound (elementwise) kernels.

A GEMM (m × k)·(k × n) of activations (``a`` bytes per element) and weights (``w`` bytes per element):

    t_c = 2 · ceil(m / tile)·tile · n · k / (peak FLOP/s × flops_efficiency)      (rows are computed in whole tiles)
    t_m = ((m·k + m·n) · a + k·n · w) / (HBM bytes/s × bandwidth_efficiency)
    t_k = k_latency_ns · min(k, split_k)                                          (one output tile's main loop)
    t   = (t_c^p + t_m^p + t_k^p)^(1/p) + kernel_overhead + t_f + t_q             (p = knee)

(the hardware profile's ``fit.gemm``, with ``fit.bandwidth_efficiency`` and ``fit.kernel_overhead_us``).

The smooth maximum models the knee around the ridge point: a GEMM near it is neither purely compute- nor purely
memory-bound and takes longer than either bound alone. ``t_k`` is the serial latency of one thread block walking k
(load a k-slice, feed the tensor cores, next): a small GEMM has too few output tiles to hide it, so its time grows
with k whatever n is (H100, m ≤ 16, n ≤ 1,024: 3.0 µs at k = 256, 4.0 at 1,024, 6.0 at 2,560); a large GEMM hides it
behind its compute or memory time. The 16-bit library splits a long k over more thread blocks (``gemm.split_k``:
a block walks at most that much of it; H100, one row through 256 columns: ~6 µs from k = 3,072 to 12,288), while
the frameworks' kernels for quantised weights do not (their fp8 time grows with k to 65,536: fp8_block ~1.1 ns per
element), so the cap holds for 16-bit weights only (pooled over formats, a cap anywhere up to k = 32,768 had fitted
no better than none). The peak is the one of the weight format's
compute (:func:`simulator.dtypes.compute_dtype`) at that format's fitted fraction (``gemm.flops_efficiency_by_dtype``):
fp8, fp8_block and int8 weights run W8A8 at their tensor-core peak, and their activations are quantised first, one
pass over them: t_q = m·k·(a + q) / (HBM bytes/s × bandwidth_efficiency) + quantize_overhead (q bytes per quantised
element); int4 and mxfp4 weights (and nvfp4 on GPUs without FP4 tensor cores) are dequantised to 16-bit math.

A format whose GEMMs run kernels of their own (``gemm.kernel_by_dtype``: SmoothQuant's W8A8 int8 with its per-token
scales, a weight-only int4 kernel dequantising in its main loop) computes its rows in its own tiles and walks k at
its own latency (neither splits k), and pays ``t_f``, its fixed work beyond the kernel floor (prologue, scales); the
others have t_f = 0. On the A100, TensorRT-LLM's int4 kernel computes 8 rows where the 16-bit library pads to 64 —
which had priced one row of int4 through 8,192 × 8,192 weights at its 16-bit math, twice its weight read — and walks
k at 2.4 ns per element (its one-row time grows from 10 µs at k = 256 to 50 µs at 16,384 through 256 columns).

Fitted per GPU generation (:mod:`simulator.catalog.generations`). Ampere, on ``../shared/data/calibration/a100_ops``
(QKV, O, MLP-up, MLP-down of 8 models, TP 1–8, 1–32k tokens, 15,300 timings): flops_efficiency 0.73,
bandwidth_efficiency 0.84, p = 2, tile 64, overhead 6 µs give a median absolute error of 4.8% and p90 13%; a plain
max(t_c, t_m) with flat factors gives 9.4% and 31%. Hopper, on the H100 kernel tables of three frameworks: see
``llmsim validate`` (the frameworks' kernels differ among themselves by 10–40% on small GEMMs, which one set of
parameters per GPU cannot follow); the A100's int8 and int4 kernels on TensorRT-LLM's tables of those formats
(:func:`simulator.fidelity.kernel_fit.fit_format_kernels`).
"""

from __future__ import annotations

import math

import numpy as np

from simulator.catalog import HardwareSpec, resolve_hardware
from simulator.cost.work import Work, memory_kernel_work, smooth_max_work
from simulator.dtypes import activation_dtype, bytes_per_element, compute_dtype, resolve_dtype


def gemm_time(hardware: str | HardwareSpec, m: float, n: float, k: float, dtype: str = "bf16") -> float:
    """Seconds for an (m × k)·(k × n) GEMM on one GPU with weights in ``dtype`` (0 for an empty one): bf16, fp16,
    fp8, fp8_block, int8, int4, mxfp4, nvfp4 or fp4 (NVFP4); another name is a ValueError."""
    hw = resolve_hardware(hardware)
    return GemmModel(hw, resolve_dtype(dtype)).time(m, n, k)


class GemmModel:
    """:func:`gemm_time` with the hardware's constants resolved once (the simulator's hot path uses this)."""

    __slots__ = ("a", "bandwidth", "flops", "format_overhead", "k_latency", "k_split", "overhead", "p",
                 "quantize_bytes", "quantize_overhead", "tile", "w")

    def __init__(
        self, hardware: HardwareSpec, dtype: str = "bf16", compute_scale: float = 1.0, memory_scale: float = 1.0,
        fused_quantization: bool = False,
    ) -> None:
        """``compute_scale``/``memory_scale``: how close a serving engine's kernels come to the best achievable;
        ``fused_quantization``: the engine quantises a W8A8 / W4A4 GEMM's activations inside the kernel before it
        (the norm, the gated activation), so the GEMM pays no quantisation pass of its own."""
        math_dtype = compute_dtype(dtype)
        self.flops = hardware.achievable_flops(math_dtype) * compute_scale
        self.bandwidth = hardware.achievable_bandwidth * memory_scale
        self.w = bytes_per_element(dtype)
        self.a = bytes_per_element(activation_dtype(dtype))
        gemm = hardware.fit.gemm
        self.p = gemm.knee
        self.overhead = hardware.fit.kernel_overhead_us * 1e-6  # the kernel floor (also the memory-bound kernels')
        # a quantised format's own kernels where fitted: their row tile, main-loop latency and fixed work
        kernel = gemm.kernel_by_dtype.get(dtype)  # type: ignore[call-overload]  # any name: None if unfitted
        self.tile = kernel.tile_m if kernel and kernel.tile_m else gemm.tile_m
        k_latency = kernel.k_latency_ns if kernel and kernel.k_latency_ns is not None else gemm.k_latency_ns
        self.k_latency = k_latency * 1e-9
        self.format_overhead = kernel.overhead_us * 1e-6 if kernel else 0.0
        # 16-bit weights run the 16-bit library's GEMMs, which split a long k; quantised weights run kernels that do not
        self.k_split = gemm.split_k if self.w == 2 and gemm.split_k else math.inf
        quantised = math_dtype not in ("bf16", "fp16") and hardware.has_peak(math_dtype) and not fused_quantization
        self.quantize_bytes = self.a + bytes_per_element(dtype) if quantised else 0.0
        self.quantize_overhead = gemm.quantize_overhead_us * 1e-6 if quantised else 0.0

    def time(self, m: float, n: float, k: float) -> float:
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        rows = math.ceil(m / self.tile) * self.tile
        return self.combine(
            2 * rows * n * k / self.flops, ((m * k + m * n) * self.a + k * n * self.w) / self.bandwidth,
            self.k_latency * min(k, self.k_split),
        ) + self.format_overhead + self.quantize_time(m, k)

    def work(self, m: float, n: float, k: float) -> Work:
        """:meth:`time` as :class:`~simulator.cost.work.Work`: 2·m·n·k FLOPs, the bytes of t_m (and of the
        quantisation pass), t_c / t_m / t_k split by Euler's rule, the fixed costs fixed."""
        if m <= 0 or n <= 0 or k <= 0:
            return Work()
        rows = math.ceil(m / self.tile) * self.tile
        nbytes = (m * k + m * n) * self.a + k * n * self.w
        work = smooth_max_work(self.p, 2 * rows * n * k / self.flops, nbytes / self.bandwidth,
                               self.k_latency * min(k, self.k_split), 2 * m * n * k, nbytes,
                               self.overhead + self.format_overhead)
        if self.quantize_bytes:
            work += memory_kernel_work(m * k * self.quantize_bytes, self.bandwidth, self.quantize_overhead)
        return work

    def quantize_time(self, m, k):
        """The activation-quantisation pass of a W8A8 GEMM (0 for 16-bit math); scalars or arrays."""
        if not self.quantize_bytes:
            return 0.0
        return m * k * self.quantize_bytes / self.bandwidth + self.quantize_overhead

    def times(self, m: np.ndarray, n: np.ndarray, k: np.ndarray) -> np.ndarray:
        """:meth:`time` for arrays of shapes (all positive)."""
        rows = np.ceil(m / self.tile) * self.tile
        return self.combine(
            2 * rows * n * k / self.flops, ((m * k + m * n) * self.a + k * n * self.w) / self.bandwidth,
            self.k_latency * np.minimum(k, self.k_split),
        ) + self.format_overhead + self.quantize_time(m, k)

    def combine(self, compute_s, memory_s, serial_s=0.0):
        """Smooth maximum of a kernel's compute, memory and serial (main-loop) times, plus the per-kernel overhead;
        scalars or arrays."""
        p = self.p
        return (compute_s**p + memory_s**p + serial_s**p) ** (1 / p) + self.overhead

    def memory_kernel(self, nbytes: float) -> float:
        """A memory-bound kernel (norm, activation, residual add, embedding gather)."""
        return nbytes / self.bandwidth + self.overhead if nbytes > 0 else 0.0

    def memory_kernel_work(self, nbytes: float) -> Work:
        """:meth:`memory_kernel` as :class:`~simulator.cost.work.Work`."""
        return memory_kernel_work(nbytes, self.bandwidth, self.overhead)
