"""Pictures of runs and sweeps, as matplotlib figures (``llmsim plot DIR`` saves them as PNG and SVG).

- :func:`latency_cdfs`: CDFs of TTFT, TPOT and E2E latency from a request table;
- :func:`timeline_figure`: per replica, queue length, running requests and KV use over time (observed runs);
- :func:`phase_shares`: share of busy time in prefill, decode and mixed iterations per replica (observed runs);
- :func:`roofline_figure`: iterations on the GPU's roofline, arithmetic intensity against achieved TFLOP/s, one cloud
  per phase (runs with iteration bounds, ``roofline.parquet``);
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
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from simulator.config.slo import SLOConfig
from simulator.errors import LLMSimError
from simulator.results.metrics import add_latency_columns

RATE = "workload.arrival.rate"


LATENCIES = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("max_itl_ms", "longest ITL"), ("e2el_ms", "E2E latency"))


def _log_axis(axis) -> None:
    """A log axis labelled in plain numbers at 1, 2 and 5 per decade, without minor labels (which run together)."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.4g}"))
    axis.set_minor_formatter(NullFormatter())


def milliseconds(value: float) -> str:
    """A latency for a legend: whole milliseconds with thousands separators from 100 ms (``2,400 ms``, never
    ``2.4e+03 ms``), three significant digits below."""
    return f"{value:,.0f} ms" if abs(value) >= 100 else f"{value:.3g} ms"


def latency_cdfs(requests: pd.DataFrame, slo: dict[str, float] | None = None, name: str = "") -> Figure:
    """CDFs of TTFT, TPOT, each request's longest inter-token gap and E2E latency (those the table has) on log axes
    (the tail spreads out), with p50 and p99 marked and the SLO bound drawn where the experiment sets one (``slo``:
    ``{"ttft_ms": ..., ...}``)."""
    done = requests[requests["status"] == "finished"]
    panels = [(column, label) for column, label in LATENCIES if column in done]
    figure, axes = plt.subplots(1, len(panels), figsize=(4.3 * len(panels), 3.8), squeeze=False)
    for ax, (column, label) in zip(axes[0], panels, strict=True):
        values = np.sort(done[column].dropna().to_numpy())
        values = values[values > 0]
        if values.size:
            ax.plot(values, np.arange(1, values.size + 1) / values.size, label="CDF")
            for q, style in ((50, "--"), (99, ":")):
                x = np.percentile(values, q)
                ax.axvline(x, color="grey", linestyle=style, label=f"p{q} {milliseconds(x)}")
            ax.set_xscale("log")
            _log_axis(ax.xaxis)
        bound = (slo or {}).get(column)
        if bound:
            ax.axvline(bound, color="tab:red", label=f"SLO {milliseconds(bound)}")
        ax.set(xlabel=f"{label} (ms, log)", ylabel="fraction of requests", title=f"{label} CDF")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize="small", loc="lower right")
    figure.suptitle(f"{name}: {len(done):,} finished requests" if name else f"{len(done):,} finished requests")
    figure.tight_layout()
    return figure


ARRIVAL_BINS = 100  # bins of the arrival rate drawn under an autoscaled run's replica counts


def _replica_counts(ax, scaling: pd.DataFrame, end_s: float, arrival_s: np.ndarray | None = None) -> None:
    """An autoscaled run's ready and provisioned replicas as steps from its ``init`` row (time 0) to ``end_s``; with
    the requests' ``arrival_s``, their rate (requests/s in :data:`ARRIVAL_BINS` equal bins over 0 … ``end_s``) in
    grey on a second axis, the load the replicas follow."""
    end = max(end_s, float(scaling["time_s"].iloc[-1]))
    if arrival_s is not None and len(arrival_s) and end > 0:
        counts, edges = np.histogram(arrival_s, bins=ARRIVAL_BINS, range=(0.0, end))
        rate = ax.twinx()
        rate.stairs(counts / (edges[1] - edges[0]), edges, color="grey", alpha=0.35, fill=True,
                    label="arrival rate")
        rate.set_ylabel("arrivals (req/s)")
        rate.set_ylim(bottom=0)
        ax.set_zorder(rate.get_zorder() + 1)  # the replica steps over the shaded rate
        ax.patch.set_visible(False)
    times = [*scaling["time_s"], end]
    for column, label in (("provisioned", "provisioned (holding GPUs)"), ("ready", "ready (taking requests)")):
        ax.step(times, [*scaling[column], scaling[column].iloc[-1]], where="post", label=label, linewidth=1.2)
    ax.set_ylabel("replicas")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize="small")


def timeline_figure(timeline: pd.DataFrame | None, name: str = "", scaling: pd.DataFrame | None = None,
                    arrival_s: np.ndarray | None = None) -> Figure:
    """Per replica over time: queue length, running requests, tokens in the iteration (prefill chunks and
    decodes) and KV use; with an autoscaled run's ``scaling`` events, the replica count above them (alone when
    the run kept no timeline), over the requests' arrival rate when their ``arrival_s`` are given."""
    panels = [("waiting", "queue length"), ("running", "running requests"),
              ("batch_tokens", "tokens per iteration\n(prefill + decode)"), ("kv_used", "KV blocks in use")]
    panels = [(column, label) for column, label in panels if timeline is not None and column in timeline]
    rows_needed = len(panels) + (scaling is not None and not scaling.empty)
    figure, grid = plt.subplots(rows_needed, 1, figsize=(11, 2.2 * rows_needed + 0.5), sharex=True, squeeze=False)
    axes = list(grid[:, 0])
    if scaling is not None and not scaling.empty:
        end = float(timeline["time_s"].max()) if timeline is not None else float(scaling["time_s"].max())
        _replica_counts(axes.pop(0), scaling, end, arrival_s)
    if not panels:
        figure.axes[0].set_xlabel("simulated time (s)")
        figure.suptitle(f"{name}: replicas over time" if name else "replicas over time")
        figure.tight_layout()
        return figure
    assert timeline is not None  # the panels are its columns
    for replica, rows in timeline.groupby("replica"):
        for ax, (column, _) in zip(axes, panels, strict=True):
            ax.step(rows["time_s"], rows[column], where="post", label=f"replica {replica}", linewidth=0.8)
    for ax, (column, label) in zip(axes, panels, strict=True):
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        # counts: from zero, whole numbers, at least 0-1 (an idle queue is a flat line at 0, not a band of ±0.04)
        ax.set_ylim(0, max(1.0, float(timeline[column].max()) * 1.05))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1].set_xlabel("simulated time (s)")
    if timeline["replica"].nunique() <= 8:
        axes[0].legend(loc="upper right", fontsize="small", title="replica")
    figure.suptitle(f"{name}: replica state over time" if name else "replica state over time")
    figure.tight_layout()
    return figure


# One colour per iteration kind in every figure, whichever kinds a run has: prefill-only, mixed, decode-only, idle.
PHASE_COLOURS = {"prefill": "tab:orange", "mixed": "tab:purple", "decode": "tab:blue", "idle": "lightgrey"}


def phase_shares(iterations: pd.DataFrame, name: str = "") -> Figure:
    """Per replica, the share of the run spent in prefill, decode and mixed iterations — and idle."""
    busy = iterations.assign(seconds=iterations["end_s"] - iterations["start_s"])
    seconds = busy.pivot_table(index="replica", columns="phase", values="seconds", aggfunc="sum").fillna(0)
    span = iterations["end_s"].max() - iterations["start_s"].min()
    seconds["idle"] = (span - seconds.sum(axis=1)).clip(lower=0)
    shares = seconds.div(seconds.sum(axis=1), axis=0).reindex(columns=list(PHASE_COLOURS), fill_value=0.0)
    figure, ax = plt.subplots(figsize=(8, 3.8))
    shares.plot.bar(stacked=True, ax=ax, rot=0, color=list(PHASE_COLOURS.values()))
    ax.set(ylabel="share of the run", xlabel="replica",
           title=(f"{name}: " if name else "") + "prefill (compute-bound), decode (memory-bound), idle")
    ax.legend(title="iterations", fontsize="small")
    figure.tight_layout()
    return figure


ROOFLINE_POINTS = 1000  # per phase at most, evenly spaced in the sample's order (the figure stays light)
PHASE_LABELS = {"prefill": "prefill-only", "mixed": "mixed", "decode": "decode-only"}


def _decades(axis) -> None:
    """A log axis labelled at each power of ten only, in plain numbers."""
    axis.set_major_locator(LogLocator(base=10))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.10g}"))
    axis.set_minor_formatter(NullFormatter())


def roofline_figure(points: pd.DataFrame, name: str = "") -> Figure:
    """Iterations on the roofline (a run's ``roofline.parquet``, :mod:`simulator.results.bounds`): arithmetic
    intensity (FLOPs per byte of HBM traffic) against achieved TFLOP/s per GPU, log-log, one cloud per phase (a
    closed-form run of decode steps is one point, its mean step; at most :data:`ROOFLINE_POINTS` per phase, evenly
    spaced), under each GPU's roof: min(peak FLOP/s, intensity × peak HBM bandwidth)."""
    shown = points[(points["flops"] > 0) & (points["hbm_bytes"] > 0) & (points["seconds"] > 0)]
    intensity = shown["flops"] / shown["hbm_bytes"]
    achieved = shown["flops"] / shown["seconds"] / 1e12
    roofs = shown[["peak_format", "peak_flops", "peak_hbm_bytes_per_s"]].drop_duplicates().sort_values("peak_flops")
    ridges = roofs["peak_flops"] / roofs["peak_hbm_bytes_per_s"]
    low = min([*intensity, *ridges], default=1.0) / 3
    high = max([*intensity, *ridges], default=1.0) * 3
    figure, ax = plt.subplots(figsize=(6.4, 4.6))
    x = np.geomspace(low, high, 256)
    for style, roof in zip(("-", "--", ":", "-."), roofs.itertuples(index=False), strict=False):
        ax.plot(x, np.minimum(roof.peak_flops, x * roof.peak_hbm_bytes_per_s) / 1e12, color="black", linestyle=style,
                linewidth=1.2, label=f"roof: {roof.peak_hbm_bytes_per_s / 1e9:,.0f} GB/s HBM, "
                f"{roof.peak_flops / 1e12:,.0f} TFLOP/s {str(roof.peak_format).upper()}")
    for phase in ("decode", "mixed", "prefill"):  # the rarer on top
        rows = np.flatnonzero((shown["phase"] == phase).to_numpy())
        if rows.size == 0:
            continue
        if rows.size > ROOFLINE_POINTS:
            rows = rows[np.linspace(0, rows.size - 1, ROOFLINE_POINTS).round().astype(int)]
        ax.scatter(intensity.iloc[rows], achieved.iloc[rows], s=9, alpha=0.55, linewidths=0,
                   color=PHASE_COLOURS[phase], label=f"{PHASE_LABELS[phase]} iterations")
    ax.set(xscale="log", yscale="log", xlim=(low, high),
           xlabel="arithmetic intensity (FLOP per byte of HBM traffic, log)",
           ylabel="achieved TFLOP/s per GPU (log)",
           title=(f"{name}: " if name else "") + "iterations on the roofline")
    _decades(ax.xaxis)
    _decades(ax.yaxis)
    ax.grid(alpha=0.3, which="major")
    ax.legend(fontsize="small", loc="lower right", markerscale=2)
    figure.tight_layout()
    return figure


def sweep_curves(index: pd.DataFrame, rate: str = RATE, slo: dict[str, float] | None = None, name: str = "") -> Figure:
    """Throughput against p99 TTFT and TPOT, p99 TTFT and goodput against the offered rate, one line per policy
    (every swept column other than the rate and the seed; the legend is titled with their names): means over
    replicates with a standard-deviation bar, latencies on log axes, SLO bounds drawn, and each failed point marked
    with an x at its rate (and counted in the title)."""
    failed = index[index["error"].fillna("") != ""] if "error" in index else index.iloc[:0]
    ok = index.drop(failed.index)
    swept = [c for c in index.columns[: list(index.columns).index("seed")]
             if c not in ("point", rate) and index[c].nunique(dropna=False) > 1]  # constants are not policies
    metrics = ["output_throughput", "p99_ttft_ms", "p99_tpot_ms", "request_goodput"]
    keys = [*swept, rate] if rate in ok else [*swept, "point"]
    grouped = ok.groupby(keys, dropna=False)[metrics]
    mean, spread = grouped.mean().reset_index(), grouped.std().fillna(0.0).reset_index()
    figure, axes = plt.subplots(1, 4, figsize=(18, 4))
    panels = [("p99_ttft_ms", "output_throughput"), ("p99_tpot_ms", "output_throughput"), (rate, "p99_ttft_ms"),
              (rate, "request_goodput")]
    by = mean.groupby(swept, dropna=False) if swept else [("all", mean)]
    for key, rows in by:
        label = ", ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))
        errors = spread.loc[rows.index]
        for ax, (x, y) in zip(axes, panels, strict=True):
            if x in rows:
                ax.errorbar(rows[x], rows[y], yerr=errors[y], xerr=None if x == rate else errors[x], marker="o",
                            capsize=3, label=label)
    if rate in failed and len(failed):
        for ax in axes[2:]:
            ax.plot(failed[rate], np.zeros(len(failed)), "x", color="tab:red", markersize=9, label="failed point")
    for column, ax in (("ttft_ms", axes[0]), ("tpot_ms", axes[1]), ("ttft_ms", axes[2])):
        bound = (slo or {}).get(column)
        if bound:
            (ax.axvline if ax is not axes[2] else ax.axhline)(bound, color="tab:red", linestyle="--",
                                                             label=f"SLO {bound:g} ms")
    axes[0].set(xlabel="p99 TTFT (ms, log)", ylabel="output tokens/s", title="throughput vs TTFT", xscale="log")
    axes[1].set(xlabel="p99 TPOT (ms, log)", ylabel="output tokens/s", title="throughput vs TPOT", xscale="log")
    axes[2].set(xlabel="offered rate (req/s)", ylabel="p99 TTFT (ms, log)", title="latency vs rate", yscale="log")
    axes[3].set(xlabel="offered rate (req/s)", ylabel="goodput (req/s)", title="goodput vs rate")
    _log_axis(axes[0].xaxis)
    _log_axis(axes[1].xaxis)
    _log_axis(axes[2].yaxis)
    for ax in axes:
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize="small", title=", ".join(swept) if swept else None)
    if len(failed):
        axes[3].legend(fontsize="small")
    title = f"{name}: " if name else ""
    runs = f"{len(ok):,} runs" + (f", {len(failed):,} failed (x)" if len(failed) else "")
    replicated = bool(len(ok)) and int(grouped.size().max()) > 1
    figure.suptitle(f"{title}{runs}" + ("; bars: ±1 std over replicates" if replicated else ""))
    figure.tight_layout()
    return figure


def capacity_probes(probes, slo: dict[str, float], unit: str = "req/s", axis: str | None = None) -> Figure:
    """A capacity search's probes: each SLO metric against the probed value — a rate in ``unit``, or what ``axis``
    names (closed-loop users, a trace's speed-up) — (meets: filled, misses: open), the limit as a dashed line; log
    axes."""
    figure, axes = plt.subplots(1, len(slo), figsize=(5.5 * len(slo), 4), squeeze=False)
    for ax, (metric, limit) in zip(axes[0], slo.items(), strict=True):
        for holds, style, label in ((True, "o", "meets"), (False, "x", "misses")):
            points = [(p.value, p.summary.get(metric)) for p in probes if p.holds == holds and p.summary]
            points = [(rate, value) for rate, value in points if value is not None and value > 0]
            if points:
                ax.plot(*zip(*points, strict=True), style, label=label)
        ax.axhline(limit, color="k", linestyle="--", linewidth=0.8, label=f"limit {limit:g}")
        ax.set(xscale="log", yscale="log", xlabel=axis or f"offered rate ({unit})", ylabel=metric, title=metric)
        _log_axis(ax.xaxis)
        _log_axis(ax.yaxis)
        ax.legend(fontsize="small")
    figure.tight_layout()
    return figure


def slo_bounds(config: dict) -> dict[str, float]:
    """The SLO bounds a resolved config (as a mapping) states, for SLO lines."""
    return {k: v for k, v in (config.get("slo") or {}).items() if isinstance(v, (int, float))}


def experiment_of(folder: Path) -> tuple[str, dict[str, float]]:
    """The name and SLO bounds of the experiment a folder holds (its ``config.yaml``, or a sweep's first point's),
    for titles and SLO lines; empty when there is none."""
    import yaml

    for candidate in (folder / "config.yaml", folder / "point-00000" / "config.yaml"):
        if candidate.is_file():
            try:
                data = yaml.safe_load(candidate.read_text(encoding="utf-8")) or {}
            except (yaml.YAMLError, UnicodeDecodeError):
                return "", {}
            return str(data.get("name", "")), slo_bounds(data)
    return "", {}


def plot_folder(folder: str | Path) -> list[Path]:
    """Every picture the folder's files allow (a run's ``requests/timeline/iterations/scaling/roofline.parquet`` or a
    sweep's ``index.parquet``), saved as PNG and SVG under ``folder/plots``; returns the files written."""

    folder = Path(folder)
    figures: dict[str, Figure] = {}

    def read(name: str) -> pd.DataFrame:
        try:
            return pd.read_parquet(folder / name)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError: a truncated or foreign file
            raise LLMSimError(f"{folder / name}: not a complete Parquet file ({str(exc).splitlines()[0][:100]})"
                              ) from None

    name, slo = experiment_of(folder)
    requests = None
    if (folder / "requests.parquet").is_file():
        requests = read("requests.parquet")
        if "ttft_ms" not in requests:
            requests = add_latency_columns(requests, SLOConfig())
        figures["latency_cdfs"] = latency_cdfs(requests, slo, name)
    scaling = read("scaling.parquet") if (folder / "scaling.parquet").is_file() else None
    if (folder / "timeline.parquet").is_file() or scaling is not None:
        timeline = read("timeline.parquet") if (folder / "timeline.parquet").is_file() else None
        arrivals = requests["arrival_s"].to_numpy() if requests is not None else None
        figures["timeline"] = timeline_figure(timeline, name, scaling, arrivals)
    if (folder / "iterations.parquet").is_file():
        figures["phases"] = phase_shares(read("iterations.parquet"), name)
    if (folder / "roofline.parquet").is_file() and len(points := read("roofline.parquet")):
        figures["roofline"] = roofline_figure(points, name)
    if (folder / "index.parquet").is_file():
        figures["sweep"] = sweep_curves(read("index.parquet"), slo=slo, name=name)
    if not figures:
        raise LLMSimError(f"{folder}: nothing to plot (no requests, timeline, iterations, roofline or index parquet)")
    out = folder / "plots"
    out.mkdir(exist_ok=True)
    written = []
    for name, figure in figures.items():
        written += save_figure(figure, out / name)
        plt.close(figure)
    return written


def save_figure(figure: Figure, stem: Path) -> list[Path]:
    """``figure`` as ``stem``.png and ``stem``.svg, reproducibly: the same figure gives the same bytes (the SVG's
    element ids from a fixed salt, no creation date)."""
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    figure.savefig(paths[0], dpi=120)
    with plt.rc_context({"svg.hashsalt": "llmsim"}):
        figure.savefig(paths[1], dpi=120, metadata={"Date": None})
    return paths
