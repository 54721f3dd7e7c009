"""Scale benchmark: how fast and how lean the engine is on large runs.

Scenarios (Llama-3-8B on H100 SXM, continuous batching, paged KV, lengths lognormal-fitted to the Azure
conversation trace: input mean 1,155 / median 1,020 → σ = 0.50; output mean 211 / median 129 → σ = 0.99):

  a: one replica, 100,000 requests at 80% of its measured capacity
  b: 64 replicas behind round-robin routing, 1,000,000 requests at the same per-replica load, with the
     per-request table streamed to Parquet (as ``llmsim run --out``), so memory stays bounded

Capacity is measured first: the request throughput of one replica with every request queued at once.
Each measurement runs in a fresh subprocess so its peak RSS is its own.

    python benchmarks/bench_scale.py                 # a, b and the scaling table
    python benchmarks/bench_scale.py --quick         # a at 10k, b at 100k (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import simulator

LOAD = 0.8


def scenario(replicas: int, num_requests: int, rate_per_replica: float) -> dict:
    return {
        "name": f"scale-{replicas}x",
        "seed": 0,
        "model": "llama-3-8b",
        "hardware": "h100-sxm",
        "engine": "vllm",  # named, so that checkouts with another default engine run the same workload
        "cluster": {"replicas": replicas},
        "scheduler": {"kind": "continuous", "max_num_seqs": 256, "max_num_batched_tokens": 8192},
        "kv_cache": {"kind": "paged", "block_size": 16, "gpu_memory_utilization": 0.9},
        "workload": {
            "num_requests": num_requests,
            "arrival": {"kind": "poisson", "rate": rate_per_replica * replicas},
            "input_tokens": {"kind": "lognormal", "mean": 1155, "sigma": 0.50, "max": 6144},
            "output_tokens": {"kind": "lognormal", "mean": 211, "sigma": 0.99, "max": 2048},
        },
    }


def capacity() -> float:
    """Requests/s one replica sustains with a full queue."""
    config = scenario(1, 4000, 1e6)
    return simulator.run(simulator.load(config)).summary["request_throughput"]


def measure_in_process(replicas: int, num_requests: int, rate: float, stream: bool) -> dict:
    config = simulator.load(scenario(replicas, num_requests, rate))
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        summary = simulator.run(config, requests_path=Path(folder) / "requests.parquet" if stream else None).summary
        wall = time.perf_counter() - start
    return {
        "replicas": replicas, "requests": num_requests, "wall_s": wall,
        "requests_per_s": num_requests / wall, "iterations_per_s": summary["num_iterations"] / wall,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "completed": summary["completed"], "p99_ttft_ms": summary["p99_ttft_ms"],
    }


def measure(replicas: int, num_requests: int, rate: float, stream: bool = True) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--one", json.dumps([replicas, num_requests, rate, stream])],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout)


def show(label: str, m: dict) -> None:
    print(f"{label:<34}{m['wall_s']:>9.1f} s {m['requests_per_s']:>11,.0f} req/s {m['iterations_per_s']:>11,.0f} it/s"
          f" {m['peak_rss_mib']:>8,.0f} MiB   p99 TTFT {m['p99_ttft_ms']:,.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description="llmsim scale benchmark")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_in_process(*json.loads(args.one))))
        return
    rate = LOAD * capacity()
    print(f"one replica's capacity: {rate / LOAD:.2f} req/s; running at {LOAD:.0%}: {rate:.2f} req/s per replica\n")
    a_requests, b_requests = (10_000, 100_000) if args.quick else (100_000, 1_000_000)
    show(f"(a) 1 replica, {a_requests:,} requests", measure(1, a_requests, rate, stream=False))
    b = measure(64, b_requests, rate)
    show(f"(b) 64 replicas, {b_requests:,} requests", b)
    if args.quick:
        return
    print("\nscaling, 64 replicas:")
    for n in (10_000, 100_000):
        show(f"  {n:>9,} requests", measure(64, n, rate))
    show(f"  {b_requests:>9,} requests", b)


if __name__ == "__main__":
    main()
