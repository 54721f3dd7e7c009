"""Studies built from many runs: parameter sweeps, GuideLLM-style rate sweeps, capacity search, deployment plans
and the engine commands that launch them, policy comparisons and their regression suite."""
