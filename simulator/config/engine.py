"""The engine's knobs: ``scheduler:`` (static, continuous, chunked or a user's class; speculative decoding),
``kv_cache:`` (paged or contiguous), ``cost_model:`` (roofline or linear) and ``lora:``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Discriminator, Field, Tag, model_validator

from simulator.config.base import MAX_BLOCK_SIZE, MAX_REQUESTS, MAX_TOKENS, Strict
from simulator.errors import renamed


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


class StaticSchedulerConfig(SchedulerBase):
    """Request-level batching: a batch of up to max_num_seqs runs until all its members finish."""

    kind: Literal["static"]
    batch_timeout_ms: float = Field(default=0.0, ge=0, description="wait this long for a batch to fill")


class ContinuousSchedulerConfig(SchedulerBase):
    """Iteration-level batching (Orca / vLLM v0): FCFS admission, whole-prompt prefill.

    ``prefill_priority``: true = prefill-first (vLLM v0: an iteration prefills newcomers while decodes wait);
    false = decode-first (Orca: every iteration decodes all running requests and adds whole prompts that fit).
    ``chunk_long_prompts`` (prefill-first only): a prompt longer than what is left of the iteration's token budget is
    prefilled in chunks over the prefill iterations that follow, its next chunk first in each (SGLang's
    chunked_prefill_size); otherwise a whole prompt must fit one iteration.
    """

    kind: Literal["continuous"] = "continuous"
    prefill_priority: bool = True
    chunk_long_prompts: bool = False

    @model_validator(mode="after")
    def _chunks_need_prefill_first(self) -> ContinuousSchedulerConfig:
        if self.chunk_long_prompts and not self.prefill_priority:
            raise ValueError("chunk_long_prompts applies to prefill-first batching (prefill_priority: true); "
                             "decode-first batching with prompt chunks is kind: chunked")
        return self


class ChunkedSchedulerConfig(SchedulerBase):
    """Stall-free batching (Sarathi-Serve / vLLM v1): decodes first, the rest of the token budget in prompt chunks."""

    kind: Literal["chunked"]
    max_num_batched_tokens: int = Field(
        default=8192, ge=1, le=MAX_TOKENS, description="tokens per iteration (vLLM v1's default)"
    )
    long_prefill_token_threshold: int | None = Field(
        default=None, ge=1, le=MAX_TOKENS,
        description="most tokens of one prompt in an iteration (vLLM's --long-prefill-token-threshold); default: "
        "the budget",
    )

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, value: Any) -> Any:
        return renamed(value, "scheduler", {"chunk_size": "long_prefill_token_threshold"})

    @model_validator(mode="after")
    def _chunk_fits_budget(self) -> ChunkedSchedulerConfig:
        budget, threshold = self.max_num_batched_tokens, self.long_prefill_token_threshold
        if threshold is not None and threshold > budget:
            raise ValueError(f"long_prefill_token_threshold must be <= max_num_batched_tokens, got {threshold} > "
                             f"{budget}")
        return self


class CustomSchedulerConfig(SchedulerBase):
    """A user's own scheduler class, named by dotted path (``pkg.module.Class``) or file (``file.py:Class``); its
    own settings go in ``options``."""

    kind: str = Field(pattern=r"[.:]")
    options: dict[str, Any] = Field(default_factory=dict)


def _scheduler_kind(value: Any) -> str | None:
    """The union tag of a scheduler: its ``kind`` (``continuous`` when left out), or ``custom`` for a path."""
    kind = value.get("kind", "continuous") if isinstance(value, dict) else getattr(value, "kind", None)
    if isinstance(kind, str) and kind not in ("static", "continuous", "chunked") and any(c in kind for c in ".:"):
        return "custom"
    return kind


SchedulerConfig = Annotated[
    Annotated[StaticSchedulerConfig, Tag("static")]
    | Annotated[ContinuousSchedulerConfig, Tag("continuous")]
    | Annotated[ChunkedSchedulerConfig, Tag("chunked")]
    | Annotated[CustomSchedulerConfig, Tag("custom")],
    Discriminator(_scheduler_kind),
]


# --- KV cache ------------------------------------------------------------------------------------------------
def _share_or_auto(value: Any) -> Any:
    """``auto``, a share in (0, 1] or None; anything else one error naming both (not one per union member)."""
    if value is None or value == "auto":
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1:
        return float(value)
    raise ValueError(f"must be 'auto' or a share of GPU memory in (0, 1], got {value!r}")


class KVCacheBase(Strict):
    """The pool: sized from GPU memory (or fixed at ``num_gpu_blocks`` × ``block_size`` token slots)."""

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


class PagedKVConfig(KVCacheBase):
    """PagedAttention-style block pool; ``prefix_caching`` shares cached prompt-prefix blocks (vLLM's APC)."""

    kind: Literal["paged"] = "paged"
    prefix_caching: bool = False


class ContiguousKVConfig(KVCacheBase):
    """One slab per request in a linear address space. ``reserve``: max_model_len (FasterTransformer / Orca),
    requested (prompt + output), or grow (start at the prompt, reallocate and copy when full)."""

    kind: Literal["contiguous"]
    reserve: Literal["max_model_len", "requested", "grow"] = "max_model_len"
    placement: Literal["first_fit", "best_fit"] = "first_fit"


def _kv_kind(value: Any) -> str | None:
    """The union tag of a KV cache: its ``kind`` (``paged`` when left out)."""
    return value.get("kind", "paged") if isinstance(value, dict) else getattr(value, "kind", None)


KVCacheConfig = Annotated[
    Annotated[PagedKVConfig, Tag("paged")] | Annotated[ContiguousKVConfig, Tag("contiguous")], Discriminator(_kv_kind)
]


# --- cost model ----------------------------------------------------------------------------------------------
class CostModelBase(Strict):
    network_ms: float = Field(default=0.0, ge=0, description="one-way client-to-server latency, counted in TTFT")
    tokenize_us_per_token: float = Field(
        default=0.0, ge=0, description="client-side tokenization time per prompt token, counted in TTFT"
    )


class RooflineCostConfig(CostModelBase):
    """Per-operator roofline from the hardware profile's spec-sheet numbers."""

    kind: Literal["roofline"] = "roofline"
    expert_load_cv: float = Field(
        default=0.0, ge=0, le=10,
        description="coefficient of variation of the routed experts' popularity (0 = equally popular; SGLang's "
        "expert-distribution recorder or a routing trace measures it; the H100 benchmark rows fit 1.25, "
        "simulator.fidelity.silicon): a batch's tokens gather on fewer experts, so fewer experts' weights are read "
        "at decode sizes, and with expert_parallel > 1 the busiest rank sets a MoE layer's time (simulator.cost.moe)",
    )
    eplb_redundant_experts: int | None = Field(
        default=None, ge=0, le=4096,
        description="expert-parallel load balancing (SGLang/vLLM --enable-eplb with --ep-num-redundant-experts / "
        "--num-redundant-experts; TensorRT-LLM num_slots − experts): the experts placed over the ranks so that "
        "their popularity evens out, with this many replicas of the hottest; None: no EPLB. Each rank then holds "
        "(experts + redundant) / expert_parallel experts' weights (simulator.cost.moe)",
    )
    two_batch_overlap: bool = Field(
        default=False,
        description="SGLang's --enable-two-batch-overlap: with attention data parallelism each iteration runs as "
        "two micro-batches, one's expert dispatch/combine overlapping the other's compute: of compute C and "
        "exchange X the pair takes (C + X)/2 + max(C, X)/2 instead of C + X",
    )
    all_to_all: Literal["nccl", "deepep"] = Field(
        default="nccl",
        description="how attention-DP ranks exchange a MoE layer's tokens: NCCL all-to-alls, or DeepEP's kernels "
        "(low-latency in decode-only iterations, normal with prefill: SGLang's --moe-a2a-backend deepep, vLLM's "
        "deepep all2all backends; Hopper or later)",
    )


class LinearCostConfig(CostModelBase):
    """Measured per-token costs: prefill = overhead + tokens × rate; decode step = per step + per sequence."""

    kind: Literal["linear"]
    prefill_ms_per_token: float = Field(ge=0)
    decode_ms_per_step: float = Field(ge=0)
    decode_ms_per_seq: float = Field(default=0.0, ge=0)
    overhead_ms: float = Field(default=0.0, ge=0, description="fixed cost of an iteration that runs prefill")


def _cost_kind(value: Any) -> str | None:
    """The union tag of a cost model: its ``kind`` (``roofline`` when left out)."""
    return value.get("kind", "roofline") if isinstance(value, dict) else getattr(value, "kind", None)


CostModelConfig = Annotated[
    Annotated[RooflineCostConfig, Tag("roofline")] | Annotated[LinearCostConfig, Tag("linear")],
    Discriminator(_cost_kind),
]



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
