"""Per-operator roofline cost of one iteration on a tensor-parallel replica, plus the serving engine's overheads.

Each kernel costs the smooth roofline of :mod:`simulator.cost.gemm` (compute vs memory time, knee exponent p, plus a
fixed per-kernel overhead) on one GPU shard; kernels are summed (they run one after another). The model is a stack
of layer groups (:mod:`simulator.catalog.architecture`); each group's GEMMs, elementwise and attention kernels are
priced by :class:`simulator.cost.layers.GroupCost` (attention of every kind, dense and mixture-of-experts FFNs), so
the work per iteration grows with the number of groups, not layers. Per layer, besides: two all-reduces of T·D·w
bytes (:mod:`simulator.cost.collectives`; or the framework's one-shot custom all-reduce when it is faster,
:meth:`RooflineCostModel.all_reduce_time`), and one of T·8 bytes where the query/key norm spans all heads
(MiniMax-M2). A quantised checkpoint's parts (:attr:`ModelSpec.quantization`) run
their GEMMs in the weight dtype; the other parts, the router and the LM head in 16-bit.

Pipeline parallelism (``pp`` stages of ceil(layers/pp) layers): a pass through the stages costs the same kernels as
one GPU group would run plus (pp − 1) transfers of the T·D·w hidden states between stages. An engine that runs one
batch through the stages in turn (vLLM v0 with one virtual engine) leaves each GPU idle (pp − 1)/pp of the time (the
bubble): PP buys memory, not speed. An engine with one micro-batch per stage in flight
(``EngineProfile.pipeline_micro_batches``: vLLM v1, TensorRT-LLM, SGLang) splits an iteration's sequences into
k = min(pp, sequences) micro-batches that follow each other through the stages, every stage busy in steady state:
each sequence advances once per pass of its micro-batch, so the iteration costs one pass of the heaviest
micro-batch (the prompt chunks dealt out largest first to the micro-batch of fewest tokens, the decodes then split
evenly, the lightest micro-batches taking one more; a decode-only step of S sequences: ceil(S/k) of them, with that
share of the cached context) —
k × fewer tokens per pass, the same weights read by each.

With attention data parallelism a MoE layer exchanges its tokens (:mod:`simulator.cost.expert_exchange`); with
``two_batch_overlap`` (SGLang's two-batch overlap) the iteration runs as two micro-batches, one's dispatch and
combine overlapping the other's compute, so of the body's compute C (GEMMs and elementwise kernels) and exchange X
the pair takes C/2 + X/2 + max(C, X)/2 = C + X − min(C, X)/2 (attention kept outside the overlap, which keeps a
decode step affine in S).

Per iteration: embedding gather (T·D·w bytes), the final norm, the LM head GEMM on the last token of each sequence
(m = sequences, n = vocab/t, k = D), and sampling over fp32 logits (read and write sequences × vocab × 4 bytes).
The engine profile adds its fixed costs (:mod:`simulator.catalog.engines`).

A decode step is exactly affine in S (decode attention's compute and memory times are both proportional to S, so
their smooth maximum is too; bounded-span layers cost a constant per sequence), as :mod:`simulator.cost.base`
requires.

``iteration_work`` and ``decode_step_work`` price the same kernels as :class:`~simulator.cost.work.Work` — FLOPs,
HBM bytes and the time split into compute, memory and fixed parts (:mod:`simulator.cost.work`) — kernel by kernel
beside their times (``*_work`` beside ``*_time``), computed only when a run records iteration bounds.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from simulator.catalog import HardwareSpec, ModelSpec
from simulator.catalog.engines import CustomAllReduceFit, EngineProfile
from simulator.catalog.hardware import with_fit
from simulator.config.engine import CostModelBase
from simulator.config.experiment import ExperimentConfig
from simulator.cost.attention import AttentionModel
from simulator.cost.base import COST_MODELS, CostModel, IterationShape
from simulator.cost.collectives import collective_time, ring_bandwidth
from simulator.cost.expert_exchange import exchange_time
from simulator.cost.gemm import GemmModel
from simulator.cost.layers import GroupCost, span_totals
from simulator.cost.moe import ExpertsModel
from simulator.cost.work import Work, fixed
from simulator.dtypes import activation_dtype, bytes_per_element
from simulator.errors import ConfigError
from simulator.kv.sizing import kv_dtype

QK_NORM_REDUCE_BYTES = 2 * 4  # per token: the fp32 sums of squares of its queries and its keys


def engine_network(hardware: HardwareSpec, engine: EngineProfile) -> HardwareSpec:
    """The hardware's all-reduce as the engine runs it: every NCCL all-reduce protocol's bandwidth (ring, low-latency,
    NVLS) times the engine's ``communication_efficiency`` (the other collectives as the hardware's); an engine that
    states its own stack's all-reduce fixed cost (``collective_latency_us``) states the whole small-message regime,
    so the hardware's low-latency protocol does not apply to it."""
    scale, comm = engine.communication_efficiency, hardware.fit.comm
    low, nvls = comm.all_reduce_low_latency, comm.all_reduce_nvls
    update: dict = {"link_efficiency": comm.link_efficiency * scale,
                    "all_reduce_low_latency": low.model_copy(update={"efficiency": low.efficiency * scale})
                    if low is not None and engine.collective_latency_us is None else None,
                    "all_reduce_nvls": nvls.model_copy(update={"efficiency": nvls.efficiency * scale})
                    if nvls is not None else None}
    if engine.collective_latency_us is not None:
        update["latency_us"] = engine.collective_latency_us
    if engine.collective_step_latency_us is not None:
        update["step_latency_us"] = engine.collective_step_latency_us
    return with_fit(hardware, {"comm": comm.model_copy(update=update)})


def framework_all_reduce_time(network: HardwareSpec, kernels: CustomAllReduceFit | None, tp: int,
                              nbytes: float) -> float:
    """NCCL (``network``: the hardware as the engine runs it, :func:`engine_network`; ring, LL or NVLS, whichever is
    faster for the message, :func:`simulator.cost.collectives.collective_time`), or the framework's own
    all-reduce (``kernels``: the engine's for the GPU's generation, :meth:`EngineProfile.custom_allreduce`; None
    without one) where it takes the message and is faster. Its one-shot algorithm has every GPU read the other
    t − 1 buffers over its link, ``custom_allreduce_latency_us`` + (t − 1)·bytes / (link GB/s × link efficiency); its
    two-shot algorithm (where the engine has one) reduces a 1/t slice on each GPU and gathers the slices, moving
    2(t − 1)/t of the buffer, ``custom_allreduce_two_shot_latency_us`` + 2(t − 1)/t·bytes / (link GB/s × link
    efficiency); the faster runs. Both read their peers' memory directly, so they need the t GPUs in one node and all
    connected to each other (an NVSwitch fabric, or just two GPUs); otherwise, or above
    ``custom_allreduce_max_mib``, NCCL runs, as vLLM, SGLang and TensorRT-LLM fall back to it."""
    nccl = collective_time(network, "all_reduce", tp, nbytes)
    node = network.node
    connected = tp <= node.gpus_per_node and (node.fabric == "nvswitch" or tp == 2)
    if kernels is None or tp <= 1 or nbytes > kernels.max_mib * 2**20 or not connected:
        return nccl
    link = ring_bandwidth(network, tp) * network.fit.comm.link_efficiency
    custom = kernels.latency_us * 1e-6 + (tp - 1) * nbytes / link
    if kernels.two_shot_latency_us is not None:
        custom = min(custom, kernels.two_shot_latency_us * 1e-6 + 2 * (tp - 1) / tp * nbytes / link)
    return min(nccl, custom)


def expert_slots(model: ModelSpec, expert_parallel: int, redundant: int | None) -> int:
    """EPLB's expert slots per MoE layer (the experts plus the redundant ones), 0 without EPLB; they must divide
    over the expert-parallel ranks (TensorRT-LLM's and SGLang's rule)."""
    if redundant is None:
        return 0
    experts = {routing.experts for g in model.layers if (routing := g.ffn.routing)}
    if not experts:
        raise ConfigError(f"cost_model.eplb_redundant_experts: EPLB needs a mixture-of-experts model; {model.name} "
                          "has no experts")
    slots = max(experts) + redundant
    if slots % expert_parallel:
        raise ConfigError(f"cost_model.eplb_redundant_experts: {redundant} makes {slots} expert slots, which do not "
                          f"divide over expert_parallel {expert_parallel}")
    return slots


class RooflineCostConfig(CostModelBase):
    """Per-operator roofline from the hardware profile's spec-sheet numbers."""

    kind: Literal["roofline"] = "roofline"
    expert_load_cv: float = Field(
        default=1.25, ge=0, le=10,
        description="coefficient of variation of the routed experts' popularity in the served traffic (default: "
        "1.25, what the H100 benchmark rows of MoE models fit, simulator.fidelity.silicon; 0 = equally popular; "
        "SGLang's expert-distribution recorder or a routing trace measures your own): a batch's tokens gather on "
        "fewer experts, so fewer experts' weights are read at decode sizes, and with expert_parallel > 1 the busiest "
        "rank sets a MoE layer's time (simulator.cost.moe)",
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


PROMPT_TABLE_LIMIT = 65_536  # prompt-only iterations remembered per cost model (then forgotten all at once)


def _remember(table: dict, key, value):
    """``value`` stored under ``key`` in a table of at most :data:`PROMPT_TABLE_LIMIT` entries (emptied when full,
    which bounds its memory whatever prompt lengths a run sees); returns ``value``."""
    if len(table) >= PROMPT_TABLE_LIMIT:
        table.clear()
    table[key] = value
    return value


@COST_MODELS.register("roofline", config=RooflineCostConfig)
class RooflineCostModel(CostModel):
    prices_work = True
    def __init__(
        self, model: ModelSpec, hardware: HardwareSpec, tensor_parallel: int = 1, dtype: str = "bf16",
        kv_dtype: str | None = None, engine: EngineProfile | None = None, pipeline_parallel: int = 1,
        expert_parallel: int = 1, data_parallel: int = 1, expert_load_cv: float = 0.0, all_to_all: str = "nccl",
        eplb_redundant_experts: int | None = None, two_batch_overlap: bool = False,
    ) -> None:
        """``eplb_redundant_experts``: EPLB with that many redundant expert slots (None: no EPLB);
        ``two_batch_overlap``: each iteration as two micro-batches whose expert exchange overlaps the other's
        compute."""
        self.two_batch_overlap = two_batch_overlap
        self.model = model
        self.tp = tensor_parallel
        self.pp = pipeline_parallel
        self.engine = (engine or EngineProfile(name="none")).on_host(hardware.fit.host_speedup)
        self.micro_batching = pipeline_parallel > 1 and self.engine.pipeline_micro_batches
        if self.engine.kernel_overhead_us is not None:
            hardware = with_fit(hardware, {"kernel_overhead_us": self.engine.kernel_overhead_us})
        self.elementwise_kernels = self.engine.elementwise_kernels_per_layer
        gemm_hardware = self.engine.gemm_hardware(hardware)  # the framework's own dense GEMM rates
        self.gemm = GemmModel(gemm_hardware, dtype, self.engine.compute_efficiency, self.engine.memory_efficiency,
                              self.engine.fuses_quantization(hardware.generation))
        # the LM head (like the embedding) stays in the activation precision in quantised checkpoints
        self.head_gemm = GemmModel(
            gemm_hardware, activation_dtype(dtype), self.engine.compute_efficiency, self.engine.memory_efficiency
        )
        self.network = engine_network(hardware, self.engine)
        self.custom_all_reduce = self.engine.custom_allreduce(hardware.generation)
        self.sequential_prefill = self.engine.prefill_batching == "sequential"
        self.w = bytes_per_element(activation_dtype(dtype))  # activations
        # each attention kind's kernel_fit: the framework's own kernels for softmax attention over K/V heads (its
        # attention_by_generation fit), for MLA (mla_by_generation), or the generation's pooled fit (recurrent kinds)
        kv, scales = kv_dtype or activation_dtype(dtype), (
            self.engine.compute_efficiency * self.engine.attention_efficiency, self.engine.memory_efficiency,
            self.engine.kernel_overhead_us)
        framework_attention = AttentionModel(self.engine.attention_hardware(hardware, kv), kv, *scales)
        latent_attention = AttentionModel(self.engine.mla_hardware(hardware, kv), kv, *scales)
        pooled_attention = AttentionModel(hardware, kv, *scales)
        # a sparse-attention indexer's kernels (multi-query logits over an FP8 cache): the compute rate of the
        # framework's MLA kernels (multi-query too) at the GPU's FP8 tensor-core peak, and HBM at the GPU's streaming
        # rate (the MLA fits' bandwidths describe their own kernels' dequantisation, not a stream of FP8 keys)
        indexer_attention = None
        if any(group.attention.indexer for group in model.layers):
            fp8 = hardware.peak_tflops.fp8  # None: no FP8 tensor cores (HardwareSpec.has_peak)
            fp8_rate = fp8 / hardware.peak_tflops.bf16 if fp8 is not None else 1.0
            streaming = {"prefill_attention.io_efficiency": hardware.fit.bandwidth_efficiency,
                         "decode_attention.bandwidth_efficiency": hardware.fit.bandwidth_efficiency}
            indexer_attention = AttentionModel(with_fit(self.engine.mla_hardware(hardware), streaming),
                                               "fp8", scales[0] * fp8_rate, *scales[1:])
        attention = {"framework": framework_attention, "latent": latent_attention, "pooled": pooled_attention}
        gemms = {part: self.gemm if model.quantized(part) else self.head_gemm
                 for part in ("attention", "dense_ffn", "experts")}
        gemms["router"] = self.head_gemm
        expert_dtype = self.engine.expert_format(dtype if model.quantized("experts") else activation_dtype(dtype),
                                                 hardware.generation)
        experts = ExpertsModel(self.engine.moe_hardware(hardware, expert_dtype), expert_dtype,  # its own MoE kernel
                               self.engine.compute_efficiency, self.engine.memory_efficiency)
        self.dp = data_parallel
        if all_to_all == "deepep" and hardware.fit.comm.deepep is None:
            raise ConfigError(f"cost_model.all_to_all: deepep needs a GPU DeepEP runs on (Hopper or later); "
                              f"{hardware.name} is {hardware.generation}")
        self.all_to_all = all_to_all
        slots = expert_slots(model, expert_parallel, eplb_redundant_experts)
        self.groups = [GroupCost(group, model.hidden_size, tensor_parallel, gemms, experts,
                                 attention[group.attention.kernel_fit], self.w,
                                 self.elementwise_kernels, expert_parallel, data_parallel, expert_load_cv, slots,
                                 indexer_attention)
                       for group in model.layers]
        self.prefill_keys = {group.prefill_key for group in self.groups}  # (span, query rows) of span_totals
        self.indexed = any(group.indexer for group in self.groups)
        if self.indexed:
            self.prefill_keys.add((0, 1.0))  # the indexer scores every cached token
        # all-reduces per layer: two, one in an MoE layer under attention DP (its exchange replaces one)
        reduces = [1 if group.moe and data_parallel > 1 else 2 for group in self.groups]
        self._all_reduces = sum(group.count * n for group, n in zip(self.groups, reduces, strict=True))
        self._norm_reduces = sum(group.count * group.norm_reduces for group in self.groups)
        # an iteration with prompt chunks runs outside CUDA graphs: the host dispatches each of its operations (the
        # all-reduces only where there is a tensor-parallel group to reduce over)
        self.eager_floor = self.engine.eager_kernel_us * 1e-6 * sum(
            group.host_ops(n if tensor_parallel > 1 else 0) for group, n in zip(self.groups, reduces, strict=True))
        self.decode_attention_fixed = sum(g.decode_fixed for g in self.groups)
        self._body_cache: dict[int, float] = {}
        self._decode_body_cache: dict[int, float] = {}  # iterations without prompt chunks
        self._per_sequence_cache: dict[tuple[int, int], float] = {}
        self._decode_cache: dict[int, tuple[float, float]] = {}
        self._decode_attention_cache: dict[int, tuple[float, float]] = {}
        self._verify_attention_cache: dict[tuple[int, int], tuple[float, float]] = {}  # (sequences, queries) > 1
        self._prefill_cache: dict[tuple[tuple[int, int], ...], float] = {}  # prompt-only iterations by their chunks
        # the same for the iterations' work (simulator.cost.work), filled only when a run records it
        self._body_work_cache: dict[tuple[int, bool], Work] = {}
        self._per_sequence_work_cache: dict[tuple[int, int], Work] = {}
        self._decode_work_cache: dict[int, tuple[Work, Work]] = {}
        self._decode_attention_work_cache: dict[tuple[int, int], tuple[Work, Work]] = {}  # (sequences, queries)
        self._prefill_work_cache: dict[tuple[tuple[int, int], ...], Work] = {}

    @classmethod
    def from_config(cls, config: ExperimentConfig, model: ModelSpec, hardware: HardwareSpec,
                    engine: EngineProfile) -> RooflineCostModel:
        kv = kv_dtype(config.kv_cache.dtype, config.dtype)
        cluster, cost = config.cluster, config.cost_model
        assert isinstance(cost, RooflineCostConfig)  # picked by its kind, roofline
        return cls(model, hardware, cluster.tensor_parallel, config.dtype, kv, engine, cluster.pipeline_parallel,
                   cluster.expert_parallel, cluster.data_parallel, cost.expert_load_cv, cost.all_to_all,
                   cost.eplb_redundant_experts, cost.two_batch_overlap)

    # --- building blocks -------------------------------------------------------------------------------------
    def all_reduce_time(self, nbytes: float) -> float:
        """One all-reduce of ``nbytes`` over the tensor-parallel GPUs (:func:`framework_all_reduce_time`)."""
        return framework_all_reduce_time(self.network, self.custom_all_reduce, self.tp, nbytes)

    def layer_communication_time(self, num_tokens: int, decode_only: bool = False) -> float:
        """Every layer's collectives: two all-reduces of T·D·w over the tensor-parallel GPUs, and in a layer whose
        query/key norm spans all heads (``AttentionSpec.cross_head_norm``) one more of T·2 fp32 sums of squares
        (q's and k's, which vLLM, SGLang and TensorRT-LLM reduce together); with attention data parallelism a MoE
        layer instead all-reduces its attention output and sends each token to its k experts and back over the
        replica's dp × t GPUs, T / t tokens from each (:mod:`simulator.cost.expert_exchange`: NCCL all-to-alls, or
        DeepEP's kernels — low-latency ones when ``decode_only``)."""
        time = self._all_reduces * self.all_reduce_time(num_tokens * self.model.hidden_size * self.w)
        if self._norm_reduces:
            time += self._norm_reduces * self.all_reduce_time(num_tokens * QK_NORM_REDUCE_BYTES)
        if self.dp <= 1:
            return time
        return time + self.exchange_time(num_tokens, decode_only)

    def exchange_time(self, num_tokens: int, decode_only: bool = False) -> float:
        """The MoE layers' dispatch and combine under attention data parallelism (0 without it)."""
        if self.dp <= 1:
            return 0.0
        w = self.w  # a latent MoE exchanges its latent-width tokens
        return sum(group.count * exchange_time(self.network, self.all_to_all, self.tp * self.dp, num_tokens / self.tp,
                                               group.topk, group.expert_hidden, w, decode_only)
                   for group in self.groups if group.moe)

    def stage_transfer_time(self, nbytes: float) -> float:
        """Hidden states from one pipeline stage to the next: a send/recv within the node, or over the stage's
        ``tensor_parallel`` NICs when the replica spans nodes."""
        hw = self.network
        if self.tp * self.pp <= hw.node.gpus_per_node:
            return collective_time(hw, "send_recv", 2, nbytes)
        comm = hw.fit.comm
        return nbytes / (self.tp * hw.node.inter_node_gb_per_s * 1e9 * comm.p2p_efficiency) + comm.p2p_latency_us * 1e-6

    def body_parts(self, num_tokens: int, decode_only: bool = False) -> dict[str, float]:
        """Seconds per operator group of every per-token kernel except attention's FLOPs/KV reads (``decode_only``:
        an iteration without prompt chunks, which DeepEP serves with its low-latency kernels)."""
        m, T, g = self.model, num_tokens, self.gemm
        D = m.hidden_size
        parts = {
            "gemm_s": sum(group.gemm_time(T) for group in self.groups),
            "elementwise_s": sum(group.elementwise_time(T) for group in self.groups)
            + g.memory_kernel(T * D * self.w)
            + g.memory_kernel(2 * T * D * self.w),
            "communication_s": self.layer_communication_time(T, decode_only)
            + ((self.pp - 1) * self.stage_transfer_time(T * D * self.w) if self.pp > 1 else 0.0),
        }
        if self.two_batch_overlap and self.dp > 1:  # half of the shorter of compute and exchange is hidden
            hidden = min(parts["gemm_s"] + parts["elementwise_s"], self.exchange_time(T, decode_only)) / 2
            parts["communication_s"] -= hidden
        return parts

    def per_sequence_parts(self, num_sequences: int, num_prompts: int = 0) -> dict[str, float]:
        """Seconds of the LM head on each sequence's last token, sampling, and the engine's fixed costs
        (``num_prompts`` of the sequences are prompt chunks)."""
        m, g = self.model, self.gemm
        return {
            "lm_head_sampling_s": self.head_gemm.time(num_sequences, m.vocab_size / self.tp, m.hidden_size)
            + g.memory_kernel(2 * num_sequences * m.vocab_size * 4),
            "engine_s": self.engine.iteration_overhead(m.num_layers, num_sequences, num_prompts),
        }

    def experts_time(self, num_tokens: float) -> float:
        """Seconds of every MoE layer's routed experts in an iteration of ``num_tokens`` tokens on this rank (the
        experts see ``data_parallel`` times as many: every rank's, the ranks taken as equally loaded); a lock-step
        group of attention-DP ranks swaps it for the ranks' true total (:mod:`simulator.cluster.lockstep`)."""
        return sum(group.experts_time(num_tokens) for group in self.groups)

    def _body_time(self, num_tokens: int, decode_only: bool = False) -> float:
        cache = self._decode_body_cache if decode_only else self._body_cache
        cached = cache.get(num_tokens)
        if cached is None:
            cached = cache[num_tokens] = sum(self.body_parts(num_tokens, decode_only).values())
        return cached

    def _per_sequence_time(self, num_sequences: int, num_prompts: int = 0) -> float:
        key = (num_sequences, num_prompts)
        cached = self._per_sequence_cache.get(key)
        if cached is None:
            cached = self._per_sequence_cache[key] = sum(self.per_sequence_parts(num_sequences, num_prompts).values())
        return cached

    def prefill_attention_time(self, chunks: tuple[tuple[int, int], ...]) -> float:
        """Every group's prefill attention kernels over the iteration's prompt chunks (new, cached tokens)."""
        if len(self.groups) == 1 and not self.indexed:
            group = self.groups[0]
            return group.prefill_attention_time(*span_totals(chunks, *group.prefill_key))
        totals = {key: span_totals(chunks, *key) for key in self.prefill_keys}
        time = sum(group.prefill_attention_time(*totals[group.prefill_key]) for group in self.groups)
        if self.indexed:
            pairs, tokens, cached = totals[0, 1.0][:3]
            time += sum(group.indexer_prefill_time(pairs, tokens, cached) for group in self.groups)
        return time

    # --- iteration ---------------------------------------------------------------------------------------------
    def decode_attention_terms(self, num_decodes: int, queries: int = 1) -> tuple[float, float]:
        """Seconds per sequence and per cached token of every group's decode attention in a step of
        ``num_decodes`` sequences of ``queries`` query positions each (:meth:`GroupCost.decode_terms`)."""
        if queries != 1:  # a verification pass
            key = (num_decodes, queries)
            verify = self._verify_attention_cache.get(key)
            if verify is None:
                each = [group.decode_terms(num_decodes, queries) for group in self.groups]
                verify = self._verify_attention_cache[key] = (sum(t[0] for t in each), sum(t[1] for t in each))
            return verify
        cached = self._decode_attention_cache.get(num_decodes)
        if cached is None:
            terms = [group.decode_terms(num_decodes) for group in self.groups]
            cached = self._decode_attention_cache[num_decodes] = (sum(t[0] for t in terms), sum(t[1] for t in terms))
        return cached

    def _attention_time(self, shape: IterationShape) -> float:
        time = self.prefill_attention_time(shape.prefill_chunks) if shape.prefill_chunks else 0.0
        if shape.num_decodes:
            per_sequence, per_token = self.decode_attention_terms(shape.num_decodes, shape.decode_positions)
            time += (self.decode_attention_fixed + per_sequence * shape.num_decodes
                     + per_token * shape.decode_context_sum)
        return time

    def _passes(self, shape: IterationShape) -> list[IterationShape]:
        """The forward passes of an iteration: one, or with sequential prefill one per prompt plus the decodes."""
        if not self.sequential_prefill or len(shape.prefill_chunks) + (shape.num_decodes > 0) <= 1:
            return [shape]
        passes = [IterationShape((chunk,)) for chunk in shape.prefill_chunks]
        if shape.num_decodes:
            passes.append(IterationShape((), shape.num_decodes, shape.decode_context_sum, shape.decode_positions))
        return passes

    def _pass_time(self, shape: IterationShape) -> float:
        """Verifying k drafted tokens runs every decode sequence through k + 1 positions: k + 1 rows in the GEMMs
        and the LM head, k + 1 queries per sequence in attention, which still reads each sequence's KV once."""
        decode_rows = shape.num_decodes * shape.decode_positions
        engine = self._per_sequence_time(len(shape.prefill_chunks) + decode_rows, len(shape.prefill_chunks))
        gpu = self._body_time(shape.prefill_tokens + decode_rows, not shape.prefill_chunks) + self._attention_time(
            shape)
        if shape.prefill_chunks and gpu < self.eager_floor:  # the layers' kernels wait for the host's dispatches
            gpu = self.eager_floor
        return gpu + engine

    def micro_batches(self, num_sequences: int) -> int:
        """Micro-batches in flight at once for ``num_sequences`` sequences (module docstring): min(pp, sequences)
        under an engine with pipeline micro-batches, else 1."""
        return min(self.pp, num_sequences) if self.micro_batching and num_sequences > 1 else 1

    def heaviest_micro_batch(self, shape: IterationShape) -> IterationShape:
        """The micro-batch that sets a pipelined iteration's time (module docstring): prompt chunks dealt out largest
        first to the micro-batch of fewest tokens, then the decodes split evenly (the lightest micro-batches one
        more); the one of most tokens, with its share of the decodes' cached context. O(chunks + k log k)."""
        k = self.micro_batches(len(shape.prefill_chunks) + shape.num_decodes)
        if k == 1:
            return shape
        tokens = [0] * k
        chunks: list[list[tuple[int, int]]] = [[] for _ in range(k)]
        for chunk in sorted(shape.prefill_chunks, reverse=True):
            lightest = tokens.index(min(tokens))
            tokens[lightest] += chunk[0]
            chunks[lightest].append(chunk)
        rows, (each, extra) = shape.decode_positions, divmod(shape.num_decodes, k)
        decodes = [each] * k
        for lightest in sorted(range(k), key=tokens.__getitem__)[:extra]:
            decodes[lightest] += 1
        tokens = [t + d * rows for t, d in zip(tokens, decodes, strict=True)]
        heaviest = tokens.index(max(tokens))
        share = decodes[heaviest]
        context = shape.decode_context_sum * share // shape.num_decodes if shape.num_decodes else 0
        return IterationShape(tuple(sorted(chunks[heaviest], reverse=True)), share, context, rows)

    def iteration_time(self, shape: IterationShape) -> float:
        if self.micro_batching:
            shape = self.heaviest_micro_batch(shape)
        if shape.num_decodes:
            return self._iteration_time(shape)
        if not shape.prefill_chunks:
            return 0.0
        # prompt-only iterations recur (the same prompt lengths): remember them, within a bounded table
        cached = self._prefill_cache.get(shape.prefill_chunks)
        if cached is None:
            cached = _remember(self._prefill_cache, shape.prefill_chunks, self._iteration_time(shape))
        return cached

    def _iteration_time(self, shape: IterationShape) -> float:
        if not self.sequential_prefill:
            return self._pass_time(shape)
        return sum(self._pass_time(one) for one in self._passes(shape))

    def breakdown(self, shape: IterationShape) -> dict[str, float]:
        """``iteration_time`` split into operator groups (seconds; they sum to the iteration time)."""
        total: dict[str, float] = {}
        if self.micro_batching:
            shape = self.heaviest_micro_batch(shape)
        for one in self._passes(shape) if (shape.prefill_chunks or shape.num_decodes) else []:
            decode_rows = one.num_decodes * one.decode_positions
            parts = self.body_parts(one.prefill_tokens + decode_rows, not one.prefill_chunks)
            parts["attention_s"] = self._attention_time(one)
            if one.prefill_chunks:  # the host's dispatches the GPU waits for (see _pass_time)
                parts["eager_launch_s"] = max(self.eager_floor - sum(parts.values()), 0.0)
            parts.update(self.per_sequence_parts(len(one.prefill_chunks) + decode_rows, len(one.prefill_chunks)))
            for name, seconds in parts.items():
                total[name] = total.get(name, 0.0) + seconds
        return total

    def decode_step_coefficients(self, num_decodes: int) -> tuple[float, float]:
        """A pipelined replica's step is one pass of its heaviest micro-batch: ceil(S/k) sequences holding that share
        of the cached context (module docstring)."""
        cached = self._decode_cache.get(num_decodes)
        if cached is None:
            share = -(-num_decodes // self.micro_batches(num_decodes))
            per_sequence, per_token = self.decode_attention_terms(share)
            a = (self._body_time(share, True) + self._per_sequence_time(share) + self.decode_attention_fixed
                 + per_sequence * share)
            cached = self._decode_cache[num_decodes] = (a, per_token * share / num_decodes)
        return cached

    # --- work (simulator.cost.work): the same kernels' FLOPs, bytes and time split ----------------------------
    def body_work(self, num_tokens: int, decode_only: bool = False) -> Work:
        """:meth:`body_parts` as :class:`~simulator.cost.work.Work`: the GEMMs and elementwise kernels, the
        embedding gather and final norm; communication fixed. With two-batch overlap the shorter of compute C and
        exchange X is half hidden: half the exchange when C ≥ X, else half the compute."""
        key = (num_tokens, decode_only)
        cached = self._body_work_cache.get(key)
        if cached is not None:
            return cached
        T, g, D = num_tokens, self.gemm, self.model.hidden_size
        kernels = Work()
        for group in self.groups:
            kernels += group.gemm_work(T) + group.elementwise_work(T)
        kernels += g.memory_kernel_work(T * D * self.w) + g.memory_kernel_work(2 * T * D * self.w)
        communication = self.layer_communication_time(T, decode_only) + (
            (self.pp - 1) * self.stage_transfer_time(T * D * self.w) if self.pp > 1 else 0.0)
        if self.two_batch_overlap and self.dp > 1:
            exchange = self.exchange_time(T, decode_only)
            if kernels.seconds >= exchange:
                communication -= exchange / 2
            else:
                kernels = Work(kernels.flops, kernels.hbm_bytes, kernels.compute_s / 2, kernels.memory_s / 2,
                               kernels.fixed_s / 2)
        work = self._body_work_cache[key] = kernels + fixed(communication)
        return work

    def per_sequence_work(self, num_sequences: int, num_prompts: int = 0) -> Work:
        """:meth:`per_sequence_parts` as :class:`~simulator.cost.work.Work` (the engine's costs fixed)."""
        key = (num_sequences, num_prompts)
        cached = self._per_sequence_work_cache.get(key)
        if cached is None:
            m = self.model
            cached = self._per_sequence_work_cache[key] = (
                self.head_gemm.work(num_sequences, m.vocab_size / self.tp, m.hidden_size)
                + self.gemm.memory_kernel_work(2 * num_sequences * m.vocab_size * 4)
                + fixed(self.engine.iteration_overhead(m.num_layers, num_sequences, num_prompts)))
        return cached

    def experts_work(self, num_tokens: float) -> Work:
        """:meth:`experts_time` as :class:`~simulator.cost.work.Work`."""
        return sum((group.experts_work(num_tokens) for group in self.groups), Work())

    def prefill_attention_work(self, chunks: tuple[tuple[int, int], ...]) -> Work:
        """:meth:`prefill_attention_time` as :class:`~simulator.cost.work.Work`."""
        totals = {key: span_totals(chunks, *key) for key in self.prefill_keys}
        work = sum((group.prefill_attention_work(*totals[group.prefill_key]) for group in self.groups), Work())
        if self.indexed:
            pairs, tokens, cached = totals[0, 1.0][:3]
            work += sum((group.indexer_prefill_work(pairs, tokens, cached) for group in self.groups), Work())
        return work

    def decode_attention_work_terms(self, num_decodes: int, queries: int = 1) -> tuple[Work, Work]:
        """:meth:`decode_attention_terms` as :class:`~simulator.cost.work.Work`: per sequence, per cached token."""
        key = (num_decodes, queries)
        cached = self._decode_attention_work_cache.get(key)
        if cached is None:
            terms = [group.decode_work_terms(num_decodes, queries) for group in self.groups]
            cached = self._decode_attention_work_cache[key] = (
                sum((t[0] for t in terms), Work()), sum((t[1] for t in terms), Work()))
        return cached

    def _attention_work(self, shape: IterationShape) -> Work:
        work = self.prefill_attention_work(shape.prefill_chunks) if shape.prefill_chunks else Work()
        if shape.num_decodes:
            per_sequence, per_token = self.decode_attention_work_terms(shape.num_decodes, shape.decode_positions)
            work += (fixed(self.decode_attention_fixed) + per_sequence * shape.num_decodes
                     + per_token * shape.decode_context_sum)
        return work

    def _pass_work(self, shape: IterationShape) -> Work:
        """:meth:`_pass_time` as :class:`~simulator.cost.work.Work`: where the host's eager launches outlast the
        GPU's kernels, the pass waits for them and all of its GPU time is fixed."""
        decode_rows = shape.num_decodes * shape.decode_positions
        engine = self.per_sequence_work(len(shape.prefill_chunks) + decode_rows, len(shape.prefill_chunks))
        gpu = self.body_work(shape.prefill_tokens + decode_rows, not shape.prefill_chunks) + self._attention_work(
            shape)
        if shape.prefill_chunks and gpu.seconds < self.eager_floor:
            gpu = Work(gpu.flops, gpu.hbm_bytes, fixed_s=self.eager_floor)
        return gpu + engine

    def iteration_work(self, shape: IterationShape) -> Work:
        if self.micro_batching:
            shape = self.heaviest_micro_batch(shape)
        if shape.num_decodes:
            return self._iteration_work(shape)
        if not shape.prefill_chunks:
            return Work()
        cached = self._prefill_work_cache.get(shape.prefill_chunks)  # as iteration_time's
        if cached is None:
            cached = _remember(self._prefill_work_cache, shape.prefill_chunks, self._iteration_work(shape))
        return cached

    def _iteration_work(self, shape: IterationShape) -> Work:
        if not self.sequential_prefill:
            return self._pass_work(shape)
        return sum((self._pass_work(one) for one in self._passes(shape)), Work())

    def decode_step_work(self, num_decodes: int) -> tuple[Work, Work]:
        """As :meth:`decode_step_coefficients`: a pipelined replica's step is one pass of its heaviest micro-batch."""
        cached = self._decode_work_cache.get(num_decodes)
        if cached is None:
            share = -(-num_decodes // self.micro_batches(num_decodes))
            per_sequence, per_token = self.decode_attention_work_terms(share)
            constant = (self.body_work(share, True) + self.per_sequence_work(share)
                        + fixed(self.decode_attention_fixed) + per_sequence * share)
            cached = self._decode_work_cache[num_decodes] = (constant, per_token * (share / num_decodes))
        return cached
