"""Instructions per simulated request, counted by valgrind (callgrind): a speed measure that noise cannot move.

Wall times on a shared VM vary by ±25% between identical runs, which hides the 1–10% effects of most changes.
Callgrind counts the CPU instructions a run executes, the same to about 0.01% from run to run whatever else the
machine does. This runs scenario (b) of ``bench_scale.py`` (round-robin replicas at 80% of one replica's capacity;
4 replicas and 3,000 requests by default, so that each replica spends most of the run in steady state, as in the
million-request run) with N requests and with one request, and reports (instructions(N) − instructions(1)) / (N − 1):
the cost of a request without the start-up (imports, workload generation). With ``--against DIR`` it does the same for
another checkout (say ``git worktree add ../main-base main``) and prints the ratio.

    python benchmarks/count_instructions.py                       # about 2 minutes
    python benchmarks/count_instructions.py --against ../main-base  # A/B, both checkouts in parallel

BLAS and OpenMP thread pools are pinned to one thread: their idle spinning would otherwise be counted too.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_scale import LOAD, capacity  # noqa: E402  (a sibling script, not a package)

RUN_ONE = """
import sys
sys.path.insert(0, {benchmarks!r})
import simulator
from bench_scale import scenario
simulator.run(simulator.load(scenario({replicas}, {requests}, {rate})))
"""


def instructions(checkout: Path, replicas: int, requests: int, rate: float) -> int:
    """Instructions callgrind counts for one simulation run in ``checkout`` at ``rate`` requests/s per replica
    (start-up included)."""
    code = RUN_ONE.format(benchmarks=str(HERE), replicas=replicas, requests=requests, rate=rate)
    env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", code],
        cwd=checkout, env=env, capture_output=True, text=True, check=True,
    )
    match = re.search(r"Collected : (\d+)", out.stderr)
    if match is None:
        raise SystemExit(f"valgrind printed no instruction count:\n{out.stderr[-2000:]}")
    return int(match.group(1))


def per_request(checkout: Path, replicas: int, requests: int, rate: float) -> float:
    with ThreadPoolExecutor(2) as pool:
        many, one = pool.map(lambda n: instructions(checkout, replicas, n, rate), (requests, 1))
    return (many - one) / (requests - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    rate = LOAD * capacity()  # measured natively, once, so both checkouts run the same workload
    ours = per_request(HERE.parent, args.replicas, args.requests, rate)
    print(f"{HERE.parent}: {ours:,.0f} instructions per request ({args.replicas} replicas, {args.requests:,} requests)")
    if args.against:
        theirs = per_request(args.against.resolve(), args.replicas, args.requests, rate)
        print(f"{args.against}: {theirs:,.0f} instructions per request")
        print(f"ratio: {ours / theirs:.3f}")


if __name__ == "__main__":
    main()
