"""llmsim: a discrete-event simulator of LLM serving clusters.

>>> import simulator
>>> result = simulator.run(simulator.load("experiments/quickstart.yaml", workload__num_requests=200))
>>> result.summary["p99_ttft_ms"], result.requests.head()
"""

from simulator.api import Result, load, run
from simulator.errors import ConfigError, LLMSimError

__all__ = ["ConfigError", "LLMSimError", "Result", "load", "run"]
__version__ = "0.1.0"
