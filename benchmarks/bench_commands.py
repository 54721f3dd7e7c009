"""The longer commands' wall times as ratios to a unit measured on the same machine, in the same minute.

A wall time in seconds says more about the machine than about llmsim (identical runs on a shared 2-core VM vary by
±25%, and machines by 2×); its ratio to a fixed piece of work run beside it does not move with them. The unit here is
scenario (a) of ``bench_scale.py`` at 20,000 requests (one replica, the engine's own loop), run before and after the
commands (the mean of the two). Each command runs as a subprocess, as a user runs it; the ``validate`` rows need
``../shared/data`` and are left out without it.

    python benchmarks/bench_commands.py            # prints: command, seconds, ratio to the unit
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(HERE))
from bench_scale import LOAD, capacity, scenario  # noqa: E402  (a sibling script, not a package)

UNIT_REQUESTS = 20_000
COMMANDS = [
    ("llmsim run (the built-in default experiment)", ["llmsim", "run"], False),
    ("llmsim regress --jobs 2", ["llmsim", "regress", "--jobs", "2"], False),
    ("llmsim validate --runs silicon_h100.csv --jobs 2",
     ["llmsim", "validate", "--runs", str(SHARED / "silicon" / "silicon_h100.csv"), "--model-configs",
      str(SHARED / "model_configs"), "--jobs", "2", "--quiet"], True),
    ("llmsim validate --runs silicon_b200.csv --jobs 2",
     ["llmsim", "validate", "--runs", str(SHARED / "silicon" / "silicon_b200.csv"), "--model-configs",
      str(SHARED / "model_configs"), "--jobs", "2", "--quiet"], True),
]


def unit_seconds() -> float:
    """Seconds of the unit: scenario (a) at :data:`UNIT_REQUESTS` requests, simulated in this process."""
    import simulator

    config = simulator.load(scenario(1, UNIT_REQUESTS, LOAD * capacity()))
    start = time.perf_counter()
    simulator.run(config)
    return time.perf_counter() - start


def main() -> None:
    before = unit_seconds()
    rows = []
    for label, command, needs_shared in COMMANDS:
        if needs_shared and not SHARED.is_dir():
            print(f"{label}: left out (../shared/data absent)")
            continue
        start = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows.append((label, time.perf_counter() - start))
    unit = (before + unit_seconds()) / 2
    print(f"unit: bench_scale.py scenario (a) at {UNIT_REQUESTS:,} requests, {unit:.2f} s here")
    for label, seconds in rows:
        print(f"{label}: {seconds:.1f} s, {seconds / unit:.1f}× the unit")


if __name__ == "__main__":
    main()
