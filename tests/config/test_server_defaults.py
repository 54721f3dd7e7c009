"""An engine's server defaults fill what an experiment leaves out (the values: engine_profiles/*.yaml, each from its
framework's documented defaults)."""

from __future__ import annotations

import json
import re

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
    SGLang: prefill-first continuous batching, 8,192 tokens (a longer prompt in chunks of that), page size 1, its
    weights and pool in the share of memory its server reserves by default (mem_fraction_static: auto)."""
    vllm = _load(engine="vllm", scheduler=None, kv_cache=None)
    assert (vllm.scheduler.kind, vllm.scheduler.max_num_batched_tokens, vllm.scheduler.max_num_seqs) == (
        "chunked", 8192, 1024)
    assert (vllm.kv_cache.block_size, vllm.kv_cache.gpu_memory_utilization) == (16, 0.9)
    sglang = _load(engine="sglang", scheduler=None, kv_cache=None)
    assert (sglang.scheduler.kind, sglang.scheduler.prefill_priority, sglang.scheduler.max_num_batched_tokens,
            sglang.scheduler.chunk_long_prompts) == ("continuous", True, 8192, True)
    assert (sglang.kv_cache.block_size, sglang.kv_cache.mem_fraction_static) == (1, "auto")
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


def test_sglang_keeps_its_default_share_of_memory_for_weights_and_pool():
    """SGLang's default --mem-fraction-static, by hand: on an 80 GiB H100 (81,920 MB) at TP 1 with 8,192-token
    chunks it reserves 512 + 1.5 × 8,192 + 2 × 256 (CUDA graphs up to 256 sequences) + 1,024 / 8 = 13,440 MB, so
    round(68,480 / 81,920, 3) = 0.836; at TP 8 graphs go up to 512: 14,848 MB, 0.819; a B200's 180 GiB at TP 8
    with the same chunks would keep 0.919; a 24 GiB A10 with its own 2,048-token chunks (graphs up to 24, no 10 GiB
    floor) 512 + 3,072 + 48 + 128 = 3,760 MB: 0.847; attention data parallelism of 8 ranks
    of one GPU (SGLang's tp_size 8) adds 3 × 512 × 8 and 1.5 × 512 × 8 MB: 0.594. Qwen3-32B on one H100 then
    pools 0.836 × 80 GiB less its weights (the activations live in the rest), and an experiment that states
    gpu_memory_utilization sizes the pool vLLM's way instead."""
    from simulator.api import run
    from simulator.catalog import load_hardware, load_model
    from simulator.kv.sglang_memory import mem_fraction_static
    from simulator.kv.sizing import kv_budget

    assert mem_fraction_static(80, 8192, 1) == 0.836 and mem_fraction_static(80, 8192, 8) == 0.819
    assert mem_fraction_static(180, 8192, 8) == 0.919 and mem_fraction_static(24, 2048, 1) == 0.847
    assert mem_fraction_static(80, 8192, 8, data_parallel=8) == round((81920 - 14848 - 4.5 * 512 * 8) / 81920, 3)
    model, h100 = load_model("qwen3-32b"), load_hardware("h100-sxm")
    budget = kv_budget(model, h100, tensor_parallel=1, weight_dtype="bf16", kv_dtype_name="bf16",
                       gpu_memory_utilization=0.9, block_size=1, max_num_batched_tokens=8192, max_num_seqs=16,
                       max_model_len=4096, mem_fraction_static=0.836)
    per_token = 64 * 2 * 8 * 128 * 2  # layers × K and V × KV heads × head width × bytes
    assert budget.num_blocks == int((80 * 2**30 * 0.836 - budget.weight_bytes) // per_token)
    config = _load(engine="sglang", model="qwen3-32b", hardware="h100-sxm", scheduler={"max_model_len": 4096},
                   kv_cache=None)
    assert run(config.model_copy(update={"workload": config.workload.model_copy(update={"num_requests": 2})})
               ).summary["kv_capacity_tokens"] == budget.num_blocks
    vllm_way = _load(engine="sglang", kv_cache={"gpu_memory_utilization": 0.9})
    assert (vllm_way.kv_cache.mem_fraction_static, vllm_way.kv_cache.gpu_memory_utilization) == (None, 0.9)
    for bad in (1.5, 0, "half", True):
        with pytest.raises(ConfigError, match=r"kv_cache\.mem_fraction_static: must be 'auto' or a share of GPU "
                           r"memory in \(0, 1\], got " + re.escape(repr(bad)) + "$"):
            _load(engine="sglang", kv_cache={"mem_fraction_static": bad})


def test_sglang_runs_as_many_requests_as_its_pool_sets():
    """SGLang's max_running_requests, left unset: min(pool / 2, its request slots min(max(pool / context_len × 512,
    2,048), 4,096)). Qwen3-32B on one H100 with 4,096-token requests pools 23,985 tokens (its 0.836 share less the
    weights, 256 KiB a token: the test above), so int(23,985 / 4,096 × 512) = 2,998 slots, under 23,985 / 2: 3,200
    requests of 2 + 4 tokens at once (19,200 tokens: the pool holds them) run at most 2,998 at a time. Without
    SGLang's memory share the rule has no pool to read and is refused; a bad value is one error."""
    from simulator.api import run
    from simulator.catalog import load_hardware, load_model
    from simulator.kv.sglang_memory import max_running_requests
    from simulator.kv.sizing import kv_budget

    assert max_running_requests(23985, 4096) == 2998
    assert (max_running_requests(3000, 4096), max_running_requests(10**6, 4096)) == (1500, 4096)
    budget = kv_budget(load_model("qwen3-32b"), load_hardware("h100-sxm"), tensor_parallel=1, weight_dtype="bf16",
                       kv_dtype_name="bf16", gpu_memory_utilization=0.9, block_size=1, max_num_batched_tokens=8192,
                       max_num_seqs=1, max_model_len=4096, mem_fraction_static=0.836)
    pool = int((80 * 2**30 * 0.836 - budget.weight_bytes) // (64 * 2 * 8 * 128 * 2))  # the share less the weights
    running = min(pool // 2, min(max(int(pool / 4096 * 512), 2048), 4096))  # SGLang's rule, by hand
    workload = {"num_requests": 3200, "arrival": {"kind": "poisson", "rate": 1e6},
                "input_tokens": {"kind": "fixed", "value": 2}, "output_tokens": {"kind": "fixed", "value": 4}}
    config = _load(engine="sglang", model="qwen3-32b", hardware="h100-sxm", scheduler={"max_model_len": 4096},
                   kv_cache=None, workload=workload)
    summary = run(config).summary
    assert budget.capacity_tokens == pool and pool > 3200 * 6 and 2048 < running < 3200
    assert (summary["kv_capacity_tokens"], summary["peak_running"], summary["num_preemptions"]) == (pool, running, 0)
    vllm_way = _load(engine="sglang", model="qwen3-32b", scheduler={"max_model_len": 4096},
                     kv_cache={"gpu_memory_utilization": 0.9}, workload=workload)
    with pytest.raises(ConfigError, match=r"scheduler\.max_num_seqs: auto \(SGLang's, from the KV pool\) needs "
                       r"kv_cache\.mem_fraction_static"):
        run(vllm_way)
    for bad in (0, 2.5, "many", True):
        with pytest.raises(ConfigError, match=r"scheduler\.max_num_seqs: must be 'auto' or a whole number of "
                           r"sequences from 1 to 100,000,000, got " + re.escape(repr(bad)) + "$"):
            _load(engine="sglang", scheduler={"max_num_seqs": bad})


def test_vllm_batch_limits_follow_the_gpu_as_its_server_picks_them():
    """vLLM's EngineArgs.get_batch_defaults (API server): 8,192 tokens and 1,024 sequences on GPUs of 70 GiB or more
    that are not A100s, 2,048 and 256 elsewhere — an A100 of 80 GB by its name, an L40S (48 GiB) by its memory; a
    limit the experiment states is kept."""
    limits = {hw: (lambda c: (c.scheduler.max_num_batched_tokens, c.scheduler.max_num_seqs))(
        _load(engine="vllm", hardware=hw, scheduler=None, kv_cache=None))
        for hw in ("h100-sxm", "h200-sxm", "b200", "a100-80gb-sxm", "l40s")}
    assert limits == {"h100-sxm": (8192, 1024), "h200-sxm": (8192, 1024), "b200": (8192, 1024),
                      "a100-80gb-sxm": (2048, 256), "l40s": (2048, 256)}
    stated = _load(engine="vllm", hardware="a100-80gb-sxm", scheduler={"max_num_seqs": 64}, kv_cache=None).scheduler
    assert (stated.max_num_batched_tokens, stated.max_num_seqs) == (2048, 64)


def test_sglang_prefill_chunk_follows_the_gpu_memory_and_its_memory_share_follows_the_chunk():
    """SGLang's chunked_prefill_size by memory: 2,048 below 35 GiB (A10), 4,096 below 60 (L40S), 8,192 to 160
    (H100, H200), 16,384 from 160 (B200). On a B200 at TP 8 its reserve is then 512 + 1.5 × 16,384 + 2 × 512 +
    1,024 = 27,136 MB of 184,320: mem_fraction_static round(157,184 / 184,320, 3) = 0.853, and the run's pool is
    that share less the weights."""
    from simulator.api import run
    from simulator.catalog import load_hardware, load_model
    from simulator.kv.sglang_memory import mem_fraction_static
    from simulator.kv.sizing import kv_budget

    chunks = {hw: _load(engine="sglang", hardware=hw, scheduler=None, kv_cache=None).scheduler.max_num_batched_tokens
              for hw in ("a10", "l40s", "h100-sxm", "h200-sxm", "b200")}
    assert chunks == {"a10": 2048, "l40s": 4096, "h100-sxm": 8192, "h200-sxm": 8192, "b200": 16384}
    assert mem_fraction_static(180, 16384, 8) == 0.853
    config = _load(engine="sglang", model="llama-3-70b", hardware="b200", scheduler={"max_model_len": 4096},
                   kv_cache=None, cluster={"tensor_parallel": 8})
    budget = kv_budget(load_model("llama-3-70b"), load_hardware("b200"), tensor_parallel=8, weight_dtype="bf16",
                       kv_dtype_name="bf16", gpu_memory_utilization=0.9, block_size=1, max_num_batched_tokens=16384,
                       max_num_seqs=1024, max_model_len=4096, mem_fraction_static=0.853)
    assert run(config.model_copy(update={"workload": config.workload.model_copy(update={"num_requests": 2})})
               ).summary["kv_capacity_tokens"] == budget.num_blocks


def test_a_pool_of_another_gpu_starts_with_that_gpus_batch_limits():
    """Colocated pools of an H100 (the experiment's GPU) and an A100 under vLLM: the A100's server starts with
    2,048 tokens and 256 sequences, the H100's with 8,192 and 1,024; a limit the scheduler section or the pool states
    is the experiment's for every pool."""
    pools = [{"replicas": 1}, {"replicas": 1, "hardware": "a100-80gb-sxm"}]
    config = _load(engine="vllm", scheduler=None, kv_cache=None, cluster={"pools": pools})
    a100 = config.cluster.pools[1]
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)
    assert (config.cluster.pools[0].max_num_seqs, config.scheduler.max_num_seqs) == (None, 1024)
    stated = _load(engine="vllm", scheduler={"max_num_seqs": 64}, kv_cache=None,
                   cluster={"pools": [{"replicas": 1}, {"replicas": 1, "hardware": "a100-80gb-sxm",
                                                        "max_num_batched_tokens": 4096}]})
    assert (stated.cluster.pools[1].max_num_batched_tokens, stated.cluster.pools[1].max_num_seqs) == (4096, None)


def test_a_gpu_rule_must_name_its_gpus(tmp_path):
    path = tmp_path / "engine.yaml"
    path.write_text("extends: vllm\nname: mine\nserver_defaults_by_gpu:\n  - {scheduler: {max_num_seqs: 8}}\n")
    from simulator.catalog.engines import load_engine

    with pytest.raises(LLMSimError, match="memory_below_gib, memory_from_gib or name_contains"):
        load_engine(str(path))


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
    costs, name and unfused activation quantisation; a user profile extends a catalog name or a YAML path relative
    to its own file, its top-level fields replacing the other's whole; a cycle, a non-name and an unknown profile are
    one line naming the file."""
    from simulator.catalog.engines import load_engine

    vllm, later = load_engine("vllm"), load_engine("vllm-0.14")
    assert (later.name, later.per_iteration_ms, later.per_sequence_us) == ("vllm-0.14", 1.0, 0.0)
    own = {"name", "description", "per_iteration_ms", "per_sequence_us", "fuses_activation_quantization", "sources"}
    assert later.model_dump(exclude=own) == vllm.model_dump(exclude=own)
    assert (vllm.fuses_activation_quantization, later.fuses_activation_quantization) == (True, False)
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
