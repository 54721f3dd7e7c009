"""Per-kernel timings measured inside the serving frameworks (the format of ``../shared/data/kernels``:
``<gpu>/<op>/<framework>/<version>/<table>.parquet``, latency in ms per call).

Covered: GEMMs (``gemm/*/gemm_perf``: bf16, fp8 and fp8_block W8A8 by m, n, k) predicted with
:class:`simulator.cost.gemm.GemmModel`; NCCL all-reduce, all-gather, reduce-scatter and all-to-all
(``comm/nccl/*/nccl_perf``; ``message_size`` is in elements of ``nccl_dtype``: 2^28 half elements at TP2 take
1.69 ms, i.e. 318 GB/s of a 450 GB/s link, where bytes would mean an implausible 159 GB/s) predicted with
:func:`simulator.cost.collective_time`; prefill and decode attention (``attention/*/context_attention_perf``,
``generation_attention_perf``, bf16 queries; a decode row's context is ``isl + step`` tokens) predicted with
:func:`simulator.cost.attention_time`. Only GEMM shapes a served model runs are kept (n, k ≥ 256). vLLM's fp8_block
table is left out: its floor is 55–151 µs for every shape, far above the same GEMM in the other frameworks
(2.5–4 µs), so it times something besides the kernel. MLA and MoE are not predicted from these tables yet.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simulator.catalog import load_hardware
from simulator.cost.attention import attention_time
from simulator.cost.collectives import collective_time
from simulator.cost.gemm import GemmModel
from simulator.fidelity.errors import ape

GPUS = {"a100_sxm": "a100-80gb-sxm", "h100_sxm": "h100-sxm"}
GEMM_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "fp8": "fp8", "fp8_block": "fp8_block"}
NCCL_BYTES = {"half": 2, "int8": 1}
NCCL_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "alltoall": "all_to_all"}
KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}


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
    """One row per measured NCCL collective: gpu, op, GPUs, bytes, measured and predicted seconds, error."""
    frames = []
    for path in sorted(kernels_dir.glob("*/comm/nccl/*/nccl_perf.parquet")):
        gpu = path.parts[-5]
        if gpu not in GPUS:
            continue
        table = pd.read_parquet(path)
        table = table[table["op_name"].isin(NCCL_OPS) & table["nccl_dtype"].isin(NCCL_BYTES)]
        hardware = load_hardware(GPUS[gpu])
        nbytes = table["message_size"].to_numpy(float) * table["nccl_dtype"].map(NCCL_BYTES).to_numpy(float)
        gpus = table["num_gpus"].to_numpy(int)
        ops = table["op_name"].map(NCCL_OPS).to_numpy()
        predicted = np.array([collective_time(hardware, op, int(n), b)
                              for op, n, b in zip(ops, gpus, nbytes, strict=True)])
        frames.append(pd.DataFrame({"gpu": gpu, "op": ops, "gpus": gpus, "bytes": nbytes,
                                    "measured_s": table["latency"].to_numpy() * 1e-3, "predicted_s": predicted}))
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["gpu", "op", "gpus", "bytes", "measured_s", "predicted_s"])
    frame["error"] = ape(frame["predicted_s"], frame["measured_s"])
    return frame


def attention_kernel_errors(kernels_dir: Path) -> pd.DataFrame:
    """One row per measured attention kernel (bf16 queries): gpu, framework, phase, shape, measured and predicted
    seconds, error."""
    frames = []
    for path in sorted(kernels_dir.glob("*/attention/*/*/*_attention_perf.parquet")):
        gpu, framework = path.parts[-5], path.parts[-3]
        phase = {"context": "prefill", "generation": "decode"}.get(path.stem.split("_")[0])
        if gpu not in GPUS or phase is None:
            continue
        table = pd.read_parquet(path)
        table = table[(table["attn_dtype"] == "bfloat16") & table["kv_cache_dtype"].isin(KV_DTYPES)]
        windows = table["window_size"] if "window_size" in table else pd.Series(0, index=table.index)
        seq = table["isl"] + (table["step"] if phase == "decode" else 0)
        hardware = load_hardware(GPUS[gpu])
        predicted = [
            attention_time(hardware, phase, int(b), int(s), int(h), int(g), int(d), KV_DTYPES[kv], int(w))
            for b, s, h, g, d, kv, w in zip(table["batch_size"], seq, table["num_heads"],
                                            table["num_key_value_heads"], table["head_dim"],
                                            table["kv_cache_dtype"], windows, strict=True)
        ]
        frames.append(pd.DataFrame({
            "gpu": gpu, "framework": framework, "phase": phase, "batch": table["batch_size"].to_numpy(),
            "seq_len": seq.to_numpy(), "heads": table["num_heads"].to_numpy(),
            "kv_heads": table["num_key_value_heads"].to_numpy(), "head_dim": table["head_dim"].to_numpy(),
            "kv_dtype": table["kv_cache_dtype"].to_numpy(), "window": windows.to_numpy(),
            "measured_s": table["latency"].to_numpy() * 1e-3, "predicted_s": np.array(predicted),
        }))
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["gpu", "framework", "phase", "measured_s", "predicted_s"])
    frame["error"] = ape(frame["predicted_s"], frame["measured_s"])
    return frame
