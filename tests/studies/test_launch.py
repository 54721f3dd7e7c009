"""Launch commands: every command parses with the engine's documented flags, and its values are the simulated
settings, derived here by hand from the experiment (the engines' units: SGLang counts every attention-DP rank's GPUs
in --tp-size and divides --max-running-requests and --chunked-prefill-size by --dp-size)."""

from __future__ import annotations

import argparse
import json
import shlex

import pytest
import yaml

from simulator.config import load_experiment
from simulator.studies.launch import FLAGS, TRTLLM_OPTIONS, launch_commands
from tests.helpers import REPO

# Each program's flags as its documentation lists them (name -> takes a value), transcribed independently of the
# module: vLLM https://docs.vllm.ai/en/latest/configuration/engine_args.html (booleans: --X / --no-X); Dynamo
# examples/backends/vllm/launch/disagg.sh and its frontend's --http-port / --router-mode; SGLang
# https://docs.sglang.ai/advanced_features/server_arguments.html and router.html; TensorRT-LLM trtllm-serve
# (tensorrt_llm/commands/serve.py).
VLLM_VALUED = {"--host", "--port", "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
               "--max-num-seqs", "--max-num-batched-tokens", "--long-prefill-token-threshold", "--max-model-len",
               "--kv-cache-dtype", "--gpu-memory-utilization", "--kv-cache-memory-bytes",
               "--num-gpu-blocks-override", "--block-size", "--quantization", "--dtype", "--kv-transfer-config",
               "--swap-space", "--max-loras", "--max-lora-rank", "--speculative-config", "--scheduling-policy"}
VLLM_BOOLEAN = {"--enable-expert-parallel", "--enable-chunked-prefill", "--enable-prefix-caching",
                "--async-scheduling", "--enable-lora", "--enable-eplb"}
DOCUMENTED: dict[str, tuple[set[str], set[str]]] = {  # program -> (flags with a value, flags without)
    "vllm serve": (VLLM_VALUED, VLLM_BOOLEAN | {"--no-" + f[2:] for f in VLLM_BOOLEAN}),
    "python -m dynamo.vllm": (VLLM_VALUED | {"--model", "--disaggregation-mode"},
                              VLLM_BOOLEAN | {"--no-" + f[2:] for f in VLLM_BOOLEAN}),
    "python -m dynamo.frontend": ({"--http-port", "--router-mode"}, set()),
    "python -m sglang.launch_server": (
        {"--model-path", "--host", "--port", "--tp-size", "--pp-size", "--dp-size", "--ep-size",
         "--max-running-requests", "--chunked-prefill-size", "--max-prefill-tokens", "--context-length",
         "--kv-cache-dtype", "--mem-fraction-static", "--max-total-tokens", "--page-size", "--schedule-policy",
         "--max-queued-requests", "--scheduler-recv-interval", "--quantization", "--dtype", "--disaggregation-mode",
         "--disaggregation-transfer-backend", "--disaggregation-bootstrap-port", "--max-lora-rank",
         "--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk",
         "--speculative-num-draft-tokens", "--speculative-draft-model-path"},
        {"--enable-dp-attention", "--disable-radix-cache", "--enable-mixed-chunk", "--disable-overlap-schedule",
         "--enable-lora", "--trust-remote-code"}),
    "python -m sglang_router.launch_router": (
        {"--worker-urls", "--policy", "--prefill-policy", "--decode-policy", "--host", "--port"},
        {"--pd-disaggregation"}),  # --prefill URL [BOOTSTRAP_PORT] and --decode URL: repeated (below)
    "trtllm-serve": ({"--host", "--port", "--backend", "--tp_size", "--pp_size", "--ep_size", "--max_batch_size",
                      "--max_num_tokens", "--max_seq_len", "--kv_cache_free_gpu_memory_fraction",
                      "--extra_llm_api_options", "--tokenizer"}, {"--trust_remote_code"}),
    "trtllm-serve disaggregated": ({"-c", "--config_file"}, set()),
}
POSITIONAL_MODEL = ("vllm serve", "trtllm-serve")


def parse(argv: tuple[str, ...]) -> tuple[str, dict]:
    """(program, {flag: value or True}) of a command, by a parser built from the documented flags: an unknown flag,
    a missing value or a stray argument fails."""
    words = list(argv)
    program = next(p for p in sorted(DOCUMENTED, key=len, reverse=True) if words[:len(p.split())] == p.split())
    valued, bare = DOCUMENTED[program]
    parser = argparse.ArgumentParser(prog=program, add_help=False, allow_abbrev=False, exit_on_error=False)
    if program in POSITIONAL_MODEL:
        parser.add_argument("model")
    for flag in valued:
        parser.add_argument(flag, nargs="+" if flag == "--worker-urls" else None)
    for flag in bare:
        parser.add_argument(flag, action="store_true")
    if program.endswith("launch_router"):
        parser.add_argument("--prefill", nargs="+", action="append")
        parser.add_argument("--decode", action="append")
    namespace, extra = parser.parse_known_args(words[len(program.split()):])
    assert extra == [], f"{program}: not documented: {extra}"
    given = {action.option_strings[0] if action.option_strings else action.dest: getattr(namespace, action.dest)
             for action in parser._actions if getattr(namespace, action.dest) not in (None, False)}
    return program, given


def commands(**overrides):
    """The launch commands of the quickstart experiment with ``overrides`` (top-level sections), each parsed."""
    data = yaml.safe_load((REPO / "experiments" / "quickstart.yaml").read_text())
    data.update(overrides)
    found = launch_commands(load_experiment(data))
    return [(command, *parse(command.argv)) for command in found]


def test_vllm_colocated_carries_the_simulated_settings():
    (serve, program, flags), = commands(cluster={"replicas": 3, "tensor_parallel": 2}, scheduler={
        "kind": "chunked", "max_num_seqs": 96, "max_num_batched_tokens": 4096, "max_model_len": 4096,
        "async_scheduling": True}, kv_cache={"kind": "paged", "block_size": 32, "gpu_memory_utilization": 0.85,
                                             "dtype": "fp8", "prefix_caching": True})
    assert program == "vllm serve" and flags["model"] == "meta-llama/Meta-Llama-3-8B"  # the catalog's source
    assert (flags["--tensor-parallel-size"], flags["--pipeline-parallel-size"]) == ("2", "1")
    assert (flags["--max-num-seqs"], flags["--max-num-batched-tokens"], flags["--max-model-len"]) == (
        "96", "4096", "4096")
    assert (flags["--kv-cache-dtype"], flags["--gpu-memory-utilization"], flags["--block-size"]) == (
        "fp8", "0.85", "32")
    assert {"--enable-chunked-prefill", "--enable-prefix-caching", "--async-scheduling"} <= set(flags)
    assert "--data-parallel-size" not in flags and "--enable-expert-parallel" not in flags
    assert (serve.role, serve.replicas, serve.gpus) == ("serve", 3, 2)
    assert serve.comment == "# serve: replicas: 3 (one per 2 × h100-sxm)"
    assert shlex.split(serve.shell) == list(serve.argv)
    assert any("no router" in note for note in serve.notes)  # three replicas, and vLLM has no router


def test_sglang_moe_with_attention_dp_and_experts_in_its_own_units():
    (serve, program, flags), = commands(
        engine="sglang", model="qwen3-30b-a3b",
        cluster={"tensor_parallel": 2, "data_parallel": 2, "expert_parallel": 4},
        scheduler={"kind": "continuous", "prefill_priority": True, "chunk_long_prompts": True, "max_num_seqs": 64,
                   "max_num_batched_tokens": 4096, "max_model_len": 16384},
        kv_cache={"kind": "paged", "block_size": 16, "mem_fraction_static": 0.8, "dtype": "fp8"})
    assert program == "python -m sglang.launch_server" and flags["--model-path"] == "Qwen/Qwen3-30B-A3B"
    # 2 ranks × 2 GPUs; 64 sequences and 4096-token chunks per rank, divided by --dp-size 2 by SGLang
    assert (flags["--tp-size"], flags["--dp-size"], flags["--ep-size"]) == ("4", "2", "4")
    assert (flags["--max-running-requests"], flags["--chunked-prefill-size"], flags["--max-prefill-tokens"]) == (
        "128", "8192", "4096")
    assert (flags["--mem-fraction-static"], flags["--kv-cache-dtype"], flags["--page-size"]) == (
        "0.8", "fp8_e4m3", "16")
    assert flags["--context-length"] == "16384"  # below the model's 40960
    assert {"--enable-dp-attention", "--disable-radix-cache"} <= set(flags)
    assert "--disable-overlap-schedule" not in flags  # async scheduling: SGLang's overlap, its default
    assert serve.gpus == 4 and serve.notes == ()


@pytest.mark.parametrize("hardware", ["b200", "h100-sxm"])
def test_mxfp4_experts_launch_the_kernel_that_was_priced(hardware):
    """gpt-oss's MXFP4 experts are priced against MXFP8 activations on Blackwell (the profiles'
    mxfp4_experts_by_generation): TensorRT-LLM's options pick its TRTLLM MoE backend, vLLM's command says to set
    its FlashInfer variable (its default takes BF16 activations), SGLang's default runs them so; on Hopper, weight-only
    everywhere, nothing said."""
    blackwell = hardware == "b200"
    for engine in ("trtllm", "vllm", "sglang"):
        (serve, _, flags), = commands(engine=engine, model="gpt-oss-120b", hardware=hardware,
                                      cluster={"tensor_parallel": 2}, dtype="auto")
        if engine == "trtllm":
            options = yaml.safe_load(serve.files[flags["--extra_llm_api_options"]])
            assert (options.get("moe_config") == {"backend": "TRTLLM"}) == blackwell
        said = any("VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1" in note for note in serve.notes)
        assert said == (blackwell and engine == "vllm"), (engine, serve.notes)


def test_trtllm_moe_with_attention_dp_writes_its_extra_options():
    (serve, program, flags), = commands(
        engine="trtllm", model="qwen3-30b-a3b", cluster={"tensor_parallel": 1, "data_parallel": 4,
                                                         "expert_parallel": 4},
        scheduler={"kind": "continuous", "prefill_priority": False, "max_num_seqs": 256,
                   "max_num_batched_tokens": 8192, "max_model_len": 8192, "capacity_policy": "max_utilization"},
        kv_cache={"kind": "paged", "block_size": 32, "free_memory_fraction": 0.85, "prefix_caching": True,
                  "dtype": "fp8"})
    assert program == "trtllm-serve" and flags["model"] == "Qwen/Qwen3-30B-A3B" and flags["--backend"] == "pytorch"
    assert (flags["--tp_size"], flags["--pp_size"], flags["--ep_size"]) == ("4", "1", "4")
    assert (flags["--max_batch_size"], flags["--max_num_tokens"], flags["--max_seq_len"]) == ("256", "8192", "8192")
    assert flags["--kv_cache_free_gpu_memory_fraction"] == "0.85"
    options = yaml.safe_load(serve.files[flags["--extra_llm_api_options"]])
    assert set(options) <= set(TRTLLM_OPTIONS)
    assert options["enable_attention_dp"] is True and options["enable_chunked_prefill"] is False
    assert options["kv_cache_config"] == {"tokens_per_block": 32, "enable_block_reuse": True, "dtype": "fp8",
                                          "free_gpu_memory_fraction": 0.85}
    assert options["scheduler_config"] == {"capacity_scheduler_policy": "MAX_UTILIZATION"}
    assert options["disable_overlap_scheduler"] is False  # the trtllm profile's overlap (async) scheduling
    assert serve.notes == ()


DISAGGREGATED = {"kind": "disaggregated",
                 "prefill": {"replicas": 2, "tensor_parallel": 2, "max_num_batched_tokens": 16384},
                 "decode": {"replicas": 1, "tensor_parallel": 1, "data_parallel": 4, "expert_parallel": 4,
                            "max_num_seqs": 128}}


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_disaggregated_pools_keep_their_own_parallelism_and_limits(engine):
    found = commands(engine=engine, model="qwen3-30b-a3b", cluster=DISAGGREGATED)
    assert [command.role for command, _, _ in found] == ["prefill", "decode", "router"]
    (prefill, _, p), (decode, _, d), (router, program, r) = found
    assert (prefill.replicas, prefill.gpus, decode.replicas, decode.gpus) == (2, 2, 1, 4)
    tp, seqs, tokens, ep = {
        "vllm": ("--tensor-parallel-size", "--max-num-seqs", "--max-num-batched-tokens", "--enable-expert-parallel"),
        "sglang": ("--tp-size", "--max-running-requests", "--chunked-prefill-size", "--ep-size"),
        "trtllm": ("--tp_size", "--max_batch_size", "--max_num_tokens", "--ep_size")}[engine]
    assert p[tp] == "2" and d[tp] == ("1" if engine == "vllm" else "4")  # SGLang, TensorRT-LLM: 4 DP ranks' GPUs
    assert p[tokens] == "16384" and ep not in p and ep in d
    assert d[seqs] == ("512" if engine == "sglang" else "128")  # SGLang: 128 per rank × 4 ranks
    if engine == "vllm":
        assert (p["--disaggregation-mode"], d["--disaggregation-mode"], d["--data-parallel-size"]) == (
            "prefill", "decode", "4")
        assert json.loads(p["--kv-transfer-config"]) == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        assert program == "python -m dynamo.frontend" and r["--router-mode"] == "round-robin"
    elif engine == "sglang":
        assert (p["--disaggregation-mode"], d["--disaggregation-mode"], d["--dp-size"]) == ("prefill", "decode", "4")
        assert p["--disaggregation-transfer-backend"] == "nixl"
        assert program == "python -m sglang_router.launch_router" and r["--pd-disaggregation"]
        assert r["--prefill"] == [["http://prefill-0:30000", "8998"], ["http://prefill-1:30000", "8998"]]
        assert r["--decode"] == ["http://decode-0:30000"] and r["--prefill-policy"] == "round_robin"
        assert any("decode_router least_outstanding" in note for note in router.notes)  # no such SGLang policy
    else:
        for command, pool in ((prefill, p), (decode, d)):
            options = yaml.safe_load(command.files[pool["--extra_llm_api_options"]])
            assert options["cache_transceiver_config"]["backend"] == "NIXL" and set(options) <= set(TRTLLM_OPTIONS)
        assert yaml.safe_load(decode.files[d["--extra_llm_api_options"]])["enable_attention_dp"] is True
        assert program == "trtllm-serve disaggregated"
        config = yaml.safe_load(router.files[r["-c"]])
        assert config["context_servers"] == {"num_instances": 2, "urls": ["prefill-0:8000", "prefill-1:8000"]}
        assert config["generation_servers"] == {"num_instances": 1, "urls": ["decode-0:8000"]}
    assert any("cluster.transfer" in note for note in router.notes)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_the_schedulers_poll_interval_is_sglangs_flag_and_a_note_elsewhere(engine):
    (serve, _, flags), = commands(engine=engine, scheduler={"kind": "continuous", "recv_interval": 10})
    noted = any("scheduler.recv_interval 10 was simulated" in note for note in serve.notes)
    assert (flags.get("--scheduler-recv-interval"), noted) == (("10", False) if engine == "sglang" else (None, True))


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_what_an_engine_cannot_express_is_noted_not_dropped(engine):
    found = commands(engine=engine, scheduler={"kind": "static", "max_num_seqs": 8, "preemption": "swap",
                                               "max_queue_delay_ms": 500},
                     kv_cache={"kind": "paged", "dtype": "int8", "num_gpu_blocks": 1000, "block_size": 16})
    (serve, _, flags), = found
    notes = " | ".join(serve.notes)
    assert "static batching was simulated" in notes and "preemption swap" in notes
    assert "max_queue_delay_ms 500" in notes and "kv_cache.dtype int8" in notes
    assert "--kv-cache-dtype" not in flags  # no int8 KV cache in any of them
    pool_tokens = 1000 * 16  # a fixed pool of 1000 blocks of 16 tokens
    if engine == "vllm":
        assert flags["--num-gpu-blocks-override"] == "1000"
    elif engine == "sglang":
        assert flags["--max-total-tokens"] == str(pool_tokens)
    else:
        options = yaml.safe_load(serve.files[flags["--extra_llm_api_options"]])
        assert options["kv_cache_config"]["max_tokens"] == pool_tokens


@pytest.mark.parametrize("engine, flag", [("vllm", "--kv-offloading-size"), ("sglang", "--enable-hierarchical-cache"),
                                          ("trtllm", "host_cache_size")])
def test_kv_tiers_are_noted_with_the_engines_own_offloading(engine, flag):
    (serve, _, _), = commands(engine=engine, kv_cache={
        "kind": "paged", "prefix_caching": True,
        "offload": {"tiers": [{"medium": "cpu", "capacity_gib": 256}, {"medium": "ssd", "capacity_gib": 3840}]}})
    notes = " | ".join(serve.notes)
    assert "kv_cache.offload (cpu 256 GiB, ssd 3840 GiB, policy evicted) was simulated" in notes and flag in notes


def test_a_memory_share_the_engine_lacks_is_converted_and_noted():
    (vllm, _, v), = commands(kv_cache={"kind": "paged", "free_memory_fraction": 0.9})
    assert "--gpu-memory-utilization" not in v and int(v["--kv-cache-memory-bytes"]) > 0
    assert any("kv_cache.free_memory_fraction 0.9" in note for note in vllm.notes)
    # vLLM's share holds the weights, the pool and the activations; SGLang's only the first two: a smaller share
    (sglang, _, s), = commands(engine="sglang", scheduler={"max_num_seqs": 256},
                               kv_cache={"kind": "paged", "gpu_memory_utilization": 0.9})
    assert 0.5 < float(s["--mem-fraction-static"]) < 0.9
    assert any("kv_cache.gpu_memory_utilization 0.9" in note for note in sglang.notes)
    (trtllm, _, t), = commands(engine="trtllm", kv_cache={"kind": "paged", "gpu_memory_utilization": 0.9})
    options = yaml.safe_load(trtllm.files[t["--extra_llm_api_options"]])
    assert options["kv_cache_config"]["max_tokens"] > 0 and "--kv_cache_free_gpu_memory_fraction" not in t


def test_fp8_weights_from_a_16_bit_checkpoint():
    (_, _, vllm), = commands(dtype="fp8")
    (_, _, sglang), = commands(engine="sglang", dtype="fp8")
    assert vllm["--quantization"] == sglang["--quantization"] == "fp8"  # both quantise at load
    (trtllm, _, _), = commands(engine="trtllm", dtype="fp8")
    assert any("dtype fp8 was simulated on a bf16 checkpoint" in note for note in trtllm.notes)


def test_model_and_engine_without_a_known_name_are_noted(tmp_path):
    model = tmp_path / "tiny.yaml"
    model.write_text(yaml.safe_dump({"name": "tiny", "num_layers": 2, "hidden_size": 256, "num_heads": 4,
                                     "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 2048}))
    (serve, program, flags), = commands(model=str(model), engine="splitwise", hardware="a100-80gb-sxm")
    assert program == "vllm serve" and flags["model"] == "tiny"
    assert any("no Hugging Face id" in note for note in serve.notes)
    assert any("'splitwise' names no serving framework" in note for note in serve.notes)
    (other, program, _), = [(c, *parse(c.argv)) for c in launch_commands(
        load_experiment({**yaml.safe_load((REPO / "experiments" / "quickstart.yaml").read_text()),
                         "engine": "splitwise", "hardware": "a100-80gb-sxm"}), framework="sglang")]
    assert program == "python -m sglang.launch_server" and not any("framework" in n for n in other.notes)


SPECULATION = {"num_speculative_tokens": 3, "acceptance": [0.9, 0.8, 0.7]}


@pytest.mark.parametrize(("method", "model", "vllm", "sglang", "trtllm"), [
    ("mtp", "deepseek-v3", "mtp", "NEXTN", "MTP"), ("eagle", "llama-3-8b", "eagle", "EAGLE", "Eagle"),
    ("eagle3", "llama-3-8b", "eagle3", "EAGLE3", "Eagle"), ("ngram", "llama-3-8b", "ngram", "NGRAM", "NGram")])
def test_speculative_methods_launch_with_the_engines_own_flags(method, model, vllm, sglang, trtllm):
    """vLLM's --speculative-config JSON (method, num_speculative_tokens: https://docs.vllm.ai/en/latest/features/
    spec_decode.html), SGLang's chain of k drafts (--speculative-num-steps k, --speculative-eagle-topk 1,
    --speculative-num-draft-tokens k + 1: https://docs.sglang.ai/advanced_features/speculative_decoding.html) and
    TensorRT-LLM's speculative_config (MTP: num_nextn_predict_layers k; the others: max_draft_len k); an EAGLE head's
    checkpoint is a placeholder, noted."""
    where = {"model": model, "hardware": "h200-sxm", "cluster": {"replicas": 1, "tensor_parallel": 8}} \
        if model == "deepseek-v3" else {}
    scheduler = {"kind": "continuous", "speculative": {"method": method, **SPECULATION}}
    (serve, _, flags), = commands(**where, scheduler=scheduler)
    config = json.loads(flags["--speculative-config"])
    assert config["method"] == vllm and config["num_speculative_tokens"] == 3
    assert ("model" in config) == method.startswith("eagle")
    assert any("acceptance [0.9, 0.8, 0.7]" in note for note in serve.notes)
    (serve, _, flags), = commands(**where, engine="sglang", scheduler=scheduler)
    assert (flags["--speculative-algorithm"], flags["--speculative-num-steps"], flags["--speculative-eagle-topk"],
            flags["--speculative-num-draft-tokens"]) == (sglang, "3", "1", "4")
    assert ("--speculative-draft-model-path" in flags) == method.startswith("eagle")
    (serve, _, flags), = commands(**where, engine="trtllm", scheduler=scheduler)
    options = yaml.safe_load(serve.files[flags["--extra_llm_api_options"]])
    assert set(options) <= set(TRTLLM_OPTIONS) and options["speculative_config"]["decoding_type"] == trtllm
    drafts = options["speculative_config"].get("num_nextn_predict_layers" if method == "mtp" else "max_draft_len")
    assert drafts == 3


def test_a_draft_model_is_launched_by_its_checkpoint_and_the_generic_draft_is_noted():
    scheduler = {"kind": "continuous", "speculative": {"method": "draft_model", "draft_model": "qwen3-8b",
                                                       **SPECULATION}}
    (_, _, flags), = commands(model="qwen3-32b", hardware="h200-sxm", scheduler=scheduler)
    assert json.loads(flags["--speculative-config"]) == {"method": "draft_model", "model": "Qwen/Qwen3-8B",
                                                         "num_speculative_tokens": 3}
    whole = {"kind": "continuous", "speculative": {**scheduler["speculative"], "draft_tensor_parallel_size": 1}}
    (_, _, flags), = commands(model="qwen3-32b", hardware="h200-sxm", cluster={"tensor_parallel": 2}, scheduler=whole)
    assert json.loads(flags["--speculative-config"])["draft_tensor_parallel_size"] == 1
    (_, _, flags), = commands(model="qwen3-32b", hardware="h200-sxm", engine="sglang", scheduler=scheduler)
    assert (flags["--speculative-algorithm"], flags["--speculative-draft-model-path"]) == ("STANDALONE",
                                                                                          "Qwen/Qwen3-8B")
    generic = {"kind": "continuous", "speculative": {"num_speculative_tokens": 2, "acceptance_rate": 0.7,
                                                     "draft_cost_ratio": 0.1}}
    (serve, _, flags), = commands(scheduler=generic)
    assert "--speculative-config" not in flags and any("reaches its acceptance rate" in n for n in serve.notes)


def test_the_module_flag_table_is_the_documented_one():
    programs = {"vllm": "vllm serve", "dynamo.vllm": "python -m dynamo.vllm",
                "dynamo.frontend": "python -m dynamo.frontend", "sglang": "python -m sglang.launch_server",
                "sglang_router": "python -m sglang_router.launch_router", "trtllm-serve": "trtllm-serve"}
    for name, flags in FLAGS.items():
        valued, bare = DOCUMENTED[programs[name]]
        valued = valued | ({"--prefill", "--decode"} if name == "sglang_router" else set()) | (
            {"-c"} if name == "trtllm-serve" else set())
        assert {flag for flag, takes in flags.items() if takes} <= valued, name
        assert {flag for flag, takes in flags.items() if not takes} <= bare, name
