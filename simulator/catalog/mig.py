"""Multi-Instance GPU: a GPU split into isolated slices, each a replica's whole GPU.

NVIDIA's MIG divides an A100, H100, H200 or Blackwell GPU (``mig_instances: 7`` in its profile) into GPU instances
of ``g`` of its 7 compute slices and ``m`` of its 8 memory slices. The published profiles
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html) are, as (g, m):

    1g (1, 1)   1g with twice the memory (1, 2)   2g (2, 2)   3g (3, 4)   4g (4, 4)   7g (7, 8)

named ``<g>g.<memory>gb`` with memory = m/8 of the GPU's, rounded half up to whole GB (an H100 80GB's are
1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb; an H200's 1g.18gb … 3g.71gb … 7g.141gb).

A slice is a derived :class:`~simulator.catalog.hardware.HardwareSpec` (:func:`mig_slice`): with compute fraction
``g/7`` and memory fraction ``m/8``,

    sm_count = ⌊sm_count × g/7⌋ (whole SMs, at least 1), peak_tflops and sfu_exp_tera_per_s × g/7,
    memory_gib and memory_bandwidth_gb_per_s × m/8 (the L2 is not modelled),

no GPU-to-GPU link (instances share no NVLink or P2P: ``interconnect_gb_per_s`` 0), a node of as many slices as
its GPUs hold (:func:`instances_per_gpu` each: a node fault stops every slice on it), and the
fitted efficiencies kept: a kernel reaches the same fraction of a slice's peaks as of the whole GPU's. Its price
per hour, its board power and its idle power are g/7 of the GPU's (a replica on it uses g/7 of a GPU: the
summary's ``num_gpus``; the energy a slice draws is its share of the board's)."""

from __future__ import annotations

import math
from fractions import Fraction

from simulator.catalog.hardware import HardwareSpec, MigSlice, PeakTflops
from simulator.errors import LLMSimError

# NVIDIA's MIG profiles as (compute slices of 7, memory slices of 8), smallest first
PROFILE_SLICES: tuple[tuple[int, int], ...] = ((1, 1), (1, 2), (2, 2), (3, 4), (4, 4), (7, 8))
COMPUTE_SLICES, MEMORY_SLICES = 7, 8


def mig_profiles(gpu: HardwareSpec) -> dict[str, tuple[int, int]]:
    """``gpu``'s MIG profiles by name (``3g.40gb``), each its (compute sevenths, memory eighths); none without MIG.
    The memory in a name is m/8 of ``memory_gib``, rounded half up to a whole GB."""
    if not gpu.mig_instances:
        return {}
    return {f"{g}g.{math.floor(gpu.memory_gib * m / MEMORY_SLICES + 0.5)}gb": (g, m) for g, m in PROFILE_SLICES}


def mig_slice(gpu: HardwareSpec, profile: str, field: str = "cluster.mig") -> HardwareSpec:
    """The GPU instance ``profile`` of ``gpu`` as a GPU of its own (module docstring). Raises
    :class:`~simulator.errors.LLMSimError` naming ``field`` for a GPU without MIG or a profile it does not have
    (listing those it has)."""
    profiles = mig_profiles(gpu)
    if not profiles:
        raise LLMSimError(f"{field}: {profile!r} needs a MIG-capable GPU; {gpu.name} has no MIG (mig_instances 0)")
    if profile not in profiles:
        raise LLMSimError(f"{field}: unknown profile {profile!r} for {gpu.name} (allowed: {', '.join(profiles)})")
    g, m = profiles[profile]
    compute, memory = g / COMPUTE_SLICES, m / MEMORY_SLICES
    peaks = PeakTflops.model_validate({name: value * compute if value is not None else None
                                       for name, value in gpu.peak_tflops.model_dump().items()})
    return gpu.model_copy(update={
        "name": f"{gpu.name}/{profile}",
        "description": f"MIG {profile} slice of {gpu.description or gpu.name}",
        "memory_gib": gpu.memory_gib * memory,
        "memory_bandwidth_gb_per_s": gpu.memory_bandwidth_gb_per_s * memory,
        "peak_tflops": peaks,
        "sm_count": max(1, gpu.sm_count * g // COMPUTE_SLICES) if gpu.sm_count else 0,
        "sfu_exp_tera_per_s": gpu.sfu_exp_tera_per_s * compute,
        "interconnect_gb_per_s": 0.0,
        "node": gpu.node.model_copy(update={"gpus_per_node": gpu.node.gpus_per_node * instances_per_gpu(g, m),
                                            "fabric": "pcie"}),
        "mig_instances": 0,
        "mig": MigSlice(profile=profile, gpu=gpu.name, compute_sevenths=g, memory_eighths=m),
        "price_per_hour_usd": gpu.price_per_hour_usd * compute if gpu.price_per_hour_usd is not None else None,
        "board_power_w": gpu.board_power_w * compute if gpu.board_power_w is not None else None,
        "idle_power_w": gpu.idle_watts * compute if gpu.idle_watts is not None else None,
    })


def instances_per_gpu(compute_sevenths: int, memory_eighths: int) -> int:
    """How many slices of one profile a GPU holds: min(⌊7/g⌋, ⌊8/m⌋) (seven 1g.10gb, four 1g.20gb, three 2g, two
    3g, one 4g or 7g, as the MIG user guide's tables)."""
    return min(COMPUTE_SLICES // compute_sevenths, MEMORY_SLICES // memory_eighths)


def gpu_share(gpu: HardwareSpec) -> Fraction:
    """The part of a physical GPU ``gpu`` is: g/7 for a MIG slice, else 1."""
    return Fraction(gpu.mig.compute_sevenths, COMPUTE_SLICES) if gpu.mig is not None else Fraction(1)
