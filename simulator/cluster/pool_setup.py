"""What one pool's replicas are before anything runs: the batch limits its scheduler enforces, its KV budget and its
cost model, checked against the rules the engines apply (:func:`setup_pool`). The simulation builds its replicas
from it; the deployment planner prices a deployment from it without simulating."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from simulator.config.cluster import PoolConfig
from simulator.config.deployment import Deployment
from simulator.config.experiment import ExperimentConfig
from simulator.cost import build_cost_model
from simulator.cost.base import CostModel
from simulator.cost.lora import LoRACost
from simulator.cost.roofline import expert_slots
from simulator.cost.vision import VisionCost
from simulator.errors import ConfigError
from simulator.kv import KVBudget, kv_budget, kv_dtype, sglang_memory


@dataclass(frozen=True)
class PoolSetup:
    """One pool's replica as configured: ``config`` the experiment with the pool's own batch limits laid over its
    scheduler section; ``scheduler`` that section with SGLang's ``max_num_seqs: auto`` resolved from the KV pool;
    the token limits with vLLM's defaults; ``mem_fraction_static`` the KV cache's share with ``auto`` resolved (None
    when another share sizes the pool); one replica's (attention-DP rank's) KV budget, cost model and LoRA cost; and
    ``shaped``, the experiment shaped to the pool's parallelism (what its cost models are built from); the vision
    encoder's cost where the workload has images."""

    config: ExperimentConfig
    scheduler: Any
    max_model_len: int
    max_num_batched_tokens: int
    mem_fraction_static: float | None
    budget: KVBudget
    cost: CostModel
    lora_cost: LoRACost | None
    shaped: ExperimentConfig
    vision_cost: VisionCost | None = None  # the model's image encoder, with a workload's images
    draft_tensor_parallel: int | None = None  # a draft model's own tensor parallelism, where given


def setup_pool(config: ExperimentConfig, deployment: Deployment, pool: PoolConfig,
               label: str = "cluster") -> PoolSetup:
    """One pool's replica before it runs (``label``: where the pool is configured, for errors); raises
    :class:`~simulator.errors.LLMSimError` for a deployment the engines would refuse or that does not fit."""
    model, engine, hardware = deployment.model, deployment.engine, deployment.gpu(pool)
    check_parallelism(model, pool.tensor_parallel, pool.pipeline_parallel, pool.expert_parallel, pool.data_parallel)
    limits = {key: value for key in ("max_num_seqs", "max_num_batched_tokens")
              if (value := getattr(pool, key)) is not None}
    if limits:  # this pool's own batch limits, checked as the scheduler section would be
        try:
            sched = type(config.scheduler).model_validate({**config.scheduler.model_dump(), **limits})
        except ValidationError as exc:
            problems = "; ".join(error["msg"].removeprefix("Value error, ") for error in exc.errors())
            raise ConfigError(f"{label}: {problems}") from None
        config = config.model_copy(update={"scheduler": sched})
    max_model_len, batched_tokens = batch_limits(config, model.max_position_embeddings)
    sched, kv_cfg = config.scheduler, config.kv_cache
    lora_cost = None
    adapter_bytes = 0.0  # LoRA adapters' GPU slots, per GPU
    if config.lora is not None:
        lora_cost = LoRACost(model, hardware, pool.tensor_parallel, config.lora.rank, config.lora.target_modules,
                             config.dtype, engine.compute_efficiency, engine.memory_efficiency)
        adapter_bytes = lora_cost.bytes_per_gpu * config.lora.max_loras
    vision_cost = None  # (a vision model's encoder weights count in its budget's weights: simulator.kv.sizing)
    if config.workload.images is not None:
        if model.vision is None:
            raise ConfigError(f"workload.images: model {model.name} has no vision encoder (no vision_config in its "
                              "config, or one of a family not modelled: Qwen2-VL and Qwen2.5-VL's are) to encode "
                              "images; use a vision-language model such as qwen2.5-vl-7b")
        vision_cost = VisionCost(model.vision, hardware, pool.tensor_parallel, engine.compute_efficiency,
                                 engine.memory_efficiency)
    running_from_pool = sched.max_num_seqs == "auto"
    if running_from_pool and kv_cfg.mem_fraction_static is None:
        raise ConfigError("scheduler.max_num_seqs: auto (SGLang's, from the KV pool) needs kv_cache."
                          "mem_fraction_static, which keeps the activations out of the pool it is taken from")
    mem_fraction = (sglang_memory.mem_fraction_static(
        hardware.memory_gib, batched_tokens, pool.data_parallel * pool.tensor_parallel, pool.pipeline_parallel,
        pool.data_parallel) if kv_cfg.mem_fraction_static == "auto" else kv_cfg.mem_fraction_static)
    draft_tp = draft_tensor_parallel(sched, pool, label)
    budget = kv_budget(
        model, hardware, tensor_parallel=pool.tensor_parallel, weight_dtype=config.dtype,
        kv_dtype_name=kv_dtype(kv_cfg.dtype, config.dtype), gpu_memory_utilization=kv_cfg.gpu_memory_utilization,
        block_size=kv_cfg.block_size, max_num_batched_tokens=batched_tokens,
        max_num_seqs=sched.max_num_seqs if sched.max_num_seqs != "auto" else 1,  # (under a memory share: not read)
        max_model_len=max_model_len, num_blocks_override=kv_cfg.num_gpu_blocks,
        pipeline_parallel=pool.pipeline_parallel, expert_shards=pool.data_parallel * pool.tensor_parallel,
        free_memory_fraction=kv_cfg.free_memory_fraction,
        mem_fraction_static=mem_fraction,
        adapter_bytes=adapter_bytes,
        expert_replication=_expert_replication(config, model, pool.expert_parallel),
        data_parallel=pool.data_parallel, expert_parallel=pool.expert_parallel, draft=deployment.draft_head,
        draft_model=deployment.draft_model, draft_tensor_parallel=draft_tp,
    )
    if running_from_pool:  # SGLang sets its running requests from the pool (its activations live outside it)
        sched = sched.model_copy(update={"max_num_seqs": sglang_memory.max_running_requests(
            budget.capacity_tokens, max_model_len)})
        _check_running_fit_budget(sched, batched_tokens)
    shaped = config.model_copy(update={"cluster": config.cluster.model_copy(update={
        "tensor_parallel": pool.tensor_parallel, "pipeline_parallel": pool.pipeline_parallel,
        "data_parallel": pool.data_parallel, "expert_parallel": pool.expert_parallel})})
    cost = build_cost_model(shaped, model, hardware, engine)
    return PoolSetup(config, sched, max_model_len, batched_tokens, mem_fraction, budget, cost, lora_cost, shaped,
                     vision_cost, draft_tp)


def draft_tensor_parallel(sched: Any, pool: PoolConfig, label: str = "cluster") -> int | None:
    """A draft model's tensor parallelism where it is given (``draft_tensor_parallel_size``): 1 or the pool's, as
    vLLM accepts (its SpeculativeConfig: "Can only be 1 or the same as the target model's tensor parallel size")."""
    speculative = getattr(sched, "speculative", None)
    d = speculative.draft_tensor_parallel_size if speculative is not None else None
    if d is not None and d not in (1, pool.tensor_parallel):
        raise ConfigError(f"scheduler.speculative.draft_tensor_parallel_size: {d} must be 1 or {label}'s "
                          f"tensor_parallel {pool.tensor_parallel} (vLLM's rule)")
    return d


def _check_running_fit_budget(sched, batched: int) -> None:
    """Where running requests' decode tokens share an iteration's token budget (all but prefill-first continuous
    batching, whose prompt batches alone are budgeted), every one of ``max_num_seqs`` must fit it, as vLLM checks."""
    if getattr(sched, "prefill_priority", False):
        return
    speculative = getattr(sched, "speculative", None)
    positions = speculative.num_speculative_tokens + 1 if speculative is not None else 1
    if batched < sched.max_num_seqs * positions:
        per = f" × {positions} verified positions" if positions > 1 else ""
        raise ConfigError(
            f"scheduler.max_num_batched_tokens: {batched} is below max_num_seqs {sched.max_num_seqs}"
            f"{per}; every running request must fit an iteration's token budget"
        )


def batch_limits(config: ExperimentConfig, model_max_len: int) -> tuple[int, int]:
    """(max_model_len, max_num_batched_tokens) with vLLM's defaults and checks (``max_num_seqs: auto``: checked
    once the pool has set it, :func:`_build_pool`)."""
    max_model_len, batched = _token_limits(config, model_max_len)
    if config.scheduler.max_num_seqs != "auto":
        _check_running_fit_budget(config.scheduler, batched)
    return max_model_len, batched


def _token_limits(config: ExperimentConfig, model_max_len: int) -> tuple[int, int]:
    sched = config.scheduler
    max_model_len = sched.max_model_len or model_max_len
    if max_model_len > model_max_len:
        raise ConfigError(
            f"scheduler.max_model_len: {max_model_len} exceeds the model's max_position_embeddings {model_max_len}"
        )
    if sched.kind == "chunked":
        assert sched.max_num_batched_tokens is not None  # chunked batching's schema defaults it (8192)
        return max_model_len, sched.max_num_batched_tokens  # the schema checks long_prefill_token_threshold against it
    batched = sched.max_num_batched_tokens or max(max_model_len, 2048)
    chunks = getattr(sched, "chunk_long_prompts", False)
    no_evict = sched.capacity_policy == "guaranteed_no_evict"  # nothing re-prefills more than its prompt
    if batched < max_model_len and sched.kind in ("static", "continuous") and not chunks and not no_evict:
        raise ConfigError(
            f"scheduler.max_num_batched_tokens: {batched} is below max_model_len {max_model_len}; without chunked "
            "prefill a whole prompt, and a preempted request's prompt and output, must fit one iteration (raise it, "
            "lower scheduler.max_model_len, use kind: chunked, with prefill_priority chunk_long_prompts: true, or "
            "capacity_policy: guaranteed_no_evict, which never preempts and refuses only longer prompts)"
        )
    return max_model_len, batched


def check_parallelism(model, tensor_parallel: int, pipeline_parallel: int, expert_parallel: int = 1,
                      data_parallel: int = 1) -> None:
    """The rules vLLM applies: the attention heads of every layer group divide evenly over the tensor-parallel
    ranks; the KV heads (a Mamba mixer's B/C groups) too, or each is replicated over a whole number of ranks (MLA's
    latent is replicated whole); every pipeline stage has at least one layer; expert parallelism needs experts that
    divide over it."""
    for group in model.layers:
        problem = group.attention.tensor_parallel_problem(tensor_parallel, model.name)
        if problem:
            raise ConfigError(f"cluster.tensor_parallel: {problem}")
    if pipeline_parallel > model.num_layers:
        raise ConfigError(f"cluster.pipeline_parallel: {pipeline_parallel} stages for the {model.num_layers} layers "
                          f"of {model.name} (at most one stage per layer)")
    experts = {routing.experts for g in model.layers if (routing := g.ffn.routing)}
    if data_parallel > 1 and not experts:
        raise ConfigError(f"cluster.data_parallel: {data_parallel} attention-DP ranks need a mixture-of-experts "
                          f"model (a dense one is served by separate replicas); {model.name} has no experts")
    if expert_parallel > 1:
        if not experts:
            raise ConfigError(f"cluster.expert_parallel: {expert_parallel} needs a mixture-of-experts model; "
                              f"{model.name} has no experts")
        uneven = sorted(e for e in experts if e % expert_parallel)
        if uneven:
            raise ConfigError(f"cluster.expert_parallel: {expert_parallel} does not divide the {uneven[0]} experts of "
                              f"{model.name}")


def _expert_replication(config: ExperimentConfig, model, expert_parallel: int) -> float:
    """How much the experts' weights (routed and shared) grow with EPLB's slots: the routed experts by slots / E,
    the shared ones not (1 without EPLB)."""
    slots = expert_slots(model, expert_parallel, getattr(config.cost_model, "eplb_redundant_experts", None))
    if not slots:
        return 1.0
    routing, shared = next((r, g.ffn.dense_width) for g in model.layers if (r := g.ffn.routing))
    expert = routing.width * (routing.hidden or model.hidden_size)  # a latent MoE's experts at their latent width
    shared *= model.hidden_size
    return (slots * expert + shared) / (routing.experts * expert + shared)


