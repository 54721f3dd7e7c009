"""Build the SimPy world from an experiment and run it to completion."""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import simpy

from simulator.catalog.mig import gpu_share
from simulator.cluster.admission import FrontDoor
from simulator.cluster.autoscaler import Autoscaler, cold_start_s
from simulator.cluster.cancellation import ClientCancellations
from simulator.cluster.connections import ConnectionPool
from simulator.cluster.disaggregated import PrefillToDecode
from simulator.cluster.faults import Faults
from simulator.cluster.feeds import ArrivalFeed, CappedArrivalFeed, ClosedLoopFeed, RequestFactory, SessionFeed
from simulator.cluster.frontend import FrontEnd
from simulator.cluster.lockstep import Lockstep
from simulator.cluster.pool_setup import setup_pool
from simulator.cluster.progress_ticks import LONG_RUN, ProgressTicks
from simulator.cluster.replica import Replica
from simulator.cluster.router import ROUTERS, Router
from simulator.cluster.wakeup import run_all
from simulator.config.cluster import PoolConfig
from simulator.config.deployment import Deployment, pool_labels, resolve
from simulator.config.experiment import ExperimentConfig
from simulator.cost import build_cost_model
from simulator.cost.draft import build_draft
from simulator.cost.work import gemm_peak
from simulator.dtypes import bytes_per_element
from simulator.errors import ConfigError, LLMSimError
from simulator.kv import KV_ALLOCATORS, KVBudget, kv_dtype
from simulator.kv.span_reserve import SpanReserve, span_reserve
from simulator.kv.tiers import KVTiers
from simulator.results.bounds import IterationBounds, Roofs
from simulator.results.metrics import RunTotals, Scaling
from simulator.results.observers import Observer
from simulator.results.progress import NoProgress, progress_bar
from simulator.results.recorder import Recorder
from simulator.results.token_log import TokenLog
from simulator.schedulers import SCHEDULERS, Scheduler
from simulator.schedulers.lora import AdapterSlots
from simulator.workload import generate_requests
from simulator.workload.adapters import assign_adapters
from simulator.workload.cancellation import client_deadlines


@dataclass
class SimulationOutput:
    recorder: Recorder
    kv_budget: KVBudget  # of the last pool (the decode pool when disaggregated)
    num_requests: int
    num_gpus: int | float  # GPUs' worth (gpu_count)
    final_kv_used_blocks: list[int]  # per replica at the end; 0 unless something leaked
    prefix_hit_tokens: int  # prompt tokens served from prefix caches
    trace_rows_skipped: int  # malformed trace rows skipped (workload.trace.skip_bad)
    kv_blocks_per_replica: list[int]  # pool size of each replica (pools may differ)
    scaling_events: list[tuple] | None = None  # cluster.autoscaler: (time_s, event, replica, ready, provisioned)
    gpus_per_replica: int = 0  # with an autoscaler
    bounds: IterationBounds | None = None  # metrics.iteration_bounds

    def totals(self) -> RunTotals:
        """What the run counted beside its request table, as the summary takes it."""
        recorder, budget = self.recorder, self.kv_budget
        return RunTotals(
            kv_num_blocks=budget.num_blocks, kv_block_size=budget.block_size,
            peak_kv_blocks=recorder.peak_kv_blocks, kv_token_seconds=recorder.kv_token_seconds,
            peak_running=recorder.peak_running, iterations=recorder.iterations, num_gpus=self.num_gpus,
            prefill_tokens=recorder.prefill_tokens, swapped_tokens=recorder.swapped_tokens,
            running_seconds=recorder.running_seconds, kv_breakdown_seconds=recorder.kv_breakdown_seconds,
            prefix_hit_tokens=self.prefix_hit_tokens, copied_tokens=recorder.copied_tokens,
            cancelled_output_tokens=recorder.cancelled_output_tokens,
            trace_rows_skipped=self.trace_rows_skipped, kv_blocks_per_replica=self.kv_blocks_per_replica,
            scaling=Scaling(self.scaling_events, self.gpus_per_replica) if self.scaling_events is not None else None)


def _router(config: ExperimentConfig, router_config, replicas: list[Replica], stream: int, env: simpy.Environment,
            field: str = "cluster.router") -> Router:
    try:
        cls = ROUTERS.get(router_config.kind)
    except LLMSimError as exc:  # name the field the kind came from (router or decode_router)
        raise LLMSimError(str(exc).replace("cluster.router", field, 1)) from None
    if not (isinstance(cls, type) and issubclass(cls, Router)):
        raise ConfigError(f"{field}.kind: {router_config.kind!r} is not a subclass of "
                          "simulator.cluster.router.Router")
    router = cls(replicas, router_config, np.random.default_rng(np.random.SeedSequence([config.seed, stream])))
    router.clock = env
    return router


@dataclass
class Pool:
    """Replicas of one kind: their KV budget, cost model and GPU count."""

    replicas: list[Replica]
    budget: KVBudget
    gpus: int


def gpu_count(deployment: Deployment, pools: list[PoolConfig]) -> int | float:
    """The GPUs the pools' replicas use: Σ pool GPUs × the part of a GPU each is (g/7 on a MIG slice,
    :func:`~simulator.catalog.mig.gpu_share`), an ``int`` when whole (7 replicas on 1g slices: 1), else a float."""
    share = sum((pool.gpus * gpu_share(deployment.gpu(pool)) for pool in pools), Fraction(0))
    return int(share) if share.denominator == 1 else float(share)


def replica_nodes(deployment: Deployment, pools: list[PoolConfig]) -> list[frozenset[int]]:
    """The nodes each replica's GPUs are on: replicas fill nodes of their hardware's ``gpus_per_node`` in index
    order (as many whole replicas as fit a node; one larger than a node spans ceil(GPUs / node) nodes), each pool
    starting on a fresh node."""
    nodes, first = [], 0
    for pool in pools:
        per_node = deployment.gpu(pool).node.gpus_per_node
        gpus = pool.tensor_parallel * pool.pipeline_parallel * pool.data_parallel
        if gpus <= per_node:
            fit = per_node // gpus
            nodes += [frozenset({first + j // fit}) for j in range(pool.replicas)]
            first += -(-pool.replicas // fit)
        else:
            span = -(-gpus // per_node)
            nodes += [frozenset(range(first + j * span, first + (j + 1) * span)) for j in range(pool.replicas)]
            first += pool.replicas * span
    return nodes


def _allocator(allocator_cls, kv_cfg, budget: KVBudget, max_model_len: int):
    """One replica's KV allocator; with bounded-span layers wrapped in their per-sequence reserve."""
    if not budget.spans:
        return allocator_cls.from_config(kv_cfg, budget.num_blocks, budget.block_size, max_model_len)
    longest = max_model_len + span_reserve(budget.spans, max_model_len)
    inner = allocator_cls.from_config(kv_cfg, budget.num_blocks, budget.block_size, longest)
    return SpanReserve(inner, list(budget.spans))


def _build_pool(
    config: ExperimentConfig, deployment: Deployment, pool: PoolConfig, first_index: int, env: simpy.Environment,
    recorder: Recorder, fast_forward: bool, label: str = "cluster", bounds: IterationBounds | None = None,
) -> Pool:
    """One pool's replicas (``label``: where the pool is configured, for errors; ``bounds``: where they record
    their iterations' bounds, if at all)."""
    setup = setup_pool(config, deployment, pool, label)
    engine, hardware, budget, cost = deployment.engine, deployment.gpu(pool), setup.budget, setup.cost
    if not cost.prices_work and any(fault.kind == "noisy_neighbor" for fault in config.cluster.faults):
        raise ConfigError(f"cluster.faults: noisy_neighbor needs a cost model that splits an iteration into compute, "
                          f"memory and fixed parts (roofline); {config.cost_model.kind} does not")
    if bounds is not None and not cost.prices_work:
        raise ConfigError(f"metrics.iteration_bounds: needs a cost model that prices FLOPs and bytes (roofline); "
                          f"{config.cost_model.kind} does not")
    sched, kv_cfg, lora_cost = setup.scheduler, config.kv_cache, setup.lora_cost
    max_model_len, batched_tokens = setup.max_model_len, setup.max_num_batched_tokens
    allocator_cls, scheduler_cls = KV_ALLOCATORS.get(kv_cfg.kind), SCHEDULERS.get(sched.kind)
    if not (isinstance(scheduler_cls, type) and issubclass(scheduler_cls, Scheduler)):
        raise ConfigError(f"scheduler.kind: {sched.kind!r} is not a subclass of simulator.schedulers.Scheduler")
    swap_capacity = int(kv_cfg.swap_space_gib * 2**30 / budget.kv_bytes_per_token)
    swap_seconds = budget.kv_bytes_per_token / (hardware.host_link_gb_per_s * 1e9)  # each GPU moves its shard
    copy_seconds = 2 * budget.kv_bytes_per_token / hardware.achievable_bandwidth  # read + write in HBM
    if getattr(sched, "speculative", None) is not None and kv_cfg.kind != "paged":
        raise ConfigError(f"scheduler.speculative: needs kv_cache.kind: paged (drafted tokens take KV blocks), "
                          f"got {kv_cfg.kind!r}")
    if sched.capacity_policy == "guaranteed_no_evict" and kv_cfg.kind != "paged":
        raise ConfigError(f"scheduler.capacity_policy: guaranteed_no_evict needs kv_cache.kind: paged (a contiguous "
                          f"cache reserves its slabs by kv_cache.reserve), got {kv_cfg.kind!r}")

    def seed_of(index: int) -> int:
        """Replica ``index``'s scheduler seed (its speculative acceptance draws; none without speculation)."""
        return int(np.random.SeedSequence([config.seed, 4, index]).generate_state(1)[0])

    offload = getattr(kv_cfg, "offload", None)
    gpus = pool.gpus // pool.schedulers  # each scheduler's GPUs (an attention-DP rank's: TP x PP)

    def new_allocator():
        """An empty KV pool, with empty tiers below it under ``kv_cache.offload`` (simulator.kv.tiers)."""
        allocator = _allocator(allocator_cls, kv_cfg, budget, max_model_len)
        if offload is not None:  # on the prefix cache itself (inside a bounded-span reserve, for a windowed model)
            holder = allocator.inner if isinstance(allocator, SpanReserve) else allocator
            holder.tiers = KVTiers.build(
                offload, block_size=budget.block_size, kv_bytes_per_token=budget.kv_bytes_per_token, gpus=gpus,
                host_link_gb_per_s=hardware.host_link_gb_per_s, layers=deployment.model.num_layers,
                clock=lambda: env.now, totals=recorder.tier_totals)
        return allocator

    def new_scheduler(index: int) -> Scheduler:
        """An empty scheduler and KV pool for replica ``index`` (also what a crashed replica restarts with)."""
        scheduler = scheduler_cls(
            new_allocator(), sched, max_model_len, batched_tokens,
            swap_capacity, seed=seed_of(index) if getattr(sched, "speculative", None) is not None else 0,
        )
        scheduler.accepted_counts = recorder.accepted_counts  # speculating: the run's acceptance tally
        if lora_cost is not None and config.lora is not None:  # (set together)
            scheduler.lora = AdapterSlots(config.lora, lora_cost.bytes_per_gpu, pool.tensor_parallel
                                          * pool.pipeline_parallel, hardware.host_link_gb_per_s * 1e9,
                                          recorder.adapter_totals)
        return scheduler

    replicas = [Replica(env, first_index + i, new_scheduler(first_index + i), cost, recorder, fast_forward,
                        swap_seconds, copy_seconds) for i in range(pool.schedulers)]
    idle, board = hardware.idle_watts, hardware.board_power_w
    power = (gpus * idle, gpus * (board - idle)) if idle is not None and board is not None else (math.nan, math.nan)
    roofs = Roofs(*gemm_peak(hardware, config.dtype), hardware.memory_bandwidth_gb_per_s * 1e9, *power)
    for replica in replicas:
        if bounds is not None:
            bounds.power[replica.index] = (gpus, roofs.idle_w)
        replica.new_scheduler = lambda index=replica.index: new_scheduler(index)
        replica.lora_cost = lora_cost
        replica.vision_cost = setup.vision_cost
        replica.bounds = (bounds, roofs) if bounds is not None else None
        replica.async_scheduling = sched.async_scheduling
        replica.recv_interval = sched.recv_interval
        replica.holds_first_tokens = sched.async_scheduling and engine.prompt_batch_holds_outputs
    if pool.data_parallel > 1:  # the attention-DP ranks of each replica step together
        for first in range(0, len(replicas), pool.data_parallel):
            Lockstep(env, replicas[first:first + pool.data_parallel], cost)
    speculative = getattr(sched, "speculative", None)
    if speculative is not None:
        draft_tp = setup.draft_tensor_parallel  # the draft model's own tensor parallelism, where given
        cluster = setup.shaped.cluster if draft_tp is None else setup.shaped.cluster.model_copy(update={
            "tensor_parallel": draft_tp})
        draft_cost = None if deployment.draft_model is None else build_cost_model(
            setup.shaped.model_copy(update={"model": speculative.draft_model, "cluster": cluster}),
            deployment.draft_model, hardware, engine)
        draft = build_draft(speculative, setup.shaped, cost, hardware, engine, deployment.draft_head, draft_cost)
        for replica in replicas:
            replica.draft = draft
    return Pool(replicas, budget, pool.gpus)


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the event loop, restoring it after. The loop allocates millions
    of short-lived objects that reference counting frees (the engine makes no reference cycles per event); the
    collector's periodic passes over them cost 5% of a run's instructions and find nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def simulate(
    config: ExperimentConfig, *, fast_forward: bool = True, requests_path: str | Path | None = None,
    observer: Observer | None = None, tokens: TokenLog | None = None, progress: bool = False,
) -> SimulationOutput:
    """Run an experiment; ``fast_forward=False`` steps decode iterations one at a time (same results, slower).

    With ``requests_path`` the per-request rows are streamed to that Parquet file as they complete; an
    ``observer`` (:mod:`simulator.results.observers`) collects timelines, iterations and transfers; ``tokens``
    (:mod:`simulator.results.token_log`) every output token's time (colocated clusters without speculative decoding);
    ``progress``: a bar on a terminal for runs of :data:`LONG_RUN` requests or more. With ``metrics.iteration_bounds``
    the replicas record what bound each iteration (:mod:`simulator.results.bounds`)."""
    if tokens is not None and (config.cluster.kind != "colocated" or getattr(config.scheduler, "speculative", None)):
        raise ConfigError("--tokens: the per-token table is for colocated clusters without speculative decoding "
                          "(disaggregated first tokens and drafted tokens are not logged yet)")
    deployment = resolve(config)
    model = deployment.model
    cluster = config.cluster
    pool_configs = cluster.replica_pools()
    scaler = cluster.autoscaler
    if scaler is not None:  # every replica it may provision, built up front (the ones beyond the start are off)
        pool_configs = [pool_configs[0].model_copy(update={"replicas": scaler.max_replicas})]
    workload = generate_requests(config.workload, np.random.SeedSequence(config.seed))

    env = simpy.Environment()
    recorder = Recorder(sum(p.schedulers for p in pool_configs), requests_path)
    speculative = getattr(config.scheduler, "speculative", None)
    if speculative is not None:  # verification steps by accepted drafts, tallied by every replica's scheduler
        recorder.accepted_counts = np.zeros(speculative.num_speculative_tokens + 1, dtype=np.int64)
    bounds = IterationBounds() if config.metrics.iteration_bounds else None
    pools, first = [], 0
    labels = pool_labels(cluster)
    for pool_config, label in zip(pool_configs, labels, strict=True):
        pools.append(_build_pool(config, deployment, pool_config, first, env, recorder, fast_forward, label, bounds))
        first += pool_config.schedulers
    replicas = [replica for pool in pools for replica in pool.replicas]
    for replica in replicas:
        replica.observer = observer
        replica.tokens = tokens
    routed = pools[0].replicas if cluster.kind == "disaggregated" else replicas  # the entry pool
    # what arriving requests are submitted to: the entry pool's replicas, or their front ends
    entry: list[Replica] | list[FrontEnd] = routed
    router = _router(config, cluster.router, routed, 1, env)
    enter, handoff = None, None
    if cluster.kind == "disaggregated":
        decode = pools[1]
        decode_router = _router(config, cluster.decode_router, decode.replicas, 2, env, "cluster.decode_router")
        handoff = PrefillToDecode(
            env, pools[0].replicas, decode.replicas, decode_router, cluster.transfer,
            model.kv_bytes_per_token(bytes_per_element(kv_dtype(config.kv_cache.dtype, config.dtype))),
            model.num_layers, recorder, cluster.first_token_from,
        )
        handoff.observer = observer
        enter = handoff.enter
    if cluster.faults or cluster.mtbf_h is not None:
        nodes = replica_nodes(deployment, pool_configs)
        last = max(max(n) for n in nodes)
        wrong = [f.node for f in cluster.faults if f.node is not None and f.node > last]
        if wrong:
            raise ConfigError(f"cluster.faults: node {wrong[0]} does not exist (the replicas are on nodes 0–{last})")
        ranks, first_rank = [], 0  # each replica's schedulers (its attention-DP ranks)
        for pool_config in pool_configs:
            for _ in range(pool_config.replicas):
                ranks.append(list(range(first_rank, first_rank + pool_config.data_parallel)))
                first_rank += pool_config.data_parallel
        faults = Faults(env, replicas, router, recorder, cluster.faults, cluster.fault_retries, nodes, ranks,
                        cluster.health_check_s, cluster.connect_timeout_s)
        if handoff is not None:  # a crashed replica's requests start again in the prefill pool
            faults.handoff = handoff
            faults.pools([pool.replicas for pool in pools])
        if cluster.mtbf_h is not None:
            gpus = [p.gpus // p.replicas for p in pool_configs for _ in range(p.replicas)]
            faults.random_failures([cluster.mtbf_h * 3600 / g for g in gpus], cluster.repair_s,
                                   np.random.default_rng(np.random.SeedSequence([config.seed, 7])),
                                   len(workload.arrival_s))
    adapters = None
    if config.lora is not None:
        adapters = assign_adapters(config.lora, len(workload.arrival_s), workload.sessions,
                                   np.random.default_rng(np.random.SeedSequence([config.seed, 6])))
    watch = None
    deadlines = client_deadlines(config.workload, len(workload.arrival_s),
                                 np.random.default_rng(np.random.SeedSequence([config.seed, 8])))
    if deadlines is not None:
        watch = ClientCancellations(env, replicas, recorder, *deadlines, handoff=handoff).watch
    factory = RequestFactory(workload, [c.priority for c in config.workload.classes or []], enter, adapters, watch)
    delay_s = config.cost_model.network_ms / 1000 + config.cost_model.tokenize_us_per_token * 1e-6 * (
        workload.input_tokens
    )
    engine = deployment.engine
    if engine.frontend_ms_per_request or engine.frontend_us_per_prompt_token:
        entry = [FrontEnd(env, replica, engine.frontend_ms_per_request / 1000,
                          engine.frontend_us_per_prompt_token * 1e-6) for replica in entry]
    autoscaler, gpus_per_replica = None, 0
    if scaler is not None:
        pool = pools[0]
        gpus_per_replica = pool.gpus // len(pool.replicas)
        cold = cold_start_s(scaler, deployment.gpu(), pool.budget.weight_bytes, gpus_per_replica)
        autoscaler = Autoscaler(env, replicas, entry, scaler, cluster.replicas, cold, recorder,
                                len(workload.arrival_s), router)
        entry = autoscaler.entries
    arrival = config.workload.arrival

    def send(request):
        entry[router.route(request)].submit(request)

    door = FrontDoor.build(config, env, router, entry, recorder)
    if door is not None:
        send = door.send
    if config.workload.client_connections is not None:  # registers before the feed (simulator.cluster.connections)
        send = ConnectionPool(config.workload.client_connections, send, recorder).send
    if config.workload.sessions is not None:
        sessions = config.workload.sessions
        SessionFeed(env, factory, delay_s, send, recorder, sessions.think_ms,
                    np.random.default_rng(np.random.SeedSequence([config.seed, 5])), sessions.think == "fixed")
    elif arrival is not None and arrival.kind == "closed_loop":
        ClosedLoopFeed(env, factory, delay_s, send, recorder, arrival, np.random.default_rng(
            np.random.SeedSequence([config.seed, 3])))
    elif config.workload.max_concurrency is not None:
        CappedArrivalFeed(env, factory, delay_s, send, recorder, config.workload.max_concurrency)
    else:
        ArrivalFeed(env, factory, delay_s, send)
    total = len(workload.arrival_s)
    bar = progress_bar(total, "run", "request", progress and total >= LONG_RUN)
    if not isinstance(bar, NoProgress):
        ProgressTicks(env, recorder, total, float(np.nanmax(workload.arrival_s)) if total else 0.0, bar)
    try:
        with _cyclic_gc_paused():
            run_all(env)
    finally:
        bar.close()
    for replica in replicas:
        replica.record_totals()
    recorder.requests.close()
    return SimulationOutput(
        recorder, pools[-1].budget, len(workload.arrival_s), gpu_count(deployment, pool_configs),
        [replica.scheduler.kv.used_blocks for replica in replicas],
        sum(getattr(replica.scheduler.kv, "hit_tokens", 0) for replica in replicas), workload.skipped,
        [replica.scheduler.kv.num_blocks for replica in replicas],
        autoscaler.events if autoscaler is not None else None, gpus_per_replica, bounds,
    )
