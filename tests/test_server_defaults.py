"""An engine's server defaults fill what an experiment leaves out (the values: engine_profiles/*.yaml, each from its
framework's documented defaults)."""

from __future__ import annotations

import json

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
    SGLang: prefill-first continuous batching, 8,192 tokens (a longer prompt in chunks of that), page size 1, 88%."""
    vllm = _load(engine="vllm", scheduler=None, kv_cache=None)
    assert (vllm.scheduler.kind, vllm.scheduler.max_num_batched_tokens, vllm.scheduler.max_num_seqs) == (
        "chunked", 8192, 1024)
    assert (vllm.kv_cache.block_size, vllm.kv_cache.gpu_memory_utilization) == (16, 0.9)
    sglang = _load(engine="sglang", scheduler=None, kv_cache=None)
    assert (sglang.scheduler.kind, sglang.scheduler.prefill_priority, sglang.scheduler.max_num_batched_tokens,
            sglang.scheduler.chunk_long_prompts) == ("continuous", True, 8192, True)
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


def test_tensorrt_llm_sizes_its_pool_from_free_memory_and_admits_whole_lengths():
    """trtllm-serve: KV in free_gpu_memory_fraction 0.9 of the memory left after the weights, its capacity scheduler
    GUARANTEED_NO_EVICT; an experiment that sizes the pool vLLM's way instead gets that alone, not both."""
    trt = _load(engine="trtllm", scheduler=None, kv_cache=None)
    assert (trt.kv_cache.free_memory_fraction, trt.scheduler.capacity_policy) == (0.9, "guaranteed_no_evict")
    own = _load(engine="trtllm", scheduler=None, kv_cache={"kind": "paged", "gpu_memory_utilization": 0.8})
    assert (own.kv_cache.free_memory_fraction, own.kv_cache.gpu_memory_utilization) == (None, 0.8)
    assert _load(engine="vllm", scheduler=None, kv_cache=None).scheduler.capacity_policy == "max_utilization"


def _checkpoint(folder, quantization: dict) -> str:
    """A small Llama-style config.json in ``folder`` with a ModelOpt ``hf_quant_config.json`` of ``quantization``
    beside it."""
    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000}
    folder.mkdir()
    (folder / "m_config.json").write_text(json.dumps(config))
    (folder / "m_hf_quant_config.json").write_text(json.dumps({"quantization": quantization}))
    return str(folder / "m_config.json")


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "ideal"])
def test_the_kv_cache_takes_the_format_the_checkpoint_declares_else_sixteen_bits(tmp_path, engine):
    """``--kv-cache-dtype auto`` in vLLM, SGLang and TensorRT-LLM: a checkpoint with calibrated fp8 KV scales (ModelOpt
    ``kv_cache_quant_algo: FP8``) is served with an fp8 cache; an fp8 checkpoint that declares none (DeepSeek-V3's
    block-fp8 release) keeps a 16-bit cache; the experiment's own dtype wins."""
    declared = _checkpoint(tmp_path / "declared", {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"})
    assert _load(engine=engine, model=declared, dtype="auto", kv_cache=None).kv_cache.dtype == "fp8"
    assert _load(engine=engine, model=declared, kv_cache={"block_size": 32}).kv_cache.dtype == "fp8"
    assert _load(engine=engine, model=declared, kv_cache={"dtype": "bf16"}).kv_cache.dtype == "bf16"
    assert _load(engine=engine, model=declared, dtype="bf16", kv_cache=None).kv_cache.dtype == "auto"
    assert _load(engine=engine, model="deepseek-v3", kv_cache=None).kv_cache.dtype == "auto"
    undeclared = _checkpoint(tmp_path / "undeclared", {"quant_algo": "FP8"})
    assert _load(engine=engine, model=undeclared, kv_cache=None).kv_cache.dtype == "auto"


def test_a_compressed_tensors_kv_scheme_of_8_bit_floats_is_an_fp8_cache():
    from simulator.catalog.hf_import import declared_kv_cache

    assert declared_kv_cache({"quant_method": "compressed-tensors",
                              "kv_cache_scheme": {"type": "float", "num_bits": 8, "strategy": "tensor"}}) == "fp8"
    assert declared_kv_cache({"quant_method": "compressed-tensors",
                              "kv_cache_scheme": {"type": "int", "num_bits": 8}}) is None
    assert declared_kv_cache({"quant_method": "fp8", "weight_block_size": [128, 128]}) is None


def test_an_unknown_engine_is_one_line_naming_the_catalog():
    with pytest.raises(LLMSimError, match="engine: unknown engine profile 'vllm-9'"):
        _load(engine="vllm-9")
    import simulator

    config = _load(engine="vllm", scheduler={"kind": "chunked", "max_num_batched_tokens": 512})
    with pytest.raises(ConfigError, match=r"scheduler\.max_num_batched_tokens: 512 is below max_num_seqs 1024"):
        simulator.run(config)  # as vLLM refuses a budget below max_num_seqs


def test_a_profile_that_extends_another_states_only_what_differs(tmp_path):
    """``extends``: the shipped ``vllm-0.14`` is ``vllm`` (its server defaults and fitted kernels) with its own host
    costs and name; a user profile extends a catalog name or a YAML path relative to its own file, its top-level
    fields replacing the other's whole; a cycle, a non-name and an unknown profile are one line naming the file."""
    from simulator.cost.engine import load_engine

    vllm, later = load_engine("vllm"), load_engine("vllm-0.14")
    assert (later.name, later.per_iteration_ms, later.per_sequence_us) == ("vllm-0.14", 1.0, 0.0)
    assert later.model_dump(exclude={"name", "description", "per_iteration_ms", "per_sequence_us", "sources"}) == (
        vllm.model_dump(exclude={"name", "description", "per_iteration_ms", "per_sequence_us", "sources"}))
    (tmp_path / "mine.yaml").write_text("extends: vllm-0.14\nname: mine\nserver_defaults: {}\n")
    (tmp_path / "yours.yaml").write_text("extends: mine.yaml\nname: yours\nper_sequence_us: 5\n")
    yours = load_engine(str(tmp_path / "yours.yaml"))
    assert (yours.name, yours.per_iteration_ms, yours.per_sequence_us, yours.server_defaults) == ("yours", 1.0, 5.0,
                                                                                                {})
    (tmp_path / "a.yaml").write_text("extends: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\nname: b\n")
    with pytest.raises(LLMSimError, match=r"b.yaml: extends: a cycle of engine profiles \(a -> b -> a\)"):
        load_engine(str(tmp_path / "a.yaml"))
    (tmp_path / "c.yaml").write_text("extends: [vllm]\nname: c\n")
    with pytest.raises(LLMSimError, match=r"c.yaml: extends must name an engine profile .*got \['vllm'\]"):
        load_engine(str(tmp_path / "c.yaml"))
    (tmp_path / "d.yaml").write_text("extends: vllm-9\nname: d\n")
    with pytest.raises(LLMSimError, match=r"d.yaml: extends: unknown engine profile 'vllm-9' \(catalog: "):
        load_engine(str(tmp_path / "d.yaml"))


def test_sglang_serves_prompts_longer_than_its_chunk():
    """SGLang prefills a prompt longer than chunked_prefill_size in chunks: a Qwen3-8B server with its 40,960-token
    context and 12,000-token prompts runs (it was refused: a whole prompt had to fit 8,192 tokens) and every request
    completes."""
    import simulator

    data = experiment(model="qwen3-8b", engine="sglang",
                      workload={"num_requests": 4, "arrival": {"kind": "poisson", "rate": 1.0},
                                "input_tokens": {"kind": "fixed", "value": 12000},
                                "output_tokens": {"kind": "fixed", "value": 4}})
    del data["scheduler"], data["kv_cache"]
    result = simulator.run(load_experiment(data))
    assert result.summary["completed"] == 4 and result.summary["prefill_tokens_computed"] == 4 * 12000
