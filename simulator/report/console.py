"""The readable summary printed by ``llmsim run``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from simulator.config import ExperimentConfig
from simulator.config.workload import offered_rate


def tiers_line(s: dict) -> str:
    """One line of the KV tiers below HBM (simulator.kv.tiers): each tier's share of prompt tokens loaded, its
    traffic and dropped writes; the loads' time and what they added to iterations."""
    media = [key[3:-9] for key in s if key.startswith("kv_") and key.endswith("_hit_rate")]
    parts = [f"{m} hit {_fmt(100 * s[f'kv_{m}_hit_rate'])}% of prompt tokens ({_fmt(s[f'kv_{m}_read_gib'], 2)} GiB "
             f"read, {_fmt(s[f'kv_{m}_written_gib'], 2)} GiB written, {s[f'kv_{m}_dropped_writes']:,} writes dropped)"
             for m in media]
    return (f"KV tiers:   {'; '.join(parts)}; loads {_fmt(s['kv_offload_load_s'], 3)} s, adding "
            f"{_fmt(s['kv_offload_stall_s'], 3)} s to iterations")


def _fmt(value: float, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def _length(section: Any) -> str:
    """A length distribution in a few characters: its value, range or mean."""
    kind = section.kind
    if kind == "fixed":
        return f"{section.value:,}"
    if kind == "uniform":
        return f"{section.min:,}–{section.max:,}"
    if kind in ("lognormal", "normal"):
        return f"{kind} mean {section.mean:,.0f}"
    if kind == "quantiles":  # the value at cumulative probability 0.5 (a preset's points crowd the top percent)
        probabilities = section.probabilities or [i / (len(section.values) - 1) for i in range(len(section.values))]
        return f"median {round(float(np.interp(0.5, probabilities, section.values))):,}"
    return f"{kind}"


def describe_setup(config: ExperimentConfig, with_rate: bool = True) -> str:
    """What a run describes, in two lines: the model on its GPUs (replicas × GPU and parallelism per pool), engine,
    scheduler and KV cache; then the workload (its source or arrivals — with their rate unless ``with_rate`` is
    false, for a search that varies it — request count and prompt / output lengths)."""
    pools = []
    for pool in config.cluster.replica_pools():
        degrees = [f"{name} {value}" for name, value in (("TP", pool.tensor_parallel), ("PP", pool.pipeline_parallel),
                                                         ("DP", pool.data_parallel), ("EP", pool.expert_parallel))
                   if value > 1 or name == "TP"]
        if pool.mig is not None:  # a MIG slice of the GPU: g/7 of it (simulator.catalog.mig)
            degrees.append(f"MIG {pool.mig}, {pool.mig.partition('g')[0]}/7 of a GPU each")
        pools.append(f"{pool.replicas} × {pool.hardware or config.hardware} ({', '.join(degrees)})")
    deployment = (f"{config.model} ({config.dtype}) on {' + '.join(pools)}, engine {config.engine}, scheduler "
                  f"{config.scheduler.kind}, KV cache {config.kv_cache.kind}")
    workload = config.workload
    if workload.trace is not None:
        source = f"trace {Path(workload.trace.path).name}"
    elif workload.dataset is not None:
        source = f"dataset {Path(workload.dataset.path).name}"
    else:
        arrival = workload.arrival
        rate = offered_rate(arrival)
        source = (f"{arrival.kind} arrivals" + (f" at {rate:g} req/s" if rate and with_rate else "")
                  if arrival else "arrivals")
    unit = "session" if workload.sessions else "request"
    if workload.num_requests is not None:
        count = f"{workload.num_requests:,} {unit}{'s' if workload.num_requests != 1 else ''}"
    elif workload.duration_s is not None:
        count = f"{workload.duration_s:g} s"
    else:
        count = "every request"  # a trace replayed whole

    lengths = ""
    if workload.input_tokens is not None and workload.output_tokens is not None:
        text = " of text plus images" if workload.images is not None else ""  # (their tokens join the prompt)
        lengths = f", prompts {_length(workload.input_tokens)}{text}, outputs {_length(workload.output_tokens)} tokens"
        if workload.length_correlation is not None and workload.length_correlation.spearman:
            lengths += f" (rank correlation {workload.length_correlation.spearman:g})"
    preset = f" (preset {workload.preset})" if workload.preset else ""
    return f"{deployment}\nworkload:   {source}, {count}{lengths}{preset}"


OVERLOAD_GROWTH = 1.5  # a backlog growing this much over the second half of the arrivals: the server fell behind


def iterations_line(summary: dict[str, Any], peak_format: str = "") -> str:
    """The iteration bounds in one line (``metrics.iteration_bounds``; :mod:`simulator.results.bounds`): per phase
    that ran — decode, prefill, mixed — the share of its busy time under its commonest bound, and the fraction of the
    peak that bound is about (HBM bandwidth for memory, the GEMMs' ``peak_format`` FLOP/s for compute, both for
    fixed)."""
    flops_peak = f"{peak_format.upper()} peak" if peak_format else "peak FLOP/s"
    parts = []
    for phase in ("decode", "prefill", "mixed"):
        if not summary.get(f"iter_{phase}_busy_s"):  # (a phase of no time has no shares)
            continue
        shares = {bound: summary[f"iter_{phase}_{bound}_bound_frac"] for bound in ("compute", "memory", "fixed")}
        bound = max(shares, key=shares.__getitem__)
        hbm = f"{_fmt(100 * summary[f'iter_{phase}_peak_hbm_frac'], 0)}% of HBM peak"
        flops = f"{_fmt(100 * summary[f'iter_{phase}_peak_flops_frac'], 0)}% of {flops_peak}"
        at = {"compute": flops, "memory": hbm, "fixed": f"{hbm}, {flops}"}[bound]
        parts.append(f"{phase} {_fmt(100 * shares[bound], 0)}% {bound}-bound at {at}")
    return "iterations: " + "; ".join(parts) if parts else ""


def energy_line(summary: dict[str, Any]) -> str:
    """The GPUs' energy in one line (:mod:`simulator.results.energy`): joules per output token, the run's kWh, the
    mean power per GPU and, when priced, the cost; empty when the run has no energy figures (no iteration bounds,
    or a GPU that states no board power)."""
    if summary.get("energy_j") is None:
        return ""
    price = f", ${_fmt(summary['energy_usd'], 4)}" if summary.get("energy_usd") is not None else ""
    return (f"energy:     {_fmt(summary['energy_j_per_output_token'], 3)} J per output token, "
            f"{_fmt(summary['energy_j'] / 3.6e6, 3)} kWh{price}; {_fmt(summary['mean_power_w_per_gpu'], 0)} W "
            f"per GPU on average")


def format_summary(name: str, summary: dict[str, Any], slo_given: bool = True,
                   offered_rate: float | None = None, formats: str = "", setup: str = "", peak_format: str = "") -> str:
    """The summary as text. ``slo_given``: whether the experiment set an SLO (else attainment is not shown as
    100%); ``offered_rate``: the arrival rate asked for (requests/s), to warn when the server did not keep up;
    ``formats``: the weights' and the KV cache's data formats as resolved (shown on the memory line); ``setup``:
    what the run describes (:func:`describe_setup`), under the title; ``peak_format``: the tensor-core format whose
    peak the iteration bounds' FLOP/s are a fraction of (:func:`iterations_line`, when the summary has them)."""
    s = summary
    rows = [(label, [_fmt(s[f"{stat}_{key}_ms"], 2) for stat in ("mean", "median", "p90", "p99")])
            for label, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("longest ITL", "max_itl"),
                               ("E2E", "e2el")) if f"mean_{key}_ms" in s]
    width = max(10, *(len(cell) + 2 for _, cells in rows for cell in cells))  # columns never run together
    lines = [
        f"== {name} ==",
        *([setup] if setup else []),
        f"requests: {s['completed']:,} completed, {s['num_rejected']:,} rejected"
        + (f", {s['num_failed']:,} failed" if s.get("num_failed") else "")
        + (f", {s['num_cancelled']:,} cancelled" if s.get("num_cancelled") else "") + f", of {s['num_requests']:,}"
        f"   duration {_fmt(s['duration_s'], 2)} s   GPUs {s['num_gpus']:.4g}"
        + (f" (MIG {s['mig']})" if "mig" in s else ""),
        *([f"cancelled:  {s['num_cancelled']:,} by their clients (workload.cancel, client_timeout_s); "
           f"{s['cancelled_output_tokens']:,} output tokens generated for them were wasted"]
          if s.get("num_cancelled") else []),
        *([f"measured:   {s['measured_requests']:,} of them (warm-up and cool-down left out): latency, throughput "
           f"and SLO figures below describe these"] if s.get("measured_requests", s["num_requests"])
          < s["num_requests"] else []),
        "",
        f"{'latency (ms)':<14}" + "".join(f"{h:>{width}}" for h in ("mean", "p50", "p90", "p99")),
    ]
    lines += [f"{label:<14}" + "".join(f"{cell:>{width}}" for cell in cells) for label, cells in rows]
    if "sessions" in s:
        lines.append(f"sessions:   {s['sessions']:,}; TTFT first turns mean {_fmt(s['mean_ttft_first_turn_ms'], 2)} "
                     f"p99 {_fmt(s['p99_ttft_first_turn_ms'], 2)} ms, later turns mean "
                     f"{_fmt(s['mean_ttft_later_turns_ms'], 2)} p99 {_fmt(s['p99_ttft_later_turns_ms'], 2)} ms")
    queue = (f"queue:      mean {_fmt(s['mean_queue_ms'], 2)} p99 {_fmt(s['p99_queue_ms'], 2)} ms (arrival to first "
             "scheduled)")
    if "mean_kv_transfer_ms" in s:  # disaggregated
        queue += (f"; KV transfer mean {_fmt(s['mean_kv_transfer_ms'], 2)} p99 {_fmt(s['p99_kv_transfer_ms'], 2)} ms; "
                  f"decode queue mean {_fmt(s['mean_decode_queue_ms'], 2)} p99 {_fmt(s['p99_decode_queue_ms'], 2)} ms")
    lines.append(queue)
    if "mean_replicas" in s:
        while_scaling = (f"; SLO attainment while scaling up {_fmt(100 * s['slo_attainment_while_scaling'])}%"
                         if slo_given else "")
        lines.append(f"replicas:   mean {_fmt(s['mean_replicas'], 2)}, peak {s['peak_replicas']} (autoscaled; GPUs "
                     f"above is the most it may hold); {s['scale_ups']} started, {s['scale_downs']} released; "
                     f"{s['cold_start_requests']:,} requests on cold-started replicas; {_fmt(s['gpu_hours'], 3)} "
                     f"GPU-hours{while_scaling}")
    lines += [
        "",
        f"throughput: {_fmt(s['request_throughput'], 2)} req/s, {_fmt(s['output_throughput'])} output tok/s, "
        f"{_fmt(s['total_token_throughput'])} total tok/s",
        f"memory:     per GPU{f' ({formats})' if formats else ''}, weights {_fmt(s['weights_gib_per_gpu'], 2)} GiB"
        + (f" (draft {_fmt(s['draft_gib_per_gpu'], 2)} GiB)" if "draft_gib_per_gpu" in s else "") + ", "
        + (f"LoRA slots {_fmt(s['lora_gib_per_gpu'], 2)} GiB, " if "lora_gib_per_gpu" in s else "")
        + f"activation workspace {_fmt(s['workspace_gib_per_gpu'], 2)} GiB, KV pool "
        f"{_fmt(s['kv_pool_gib_per_gpu'], 2)} GiB",
        *([f"speculation: {_fmt(s['mean_accepted_tokens'], 3)} tokens per step and sequence (accepted drafts and the "
           f"bonus token); drafts accepted {_fmt(100 * s['draft_acceptance_rate'])}%, by position "
           + ", ".join(_fmt(s[key], 3) for key in s if key.startswith("acceptance_rate_pos"))]
          if "mean_accepted_tokens" in s else []),
        *([f"LoRA:       {s['adapter_loads']:,} adapter loads into GPU slots ({s['adapter_storage_reads']:,} from "
           f"storage), {_fmt(s['adapter_load_time_s'], 3)} s of iterations"] if "adapter_loads" in s else []),
        f"KV cache:   {s['kv_capacity_tokens']:,} tokens ({s['kv_num_blocks']:,} blocks) per pool (a replica's, or "
        f"under attention DP each rank's); "
        f"peak {_fmt(100 * s['peak_kv_usage'])}%, mean {_fmt(100 * s['mean_kv_usage'])}%; "
        f"peak batch {s['peak_running']}, mean {_fmt(s['mean_running'])}; preemptions {s['num_preemptions']:,}",
        f"KV memory:  real {_fmt(100 * s['kv_real_frac'])}%, internal {_fmt(100 * s['kv_internal_frac'])}%, "
        f"external {_fmt(100 * s['kv_external_frac'])}%, cached {_fmt(100 * s['kv_cached_frac'])}%, "
        f"free {_fmt(100 * s['kv_free_frac'])}%; waste {_fmt(100 * s['kv_waste_frac'])}% of the memory in use"
        + (f"; prefix-cache hit rate {_fmt(100 * s['prefix_cache_hit_rate'])}%" if s["prefix_cache_hit_rate"] else ""),
        *([tiers_line(s)] if "kv_offload_load_s" in s else []),
        f"SLO:        attainment {_fmt(100 * s['slo_attainment'])}%, goodput {_fmt(s['request_goodput'], 2)} req/s"
        if slo_given
        else "SLO:        none set (slo: {ttft_ms, tpot_ms, max_itl_ms, e2el_ms} gives attainment and goodput)",
    ]
    if bounds := iterations_line(s, peak_format):
        lines.insert(-1, bounds)
    if energy := energy_line(s):
        lines.insert(-1, energy)
    mid, end = s["backlog_mid_arrivals"], s["backlog_end_of_arrivals"]
    if end > OVERLOAD_GROWTH * mid + 10:
        offered = f" at {_fmt(offered_rate, 2)} req/s" if offered_rate else ""
        lines.append(f"warning: the server fell behind{offered}: unfinished requests grew from {mid:,} halfway "
                     f"through the arrivals to {end:,} at the last one (queued or in ever larger batches); the rate "
                     "exceeds its capacity or the run is too short for a steady state, and the latencies above "
                     "depend on the run's length")
    return "\n".join(lines)
