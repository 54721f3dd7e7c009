"""Studies built from many runs: parameter sweeps, GuideLLM-style rate sweeps, capacity search, deployment plans,
policy comparisons and their regression suite."""
