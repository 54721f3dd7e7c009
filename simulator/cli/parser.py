"""The ``llmsim`` argument parser. Each subcommand names its handler as (module of :mod:`simulator.cli`,
function), imported only when that subcommand runs, so ``llmsim run`` does not load the fitting or plotting code."""

from __future__ import annotations

import argparse
import re
import typing
from pathlib import Path

from simulator.config import DEFAULT_EXPERIMENT
from simulator.dtypes import WEIGHT_DTYPES
from simulator.fidelity.clients import CLIENTS, DEFAULT_CLIENT
from simulator.fidelity.systems import DEFAULT_KERNEL_GPU


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _bounded_int(low: int, high: int) -> typing.Callable[[str], int]:
    """A whole number from ``low`` to ``high``."""
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    parse.__name__ = "integer"  # argparse's "invalid integer value: 'x'"
    return parse


def _positive_float(text: str) -> float:
    value = float(text)
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
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


def _part_names(text: str) -> list[str]:
    """``sys_prompt,passages,...``: names separated by commas, none empty."""
    names = text.split(",")
    if not all(name.strip() for name in names):
        raise argparse.ArgumentTypeError(f"expected part names separated by commas, got {text!r}")
    return [name.strip() for name in names]


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


LONGEST_WORD = 200  # characters of one word (a value, a path) an error line quotes in full
SHOWN_OF_A_LONG_WORD = 120


def one_line(text: str) -> str:
    """An error message as one line: line breaks and other control characters (from a key or value the user
    wrote) shown escaped, and a word longer than LONGEST_WORD characters (a huge value pasted into a field) cut to
    its first SHOWN_OF_A_LONG_WORD with its length."""
    text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    return re.sub(rf"\S{{{LONGEST_WORD + 1},}}",
                  lambda word: f"{word[0][:SHOWN_OF_A_LONG_WORD]}... ({len(word[0]):,} characters)", text)


class _Parser(argparse.ArgumentParser):
    """argparse with the project's error form: one line naming the problem (``llmsim run: error: ...``, the
    usage is in ``--help``), exit status 2."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


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
    run.set_defaults(handler=("runs", "cmd_run"))

    rep = sub.add_parser("report", help="a self-contained HTML report of a run's or a sweep's --out folder")
    rep.add_argument("folder", help="a run's --out folder (summary.json) or a sweep's (index.parquet)")
    rep.add_argument("--output", metavar="FILE", help="where to write it (default: FOLDER/report.html)")
    rep.set_defaults(handler=("runs", "cmd_report"))

    comp = sub.add_parser("compare", help="run a comparison's variants, print a table and check its findings")
    comp.add_argument("file", help="comparison YAML (see experiments/policies/)")
    comp.add_argument("--jobs", type=_positive_int, default=1, help="variants run in parallel processes")
    comp.add_argument("--json", action="store_true", help="print summaries and findings as JSON")
    comp.set_defaults(handler=("studies", "cmd_compare"))

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
    swp.set_defaults(handler=("studies", "cmd_sweep"))

    plan = sub.add_parser(
        "plan", help="which deployment meets an SLO at what cost: every valid deployment of a model on a GPU searched "
        "(or a grid of your own)",
        description="From flags: every deployment of --model on --gpu within --max-gpus (TP x PP x attention DP x "
        "EP, aggregated and disaggregated xPyD) set up as the engine would, bounded by its roofline steady state, "
        "the best simulated with queueing over closed-loop concurrency. With a FILE: the capacity of every "
        "deployment of a user-written grid.")
    plan.add_argument("file", nargs="?", help="plan YAML: base, grid over deployment knobs, slo, attainment, prices "
                      "(else the flags below)")
    plan.add_argument("--model", help="catalog name, model YAML or HF config.json")
    plan.add_argument("--gpu", help="GPU catalog name or hardware YAML")
    budget = plan.add_mutually_exclusive_group()
    budget.add_argument("--max-gpus", type=_positive_int, help="largest deployment unit searched (GPUs)")
    budget.add_argument("--gpus", type=_positive_int, help="GPUs you have: units of at most this many searched")
    plan.add_argument("--isl", type=_positive_int, help="prompt tokens of every request (with --osl)")
    plan.add_argument("--osl", type=_positive_int, help="output tokens of every request (with --isl)")
    plan.add_argument("--workload", help="a workload preset (llmsim workloads lists them) or a workload YAML instead "
                      "of --isl/--osl: its request shapes (the planner sets the arrivals)")
    plan.add_argument("--trace", help="a request trace instead of --isl/--osl: its lengths, and its mean rate served "
                      "(the top deployments replay it) unless --rate or --users")
    plan.add_argument("--trace-format", choices=["auto", "processed", "azure", "burstgpt", "mooncake", "ragpulse"],
                      default="auto", help="the trace's format (default: by suffix and header)")
    plan.add_argument("--ttft", type=_positive_float, help="TTFT limit, ms")
    plan.add_argument("--tpot", type=_positive_float, help="TPOT limit, ms")
    plan.add_argument("--percentile", choices=["mean", "median", "p90", "p95", "p99"], default="p90",
                      help="the statistic the limits bound (default p90; AIConfigurator's limits are means)")
    target = plan.add_mutually_exclusive_group()
    target.add_argument("--rate", type=_positive_float, help="requests/s to serve: the fewest GPUs that do")
    target.add_argument("--users", type=_positive_int, help="concurrent users to serve: the fewest GPUs that do")
    plan.add_argument("--engine", default="vllm",
                      help="engine profile, or several separated by commas to compare them (default vllm)")
    plan.add_argument("--token-budgets", metavar="N,N,...",
                      help="tokens per iteration (max_num_batched_tokens) searched for each aggregated unit, e.g. "
                      "2048,8192 (default: the engine's own; disaggregated workers keep it)")
    plan.add_argument("--price", type=_positive_float, help="USD per GPU-hour (default: the GPU profile's, if any)")
    plan.add_argument("--modes", default="agg,disagg", help="agg, disagg or both (default agg,disagg)")
    plan.add_argument("--top", type=_positive_int, default=3, help="configurations confirmed, written and launched")
    plan.add_argument("--keep", type=_positive_int, default=24,
                      help="most candidates simulated (after those the analytic bound prunes; default 24)")
    plan.add_argument("--requests-per-user", type=_bounded_int(1, 100), default=3,
                      help="requests each simulated user sends (1-100)")
    plan.add_argument("--seed", type=int, default=0, help="seed of every simulation")
    plan.add_argument("--seeds", type=_positive_int, default=1,
                      help="independent seeds of each top capacity search: their mean and 95%% confidence interval")
    plan.add_argument("--jobs", type=_positive_int, default=1, help="deployments searched in parallel (local backend)")
    plan.add_argument("--backend", choices=["local", "ray"], default="local",
                      help="where the simulations run (ray: pip install -e '.[ray]'; the same plan either way)")
    plan.add_argument("--address", help="Ray cluster address (default: start a local Ray)")
    plan.add_argument("--out", help="folder for plan.csv, pareto.csv/.png, report.html and top/ (flags) or plan.csv "
                      "and the Pareto plot (FILE)")
    plan.set_defaults(handler=("studies", "cmd_plan"))

    plot = sub.add_parser("plot", help="latency CDFs, timelines, phase shares or sweep curves as PNG and SVG")
    plot.add_argument("folder", help="a run's --out folder or a sweep's --out folder")
    plot.set_defaults(handler=("runs", "cmd_plot"))

    bench = sub.add_parser("benchmark", help="GuideLLM's sweep: synchronous, throughput, then rates between")
    bench.add_argument("file", nargs="?", help="experiment YAML (default: the quickstart)")
    bench.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field")
    bench.add_argument("--rates", type=_positive_int, default=10,
                       help="benchmarks in all, the two anchors included (GuideLLM's --rate for a sweep)")
    bench.add_argument("--rate-type", default="constant", help="arrivals between the anchors: constant | poisson")
    bench.add_argument("--jobs", type=_positive_int, default=1, help="benchmarks in parallel processes")
    bench.add_argument("--out", help="folder for benchmark.csv, a sweep's index.parquet and a folder per benchmark "
                       "(llmsim plot / report read it)")
    bench.add_argument("--report", metavar="FILE", help="also write the table and curves as a self-contained HTML "
                       "report")
    bench.add_argument("--json", action="store_true", help="the rows as JSON")
    bench.set_defaults(handler=("studies", "cmd_benchmark"))

    cap = sub.add_parser("capacity", help="the most load that meets an SLO: the highest request rate, the most "
                         "closed-loop users or a trace's fastest replay (bisection)")
    cap.add_argument("file", help="experiment YAML (its arrival rate, closed-loop users or trace speed-up is where the "
                     "search starts)")
    cap.add_argument("--slo", action="append", default=[], metavar="METRIC=MS",
                     help="e.g. p99_ttft_ms=500 or ttft_p99_ms=500 (repeatable; default: the workload preset's slo, "
                     "if it states one)")
    cap.add_argument("--attainment", type=_share,
                     help="require this share of requests within the limits instead (0 < share <= 1)")
    cap.add_argument("--tolerance", type=_open_fraction, default=0.02,
                     help="relative width of the final bracket (0 < tolerance < 1); users: exact below "
                     "1/tolerance")
    cap.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field")
    cap.add_argument("--seeds", type=_positive_int, default=1,
                     help="search with this many independent seeds; report the mean, its 95%% interval and the range")
    cap.add_argument("--report", metavar="FILE", help="also write the search as a self-contained HTML report")
    cap.add_argument("--json", action="store_true", help="print the capacity and every probe as JSON")
    cap.set_defaults(handler=("studies", "cmd_capacity"))

    reg = sub.add_parser("regress", help="run a suite of comparisons, check findings and compare with a baseline")
    reg.add_argument("--suite", default=str(Path("experiments") / "policies"), help="folder of comparison YAMLs")
    reg.add_argument("--baseline", help="baseline JSON (default: SUITE/baseline.json)")
    reg.add_argument("--update", action="store_true", help="re-bless the baseline with this run's values")
    reg.add_argument("--jobs", type=_positive_int, default=1, help="simulations in parallel processes")
    reg.add_argument("--rtol", type=float, default=0.02, help="default relative tolerance per metric")
    reg.set_defaults(handler=("studies", "cmd_regress"))

    conv = sub.add_parser("convert-trace", help="rewrite a trace (Azure, BurstGPT, Mooncake, CSV) in the canonical "
                          "arrived_at,num_prefill_tokens,num_decode_tokens form")
    conv.add_argument("input", help="trace file")
    conv.add_argument("output", help="CSV to write")
    conv.add_argument("--format", default="auto",
                      choices=["auto", "processed", "azure", "burstgpt", "mooncake", "ragpulse", "csv"])
    conv.add_argument("--columns", help="for --format csv: arrival=COL,input=COL,output=COL")
    conv.add_argument("--time-unit", default="s", choices=["s", "ms", "us"], help="for --format csv")
    conv.add_argument("--skip-bad", action="store_true", help="skip and count malformed rows instead of stopping")
    conv.set_defaults(handler=("catalog", "cmd_convert_trace"))

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
    step.set_defaults(handler=("fidelity", "cmd_steptime"))

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
    val.add_argument("--client", choices=list(CLIENTS), default=DEFAULT_CLIENT,
                     help="with --runs: the benchmark client of the rows that name none in a benchmark_client "
                     f"column ({'; '.join(client.describe() for client in CLIENTS.values())}); default: "
                     "%(default)s")
    val.add_argument("--length-range", type=_length_range, metavar="LOW:HIGH",
                     help="with --runs, for the rows that name no benchmark_client: every request's prompt and "
                     "output lengths uniform on [LOW, HIGH] times the row's isl and osl (a benchmark client that "
                     "draws lengths); default: the --client's")
    val.add_argument("--requests-per-client", type=_bounded_int(1, 100), metavar="N",
                     help="with --runs, for the rows that name no benchmark_client: every simulated client sends N "
                     "requests, all measured; default: the --client's")
    val.add_argument("--client-connections", type=_positive_int, metavar="N",
                     help="with --runs: the benchmark client's connection pool holds N connections, its requests "
                     "timed from their send, the wait for a connection included (aiohttp's default session: 100); "
                     "default: one per client")
    val.add_argument("--report", metavar="FILE", help="also write the report and its plot as self-contained HTML")
    val.add_argument("--bands", metavar="CSV", help="with --runs: write the held-out rows' error per slice (GPU "
                     "generation, engine, model family, mode) into this accuracy-bands file, replacing its rows of "
                     "the same slices (the shipped one, engine_profiles/accuracy.csv, is what run, plan and capacity "
                     "print)")
    val.add_argument("--ranking", nargs="?", const="", metavar="CSV", help="with --runs: per model, GPU, engine "
                     "and request shape, is the deployment predicted best at a per-user speed within 10%% of the "
                     "measured best? Prints the hit rates; with CSV also writes every decision; --output's rows "
                     "then carry tokens/s per GPU and per user, measured and predicted")
    val.add_argument("--ranking-from", metavar="CSV", help="rank the rows of an earlier `validate --runs --output` "
                     "file instead of simulating (as --ranking)")
    val.set_defaults(handler=("fidelity", "cmd_validate"))

    cal = sub.add_parser("calibrate", help="fit a hardware profile's physical parameters, or an engine profile's "
                         "fixed costs, to measurements")
    cal.add_argument("--hardware", help="profile to start from (spec-sheet numbers are kept; with --kernels: the "
                     "--gpu's catalog profile by default)")
    cal.add_argument("--kernels", help="kernel-table folder (format of ../shared/data/kernels): fit the GEMM, "
                     "collective and attention parameters of a GPU generation")
    cal.add_argument("--gpu", help="with --kernels: the GPU folder to fit (a100_sxm, h100_sxm, or another system the "
                     f"data names: h200_sxm, b200_sxm, ...); default: {DEFAULT_KERNEL_GPU}")
    cal.add_argument("--framework", help="with --kernels: fit this framework's own all-reduce, GEMM-rate and "
                     "attention kernels (vllm, sglang, trtllm) instead of the GPU generation: writes engine-profile "
                     "fields")
    cal.add_argument("--generation-file", action="store_true", help="with --kernels (without --framework): write "
                     "the fit as the GPU's generation file (hardware_profiles/generations/NAME.yaml: --output must be "
                     "named after the generation), which every GPU of the generation takes")
    cal.add_argument("--ops", help="folder of per-layer operator CSVs (format of calibration/a100_ops)")
    cal.add_argument("--data", help="folder with network/<system>_<all_reduce|send_recv>.csv")
    cal.add_argument("--network-system", help="file prefix of the network timings to fit, e.g. a100_dgx")
    cal.add_argument("--runs", metavar="FILE", help="a file of end-to-end benchmark runs (format of "
                     "../shared/data/silicon): fit --engine's fixed costs (per_iteration_ms, per_sequence_us, "
                     "kernel_overhead_us) on the half of its rows whose id has an even CRC-32 (and their copies: rows "
                     "of the same measured TTFT and TPOT), report both halves, and write the fitted engine profile")
    cal.add_argument("--engine", metavar="PROFILE", help="with --runs: the engine profile whose rows to fit (the "
                     "rows' backend, or its later versions' profile: vllm, vllm-0.14, sglang, trtllm)")
    cal.add_argument("--model-configs", help="with --runs: folder of Hugging Face configs named "
                     "<org>--<name>_config.json")
    cal.add_argument("--client", choices=list(CLIENTS), help="with --runs: the benchmark client of the rows that "
                     f"name none in a benchmark_client column (as validate --runs --client); default: {DEFAULT_CLIENT}")
    cal.add_argument("--jobs", type=_positive_int, help="with --runs: rows simulated in parallel; default: 1")
    cal.add_argument("--output", required=True, help="where to write the calibrated profile YAML")
    cal.set_defaults(handler=("fidelity", "cmd_calibrate"))

    models = sub.add_parser("models", help="the model catalog: parameters, layer groups, KV bytes per token")
    models.add_argument("--json", action="store_true", help="one JSON object per model")
    models.set_defaults(handler=("catalog", "cmd_models"))

    gpus = sub.add_parser("gpus", help="the GPU catalog: memory, bandwidth, peak TFLOP/s, generation")
    gpus.add_argument("--json", action="store_true", help="one JSON object per GPU")
    gpus.set_defaults(handler=("catalog", "cmd_gpus"))

    presets = sub.add_parser("workloads", help="the workload presets (workloads/*.yaml): source and statistics")
    presets.add_argument("--json", action="store_true", help="one JSON object per preset")
    presets.add_argument("--fit", metavar="FILE", help="print a preset fitted to a processed trace (arrived_at, "
                         "num_prefill_tokens, num_decode_tokens; or lengths only, also as input_length, "
                         "output_length; or a field,value,probability PMF of input_tokens and output_tokens; or an "
                         "arrival-rate series, time_s and rate_per_s, whose shape becomes the arrival; or JSON "
                         "lines with content ids, hash_ids or parts, whose reuse becomes the prompt's segments) "
                         "instead")
    presets.add_argument("--order", type=_part_names, metavar="PART,PART,...",
                         help="with --fit of JSON lines with parts: the parts' order in the prompt (a prefix cache "
                         "matches chains, so the order decides what is reused)")
    presets.add_argument("--rate-only", action="store_true",
                         help="with --fit of a source with arrival times: a Poisson arrival at its mean rate, its "
                         "gaps not fitted (timestamps too coarse to show burstiness)")
    presets.add_argument("--max-entropy", action="append", type=_mean_and_bounds, metavar="PART=MEAN:MIN:MAX",
                         help="print a preset from a published mean and bounds of input_tokens and/or "
                         "output_tokens (the maximum-entropy law for them) instead; repeatable")
    presets.add_argument("--poisson", type=_positive_float, metavar="RATE",
                         help="with --fit, for a source without arrival times: a Poisson arrival at RATE req/s")
    presets.add_argument("--slo", action="append", metavar="METRIC=MS",
                         help="with --fit: the SLO the preset states (its benchmark's percentile bounds, e.g. "
                         "p99_ttft_ms=2000), which llmsim capacity holds when given no --slo; repeatable")
    presets.add_argument("--name", default="my-workload", help="the fitted preset's name")
    presets.add_argument("--compare", nargs=2, metavar=("PRESET", "TRACE"),
                         help="print a preset's statistics beside a trace file's instead: request count, mean and "
                         "p50/p90/p99 input and output lengths, their Spearman correlation, the share of prompt "
                         "blocks seen before (where both have prefix ids), each with the relative difference")
    presets.add_argument("--trace-format", default="auto", metavar="FORMAT",
                         help="with --compare: the trace's format (auto, processed, azure, burstgpt, mooncake; "
                         "default auto: from its header or suffix)")
    presets.add_argument("--requests", type=_bounded_int(1, 1_000_000), metavar="N",
                         help="with --compare: requests drawn from the preset (default the trace's count, within "
                         "20,000 and 200,000)")
    presets.add_argument("--output", metavar="FILE.csv", help="with --compare: also write the rows as CSV")
    presets.set_defaults(handler=("catalog", "cmd_workloads"))

    kv = sub.add_parser("kv-size", help="KV-cache bytes for a model, context and batch")
    kv.add_argument("--model", help="catalog name or config path (gives layers, kv heads, head dim)")
    kv.add_argument("--layers", type=_positive_int)
    kv.add_argument("--kv-heads", type=_positive_int)
    kv.add_argument("--head-dim", type=_positive_int)
    kv.add_argument("--batch", type=_positive_int, default=1)
    kv.add_argument("--context", type=_positive_int, required=True, help="tokens per sequence")
    kv.add_argument("--dtype", choices=sorted({"fp32", *WEIGHT_DTYPES}), default="fp16")
    kv.add_argument("--json", action="store_true", help="with --model: per layer group, parameters, bytes as JSON")
    kv.set_defaults(handler=("catalog", "cmd_kv_size"))
    for command in sub.choices.values():
        command.add_argument("--quiet", action="store_true",
                             help="no progress bars and no 'wrote …' lines on stderr (results and errors stay)")
    return parser
