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

SPECULATIVE_METHODS = ("mtp", "eagle", "eagle3", "draft_model", "ngram")
SpeculativeMethod = Literal["mtp", "eagle", "eagle3", "draft_model", "ngram"]
NGRAM_US_PER_SEQUENCE = 4.0  # vLLM's numba prompt lookup: 1.9 s over a 5,000-request ShareGPT run (vllm#13365)


class SpeculativeConfig(Strict):
    """Speculative decoding as the engines run it: each decode step drafts ``num_speculative_tokens`` (k) tokens
    per sequence, then verifies them in one target pass over k + 1 positions per sequence (a prefill-like pass:
    k + 1 rows per sequence in every GEMM and the LM head, k + 1 queries per sequence in attention); of the k
    drafts the sequence keeps the leading accepted ones and one more token from the verification (the bonus), so a
    step emits 1 + A tokens, A ∈ [0, k], drawn per sequence and step with the scheduler's seeded generator.

    Acceptance: ``acceptance`` [a_1 … a_k], a_i = P(draft i accepted | drafts 1 … i−1 accepted), so
    E[1 + A] = 1 + Σ_{i=1..k} Π_{j≤i} a_j; ``acceptance_rate`` a is the same at every position
    (E[1 + A] = (1 − a^(k+1)) / (1 − a)).

    The draft (``method``): ``mtp`` the model's own multi-token-prediction modules (DeepSeek-V3/R1, GLM-4.5 and
    GLM-5, Qwen3-Next, Qwen3.5, MiMo: ``num_nextn_predict_layers``), ``eagle`` / ``eagle3`` an EAGLE head of one
    decoder layer of the target's width (EAGLE-3 with its fused low/mid/high feature projection and own draft
    vocabulary), each priced from its shape on the target's GPUs and held in its memory
    (:mod:`simulator.catalog.draft`); ``draft_model`` a separate model named by ``draft_model``, priced as that
    model's decode step on the same GPUs and held there: its weights and KV per token are taken from the memory
    before the KV pool is sized, split over ``draft_tensor_parallel_size`` GPUs (default the target's tensor
    parallelism, as vLLM runs it; 1: whole on one GPU, which sizes every GPU's pool); ``ngram``
    prompt lookup on the host (``ngram_us_per_sequence``, no GPU work). Without a method (the original form) a
    draft step costs ``draft_cost_ratio`` of a target decode step, or is priced as ``draft_model``'s."""

    method: SpeculativeMethod | None = Field(
        default=None,
        description="mtp | eagle | eagle3 | draft_model | ngram: what drafts (vLLM's speculative_config method; "
        "SGLang's --speculative-algorithm NEXTN, EAGLE, EAGLE3, STANDALONE, NGRAM); unset: a generic draft priced by "
        "draft_cost_ratio or draft_model")
    num_speculative_tokens: int = Field(
        ge=1, le=64, description="k: tokens drafted per sequence and step, 1–64 (vLLM's num_speculative_tokens, "
        "SGLang's --speculative-num-steps; the verification runs k + 1 positions per sequence)")
    acceptance: list[Annotated[float, Field(ge=0, le=1)]] | None = Field(
        default=None, description="[a_1, …, a_k]: a_i = P(draft i accepted | drafts 1…i−1 accepted), each in [0, 1], "
        "one per drafted position (vLLM reports per-position rates as Π_{j≤i} a_j)")
    acceptance_rate: float | None = Field(
        default=None, ge=0, le=1, description="or: the same conditional acceptance at every position, in [0, 1]")
    draft_cost_ratio: float | None = Field(
        default=None, ge=0, description="no method: seconds of a draft step / seconds of a target decode step (≥ 0)")
    draft_model: str | None = Field(
        default=None, description="method draft_model (or none): the draft's catalog name, Hugging Face id or file, "
        "priced as its decode step on the same GPUs, its weights and KV in their memory")
    draft_tensor_parallel_size: int | None = Field(
        default=None, ge=1, le=1024, description="a draft model's tensor parallelism: 1 or the target's "
        "tensor_parallel (vLLM's draft_tensor_parallel_size; default the target's)")
    ngram_us_per_sequence: float = Field(
        default=NGRAM_US_PER_SEQUENCE, ge=0, le=1e6,
        description="method ngram: host microseconds per sequence and step to look the drafts up in the prompt and "
        "output so far (default 4: vLLM's numba lookup took 1.9 s over a 5,000-request ShareGPT run, vllm#13365)")

    @model_validator(mode="before")
    @classmethod
    def _one_acceptance(cls, data: Any) -> Any:
        """``acceptance`` or ``acceptance_rate``, one of them; the list has one rate per drafted token."""
        if not isinstance(data, dict):
            return data
        both = data.get("acceptance") is not None and data.get("acceptance_rate") is not None
        if both or (data.get("acceptance") is None and data.get("acceptance_rate") is None):
            raise ValueError(f"give acceptance (one conditional rate per drafted token) or acceptance_rate (the same "
                             f"at every position){', not both' if both else ''}")
        rates, k = data.get("acceptance"), data.get("num_speculative_tokens")
        if isinstance(rates, list) and isinstance(k, int) and not isinstance(k, bool) and len(rates) != k:
            raise ValueError(f"acceptance: {rates!r} has {len(rates)} rates for num_speculative_tokens {k}; give one "
                             "per drafted token")
        return data

    @model_validator(mode="after")
    def _one_draft_cost(self) -> SpeculativeConfig:
        method, ratio, model = self.method, self.draft_cost_ratio, self.draft_model
        if method is None and (ratio is None) == (model is None):
            raise ValueError("give exactly one of draft_cost_ratio or draft_model (or a method: "
                             f"{', '.join(SPECULATIVE_METHODS)})")
        if method == "draft_model" and model is None:
            raise ValueError("method draft_model needs draft_model: the draft's catalog name or file")
        if method is not None and ratio is not None:
            raise ValueError(f"draft_cost_ratio: {ratio:g} prices the generic draft of no method; method {method} is "
                             "priced from its own draft: remove one")
        if method not in (None, "draft_model") and model is not None:
            raise ValueError(f"draft_model: {model!r} is the draft of method draft_model, not of {method}")
        if self.draft_tensor_parallel_size is not None and model is None:
            raise ValueError(f"draft_tensor_parallel_size: {self.draft_tensor_parallel_size} shards a draft model; "
                             f"{'method ' + method if method else 'draft_cost_ratio'} has none")
        return self

    @property
    def rates(self) -> tuple[float, ...]:
        """a_1 … a_k, the conditional acceptance of each drafted position."""
        if self.acceptance is not None:
            return tuple(self.acceptance)
        return (self.acceptance_rate,) * self.num_speculative_tokens  # type: ignore[return-value]  # one is set


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
    recv_interval: int = Field(
        default=1, ge=1, le=10_000,
        description="the scheduler takes in new requests only every this many decode steps (at once after a "
        "step with prompt tokens, or when idle): SGLang's --scheduler-recv-interval, which saves the per-step "
        "polling of its request queue; 1: every step",
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
