"""Per-kernel timings measured inside the serving frameworks (the format of ``../shared/data/kernels``:
``<gpu>/<op>/<framework>/<version>/<table>.parquet``, latency in ms per call).

Covered: GEMMs (``gemm/*/gemm_perf``: bf16, fp8 and fp8_block W8A8 by m, n, k) predicted with
:class:`simulator.cost.gemm.GemmModel`; NCCL all-reduce, all-gather, reduce-scatter and all-to-all
(``comm/nccl/*/nccl_perf``; ``message_size`` is in elements of ``nccl_dtype``: 2^28 half elements at TP2 take
1.69 ms, i.e. 318 GB/s of a 450 GB/s link, where bytes would mean an implausible 159 GB/s) predicted with
:func:`simulator.cost.collective_time`; the frameworks' own all-reduce kernels
(``comm/<framework>/*/custom_allreduce_perf``, CUDA-graph rows; ``message_size`` in bfloat16 elements) predicted as
each framework's engine profile runs them; prefill and decode attention (``attention/*/context_attention_perf``,
``generation_attention_perf``, bf16 queries; a decode row's context is ``isl + step`` tokens) predicted with
:func:`simulator.cost.attention.attention_time`. Only GEMM shapes a served model runs are kept (n, k ≥ 256).
vLLM's fp8_block table is left out: its floor is 55–151 µs for every shape, far above the same GEMM in the other
frameworks (2.5–4 µs), so it times something besides the kernel. Fused-MoE layers (``moe/*/*/moe_perf``, balanced
routing: ``num_tokens`` tokens each to ``topk`` of ``num_experts`` experts of ``inter_size``, by ``moe_tp_size`` and
``moe_ep_size``) are predicted with :class:`simulator.cost.moe.ExpertsModel` (each framework's with its own kernel
for the format where its engine profile has one, ``moe_by_generation``), the rows without expert parallelism
(``moe_ep_size`` 1; what ``num_tokens`` means per expert-parallel rank is not stated, and expert parallelism is not
simulated yet); rows that would have read the experts
their tokens touch faster than the GPU's HBM peak are left out (SGLang's and vLLM's DeepSeek-V3 shape, 7168 × 2048
× 256 experts: 5.5 TB/s implied on a 3.35 TB/s H100, where TensorRT-LLM's same shape implies 2.9; the table must
time fewer or smaller experts than it names). MLA attention kernels (``mla/*/*/context_mla_perf``,
``generation_mla_perf``: ``num_heads`` per GPU — the rows pair 128/tp heads with ``tp_size`` — of DeepSeek-V3's
latent attention, kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128; prefill rows
decompressed, decode rows absorbed over the latent) are predicted with the attention model at the shapes
:meth:`simulator.catalog.layers.LatentAttention.shapes` gives an MLA layer, with the attention parameters fitted on the
multi-head tables (nothing is fitted on these). vLLM's MLA tables are left out like its fp8_block GEMMs: their floor is
110–180 µs for a single token, ten times the same kernel in SGLang and TensorRT-LLM (12–16 µs). Decode attention
rows that would have read their K/V cache faster than the GPU's HBM peak are left out as the MoE rows above: 351 of
TensorRT-LLM's A100 table (up to 3.5 TB/s implied on a 2.04 TB/s A100, at large batches of long contexts, where its
H100 table's rows stay under 0.93 of that GPU's peak: its cache pool must be smaller than the batch it names, its
blocks read again from L2) and 23 of SGLang's H100 table (head width 192, long contexts).

Routing skew (:func:`moe_routing_kernel_errors`): TensorRT-LLM's MoE rows with expert parallelism, balanced and
``power_law_<α>``. Its collector draws every expert's load from a power law of exponent α on ``[1, 0.8·T]``
(``[0.01, 2]`` when ``T·k ≤ E``), scales the draws to ``T·k`` assignments and times the busiest rank; its balanced
rows take ``1/ep`` of the EP-1 time at large T, so ``num_tokens`` counts every rank's tokens. The prediction takes
the law's coefficient of variation, ``sqrt(m2/m1² − 1)`` with ``m_j = ∫ x^(j−α) dx`` over the interval, as
``expert_load_cv`` (:func:`simulator.cost.moe.busiest_rank_factor`, no sampling term: the collector fixes the total).
SGLang's and vLLM's EP rows are left out: at EP 2 they time the same as at EP 1, and no reading of ``num_tokens``
makes both scale. TensorRT-LLM's wide-EP rows (:func:`wide_ep_kernel_errors`: EP 2–256, power-law routing, with
and without EPLB's expert slots) are predicted the same way, EPLB rows with ``slots``
(:func:`simulator.cost.moe.busiest_rank_factor`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.catalog import HardwareSpec, load_hardware
from simulator.catalog.engines import EngineProfile, load_engine
from simulator.catalog.hardware import with_fit
from simulator.catalog.hardware_fit import ExchangeFit
from simulator.catalog.layers import LatentAttention
from simulator.cost.attention import AttentionModel, decode_context, longest_block, query_tiles
from simulator.cost.collectives import collective_time
from simulator.cost.expert_exchange import deepep_time
from simulator.cost.gemm import GemmModel
from simulator.cost.moe import ExpertsModel
from simulator.cost.roofline import engine_network, framework_all_reduce_time
from simulator.dtypes import bytes_per_element
from simulator.fidelity.errors import ape
from simulator.fidelity.systems import SYSTEMS, WEIGHT_FORMATS

GPUS = SYSTEMS  # a kernel-table folder -> its hardware profile (every system the data names, measured here or not)
GEMM_DTYPES = WEIGHT_FORMATS  # a GEMM table's gemm_dtype -> the simulator's weight format
NCCL_DTYPES = {"half": "fp16", "int8": "int8"}  # the tables' element types (their sizes: bytes_per_element)
NCCL_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "alltoall": "all_to_all"}
KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
MOE_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "w4a16_mxfp4": "mxfp4", "int4_wo": "int4",
              "nvfp4": "nvfp4", "w4a8_mxfp4_mxfp8": "mxfp4_mxfp8"}
MOE_COLUMNS = ["gpu", "framework", "dtype", "tokens", "hidden", "inter", "topk", "experts", "moe_tp", "moe_ep",
               "measured_s"]
# each table family's files and the values of its format columns its reader prices (:func:`left_out` counts the rest)
PRICED_FORMATS: dict[str, tuple[str, dict[str, Collection[str]]]] = {
    "GEMM": ("*/gemm/*/*/gemm_perf.parquet", {"gemm_dtype": GEMM_DTYPES}),
    "NCCL": ("*/comm/nccl/*/nccl_perf.parquet", {"op_name": NCCL_OPS, "nccl_dtype": NCCL_DTYPES}),
    "attention": ("*/attention/*/*/*_attention_perf.parquet", {"attn_dtype": ("bfloat16",),
                                                               "kv_cache_dtype": KV_DTYPES}),
    "MLA": ("*/mla/*/*/*_mla_perf.parquet", {"mla_dtype": ("bfloat16",), "kv_cache_dtype": KV_DTYPES}),
    "MoE": ("*/moe/*/*/moe_perf.parquet", {"moe_dtype": MOE_DTYPES}),
}


def _hardware(gpu: str, hardware: Mapping[str, HardwareSpec] | None) -> HardwareSpec:
    """The profile a table's GPU folder is predicted with: the override, else the catalog's."""
    return (hardware or {}).get(gpu) or load_hardware(GPUS[gpu])


def priced(table: pd.DataFrame, family: str) -> pd.Series:
    """Which rows of a ``family`` table its reader prices: every format column of :data:`PRICED_FORMATS` holding a
    priced value."""
    mask = pd.Series(True, index=table.index)
    for column, values in PRICED_FORMATS[family][1].items():
        mask &= table[column].isin(values)
    return mask


def left_out(kernels_dir: Path) -> list[str]:
    """What the kernel-table readers do not price, one line each, so that no table is dropped unsaid: a folder of a
    system :data:`GPUS` does not name, and per table family the rows whose format columns hold a value its reader
    does not price (:data:`PRICED_FORMATS`: another query or KV precision, a weight format or collective not
    modelled), counted by column and value."""
    import pyarrow.parquet as pq

    lines = [f"kernels/{folder.name}: a system the catalog does not name (known: {', '.join(GPUS)})"
             for folder in sorted(kernels_dir.iterdir()) if folder.is_dir() and folder.name not in GPUS]
    for family, (pattern, formats) in PRICED_FORMATS.items():
        rows = 0
        counts: Counter[str] = Counter()
        for path in sorted(kernels_dir.glob(pattern)):
            if path.parts[-5] not in GPUS:
                continue
            columns = [column for column in formats if column in pq.read_schema(path).names]
            table = pd.read_parquet(path, columns=columns)
            unpriced = pd.DataFrame({column: ~table[column].isin(formats[column]) for column in columns})
            rows += int(unpriced.any(axis=1).sum())
            for column in columns:
                counts.update({f"{column}={value}": count
                               for value, count in table.loc[unpriced[column], column].value_counts().items()})
        if rows:
            lines.append(f"{family}: {rows:,} row{'s' * (rows != 1)} in formats not priced ("
                         + ", ".join(f"{name}: {count:,}" for name, count in sorted(counts.items())) + ")")
    return lines


def _framework_engine(framework: str, engines: Mapping[str, EngineProfile] | None) -> EngineProfile | None:
    """The engine profile whose own kernels price ``framework``'s tables: its entry in ``engines``, or the shipped
    profile of that name when ``engines`` is None; None (the generation's pooled fit) otherwise."""
    return load_engine(framework) if engines is None else engines.get(framework)


def _with_errors(frame: pd.DataFrame, predicted: np.ndarray) -> pd.DataFrame:
    frame = frame.assign(predicted_s=predicted)
    frame["error"] = ape(frame["predicted_s"], frame["measured_s"])
    return frame


def gemm_kernel_table(kernels_dir: Path) -> pd.DataFrame:
    """One row per measured GEMM: gpu, framework, dtype (the table's name), m, n, k, measured seconds."""
    frames = []
    for path in sorted(kernels_dir.glob("*/gemm/*/*/gemm_perf.parquet")):
        gpu, framework = path.parts[-5], path.parts[-3]
        if gpu not in GPUS:
            continue
        table = pd.read_parquet(path, columns=["gemm_dtype", "m", "n", "k", "latency"])
        table = table[(table["n"] >= 256) & (table["k"] >= 256) & priced(table, "GEMM")]
        if framework == "vllm":
            table = table[table["gemm_dtype"] != "fp8_block"]
        frames.append(pd.DataFrame({
            "gpu": gpu, "framework": framework, "dtype": table["gemm_dtype"].to_numpy(), "m": table["m"].to_numpy(),
            "n": table["n"].to_numpy(), "k": table["k"].to_numpy(), "measured_s": table["latency"].to_numpy() * 1e-3,
        }))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["gpu", "framework", "dtype", "m", "n", "k", "measured_s"])


def gemm_kernel_errors(kernels_dir: Path, hardware: Mapping[str, HardwareSpec] | None = None,
                       table: pd.DataFrame | None = None,
                       engines: Mapping[str, EngineProfile] | None = None) -> pd.DataFrame:
    """:func:`gemm_kernel_table` with predicted seconds and the error (``hardware``: profiles by GPU folder): each
    framework's table at that framework's own GEMM rates on the GPU's generation (:meth:`EngineProfile.gemm_hardware`;
    ``engines`` as in :func:`attention_kernel_errors`: None the shipped profiles, ``{}`` the pooled fit)."""
    table = gemm_kernel_table(kernels_dir) if table is None else table
    predicted = np.zeros(len(table))
    for (gpu, framework, dtype), rows in table.groupby(["gpu", "framework", "dtype"]):
        engine, hw = _framework_engine(framework, engines), _hardware(gpu, hardware)
        model = GemmModel(engine.gemm_hardware(hw) if engine is not None else hw, GEMM_DTYPES[dtype])
        at = table.index.get_indexer(rows.index)
        predicted[at] = model.times(rows["m"].to_numpy(float), rows["n"].to_numpy(float), rows["k"].to_numpy(float))
    return _with_errors(table, predicted)


def nccl_kernel_table(kernels_dir: Path) -> pd.DataFrame:
    """One row per measured NCCL collective: gpu, op, GPUs, bytes, element type, measured seconds."""
    frames = []
    for path in sorted(kernels_dir.glob("*/comm/nccl/*/nccl_perf.parquet")):
        gpu = path.parts[-5]
        if gpu not in GPUS:
            continue
        table = pd.read_parquet(path)
        table = table[priced(table, "NCCL")]
        dtypes = table["nccl_dtype"].map(NCCL_DTYPES)
        nbytes = table["message_size"].to_numpy(float) * dtypes.map(bytes_per_element).to_numpy(float)
        frames.append(pd.DataFrame({"gpu": gpu, "op": table["op_name"].map(NCCL_OPS).to_numpy(),
                                    "gpus": table["num_gpus"].to_numpy(int), "bytes": nbytes,
                                    "dtype": dtypes.to_numpy(),
                                    "measured_s": table["latency"].to_numpy() * 1e-3}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["gpu", "op", "gpus", "bytes", "dtype", "measured_s"])


def nccl_kernel_errors(kernels_dir: Path, hardware: Mapping[str, HardwareSpec] | None = None,
                       table: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`nccl_kernel_table` with predicted seconds and the error."""
    table = nccl_kernel_table(kernels_dir) if table is None else table
    profiles = {gpu: _hardware(gpu, hardware) for gpu in table["gpu"].unique()}
    predicted = np.array([collective_time(profiles[gpu], op, int(n), b, dtype) for gpu, op, n, b, dtype in zip(
        table["gpu"], table["op"], table["gpus"], table["bytes"], table["dtype"], strict=True)])
    return _with_errors(table, predicted)


def custom_allreduce_kernel_table(kernels_dir: Path) -> pd.DataFrame:
    """One row per measured framework all-reduce under CUDA graphs (``comm/<framework>/*/custom_allreduce_perf``:
    the ``*_graph`` backend where a table has eager rows too; ``message_size`` in elements of ``allreduce_dtype``,
    bfloat16): gpu, framework, GPUs, bytes, measured seconds."""
    frames = []
    for path in sorted(kernels_dir.glob("*/comm/*/*/custom_allreduce_perf.parquet")):
        gpu, framework = path.parts[-5], path.parts[-3]
        if gpu not in GPUS:
            continue
        table = pd.read_parquet(path)
        if "backend" in table:
            table = table[table["backend"].str.endswith("graph")]
        table = table[table["allreduce_dtype"] == "bfloat16"]
        frames.append(pd.DataFrame({"gpu": gpu, "framework": framework, "gpus": table["num_gpus"].to_numpy(int),
                                    "bytes": table["message_size"].to_numpy(float) * 2,
                                    "measured_s": table["latency"].to_numpy() * 1e-3}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["gpu", "framework", "gpus", "bytes", "measured_s"])


def custom_allreduce_kernel_errors(kernels_dir: Path, hardware: Mapping[str, HardwareSpec] | None = None,
                                   engines: Mapping[str, EngineProfile] | None = None,
                                   table: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`custom_allreduce_kernel_table` predicted as each framework's engine profile runs an all-reduce
    (:func:`simulator.cost.roofline.framework_all_reduce_time`: its one-shot and two-shot kernels, NCCL above its
    largest message), with the error."""
    table = custom_allreduce_kernel_table(kernels_dir) if table is None else table
    predicted = np.zeros(len(table))
    for (gpu, framework), rows in table.groupby(["gpu", "framework"]):
        engine = (engines or {}).get(framework) or load_engine(framework)
        network = engine_network(_hardware(gpu, hardware), engine)
        kernels = engine.custom_allreduce(network.generation)
        predicted[table.index.get_indexer(rows.index)] = [
            framework_all_reduce_time(network, kernels, int(n), b)
            for n, b in zip(rows["gpus"], rows["bytes"], strict=True)]
    return _with_errors(table, predicted)


def attention_kernel_table(kernels_dir: Path) -> pd.DataFrame:
    """One row per measured attention kernel with bf16 queries: gpu, framework, phase, batch, seq_len (a decode
    row's context: ``isl + step``), heads, kv_heads, head_dim, kv_dtype, window, measured seconds (decode rows
    faster than reading their K/V cache at the HBM peak are dropped, see the module docstring)."""
    frames = []
    for path in sorted(kernels_dir.glob("*/attention/*/*/*_attention_perf.parquet")):
        gpu, framework = path.parts[-5], path.parts[-3]
        phase = {"context": "prefill", "generation": "decode"}.get(path.stem.split("_")[0])
        if gpu not in GPUS or phase is None:
            continue
        table = pd.read_parquet(path)
        table = table[priced(table, "attention")]
        windows = table["window_size"] if "window_size" in table else pd.Series(0, index=table.index)
        seq = table["isl"] + (table["step"] if phase == "decode" else 0)
        frame = pd.DataFrame({
            "gpu": gpu, "framework": framework, "phase": phase, "batch": table["batch_size"].to_numpy(),
            "seq_len": seq.to_numpy(), "heads": table["num_heads"].to_numpy(),
            "kv_heads": table["num_key_value_heads"].to_numpy(), "head_dim": table["head_dim"].to_numpy(),
            "kv_dtype": table["kv_cache_dtype"].map(KV_DTYPES).to_numpy(), "window": windows.to_numpy(),
            "measured_s": table["latency"].to_numpy() * 1e-3,
        })
        if phase == "decode":
            peak = load_hardware(GPUS[gpu]).memory_bandwidth_gb_per_s * 1e9
            frame = frame[frame["measured_s"] >= _cached_bytes(frame) / peak]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["gpu", "framework", "phase", "batch", "seq_len", "heads", "kv_heads", "head_dim", "kv_dtype",
                 "window", "measured_s"])


def _cached_bytes(frame: pd.DataFrame) -> np.ndarray:
    """K/V bytes a decode row's kernel reads: every sequence's context (its window's where shorter) × 2 · KV heads ·
    head width, at the cache's bytes per element."""
    context = decode_context(frame["seq_len"].to_numpy(float), frame["window"].to_numpy(float))
    per_element = frame["kv_dtype"].map(bytes_per_element).to_numpy(float)
    return frame["batch"].to_numpy(float) * context * 2 * frame["kv_heads"] * frame["head_dim"] * per_element


def attention_kernel_errors(kernels_dir: Path, hardware: Mapping[str, HardwareSpec] | None = None,
                            table: pd.DataFrame | None = None,
                            engines: Mapping[str, EngineProfile] | None = None) -> pd.DataFrame:
    """:func:`attention_kernel_table` with predicted seconds and the error: each framework's table with that
    framework's own kernels on the GPU's generation (:meth:`EngineProfile.attention_hardware`; ``engines``: the
    profiles by framework, default the shipped ones; ``{}``: the generation's pooled fit for every framework)."""
    table = attention_kernel_table(kernels_dir) if table is None else table
    predicted = np.zeros(len(table))
    for (gpu, framework, kv, phase), rows in table.groupby(["gpu", "framework", "kv_dtype", "phase"]):
        engine, hw = _framework_engine(framework, engines), _hardware(gpu, hardware)
        model = AttentionModel(engine.attention_hardware(hw, kv) if engine is not None else hw, kv)
        predicted[table.index.get_indexer(rows.index)] = model.kernel_times(
            phase, rows["batch"], rows["seq_len"], rows["heads"], rows["kv_heads"], rows["head_dim"], rows["window"])
    return _with_errors(table, predicted)


def _moe_tables(kernels_dir: Path, name: str, frameworks: tuple[str, ...] | None = None):
    """(gpu, framework, table) of every ``<gpu>/moe/<framework>/<version>/<name>.parquet`` of a known GPU (and,
    given ``frameworks``, of those frameworks), in path order."""
    for path in sorted(kernels_dir.glob(f"*/moe/*/*/{name}.parquet")):
        gpu, framework = path.parts[-5], path.parts[-3]
        if gpu in GPUS and (frameworks is None or framework in frameworks):
            yield gpu, framework, pd.read_parquet(path)


def moe_kernel_table(kernels_dir: Path) -> pd.DataFrame:
    """One row per measured fused-MoE layer with balanced routing and no expert parallelism: gpu, framework, dtype,
    tokens, hidden, inter, topk, experts, moe_tp, moe_ep, measured seconds (rows faster than reading their experts at
    the HBM peak are dropped, see the module docstring)."""
    frames = []
    for gpu, framework, table in _moe_tables(kernels_dir, "moe_perf"):
        table = table[(table["distribution"] == "balanced") & priced(table, "MoE")
                      & (table["moe_ep_size"] == 1)]
        frame = _moe_frame(table, gpu, framework)
        peak = load_hardware(GPUS[gpu]).memory_bandwidth_gb_per_s * 1e9
        frames.append(frame[frame["measured_s"] >= _expert_bytes(frame) / peak])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=MOE_COLUMNS)


def _moe_frame(table: pd.DataFrame, gpu: str, framework: str) -> pd.DataFrame:
    """A collector's MoE rows in :data:`MOE_COLUMNS` (latency ms -> seconds)."""
    return pd.DataFrame({
        "gpu": gpu, "framework": framework, "dtype": table["moe_dtype"].map(MOE_DTYPES).to_numpy(),
        "tokens": table["num_tokens"].to_numpy(), "hidden": table["hidden_size"].to_numpy(),
        "inter": table["inter_size"].to_numpy(), "topk": table["topk"].to_numpy(),
        "experts": table["num_experts"].to_numpy(), "moe_tp": table["moe_tp_size"].to_numpy(),
        "moe_ep": table["moe_ep_size"].to_numpy(), "measured_s": table["latency"].to_numpy() * 1e-3,
    })


def _expert_bytes(frame: pd.DataFrame) -> np.ndarray:
    """Weight bytes of the experts the rows' tokens touch on one GPU (balanced routing, gated experts)."""
    touched = np.minimum(frame["experts"], frame["tokens"] * frame["topk"]) / frame["moe_ep"]
    per_element = frame["dtype"].map(bytes_per_element)
    return (touched * 3 * frame["hidden"] * frame["inter"] / frame["moe_tp"] * per_element).to_numpy(float)


def moe_kernel_errors(kernels_dir: Path, hardware: Mapping[str, HardwareSpec] | None = None,
                      table: pd.DataFrame | None = None,
                      engines: Mapping[str, EngineProfile] | None = None) -> pd.DataFrame:
    """:func:`moe_kernel_table` (or ``table``) with predicted seconds and the error: balanced routing, the busiest
    expert-parallel rank at the rows' ``load_cv`` where the table has one; each framework's rows with its own
    fused-MoE kernel for the format on the GPU's generation (:meth:`EngineProfile.moe_hardware`; ``engines`` as in
    :func:`attention_kernel_errors`: None the shipped profiles, ``{}`` the generation's pooled fit)."""
    table = moe_kernel_table(kernels_dir) if table is None else table
    load_cv = table["load_cv"] if "load_cv" in table else pd.Series(0.0, index=table.index)
    slots = table["slots"] if "slots" in table else pd.Series(0, index=table.index)
    predicted = np.zeros(len(table))
    for (gpu, framework, dtype), rows in table.groupby(["gpu", "framework", "dtype"]):
        engine, hw = _framework_engine(framework, engines), _hardware(gpu, hardware)
        model = ExpertsModel(engine.moe_hardware(hw, dtype) if engine is not None else hw, dtype)
        predicted[table.index.get_indexer(rows.index)] = [
            model.time(t, h, i / tp, 2, k, e, ep, "balanced", cv, n) for t, h, i, k, e, tp, ep, cv, n in zip(
                rows["tokens"], rows["hidden"], rows["inter"], rows["topk"], rows["experts"], rows["moe_tp"],
                rows["moe_ep"], load_cv[rows.index], slots[rows.index], strict=True)]
    return _with_errors(table, predicted)


def power_law_cv(tokens: int, experts: int, topk: int, alpha: float) -> float:
    """Coefficient of variation of one expert's load under the MoE collectors' power law (module docstring)."""
    low, high = (1.0, 0.8 * tokens) if tokens * topk > experts else (0.01, 2.0)

    def moment(j: int) -> float:
        return (high ** (j + 1 - alpha) - low ** (j + 1 - alpha)) / (j + 1 - alpha)

    m0, m1, m2 = moment(0), moment(1), moment(2)
    return math.sqrt(max(m2 * m0 / (m1 * m1) - 1, 0.0))


ROUTING_FRAMEWORKS = ("trtllm",)  # the frameworks whose EP rows count every rank's tokens (module docstring)


def moe_routing_kernel_table(kernels_dir: Path) -> pd.DataFrame:
    """One row per measured fused-MoE layer with expert parallelism (balanced or power-law routing):
    :data:`MOE_COLUMNS` plus ``distribution`` and ``load_cv`` (the collector's law; 0 when balanced)."""
    frames = []
    for gpu, framework, table in _moe_tables(kernels_dir, "moe_perf", ROUTING_FRAMEWORKS):
        table = table[priced(table, "MoE") & (table["moe_ep_size"] > 1)]
        alphas = table["distribution"].str.extract(r"^power_law_([0-9.]+)$", expand=False).astype(float)
        table, alphas = table[alphas.notna() | (table["distribution"] == "balanced")], alphas.dropna()
        cv = np.zeros(len(table))
        skewed = table.index.get_indexer(alphas.index)
        cv[skewed] = [power_law_cv(t, e, k, a) for t, e, k, a in zip(
            table.loc[alphas.index, "num_tokens"], table.loc[alphas.index, "num_experts"],
            table.loc[alphas.index, "topk"], alphas, strict=True)]
        frames.append(_moe_frame(table, gpu, framework).assign(
            distribution=np.where(cv > 0, "power_law", "balanced"), load_cv=cv))
    columns = [*MOE_COLUMNS, "distribution", "load_cv"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def moe_routing_kernel_errors(kernels_dir: Path, hardware: Mapping[str, HardwareSpec] | None = None,
                              skew: bool = True, engines: Mapping[str, EngineProfile] | None = None) -> pd.DataFrame:
    """:func:`moe_routing_kernel_table` predicted for the busiest rank (``skew=False``: as if balanced; ``engines``
    as in :func:`moe_kernel_errors`)."""
    table = moe_routing_kernel_table(kernels_dir)
    predicted = moe_kernel_errors(kernels_dir, hardware, table if skew else table.assign(load_cv=0.0), engines)
    return predicted if skew else predicted.assign(load_cv=table["load_cv"])


def wide_ep_kernel_table(kernels_dir: Path) -> pd.DataFrame:
    """TensorRT-LLM's wide-EP MoE rows (``*/moe/*/*/wideep_moe_perf``: power-law routing over EP 2–256, without and
    with EPLB over ``num_slots`` expert slots): :data:`MOE_COLUMNS` plus ``distribution`` (``power_law`` or
    ``power_law_eplb``), ``load_cv`` (the collector's law, as for the routing rows) and ``slots`` (0 without
    EPLB). ``num_tokens`` counts every rank's tokens, as in the collector's other EP rows."""
    frames = []
    for gpu, framework, table in _moe_tables(kernels_dir, "wideep_moe_perf"):
        laws = table["distribution"].str.extract(r"^power_law_([0-9.]+)(_eplb)?$")
        table, laws = table[laws[0].notna()], laws[laws[0].notna()]
        eplb = laws[1].notna().to_numpy()
        cv = [power_law_cv(t, e, k, float(a)) for t, e, k, a in zip(
            table["num_tokens"], table["num_experts"], table["topk"], laws[0], strict=True)]
        frames.append(_moe_frame(table, gpu, framework).assign(
            distribution=np.where(eplb, "power_law_eplb", "power_law"), load_cv=cv,
            slots=np.where(eplb, table["num_slots"].to_numpy(), 0)))
    columns = [*MOE_COLUMNS, "distribution", "load_cv", "slots"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def wide_ep_kernel_errors(kernels_dir: Path, hardware: Mapping[str, HardwareSpec] | None = None,
                          engines: Mapping[str, EngineProfile] | None = None) -> pd.DataFrame:
    """:func:`wide_ep_kernel_table` predicted for the busiest rank (EPLB rows with their slots; ``engines`` as in
    :func:`moe_kernel_errors`)."""
    return moe_kernel_errors(kernels_dir, hardware, wide_ep_kernel_table(kernels_dir), engines)


DEEPEP_SMS = 20  # DeepEP's default SM budget for its normal kernels (its Buffer.num_sms)


def deepep_kernel_table(kernels_dir: Path) -> pd.DataFrame:
    """One row per measured DeepEP kernel within one node (``comm/*/*/wideep_deepep_{ll,normal}_perf``; ``num_token``
    tokens per GPU): gpu, kernel (``ll_dispatch``, ``ll_combine``, ``normal_dispatch``, ``normal_combine``; normal
    at :data:`DEEPEP_SMS` SMs), gpus (8 × ``node_num``), tokens, topk, hidden, measured seconds."""
    frames = []
    for path in sorted(kernels_dir.glob("*/comm/*/*/wideep_deepep_*_perf.parquet")):
        gpu = path.parts[-5]
        if gpu not in GPUS:
            continue
        table = pd.read_parquet(path)
        mode = "ll" if path.name.endswith("_ll_perf.parquet") else "normal"
        for direction in ("dispatch", "combine"):
            rows = table if mode == "ll" else table[table[f"{direction}_sms"] == DEEPEP_SMS]
            column = f"{direction}_avg_t_us" if mode == "ll" else f"{direction}_transmit_us"
            frames.append(pd.DataFrame({
                "gpu": gpu, "kernel": f"{mode}_{direction}", "gpus": 8 * rows["node_num"].to_numpy(),
                "tokens": rows["num_token"].to_numpy(), "topk": rows["num_topk"].to_numpy(),
                "hidden": rows["hidden_size"].to_numpy(), "measured_s": rows[column].to_numpy() * 1e-6}))
    columns = ["gpu", "kernel", "gpus", "tokens", "topk", "hidden", "measured_s"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def deepep_kernel_errors(kernels_dir: Path, hardware: Mapping[str, HardwareSpec] | None = None) -> pd.DataFrame:
    """:func:`deepep_kernel_table` predicted by :func:`simulator.cost.expert_exchange.deepep_time`; a GPU whose
    profile has no DeepEP fit (a generation DeepEP does not run on) is left out."""
    table = deepep_kernel_table(kernels_dir)
    fitted = [gpu for gpu in table["gpu"].unique() if _hardware(gpu, hardware).fit.comm.deepep is not None]
    table = table[table["gpu"].isin(fitted)].reset_index(drop=True)
    predicted = np.zeros(len(table))
    for gpu, rows in table.groupby("gpu"):
        hw = _hardware(gpu, hardware)
        predicted[table.index.get_indexer(rows.index)] = [
            deepep_time(hw, kernel, n, t, k, d) for kernel, n, t, k, d in zip(
                rows["kernel"], rows["gpus"], rows["tokens"], rows["topk"], rows["hidden"], strict=True)]
    return _with_errors(table, predicted)


def fit_deepep(kernels_dir: Path, gpu: str) -> dict[str, dict[str, float]]:
    """Each DeepEP kernel's ``latency_us`` and ``efficiency`` on ``gpu``'s tables: ``t = L + bytes / (link × e)`` is
    linear in ``L`` and ``1/e``, fitted by least squares on the relative error (rows weighted by 1/t)."""
    table = deepep_kernel_table(kernels_dir)
    table = table[table["gpu"] == gpu]
    hw = _hardware(gpu, None)
    fits = {}
    for kernel, rows in table.groupby("kernel"):
        unit = with_fit(hw, {"comm.deepep": {kernel: ExchangeFit(latency_us=0.0, efficiency=1.0)}})
        seconds_at_link = np.array([deepep_time(unit, kernel, n, t, k, d) for n, t, k, d in zip(
            rows["gpus"], rows["tokens"], rows["topk"], rows["hidden"], strict=True)])
        measured = rows["measured_s"].to_numpy()
        design = np.column_stack([np.ones(len(rows)), seconds_at_link]) / measured[:, None]
        (latency, inverse_efficiency), *_ = np.linalg.lstsq(design, np.ones(len(rows)), rcond=None)
        fits[kernel] = {"latency_us": round(float(latency) * 1e6, 1),
                        "efficiency": round(min(1.0, 1 / float(inverse_efficiency)), 2)}
    return fits


MLA_COLUMNS = ["gpu", "framework", "phase", "heads", "batch", "seq_len", "kv_dtype", "measured_s"]


def mla_kernel_table(kernels_dir: Path) -> pd.DataFrame:
    """One row per measured MLA attention kernel with 16-bit queries: gpu, framework, phase, heads (per GPU), batch,
    seq_len (a decode row's context: ``isl + step``), kv_dtype, measured seconds."""
    frames = []
    for path in sorted(kernels_dir.glob("*/mla/*/*/*_mla_perf.parquet")):
        gpu, framework = path.parts[-5], path.parts[-3]
        phase = {"context": "prefill", "generation": "decode"}.get(path.stem.split("_")[0])
        if gpu not in GPUS or phase is None or framework == "vllm":
            continue
        table = pd.read_parquet(path)
        table = table[priced(table, "MLA")]
        seq = table["isl"] + (table["step"] if phase == "decode" else 0)
        frames.append(pd.DataFrame({
            "gpu": gpu, "framework": framework, "phase": phase, "heads": table["num_heads"].to_numpy(),
            "batch": table["batch_size"].to_numpy(), "seq_len": seq.to_numpy(),
            "kv_dtype": table["kv_cache_dtype"].map(KV_DTYPES).to_numpy(),
            "measured_s": table["latency"].to_numpy() * 1e-3,
        }))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=MLA_COLUMNS)


def deepseek_mla(heads: int):
    """DeepSeek-V3's latent attention with ``heads`` query heads (the MLA tables' shape)."""
    return LatentAttention(num_heads=heads, num_kv_heads=heads, head_dim=192, q_lora_rank=1536,
                           kv_lora_rank=512, qk_rope_head_dim=64, v_head_dim=128)


def mla_kernel_times(model: AttentionModel, heads: int, phase: str, batch, seq_len):
    """Seconds of MLA kernels of DeepSeek-V3's shape with ``heads`` query heads on the GPU (:func:`deepseek_mla`),
    ``batch`` sequences of ``seq_len`` (arrays): prefill decompressed over the whole prompt, decode absorbed over
    the latent cache, as :mod:`simulator.cost.layers` prices them."""
    shapes = deepseek_mla(int(heads)).shapes(7168, 1)
    if phase == "prefill":
        return model.prefill_parts(shapes.heads, shapes.prefill_widths, shapes.prefill_kv,
                                   batch * seq_len * (seq_len + 1) / 2, batch * seq_len, 0,
                                   batch * shapes.heads * query_tiles(seq_len), longest_block(seq_len, seq_len)
                                   ) + model.overhead
    return (batch * seq_len * model.decode_per_token(shapes.heads, shapes.decode_widths, shapes.decode_kv, 0,
                                                     batch * shapes.kv_blocks)
            + batch * shapes.kv_blocks * model.per_head + model.decode_overhead)


def mla_kernel_errors(kernels_dir: Path, hardware: Mapping[str, HardwareSpec] | None = None,
                      table: pd.DataFrame | None = None,
                      engines: Mapping[str, EngineProfile] | None = None) -> pd.DataFrame:
    """:func:`mla_kernel_table` with predicted seconds and the error: each framework's table with that framework's
    own MLA kernels on the GPU's generation (:meth:`EngineProfile.mla_hardware`; ``engines`` as in
    :func:`attention_kernel_errors`: None the shipped profiles, ``{}`` the generation's pooled fit)."""
    table = mla_kernel_table(kernels_dir) if table is None else table
    predicted = np.zeros(len(table))
    for (gpu, framework, kv, phase, heads), rows in table.groupby(["gpu", "framework", "kv_dtype", "phase", "heads"]):
        engine, hw = _framework_engine(framework, engines), _hardware(gpu, hardware)
        model = AttentionModel(engine.mla_hardware(hw, kv) if engine is not None else hw, kv)
        predicted[table.index.get_indexer(rows.index)] = mla_kernel_times(
            model, int(heads), phase, rows["batch"].to_numpy(float), rows["seq_len"].to_numpy(float))
    return _with_errors(table, predicted)
