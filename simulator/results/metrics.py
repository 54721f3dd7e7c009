"""Every metric, computed from the per-request columns and the inter-token-gap histogram.

Definitions (names follow vLLM's benchmark output; times in ms unless the name says otherwise):

- measured requests: all, or without the first ``metrics.warmup_fraction`` and the last
  ``metrics.cooldown_fraction`` of them in arrival order (:func:`measured_mask`); num_requests, completed,
  num_rejected, num_failed and num_cancelled count every request, measured_requests the measured ones; the latency
  percentiles, throughputs, token totals, SLO figures, queueing times and per-class figures describe the measured
  requests only, while the ITL histogram, the KV, memory, running and preemption figures describe the whole run

- TTFT  = first_token_s − arrival_s  (arrival = when the client sent it, so network latency counts)
- E2EL  = finish_s − arrival_s
- TPOT  = (E2EL − TTFT) / (output_tokens − 1), for requests with more than one output token
- max ITL = a request's longest gap between consecutive output tokens (its worst stall while streaming; NaN with
  one output token), exact (:mod:`simulator.cluster.longest_gap`)
- ITL   = every gap between consecutive output tokens of a request, pooled over all requests; the mean is exact,
  percentiles come from a log histogram with 0.1% bins (:mod:`simulator.results.histogram`); under faults it also pools
  the gaps of attempts a crash lost (the per-token table, :mod:`simulator.results.token_log`, keeps the last attempt's)
- percentiles use linear interpolation (``numpy.percentile``); ``median`` is p50, and p90, p95, p99, p99.9 are
  given; ``std_<metric>_ms`` (TTFT, TPOT, E2EL, max ITL) is the population standard deviation, as vLLM's ``std_*``
- total_input_tokens / total_output_tokens: the tokens of the completed (measured) requests
- memory plan of one GPU (:mod:`simulator.kv.sizing`; the decode pool's when disaggregated): weights_gib_per_gpu,
  workspace_gib_per_gpu (the activation estimate), kv_pool_gib_per_gpu (the blocks' bytes), added by ``simulator.run``;
  draft_gib_per_gpu: a speculative draft's weights (an MTP module, an EAGLE head, a draft model), where one is held
  on the GPUs, a part of weights_gib_per_gpu (the pool is what the two leave, less the workspace)
- duration_s = last finish − first arrival (of the measured requests); throughputs divide completed requests /
  output tokens / input+output tokens of completed requests by it
- a completed request *meets the SLO* when TTFT ≤ slo.ttft_ms, TPOT ≤ slo.tpot_ms (if it has a TPOT), its max
  ITL ≤ slo.max_itl_ms (if it has one) and E2EL ≤ slo.e2el_ms, for each bound given; rejected requests never
  meet it
- slo_attainment = measured requests meeting the SLO / measured requests (rejected included)
- request_goodput = requests meeting the SLO / duration_s
  (both without a value, NaN — null in summary.json — where neither the experiment nor a request class sets an
  SLO: there is nothing to attain, as vLLM's benchmark reports goodput only when given one)
- KV: peak_kv_usage = most blocks in use at once / blocks in the pool (worst replica);
  mean_kv_usage = time average of KV tokens resident / token capacity, over duration_s and all replicas;
  kv_num_blocks / kv_capacity_tokens: one KV pool, a replica's or under attention DP one rank's (the decode pool's
  when disaggregated)
- queueing: queue = first scheduled − arrival (the prefill queue when disaggregated); disaggregated only:
  kv_transfer = KV reached the decode pool − first token (link queue + transfer), decode_queue = decode replica
  took it − KV arrived; mean and p99 of each, over completed requests (these keys appear only in
  disaggregated runs)
- KV breakdown (time averages over each replica's active span — first work to last — pooled over replicas, as
  fractions of the pool): kv_real_frac (slots holding KV), kv_internal_frac (claimed but empty: last-block tails,
  unused slab reservations), kv_external_frac (free slots outside the largest hole of a contiguous pool),
  kv_cached_frac (evictable prefix-cache blocks), kv_free_frac; kv_waste_frac = (internal + external) / (real +
  internal + external), the share of the memory taken by sequences that holds no KV (PagedAttention's measure)
- mean_running = time average of running sequences per replica over duration_s; peak_running the most at once
- prefix_cache_hit_rate = prompt tokens found cached / (those + prompt tokens computed); copied_tokens = KV tokens
  copied when contiguous slabs were moved (``reserve: grow``)
- per class (``workload.classes``): ``<class>.<metric>`` for completed, rejections, SLO attainment (against the
  class's own SLO when it has one, which also counts in the overall attainment), goodput, output tokens/s and
  mean/p99 TTFT, TPOT, E2EL and p99 of the longest gaps; rates divide by the whole run's duration_s
- gpu_hours = GPUs holding the model × time from 0 to the last request's end / 3600 (with an autoscaler: the GPUs
  of the provisioned replicas — starting, ready or draining — integrated over that time)
- num_gpus = Σ replicas × GPUs per replica × the part of a GPU each is: g/7 on a MIG slice of g compute slices
  (``cluster.mig``; 7 replicas on 1g slices use 1 GPU), else 1; an integer when whole, else a float; ``mig``: each
  pool's MIG profile in pool order (``full``: whole GPUs), only when one has a profile
- autoscaling only (``cluster.autoscaler``; these keys appear only then): mean_replicas (ready replicas, time
  average over 0 … end), peak_replicas, scale_ups (replicas started), scale_downs (cancelled or drained),
  cold_start_requests (requests first scheduled on a replica after it came up by scaling), slo_attainment_while_scaling
  (of the measured requests that arrived while a started replica was not ready yet; NaN when none did); mean_running
  and mean_kv_usage then average over the replicas' powered time instead of all replicas × duration_s
- faults only (when a crash sent requests again; these keys appear only then): retried_requests (of all
  requests), mean/p99_ttft_retried_ms (over the measured ones that completed; TTFT from their first sending);
  replica_crashes (with faults or mtbf_h configured; added by ``simulator.run``)
- LoRA only (``lora``; added by ``simulator.run``): lora_gib_per_gpu (the max_loras GPU slots, reserved before the
  KV pool), adapter_loads (adapters loaded into a GPU slot), adapter_storage_reads (of them, first read from
  storage), adapter_load_time_s (seconds the loads added to iterations, summed over replicas)
- KV tiers only (``kv_cache.offload``; added by ``simulator.run``; simulator.kv.tiers), per tier medium m:
  kv_<m>_hit_rate (prompt tokens loaded from it / prompt tokens found cached or computed; prefix_cache_hit_rate
  counts them too), kv_<m>_read_gib and kv_<m>_written_gib (all GPUs), kv_<m>_dropped_writes (blocks its full
  write queue refused); kv_offload_load_s (seconds of loads) and kv_offload_stall_s (what they added to iterations)
- speculative decoding only (``scheduler.speculative``; added by ``simulator.run``), from every verification step of
  every sequence, n_A of them accepting A of the k drafts (A = 0 … k; as drawn, before a request's last step cuts
  its tokens to its output): mean_accepted_tokens = 1 + Σ_A A·n_A / Σ_A n_A, the tokens a step emits per
  sequence — the accepted drafts plus the verification's bonus token, vLLM's "mean acceptance length" and SGLang's
  "accept length" (an upper bound of k + 1); draft_acceptance_rate = accepted drafts / drafted tokens (vLLM's
  "draft acceptance rate", (mean_accepted_tokens − 1) / k); acceptance_rate_pos<i> (i = 1 … k) = steps accepting
  draft i / steps accepting drafts 1 … i−1, the conditional rate a_i of the configuration (vLLM's per-position
  rate is their running product)
- requests end completed, rejected (``num_rejected``: by a replica's limits, ``cluster.admission`` or a session
  whose earlier turn did not complete), failed (``num_failed``: faults) or cancelled (``num_cancelled``: their
  clients gave up, ``workload.cancel`` / ``workload.client_timeout_s``; reason ``client cancel``, ``client timeout``
  or, stopped after ``cancel.after_tokens`` N tokens, ``client stop``); the four add up to num_requests. A
  cancelled request's E2EL would be its cancellation: it is no latency sample, and it never meets the SLO;
  cancelled_output_tokens = output tokens generated for requests that were then cancelled (their replica
  drops them at the end of the iteration in progress, whose tokens count; a client stop's N exactly) — decode work
  done for nothing
- preemption: num_preemptions; preempted_time_s = Σ over requests of the time from each preemption to resuming
  (re-prefill done, or KV swapped back in); prefill_tokens_computed (recomputation included); swapped_tokens
- iteration bounds only (``metrics.iteration_bounds``, which ``llmsim run`` sets; these keys appear only then;
  :mod:`simulator.results.bounds`, :mod:`simulator.cost.work`): each iteration i (engine step) of a replica takes
  t_i seconds, does F_i FLOPs and moves B_i bytes of HBM traffic on one GPU of its tensor-parallel group, and its time
  splits into compute_s (the seconds that scale with the FLOP rate: a FLOP rate 1 + ε times faster saves ε·compute_s),
  memory_s (likewise with HBM bandwidth; each kernel's smooth roofline maximum split by Euler's rule) and fixed_s =
  t_i − compute_s − memory_s (launch floors, per-work-item and host costs, communication, and time outside the
  model's forward pass); its bound is the largest of the three (ties: compute, memory, fixed). Per phase P —
  ``prefill`` (iterations of prompt chunks only), ``decode`` (of decode sequences only), ``mixed`` (both) — and
  ``all``: iter_P_iterations (engine steps), iter_P_busy_s = Σ t_i (GPU-busy seconds, summed over replicas),
  iter_P_compute_bound_frac / iter_P_memory_bound_frac / iter_P_fixed_bound_frac = Σ t_i over the iterations of that
  bound / Σ t_i (they sum to 1), iter_P_peak_flops_frac = Σ (F_i / peak FLOP/s) / Σ t_i (the time-weighted mean of
  achieved FLOP/s over the spec sheet's dense peak of the format the GEMMs compute in:
  :func:`simulator.cost.work.gemm_peak`), iter_P_peak_hbm_frac = Σ (B_i / peak HBM bytes/s) / Σ t_i; a phase
  without iterations has NaN shares and fractions
- energy (with the iteration bounds; :mod:`simulator.results.energy`; None on a GPU whose profile states no
  ``board_power_w``): a GPU draws P_idle when powered and P_idle + (P_board − P_idle)·a_i during iteration i, a_i =
  min(1, max(F_i / (peak FLOP/s · t_i), B_i / (peak HBM bytes/s · t_i))), on every GPU of the replica (TP × PP × DP);
  energy_j = ``energy.pue`` × (Σ over replicas of G·P_idle·T + Σ over iterations of G·(P_board − P_idle)·a_i·t_i),
  joules, T a replica's powered seconds (0 to the run's end; with an autoscaler, ready to off);
  energy_j_per_output_token = energy_j / output tokens of every completed request; mean_power_w_per_gpu = the GPUs'
  joules (PUE left out) / their powered seconds, watts; energy_usd = energy_j / 3.6e6 × ``energy.usd_per_kwh`` (with
  a price only)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.config.slo import MetricsConfig, SLOConfig
from simulator.results.histogram import LogHistogram

if TYPE_CHECKING:
    import pandas as pd

PERCENTILES = {"median": 50, "p90": 90, "p95": 95, "p99": 99, "p99.9": 99.9}


def _meets(slo: SLOConfig, latency: dict[str, np.ndarray]) -> np.ndarray:
    """Which requests keep every bound of ``slo`` (TPOT and max ITL only bind requests that have one)."""
    met = np.ones(latency["ttft_ms"].shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        for name in ("ttft_ms", "tpot_ms", "max_itl_ms", "e2el_ms"):
            bound, values = getattr(slo, name), latency[name]
            if bound is not None:
                met &= values <= bound if name in ("ttft_ms", "e2el_ms") else np.isnan(values) | (values <= bound)
    return met


def latency_columns(
    columns: dict[str, np.ndarray], slo: SLOConfig, class_slos: list[SLOConfig | None] | None = None
) -> dict[str, np.ndarray]:
    """``ttft_ms``, ``tpot_ms``, ``max_itl_ms``, ``e2el_ms`` and ``slo_met`` from arrival/first-token/finish times,
    ``max_itl_s`` and ``finished`` (bool); a request of class k is held to ``class_slos[k]`` when given, else to
    ``slo``. TPOT is a finished request's (its row's ``output_tokens`` are the tokens it generated); a cancelled one
    generated fewer than its row states, so its TPOT is NaN (its TTFT and time to its end stand)."""
    arrival, first, finish = columns["arrival_s"], columns["first_token_s"], columns["finish_s"]
    output = np.asarray(columns["output_tokens"], dtype=float)
    ttft, e2el = (first - arrival) * 1000, (finish - arrival) * 1000
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where((output > 1) & np.asarray(columns["finished"], dtype=bool), (e2el - ttft) / (output - 1),
                        np.nan)
    max_itl = columns["max_itl_s"] * 1000 if "max_itl_s" in columns else np.full(ttft.shape, np.nan)  # older tables
    latency = {"ttft_ms": ttft, "tpot_ms": tpot, "max_itl_ms": max_itl, "e2el_ms": e2el}
    met = np.asarray(columns["finished"], dtype=bool) & _meets(slo, latency)
    if class_slos and any(s is not None for s in class_slos):
        class_id = np.asarray(columns["class_id"])
        for k, class_slo in enumerate(class_slos):
            if class_slo is not None:
                members = class_id == k
                met[members] = columns["finished"][members] & _meets(
                    class_slo, {name: values[members] for name, values in latency.items()})
    return {**latency, "slo_met": met}


def add_latency_columns(
    requests: pd.DataFrame, slo: SLOConfig, class_slos: list[SLOConfig | None] | None = None
) -> pd.DataFrame:
    """The request table with the columns of :func:`latency_columns` added."""
    out = requests.copy()
    columns = {c: out[c].to_numpy() for c in out.columns}
    columns["finished"] = columns["status"] == "finished"
    for name, values in latency_columns(columns, slo, class_slos).items():
        out[name] = values
    return out


def _stats(name: str, values: np.ndarray) -> dict[str, float]:
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {f"{label}_{name}_ms": float("nan") for label in ("mean", "std", *PERCENTILES)}
    stats = {f"mean_{name}_ms": float(values.mean()), f"std_{name}_ms": float(values.std())}
    stats.update({f"{label}_{name}_ms": float(np.percentile(values, q)) for label, q in PERCENTILES.items()})
    return stats


MEMORY_PARTS = ("real", "internal", "external", "cached", "free")


def _memory_shares(breakdown_seconds: list[list[float]]) -> dict[str, float]:
    """Time-averaged fractions of the pool from ∫ MemoryBreakdown dt per replica."""
    totals = [sum(part) for part in zip(*breakdown_seconds, strict=True)] if breakdown_seconds else [0.0] * 5
    whole = sum(totals)
    shares = {f"kv_{name}_frac": (value / whole if whole else 0.0) for name, value in zip(MEMORY_PARTS, totals,
                                                                                          strict=True)}
    taken = totals[0] + totals[1] + totals[2]
    shares["kv_waste_frac"] = (totals[1] + totals[2]) / taken if taken else 0.0
    return shares


def _session_stats(columns: dict[str, np.ndarray], ttft_ms: np.ndarray, done: np.ndarray) -> dict[str, Any]:
    """Multi-turn workloads: the sessions, and the TTFT of first turns apart from later ones (whose prompts carry
    the conversation, served from the prefix cache where it still is); nothing for other workloads."""
    turn = columns["turn"]
    if not np.any(turn > 0):
        return {}
    stats: dict[str, Any] = {"sessions": int(np.unique(columns["session"]).size)}  # SESSION_METRICS
    for label, part in (("first_turn", turn == 0), ("later_turns", turn > 0)):
        values = ttft_ms[done & part]
        stats[f"mean_ttft_{label}_ms"] = float(values.mean()) if values.size else float("nan")
        stats[f"p99_ttft_{label}_ms"] = float(np.percentile(values, 99)) if values.size else float("nan")
    return stats


def _retry_stats(columns: dict[str, np.ndarray], ttft_ms: np.ndarray, done: np.ndarray) -> dict[str, Any]:
    """Faults: the requests sent again after a crash, and the TTFT of those that completed."""
    retried = np.asarray(columns["retries"]) > 0
    if not retried.any():
        return {}
    values = ttft_ms[done & retried]
    return {"retried_requests": int(retried.sum()),
            "mean_ttft_retried_ms": float(values.mean()) if values.size else float("nan"),
            "p99_ttft_retried_ms": float(np.percentile(values, 99)) if values.size else float("nan")}


@dataclass(frozen=True)
class RunTotals:
    """What a run counted beside its per-request table. Per replica: ``peak_kv_blocks``, ``kv_token_seconds`` (∫ KV
    tokens held dt), ``peak_running``, ``running_seconds`` (∫ running requests dt), ``kv_breakdown_seconds`` (∫ of
    each :class:`~simulator.kv.base.MemoryBreakdown` part dt) and ``kv_blocks_per_replica`` (pool sizes; default
    ``kv_num_blocks`` each). For the run: the KV pool's shape (``kv_num_blocks`` × ``kv_block_size`` tokens, of one
    GPU's plan), ``iterations``, ``num_gpus``, the prompt tokens computed, swapped, served from prefix caches, the KV
    tokens copied to make room, the output tokens of requests then cancelled, the trace rows skipped, and an
    autoscaled run's :class:`Scaling`."""

    kv_num_blocks: int
    kv_block_size: int
    peak_kv_blocks: list[int]
    kv_token_seconds: list[float]
    peak_running: list[int]
    iterations: int
    num_gpus: int | float  # GPUs' worth: g/7 of one per replica on a MIG slice
    prefill_tokens: int = 0
    swapped_tokens: int = 0
    running_seconds: list[float] | None = None
    kv_breakdown_seconds: list[list[float]] | None = None
    prefix_hit_tokens: int = 0
    copied_tokens: int = 0
    cancelled_output_tokens: int = 0
    trace_rows_skipped: int = 0
    kv_blocks_per_replica: list[int] | None = None
    scaling: Scaling | None = None


def summarize(
    columns: dict[str, np.ndarray], itl_s: LogHistogram, totals: RunTotals, slo: SLOConfig, *,
    class_names: list[str] | None = None, class_slos: list[SLOConfig | None] | None = None,
    metrics: MetricsConfig | None = None,
) -> dict[str, Any]:
    """The summary dict, from the request columns (see ``recorder.SUMMARY_COLUMNS``), the ITL histogram (s) and the
    run's :class:`RunTotals`, against the run's SLO (and each request class's); ``metrics`` says which requests are
    measured (:func:`measured_mask`)."""
    latency = latency_columns(columns, slo, class_slos)
    judged = any(bounds is not None and bounds.bounds() for bounds in [slo, *(class_slos or [])])  # any SLO set
    finished = np.asarray(columns["finished"], dtype=bool)
    failed = np.asarray(columns["failed"], dtype=bool)
    cancelled = np.asarray(columns["cancelled"], dtype=bool)
    measured = measured_mask(columns["arrival_s"], metrics)
    done = finished & measured
    num_requests = int(finished.size)
    num_measured = int(measured.sum())
    duration = float(np.nanmax(columns["finish_s"][done]) - columns["arrival_s"][measured].min()) if done.any() \
        else 0.0

    def per_s(x: float) -> float:
        return x / duration if duration > 0 else float("nan")

    met = int((latency["slo_met"] & measured).sum())
    output_tokens = float(columns["output_tokens"][done].sum())
    summary: dict[str, Any] = {
        "num_requests": num_requests,
        "completed": int(finished.sum()),
        "num_rejected": int((~finished & ~failed & ~cancelled).sum()),
        "num_failed": int(failed.sum()),
        "num_cancelled": int(cancelled.sum()),
        "measured_requests": num_measured,
        "duration_s": duration,
        **_backlog(columns),
        "request_throughput": per_s(int(done.sum())),
        "output_throughput": per_s(output_tokens),
        "total_token_throughput": per_s(float(columns["input_tokens"][done].sum()) + output_tokens),
        "total_input_tokens": int(columns["input_tokens"][done].sum()),
        "total_output_tokens": int(output_tokens),
    }
    for name in ("ttft", "tpot", "max_itl", "e2el"):
        summary.update(_stats(name, latency[f"{name}_ms"][done]))
    summary.update(_session_stats(columns, latency["ttft_ms"], done))
    summary.update(_retry_stats(columns, latency["ttft_ms"], done))
    summary["mean_itl_ms"] = itl_s.mean * 1000
    summary.update({f"{label}_itl_ms": itl_s.percentile(q) * 1000 for label, q in PERCENTILES.items()})
    capacity = totals.kv_num_blocks * totals.kv_block_size
    blocks = totals.kv_blocks_per_replica or [totals.kv_num_blocks] * len(totals.peak_kv_blocks)
    end = _run_end(columns)
    if totals.scaling is None:  # every replica powered for duration_s
        replica_seconds = len(totals.peak_running) * duration
        token_seconds = sum(blocks) * totals.kv_block_size * duration
        summary["gpu_hours"] = totals.num_gpus * end / 3600
    else:
        powered = replica_powered_seconds(columns, totals)
        replica_seconds = sum(powered)
        token_seconds = sum(n * seconds for n, seconds in zip(blocks, powered, strict=True)) * totals.kv_block_size
        summary.update(totals.scaling.summary(columns, latency["slo_met"] & measured, measured, end))
    queue = (columns["first_scheduled_s"] - columns["arrival_s"])[done] * 1000
    transfer = (columns["kv_arrived_s"] - columns["prefill_done_s"])[done] * 1000
    decode_queue = (columns["decode_admitted_s"] - columns["kv_arrived_s"])[done] * 1000
    disaggregated = bool(np.any(~np.isnan(columns["kv_arrived_s"])))
    for name, values in (("queue", queue), ("kv_transfer", transfer), ("decode_queue", decode_queue)):
        if name != "queue" and not disaggregated:
            continue  # only disaggregated runs have these
        values = values[~np.isnan(values)]
        summary[f"mean_{name}_ms"] = float(values.mean()) if values.size else float("nan")
        summary[f"p99_{name}_ms"] = float(np.percentile(values, 99)) if values.size else float("nan")
    summary.update({
        "slo_attainment": met / num_measured if num_measured and judged else float("nan"),
        "request_goodput": per_s(met) if judged else float("nan"),
        "num_preemptions": int(columns["preemptions"].sum()),
        "preempted_time_s": float(columns["preempted_s"].sum()),
        "prefill_tokens_computed": totals.prefill_tokens,
        "swapped_tokens": totals.swapped_tokens,
        "kv_num_blocks": totals.kv_num_blocks,
        "kv_capacity_tokens": capacity,
        "peak_kv_usage": max(peak / n for peak, n in zip(totals.peak_kv_blocks, blocks, strict=True)),
        "mean_kv_usage": sum(totals.kv_token_seconds) / token_seconds if token_seconds else 0.0,
        **_memory_shares(totals.kv_breakdown_seconds or []),
        "mean_running": sum(totals.running_seconds or [0.0]) / replica_seconds if replica_seconds else 0.0,
        "peak_running": max(totals.peak_running),
        "prefix_cache_hit_rate": totals.prefix_hit_tokens / (totals.prefix_hit_tokens + totals.prefill_tokens)
        if totals.prefill_tokens else 0.0,
        "copied_tokens": totals.copied_tokens,
        "cancelled_output_tokens": totals.cancelled_output_tokens,
        "trace_rows_skipped": totals.trace_rows_skipped,
        "num_iterations": totals.iterations,
        "num_gpus": totals.num_gpus,
    })
    for k, name in enumerate(class_names or []):
        summary.update(_class_summary(name, (np.asarray(columns["class_id"]) == k) & measured, columns, latency,
                                      duration))
    return summary


def _run_end(columns: dict[str, np.ndarray]) -> float:
    """When the run's last request ended (finished, rejected or failed), from time 0."""
    ends = np.concatenate([columns["finish_s"], columns["arrival_s"]])
    ends = ends[np.isfinite(ends)]
    return float(ends.max()) if ends.size else 0.0


def replica_powered_seconds(columns: dict[str, np.ndarray], totals: RunTotals) -> list[float]:
    """Per replica, its powered seconds within [0, the last request's end]: all of it, or with an autoscaler from
    each ``ready`` to its ``off`` (:meth:`Scaling.powered_seconds`; ``gpu_hours`` also counts cold starts)."""
    end, replicas = _run_end(columns), len(totals.peak_kv_blocks)
    return [end] * replicas if totals.scaling is None else totals.scaling.powered_seconds(replicas, end)


class Scaling:
    """An autoscaled run's events ``(time_s, event, replica, ready, provisioned)`` (see
    :mod:`simulator.cluster.autoscaler`; the first, ``init``, gives the starting count) and its GPUs per replica."""

    def __init__(self, events: list[tuple], gpus_per_replica: int) -> None:
        self.events, self.gpus_per_replica = events, gpus_per_replica
        self.initial = events[0][3]

    def _steps(self, end: float, column: int) -> float:
        """∫ over [0, end] of the count in ``column`` (3: ready, 4: provisioned), a step function."""
        total, last_t, count = 0.0, 0.0, 0
        for event in self.events:
            t = min(event[0], end)
            total += count * (t - last_t)
            last_t, count = t, event[column]
        return total + count * max(end - last_t, 0.0)

    def powered_seconds(self, num_replicas: int, end: float) -> list[float]:
        """Per replica, the time within [0, end] from each ``ready`` (or 0, for the first ``initial``) to its
        ``off``."""
        since = [0.0 if r < self.initial else None for r in range(num_replicas)]
        seconds = [0.0] * num_replicas
        for t, event, replica, _, _ in self.events:
            if event == "ready":
                since[replica] = t
            elif event == "off" and since[replica] is not None:
                seconds[replica] += min(t, end) - min(since[replica], end)
                since[replica] = None
        for r, start in enumerate(since):
            if start is not None:
                seconds[r] += max(end - start, 0.0)
        return seconds

    def summary(self, columns: dict[str, np.ndarray], met: np.ndarray, measured: np.ndarray,
                end: float) -> dict[str, Any]:
        """The autoscaling keys (AUTOSCALER_METRICS and gpu_hours) over [0, end]."""
        events = self.events
        cold = np.zeros(np.asarray(columns["arrival_s"]).size, dtype=bool)
        scheduled, replica = columns["first_scheduled_s"], columns["replica"]
        exposed = np.zeros_like(cold)  # arrived while a started replica was not ready
        arrival = columns["arrival_s"]
        open_ready: dict[int, float] = {}
        open_start: dict[int, float] = {}
        for t, event, index, _, _ in events:
            if event == "ready":
                open_ready[index] = t
            elif event == "off" and index in open_ready:
                start = open_ready.pop(index)
                cold |= (replica == index) & (scheduled >= start) & (scheduled < t)
            if event == "start":
                open_start[index] = t
            elif event in ("ready", "cancel") and index in open_start:
                exposed |= (arrival >= open_start.pop(index)) & (arrival < t)
        for index, start in open_ready.items():
            cold |= (replica == index) & (scheduled >= start)
        for start in open_start.values():
            exposed |= arrival >= start
        exposed &= measured
        return {
            "gpu_hours": self.gpus_per_replica * self._steps(end, 4) / 3600,
            "mean_replicas": self._steps(end, 3) / end if end else float(self.initial),
            "peak_replicas": max(event[3] for event in events),
            "scale_ups": sum(event[1] == "start" for event in events),
            "scale_downs": sum(event[1] in ("cancel", "drain") for event in events),
            "cold_start_requests": int(cold.sum()),
            "slo_attainment_while_scaling": float(met[exposed].mean()) if exposed.any() else float("nan"),
        }


MEMORY_PLAN_METRICS = ("weights_gib_per_gpu", "workspace_gib_per_gpu", "kv_pool_gib_per_gpu")  # by simulator.run
DRAFT_MEMORY_METRICS = ("draft_gib_per_gpu",)  # by simulator.run with a draft held on the GPUs (head or model)
FAULT_METRICS = ("retried_requests", "mean_ttft_retried_ms", "p99_ttft_retried_ms", "replica_crashes")
MIG_METRICS = ("mig",)  # by simulator.run on MIG slices: each pool's profile, in pool order ("full": whole GPUs)
LORA_METRICS = ("lora_gib_per_gpu", "adapter_loads", "adapter_storage_reads", "adapter_load_time_s")
# by simulator.run when speculating, with acceptance_rate_pos1 ... acceptance_rate_pos<k> (SPECULATIVE_POSITION)
SPECULATIVE_METRICS = ("mean_accepted_tokens", "draft_acceptance_rate")
SPECULATIVE_POSITION = "acceptance_rate_pos"
AUTOSCALER_METRICS = ("mean_replicas", "peak_replicas", "scale_ups", "scale_downs", "cold_start_requests",
                      "slo_attainment_while_scaling")


def speculative_summary(accepted_counts: np.ndarray) -> dict[str, float]:
    """``mean_accepted_tokens``, ``draft_acceptance_rate`` and ``acceptance_rate_pos<i>`` (module docstring) from the
    verification steps by accepted drafts, ``accepted_counts[A]`` = n_A for A = 0 … k (NaN without a step)."""
    counts = np.asarray(accepted_counts, dtype=float)
    k = len(counts) - 1
    at_least = counts[::-1].cumsum()[::-1]  # at_least[i] = steps accepting drafts 1 … i (i = 0: every step)
    steps, accepted = at_least[0], float(at_least[1:].sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        positions = at_least[1:] / at_least[:-1]
    return {"mean_accepted_tokens": 1 + accepted / steps if steps else math.nan,
            "draft_acceptance_rate": accepted / (k * steps) if steps else math.nan,
            **{f"{SPECULATIVE_POSITION}{i + 1}": float(rate) for i, rate in enumerate(positions)}}


def measured_mask(arrival_s: np.ndarray, metrics: MetricsConfig | None) -> np.ndarray:
    """True for the measured requests: all but the first ``floor(warmup_fraction · N)`` and the last
    ``floor(cooldown_fraction · N)`` of the N requests in arrival order (ties in the order given)."""
    arrival = np.asarray(arrival_s, dtype=float)
    keep = np.ones(arrival.size, dtype=bool)
    if metrics is None or not (metrics.warmup_fraction or metrics.cooldown_fraction):
        return keep
    order = np.argsort(arrival, kind="stable")
    head = int(np.floor(metrics.warmup_fraction * arrival.size))
    tail = int(np.floor(metrics.cooldown_fraction * arrival.size))
    keep[order[:head]] = False
    keep[order[arrival.size - tail:]] = False
    return keep


DISAGGREGATED_METRICS = ("mean_kv_transfer_ms", "p99_kv_transfer_ms", "mean_decode_queue_ms", "p99_decode_queue_ms")
SESSION_METRICS = ("sessions", "mean_ttft_first_turn_ms", "p99_ttft_first_turn_ms", "mean_ttft_later_turns_ms",
                   "p99_ttft_later_turns_ms")
CLASS_METRICS = (
    "num_requests", "completed", "num_rejected", "slo_attainment", "request_goodput", "output_throughput",
    "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "p99_max_itl_ms", "mean_e2el_ms", "p99_e2el_ms",
)


def _class_summary(
    name: str, members: np.ndarray, columns: dict[str, np.ndarray], latency: dict[str, np.ndarray], duration: float
) -> dict[str, float]:
    """``<class>.<metric>`` for each of CLASS_METRICS, over the class's requests (same duration as the whole)."""
    done = members & np.asarray(columns["finished"], dtype=bool)
    rejected = members & ~np.asarray(columns["finished"], dtype=bool) & ~np.asarray(columns["failed"], dtype=bool) & (
        ~np.asarray(columns["cancelled"], dtype=bool))
    count = int(members.sum())

    def rate(x: float) -> float:
        return x / duration if duration > 0 else float("nan")

    def pick(values: np.ndarray, reduce) -> float:
        values = values[done]
        values = values[~np.isnan(values)]
        return float(reduce(values)) if values.size else float("nan")

    met = int((latency["slo_met"] & members).sum())
    values = {
        "num_requests": count, "completed": int(done.sum()), "num_rejected": int(rejected.sum()),
        "slo_attainment": met / count if count else float("nan"), "request_goodput": rate(met),
        "output_throughput": rate(float(columns["output_tokens"][done].sum())),
        "mean_ttft_ms": pick(latency["ttft_ms"], np.mean), "p99_ttft_ms": pick(latency["ttft_ms"], _p99),
        "mean_tpot_ms": pick(latency["tpot_ms"], np.mean), "p99_tpot_ms": pick(latency["tpot_ms"], _p99),
        "p99_max_itl_ms": pick(latency["max_itl_ms"], _p99),
        "mean_e2el_ms": pick(latency["e2el_ms"], np.mean), "p99_e2el_ms": pick(latency["e2el_ms"], _p99),
    }
    return {f"{name}.{key}": value for key, value in values.items()}


def _backlog(columns: dict[str, np.ndarray]) -> dict[str, int]:
    """Requests arrived but not finished (queued or running) halfway through the arrivals and at the last arrival:
    about equal when the server keeps up, growing with the run when it does not (``backlog_end_of_arrivals`` ≈
    twice ``backlog_mid_arrivals``)."""
    arrival, finish = np.asarray(columns["arrival_s"], float), np.asarray(columns["finish_s"], float)
    if arrival.size == 0:
        return {"backlog_mid_arrivals": 0, "backlog_end_of_arrivals": 0}
    first, last = float(arrival.min()), float(arrival.max())
    done = np.where(np.isnan(finish), np.inf, finish)  # rejected requests never finish: they count as arrived only
    rejected = np.isnan(finish)

    def backlog(t: float) -> int:
        return int(((arrival <= t) & (done > t) & ~rejected).sum())

    return {"backlog_mid_arrivals": backlog((first + last) / 2), "backlog_end_of_arrivals": backlog(last)}


def _p99(values: np.ndarray) -> float:
    return float(np.percentile(values, 99))
