"""Start-up benchmark: the wall time of ``llmsim run`` on a one-request experiment (median of N fresh processes),
the floor under it (a bare interpreter, and one that imports the libraries every run needs: numpy, pydantic,
PyYAML, SimPy), and which heavy libraries the run imports (pandas and pyarrow load only to write files or build
tables).

Bytecode is cached as an installed package has it: the processes run without ``PYTHONDONTWRITEBYTECODE`` (which
would compile every module on every start, about 0.15 s here) after one run that writes the cache.

    python benchmarks/bench_startup.py        # the target is 0.3 s on an idle machine
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

RUN = [sys.executable, "-m", "simulator.cli", "run", "--set", "workload.num_requests=1"]
FLOORS = {"bare interpreter": [sys.executable, "-c", "pass"],
          "numpy, pydantic, yaml, simpy": [sys.executable, "-c", "import numpy, pydantic, yaml, simpy"]}
PROBE = ("import sys; from simulator.cli import main; main(['run', '--set', 'workload.num_requests=1']); "
         "print('heavy:', ' '.join(m for m in ('pandas', 'pyarrow', 'matplotlib', 'ray') if m in sys.modules))")
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def median_seconds(command: list[str], repeats: int) -> tuple[float, float]:
    """(median, min) wall seconds of ``repeats`` fresh processes."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, env=ENV)
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def main(repeats: int = 7) -> None:
    subprocess.run(RUN, check=True, capture_output=True, env=ENV)  # writes the bytecode cache
    median, fastest = median_seconds(RUN, repeats)
    loaded = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True, env=ENV)
    heavy = next(line for line in loaded.stdout.splitlines() if line.startswith("heavy:"))[len("heavy:"):].strip()
    print(f"llmsim run, one request: median {median:.3f} s (min {fastest:.3f}, {repeats} runs); heavy modules "
          f"imported: {heavy or 'none'}")
    for name, command in FLOORS.items():
        median, fastest = median_seconds(command, repeats)
        print(f"  floor, {name}: median {median:.3f} s (min {fastest:.3f})")


if __name__ == "__main__":
    main()
