"""Per-operator GEMM timings of one transformer layer (the format of ``../shared/data/calibration/a100_ops``).

QKV / O / MLP-up / MLP-down GEMMs of several models at TP 1–8 on one A100-80GB (TP emulated by shrinking shards),
predicted with :class:`simulator.cost.gemm.GemmModel`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator.catalog import HardwareSpec
from simulator.cost.gemm import GemmModel
from simulator.errors import LLMSimError
from simulator.fidelity.errors import ape

GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
OPERATOR_COLUMNS = ("num_tensor_parallel_workers", "num_tokens", "n_embd", "n_head", "n_kv_head", "n_expanded_embd",
                    "use_gated_mlp", *(f"time_stats.{op}.median" for op in GEMM_OPS))


def gemm_measurements(ops_dir: Path) -> pd.DataFrame:
    """One row per (model file, TP, tokens, op): the GEMM shape m, n, k and the measured seconds, from per-layer
    operator CSVs (one per model) in the format of ``../shared/data/calibration/a100_ops`` (a file without its
    columns is a one-line :class:`LLMSimError`)."""
    rows = []
    for path in sorted(ops_dir.glob("*.csv")):
        try:
            table = pd.read_csv(path)
        except ValueError as exc:  # pandas' parser errors and a file not in UTF-8 (UnicodeDecodeError) alike
            raise LLMSimError(f"{path}: not a CSV file ({str(exc).splitlines()[0]})") from None
        missing = [column for column in OPERATOR_COLUMNS if column not in table.columns]
        if missing:
            raise LLMSimError(f"{path}: not an operator-timing file (format of calibration/a100_ops): no column "
                              f"{', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}")
        for r in table.to_dict("records"):
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
    frame["error"] = ape(frame["predicted_s"], frame["measured_s"])
    return frame
