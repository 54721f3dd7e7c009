"""What LoRA adapters cost a replica: their weights per GPU and the extra GEMMs of an iteration that uses them.

An adapter of rank r adds to every targeted projection W (k × n on one GPU: the per-GPU shapes of
:mod:`simulator.cost.layers` — attention's QKV and output projections, and with ``target_modules: all`` the dense
or shared-expert FFN's up and down; routed experts carry none) a shrink x·A (k × r) and an expand (x·A)·B (r × n),
as Punica's / vLLM's SGMV kernels run them: one shrink and one expand kernel per projection for the whole batch,
each token multiplied by its own request's adapter. With T tokens and d distinct adapters in the batch, per
projection:

    FLOPs = 2·T·r·(k + n)
    bytes = d·r·(k + n)·w (each adapter's A and B, read once) + T·(k + n + 2·r)·w (activations in and out)
    time  = smooth roofline of the two (:meth:`simulator.cost.gemm.GemmModel.combine`) + one more kernel overhead

summed over projections and layers. One adapter's weights per GPU are Σ r·(k + n)·w over the same projections
(weights in the activation precision). The column-parallel projections (QKV, up) split n over the
tensor-parallel GPUs and the row-parallel ones (output, down) split k, as vLLM shards LoRA by default. No
measured LoRA kernel tables are available here: the roofline's GPU constants are the base model's.
"""

from __future__ import annotations

from simulator.catalog import HardwareSpec, ModelSpec
from simulator.cost.gemm import GemmModel
from simulator.dtypes import activation_dtype, bytes_per_element


def lora_projections(model: ModelSpec, tensor_parallel: int, target_modules: str) -> list[tuple[int, float, float]]:
    """``(layers, k, n)`` of every LoRA-targeted projection on one GPU."""
    t, D = tensor_parallel, model.hidden_size
    projections = []
    for group in model.layers:
        for n, k in group.attention.shapes(D, t).gemms:
            projections.append((group.count, k, n))
        f = group.ffn
        width = f.dense_width  # the dense MLP, or the shared experts (routed experts carry no adapter)
        if target_modules == "all" and width:
            projections += [(group.count, D, f.up_matrices * width / t), (group.count, width / t, D)]
    return projections


class LoRACost:
    """:mod:`simulator.cost.lora`'s formulas for one model, GPU, tensor-parallel degree and rank."""

    def __init__(self, model: ModelSpec, hardware: HardwareSpec, tensor_parallel: int, rank: int,
                 target_modules: str, dtype: str = "bf16", compute_scale: float = 1.0,
                 memory_scale: float = 1.0) -> None:
        """``compute_scale``/``memory_scale``: the serving engine's kernel efficiencies (as for the base GEMMs)."""
        self.rank = rank
        self.gemm = GemmModel(hardware, activation_dtype(dtype), compute_scale, memory_scale)
        self.w = bytes_per_element(activation_dtype(dtype))
        self.projections = lora_projections(model, tensor_parallel, target_modules)
        self.bytes_per_gpu = sum(count * rank * (k + n) * self.w for count, k, n in self.projections)
        self._cache: dict[tuple[int, int], float] = {}

    def time(self, tokens: int, adapters: int) -> float:
        """Seconds of the shrink and expand kernels for ``tokens`` tokens using ``adapters`` distinct adapters (0
        when either, or the rank, is 0)."""
        if not tokens or not adapters or not self.rank:
            return 0.0
        key = (tokens, adapters)
        cached = self._cache.get(key)
        if cached is None:
            g, r, w, T = self.gemm, self.rank, self.w, tokens
            cached = sum(
                count * (g.combine(2 * T * r * (k + n) / g.flops, (adapters * r * (k + n) + T * (k + n + 2 * r)) * w
                                   / g.bandwidth) + g.overhead)
                for count, k, n in self.projections
            )
            if len(self._cache) < 65536:
                self._cache[key] = cached
        return cached
