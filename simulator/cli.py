"""The ``llmsim`` command. Thin: it parses arguments and calls the API.

Input errors print one line (``llmsim: error: ...``) and exit with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import typing
import warnings
from pathlib import Path

from simulator.catalog import load_hardware, load_model
from simulator.config import DEFAULT_EXPERIMENT
from simulator.dtypes import BYTES_PER_ELEMENT, WEIGHT_DTYPES
from simulator.errors import LLMSimError
from simulator.kv.sizing import kv_cache_bytes
from simulator.progress import note


def _check_output_file(path: Path, option: str) -> None:
    """Fail before the run, not after it, when ``path`` cannot be written as a file."""
    if path.is_dir():
        raise LLMSimError(f"{option} {path}: is a folder; give a file name")
    if not path.parent.is_dir():
        raise LLMSimError(f"{option} {path}: folder {path.parent} does not exist")


def _output_folder(out: Path, option: str = "--out") -> Path:
    """``out``, created if needed; a file of that name or an unwritable place is a one-line error."""
    if out.exists() and not out.is_dir():
        raise LLMSimError(f"{option} {out}: is a file; give a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LLMSimError(f"{option} {out}: cannot create the folder: {exc.strerror or exc}") from None
    if not os.access(out, os.W_OK):
        raise LLMSimError(f"{option} {out}: the folder is not writable")
    return out


def _staging_folder(out: Path) -> Path:
    """A fresh hidden folder inside ``out`` where a run writes its outputs before they replace the old ones."""
    staging = _output_folder(out) / f".run-{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    return staging


def _publish(staging: Path, out: Path) -> None:
    """Move a finished run's files over the folder's old ones (each move atomic), dropping outputs of an earlier
    run that this one does not write (an old timeline beside a new summary would mislead)."""
    for stale in ("timeline.parquet", "iterations.parquet"):
        if not (staging / stale).exists():
            (out / stale).unlink(missing_ok=True)
    for path in sorted(staging.iterdir(), key=lambda p: p.name == "summary.json"):  # summary last: "complete"
        os.replace(path, out / path.name)


def _cmd_run(args: argparse.Namespace) -> int:
    from simulator.api import run, summary_json, write_parquet
    from simulator.config import load_experiment
    from simulator.kv.sizing import kv_dtype
    from simulator.report import format_summary

    if args.timeline and not args.out:
        raise LLMSimError("run: --timeline writes timeline.parquet and iterations.parquet into --out DIR; give --out")
    if args.tokens and not args.out:
        raise LLMSimError("run: --tokens writes tokens.parquet (one row per output token) into --out DIR; give --out")
    overrides = [*args.set, *([f"engine={args.engine}"] if args.engine else [])]
    config = load_experiment(args.file, overrides)
    if args.trace:
        _check_output_file(Path(args.trace), "--trace")
    if args.report:
        _check_output_file(Path(args.report), "--report")
    staging = _staging_folder(Path(args.out)) if args.out else None
    try:
        result = run(config, requests_path=staging / "requests.parquet" if staging else None,  # streamed
                     observe=bool(args.trace or args.timeline), tokens=args.tokens, progress=True)
        if staging is not None:
            result.save(staging)
            if args.tokens:
                import pandas as pd

                requests = pd.read_parquet(staging / "requests.parquet", columns=["request_id", "first_scheduled_s"])
                write_parquet(result.tokens(requests), staging / "tokens.parquet", config)
            _publish(staging, Path(args.out))
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    if args.json:
        print(summary_json(result.summary, config))
    else:
        arrival = config.workload.arrival
        offered = getattr(arrival, "rate", None) or getattr(arrival, "mean_rate", None)
        formats = f"weights {config.dtype}, KV cache {kv_dtype(config.kv_cache.dtype, config.dtype)}"
        print(format_summary(config.name, result.summary, config.slo.model_dump(exclude_none=True) != {}, offered,
                             formats))
    if args.out:
        extra = ", timeline.parquet, iterations.parquet" if result.observer is not None else ""
        extra += ", scaling.parquet" if result.scaling_events is not None else ""
        extra += ", tokens.parquet" if args.tokens else ""
        note(f"wrote {args.out}/summary.json, requests.parquet, config.yaml{extra}")
    if args.trace:
        from simulator.observe import write_chrome_trace

        note(f"wrote {write_chrome_trace(result.observer, args.trace)} (open in https://ui.perfetto.dev)")
    if args.report:
        note(f"wrote {_run_report(result, config, args)}")
    return 0


def _run_report(result, config, args: argparse.Namespace) -> Path:
    """The run's HTML report (its tables from memory, or the streamed request file)."""
    import json

    from simulator.api import config_yaml, summary_json
    from simulator.report.html import run_page, write_page

    frames = {"requests": result.requests}
    if frames["requests"] is None:  # streamed to --out, latency columns added there
        import pandas as pd

        frames["requests"] = pd.read_parquet(Path(args.out) / "requests.parquet")
    if result.observer is not None:
        frames["timeline"], frames["iterations"] = result.timeline, result.iterations
    if result.scaling_events is not None:
        frames["scaling"] = result.scaling
    summary = json.loads(summary_json(result.summary, config))
    return write_page(run_page(summary, config_yaml(config), frames), args.report)


def _cmd_report(args: argparse.Namespace) -> int:
    from simulator.report.html import folder_page, write_page

    folder = Path(args.folder)
    if not folder.is_dir():
        raise LLMSimError(f"report: {folder}: not a folder (give a run's or a sweep's --out folder)")
    output = Path(args.output) if args.output else folder / "report.html"
    _check_output_file(output, "--output")
    note(f"wrote {write_page(folder_page(folder), output)}")
    return 0


def _cmd_kv_size(args: argparse.Namespace) -> int:
    if args.model and not (args.layers or args.kv_heads or args.head_dim):
        return _kv_size_of_model(args)
    if args.model:
        model = load_model(args.model)
        attention = model.layers[0].attention
        if len(model.layers) > 1 or attention.kind != "full":
            raise LLMSimError(f"kv-size: --layers/--kv-heads/--head-dim override a uniform full-attention model; "
                              f"{model.name} has {len(model.layers)} layer groups ({attention.kind} attention)")
        layers, kv_heads, head_dim = model.num_layers, attention.num_kv_heads, attention.head_dim
    else:
        layers, kv_heads, head_dim = args.layers, args.kv_heads, args.head_dim
    layers = args.layers or layers
    kv_heads, head_dim = args.kv_heads or kv_heads, args.head_dim or head_dim
    missing = [f"--{n}" for n, v in (("layers", layers), ("kv-heads", kv_heads), ("head-dim", head_dim)) if not v]
    if missing:
        raise LLMSimError(f"kv-size: give --model or {', '.join(missing)}")
    per_token = kv_cache_bytes(layers, kv_heads, head_dim, args.dtype, 1, 1)
    total = per_token * args.context * args.batch
    print(
        f"KV bytes per token = 2 x {layers} layers x {kv_heads} kv_heads x {head_dim} head_dim x "
        f"{BYTES_PER_ELEMENT[args.dtype]:g} B ({args.dtype}) = {per_token:,.0f} B"
    )
    print(f"x {args.context:,} tokens x {args.batch:,} sequences = {total / 1e9:.2f} GB ({total / 2**30:.2f} GiB)")
    return 0


def _attended(attention) -> str:
    """How many cached tokens a layer's queries see, as ``llmsim models`` labels it: ``(W)`` for a span of W,
    ``(top-K)`` for a sparse selection, nothing for the whole context."""
    if attention.span:
        return f"({attention.span})"
    return f"(top-{attention.index_topk})" if attention.index_topk else ""


def _cmd_models(args: argparse.Namespace) -> int:
    """The model catalog: layer groups, total and active parameters, checkpoint format, KV bytes per token."""
    from simulator.catalog import model_names

    rows = []
    for name in model_names():
        model = load_model(name)
        growing = sum(g.count * g.attention.kv_bytes_per_token(2.0) for g in model.layers if not g.attention.span)
        rows.append({
            "name": name, "source": model.source, "layers": model.num_layers,
            "groups": [f"{g.count}x {g.attention.kind}{_attended(g.attention)} {g.ffn.kind}" for g in model.layers],
            "total_params": model.num_params, "active_params": model.active_params,
            "checkpoint_dtype": model.quantization.dtype if model.quantization else "bf16",
            "kv_bytes_per_token": growing, "kv_bytes_per_token_in_windows": model.kv_bytes_per_token(2.0),
        })
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'model':18} {'total':>9} {'active':>8} {'weights':>9} {'KV/token':>9}  layers")
    for row in rows:
        print(f"{row['name']:18} {row['total_params'] / 1e9:8.1f}B {row['active_params'] / 1e9:7.1f}B "
              f"{row['checkpoint_dtype']:>9} {row['kv_bytes_per_token'] / 1024:7.1f}KiB  {', '.join(row['groups'])}")
    print("KV/token: bf16, the layers whose KV grows with the context (window layers hold at most their span)")
    return 0


def _cmd_gpus(args: argparse.Namespace) -> int:
    """The GPU catalog: spec-sheet numbers and the generation whose fitted parameters each takes."""
    from simulator.catalog import hardware_names

    rows = []
    for name in hardware_names():
        hw = load_hardware(name)
        peaks = hw.peak_tflops.model_dump()
        rows.append({"name": name, "generation": hw.generation, "memory_gib": hw.memory_gib,
                     "memory_bandwidth_gb_per_s": hw.memory_bandwidth_gb_per_s, "peak_tflops": peaks,
                     "interconnect_gb_per_s": hw.interconnect_gb_per_s, "gpus_per_node": hw.node.gpus_per_node,
                     "sm_count": hw.sm_count, "description": hw.description})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'gpu':16} {'generation':10} {'memory':>8} {'HBM GB/s':>9} {'bf16':>7} {'fp8':>7} {'fp4':>7} "
          f"{'link GB/s':>9} {'SMs':>4}  per node")
    for row in rows:
        peak = row["peak_tflops"]
        cells = [f"{peak[k]:7,.0f}" if peak.get(k) else f"{'-':>7}" for k in ("bf16", "fp8", "fp4")]
        print(f"{row['name']:16} {row['generation']:10} {row['memory_gib']:6.0f}Gi "
              f"{row['memory_bandwidth_gb_per_s']:9,.0f} {' '.join(cells)} {row['interconnect_gb_per_s']:9,.0f} "
              f"{row['sm_count'] or '-':>4}  {row['gpus_per_node']}")
    print("peaks: dense TFLOP/s per format; link: GPU-GPU per direction; SMs: streaming multiprocessors (AMD: CUs)")
    return 0


def _cmd_workloads(args: argparse.Namespace) -> int:
    """The workload presets with their sources and statistics, or (``--fit``) a new preset's YAML."""
    from simulator.catalog.workloads import fit_preset, load_preset, max_entropy_preset, preset_names, preset_yaml

    if args.fit:
        print(preset_yaml(fit_preset(args.fit, args.name)), end="")
        return 0
    if args.max_entropy:
        print(preset_yaml(max_entropy_preset(args.name, dict(args.max_entropy))), end="")
        return 0
    presets = [load_preset(name) for name in preset_names()]
    if args.json:
        print(json.dumps(presets, indent=2))
        return 0
    print(f"{'preset':22} {'input p50/mean/p99':>22} {'output p50/mean/p99':>22} {'rate/s':>7}  source")
    for preset in presets:
        stats = preset["statistics"]
        cells = ["/".join(f"{stats[part][k]:,.0f}" if k in stats[part] else "-" for k in ("p50", "mean", "p99"))
                 for part in ("input_tokens", "output_tokens")]
        rate = f"{stats['rate_per_s']:7.2f}" if "rate_per_s" in stats else f"{'-':>7}"
        print(f"{preset['name']:22} {cells[0]:>22} {cells[1]:>22} {rate}  {preset['source'].split(' (')[0]}")
    print("use as workload: {preset: NAME, ...}; the section's own keys override the preset's")
    return 0


def _kv_size_of_model(args: argparse.Namespace) -> int:
    """Per layer group: KV elements per token, tokens a sequence of ``--context`` holds there (a bounded span holds
    at most its span), and bytes; the model's parameter counts."""
    model = load_model(args.model)
    element = BYTES_PER_ELEMENT[args.dtype]
    groups, total = [], 0.0
    for group in model.layers:
        attention = group.attention
        per_token = group.count * attention.kv_bytes_per_token(element)
        held = min(args.context, attention.span) if attention.span else args.context
        state = group.count * attention.state_elements() * (attention.state_bytes or element)
        nbytes = per_token * held * args.batch + state * args.batch
        total += nbytes
        groups.append({"layers": group.count, "attention": attention.kind, "span": attention.span,
                       "kv_bytes_per_token": per_token, "tokens_held": held, "state_bytes_per_sequence": state,
                       "kv_bytes": nbytes})
    growing = sum(g["kv_bytes_per_token"] for g in groups if not g["span"])
    report = {"model": model.name, "total_params": model.num_params, "active_params": model.active_params,
              "dtype": args.dtype, "context": args.context, "batch": args.batch, "groups": groups,
              "kv_bytes_per_token": growing, "kv_bytes": total}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{model.name}: {model.num_params / 1e9:.2f} B parameters, {model.active_params / 1e9:.2f} B active per "
          f"token")
    for g in groups:
        span = f", span {g['span']:,}" if g["span"] else ""
        if g["state_bytes_per_sequence"]:
            print(f"  {g['layers']:3d} x {g['attention']} mixer: a state of {g['state_bytes_per_sequence']:,.0f} B per "
                  f"sequence x {args.batch:,} = {g['kv_bytes'] / 1e9:.3f} GB")
        elif g["attention"] != "none":
            print(f"  {g['layers']:3d} x {g['attention']} attention{span}: {g['kv_bytes_per_token']:,.0f} B per "
                  f"token ({args.dtype}) x {g['tokens_held']:,} tokens x {args.batch:,} = {g['kv_bytes'] / 1e9:.3f} GB")
    print(f"context-growing layers: {growing:,.0f} B per token; {args.context:,} tokens x {args.batch:,} sequences "
          f"= {total / 1e9:.2f} GB ({total / 2**30:.2f} GiB)")
    return 0


def _cmd_steptime(args: argparse.Namespace) -> int:
    from simulator.fidelity.steptime import predict_steps, read_steps

    table = predict_steps(read_steps(args.input), args.model, args.hardware, args.tp, args.engine, args.dtype, args.pp)
    if args.output:
        table.to_csv(args.output, index=False)
        note(f"wrote {len(table)} rows to {args.output}")
    else:
        print(table.round(4).to_csv(index=False), end="")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from simulator.catalog.generations import generation_names

    if args.generation is not None and args.generation not in generation_names():
        raise LLMSimError(f"validate: --generation: unknown {args.generation!r} "
                          f"(allowed: {', '.join(generation_names())})")
    if args.runs is not None:
        return _validate_runs(args)
    from simulator.fidelity.kernels import left_out
    from simulator.fidelity.report import validate_all, write_report

    data = Path(args.data)
    if not data.is_dir():
        raise LLMSimError(f"validate: data folder not found: {data}")
    if args.report:
        _check_output_file(Path(args.report), "--report")
    results = validate_all(data, args.engine, args.generation)
    text = write_report(results, Path(args.plot) if args.plot else None)
    if (data / "kernels").is_dir() and (omitted := left_out(data / "kernels")):
        text += "\n\n== left out (not priced) ==\n" + "\n".join(omitted)
    print(text)
    if args.report:
        from simulator.fidelity.report import kernels_figure

        _validation_report(args.report, f"llmsim validate --data {data}", text, kernels_figure(results))
    return 0


def _validation_report(path: str, title: str, text: str, figure) -> None:
    from simulator.report.html import text_page, write_page

    page = text_page(title, text, figure, "predicted against measured (log-log)")
    note(f"wrote {write_page(page, path)}")


def _validate_runs(args: argparse.Namespace) -> int:
    from simulator.fidelity.silicon import RunSettings, runs_report, validate_runs

    model_dir = Path(args.model_configs) if args.model_configs else None
    if model_dir is not None and not model_dir.is_dir():
        raise LLMSimError(f"validate: --model-configs: folder not found: {model_dir}")
    if args.report:
        _check_output_file(Path(args.report), "--report")
    frame = validate_runs(args.runs, model_dir, args.jobs,
                          RunSettings(length_range=args.length_range, generation=args.generation,
                                      client_connections=args.client_connections))
    if args.output:
        frame.to_csv(args.output, index=False)
    text = runs_report(frame, Path(args.plot) if args.plot else None)
    print(text)
    if args.output:
        print(f"rows: {args.output}")
    if args.report:
        from simulator.fidelity.silicon import runs_figure

        _validation_report(args.report, f"llmsim validate --runs {args.runs}", text, runs_figure(frame))
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    import yaml

    from simulator.fidelity.calibrate import calibrate
    from simulator.fidelity.kernel_fit import fit_kernels
    from simulator.fidelity.kernels import GPUS

    ops = Path(args.ops) if args.ops else None
    data = Path(args.data) if args.data else None
    kernels = Path(args.kernels) if args.kernels else None
    for folder in (ops, data, kernels):
        if folder is not None and not folder.is_dir():
            raise LLMSimError(f"calibrate: folder not found: {folder}")
    if kernels is not None:
        if args.gpu not in GPUS:
            raise LLMSimError(f"calibrate: --gpu {args.gpu!r} (kernel-table GPUs: {', '.join(GPUS)})")
        if ops or data:
            raise LLMSimError("calibrate: --kernels fits on its own (without --ops / --data)")
        if args.framework:
            return _write_framework_kernels(args, kernels)
        profile, report = fit_kernels(load_hardware(args.hardware or GPUS[args.gpu]), kernels, args.gpu)
    else:
        if args.framework:
            raise LLMSimError("calibrate: --framework fits a framework's kernels: it needs --kernels DIR")
        if args.hardware is None:
            raise LLMSimError("calibrate: --hardware is required with --ops / --data")
        if ops is None and (data is None or args.network_system is None):
            raise LLMSimError("calibrate: give --ops DIR (operator timings) and/or --data DIR --network-system NAME, "
                              "or --kernels DIR --gpu NAME")
        profile, report = calibrate(load_hardware(args.hardware), ops, data, args.network_system)
    profile = profile.model_copy(update={"name": Path(args.output).stem})
    sources = ", ".join(str(p) for p in (ops, data, kernels) if p)
    header = "# Calibrated by `llmsim calibrate` from " + sources + "\n"
    Path(args.output).write_text(header + "".join(f"# {line}\n" for line in report)
                                 + yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False))
    print("\n".join(report))
    note(f"wrote {args.output}")
    return 0


def _write_framework_kernels(args: argparse.Namespace, kernels: Path) -> int:
    """``calibrate --kernels DIR --gpu G --framework F``: the engine-profile fields of F's own kernels on G's
    generation, as YAML to merge into F's profile."""
    import yaml

    from simulator.fidelity.kernel_fit import fit_framework_kernels

    fields, report = fit_framework_kernels(kernels, args.framework, args.gpu)
    header = (f"# {args.framework}'s own kernels on {args.gpu}, fitted by `llmsim calibrate --kernels {kernels} "
              f"--gpu {args.gpu} --framework {args.framework}`: merge into engine_profiles/{args.framework}.yaml\n")
    Path(args.output).write_text(header + "".join(f"# {line}\n" for line in report)
                                 + yaml.safe_dump(fields, sort_keys=False))
    print("\n".join(report))
    note(f"wrote {args.output}")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from simulator.comparison import check_findings, format_findings, format_table, load_comparison, run_experiments

    comparison = load_comparison(args.file)
    spec = comparison.spec
    summaries = run_experiments(comparison.experiments, jobs=args.jobs)
    results = check_findings(spec.findings, summaries)
    if args.json:
        print(json.dumps({"summaries": summaries, "findings": [
            {"finding": r.finding.describe(), "value": r.value, "holds": r.holds} for r in results
        ]}, indent=2, sort_keys=True))
    else:
        print(f"== {spec.name} ==" + (f"\n{spec.claim.strip()}" if spec.claim else ""))
        if spec.source:
            print(f"source: {spec.source.strip()}")
        print(format_table(spec.metrics, summaries))
        if results:
            print("findings:\n" + format_findings(results))
    return 0 if all(r.holds for r in results) else 1


def _cmd_regress(args: argparse.Namespace) -> int:
    from simulator.regression import (
        BASELINE_NAME,
        compare_with_baseline,
        format_report,
        load_suite,
        read_baseline,
        run_suite,
        write_baseline,
    )

    comparisons = load_suite(args.suite)
    baseline_path = Path(args.baseline) if args.baseline else Path(args.suite) / BASELINE_NAME
    result = run_suite(comparisons, jobs=args.jobs)
    if args.update:
        broken = result.broken_findings
        write_baseline(result, baseline_path)
        note(f"wrote {baseline_path} ({sum(len(v) for v in result.values.values())} variants)")
        for name, finding in broken:
            print(f"BROKEN  {name}: {finding.finding.describe()}: got {finding.value:.4g}")
        return 1 if broken else 0
    compare_with_baseline(result, comparisons, read_baseline(baseline_path), args.rtol)
    print(format_report(result))
    return 0 if result.passed else 1


def _cmd_sweep(args: argparse.Namespace) -> int:
    from simulator.sweep import load_sweep, run_points

    points = load_sweep(args.file, args.set)
    _output_folder(Path(args.out))
    if args.report:
        _check_output_file(Path(args.report), "--report")
    progress = not args.no_progress
    frame = run_points(points, args.out, jobs=args.jobs, backend=args.backend, address=args.address,
                       progress=progress)
    failed = frame[frame["error"] != ""]
    note(f"{len(frame)} points, {len(failed)} failed; index: {Path(args.out) / 'index.parquet'}")
    if args.report:
        from simulator.report.html import folder_page, write_page

        note(f"wrote {write_page(folder_page(args.out), args.report)}")
    for _, row in failed.iterrows():
        print(f"point {row['point']}: {row['error']}", file=sys.stderr)
    metrics = ["output_throughput", "mean_ttft_ms", "p99_ttft_ms", "p99_tpot_ms", "slo_attainment"]
    shown = ["point", *points[0].values, "seed", *(m for m in metrics if m in frame.columns)]
    print(frame[shown].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    return 1 if len(failed) else 0


def _cmd_benchmark(args: argparse.Namespace) -> int:
    """GuideLLM's sweep: synchronous, throughput, and rates between (simulator.rate_sweep)."""
    from simulator.config import load_experiment
    from simulator.rate_sweep import rate_sweep

    config = load_experiment(args.file, args.set)
    frame = rate_sweep(config, args.rates, args.rate_type, args.jobs)
    if args.out:
        out = _output_folder(Path(args.out))
        frame.to_csv(out / "benchmark.csv", index=False)
    if args.json:
        print(frame.to_json(orient="records", indent=2))
    else:
        print(frame.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if args.out:
        note(f"wrote {Path(args.out) / 'benchmark.csv'}")
    return 0


def _cmd_capacity(args: argparse.Namespace) -> int:
    from simulator.capacity import capacity_over_seeds, find_capacity, parse_slo
    from simulator.config import load_experiment

    slo = parse_slo(args.slo)
    config = load_experiment(args.file, args.set)
    if args.report:
        _check_output_file(Path(args.report), "--report")
    unit = "sessions/s" if config.workload.sessions is not None else "req/s"  # the arrival process's rate
    said: list[str] = []

    def say(text: str, progress: bool = False) -> None:
        """Print a line (progress lines to stderr; none with --json, which prints the result as JSON) and keep it
        for the report."""
        said.append(text)
        if progress:
            note(text)
        elif not args.json:
            print(text)

    if args.seeds > 1:
        spread, results = capacity_over_seeds(config, slo, args.seeds, attainment=args.attainment,
                                              tolerance=args.tolerance)
        for seed, rate in zip(spread.seeds, spread.rates, strict=True):
            say(f"  seed {seed}: {rate:.4g} {unit}", progress=True)
        say(f"capacity over {args.seeds} seeds: {spread.mean:.4g} ± {spread.half_width:.2g} {unit} (95% confidence "
            f"interval of the mean), range {min(spread.rates):.4g}–{max(spread.rates):.4g}")
        probes = [probe for result in results for probe in result.probes]
        code = 0 if all(result.summary is not None for result in results) else 1
    else:
        result = find_capacity(config, slo, attainment=args.attainment, tolerance=args.tolerance)
        probes = result.probes
        code = _say_capacity(result, slo, args, unit, say)
    if args.json:
        found = ({"rate": spread.mean, "half_width_95": spread.half_width, "seeds": spread.seeds,
                  "rates": spread.rates} if args.seeds > 1 else {"rate": result.rate})
        def finite(value):
            return value if not isinstance(value, float) or math.isfinite(value) else None  # strict JSON: null

        print(json.dumps({"unit": unit, "slo": slo, "attainment": args.attainment, **found,
                          "probes": [{"rate": p.rate, "meets": p.holds, **{k: finite(p.summary.get(k)) for k in slo}}
                                     for p in probes]}, indent=2, allow_nan=False))
    if args.report:
        from simulator.report.html import text_page, write_page
        from simulator.report.plots import capacity_probes

        page = text_page(f"llmsim capacity: {config.name}", "\n".join(said), capacity_probes(probes, slo, unit),
                         "every probe's figures against the SLO limits")
        note(f"wrote {write_page(page, args.report)}")
    return code


def _say_capacity(result, slo: dict[str, float], args: argparse.Namespace, unit: str, say) -> int:
    for probe in result.probes:
        say(f"  rate {probe.rate:10.4g} {unit}  {'meets' if probe.holds else 'misses'} the SLO", progress=True)
    condition = (f"slo_attainment >= {args.attainment:g} with per-request limits " if args.attainment is not None
                 else "") + ", ".join(f"{k} <= {v:g}" for k, v in slo.items())
    if result.summary is None:
        last = result.probes[-1]
        if result.idle_misses:
            seen = ", ".join(f"{k} {last.summary[k]:.4g}" for k in slo)
            say(f"no rate meets {condition}: even at {last.rate:.4g} {unit}, where requests no longer wait for "
                f"one another, the run has {seen}; loosen the SLO or change the deployment")
        else:
            say(f"no rate meets {condition} (down to {last.rate:.4g} {unit})")
        return 1
    s = result.summary
    say(f"capacity: {result.rate:.4g} {unit} meets {condition} (bisection tolerance {args.tolerance:.0%})")
    say(f"there: goodput {result.goodput:.4g} req/s, {s['output_throughput']:.4g} output tok/s, "
        f"{result.tokens_per_s_per_gpu:.4g} output tok/s per GPU on {s['num_gpus']} GPUs")
    say("       " + ", ".join(f"{k} {s[k]:.4g}" for k in slo))
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from simulator.plan import load_plan, pareto_figure, run_plan

    spec, points = load_plan(args.file)
    frame = run_plan(spec, points, jobs=args.jobs)
    print(frame.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if args.out:
        out = _output_folder(Path(args.out))
        frame.to_csv(out / "plan.csv", index=False)
        figure = pareto_figure(frame)
        for suffix in ("png", "svg"):
            figure.savefig(out / f"pareto.{suffix}", dpi=120)
        note(f"wrote {out}/plan.csv, pareto.png, pareto.svg")
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from simulator.report.plots import plot_folder

    for path in plot_folder(args.folder):
        note(f"wrote {path}")
    return 0


def _cmd_convert_trace(args: argparse.Namespace) -> int:
    from simulator.config.schema import TraceConfig
    from simulator.workload import read_trace, write_trace

    columns = dict(item.split("=", 1) for item in args.columns.split(",")) if args.columns else None
    try:
        config = TraceConfig(path=args.input, format=args.format, columns=columns, time_unit=args.time_unit,
                             skip_bad=args.skip_bad)
    except ValueError as exc:
        raise LLMSimError(f"convert-trace: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    trace = read_trace(config)
    _check_output_file(Path(args.output), "convert-trace OUTPUT")
    write_trace(trace, args.output)
    skipped = f", {trace.skipped} malformed rows skipped" if trace.skipped else ""
    note(f"wrote {args.output}: {len(trace.arrival_s):,} requests{skipped}")
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _open_fraction(text: str) -> float:
    """A number strictly between 0 and 1 (a relative tolerance)."""
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text}")
    return value


def _length_range(text: str) -> tuple[float, float]:
    """``LOW:HIGH``: fractions of a row's lengths, 0 < LOW <= HIGH <= 4."""
    low, sep, high = text.partition(":")
    try:
        if not sep:
            raise ValueError
        bounds = float(low), float(high)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW:HIGH (fractions of isl and osl, e.g. 0.8:1.0), got {text!r}"
                                         ) from None
    if not (0 < bounds[0] <= bounds[1] <= 4):
        raise argparse.ArgumentTypeError(f"need 0 < LOW <= HIGH <= 4, got {text!r}")
    return bounds


def _mean_and_bounds(text: str) -> tuple[str, tuple[float, int, int]]:
    """``input_tokens=MEAN:MIN:MAX`` (or ``output_tokens=…``): a published mean and the bounds of a length."""
    part, _, spec = text.partition("=")
    fields = spec.split(":")
    if part not in ("input_tokens", "output_tokens") or len(fields) != 3:
        raise argparse.ArgumentTypeError(f"expected input_tokens=MEAN:MIN:MAX or output_tokens=MEAN:MIN:MAX, got "
                                         f"{text!r}")
    try:
        mean, low, high = float(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: MEAN is a number, MIN and MAX whole tokens") from None
    if not 1 <= low < mean < high:
        raise argparse.ArgumentTypeError(f"{text!r}: need 1 <= MIN < MEAN < MAX")
    return part, (mean, low, high)


def _share(text: str) -> float:
    """A share of requests: more than 0, at most 1."""
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be > 0 and <= 1, got {text}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse with the project's error form: one line naming the problem (``llmsim run: error: ...``, the
    usage is in ``--help``), exit status 2."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {_one_line(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="llmsim", description="Simulate LLM serving clusters.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run one experiment and print its summary")
    run.add_argument("file", nargs="?", help=f"experiment YAML (default: {DEFAULT_EXPERIMENT.name})")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a field by dotted path, e.g. --set workload.arrival.rate=12 (repeatable)")
    run.add_argument(
        "--out", metavar="DIR",
        help="write summary.json, config.yaml and requests.parquet (streamed, in completion order) here",
    )
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    run.add_argument("--trace", metavar="FILE", help="write a Chrome trace (Perfetto) of iterations, queues, KV use")
    run.add_argument("--timeline", action="store_true", help="with --out: also write timeline/iterations parquet")
    run.add_argument("--tokens", action="store_true",
                     help="with --out: also write tokens.parquet, every output token's time (request_id, token, "
                     "time_s, replica), from which TTFT, TPOT and ITL can be recomputed")
    run.add_argument("--engine", help="engine profile (catalog name or YAML path); same as --set engine=...")
    run.add_argument("--report", metavar="FILE", help="also write a self-contained HTML report here")
    run.set_defaults(func=_cmd_run)

    rep = sub.add_parser("report", help="a self-contained HTML report of a run's or a sweep's --out folder")
    rep.add_argument("folder", help="a run's --out folder (summary.json) or a sweep's (index.parquet)")
    rep.add_argument("--output", metavar="FILE", help="where to write it (default: FOLDER/report.html)")
    rep.set_defaults(func=_cmd_report)

    comp = sub.add_parser("compare", help="run a comparison's variants, print a table and check its findings")
    comp.add_argument("file", help="comparison YAML (see experiments/policies/)")
    comp.add_argument("--jobs", type=_positive_int, default=1, help="variants run in parallel processes")
    comp.add_argument("--json", action="store_true", help="print summaries and findings as JSON")
    comp.set_defaults(func=_cmd_compare)

    swp = sub.add_parser("sweep", help="run a parameter sweep (grid, zip, replicates) into a resumable folder")
    swp.add_argument("file", help="sweep YAML: base, grid, zip, replicates")
    swp.add_argument("--out", required=True, help="folder: one sub-folder per point plus index.parquet")
    swp.add_argument("--jobs", type=_positive_int, default=1, help="points in parallel (local backend)")
    swp.add_argument("--backend", choices=["local", "ray"], default="local")
    swp.add_argument("--address", help="Ray cluster address (default: start a local Ray)")
    swp.add_argument("--no-progress", action="store_true", help="no progress bar")
    swp.add_argument("--report", metavar="FILE", help="also write a self-contained HTML report here")
    swp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a field of the base experiment (repeatable; the grid still applies over it)")
    swp.set_defaults(func=_cmd_sweep)

    plan = sub.add_parser("plan", help="capacity of every deployment in a grid, ranked per GPU and per dollar")
    plan.add_argument("file", help="plan YAML: base, grid over deployment knobs, slo, attainment, prices")
    plan.add_argument("--jobs", type=_positive_int, default=1, help="deployments searched in parallel")
    plan.add_argument("--out", help="folder for plan.csv and the Pareto plot")
    plan.set_defaults(func=_cmd_plan)

    plot = sub.add_parser("plot", help="latency CDFs, timelines, phase shares or sweep curves as PNG and SVG")
    plot.add_argument("folder", help="a run's --out folder or a sweep's --out folder")
    plot.set_defaults(func=_cmd_plot)

    bench = sub.add_parser("benchmark", help="GuideLLM's sweep: synchronous, throughput, then rates between")
    bench.add_argument("file", nargs="?", help="experiment YAML (default: the quickstart)")
    bench.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field")
    bench.add_argument("--rates", type=_positive_int, default=10,
                       help="benchmarks in all, the two anchors included (GuideLLM's --rate for a sweep)")
    bench.add_argument("--rate-type", default="constant", help="arrivals between the anchors: constant | poisson")
    bench.add_argument("--jobs", type=_positive_int, default=1, help="benchmarks in parallel processes")
    bench.add_argument("--out", help="folder for benchmark.csv")
    bench.add_argument("--json", action="store_true", help="the rows as JSON")
    bench.set_defaults(func=_cmd_benchmark)

    cap = sub.add_parser("capacity", help="the highest request rate that meets an SLO (bisection)")
    cap.add_argument("file", help="experiment YAML (its arrival rate is where the search starts)")
    cap.add_argument("--slo", action="append", default=[], metavar="METRIC=MS",
                     help="e.g. p99_ttft_ms=500 or ttft_p99_ms=500 (repeatable)")
    cap.add_argument("--attainment", type=_share,
                     help="require this share of requests within the limits instead (0 < share <= 1)")
    cap.add_argument("--tolerance", type=_open_fraction, default=0.02,
                     help="relative width of the final bracket (0 < tolerance < 1)")
    cap.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field")
    cap.add_argument("--seeds", type=_positive_int, default=1,
                     help="search with this many independent seeds; report the mean, its 95%% interval and the range")
    cap.add_argument("--report", metavar="FILE", help="also write the search as a self-contained HTML report")
    cap.add_argument("--json", action="store_true", help="print the capacity and every probe as JSON")
    cap.set_defaults(func=_cmd_capacity)

    reg = sub.add_parser("regress", help="run a suite of comparisons, check findings and compare with a baseline")
    reg.add_argument("--suite", default=str(Path("experiments") / "policies"), help="folder of comparison YAMLs")
    reg.add_argument("--baseline", help="baseline JSON (default: SUITE/baseline.json)")
    reg.add_argument("--update", action="store_true", help="re-bless the baseline with this run's values")
    reg.add_argument("--jobs", type=_positive_int, default=1, help="simulations in parallel processes")
    reg.add_argument("--rtol", type=float, default=0.02, help="default relative tolerance per metric")
    reg.set_defaults(func=_cmd_regress)

    conv = sub.add_parser("convert-trace", help="rewrite a trace (Azure, BurstGPT, Mooncake, CSV) in the canonical "
                          "arrived_at,num_prefill_tokens,num_decode_tokens form")
    conv.add_argument("input", help="trace file")
    conv.add_argument("output", help="CSV to write")
    conv.add_argument("--format", default="auto", choices=["auto", "processed", "azure", "burstgpt", "mooncake", "csv"])
    conv.add_argument("--columns", help="for --format csv: arrival=COL,input=COL,output=COL")
    conv.add_argument("--time-unit", default="s", choices=["s", "ms", "us"], help="for --format csv")
    conv.add_argument("--skip-bad", action="store_true", help="skip and count malformed rows instead of stopping")
    conv.set_defaults(func=_cmd_convert_trace)

    step = sub.add_parser("steptime", help="predicted iteration times per operator group for a CSV of batch shapes")
    step.add_argument("--model", required=True, help="catalog name or config path")
    step.add_argument("--hardware", required=True, help="catalog name or hardware YAML")
    step.add_argument("--tp", type=_positive_int, default=1, help="tensor-parallel degree")
    step.add_argument("--pp", type=_positive_int, default=1, help="pipeline-parallel stages")
    step.add_argument("--engine", default="vllm", help="engine profile (catalog name or YAML path)")
    step.add_argument("--dtype", choices=list(WEIGHT_DTYPES), default="bf16",
                      help="weight precision")
    step.add_argument("--input", required=True, help="CSV: " + ", ".join(
        ("num_prefill_seqs", "prefill_tokens_per_seq", "num_decode_seqs", "decode_context_per_seq")))
    step.add_argument("--output", help="output CSV (default: standard output)")
    step.set_defaults(func=_cmd_steptime)

    val = sub.add_parser("validate", help="errors of the cost model against measurement data")
    val.add_argument("--data", default=str(Path("..") / "shared" / "data"), help="folder in ../shared/data's layout")
    val.add_argument("--engine", default="splitwise", help="engine profile for whole-iteration data")
    val.add_argument("--generation", help="price every measured GPU (kernel tables, or with --runs the rows' GPU) "
                     "with this GPU generation's fitted parameters instead of its own, its spec sheet kept: the "
                     "error a GPU without measurements can expect")
    val.add_argument("--plot", default=None, help="where to save the predicted-vs-measured plot (none unless given)")
    val.add_argument("--runs", help="a file of end-to-end benchmark runs (format of ../shared/data/silicon): "
                     "simulate every row and report TTFT/TPOT errors")
    val.add_argument("--model-configs", help="folder of Hugging Face configs named <org>--<name>_config.json")
    val.add_argument("--output", help="with --runs: write every row with predicted_ttft_ms, predicted_tpot_ms, status")
    val.add_argument("--jobs", type=_positive_int, default=1, help="with --runs: rows simulated in parallel")
    val.add_argument("--length-range", type=_length_range, metavar="LOW:HIGH",
                     help="with --runs: every request's prompt and output lengths uniform on [LOW, HIGH] times the "
                     "row's isl and osl (a benchmark client that draws lengths); default: exactly isl and osl")
    val.add_argument("--client-connections", type=_positive_int, metavar="N",
                     help="with --runs: the benchmark client's connection pool holds N connections, its requests "
                     "timed from their send, the wait for a connection included (aiohttp's default session: 100); "
                     "default: one per client")
    val.add_argument("--report", metavar="FILE", help="also write the report and its plot as self-contained HTML")
    val.set_defaults(func=_cmd_validate)

    cal = sub.add_parser("calibrate", help="fit a hardware profile's physical parameters to measurements")
    cal.add_argument("--hardware", help="profile to start from (spec-sheet numbers are kept; with --kernels: the "
                     "--gpu's catalog profile by default)")
    cal.add_argument("--kernels", help="kernel-table folder (format of ../shared/data/kernels): fit the GEMM, "
                     "collective and attention parameters of a GPU generation")
    cal.add_argument("--gpu", default="h100_sxm", help="with --kernels: the GPU folder to fit (a100_sxm, h100_sxm, "
                     "or another system the data names: h200_sxm, b200_sxm, ...)")
    cal.add_argument("--framework", help="with --kernels: fit this framework's own all-reduce, GEMM-rate and "
                     "attention kernels (vllm, sglang, trtllm) instead of the GPU generation: writes engine-profile "
                     "fields")
    cal.add_argument("--ops", help="folder of per-layer operator CSVs (format of calibration/a100_ops)")
    cal.add_argument("--data", help="folder with network/<system>_<all_reduce|send_recv>.csv")
    cal.add_argument("--network-system", help="file prefix of the network timings to fit, e.g. a100_dgx")
    cal.add_argument("--output", required=True, help="where to write the calibrated profile YAML")
    cal.set_defaults(func=_cmd_calibrate)

    models = sub.add_parser("models", help="the model catalog: parameters, layer groups, KV bytes per token")
    models.add_argument("--json", action="store_true", help="one JSON object per model")
    models.set_defaults(func=_cmd_models)

    gpus = sub.add_parser("gpus", help="the GPU catalog: memory, bandwidth, peak TFLOP/s, generation")
    gpus.add_argument("--json", action="store_true", help="one JSON object per GPU")
    gpus.set_defaults(func=_cmd_gpus)

    presets = sub.add_parser("workloads", help="the workload presets (workloads/*.yaml): source and statistics")
    presets.add_argument("--json", action="store_true", help="one JSON object per preset")
    presets.add_argument("--fit", metavar="CSV", help="print a preset fitted to a processed trace (arrived_at, "
                         "num_prefill_tokens, num_decode_tokens; or lengths only, also as input_length, "
                         "output_length) instead")
    presets.add_argument("--max-entropy", action="append", type=_mean_and_bounds, metavar="PART=MEAN:MIN:MAX",
                         help="print a preset from a published mean and bounds of input_tokens and/or "
                         "output_tokens (the maximum-entropy law for them) instead; repeatable")
    presets.add_argument("--name", default="my-workload", help="the fitted preset's name")
    presets.set_defaults(func=_cmd_workloads)

    kv = sub.add_parser("kv-size", help="KV-cache bytes for a model, context and batch")
    kv.add_argument("--model", help="catalog name or config path (gives layers, kv heads, head dim)")
    kv.add_argument("--layers", type=_positive_int)
    kv.add_argument("--kv-heads", type=_positive_int)
    kv.add_argument("--head-dim", type=_positive_int)
    kv.add_argument("--batch", type=_positive_int, default=1)
    kv.add_argument("--context", type=_positive_int, required=True, help="tokens per sequence")
    kv.add_argument("--dtype", choices=sorted(BYTES_PER_ELEMENT), default="fp16")
    kv.add_argument("--json", action="store_true", help="with --model: per layer group, parameters, bytes as JSON")
    kv.set_defaults(func=_cmd_kv_size)
    for command in sub.choices.values():
        command.add_argument("--quiet", action="store_true",
                             help="no progress bars and no 'wrote …' lines on stderr (results and errors stay)")
    return parser


def _one_line(text: str) -> str:
    """An error message as one line: line breaks and other control characters (from a key or value the user
    wrote) shown escaped."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _warning_line(message, category, filename, lineno, file=None, line=None) -> str:
    """A warning as the CLI prints it: one line, no source excerpt."""
    return f"llmsim: warning: {_one_line(str(message))}\n"


def main(argv: list[str] | None = None) -> int:
    warnings.formatwarning = _warning_line
    args = build_parser().parse_args(argv)
    import simulator.progress

    simulator.progress.QUIET = args.quiet
    try:
        return _dispatch(args)
    finally:
        simulator.progress.QUIET = False  # main() may be called again in the same process (tests, notebooks)


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command; an error of the input or of the system is one line and exit status 2."""
    try:
        return args.func(args)
    except BrokenPipeError:  # the reader went away (llmsim run | head -1): not an error of the run
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python flushes stdout at exit: let that go nowhere
        return 0
    except LLMSimError as exc:
        print(f"llmsim: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file name or place the system refuses (too long, no permission, ...)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"llmsim: error: {_one_line(where + (exc.strerror or str(exc)))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
