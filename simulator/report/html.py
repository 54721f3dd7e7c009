"""One self-contained HTML report per result: ``llmsim report DIR`` and ``--report FILE`` on run, sweep, capacity
and validate.

The page needs no network and no files beside it: figures are inline SVG (their text stays searchable; undated
and salted so that the same result gives the same bytes), styles inline; every number is printed with its unit
(taken from the metric's name: ``_ms``, ``_s``, ``_gib_per_gpu``, rates, fractions shown as %) and four
significant digits. A run's report has its setup (what ``summary.json``'s ``about`` says), memory plan, summary
tables, the iteration bounds per phase (with ``metrics.iteration_bounds``), plots (latency CDFs, the replica timeline
or replica count, phase shares, the iterations' roofline) and resolved config; a sweep's
the table of points and the curves (with ±1 std bars over replicates); a capacity search its probes; a
validation its report text and plot.
"""

from __future__ import annotations

import html
import io
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from simulator.config.experiment import ExperimentConfig
from simulator.config.slo import SLOConfig
from simulator.errors import LLMSimError
from simulator.report.console import describe_setup
from simulator.results.metrics import add_latency_columns
from simulator.studies.deployment_search import PlanQuestion
from simulator.studies.plan_report import pareto_figure, question_text

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; font-size: .92em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
pre { background: #f7f7f7; padding: .8em; overflow-x: auto; font-size: .85em; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: .9em; }
"""

LATENCIES = (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E latency", "e2el"), ("queue", "queue"),
             ("KV transfer", "kv_transfer"), ("decode queue", "decode_queue"))
STATS = ("mean", "std", "median", "p90", "p95", "p99", "p99.9")
PERCENT_KEYS = ("slo_attainment", "prefix_cache_hit_rate", "peak_kv_usage", "mean_kv_usage")
RATE_UNITS = {"request_throughput": "req/s", "request_goodput": "req/s", "output_throughput": "tok/s",
              "total_token_throughput": "tok/s", "gpu_hours": "GPU-hours"}


def unit_of(key: str) -> str:
    """The unit a summary key's value is in, as its name says ('%' for fractions, shown × 100)."""
    if key in RATE_UNITS:
        return RATE_UNITS[key]
    if key.endswith("_frac") or key.startswith(PERCENT_KEYS):
        return "%"
    for suffix, unit in (("_ms", "ms"), ("_gib_per_gpu", "GiB per GPU"), ("_tokens", "tokens"), ("_s", "s")):
        if key.endswith(suffix):
            return unit
    return ""


def number(value: Any, unit: str = "") -> str:
    """Four significant digits (integers whole, with thousands separators); a missing value is '–'."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return html.escape(str(value))
    if unit == "%":
        return f"{100 * value:.4g}%"
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        text = f"{int(value):,}"
    else:
        text = f"{value:,.4g}" if abs(value) >= 1e-3 else f"{value:.4g}"
    return f"{text} {unit}".strip()


class Page:
    """An HTML page built section by section."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.parts: list[str] = [f"<h1>{html.escape(title)}</h1>"]

    def heading(self, text: str) -> None:
        self.parts.append(f"<h2>{html.escape(text)}</h2>")

    def paragraph(self, text: str) -> None:
        self.parts.append(f"<p>{html.escape(text)}</p>")

    def table(self, header: list[str], rows: list[list[Any]]) -> None:
        head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{cell if isinstance(cell, Markup) else number(cell)}</td>"
                                        for cell in row) + "</tr>" for row in rows)
        self.parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")

    def details(self, summary: str, header: list[str], rows: list[list[Any]]) -> None:
        """A table folded away under ``summary`` (open it in the browser)."""
        self.parts.append(f"<details><summary>{html.escape(summary)}</summary>")
        self.table(header, rows)
        self.parts.append("</details>")

    def preformatted(self, text: str) -> None:
        self.parts.append(f"<pre>{html.escape(text)}</pre>")

    def figure(self, figure: Figure, caption: str) -> None:
        """The figure as inline SVG (then closed)."""
        import matplotlib.pyplot as plt

        buffer = io.StringIO()
        with plt.rc_context({"svg.hashsalt": "llmsim"}):  # the same figure, the same ids: reports are reproducible
            figure.savefig(buffer, format="svg", metadata={"Date": None})
        plt.close(figure)
        svg = buffer.getvalue()
        svg = svg[svg.index("<svg"):]  # drop the XML prolog and doctype: inline SVG needs neither
        self.parts.append(f"<figure>{svg}<figcaption>{html.escape(caption)}</figcaption></figure>")

    def html(self) -> str:
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{html.escape(self.title)}</title><style>{STYLE}</style></head><body>\n"
                + "\n".join(self.parts) + "\n</body></html>\n")


class Markup(str):
    """Table cell text already escaped."""


def _setup_rows(about: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for key, value in about.items():
        if value is None:
            continue
        if key == "pools" and isinstance(value, list):
            value = "; ".join(_pool_text(pool) for pool in value)
        elif isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        rows.append([key, Markup(html.escape(str(value)))])
    return rows


def _pool_text(pool: Any) -> str:
    """``2 × h100-sxm TP 4 PP 1 DP 1 EP 1`` from a pool of a summary's ``about``, with what it states (a summary
    from another version, or edited by hand, may lack some)."""
    if not isinstance(pool, dict):
        return str(pool)
    degrees = [f"{label} {pool[key]}" for label, key in (("TP", "tensor_parallel"), ("PP", "pipeline_parallel"),
                                                          ("DP", "data_parallel"), ("EP", "expert_parallel"))
               if key in pool]
    return " ".join([f"{pool.get('replicas', '?')} × {pool.get('hardware', '?')}", *degrees])


def _held_to_rows(resolved: dict[str, Any]) -> list[list[Any]]:
    """The workload a run served (arrivals, requests, length distributions) and the SLO it was held to, read from its
    resolved config; none when the config no longer validates (a folder of another llmsim version)."""
    try:
        config = ExperimentConfig.model_validate(resolved)
    except ValueError:
        return []
    workload = describe_setup(config).split("\n")[1].removeprefix("workload:").strip()
    slo = ", ".join(f"{key} <= {value:g}" for key, value in config.slo.bounds().items()) or "none"
    return [["workload", workload], ["slo (per request)", slo]]


def _summary_sections(page: Page, summary: dict[str, Any]) -> None:
    shown: set[str] = set()
    page.heading("Memory plan (one GPU)")
    memory = [k for k in ("weights_gib_per_gpu", "draft_gib_per_gpu", "lora_gib_per_gpu", "workspace_gib_per_gpu",
                          "kv_pool_gib_per_gpu", "kv_num_blocks", "kv_capacity_tokens") if k in summary]
    page.table(["", "value"], [[k, Markup(number(summary[k], unit_of(k)))] for k in memory])
    shown.update(memory)
    page.heading("Latency")
    rows = []
    for label, name in LATENCIES:
        keys = [f"{stat}_{name}_ms" for stat in STATS]
        if not any(k in summary for k in keys):
            continue
        rows.append([label, *(Markup(number(summary.get(k))) for k in keys)])
        shown.update(keys)
    page.table(["ms", *STATS], rows)
    bounds = _bound_rows(summary)
    if bounds:
        page.heading("Iteration bounds (one GPU)")
        page.paragraph("Per phase: the share of its GPU-busy time in iterations bound by compute, by HBM bandwidth or "
                       "by fixed costs (launches, host, communication), and the time-weighted mean fraction of the "
                       "GPU's peak FLOP/s and HBM bandwidth its iterations reached.")
        page.table(["phase", "iterations", "busy", "compute-bound", "memory-bound", "fixed-bound", "of peak FLOP/s",
                    "of peak HBM"], bounds)
        shown.update(key for key in summary if key.startswith("iter_"))
    page.heading("Every figure of the summary")
    rest = [k for k in sorted(summary) if k not in shown and not isinstance(summary[k], (dict, list))]
    page.table(["metric", "value"], [[k, Markup(number(summary[k], unit_of(k)))] for k in rest])


def _bound_rows(summary: dict[str, Any]) -> list[list[Any]]:
    """A row per phase that ran (and all of them) of the ``iter_*`` metrics (:mod:`simulator.results.bounds`); a
    figure the summary lacks (one edited by hand, or of another version) shows as empty."""
    stats = ("iterations", "busy_s", "compute_bound_frac", "memory_bound_frac", "fixed_bound_frac", "peak_flops_frac",
             "peak_hbm_frac")
    return [[phase, *(Markup(number(summary.get(f"iter_{phase}_{stat}"), unit_of(stat))) for stat in stats)]
            for phase in ("decode", "prefill", "mixed", "all") if summary.get(f"iter_{phase}_busy_s")]


def run_page(summary: dict[str, Any], config_text: str, frames: dict[str, pd.DataFrame]) -> str:
    """A run's report from its summary (``summary.json``'s content), resolved config text and tables
    (``requests``, ``timeline``, ``iterations``, ``scaling``; any may be missing)."""
    from simulator.report.plots import latency_cdfs, phase_shares, roofline_figure, slo_bounds, timeline_figure

    about = summary.get("about", {})
    name = about.get("name", "experiment")
    page = Page(f"llmsim run: {name}")
    page.paragraph(f"llmsim {summary.get('llmsim_version', '?')}, summary schema {summary.get('schema_version', '?')}"
                   f"; {number(summary.get('completed'))} of {number(summary.get('num_requests'))} requests "
                   f"completed, {number(summary.get('num_rejected'))} rejected, {number(summary.get('num_failed'))} "
                   f"failed, {number(summary.get('num_cancelled', 0))} cancelled by their clients.")
    config = yaml.safe_load(config_text) or {}
    page.heading("Setup")
    page.table(["", ""], _setup_rows(about) + _held_to_rows(config))
    metrics = {k: v for k, v in summary.items() if k not in ("about", "schema_version", "llmsim_version")}
    _summary_sections(page, metrics)
    slo = slo_bounds(config)
    page.heading("Plots")
    if "requests" in frames and len(frames["requests"]):
        page.figure(latency_cdfs(frames["requests"], slo, name), "latency distributions of the finished requests")
    if "timeline" in frames or "scaling" in frames:
        arrivals = frames["requests"]["arrival_s"].to_numpy() if "requests" in frames else None
        page.figure(timeline_figure(frames.get("timeline"), name, frames.get("scaling"), arrivals),
                    "replicas over time")
    if "iterations" in frames:
        page.figure(phase_shares(frames["iterations"], name), "where each replica's time went")
    if "roofline" in frames and len(frames["roofline"]):
        page.figure(roofline_figure(frames["roofline"], name),
                    "each iteration's arithmetic intensity and achieved FLOP/s under the GPU's roof (a run of "
                    "identical decode steps is one point, its mean step)")
    page.heading("Resolved config")
    page.preformatted(config_text)
    return page.html()


def sweep_page(index: pd.DataFrame, name: str, slo: dict[str, float], what: str = "sweep") -> str:
    """A sweep's report (or a benchmark's, ``what``): every point's row and the curves."""
    from simulator.report.plots import sweep_curves

    page = Page(f"llmsim {what}: {name}")
    failed = int((index["error"] != "").sum()) if "error" in index else 0
    page.paragraph(f"{len(index)} {'benchmarks' if what == 'benchmark' else 'points'}, {failed} failed.")
    page.heading("Curves")
    page.figure(sweep_curves(index, slo=slo, name=name), "throughput and latency against the swept parameters")
    page.heading("Points")
    swept = list(index.columns[:list(index.columns).index("error")]) if "error" in index else ["point"]
    lead = [*swept, *(["error"] if failed else []), *(c for c in SWEEP_HEADLINE if c in index)]
    page.table(lead, _cells(index[lead]))
    rest = [c for c in index.columns if c not in lead and c != "error"]
    page.details(f"every other column ({len(rest)}, alphabetical)", ["point", *rest], _cells(index[["point", *rest]]))
    return page.html()


# The metrics a planner reads first, in the order they are read; a sweep report's first table shows these.
SWEEP_HEADLINE = ("completed", "num_rejected", "request_throughput", "output_throughput", "slo_attainment",
                  "request_goodput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "p99_itl_ms",
                  "p99_e2el_ms", "peak_kv_usage")


def _cells(frame: pd.DataFrame) -> list[list[Any]]:
    return [[Markup(number(v)) if not isinstance(v, str) else Markup(html.escape(v)) for v in row]
            for row in frame.itertuples(index=False)]


def text_page(title: str, text: str, figure: Figure | None = None, caption: str = "") -> str:
    """A report of a command's text output (capacity, validate), with its figure if any."""
    page = Page(title)
    page.preformatted(text)
    if figure is not None:
        page.figure(figure, caption)
    return page.html()


def folder_page(folder: str | Path) -> str:
    """The report of a run's ``--out`` folder (``summary.json``) or a sweep's (``index.parquet``)."""
    import pandas as pd

    folder = Path(folder)

    def read(name: str) -> pd.DataFrame:
        try:
            return pd.read_parquet(folder / name)
        except (OSError, ValueError) as exc:
            raise LLMSimError(f"{folder / name}: not a complete Parquet file ({str(exc).splitlines()[0][:100]})"
                              ) from None

    if (folder / "index.parquet").is_file():
        from simulator.report.plots import experiment_of

        name, slo = experiment_of(folder)
        index = read("index.parquet")
        what = "benchmark" if "strategy" in index else "sweep"  # llmsim benchmark's index: a sweep over strategies
        return sweep_page(index, name or folder.name, slo, what)
    if not (folder / "summary.json").is_file():
        raise LLMSimError(f"{folder}: nothing to report (no summary.json of a run, no index.parquet of a sweep)")
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LLMSimError(f"{folder / 'summary.json'}:{exc.lineno}: not JSON ({exc.msg})") from None
    except UnicodeDecodeError:
        raise LLMSimError(f"{folder / 'summary.json'}: not UTF-8 text") from None
    if not isinstance(summary, dict):
        raise LLMSimError(f"{folder / 'summary.json'}: a run's summary is a JSON object, got {type(summary).__name__}")
    try:
        config_text = (folder / "config.yaml").read_text(encoding="utf-8") if (folder / "config.yaml").is_file() else ""
    except UnicodeDecodeError:
        raise LLMSimError(f"{folder / 'config.yaml'}: not UTF-8 text") from None
    if not isinstance(summary.get("about", {}), dict):
        raise LLMSimError(f"{folder / 'summary.json'}: 'about' is a JSON object, got {type(summary['about']).__name__}")
    try:
        config = yaml.safe_load(config_text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise LLMSimError(f"{folder / 'config.yaml'}:{mark.line + 1 if mark else 1}: not YAML "
                          f"({getattr(exc, 'problem', None) or type(exc).__name__})") from None
    if not isinstance(config, (dict, type(None))):
        raise LLMSimError(f"{folder / 'config.yaml'}: a run's config is a YAML mapping, got {type(config).__name__}")
    frames = {name: read(f"{name}.parquet") for name in ("requests", "timeline", "iterations", "scaling", "roofline")
              if (folder / f"{name}.parquet").is_file()}
    if "requests" in frames and "ttft_ms" not in frames["requests"]:

        frames["requests"] = add_latency_columns(frames["requests"], SLOConfig())
    return run_page(summary, config_text, frames)


def write_page(text: str, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def plan_page(question: PlanQuestion, lengths: tuple[int, int], plan: pd.DataFrame, pareto: pd.DataFrame,
              band: str) -> str:
    """The self-contained HTML report of a plan."""
    page = Page(f"llmsim plan: {question.model} on {question.gpu}")
    page.paragraph(question_text(question, lengths))
    page.paragraph(band)
    best = plan[plan["max_users"].notna()]
    page.heading("Deployments that meet the SLO, best output tokens/s per GPU first")
    columns = [c for c in ("deployment", "gpus", "max_users", "tokens_per_s_per_gpu", "tokens_per_s_per_user",
                           f"{question.percentile}_ttft_ms", f"{question.percentile}_tpot_ms", "capacity_rps",
                           "capacity_rps_ci95", "capacity_rps_per_gpu", "capacity_rps_in_gpus",
                           "usd_per_million_tokens", "gpus_for_target", "usd_per_hour_for_target") if c in plan]
    page.table(columns, best[columns].to_numpy().tolist())
    if len(pareto):
        page.figure(pareto_figure(pareto, question, f"{question.model} on {question.gpu}: throughput vs speed"),
                    "Every simulated concurrency of every deployment searched (closed-loop users); the lines join "
                    "each mode's Pareto front. Right of the dashed line: TPOT within the limit.")
    page.heading("Every deployment searched")
    page.table(["deployment", "gpus", "status"], plan[["deployment", "gpus", "status"]].to_numpy().tolist())
    return page.html()
