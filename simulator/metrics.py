"""Every metric, computed from the per-request table (one row per request) and the recorded inter-token gaps.

Definitions (names follow vLLM's benchmark output; times in ms unless the name says otherwise):

- TTFT  = first_token_s − arrival_s  (arrival = when the client sent it, so network latency counts)
- E2EL  = finish_s − arrival_s
- TPOT  = (E2EL − TTFT) / (output_tokens − 1), for requests with more than one output token
- ITL   = every gap between consecutive output tokens of a request, pooled over all requests
- percentiles use linear interpolation (``numpy.percentile``); ``median`` is p50
- duration_s = last finish − first arrival; throughputs divide completed requests / output tokens / input+output
  tokens of completed requests by it
- a completed request *meets the SLO* when TTFT ≤ slo.ttft_ms, TPOT ≤ slo.tpot_ms (if it has a TPOT) and
  E2EL ≤ slo.e2e_ms, for each bound given; rejected requests never meet it
- slo_attainment = requests meeting the SLO / all requests (rejected included)
- request_goodput = requests meeting the SLO / duration_s
- KV: peak_kv_usage = most blocks in use at once / blocks in the pool (worst replica);
  mean_kv_usage = time average of KV tokens resident / token capacity, over duration_s and all replicas
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.config.schema import SLOConfig

PERCENTILES = {"median": 50, "p90": 90, "p95": 95, "p99": 99}


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """``numpy.percentile(numpy.repeat(values, weights), q)`` without materialising the repetition."""
    values, weights = np.asarray(values, dtype=float), np.asarray(weights, dtype=np.int64)
    keep = weights > 0
    values, weights = values[keep], weights[keep]
    if values.size == 0:
        return float("nan")
    order = np.argsort(values, kind="stable")
    values, cumulative = values[order], np.cumsum(weights[order])
    position = q / 100 * (cumulative[-1] - 1)
    lower = int(np.floor(position))
    upper = min(lower + 1, int(cumulative[-1]) - 1)
    lo_value = values[np.searchsorted(cumulative, lower, side="right")]
    hi_value = values[np.searchsorted(cumulative, upper, side="right")]
    return float(lo_value + (position - lower) * (hi_value - lo_value))


def add_latency_columns(requests: pd.DataFrame, slo: SLOConfig) -> pd.DataFrame:
    """The request table with ``ttft_ms``, ``tpot_ms``, ``e2el_ms`` and ``slo_met`` added."""
    out = requests.copy()
    out["ttft_ms"] = (out["first_token_s"] - out["arrival_s"]) * 1000
    out["e2el_ms"] = (out["finish_s"] - out["arrival_s"]) * 1000
    decode_tokens = (out["output_tokens"] - 1).where(out["output_tokens"] > 1)
    out["tpot_ms"] = (out["e2el_ms"] - out["ttft_ms"]) / decode_tokens
    met = out["status"] == "finished"
    if slo.ttft_ms is not None:
        met &= out["ttft_ms"] <= slo.ttft_ms
    if slo.tpot_ms is not None:
        met &= out["tpot_ms"].isna() | (out["tpot_ms"] <= slo.tpot_ms)
    if slo.e2e_ms is not None:
        met &= out["e2el_ms"] <= slo.e2e_ms
    out["slo_met"] = met
    return out


def _stats(name: str, values: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float]:
    if weights is None:
        values = values[~np.isnan(values)]
        weights = np.ones(len(values), dtype=np.int64)
    total = weights.sum()
    stats = {f"mean_{name}_ms": float((values * weights).sum() / total) if total else float("nan")}
    for label, q in PERCENTILES.items():
        stats[f"{label}_{name}_ms"] = weighted_percentile(values, weights, q)
    return stats


def summarize(
    requests: pd.DataFrame, itl_values_s: np.ndarray, itl_weights: np.ndarray, *, kv_token_seconds: list[float],
    peak_kv_blocks: list[int], kv_num_blocks: int, kv_block_size: int, peak_running: list[int], iterations: int,
    num_gpus: int,
) -> dict[str, float]:
    """The summary dict. ``requests`` must carry the columns of :func:`add_latency_columns`."""
    done = requests[requests["status"] == "finished"]
    num_requests = len(requests)
    duration = float(requests["finish_s"].max() - requests["arrival_s"].min()) if len(done) else 0.0
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: float("nan"))
    met = int(requests["slo_met"].sum())
    summary: dict[str, float] = {
        "num_requests": num_requests,
        "completed": len(done),
        "num_rejected": int((requests["status"] == "rejected").sum()),
        "duration_s": duration,
        "request_throughput": per_s(len(done)),
        "output_throughput": per_s(float(done["output_tokens"].sum())),
        "total_token_throughput": per_s(float(done["input_tokens"].sum() + done["output_tokens"].sum())),
    }
    for name in ("ttft", "tpot", "e2el"):
        summary.update(_stats(name, done[f"{name}_ms"].to_numpy(dtype=float)))
    summary.update(_stats("itl", np.asarray(itl_values_s, dtype=float) * 1000, np.asarray(itl_weights)))
    capacity = kv_num_blocks * kv_block_size
    summary.update({
        "slo_attainment": met / num_requests if num_requests else float("nan"),
        "request_goodput": per_s(met),
        "num_preemptions": int(requests["preemptions"].sum()),
        "kv_num_blocks": kv_num_blocks,
        "kv_capacity_tokens": capacity,
        "peak_kv_usage": max(peak_kv_blocks) / kv_num_blocks,
        "mean_kv_usage": sum(kv_token_seconds) / (capacity * len(kv_token_seconds) * duration) if duration else 0.0,
        "peak_running": max(peak_running),
        "num_iterations": iterations,
        "num_gpus": num_gpus,
    })
    return summary
