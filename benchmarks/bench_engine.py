"""Engine speed on the quickstart setup: simulated requests per wall-second and peak memory.

    python benchmarks/bench_engine.py [--requests 20000] [--repeat 3]

Speed is measured here, never in the test suite. Machines are shared and noisy: compare ratios, take the best of a
few repeats.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import simulator


def measure(num_requests: int, fast_forward: bool) -> tuple[float, dict]:
    config = simulator.load(None, workload__num_requests=num_requests)
    start = time.perf_counter()
    result = simulator.run(config, fast_forward=fast_forward)
    return time.perf_counter() - start, result.summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    best = min(measure(args.requests, True)[0] for _ in range(args.repeat))
    stepped, summary = measure(args.requests, False)
    tracemalloc.start()
    measure(args.requests, True)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    print(f"quickstart, {args.requests:,} requests, {summary['num_iterations']:,} iterations")
    print(f"  closed-form decode runs: {best:.2f} s wall, {args.requests / best:,.0f} requests/s, "
          f"{summary['num_iterations'] / best:,.0f} iterations/s")
    print(f"  one iteration at a time: {stepped:.2f} s wall ({stepped / best:.1f}x slower)")
    print(f"  peak traced Python memory: {peak / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
