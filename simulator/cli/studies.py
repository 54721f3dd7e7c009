"""``llmsim compare``, ``regress``, ``sweep``, ``benchmark``, ``capacity`` and ``plan``: studies of many runs."""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path
from typing import Any

from simulator.catalog import load_hardware
from simulator.catalog.workloads import load_preset
from simulator.cli.outputs import check_output_file, output_folder
from simulator.config import ExperimentConfig, load_experiment
from simulator.config.slo import parse_slo
from simulator.errors import LLMSimError, shown
from simulator.fidelity.bands import band_line
from simulator.report.console import describe_setup
from simulator.report.html import folder_page, plan_page, sweep_page, text_page, write_page
from simulator.results.progress import note
from simulator.studies.capacity import Knob, capacity_over_seeds, find_capacity, search_knob
from simulator.studies.comparison import (
    check_findings,
    format_findings,
    format_table,
    load_comparison,
    run_experiments,
)
from simulator.studies.deployment_search import PlanQuestion, experiment_of, plan_experiment, plan_lengths, search
from simulator.studies.plan import load_plan, pareto_figure, run_plan
from simulator.studies.plan_report import pareto_figure as pareto_figure_of
from simulator.studies.plan_report import pareto_table, plan_table, question_text, write_top
from simulator.studies.rate_sweep import benchmark_table, run_benchmark
from simulator.studies.regression import (
    BASELINE_NAME,
    compare_with_baseline,
    format_report,
    load_suite,
    read_baseline,
    run_suite,
    write_baseline,
)
from simulator.studies.sweep import load_sweep, run_points


def cmd_compare(args: argparse.Namespace) -> int:
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


def cmd_regress(args: argparse.Namespace) -> int:
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


def cmd_sweep(args: argparse.Namespace) -> int:
    points = load_sweep(args.file, args.set)
    output_folder(Path(args.out))
    if args.report:
        check_output_file(Path(args.report), "--report")
    progress = not args.no_progress
    frame = run_points(points, args.out, jobs=args.jobs, backend=args.backend, address=args.address,
                       progress=progress)
    failed = frame[frame["error"] != ""]
    note(f"{len(frame)} points, {len(failed)} failed; index: {Path(args.out) / 'index.parquet'}")
    if args.report:
        note(f"wrote {write_page(folder_page(args.out), args.report)}")
    for _, row in failed.iterrows():
        print(f"point {row['point']}: {row['error']}", file=sys.stderr)
    metrics = ["output_throughput", "mean_ttft_ms", "p99_ttft_ms", "p99_tpot_ms", "slo_attainment"]
    columns = ["point", *points[0].values, "seed", *(m for m in metrics if m in frame.columns)]
    print(frame[columns].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    return 1 if len(failed) else 0


def cmd_benchmark(args: argparse.Namespace) -> int:
    """GuideLLM's sweep: synchronous, throughput, and rates between (simulator.studies.rate_sweep)."""

    config = load_experiment(args.file, args.set)
    out = output_folder(Path(args.out)) if args.out else None
    if args.report:
        check_output_file(Path(args.report), "--report")
    index = run_benchmark(config, args.rates, args.rate_type, args.jobs, out)
    frame = benchmark_table(index)
    if out is not None:
        frame.to_csv(out / "benchmark.csv", index=False)
    if args.json:
        print(frame.to_json(orient="records", indent=2))
    else:
        print(frame.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if out is not None:
        note(f"wrote {out / 'benchmark.csv'}, {out / 'index.parquet'} and a folder per benchmark (llmsim plot {out} "
             "draws the curves)")
    if args.report:
        page = sweep_page(index, config.name, config.slo.bounds(), what="benchmark")
        note(f"wrote {write_page(page, args.report)}")
    return 0


SEARCHED = {"rate": "their rate", "users": "the number of users", "speedup": "the trace's speed-up"}


def _amount(value: float, knob: Knob) -> str:
    """A probed value with its unit: ``37 users``, ``2.5 x trace speed``, ``12.5 req/s``."""
    if knob.integer:
        return f"{value:,.0f} user" + ("s" if value != 1 else "")
    return f"{value:.4g} {knob.unit}"


def _preset_slo(config: ExperimentConfig) -> list[str]:
    """The SLO the workload's preset states (``METRIC=MS`` items, as ``--slo`` gives them), or none."""
    if config.workload.preset is None:
        return []
    return [f"{key}={limit:g}" for key, limit in (load_preset(config.workload.preset).get("slo") or {}).items()]


def cmd_capacity(args: argparse.Namespace) -> int:
    config = load_experiment(args.file, args.set)
    slo = parse_slo(args.slo or _preset_slo(config))  # no --slo: the preset's (parse_slo refuses neither)
    if args.report:
        check_output_file(Path(args.report), "--report")
    knob = search_knob(config)  # a workload with nothing to search is refused before anything runs
    stated = config.slo.bounds()
    if stated and args.attainment is None:
        bounds = ", ".join(f"{key} <= {value:g}" for key, value in stated.items())
        warnings.warn(f"capacity: the experiment's own slo ({bounds} per request) is not what this search holds: "
                      f"it holds the --slo percentiles; give --attainment SHARE to require that share of requests "
                      f"within per-request limits", stacklevel=1)
    said: list[str] = []

    def say(text: str, progress: bool = False) -> None:
        """Print a line (progress lines to stderr; none with --json, which prints the result as JSON) and keep it
        for the report."""
        said.append(text)
        if progress:
            note(text)
        elif not args.json:
            print(text)

    deployment, workload = describe_setup(config, with_rate=False).split("\n")
    say(f"== capacity of {config.name} ==")
    say(deployment)
    say(f"{workload}; the search varies {SEARCHED[knob.name]}")
    if not args.slo:
        say(f"slo:        preset {config.workload.preset}'s, {', '.join(f'{k} <= {v:g}' for k, v in slo.items())}")
    arrival = config.workload.arrival
    if knob.integer and getattr(arrival, "ramp_s", None) == 0:
        note("capacity: the users start together (ramp_s 0): their first requests arrive as one burst, and the SLO "
             "holds that burst too; to measure a pool that has been running, spread them with "
             "workload.arrival.ramp_s (about one request's duration) or leave them out with metrics.warmup_fraction")
    if args.seeds > 1:
        spread, results = capacity_over_seeds(config, slo, args.seeds, attainment=args.attainment,
                                              tolerance=args.tolerance)
        for seed, value in zip(spread.seeds, spread.values, strict=True):
            say(f"  seed {seed}: {_amount(value, knob)}", progress=True)
        say(f"capacity over {args.seeds} seeds: {spread.mean:.4g} ± {spread.half_width:.2g} {knob.unit} (95% "
            f"confidence interval of the mean), range {min(spread.values):.4g}–{max(spread.values):.4g}")
        probes = [probe for result in results for probe in result.probes]
        code = 0 if all(result.summary is not None for result in results) else 1
    else:
        result = find_capacity(config, slo, attainment=args.attainment, tolerance=args.tolerance)
        probes = result.probes
        code = _say_capacity(result, knob, slo, args, say, config)
    if args.json:
        found: dict[str, Any] = ({knob.name: spread.mean, "half_width_95": spread.half_width, "seeds": spread.seeds,
                                  "per_seed": spread.values} if args.seeds > 1 else {knob.name: result.value})
        if args.seeds > 1 and knob.name == "rate":
            found["rates"] = spread.values  # as before the search took users and speed-ups

        def finite(value):
            return value if not isinstance(value, float) or math.isfinite(value) else None  # strict JSON: null

        print(json.dumps({"searched": knob.name, "unit": knob.unit, "slo": slo, "attainment": args.attainment,
                          **found, "probes": [{knob.name: p.value, "meets": p.holds,
                                               **{k: finite(p.summary.get(k)) for k in slo}} for p in probes]},
                         indent=2, allow_nan=False))
    if args.report:
        from simulator.report.plots import capacity_probes

        axis = {"rate": f"offered rate ({knob.unit})", "users": "closed-loop users",
                "speedup": "trace speed-up (x)"}[knob.name]
        page = text_page(f"llmsim capacity: {config.name}", "\n".join(said), capacity_probes(probes, slo, axis=axis),
                         "every probe's figures against the SLO limits")
        note(f"wrote {write_page(page, args.report)}")
    return code


def _say_capacity(result, knob: Knob, slo: dict[str, float], args: argparse.Namespace, say,
                  config: ExperimentConfig) -> int:
    for probe in result.probes:
        number = f"{probe.value:,.0f}" if knob.integer else f"{probe.value:.4g}"
        say(f"  {knob.name} {number:>10} {knob.unit}  {'meets' if probe.holds else 'misses'} the SLO", progress=True)
    condition = (f"slo_attainment >= {args.attainment:g} with per-request limits " if args.attainment is not None
                 else "") + ", ".join(f"{k} <= {v:g}" for k, v in slo.items())
    nothing = {"rate": "no rate", "users": "no number of users", "speedup": "no speed-up"}[knob.name]
    if result.summary is None:
        last = result.probes[-1]
        if result.idle_misses:
            seen = ", ".join(f"{k} {last.summary[k]:.4g}" for k in slo)
            where = ("with one user, one request at a time" if knob.integer else
                     f"at {_amount(last.value, knob)}, where requests no longer wait for one another")
            say(f"{nothing} meets {condition}: even {where}, the run has {seen}; loosen the SLO or change the "
                "deployment")
        else:
            say(f"{nothing} meets {condition} (down to {_amount(last.value, knob)})")
        return 1
    s = result.summary
    precision = f"bisection tolerance {100 * args.tolerance:g}%"
    if knob.integer and result.missed is not None:
        precision = f"{_amount(result.missed, knob)} miss it" + (
            f", bisection tolerance {100 * args.tolerance:g}%" if result.missed - result.value > 1 else "")
    say(f"capacity: {_amount(result.value, knob)} meets {condition} ({precision})")
    good = result.goodput
    goodput = f"goodput {good:.4g} req/s, " if good is not None and math.isfinite(good) else ""  # none: no slo
    offered = ""  # what a rate search states up front, for the other knobs: the load in requests/s
    if knob.trace_rate is not None:
        offered = f"the trace's mean arrival rate {result.value * knob.trace_rate:.4g} req/s, "
    elif knob.integer:
        offered = f"the users' request throughput {s['request_throughput']:.4g} req/s, "
    say(f"there: {offered}{goodput}{s['output_throughput']:.4g} output tok/s, "
        f"{result.tokens_per_s_per_gpu:.4g} output tok/s per GPU on {s['num_gpus']} GPUs")
    say("       " + ", ".join(f"{k} {s[k]:.4g}" for k in slo))
    say(band_line(config))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    if args.file is None:
        return _plan_from_flags(args)
    given = [flag for flag in ("model", "gpu", "max_gpus", "gpus", "isl", "osl", "workload", "trace", "ttft", "tpot",
                               "rate", "users", "price") if getattr(args, flag) is not None]
    if given:
        raise LLMSimError(f"plan: --{given[0].replace('_', '-')} is for a plan from flags; a plan FILE holds its own "
                          "deployments and SLO (give one or the other)")
    spec, points = load_plan(args.file)
    frame = run_plan(spec, points, jobs=args.jobs, backend=args.backend, address=args.address)
    print(frame.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    for line in dict.fromkeys(band_line(point.config) for point in points):  # each slice's once, in plan order
        print(line)
    if args.out:
        out = output_folder(Path(args.out))
        frame.to_csv(out / "plan.csv", index=False)
        from simulator.report.plots import save_figure  # matplotlib: only when a figure is written

        save_figure(pareto_figure(frame), out / "pareto")
        note(f"wrote {out}/plan.csv, pareto.png, pareto.svg")
    return 0


def _plan_question(args: argparse.Namespace) -> PlanQuestion:
    """The question the flags ask; a missing or conflicting flag is a one-line error (the rest :class:`PlanQuestion`
    checks)."""
    missing = [flag for flag in ("model", "gpu", "ttft", "tpot") if getattr(args, flag) is None]
    if args.max_gpus is None and args.gpus is None:
        missing.append("max-gpus (or --gpus)")
    if args.workload is None and args.trace is None and None in (args.isl, args.osl):
        missing.append("isl and --osl (or --workload or --trace)")
    if missing:
        raise LLMSimError(f"plan: give a plan FILE, or --{', --'.join(missing)}")
    modes = tuple(dict.fromkeys(mode.strip() for mode in args.modes.split(",")))
    engines = tuple(dict.fromkeys(engine.strip() for engine in args.engine.split(",") if engine.strip()))
    if not engines:
        raise LLMSimError(f"plan: --engine {args.engine!r}: give an engine profile, or several separated by commas")
    if not modes or not set(modes) <= {"agg", "disagg"}:
        raise LLMSimError(f"plan: --modes {args.modes!r}: expected agg, disagg or agg,disagg")
    budgets: tuple[int, ...] = ()
    if args.token_budgets is not None:
        try:
            budgets = tuple(dict.fromkeys(int(part) for part in args.token_budgets.split(",")))
        except ValueError:
            raise LLMSimError(f"plan: --token-budgets {shown(args.token_budgets, 60)}: expected whole numbers of "
                              "tokens separated by commas, e.g. 2048,8192") from None
    return PlanQuestion(
        model=args.model, gpu=args.gpu, max_gpus=args.max_gpus or args.gpus, ttft_ms=args.ttft, tpot_ms=args.tpot,
        isl=args.isl, osl=args.osl, workload=args.workload, trace=args.trace, trace_format=args.trace_format,
        percentile=args.percentile, rate=args.rate,
        users=args.users, engines=engines, price=args.price, gpus=args.gpus, modes=modes,  # type: ignore[arg-type]
        requests_per_user=args.requests_per_user, keep=args.keep, top=args.top, seed=args.seed, seeds=args.seeds,
        jobs=args.jobs, token_budgets=budgets, backend=args.backend, address=args.address)


def _plan_from_flags(args: argparse.Namespace) -> int:
    question = _plan_question(args)
    out = output_folder(Path(args.out)) if args.out else None
    price = question.price if question.price is not None else load_hardware(question.gpu).price_per_hour_usd
    lengths = plan_lengths(question)
    searched, top = search(question)
    plan, pareto = plan_table(question, searched, price), pareto_table(question, searched)
    band = "\n".join(dict.fromkeys(band_line(experiment_of(question, entry)) for entry in top)) or band_line(
        plan_experiment(question))
    print(f"== plan: {question_text(question, lengths)} ==")
    meeting = plan[plan["max_users"].notna()]
    if meeting.empty:
        print(f"no deployment of the {len(plan)} searched meets the SLO; see the status of each in plan.csv")
    else:
        columns = [c for c in ("deployment", "gpus", "max_users", "tokens_per_s_per_gpu", "tokens_per_s_per_user",
                             "capacity_rps", "capacity_rps_ci95", "capacity_rps_in_gpus", "gpus_for_target",
                             "usd_per_million_tokens") if c in meeting]
        print(meeting[columns].head(10).to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    counts = plan["status"].str.split(":").str[0].value_counts()
    print("searched: " + ", ".join(f"{count} {status}" for status, count in counts.items()))
    print(band)
    if out is not None:
        plan.to_csv(out / "plan.csv", index=False)
        pareto.to_csv(out / "pareto.csv", index=False)
        write_page(plan_page(question, lengths, plan, pareto, band), out / "report.html")
        if len(pareto):
            from simulator.report.plots import save_figure  # matplotlib: only when a figure is written

            save_figure(pareto_figure_of(pareto, question, f"{question.model} on {question.gpu}"), out / "pareto")
        (out / "top").mkdir(exist_ok=True)
        write_top(question, top, out / "top")
        note(f"wrote {out}/plan.csv, pareto.csv, pareto.png, pareto.svg, report.html and top/ ({len(top)} "
             "configurations: experiment YAML and launch commands)")
    return 0
