"""The engine against benchmarks/reference_loop.py: a separately written heapq loop of the same policy."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import simulator
from tests.helpers import REPO, experiment


def _reference_run():
    spec = importlib.util.spec_from_file_location("reference_loop", REPO / "benchmarks" / "reference_loop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference_run


@pytest.mark.parametrize("blocks", [60, 400, None])
def test_engine_matches_reference_loop(blocks):
    config = simulator.load(experiment(
        seed=4,
        cost_model={"kind": "roofline"},
        scheduler={"kind": "continuous", "max_num_seqs": 24, "max_model_len": 1024},
        kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": blocks},
        workload={
            "num_requests": 400, "arrival": {"kind": "poisson", "rate": 40.0},
            "input_tokens": {"kind": "lognormal", "mean": 300, "sigma": 0.8, "max": 1000},
            "output_tokens": {"kind": "lognormal", "mean": 100, "sigma": 1.0, "max": 500},
        },
    ))
    first_token, finish = _reference_run()(config)
    result = simulator.run(config)
    np.testing.assert_allclose(result.requests["first_token_s"], first_token, rtol=1e-9)
    np.testing.assert_allclose(result.requests["finish_s"], finish, rtol=1e-9)
    if blocks == 60:
        assert result.summary["num_preemptions"] > 0
