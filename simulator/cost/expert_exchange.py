"""How a MoE layer's tokens reach their experts under attention data parallelism, and come back: a dispatch and a
combine among the replica's ``n`` = dp × tp GPUs, each GPU sending its ``T`` tokens (its rank's, over tp), each to
``k`` experts, ``D`` wide.

- ``nccl``: two NCCL all-to-alls of ``T·k·D·w`` bytes per GPU (:func:`simulator.cost.collectives.collective_time`).
- ``deepep``: DeepEP's kernels, picked as SGLang's ``auto`` mode does — low-latency in decode-only iterations,
  normal with prefill. Each kernel costs ``latency + off-GPU bytes / (link × efficiency)``
  (:class:`simulator.catalog.hardware_fit.ExchangeFit`):

  - low-latency: every token-expert pair travels, ``(n − 1)/n`` of them to other GPUs;
  - normal: a token travels once to each other GPU holding one of its experts: ``R = (n − 1)·(1 − (1 − 1/n)^k)``
    GPUs on average (experts spread evenly, routing uniform);
  - dispatch moves FP8 with per-128 scales (``1 + 4/128`` bytes per element), combine bf16 (2 bytes).

  Within a node the link is NVLink; a replica over several nodes of ``g`` GPUs sends ``(n − g)/(n − 1)`` of its
  off-GPU bytes over the GPU's NIC (``inter_node_gb_per_s``) and the rest over NVLink; the slower of the two sets the
  time. Fitted on SGLang's DeepEP tables of one 8-GPU H100 node (normal mode at DeepEP's default 20 SMs;
  :func:`simulator.fidelity.kernels.fit_deepep`): dispatch and combine within 6–10% median in both modes; the
  inter-node share is not measured here.
"""

from __future__ import annotations

from typing import Literal

from simulator.catalog import HardwareSpec
from simulator.cost.collectives import collective_time

Exchange = Literal["nccl", "deepep"]
EXCHANGES = ("nccl", "deepep")
FP8_WITH_SCALES = 1 + 4 / 128  # bytes per dispatched element: FP8 and one fp32 scale per 128


def off_gpu_pairs(mode: str, gpus: int, topk: int) -> float:
    """Copies of one token that leave its GPU: ``k·(n − 1)/n`` (low-latency) or ``R`` (normal; module docstring)."""
    if mode == "ll":
        return topk * (gpus - 1) / gpus
    return (gpus - 1) * (1 - (1 - 1 / gpus) ** topk)


def deepep_time(hardware: HardwareSpec, kernel: str, gpus: int, tokens: float, topk: int, hidden: int) -> float:
    """Seconds of one DeepEP kernel (``ll_dispatch``, ``ll_combine``, ``normal_dispatch``, ``normal_combine``) with
    ``tokens`` tokens per GPU among ``gpus`` GPUs."""
    if gpus <= 1 or tokens <= 0:
        return 0.0
    fit = hardware.fit.comm.deepep[kernel]  # type: ignore[index]  # one of its four kernels; deepep checked by the cost model
    mode, direction = kernel.split("_")
    element = FP8_WITH_SCALES if direction == "dispatch" else 2
    nbytes = tokens * off_gpu_pairs(mode, gpus, topk) * hidden * element
    per_node = hardware.node.gpus_per_node
    if gpus <= per_node:
        transfer = nbytes / (hardware.interconnect_gb_per_s * 1e9 * fit.efficiency)
    else:
        remote = (gpus - per_node) / (gpus - 1)
        transfer = max(nbytes * (1 - remote) / (hardware.interconnect_gb_per_s * 1e9 * fit.efficiency),
                       nbytes * remote / (hardware.node.inter_node_gb_per_s * 1e9 * fit.efficiency))
    return fit.latency_us * 1e-6 + transfer


def exchange_time(hardware: HardwareSpec, exchange: str, gpus: int, tokens: float, topk: int, hidden: int,
                  activation_bytes: float, decode_only: bool) -> float:
    """Seconds of one MoE layer's dispatch and combine (module docstring)."""
    if exchange == "nccl":
        return 2 * collective_time(hardware, "all_to_all", gpus, tokens * topk * hidden * activation_bytes)
    mode = "ll" if decode_only else "normal"
    return (deepep_time(hardware, f"{mode}_dispatch", gpus, tokens, topk, hidden)
            + deepep_time(hardware, f"{mode}_combine", gpus, tokens, topk, hidden))
