"""llmsim: a discrete-event simulator of LLM serving clusters.

>>> import simulator
>>> result = simulator.run(simulator.load("experiments/quickstart.yaml", workload__num_requests=200))
>>> result.summary["p99_ttft_ms"], result.requests.head()
>>> table = simulator.sweep("experiments/quickstart.yaml", {"workload.arrival.rate": [4, 8, 12]}, jobs=2)
"""

from simulator.api import Result, __version__, load, run
from simulator.errors import ConfigError, LLMSimError
from simulator.studies.capacity import capacity_over_seeds, find_capacity
from simulator.studies.sweep import sweep

__all__ = [
    "ConfigError", "LLMSimError", "Result", "__version__", "capacity_over_seeds", "find_capacity", "load", "run",
    "sweep",
]
