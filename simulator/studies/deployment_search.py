"""``llmsim plan`` from flags: which deployment of a model on a GPU type meets an SLO, at what throughput and cost.

1. **Enumerate** every worker shape (:mod:`simulator.studies.deployment_space`) and set each up as the simulation
   would (:func:`simulator.cluster.pool_setup.setup_pool`): one that does not divide the heads or experts, or does
   not fit in memory, is listed with the reason.
2. **Bound** each valid candidate — one aggregated replica, or x prefill + y decode workers (pairs of the shapes
   with the best analytic prefill and decode rates per GPU, in the ratios that balance them) — by its roofline steady
   state: an upper bound on the output tokens/s per GPU it sustains within the SLO.
3. **Simulate** in descending bound, pruning a candidate whose bound is below the best already simulated
   (:func:`bound_and_simulate`), with queueing: closed-loop users at powers of two per decode rank up to the batch the
   KV pool holds, ``requests_per_user`` requests each, the users' first requests spread over one request's
   analytic duration. Each level gives a point of output tokens/s per GPU against tokens/s per user (1000 / mean
   TPOT in ms): the Pareto front, aggregated and disaggregated together. A level meets the SLO when its
   ``percentile`` TTFT and TPOT are within the limits; a candidate's answer is its most users that meet it.
4. **Capacity** of the :attr:`PlanQuestion.top` best: the highest Poisson rate meeting the SLO
   (:func:`simulator.studies.capacity.find_capacity`, starting from the best level's request rate; with ``seeds``
   the mean over independent seeds and its 95% confidence interval); with ``rate``
   the fewest copies of the unit that meet the SLO at that rate, each count confirmed by simulating the whole
   cluster; with ``users`` the same for that many closed-loop users; with a ``trace`` and neither, the fewest copies
   that meet it replaying the trace at its own times.

The requests have fixed lengths (``isl``, ``osl``), or the shapes of a workload preset or file, or the lengths of
a trace (:mod:`simulator.studies.plan_workload`).

Every simulation uses the question's seed, so the plan is deterministic, serial or parallel.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.api import load, run
from simulator.catalog import load_engine, load_hardware
from simulator.cluster.pool_setup import PoolSetup, setup_pool
from simulator.config import ExperimentConfig
from simulator.config.deployment import Deployment, resolve
from simulator.errors import LLMSimError
from simulator.results.energy import ENERGY_METRICS
from simulator.studies.capacity import capacity_over_seeds
from simulator.studies.deployment_space import (
    Candidate,
    Mode,
    Shape,
    SteadyPoint,
    agg_steady_state,
    balanced_ratios,
    decode_rate,
    disagg_steady_state,
    prefill_rate,
    worker_shapes,
)
from simulator.studies.parallel import BACKENDS, map_in_order
from simulator.studies.plan_workload import lengths_section, replay_section, trace_rate
from simulator.workload import generate_requests

MAX_PLAN_GPUS = 1024  # the largest deployment unit searched: the disaggregated pairs searched grow with it
MEAN_DRAWS = 10_000  # requests drawn to estimate a workload's mean lengths (the analytic bound's isl and osl)
MAX_TOKEN_BUDGETS, MAX_TOKEN_BUDGET = 8, 1 << 20  # --token-budgets: how many, and the largest


@dataclass(frozen=True)
class PlanQuestion:
    """What the planner is asked (``llmsim plan --model ... --gpu ...``)."""

    model: str
    gpu: str
    max_gpus: int  # the largest unit searched (--max-gpus, or --gpus)
    ttft_ms: float
    tpot_ms: float
    isl: int | None = None  # fixed lengths, else ``workload`` or ``trace``
    osl: int | None = None
    workload: str | None = None  # a workload preset's name or a workload YAML (its shapes; the planner sets arrivals)
    trace: str | None = None  # a request trace: its lengths, and its mean rate to serve unless rate or users
    trace_format: str = "auto"
    percentile: str = "p90"
    rate: float | None = None
    users: int | None = None
    engines: tuple[str, ...] = ("vllm",)  # engine profiles searched (each deployment on each)
    price: float | None = None  # USD per GPU-hour (else the GPU profile's)
    gpus: int | None = None  # the GPUs one has (--gpus): how many units they hold, and what those serve
    modes: tuple[Mode, ...] = ("agg", "disagg")
    requests_per_user: int = 3
    keep: int = 24  # most candidates simulated
    top: int = 3
    seed: int = 0
    seeds: int = 1  # independent seeds of each top capacity search (a 95% confidence interval from 2)
    jobs: int = 1
    token_budgets: tuple[int, ...] = ()  # tokens per iteration searched for aggregated units (): the engine's default
    backend: str = "local"  # where the simulations run: local (``jobs`` processes) or ray (a Ray cluster)
    address: str | None = None  # the Ray cluster's address (None: the process's session, else a local one)

    def __post_init__(self) -> None:
        """A one-line error for a question the search cannot take: a unit beyond :data:`MAX_PLAN_GPUS` GPUs (refused
        before any work grows with it), or not exactly one source of request shapes."""
        if not 1 <= self.max_gpus <= MAX_PLAN_GPUS:
            raise LLMSimError(f"plan: --max-gpus (or --gpus) {self.max_gpus}: a deployment unit of at most "
                              f"{MAX_PLAN_GPUS} GPUs is searched")
        fixed = self.isl is not None and self.osl is not None
        if (self.isl is None) != (self.osl is None):
            raise LLMSimError("plan: give both --isl and --osl (or --workload or --trace)")
        sources = [name for name, given in (("--isl/--osl", fixed), ("--workload", self.workload is not None),
                                            ("--trace", self.trace is not None)) if given]
        if len(sources) != 1:
            raise LLMSimError("plan: give the request shapes once: --isl/--osl, --workload or --trace"
                              + (f" (got {' and '.join(sources)})" if sources else ""))
        if self.backend not in BACKENDS:
            raise LLMSimError(f"plan: --backend {self.backend!r}: expected local or ray")
        if len(self.token_budgets) > MAX_TOKEN_BUDGETS or not all(
                1 <= budget <= MAX_TOKEN_BUDGET for budget in self.token_budgets):
            raise LLMSimError(f"plan: --token-budgets {','.join(map(str, self.token_budgets))}: at most "
                              f"{MAX_TOKEN_BUDGETS} budgets, each 1 to {MAX_TOKEN_BUDGET:,} tokens")

    @property
    def slo(self) -> dict[str, float]:
        return {f"{self.percentile}_ttft_ms": self.ttft_ms, f"{self.percentile}_tpot_ms": self.tpot_ms}

    @property
    def target_rate(self) -> float | None:
        """The request rate to serve: ``rate``, else a trace's own mean rate unless ``users`` are given."""
        if self.rate is not None or self.users is not None or self.trace is None:
            return self.rate
        return trace_rate(self.trace, self.trace_format)


@dataclass
class Level:
    """One simulated concurrency of a candidate."""

    users: int
    summary: dict[str, Any]
    meets: bool


@dataclass
class Searched:
    """One candidate: its setup, analytic bound, simulated levels and answers (None where not reached)."""

    candidate: Candidate
    status: str = "ok"  # ok, invalid: <why>, pruned: <why>, infeasible: <why>
    steady: list[SteadyPoint] = field(default_factory=list)
    levels: list[Level] = field(default_factory=list)
    capacity_rps: float | None = None  # mean over the question's seeds
    capacity_ci_rps: float | None = None  # half the 95% confidence interval of that mean (0 for one seed)
    units_for_target: int | None = None  # copies of the unit that meet --rate / --users
    target_summary: dict[str, Any] | None = None  # the run of those units at the target (the last tried if none met)

    def bound(self, question: PlanQuestion) -> float:
        """An upper bound on the output tokens/s per GPU the candidate sustains within the SLO: the analytic rate at
        its largest batch whose decode step alone, s(b), is within the TPOT limit, where a prompt alone prefills
        within the TTFT limit (0: none). s(b), not TPOT(b): a simulated closed loop of b users decodes fewer than b
        at once, so its TPOT can undercut TPOT(b) but not the step of the batch it runs."""
        osl = plan_lengths(question)[1]
        feasible = [p.tokens_per_gpu(osl, self.candidate.gpus) for p in self.steady
                    if p.step_s * 1000 <= question.tpot_ms and p.ttft_s * 1000 <= question.ttft_ms]
        return max(feasible, default=0.0)

    @property
    def best(self) -> Level | None:
        """The most users that meet the SLO."""
        return max((level for level in self.levels if level.meets), key=lambda level: level.users, default=None)


def plan_lengths(question: PlanQuestion) -> tuple[int, int]:
    """(mean prompt, mean output) tokens of the question's workload."""
    if question.isl is not None and question.osl is not None:
        return question.isl, question.osl
    return _workload_means(question.workload, question.trace, question.trace_format)


@functools.cache
def _workload_means(workload: str | None, trace: str | None, trace_format: str) -> tuple[int, int]:
    question = PlanQuestion("", "", 1, 1, 1, workload=workload, trace=trace, trace_format=trace_format)
    config = load(_experiment(question, Candidate("agg", Shape(1))))
    drawn = config.workload.model_copy(update={"num_requests": MEAN_DRAWS})
    requests = generate_requests(drawn, np.random.SeedSequence(config.seed))
    return round(float(np.mean(requests.input_tokens))), round(float(np.mean(requests.output_tokens)))


def _experiment(question: PlanQuestion, candidate: Candidate, users: int = 1, ramp_s: float = 0.0,
                rate: float | None = None, replay: bool = False) -> dict[str, Any]:
    """The experiment of ``candidate`` under ``users`` closed-loop users (or Poisson arrivals at ``rate``, or with
    ``replay`` the question's trace at its own times)."""
    workload: dict[str, Any]
    scheduler: dict[str, Any] = {}
    if question.isl is not None and question.osl is not None:
        workload = {"input_tokens": {"kind": "fixed", "value": question.isl},
                    "output_tokens": {"kind": "fixed", "value": question.osl}}
        scheduler["max_model_len"] = question.isl + question.osl  # as a deployment serving them sets it
    else:
        workload = dict(lengths_section(question.workload, question.trace, question.trace_format))
    engine = candidate.engine or question.engines[0]
    if candidate.token_budget is not None:  # and at most that many running requests, as the engine requires
        scheduler["max_num_batched_tokens"] = candidate.token_budget
        running = _server_max_num_seqs(engine, question.gpu)
        if isinstance(running, int) and running > candidate.token_budget:
            scheduler["max_num_seqs"] = candidate.token_budget
    if replay:
        assert question.trace is not None  # (only a trace question replays)
        workload = replay_section(question.trace, question.trace_format)
    elif rate is not None:
        workload.update(arrival={"kind": "poisson", "rate": rate},
                        num_requests=max(200, question.requests_per_user * users))
    else:
        workload.update(arrival={"kind": "closed_loop", "users": users, "ramp_s": round(ramp_s, 3)},
                        num_requests=question.requests_per_user * users)
    slo = {"ttft_ms": question.ttft_ms, "tpot_ms": question.tpot_ms}
    return {"name": f"plan {candidate.label}", "seed": question.seed, "model": question.model,
            "hardware": question.gpu, "engine": engine, "cluster": candidate.cluster(),
            "scheduler": scheduler, "workload": workload, "slo": slo}


@functools.cache
def _server_max_num_seqs(engine: str, gpu: str) -> int | str | None:
    """The running-request limit ``engine``'s server takes by default on ``gpu``."""
    return load_engine(engine).server_experiment(load_hardware(gpu)).get("scheduler", {}).get("max_num_seqs")


def _setup(question: PlanQuestion, deployment: Deployment, candidate: Candidate) -> tuple[PoolSetup, ...]:
    """The pools of ``candidate`` set up as the simulation would (LLMSimError when the engines would refuse it)."""
    config = load(_experiment(question, candidate))
    pools = config.cluster.replica_pools()
    return tuple(setup_pool(config, deployment, pool, "cluster") for pool in pools)


def enumerate_candidates(question: PlanQuestion) -> list[Searched]:
    """Every candidate on every engine with its analytic steady state, invalid shapes listed with their reason
    (steps 1-2); a candidate names its engine when the question has several."""
    isl, osl = plan_lengths(question)
    searched = []
    for engine in question.engines:
        named = engine if len(question.engines) > 1 else ""
        deployment = resolve(plan_experiment(question, engine))
        setups = {}  # each valid shape at the engine's default token budget (what disaggregated workers run)
        for shape in worker_shapes(deployment.model, deployment.gpu(), question.max_gpus):
            default = Searched(Candidate("agg", shape, engine=named))
            try:
                setups[shape] = _setup(question, deployment, default.candidate)[0]
            except LLMSimError as exc:
                default.status = f"invalid: {exc}"
            if "agg" not in question.modes:
                searched += [default] if default.status != "ok" else []
                continue
            for budget in question.token_budgets or (None,):
                entry = default if budget is None else Searched(Candidate("agg", shape, engine=named,
                                                                          token_budget=budget))
                setup = setups.get(shape)
                if budget is not None:
                    try:
                        setup = _setup(question, deployment, entry.candidate)[0]
                    except LLMSimError as exc:
                        entry.status = f"invalid: {exc}"
                if entry.status == "ok" and setup is not None:
                    entry.steady = agg_steady_state(setup, shape, isl, osl)
                searched.append(entry)
        if "disagg" in question.modes and setups:
            searched += _disagg_candidates(question, setups, isl, osl, named)
    return searched


def _disagg_candidates(question: PlanQuestion, setups: dict[Shape, PoolSetup], isl: int, osl: int,
                       engine: str) -> list[Searched]:
    """xPyD pairs of the 3 shapes with the best prefill rate per GPU and the 3 with the best decode rate per GPU
    within the TPOT limit, in the ratios that balance them."""
    prefill_rates = {s: prefill_rate(setup, isl) * s.data_parallel for s, setup in setups.items()}
    decode_rates = {s: decode_rate(setup, s, isl, osl, question.tpot_ms / 1000) for s, setup in setups.items()}
    prefills = sorted(setups, key=lambda s: -prefill_rates[s] / s.gpus)[:3]
    decodes = [s for s in sorted(setups, key=lambda s: -decode_rates[s] / s.gpus) if decode_rates[s] > 0][:3]
    found = []
    for p in prefills:
        for d in decodes:
            for x, y in balanced_ratios(prefill_rates[p], decode_rates[d], p.gpus, d.gpus, question.max_gpus):
                candidate = Candidate("disagg", d, y, p, x, engine)
                found.append(Searched(candidate, steady=disagg_steady_state(setups[p], setups[d], candidate, isl,
                                                                            osl)))
    return found


ROUND = 4  # candidates simulated per round of the bound-and-prune search, whatever --jobs is (same answer)


def _mark_infeasible(question: PlanQuestion, valid: list[Searched]) -> None:
    """Candidates with no batch within the limits: why (the prompt alone too slow, or no batch fast enough)."""
    for entry in valid:
        if entry.bound(question) == 0:
            floor = min((p.ttft_s for p in entry.steady), default=math.inf) * 1000
            entry.status = (f"infeasible: a prompt alone takes {floor:.4g} ms to prefill" if floor > question.ttft_ms
                            else f"infeasible: no batch decodes within {question.tpot_ms:g} ms per token")


def bound_and_simulate(question: PlanQuestion, searched: list[Searched]) -> None:
    """Step 3 as branch and bound: candidates in descending analytic bound, :data:`ROUND` at a time, each simulated
    over its levels; before each round, a candidate whose bound (an upper bound on what it can sustain) is below the
    best output tokens/s per GPU already simulated within the SLO cannot win and is pruned, naming that best. The
    best candidate of each mode is simulated regardless (the plot compares them), and at most
    :attr:`PlanQuestion.keep` in all (the rest are listed as beyond that budget)."""
    valid = [s for s in searched if s.status == "ok"]
    _mark_infeasible(question, valid)
    queue = sorted((s for s in valid if s.status == "ok"), key=lambda s: -s.bound(question))
    first_of_mode = {id(next(s for s in queue if s.candidate.mode == mode))
                     for mode in question.modes if any(s.candidate.mode == mode for s in queue)}
    best, best_label, simulated = 0.0, "", 0
    while queue:
        batch: list[Searched] = []
        while queue and len(batch) < ROUND:
            entry = queue.pop(0)
            bound = entry.bound(question)
            if bound < best and id(entry) not in first_of_mode:
                entry.status = f"pruned: analytic bound {bound:.4g} tok/s/GPU < {best:.4g} simulated by {best_label}"
            elif simulated >= question.keep and id(entry) not in first_of_mode:
                entry.status = f"pruned: beyond --keep {question.keep} simulated (analytic bound {bound:.4g} tok/s/GPU)"
            else:
                batch.append(entry)
                simulated += 1
        simulate_levels(question, batch)
        for entry in batch:
            if entry.best is not None and tokens_per_gpu(entry) > best:
                best, best_label = tokens_per_gpu(entry), entry.candidate.label


MAX_LEVEL_REQUESTS = 50_000  # the most requests one simulated level sends (users × requests_per_user)


def _levels(entry: Searched, requests_per_user: int) -> list[tuple[int, float]]:
    """(users, ramp seconds) to simulate: powers of two per decode rank up to the analytic batch limit, those of at
    most :data:`MAX_LEVEL_REQUESTS` requests (at least the first level)."""
    ranks = entry.candidate.replicas * entry.candidate.shape.data_parallel
    levels = [(point.batch * ranks, point.ttft_s + point.batch * ranks / point.rate) for point in entry.steady]
    return levels[:1] + [level for level in levels[1:] if level[0] * requests_per_user <= MAX_LEVEL_REQUESTS]


def _simulate(question: PlanQuestion, candidate: Candidate, users: int, ramp_s: float) -> Level:
    summary = run(load(_experiment(question, candidate, users, ramp_s))).summary
    return Level(users, summary, _meets(summary, question.slo))


def _meets(summary: dict[str, Any], slo: dict[str, float]) -> bool:
    return summary["completed"] > 0 and all(summary[key] == summary[key] and summary[key] <= limit
                                            for key, limit in slo.items())


def _map(question: PlanQuestion, function: Callable[..., Any], tasks: list[tuple[Any, ...]]) -> list[Any]:
    """``function(*task)`` for every task, in order, where the question runs its simulations."""
    return map_in_order(function, tasks, question.jobs, question.backend, question.address)


def simulate_levels(question: PlanQuestion, alive: list[Searched]) -> None:
    """Every level of each of ``alive`` simulated (in parallel on ``question.jobs`` processes)."""
    tasks = [(question, s.candidate, users, ramp) for s in alive
             for users, ramp in _levels(s, question.requests_per_user)]
    results = iter(_map(question, _simulate, tasks))
    for entry in alive:
        entry.levels = [next(results) for _ in _levels(entry, question.requests_per_user)]
        if entry.best is None:
            entry.status = "misses: no simulated concurrency meets the SLO"
    # the best levels again, their iteration bounds recorded (1.7x one run's time, for one level of each): the
    # same run, with its energy (simulator.results.energy)
    best = [(level, (question, entry.candidate, users, ramp)) for entry in alive if (level := entry.best) is not None
            for users, ramp in _levels(entry, question.requests_per_user) if users == level.users]
    for (level, _), energy in zip(best, _map(question, _energy, [task for _, task in best]), strict=True):
        level.summary.update(energy)


def _energy(question: PlanQuestion, candidate: Candidate, users: int, ramp_s: float) -> dict[str, Any]:
    """The energy keys of one level's run (:data:`simulator.results.energy.ENERGY_METRICS`)."""
    summary = run(load({**_experiment(question, candidate, users, ramp_s),
                        "metrics": {"iteration_bounds": True}})).summary
    return {key: summary[key] for key in ENERGY_METRICS if key in summary}


def ranked(searched: list[Searched]) -> list[Searched]:
    """Candidates that meet the SLO, best first by output tokens/s per GPU at their best level."""
    return sorted((s for s in searched if s.best is not None), key=lambda s: -tokens_per_gpu(s))


def tokens_per_gpu(entry: Searched) -> float:
    level = entry.best
    return level.summary["output_throughput"] / entry.candidate.gpus if level else 0.0


def confirm_top(question: PlanQuestion, searched: list[Searched]) -> list[Searched]:
    """Step 4 for the :attr:`PlanQuestion.top` best; returns them, best first."""
    top = ranked(searched)[:question.top]
    answers = _map(question, _answer, [(question, entry) for entry in top])
    for entry, ((capacity, half_width), units, summary) in zip(top, answers, strict=True):
        entry.capacity_rps, entry.capacity_ci_rps = capacity, half_width
        entry.units_for_target, entry.target_summary = units, summary
    return top


def _answer(question: PlanQuestion, entry: Searched) -> tuple[tuple[float, float], int | None, dict[str, Any] | None]:
    """((capacity mean over the seeds, half its 95% confidence interval), units for the target, their run)."""
    level = entry.best
    assert level is not None  # (ranked: every one meets the SLO somewhere)
    config = load(_experiment(question, entry.candidate, rate=level.summary["request_throughput"]))
    spread, _ = capacity_over_seeds(config, question.slo, question.seeds, tolerance=0.05, over="rate",
                                    run=lambda c: _run_for(c, horizon_s(question)))
    capacity = spread.mean
    half_width = spread.half_width if spread.half_width > 1e-9 * capacity else 0.0  # equal rates: rounding noise
    units, summary = None, None
    target = question.target_rate
    if target is not None and capacity > 0:
        units, summary = _fewest_units(question, entry.candidate, math.ceil(target / capacity))
    elif question.users is not None:
        ramp = next(ramp for users, ramp in _levels(entry, question.requests_per_user) if users == level.users)
        units, summary = _fewest_units(question, entry.candidate, math.ceil(question.users / level.users), ramp)
    return (capacity, half_width), units, summary


def horizon_s(question: PlanQuestion) -> float:
    """How long an open-loop probe's arrivals last: long enough that a rate above capacity builds a queue that
    breaks the TTFT limit — 30 s, or 5 requests served back to back at the limits, whichever is longer."""
    osl = plan_lengths(question)[1]
    return max(30.0, 5 * (question.ttft_ms + osl * question.tpot_ms) / 1000)


def _run_for(config: ExperimentConfig, seconds: float) -> dict[str, Any]:
    """``config`` run with as many requests as its Poisson rate sends in ``seconds``: at least 200, at most
    :data:`MAX_LEVEL_REQUESTS` (at thousands of requests per second they then span less than ``seconds``, still many
    times a TTFT limit)."""
    arrival = config.workload.arrival
    rate = getattr(arrival, "rate", None)
    assert rate is not None  # (the planner's open-loop probes are Poisson)
    requests = min(MAX_LEVEL_REQUESTS, max(200, math.ceil(rate * seconds)))
    workload = config.workload.model_copy(update={"num_requests": requests})
    return run(config.model_copy(update={"workload": workload})).summary


def _fewest_units(question: PlanQuestion, candidate: Candidate, start: int,
                  ramp_s: float = 0.0) -> tuple[int | None, dict[str, Any]]:
    """The fewest copies of ``candidate`` from ``start`` (at most 3 more) whose cluster meets the SLO at the
    question's rate or users (their starts spread over ``ramp_s``), or replaying its trace when it names neither
    (None if none does), and the last run's summary."""
    summary: dict[str, Any] = {}
    replay = question.trace is not None and question.rate is None and question.users is None
    for units in range(max(1, start), max(1, start) + 4):
        if candidate.gpus * units > 100_000:
            break
        scaled = candidate.scaled(units)
        config = load(_experiment(question, scaled, question.users or 1, ramp_s, rate=question.rate, replay=replay))
        summary = run(config).summary if question.rate is None else _run_for(config, horizon_s(question))
        if _meets(summary, question.slo):
            return units, summary
    return None, summary


def plan_experiment(question: PlanQuestion, engine: str = "") -> ExperimentConfig:
    """The question's experiment on one GPU served by ``engine`` (default: its first; what its catalog names
    resolve to)."""
    return load(_experiment(question, Candidate("agg", Shape(1), engine=engine)))


def experiment_of(question: PlanQuestion, entry: Searched) -> ExperimentConfig:
    """The experiment that reproduces ``entry``'s best level (``llmsim run`` on it gives the plan's row)."""
    level = entry.best
    assert level is not None
    ramp = next(ramp for users, ramp in _levels(entry, question.requests_per_user) if users == level.users)
    return load(_experiment(question, entry.candidate, level.users, ramp))


def search(question: PlanQuestion) -> tuple[list[Searched], list[Searched]]:
    """Steps 1-4: every candidate searched, and the top ones, best first."""
    searched = enumerate_candidates(question)
    bound_and_simulate(question, searched)
    return searched, confirm_top(question, searched)
