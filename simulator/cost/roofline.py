"""Per-operator roofline cost of one iteration on a tensor-parallel replica.

Each operator costs ``max(FLOPs / achievable FLOP/s, bytes / achievable bytes/s)`` on one GPU shard; operators are
summed (kernels run one after another). Per layer, with T tokens in the iteration, t-way tensor parallelism,
``H = heads/t``, ``G = ceil(kv_heads/t)``, ``d = head_dim``, ``D = hidden``, ``I = intermediate/t``, weights of
``w`` bytes and KV of ``v`` bytes per element:

- QKV projection GEMM  (T × D) · (D × (H + 2G)·d)
- attention, prefill (FlashAttention-style, one kernel for all chunks): FLOPs 4·H·d·Σ(q·c + q(q+1)/2) for a chunk of
  q new tokens over c cached ones (causal); bytes = the K/V of (c + q) tokens read once
- attention, decode: FLOPs 4·H·d·S, bytes 2·G·d·v·S for context sum S (every sequence's KV cache is read)
- attention activations (queries in, outputs out): 2·T·H·d·w bytes, memory-bound
- output projection GEMM (T × H·d) · (H·d × D)
- MLP: up (T × D) · (D × k·I) with k = 2 if gated else 1, down (T × I) · (I × D)
- elementwise (two norms, activation, two residual adds): T·(10·D + 3·I)·w bytes, memory-bound
- two all-reduces of T·D·w bytes (ring: 2(t−1)/t · bytes / link bandwidth + 2(t−1) · link latency)

Per iteration: embedding gather (T·D·w bytes) and the LM head GEMM on the last token of each sequence
(m = sequences, n = vocab/t, k = D). A GEMM (m × k)·(k × n) does 2mnk FLOPs and moves (mk + kn + mn)·w bytes.

Decode attention is linear in S in both its FLOPs and its bytes, so a decode step is exactly affine in S, as
:mod:`simulator.cost.base` requires.
"""

from __future__ import annotations

import math

from simulator.catalog import HardwareSpec, ModelSpec
from simulator.config.schema import ExperimentConfig
from simulator.cost.base import COST_MODELS, CostModel, IterationShape
from simulator.dtypes import bytes_per_element
from simulator.kv.sizing import kv_dtype


@COST_MODELS.register("roofline")
class RooflineCostModel(CostModel):
    def __init__(
        self, model: ModelSpec, hardware: HardwareSpec, tensor_parallel: int = 1, dtype: str = "bf16",
        kv_dtype: str | None = None,
    ) -> None:
        self.model = model
        self.hardware = hardware
        self.tp = tensor_parallel
        self.w = bytes_per_element(dtype)
        self.v = bytes_per_element(kv_dtype or dtype)
        self.flops = hardware.achievable_flops(dtype)
        self.bandwidth = hardware.achievable_bandwidth
        m, t = model, tensor_parallel
        self.heads = m.num_heads / t
        self.kv_heads = math.ceil(m.num_kv_heads / t)
        self.inter = m.intermediate_size / t
        self.qkv_width = (self.heads + 2 * self.kv_heads) * m.head_dim
        self.attn_width = self.heads * m.head_dim
        self.up_width = (2 if m.gated_mlp else 1) * self.inter
        # Decode attention per context token and layer: FLOPs 4·H·d, bytes 2·G·d·v.
        self.decode_attention_per_token = m.num_layers * max(
            4 * self.heads * m.head_dim / self.flops, 2 * self.kv_heads * m.head_dim * self.v / self.bandwidth
        )
        self._body_cache: dict[int, float] = {}
        self._lm_head_cache: dict[int, float] = {}
        self._decode_cache: dict[int, tuple[float, float]] = {}

    @classmethod
    def from_config(cls, config: ExperimentConfig, model: ModelSpec, hardware: HardwareSpec) -> RooflineCostModel:
        kv = kv_dtype(config.kv_cache.dtype, config.dtype)
        return cls(model, hardware, config.cluster.tensor_parallel, config.dtype, kv)

    # --- building blocks -------------------------------------------------------------------------------------
    def gemm_time(self, m: float, n: float, k: float) -> float:
        """Roofline time of an (m × k)·(k × n) GEMM in the weight precision."""
        if m <= 0:
            return 0.0
        return max(2 * m * n * k / self.flops, (m * k + k * n + m * n) * self.w / self.bandwidth)

    def memory_time(self, nbytes: float) -> float:
        return nbytes / self.bandwidth

    def all_reduce_time(self, nbytes: float) -> float:
        """Ring all-reduce across the replica's tensor-parallel GPUs."""
        t = self.tp
        if t == 1 or nbytes <= 0:
            return 0.0
        hw = self.hardware
        if hw.interconnect_gbps <= 0:
            raise ValueError(f"{hw.name} has no GPU interconnect for tensor parallelism")
        return 2 * (t - 1) / t * nbytes / (hw.interconnect_gbps * 1e9) + 2 * (t - 1) * hw.interconnect_latency_us * 1e-6

    # --- iteration ---------------------------------------------------------------------------------------------
    def _body_time(self, num_tokens: int) -> float:
        """Everything per token except attention's FLOPs/KV reads and the LM head (memoised per token count)."""
        cached = self._body_cache.get(num_tokens)
        if cached is not None:
            return cached
        m, T = self.model, num_tokens
        D = m.hidden_size
        per_layer = (
            self.gemm_time(T, self.qkv_width, D)
            + self.memory_time(2 * T * self.attn_width * self.w)
            + self.gemm_time(T, D, self.attn_width)
            + self.gemm_time(T, self.up_width, D)
            + self.gemm_time(T, D, self.inter)
            + self.memory_time(T * (10 * D + 3 * self.inter) * self.w)
            + 2 * self.all_reduce_time(T * D * self.w)
        )
        cached = self._body_cache[num_tokens] = m.num_layers * per_layer + self.memory_time(T * D * self.w)
        return cached

    def _lm_head_time(self, num_sequences: int) -> float:
        cached = self._lm_head_cache.get(num_sequences)
        if cached is None:
            cached = self._lm_head_cache[num_sequences] = self.gemm_time(
                num_sequences, self.model.vocab_size / self.tp, self.model.hidden_size
            )
        return cached

    def prefill_attention_time(self, pairs: float, kv_tokens: int) -> float:
        """Causal attention over Σ(q·c + q(q+1)/2) query-key pairs, reading the K/V of ``kv_tokens`` tokens."""
        d = self.model.head_dim
        flops = 4 * self.heads * d * pairs
        nbytes = 2 * self.kv_heads * d * self.v * kv_tokens
        return self.model.num_layers * max(flops / self.flops, nbytes / self.bandwidth)

    def iteration_time(self, shape: IterationShape) -> float:
        chunks, num_decodes = shape.prefill_chunks, shape.num_decodes
        if not chunks and not num_decodes:
            return 0.0
        prefill_tokens, pairs, kv_tokens = 0, 0.0, 0
        for new, cached in chunks:
            prefill_tokens += new
            pairs += new * cached + new * (new + 1) / 2
            kv_tokens += new + cached
        time = self._body_time(prefill_tokens + num_decodes) + self._lm_head_time(len(chunks) + num_decodes)
        if chunks:
            time += self.prefill_attention_time(pairs, kv_tokens)
        return time + self.decode_attention_per_token * shape.decode_context_sum

    def decode_step_coefficients(self, num_decodes: int) -> tuple[float, float]:
        cached = self._decode_cache.get(num_decodes)
        if cached is None:
            a = self._body_time(num_decodes) + self._lm_head_time(num_decodes)
            cached = self._decode_cache[num_decodes] = (a, self.decode_attention_per_token)
        return cached
