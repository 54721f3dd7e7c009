"""Accuracy against the real measurements in ../shared/data (skipped when absent).

The bounds are the issue's targets — median ≤ 8% and p90 ≤ 20% (GEMMs; whole-iteration prefill and decode),
all-reduce median ≤ 15% (NCCL 2.27 on A100; the older DGX timings where bandwidth-bound) — except whole-iteration
prefill p90, which is 24% today: its bound (25%) guards against regressions until the model meets 20% (see
docs/accuracy.md). The kernel-table bounds hold on the GPUs whose generation has a fit of its own (:func:`fitted`):
a GPU that borrows another generation's fit (Blackwell's tables, until Blackwell is fitted) is extrapolated.
"""

from __future__ import annotations

import pytest

from simulator.catalog import load_hardware
from simulator.catalog.generations import borrowed_generation
from simulator.catalog.hardware import with_fit
from simulator.fidelity.errors import overall
from simulator.fidelity.kernels import GPUS
from simulator.fidelity.network import network_errors
from simulator.fidelity.operators import gemm_errors
from simulator.fidelity.splitwise import splitwise_errors


def fitted(frame):
    """The rows of kernel-table GPUs whose generation has a fit of its own."""
    own_fit = {gpu for gpu, name in GPUS.items() if borrowed_generation(load_hardware(name).generation) is None}
    return frame[frame["gpu"].isin(own_fit)]


@pytest.mark.slow
def test_gemm_errors_on_a100_operator_timings(shared_data):
    frame = gemm_errors(shared_data, load_hardware("a100-80gb-sxm"))
    assert len(frame) > 10_000
    for op, rows in frame.groupby("op"):
        median, p90 = overall(rows)
        assert median <= 0.08 and p90 <= 0.20, op


@pytest.mark.slow
def test_all_reduce_errors_on_nccl_timings(shared_data):
    """The bandwidth-bound all-reduces (>= 16 MiB) of the older DGX timings (../shared/data/network), whose small
    messages carry their software stack's fixed cost (hardware_profiles/generations/ampere.yaml); NCCL 2.27's A100
    timings, which generation ampere is fitted on, are bounded by test_collective_kernel_tables."""
    frame = network_errors(shared_data)
    large = frame[(frame["op"] == "all_reduce") & (frame["system"] == "a100_dgx") & (frame["bytes"] >= 2**24)
                  & (frame["gpus"] <= frame["gpus_per_node"])]
    median, _ = overall(large)
    assert len(large) > 500 and median <= 0.15


@pytest.mark.slow
def test_collective_kernel_tables(shared_data):
    """NCCL's four collectives as two protocols, per GPU and op (the issue's target: median ≤ 8%, p90 ≤ 20%; A100's
    all-gather is at 8.3%; B200's medians 4.2–9.9%, p90 up to 31.4%, its 8-GPU reduce-scatter), and each framework's
    own all-reduce on every fitted GPU as its engine profile runs it (one-shot, two-shot, NCCL above its largest
    message; the profiles' costs per generation are fitted on these rows; vLLM's 2-GPU B200 table's p90 is 50.7%)."""
    from simulator.fidelity.kernels import custom_allreduce_kernel_errors, nccl_kernel_errors

    nccl = fitted(nccl_kernel_errors(shared_data / "kernels"))
    for (gpu, op), rows in nccl.groupby(["gpu", "op"]):
        median, p90 = overall(rows)
        assert median <= {"h100_sxm": 0.08, "b200_sxm": 0.10}.get(gpu, 0.09), (gpu, op)
        assert p90 <= (0.32 if gpu == "b200_sxm" else 0.20), (gpu, op)
    custom = fitted(custom_allreduce_kernel_errors(shared_data / "kernels"))
    for (gpu, framework), rows in custom.groupby(["gpu", "framework"]):
        median, p90 = overall(rows)
        assert len(rows) == 69 and median <= 0.09 and p90 <= (0.55 if gpu == "b200_sxm" else 0.25), (gpu, framework)


@pytest.mark.slow
def test_gemm_kernel_tables(shared_data):
    """Each framework's GEMM tables at its profile's GEMM rates (SGLang's own, fitted on 2,000 timings per format;
    vLLM's and TensorRT-LLM's the pooled fit, their own rates not taken, see docs/accuracy.md): SGLang's own fit them at
    least as well as the pooled rates (mean |log error| over its formats, per GPU); every table within today's
    errors (the issue's 5% / 12% is not met: fp8 kernels switch at m = 129 and 257, and TensorRT-LLM's fp8 table,
    22.0%, pays a dynamic activation-quantisation kernel of ~12.5 µs that the pooled fit's 3 µs does not follow).
    H100's bf16 tables, with the GEMM main loop's serial latency (gemm_k_latency_ns), within 7.5% / 20% (5.1-7.1% /
    16.6-19.3%; without it 6.0-8.1% / 19.1-21.7%). TensorRT-LLM's A100 SmoothQuant int8 and weight-only int4 tables,
    priced by their own kernels (``gemm_kernel_by_dtype``, fitted on every other weight shape: 9.9% / 33.0% and
    11.1% / 29.2% over all of their rows; 21.5% / 48.7% and 27.6% / 61.2% before), within 12% / 36% and 13% / 32%."""
    from simulator.fidelity.calibrate import score
    from simulator.fidelity.kernels import gemm_kernel_errors

    own = fitted(gemm_kernel_errors(shared_data / "kernels"))
    pooled = gemm_kernel_errors(shared_data / "kernels", engines={})
    for gpu, rows in own[own["framework"] == "sglang"].groupby("gpu"):
        assert sum(score(part) for _, part in rows.groupby("dtype")) < sum(
            score(part) for _, part in pooled.loc[rows.index].groupby("dtype")), gpu
    for (gpu, framework, dtype), rows in own.groupby(["gpu", "framework", "dtype"]):
        median, p90 = overall(rows)
        wide = dtype != "bfloat16"
        # B200's block-fp8 tables: SGLang's 32.2% (its DeepGEMM kernels), TensorRT-LLM's per-tensor fp8 28.8%
        quantised = (0.33, 0.55) if gpu == "b200_sxm" else (0.23, 0.55)
        bound = {"int4_wo": (0.13, 0.32), "sq": (0.12, 0.36)}.get(dtype, quantised if wide else (0.09, 0.25))
        assert median <= bound[0] and p90 <= bound[1], (gpu, framework, dtype)
        if gpu == "h100_sxm" and not wide:
            assert median <= 0.075 and p90 <= 0.20, (framework, dtype)


@pytest.mark.slow
def test_attention_kernel_tables(shared_data):
    """Each framework's attention tables priced with its own kernels (its engine profile's attention_by_generation,
    fitted on 2,000 timings of each phase; most rows are held out) fit them at least as well as the generation's
    pooled parameters do — the mean |log error| over prefill and decode, per GPU and framework — and within today's
    errors (the issue's 8% / 20% is not met: p90 up to 44%, the fits' score being the mean |log error|; see
    docs/accuracy.md).
    Prefill, with its costs per query row and per query tile, meets the 8% median on A100 and is within 15% on
    H100; every framework's decode, with its fp8-cache kernel apart and its waves over the SMs, within 14% on both
    (TensorRT-LLM's 13.9% and 15.0% before the waves; vLLM's A100 decode 10.2 -> 13.5% with them, its batch of one
    running 6 µs faster than batches of 2-16, which one wave's cost cannot follow, while its p90 falls 44.7 ->
    29.1%)."""
    from simulator.fidelity.calibrate import score
    from simulator.fidelity.kernels import attention_kernel_errors

    own = fitted(attention_kernel_errors(shared_data / "kernels"))
    pooled = attention_kernel_errors(shared_data / "kernels", engines={})
    for (gpu, framework), rows in own.groupby(["gpu", "framework"]):
        assert sum(score(phase) for _, phase in rows.groupby("phase")) <= sum(
            score(phase) for _, phase in pooled.loc[rows.index].groupby("phase")), (gpu, framework)
        for phase, part in rows.groupby("phase"):
            median, p90 = overall(part)
            bound = {"h100_sxm": 0.15, "a100_sxm": 0.08, "b200_sxm": 0.13}[gpu] if phase == "prefill" else 0.14
            # SGLang's B200 prefill tables: p90 76% (12.7% median)
            assert median <= bound and p90 <= (0.8 if gpu == "b200_sxm" else 0.5), (gpu, framework, phase)


@pytest.mark.slow
def test_mla_kernel_tables(shared_data):
    """SGLang's and TensorRT-LLM's MLA tables priced with each framework's own MLA kernels (mla_by_generation, fitted
    on 2,000 timings per cache format and phase) fit them better than the attention parameters at MLA's shapes do —
    the mean |log error| per GPU, framework and phase — and within today's errors: H100 decode 5.6% (SGLang) and
    7.7% (TensorRT-LLM) at the median against 29% and 12% before, prefill 19% and 7.4%; TensorRT-LLM's A100 decode
    33% (a few heads' latent cache streamed far slower than many heads': a kernel without split-KV parallelism)."""
    from simulator.fidelity.calibrate import score
    from simulator.fidelity.kernels import mla_kernel_errors

    own = fitted(mla_kernel_errors(shared_data / "kernels"))
    pooled = mla_kernel_errors(shared_data / "kernels", engines={})
    bounds = {("h100_sxm", "decode"): 0.10, ("h100_sxm", "prefill"): 0.21, ("a100_sxm", "decode"): 0.35,
              ("a100_sxm", "prefill"): 0.08, ("b200_sxm", "decode"): 0.10, ("b200_sxm", "prefill"): 0.05}
    for (gpu, framework, phase), rows in own.groupby(["gpu", "framework", "phase"]):
        assert score(rows) < score(pooled.loc[rows.index]), (gpu, framework, phase)
        assert overall(rows)[0] <= bounds[gpu, phase], (gpu, framework, phase)


@pytest.mark.slow
def test_whole_iteration_errors_on_splitwise(shared_data):
    """splitwise-sim's A100 iterations priced by the Ampere fit pooled over the three frameworks' kernels: within 8%
    median (decode 7.0%) and 8.5% for prefill (8.1%: its attention, a mix of three frameworks' kernels, prices every
    prompt ~1% above the former fit; its rows scatter by ±30%)."""
    frame = splitwise_errors(shared_data, load_hardware("a100-80gb-sxm"), "splitwise")
    for phase, rows in frame.groupby("phase"):
        median, p90 = overall(rows)
        assert median <= {"prefill": 0.085, "decode": 0.08}[phase], phase
        assert p90 <= 0.20, phase


def test_kernel_tables_are_read_in_their_units(tmp_path):
    """Synthetic tables in the layout of ../shared/data/kernels, timed with the model itself: zero error only if
    latencies are read as ms, fp8_block runs at the fp8 peak, NCCL message sizes count each row's elements and its
    element type is kept (an int8 all-reduce of 128 MiB on 8 H100s is the ring's; a 16-bit one of 128 MiB NVLS's)."""
    import pandas as pd

    from simulator.cost.collectives import collective_time
    from simulator.cost.gemm import GemmModel
    from simulator.fidelity.kernels import gemm_kernel_errors, nccl_kernel_errors

    hw = load_hardware("h100-sxm")
    gemm_dir = tmp_path / "h100_sxm" / "gemm" / "sglang" / "1.0"
    gemm_dir.mkdir(parents=True)
    shapes = [(1, 4096, 4096), (512, 14336, 4096), (8192, 4096, 14336), (64, 32, 4096)]  # the last is too small
    rows = [{"gemm_dtype": dtype, "m": m, "n": n, "k": k,
             "latency": GemmModel(hw, {"bfloat16": "bf16", "fp8_block": "fp8_block"}[dtype]).time(m, n, k) * 1e3}
            for dtype in ("bfloat16", "fp8_block") for m, n, k in shapes]
    pd.DataFrame(rows).to_parquet(gemm_dir / "gemm_perf.parquet")
    gemm = gemm_kernel_errors(tmp_path, engines={})  # the pooled fit: the table was timed with it
    assert len(gemm) == 6 and gemm["error"].max() < 1e-9
    nccl_dir = tmp_path / "h100_sxm" / "comm" / "nccl" / "2.0"
    nccl_dir.mkdir(parents=True)
    rows = [{"op_name": "all_reduce", "nccl_dtype": "half", "num_gpus": n, "message_size": size,
             "latency": collective_time(hw, "all_reduce", n, 2 * size) * 1e3} for n in (2, 8) for size in (256, 2**26)]
    rows.append({"op_name": "all_reduce", "nccl_dtype": "int8", "num_gpus": 8, "message_size": 2**27,  # the ring
                 "latency": collective_time(hw, "all_reduce", 8, 2**27, "int8") * 1e3})
    rows.append({"op_name": "alltoall", "nccl_dtype": "int8", "num_gpus": 4, "message_size": 2**20,
                 "latency": collective_time(hw, "all_to_all", 4, 2**20) * 1e3})  # int8: one byte per element
    rows.append({"op_name": "broadcast", "nccl_dtype": "half", "num_gpus": 2, "message_size": 256, "latency": 1.0})
    pd.DataFrame(rows).to_parquet(nccl_dir / "nccl_perf.parquet")
    nccl = nccl_kernel_errors(tmp_path)
    assert len(nccl) == 6 and nccl["error"].max() < 1e-9  # broadcast is not modelled: left out
    assert (nccl["dtype"] == "int8").sum() == 2  # an int8 all-reduce of 128 MiB is timed as the ring, not NVLS


def test_another_machines_kernel_tables_are_validated_not_skipped(tmp_path):
    """A GPU the shared data has no tables of (a B200, named as the data's source names systems) is its profile —
    its spec sheet with its generation's fit — and its tables in the same layout are read and priced with it, in the
    source's quant-mode names (nvfp4, SmoothQuant's sq as W8A8 int8, int4_wo as weight-only int4): timed with the
    B200 profile, every row's error is zero; timed with the H100's, the B200 profile is (2,250 × its fraction of
    peak) / (989.4 × the H100's) faster on a compute-bound 16-bit GEMM of 32,768 cubed (its HBM time a fortieth of its
    compute), as the validation says."""
    import pandas as pd

    from simulator.cost.gemm import GemmModel
    from simulator.fidelity.kernels import gemm_kernel_errors

    b200, h100 = load_hardware("b200"), load_hardware("h100-sxm")
    folder = tmp_path / "b200_sxm" / "gemm" / "trtllm" / "1.2"
    folder.mkdir(parents=True)
    formats = {"bfloat16": "bf16", "nvfp4": "nvfp4", "sq": "int8", "int4_wo": "int4"}
    shapes = [(1, 4096, 4096), (32768, 32768, 32768)]
    rows = [{"gemm_dtype": name, "m": m, "n": n, "k": k, "latency": GemmModel(b200, dtype).time(m, n, k) * 1e3}
            for name, dtype in formats.items() for m, n, k in shapes]
    pd.DataFrame(rows).to_parquet(folder / "gemm_perf.parquet")
    errors = gemm_kernel_errors(tmp_path, engines={})
    assert sorted(errors["dtype"].unique()) == sorted(formats) and set(errors["gpu"]) == {"b200_sxm"}
    assert errors["error"].max() < 1e-9
    rows = [{**row, "latency": GemmModel(h100, formats[row["gemm_dtype"]]).time(row["m"], row["n"], row["k"]) * 1e3}
            for row in rows]
    pd.DataFrame(rows).to_parquet(folder / "gemm_perf.parquet")
    big = gemm_kernel_errors(tmp_path, engines={}).query("dtype == 'bfloat16' and m == 32768").iloc[0]
    ratio = 2250 * b200.fit.gemm.flops_efficiency / (989.4 * h100.fit.gemm.flops_efficiency)
    assert big["measured_s"] / big["predicted_s"] == pytest.approx(ratio, rel=0.01)


def test_what_the_kernel_readers_do_not_price_is_said(tmp_path):
    """Nothing is dropped unsaid: a folder of a system the catalog does not name, and the rows of a priced family
    whose format columns hold values its reader does not price, counted by column and value (a weight-only int8
    GEMM, a broadcast, fp8 queries); the priced rows are not counted."""
    import pandas as pd

    from simulator.fidelity.kernels import left_out

    gemm = tmp_path / "h100_sxm" / "gemm" / "vllm" / "1.0"
    gemm.mkdir(parents=True)
    pd.DataFrame({"gemm_dtype": ["bfloat16", "int8_wo", "int8_wo", "fp8"], "m": 1, "n": 256, "k": 256,
                  "latency": 0.01}).to_parquet(gemm / "gemm_perf.parquet")
    nccl = tmp_path / "h100_sxm" / "comm" / "nccl" / "2.0"
    nccl.mkdir(parents=True)
    pd.DataFrame({"op_name": ["all_reduce", "broadcast"], "nccl_dtype": ["half", "half"], "num_gpus": 2,
                  "message_size": 256, "latency": 0.01}).to_parquet(nccl / "nccl_perf.parquet")
    attention = tmp_path / "h100_sxm" / "attention" / "sglang" / "1.0"
    attention.mkdir(parents=True)
    pd.DataFrame({"attn_dtype": ["bfloat16", "fp8", "fp8"], "kv_cache_dtype": ["bfloat16", "fp8", "int4"]}).to_parquet(
        attention / "context_attention_perf.parquet")
    (tmp_path / "tpu_v5" / "gemm").mkdir(parents=True)
    lines = left_out(tmp_path)
    assert lines[0].startswith("kernels/tpu_v5: a system the catalog does not name")
    assert lines[1:] == ["GEMM: 2 rows in formats not priced (gemm_dtype=int8_wo: 2)",
                         "NCCL: 1 row in formats not priced (op_name=broadcast: 1)",
                         "attention: 2 rows in formats not priced (attn_dtype=fp8: 2, kv_cache_dtype=int4: 1)"]


def test_decode_attention_rows_faster_than_hbm_are_dropped(tmp_path):
    """A decode row whose kernel would have read its K/V cache faster than the GPU's HBM peak did not read it: on an
    A100 (2,039 GB/s) 64 sequences of 8,192 cached tokens over 8 KV heads of width 128 in bf16 are 64 · 8,192 · 2 ·
    8 · 128 · 2 = 2.15 GB, at least 1.05 ms; timed at 0.64 ms (3.4 TB/s, as TensorRT-LLM's A100 table has it) the row
    is left out, at 1.2 ms it stays; a 1,024-token window caps the bytes (0.27 GB: 0.64 ms is possible then), and a
    prefill row is never dropped this way."""
    import pandas as pd

    from simulator.fidelity.kernels import attention_kernel_table

    folder = tmp_path / "a100_sxm" / "attention" / "trtllm" / "1.0"
    folder.mkdir(parents=True)
    row = {"batch_size": 64, "isl": 1, "num_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
           "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16"}
    decode = [{**row, "step": 8191, "window_size": window, "latency": latency}
              for window, latency in ((0, 0.64), (0, 1.2), (1024, 0.64))]
    pd.DataFrame(decode).to_parquet(folder / "generation_attention_perf.parquet")
    pd.DataFrame([{**row, "isl": 8192, "step": 0, "window_size": 0, "latency": 0.001}]).to_parquet(
        folder / "context_attention_perf.parquet")
    table = attention_kernel_table(tmp_path)
    kept = table[table["phase"] == "decode"]
    assert sorted(zip(kept["window"], kept["measured_s"], strict=True)) == [(0, 1.2e-3), (1024, 0.64e-3)]
    assert (table["phase"] == "prefill").sum() == 1


def test_moe_tables_are_read_with_balanced_routing_and_impossible_rows_dropped(tmp_path):
    """A synthetic fused-MoE table timed with the model under *balanced* routing (the collectors deal the T·k
    assignments round-robin: min(E, T·k) experts touched) has zero error; a row faster than reading its touched
    experts at the HBM peak, a power-law row and an expert-parallel row are left out."""
    import pandas as pd

    from simulator.cost.moe import moe_time
    from simulator.fidelity.kernels import moe_kernel_errors

    hw = load_hardware("h100-sxm")
    folder = tmp_path / "h100_sxm" / "moe" / "vllm" / "1.0"
    folder.mkdir(parents=True)
    base = {"moe_dtype": "fp8_block", "hidden_size": 4096, "inter_size": 1536, "topk": 8, "num_experts": 128,
            "moe_ep_size": 1, "distribution": "balanced"}
    rows = [{**base, "num_tokens": t, "moe_tp_size": tp,
             "latency": moe_time(hw, t, 4096, 1536, 8, 128, tp, dtype="fp8_block") * 1e3}
            for t in (1, 16, 512, 8192) for tp in (1, 4)]
    too_fast = 128 * 3 * 4096 * 1536 / (hw.memory_bandwidth_gb_per_s * 1e9) / 2 * 1e3  # half the time to read them
    rows += [{**base, "num_tokens": 64, "moe_tp_size": 1, "latency": too_fast},
             {**base, "num_tokens": 64, "moe_tp_size": 1, "distribution": "power_law_1.2", "latency": 1.0},
             {**base, "num_tokens": 64, "moe_tp_size": 1, "moe_ep_size": 8, "latency": 1.0}]
    pd.DataFrame(rows).to_parquet(folder / "moe_perf.parquet")
    errors = moe_kernel_errors(tmp_path, engines={})  # timed with the pooled fit, not vLLM's own block-fp8 kernel
    assert len(errors) == 8 and errors["error"].max() < 1e-9
    assert moe_time(hw, 16, 4096, 1536, 8, 128, distribution="uniform") < moe_time(hw, 16, 4096, 1536, 8, 128)
    with pytest.raises(ValueError, match="distribution: 'zipf'"):
        moe_time(hw, 16, 4096, 1536, 8, 128, distribution="zipf")


@pytest.mark.slow
def test_moe_kernel_errors_on_the_frameworks_tables(shared_data):
    """The fused-MoE layers of the three frameworks (no expert parallelism), each framework's kernel per format
    (moe_by_generation) judged on the model shapes its fit held out: closer than the pooled fit at the median for
    every format it was fitted on, and within 15% (today 4.5–14%; vLLM's per-tensor fp8 kernel, FlashInfer's
    CUTLASS, was 71% off with the pooled fit; on B200 within 20%, SGLang's bf16 18.7%). A kernel fitted on another
    framework's tables is judged on all of this one's rows (vLLM's MXFP4 x MXFP8 rows, two shapes, under SGLang's
    fit of FlashInfer's TensorRT-LLM-gen kernel: 19.4% against 29.7% pooled). Every framework's bf16 and block-fp8
    table, over all its shapes, stays within 21%, as before the per-framework fits; the formats measured on too few
    shapes keep the pooled fit."""
    from simulator.catalog.engines import load_engine
    from simulator.fidelity.kernel_fit import moe_held_out
    from simulator.fidelity.kernels import moe_kernel_errors

    own = fitted(moe_kernel_errors(shared_data / "kernels"))
    pooled = moe_kernel_errors(shared_data / "kernels", engines={})
    fitted_tables = 0
    for (gpu, framework, dtype), rows in own.groupby(["gpu", "framework", "dtype"]):
        generation = load_hardware(GPUS[gpu]).generation
        if dtype in load_engine(framework).moe_by_generation.get(generation, {}):
            held = moe_held_out(rows)  # None: too few shapes to fit on (its entry is another framework's fit)
            held_out = rows if held is None else rows[held]
            fitted_tables += 1
            assert overall(held_out)[0] < overall(pooled.loc[held_out.index])[0], (gpu, framework, dtype)
            assert overall(held_out)[0] <= (0.20 if gpu == "b200_sxm" else 0.15), (gpu, framework, dtype)
        if dtype in ("bf16", "fp8_block"):
            assert overall(rows)[0] <= 0.21, (gpu, framework, dtype)
    assert fitted_tables == 19  # 10 on A100 and H100, 9 on B200 (vLLM's 5 formats, SGLang's 4)


def test_routing_tables_take_the_collectors_power_law(tmp_path):
    """The power-law rows' load spread is the law's own: its closed-form CV against sampling the collector's law
    (seeded, E = 128, k = 8), and a synthetic TensorRT-LLM table timed with the busiest-rank model reads back with
    zero error; SGLang's EP rows and EP-1 rows are not read."""
    import numpy as np
    import pandas as pd

    from simulator.cost.moe import ExpertsModel
    from simulator.fidelity.kernels import moe_routing_kernel_errors, power_law_cv

    rng = np.random.default_rng(3)
    for tokens, alpha in ((4096, 1.2), (256, 1.01), (8, 1.2)):
        low, high = (1.0, 0.8 * tokens) if tokens * 8 > 128 else (0.01, 2.0)
        u = rng.random(2_000_000)
        x = ((high ** (1 - alpha) - low ** (1 - alpha)) * u + low ** (1 - alpha)) ** (1 / (1 - alpha))
        assert power_law_cv(tokens, 128, 8, alpha) == pytest.approx(x.std() / x.mean(), rel=0.03)
    hw = load_hardware("h100-sxm")
    model = ExpertsModel(hw, "bf16")
    base = {"moe_dtype": "bfloat16", "hidden_size": 4096, "inter_size": 1536, "topk": 8, "num_experts": 128,
            "moe_tp_size": 1}
    rows = []
    for t in (16, 1024):
        for ep in (2, 8):
            for dist, cv in (("balanced", 0.0), ("power_law_1.2", power_law_cv(t, 128, 8, 1.2))):
                latency = model.time(t, 4096, 1536, 2, 8, 128, ep, "balanced", cv) * 1e3
                rows.append({**base, "num_tokens": t, "moe_ep_size": ep, "distribution": dist, "latency": latency})
    rows.append({**base, "num_tokens": 64, "moe_ep_size": 1, "distribution": "balanced", "latency": 1.0})
    for framework in ("trtllm", "sglang"):
        folder = tmp_path / "h100_sxm" / "moe" / framework / "1.0"
        folder.mkdir(parents=True)
        pd.DataFrame(rows).to_parquet(folder / "moe_perf.parquet")
    errors = moe_routing_kernel_errors(tmp_path, engines={})  # timed with the pooled fit
    assert len(errors) == 8 and errors["error"].max() < 1e-9
    flat = moe_routing_kernel_errors(tmp_path, skew=False, engines={}).query(
        "distribution == 'power_law' and tokens == 1024")
    # the busiest rank of 1024 tokens' power law is what the rows time: without it, far from the 1e-9 read-back (the
    # more so the more ranks: EP 8's busiest rank carries more above the mean than EP 2's)
    assert (flat["error"] > 0.02).all() and flat.set_index("moe_ep")["error"].is_monotonic_increasing


@pytest.mark.slow
def test_busiest_rank_explains_the_power_law_tables(shared_data):
    """TensorRT-LLM's expert-parallel MoE rows with power-law routing: pricing the busiest rank from the law's spread
    brings the median error to within 5 points of its balanced rows', removing at least half of what the power-law
    rows' error exceeds theirs by when every rank is priced as the mean one."""
    from simulator.fidelity.kernels import moe_routing_kernel_errors

    skewed = moe_routing_kernel_errors(shared_data / "kernels")
    flat = moe_routing_kernel_errors(shared_data / "kernels", skew=False)
    h100 = skewed["gpu"] == "h100_sxm"
    balanced, _ = overall(skewed[h100 & (skewed["distribution"] == "balanced")])
    with_skew, _ = overall(skewed[h100 & (skewed["distribution"] == "power_law")])
    without, _ = overall(flat[h100 & (flat["distribution"] == "power_law")])
    assert with_skew <= balanced + 0.05 and without - balanced >= 2 * (with_skew - balanced), (balanced, with_skew,
                                                                                                  without)


def test_mla_tables_are_read_per_gpu_heads_and_decode_context(tmp_path):
    """A synthetic MLA table timed with the model at DeepSeek-V3's latent shapes has zero error when ``num_heads``
    is read per GPU and a decode row's context as ``isl + step``; vLLM's MLA tables are left out."""
    import pandas as pd

    from simulator.cost.attention import AttentionModel, longest_block
    from simulator.fidelity.kernels import deepseek_mla, mla_kernel_errors

    hw = load_hardware("h100-sxm")
    model = AttentionModel(hw, "bf16")
    for framework in ("sglang", "vllm"):
        for phase in ("context", "generation"):
            folder = tmp_path / "h100_sxm" / "mla" / framework / "1.0"
            folder.mkdir(parents=True, exist_ok=True)
            rows = []
            for heads, batch, isl, step in ((128, 1, 1024, 0), (16, 8, 4096, 3)):
                shapes = deepseek_mla(heads).shapes(7168, 1)
                if phase == "context":
                    seconds = model.prefill_parts(shapes.heads, shapes.prefill_widths, shapes.prefill_kv,
                                                  batch * isl * (isl + 1) / 2, batch * isl, 0,
                                                  batch * shapes.heads * isl / 128, longest=longest_block(isl, isl))
                else:
                    context = isl + step
                    seconds = (batch * context * model.decode_per_token(shapes.heads, shapes.decode_widths,
                                                                        shapes.decode_kv)
                               + batch * model.per_head)
                rows.append({"mla_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "num_heads": heads,
                             "batch_size": batch, "isl": isl, "tp_size": 128 // heads, "step": step,
                             "latency": (seconds + model.overhead) * 1e3})
            pd.DataFrame(rows).to_parquet(folder / f"{phase}_mla_perf.parquet")
    errors = mla_kernel_errors(tmp_path, engines={})  # the generation's pooled fit, as the table was timed
    assert len(errors) == 4 and set(errors["framework"]) == {"sglang"} and errors["error"].max() < 1e-9


def test_deepep_tables_are_read_at_the_default_sms_and_fitted_back(tmp_path):
    """A synthetic DeepEP table timed with stated latencies and link efficiencies (per kernel): the reader takes
    the low-latency rows and the normal rows at DeepEP's default 20 SMs, and the least-squares fit returns the
    stated parameters."""
    import pandas as pd

    from simulator.catalog.hardware_fit import ExchangeFit
    from simulator.cost.expert_exchange import deepep_time
    from simulator.fidelity.kernels import deepep_kernel_table, fit_deepep

    stated = {"ll_dispatch": (12.0, 0.5), "ll_combine": (10.0, 0.45), "normal_dispatch": (25.0, 0.55),
              "normal_combine": (40.0, 0.6)}
    hw = with_fit(load_hardware("h100-sxm"), {"deepep": {
        kernel: ExchangeFit(latency_us=latency, efficiency=efficiency) for kernel, (latency, efficiency) in
        stated.items()}})
    shapes = [(t, k, d) for t in (1, 16, 256, 4096) for k in (4, 8) for d in (4096, 7168)]
    us = lambda kernel, t, k, d: deepep_time(hw, kernel, 8, t, k, d) * 1e6  # noqa: E731
    ll = pd.DataFrame([{"node_num": 1, "num_token": t, "num_topk": k, "hidden_size": d,
                        "dispatch_avg_t_us": us("ll_dispatch", t, k, d), "combine_avg_t_us": us("ll_combine", t, k, d)}
                       for t, k, d in shapes])
    normal = pd.DataFrame([{"node_num": 1, "num_token": t, "num_topk": k, "hidden_size": d, "dispatch_sms": sms,
                            "combine_sms": sms, "dispatch_transmit_us": us("normal_dispatch", t, k, d) * 20 / sms,
                            "combine_transmit_us": us("normal_combine", t, k, d) * 20 / sms}
                           for t, k, d in shapes for sms in (8, 20)])
    folder = tmp_path / "h100_sxm" / "comm" / "sglang" / "1.0"
    folder.mkdir(parents=True)
    ll.to_parquet(folder / "wideep_deepep_ll_perf.parquet")
    normal.to_parquet(folder / "wideep_deepep_normal_perf.parquet")
    assert len(deepep_kernel_table(tmp_path)) == 4 * len(shapes)
    fits = fit_deepep(tmp_path, "h100_sxm")
    for kernel, (latency, efficiency) in stated.items():
        assert fits[kernel] == {"latency_us": latency, "efficiency": efficiency}


@pytest.mark.slow
def test_deepep_kernels_on_sglangs_tables(shared_data):
    """DeepEP's low-latency and normal dispatch and combine on one 8-GPU H100 node: median within 12% each (today
    5–10%), from the off-GPU bytes of every token-expert pair (low-latency) or of each token once per GPU it
    reaches (normal), FP8 out and bf16 back."""
    from simulator.fidelity.kernels import deepep_kernel_errors

    frame = fitted(deepep_kernel_errors(shared_data / "kernels"))
    assert set(frame["kernel"]) == {"ll_dispatch", "ll_combine", "normal_dispatch", "normal_combine"}
    for kernel, rows in frame.groupby("kernel"):
        median, _ = overall(rows)
        assert median <= 0.12, (kernel, median)


@pytest.mark.slow
def test_eplb_rows_are_priced_as_balanced_where_eplb_can_balance(shared_data):
    """TensorRT-LLM's wide-EP tables with EPLB: up to EP 16 (16 or more experts per rank) the rows time a balanced
    layer — the EPLB model's median signed error is within 8% and its median error near that of the plain
    power-law rows' best case; at EP 128–256 (one or two experts per rank, too few slots to hide the hottest
    expert) it is closer to the measurements than pricing them as balanced."""
    from simulator.fidelity.kernels import moe_kernel_errors, wide_ep_kernel_table

    table = wide_ep_kernel_table(shared_data / "kernels")
    eplb = table[table["distribution"] == "power_law_eplb"]
    modelled = moe_kernel_errors(shared_data / "kernels", table=eplb)
    balanced = moe_kernel_errors(shared_data / "kernels", table=eplb.assign(load_cv=0.0, slots=0))
    signed = modelled["predicted_s"] / modelled["measured_s"] - 1
    upto16 = (modelled["moe_ep"] <= 16).to_numpy()
    assert abs(signed[upto16].median()) <= 0.08 and modelled["error"][upto16].median() <= 0.20
    wide = modelled["moe_ep"].between(128, 256).to_numpy()
    assert modelled["error"][wide].median() < balanced["error"][wide].median()


@pytest.mark.slow
def test_validate_prices_every_measured_gpu_as_another_generation(shared_data, capsys):
    """``validate --data --generation``: each GPU's tables priced with that generation's fit (its spec sheet kept):
    an H100 GEMM at Ampere's rates is ``gemm_time`` of the H100 as Ampere; DeepEP, which Ampere does not run, is
    left out; an unknown generation is one line and status 2."""
    from simulator.catalog.hardware import with_generation
    from simulator.cli import main
    from simulator.cost import gemm_time
    from simulator.fidelity.report import validate_all

    results = validate_all(shared_data, generation="ampere")
    gemms = results["kernel_gemm"]
    trtllm = gemms[(gemms["gpu"] == "h100_sxm") & (gemms["framework"] == "trtllm")]
    row = trtllm[trtllm["dtype"] == "bfloat16"].iloc[0]
    h100_as_ampere = with_generation(load_hardware("h100-sxm"), "ampere")
    assert row["predicted_s"] == pytest.approx(gemm_time(h100_as_ampere, row["m"], row["n"], row["k"], "bf16"))
    assert results["kernel_deepep"].empty and not validate_all(shared_data)["kernel_deepep"].empty
    assert main(["validate", "--data", str(shared_data), "--generation", "volta"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--generation: unknown 'volta'" in err[0]
