"""KV-cache sizing: bytes per token, the memory budget of a replica, and the block pool it yields.

    KV bytes per token  = Σ over layer groups of layers × KV elements per token × bytes per element
                          (2 × kv_heads × head_dim for multi-head/grouped-query attention; MLA's latent
                          kv_lora_rank + qk_rope_head_dim; each kind's own, :mod:`simulator.catalog.layers`)
    KV pool per GPU     = memory × gpu_memory_utilization − weights/(t·p) − LoRA slots − activation workspace, or
                          with free_memory_fraction f: f × (memory − weights/(t·p) − LoRA slots − workspace),
                          TensorRT-LLM's way, or with mem_fraction_static s: memory × s − weights/(t·p) − LoRA
                          slots, SGLang's (its 1 − s holds the activations and CUDA graphs, and is the workspace
                          reported; :mod:`simulator.kv.sglang_memory`)
                          (LoRA slots: max_loras adapters, :mod:`simulator.cost.lora`)
    weights             = quantisable parameters × weight bytes + the rest (norms, routers, embeddings, LM head) × 2;
                          the experts split over the replica's data_parallel × tensor_parallel GPUs, the rest over t;
                          a speculative draft head's (MTP modules, EAGLE head: :mod:`simulator.catalog.draft`) the
                          same way, whole on each stage (the last stage holds it: the fullest GPU); a draft model's
                          (``method: draft_model``) all over its d = draft_tensor_parallel_size GPUs (default t;
                          d = 1: whole on one GPU, the fullest, whose pool every GPU's matches), as vLLM loads it
                          beside the target before it profiles the memory left for KV; a vision model's encoder
                          (16-bit, over t) on the first stage: with one stage the GPU holds it and any draft, with
                          more the fullest is the first stage or the last, whichever holds more
    blocks              = floor(pool / (block_size × KV bytes per token per GPU))

With t-way tensor parallelism each GPU holds ceil(kv_heads / t) heads of every token (heads are replicated when
t > kv_heads; MLA's latent is whole on every GPU); with p pipeline stages it holds ceil(layers / p) of the layers
(weights and KV taken as evenly split); a draft head's layers keep KV for every token too, their bytes per token
added to the pool's (whole, like its weights); a draft model's KV-growing layers too, ceil(kv_heads / d) heads of
each (its windowed layers counted in full, an upper bound; vLLM puts the draft's layers in the target's KV cache
groups, one block table per request). The pool's slots are sized by the layers whose KV grows with the context;
sliding-window and local-chunk layers hold at most their span per sequence, a reserve the allocator gives every
sequence (:mod:`simulator.kv.span_reserve`; the one-request check counts it too); linear-attention and Mamba layers
hold a fixed state per sequence, reserved the same way. A model whose every KV layer has a bounded span sizes its
slots by them instead (an upper bound: the span is not enforced then).
The activation workspace is an estimate of the largest forward pass the scheduler may run (``max_num_batched_tokens``
tokens): hidden states and the widest FFN intermediate per token (A: k·I/t for a dense layer, top-k experts' plus
the shared experts' for MoE) in the weight precision, plus fp32 logits for ``max_num_seqs`` sequences:

    workspace = max_num_batched_tokens × (4·D + 2·A) × w + max_num_seqs × vocab/t × 4
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.catalog import HardwareSpec, ModelSpec
from simulator.catalog.draft import DraftHead
from simulator.dtypes import activation_dtype, bytes_per_element
from simulator.errors import LLMSimError, MemoryShortError
from simulator.kv.span_reserve import span_reserve

GIB = 2**30


def kv_dtype(configured: str, weight_dtype: str) -> str:
    """``auto`` stores the KV cache in the activation precision (16-bit)."""
    return activation_dtype(weight_dtype) if configured == "auto" else configured


def kv_cache_bytes(num_layers: int, num_kv_heads: int, head_dim: int, dtype: str, context: int, batch: int) -> float:
    """Bytes of multi-head/grouped-query KV cache for ``batch`` sequences of ``context`` tokens."""
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_element(dtype) * context * batch


@dataclass(frozen=True)
class KVBudget:
    """Where a replica's GPU memory goes (per GPU, bytes) and the resulting pool of blocks."""

    usable_bytes: float
    weight_bytes: float
    workspace_bytes: float
    kv_bytes_per_token: float  # per GPU, of the layers whose KV grows with the context
    block_size: int
    num_blocks: int
    spans: tuple[tuple[int, float], ...] = ()  # bounded-span groups: (span, bytes per token / kv_bytes_per_token)
    adapter_bytes: float = 0.0  # LoRA slots (max_loras adapters at max_lora_rank), reserved before the KV pool
    draft_bytes: float = 0.0  # a speculative draft's weights (head or model), a part of weight_bytes

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size


def kv_budget(
    model: ModelSpec, hardware: HardwareSpec, *, tensor_parallel: int, weight_dtype: str, kv_dtype_name: str,
    gpu_memory_utilization: float, block_size: int, max_num_batched_tokens: int, max_num_seqs: int,
    max_model_len: int, num_blocks_override: int | None = None, pipeline_parallel: int = 1,
    expert_shards: int | None = None, free_memory_fraction: float | None = None, adapter_bytes: float = 0.0,
    expert_replication: float = 1.0, mem_fraction_static: float | None = None, data_parallel: int = 1,
    expert_parallel: int = 1, draft: DraftHead | None = None, draft_model: ModelSpec | None = None,
    draft_tensor_parallel: int | None = None,
) -> KVBudget:
    """The block pool of one replica (one attention-DP rank: its t GPUs; ``expert_shards``: the GPUs the experts
    spread over, default t; ``adapter_bytes``: LoRA slots per GPU, taken like weights; ``expert_replication``:
    EPLB's expert slots over the experts, whose weights grow by it; ``draft``: a speculative draft head held beside
    the model, its weights and KV per token added; ``draft_model``: a separate draft model on the same GPUs, split
    over ``draft_tensor_parallel`` of them, default t, its weights and KV per token added); refuses (LLMSimError) a
    configuration with no room for one full request, naming the whole deployment (``data_parallel`` and
    ``expert_parallel`` only name it) and the change that would make room."""
    t, p = tensor_parallel, pipeline_parallel
    w = bytes_per_element(activation_dtype(weight_dtype))
    usable = hardware.memory_bytes * (mem_fraction_static or gpu_memory_utilization)
    parts = model.part_bytes(bytes_per_element(weight_dtype), w)
    experts = parts.pop("experts")  # routed and shared experts: over the replica's expert shards (default t)
    weights = sum(parts.values()) / (t * p) + experts * expert_replication / ((expert_shards or t) * p)
    # a vision model's encoder runs before the first stage (16-bit, sharded over its t GPUs); a draft after the last
    vision = model.vision.weight_bytes(t) if model.vision is not None else 0.0
    draft_bytes = 0.0
    if draft is not None:
        draft_parts = draft.part_bytes(bytes_per_element(weight_dtype), w)
        draft_bytes += draft_parts.pop("experts") / (expert_shards or t) + sum(draft_parts.values()) / t
    d = draft_tensor_parallel or t
    if draft_model is not None:  # its experts too over its d GPUs: vLLM runs a draft model without expert parallelism
        draft_bytes += draft_model.weight_bytes(bytes_per_element(weight_dtype), w) / d
    # the fullest GPU: one stage holds both; under pipeline parallelism the first stage's or the last's
    weights += vision + draft_bytes if p == 1 else max(vision, draft_bytes)
    lora = f" + LoRA slots {adapter_bytes / GIB:.2f} GiB" if adapter_bytes else ""
    share_name = "mem_fraction_static" if mem_fraction_static else "gpu_memory_utilization"
    share = (f"free_memory_fraction {free_memory_fraction:g}" if free_memory_fraction is not None
             else f"{share_name} {mem_fraction_static or gpu_memory_utilization:g}")
    where = f"{model.name} on {hardware.name} × {deployment_shape(t, p, data_parallel, expert_parallel)} ({share})"
    expert_share = experts * expert_replication / ((expert_shards or t) * p) / weights if weights else 0.0
    if mem_fraction_static:  # the activations (and CUDA graphs) live in what the share leaves: that is the workspace
        workspace = hardware.memory_bytes - usable
    else:
        widest = max(group.ffn.activation_width for group in model.layers) / t
        workspace = (max_num_batched_tokens * (4 * model.hidden_size + 2 * widest) * w
                     + max_num_seqs * model.vocab_size / t * 4)
    layers = model.num_layers
    growing, span_bytes = model.kv_layout(bytes_per_element(kv_dtype_name), t)
    if not growing:  # no KV grows with the context: windowed layers count in full (an upper bound), states stay
        windowed = [nbytes for span, nbytes in span_bytes if span > 1]
        if not windowed:
            raise LLMSimError(f"{model.name}: no layer keeps KV per token (every layer a state-space or linear-"
                              "attention mixer); such models are not modelled yet")
        growing, span_bytes = sum(windowed), [(span, nbytes) for span, nbytes in span_bytes if span == 1]
    per_token = growing * math.ceil(layers / p) / layers
    held = per_token  # the model's own layers' share of the bytes per token (the spans are relative to it)
    if draft is not None:
        per_token += draft.kv_bytes_per_token(bytes_per_element(kv_dtype_name), t)
    if draft_model is not None:
        draft_growing, draft_spans = draft_model.kv_layout(bytes_per_element(kv_dtype_name), d)
        per_token += draft_growing + sum(nbytes for span, nbytes in draft_spans if span > 1)
    spans = tuple((span, nbytes / growing * (held / per_token)) for span, nbytes in span_bytes)
    longest = max_model_len + span_reserve(spans, max_model_len)
    beside = 0.0 if mem_fraction_static else workspace  # what the usable memory holds besides weights and KV
    taken = "" if mem_fraction_static else f" + workspace {workspace / GIB:.2f} GiB"
    if num_blocks_override is not None:
        num_blocks = num_blocks_override
        if weights + adapter_bytes + beside > usable:  # a fixed pool still needs the weights to fit beside it
            raise MemoryShortError(
                f"{where}: weights {weights / GIB:.2f} GiB{lora}{taken} exceed the {usable / GIB:.2f} GiB usable per "
                f"GPU (kv_cache.num_gpu_blocks fixes the KV pool, not the weights); {_more_room(expert_share)} or a "
                "larger GPU"
            )
    else:
        pool = usable - weights - adapter_bytes - beside
        if free_memory_fraction is not None:  # a share of what the weights and workspace leave
            pool = (hardware.memory_bytes - weights - adapter_bytes - workspace) * free_memory_fraction
        num_blocks = max(0, math.floor(pool / (block_size * per_token)))
        needed_blocks = math.ceil(longest / block_size)
        if num_blocks < needed_blocks:
            missing = (needed_blocks * block_size * per_token - pool) / GIB
            raise MemoryShortError(
                f"{where}: weights {weights / GIB:.2f} GiB{lora}{taken} leave {max(pool, 0) / GIB:.2f} GiB of the "
                f"{usable / GIB:.2f} GiB usable per GPU for KV cache, {missing:.2f} GiB short of one "
                f"{max_model_len}-token request; {_more_room(expert_share)}, a larger GPU, a higher {share_name} or a "
                "smaller max_model_len"
            )
    return KVBudget(usable, weights, workspace, per_token, block_size, num_blocks, spans, adapter_bytes, draft_bytes)


def deployment_shape(tensor_parallel: int, pipeline_parallel: int, data_parallel: int = 1,
                     expert_parallel: int = 1) -> str:
    """``TP8 × PP1``, with ``× DP8 × EP64`` where attention data or expert parallelism is used."""
    shape = f"TP{tensor_parallel} × PP{pipeline_parallel}"
    return shape + (f" × DP{data_parallel}" if data_parallel > 1 else "") + (
        f" × EP{expert_parallel}" if expert_parallel > 1 else "")


def _more_room(expert_share: float) -> str:
    """The change that frees most weight memory per GPU: where the experts are most of it, spreading them wider."""
    if expert_share > 0.5:
        return "spread the experts over more GPUs (expert_parallel with data_parallel × tensor_parallel)"
    return "use more tensor_parallel or pipeline_parallel"
