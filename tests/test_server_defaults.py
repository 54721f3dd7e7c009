"""An engine's server defaults fill what an experiment leaves out (the values: engine_profiles/*.yaml, each from its
framework's documented defaults)."""

from __future__ import annotations

import pytest

from simulator.config import load_experiment
from simulator.errors import ConfigError, LLMSimError
from tests.helpers import experiment


def _load(**sections):
    """The test experiment with ``sections`` replaced; a section given as None is left out."""
    data = experiment(**{key: value for key, value in sections.items() if value is not None})
    for key in [key for key, value in sections.items() if value is None]:
        data.pop(key, None)
    return load_experiment(data)


def test_left_out_sections_are_the_servers():
    """vLLM v1 on an H100: chunked prefill, 8,192 tokens, 1,024 sequences, 16-token blocks in 90% of memory;
    SGLang: prefill-first continuous batching, 8,192 tokens, page size 1, 88%."""
    vllm = _load(engine="vllm", scheduler=None, kv_cache=None)
    assert (vllm.scheduler.kind, vllm.scheduler.max_num_batched_tokens, vllm.scheduler.max_num_seqs) == (
        "chunked", 8192, 1024)
    assert (vllm.kv_cache.block_size, vllm.kv_cache.gpu_memory_utilization) == (16, 0.9)
    sglang = _load(engine="sglang", scheduler=None, kv_cache=None)
    assert (sglang.scheduler.kind, sglang.scheduler.prefill_priority, sglang.scheduler.max_num_batched_tokens) == (
        "continuous", True, 8192)
    assert (sglang.kv_cache.block_size, sglang.kv_cache.gpu_memory_utilization) == (1, 0.88)
    # the default engine is vllm
    data = experiment()
    del data["scheduler"], data["kv_cache"]
    assert load_experiment(data).scheduler.kind == "chunked"


def test_a_section_of_the_same_or_no_kind_keeps_its_own_keys_and_another_kind_is_used_as_written():
    merged = _load(engine="vllm", scheduler={"max_num_seqs": 64}, kv_cache={"block_size": 32})
    assert (merged.scheduler.kind, merged.scheduler.max_num_seqs, merged.scheduler.max_num_batched_tokens) == (
        "chunked", 64, 8192)
    assert (merged.kv_cache.block_size, merged.kv_cache.gpu_memory_utilization) == (32, 0.9)
    own = _load(engine="vllm", scheduler={"kind": "continuous"}, kv_cache={"kind": "contiguous"})
    assert (own.scheduler.kind, own.scheduler.max_num_seqs) == ("continuous", 256)  # the schema's defaults
    assert own.kv_cache.kind == "contiguous"


def test_fp8_checkpoints_get_an_fp8_kv_cache_unless_the_experiment_says_otherwise():
    assert _load(engine="vllm", dtype="fp8", kv_cache=None).kv_cache.dtype == "fp8"
    assert _load(engine="vllm", dtype="fp8", kv_cache={"dtype": "bf16"}).kv_cache.dtype == "bf16"
    assert _load(engine="vllm", dtype="bf16", kv_cache=None).kv_cache.dtype == "auto"
    assert _load(engine="ideal", dtype="fp8", kv_cache=None).kv_cache.dtype == "auto"  # no server defaults


def test_an_unknown_engine_is_one_line_naming_the_catalog():
    with pytest.raises(LLMSimError, match="engine: unknown engine profile 'vllm-9'"):
        _load(engine="vllm-9")
    import simulator

    config = _load(engine="vllm", scheduler={"kind": "chunked", "max_num_batched_tokens": 512})
    with pytest.raises(ConfigError, match=r"scheduler\.max_num_batched_tokens: 512 is below max_num_seqs 1024"):
        simulator.run(config)  # as vLLM refuses a budget below max_num_seqs
