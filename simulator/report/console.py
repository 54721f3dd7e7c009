"""The readable summary printed by ``llmsim run``."""

from __future__ import annotations

import math
from typing import Any


def _fmt(value: float, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def format_summary(name: str, summary: dict[str, Any]) -> str:
    s = summary
    lines = [
        f"== {name} ==",
        f"requests: {s['completed']:,} completed, {s['num_rejected']:,} rejected, of {s['num_requests']:,}"
        f"   duration {_fmt(s['duration_s'], 2)} s   GPUs {s['num_gpus']}",
        "",
        f"{'latency (ms)':<14}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}",
    ]
    for label, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2el")):
        row = [s[f"mean_{key}_ms"], s[f"median_{key}_ms"], s[f"p90_{key}_ms"], s[f"p99_{key}_ms"]]
        lines.append(f"{label:<14}" + "".join(f"{_fmt(v, 2):>10}" for v in row))
    lines += [
        "",
        f"throughput: {_fmt(s['request_throughput'], 2)} req/s, {_fmt(s['output_throughput'])} output tok/s, "
        f"{_fmt(s['total_token_throughput'])} total tok/s",
        f"KV cache:   {s['kv_capacity_tokens']:,} tokens ({s['kv_num_blocks']:,} blocks) per replica; "
        f"peak {_fmt(100 * s['peak_kv_usage'])}%, mean {_fmt(100 * s['mean_kv_usage'])}%; "
        f"peak batch {s['peak_running']}, mean {_fmt(s['mean_running'])}; preemptions {s['num_preemptions']:,}",
        f"KV memory:  real {_fmt(100 * s['kv_real_frac'])}%, internal {_fmt(100 * s['kv_internal_frac'])}%, "
        f"external {_fmt(100 * s['kv_external_frac'])}%, cached {_fmt(100 * s['kv_cached_frac'])}%, "
        f"free {_fmt(100 * s['kv_free_frac'])}%; waste {_fmt(100 * s['kv_waste_frac'])}% of the memory in use"
        + (f"; prefix-cache hit rate {_fmt(100 * s['prefix_cache_hit_rate'])}%" if s["prefix_cache_hit_rate"] else ""),
        f"SLO:        attainment {_fmt(100 * s['slo_attainment'])}%, goodput {_fmt(s['request_goodput'], 2)} req/s",
    ]
    return "\n".join(lines)
