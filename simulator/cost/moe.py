"""Routed experts on one GPU: a fused-MoE layer as two grouped GEMMs over the experts the batch touches.

With ``T`` tokens each sent to ``k`` of ``E`` experts, expert parallelism ``ep`` (this GPU holds ``E/ep`` experts)
and MoE tensor parallelism ``tp`` (each expert's width ``I/tp`` here):

- assignments on this GPU ``A = T·k/ep``; experts touched: under ``uniform`` routing (every token picks its k
  experts independently, the serving default) ``U = (E/ep)·(1 − (1 − k/E)^T)`` (an expert is missed by a token
  with probability 1 − k/E) when the experts are equally popular; when their popularity spreads (``load_cv`` > 0,
  below) a token picks expert e with probability ``min(1, x_e·k/E)``, x_e lognormal of mean 1 and that coefficient
  of variation, and ``U = (E/ep)·(1 − E_x[(1 − min(1, x·k/E))^T])`` (:func:`touched_share`: a batch's tokens
  gather on the popular experts, so fewer experts' weights are read at decode sizes; by Jensen never more than
  with equal popularity); under ``balanced`` routing (the kernel tables' collectors: assignments dealt
  round-robin, as evenly as possible) ``U = min(E/ep, A)``; rows per touched expert ``r = A/U``;
- the up (gate and up fused: ``g·I/tp`` wide, g = 2 when gated) and down (``I/tp`` -> ``D``) projections of the
  touched experts run as one fused op: compute ``2·U·ceil(r/moe.tile_m)·moe.tile_m·D·(g + 1)·ceil(I/tp)`` FLOPs
  (rows in whole tiles per expert; the split width ``I/tp`` in whole ``moe.tile_n`` columns) at
  ``moe.gemm_efficiency`` × the dense GEMM rate of the weight format (at most the format's tensor-core peak);
  memory: the touched experts' weights ``U·(g + 1)·D·(I/tp)·w`` plus activations in and out of both projections
  ``A·(2·D + (g + 1)·I/tp)·a``, at
  ``moe.bandwidth_efficiency`` × the dense streaming bandwidth; the two, and the serial latency of the two GEMMs'
  main loops (``gemm.k_latency_ns`` × (D + I/tp), :mod:`simulator.cost.gemm`), combine by a smooth maximum of
  exponent ``moe.knee`` (memory-bound grouped kernels hide their padded compute almost entirely), plus
  ``moe.expert_overhead_us`` per touched expert (its tiles' prologue and epilogue, scale loads, scheduling: a cost
  that does not shrink with the expert's width, so narrow tensor-parallel slices of an expert cost more than their
  bytes say), plus the fixed cost of the ``moe.kernels`` kernels a fused-MoE layer launches (routing,
  sorting/alignment, activation quantisation, the two GEMMs, the combine) at the GPU's — or under CUDA graphs the
  engine's — ``kernel_overhead_us`` each;
- plus the passes over every token the kernel is handed, whatever its experts: ``moe.token_pass_bytes`` per (token,
  hidden element) at the layer's streaming bandwidth (reading, permuting and scattering the tokens, writing the
  combined output: TensorRT-LLM's kernel, handed all T tokens on each of ``ep`` GPUs, does this for all of them, so
  its expert-parallel time does not fall with ``ep`` as its experts' work does: 4–9.5 bytes per element on H100,
  6.5 on A100), and with expert parallelism ``moe.ep_overhead_us`` (its local-expert selection). A GPU is handed all
  ``T`` tokens when they are replicated over the expert-parallel GPUs (tensor parallelism, or the kernel tables'
  collectors); under attention data parallelism the all-to-all hands it the assignments it serves, ``T·k/ep``;
- plus the passes over the token copies its experts receive, ``moe.assignment_pass_bytes`` per (assignment, hidden
  element) of the busiest rank's at the same bandwidth (each copy permuted to its expert and its output combined
  back; beside the experts' GEMMs, not hidden under them): TensorRT-LLM's balanced expert-parallel rows at 8–16k
  tokens run ~22 bytes per (token, element) beyond the experts' work at EP 2, ~10 at EP 8 and ~5 at EP 64 — a part
  that falls as T·k/ep and a part over all T tokens; a pass over the tokens alone, fitted on all of its rows, had
  settled at 15–18 and overpriced its EP 64–256 rows by 60–90% (fitted with this pass: 6–8 bytes on H100, 27 for
  block fp8, whose copies are also quantised, and 7 on A100).

With expert parallelism the layer waits for the busiest rank. A rank holds ``E/ep`` experts and receives on average
``T·k/ep`` assignments; its load varies by the experts' popularity (coefficient of variation ``cv`` of one expert's
share, ``expert_load_cv``: 0 = equally popular) and, under ``uniform`` routing, by sampling (the rank's count is
binomial over ``T·k`` assignments), so its relative spread is ``s = sqrt(cv²·ep/E + (ep − 1)/(T·k))`` (the second
term 0 under ``balanced``). A rank's load is a sum of positive, right-skewed parts (few experts' popularities, small
counts), so it is taken as lognormal with that mean and spread (Fenton–Wilkinson: ``σ² = ln(1 + s²)``), and the
busiest of ``ep`` ranks carries ``L_ep(s) = exp(σ·z_ep − σ²/2)`` times the mean, ``z_ep`` the expected largest of
``ep`` standard normals (Blom: ``Φ⁻¹((ep − 0.375)/(ep + 0.25))``) — ``1 + z_ep·s`` for a small spread — at most
``ep·min(k, E/ep)/k`` (every token's assignments on that rank). It is priced as the mean rank with that many times
the tokens. With EPLB over ``S`` expert slots (the experts and their redundant replicas,
``cost_model.eplb_redundant_experts``) the experts are placed so that the popularity evens out over the ranks except
for the hottest slot: the busiest rank carries ``max(L_ep(sqrt((ep − 1)/(T·k))), L_E(cv)·ep/S)`` times the mean —
the sampling spread, or the hottest expert (``L_E(cv)`` times the mean expert, split over S/E replicas) once a rank
holds too few slots to hide it — and each rank holds ``S/ep`` slots' weights (touched as ``E`` experts are without
EPLB, with ``k/S`` per slot). On TensorRT-LLM's MoE tables (their collector samples each expert's load from a
bounded power law and times the busiest rank) the lognormal law brought the power-law rows from 26.4% to 22.2% median
error over EP 2–256 (EP 256: 46.6% → 33.7%) and the EPLB rows from 22.9% to 19.8% (21.2% and 16.0% with the
per-expert cost below), where the normal law ``1 + z·s`` ran low as the ranks hold fewer experts; the collector's
law is heavier still at EP 64–256 (with α = 1.5 its expected busiest rank exceeds the cap of one assignment per
token, which real routing cannot). Against sampled routing the law holds within 10% for lognormal popularities;
lighter-tailed ones (gamma of the same spread) load the hottest of two experts a rank about 25% less.

``moe.tile_m``, ``moe.tile_n``, ``moe.knee``, ``moe.gemm_efficiency``, ``moe.bandwidth_efficiency`` and
``moe.expert_overhead_us`` are fitted per GPU generation on the frameworks' MoE tables
(``../shared/data/kernels/<gpu>/moe``, :mod:`simulator.fidelity.kernel_fit`), pooled; a serving engine's profile
replaces the last three with its framework's own kernel for the experts' weight format where it has one
(``moe_by_generation``, :meth:`simulator.catalog.engines.EngineProfile.moe_hardware`: vLLM's FlashInfer kernel for
per-tensor fp8 streams its experts at a quarter of the rate of its Triton kernel for block fp8); ``moe.kernels`` is
counted, not fitted:
6 (top-k routing, alignment, the two grouped GEMMs, the activation, the combine). Fitting it too gives 12 on H100:
the eager tables' launch gaps, which a CUDA-graph engine does not pay. The per-expert cost (0.3 µs on Hopper, 0.2
on Ampere) took the pooled tables' median error from 17.1% to 15.2% on H100 and 8.8% to 7.7% on A100 and removed
most of its trend with the expert's width at decode sizes (H100 MXFP4, 16–512 tokens: −27% for slices of at most
256 columns and +23% above 1,024 without it, −14% and −6% with it).
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from simulator.catalog import HardwareSpec, resolve_hardware
from simulator.cost.work import Work, memory_kernel_work, smooth_max_work
from simulator.dtypes import activation_dtype, bytes_per_element, compute_dtype


class ExpertsModel:
    """The routed experts of one weight format on one GPU (the roofline's MoE layers keep one)."""

    __slots__ = ("a", "assignment_pass", "bandwidth", "ep_overhead", "expert_overhead", "flops", "k_latency",
                 "overhead", "p", "tile_m", "tile_n", "token_pass", "w")

    def __init__(self, hardware: HardwareSpec, dtype: str = "bf16", compute_scale: float = 1.0,
                 memory_scale: float = 1.0) -> None:
        """``compute_scale``/``memory_scale``: a serving engine's kernels relative to the fitted ones."""
        moe = hardware.fit.moe
        rate = hardware.achievable_flops(compute_dtype(dtype)) * moe.gemm_efficiency
        self.flops = min(rate, hardware.peak_flops(compute_dtype(dtype))) * compute_scale  # never past the peak
        self.bandwidth = hardware.achievable_bandwidth * memory_scale * moe.bandwidth_efficiency
        self.w, self.a = bytes_per_element(dtype), bytes_per_element(activation_dtype(dtype))
        self.tile_m, self.tile_n, self.p = moe.tile_m, moe.tile_n, moe.knee
        self.overhead = moe.kernels * hardware.fit.kernel_overhead_us * 1e-6
        self.expert_overhead = moe.expert_overhead_us * 1e-6
        self.k_latency = hardware.fit.gemm.k_latency_ns * 1e-9
        self.token_pass = moe.token_pass_bytes
        self.assignment_pass = moe.assignment_pass_bytes
        self.ep_overhead = moe.ep_overhead_us * 1e-6

    def time(self, tokens: float, hidden: int, width: float, up_matrices: int, topk: int, experts: int,
             expert_parallel: int = 1, distribution: str = "uniform", load_cv: float = 0.0, slots: int = 0,
             handed: float | None = None) -> float:
        """Seconds of one MoE layer's routed experts on the busiest GPU; ``width`` = I/tp, ``up_matrices`` = 2 if
        gated else 1, ``load_cv`` the experts' popularity spread, ``slots`` EPLB's expert slots (0: no EPLB),
        ``handed`` the tokens each GPU's kernel is handed (None: all ``tokens``, replicated over the expert-parallel
        GPUs; module docstring)."""
        if tokens <= 0:
            return 0.0
        passes = (tokens if handed is None else handed) * hidden * self.token_pass / self.bandwidth
        if expert_parallel > 1:
            passes += self.ep_overhead
            tokens *= busiest_rank_factor(tokens, topk, experts, expert_parallel, load_cv, distribution == "uniform",
                                          slots)
        placed = slots or experts  # EPLB: a replicated expert's tokens split over its slots
        local, assignments = placed / expert_parallel, tokens * topk / expert_parallel
        passes += assignments * hidden * self.assignment_pass / self.bandwidth
        if distribution == "balanced":
            touched = min(local, assignments)
        else:
            touched = local * touched_share(topk / placed, tokens, load_cv)
        rows = math.ceil(assignments / touched / self.tile_m) * self.tile_m
        padded = math.ceil(width / self.tile_n) * self.tile_n
        matrices = up_matrices + 1
        compute = 2 * touched * rows * hidden * matrices * padded / self.flops
        memory = (touched * matrices * hidden * width * self.w
                  + assignments * (2 * hidden + matrices * width) * self.a) / self.bandwidth
        serial = self.k_latency * (hidden + width)  # the two GEMMs' main loops walk k = hidden, then k = width
        p = self.p
        return ((compute**p + memory**p + serial**p) ** (1 / p) + touched * self.expert_overhead + self.overhead
                + passes)

    def work(self, tokens: float, hidden: int, width: float, up_matrices: int, topk: int, experts: int,
             expert_parallel: int = 1, load_cv: float = 0.0, slots: int = 0, handed: float | None = None) -> Work:
        """:meth:`time` (``uniform`` routing) as :class:`~simulator.cost.work.Work` on the busiest GPU: the
        assignments' 2·D·(g + 1)·I/tp FLOPs each, the touched experts' weights and the activations, the token and
        assignment passes (memory); the smooth maximum split by Euler's rule; the per-expert, kernel and
        expert-parallel costs fixed."""
        if tokens <= 0:
            return Work()
        pass_bytes = (tokens if handed is None else handed) * hidden * self.token_pass
        extra = self.ep_overhead if expert_parallel > 1 else 0.0
        if expert_parallel > 1:
            tokens *= busiest_rank_factor(tokens, topk, experts, expert_parallel, load_cv, True, slots)
        placed = slots or experts
        local, assignments = placed / expert_parallel, tokens * topk / expert_parallel
        pass_bytes += assignments * hidden * self.assignment_pass
        touched = local * touched_share(topk / placed, tokens, load_cv)
        rows = math.ceil(assignments / touched / self.tile_m) * self.tile_m
        padded = math.ceil(width / self.tile_n) * self.tile_n
        matrices = up_matrices + 1
        nbytes = touched * matrices * hidden * width * self.w + assignments * (2 * hidden + matrices * width) * self.a
        kernel = smooth_max_work(self.p, 2 * touched * rows * hidden * matrices * padded / self.flops,
                                 nbytes / self.bandwidth, self.k_latency * (hidden + width),
                                 2 * assignments * hidden * matrices * width, nbytes,
                                 touched * self.expert_overhead + self.overhead + extra)
        return kernel + memory_kernel_work(pass_bytes, self.bandwidth, 0.0)


# probabilists' Gauss–Hermite rule (weights normalised to 1): E[f(Z)] ≈ Σ w·f(z) for a standard normal Z
_HERMITE_NODES, _HERMITE_WEIGHTS = np.polynomial.hermite_e.hermegauss(24)
_HERMITE = tuple(zip(_HERMITE_NODES.tolist(), (_HERMITE_WEIGHTS / _HERMITE_WEIGHTS.sum()).tolist(), strict=True))


@lru_cache(maxsize=4096)
def touched_share(pick: float, tokens: float, load_cv: float = 0.0) -> float:
    """Expected share of experts at least one of ``tokens`` tokens picks, each expert picked by a token with
    probability ``pick`` (k/E) on average: ``1 − (1 − pick)^T`` when the experts are equally popular
    (``load_cv`` 0), else ``1 − E_x[(1 − min(1, x·pick))^T]`` over lognormal popularities x of mean 1 and
    coefficient of variation ``load_cv`` (24-point Gauss–Hermite quadrature in log x)."""
    if load_cv <= 0:
        return 1 - (1 - pick) ** tokens
    variance = math.log1p(load_cv * load_cv)
    sigma = math.sqrt(variance)
    missed = sum(weight * (1 - min(1.0, pick * math.exp(sigma * z - variance / 2))) ** tokens
                 for z, weight in _HERMITE)
    return 1 - missed


@lru_cache(maxsize=64)
def largest_normal(n: int) -> float:
    """Expected largest of ``n`` independent standard normals (Blom's approximation; 0 for one)."""
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25)) if n > 1 else 0.0


def largest_lognormal(n: int, spread: float) -> float:
    """The largest of ``n`` lognormal draws of mean 1 and coefficient of variation ``spread``, at Blom's position:
    ``exp(σ·z_n − σ²/2)`` with ``σ² = ln(1 + spread²)`` (1 for one draw or no spread)."""
    variance = math.log1p(spread * spread)
    return math.exp(math.sqrt(variance) * largest_normal(n) - variance / 2) if n > 1 else 1.0


def busiest_rank_factor(tokens: float, topk: int, experts: int, expert_parallel: int, load_cv: float = 0.0,
                        sampled: bool = True, slots: int = 0) -> float:
    """The busiest expert-parallel rank's assignments over the mean rank's (module docstring; ``sampled``: add the
    binomial spread of uniform routing; ``slots``: expert slots placed by EPLB, 0 without)."""
    ep = expert_parallel
    sampling = (ep - 1) / (tokens * topk) if sampled else 0.0
    cap = ep * min(topk, experts / ep) / topk
    if slots:  # popularity balanced over the ranks but for the hottest slot (module docstring)
        hottest_slot = largest_lognormal(experts, load_cv) * ep / slots
        return min(max(largest_lognormal(ep, math.sqrt(sampling)), hottest_slot), cap)
    return min(largest_lognormal(ep, math.sqrt(load_cv * load_cv * ep / experts + sampling)), cap)


DISTRIBUTIONS = ("balanced", "uniform")


def moe_time(hardware: str | HardwareSpec, num_tokens: int, hidden: int, inter: int, topk: int, num_experts: int,
             moe_tp: int = 1, moe_ep: int = 1, dtype: str = "bf16", distribution: str = "balanced",
             gated: bool = True, load_cv: float = 0.0) -> float:
    """Seconds for one MoE layer's routed experts on the busiest GPU (:class:`ExpertsModel`; ``balanced`` as the
    kernel tables mean it, ``uniform`` as the simulator's serving default; ``load_cv`` the experts' popularity
    spread, which gathers a uniform batch's tokens on fewer experts and with ``moe_ep`` > 1 loads one rank more
    than the others)."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution: {distribution!r} is not modelled yet (allowed: {', '.join(DISTRIBUTIONS)})")
    if load_cv < 0:
        raise ValueError(f"load_cv: {load_cv} must be >= 0 (0 = equally popular experts)")
    if not 1 <= topk <= num_experts or num_experts % moe_ep or inter % moe_tp:
        raise ValueError(f"need 1 <= topk <= num_experts, experts divisible by moe_ep and inter by moe_tp; got "
                         f"topk={topk}, num_experts={num_experts}, moe_ep={moe_ep}, inter={inter}, moe_tp={moe_tp}")
    model = ExpertsModel(resolve_hardware(hardware), dtype)
    return model.time(num_tokens, hidden, inter / moe_tp, 2 if gated else 1, topk, num_experts, moe_ep, distribution,
                      load_cv)
