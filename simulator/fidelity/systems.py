"""The data's names, as its source (aiconfigurator) writes them, for what the simulator names otherwise: the systems
it measured — a silicon row's ``system`` and a kernel-table folder (``kernels/<system>/...``) alike — with the
hardware profile each is priced with, and the weight formats of its rows and GEMM tables. A system measured nowhere
in ``../shared/data`` yet (H200, Blackwell) is its profile: its spec sheet with its generation's fit, so another
machine's tables or runs of it are validated, never skipped."""

from simulator.dtypes import DTYPE_ALIASES

SYSTEMS: dict[str, str] = {
    "a100_sxm": "a100-80gb-sxm", "h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200",
    "b300_sxm": "b300", "gb200": "gb200", "gb300": "gb300", "l40s": "l40s",
}
DEFAULT_KERNEL_GPU = "h100_sxm"  # the kernel-table folder `llmsim calibrate --kernels` fits when --gpu names none

# a weight format (a silicon row's gemm_quant_mode or precision, a GEMM table's gemm_dtype) -> the simulator's: besides
# plain names, the source's quant modes — fp8_static and fp8_ootb are W8A8 fp8 too (static scales; the TensorRT
# engine path), sq SmoothQuant's W8A8 int8, int4_wo weight-only int4, and a bare "fp4" NVIDIA's nvfp4, as the API
# reads it too (simulator.dtypes.DTYPE_ALIASES; int8_wo, weight-only int8, has no counterpart here)
WEIGHT_FORMATS: dict[str, str] = {
    "bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "fp8": "fp8", "fp8_static": "fp8",
    "fp8_ootb": "fp8", "fp8_block": "fp8_block", "int8": "int8", "sq": "int8", "int4": "int4", "int4_wo": "int4",
    "nvfp4": "nvfp4", "mxfp4": "mxfp4", **DTYPE_ALIASES,
}
