"""The commands that start a simulated deployment on its engine: :func:`launch_commands`.

One :class:`LaunchCommand` per replica pool (colocated: ``serve``; disaggregated: ``prefill``, ``decode``) that each
replica runs, then a ``router`` where the engine has one: ``vllm serve`` (disaggregated: Dynamo's ``dynamo.vllm``
workers with a NIXL ``--kv-transfer-config`` behind ``dynamo.frontend``), ``sglang.launch_server``
(``sglang_router.launch_router``), or ``trtllm-serve`` with its extra options YAML (``trtllm-serve disaggregated``).
The values are the run's (:func:`simulator.cluster.pool_setup.setup_pool`) in each engine's unit: SGLang's
``--tp-size`` counts every attention-DP rank's GPUs and it divides ``--max-running-requests`` and
``--chunked-prefill-size`` by ``--dp-size`` (so they are given × data_parallel); vLLM's and TensorRT-LLM's limits are
per DP rank. A simulated setting the engine cannot express is never dropped: the command's ``notes`` say what was
simulated and what the engine does instead (the admission watermark, which no engine has, only when changed). Router
URLs name placeholder hosts. Flag names were checked against each engine's docs or parser (:data:`FLAG_TABLE`).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from simulator.catalog import HardwareSpec, ModelSpec, load_model
from simulator.cluster.pool_setup import PoolSetup, setup_pool
from simulator.config.cluster import PoolConfig
from simulator.config.deployment import Deployment, resolve
from simulator.config.experiment import ExperimentConfig
from simulator.dtypes import activation_dtype
from simulator.kv import kv_dtype

Family = Literal["vllm", "sglang", "trtllm"]
Role = Literal["serve", "prefill", "decode", "router"]
FAMILIES: tuple[Family, ...] = ("vllm", "sglang", "trtllm")
DISAGGREGATED: tuple[Role, Role] = ("prefill", "decode")

# program -> (where its flag names were checked, the flags the commands use; NAME= takes a value)
FLAG_TABLE: dict[str, tuple[str, str]] = {
    "vllm": ("https://docs.vllm.ai/en/latest/configuration/engine_args.html (vllm/engine/arg_utils.py, v0.11); a "
             "boolean flag has its --no- form",
             "--host= --port= --tensor-parallel-size= --pipeline-parallel-size= --data-parallel-size= "
             "--enable-expert-parallel --max-num-seqs= --max-num-batched-tokens= --enable-chunked-prefill "
             "--no-enable-chunked-prefill --long-prefill-token-threshold= --async-scheduling --no-async-scheduling "
             "--max-model-len= --kv-cache-dtype= --dtype= --quantization= --gpu-memory-utilization= "
             "--kv-cache-memory-bytes= --num-gpu-blocks-override= --block-size= --enable-prefix-caching "
             "--no-enable-prefix-caching --kv-transfer-config= --speculative-config="),
    "dynamo.vllm": ("https://github.com/ai-dynamo/dynamo/blob/main/examples/backends/vllm/launch/disagg.sh (beside "
                    "the vLLM engine arguments)", "--model= --disaggregation-mode="),
    "dynamo.frontend": ("https://docs.nvidia.com/dynamo/additional-resources/tensor-rt-llm-details/dp-rank-routing",
                        "--http-port= --router-mode="),
    "sglang": ("https://docs.sglang.ai/advanced_features/server_arguments.html",
               "--model-path= --host= --port= --tp-size= --pp-size= --dp-size= --enable-dp-attention --ep-size= "
               "--max-running-requests= --chunked-prefill-size= --max-prefill-tokens= --enable-mixed-chunk "
               "--schedule-policy= --disable-overlap-schedule --scheduler-recv-interval= --max-queued-requests= "
               "--context-length= "
               "--kv-cache-dtype= --dtype= --quantization= --mem-fraction-static= --max-total-tokens= --page-size= "
               "--disable-radix-cache --disaggregation-mode= --disaggregation-transfer-backend= "
               "--speculative-algorithm= --speculative-num-steps= --speculative-eagle-topk= "
               "--speculative-num-draft-tokens= --speculative-draft-model-path="),
    "sglang_router": ("https://docs.sglang.ai/advanced_features/router.html, .../pd_disaggregation.html",
                      "--pd-disaggregation --prefill= --decode= --worker-urls= --policy= --prefill-policy= "
                      "--decode-policy= --host= --port="),
    "trtllm-serve": ("https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve/trtllm-serve.html "
                     "(tensorrt_llm/commands/serve.py: serve, disaggregated)",
                     "--host= --port= --backend= --tp_size= --pp_size= --ep_size= --max_batch_size= "
                     "--max_num_tokens= --max_seq_len= --kv_cache_free_gpu_memory_fraction= --extra_llm_api_options= "
                     "-c="),
}
FLAGS: dict[str, dict[str, bool]] = {program: {flag.rstrip("="): flag.endswith("=") for flag in flags.split()}
                                     for program, (_, flags) in FLAG_TABLE.items()}
# The keys of TensorRT-LLM's extra options YAML the commands write (https://nvidia.github.io/TensorRT-LLM/llm-api/
# reference.html; tensorrt_llm/llmapi/llm_args.py: LlmArgs, KvCacheConfig, SchedulerConfig, CacheTransceiverConfig,
# and the speculative_config of MTPDecodingConfig, EagleDecodingConfig, NGramDecodingConfig, DraftTargetDecodingConfig:
# https://nvidia.github.io/TensorRT-LLM/features/speculative-decoding.html; MoeConfig's backend)
TRTLLM_OPTIONS = ("enable_attention_dp", "enable_chunked_prefill", "disable_overlap_scheduler", "dtype",
                  "kv_cache_config", "scheduler_config", "cache_transceiver_config", "speculative_config", "moe_config")
# scheduler.speculative.method -> each engine's name for it: vLLM's speculative_config method
# (https://docs.vllm.ai/en/latest/features/spec_decode.html), SGLang's --speculative-algorithm
# (https://docs.sglang.ai/advanced_features/speculative_decoding.html: NEXTN runs a model's MTP modules as an EAGLE
# draft), TensorRT-LLM's speculative_config decoding_type (EAGLE-3 heads, as its PyTorch backend runs them)
SPECULATIVE_METHODS: dict[str, dict[Family, str]] = {
    "mtp": {"vllm": "mtp", "sglang": "NEXTN", "trtllm": "MTP"},
    "eagle": {"vllm": "eagle", "sglang": "EAGLE", "trtllm": "Eagle"},
    "eagle3": {"vllm": "eagle3", "sglang": "EAGLE3", "trtllm": "Eagle"},
    "draft_model": {"vllm": "draft_model", "sglang": "STANDALONE", "trtllm": "DraftTarget"},
    "ngram": {"vllm": "ngram", "sglang": "NGRAM", "trtllm": "NGram"},
}
PORTS: dict[Family, int] = {"vllm": 8000, "sglang": 30000, "trtllm": 8000}
ROUTER_PORT = 8000
SGLANG_BOOTSTRAP_PORT = 8998  # --disaggregation-bootstrap-port's default: the router is told it per prefill URL
SGLANG_POLICIES = {"round_robin": "round_robin", "random": "random", "power_of_two": "power_of_two",
                   "prefix_affinity": "cache_aware"}
DYNAMO_ROUTER_MODES = {"round_robin": "round-robin", "random": "random", "prefix_affinity": "kv",
                       "precise_prefix": "kv"}  # Dynamo's KV router: KV-event overlap and load
NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}, separators=(",", ":"))
BATCHING = {"static": "static batching", "custom": "a custom scheduler", "chunked": "stall-free chunked prefill",
            "decode_first": "decode-first batching", "prefill_first": "prefill-first batching",
            "prefill_first_chunks": "prefill-first batching with chunked long prompts"}
_HF_SOURCE = re.compile(r"https://huggingface\.co/(.+)/blob/main/config\.json")


@dataclass(frozen=True)
class LaunchCommand:
    """One command of a deployment: ``argv``, run on each of ``replicas`` replicas of ``gpus`` × ``hardware`` GPUs
    (a router: on a host of its own), the side ``files`` it reads (name -> text, written beside it: TensorRT-LLM's
    extra options YAML) and ``notes``: the simulated settings it cannot carry, and what the engine does instead."""

    role: Role
    argv: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict, hash=False)
    notes: tuple[str, ...] = ()
    replicas: int = 1
    gpus: int = 0
    hardware: str = ""

    @property
    def shell(self) -> str:
        """The command line, quoted for a POSIX shell."""
        return shlex.join(self.argv)

    @property
    def comment(self) -> str:
        """What runs where, as a shell comment: ``# decode: replicas: 4 (one per 8 × h100-sxm)``."""
        where = f" (one per {self.gpus} × {self.hardware})" if self.gpus else ""
        return f"# {self.role}: replicas: {self.replicas}{where}"


@dataclass
class _Command:
    argv: list[str]
    notes: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # TensorRT-LLM's extra options

    def add(self, *items: object, when: bool = True) -> None:
        """Append flags and their values, in order (``when`` they apply)."""
        self.argv += [str(item) for item in items] if when else []

    def note(self, text: str, when: bool = True) -> None:
        self.notes += [text] if when else []


@dataclass(frozen=True)
class _Pool:
    role: Role
    pool: PoolConfig
    settings: PoolSetup
    gpu: HardwareSpec
    name: str  # of its TensorRT-LLM options file


def launch_commands(config: ExperimentConfig, deployment: Deployment | None = None, *,
                    framework: Family | None = None) -> list[LaunchCommand]:
    """The commands that start ``config``'s deployment on ``framework``, else its engine profile's family (vLLM's for
    a profile of none, noted): one per pool of :meth:`~simulator.config.cluster.ClusterConfig.replica_pools`, then
    the router where the engine has one. ``deployment``: ``config``'s names resolved (:func:`resolve` when None).
    Raises :class:`~simulator.errors.LLMSimError` where the run would refuse the configuration."""
    deployment = deployment if deployment is not None else resolve(config)
    found = framework or next((f for f in FAMILIES if deployment.engine.name.lower().startswith(f)), None)
    shared = [] if found else [f"engine profile {deployment.engine.name!r} names no serving framework: these are "
                               "vLLM's commands (framework= picks another)"]
    family: Family = found or "vllm"
    model_id = _model_id(config.model, deployment.model, shared)
    cluster, pools, listed = config.cluster, [], config.cluster.replica_pools()
    for i, pool in enumerate(listed):
        role = DISAGGREGATED[i] if cluster.kind == "disaggregated" else "serve"
        name = f"{role}{i if role == 'serve' and len(listed) > 1 else ''}-extra-llm-api-config.yaml"
        settings = setup_pool(config, deployment, pool, "cluster" if role == "serve" else f"cluster.{role}")
        pools.append(_Pool(role, pool, settings, deployment.gpu(pool), name))
    commands = []
    for p in pools:
        cmd = _BUILDERS[family](p, config, deployment.model, model_id)
        _mxfp4_experts(p, config, deployment, family, cmd)
        cmd.notes[:0] = shared + _notes(p, config, family)
        cmd.add("--extra_llm_api_options", p.name, when=bool(cmd.options))
        files = {p.name: yaml.safe_dump(cmd.options, sort_keys=False)} if cmd.options else {}
        commands.append(LaunchCommand(p.role, tuple(cmd.argv), files, tuple(cmd.notes), p.pool.replicas,
                                      p.pool.gpus // p.pool.replicas, p.gpu.name))
    return commands + [router for router in [_router(family, pools, config)] if router is not None]


def _model_id(name: str, model: ModelSpec, notes: list[str]) -> str:
    """The checkpoint to serve: the Hugging Face id the experiment names, the catalog's, a config.json's folder, or
    the catalog name (noted)."""
    path = Path(name)
    if "/" in name and path.suffix not in (".json", ".yaml", ".yml") and not path.is_absolute():
        return name
    if "/" in model.name:  # a quantised checkpoint named by its id
        return model.name
    match = _HF_SOURCE.fullmatch(model.source)
    if match:
        return match.group(1)
    if path.name.endswith("config.json"):
        notes.append(f"model: the folder of {name} is served; it must hold the weights")
        return str(path.parent)
    notes.append(f"model: no Hugging Face id is known for {model.name!r}: put the checkpoint's id or path")
    return model.name


def _mxfp4_experts(p: _Pool, config: ExperimentConfig, deployment: Deployment, family: Family,
                   cmd: _Command) -> None:
    """MXFP4 experts simulated against MXFP8 activations (the engine profile's ``mxfp4_experts_by_generation`` on
    this pool's GPU): TensorRT-LLM's TRTLLM MoE backend runs them so, vLLM with its FlashInfer variable (its default
    takes BF16 activations), SGLang by default."""
    if not (config.dtype == "mxfp4" and deployment.model.quantized("experts")
            and deployment.engine.expert_format("mxfp4", p.gpu.generation) == "mxfp4_mxfp8"):
        return
    if family == "trtllm":
        cmd.options["moe_config"] = {"backend": "TRTLLM"}
    cmd.note("MXFP4 experts against MXFP8 activations were simulated: start vLLM with "
             "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 (its default takes BF16 activations)", when=family == "vllm")


def _batching(sched: Any) -> str:
    """The simulated batching: a key of :data:`BATCHING`."""
    if sched.kind != "continuous":
        return str(sched.kind) if sched.kind in ("static", "chunked") else "custom"
    if not sched.prefill_priority:
        return "decode_first"
    return "prefill_first_chunks" if sched.chunk_long_prompts else "prefill_first"


def _notes(p: _Pool, config: ExperimentConfig, family: Family) -> list[str]:
    """The simulated settings the engine's flags do not carry, whichever the engine (its own: beside its flags)."""
    sched, kv, cmd = p.settings.scheduler, p.settings.config.kv_cache, _Command([])
    engine = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}[family]
    cmd.note(f"scheduler.preemption swap was simulated; {engine} preempts by recomputation",
             when=sched.preemption == "swap")
    cmd.note(f"scheduler.capacity_policy guaranteed_no_evict was simulated; {engine} admits on the memory free now "
             "and preempts when short", when=sched.capacity_policy == "guaranteed_no_evict" and family != "trtllm")
    cmd.note(f"scheduler.watermark {sched.watermark:g} has no {engine} flag",
             when=sched.watermark != type(sched).model_fields["watermark"].default)
    cmd.note(f"scheduler.max_queue_len {sched.max_queue_len}: {engine} does not bound its queue",
             when=sched.max_queue_len is not None and family != "sglang")
    cmd.note(f"scheduler.max_queue_delay_ms {sched.max_queue_delay_ms}: {engine} has no queue timeout",
             when=sched.max_queue_delay_ms is not None)
    cmd.note(f"scheduler.recv_interval {sched.recv_interval} was simulated; {engine} takes in new requests every "
             "step", when=sched.recv_interval > 1 and family != "sglang")
    cmd.note(f"scheduler.long_prefill_token_threshold: {engine} caps a prompt's chunk only by the token budget",
             when=bool(getattr(sched, "long_prefill_token_threshold", None)) and family != "vllm")
    spec = getattr(sched, "speculative", None)
    cmd.note(f"scheduler.speculative was simulated: set {engine}'s speculative decoding with a draft that reaches "
             "its acceptance rate", when=spec is not None and spec.method is None)
    if spec is not None and spec.method is not None:
        cmd.note(f"scheduler.speculative acceptance {list(spec.rates)} was simulated: {engine}'s is its draft's on "
                 "the traffic it serves")
    cmd.note(f"lora was simulated: enable {engine}'s LoRA serving for its adapters, rank and slots per batch",
             when=config.lora is not None)
    cmd.note(f"kv_cache.kind {kv.kind} was simulated; {engine} pages its KV cache", when=kv.kind != "paged")
    offload = getattr(kv, "offload", None)
    if offload is not None:  # each engine's own KV offloading (or LMCache / Dynamo KVBM beside it)
        tiers = ", ".join(f"{tier.medium} {tier.capacity_gib:g} GiB" for tier in offload.tiers)
        how = {"vllm": "--kv-offloading-size (CPU) or an LMCache connector (--kv-transfer-config)",
               "sglang": "--enable-hierarchical-cache with --hicache-size (and an L3 storage backend)",
               "trtllm": "kv_cache_config host_cache_size (or Dynamo KVBM)"}[family]
        cmd.note(f"kv_cache.offload ({tiers}, policy {offload.policy}) was simulated: set {engine}'s {how}")
    redundant = getattr(config.cost_model, "eplb_redundant_experts", None)
    cmd.note(f"cost_model.eplb_redundant_experts {redundant}: set {engine}'s EPLB to match", when=bool(redundant))
    cmd.note(f"cluster.autoscaler: the orchestrator, not {engine}, scales", when=config.cluster.autoscaler is not None)
    admission = config.cluster.admission
    cmd.note(f"cluster.admission {admission.kind if admission else ''}: a gateway in front of {engine} admits "
             "(a token bucket: Envoy's local rate limit; slo: an SLO-aware router's admission)",
             when=admission is not None)
    gpus, per_node = p.pool.gpus // p.pool.replicas, p.gpu.node.gpus_per_node
    cmd.note(f"a replica spans {math.ceil(gpus / per_node)} nodes of {per_node} GPUs: start it on each with "
             f"{engine}'s multi-node options", when=gpus > per_node)
    cmd.note(f"cluster.router {config.cluster.router.kind} spreads requests over the {p.pool.replicas} replicas: "
             f"{engine} has no router", when=p.role == "serve" and p.pool.replicas > 1 and family != "sglang")
    return cmd.notes


def _share(s: PoolSetup) -> tuple[str, float]:
    """Which share of GPU memory sized the simulated KV pool, and its value."""
    kv = s.config.kv_cache
    shares = {"mem_fraction_static": s.mem_fraction_static, "free_memory_fraction": kv.free_memory_fraction,
              "gpu_memory_utilization": kv.gpu_memory_utilization}
    return next((name, value) for name, value in shares.items() if value is not None)


def _formats(p: _Pool, config: ExperimentConfig, model: ModelSpec, cmd: _Command, kv_names: dict[str, str],
             online: bool) -> tuple[str | None, bool]:
    """The engine's name of the simulated KV format (None: the activations' 16-bit, its default) and whether it
    must quantise the weights to fp8 at load (where ``online``); notes what it cannot reach."""
    fmt = kv_dtype(p.settings.config.kv_cache.dtype, config.dtype)
    stored = model.quantization.dtype if model.quantization else "bf16"
    cmd.note(f"kv_cache.dtype {fmt} was simulated; the engine has no such KV format (16-bit: half the tokens)",
             when=fmt != activation_dtype(config.dtype) and fmt not in kv_names)
    quantise = online and config.dtype == "fp8" and stored in ("bf16", "fp16")
    cmd.note(f"dtype {config.dtype} was simulated on a {stored} checkpoint: serve a {config.dtype} checkpoint (the "
             "engine does not quantise to it at load)",
             when=not (quantise or config.dtype == stored or {config.dtype, stored} <= {"bf16", "fp16"}))
    return kv_names.get(fmt), quantise


def _vllm(p: _Pool, config: ExperimentConfig, model: ModelSpec, model_id: str) -> _Command:
    s, pool, sched, kv = p.settings, p.pool, p.settings.scheduler, p.settings.config.kv_cache
    disagg, batching, ranks = p.role != "serve", _batching(sched), pool.data_parallel * pool.tensor_parallel
    cmd = _Command(["python", "-m", "dynamo.vllm", "--model", model_id] if disagg else
                   ["vllm", "serve", model_id, "--host", "0.0.0.0", "--port", str(PORTS["vllm"])])
    cmd.add("--tensor-parallel-size", pool.tensor_parallel, "--pipeline-parallel-size", pool.pipeline_parallel)
    cmd.add("--data-parallel-size", pool.data_parallel, when=pool.data_parallel > 1)
    cmd.add("--enable-expert-parallel", when=pool.expert_parallel > 1)
    cmd.note(f"expert_parallel {pool.expert_parallel} was simulated; vLLM's expert parallelism spans all {ranks} "
             "GPUs of a pipeline stage", when=pool.expert_parallel not in (1, ranks))
    cmd.add("--max-num-seqs", sched.max_num_seqs, "--max-num-batched-tokens", s.max_num_batched_tokens,
            "--enable-chunked-prefill" if batching in ("chunked", "prefill_first_chunks") else
            "--no-enable-chunked-prefill")
    cmd.note(f"{BATCHING[batching]} was simulated; vLLM v1 schedules running requests' decodes before new prompts "
             "in every step", when=batching not in ("chunked", "decode_first"))
    threshold = getattr(sched, "long_prefill_token_threshold", None)
    cmd.add("--long-prefill-token-threshold", threshold, when=bool(threshold))
    cmd.add("--async-scheduling" if sched.async_scheduling else "--no-async-scheduling",
            "--max-model-len", s.max_model_len)
    fmt, quantise = _formats(p, config, model, cmd, {"fp8": "fp8"}, online=True)
    cmd.add("--kv-cache-dtype", fmt, when=fmt is not None)
    cmd.add("--dtype", "float16", when=config.dtype == "fp16")
    cmd.add("--quantization", "fp8", when=quantise)
    share, value = _share(s)
    pool_bytes = s.budget.num_blocks * s.budget.block_size * s.budget.kv_bytes_per_token
    cmd.add(*(("--num-gpu-blocks-override", kv.num_gpu_blocks) if kv.num_gpu_blocks is not None else (
        "--gpu-memory-utilization", value) if share == "gpu_memory_utilization" else (
        "--kv-cache-memory-bytes", int(pool_bytes))))
    cmd.note(f"kv_cache.{share} {value:g} sized the simulated KV pool; vLLM has no such share: --kv-cache-memory-bytes"
             f" gives each GPU that pool ({pool_bytes / 2**30:.2f} GiB)", when="--kv-cache-memory-bytes" in cmd.argv)
    cmd.add("--block-size", kv.block_size,
            "--enable-prefix-caching" if getattr(kv, "prefix_caching", False) else "--no-enable-prefix-caching")
    cmd.add("--disaggregation-mode", p.role, "--kv-transfer-config", NIXL, when=disagg)
    spec = getattr(sched, "speculative", None)
    if spec is not None and spec.method is not None:
        speculative: dict[str, Any] = {"method": SPECULATIVE_METHODS[spec.method]["vllm"]}
        draft = _draft_checkpoint(spec, model_id, cmd)
        speculative.update({"model": draft} if draft else {})
        speculative["num_speculative_tokens"] = spec.num_speculative_tokens
        if spec.draft_tensor_parallel_size is not None:
            speculative["draft_tensor_parallel_size"] = spec.draft_tensor_parallel_size
        cmd.add("--speculative-config", json.dumps(speculative, separators=(",", ":")))
    return cmd


def _draft_checkpoint(spec: Any, model_id: str, cmd: _Command) -> str | None:
    """The draft's checkpoint an engine loads: the draft model's id, a placeholder for an EAGLE head (noted), None
    for a model's own MTP modules and for n-gram lookup."""
    if spec.method == "draft_model":
        return _model_id(spec.draft_model, load_model(spec.draft_model), cmd.notes)
    if spec.method not in ("eagle", "eagle3"):
        return None
    label = "EAGLE-3" if spec.method == "eagle3" else "EAGLE"
    placeholder = f"<{label} head of {model_id}>"
    cmd.note(f"scheduler.speculative.method {spec.method}: put the {label} head's checkpoint for {placeholder}")
    return placeholder


def _sglang(p: _Pool, config: ExperimentConfig, model: ModelSpec, model_id: str) -> _Command:
    s, pool, sched, kv = p.settings, p.pool, p.settings.scheduler, p.settings.config.kv_cache
    dp, batching = pool.data_parallel, _batching(sched)
    chunks = batching in ("chunked", "prefill_first_chunks")
    cmd = _Command(["python", "-m", "sglang.launch_server", "--model-path", model_id])
    cmd.add("--host", "0.0.0.0", "--port", PORTS["sglang"], "--tp-size", dp * pool.tensor_parallel,
            "--pp-size", pool.pipeline_parallel)
    cmd.add("--dp-size", dp, "--enable-dp-attention", when=dp > 1)
    cmd.add("--ep-size", pool.expert_parallel, when=pool.expert_parallel > 1)
    cmd.add("--max-running-requests", sched.max_num_seqs * dp,
            "--chunked-prefill-size", s.max_num_batched_tokens * dp if chunks else -1,
            "--max-prefill-tokens", s.max_num_batched_tokens, "--schedule-policy", "fcfs")
    cmd.add("--enable-mixed-chunk", when=batching == "chunked")
    cmd.note(f"{BATCHING[batching]} was simulated; SGLang runs prompt batches before decodes" +
             (" (--enable-mixed-chunk adds the decodes to a prompt chunk's batch)" if chunks else ""),
             when=batching not in ("prefill_first", "prefill_first_chunks"))
    cmd.add("--disable-overlap-schedule", when=not sched.async_scheduling)
    cmd.add("--scheduler-recv-interval", sched.recv_interval, when=sched.recv_interval > 1)
    cmd.add("--max-queued-requests", sched.max_queue_len, when=sched.max_queue_len is not None)
    cmd.add("--context-length", s.max_model_len, when=s.max_model_len < model.max_position_embeddings)
    fmt, quantise = _formats(p, config, model, cmd, {"fp8": "fp8_e4m3"}, online=True)
    cmd.add("--kv-cache-dtype", fmt, when=fmt is not None)
    cmd.add("--dtype", "float16", when=config.dtype == "fp16")
    cmd.add("--quantization", "fp8", when=quantise)
    share, value = _share(s)
    b = s.budget
    static = b.weight_bytes + b.adapter_bytes + b.num_blocks * b.block_size * b.kv_bytes_per_token
    cmd.note(f"kv_cache.{share} {value:g} sized the simulated KV pool; --mem-fraction-static holds the weights and "
             "that pool", when=share != "mem_fraction_static")
    cmd.add("--mem-fraction-static", value if share == "mem_fraction_static" else
            math.ceil(static / p.gpu.memory_bytes * 1000) / 1000)
    cmd.add("--max-total-tokens", b.capacity_tokens, when=kv.num_gpu_blocks is not None)
    cmd.add("--page-size", kv.block_size)
    cmd.add("--disable-radix-cache", when=not getattr(kv, "prefix_caching", False))
    cmd.add("--disaggregation-mode", p.role, "--disaggregation-transfer-backend", "nixl", when=p.role != "serve")
    spec = getattr(sched, "speculative", None)
    if spec is not None and spec.method is not None:  # a chain of k drafts (top-k 1), verified at k + 1 positions
        k = spec.num_speculative_tokens
        cmd.add("--speculative-algorithm", SPECULATIVE_METHODS[spec.method]["sglang"], "--speculative-num-steps", k,
                "--speculative-eagle-topk", 1, "--speculative-num-draft-tokens", k + 1)
        draft = _draft_checkpoint(spec, model_id, cmd)
        cmd.add("--speculative-draft-model-path", draft, when=draft is not None)
    return cmd


def _trtllm(p: _Pool, config: ExperimentConfig, model: ModelSpec, model_id: str) -> _Command:
    s, pool, sched, kv = p.settings, p.pool, p.settings.scheduler, p.settings.config.kv_cache
    dp, batching = pool.data_parallel, _batching(sched)
    cmd = _Command(["trtllm-serve", model_id])
    cmd.add("--host", "0.0.0.0", "--port", PORTS["trtllm"], "--backend", "pytorch",
            "--tp_size", dp * pool.tensor_parallel, "--pp_size", pool.pipeline_parallel)
    cmd.add("--ep_size", pool.expert_parallel, when=pool.expert_parallel > 1)
    cmd.options.update({"enable_attention_dp": True} if dp > 1 else {})
    cmd.note(f"attention over data_parallel {dp} × tensor_parallel {pool.tensor_parallel} was simulated; "
             f"TensorRT-LLM's attention DP runs {dp * pool.tensor_parallel} one-GPU ranks",
             when=dp > 1 and pool.tensor_parallel > 1)
    cmd.add("--max_batch_size", sched.max_num_seqs, "--max_num_tokens", s.max_num_batched_tokens,
            "--max_seq_len", s.max_model_len)
    cmd.options["enable_chunked_prefill"] = batching in ("chunked", "prefill_first_chunks")
    cmd.note(f"{BATCHING[batching]} was simulated; TensorRT-LLM's in-flight batching adds prompts to the running "
             "requests' decode step", when=batching not in ("chunked", "decode_first"))
    cmd.options["disable_overlap_scheduler"] = not sched.async_scheduling or p.role == "prefill"
    cmd.note("scheduler.async_scheduling was simulated; TensorRT-LLM's context servers run without the overlap "
             "scheduler", when=sched.async_scheduling and p.role == "prefill")
    cmd.options.update({"dtype": "float16"} if config.dtype == "fp16" else {})
    fmt, _ = _formats(p, config, model, cmd, {"fp8": "fp8"}, online=False)
    share, value = _share(s)
    native = share == "free_memory_fraction" and kv.num_gpu_blocks is None
    cmd.add("--kv_cache_free_gpu_memory_fraction", value, when=native)
    cmd.note(f"kv_cache.{share} {value:g} sized the simulated KV pool; TensorRT-LLM takes a share of the free "
             "memory: kv_cache_config.max_tokens caps it at the simulated pool",
             when=share != "free_memory_fraction" and kv.num_gpu_blocks is None)
    cmd.options["kv_cache_config"] = {
        "tokens_per_block": kv.block_size, "enable_block_reuse": bool(getattr(kv, "prefix_caching", False)),
        **({"dtype": fmt} if fmt else {}),
        **({"free_gpu_memory_fraction": value} if native else {"max_tokens": s.budget.capacity_tokens})}
    cmd.options["scheduler_config"] = {"capacity_scheduler_policy": sched.capacity_policy.upper()}
    if p.role != "serve":
        cmd.options["cache_transceiver_config"] = {"backend": "NIXL", "max_tokens_in_buffer": s.max_model_len}
    spec = getattr(sched, "speculative", None)
    if spec is not None and spec.method is not None:
        k, decoding = spec.num_speculative_tokens, SPECULATIVE_METHODS[spec.method]["trtllm"]
        speculative: dict[str, Any] = {"decoding_type": decoding}
        if spec.method == "mtp":  # its MTP modules, reused autoregressively for k beyond them
            speculative["num_nextn_predict_layers"] = k
        else:
            speculative["max_draft_len"] = k
            draft = _draft_checkpoint(spec, model_id, cmd)
            speculative.update({"speculative_model_dir": draft} if draft else {})
            speculative.update({"eagle3_one_model": True} if spec.method == "eagle3" else {})
        cmd.note("scheduler.speculative.method eagle was simulated; TensorRT-LLM's PyTorch backend runs EAGLE-3 "
                 "heads", when=spec.method == "eagle")
        cmd.options["speculative_config"] = speculative
    return cmd


_BUILDERS = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}


def _router(family: Family, pools: list[_Pool], config: ExperimentConfig) -> LaunchCommand | None:
    """The router before the replicas where the engine has one (colocated: SGLang's, for two or more)."""
    cluster, disagg = config.cluster, config.cluster.kind == "disaggregated"
    if not disagg and (family != "sglang" or sum(p.pool.replicas for p in pools) < 2):
        return None
    urls = {p.role: [f"http://{p.role}-{i}:{PORTS[family]}" for i in range(p.pool.replicas)] for p in pools}
    t, cmd, files = cluster.transfer, _Command([]), {}
    cmd.note(f"cluster.transfer ({t.bandwidth_gb_per_s:g} GB/s, {t.latency_ms:g} ms per prefill replica"
             f"{', layer-overlapped' if t.layer_overlap else ''}) is the network's, not a flag", when=disagg)
    cmd.note("hosts serve-0, prefill-0, decode-0, ... stand for the replicas' addresses", when=family != "vllm")
    kinds = [("cluster.router", cluster.router.kind)] + disagg * [("cluster.decode_router", cluster.decode_router.kind)]
    if family == "sglang":
        cmd.add("python", "-m", "sglang_router.launch_router", *(["--pd-disaggregation"] if disagg else
                                                                  ["--worker-urls", *urls["serve"]]))
        for role in DISAGGREGATED if disagg else ():
            for url in urls[role]:
                cmd.add(f"--{role}", url, *([SGLANG_BOOTSTRAP_PORT] if role == "prefill" else []))
        for flag, (where, kind) in zip(["--prefill-policy", "--decode-policy"] if disagg else ["--policy"], kinds,
                                       strict=True):
            cmd.add(flag, SGLANG_POLICIES.get(kind), when=kind in SGLANG_POLICIES)
            cmd.note(f"{where} {kind} was simulated; SGLang's router has no such policy (default: cache_aware)",
                     when=kind not in SGLANG_POLICIES)
        cmd.add("--host", "0.0.0.0", "--port", ROUTER_PORT)
    elif family == "vllm":
        mode = DYNAMO_ROUTER_MODES.get(cluster.router.kind)
        cmd.add("python", "-m", "dynamo.frontend", "--http-port", ROUTER_PORT)
        cmd.add("--router-mode", mode, when=mode is not None)
        cmd.notes += [f"{where} {kind} was simulated; Dynamo's frontend routes by its --router-mode" for where, kind
                      in kinds if where == "cluster.decode_router" or mode is None]
        cmd.note("the workers join the frontend through Dynamo's runtime (etcd, NATS), not by URL")
    else:
        cmd.add("trtllm-serve", "disaggregated", "-c", "disagg_config.yaml")
        servers = [{"num_instances": len(urls[role]), "urls": [u.removeprefix("http://") for u in urls[role]]}
                   for role in DISAGGREGATED]
        files["disagg_config.yaml"] = yaml.safe_dump({
            "hostname": "0.0.0.0", "port": ROUTER_PORT, "backend": "pytorch", "context_servers": servers[0],
            "generation_servers": servers[1]}, sort_keys=False)
        cmd.notes += [f"{where} {kind} was simulated: set the disaggregated server's router" for where, kind in kinds]
    return LaunchCommand("router", tuple(cmd.argv), files, tuple(cmd.notes))
