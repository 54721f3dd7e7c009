"""Shared test helpers: small experiments built from dicts, and where the repository and ../shared/data are."""

from __future__ import annotations

import csv
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def experiment(**overrides) -> dict:
    """A small, fast experiment dict (linear costs unless overridden); keys are top-level sections."""
    base = {
        "name": "test",
        "seed": 1,
        "model": "llama-3-8b",
        "hardware": "h100-sxm",
        "scheduler": {"kind": "continuous", "max_num_seqs": 16, "max_model_len": 2048},
        "kv_cache": {"kind": "paged", "block_size": 16, "num_gpu_blocks": 256},
        "cost_model": {"kind": "linear", "prefill_ms_per_token": 0.1, "decode_ms_per_step": 5.0,
                       "decode_ms_per_seq": 0.2, "overhead_ms": 2.0},
        "workload": {
            "num_requests": 50,
            "arrival": {"kind": "poisson", "rate": 20.0},
            "input_tokens": {"kind": "uniform", "min": 10, "max": 300},
            "output_tokens": {"kind": "uniform", "min": 1, "max": 100},
        },
    }
    base.update(overrides)
    return base


def roofline_experiment(**overrides) -> dict:
    """Llama-3-8B on an H100 under vLLM's profile, roofline costs and iteration bounds recorded, chunked prefill, a
    mix of prompts: what the bounds and energy tests run."""
    config = experiment(
        cost_model={"kind": "roofline"}, engine="vllm", metrics={"iteration_bounds": True},
        kv_cache={"kind": "paged", "block_size": 16, "num_gpu_blocks": 4096},
        scheduler={"kind": "chunked", "max_num_seqs": 64, "max_num_batched_tokens": 1024, "max_model_len": 8192},
        workload={"num_requests": 120, "arrival": {"kind": "poisson", "rate": 15.0},
                  "input_tokens": {"kind": "uniform", "min": 16, "max": 3000},
                  "output_tokens": {"kind": "uniform", "min": 2, "max": 200}})
    config.update(overrides)
    return config


def assert_memory_state_integrates_to_breakdown(kv, seconds: float = 2.5) -> None:
    """The allocator's compact ``memory_state`` held for ``seconds`` integrates to its breakdown × ``seconds``
    (the engine integrates the state and maps it back with ``breakdown_integral``)."""
    state = [x * seconds for x in kv.memory_state()]
    integral = kv.breakdown_integral(state, seconds)
    expected = [part * seconds for part in kv.breakdown()]
    assert all(abs(a - b) <= 1e-9 * (1 + abs(b)) for a, b in zip(integral, expected, strict=True))


def same_summaries(first: object, second: object) -> bool:
    """Summaries (or mappings of them) equal to every digit, a metric without a value (NaN) equal to itself."""
    return json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


def write_csv(path: str | Path, header: list[str], rows: list[dict]) -> None:
    """``rows`` as a CSV file with ``header``'s columns (a runs file, for instance)."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
