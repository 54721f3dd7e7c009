"""``llmsim steptime``, ``validate`` and ``calibrate``: predictions against measurements, and the fits."""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import replace
from pathlib import Path

import yaml

from simulator.catalog import HardwareSpec, load_engine, load_hardware
from simulator.catalog.generations import generation_names
from simulator.cli.outputs import check_output_file
from simulator.errors import LLMSimError
from simulator.fidelity.bands import MIN_RUNS, measured_bands, read_bands, update_bands, with_band
from simulator.fidelity.calibrate import calibrate
from simulator.fidelity.clients import CLIENT_COLUMN, CLIENTS, DEFAULT_CLIENT
from simulator.fidelity.engine_fit import fit_engine, fit_report, fitted_profile
from simulator.fidelity.kernel_fit import fit_framework_kernels, fit_kernels, generation_file
from simulator.fidelity.kernels import GPUS, left_out
from simulator.fidelity.ranking import rank, ranking_report, read_validated, row_rates
from simulator.fidelity.report import kernels_figure, validate_all, write_report
from simulator.fidelity.runs_report import runs_figure, runs_report
from simulator.fidelity.silicon import RunSettings, validate_runs
from simulator.fidelity.steptime import predict_steps, read_steps
from simulator.fidelity.systems import DEFAULT_KERNEL_GPU
from simulator.report.html import text_page, write_page
from simulator.results.progress import note


def cmd_steptime(args: argparse.Namespace) -> int:
    table = predict_steps(read_steps(args.input), args.model, args.hardware, args.tp, args.engine, args.dtype, args.pp)
    if args.output:
        table.to_csv(args.output, index=False)
        note(f"wrote {len(table)} rows to {args.output}")
    else:
        print(table.round(4).to_csv(index=False), end="")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    if args.generation is not None and args.generation not in generation_names():
        raise LLMSimError(f"validate: --generation: unknown {args.generation!r} "
                          f"(allowed: {', '.join(generation_names())})")
    if args.ranking_from is not None:
        if args.runs is not None:
            raise LLMSimError("validate: --ranking-from ranks an earlier output: not with --runs")
        return _ranking(args, row_rates(read_validated(args.ranking_from)))
    if args.runs is not None:
        return _validate_runs(args)
    if args.ranking is not None:
        raise LLMSimError("validate: --ranking ranks benchmark runs: it needs --runs FILE (or --ranking-from CSV)")
    if args.bands:
        raise LLMSimError("validate: --bands writes the errors of benchmark runs: it needs --runs FILE")

    data = Path(args.data)
    if not data.is_dir():
        raise LLMSimError(f"validate: data folder not found: {data}")
    if args.report:
        check_output_file(Path(args.report), "--report")
    results = validate_all(data, args.engine, args.generation)
    text = write_report(results, Path(args.plot) if args.plot else None)
    if (data / "kernels").is_dir() and (omitted := left_out(data / "kernels")):
        text += "\n\n== left out (not priced) ==\n" + "\n".join(omitted)
    print(text)
    if args.report:
        _validation_report(args.report, f"llmsim validate --data {data}", text, kernels_figure(results))
    return 0


def _validation_report(path: str, title: str, text: str, figure) -> None:
    page = text_page(title, text, figure, "predicted against measured (log-log)")
    note(f"wrote {write_page(page, path)}")


def _model_configs(args: argparse.Namespace, command: str) -> Path | None:
    """``--model-configs``'s folder (None when not given); a missing folder is a one-line error."""
    model_dir = Path(args.model_configs) if args.model_configs else None
    if model_dir is not None and not model_dir.is_dir():
        raise LLMSimError(f"{command}: --model-configs: folder not found: {model_dir}")
    return model_dir


def _validate_runs(args: argparse.Namespace) -> int:
    model_dir = _model_configs(args, "validate")
    if args.report:
        check_output_file(Path(args.report), "--report")
    if args.bands:
        if args.generation:
            raise LLMSimError("validate: --bands records the errors of each GPU priced as its own generation: "
                              "not with --generation")
        check_output_file(Path(args.bands), "--bands")
        read_bands(Path(args.bands))  # a malformed file fails now, not after the runs
    if args.ranking:
        check_output_file(Path(args.ranking), "--ranking")
    settings = RunSettings(generation=args.generation, client_connections=args.client_connections).with_client(
        CLIENTS[args.client])
    if args.length_range is not None:
        low, high = args.length_range
        settings = replace(settings, length_range=args.length_range,
                           client=f"{settings.client} --length-range {low:g}:{high:g}")
    if args.requests_per_client is not None:
        settings = replace(settings, measured=args.requests_per_client, min_measured=args.requests_per_client,
                           client=f"{settings.client} --requests-per-client {args.requests_per_client}")
    frame = validate_runs(args.runs, model_dir, args.jobs, settings)
    if CLIENT_COLUMN in frame and (own := int(frame[CLIENT_COLUMN].fillna("").astype(str).str.strip().ne("").sum())):
        note(f"{own} of {len(frame)} rows name a {CLIENT_COLUMN} and ran their own; the others ran {settings.client}")
    if args.ranking is not None:
        frame = row_rates(frame)
    if args.output:
        frame.to_csv(args.output, index=False)
    text = runs_report(frame, Path(args.plot) if args.plot else None)
    print(text)
    if args.output:
        print(f"rows: {args.output}")
    if args.bands:
        bands = measured_bands(frame, model_dir)
        update_bands(Path(args.bands), bands)
        note(f"wrote {len(with_band(bands))} accuracy bands (slices of at least {MIN_RUNS} held-out rows) into "
             f"{args.bands}")
    if args.report:
        _validation_report(args.report, f"llmsim validate --runs {args.runs}", text, runs_figure(frame))
    return _ranking(args, frame) if args.ranking is not None else 0


def _ranking(args: argparse.Namespace, frame) -> int:
    """``--ranking [CSV]``: the ranking's summary printed, every decision written to CSV where given."""
    if args.ranking:
        check_output_file(Path(args.ranking), "--ranking")
    decisions = rank(frame)
    print(ranking_report(decisions))
    if args.ranking:
        decisions.to_csv(args.ranking, index=False)
        print(f"decisions: {args.ranking}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    if args.runs is not None or args.engine is not None:
        return _calibrate_engine(args)
    for flag, value in (("--model-configs", args.model_configs), ("--jobs", args.jobs), ("--client", args.client)):
        if value is not None:
            raise LLMSimError(f"calibrate: {flag} goes with --runs FILE --engine PROFILE")
    args = argparse.Namespace(**{**vars(args), "gpu": args.gpu or DEFAULT_KERNEL_GPU})
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
            if args.generation_file:
                raise LLMSimError("calibrate: --generation-file writes a GPU generation's fit, not --framework's")
            return _write_framework_kernels(args, kernels)
        start = load_hardware(args.hardware or GPUS[args.gpu])
        if args.generation_file and Path(args.output).stem != start.generation:
            raise LLMSimError(f"calibrate: --generation-file: {args.gpu} is of generation {start.generation!r}: "
                              f"--output must be named {start.generation}.yaml, got {Path(args.output).name}")
        profile, report = fit_kernels(start, kernels, args.gpu)
        if args.generation_file:
            return _write_generation_file(args, kernels, profile, report)
    else:
        if args.framework:
            raise LLMSimError("calibrate: --framework fits a framework's kernels: it needs --kernels DIR")
        if args.generation_file:
            raise LLMSimError("calibrate: --generation-file writes a fit of kernel tables: it needs --kernels DIR")
        if args.hardware is None:
            raise LLMSimError("calibrate: --hardware is required with --ops / --data")
        if ops is None and (data is None or args.network_system is None):
            raise LLMSimError("calibrate: give --ops DIR (operator timings) and/or --data DIR --network-system NAME, "
                              "or --kernels DIR --gpu NAME")
        profile, report = calibrate(load_hardware(args.hardware), ops, data, args.network_system)
    profile = profile.model_copy(update={"name": Path(args.output).stem})
    sources = ", ".join(str(p) for p in (ops, data, kernels) if p)
    return _write_fit(args.output, f"Calibrated by `llmsim calibrate` from {sources}", report,
                      profile.model_dump(mode="json"))


def _calibrate_engine(args: argparse.Namespace) -> int:
    """``calibrate --runs FILE --engine PROFILE``: the engine profile's fixed costs fitted on the fit half of the
    rows that run it (:mod:`simulator.fidelity.engine_fit`), written as a profile that extends it."""
    if args.runs is None or args.engine is None:
        raise LLMSimError("calibrate: --runs FILE and --engine PROFILE go together (fit the profile's fixed costs on "
                          "the benchmark rows that run it)")
    given = [flag for flag, value in (("--kernels", args.kernels), ("--ops", args.ops), ("--data", args.data),
                                      ("--network-system", args.network_system), ("--hardware", args.hardware),
                                      ("--gpu", args.gpu), ("--framework", args.framework),
                                      ("--generation-file", args.generation_file)) if value]
    if given:
        raise LLMSimError(f"calibrate: --runs fits an engine profile on its own (not with {', '.join(given)})")
    if Path(args.engine).suffix in (".yaml", ".yml") or "/" in args.engine:
        raise LLMSimError(f"calibrate: --engine {args.engine!r}: name the catalog profile the rows run (a row's "
                          "backend, or its later versions' profile: vllm, vllm-0.14, sglang, trtllm), not a file")
    try:
        profile = load_engine(args.engine).name
    except LLMSimError as exc:
        raise LLMSimError(f"calibrate: --engine: {exc}") from None
    model_dir = _model_configs(args, "calibrate")
    output = Path(args.output)
    check_output_file(output, "--output")
    if output.suffix not in (".yaml", ".yml"):
        raise LLMSimError(f"calibrate: --output {output}: an engine profile is a .yaml (or .yml) file, which an "
                          "experiment's engine: names")
    client = CLIENTS[args.client or DEFAULT_CLIENT]
    fit = fit_engine(args.runs, model_dir, profile, jobs=args.jobs or 1, settings=RunSettings().with_client(client))
    command = " ".join(["llmsim calibrate --runs", str(args.runs), "--engine", profile,
                        *(["--model-configs", str(model_dir)] if model_dir else []),
                        *(["--client", client.name] if args.client else []), "--output", str(output)])
    return _write_fit(args.output, f"Fitted by `{command}`:", fit_report(fit, args.runs, client.name),
                      fitted_profile(fit, output.stem, args.runs))


def _write_generation_file(args: argparse.Namespace, kernels: Path, profile: HardwareSpec,
                           report: list[str]) -> int:
    """``calibrate --kernels DIR --gpu G --generation-file``: G's generation file, its ``fit`` the calibrated
    profile's (:func:`generation_file`)."""
    command = f"llmsim calibrate --kernels {kernels} --gpu {args.gpu} --generation-file --output {args.output}"
    return _write_fit(args.output, f"{profile.generation}: the fitted kernel parameters every GPU of the generation "
                      "takes where its own profile does not set them (simulator/catalog/generations.py). Fitted on "
                      f"{args.gpu}'s tables by `{command}`:", report,
                      generation_file(profile))


def _write_framework_kernels(args: argparse.Namespace, kernels: Path) -> int:
    """``calibrate --kernels DIR --gpu G --framework F``: the engine-profile fields of F's own kernels on G's
    generation, as YAML to merge into F's profile."""
    fields, report = fit_framework_kernels(kernels, args.framework, args.gpu)
    return _write_fit(args.output, f"{args.framework}'s own kernels on {args.gpu}, fitted by `llmsim calibrate "
                      f"--kernels {kernels} --gpu {args.gpu} --framework {args.framework}`: merge into "
                      f"engine_profiles/{args.framework}.yaml", report, fields)


def _write_fit(output: str, title: str, report: list[str], document: dict) -> int:
    """Every calibration's file: ``title`` and the fit's report as YAML comments (wrapped to the project's line
    length), then ``document``; the report printed too."""
    comments = [f"# {line}\n" for line in textwrap.wrap(title, 116)]
    comments += [f"# {part}\n" for line in report for part in textwrap.wrap(line, 114, subsequent_indent="  ")]
    Path(output).write_text("".join(comments) + yaml.safe_dump(document, sort_keys=False))
    print("\n".join(report))
    note(f"wrote {output}")
    return 0
