"""Attention kernels on one GPU: FlashAttention-style prefill and paged decode.

Per layer, with ``H`` query heads and ``G`` KV heads on the GPU, query-key width ``d_qk`` and value width ``d_v``
per head, ``e`` KV elements stored per token (``2·G·d`` for multi-head/grouped-query attention; the latent
``kv_lora_rank + qk_rope_head_dim`` for MLA's absorbed decode), ``v`` bytes per KV element, 16-bit queries and
outputs, and a span ``w`` (a sliding window or a local-attention chunk; 0 = the whole context), every kernel costs
its compute and memory times (combined as each phase says) plus a fixed cost, ``prefill_attention.overhead_us`` for a
prefill kernel and ``decode_attention.overhead_us`` for a decode kernel (another kernel, which also launches the
combine of its split-KV partials; unset, the prefill kernel's). The parameters named here are a hardware profile's
``fit`` (``fit.prefill_attention``, ``fit.decode_attention``, ``fit.gemm``); an engine profile's own kernels name
them flat (``decode_attention_ns_per_head``, :class:`~simulator.catalog.engines.AttentionFields`):

- prefill of a chunk of ``q`` new tokens over ``c`` cached ones: causal query-key pairs q·c + q(q+1)/2 (a prompt of s
  tokens under a window, nothing cached: w(w+1)/2 + (s − w)·w); per pair and head, its FLOPs 2·(d_qk + d_v) at
  ``prefill_attention.efficiency`` × the 16-bit peak and its softmax's exponential at the special-function units' rate
  (``sfu_exp_tera_per_s``), of which ``prefill_attention.exp_exposed`` is not hidden behind the tensor cores (one
  exponential per pair whatever the width, so a narrow head pays more per FLOP: H100's 3.9 × 10^12/s take as long as
  width 64's FLOPs at the full peak, half of width 128's; the frameworks' H100 tables run width 64 at 0.8 of width
  128's FLOP rate and width 256 at 1.1, and leave 0.5–0.65 of the exponentials' time exposed; Blackwell Ultra doubles
  the rate) — but at least its longest thread block's (the last query tile of the longest chunk,
  :func:`longest_block`) at 1 / (``sm_count`` × ``prefill_attention.blocks_per_sm``) of that rate, where that is set
  (smooth maximum, p = the hardware's ``gemm.knee``): a kernel of fewer blocks than its SMs hold, or of a few long
  ones, waits for its longest (vLLM's H100 prefill of one 16k-token prompt and one head, 128 blocks, reaches 309
  TFLOP/s, of two 543); plus K/V bytes (q + c)·e·v (the chunk's and the cached ones read) at
  ``prefill_attention.io_efficiency`` × HBM bandwidth — added, not overlapped: the frameworks' timings grow by a cost
  per (token, KV head) at every prompt length, whatever the query heads (vLLM's H100 kernel ~0.5 ns per 128-wide bf16
  K/V token and KV head at 16–1,024 tokens); ``prefill_attention.ns_per_row`` for every (query, head) row per 128
  elements of its widths ((d_qk + d_v) / :data:`ROW_WIDTHS`) — loading the query, the online softmax's running maximum
  and sum, rescaling and writing the output — and ``prefill_attention.ns_per_tile`` for every thread block (whole-GPU
  nanoseconds: the blocks run on all SMs at once), one per (tile of :data:`QUERY_TILE` query rows, head), or, where
  ``prefill_attention.packs_gqa``, per (tile of query rows of all of a KV head's H / G query heads, KV head):
  ceil(q·H/G / tile) per KV head (a chunk of one token over 8 KV heads with 64 query heads is 8 blocks instead of 64;
  which kernels pack is read off their tables, :mod:`simulator.fidelity.attention_fit`). These make a short prompt
  cost more per pair than a long one, as measured: TensorRT-LLM's H100 prefill kernel reaches ~100 TFLOP/s at 256
  tokens and ~500 at 16k;
- decode of one token over ``S`` cached (S ← min(S, w), then, where ``decode_attention.kv_tile`` is set, whole
  tiles of it: S ← ceil(S / tile) · tile — the kernel's loop over the cache loads a tile at a step, a partial one as
  a whole; vLLM's H100 decode of 64 sequences × 8 KV heads takes 23.8–26.1 µs at 16–128 cached tokens, 46.1 at 256):
  the smooth maximum (p = ``gemm.knee``) of FLOPs 2·H·(d_qk + d_v)·S at
  ``decode_attention.efficiency`` × the 16-bit peak (no tensor-core-sized tiles at one query row), bytes e·v·S at
  ``decode_attention.bandwidth_efficiency`` × HBM bandwidth (unset: the GEMMs' streaming ``bandwidth_efficiency``)
  and, where ``decode_attention.block_gb_per_s`` is set, at most at that rate per (sequence, KV head) block of the
  step (smooth maximum of the two: a step of few blocks does not reach the GPU's bandwidth; TensorRT-LLM's A100
  MLA decode, without split-KV, streams one sequence's latent cache at ~10 GB/s),
  plus ``decode_attention.ns_per_head`` for every (sequence, KV head) block the kernel schedules and
  ``decode_attention.ns_per_query_head`` for every (sequence, query head) within them (a block's work on each of its
  group's query heads; 0 for the pooled fit) — where the kernel computes a group's query heads as the rows of
  matrix-multiply tiles of ``decode_attention.query_tile`` rows, a block's first tile is in its own cost and every
  row of its further tiles pays, (ceil(H / G / tile) − 1) · tile per KV head (TensorRT-LLM's XQA: one tile of 16
  rows costs the same for groups of 2 to 16; on H100 a block of a group of 2–12 costs 37–39 ns in its tables at
  short contexts, 16 costs 41, 24–32 cost 53–57). A kernel that serves at most ``decode_attention.max_group`` query
  heads per KV head from one read of it (0: any) runs a fallback kernel for larger groups, priced per cached token
  at ``decode_attention.ns_per_query_token`` for every query head and 128 elements of its width instead of the
  streaming above: TensorRT-LLM's XQA kernels serve groups of up to 32 query heads at the cost of one KV head's
  read, while its timings of groups of 48–128 (multi-query attention with many heads) grow with the query heads, the
  same over an fp8 cache as over bf16 and for head widths 64 and 128 (~0.08 ns per (query head, token) on H100), as
  a kernel bound by its work per query head and not by the bytes it reads. Where
  ``decode_attention.mha_ns_per_head`` is set, one query head per block — multi-head attention, and that fallback
  — runs another kernel (TensorRT-LLM's masked multi-head attention), which pays it per (sequence, query head)
  instead of the grouped kernel's block costs (~10 ns on H100 against ~38 for an XQA block). The blocks (one per KV
  head, or per query head where that kernel runs) run ``decode_attention.blocks_per_sm`` at once on each of the
  GPU's ``sm_count`` SMs: a step of fewer blocks than that wave still takes one wave, so it pays the block costs of
  max(B, wave / blocks per sequence) sequences rather than of its B (the frameworks' tables are flat in the batch
  until the blocks approach the SMs: vLLM's H100 decode of 8 KV heads takes 11.8–12.7 µs at 1–16 sequences of
  short contexts, 16.6 at 32, then ~0.2 µs more per sequence; its fit: half a block per SM); a step of fewer
  blocks than ``sm_count`` × ``decode_attention.split_blocks_per_sm`` (by default the wave; FlashAttention's
  heuristic splits below 0.8 of the SMs) splits each context of ``decode_attention.split_tokens`` or more over the
  idle SMs, whose partial results another pass combines (``decode_attention.split_us``: TensorRT-LLM's H100 step
  of 1–4 sequences costs ~2 µs more from 64 cached tokens, one of 8 or more does not; under CUDA graphs at most the
  engine's kernel floor). A decode step of a batch is therefore affine in the context sum, as
  :mod:`simulator.cost.base` needs (a serving step takes its contexts as long enough to split, a window's as its
  span).

With ``d_qk = d_v = d`` and ``e = 2·G·d`` these are the familiar 4·H·d FLOPs per pair and 2·G·d·v bytes per token.

Fitted per GPU generation (:mod:`simulator.catalog.generations`) on the frameworks' own timings
(``../shared/data/kernels/<gpu>/attention``, bf16 queries, bf16/fp8 KV, head_dim 64–512, windows), pooled. The three
frameworks' kernels differ among themselves (TensorRT-LLM's decode kernel reaches a seventh of the others' FLOP
rate; its prefill kernel pays 22 ns per query tile and head where vLLM's pays 1.5 on H100), so each engine profile
also carries the same parameters, its decode kernel's own fixed cost and KV streaming rate, and — its kernels over
an 8-bit cache being other kernels — their parameters apart (``kv_8bit``: SGLang's and vLLM's H100 decode kernels
dequantise fp8 in registers and stream it at ~0.7 of HBM bandwidth against ~0.9 over bf16; TensorRT-LLM's pays 0.3 ns
per (sequence, query head) against 3.0, and its fp8 prefill runs at 1.3 of the 16-bit peak on fp8 tensor cores),
fitted on its own framework's tables (``attention_by_generation``,
:meth:`simulator.catalog.engines.EngineProfile.attention_hardware`), which price its multi-head and grouped-query
attention; and the same for its MLA kernels on its MLA tables (``mla_by_generation``,
:meth:`~simulator.catalog.engines.EngineProfile.mla_hardware`). ``llmsim validate`` reports the error for each
framework.

The costs per work item — ``prefill_attention.ns_per_row`` and ``.ns_per_tile``, ``decode_attention.ns_per_head``,
``.ns_per_query_head``, ``.mha_ns_per_head`` and ``.ns_per_query_token`` — are whole-GPU nanoseconds of work that
runs on all SMs at once, as fitted on a GPU of ``fit.sm_count`` SMs (the generation's: H100 SXM 132, A100 108):
a GPU of ``sm_count`` SMs pays them × fit.sm_count / sm_count (:func:`spread_over_sms`; priced with the other
generation's fit, the A100 and H100 tables' medians come 0.4–11 points closer with it).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from simulator.catalog import HardwareSpec, resolve_hardware
from simulator.cost.work import Work, smooth_max_work
from simulator.dtypes import bytes_per_element, resolve_dtype

QUERY_TILE = 128  # queries per thread block of the FlashAttention-2/3-class prefill kernels (d ≤ 128)
ROW_WIDTHS = 256  # d_qk + d_v of the 128-wide head whose row costs prefill_attention_ns_per_row
FALLBACK_WIDTH = 128  # head-width elements the decode fallback kernel's cost per (query head, token) covers


def query_tiles(new_tokens, rows_per_query=1):
    """Thread blocks per head (or per KV head, packed) of a prefill kernel over a chunk of ``new_tokens`` queries of
    ``rows_per_query`` rows each (the query heads a block packs per KV head; 1: one head per block):
    ceil(q · rows / QUERY_TILE) (scalars or arrays)."""
    return -(-(new_tokens * rows_per_query) // QUERY_TILE)


def spread_over_sms(hardware: HardwareSpec) -> float:
    """How much of a work item's whole-GPU cost, as fitted, this GPU pays: the items run on all its SMs at once, so
    ``fit.sm_count`` / ``sm_count`` (1 where either is not stated)."""
    if not (hardware.fit.sm_count and hardware.sm_count):
        return 1.0
    return hardware.fit.sm_count / hardware.sm_count


def decode_context(seq_len, window):
    """The cached tokens a decode kernel over ``seq_len`` cached reads under a span ``window`` (0: none): min(S, w)
    where a window is set; scalars or arrays."""
    return np.where((np.asarray(window) > 0) & (np.asarray(seq_len) > window), window, seq_len)


def longest_block(query_rows, keys):
    """Query-key pairs of a prefill kernel's longest thread block over a chunk of ``query_rows`` query rows (its
    tokens × the heads a block packs) whose last query sees ``keys`` keys: its last tile, min(rows,
    :data:`QUERY_TILE`) rows over ``keys`` (causal masking inside the tile ignored); scalars or arrays."""
    return np.minimum(query_rows, QUERY_TILE) * keys


class AttentionModel:
    """The attention costs of one GPU for one KV format (the roofline's hot path keeps one of these)."""

    __slots__ = ("block_bandwidth", "decode_bandwidth", "decode_flops", "decode_overhead", "exp_time", "fallback_flops",
                 "fallback_head_dim", "fallback_window_head_dim", "io_bandwidth", "kv_tile", "max_group",
                 "mha_per_head", "overhead", "p", "packs_gqa", "per_head", "per_query_head", "per_query_token",
                 "per_row", "per_tile", "prefill_flops", "prefill_wave", "query_tile", "split", "split_tokens",
                 "split_wave", "tile_padding", "v", "wave")

    def __init__(self, hardware: HardwareSpec, kv_dtype: str = "bf16", compute_scale: float = 1.0,
                 memory_scale: float = 1.0, overhead_us: float | None = None) -> None:
        """``compute_scale``/``memory_scale``: a serving engine's kernels relative to the fitted ones;
        ``overhead_us``: the engine's per-kernel floor (CUDA-graph replay) instead of the eager ones (prefill and
        decode alike, and at most that for a split's combine)."""
        prefill, decode = hardware.fit.prefill_attention, hardware.fit.decode_attention
        peak = hardware.achievable_flops("bf16") / hardware.fit.gemm.flops_efficiency  # the 16-bit peak
        bandwidth = hardware.memory_bandwidth_gb_per_s * 1e9 * memory_scale
        self.prefill_flops = peak * prefill.efficiency * compute_scale
        self.fallback_flops = peak * prefill.fallback_efficiency * compute_scale
        falls_back = prefill.fallback_efficiency > 0  # a fallback without its rate is none
        self.fallback_head_dim = prefill.fallback_head_dim if falls_back else 0
        self.fallback_window_head_dim = prefill.fallback_window_head_dim if falls_back else 0
        self.decode_flops = peak * decode.efficiency * compute_scale
        self.io_bandwidth = bandwidth * prefill.io_efficiency
        self.decode_bandwidth = bandwidth * (decode.bandwidth_efficiency or hardware.fit.bandwidth_efficiency)
        self.block_bandwidth = decode.block_gb_per_s * 1e9 * memory_scale
        item_ns = 1e-9 * spread_over_sms(hardware)  # whole-GPU ns per work item, on this GPU's SMs
        self.per_head = decode.ns_per_head * item_ns
        self.per_query_head = decode.ns_per_query_head * item_ns
        self.max_group = decode.max_group
        self.query_tile = decode.query_tile
        mha = decode.mha_ns_per_head
        self.mha_per_head = None if mha is None else mha * item_ns
        self.per_query_token = decode.ns_per_query_token * item_ns
        self.wave = hardware.sm_count * decode.blocks_per_sm  # blocks at once (0: no waves)
        split = decode.split_us  # the combine, a kernel: under CUDA graphs at most their floor
        self.split = (split if overhead_us is None else min(split, overhead_us)) * 1e-6
        self.split_tokens = decode.split_tokens
        split_blocks = decode.split_blocks_per_sm
        self.split_wave = hardware.sm_count * (decode.blocks_per_sm if split_blocks is None
                                               else split_blocks)  # a step of fewer blocks splits
        self.kv_tile = decode.kv_tile
        # the tokens a context pads its last tile with, on average over contexts spread evenly over a tile's residues
        self.tile_padding = (self.kv_tile - 1) / 2 if self.kv_tile else 0.0
        self.per_row = prefill.ns_per_row * item_ns
        self.per_tile = prefill.ns_per_tile * item_ns
        self.prefill_wave = hardware.sm_count * prefill.blocks_per_sm  # blocks at once (0: no bound)
        self.packs_gqa = prefill.packs_gqa
        exps = hardware.sfu_exp_tera_per_s * 1e12  # the softmax's exponentials: one per query-key pair and head
        self.exp_time = prefill.exp_exposed / exps if exps else 0.0
        self.overhead = (prefill.overhead_us if overhead_us is None else overhead_us) * 1e-6
        own = decode.overhead_us
        self.decode_overhead = self.overhead if overhead_us is not None or own is None else own * 1e-6
        self.p = hardware.fit.gemm.knee  # the GEMMs' knee
        self.v = bytes_per_element(kv_dtype)

    def combine(self, compute_s: float, memory_s: float) -> float:
        p = self.p
        return (compute_s**p + memory_s**p) ** (1 / p)

    def prefill_parts(self, heads: float, widths: float, kv_elements: float, pairs: float, new_tokens: float,
                      cached_read: float, blocks: float, longest, flops=None) -> float:
        """One prefill kernel over ``pairs`` query-key pairs, ``new_tokens`` queries in ``blocks`` thread blocks
        (:meth:`prefill_blocks_of`, summed over the chunks) and ``cached_read`` cached K/V tokens read (no fixed cost);
        ``widths`` = d_qk + d_v, ``kv_elements`` = e; ``flops``: the kernel's FLOP rate (None: ``prefill_flops``;
        :meth:`prefill_rate` for one that may fall back); ``longest``: the query-key pairs of its longest block
        (:func:`longest_block`); scalars or arrays."""
        flops = self.prefill_flops if flops is None else flops
        per_pair = 2 * widths / flops + self.exp_time  # one head's FLOPs and exponential of a query-key pair
        compute = heads * pairs * per_pair
        if self.prefill_wave:  # the longest block at 1 / wave of the rate
            compute = self.combine(compute, longest * self.prefill_wave * per_pair)
        return (compute + (new_tokens + cached_read) * kv_elements * self.v / self.io_bandwidth
                + heads * new_tokens * widths / ROW_WIDTHS * self.per_row + blocks * self.per_tile)

    def prefill_work(self, heads: float, widths: float, kv_elements: float, pairs: float, new_tokens: float,
                     cached_read: float, blocks: float, longest: float, flops: float, fixed_s: float = 0.0) -> Work:
        """:meth:`prefill_parts` (scalars; ``flops`` the kernel's FLOP rate) as :class:`~simulator.cost.work.Work`:
        2·(d_qk + d_v) FLOPs per pair and head, the K/V bytes; the pairs' FLOPs and exponentials (and its longest
        block) are compute, the K/V bytes memory, the costs per row and per tile fixed (and ``fixed_s``, its
        launch floor)."""
        per_pair = 2 * widths / flops + self.exp_time
        compute = heads * pairs * per_pair
        if self.prefill_wave:
            compute = self.combine(compute, longest * self.prefill_wave * per_pair)
        nbytes = (new_tokens + cached_read) * kv_elements * self.v
        return Work(heads * pairs * 2 * widths, nbytes, compute, nbytes / self.io_bandwidth,
                    heads * new_tokens * widths / ROW_WIDTHS * self.per_row + blocks * self.per_tile + fixed_s)

    def query_rows(self, heads, kv_heads):
        """Query rows per token of a prefill kernel's blocks: the H / G query heads of a KV head where it packs
        them (``prefill_attention.packs_gqa``), else 1 (scalars or arrays)."""
        return np.asarray(heads) / np.maximum(kv_heads, 1) if self.packs_gqa else np.ones_like(np.asarray(heads))

    def prefill_blocks_of(self, new_tokens, heads, kv_heads):
        """Thread blocks of a prefill kernel over a chunk of ``new_tokens`` queries: (H / rows) ·
        :func:`query_tiles` (q, rows), rows = :meth:`query_rows` (scalars or arrays)."""
        rows = self.query_rows(heads, kv_heads)
        return heads / rows * query_tiles(new_tokens, rows)

    def prefill_falls_back(self, head_dim, windowed):
        """Whether a prefill of head width ``head_dim`` (``windowed``: under a window or local chunk) runs the
        fallback kernel: from ``prefill_attention.fallback_head_dim``, or windowed from
        ``prefill_attention.fallback_window_head_dim`` (0: never); scalars or arrays."""
        wide = np.asarray(head_dim) >= (self.fallback_head_dim or np.inf)
        if not self.fallback_window_head_dim:
            return wide
        return wide | (windowed & (head_dim >= self.fallback_window_head_dim))

    def prefill_rate(self, fallback):
        """The prefill kernel's FLOP rate: the fallback's where ``fallback`` (:meth:`prefill_falls_back`)."""
        return np.where(fallback, self.fallback_flops, self.prefill_flops)

    def decode_per_token(self, heads: float, widths: float, kv_elements: float, kv_heads: float = 0,
                         blocks: float = 0, queries: float = 1):
        """Seconds per cached token a decode kernel reads (compute and memory, smooth maximum), its memory side
        at most ``blocks`` (sequence, KV head) blocks' streaming rate (``decode_attention.block_gb_per_s``; 0 blocks:
        not limited); with more than ``max_group`` query heads per KV head (of ``kv_heads``; 0: not grouped
        attention), the fallback kernel's cost per (query head, token, 128 elements of the head's width d =
        widths / 2). ``queries``: query positions per sequence reading the cache once (k + 1 when verifying k
        drafted tokens: their FLOPs, not their bytes, multiply). Scalars or arrays."""
        memory = kv_elements * self.v / self.decode_bandwidth
        if self.block_bandwidth:
            memory = np.where(np.asarray(blocks) > 0, self.combine(  # type: ignore[assignment]  # scalars or arrays
                memory, kv_elements * self.v / (np.maximum(blocks, 1) * self.block_bandwidth)), memory)
        streaming = self.combine(2 * heads * widths * queries / self.decode_flops, memory)
        if not self.max_group:
            return streaming
        fallback = heads * np.ceil(widths / (2 * FALLBACK_WIDTH)) * self.per_query_token * queries
        return np.where((np.asarray(kv_heads) > 0) & (heads > self.max_group * kv_heads), fallback, streaming)

    def decode_per_token_work(self, heads: float, widths: float, kv_elements: float, kv_heads: float = 0,
                              blocks: float = 0, queries: float = 1) -> Work:
        """:meth:`decode_per_token` (scalars) as :class:`~simulator.cost.work.Work`: 2·H·(d_qk + d_v)·queries FLOPs
        and e·v bytes per cached token, the streaming kernel's smooth maximum split by Euler's rule (its memory side
        at most the blocks' streaming rate, memory too); the fallback kernel's cost per (query head, token) is a
        fitted cost per work item, fixed."""
        nbytes = kv_elements * self.v
        nflops = 2 * heads * widths * queries
        if self.max_group and kv_heads > 0 and heads > self.max_group * kv_heads:
            return Work(nflops, nbytes,
                        fixed_s=heads * math.ceil(widths / (2 * FALLBACK_WIDTH)) * self.per_query_token * queries)
        memory = nbytes / self.decode_bandwidth
        if self.block_bandwidth and blocks > 0:
            memory = self.combine(memory, nbytes / (blocks * self.block_bandwidth))
        return smooth_max_work(self.p, nflops / self.decode_flops, memory, flops=nflops, hbm_bytes=nbytes)

    def decode_block_cost(self, heads, kv_heads):
        """Seconds per sequence of a decode kernel's blocks over ``heads`` query heads and ``kv_heads`` KV heads:
        ``kv_heads`` · ``per_head`` + rows · ``per_query_head``, rows = ``heads``, or with a query tile the rows of
        each block's tiles after its first, (ceil(heads / kv_heads / tile) − 1) · tile · kv_heads; where the
        multi-head kernel runs (``mha_per_head`` set, and one query head per KV head or a group above
        ``max_group``), ``heads`` · ``mha_per_head``. Scalars or arrays."""
        rows = heads
        if self.query_tile:
            group = np.asarray(heads) / np.maximum(kv_heads, 1)
            rows = kv_heads * (np.ceil(group / self.query_tile) - 1) * self.query_tile
        grouped = kv_heads * self.per_head + rows * self.per_query_head
        if self.mha_per_head is None:
            return grouped
        return np.where(self.runs_mha(heads, kv_heads), heads * self.mha_per_head, grouped)

    def runs_mha(self, heads, kv_heads):
        """Whether the multi-head decode kernel (``mha_per_head`` set) serves ``heads`` query heads over ``kv_heads``:
        one query head per KV head, or a group above ``max_group``. Scalars or arrays."""
        if self.mha_per_head is None:
            return np.zeros_like(np.asarray(heads), dtype=bool)
        return (np.asarray(heads) == kv_heads) | (bool(self.max_group) & (np.asarray(heads) > self.max_group
                                                                          * np.asarray(kv_heads)))

    def decode_blocks(self, heads, kv_heads):
        """Thread blocks per sequence of a decode kernel: one per KV head, or per query head where the multi-head
        kernel runs (:meth:`runs_mha`). Scalars or arrays."""
        return np.where(self.runs_mha(heads, kv_heads), heads, kv_heads)

    def decode_wave(self, sequences, blocks, context):
        """(the sequences whose block costs (:meth:`decode_block_cost`) a decode step of ``sequences`` sequences of
        ``blocks`` thread blocks each (:meth:`decode_blocks`) pays, the seconds it pays to combine split-KV
        partials): max(sequences, wave / blocks) with one wave of ``wave`` (``sm_count`` ×
        ``decode_attention.blocks_per_sm``) blocks, and, with fewer blocks than ``split_wave`` (``sm_count`` ×
        ``decode_attention.split_blocks_per_sm``, by default the wave) where ``context`` reaches
        ``decode_attention.split_tokens``, the split's combine ``decode_attention.split_us``; (sequences, 0) without
        waves. Scalars or arrays."""
        if not self.wave:
            return sequences, 0.0
        splits = (np.asarray(sequences) * blocks < self.split_wave) & (np.asarray(context) >= self.split_tokens)
        return np.maximum(sequences, self.wave / np.maximum(blocks, 1)), np.where(splits, self.split, 0.0)

    def tiled(self, context):
        """The cached tokens a decode kernel reads for a context of ``context``: whole tiles of
        ``decode_attention.kv_tile`` tokens, ceil(context / tile) · tile (the context itself without a tile); scalars
        or arrays."""
        if not self.kv_tile:
            return context
        return np.ceil(np.asarray(context) / self.kv_tile) * self.kv_tile

    def kernel_times(self, phase: str, batch, seq_len, heads, kv_heads, head_dim, window):
        """:func:`attention_time` for scalars or equal-length arrays (``window`` 0 = full attention)."""
        batch, seq_len, heads, kv_heads, head_dim, window = (
            np.asarray(x, dtype=float) for x in (batch, seq_len, heads, kv_heads, head_dim, window))
        if phase == "prefill":
            windowed = (window > 0) & (seq_len > window)
            fallback = self.prefill_falls_back(head_dim, window > 0)
            pairs = np.where(windowed & ~fallback, window * (window + 1) / 2 + (seq_len - window) * window,
                             seq_len * (seq_len + 1) / 2)
            keys = np.where(windowed & ~fallback, window, seq_len)
            return self.prefill_parts(heads, 2 * head_dim, 2 * kv_heads * head_dim, batch * pairs, batch * seq_len, 0,
                                      batch * self.prefill_blocks_of(seq_len, heads, kv_heads),
                                      longest_block(seq_len * self.query_rows(heads, kv_heads), keys),
                                      self.prefill_rate(fallback)) + self.overhead
        context = decode_context(seq_len, window)
        billed, split = self.decode_wave(batch, self.decode_blocks(heads, kv_heads), context)
        return (batch * self.tiled(context) * self.decode_per_token(heads, 2 * head_dim, 2 * kv_heads * head_dim,
                                                                    kv_heads, batch * kv_heads)
                + billed * self.decode_block_cost(heads, kv_heads) + self.decode_overhead + split)


def attention_time(
    hardware: str | HardwareSpec, phase: Literal["prefill", "decode"], batch: int, seq_len: int, num_heads: int,
    num_kv_heads: int, head_dim: int, kv_dtype: str = "bf16", window: int = 0,
) -> float:
    """Seconds of one attention kernel on one GPU: ``prefill`` (every one of ``batch`` sequences ``seq_len`` new
    tokens, nothing cached) or ``decode`` (one new token each over ``seq_len`` cached), the KV cache in
    ``kv_dtype`` (a format's name, :func:`simulator.dtypes.resolve_dtype`)."""
    if phase not in ("prefill", "decode"):
        raise ValueError(f"phase: {phase!r} (allowed: prefill, decode)")
    kv_dtype = resolve_dtype(kv_dtype, "kv_dtype")
    if batch <= 0 or seq_len <= 0:
        return 0.0
    model = AttentionModel(resolve_hardware(hardware), kv_dtype)
    return float(model.kernel_times(phase, batch, seq_len, num_heads, num_kv_heads, head_dim, window))
