"""The ``cluster:`` section: replica pools and their parallelism, routing, disaggregation transfers, faults
and autoscaling."""

from __future__ import annotations

import itertools
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from simulator.config.base import MAX_PARALLEL, MAX_RATE, MAX_REPLICAS, MAX_REQUESTS, MAX_TOKENS, Strict
from simulator.config.plugins import PluginSection
from simulator.errors import renamed


class RouterConfig(Strict):
    """Which replica takes an arriving request: a router registered in :mod:`simulator.cluster` (round_robin,
    random, least_outstanding, least_kv_load, power_of_two, session_affinity, prefix_affinity, adapter_affinity,
    precise_prefix) or a user's class by dotted path / ``file.py:Class``; a bare name is the kind. The built-in
    routers share this section; a router with knobs of its own registers a subclass with its ``kind`` as a
    ``Literal`` (precise_prefix: :mod:`simulator.cluster.precise_prefix`)."""

    kind: str = "round_robin"
    load_cap: float = Field(
        default=2.0, ge=1,
        description="prefix_affinity, adapter_affinity: leave a prefix's (adapter's) replica when it has more than "
        "load_cap × the mean outstanding",
    )


RouterSection = Annotated[RouterConfig, PluginSection("cluster.router", default="round_robin", custom=RouterConfig,
                                                      shorthand=True)]


MIG_DESCRIPTION = (
    "run each replica on one MIG slice of its GPU, an NVIDIA profile named <g>g.<memory>gb (3g.40gb on an H100 80GB: "
    "3/7 of its SMs and tensor throughput, 4/8 of its memory and HBM bandwidth; simulator.catalog.mig); the GPU "
    "needs mig_instances; the replica uses g/7 of a GPU (num_gpus) and runs without tensor, pipeline, data or "
    "expert parallelism; unset: whole GPUs")


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
    mig: str | None = Field(default=None, description=MIG_DESCRIPTION)

    @model_validator(mode="after")
    def _experts_within_tensor_parallel(self) -> PoolConfig:
        _check_expert_parallel(self.tensor_parallel, self.data_parallel, self.expert_parallel)
        _check_mig(self.mig, self.tensor_parallel, self.pipeline_parallel, self.data_parallel, self.expert_parallel)
        return self

    @property
    def schedulers(self) -> int:
        """Batches scheduled independently: one per attention-DP rank of every replica."""
        return self.replicas * self.data_parallel

    @property
    def gpus(self) -> int:
        return self.schedulers * self.tensor_parallel * self.pipeline_parallel


def _check_mig(mig: str | None, tensor_parallel: int, pipeline_parallel: int, data_parallel: int,
               expert_parallel: int) -> None:
    """A replica on a MIG slice is one GPU instance: no NVLink or P2P joins instances, so no parallelism."""
    degrees = {"tensor_parallel": tensor_parallel, "pipeline_parallel": pipeline_parallel,
               "data_parallel": data_parallel, "expert_parallel": expert_parallel}
    wrong = [f"{name} {value}" for name, value in degrees.items() if value != 1]
    if mig is not None and wrong:
        raise ValueError(f"mig: {mig!r} runs each replica on one MIG slice, which has no NVLink or P2P to another: "
                         f"tensor_parallel, pipeline_parallel, data_parallel and expert_parallel must be 1 (got "
                         f"{', '.join(wrong)})")


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
    its KV; it is back, empty, after ``duration_s`` — the restart with its cold start), ``slow`` (it runs
    ``slowdown`` times slower for ``duration_s``: thermal throttling) or ``noisy_neighbor`` (for ``duration_s``
    another tenant of its GPU — a MIG or time-sliced neighbour, a co-located job — takes ``compute_share`` of its
    FLOP rate and ``bandwidth_share`` of its HBM bandwidth: each iteration's compute-limited part takes
    1 / (1 − compute_share) times as long, its memory-limited part 1 / (1 − bandwidth_share), its fixed part the
    same; :func:`simulator.cost.work.contended`; needs the roofline cost model)."""

    at_s: float = Field(ge=0, description="when the fault begins, seconds from the start of the run")
    replica: int | None = Field(default=None, ge=0)
    node: int | None = Field(default=None, ge=0)
    kind: Literal["crash", "slow", "noisy_neighbor"]
    duration_s: float = Field(gt=0, description="how long it lasts, seconds")
    slowdown: float = Field(default=2.0, ge=1, le=1000, description="slow: times slower")
    compute_share: float = Field(default=0.0, ge=0, lt=1, description="noisy_neighbor: the fraction of the GPU's "
                                 "FLOP rate the neighbour takes, in [0, 1)")
    bandwidth_share: float = Field(default=0.0, ge=0, lt=1, description="noisy_neighbor: the fraction of the "
                                   "GPU's HBM bandwidth the neighbour takes, in [0, 1)")

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


class TokenBucketAdmission(Strict):
    """A gateway's token bucket in front of the router (Envoy's local rate limit, an API gateway's per-key limit):
    the bucket holds at most ``burst`` tokens, starts full and refills continuously at ``rate`` tokens per second.
    A request reaching the cluster takes its cost from the bucket — one token (``unit: requests``) or its prompt
    plus its maximum output tokens (``unit: tokens``) — when the bucket holds that much, and is otherwise rejected
    with the reason ``admission: token bucket empty``, before routing. Under arrivals faster than the refill it
    admits ``burst + rate × T`` requests (± 1) in T seconds."""

    kind: Literal["token_bucket"]
    rate: float = Field(gt=0, le=MAX_RATE * MAX_TOKENS, description="refill rate: requests per second (unit "
                        "requests) or tokens per second (unit tokens)")
    burst: float = Field(ge=1, le=MAX_RATE * MAX_TOKENS, description="bucket size, which it starts with: requests "
                         "(unit requests) or tokens (unit tokens); the most admitted at once after a quiet spell")
    unit: Literal["requests", "tokens"] = Field(
        default="requests", description="what a request costs: requests = 1; tokens = its prompt plus its maximum "
        "output tokens")


class SLOAdmission(Strict):
    """Refuse on arrival a request that would miss its TTFT bound given the prompts queued ahead of it on the
    replica the router chose: its predicted TTFT is the time since its client sent it plus the prompt tokens of
    the requests waiting there that were never scheduled and its own prompt, at the replica's prefill rate
    (:mod:`simulator.cluster.admission`); it is rejected when that exceeds ``(1 − margin) × ttft_ms``. Running
    decodes, prefix-cache hits and in-progress prefills are left out of the prediction."""

    kind: Literal["slo"]
    ttft_ms: float | None = Field(
        default=None, gt=0, le=1e9, description="the TTFT bound, ms (default: the request's class's slo.ttft_ms, "
        "else the experiment's slo.ttft_ms)")
    margin: float = Field(default=0.0, ge=0, lt=1, description="headroom kept below the bound, a fraction: admit "
                          "while the predicted TTFT is at most (1 − margin) × ttft_ms")
    prefill_tokens_per_s: float | None = Field(
        default=None, gt=0, le=1e12, description="prompt tokens per second one replica prefills (default: from the "
        "cost model, a full iteration of max_num_batched_tokens prompt tokens)")


AdmissionConfig = Annotated[TokenBucketAdmission | SLOAdmission, Field(discriminator="kind")]


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
    mig: str | None = Field(default=None, description=MIG_DESCRIPTION + " (identical replicas; pools, and the "
                            "prefill and decode pools, set their own)")
    router: RouterSection = RouterConfig()
    pools: list[PoolConfig] | None = Field(default=None, min_length=1, description="heterogeneous colocated replicas")
    prefill: PoolConfig | None = None
    decode: PoolConfig | None = None
    transfer: TransferConfig = TransferConfig()
    decode_router: RouterSection = RouterConfig(kind="least_outstanding")
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
    admission: AdmissionConfig | None = Field(
        default=None, description="admission control at the cluster's front door: token_bucket (a rate limit) or "
        "slo (refuse what would miss its TTFT bound); the scheduler's max_queue_len and max_queue_delay_ms still "
        "bound each replica's own queue")
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
        if self.mig is not None and (self.kind == "disaggregated" or self.pools is not None):
            raise ValueError(f"mig: {self.mig!r} is for a cluster of identical replicas; give each pool its own "
                             "mig (pools[i].mig, prefill.mig, decode.mig)")
        _check_mig(self.mig, self.tensor_parallel, self.pipeline_parallel, self.data_parallel, self.expert_parallel)
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
        ) or self.mig is not None:
            raise ValueError("autoscaler: for a colocated cluster of identical replicas without attention data "
                             "parallelism, faults or MIG slices (pools, disaggregated pools, DP ranks, faults and "
                             "MIG slices under autoscaling are not modelled yet)")
        if not scaler.min_replicas <= self.replicas <= scaler.max_replicas:
            raise ValueError(f"replicas: {self.replicas} (the starting count) is outside the autoscaler's "
                             f"[min_replicas, max_replicas] = [{scaler.min_replicas}, {scaler.max_replicas}]")

    def replica_pools(self) -> list[PoolConfig]:
        """The pools in replica-index order (disaggregated: prefill first, then decode)."""
        if self.kind == "disaggregated":
            assert self.prefill is not None and self.decode is not None  # validated: a disaggregated cluster has both
            return [self.prefill, self.decode]
        if self.pools is not None:
            return list(self.pools)
        return [PoolConfig(replicas=self.replicas, tensor_parallel=self.tensor_parallel,
                           pipeline_parallel=self.pipeline_parallel, data_parallel=self.data_parallel,
                           expert_parallel=self.expert_parallel, mig=self.mig)]
