"""Predicted vs measured, on the measurement sets in the formats of ``../shared/data``.

- ``a100_ops``: per-layer GEMM times (QKV, O, MLP-up, MLP-down) of several models at TP 1–8 on one A100-80GB
  (TP emulated by shrinking shards). Predicted with :func:`simulator.cost.gemm_time`.
- ``network``: NCCL all-reduce and send/recv times on A100 nodes (NVSwitch DGX; PCIe with pairwise NVLink).
  Predicted with :func:`simulator.cost.collective_time`.
- ``splitwise``: whole-model prefill and decode iterations (Llama-2-70B TP 2/4/8, BLOOM-176B TP 8, fp16, A100-80GB
  DGX), medians of the repeats; the rows the data README flags (Llama-2-70B TP2 batch 64) are excluded. Predicted
  with the roofline cost model and an engine profile: prefill = one iteration of ``batch`` prompts; decode = the
  mean step while contexts grow from ``prompt`` to ``prompt + tokens``.

Error = |predicted − measured| / measured; summaries give the median and p90 per dataset and operation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simulator.catalog import HardwareSpec, load_hardware, load_model
from simulator.cost.base import IterationShape
from simulator.cost.collectives import collective_time
from simulator.cost.engine import load_engine
from simulator.cost.gemm import GemmModel
from simulator.cost.roofline import RooflineCostModel
from simulator.errors import LLMSimError

GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
SPLITWISE_MODELS = {"llama2-70b": "llama-2-70b", "bloom-176b": "bloom-176b"}
NETWORK_SYSTEMS = {"a100_dgx": "a100-80gb-sxm", "a100_pairwise_nvlink": "a100-80gb-pcie"}


def _ape(predicted: pd.Series, measured: pd.Series) -> pd.Series:
    return (predicted - measured).abs() / measured


def gemm_measurements(ops_dir: Path) -> pd.DataFrame:
    """One row per (model file, TP, tokens, op): the GEMM shape m, n, k and the measured seconds, from per-layer
    operator CSVs (one per model) in the format of ``../shared/data/calibration/a100_ops``."""
    rows = []
    for path in sorted(ops_dir.glob("*.csv")):
        for r in pd.read_csv(path).to_dict("records"):
            t, m, hidden = r["num_tensor_parallel_workers"], r["num_tokens"], r["n_embd"]
            d = hidden // r["n_head"]
            heads, kv_heads = r["n_head"] / t, max(1, -(-r["n_kv_head"] // t))
            inter = r["n_expanded_embd"] / t
            shapes = {
                "attn_pre_proj": ((heads + 2 * kv_heads) * d, hidden),
                "attn_post_proj": (hidden, heads * d),
                "mlp_up_proj": ((2 if r["use_gated_mlp"] else 1) * inter, hidden),
                "mlp_down_proj": (hidden, inter),
            }
            for op, (n, k) in shapes.items():
                rows.append((path.stem, t, m, op, m, n, k, r[f"time_stats.{op}.median"] * 1e-3))
    return pd.DataFrame(rows, columns=["model", "tp", "tokens", "op", "m", "n", "k", "measured_s"])


def gemm_errors(data_dir: Path, hardware: HardwareSpec, frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`gemm_measurements` with the predicted seconds and the error."""
    frame = (gemm_measurements(data_dir / "calibration" / "a100_ops") if frame is None else frame).copy()
    frame["predicted_s"] = GemmModel(hardware, "fp16").times(
        frame["m"].to_numpy(float), frame["n"].to_numpy(float), frame["k"].to_numpy(float)
    )
    frame["error"] = _ape(frame["predicted_s"], frame["measured_s"])
    return frame


def network_measurements(data_dir: Path, systems: tuple[str, ...] = tuple(NETWORK_SYSTEMS)) -> pd.DataFrame:
    """One row per (system, collective, GPUs, GPUs per node, bytes) with the measured seconds (median of ranks),
    from ``data_dir/network/<system>_<all_reduce|send_recv>.csv``."""
    frames = []
    for path in sorted((data_dir / "network").glob("*.csv")):
        system = next((s for s in systems if path.stem.startswith(s)), None)
        if system is None:
            continue
        op = path.stem[len(system) + 1 :]
        table = pd.read_csv(path)
        grouped = table.groupby(["num_workers", "devices_per_node", "size"])[f"time_stats.{op}.median"].median()
        frame = grouped.reset_index()
        frame.columns = ["gpus", "gpus_per_node", "bytes", "measured_s"]
        frame["measured_s"] *= 1e-3
        frame.insert(0, "op", op)
        frame.insert(0, "system", system)
        frames.append(frame)
    if not frames:
        raise LLMSimError(f"{data_dir / 'network'}: no collective timings for {list(systems)}")
    return pd.concat(frames, ignore_index=True)


def network_errors(
    data_dir: Path, profiles: dict[str, HardwareSpec] | None = None, frame: pd.DataFrame | None = None
) -> pd.DataFrame:
    """:func:`network_measurements` with predictions from the systems' profiles (``NETWORK_SYSTEMS`` by default).

    Each measured group (system, op, GPUs, GPUs per node) is linear in the message size, so the prediction is the
    real :func:`collective_time` evaluated at two sizes and extended linearly.
    """
    frame = (network_measurements(data_dir) if frame is None else frame).copy()
    profiles = profiles or {s: load_hardware(name) for s, name in NETWORK_SYSTEMS.items()}
    predicted = np.empty(len(frame))
    for (system, op, gpus, per_node), index in frame.groupby(["system", "op", "gpus", "gpus_per_node"]).groups.items():
        base = profiles[system]
        # the measured ring spans nodes of `per_node` GPUs each
        hardware = base.model_copy(update={"node": base.node.model_copy(update={"gpus_per_node": int(per_node)})})
        one, two = (collective_time(hardware, op, int(gpus), size) for size in (1.0, 2.0))
        sizes = frame.loc[index, "bytes"].to_numpy(float)
        predicted[frame.index.get_indexer(index)] = (two - one) * sizes + (2 * one - two)
    frame["predicted_s"] = predicted
    frame["error"] = _ape(frame["predicted_s"], frame["measured_s"])
    return frame


def splitwise_errors(data_dir: Path, hardware: HardwareSpec, engine: str) -> pd.DataFrame:
    """One row per (model, TP, batch, prompt, tokens) with measured and predicted prefill and decode seconds."""
    table = pd.read_csv(data_dir / "calibration" / "splitwise_a100_iterations.csv")
    table = table[table["model"].isin(SPLITWISE_MODELS)]
    defective = (table["model"] == "llama2-70b") & (table["tensor_parallel"] == 2) & (table["batch_size"] == 64)
    keys = ["model", "tensor_parallel", "batch_size", "prompt_size", "token_size"]
    table = table[~defective].groupby(keys)[["prompt_time", "token_time"]].median().reset_index()
    profile = load_engine(engine)
    costs: dict[tuple[str, int], RooflineCostModel] = {}
    rows = []
    for r in table.itertuples(index=False):
        key = (r.model, r.tensor_parallel)
        if key not in costs:
            model = load_model(SPLITWISE_MODELS[r.model])
            costs[key] = RooflineCostModel(model, hardware, r.tensor_parallel, "fp16", engine=profile)
        cost, batch, prompt, tokens = costs[key], r.batch_size, r.prompt_size, r.token_size
        prefill = cost.iteration_time(IterationShape(((prompt, 0),) * batch))
        a, c = cost.decode_step_coefficients(batch)
        # mean over the decode steps: contexts prompt+1 … prompt+tokens−1 (after each step's write)
        steps = max(tokens - 1, 1)
        decode = a + c * batch * (prompt + 1 + (steps - 1) / 2)
        rows.append((r.model, r.tensor_parallel, batch, prompt, tokens, "prefill", r.prompt_time * 1e-3, prefill))
        rows.append((r.model, r.tensor_parallel, batch, prompt, tokens, "decode", r.token_time * 1e-3, decode))
    frame = pd.DataFrame(rows, columns=["model", "tp", "batch", "prompt", "tokens", "phase", "measured_s",
                                        "predicted_s"])
    frame["error"] = _ape(frame["predicted_s"], frame["measured_s"])
    return frame


def summarize_errors(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Median and p90 absolute percentage error (and row count) per group."""
    grouped = frame.groupby(by)["error"]
    return pd.DataFrame({
        "rows": grouped.size(),
        "median_error_pct": grouped.median() * 100,
        "p90_error_pct": grouped.quantile(0.9) * 100,
    }).round(1)


def validate_all(data_dir: Path, engine: str = "splitwise") -> dict[str, pd.DataFrame]:
    """Per-row errors of every dataset found under ``data_dir``."""
    a100 = load_hardware("a100-80gb-sxm")
    return {
        "a100_ops": gemm_errors(data_dir, a100),
        "network": network_errors(data_dir),
        "splitwise": splitwise_errors(data_dir, a100, engine),
    }


def overall(frame: pd.DataFrame) -> tuple[float, float]:
    return float(np.median(frame["error"])), float(np.quantile(frame["error"], 0.9))


def write_report(results: dict[str, pd.DataFrame], plot_path: Path) -> str:
    """The error tables as text; a predicted-vs-measured log-log plot per dataset saved to ``plot_path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = {"a100_ops": ["op"], "network": ["system", "op"], "splitwise": ["phase"]}
    lines = []
    for name, frame in results.items():
        lines.append(f"== {name} ==")
        lines.append(summarize_errors(frame, groups[name]).to_string())
        lines.append("")
    figure, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4.5))
    for axis, (name, frame) in zip(np.atleast_1d(axes), results.items(), strict=True):
        axis.loglog(frame["measured_s"] * 1e3, frame["predicted_s"] * 1e3, ".", markersize=2, alpha=0.4)
        low, high = (frame[["measured_s", "predicted_s"]].to_numpy() * 1e3).min(), frame["measured_s"].max() * 1e3
        axis.plot([low, high], [low, high], "k--", linewidth=0.8)
        median, p90 = overall(frame)
        axis.set(title=f"{name}: median {median:.1%}, p90 {p90:.1%}", xlabel="measured (ms)", ylabel="predicted (ms)")
    figure.tight_layout()
    figure.savefig(plot_path, dpi=120)
    plt.close(figure)
    lines.append(f"plot: {plot_path}")
    return "\n".join(lines)
