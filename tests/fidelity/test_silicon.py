"""`llmsim validate --runs`: silicon rows become the experiments their benchmarks ran, bad rows are reported per
row, and (with ../shared/data) every H100 row is ok or unsupported with a reason."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pandas as pd
import pytest

from simulator.cli import main
from simulator.errors import LLMSimError
from simulator.fidelity.clients import CLIENTS
from simulator.fidelity.runs_report import runs_report
from simulator.fidelity.silicon import (
    RunSettings,
    Unsupported,
    read_runs,
    row_experiment,
    row_settings,
    served_format,
    validate_runs,
)
from tests.helpers import write_csv

HEADER = ["id", "backend", "model_path", "system", "precision", "mode", "isl", "osl", "gemm_quant_mode",
          "batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size",
          "silicon_ttft_ms", "silicon_tpot_ms"]


def _row(**changes) -> dict:
    row = {"id": "r", "backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B", "system": "h100_sxm",
           "precision": "", "mode": "agg", "isl": "512", "osl": "32", "gemm_quant_mode": "", "batch_size": "4",
           "tp_size": "1", "pp_size": "1", "attention_dp_size": "", "moe_tp_size": "1", "moe_ep_size": "1",
           "silicon_ttft_ms": "50", "silicon_tpot_ms": "8"}
    row.update(changes)
    return row


def _write(path, rows) -> None:
    write_csv(path, HEADER, rows)


def test_a_row_becomes_its_benchmark(tmp_path):
    config = row_experiment(_row(batch_size="8", isl="1000", osl="100", tp_size="2", gemm_quant_mode="fp8"),
                            "x:2", None)
    arrival = config.workload.arrival
    assert (arrival.kind, arrival.users) == ("closed_loop", 8)
    assert config.workload.input_tokens.value == 1000 and config.workload.output_tokens.value == 100
    assert config.cluster.tensor_parallel == 2 and config.dtype == "fp8" and config.engine == "vllm"
    # vLLM's chunked prefill with the benchmark recipe's token budget (8 + 1000 + 1500), and fp8 weights run with
    # an fp8 KV cache as the recipe configures them (Llama-3.1-8B declares no KV format; bf16 rows keep
    # the 16-bit cache)
    assert config.scheduler.kind == "chunked" and config.scheduler.max_num_batched_tokens == 2508
    assert config.kv_cache.dtype == "fp8" and config.scheduler.max_model_len == 1100
    assert row_experiment(_row(gemm_quant_mode=""), "x:3", None).kv_cache.dtype == "auto"
    # 12 x 8 requests, all measured: from the clients' simultaneous start to the last round
    assert config.workload.num_requests == 12 * 8


def test_a_row_runs_the_engine_profile_of_its_backends_version(tmp_path):
    """vLLM 0.14 and later (async scheduling by default, host work off the critical path) run ``vllm-0.14``; earlier
    versions and rows that state none run ``vllm``; a version's suffix (rc, post) does not count; other backends
    have one profile. The validation's output names the profile each row ran, and its slices split by it."""
    from simulator.fidelity.silicon import release, row_engine

    assert [release(v) for v in ("0.18.0", "1.0.0rc3", "0.5.1.post1", "v0.14", "", "main")] == [
        (0, 18, 0), (1, 0, 0), (0, 5, 1), (0, 14), None, None]
    assert [row_engine(_row(backend_version=v)) for v in ("0.18.0", "0.14", "0.13.9", "0.12.0", "")] == [
        "vllm-0.14", "vllm-0.14", "vllm", "vllm", "vllm"]
    assert row_engine(_row(backend="sglang", backend_version="0.18.0")) == "sglang"
    assert row_experiment(_row(backend_version="0.18.0"), "x:2", None).engine == "vllm-0.14"
    runs = tmp_path / "runs.csv"
    write_csv(runs, [*HEADER, "backend_version"],
              [_row(id="a", osl="4", backend_version="0.18.0"), _row(id="b", osl="4", backend_version="")])
    frame = validate_runs(runs)
    assert list(frame["engine"]) == ["vllm-0.14", "vllm"] and list(frame["status"]) == ["ok", "ok"]
    assert frame.loc[0, "predicted_tpot_ms"] < frame.loc[1, "predicted_tpot_ms"]  # 1.0 ms a step, not 2 + 4 x 0.04


def test_a_quantised_checkpoint_runs_in_the_format_it_ships():
    """A row's precision names the weights' family; no server converts a quantised checkpoint: DeepSeek-V3 ships
    128 x 128 block-scaled fp8, so its "fp8" row serves fp8_block weights (with the recipe's fp8 cache for fp8
    rows), and gpt-oss-120b's "nvfp4" row its MXFP4 experts (with the fp8 cache of NVFP4 rows); Llama-3.1-8B's
    16-bit checkpoint is quantised per tensor, as its fp8 row says (above)."""
    deepseek = row_experiment(_row(model_path="deepseek-ai/DeepSeek-V3", gemm_quant_mode="fp8", tp_size="8",
                                   moe_tp_size="8"), "x:2", None)
    assert (deepseek.dtype, deepseek.kv_cache.dtype) == ("fp8_block", "fp8")
    gpt_oss = row_experiment(_row(model_path="openai/gpt-oss-120b", gemm_quant_mode="nvfp4", tp_size="2",
                                  moe_tp_size="2"), "x:3", None)
    assert (gpt_oss.dtype, gpt_oss.kv_cache.dtype) == ("mxfp4", "fp8")


def test_a_row_narrower_than_the_shipped_checkpoint_ran_a_quantised_derivative():
    """A row stating fewer bits per weight than the checkpoint ships ran a quantised derivative of it (NVIDIA's
    NVFP4 DeepSeek-R1 under the base id): its weights are sized and priced in the row's format — 4.5 bits per weight,
    not 8, so DeepSeek-R1's 671 B parameters fit 4 B200s (8-bit weights alone, 157 GiB per GPU, do not)."""
    row = _row(model_path="deepseek-ai/DeepSeek-R1", system="b200_sxm", precision="fp4", gemm_quant_mode="nvfp4",
               tp_size="4", moe_tp_size="4", isl="1024", osl="1024")
    config = row_experiment(row, "x:2", None)
    assert config.dtype == "nvfp4"
    wider = row_experiment(_row(model_path="deepseek-ai/DeepSeek-R1", precision="fp8", gemm_quant_mode="fp8",
                                tp_size="8", moe_tp_size="8"), "x:3", None)
    assert wider.dtype == "fp8_block"  # the same width: served as it ships


def test_a_row_of_floats_on_an_integer_checkpoint_ran_a_derivative_in_its_own_format(tmp_path):
    """Kimi-K2.5 ships 4-bit integer experts (compressed-tensors, W4A16); a row stating NVFP4 — 4-bit floats, as wide —
    cannot have run those weights (no kernel runs integers as floats): it ran NVIDIA's NVFP4 derivative, served in the
    row's format, while its "int4" rows run the checkpoint as shipped. (The format's numbers, not the model, decide:
    gpt-oss's MXFP4 floats stay MXFP4 under an "nvfp4" row, above.)"""
    config = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 256,
              "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
              "vocab_size": 1000, "max_position_embeddings": 4096, "n_routed_experts": 8, "num_experts_per_tok": 2,
              "moe_intermediate_size": 128, "first_k_dense_replace": 1, "n_shared_experts": 1,
              "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
              "v_head_dim": 32, "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
                  "group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "group_size": 32,
                                                                 "symmetric": True, "strategy": "group"}}}}}
    (tmp_path / "acme--Int4-MoE_config.json").write_text(json.dumps(config))
    floats = row_experiment(_row(model_path="acme/Int4-MoE", system="b200_sxm", precision="fp4",
                                 gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", tp_size="4", moe_tp_size="4"),
                            "x:2", tmp_path)
    integers = row_experiment(_row(model_path="acme/Int4-MoE", system="b200_sxm", precision="int4",
                                   gemm_quant_mode="int4_wo", moe_quant_mode="int4_wo", tp_size="4",
                                   moe_tp_size="4"), "x:3", tmp_path)
    assert (floats.dtype, integers.dtype) == ("nvfp4", "int4")
    assert served_format("bf16", "int4") == "int4"  # wider than it ships, of whatever kind: the checkpoint runs
    assert served_format("int8", "fp8_block") == "int8" and served_format("mxfp4", "int4") == "mxfp4"


@pytest.mark.parametrize("mode, dtype, kv", [
    ("fp8_static", "fp8", "fp8"), ("fp8_ootb", "fp8", "fp8"), ("sq", "int8", "auto"), ("int4_wo", "int4", "auto"),
    ("bfloat16", "bf16", "auto"), ("float16", "fp16", "auto"), ("nvfp4", "nvfp4", "fp8"),
])
def test_the_sources_quant_modes_name_their_weight_formats(mode, dtype, kv):
    """The file's source writes its own GEMM quant modes (aiconfigurator's GEMMQuantMode): static-scale and
    TensorRT-engine fp8 are W8A8 fp8 (with the recipe's fp8 cache), SmoothQuant W8A8 int8, int4_wo weight-only int4;
    a 16-bit checkpoint serves them as the row says."""
    config = row_experiment(_row(gemm_quant_mode=mode), "x:2", None)
    assert (config.dtype, config.kv_cache.dtype) == (dtype, kv)
    bare = row_experiment(_row(precision="fp4", system="b200_sxm"), "x:3", None)  # a precision alone: NVIDIA's fp4
    assert bare.dtype == "nvfp4"


def test_a_moe_degree_of_zero_is_not_stated():
    """The file writes 0 for a degree it does not state (vLLM rows without expert parallelism): moe_tp 0 is what
    expert parallelism leaves of the GPUs, as an empty cell is, not a degree of 1 (which over 4 GPUs would refuse the
    row); a moe_tp that does not cover the GPUs still is refused."""
    for moe_tp in ("", "0", "4"):
        config = row_experiment(_row(model_path="Qwen/Qwen3-30B-A3B", tp_size="4", moe_tp_size=moe_tp,
                                     moe_ep_size="0"), "x:2", None)
        assert (config.cluster.tensor_parallel, config.cluster.expert_parallel) == (4, 1)
    with pytest.raises(Unsupported, match="MoE parallelism moe_tp 2 x moe_ep 1 over 4 GPUs"):
        row_experiment(_row(model_path="Qwen/Qwen3-30B-A3B", tp_size="4", moe_tp_size="2"), "x:2", None)


@pytest.mark.parametrize("changes, reason", [
    ({"mode": "disagg"}, "prefill_num_workers is not stated"),
    ({"mode": "disagg", **{f"{role}_{key}": "1" for role in ("prefill", "decode")
                           for key in ("num_workers", "tp_size", "batch_size")}}, "silicon_concurrency) is not stated"),
    ({"mode": "hybrid"}, "x:7: mode must be agg or disagg, got 'hybrid'"),
    ({"attention_dp_size": "4", "silicon_data_source": "silicon_concurrency=16"},
     "attention data parallelism of a dense model"),
    ({"model_path": "Qwen/Qwen3-30B-A3B", "attention_dp_size": "4"},
     "attention data parallelism with 4 clients for 4 ranks of 4"),
    ({"model_path": "Qwen/Qwen3-30B-A3B", "silicon_data_source": "silicon_concurrency=10"},
     "x:7: 10 clients are not a whole number of ranks of batch_size 4"),
    ({"model_path": "Qwen/Qwen3-30B-A3B", "tp_size": "2", "moe_ep_size": "8"},
     "MoE parallelism moe_tp 1 x moe_ep 8 over 2 GPUs"),
    ({"system": "tpu_v5"}, "unknown system 'tpu_v5'"),
    ({"backend": "tgi"}, "unknown backend 'tgi'"),
    ({"isl": "many"}, "x:7: isl must be a number, got 'many'"),
    ({"batch_size": "2.5"}, "x:7: batch_size must be a positive integer"),
    ({"gemm_quant_mode": "w4a8_awq"}, "weight precision 'w4a8_awq'"),
    ({"moe_ep_size": "wide"}, "x:7: moe_ep_size must be a number, got 'wide'"),
    ({"model_path": "nobody/unknown-model"}, "unknown model"),
])
def test_rows_the_simulator_cannot_represent_say_why(changes, reason):
    with pytest.raises(Unsupported) as caught:
        row_experiment(_row(**changes), "x:7", None)
    assert reason in str(caught.value)


def test_a_disaggregated_row_becomes_its_two_pools():
    """Workers, per-rank parallelism and batch per role; the recipe's budget per pool; the stated clients; the KV
    link = the prefill worker's GPUs × the node's 50 GB/s network cards."""
    row = _row(mode="disagg", model_path="Qwen/Qwen3-30B-A3B", isl="1000", osl="100", batch_size="",
               silicon_data_source="silicon_concurrency=24", prefill_num_workers="2", prefill_tp_size="2",
               prefill_attention_dp_size="1", prefill_moe_tp_size="2", prefill_moe_ep_size="1",
               prefill_batch_size="1", decode_num_workers="1", decode_tp_size="1", decode_attention_dp_size="4",
               decode_moe_tp_size="1", decode_moe_ep_size="4", decode_batch_size="6")
    config = row_experiment(row, "x:7", None)
    cluster = config.cluster
    assert cluster.kind == "disaggregated" and config.workload.arrival.users == 24
    prefill, decode = cluster.prefill, cluster.decode
    assert (prefill.replicas, prefill.tensor_parallel, prefill.data_parallel, prefill.max_num_seqs) == (2, 2, 1, 1)
    assert (decode.replicas, decode.tensor_parallel, decode.data_parallel, decode.expert_parallel) == (1, 1, 4, 4)
    assert (prefill.max_num_batched_tokens, decode.max_num_batched_tokens) == (1 + 1000 + 1500, 6 + 1000 + 1500)
    assert cluster.transfer.bandwidth_gb_per_s == 2 * 50


def test_expert_parallel_rows_run_with_the_experts_over_the_tensor_parallel_gpus():
    config = row_experiment(_row(model_path="Qwen/Qwen3-30B-A3B", tp_size="4", moe_tp_size="1", moe_ep_size="4"),
                            "x:7", None)
    assert (config.cluster.tensor_parallel, config.cluster.expert_parallel) == (4, 4)
    dense = row_experiment(_row(tp_size="2", moe_ep_size="2"), "x:7", None)  # a dense model has no experts to spread
    assert dense.cluster.expert_parallel == 1


def test_attention_dp_rows_run_their_ranks():
    """vLLM: tp_size per rank, attention_dp_size ranks, the experts over dp × tp GPUs; TensorRT-LLM: the worker's
    tp_size GPUs divided into ranks (here inferred from 16 clients of per-rank batch 4)."""
    vllm = row_experiment(_row(model_path="Qwen/Qwen3-30B-A3B", tp_size="2", attention_dp_size="4", moe_ep_size="8",
                               moe_tp_size="1", silicon_data_source="silicon_concurrency=16"), "x:7", None)
    assert (vllm.cluster.data_parallel, vllm.cluster.tensor_parallel, vllm.cluster.expert_parallel) == (4, 2, 8)
    assert vllm.workload.arrival.users == 16 and vllm.scheduler.max_num_seqs == 4
    trt = row_experiment(_row(backend="trtllm", model_path="Qwen/Qwen3-30B-A3B", tp_size="4", moe_ep_size="4",
                              moe_tp_size="1", silicon_data_source="silicon_concurrency=16"), "x:7", None)
    assert (trt.cluster.data_parallel, trt.cluster.tensor_parallel, trt.cluster.expert_parallel) == (4, 1, 4)


@pytest.mark.parametrize("tp, dp, moe_tp, ep, gpus", [("1", "8", "1", "8", 8), ("1", "16", "2", "8", 16),
                                                      ("2", "4", "1", "8", 8), ("4", "4", "1", "4", 4)])
def test_trtllm_dep_rows_read_the_convention_their_moe_columns_confirm(tp, dp, moe_tp, ep, gpus):
    """"DEP8" is tp_size 1 with 8 attention-DP ranks and moe_ep 8 (8 GPUs: tp × ranks, as the MoE columns span);
    TensorRT-LLM's own reading (tp_size = the worker's GPUs, split into ranks) holds where the ranks divide tp_size
    and the MoE columns span tp_size GPUs. Either way the experts cover every GPU of the worker."""
    clients = str(int(dp) * 4)
    config = row_experiment(_row(backend="trtllm", model_path="Qwen/Qwen3-30B-A3B", tp_size=tp, attention_dp_size=dp,
                                 moe_tp_size=moe_tp, moe_ep_size=ep, silicon_data_source=f"silicon_concurrency="
                                 f"{clients}"), "x:7", None)
    cluster = config.cluster
    assert cluster.data_parallel * cluster.tensor_parallel == gpus == int(moe_tp) * int(ep)
    assert (cluster.data_parallel, cluster.expert_parallel) == (int(dp), int(ep))


@pytest.mark.parametrize("system, tp, moe_tp, ep, gpus", [
    ("b200_sxm", "64", "8", "8", 8),    # TP 8 / EP 8 written as tp × ep: wider than the node's 8-GPU NVLink domain
    ("b200_sxm", "16", "4", "4", 4),
    ("b200_sxm", "8", "1", "8", 8),     # the engines' own convention: moe_tp × moe_ep = tp_size GPUs
    ("b200_sxm", "16", "16", "1", 16),  # no expert parallelism to take out: a two-node TP group as stated
    ("b200_sxm", "16", "2", "8", 16),   # an expert group wider than moe_tp cannot be carved out of it
    ("gb200", "64", "8", "8", 64),      # inside a 72-GPU NVLink domain a 64-GPU group is what it says
])
def test_tp_size_with_the_expert_parallelism_multiplied_in(tmp_path, system, tp, moe_tp, ep, gpus):
    """The source writes some expert-parallel rows with ``tp_size`` = tp × ep (the same measurements appear as
    ``tp_size`` 8 / ``moe_ep_size`` 8 elsewhere in its B200 file): a ``tp_size`` wider than the system's NVLink
    domain whose ``moe_tp`` × ``moe_ep`` equals it, 1 < ``moe_ep`` ≤ ``moe_tp``, is ``moe_tp`` GPUs."""
    from simulator.fidelity.silicon import TP_TIMES_EP, row_gpus, tensor_parallel

    row = _row(backend="sglang", model_path="Qwen/Qwen3-30B-A3B", system=system, tp_size=tp, moe_tp_size=moe_tp,
               moe_ep_size=ep)
    assert tensor_parallel(row, "x:2") == gpus and row_gpus(row, "x:2") == (gpus, 4)
    if gpus <= 8:
        cluster = row_experiment(row, "x:2", None).cluster
        assert (cluster.tensor_parallel, cluster.expert_parallel, cluster.data_parallel) == (gpus, int(ep), 1)
    if gpus != int(tp):  # the run says which rule it took
        path = tmp_path / "runs.csv"
        _write(path, [row])
        assert validate_runs(path)[["status", "reading"]].values.tolist() == [["ok", TP_TIMES_EP]]


def test_the_tp_times_ep_reading_leaves_attention_dp_rows_alone():
    """The reading is of rows with one attention rank: where the clients imply ranks (64 clients of per-rank batch
    8: 8 ranks) ``tp_size`` stays as stated and the MoE columns must span the ranks' GPUs (8 × 64 = 512, which
    8 × 8 does not); a TensorRT-LLM worker of 8 GPUs in 4 ranks whose MoE columns span neither reading (1 × 4) is
    refused as before."""
    from simulator.fidelity.silicon import tensor_parallel

    ranks = _row(backend="sglang", model_path="Qwen/Qwen3-30B-A3B", system="b200_sxm", tp_size="64",
                 moe_tp_size="8", moe_ep_size="8", batch_size="8", silicon_data_source="silicon_concurrency=64")
    assert tensor_parallel(ranks, "x:2") == 64
    with pytest.raises(Unsupported, match="MoE parallelism moe_tp 8 x moe_ep 8 over 512 GPUs"):
        row_experiment(ranks, "x:2", None)
    trt = _row(backend="trtllm", model_path="Qwen/Qwen3-30B-A3B", system="b200_sxm", tp_size="8",
               attention_dp_size="4", moe_tp_size="1", moe_ep_size="4", silicon_data_source="silicon_concurrency=16")
    with pytest.raises(Unsupported, match="MoE parallelism moe_tp 1 x moe_ep 4 over 8 GPUs"):
        row_experiment(trt, "x:2", None)


@pytest.mark.parametrize("dp, moe_tp, ep, tp, ranks", [
    ("64", "8", "8", "1", 8),   # DEP 8 written with the MoE TP multiplied in: 8 ranks, not 64
    ("16", "4", "4", "1", 4),
    ("4", "2", "2", "1", 2),
    ("64", "1", "64", "1", 64),  # the engines' own convention: moe_tp x moe_ep spans the ranks' GPUs
    ("16", "2", "8", "1", 16),   # an expert group wider than moe_tp: not the multiplied form
    ("16", "8", "2", "1", 16),   # nor one narrower (every multiplied row of the file has moe_tp = moe_ep)
    ("16", "4", "4", "2", 16),   # ranks of two GPUs: the MoE columns span 32, refused below as before
])
def test_attention_dp_size_with_the_moe_tp_multiplied_in(tmp_path, dp, moe_tp, ep, tp, ranks):
    """The source writes some TensorRT-LLM DEP rows with ``attention_dp_size`` = ``moe_tp_size`` x ``moe_ep_size``
    (the same measurements appear in its B200 file as ``attention_dp_size`` 8 / ``moe_tp_size`` 1 / ``moe_ep_size``
    8, the clients over 8): with ``tp_size`` 1 and ``moe_tp_size`` = ``moe_ep_size`` > 1 it is ``moe_ep_size`` ranks,
    each the clients over them, and both labels of one run are one experiment."""
    from simulator.fidelity.silicon import DP_TIMES_MOE_TP, attention_ranks, row_gpus

    clients = 256
    row = _row(backend="trtllm", model_path="Qwen/Qwen3-30B-A3B", system="b200_sxm", tp_size=tp,
               attention_dp_size=dp, moe_tp_size=moe_tp, moe_ep_size=ep, batch_size=str(clients // int(dp)),
               silicon_data_source=f"silicon_concurrency={clients}")
    assert attention_ranks(row, "x:2") == ranks
    if tp == "2":
        with pytest.raises(Unsupported, match="MoE parallelism moe_tp 4 x moe_ep 4 over 32 GPUs"):
            row_experiment(row, "x:2", None)
        return
    assert row_gpus(row, "x:2") == (ranks, clients)
    config = row_experiment(row, "x:2", None)
    cluster = config.cluster
    assert (cluster.data_parallel, cluster.tensor_parallel, cluster.expert_parallel) == (ranks, 1, int(ep))
    assert config.scheduler.max_num_seqs == clients // ranks
    if ranks != int(dp):  # the run says which rule it took, and the copy of the other label is the same run
        copy = {**row, "attention_dp_size": str(ranks), "moe_tp_size": "1", "batch_size": str(clients // ranks)}
        assert row_experiment(copy, "x:2", None) == config
        path = tmp_path / "runs.csv"
        write_csv(path, [*HEADER, "silicon_data_source"], [row])
        assert validate_runs(path)[["status", "reading"]].values.tolist() == [["ok", DP_TIMES_MOE_TP]]


def test_the_dep_reading_is_tensorrt_llms_and_needs_the_clients_it_implies():
    """The multiplied form is read only where the row states its clients and they are ``attention_dp_size`` ×
    ``batch_size`` (the source's per-rank batch), and only for TensorRT-LLM, whose rows alone write it: SGLang's
    16 ranks with MoE 4 × 4 are its own convention's 16 GPUs; a TensorRT-LLM row without its client count, or whose
    count is not the ranks' batch, is read as stated (and refused, as before)."""
    from simulator.fidelity.silicon import attention_ranks

    dep = {"model_path": "Qwen/Qwen3-30B-A3B", "system": "b200_sxm", "tp_size": "1", "attention_dp_size": "16",
           "moe_tp_size": "4", "moe_ep_size": "4", "batch_size": "4", "silicon_data_source": "silicon_concurrency=64"}
    sglang = _row(backend="sglang", **dep)
    assert attention_ranks(sglang, "x:2") == 16 and row_experiment(sglang, "x:2", None).cluster.data_parallel == 16
    unstated = _row(backend="trtllm", **{**dep, "silicon_data_source": ""})
    assert attention_ranks(unstated, "x:2") == 16
    with pytest.raises(Unsupported, match="4 clients for 16 ranks of 4"):
        row_experiment(unstated, "x:2", None)
    total = _row(backend="trtllm", **{**dep, "batch_size": "64"})  # a batch that is the whole client count
    assert attention_ranks(total, "x:2") == 16
    with pytest.raises(Unsupported, match="64 clients for 16 ranks of 64"):
        row_experiment(total, "x:2", None)


def test_a_row_that_ran_gets_the_memory_share_its_launch_needed(tmp_path):
    """DeepSeek-R1's FP8 weights on 4 × B200 (InferenceX's SGLang recipe passes --mem-fraction-static 0.95): at
    SGLang's default share the weights alone exceed what the share holds, so the sizing refuses the deployment; the
    row ran, so it is simulated at the raised share, and it is ok."""
    from simulator.api import run
    from simulator.errors import MemoryShortError
    from simulator.fidelity.silicon import RAISED_MEMORY_SHARE, RAISED_SHARE, raised_memory_share

    row = _row(backend="sglang", model_path="deepseek-ai/DeepSeek-R1", system="b200_sxm", precision="fp8",
               gemm_quant_mode="fp8", tp_size="4", moe_tp_size="4", isl="256", osl="8")
    config = row_experiment(row, "x:2", None)
    with pytest.raises(MemoryShortError, match="mem_fraction_static"):
        run(config)
    assert raised_memory_share(config).kv_cache.mem_fraction_static == RAISED_MEMORY_SHARE
    path = tmp_path / "runs.csv"
    _write(path, [row, _row()])
    frame = validate_runs(path)
    assert frame[["status", "reading"]].values.tolist() == [["ok", RAISED_SHARE], ["ok", ""]]
    assert f"rows read by a rule beyond their columns' values:\n     1  {RAISED_SHARE}" in runs_report(frame)
    # TensorRT-LLM's pool is a share of what the weights leave: no share lets them fit, so the row stays refused,
    # with the reason of its own configuration
    _write(path, [dict(row, backend="trtllm", tp_size="2", moe_tp_size="2")])
    frame = validate_runs(path)
    assert frame["status"][0].startswith(f"unsupported: {path}:2: ") and "GiB" in frame["status"][0]
    assert frame["reading"][0] == "" and str(RAISED_MEMORY_SHARE) not in frame["status"][0]


def test_the_measured_requests_start_with_every_client_at_once():
    """aiperf's warm-up drains before it measures, so the measured phase starts with all N clients sending to an
    idle server. SGLang, prefill-first with an 8192-token budget, clients with no turnaround: the first round's 8
    prompts of 512 tokens are one iteration, so each of them waits for all eight (the iteration of 8 × 512 tokens,
    by the cost model); the mean TTFT is over all 12 · 8 requests, that first round included."""
    from simulator.api import run
    from simulator.config.deployment import resolve
    from simulator.cost import build_cost_model
    from simulator.cost.base import IterationShape
    from simulator.fidelity.silicon import predict_row

    settings = RunSettings(client_jitter_ms=0.0)
    config = row_experiment(_row(backend="sglang", batch_size="8"), "x:7", None, settings)
    deployment = resolve(config)
    cost = build_cost_model(config, deployment.model, deployment.gpu(), deployment.engine)
    together = cost.iteration_time(IterationShape(((512, 0),) * 8)) * 1000
    requests = run(config).requests.sort_values("request_id")
    assert len(requests) == 12 * 8
    assert requests["ttft_ms"].iloc[:8].to_numpy() == pytest.approx([together] * 8, rel=1e-9)
    assert predict_row(config, 8, settings)[0] == pytest.approx(requests["ttft_ms"].mean(), rel=1e-12)
    # the client turnaround (fitted, 20 ms) is what spreads the later rounds: with none, clients that finish
    # together prefill together again
    spread = run(row_experiment(_row(backend="sglang", batch_size="8"), "x:7", None)).requests
    assert spread.sort_values("request_id")["ttft_ms"].iloc[8:].mean() < together


def test_validate_never_stops_on_a_bad_row(tmp_path):
    path = tmp_path / "runs.csv"
    _write(path, [_row(id="a"), _row(id="b", isl="lots"), _row(id="c", system="mars"),
                  _row(id="d", model_path="nobody/no-such-model"), _row(id="e", mode="disagg")])
    frame = validate_runs(path)
    assert frame["status"].tolist()[0] == "ok"
    assert frame["status"][1] == f"unsupported: {path}:3: isl must be a number, got 'lots'"
    assert frame["status"][2].startswith(f"unsupported: {path}:4: unknown system 'mars'")
    # every reason names its row once, whichever check refused it
    assert frame["status"][3].startswith(f"unsupported: {path}:5: model: unknown model 'nobody/no-such-model'")
    assert frame["status"][4].startswith(f"unsupported: {path}:6: disaggregated workers:")
    assert frame["status"].str.count(str(path)).tolist()[1:] == [1, 1, 1, 1]
    assert math.isnan(frame["predicted_ttft_ms"][1])
    # the good row ran to its measured window
    assert frame["predicted_ttft_ms"][0] > 0 and frame["predicted_tpot_ms"][0] > 0


def test_missing_column_or_unreadable_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "runs.csv"
    path.write_text("backend,model_path\nvllm,x\n")
    with pytest.raises(LLMSimError, match=r"runs.csv:1: missing column\(s\) \['system'"):
        read_runs(path)
    assert main(["validate", "--runs", str(path)]) == 2
    assert main(["validate", "--runs", str(tmp_path / "absent.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("llmsim: error: ") for line in err)


def test_cli_writes_every_row_back(tmp_path, capsys):
    path, out = tmp_path / "runs.csv", tmp_path / "out.csv"
    _write(path, [_row(id="a"), _row(id="b", mode="disagg")])
    assert main(["validate", "--runs", str(path), "--output", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["id"] for r in rows] == ["a", "b"]
    assert rows[0]["status"] == "ok" and rows[1]["status"].startswith(f"unsupported: {path}:3: disaggregated")
    assert {"predicted_ttft_ms", "predicted_tpot_ms", "subset"} <= set(rows[0])
    assert "disaggregated workers: prefill_num_workers is not stated" in capsys.readouterr().out


def test_rows_priced_as_another_generation(tmp_path, capsys):
    """``validate --runs --generation``: the row's GPU is its spec sheet with that generation's fit
    (``h100-sxm@ampere``), slower here (Ampere's GEMMs reach 0.73 of the peak where Hopper's reach 0.81); an unknown
    generation is one line and status 2."""
    from simulator.catalog import load_hardware, load_model
    from simulator.config.deployment import resolve
    from simulator.cost import build_cost_model
    from simulator.cost.base import IterationShape

    as_ampere = row_experiment(_row(), "x:2", None, RunSettings(generation="ampere"))
    own = row_experiment(_row(), "x:2", None)
    assert (as_ampere.hardware, own.hardware) == ("h100-sxm@ampere", "h100-sxm")
    hardware = load_hardware(as_ampere.hardware)
    assert hardware.generation == "ampere" and hardware.memory_bandwidth_gb_per_s == 3350
    model, prompt = load_model(own.model), IterationShape(((512, 0),), 0, 0)
    engine = resolve(own).engine
    slower = build_cost_model(as_ampere, model, hardware, engine).iteration_time(prompt)
    assert slower > build_cost_model(own, model, load_hardware(own.hardware), engine).iteration_time(prompt)
    path = tmp_path / "runs.csv"
    _write(path, [_row()])
    assert main(["validate", "--runs", str(path), "--generation", "volta"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--generation: unknown 'volta'" in err[0]


def test_validate_puts_a_copy_of_a_fit_row_in_the_fit_subset(tmp_path):
    """The subset column follows the file's copies: a held-out id's row that repeats a fit row's measurement is
    reported as fit, a row of its own is held out; the run column names each row's run by the file line of its first
    row (the header is line 1), and rows that measure nothing are runs of their own."""
    path = tmp_path / "runs.csv"
    blank = {"silicon_ttft_ms": "", "silicon_tpot_ms": ""}
    _write(path, [_row(id="123456789"), _row(id="a"), _row(id="a", silicon_tpot_ms="9"), _row(id="b", **blank),
                  _row(id="b", **blank)])
    frame = validate_runs(path, progress=False)
    assert list(frame["subset"]) == ["fit", "fit", "holdout", "holdout", "holdout"]
    assert list(frame["run"]) == [2, 2, 4, 5, 6]
    kept = validate_runs(path, keep=lambda row: row["id"] == "a", progress=False)
    assert list(kept["subset"]) == ["fit", "holdout"]  # the copy's half is the file's, not the kept rows'
    assert list(kept["run"]) == [2, 4]
    fit_line, held_out_line = (line for line in runs_report(frame).splitlines() if line.startswith(("fit:", "hold")))
    assert fit_line.startswith("fit: 2 of 2 rows ok;")
    assert fit_line.endswith("; the 2 rows hold 1 distinct measurements")
    assert held_out_line.startswith("holdout: 1 of 3 rows ok;") and "distinct" not in held_out_line  # 3 runs


@pytest.mark.slow
def test_every_h100_row_is_ok_or_unsupported_with_a_reason(shared_data):
    runs = shared_data / "silicon" / "silicon_h100.csv"
    frame = validate_runs(runs, shared_data / "model_configs", jobs=2)
    assert len(frame) == len(read_runs(runs))
    assert frame["status"].str.match(r"^(ok|unsupported: .+)$").all()
    dense = frame[frame["model_path"].isin(["Qwen/Qwen3-32B", "meta-llama/Llama-3.1-8B-Instruct",
                                            "meta-llama/Llama-3.1-70B"]) & (frame["mode"] == "agg")]
    assert (dense["status"] == "ok").all()
    # TPOT of the dense rows held out of the engine fits: docs/accuracy.md's table, with a margin
    held = dense[dense["subset"] == "holdout"]
    assert held["tpot_error"].median() <= 0.06  # 4.0% in docs/accuracy.md's table
    assert held["ttft_error"].median() <= 0.25  # 19.9%


def test_the_slice_table_gives_the_bias_beside_the_errors():
    """Two rows of one slice predicted 20% too slow and 10% too fast: median absolute error 15%, bias (the median
    signed error) +5%; a row that did not run counts in ``rows`` only. Their latencies (11 outputs): 100 + 10 · 10
    = 200 ms measured against 120 + 10 · 8 = 200 predicted (0%), 300 against 180 + 10 · 10 = 280 (−6.7%): the
    latency's bias −3.3%, while TTFT's is +5% and TPOT's −10%."""
    from simulator.fidelity.runs_report import slice_table

    frame = pd.DataFrame({"system": "h100_sxm", "backend": "vllm", "engine": "vllm", "model_path": "m", "mode": "agg",
                          "subset": "fit", "status": ["ok", "ok", "unsupported: x"], "osl": ["11", "11", "11"],
                          "silicon_ttft_ms": [100.0, 200.0, 50.0], "predicted_ttft_ms": [120.0, 180.0, np.nan],
                          "silicon_tpot_ms": [10.0, 10.0, 5.0], "predicted_tpot_ms": [8.0, 10.0, np.nan],
                          "ttft_error": [0.2, 0.1, np.nan], "tpot_error": [0.2, 0.0, np.nan]})
    row = slice_table(frame).iloc[0]
    assert (row["rows"], row["ok"]) == (3, 2)
    assert (row["ttft_median_pct"], row["ttft_bias_pct"], row["tpot_bias_pct"]) == (15.0, 5.0, -10.0)
    assert row["e2e_bias_pct"] == pytest.approx(-3.3)


def test_vllm_and_trtllm_rows_run_with_the_benchmark_recipes_token_budget():
    """aiconfigurator's benchmark rule for aggregated vLLM and TensorRT-LLM workers: max-num-batched-tokens
    (max_num_tokens) = max_batch_size + isl + 1500 (max_batch_size = the concurrency); SGLang rows keep their
    server default; TensorRT-LLM and SGLang rows schedule asynchronously (their profiles), vLLM's do not."""
    from simulator.fidelity.silicon import recipe_token_budget

    assert recipe_token_budget("vllm", 1024, 8) == 8 + 1024 + 1500
    assert recipe_token_budget("sglang", 4096, 64) == 4096 + 1500
    vllm = row_experiment(_row(isl="1024", batch_size="16"), "x:7", None)
    assert vllm.scheduler.max_num_batched_tokens == 16 + 1024 + 1500
    trtllm = row_experiment(_row(backend="trtllm", isl="1024", batch_size="16"), "x:7", None)
    assert trtllm.scheduler.max_num_batched_tokens == 16 + 1024 + 1500
    assert trtllm.scheduler.async_scheduling and not vllm.scheduler.async_scheduling
    sglang = row_experiment(_row(backend="sglang", isl="1024", batch_size="16"), "x:7", None)
    assert sglang.scheduler.max_num_batched_tokens == 8192 and sglang.scheduler.async_scheduling
    server = RunSettings(token_budgets=(("vllm", "server"),))
    assert row_experiment(_row(isl="1024"), "x:7", None, server).scheduler.max_num_batched_tokens == 8192


def test_requests_per_client_sets_the_measured_requests(tmp_path, capsys, monkeypatch):
    """``--requests-per-client N``: N requests from each of the row's clients, all measured and nothing more (4
    clients × 10 = 40, where the default is 12 per client but at least 48 in all); the run's requests are those."""
    from simulator.api import run

    row = _row(batch_size="4", isl="64", osl="4")
    assert row_experiment(row, "x:2", None).workload.num_requests == 48
    config = row_experiment(row, "x:2", None, RunSettings(measured=10, min_measured=10))
    assert config.workload.num_requests == 40 and len(run(config).requests) == 40
    path = tmp_path / "runs.csv"
    _write(path, [row])
    import simulator.cli.fidelity as command

    seen = []
    real = command.validate_runs
    monkeypatch.setattr(command, "validate_runs", lambda *args: seen.append(args[3]) or real(*args))
    assert main(["validate", "--runs", str(path), "--requests-per-client", "10"]) == 0
    assert (seen[0].measured, seen[0].min_measured) == (10, 10) and "1 of 1 rows ok" in capsys.readouterr().out
    for bad in ("0", "101", "many"):
        with pytest.raises(SystemExit) as stop:  # argparse refuses the value: one line, status 2
            main(["validate", "--runs", str(path), "--requests-per-client", bad])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and "argument --requests-per-client" in err and err.count("\n") == 1


def test_a_length_range_draws_each_requests_lengths_from_it(tmp_path, capsys):
    """``RunSettings.length_range`` (``--length-range LOW:HIGH``): prompts uniform on [0.8·1000, 1.0·1000] = [800,
    1000] tokens and outputs on [80, 100], the server's max_model_len the longest of both (1100); the requests of
    the run take values all over that range, none outside it. Without it every request is exactly isl and osl."""
    from simulator.api import run

    row = _row(isl="1000", osl="100")
    config = row_experiment(row, "x:2", None, RunSettings(length_range=(0.8, 1.0)))
    assert (config.workload.input_tokens.min, config.workload.input_tokens.max) == (800, 1000)
    assert (config.workload.output_tokens.min, config.workload.output_tokens.max) == (80, 100)
    assert config.scheduler.max_model_len == 1100
    requests = run(config).requests
    assert requests["input_tokens"].between(800, 1000).all() and requests["input_tokens"].nunique() > 10
    assert requests["output_tokens"].between(80, 100).all() and requests["output_tokens"].nunique() > 5
    fixed = row_experiment(row, "x:2", None)
    assert fixed.workload.input_tokens.value == 1000 and fixed.scheduler.max_model_len == 1100
    for bad in ("1.2:0.8", "0:1", "abc", "0.8"):
        with pytest.raises(SystemExit) as stop:  # argparse refuses the value: one line, status 2
            main(["validate", "--runs", str(tmp_path / "runs.csv"), "--length-range", bad])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and "argument --length-range" in err and err.count("\n") == 1


def test_a_row_states_its_benchmark_client(tmp_path, capsys, monkeypatch):
    """A ``benchmark_client`` column names each row's client: ``inferencex`` draws prompts on [0.8·1000, 1000] =
    [800, 1000] tokens and sends 10 requests from each of 4 clients (40, all measured), a row that states none takes
    the run's client (aiperf's fixed lengths, 12 × 4 = 48 requests), an unknown name is unsupported with its reason.
    ``--client NAME`` sets the run's client; a row that states another keeps its own, whatever the options."""
    stated = row_settings(_row(benchmark_client="inferencex"), RunSettings(), "x:2")
    config = row_experiment(_row(isl="1000", batch_size="4"), "x:2", None, stated)
    assert (config.workload.input_tokens.min, config.workload.input_tokens.max) == (800, 1000)
    assert config.workload.num_requests == 40
    plain = row_experiment(_row(isl="1000", batch_size="4"), "x:3", None, row_settings(_row(), RunSettings(), "x:3"))
    assert plain.workload.input_tokens.value == 1000 and plain.workload.num_requests == 48
    inferencex = RunSettings().with_client(CLIENTS["inferencex"])
    assert row_settings(_row(benchmark_client=" AIPerf "), inferencex, "x:4") == RunSettings()  # the row wins
    with pytest.raises(Unsupported, match=r"x:5: benchmark_client 'locust' is not a benchmark client llmsim knows "
                                          r"\(known: aiperf, inferencex\)"):
        row_settings(_row(benchmark_client="locust"), RunSettings(), "x:5")

    # the same row four times: stating inferencex, stating nothing, stating aiperf, stating an unknown client
    path = tmp_path / "runs.csv"
    same = {"isl": "200", "osl": "8", "batch_size": "4"}
    write_csv(path, [*HEADER, "benchmark_client"],
              [_row(id="a", benchmark_client="InferenceX", **same), _row(id="b", **same),
               _row(id="c", benchmark_client="aiperf", **same), _row(id="d", benchmark_client="locust", **same)])
    default = validate_runs(path, None)
    assert default["status"].tolist()[:3] == ["ok", "ok", "ok"]
    assert default["status"][3] == (f"unsupported: {path}:5: benchmark_client 'locust' is not a benchmark client "
                                    "llmsim knows (known: aiperf, inferencex)")
    assert default["client"].tolist() == ["inferencex", "aiperf", "aiperf", "locust"]
    under_inferencex = validate_runs(path, None, settings=inferencex)
    assert under_inferencex["client"].tolist() == ["inferencex", "inferencex", "aiperf", "locust"]
    predicted = ["predicted_ttft_ms", "predicted_tpot_ms"]
    # row a runs InferenceX's client under either run, as row b does only when the run names it; row c keeps aiperf
    assert default.loc[0, predicted].tolist() == under_inferencex.loc[1, predicted].tolist()
    assert default.loc[0, predicted].tolist() == under_inferencex.loc[0, predicted].tolist()
    assert default.loc[1, predicted].tolist() == under_inferencex.loc[2, predicted].tolist()
    assert default.loc[0, "predicted_ttft_ms"] != default.loc[1, "predicted_ttft_ms"]

    import simulator.cli.fidelity as command

    seen = []
    real = command.validate_runs
    monkeypatch.setattr(command, "validate_runs", lambda *args: seen.append(args[3]) or real(*args))
    assert main(["validate", "--runs", str(path), "--client", "inferencex"]) == 0
    captured = capsys.readouterr()
    assert seen[0] == inferencex and "1  benchmark_client 'locust' is not a benchmark client" in captured.out
    assert "3 of 4 rows name a benchmark_client and ran their own; the others ran inferencex" in captured.err
    assert main(["validate", "--runs", str(path), "--client", "inferencex", "--requests-per-client", "3"]) == 0
    assert (seen[1].length_range, seen[1].measured, seen[1].min_measured) == ((0.8, 1.0), 3, 3)
    assert seen[1].client == "inferencex --requests-per-client 3"
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:  # argparse refuses the name: one line, status 2
        main(["validate", "--runs", str(path), "--client", "locust"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "argument --client" in err and err.count("\n") == 1
