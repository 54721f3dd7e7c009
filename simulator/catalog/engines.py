"""Serving-engine profiles: the fixed costs of an iteration that are not GPU kernels.

CPU scheduling, input preparation, kernel launches the GPU waits for, sampling synchronisation and Python overhead
belong to the engine, not the GPU. A profile (``engine_profiles/NAME.yaml``, chosen by ``engine:`` in an experiment
or ``--engine`` on the CLI) charges, per iteration,

    per_iteration_ms + layers × per_layer_us + sequences × per_sequence_us + prompts × per_prompt_ms

(``prompts``: the prompt chunks of the iteration, each of which the engine prepares — positions, masks, block
tables — before the forward pass). An iteration with prompt chunks runs outside CUDA graphs in engines that capture
only decode steps (TensorRT-LLM's PyTorch executor, SGLang): the host dispatches each operation, so the layers take
at least ``operations × eager_kernel_us`` (``simulator.cost.layers.GroupCost.host_ops`` counts them), which for
short prompts of many-layer models is longer than their GPU time. The profile also says how close the engine's
kernels and collectives come to the best achievable on the hardware (``compute_efficiency``,
``memory_efficiency``, ``communication_efficiency``: 1 = as fast as the hardware profile's fitted GEMM, streaming
and NCCL rates; ``collective_latency_us`` / ``collective_step_latency_us``: an all-reduce's fixed cost in the
engine's own software stack where it is not the current NCCL the hardware generation was fitted on;
``attention_efficiency``: the attention kernels' FLOP rate as a fraction of the hardware's fitted one — 1 for
the FlashAttention-2/3-class kernels the kernel tables measured, lower for kernels that compute the whole causal
square or FlashAttention-1), and whether it batches the prompts of an iteration into one forward pass
(``prefill_batching``). The framework's own attention kernels, fitted on its kernel tables per GPU generation,
replace the generation's pooled attention parameters for multi-head and grouped-query attention
(``attention_by_generation``, :class:`AttentionKernels`), and its own MLA kernels for multi-head latent attention
(``mla_by_generation``), each with its kernels over an 8-bit KV cache where those are other kernels; its fused-MoE
kernel per expert weight format (``moe_by_generation``, :class:`MoEKernels`) replaces the pooled one likewise.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from simulator.catalog.generations import borrowed_generation, generation_names
from simulator.catalog.hardware import HardwareSpec, with_fit
from simulator.catalog.loading import catalog_path, read_mapping, validate
from simulator.catalog.paths import PROJECT_ROOT
from simulator.dtypes import WEIGHT_DTYPES, bytes_per_element
from simulator.errors import LLMSimError

# an experts' kernel format (moe_by_generation's keys): a weight format, or MXFP4 against MXFP8 (simulator.dtypes)
ExpertFormat = Literal[(*WEIGHT_DTYPES, "mxfp4_mxfp8")]  # type: ignore[valid-type]

ENGINE_DIR = PROJECT_ROOT / "engine_profiles"


class CustomAllReduceFit(BaseModel):
    """A framework's own all-reduce kernels on one GPU generation (see :class:`EngineProfile`'s fields of the same
    names)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    latency_us: float = Field(ge=0, description="one-shot kernel's fixed cost")
    two_shot_latency_us: float | None = Field(default=None, ge=0, description="two-shot kernel's; None = none")
    max_mib: float = Field(default=8.0, gt=0, description="largest message it takes (MiB)")


class AttentionFields(BaseModel):
    """The attention parameters of :class:`HardwareSpec` (``fit.prefill_attention`` and ``fit.decode_attention``,
    here by their flat names of before the groups: :data:`simulator.catalog.hardware_fit.FLAT_NAMES`; same meaning,
    :mod:`simulator.cost.attention`) as one framework's kernels reach them on one GPU generation's kernel tables; a
    field left out keeps the generation's pooled fit."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    attention_efficiency: float | None = Field(
        default=None, gt=0, le=2,
        description="prefill: of the 16-bit peak (over an 8-bit cache on 8-bit tensor cores, of twice that peak, to 2)")
    attention_io_efficiency: float | None = Field(default=None, gt=0, le=1, description="prefill: of HBM bandwidth")
    prefill_attention_ns_per_row: float | None = Field(default=None, ge=0, description="prefill: per (query, head)")
    prefill_attention_ns_per_tile: float | None = Field(default=None, ge=0, description="prefill: per (query tile, "
                                                        "head) block")
    prefill_attention_blocks_per_sm: float | None = Field(default=None, ge=0, description="prefill: blocks at once "
                                                          "per SM (its longest block a bound; 0: none)")
    prefill_attention_exp_exposed: float | None = Field(default=None, ge=0, description="prefill: the share of its "
                                                        "exponentials' time not hidden")
    prefill_attention_packs_gqa: bool | None = Field(default=None, description="prefill: its blocks' query tiles "
                                                     "hold all query heads of a KV head")
    decode_attention_efficiency: float | None = Field(default=None, gt=0, le=1, description="decode: of the peak")
    decode_attention_bandwidth_efficiency: float | None = Field(default=None, gt=0, le=1, description="decode: of "
                                                                "HBM bandwidth")
    decode_attention_ns_per_query_head: float | None = Field(default=None, ge=0, description="decode: per "
                                                             "(sequence, query head)")
    decode_attention_ns_per_head: float | None = Field(default=None, ge=0, description="decode: per (sequence, KV "
                                                       "head) block")
    prefill_fallback_head_dim: int | None = Field(default=None, ge=0, description="prefill: the head width from "
                                                  "which its kernel is a fallback (0: none)")
    prefill_fallback_window_head_dim: int | None = Field(default=None, ge=0, description="prefill: the head width "
                                                         "from which a windowed prefill runs it (0: none)")
    prefill_fallback_efficiency: float | None = Field(default=None, ge=0, le=1, description="prefill: the fallback "
                                                      "kernel's fraction of the 16-bit peak, every causal pair")
    decode_attention_block_gb_per_s: float | None = Field(default=None, ge=0, description="decode: the HBM GB/s one "
                                                          "(sequence, KV head) block streams at (0: no limit)")
    decode_attention_max_group: int | None = Field(default=None, ge=0, description="decode: the most query heads "
                                                   "per KV head one kernel block serves (0: any)")
    decode_attention_ns_per_query_token: float | None = Field(default=None, ge=0, description="decode: the fallback "
                                                              "kernel's cost per (query head, token, 128 widths)")
    decode_attention_query_tile: int | None = Field(default=None, ge=0, description="decode: the rows of the tiles "
                                                    "its grouped kernel computes query heads in (0: none)")
    decode_attention_mha_ns_per_head: float | None = Field(default=None, ge=0, description="decode: per (sequence, "
                                                           "query head) of its multi-head kernel")
    decode_attention_blocks_per_sm: float | None = Field(default=None, ge=0, description="decode: blocks at once per "
                                                         "SM (a step of fewer pays one wave; 0: no waves)")
    decode_attention_split_us: float | None = Field(default=None, ge=0, description="decode: a step that splits: "
                                                    "the combine of its split-KV partials")
    decode_attention_split_tokens: int | None = Field(default=None, ge=0, description="decode: the shortest "
                                                      "context its kernel splits")
    decode_attention_split_blocks_per_sm: float | None = Field(default=None, ge=0, description="decode: a step of "
                                                               "fewer blocks than the SMs times this splits")
    decode_attention_kv_tile: int | None = Field(default=None, ge=0, description="decode: the cached tokens a "
                                                 "block's loop reads at once (0: token by token)")
    attention_overhead_us: float | None = Field(default=None, ge=0, description="fixed cost of one kernel, eager")
    decode_attention_overhead_us: float | None = Field(default=None, ge=0, description="a decode kernel's, eager "
                                                       "(None: attention_overhead_us)")


class AttentionKernels(AttentionFields):
    """A framework's own attention kernels of one kind on one GPU generation (:class:`AttentionFields`), and its
    kernels over an 8-bit (fp8, int8) KV cache where those are other kernels (``kv_8bit``: fields left out are the
    16-bit kernels'). SGLang's and vLLM's H100 decode kernels dequantise an fp8 cache in registers and stream it at
    ~0.7 of HBM bandwidth instead of ~0.9; TensorRT-LLM's XQA pays a tenth of its 16-bit cost per (sequence, query
    head)."""

    kv_8bit: AttentionFields | None = Field(default=None, description="its kernels over an 8-bit KV cache, where "
                                            "other kernels")

    @model_validator(mode="after")
    def _sixteen_bit_within_its_peak(self) -> AttentionKernels:
        if self.attention_efficiency is not None and self.attention_efficiency > 1:
            raise ValueError(f"attention_efficiency {self.attention_efficiency}: the kernels over a 16-bit cache reach "
                             "at most the 16-bit peak (1); only kv_8bit kernels on 8-bit tensor cores may exceed it")
        return self

    @model_validator(mode="after")
    def _fallback_has_a_rate(self) -> AttentionKernels:
        if (self.prefill_fallback_head_dim or self.prefill_fallback_window_head_dim) and not \
                self.prefill_fallback_efficiency:
            raise ValueError("a prefill fallback (prefill_fallback_head_dim, prefill_fallback_window_head_dim) needs "
                             "its prefill_fallback_efficiency (> 0)")
        return self


class GemmKernels(BaseModel):
    """A framework's own GEMM kernels on one GPU generation: the fraction of the tensor-core peak its dense GEMMs
    reach per numeric format, fitted on its kernel tables (the :class:`HardwareSpec` fields
    ``fit.gemm.flops_efficiency`` and ``fit.gemm.flops_efficiency_by_dtype``, :mod:`simulator.cost.gemm`; a format
    left out keeps the generation's pooled fit). The memory-bound side
    (bandwidth, knee, row tile, fixed costs) stays the GPU's; fused-MoE layers take the framework's own MoE kernels
    (:class:`MoEKernels`), LoRA kernels the pooled fit."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    flops_efficiency: float | None = Field(default=None, gt=0, le=1, description="16-bit GEMMs: of the 16-bit peak")
    flops_efficiency_by_dtype: dict[Literal["fp8", "fp8_block", "int8", "fp4"], Annotated[float, Field(gt=0, le=1)]
                                    ] = Field(default_factory=dict, description="8- and 4-bit formats: of their peak")


class MoEKernels(BaseModel):
    """A framework's own fused-MoE kernel for one experts' kernel format on one GPU generation (a weight format, or
    ``mxfp4_mxfp8``: :attr:`EngineProfile.mxfp4_experts_by_generation`): the :class:`HardwareSpec` fields of
    ``fit.moe`` by their flat names (``moe_gemm_efficiency``: ``fit.moe.gemm_efficiency``; :mod:`simulator.cost.moe`),
    fitted on its MoE tables. A framework runs another kernel per format (vLLM: Triton for bf16 and block fp8,
    FlashInfer's CUTLASS for ModelOpt's per-tensor fp8, FlashInfer's TensorRT-LLM-gen kernels for gpt-oss's MXFP4), so
    the rate is per format; the tiles, knee and kernel count stay the generation's pooled fit."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    moe_gemm_efficiency: float | None = Field(default=None, gt=0, le=1.5, description="FLOP rate vs the dense GEMMs'")
    moe_bandwidth_efficiency: float | None = Field(default=None, gt=0, le=1.2, description="weight streaming vs the "
                                                   "dense GEMMs'")
    moe_expert_overhead_us: float | None = Field(default=None, ge=0, description="fixed cost per touched expert")
    moe_token_pass_bytes: float | None = Field(default=None, ge=0, description="bytes per (token, hidden element) "
                                               "of its passes over every token it is handed")
    moe_assignment_pass_bytes: float | None = Field(default=None, ge=0, description="bytes per (assignment, hidden "
                                                    "element) of its passes over the token copies its experts receive")
    moe_ep_overhead_us: float | None = Field(default=None, ge=0, description="fixed cost expert parallelism adds")


class GpuServerDefaults(BaseModel):
    """Server defaults a framework picks by the GPU it starts on (``server_defaults_by_gpu``): a rule matches a GPU
    of less memory than ``memory_below_gib``, of at least ``memory_from_gib``, whose profile name contains
    ``name_contains`` (every condition it gives), and replaces those keys of its ``scheduler`` and ``kv_cache``
    sections — vLLM's batch limits by memory and device name (``EngineArgs.get_batch_defaults``), SGLang's prefill
    chunk by memory (``ServerArgs._handle_gpu_memory_settings``). A pool of another GPU than the experiment's takes
    only its rule's batch limits (a pool has no KV-cache section of its own)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    memory_below_gib: float | None = Field(default=None, gt=0)
    memory_from_gib: float | None = Field(default=None, gt=0)
    name_contains: str | None = Field(default=None, min_length=1)
    scheduler: dict[str, Any] = Field(default_factory=dict)
    kv_cache: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names_a_gpu(self) -> GpuServerDefaults:
        if self.memory_below_gib is None and self.memory_from_gib is None and self.name_contains is None:
            raise ValueError("a rule needs memory_below_gib, memory_from_gib or name_contains (the GPUs it is for)")
        return self

    def matches(self, hardware: HardwareSpec) -> bool:
        return (self.memory_below_gib is None or hardware.memory_gib < self.memory_below_gib) and (
            self.memory_from_gib is None or hardware.memory_gib >= self.memory_from_gib) and (
            self.name_contains is None or self.name_contains.lower() in hardware.name.lower())


class EngineProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str
    description: str = ""
    per_iteration_ms: float = Field(default=0.0, ge=0)
    per_layer_us: float = Field(default=0.0, ge=0)
    per_sequence_us: float = Field(default=0.0, ge=0)
    per_prompt_ms: float = Field(default=0.0, ge=0, description="per prompt chunk in the iteration")
    compute_efficiency: float = Field(default=1.0, gt=0, le=1, description="engine kernels vs the GPU's best GEMMs")
    memory_efficiency: float = Field(default=1.0, gt=0, le=1, description="engine kernels vs the GPU's best streaming")
    attention_efficiency: float = Field(
        default=1.0, gt=0, le=1, description="attention kernels' FLOP rate vs the hardware's fitted attention rate"
    )
    communication_efficiency: float = Field(
        default=1.0, gt=0, le=1, description="engine collectives vs the hardware's NCCL bandwidth"
    )
    prefill_batching: Literal["batched", "sequential"] = Field(
        default="batched", description="sequential: each prompt of an iteration is its own forward pass"
    )
    fuses_activation_quantization: bool = Field(
        default=False,
        description="its W8A8 / W4A4 GEMMs take activations quantised by the kernel before them (fused RMSNorm + "
        "quant, SiLU-and-mul + quant), so they pay no quantisation pass of their own (simulator.cost.gemm); false: "
        "each pays one (reading 16-bit activations, writing them quantised, and the hardware's "
        "fit.gemm.quantize_overhead_us)",
    )
    fuses_activation_quantization_by_generation: dict[str, bool] = Field(
        default_factory=dict, description="fuses_activation_quantization on a GPU of that generation (or of one "
        "borrowing its fit), where its kernels there differ; fitted on that generation's benchmark rows")
    mxfp4_experts_by_generation: dict[str, Literal["mxfp4", "mxfp4_mxfp8"]] = Field(
        default_factory=dict, description="how its fused-MoE kernel runs MXFP4 experts on a GPU of that generation "
        "(or of one borrowing its fit): mxfp4 = weight-only, dequantised to 16-bit math (the default); mxfp4_mxfp8 = "
        "against MXFP8 activations on the FP8 tensor cores (simulator.dtypes)",
    )
    pipeline_micro_batches: bool = Field(
        default=False,
        description="with pipeline parallelism, one micro-batch per stage in flight (vLLM v1's max_concurrent_batches "
        "= pipeline_parallel_size, TensorRT-LLM's and SGLang's micro-batches): the running requests split over the "
        "stages, every stage busy (simulator.cost.roofline); false: one batch passes the stages in turn (vLLM v0)",
    )
    kernel_overhead_us: float | None = Field(
        default=None, ge=0,
        description="fixed cost of every kernel under this engine (CUDA-graph replay: only the GPU-side floor); "
        "default: the hardware profile's (fit.kernel_overhead_us)",
    )
    elementwise_kernels_per_layer: int = Field(
        default=5, ge=1, description="norm / activation / residual kernels per layer (fused engines run fewer)"
    )
    custom_allreduce_latency_us: float | None = Field(
        default=None, ge=0,
        description="the framework's own one-shot all-reduce for small messages: its fixed cost; None = NCCL only",
    )
    custom_allreduce_two_shot_latency_us: float | None = Field(
        default=None, ge=0,
        description="its two-shot algorithm (reduce-scatter, then all-gather, through peer memory) for larger "
        "messages: its fixed cost; None = one-shot only",
    )
    custom_allreduce_max_mib: float = Field(default=8.0, gt=0, description="largest message it takes (MiB)")
    custom_allreduce_by_generation: dict[str, CustomAllReduceFit] = Field(
        default_factory=dict,
        description="the same kernels measured on other GPU generations (e.g. ampere); the three fields above hold "
        "for the generation the profile was fitted on and for any generation not listed",
    )
    collective_latency_us: float | None = Field(
        default=None, ge=0,
        description="fixed cost of one NCCL all-reduce in this engine's software stack (an older NCCL, or eager "
        "calls timed with their host dispatch); default: the hardware generation's fit (current NCCL)",
    )
    collective_step_latency_us: float | None = Field(
        default=None, ge=0, description="and per ring step, 2(n - 1) of them; default: the hardware's",
    )
    attention_by_generation: dict[str, AttentionKernels] = Field(
        default_factory=dict,
        description="the framework's attention kernels per GPU generation (e.g. hopper), fitted on its own kernel "
        "tables; a generation not listed takes the one it borrows fitted parameters from, else the pooled fit",
    )
    mla_by_generation: dict[str, AttentionKernels] = Field(
        default_factory=dict,
        description="the framework's multi-head latent attention kernels per GPU generation, fitted on its own MLA "
        "tables; as attention_by_generation",
    )
    gemm_by_generation: dict[str, GemmKernels] = Field(
        default_factory=dict,
        description="the framework's dense GEMM rates per GPU generation, fitted on its own kernel tables; a "
        "generation not listed takes the one it borrows fitted parameters from, else the pooled fit",
    )
    moe_by_generation: dict[str, dict[ExpertFormat, MoEKernels]] = Field(
        default_factory=dict,
        description="the framework's fused-MoE kernels per GPU generation and expert weight format, fitted on its "
        "own MoE tables; a format not listed takes the generation's pooled fit",
    )
    eager_kernel_us: float = Field(
        default=0.0, ge=0,
        description="host time to dispatch one operation outside CUDA graphs (Python, op dispatch, kernel "
        "launch); an iteration with prompt chunks runs eagerly and takes at least its operations times this",
    )
    prompt_batch_holds_outputs: bool = Field(
        default=False,
        description="with async scheduling, a batch's outputs are handed out only once the next batch is launched, "
        "and a batch with prompt tokens (eager) is launched only as its GPU work ends (SGLang's overlap loop): the "
        "first tokens of a prompt batch that another prompt batch follows leave at that one's end",
    )
    frontend_ms_per_request: float = Field(
        default=0.0, ge=0, description="API-server work per request (HTTP, hand-off), serial per replica"
    )
    frontend_us_per_prompt_token: float = Field(default=0.0, ge=0, description="and per prompt token (tokenizing)")
    server_defaults: dict[str, Any] = Field(
        default_factory=dict,
        description="experiment sections (scheduler, kv_cache) as the framework's server sets them by default",
    )
    server_defaults_by_gpu: list[GpuServerDefaults] = Field(
        default_factory=list, description="the server's defaults that depend on the GPU: the first matching rule "
        "replaces those keys of server_defaults")
    sources: list[str] = Field(default_factory=list)

    @field_validator("custom_allreduce_by_generation", "attention_by_generation", "mla_by_generation",
                     "gemm_by_generation", "moe_by_generation")
    @classmethod
    def _known_generations(cls, table: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(table) - set(generation_names()))
        if unknown:
            raise ValueError(f"unknown GPU generation {unknown[0]!r} (allowed: {', '.join(generation_names())})")
        return table

    def server_experiment(self, hardware: HardwareSpec | None = None) -> dict[str, Any]:
        """The experiment sections the framework's server uses when started without flags on ``hardware``: a copy
        of its ``server_defaults``, with the first of ``server_defaults_by_gpu`` that matches the GPU laid over
        them (none without a GPU)."""
        sections = copy.deepcopy(self.server_defaults)
        rule = next((rule for rule in self.server_defaults_by_gpu if rule.matches(hardware)), None) if (
            hardware is not None) else None
        for section in ("scheduler", "kv_cache"):
            if rule is not None and getattr(rule, section):
                sections[section] = {**sections.get(section, {}), **copy.deepcopy(getattr(rule, section))}
        return sections

    def fuses_quantization(self, generation: str) -> bool:
        """Whether its quantised GEMMs take fused-quantised activations on a GPU of ``generation``: that
        generation's entry in ``fuses_activation_quantization_by_generation`` (or the one it borrows from), else
        ``fuses_activation_quantization``."""
        table = self.fuses_activation_quantization_by_generation
        for name in (generation, borrowed_generation(generation)):
            if name in table:
                return table[name]
        return self.fuses_activation_quantization

    def expert_format(self, dtype: str, generation: str) -> str:
        """The format its fused-MoE kernel runs experts of weight format ``dtype`` as on a GPU of ``generation``:
        MXFP4 experts as that generation's entry in ``mxfp4_experts_by_generation`` says (or the one it borrows
        from; weight-only without one), any other format as itself."""
        if dtype != "mxfp4":
            return dtype
        return generation_entry(self.mxfp4_experts_by_generation, generation) or dtype

    def custom_allreduce(self, generation: str) -> CustomAllReduceFit | None:
        """The framework's all-reduce kernels on a GPU of ``generation``: its entry in
        ``custom_allreduce_by_generation``, else the entry of the generation whose fitted parameters it borrows
        (:func:`simulator.catalog.generations.borrowed_generation`), else the profile's own fields; None without
        them."""
        fit = generation_entry(self.custom_allreduce_by_generation, generation)
        if fit is not None:
            return fit
        if self.custom_allreduce_latency_us is None:
            return None
        return CustomAllReduceFit(latency_us=self.custom_allreduce_latency_us,
                                  two_shot_latency_us=self.custom_allreduce_two_shot_latency_us,
                                  max_mib=self.custom_allreduce_max_mib)

    def attention_hardware(self, hardware: HardwareSpec, kv_dtype: str = "bf16") -> HardwareSpec:
        """``hardware`` with this framework's own attention parameters for its generation
        (``attention_by_generation``, :func:`kernels_hardware`); unchanged without an entry."""
        return kernels_hardware(self.attention_by_generation, hardware, kv_dtype)

    def mla_hardware(self, hardware: HardwareSpec, kv_dtype: str = "bf16") -> HardwareSpec:
        """``hardware`` with this framework's own MLA kernels' parameters for its generation (``mla_by_generation``,
        :func:`kernels_hardware`); unchanged without an entry."""
        return kernels_hardware(self.mla_by_generation, hardware, kv_dtype)

    def gemm_hardware(self, hardware: HardwareSpec) -> HardwareSpec:
        """``hardware`` with this framework's own GEMM rates for its generation (``gemm_by_generation``,
        :func:`generation_entry`; its formats over the hardware's), unchanged without an entry."""
        fit = generation_entry(self.gemm_by_generation, hardware.generation)
        if fit is None:
            return hardware
        gemm = hardware.fit.gemm
        return with_fit(hardware, {
            "gemm.flops_efficiency": fit.flops_efficiency or gemm.flops_efficiency,
            "gemm.flops_efficiency_by_dtype": {**gemm.flops_efficiency_by_dtype, **fit.flops_efficiency_by_dtype}})

    def moe_hardware(self, hardware: HardwareSpec, dtype: str) -> HardwareSpec:
        """``hardware`` with this framework's own fused-MoE kernel's parameters for experts run in kernel format
        ``dtype`` (:meth:`expert_format`) on its generation (``moe_by_generation``, :func:`generation_entry`),
        unchanged without an entry."""
        fit = (generation_entry(self.moe_by_generation, hardware.generation) or {}).get(dtype)
        return hardware if fit is None else with_fit(hardware, fit.model_dump(exclude_none=True))

    def on_host(self, speedup: float) -> EngineProfile:
        """This profile on servers whose host work runs ``speedup`` × as fast as on those its fixed costs were fitted
        on (:class:`simulator.catalog.HardwareSpec`'s ``fit.host_speedup``): its per-iteration, per-layer,
        per-sequence and per-prompt CPU time and its eager kernel dispatch divided by it."""
        if speedup == 1.0:
            return self
        fields = ("per_iteration_ms", "per_layer_us", "per_sequence_us", "per_prompt_ms", "eager_kernel_us")
        return self.model_copy(update={name: getattr(self, name) / speedup for name in fields})

    def iteration_overhead(self, num_layers: int, num_sequences: int, num_prompts: int = 0) -> float:
        """Seconds the engine adds to one iteration of ``num_sequences`` sequences, ``num_prompts`` of them
        prompt chunks."""
        return (
            (self.per_iteration_ms + num_prompts * self.per_prompt_ms) * 1e-3 + num_layers * self.per_layer_us * 1e-6
            + num_sequences * self.per_sequence_us * 1e-6
        )


def kernels_hardware(table: dict[str, AttentionKernels], hardware: HardwareSpec, kv_dtype: str) -> HardwareSpec:
    """``hardware`` with the attention parameters of ``table``'s entry for its generation (:func:`generation_entry`)
    and, over an 8-bit ``kv_dtype``, those of the entry's ``kv_8bit`` kernels over them; unchanged without an
    entry."""
    fit = generation_entry(table, hardware.generation)
    if fit is None:
        return hardware
    update = fit.model_dump(exclude_none=True, exclude={"kv_8bit"})
    if fit.kv_8bit is not None and bytes_per_element(kv_dtype) == 1:
        update.update(fit.kv_8bit.model_dump(exclude_none=True))
    return with_fit(hardware, update)


def generation_entry(table: dict[str, Any], generation: str) -> Any:
    """A per-generation table's entry for ``generation``: its own, else that of the generation whose fitted
    parameters it borrows (:func:`simulator.catalog.generations.borrowed_generation`), else None."""
    return table.get(generation) or table.get(borrowed_generation(generation) or "")


def load_engine(name_or_path: str) -> EngineProfile:
    """A catalog name (``splitwise``) or a path to an engine YAML. A profile that differs from another in a few fields
    names it (``extends: vllm``, a catalog name or a path relative to its own file) and states only those: its
    top-level fields replace the other's, whole."""
    path = catalog_path(name_or_path, ENGINE_DIR, "engine", "engine profile")
    return validate(EngineProfile, _engine_fields(path, ()), str(path))


def _engine_fields(path: Path, chain: tuple[Path, ...]) -> dict[str, Any]:
    """The fields of the engine YAML at ``path`` over those of the profile it ``extends`` (``chain``: the files
    that extend it, to refuse a cycle)."""
    data = read_mapping(path)
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise LLMSimError(f"{path}: extends must name an engine profile (a catalog name or a YAML path), got {base!r}")
    relative = path.parent / base
    base_path = catalog_path(str(relative) if relative.suffix in (".yaml", ".yml") else base, ENGINE_DIR,
                             f"{path}: extends", "engine profile")
    if base_path.resolve() in {p.resolve() for p in (*chain, path)}:
        names = " -> ".join(p.stem for p in (*chain, path, base_path))
        raise LLMSimError(f"{path}: extends: a cycle of engine profiles ({names})")
    return {**_engine_fields(base_path, (*chain, path)), **data}
