"""Collective communication between the GPUs of a replica.

The slowest link a ring of n GPUs crosses sets its bandwidth B (GPUs are packed into nodes of ``gpus_per_node``):
across nodes, the per-GPU NICs of the GPUs in each node (``inter_node_gb_per_s`` × GPUs per node); within a node,
``interconnect_gb_per_s`` on NVSwitch or on an NVLink pair, else PCIe (``host_link_gb_per_s``). ``nbytes`` is the buffer
each GPU holds: the whole vector for all-reduce, the gathered output for all-gather, the input for reduce-scatter
and all-to-all (as nccl-tests and the frameworks' kernel tables count it).

    all_reduce:                    2(n−1)/n · bytes / (B · link_efficiency) + latency + 2(n−1) · step_latency
    all_reduce across N nodes      the same with NCCL's tree's steps where fewer: 2(G−1) within each node of G GPUs
      of G GPUs (n = N·G):         and 2⌈log2 N⌉ between the nodes, each of those inter_node_step_latency more
    all_gather, reduce_scatter,    (n−1)/n · bytes / (B · efficiency) + latency + (n−1) · step_latency
    all_to_all:                    (per-op ``comm.collectives`` fit)
    send_recv:                     bytes / (B · p2p_efficiency) + p2p_latency

(the parameters of the hardware profile's ``fit.comm``).

Across nodes NCCL also runs a tree (a chain within each node, a binary tree between the nodes) whose latency grows
with the logarithm of the nodes, not with the GPUs: an all-reduce of a decode step's activations over 64 GPUs (8
nodes) takes 20 steps, not a ring's 126. Each step between nodes adds ``comm.inter_node_step_latency_us`` (the NICs
and the switch): 2 µs, chosen on the B200 fit rows that run tensor parallelism over 2 and 8 nodes (their TPOT
median error 45.3% with the ring alone; 24.8, 24.4, 28.2 and 34.1% at 0, 2, 5 and 10 µs) — no multi-node timing of
Hopper or Blackwell is in the kernel tables. The tree moves the same bytes as the ring here (it wins on small
messages, where latency dominates).

NCCL has two kinds of protocol, and picks per message the faster: a bandwidth protocol (Simple: the formulas above)
and a low-latency one (LL / LL128: flags stored with the data, so far less fixed cost per call but a fraction of the
link's bandwidth). Where a generation has the low-latency protocol fitted (``comm.all_reduce_low_latency``,
``collectives.<op>.low_latency``: the same three parameters), a collective costs the minimum of the two; without it,
the one formula. A third algorithm reduces in the switch (NVLink SHARP, NCCL's NVLS, on third-generation NVSwitch:
Hopper and later): each GPU sends its buffer into the switch once and reads the sum back once, so an all-reduce of
16- or 32-bit floats within one NVSwitch node also costs at most

    all_reduce (NVLS):             bytes / (B · nvls efficiency) + nvls latency          (``comm.all_reduce_nvls``)

which beats the ring's 2(n−1)/n bus bytes at large messages on many GPUs. It does not reduce int8 (nor int64:
NVIDIA/nccl#1898), which takes the ring: in the H100 tables an 8-GPU all-reduce of 134 MB takes 0.58 ms in 16-bit
elements and 0.72 ms in int8 (268 MB: 1.09 and 1.38 ms), while at 4 GPUs, where the ring moves 1.5 buffers per GPU
instead of 1.75, the two agree within a few percent. A serving engine all-reduces 16-bit activations.

Fitted per GPU generation (:mod:`simulator.catalog.generations`) on the nccl-tests timings of the kernel tables
(NCCL 2.27 in an 8-GPU A100 node, 2.29 in an H100 node; 2–8 GPUs, 512 B – 512 MiB, 16-bit and int8 elements).
Hopper's all-reduce: LL 5.0 µs + 0.8 µs per step at 0.28 of the link, Simple 19.5 µs + 0.5 µs per step at 0.70,
crossing over near 2 MB at 4 GPUs, and NVLS 59.5 µs at 0.55 of the link, which wins from 22 MB at 8 GPUs (51 MB
at 4); one formula for both LL and Simple (an earlier fit) left the 1–8 MiB messages 20–50% fast and the largest
10% slow (all-reduce median error 11–13% → 4.4–6.5%; every op 3.6–9.3% on both GPUs); without NVLS the 8-GPU
16-bit all-reduces were 20–39% slow from 67 MB up (their p90 error 30.0% → 13.4% with it). Ampere's send/recv and
the bandwidth across nodes come from the older DGX timings of ``../shared/data/network`` (8 GB/s per GPU;
p2p_efficiency 0.95, 10 µs: 2.8%), whose small all-reduces carry that stack's own fixed cost (an engine's
``collective_latency_us``, as the Splitwise profile's 40 µs + 4 µs per step with one protocol). Run ``llmsim
validate``.
"""

from __future__ import annotations

import math
from typing import Literal

from simulator.catalog import HardwareSpec, resolve_hardware
from simulator.catalog.hardware_fit import ProtocolFit

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
NVLS_DTYPES = ("bf16", "fp16", "fp32")  # what NVLink SHARP reduces in the switch (not int8: the ring reduces it)


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


def collective_time(hardware: str | HardwareSpec, op: Collective, num_gpus: int, nbytes: float,
                    dtype: str = "bf16") -> float:
    """Seconds for one collective of ``nbytes`` (per GPU, see the module docstring) of ``dtype`` elements among
    ``num_gpus`` GPUs (0 for one GPU or no bytes); the element type matters only to an all-reduce that NVLink SHARP
    could reduce (:data:`NVLS_DTYPES`)."""
    if op not in COLLECTIVES:
        raise ValueError(f"unknown collective {op!r} (allowed: {', '.join(COLLECTIVES)})")
    hw = resolve_hardware(hardware)
    if num_gpus <= 1 or nbytes <= 0:
        return 0.0
    bandwidth, comm = ring_bandwidth(hw, num_gpus), hw.fit.comm
    if op == "send_recv":
        return nbytes / (bandwidth * comm.p2p_efficiency) + comm.p2p_latency_us * 1e-6
    if op == "all_reduce":
        steps = 2 * (num_gpus - 1)
        protocols = [ProtocolFit(latency_us=comm.latency_us, step_latency_us=comm.step_latency_us,
                                 efficiency=comm.link_efficiency), comm.all_reduce_low_latency]
    else:
        steps = num_gpus - 1
        protocols = [comm.collectives[op], comm.collectives[op].low_latency]
    bus_bytes = steps / num_gpus * nbytes
    if op == "all_reduce" and num_gpus > hw.node.gpus_per_node:  # NCCL's tree beside its ring: fewer steps
        nodes, per_node = math.ceil(num_gpus / hw.node.gpus_per_node), hw.node.gpus_per_node
        across = 2 * math.ceil(math.log2(nodes))
        steps = min(steps, 2 * (per_node - 1) + across)
        extra_us = across * comm.inter_node_step_latency_us if steps < 2 * (num_gpus - 1) else 0.0
    else:
        extra_us = 0.0
    ring = min(bus_bytes / (bandwidth * p.efficiency) + (p.latency_us + steps * p.step_latency_us + extra_us) * 1e-6
               for p in protocols if p is not None)
    nvls = comm.all_reduce_nvls
    if (op == "all_reduce" and nvls is not None and dtype in NVLS_DTYPES and hw.node.fabric == "nvswitch"
            and num_gpus <= hw.node.gpus_per_node):
        return min(ring, nbytes / (bandwidth * nvls.efficiency) + nvls.latency_us * 1e-6)
    return ring
