"""Fitted kernel parameters per GPU generation, and which generation's fit a GPU without measurements takes.

A hardware profile names its ``generation``; every fitted parameter the profile does not set itself comes from
:data:`GENERATION_FITS` of that generation, or — for a generation without measurements — of the generation named
in :data:`BORROWS_FROM` (the newest earlier generation of the same vendor that has measurements). Values tuned
toward guesses of an unmeasured part are never used: Blackwell predictions are its spec sheet with the Hopper fit.

Where the numbers come from (reproduce with ``llmsim calibrate``):

- ``ampere``: GEMMs from ``../shared/data/calibration/a100_ops`` (15,300 per-layer timings; the GEMM main loop's
  serial latency, ``gemm_k_latency_ns``, and with it its split along k, ``gemm_split_k``, are left out: fitted there
  with it (0.8 ns, knee 1.5), the held-out A100 kernel tables get worse, medians 7.6 -> 7.7% SGLang, 8.7 -> 9.5%
  TensorRT-LLM, 8.4 -> 8.8% vLLM); the GEMM kernels of W8A8 int8 and weight-only int4 weights, which are not the
  16-bit library's (``gemm_kernel_by_dtype``: 8-row tiles, a main loop of 1.6 and 2.4 ns per element of k that
  does not split, 5 and 6 µs of fixed work beyond the kernel floor; int8 at 0.78 of its peak), from TensorRT-LLM's
  A100 SmoothQuant and weight-only tables, every other weight shape (the rest held out), under these GEMMs
  (:func:`simulator.fidelity.kernel_fit.fit_format_kernels`; before them int8 took the 16-bit fraction and int4 the
  16-bit library's 64-row tile, which priced a one-row int4 GEMM as 64 rows of 16-bit math, up to twice its weight
  read: on the held-out shapes 20.8% and 27.1% median error, now 9.9% and 11.3%); the collectives (all-reduce,
  all-gather, reduce-scatter, all-to-all: NCCL 2.27 inside an 8-GPU NVSwitch node) and attention from the A100
  kernel tables (``llmsim calibrate --kernels ../shared/data/kernels --gpu a100_sxm``; its attention under these
  GEMMs' knee of 2.0 — the command refits the GEMMs on the kernel tables first, knee 1.5, under which its attention
  lands at 0.53 ns per row and 0.5 blocks per SM, and fits the int8 and int4 kernels under those). The older NCCL
  timings of ``../shared/data/network`` (A100 DGX nodes, 2023) keep the inter-node bandwidth and send/recv of the
  ``a100-80gb-sxm`` profile; their small all-reduces at 4–8 GPUs take ~60 µs where NCCL 2.27 takes
  14–22 µs (2 GPUs: 10 µs in both), a cost of that software stack, which the Splitwise engine profile carries.
- ``hopper``: ``llmsim calibrate --kernels ../shared/data/kernels --gpu h100_sxm``: the H100 GEMM tables of vLLM,
  SGLang and TensorRT-LLM pooled (bf16, fp8, fp8_block; 2,000 timings of each framework × dtype), NCCL 2.29 on an
  8-GPU NVSwitch node (all_reduce, all_gather, reduce_scatter, alltoall; 2–8 GPUs, 512 B – 512 MiB; 16-bit
  all-reduces also by NVLink SHARP, ``all_reduce_nvls``, which Ampere's NVSwitch does not have), and the
  three frameworks' prefill and decode attention tables pooled (2,000 timings of each framework and phase), and
  their fused-MoE tables without expert parallelism (2,000 of each framework × weight format; Ampere: SGLang's),
  and SGLang's DeepEP tables (one 8-GPU node; :func:`simulator.fidelity.kernels.fit_deepep`). DeepEP runs on Hopper
  and later only: Ampere has no ``deepep`` fit.

The share of a prefill kernel's softmax exponentials not hidden behind its tensor cores
(``prefill_attention_exp_exposed``, priced at the GPU's spec-sheet ``sfu_exp_tera_per_s``) is told apart from its
FLOP rate only by timings of several head widths: Hopper's tables hold widths 64–512 (0.7 exposed, pooled;
0.5–0.65 for each framework), Ampere's width 128 only, so Ampere's is none (its FLOP rate carries its exponentials)
and a GPU that borrows Hopper's fit (Blackwell) pays Hopper's share of its own exponential rate. A profile that
does not state that rate keeps the balance of the GPU its generation's fit comes from (``sfu_exp_per_bf16_flop``:
exponentials per 16-bit tensor FLOP), so that a fit whose FLOP rate was fitted beside its exponentials does not
price them as free on a GPU whose spec sheet is silent about them. Likewise each fit names the SMs of the GPU it
was fitted on (``fitted_sm_count``): the attention kernels' whole-GPU costs per work item are that GPU's SMs' time,
and another GPU spreads the same work over its own (:func:`simulator.cost.attention.spread_over_sms`).
"""

from __future__ import annotations

from typing import Any

GENERATION_FITS: dict[str, dict[str, Any]] = {
    "ampere": {
        "flops_efficiency": 0.73, "bandwidth_efficiency": 0.84, "gemm_knee": 2.0, "gemm_tile_m": 64,
        "kernel_overhead_us": 6.0, "quantize_overhead_us": 0.0, "flops_efficiency_by_dtype": {"int8": 0.78},
        "gemm_k_latency_ns": 0.0, "gemm_split_k": 0,  # not fitted: see the module's docstring
        # the int8 (W8A8) and int4 (weight-only) GEMM kernels: TensorRT-LLM's A100 tables (module docstring)
        "gemm_kernel_by_dtype": {"int8": {"tile_m": 8, "k_latency_ns": 1.6, "overhead_us": 5.0},
                                 "int4": {"tile_m": 8, "k_latency_ns": 2.4, "overhead_us": 6.0}},
        "sfu_exp_per_bf16_flop": 2.44 / 312,  # the A100's exponentials per 16-bit tensor FLOP (spec sheets)
        "fitted_sm_count": 108,  # the A100's SMs: its per-item attention costs are its timings'
        "attention_efficiency": 0.58, "attention_io_efficiency": 0.27, "prefill_attention_ns_per_row": 0.52,
        "prefill_attention_ns_per_tile": 4.75, "prefill_attention_blocks_per_sm": 0.75,
        "decode_attention_efficiency": 0.1, "decode_attention_ns_per_head": 33.5, "attention_overhead_us": 13.8,
        "moe_tile_m": 8, "moe_tile_n": 128, "moe_knee": 1.5, "moe_gemm_efficiency": 0.62,
        "moe_bandwidth_efficiency": 1.04, "moe_expert_overhead_us": 0.2, "moe_kernels": 6,
        "link_efficiency": 0.64, "collective_latency_us": 37.0, "collective_step_latency_us": 0.0,
        "all_reduce_low_latency": {"latency_us": 8.75, "step_latency_us": 0.95, "efficiency": 0.19},
        "collectives": {
            "all_gather": {"latency_us": 41.5, "step_latency_us": 0.0, "efficiency": 0.62,
                           "low_latency": {"latency_us": 10.0, "step_latency_us": 0.75, "efficiency": 0.2}},
            "reduce_scatter": {"latency_us": 35.5, "step_latency_us": 0.0, "efficiency": 0.59,
                               "low_latency": {"latency_us": 8.75, "step_latency_us": 0.9, "efficiency": 0.16}},
            "all_to_all": {"latency_us": 26.0, "step_latency_us": 0.35, "efficiency": 0.59,
                           "low_latency": {"latency_us": 10.75, "step_latency_us": 0.55, "efficiency": 0.2}},
        },
    },
    "hopper": {
        "flops_efficiency": 0.81, "bandwidth_efficiency": 0.85, "gemm_knee": 2.0, "gemm_tile_m": 32,
        "kernel_overhead_us": 2.8, "quantize_overhead_us": 3.0, "gemm_k_latency_ns": 0.9, "gemm_split_k": 6144,
        "sfu_exp_per_bf16_flop": 3.9 / 989.4,  # the H100's exponentials per 16-bit tensor FLOP (spec sheets)
        "fitted_sm_count": 132,  # the H100 SXM's SMs: its per-item attention costs are its timings'
        "flops_efficiency_by_dtype": {"fp8": 0.54, "fp8_block": 0.58},
        "attention_efficiency": 0.88, "attention_io_efficiency": 0.3, "prefill_attention_ns_per_row": 0.28,
        "prefill_attention_ns_per_tile": 19.75, "prefill_attention_blocks_per_sm": 1.0,
        "prefill_attention_exp_exposed": 0.7,
        "decode_attention_efficiency": 0.09, "decode_attention_ns_per_head": 21.0, "attention_overhead_us": 12.0,
        "moe_tile_m": 8, "moe_tile_n": 128, "moe_knee": 1.5, "moe_gemm_efficiency": 0.4,
        "moe_bandwidth_efficiency": 1.04, "moe_expert_overhead_us": 0.3, "moe_kernels": 6,
        "link_efficiency": 0.70, "collective_latency_us": 19.5, "collective_step_latency_us": 0.5,
        "all_reduce_low_latency": {"latency_us": 5.0, "step_latency_us": 0.8, "efficiency": 0.28},
        "all_reduce_nvls": {"latency_us": 59.5, "step_latency_us": 0.0, "efficiency": 0.55},
        "collectives": {
            "all_gather": {"latency_us": 24.75, "step_latency_us": 0.0, "efficiency": 0.68,
                           "low_latency": {"latency_us": 5.0, "step_latency_us": 0.8, "efficiency": 0.23}},
            "reduce_scatter": {"latency_us": 18.25, "step_latency_us": 0.0, "efficiency": 0.64,
                               "low_latency": {"latency_us": 5.0, "step_latency_us": 0.8, "efficiency": 0.26}},
            "all_to_all": {"latency_us": 13.0, "step_latency_us": 0.0, "efficiency": 0.62,
                           "low_latency": {"latency_us": 6.25, "step_latency_us": 0.15, "efficiency": 0.02}},
        },
        "deepep": {
            "ll_dispatch": {"latency_us": 11.5, "efficiency": 0.53},
            "ll_combine": {"latency_us": 11.3, "efficiency": 0.48},
            "normal_dispatch": {"latency_us": 26.9, "efficiency": 0.53},
            "normal_combine": {"latency_us": 38.7, "efficiency": 0.59},
        },
    },
}

BORROWS_FROM: dict[str, str] = {
    "ada": "ampere",  # L40S: no measurements; Ampere is the newest earlier NVIDIA generation measured for it
    "blackwell": "hopper",  # B200, B300, GB200, GB300: spec sheet + the Hopper fit
    "cdna3": "ampere",  # AMD MI300X: no AMD measurements; the baseline fit, stated rather than guessed
}


def generation_fit(generation: str) -> dict[str, Any]:
    """The fitted parameters a GPU of ``generation`` takes (raises ``KeyError`` for an unknown generation)."""
    return GENERATION_FITS[BORROWS_FROM.get(generation, generation)]


def generation_names() -> list[str]:
    return sorted({*GENERATION_FITS, *BORROWS_FROM})
