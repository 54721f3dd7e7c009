"""Collective communication between the GPUs of a replica.

The slowest link a ring of n GPUs crosses sets its bandwidth B (GPUs are packed into nodes of ``gpus_per_node``):
across nodes, the per-GPU NICs of the GPUs in each node (``inter_node_gb_per_s`` × GPUs per node); within a node,
``interconnect_gb_per_s`` on NVSwitch or on an NVLink pair, else PCIe (``host_link_gb_per_s``). ``nbytes`` is the buffer
each GPU holds: the whole vector for all-reduce, the gathered output for all-gather, the input for reduce-scatter
and all-to-all (as nccl-tests and the frameworks' kernel tables count it).

    all_reduce:                    2(n−1)/n · bytes / (B · link_efficiency) + collective_latency + 2(n−1) · step
    all_gather, reduce_scatter,    (n−1)/n · bytes / (B · efficiency) + latency + (n−1) · step_latency
    all_to_all:                    (per-op ``collectives`` fit)
    send_recv:                     bytes / (B · p2p_efficiency) + p2p_latency

Fitted per GPU generation (:mod:`simulator.catalog.generations`). Ampere on NCCL 2.27 inside an 8-GPU A100 node
(the kernel tables): all-reduce 7.25 µs + 1.4 µs per step at 0.58 of the link (median error 12.9%); send/recv and the
bandwidth across nodes on the older DGX timings of ``../shared/data/network`` (8 GB/s per GPU; p2p_efficiency 0.95,
10 µs: 2.8%), whose small all-reduces carry that stack's own fixed cost (an engine's ``collective_latency_us``, as
the Splitwise profile's 40 µs + 4 µs per step). Hopper on NCCL 2.29 inside an 8-GPU H100
node: the latency of a small all-reduce is 5.5 µs + 1.75 µs per extra GPU — one NVSwitch traversal, not a latency
per ring step as on older fabrics — and large messages reach 64% of the link (2 GPUs ~71%, 8 GPUs more: NVLS
reduces in the switch). Run ``llmsim validate``.
"""

from __future__ import annotations

from typing import Literal

from simulator.catalog import HardwareSpec, resolve_hardware

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


def ring_bandwidth(hardware: HardwareSpec, num_gpus: int) -> float:
    """Bytes/s of the slowest link a ring (or pair) of ``num_gpus`` GPUs crosses."""
    node = hardware.node
    if num_gpus > node.gpus_per_node:
        return node.inter_node_gb_per_s * 1e9 * node.gpus_per_node
    if node.fabric == "nvswitch" or (node.fabric == "pairwise" and num_gpus == 2):
        if hardware.interconnect_gb_per_s <= 0:
            raise ValueError(f"{hardware.name}: fabric {node.fabric} needs interconnect_gb_per_s > 0")
        return hardware.interconnect_gb_per_s * 1e9
    return hardware.host_link_gb_per_s * 1e9


def collective_time(hardware: str | HardwareSpec, op: Collective, num_gpus: int, nbytes: float) -> float:
    """Seconds for one collective of ``nbytes`` (per GPU, see the module docstring) among ``num_gpus`` GPUs (0 for
    one GPU or no bytes)."""
    if op not in COLLECTIVES:
        raise ValueError(f"unknown collective {op!r} (allowed: {', '.join(COLLECTIVES)})")
    hw = resolve_hardware(hardware)
    if num_gpus <= 1 or nbytes <= 0:
        return 0.0
    bandwidth = ring_bandwidth(hw, num_gpus)
    if op == "all_reduce":
        steps = 2 * (num_gpus - 1)
        return (
            steps / num_gpus * nbytes / (bandwidth * hw.link_efficiency)
            + (hw.collective_latency_us + steps * hw.collective_step_latency_us) * 1e-6
        )
    if op == "send_recv":
        return nbytes / (bandwidth * hw.p2p_efficiency) + hw.p2p_latency_us * 1e-6
    fit = hw.collectives[op]
    steps = num_gpus - 1
    latency = (fit.latency_us + steps * fit.step_latency_us) * 1e-6
    return steps / num_gpus * nbytes / (bandwidth * fit.efficiency) + latency
