"""The GPUs' energy over a run: a power model per GPU, integrated in closed form per work.

A GPU draws its idle power ``P_idle`` (:attr:`simulator.catalog.HardwareSpec.idle_watts`) whenever it is powered,
and while an iteration runs

    P = P_idle + (P_board − P_idle) · a,    a = min(1, max(F / (P_flops · t), B / (W · t)))

— ``a``, the iteration's activity, is the larger of its achieved fractions of the spec sheet's peak FLOP/s (F FLOPs
in t seconds against ``P_flops``, the GEMMs' format: :func:`simulator.cost.work.gemm_peak`) and of its peak HBM
bandwidth (B bytes against ``W``): the unit that limits the iteration draws towards board power (the spec sheet's
TDP, ``board_power_w``) as its utilisation does, the other's draw is folded into the same line. A memory-bound
decode step that streams the weights at 60% of peak bandwidth draws 0.6 of the way from idle to board power; a
step that waits on the host (launches, scheduling) draws little over idle. The activities and F, B, t are those of
the iteration bounds (:mod:`simulator.results.bounds`, on one GPU of the tensor-parallel group); every GPU of a
replica (TP × PP, each attention-DP rank's) is taken to run at that activity.

Integrated over a run: each replica's G GPUs draw ``G·P_idle`` for its powered seconds T_r (every replica from 0
to the last request's end; with an autoscaler, from each ``ready`` to its ``off``, a cold start left out:
:func:`simulator.results.metrics.replica_powered_seconds`), and each work adds ``G·(P_board − P_idle)·Σ_j a_j·t_j``
over its steps, where ``a_j·t_j = min(t_j, max(F_j / P_flops, B_j / W))`` is affine piecewise in j for a decode run
and summed in closed form (:func:`simulator.results.bounds.active_seconds`, O(1) per work, nothing per token):

    energy_j = PUE · (Σ_r G_r·P_idle,r·T_r + Σ_works G·(P_board − P_idle)·Σ_j a_j·t_j)

The summary's keys (:data:`ENERGY_METRICS`; with ``metrics.iteration_bounds``, which ``llmsim run`` sets; None on a
GPU whose profile states no board power): ``energy_j`` (the run's, facility included through ``energy.pue``),
``energy_j_per_output_token`` (energy_j over the output tokens of every completed request, measured or not: the
energy covers the whole run), ``mean_power_w_per_gpu`` (the GPUs' own draw, PUE left out, averaged over their
powered seconds: between P_idle and P_board) and, with ``energy.usd_per_kwh``, ``energy_usd`` = energy_j / 3.6·10^6
× usd_per_kwh.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.config.energy import EnergyConfig
    from simulator.results.bounds import IterationBounds

ENERGY_METRICS = ("energy_j", "energy_j_per_output_token", "mean_power_w_per_gpu", "energy_usd")
JOULES_PER_KWH = 3.6e6


def energy_summary(bounds: IterationBounds, powered_s: list[float], output_tokens: int,
                   config: EnergyConfig) -> dict[str, Any]:
    """The energy keys (module docstring) of a run whose replica r was powered ``powered_s[r]`` seconds and whose
    completed requests generated ``output_tokens``; every value None where a GPU states no board power (and
    ``energy_usd`` absent without a price)."""
    gpu_seconds = sum(bounds.power[r][0] * seconds for r, seconds in enumerate(powered_s))
    gpu_j = sum(bounds.power[r][1] * seconds for r, seconds in enumerate(powered_s)) + bounds.active_j
    known = not math.isnan(gpu_j)
    energy = config.pue * gpu_j
    out: dict[str, Any] = {
        "energy_j": energy if known else None,
        "energy_j_per_output_token": energy / output_tokens if known and output_tokens else None,
        "mean_power_w_per_gpu": gpu_j / gpu_seconds if known and gpu_seconds > 0 else None,
    }
    if config.usd_per_kwh is not None:
        out["energy_usd"] = energy / JOULES_PER_KWH * config.usd_per_kwh if known else None
    return out
