"""Per-kernel timings measured inside the serving frameworks (the format of ``../shared/data/kernels``:
``<gpu>/<op>/<framework>/<version>/<table>.parquet``, latency in ms per call).

Covered so far: GEMMs (``gemm/*/gemm_perf``: bf16, fp8 and fp8_block W8A8 by m, n, k) predicted with
:class:`simulator.cost.gemm.GemmModel` (fp8_block at the fp8 peak), and NCCL all-reduce (``comm/nccl/*/nccl_perf``;
``message_size`` is in elements of ``nccl_dtype``: 2^28 half elements at TP2 take 1.69 ms, i.e. 318 GB/s of a
450 GB/s link, where bytes would mean an implausible 159 GB/s) predicted with :func:`simulator.cost.collective_time`.
Only shapes a served model runs are kept (n, k ≥ 256). vLLM's fp8_block table is left out: its floor is 55–151 µs for
every shape, far above the same GEMM in the other frameworks (2.5–4 µs), so it times something besides the kernel.
Attention, MLA, MoE and the other collectives are not predicted from these tables yet.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simulator.catalog import load_hardware
from simulator.cost.collectives import collective_time
from simulator.cost.gemm import GemmModel
from simulator.fidelity.errors import ape

GPUS = {"a100_sxm": "a100-80gb-sxm", "h100_sxm": "h100-sxm"}
GEMM_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "fp8": "fp8", "fp8_block": "fp8"}
NCCL_BYTES = {"half": 2, "int8": 1}


def gemm_kernel_errors(kernels_dir: Path) -> pd.DataFrame:
    """One row per measured GEMM: gpu, framework, dtype, m, n, k, measured and predicted seconds, error."""
    frames = []
    for path in sorted(kernels_dir.glob("*/gemm/*/*/gemm_perf.parquet")):
        gpu, framework = path.parts[-5], path.parts[-3]
        if gpu not in GPUS:
            continue
        table = pd.read_parquet(path, columns=["gemm_dtype", "m", "n", "k", "latency"])
        table = table[(table["n"] >= 256) & (table["k"] >= 256) & table["gemm_dtype"].isin(GEMM_DTYPES)]
        if framework == "vllm":
            table = table[table["gemm_dtype"] != "fp8_block"]
        hardware = load_hardware(GPUS[gpu])
        for dtype, rows in table.groupby("gemm_dtype"):
            predicted = GemmModel(hardware, GEMM_DTYPES[dtype]).times(
                rows["m"].to_numpy(float), rows["n"].to_numpy(float), rows["k"].to_numpy(float))
            frames.append(pd.DataFrame({
                "gpu": gpu, "framework": framework, "dtype": dtype, "m": rows["m"].to_numpy(),
                "n": rows["n"].to_numpy(), "k": rows["k"].to_numpy(), "measured_s": rows["latency"].to_numpy() * 1e-3,
                "predicted_s": predicted,
            }))
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["gpu", "framework", "dtype", "m", "n", "k", "measured_s", "predicted_s"])
    frame["error"] = ape(frame["predicted_s"], frame["measured_s"])
    return frame


def nccl_kernel_errors(kernels_dir: Path) -> pd.DataFrame:
    """One row per measured NCCL all-reduce: gpu, GPUs, bytes, measured and predicted seconds, error."""
    frames = []
    for path in sorted(kernels_dir.glob("*/comm/nccl/*/nccl_perf.parquet")):
        gpu = path.parts[-5]
        if gpu not in GPUS:
            continue
        table = pd.read_parquet(path)
        table = table[(table["op_name"] == "all_reduce") & table["nccl_dtype"].isin(NCCL_BYTES)]
        hardware = load_hardware(GPUS[gpu])
        nbytes = table["message_size"].to_numpy(float) * table["nccl_dtype"].map(NCCL_BYTES).to_numpy(float)
        gpus = table["num_gpus"].to_numpy(int)
        predicted = np.array([collective_time(hardware, "all_reduce", int(n), b) for n, b in zip(gpus, nbytes,
                                                                                                  strict=True)])
        frames.append(pd.DataFrame({"gpu": gpu, "op": "all_reduce", "gpus": gpus, "bytes": nbytes,
                                    "measured_s": table["latency"].to_numpy() * 1e-3, "predicted_s": predicted}))
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["gpu", "op", "gpus", "bytes", "measured_s", "predicted_s"])
    frame["error"] = ape(frame["predicted_s"], frame["measured_s"])
    return frame
