"""Start-up benchmark: the wall time of ``llmsim run`` on a one-request experiment (median of N fresh processes),
and which heavy libraries the run imports (pandas and pyarrow load only to write files or build tables).

    python benchmarks/bench_startup.py        # the target is 0.3 s on an idle machine
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

RUN = [sys.executable, "-m", "simulator.cli", "run", "--set", "workload.num_requests=1"]
PROBE = ("import sys; from simulator.cli import main; main(['run', '--set', 'workload.num_requests=1']); "
         "print('heavy:', ' '.join(m for m in ('pandas', 'pyarrow', 'matplotlib', 'ray') if m in sys.modules))")


def main(repeats: int = 7) -> None:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(RUN, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    loaded = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True)
    heavy = next(line for line in loaded.stdout.splitlines() if line.startswith("heavy:"))[len("heavy:"):].strip()
    print(f"llmsim run, one request: median {statistics.median(times):.3f} s (min {min(times):.3f}, "
          f"{repeats} runs); heavy modules imported: {heavy or 'none'}")


if __name__ == "__main__":
    main()
