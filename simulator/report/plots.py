"""Pictures of runs and sweeps, as matplotlib figures (``llmsim plot DIR`` saves them as PNG and SVG).

- :func:`latency_cdfs`: CDFs of TTFT, TPOT and E2E latency from a request table;
- :func:`timeline_figure`: per replica, queue length, running requests and KV use over time (observed runs);
- :func:`phase_shares`: share of busy time in prefill, decode and mixed iterations per replica (observed runs);
- :func:`sweep_curves`: throughput against p99 latency and goodput against offered rate, one line per policy
  (every swept column other than the rate and the seed), from a sweep's ``index.parquet``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

RATE = "workload.arrival.rate"


def latency_cdfs(requests: pd.DataFrame) -> Figure:
    done = requests[requests["status"] == "finished"]
    figure, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, column, label in zip(axes, ("ttft_ms", "tpot_ms", "e2el_ms"), ("TTFT", "TPOT", "E2E latency"),
                                 strict=True):
        values = np.sort(done[column].dropna().to_numpy())
        if values.size:
            ax.plot(values, np.arange(1, values.size + 1) / values.size)
            ax.axvline(np.percentile(values, 99), color="grey", linestyle=":", label="p99")
        ax.set(xlabel=f"{label} (ms)", ylabel="fraction of requests", title=f"{label} CDF")
        ax.grid(alpha=0.3)
    axes[0].legend()
    figure.tight_layout()
    return figure


def timeline_figure(timeline: pd.DataFrame) -> Figure:
    figure, axes = plt.subplots(3, 1, figsize=(11, 7), sharex=True)
    for replica, rows in timeline.groupby("replica"):
        for ax, column in zip(axes, ("waiting", "running", "kv_used"), strict=True):
            ax.step(rows["time_s"], rows[column], where="post", label=f"replica {replica}", linewidth=0.8)
    for ax, label in zip(axes, ("queue length", "running requests", "KV blocks in use (fraction)"), strict=True):
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("simulated time (s)")
    if timeline["replica"].nunique() <= 8:
        axes[0].legend(loc="upper right", fontsize="small")
    figure.tight_layout()
    return figure


def phase_shares(iterations: pd.DataFrame) -> Figure:
    busy = iterations.assign(seconds=iterations["end_s"] - iterations["start_s"])
    shares = busy.pivot_table(index="replica", columns="phase", values="seconds", aggfunc="sum").fillna(0)
    shares = shares.div(shares.sum(axis=1), axis=0)
    figure, ax = plt.subplots(figsize=(8, 3.6))
    shares.plot.bar(stacked=True, ax=ax)
    ax.set(ylabel="share of busy time", title="prefill (compute-bound) vs decode (memory-bound) time")
    figure.tight_layout()
    return figure


def sweep_curves(index: pd.DataFrame, rate: str = RATE) -> Figure:
    ok = index[index.get("error", "") == ""] if "error" in index else index
    swept = [c for c in ok.columns[: list(ok.columns).index("seed")] if c not in ("point", rate)]
    metrics = ["output_throughput", "p99_ttft_ms", "p99_tpot_ms", "request_goodput"]
    grouped = ok.groupby([*swept, rate] if rate in ok else [*swept, "point"], dropna=False)[metrics].mean()
    grouped = grouped.reset_index()
    figure, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for key, rows in grouped.groupby(swept, dropna=False) if swept else [("all", grouped)]:
        label = ", ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))
        axes[0].plot(rows["p99_ttft_ms"], rows["output_throughput"], marker="o", label=label)
        axes[1].plot(rows["p99_tpot_ms"], rows["output_throughput"], marker="o", label=label)
        if rate in rows:
            axes[2].plot(rows[rate], rows["request_goodput"], marker="o", label=label)
    axes[0].set(xlabel="p99 TTFT (ms)", ylabel="output tokens/s", title="throughput vs TTFT")
    axes[1].set(xlabel="p99 TPOT (ms)", ylabel="output tokens/s", title="throughput vs TPOT")
    axes[2].set(xlabel="offered rate (req/s)", ylabel="goodput (req/s)", title="goodput vs rate")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    figure.tight_layout()
    return figure


def plot_folder(folder: str | Path) -> list[Path]:
    """Every picture the folder's files allow (a run's ``requests/timeline/iterations.parquet`` or a sweep's
    ``index.parquet``), saved as PNG and SVG under ``folder/plots``; returns the files written."""
    from simulator.config.schema import SLOConfig
    from simulator.errors import LLMSimError
    from simulator.metrics import add_latency_columns

    folder = Path(folder)
    figures: dict[str, Figure] = {}

    def read(name: str) -> pd.DataFrame:
        try:
            return pd.read_parquet(folder / name)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError: a truncated or foreign file
            raise LLMSimError(f"{folder / name}: not a complete Parquet file ({str(exc).splitlines()[0][:100]})"
                              ) from None

    if (folder / "requests.parquet").is_file():
        requests = read("requests.parquet")
        if "ttft_ms" not in requests:
            requests = add_latency_columns(requests, SLOConfig())
        figures["latency_cdfs"] = latency_cdfs(requests)
    if (folder / "timeline.parquet").is_file():
        figures["timeline"] = timeline_figure(read("timeline.parquet"))
    if (folder / "iterations.parquet").is_file():
        figures["phases"] = phase_shares(read("iterations.parquet"))
    if (folder / "index.parquet").is_file():
        figures["sweep"] = sweep_curves(read("index.parquet"))
    if not figures:
        raise LLMSimError(f"{folder}: nothing to plot (no requests, timeline, iterations or index parquet)")
    out = folder / "plots"
    out.mkdir(exist_ok=True)
    written = []
    for name, figure in figures.items():
        for suffix in ("png", "svg"):
            figure.savefig(out / f"{name}.{suffix}", dpi=120)
            written.append(out / f"{name}.{suffix}")
        plt.close(figure)
    return written
