"""Pydantic models of an experiment: the public contract of the YAML files.

Every model forbids unknown keys; policy families are chosen by ``kind``. Times carry their unit in the name
(``_ms``, ``_s``), sizes theirs (``_gib``), rates are per second. Numbers must be finite (no ``.inf`` / ``.nan``)
and a boolean is never a number; sizes are bounded by the limits below (stated in the README), so that a typo
cannot ask for an allocation no machine has.
"""

from __future__ import annotations

import itertools
import math
import types
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, model_validator

from simulator.catalog.workloads import with_preset
from simulator.errors import renamed

MAX_REQUESTS = 100_000_000  # generated requests per run
MAX_REPLICAS = 100_000  # replicas per pool
MAX_PARALLEL = 4096  # tensor / pipeline parallel degree
MAX_TOKENS = 10_000_000  # tokens of one request (prompt, output, prefix), and of a length distribution's bounds
MAX_BLOCK_SIZE = 65_536  # tokens per KV block
MAX_SEED = 2**63 - 1
MAX_RATE = 1e9  # requests per second
MIN_RATE = 1e-6


def _is_number(annotation: Any) -> bool:
    """Whether a field takes a number (int or float, optionally None) and not a boolean."""
    if annotation in (int, float):
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = set(typing.get_args(annotation)) - {type(None)}
        return bool(args) and args <= {int, float}
    return False


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _booleans_are_not_numbers(cls, data: Any) -> Any:
        """YAML's ``true`` would otherwise count as 1 wherever a number goes: a boolean given for a number is passed
        on as the word it was written as, which the field then refuses (naming itself)."""
        if isinstance(data, dict) and any(isinstance(value, bool) for value in data.values()):
            fields = cls.model_fields
            data = {name: str(value).lower() if isinstance(value, bool) and name in fields
                    and _is_number(fields[name].annotation) else value for name, value in data.items()}
        return data


# --- cluster -------------------------------------------------------------------------------------------------
class RouterConfig(Strict):
    """Which replica takes an arriving request: round_robin, random, least_outstanding, least_kv_load,
    power_of_two, prefix_affinity, or a user's class by dotted path / ``file.py:Class``."""

    kind: str = "round_robin"
    load_cap: float = Field(
        default=2.0, ge=1,
        description="prefix_affinity, adapter_affinity: leave a prefix's (adapter's) replica when it has more than "
        "load_cap × the mean outstanding",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return {"kind": value} if isinstance(value, str) else value


DataParallel = Annotated[int, Field(
    ge=1, le=MAX_PARALLEL,
    description="attention data-parallel ranks per replica (SGLang/vLLM DP attention, TensorRT-LLM "
    "enable_attention_dp): each rank tensor_parallel GPUs with its own batch and KV pool; MoE layers see all ranks' "
    "tokens")]
ExpertParallel = Annotated[int, Field(
    ge=1, le=MAX_PARALLEL,
    description="MoE experts spread over this many of the replica's data_parallel × tensor_parallel GPUs (vLLM's "
    "--enable-expert-parallel, TensorRT-LLM's moe_ep_size); each expert's width splits over the rest")]


class PoolConfig(Strict):
    """``replicas`` identical replicas of ``data_parallel`` × ``tensor_parallel`` × ``pipeline_parallel`` GPUs of
    ``hardware`` (default: the experiment's)."""

    hardware: str | None = None
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    tensor_parallel: int = Field(default=1, ge=1, le=MAX_PARALLEL)
    pipeline_parallel: int = Field(default=1, ge=1, le=MAX_PARALLEL)
    data_parallel: DataParallel = 1
    expert_parallel: ExpertParallel = 1
    max_num_seqs: int | None = Field(
        default=None, ge=1, le=MAX_REQUESTS,
        description="this pool's scheduler.max_num_seqs (e.g. disaggregated prefill workers batch fewer requests "
        "than decode workers, as Dynamo's per-role engine arguments)")
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1, description="this pool's scheduler.max_num_batched_tokens")

    @model_validator(mode="after")
    def _experts_within_tensor_parallel(self) -> PoolConfig:
        _check_expert_parallel(self.tensor_parallel, self.data_parallel, self.expert_parallel)
        return self

    @property
    def schedulers(self) -> int:
        """Batches scheduled independently: one per attention-DP rank of every replica."""
        return self.replicas * self.data_parallel

    @property
    def gpus(self) -> int:
        return self.schedulers * self.tensor_parallel * self.pipeline_parallel


def _check_expert_parallel(tensor_parallel: int, data_parallel: int, expert_parallel: int) -> None:
    if (tensor_parallel * data_parallel) % expert_parallel:
        raise ValueError(f"expert_parallel ({expert_parallel}) must divide data_parallel × tensor_parallel "
                         f"({data_parallel} × {tensor_parallel}): the experts spread over the replica's GPUs")


class TransferConfig(Strict):
    """The link that carries a request's KV cache from its prefill replica to its decode replica. Each prefill
    replica sends one transfer at a time (FIFO): time = latency + KV bytes / bandwidth. With ``layer_overlap`` the
    transfer streams layer by layer during the prefill, so only what outlasts the prefill (at least one layer's
    share) is added after it."""

    bandwidth_gb_per_s: float = Field(default=25.0, gt=0,
                                      description="gigabytes per second per prefill replica (200 Gb/s IB = 25)")
    latency_ms: float = Field(default=0.05, ge=0)
    layer_overlap: bool = False

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, value: Any) -> Any:
        return renamed(value, "cluster.transfer", {"bandwidth_gbps": "bandwidth_gb_per_s"})


class FaultConfig(Strict):
    """A fault at ``at_s`` of one ``replica`` (counted from 0; disaggregated: the prefill pool's first, then the
    decode pool's) or of every replica with a GPU on ``node`` (replicas fill nodes in index order,
    ``hardware.node.gpus_per_node`` GPUs each): ``crash`` (the replica stops and loses
    its KV; it is back, empty, after ``duration_s`` — the restart with its cold start) or ``slow`` (it runs
    ``slowdown`` times slower for ``duration_s``: thermal throttling, a noisy neighbour)."""

    at_s: float = Field(ge=0)
    replica: int | None = Field(default=None, ge=0)
    node: int | None = Field(default=None, ge=0)
    kind: Literal["crash", "slow"]
    duration_s: float = Field(gt=0)
    slowdown: float = Field(default=2.0, ge=1, le=1000, description="slow: times slower")

    @model_validator(mode="after")
    def _one_target(self) -> FaultConfig:
        if (self.replica is None) == (self.node is None):
            raise ValueError("a fault names exactly one of replica or node")
        return self


class AutoscalerConfig(Strict):
    """Replicas added and removed while the cluster serves (colocated, identical replicas; ``cluster.replicas`` is
    the starting count). Every ``interval_s`` the policy turns a metric into a demand D in replicas:

    - ``queue_length``: requests waiting, summed over the ready replicas, / ``target`` (per replica) — the KEDA /
      Prometheus recipe on vLLM's ``num_requests_waiting``;
    - ``kv_utilization``: the ready replicas' KV-pool fractions in use, summed, / ``target`` (vLLM's
      ``gpu_cache_usage_perc``);
    - ``concurrency``: requests waiting or running, summed, / ``target`` — Knative's concurrency target;
    - ``rate``: requests arrived per second over the window / ``target`` (requests/s one replica serves);
    - ``rate_predictive``: the same rate extrapolated by a least-squares line through the window's per-interval
      rates to when a replica started now would be ready (provisioning plus weight loading).

    The metric is averaged over the ticks of the last ``window_s`` (0: the tick's own sample). Kubernetes' HPA rule
    then: desired = ceil(D), unless D is within ``tolerance`` of the current count (ready plus starting — a replica
    still starting counts as carrying nothing, as HPA counts unready pods); clamped to [min, max]. Scaling up is
    immediate; scaling down follows the highest desired count of the last ``cooldown_s`` (HPA's stabilisation
    window), cancels starting replicas first (newest first), then drains ready ones (fewest outstanding first):
    a draining replica takes no new requests and is released when its last one ends. A new replica is ready after
    ``scale_up_delay_s`` (node, container and engine start) plus its weight bytes over the load bandwidth:
    ``storage`` (the replica's weights over ``load_gb_per_s``, a node's read bandwidth — required), ``host``
    (each GPU's shard over its host link, from page cache) or ``peer`` (each GPU's shard over its inter-node
    link, from a running replica); ``load_gb_per_s`` overrides the spec-sheet figure."""

    kind: Literal["queue_length", "kv_utilization", "concurrency", "rate", "rate_predictive"]
    min_replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    max_replicas: int = Field(ge=1, le=MAX_REPLICAS)
    target: float = Field(gt=0, description="the metric per replica the policy holds (waiting requests, KV "
                          "fraction, outstanding requests or requests/s)")
    interval_s: float = Field(default=15.0, gt=0, description="between decisions (HPA's sync period)")
    window_s: float = Field(default=0.0, ge=0, description="the metric is averaged over the ticks of this window "
                            "(Knative's stable window is 60 s); rate policies: at least one interval")
    tolerance: float = Field(default=0.1, ge=0, lt=1, description="no change while D is within this fraction of "
                             "the current count (HPA: 0.1)")
    scale_up_delay_s: float = Field(default=30.0, ge=0, description="provisioning before the weights load")
    cooldown_s: float = Field(default=300.0, ge=0, description="scale-down stabilisation window (HPA: 300 s)")
    load_from: Literal["storage", "host", "peer"] = "host"
    load_gb_per_s: float | None = Field(default=None, gt=0, description="weight-load bandwidth, GB/s")

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalerConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"autoscaler: min_replicas {self.min_replicas} exceeds max_replicas {self.max_replicas}")
        if self.kind == "kv_utilization" and self.target > 1:
            raise ValueError(f"autoscaler.target: {self.target} is a KV fraction for kind kv_utilization (0 < "
                             "target <= 1)")
        if self.load_from == "storage" and self.load_gb_per_s is None:
            raise ValueError("autoscaler.load_gb_per_s: load_from storage needs the storage read bandwidth (GB/s "
                             "per node; no spec sheet states it)")
        return self


def _refuse_overlaps(faults: list[FaultConfig]) -> None:
    """Two faults of one kind on one target (a replica, or a node) whose intervals overlap are a mistake."""
    by_target: dict[tuple, list[FaultConfig]] = {}
    for fault in faults:
        key = (fault.kind, "replica", fault.replica) if fault.replica is not None else (fault.kind, "node", fault.node)
        by_target.setdefault(key, []).append(fault)
    for (kind, what, which), group in by_target.items():
        group.sort(key=lambda f: f.at_s)
        for before, after in itertools.pairwise(group):
            if after.at_s < before.at_s + before.duration_s:
                raise ValueError(f"faults: the {kind} of {what} {which} at {after.at_s:g} s overlaps the one at "
                                 f"{before.at_s:g} s (until {before.at_s + before.duration_s:g} s); give one fault "
                                 "per interval")


class ClusterConfig(Strict):
    """``colocated`` (default): replicas that each prefill and decode, behind a router — identical
    (``replicas`` × ``tensor_parallel`` × ``pipeline_parallel`` of the experiment's hardware) or heterogeneous
    (``pools``). ``disaggregated`` (Splitwise / DistServe): a ``prefill`` pool and a ``decode`` pool joined by a
    KV ``transfer`` link; ``router`` picks the prefill replica, ``decode_router`` the decode replica."""

    kind: Literal["colocated", "disaggregated"] = "colocated"
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    tensor_parallel: int = Field(default=1, ge=1, le=MAX_PARALLEL)
    pipeline_parallel: int = Field(
        default=1, ge=1, le=MAX_PARALLEL, description="stages; one batch in flight per replica"
    )
    data_parallel: DataParallel = 1
    expert_parallel: ExpertParallel = 1
    router: RouterConfig = RouterConfig()
    pools: list[PoolConfig] | None = Field(default=None, min_length=1, description="heterogeneous colocated replicas")
    prefill: PoolConfig | None = None
    decode: PoolConfig | None = None
    transfer: TransferConfig = TransferConfig()
    decode_router: RouterConfig = RouterConfig(kind="least_outstanding")
    faults: list[FaultConfig] = Field(default_factory=list, description="replica crashes and slowdowns")
    fault_retries: int = Field(
        default=1, ge=0, le=100,
        description="a request queued or running on a crashing replica is sent again, from the start, to another "
        "replica up to this many times; then it fails with the reason")
    health_check_s: float = Field(
        default=0.0, ge=0, description="faults: how long the router keeps sending requests to a crashed replica "
        "before its health check marks it down (a probe's period × failure threshold)")
    connect_timeout_s: float = Field(
        default=0.0, ge=0, description="faults: how long a request sent to a crashed replica before the health "
        "check waits for its connection to fail; then it is retried (fault_retries) or fails")
    mtbf_h: float | None = Field(
        default=None, gt=0, description="random crashes: mean hours between failures of one GPU (a replica of g "
        "GPUs fails at g / mtbf_h per hour; exponential gaps, the experiment's seed)")
    repair_s: float = Field(default=600.0, gt=0, description="mtbf_h: a failed replica is back after this long")
    autoscaler: AutoscalerConfig | None = None
    first_token_from: Literal["decode", "prefill"] = Field(
        default="decode",
        description="disaggregated: where the client's first token comes from — the decode replica once it has "
        "taken the KV (vLLM, SGLang and Dynamo stream every token from the decode worker: TTFT includes the "
        "transfer and the decode queue) or the prefill replica as it finishes (Splitwise's and DistServe's "
        "accounting)",
    )

    @model_validator(mode="after")
    def _pools_fit_kind(self) -> ClusterConfig:
        _check_expert_parallel(self.tensor_parallel, self.data_parallel, self.expert_parallel)
        if self.faults or self.mtbf_h is not None:
            pools = self.replica_pools() if self.kind == "colocated" or (
                self.prefill is not None and self.decode is not None) else []
            replicas = sum(pool.replicas for pool in pools)
            _refuse_overlaps(self.faults)
            wrong = [f.replica for f in self.faults if f.replica is not None and f.replica >= replicas]
            if wrong and pools:  # (a disaggregated cluster without its pools is refused below)
                raise ValueError(f"faults: replica {wrong[0]} does not exist (the cluster has replicas 0–"
                                 f"{replicas - 1})")
        if self.autoscaler is not None:
            self._check_autoscaler(self.autoscaler)
        if self.kind == "disaggregated":
            missing = [name for name in ("prefill", "decode") if getattr(self, name) is None]
            if missing:
                raise ValueError(f"a disaggregated cluster needs {missing} pools ({{replicas, hardware, ...}})")
            if self.pools is not None:
                raise ValueError("pools is for colocated clusters; give prefill and decode instead")
        elif self.prefill is not None or self.decode is not None:
            raise ValueError("prefill and decode pools need kind: disaggregated")
        return self

    def _check_autoscaler(self, scaler: AutoscalerConfig) -> None:
        if self.kind != "colocated" or self.pools is not None or self.data_parallel > 1 or self.faults or (
            self.mtbf_h is not None
        ):
            raise ValueError("autoscaler: for a colocated cluster of identical replicas without attention data "
                             "parallelism or faults (pools, disaggregated pools, DP ranks and faults under "
                             "autoscaling are not modelled yet)")
        if not scaler.min_replicas <= self.replicas <= scaler.max_replicas:
            raise ValueError(f"replicas: {self.replicas} (the starting count) is outside the autoscaler's "
                             f"[min_replicas, max_replicas] = [{scaler.min_replicas}, {scaler.max_replicas}]")

    def replica_pools(self) -> list[PoolConfig]:
        """The pools in replica-index order (disaggregated: prefill first, then decode)."""
        if self.kind == "disaggregated":
            return [self.prefill, self.decode]
        if self.pools is not None:
            return list(self.pools)
        return [PoolConfig(replicas=self.replicas, tensor_parallel=self.tensor_parallel,
                           pipeline_parallel=self.pipeline_parallel, data_parallel=self.data_parallel,
                           expert_parallel=self.expert_parallel)]


# --- scheduler -----------------------------------------------------------------------------------------------
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


# --- workload ------------------------------------------------------------------------------------------------
class PoissonArrival(Strict):
    kind: Literal["poisson"]
    rate: float = Field(ge=MIN_RATE, le=MAX_RATE, description="requests per second")


class ConstantArrival(Strict):
    kind: Literal["constant"]
    rate: float = Field(ge=MIN_RATE, le=MAX_RATE, description="requests per second, evenly spaced")


class GammaArrival(Strict):
    """Gamma-distributed gaps with mean 1/rate and shape ``burstiness`` (1 = Poisson; below 1 burstier), as vLLM's
    benchmark_serving draws them."""

    kind: Literal["gamma"]
    rate: float = Field(ge=MIN_RATE, le=MAX_RATE)
    burstiness: float = Field(default=1.0, gt=0)


class OnOffArrival(Strict):
    """Bursts: Poisson at ``rate`` for ``on_s`` seconds, then silence for ``off_s``, repeated."""

    kind: Literal["onoff"]
    rate: float = Field(ge=MIN_RATE, le=MAX_RATE, description="requests per second while on")
    on_s: float = Field(gt=0)
    off_s: float = Field(ge=0)


class PiecewiseArrival(Strict):
    """A Poisson process whose rate is piecewise constant: ``rates`` = [[start_s, rate], ...] from 0, repeated every
    ``period_s`` if given (drawn by thinning)."""

    kind: Literal["piecewise"]
    rates: list[tuple[float, float]] = Field(min_length=1)
    period_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> PiecewiseArrival:
        starts = [start for start, _ in self.rates]
        if starts[0] != 0 or starts != sorted(set(starts)):
            raise ValueError(f"rates must start at 0 s with increasing start times, got starts {starts}")
        if any(rate < 0 for _, rate in self.rates) or not any(rate > 0 for _, rate in self.rates):
            raise ValueError("rates must be >= 0 with at least one > 0")
        if self.period_s is not None and self.period_s <= starts[-1]:
            raise ValueError(f"period_s must exceed the last start {starts[-1]}, got {self.period_s}")
        if self.period_s is None and self.rates[-1][1] == 0:
            raise ValueError(f"the last rate (from {starts[-1]} s on) is 0 and nothing repeats the pattern, so the "
                             "requests would never all arrive: give period_s or a last rate > 0")
        return self


class DiurnalArrival(Strict):
    """A Poisson process with rate mean_rate × (1 + amplitude × cos(2π (t − peak_s) / period_s)) (thinning)."""

    kind: Literal["diurnal"]
    mean_rate: float = Field(ge=MIN_RATE, le=MAX_RATE)
    amplitude: float = Field(default=0.5, ge=0, le=1)
    period_s: float = Field(default=86400.0, gt=0)
    peak_s: float = Field(default=0.0, ge=0)


class ClosedLoopArrival(Strict):
    """``users`` clients, each sending a request, waiting for it to end, thinking ``think_ms`` (exponential with
    that mean, or fixed), and sending the next — load that backs off when the server slows down. With fixed
    lengths and no think time, clients that start together stay in lock-step (they prefill together and finish
    together); ``ramp_s`` starts user u at u/users × ramp_s, as a pool that has been running for a while is
    spread out (a benchmark's warm-up requests do that)."""

    kind: Literal["closed_loop"]
    users: int = Field(ge=1, le=MAX_REQUESTS)
    think_ms: float = Field(default=0.0, ge=0)
    think: Literal["exponential", "fixed"] = "exponential"
    ramp_s: float = Field(
        default=0.0, ge=0,
        description="the users' first requests go out evenly spread over this many seconds, not all at once",
    )


ArrivalConfig = Annotated[
    PoissonArrival | ConstantArrival | GammaArrival | OnOffArrival | PiecewiseArrival | DiurnalArrival
    | ClosedLoopArrival,
    Field(discriminator="kind"),
]


class FixedLength(Strict):
    kind: Literal["fixed"]
    value: int = Field(ge=1, le=MAX_TOKENS)


class UniformLength(Strict):
    """Integers uniform on [min, max]."""

    kind: Literal["uniform"]
    min: int = Field(ge=1, le=MAX_TOKENS)
    max: int = Field(ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.max < self.min:
            raise ValueError(f"max must be >= min, got min={self.min}, max={self.max}")
        return self


class LognormalLength(Strict):
    """Lognormal with the given mean (not median) and log-space sigma, rounded and clipped to [min, max]."""

    kind: Literal["lognormal"]
    mean: float = Field(gt=0, le=MAX_TOKENS)
    sigma: float = Field(gt=0, le=10, description="log-space; 10 spans e^±20")
    min: int = Field(default=1, ge=1, le=MAX_TOKENS)
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)


class NormalLength(Strict):
    """Normal with the given mean and std, truncated to [min, max] (out-of-range draws are redrawn), rounded."""

    kind: Literal["normal"]
    mean: float = Field(ge=-MAX_TOKENS, le=MAX_TOKENS)
    std: float = Field(gt=0, le=MAX_TOKENS)
    min: int = Field(default=1, ge=1, le=MAX_TOKENS)
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _reachable(self) -> NormalLength:
        upper = self.max if self.max is not None else math.inf
        if upper < self.min:
            raise ValueError(f"max must be >= min, got min={self.min}, max={self.max}")
        if self.mean + 6 * self.std < self.min - 0.5 or self.mean - 6 * self.std > upper + 0.5:
            raise ValueError(f"[{self.min}, {self.max}] is more than 6 std from the mean {self.mean}")
        return self


class EmpiricalLength(Strict):
    """Resample (with replacement) a column of a CSV file, e.g. a trace's ``num_prefill_tokens``; capped at max."""

    kind: Literal["empirical"]
    path: str
    column: str
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)


class QuantileLength(Strict):
    """A distribution given by its quantiles (a workload preset's fitted lengths): ``values[i]`` at cumulative
    probability ``probabilities[i]`` (default evenly spaced from 0 to 1); a uniform draw is mapped through them,
    linearly between neighbours, rounded, and capped at ``max``."""

    kind: Literal["quantiles"]
    values: list[int] = Field(min_length=2, max_length=10_001)
    probabilities: list[float] | None = Field(default=None, description="from 0 to 1, increasing; one per value")
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _increasing(self) -> QuantileLength:
        if self.values[0] < 1 or self.values[-1] > MAX_TOKENS:
            raise ValueError(f"values must lie in [1, {MAX_TOKENS}], got {self.values[0]} … {self.values[-1]}")
        if any(b < a for a, b in itertools.pairwise(self.values)):
            raise ValueError("values must not decrease (quantiles at increasing probabilities)")
        p = self.probabilities
        if p is not None and (len(p) != len(self.values) or p[0] != 0 or p[-1] != 1
                              or any(b <= a for a, b in itertools.pairwise(p))):
            raise ValueError("probabilities must rise from 0 to 1, one per value")
        return self


LengthConfig = Annotated[
    FixedLength | UniformLength | LognormalLength | NormalLength | EmpiricalLength | QuantileLength,
    Field(discriminator="kind"),
]


class TraceConfig(Strict):
    """Replay a request trace. Formats (``auto`` picks by header or suffix): ``processed`` (``arrived_at`` s,
    ``num_prefill_tokens``, ``num_decode_tokens``, optional ``hash_ids``), ``azure`` (``TIMESTAMP`` datetime,
    ``ContextTokens``, ``GeneratedTokens``), ``burstgpt`` (``Timestamp`` s, ``Request tokens``, ``Response
    tokens``), ``mooncake`` (JSON lines: ``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids`` of
    512-token blocks), or ``csv`` with ``columns`` naming the arrival, input and output columns."""

    path: str
    format: Literal["auto", "processed", "azure", "burstgpt", "mooncake", "csv"] = "auto"
    columns: dict[Literal["arrival", "input", "output"], str] | None = None
    time_unit: Literal["s", "ms", "us"] = Field(default="s", description="unit of a csv arrival column")
    speedup: float = Field(default=1.0, gt=0, description="replay this many times faster (timestamps divided by it)")
    start_s: float = Field(default=0.0, ge=0, description="keep arrivals at or after this offset (trace time)")
    end_s: float | None = Field(default=None, gt=0, description="and before this one")
    sample: float = Field(default=1.0, gt=0, le=1, description="keep each row with this probability (seeded)")
    skip_bad: bool = Field(default=False, description="skip and count malformed rows instead of stopping")

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, value: Any) -> Any:
        return renamed(value, "workload.trace", {"time_scale": "speedup"})

    @model_validator(mode="after")
    def _columns_for_csv(self) -> TraceConfig:
        if self.format == "csv" and (self.columns is None or len(self.columns) != 3):
            raise ValueError("format csv needs columns: {arrival: ..., input: ..., output: ...}")
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"end_s must be > start_s, got {self.end_s} <= {self.start_s}")
        return self


class PrefixConfig(Strict):
    """Shared prompt prefixes (a system prompt, RAG templates): a ``fraction`` of requests start with one of
    ``groups`` prefixes of ``tokens`` tokens, chosen uniformly; their input length is ``tokens`` plus the sampled
    ``input_tokens`` (the user's part)."""

    tokens: int = Field(ge=1, le=MAX_TOKENS)
    fraction: float = Field(default=1.0, ge=0, le=1)
    groups: int = Field(default=1, ge=1, le=2**62)


# --- SLO -----------------------------------------------------------------------------------------------------
class SLOConfig(Strict):
    """A request attains the SLO when every given bound holds (TTFT, TPOT, the longest gap between two of its
    output tokens, E2E latency; None = unbounded). The names are the metrics' (``ttft_ms``, ``tpot_ms``,
    ``max_itl_ms``, ``e2el_ms``); ``e2e_ms``, the old spelling of ``e2el_ms``, is still read, with a FutureWarning
    naming the new one."""

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    max_itl_ms: float | None = Field(default=None, gt=0, description="every inter-token gap of a request at most")
    e2el_ms: float | None = Field(default=None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, value: Any) -> Any:
        return renamed(value, "slo", {"e2e_ms": "e2el_ms"})


class MetricsConfig(Strict):
    """Which requests the latency, throughput and SLO figures describe: the first ``warmup_fraction`` and the last
    ``cooldown_fraction`` of the requests, in arrival order, are left out (a benchmark's warm-up, and the tail
    where the load drains away), as GuideLLM's warm-up / cool-down percentages and vLLM bench's ``--num-warmups``.
    Every request is still counted in ``num_requests`` / ``completed`` / ``num_rejected``."""

    warmup_fraction: float = Field(default=0.0, ge=0, lt=1, description="first share of arrivals left out")
    cooldown_fraction: float = Field(default=0.0, ge=0, lt=1, description="last share of arrivals left out")

    @model_validator(mode="after")
    def _leaves_some(self) -> MetricsConfig:
        if self.warmup_fraction + self.cooldown_fraction >= 1:
            raise ValueError(f"warmup_fraction + cooldown_fraction must be < 1 (some requests measured), got "
                             f"{self.warmup_fraction} + {self.cooldown_fraction}")
        return self


class RequestClass(Strict):
    """A tenant or SLO tier: its ``share`` of requests (weights, normalised), a ``priority`` (lower is served
    first, as vLLM's priority scheduling), and optionally its own lengths and SLO."""

    name: str = Field(min_length=1)
    share: float = Field(gt=0)
    priority: int = 0
    input_tokens: LengthConfig | None = None
    output_tokens: LengthConfig | None = None
    slo: SLOConfig | None = None


class DatasetConfig(Strict):
    """Prompts and answers as text, counted in tokens: ``sharegpt`` (a JSON list or JSON lines of
    ``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}, ...]}``: each conversation's first
    human turn and the answer after it, as vLLM bench reads ShareGPT) or ``jsonl`` (one object per line with
    ``prompt_field`` and ``output_field``, text or a token count). Tokens: a Hugging Face ``tokenizer.json`` the
    user has (the ``tokenizers`` package: ``pip install 'llmsim[tokenizers]'``), else characters /
    ``chars_per_token``. ``num_requests`` pairs are drawn (seeded: without replacement while there are enough)."""

    path: str
    format: Literal["auto", "sharegpt", "jsonl"] = Field(
        default="auto", description="auto: sharegpt if the records have conversations, else jsonl")
    tokenizer: str | None = Field(default=None, description="path to a tokenizer.json (nothing is downloaded)")
    chars_per_token: float = Field(default=4.0, gt=0, le=100,
                                   description="without a tokenizer: characters per token (about 4 for English)")
    prompt_field: str = "prompt"
    output_field: str = "output"
    skip_bad: bool = Field(default=False, description="skip and count malformed lines and records instead of stopping")


class SessionsConfig(Strict):
    """Multi-turn sessions (chat, agents): ``num_requests`` sessions start at the arrival process's times; a
    session has ``turns`` turns; turn 1 sends ``input_tokens``, every later turn the conversation so far (every
    earlier turn's input and output) plus ``new_input_tokens`` (default ``input_tokens``); each turn answers
    ``output_tokens``. Turn n + 1 is sent ``think_ms`` (exponential, that mean) after turn n ends — closed within a
    session, open across sessions. A turn's prompt is its session's content, so prefix caching serves the part of
    the conversation still cached (an earlier turn's prompt; its output is recomputed, as prompt tokens). A turn
    that is rejected ends its session: the turns after it are rejected with that reason. With a sharegpt
    ``dataset``, each session is a conversation drawn from it: its turns are the conversation's human turns (the new
    input) and the answers after them (the output). Agents: a turn may fan out
    into ``fan_out`` sub-requests sent together, each the shared context plus its own ``branch_tokens``; the next
    turn is sent a think time after the last of them ends, and its context adds all their answers
    (:mod:`simulator.workload.sessions`)."""

    turns: LengthConfig | None = Field(default=None, description="turns per session (required unless a sharegpt "
                                       "dataset's conversations are the sessions)")
    think_ms: float = Field(default=0.0, ge=0, description="mean pause between a turn's end and the next's send "
                            "(an agent's tool call)")
    think: Literal["exponential", "fixed"] = Field(default="exponential", description="the pause's law")
    new_input_tokens: LengthConfig | None = None
    fan_out: LengthConfig | None = Field(
        default=None, description="agents: sub-requests a turn sends at once (default 1); the next turn waits for "
        "all of them and its context holds every one's answer")
    branch_tokens: LengthConfig | None = Field(
        default=None, description="fan_out: each sub-request's own prompt tokens after the shared context "
        "(default none: identical prompts, as parallel sampling)")


class WorkloadConfig(Strict):
    """Either synthetic (arrival + lengths + num_requests) or a trace (optionally cut to num_requests);
    ``classes`` splits the requests into tenants / tiers."""

    preset: str | None = Field(
        default=None, description="a named workload (llmsim workloads): its fields, then this section's over them")
    num_requests: int | None = Field(default=None, ge=1, le=MAX_REQUESTS)
    duration_s: float | None = Field(
        default=None, gt=0, le=1e9, description="open-loop arrivals: every request the arrival process sends "
        "within this many seconds (GuideLLM's --max-seconds); num_requests, if given, caps them")
    prefix: PrefixConfig | None = None
    arrival: ArrivalConfig | None = None
    input_tokens: LengthConfig | None = None
    output_tokens: LengthConfig | None = None
    trace: TraceConfig | None = None
    classes: list[RequestClass] | None = Field(default=None, min_length=1)
    max_concurrency: int | None = Field(
        default=None, ge=1, le=MAX_REQUESTS,
        description="open-loop arrivals: at most this many requests outstanding; the others wait at the client and "
        "are sent when one ends (vLLM bench's --max-concurrency: latencies count from the send)")
    client_connections: int | None = Field(
        default=None, ge=1, le=MAX_REQUESTS,
        description="the client's connection pool: at most this many requests on the wire; the others wait for a "
        "connection, their latencies counted from their send, the wait included (aiohttp's default session: 100)")
    sessions: SessionsConfig | None = Field(
        default=None, description="multi-turn sessions: num_requests counts sessions, the arrival their starts")
    dataset: DatasetConfig | None = Field(
        default=None, description="prompts and answers from a text dataset (ShareGPT, JSON lines), in tokens")

    @model_validator(mode="before")
    @classmethod
    def _expand_preset(cls, value: Any) -> Any:
        return with_preset(value)

    @model_validator(mode="after")
    def _sessions_fit(self) -> WorkloadConfig:
        if self.sessions is None:
            return self
        clashes = [name for name, given in (
            ("trace", self.trace is not None), ("classes", self.classes is not None),
            ("prefix", self.prefix is not None), ("max_concurrency", self.max_concurrency is not None),
            ("arrival.kind: closed_loop", self.arrival is not None and self.arrival.kind == "closed_loop"))
            if given]
        if clashes:
            raise ValueError(f"sessions start at an open-loop arrival process and carry their own prompts; they do "
                             f"not combine with {', '.join(clashes)} yet")
        if self.dataset is None and self.sessions.turns is None:
            raise ValueError("sessions.turns: required (unless a sharegpt dataset's conversations are the sessions)")
        if self.dataset is not None and self.dataset.format == "jsonl":
            raise ValueError("sessions from a dataset: its conversations are the sessions, so it must be sharegpt "
                             "(format jsonl has single prompt/answer pairs)")
        return self

    @model_validator(mode="after")
    def _duration_fits(self) -> WorkloadConfig:
        if self.duration_s is None:
            return self
        clashes = [name for name, given in (
            ("trace (its start_s / end_s cut it)", self.trace is not None), ("sessions", self.sessions is not None),
            ("arrival.kind: closed_loop", self.arrival is not None and self.arrival.kind == "closed_loop"))
            if given]
        if clashes:
            raise ValueError(f"duration_s bounds an open-loop arrival process; not with {', '.join(clashes)}")
        return self

    @model_validator(mode="after")
    def _one_source(self) -> WorkloadConfig:
        if self.max_concurrency is not None and self.arrival is not None and self.arrival.kind == "closed_loop":
            raise ValueError("max_concurrency caps open-loop arrivals; a closed loop's users already are the cap")
        classes = self.classes or []
        names = [c.name for c in classes]
        if len(set(names)) != len(names):
            raise ValueError(f"classes: names must be unique, got {names}")
        synthetic = {"arrival": self.arrival, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens}
        if self.dataset is not None:
            given = [k for k in ("input_tokens", "output_tokens", "trace", "classes", "prefix")
                     if getattr(self, k) is not None]
            if self.sessions is not None:  # the conversations are the sessions: their turns and lengths
                given += [f"sessions.{k}" for k in ("turns", "new_input_tokens", "fan_out", "branch_tokens")
                          if getattr(self.sessions, k) is not None]
            if given:
                raise ValueError(f"a dataset gives the lengths{' and the turns' if self.sessions else ''}; "
                                 f"remove {given}")
            synthetic = {"arrival": self.arrival}
        for key in ("input_tokens", "output_tokens"):
            if classes and all(getattr(c, key) is not None for c in classes):
                synthetic.pop(key)  # every class brings its own
        if self.trace is not None:
            given = [k for k, v in synthetic.items() if v is not None]
            given += [f"classes.{c.name}.{k}" for c in classes for k in ("input_tokens", "output_tokens")
                      if getattr(c, k) is not None]
            if given:
                raise ValueError(f"a trace workload takes arrivals and lengths from the trace; remove {given}")
        else:
            missing = [k for k, v in synthetic.items() if v is None]
            if self.num_requests is None and self.duration_s is None:
                missing.insert(0, "num_requests (or duration_s)")
            if missing:
                raise ValueError(f"a synthetic workload needs {missing} (or give trace: {{path: ...}})")
        return self


# --- experiment ----------------------------------------------------------------------------------------------
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


class ExperimentConfig(Strict):
    name: str = "experiment"
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    model: str = Field(description="catalog name, path to a model YAML, or a Hugging Face config.json")
    hardware: str = Field(description="catalog name or path to a hardware YAML; `<either>@<generation>` prices it with "
                          "another GPU generation's fitted parameters (e.g. h100-sxm@ampere)")
    dtype: Literal["bf16", "fp16", "fp8", "fp8_block", "int8", "int4", "mxfp4", "nvfp4"] = Field(
        default="bf16",
        description="weights: bf16/fp16 (activations the same), fp8/fp8_block/int8 (W8A8 at that peak), int4 "
        "(weight-only), mxfp4/nvfp4 (FP4 tensor cores where the GPU has them, else dequantised to 16-bit math); "
        "in a file, auto (the default there) = the checkpoint's quantization_config, else bf16; a quantised "
        "checkpoint's unquantised parts (e.g. gpt-oss attention) stay 16-bit",
    )
    engine: str = Field(
        default="vllm",
        description="engine profile: catalog name or path to a YAML; its server defaults fill the scheduler and KV "
        "cache settings the experiment leaves out",
    )
    cluster: ClusterConfig = ClusterConfig()
    scheduler: SchedulerConfig = ContinuousSchedulerConfig()
    kv_cache: KVCacheConfig = PagedKVConfig()
    cost_model: CostModelConfig = RooflineCostConfig()
    workload: WorkloadConfig
    slo: SLOConfig = SLOConfig()
    metrics: MetricsConfig = MetricsConfig()
    lora: LoRAConfig | None = None

    @model_validator(mode="after")
    def _lora_fits_the_deployment(self) -> ExperimentConfig:
        if self.lora is None:
            return self
        if self.scheduler.kind not in ("continuous", "chunked"):
            raise ValueError(f"lora: needs scheduler.kind continuous or chunked (got {self.scheduler.kind!r}): "
                             "max_loras is an admission rule of iteration-level batching")
        cluster = self.cluster
        pools = cluster.replica_pools() if cluster.kind == "colocated" else []
        if cluster.kind != "colocated" or any(pool.data_parallel > 1 for pool in pools):
            raise ValueError("lora: for colocated replicas without attention data parallelism (disaggregated pools "
                             "and DP ranks with adapters are not modelled yet)")
        return self
