"""Numeric formats: bytes per element, and which peak FLOP/s table entry a format computes with."""

from typing import Literal

Dtype = Literal["fp32", "fp16", "bf16", "fp8", "int8", "int4"]

BYTES_PER_ELEMENT: dict[str, float] = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


def bytes_per_element(dtype: str) -> float:
    """Storage bytes of one element of ``dtype`` (int4 packs two per byte)."""
    return BYTES_PER_ELEMENT[dtype]
