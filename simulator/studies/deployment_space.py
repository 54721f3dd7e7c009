"""The deployments of one model on one GPU type, and what each sustains in the roofline steady state.

**Worker shapes** (:func:`worker_shapes`): tensor parallelism ``t`` (powers of two, at most two nodes: the engines
run TP within a node, or across two as SGLang's TP16 does), pipeline stages ``p``, and for mixture-of-experts
models attention data parallelism ``d`` with expert parallelism over all ``d × t`` GPUs (vLLM's
``--enable-expert-parallel``, SGLang's DP attention with ``--ep-size``, TensorRT-LLM's ``enable_attention_dp``) —
every shape of at most ``max_gpus`` GPUs. Whether a shape divides the heads and experts and fits in memory is decided
by :func:`simulator.cluster.pool_setup.setup_pool`, the code the simulation builds its replicas with.

**Candidates** (:class:`Candidate`): ``agg`` — one replica of a shape, that prefills and decodes (the unit a cluster
repeats); ``disagg`` — ``x`` prefill workers of one shape and ``y`` decode workers of another (xPyD).

**Steady state** (:func:`agg_steady_state`, :func:`disagg_steady_state`): with every sequence of ``isl`` prompt
and ``osl`` output tokens, a rank decoding ``b`` sequences at mean context ``c = isl + osl / 2`` takes
``s(b) = step(b decodes, context sum b·c)`` per step, and a prompt's chunks add ``P(b)`` to the steps they ride in
(``step(b decodes + chunk) − s(b)`` summed over its chunks: continuous batching mixes them). An aggregated rank in
steady state spends each second on ``λ`` prefills and ``λ·osl / b`` decode steps:

    λ·P(b) + λ·osl·s(b) / b = 1   ⇒   λ(b) = 1 / (P(b) + osl·s(b) / b),   TPOT(b) = b / (λ·osl) = s(b) / (1 − λ·P(b))

(Little's law: ``b = λ·osl·TPOT``). A disaggregated pair serves ``min(x·λ_p, y·λ_d(b))`` with a prefill worker's
``λ_p = n / step(n prompts)`` (``n`` prompts of ``isl`` filling its token budget) and a decode worker's
``λ_d(b) = b / (osl·s(b))`` at ``TPOT = s(b)``; every rate is per rank times the ``d`` ranks. The floor of TTFT is
the prompt's prefill alone, ``P(0)``. These are optimistic (no queueing, no
stragglers, all b users decoding at once); the planner prunes with them and confirms the survivors by simulation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from simulator.catalog import HardwareSpec, ModelSpec
from simulator.cluster.pool_setup import PoolSetup
from simulator.cost.base import IterationShape
from simulator.kv.sizing import deployment_shape

Mode = Literal["agg", "disagg"]


@dataclass(frozen=True)
class Shape:
    """One worker (replica): ``data_parallel`` attention ranks of ``tensor_parallel`` × ``pipeline_parallel`` GPUs,
    the experts over ``expert_parallel`` of its GPUs."""

    tensor_parallel: int
    pipeline_parallel: int = 1
    data_parallel: int = 1
    expert_parallel: int = 1

    @property
    def gpus(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    @property
    def label(self) -> str:
        return deployment_shape(self.tensor_parallel, self.pipeline_parallel, self.data_parallel,
                                self.expert_parallel)

    def fields(self) -> dict[str, int]:
        """The cluster (or pool) fields that give a replica this shape."""
        return {"tensor_parallel": self.tensor_parallel, "pipeline_parallel": self.pipeline_parallel,
                "data_parallel": self.data_parallel, "expert_parallel": self.expert_parallel}


@dataclass(frozen=True)
class Candidate:
    """A deployment unit: ``agg`` — ``replicas`` replicas of ``shape``; ``disagg`` — ``prefill_replicas`` workers of
    ``prefill`` and ``replicas`` decode workers of ``shape``; served by ``engine``, with ``token_budget`` tokens per
    iteration (the scheduler's ``max_num_batched_tokens``; None: the engine's default)."""

    mode: Mode
    shape: Shape
    replicas: int = 1
    prefill: Shape | None = None
    prefill_replicas: int = 0
    engine: str = ""  # the engine profile serving it ("": the question's only one)
    token_budget: int | None = None

    @property
    def gpus(self) -> int:
        return self.replicas * self.shape.gpus + self.prefill_replicas * (self.prefill.gpus if self.prefill else 0)

    @property
    def label(self) -> str:
        engine = f"{self.engine} " if self.engine else ""
        budget = f", {self.token_budget:,} tokens per step" if self.token_budget is not None else ""
        if self.prefill is None:
            return f"{engine}agg {self.replicas} × ({self.shape.label}){budget}"
        return (f"{engine}disagg {self.prefill_replicas}P ({self.prefill.label}) + {self.replicas}D "
                f"({self.shape.label}){budget}")

    def scaled(self, units: int) -> Candidate:
        """``units`` copies of this unit as one deployment."""
        return Candidate(self.mode, self.shape, self.replicas * units, self.prefill, self.prefill_replicas * units,
                         self.engine, self.token_budget)

    def cluster(self) -> dict[str, Any]:
        """The experiment's ``cluster`` section for this deployment."""
        if self.prefill is None:
            return {"kind": "colocated", "replicas": self.replicas, **self.shape.fields()}
        return {"kind": "disaggregated", "prefill": {"replicas": self.prefill_replicas, **self.prefill.fields()},
                "decode": {"replicas": self.replicas, **self.shape.fields()}}


def _powers_of_two(limit: int) -> list[int]:
    return [2**i for i in range(limit.bit_length()) if 2**i <= limit]


def worker_shapes(model: ModelSpec, gpu: HardwareSpec, max_gpus: int) -> list[Shape]:
    """Every worker shape of at most ``max_gpus`` GPUs (see the module docstring), smallest first; whether each is
    valid for the model is :func:`simulator.cluster.pool_setup.setup_pool`'s to say."""
    shapes = set()
    for tp in _powers_of_two(min(max_gpus, 2 * gpu.node.gpus_per_node)):
        for pp in _powers_of_two(min(max_gpus // tp, model.num_layers)):
            shapes.add(Shape(tp, pp))
        if model.is_moe:
            shapes.update(Shape(tp, 1, dp, dp * tp) for dp in _powers_of_two(max_gpus // tp) if dp * tp > 1)
    return sorted(shapes, key=lambda s: (s.gpus, s.data_parallel, s.pipeline_parallel, s.tensor_parallel))


@dataclass(frozen=True)
class SteadyPoint:
    """One batch size of a candidate's analytic steady state (the module docstring's formulas)."""

    batch: int  # sequences decoding per rank (decode ranks when disaggregated)
    rate: float  # requests/s the whole candidate serves
    tpot_s: float
    ttft_s: float  # a prompt's prefill alone (the floor of TTFT)
    step_s: float  # a decode step of ``batch`` sequences alone, s(b): the floor of TPOT at that batch

    def tokens_per_gpu(self, osl: int, gpus: int) -> float:
        return self.rate * osl / gpus

    @property
    def tokens_per_user(self) -> float:
        return 1 / self.tpot_s


def _batches(limit: int) -> list[int]:
    return sorted({*_powers_of_two(limit), limit})


def max_batch(setup: PoolSetup, isl: int, osl: int) -> int:
    """The most sequences of ``isl + osl`` tokens a rank runs at once: its ``max_num_seqs``, and the KV pool."""
    return max(1, min(int(setup.scheduler.max_num_seqs), setup.budget.capacity_tokens // (isl + osl)))


def prefill_seconds(setup: PoolSetup, isl: int, batch: int = 0, context: float = 0.0) -> float:
    """What one ``isl``-token prompt adds, in chunks of the rank's token budget, to iterations that decode ``batch``
    sequences of mean ``context`` (the chunks' marginal time; with no batch, the prompt's prefill alone)."""
    chunk, done, seconds = setup.max_num_batched_tokens, 0, 0.0
    decoding = decode_step_seconds(setup, batch, context) if batch else 0.0
    while done < isl:
        new = min(chunk, isl - done)
        shape = IterationShape(((new, done),), batch, int(batch * context))
        seconds += setup.cost.iteration_time(shape) - decoding
        done += new
    return seconds


def decode_step_seconds(setup: PoolSetup, batch: int, context: float) -> float:
    return setup.cost.iteration_time(IterationShape((), batch, int(batch * context)))


def agg_steady_state(setup: PoolSetup, shape: Shape, isl: int, osl: int) -> list[SteadyPoint]:
    """The aggregated rank's λ(b) and TPOT(b) for powers of two up to :func:`max_batch`, times its ranks."""
    alone, context = prefill_seconds(setup, isl), isl + osl / 2
    points = []
    for batch in _batches(max_batch(setup, isl, osl)):
        step, prefill = decode_step_seconds(setup, batch, context), prefill_seconds(setup, isl, batch, context)
        rate = 1 / (prefill + osl * step / batch)
        points.append(SteadyPoint(batch, rate * shape.data_parallel, step / (1 - rate * prefill), alone, step))
    return points


def prefill_rate(setup: PoolSetup, isl: int) -> float:
    """Prompts per second one rank of a prefill worker finishes, its token budget filled with whole prompts."""
    prompts = max(1, setup.max_num_batched_tokens // isl)
    if prompts == 1:
        return 1 / prefill_seconds(setup, isl)
    return prompts / setup.cost.iteration_time(IterationShape(((isl, 0),) * prompts))


def decode_rate(setup: PoolSetup, shape: Shape, isl: int, osl: int, tpot_s: float) -> float:
    """Requests/s one decode worker of ``shape`` finishes at its largest batch decoding within ``tpot_s`` per
    token: ``d · b / (osl · s(b))`` (0 when no batch does)."""
    rates = [shape.data_parallel * batch / (osl * step) for batch in _batches(max_batch(setup, isl, osl))
             if (step := decode_step_seconds(setup, batch, isl + osl / 2)) <= tpot_s]
    return max(rates, default=0.0)


def disagg_steady_state(prefill: PoolSetup, decode: PoolSetup, candidate: Candidate, isl: int,
                        osl: int) -> list[SteadyPoint]:
    """The xPyD pair's rate and TPOT for decode batches of powers of two up to :func:`max_batch`."""
    assert candidate.prefill is not None  # a disaggregated candidate
    prompts = candidate.prefill_replicas * candidate.prefill.data_parallel * prefill_rate(prefill, isl)
    ranks = candidate.replicas * candidate.shape.data_parallel
    first = prefill_seconds(prefill, isl)
    points = []
    for batch in _batches(max_batch(decode, isl, osl)):
        step = decode_step_seconds(decode, batch, isl + osl / 2)
        points.append(SteadyPoint(batch, min(prompts, ranks * batch / (osl * step)), step, first, step))
    return points


def balanced_ratios(prefill_rate_per_worker: float, decode_rate_per_worker: float, prefill_gpus: int,
                    decode_gpus: int, max_gpus: int) -> list[tuple[int, int]]:
    """The (x, y) of x prefill and y decode workers within ``max_gpus`` whose rates balance best: for each x — 1 to
    8, then powers of two (a search that grows with the logarithm of a large budget, not with it) — the y nearest
    ``x · λ_p / λ_d`` (rounded both ways), each pair once, smallest first."""
    pairs = set()
    most = max_gpus // prefill_gpus
    for x in sorted({*range(1, min(most, 8) + 1), *(2**i for i in range(3, most.bit_length()) if 2**i <= most)}):
        ideal = x * prefill_rate_per_worker / decode_rate_per_worker
        for y in {max(1, math.floor(ideal)), max(1, math.ceil(ideal))}:
            if x * prefill_gpus + y * decode_gpus <= max_gpus:
                pairs.add((x, y))
    return sorted(pairs, key=lambda xy: (xy[0] * prefill_gpus + xy[1] * decode_gpus, xy))
