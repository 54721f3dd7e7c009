"""What one layer group costs on one tensor-parallel GPU: its GEMMs, elementwise kernels and attention kernels.

With ``t``-way tensor parallelism, ``D`` = hidden, ``T`` tokens in the iteration, ``w`` bytes per activation:

Attention GEMMs and the widths its kernels see are the kind's own (:meth:`AttentionSpec.shapes
<simulator.catalog.layers.AttentionSpec.shapes>`: each module of :mod:`simulator.catalog.layers` states its
kinds'); state layers (``linear``, ``mamba``) run a recurrence that costs FLOPs per token in prefill and, in decode,
a constant per sequence (the state read and written); a layer without attention (``none``) runs no kernel.

FFN GEMMs (widths split over ``t``):

- the MLP every token runs (``FFNSpec.dense_width`` I: a dense FFN's, or the shared experts' summed width): up
  (T × D)·(D × k·I/t) (k = ``up_matrices``, 2 when gated: gate and up fused), down (T × I/t)·(I/t × D).
- routed experts (``FFNSpec.routing``): the router (T × D)·(D × E) in 16-bit;
  the routed experts as two *grouped* GEMMs over the experts the batch touches (one kernel per projection, as
  fused-MoE kernels run them; :mod:`simulator.cost.moe`), spread over ``expert_parallel`` of the ``t`` GPUs with
  each expert's width split over the other ``t / expert_parallel``; a latent MoE's experts (``Routing.hidden`` L)
  see L-wide tokens, behind its projections (T × D)·(D × L) and (T × L)·(L × D), replicated on every GPU as vLLM and
  TensorRT-LLM run them; ``none``: no FFN.

Elementwise kernels (two norms, the activation, two residual adds, and for MoE the weighted sum of each token's k
expert outputs): T·(10·D + 3·A)·w bytes, A = the activation width per token (dense I/t; MoE k·I/t plus the shared
experts'), plus T·(k + 1)·D·w for the MoE combine, over the engine's ``elementwise_kernels_per_layer`` kernels.

Attention kernels are priced by :class:`simulator.cost.attention.AttentionModel`. A group whose queries attend to a
bounded number of cached tokens (sliding window, local chunk, a sparse selection's top-k) costs, in decode, a
constant per sequence (those tokens: exact once the context exceeds them, an upper bound before — as the sparse
kernels run their top-k slots whatever the context), so a decode step stays affine in the context sum; its prefill
counts only the pairs inside the bound.

DeepSeek Sparse Attention's lightning indexer (``AttentionSpec.indexer``; replicated on every tensor-parallel GPU, as
the engines run it): its GEMMs — queries (T × r_q)·(r_q × H_I·d_I), its key (T × D)·(D × d_I), the head weights
(T × D)·(D × H_I) — and two kernels per layer (:class:`IndexerCost`; the framework's MLA kernels' compute rate at
the GPU's FP8 peak, HBM at its streaming rate, :class:`simulator.cost.roofline.RooflineCostModel`): the logits,
2·H_I·d_I FLOPs per query-key pair over all cached tokens, reading each cached token's key (d_I + 4 bytes) and
writing an fp32 logit per pair; and the top-k selection, reading those logits. In decode that is affine in the
context: per cached token 2·H_I·d_I FLOPs and d_I + 4 + 8 bytes.
"""

from __future__ import annotations

import math

from simulator.catalog.architecture import LayerGroup
from simulator.catalog.layers import IndexerShape
from simulator.cost.attention import QUERY_TILE, AttentionModel, query_tiles
from simulator.cost.gemm import GemmModel
from simulator.cost.moe import ExpertsModel
from simulator.cost.work import Work, fixed, memory_kernel_work, smooth_max_work


def causal_pairs(new: int, cached: int, span: int = 0) -> float:
    """Query-key pairs of ``new`` tokens after ``cached`` ones under causal masking, each query seeing at most
    ``span`` keys (itself included; 0 = no limit): Σ_{i=cached+1}^{cached+new} min(i, span)."""
    if span <= 0 or cached + new <= span:
        return new * cached + new * (new + 1) / 2
    first, last = cached + 1, cached + new
    if first > span:
        return new * span
    return (first + span) * (span - first + 1) / 2 + (last - span) * span


class IndexerCost:
    """One layer's lightning indexer (DeepSeek Sparse Attention) on one GPU: its two kernels (module docstring),
    priced by ``attention`` (an FP8 cache's kernels)."""

    LOGIT_BYTES = 4  # an fp32 score per query-key pair, written by the logits kernel and read by the top-k one

    def __init__(self, indexer: IndexerShape, attention: AttentionModel) -> None:
        self.attention = attention
        self.heads, self.width, self.key_bytes = indexer
        # per cached token in decode: its key read, its logit written and read back (an FP8 "KV" of that many bytes)
        self.decode_per_token = attention.decode_per_token(self.heads, self.width,
                                                           (self.key_bytes + 2 * self.LOGIT_BYTES) / attention.v)
        self.decode_fixed = 2 * attention.decode_overhead

    def prefill_time(self, pairs: float, tokens: int, cached: int) -> float:
        """Both kernels over ``pairs`` causal query-key pairs (all of them: the indexer scores every cached token)
        of ``tokens`` new and ``cached`` cached tokens."""
        attention = self.attention
        logits = attention.combine(2 * self.heads * self.width * pairs / attention.prefill_flops,
                                   ((tokens + cached) * self.key_bytes + self.LOGIT_BYTES * pairs)
                                   / attention.io_bandwidth)
        return logits + self.LOGIT_BYTES * pairs / attention.decode_bandwidth + 2 * attention.overhead

    def prefill_work(self, pairs: float, tokens: int, cached: int) -> Work:
        """:meth:`prefill_time` as :class:`~simulator.cost.work.Work`: 2·H_I·d_I FLOPs per pair, the keys read and
        each logit written and read back."""
        attention = self.attention
        nflops = 2 * self.heads * self.width * pairs
        nbytes = (tokens + cached) * self.key_bytes + self.LOGIT_BYTES * pairs
        logits = smooth_max_work(attention.p, nflops / attention.prefill_flops, nbytes / attention.io_bandwidth,
                                 flops=nflops, hbm_bytes=nbytes, fixed_s=2 * attention.overhead)
        return logits + memory_kernel_work(self.LOGIT_BYTES * pairs, attention.decode_bandwidth, 0.0)

    def decode_per_token_work(self) -> Work:
        """:attr:`decode_per_token` as :class:`~simulator.cost.work.Work` (per cached token)."""
        attention = self.attention
        return attention.decode_per_token_work(self.heads, self.width,
                                               (self.key_bytes + 2 * self.LOGIT_BYTES) / attention.v)


class GroupCost:
    """One layer group's per-GPU costs (seconds for all ``count`` layers of the group)."""

    def __init__(self, group: LayerGroup, hidden: int, tensor_parallel: int, gemms: dict[str, GemmModel],
                 experts: ExpertsModel, attention: AttentionModel, activation_bytes: float,
                 elementwise_kernels: int, expert_parallel: int = 1, data_parallel: int = 1,
                 expert_load_cv: float = 0.0, expert_slots: int = 0,
                 indexer_attention: AttentionModel | None = None) -> None:
        """``gemms``: the GEMM model of each part (``attention``, ``dense_ffn``, ``experts``, ``router``);
        ``experts``: the routed experts' grouped GEMMs (:mod:`simulator.cost.moe`), spread over
        ``expert_parallel`` of the replica's ``data_parallel`` × ``tensor_parallel`` GPUs (each expert's width split
        over the rest); with attention data parallelism the experts see every rank's tokens (ranks taken as equally
        loaded: ``data_parallel`` × this rank's); the busiest expert-parallel rank sets their time (uniform routing
        over experts whose popularity varies by ``expert_load_cv``, or EPLB's ``expert_slots`` when non-zero);
        ``indexer_attention``: the kernels of a sparse-attention indexer (:class:`IndexerCost`), where it has one."""
        self.experts_model = experts
        self.count = group.count
        self.hidden = hidden
        self.attention_gemm, self.router_gemm = gemms["attention"], gemms["router"]
        self.ffn_gemm = gemms[group.ffn.dense_part]
        self.attention = attention
        self.w = activation_bytes
        self.elementwise_kernels = elementwise_kernels
        t, a, f = tensor_parallel, group.attention, group.ffn
        self.span = a.attended  # cached tokens a query attends to (0: all)
        # a prefill kernel that falls back (its head width) computes every causal pair at the fallback's rate
        shapes = a.shapes(hidden, t)
        framework = a.kernel_fit == "framework"  # the framework's own kernels: fallbacks, packed query heads
        fallback = framework and bool(attention.prefill_falls_back(shapes.head_dim, self.span > 0))
        self.prefill_span = 0 if fallback else self.span
        # the query rows per token of its prefill kernel's blocks (a KV head's query heads where the kernel packs them)
        self.query_rows = float(attention.query_rows(shapes.heads, shapes.kv_blocks)) if framework else 1.0
        self.prefill_key = (self.prefill_span, self.query_rows)  # what its prefill totals depend on (span_totals)
        self.prefill_flops = float(attention.prefill_rate(fallback))
        self.indexer = IndexerCost(a.indexer, indexer_attention or attention) if a.indexer else None
        self.heads, self.attention_gemms = shapes.heads, shapes.gemms
        self.prefill_widths, self.prefill_kv = shapes.prefill_widths, shapes.prefill_kv
        self.decode_widths, self.decode_kv, self.kv_blocks = shapes.decode_widths, shapes.decode_kv, shapes.kv_blocks
        self.kernels = int(a.block)  # attention kernels per layer
        # a norm over all heads under tensor parallelism: the local sums of squares, one all-reduce of them (q's and
        # k's together, as the engines fuse it), then the scaling — one kernel more than a norm within a GPU
        self.norm_reduces = 1 if a.cross_head_norm and t > 1 else 0
        self.elementwise_kernels += self.norm_reduces
        self.state_flops = shapes.state_flops
        self.state_bytes = shapes.state_elements * a.state_element_bytes(attention.v)
        routing = f.routing
        self.moe, self.has_ffn = routing is not None, f.block
        self.expert_parallel, self.data_parallel = expert_parallel, data_parallel
        self.expert_load_cv, self.expert_slots = expert_load_cv, expert_slots
        # the MLP every token runs (a dense FFN's, or an MoE's shared experts)
        dense, self.up_matrices = f.dense_width / t, f.up_matrices
        self.up_width, self.down_width = self.up_matrices * dense, dense
        self.experts, self.topk, self.expert_width, self.activation_width = 0, 0, 0.0, dense
        self.latent, self.expert_hidden = 0, hidden  # a latent MoE's width, and the width its experts see
        if routing is not None:
            self.experts, self.topk = routing.experts, routing.per_token
            self.latent = routing.hidden
            self.expert_hidden = routing.hidden or hidden
            self.expert_width = routing.width * expert_parallel / (t * data_parallel)  # I / (MoE TP)
            self.activation_width = self.topk * (routing.width / t) + dense
        self._decode_block_cost = float(attention.decode_block_cost(self.heads, self.kv_blocks))
        self._decode_blocks = float(attention.decode_blocks(self.heads, self.kv_blocks))
        self._decode_state_cost = 0.0
        if self.state_bytes:  # a recurrence: read and write the state, its FLOPs, once per sequence
            self._decode_state_cost = attention.combine(self.state_flops / attention.decode_flops,
                                                        2 * self.state_bytes / attention.decode_bandwidth)
        self.decode_fixed = self.count * self.kernels * attention.decode_overhead
        if self.indexer:  # it scores every cached token
            self.decode_fixed += self.count * self.indexer.decode_fixed
            self.kernels += 2

    def decode_terms(self, sequences: int, queries: int = 1) -> tuple[float, float]:
        """Seconds per sequence and per cached token (its context) of all ``count`` layers' decode kernels in a step
        of ``sequences`` sequences (their number sets the kernel's blocks, and so how close its streaming comes to
        the GPU's bandwidth, :meth:`AttentionModel.decode_per_token`, and whether they fill a wave,
        :meth:`AttentionModel.decode_wave`, whose costs are spread over the sequences: every context taken as long
        enough to split but a bounded span's, a state layer's none); a bounded span makes the context's cost a
        constant per sequence, and a sparse-attention indexer scores every cached token. A kernel that reads the
        cache in whole tiles (``decode_attention.kv_tile``) reads a bounded span's tiles, and any other context its
        tiles' mean padding more, (tile − 1) / 2 tokens per sequence: the step stays affine in the context sum.
        ``queries``: query positions per sequence (k + 1 verifying k drafted tokens), whose FLOPs per cached token
        multiply while the cache is read once."""
        attention = self.attention
        per_token = float(attention.decode_per_token(self.heads, self.decode_widths, self.decode_kv, self.kv_blocks,
                                                     sequences * self.kv_blocks, queries))
        billed, split = (attention.decode_wave(sequences, self._decode_blocks, self.span or math.inf)
                         if self.decode_kv else (sequences, 0.0))  # a state layer has no cache to split
        per_sequence = (float(billed) * self._decode_block_cost + float(split)) / sequences + self._decode_state_cost
        if self.span:
            per_sequence, per_token = per_sequence + float(attention.tiled(self.span)) * per_token, 0.0
        elif self.decode_kv:  # contexts read in whole tiles: their mean padding
            per_sequence += attention.tile_padding * per_token
        if self.indexer:
            per_token += self.indexer.decode_per_token
        return self.count * per_sequence, self.count * per_token

    def decode_work_terms(self, sequences: int, queries: int = 1) -> tuple[Work, Work]:
        """:meth:`decode_terms` as :class:`~simulator.cost.work.Work`: per sequence (the blocks' costs and a split's
        combine fixed; a recurrence's state read and written; a bounded span's tokens, or a tiled context's mean
        padding) and per cached token (its FLOPs and bytes, and a sparse-attention indexer's); ``queries`` as
        there."""
        attention = self.attention
        per_token = attention.decode_per_token_work(self.heads, self.decode_widths, self.decode_kv, self.kv_blocks,
                                                    sequences * self.kv_blocks, queries)
        billed, split = (attention.decode_wave(sequences, self._decode_blocks, self.span or math.inf)
                         if self.decode_kv else (sequences, 0.0))
        per_sequence = fixed((float(billed) * self._decode_block_cost + float(split)) / sequences)
        if self.state_bytes:
            per_sequence += smooth_max_work(attention.p, self.state_flops / attention.decode_flops,
                                            2 * self.state_bytes / attention.decode_bandwidth,
                                            flops=self.state_flops, hbm_bytes=2 * self.state_bytes)
        if self.span:
            per_sequence, per_token = per_sequence + per_token * float(attention.tiled(self.span)), Work()
        elif self.decode_kv:
            per_sequence += per_token * attention.tile_padding
        if self.indexer:
            per_token += self.indexer.decode_per_token_work()
        return per_sequence * self.count, per_token * self.count

    def host_ops(self, all_reduces: int) -> int:
        """Operations the host dispatches for all ``count`` layers of the group in one forward pass outside CUDA
        graphs: the attention GEMMs and kernel, the elementwise kernels, the FFN's two GEMMs or, in an MoE layer,
        its router GEMM, the fused-MoE operation (one dispatch: its routing, permutation, grouped GEMMs and
        combine are launched from native code) and the shared expert's two GEMMs, and ``all_reduces``
        collectives per layer (and the all-reduce of a query/key norm over all heads)."""
        ffn = 0
        if self.moe:
            ffn = 2 + (2 if self.down_width else 0) + (2 if self.latent else 0)
        elif self.has_ffn:
            ffn = 2
        collectives = all_reduces + self.norm_reduces
        per_layer = len(self.attention_gemms) + self.kernels + self.elementwise_kernels + ffn + collectives
        return self.count * per_layer

    def gemm_time(self, tokens: int) -> float:
        T, D = tokens, self.hidden
        gemm = self.attention_gemm
        time = 0.0
        for n, k in self.attention_gemms:
            time += gemm.time(T, n, k)
        if not self.moe:
            if not self.has_ffn:
                return self.count * time
            ffn = self.ffn_gemm
            return self.count * (time + ffn.time(T, self.up_width, D) + ffn.time(T, D, self.down_width))
        time += self.router_gemm.time(T, self.experts, D)
        if self.down_width:  # shared experts
            ffn = self.ffn_gemm
            time += ffn.time(T, self.up_width, D) + ffn.time(T, D, self.down_width)
        if self.latent:  # the projections into and out of a latent MoE's width
            time += self.ffn_gemm.time(T, self.latent, D) + self.ffn_gemm.time(T, D, self.latent)
        return self.count * time + self.experts_time(T)

    def gemm_work(self, tokens: int) -> Work:
        """:meth:`gemm_time` as :class:`~simulator.cost.work.Work`."""
        T, D = tokens, self.hidden
        gemm = self.attention_gemm
        work = Work()
        for n, k in self.attention_gemms:
            work += gemm.work(T, n, k)
        if not self.moe:
            if not self.has_ffn:
                return work * self.count
            ffn = self.ffn_gemm
            return (work + ffn.work(T, self.up_width, D) + ffn.work(T, D, self.down_width)) * self.count
        work += self.router_gemm.work(T, self.experts, D)
        if self.down_width:
            ffn = self.ffn_gemm
            work += ffn.work(T, self.up_width, D) + ffn.work(T, D, self.down_width)
        if self.latent:
            work += self.ffn_gemm.work(T, self.latent, D) + self.ffn_gemm.work(T, D, self.latent)
        return work * self.count + self.experts_work(T)

    def experts_work(self, tokens: float) -> Work:
        """:meth:`experts_time` as :class:`~simulator.cost.work.Work`."""
        if not self.moe:
            return Work()
        everyone = tokens * self.data_parallel
        handed = everyone * self.topk / self.expert_parallel if self.data_parallel > 1 else everyone
        return self.experts_model.work(everyone, self.expert_hidden, self.expert_width, self.up_matrices, self.topk,
                                       self.experts, self.expert_parallel, self.expert_load_cv, self.expert_slots,
                                       handed) * self.count

    def elementwise_work(self, tokens: int) -> Work:
        """:meth:`elementwise_time` as :class:`~simulator.cost.work.Work`."""
        nbytes = tokens * (10 * self.hidden + 3 * self.activation_width) * self.w
        if self.moe:
            nbytes += tokens * (self.topk + 1) * self.hidden * self.w
        kernels = self.elementwise_kernels
        return self.attention_gemm.memory_kernel_work(nbytes / kernels) * (self.count * kernels)

    def prefill_attention_work(self, pairs: float, tokens: int, cached: int, sequences: int, tiles: int,
                               longest: float) -> Work:
        """:meth:`prefill_attention_time` as :class:`~simulator.cost.work.Work` (a recurrence: its FLOPs per token,
        its inputs, outputs and states)."""
        if not self.kernels:
            return Work()
        attention = self.attention
        if self.state_bytes:
            nbytes = (tokens * (2 * self.heads * self.prefill_widths + self.prefill_kv) * 2
                      + sequences * 2 * self.state_bytes)
            kernel = smooth_max_work(attention.p, tokens * self.state_flops / attention.prefill_flops,
                                     nbytes / attention.io_bandwidth, flops=tokens * self.state_flops,
                                     hbm_bytes=nbytes, fixed_s=attention.overhead)
        else:
            kernel = attention.prefill_work(self.heads, self.prefill_widths, self.prefill_kv, pairs, tokens, cached,
                                            self.heads / self.query_rows * tiles, longest, self.prefill_flops,
                                            attention.overhead)
        return kernel * self.count

    def indexer_prefill_work(self, pairs: float, tokens: int, cached: int) -> Work:
        """:meth:`indexer_prefill_time` as :class:`~simulator.cost.work.Work`."""
        return self.indexer.prefill_work(pairs, tokens, cached) * self.count if self.indexer else Work()

    def experts_time(self, tokens: float) -> float:
        """The routed experts of all layers of the group (0 if dense; :class:`simulator.cost.moe.ExpertsModel`)."""
        if not self.moe:
            return 0.0
        everyone = tokens * self.data_parallel
        # attention data parallelism: the all-to-all hands a GPU the assignments it serves; else every token
        handed = everyone * self.topk / self.expert_parallel if self.data_parallel > 1 else everyone
        return self.count * self.experts_model.time(everyone, self.expert_hidden, self.expert_width, self.up_matrices,
                                                    self.topk, self.experts, self.expert_parallel, "uniform",
                                                    self.expert_load_cv, self.expert_slots, handed)

    def elementwise_time(self, tokens: int) -> float:
        nbytes = tokens * (10 * self.hidden + 3 * self.activation_width) * self.w
        if self.moe:
            nbytes += tokens * (self.topk + 1) * self.hidden * self.w
        kernels = self.elementwise_kernels
        return self.count * kernels * self.attention_gemm.memory_kernel(nbytes / kernels)

    def prefill_attention_time(self, pairs: float, tokens: int, cached: int, sequences: int, tiles: int,
                               longest: float) -> float:
        """One prefill kernel per layer over ``pairs`` query-key pairs (:func:`span_totals` for this group's
        ``prefill_key``: its span, or all its causal pairs where its kernel falls back, and its blocks' query rows),
        ``tokens`` new queries in ``tiles`` query tiles per head (or per KV head, packed), ``cached`` cached K/V
        tokens read, of ``sequences`` prompt chunks, its longest thread block ``longest`` query-key pairs (a state
        layer: the recurrence's FLOPs per token, its inputs and outputs, and each chunk's state read
        and written)."""
        if not self.kernels:
            return 0.0
        attention = self.attention
        if self.state_bytes:
            kernel = attention.combine(
                tokens * self.state_flops / attention.prefill_flops,
                (tokens * (2 * self.heads * self.prefill_widths + self.prefill_kv) * 2
                 + sequences * 2 * self.state_bytes) / attention.io_bandwidth)
        else:
            kernel = attention.prefill_parts(self.heads, self.prefill_widths, self.prefill_kv, pairs, tokens, cached,
                                             self.heads / self.query_rows * tiles, longest, self.prefill_flops)
        return self.count * (kernel + attention.overhead)

    def indexer_prefill_time(self, pairs: float, tokens: int, cached: int) -> float:
        """The sparse-attention indexer's kernels of all ``count`` layers over all causal pairs (0 without one)."""
        return self.count * self.indexer.prefill_time(pairs, tokens, cached) if self.indexer else 0.0


def span_totals(chunks: tuple[tuple[int, int], ...], span: int = 0,
                rows: float = 1.0) -> tuple[float, int, int, int, int, float]:
    """Causal query-key pairs, new tokens, cached tokens read, chunks, query tiles (:func:`query_tiles` of each
    chunk's tokens × ``rows`` query rows per token) and the query-key pairs of the longest thread block (a chunk's
    last tile over the keys its last query sees, :func:`simulator.cost.attention.longest_block`) of an iteration's
    prompt chunks (new, cached) in layers whose queries see at most ``span`` keys (0: all)."""
    pairs, tokens, cached_read, tiles, longest = 0.0, 0, 0, 0, 0.0
    for new, cached in chunks:
        if span:
            pairs += causal_pairs(new, cached, span)
            cached_read += min(cached, span)
            keys = min(new + cached, span)
        else:
            pairs += new * cached + new * (new + 1) / 2
            cached_read += cached
            keys = new + cached
        tokens += new
        tiles += query_tiles(new, rows)
        longest = max(longest, min(new * rows, QUERY_TILE) * keys)
    return pairs, tokens, cached_read, len(chunks), tiles, longest
