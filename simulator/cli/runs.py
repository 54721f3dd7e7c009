"""``llmsim run``, ``report`` and ``plot``: one experiment, and what a person reads of its output folder."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from simulator.api import config_yaml, run, summary_json, write_parquet
from simulator.catalog import load_hardware
from simulator.cli.outputs import check_output_file, publish, staging_folder
from simulator.config import ExperimentConfig, load_experiment
from simulator.config.workload import offered_rate
from simulator.cost.base import COST_MODELS
from simulator.cost.work import gemm_peak
from simulator.errors import LLMSimError
from simulator.fidelity.bands import band_line
from simulator.kv.sizing import kv_dtype
from simulator.report import format_summary
from simulator.report.console import describe_setup
from simulator.report.html import folder_page, run_page, write_page
from simulator.results.observers import write_chrome_trace
from simulator.results.progress import note


def cmd_run(args: argparse.Namespace) -> int:
    if args.timeline and not args.out:
        raise LLMSimError("run: --timeline writes timeline.parquet and iterations.parquet into --out DIR; give --out")
    if args.tokens and not args.out:
        raise LLMSimError("run: --tokens writes tokens.parquet (one row per output token) into --out DIR; give --out")
    overrides = [*args.set, *([f"engine={args.engine}"] if args.engine else [])]
    config = with_iteration_bounds(load_experiment(args.file, overrides))
    staging = staging_folder(Path(args.out)) if args.out else None  # creates --out: --trace may name a file in it
    try:
        if args.trace:
            check_output_file(Path(args.trace), "--trace")
        if args.report:
            check_output_file(Path(args.report), "--report")
        result = run(config, requests_path=staging / "requests.parquet" if staging else None,  # streamed
                     observe=bool(args.trace or args.timeline), tokens=args.tokens, progress=True)
        if staging is not None:
            result.save(staging)
            if args.tokens:
                import pandas as pd

                columns = ["request_id", "first_scheduled_s", "status"]
                requests = pd.read_parquet(staging / "requests.parquet", columns=columns)
                write_parquet(result.tokens(requests), staging / "tokens.parquet", config)
            publish(staging, Path(args.out))
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    if args.json:
        print(summary_json(result.summary, config))
    else:
        offered = offered_rate(config.workload.arrival)
        formats = f"weights {config.dtype}, KV cache {kv_dtype(config.kv_cache.dtype, config.dtype)}"
        peak_format, _ = gemm_peak(load_hardware(config.hardware), config.dtype)
        print(format_summary(config.name, result.summary, bool(config.slo.bounds()), offered,
                             formats, describe_setup(config), peak_format))
        print(band_line(config))
    if args.out:
        extra = ", timeline.parquet, iterations.parquet" if result.observer is not None else ""
        extra += ", scaling.parquet" if result.scaling_events is not None else ""
        extra += ", roofline.parquet" if result.bounds is not None else ""
        extra += ", tokens.parquet" if args.tokens else ""
        note(f"wrote {args.out}/summary.json, requests.parquet, config.yaml{extra}")
    if args.trace:
        assert result.observer is not None  # run(observe=True) with --trace
        note(f"wrote {write_chrome_trace(result.observer, args.trace)} (open in https://ui.perfetto.dev)")
    if args.report:
        note(f"wrote {_run_report(result, config, args)}")
    return 0


def with_iteration_bounds(config: ExperimentConfig) -> ExperimentConfig:
    """``llmsim run`` records iteration bounds (``metrics.iteration_bounds``) unless the experiment says whether to,
    or its cost model prices no FLOPs and bytes."""
    if "iteration_bounds" in config.metrics.model_fields_set or not COST_MODELS.get(config.cost_model.kind).prices_work:
        return config
    return config.model_copy(update={"metrics": config.metrics.model_copy(update={"iteration_bounds": True})})


def _run_report(result, config, args: argparse.Namespace) -> Path:
    """The run's HTML report (its tables from memory, or the streamed request file)."""


    frames = {"requests": result.requests}
    if frames["requests"] is None:  # streamed to --out, latency columns added there
        import pandas as pd

        frames["requests"] = pd.read_parquet(Path(args.out) / "requests.parquet")
    if result.observer is not None:
        frames["timeline"], frames["iterations"] = result.timeline, result.iterations
    if result.scaling_events is not None:
        frames["scaling"] = result.scaling
    if result.bounds is not None:
        frames["roofline"] = result.roofline
    summary = json.loads(summary_json(result.summary, config))
    return write_page(run_page(summary, config_yaml(config), frames), args.report)


def cmd_report(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    if not folder.is_dir():
        raise LLMSimError(f"report: {folder}: not a folder (give a run's or a sweep's --out folder)")
    output = Path(args.output) if args.output else folder / "report.html"
    check_output_file(output, "--output")
    note(f"wrote {write_page(folder_page(folder), output)}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from simulator.report.plots import plot_folder

    for path in plot_folder(args.folder):
        note(f"wrote {path}")
    return 0
