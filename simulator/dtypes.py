"""Numeric formats: bytes per element, and which peak FLOP/s table entry a format computes with.

``fp8_block`` is DeepSeek-style FP8 with one fp32 scale per 128 × 128 weight block (and per 1 × 128 activation
group): 1 + 4/16384 bytes per weight. The 4-bit floating formats: ``nvfp4`` (NVIDIA: one fp8 scale per 16 values,
0.5 + 1/16 bytes; the per-tensor fp32 scale is negligible) runs W4A4 — its activations quantised to NVFP4 too, as
ModelOpt's NVFP4 checkpoints declare — on FP4 tensor cores (``fp4`` peak) where the GPU has them; ``mxfp4`` (OCP
microscaling, as gpt-oss ships its experts: one 8-bit scale per 32 values, 0.5 + 1/32 bytes) is weight-only, the
weights dequantised to 16-bit math (the kernel tables' ``w4a16_mxfp4``: priced W4A4 at the FP4 peak, B200's fused-MoE
rows came out at 0.3–0.6 of their measured time from 512 tokens up). An engine may instead run MXFP4
experts against MXFP8 activations (``mxfp4_mxfp8``, the tables' ``w4a8_mxfp4_mxfp8``: an 8-bit value and one 8-bit
scale per 32, 1 + 1/32 bytes each) on the FP8 tensor cores — Blackwell's MMA takes 4-bit by 8-bit operands at the
FP8 rate (:attr:`simulator.catalog.engines.EngineProfile.mxfp4_experts_by_generation`); that is a kernel's format,
not a checkpoint's, so it is not a weight format a configuration names.
"""

BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "fp8_block": 1.0 + 4 / 16384, "int8": 1.0, "int4": 0.5,
    "mxfp4": 0.5 + 1 / 32, "nvfp4": 0.5 + 1 / 16,
    # a fused-MoE kernel's format (module docstring): MXFP4 weights against MXFP8 activations
    "mxfp4_mxfp8": 0.5 + 1 / 32, "mxfp8": 1 + 1 / 32,
}
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "fp8_block", "int8", "int4", "mxfp4", "nvfp4")
# other names of a format: "fp4", as spec sheets name the FP4 tensor cores' peak, is NVIDIA's NVFP4
DTYPE_ALIASES = {"fp4": "nvfp4"}


def resolve_dtype(name: str, field: str = "dtype") -> str:
    """The format ``name`` stands for (:data:`DTYPE_ALIASES` resolved) — of weights, or of a KV cache; a name that is
    none is a ValueError naming ``field``, the value and what is allowed."""
    resolved = DTYPE_ALIASES.get(name, name)
    if resolved not in WEIGHT_DTYPES:
        allowed = ", ".join((*WEIGHT_DTYPES, *DTYPE_ALIASES))
        raise ValueError(f"{field}: {name!r} is not a numeric format llmsim prices (allowed: {allowed})")
    return resolved


def bytes_per_element(dtype: str) -> float:
    """Storage bytes of one element of ``dtype`` (int4 and fp4 pack two per byte, plus fp4's block scales)."""
    return BYTES_PER_ELEMENT[dtype]


def activation_dtype(weight_dtype: str) -> str:
    """Activations (and, by default, the KV cache) stay 16-bit: fp16 with fp16 weights, bf16 otherwise; the MXFP4 x
    MXFP8 kernel format's are MXFP8."""
    if weight_dtype == "mxfp4_mxfp8":
        return "mxfp8"
    return "fp16" if weight_dtype == "fp16" else "bf16"


def compute_dtype(weight_dtype: str) -> str:
    """Which peak a GEMM runs at: fp8, fp8_block and int8 are W8A8 (their own tensor-core peak), as is MXFP4 x MXFP8
    (the fp8 peak); nvfp4 runs W4A4 at the ``fp4`` peak on GPUs with FP4 tensor cores
    (:meth:`simulator.catalog.HardwareSpec.achievable_flops` falls back to 16-bit math on the others, which dequantise
    the weights); int4 and mxfp4 are weight-only (dequantised in the kernel, 16-bit math)."""
    if weight_dtype == "nvfp4":
        return "fp4"
    if weight_dtype == "mxfp4_mxfp8":
        return "fp8"
    return weight_dtype if weight_dtype in ("fp8", "fp8_block", "int8") else activation_dtype(weight_dtype)
