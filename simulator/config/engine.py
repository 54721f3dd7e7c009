"""The engine's knobs: ``scheduler:`` (speculative decoding included), ``kv_cache:``, ``cost_model:`` and
``lora:``.

The first three are plug-in sections (:mod:`.plugins`): this module holds what every kind of a family shares
(:class:`SchedulerBase`, :class:`KVCacheBase`, :class:`CostModelBase`) and a user's scheduler class named by path
(:class:`CustomSchedulerConfig`); each built-in kind's config class lives beside its plug-in (static, continuous
and chunked batching in :mod:`simulator.schedulers`, the paged and contiguous caches in :mod:`simulator.kv`, the
roofline and linear cost models in :mod:`simulator.cost`) and is found through the family's registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from simulator.config.base import MAX_BLOCK_SIZE, MAX_REQUESTS, MAX_TOKENS, Strict
from simulator.config.plugins import PluginSection


class SpeculativeConfig(Strict):
    """Speculative decoding: each decode step drafts ``num_speculative_tokens`` (k) tokens with a draft model
    costing ``draft_cost_ratio`` of a target decode step each (or priced as ``draft_model``'s decode step on the
    same GPUs; its weights and KV are not taken from the target's memory budget), then verifies them in one target
    pass over k + 1 positions per sequence; each drafted token is accepted with probability ``acceptance_rate``
    until the first rejection, so a step emits 1 + (accepted) tokens — a truncated geometric law, drawn per
    sequence and step."""

    num_speculative_tokens: int = Field(ge=1, le=64)
    acceptance_rate: float = Field(ge=0, le=1)
    draft_cost_ratio: float | None = Field(default=None, ge=0, description="draft step / target decode step time")
    draft_model: str | None = Field(default=None, description="or: a model whose decode step is priced instead")

    @model_validator(mode="after")
    def _one_draft_cost(self) -> SpeculativeConfig:
        if (self.draft_cost_ratio is None) == (self.draft_model is None):
            raise ValueError("give exactly one of draft_cost_ratio or draft_model")
        return self


def _count_or_auto(value: Any) -> Any:
    """``auto`` or a whole number of sequences in [1, MAX_REQUESTS]; anything else one error naming both."""
    if value == "auto":
        return value
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if whole and not isinstance(value, bool) and 1 <= value <= MAX_REQUESTS:
        return int(value)
    raise ValueError(f"must be 'auto' or a whole number of sequences from 1 to {MAX_REQUESTS:,}, got {value!r}")


class SchedulerBase(Strict):
    """What every batching policy takes; a kind's config class adds its ``kind`` and its own knobs."""

    if TYPE_CHECKING:  # each kind declares it, where its fields (and so its dump) place it
        kind: str

    max_num_seqs: Annotated[int | Literal["auto"], BeforeValidator(_count_or_auto)] = Field(
        default=256, description="sequences running at once per replica (attention-DP rank); auto: SGLang's "
        "--max-running-requests from the KV pool and max_model_len (simulator/kv/sglang_memory.py; needs "
        "kv_cache.mem_fraction_static)")
    speculative: SpeculativeConfig | None = None
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1,
        description="tokens per iteration; default max(max_model_len, 2048), as vLLM v0",
    )
    max_model_len: int | None = Field(
        default=None, ge=1, le=MAX_TOKENS, description="default: the model's max positions"
    )
    max_queue_len: int | None = Field(default=None, ge=0, description="arrivals beyond this many waiting are rejected")
    max_queue_delay_ms: float | None = Field(
        default=None, gt=0, description="a request still waiting this long (never scheduled) is rejected"
    )
    preemption: Literal["recompute", "swap"] = Field(
        default="recompute", description="free a victim's KV and re-prefill later, or move it to host memory and back"
    )
    async_scheduling: bool = Field(
        default=False, description="form each batch while the one before runs (vLLM --async-scheduling, "
        "TensorRT-LLM's overlap scheduler, SGLang's overlap schedule): a request arriving during a step joins one "
        "step later",
    )
    capacity_policy: Literal["max_utilization", "guaranteed_no_evict"] = Field(
        default="max_utilization",
        description="admission under KV pressure: max_utilization (vLLM's way) admits on the blocks free now and "
        "preempts when running requests cannot grow; guaranteed_no_evict (TensorRT-LLM's default capacity "
        "scheduler) admits a request only when the blocks of its whole length (prompt + output) fit beside what "
        "every running request will hold at its end, so none is ever preempted",
    )
    watermark: float = Field(
        default=0.01, ge=0, lt=1,
        description="fraction of the KV blocks that admitting a request must leave free while others run (vLLM's "
        "block-manager watermark), so that running requests can grow",
    )


class CustomSchedulerConfig(SchedulerBase):
    """A user's own scheduler class, named by dotted path (``pkg.module.Class``) or file (``file.py:Class``); its
    own settings go in ``options``."""

    kind: str = Field(pattern=r"[.:]")
    options: dict[str, Any] = Field(default_factory=dict)


SchedulerConfig = Annotated[SchedulerBase, PluginSection("scheduler", default="continuous",
                                                         custom=CustomSchedulerConfig)]


# --- KV cache ------------------------------------------------------------------------------------------------
def _share_or_auto(value: Any) -> Any:
    """``auto``, a share in (0, 1] or None; anything else one error naming both (not one per union member)."""
    if value is None or value == "auto":
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1:
        return float(value)
    raise ValueError(f"must be 'auto' or a share of GPU memory in (0, 1], got {value!r}")


class KVCacheBase(Strict):
    """The pool: sized from GPU memory (or fixed at ``num_gpu_blocks`` × ``block_size`` token slots); a kind's
    config class adds its ``kind`` and its own knobs."""

    if TYPE_CHECKING:  # each kind declares it, where its fields (and so its dump) place it
        kind: str

    block_size: int = Field(
        default=16, ge=1, le=MAX_BLOCK_SIZE, description="tokens per block (contiguous: the unit of num_gpu_blocks)"
    )
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    free_memory_fraction: float | None = Field(
        default=None, gt=0, le=1,
        description="instead: the pool takes this share of the memory the weights and the activation workspace "
        "leave (TensorRT-LLM's free_gpu_memory_fraction)")
    mem_fraction_static: Annotated[float | Literal["auto"] | None, BeforeValidator(_share_or_auto)] = Field(
        default=None,
        description="instead: the weights and the pool together take this share of the GPU, the rest held for "
        "activations and CUDA graphs (SGLang's --mem-fraction-static); auto: SGLang's default for the GPU's memory, "
        "the prefill chunk (max_num_batched_tokens) and the parallelism (simulator/kv/sglang_memory.py)")
    dtype: Literal["auto", "fp16", "bf16", "fp8", "int8"] = "auto"
    num_gpu_blocks: int | None = Field(default=None, ge=1, le=10**9, description="override the pool size (as vLLM's)")
    swap_space_gib: float = Field(default=4.0, ge=0, description="host memory per GPU for swapped-out KV (vLLM's)")


KVCacheConfig = Annotated[KVCacheBase, PluginSection("kv_cache", default="paged")]


# --- cost model ----------------------------------------------------------------------------------------------
class CostModelBase(Strict):
    """What every cost model takes; a kind's config class adds its ``kind`` and its own knobs."""

    if TYPE_CHECKING:  # each kind declares it, where its fields (and so its dump) place it
        kind: str

    network_ms: float = Field(default=0.0, ge=0, description="one-way client-to-server latency, counted in TTFT")
    tokenize_us_per_token: float = Field(
        default=0.0, ge=0, description="client-side tokenization time per prompt token, counted in TTFT"
    )


CostModelConfig = Annotated[CostModelBase, PluginSection("cost_model", default="roofline")]


class LoRAConfig(Strict):
    """LoRA adapters sharing the base model (vLLM's ``--enable-lora``). ``adapters`` fine-tunes of rank ``rank``;
    a request names adapter i (1-based rank in popularity) with probability ∝ i^−``popularity`` (Zipf; 0 =
    uniform), or none with probability 1 − ``fraction``; a session keeps its first turn's adapter. Each replica has
    ``max_loras`` GPU slots (vLLM's ``--max-loras``: the most distinct adapters in a batch), reserved from the KV
    memory at ``rank``; a waiting request whose adapter would exceed them is passed over (later requests may go
    first, as vLLM's scheduler skips it). An adapter entering the batch that is not in a GPU slot is loaded in that
    iteration (the batch waits): its bytes over the host link, and first from storage at ``storage_gb_per_s`` if
    it is not among the ``max_cpu_loras`` most recently used in host memory (default: all adapters are). Every
    iteration with adapters pays their shrink and expand GEMMs on every LoRA-targeted projection
    (:mod:`simulator.cost.lora`)."""

    adapters: int = Field(ge=1, le=1_000_000)
    rank: int = Field(default=16, ge=0, le=1024, description="max_lora_rank (0: adapters without weights)")
    popularity: float = Field(default=1.0, ge=0, le=10, description="Zipf exponent over adapters; 0 = uniform")
    fraction: float = Field(default=1.0, ge=0, le=1, description="share of requests (sessions) with an adapter")
    max_loras: int = Field(default=1, ge=1, le=1024, description="GPU slots = most adapters in one batch")
    max_cpu_loras: int | None = Field(default=None, ge=1, description="adapters cached in host memory (LRU)")
    storage_gb_per_s: float | None = Field(default=None, gt=0, description="adapter reads from storage, GB/s")
    target_modules: Literal["all", "attention"] = Field(
        default="all", description="all linear projections (attention and dense/shared FFN) or attention only")

    @model_validator(mode="after")
    def _tiers(self) -> LoRAConfig:
        if self.max_cpu_loras is not None:
            if self.max_cpu_loras < self.max_loras:
                raise ValueError(f"lora.max_cpu_loras: {self.max_cpu_loras} is below max_loras {self.max_loras} "
                                 "(vLLM requires max_cpu_loras >= max_loras)")
            if self.max_cpu_loras < self.adapters and self.storage_gb_per_s is None:
                raise ValueError(f"lora.storage_gb_per_s: {self.adapters} adapters with max_cpu_loras "
                                 f"{self.max_cpu_loras} are read from storage: give its bandwidth (GB/s)")
        return self
