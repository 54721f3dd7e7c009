"""``llmsim models``, ``gpus``, ``workloads``, ``kv-size`` and ``convert-trace``: what the catalogs hold, and
traces rewritten in the canonical form."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from simulator.catalog import hardware_names, load_hardware, load_model, model_names
from simulator.catalog.layers import FullAttention
from simulator.catalog.workloads import fit_preset, load_preset, max_entropy_preset, preset_names, preset_yaml
from simulator.cli.outputs import check_output_file
from simulator.config.slo import parse_slo
from simulator.config.workload import TraceConfig
from simulator.dtypes import BYTES_PER_ELEMENT
from simulator.errors import LLMSimError
from simulator.kv.sizing import kv_cache_bytes
from simulator.results.progress import note
from simulator.workload import read_trace, write_trace
from simulator.workload.compare import compare
from simulator.workload.compare import csv_rows as comparison_rows
from simulator.workload.compare import table as comparison_table


def cmd_models(args: argparse.Namespace) -> int:
    """The model catalog: layer groups, total and active parameters, checkpoint format, KV bytes per token."""
    rows: list[dict[str, Any]] = []
    for name in model_names():
        model = load_model(name)
        growing = sum(g.count * g.attention.kv_bytes_per_token(2.0) for g in model.layers if not g.attention.span)
        groups = [f"{g.count}x {g.attention.label} {g.ffn.kind}" for g in model.layers]
        mtp = model.mtp  # the multi-token-prediction modules, outside the totals (as published)
        rows.append({
            "name": name, "source": model.source, "layers": model.num_layers,
            "groups": groups + ([f"+ MTP {mtp.count}x {mtp.attention.label} {mtp.ffn.kind}"] if mtp else []),
            "total_params": model.num_params, "active_params": model.active_params,
            "checkpoint_dtype": model.quantization.dtype if model.quantization else "bf16",
            "kv_bytes_per_token": growing, "kv_bytes_per_token_in_windows": model.kv_bytes_per_token(2.0),
            **({"mtp_params": model.mtp_params} if mtp else {}),
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


def cmd_gpus(args: argparse.Namespace) -> int:
    """The GPU catalog: spec-sheet numbers and the generation whose fitted parameters each takes."""
    rows: list[dict[str, Any]] = []
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


def cmd_workloads(args: argparse.Namespace) -> int:
    """The workload presets with their sources and statistics, or (``--fit``) a new preset's YAML, or
    (``--compare``) a preset's statistics beside a trace's."""
    if args.compare:
        return _compare_workloads(args)
    for flag, given in (("--trace-format", args.trace_format != "auto"), ("--requests", args.requests is not None),
                        ("--output", args.output is not None)):
        if given:
            raise LLMSimError(f"workloads: {flag} is for --compare PRESET TRACE")
    if args.fit:
        slo = parse_slo(args.slo) if args.slo else None
        print(preset_yaml(fit_preset(args.fit, args.name, poisson_rate=args.poisson, order=args.order,
                                     rate_only=args.rate_only, slo=slo)), end="")
        return 0
    if args.slo:
        raise LLMSimError("workloads: --slo states a fitted preset's SLO: it needs --fit")
    if args.poisson is not None:
        raise LLMSimError("workloads: --poisson gives a fitted preset its arrival: it needs --fit")
    if args.order is not None or args.rate_only:
        raise LLMSimError(f"workloads: {'--order' if args.order is not None else '--rate-only'} shapes a fitted "
                          "preset: it needs --fit")
    if args.max_entropy:
        print(preset_yaml(max_entropy_preset(args.name, dict(args.max_entropy))), end="")
        return 0
    presets = [load_preset(name) for name in preset_names()]
    if args.json:
        print(json.dumps(presets, indent=2))
        return 0
    print(f"{'preset':24} {'input p50/mean/p99':>22} {'output p50/mean/p99':>22} {'rate/s':>7}  source")
    for preset in presets:
        stats = preset["statistics"]
        parts = ("text_tokens" if "text_tokens" in stats else "input_tokens", "output_tokens")  # images: the text
        cells = ["/".join(f"{stats[part][k]:,.0f}" if k in stats.get(part, {}) else "-" for k in ("p50", "mean", "p99"))
                 for part in parts]
        per_s = stats.get("rate_per_s")
        rate = f"{'-':>7}" if per_s is None else f"{per_s:7.2f}" if per_s >= 0.1 else f"{per_s:7.2g}"  # not 0.01
        print(f"{preset['name']:24} {cells[0]:>22} {cells[1]:>22} {rate}  {preset['source'].split(' (')[0]}")
        if "image_count" in stats and "image_tokens" in stats:
            count, tokens = stats["image_count"], stats["image_tokens"]
            print(f"{'':24} input: the text, plus {count['mean']:.2f} images per request (p99 {count['p99']:,.0f}) "
                  f"of {'/'.join(f'{tokens[k]:,.0f}' for k in ('p50', 'mean', 'p99'))} tokens (p50/mean/p99)")
        if preset.get("slo"):
            print(f"{'':24} slo: {', '.join(f'{key} <= {limit:g}' for key, limit in preset['slo'].items())}")
    print("use as workload: {preset: NAME, ...}; the section's own keys override the preset's; llmsim capacity "
          "holds a preset's slo when given no --slo")
    return 0


def _compare_workloads(args: argparse.Namespace) -> int:
    """``--compare PRESET TRACE``: the table, and the rows as CSV to ``--output``."""
    clashes = [flag for flag, given in (("--fit", args.fit), ("--max-entropy", args.max_entropy),
                                        ("--json", args.json)) if given]
    if clashes:
        raise LLMSimError(f"workloads: --compare does not combine with {', '.join(clashes)}")
    preset, path = args.compare
    try:
        trace = TraceConfig(path=path, format=args.trace_format)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise LLMSimError(f"--compare: trace {where}: {error['msg'].removeprefix('Value error, ')}") from None
    if args.output:
        check_output_file(Path(args.output), "--output")
    comparison = compare(preset, trace, args.requests)
    print(comparison_table(comparison))
    if args.output:
        with Path(args.output).open("w", newline="", encoding="utf-8") as handle:
            rows = comparison_rows(comparison)
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        note(f"wrote {args.output}: {len(rows)} rows")
    return 0


def cmd_kv_size(args: argparse.Namespace) -> int:
    if args.model and not (args.layers or args.kv_heads or args.head_dim):
        return _kv_size_of_model(args)
    if args.model:
        model = load_model(args.model)
        attention = model.layers[0].attention
        if len(model.layers) > 1 or not isinstance(attention, FullAttention):
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
        state = group.count * attention.state_elements() * attention.state_element_bytes(element)
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


def cmd_convert_trace(args: argparse.Namespace) -> int:
    columns = dict(item.split("=", 1) for item in args.columns.split(",")) if args.columns else None
    try:
        config = TraceConfig(path=args.input, format=args.format, columns=columns, time_unit=args.time_unit,
                             skip_bad=args.skip_bad)
    except ValidationError as exc:
        raise LLMSimError(f"convert-trace: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    trace = read_trace(config)
    check_output_file(Path(args.output), "convert-trace OUTPUT")
    write_trace(trace, args.output)
    skipped = f", {trace.skipped} malformed rows skipped" if trace.skipped else ""
    note(f"wrote {args.output}: {len(trace.arrival_s):,} requests{skipped}")
    return 0
