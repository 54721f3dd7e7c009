"""Numeric formats: bytes per element, and which peak FLOP/s table entry a format computes with."""

BYTES_PER_ELEMENT: dict[str, float] = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


def bytes_per_element(dtype: str) -> float:
    """Storage bytes of one element of ``dtype`` (int4 packs two per byte)."""
    return BYTES_PER_ELEMENT[dtype]


def activation_dtype(weight_dtype: str) -> str:
    """Activations (and, by default, the KV cache) stay 16-bit: fp16 with fp16 weights, bf16 otherwise."""
    return "fp16" if weight_dtype == "fp16" else "bf16"


def compute_dtype(weight_dtype: str) -> str:
    """Which peak a GEMM runs at: fp8 and int8 are W8A8 (their own tensor-core peak); int4 is weight-only
    (dequantised in the kernel, 16-bit math)."""
    return weight_dtype if weight_dtype in ("fp8", "int8") else activation_dtype(weight_dtype)
