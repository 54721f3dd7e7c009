"""End-to-end serving benchmarks (the format of ``../shared/data/silicon``): one row = one benchmark of a served model
at a fixed concurrency with fixed input and output lengths, with the measured TTFT and TPOT.

Each row becomes the experiment the benchmark ran (:func:`row_experiment`): ``batch_size`` closed-loop clients
against a server of ``batch_size`` running requests at most (the recipe's ``max_batch_size``), clients that start
together and send their next request after a client turnaround (exponential, mean 20 ms: fitted, below), every
request ``isl`` prompt tokens and ``osl`` output tokens, on one replica with the row's tensor and pipeline
parallelism, weights in the row's precision (a checkpoint that ships quantised: in its own format, below), the
row's framework as the engine profile — of its version range where the framework has several
(:func:`row_engine`: vLLM 0.14 and later run ``vllm-0.14``) — with that framework's server defaults for batching and
the KV cache (:attr:`EngineProfile.server_defaults`, which the config loader fills in). The
benchmark's recipe (aiperf) sends 2·N warm-up requests, then about 20·N measured ones. aiperf lets its warm-up
phase drain (a grace period for the warm-up responses) before the profiling phase starts its N clients, so the
measured requests begin with every client sending at once to an idle server (each after its own turnaround draw,
below), and they end with the last N, as the concurrency falls; a warm-up leaves nothing behind in a model without
cold-start effects. So the simulation measures every request of ``measured`` × N from a simultaneous start
(``warmup`` × N requests excluded before them, with no drain, is the other reading; ``RunSettings.ramp`` spreads
the clients' start over one cycle instead, :attr:`ClosedLoopArrival.ramp_s`); the predicted TTFT and TPOT are the
means over the measured requests (the file does not say which statistic it holds; the medians fit worse: fit rows'
TTFT median error 26.9% against 16.6%, held out 28.8% against 18.0%, TPOT unchanged). The first
round's TTFT — N prompts queued at once — weighs 1/``measured`` of the mean, which is what makes the measured TTFT
grow with N faster than a steady closed loop's. How many requests each client sends is not stated for these rows;
chosen on the fit rows' median TTFT error: 22.6% at 8·N, 18.7% at 10, 18.3% at 12, 20.4% at 15 and 22.5% at the
recipe's 20 (held out: 23.5, 22.2, 22.3, 21.9, 23.3%); the previous reading (2·N excluded with no drain, 6·N
measured, the last N left out) gave 27.8% (29.7% held out).

A row's precision names the weights' family; a checkpoint that ships quantised runs in the format it ships, which
no server converts: MiniMax-M2.5's, Qwen3-235B-A22B-FP8's and DeepSeek-V3's "fp8" rows serve their 128 × 128
block-scaled weights (``fp8_block``), gpt-oss-120b's "nvfp4" and "fp8" rows its MXFP4 experts (``fp8`` rows of a
16-bit checkpoint are quantised per tensor by the server, as the row says); a row stating fewer bits per weight than
the checkpoint ships, or numbers of another kind (floats against the checkpoint's integers), ran a quantised
derivative of it (DeepSeek-R1's and Kimi-K2.5's "nvfp4" rows: NVIDIA's NVFP4 checkpoints, under the base id), sized
and priced in the row's format (:func:`served_format`). Which server arguments each run used is
not stated. Rows of fp8 weights (``FP8_KV_PRECISIONS``) are taken as run
with an fp8 KV cache, as the file's source configures its fp8 deployments (aiconfigurator's ``kvcache_quant_mode``
fp8; with the servers' own default, a 16-bit cache for checkpoints that declare no KV format, the fit rows' median
TPOT error is 6.5% against 5.0%: TensorRT-LLM's Qwen3-32B fp8 rows 7.8% against 3.4%, vLLM's Llama-3.1-70B 7.2%
against 3.5%, both over-predicted); so are rows of NVFP4 weights, as NVIDIA's NVFP4 checkpoints declare (ModelOpt's
``kv_cache_quant_algo`` FP8): on the B200 fit rows the TPOT median / p90 error falls from 19.0 / 50.9% to 16.9 /
48.9% with it (TTFT 35.0 / 113.6% to 35.7 / 105.7%; the H100 fit rows' gpt-oss "nvfp4" rows move their TTFT p90
from 77.9 to 79.1%, nothing else). The benchmark recipe of the file's source (aiconfigurator's generator) sets a
per-iteration token budget from the row (:func:`recipe_token_budget`); the server default is the other candidate.
``RunSettings.token_budgets`` picks one per backend, chosen on the fit rows (median TTFT error of the aggregated
rows, fit / held out, with each engine's async scheduling as its profile states it): vLLM the recipe (17.5% / 22.0%
against 61.1% / 63.3% with its 8192 default), SGLang its server default (10.9% / 15.7% against 12.6% / 17.2%),
TensorRT-LLM the recipe (16.5% / 17.1% against 41.1% / 39.9%).

``RunSettings.length_range`` (``validate --runs --length-range LOW:HIGH``) draws every request's prompt and output
uniformly from [LOW, HIGH] × (isl, osl) instead, for a benchmark whose client draws lengths (a random dataset's
range ratio). Which client a row's benchmark ran — the lengths it drew, the requests each of its clients sent — is
the run's (``validate --runs --client NAME``, default aiperf's), or where the file has a ``benchmark_client`` column
the one its row states (:func:`row_settings`, :mod:`simulator.fidelity.clients`); ``../shared/data``'s files have
none.

The client turnaround stands for everything that keeps real closed-loop clients from moving in lock step (the
client's own time between a response and its next request, network, the server's front end); with none, clients
that finish together prefill together for ever. It is one number for every backend (the clients are the same
benchmark's), fitted on the fit rows: their median TTFT error is 16.7% at 10 ms, 16.6% at 20 and 18.6% at 40
(held out: 18.9, 18.0, 21.0%; before TensorRT-LLM's launch cost was refitted, 21.7% at 5 ms, 19.7% at 10, 18.3%
at 20, 20.9% at 40). TPOT moves by under a point.

The routed experts' popularity is not uniform in served traffic: a batch's tokens gather on the popular experts,
so at decode sizes (a few tokens per expert) fewer experts' weights are read than equally popular experts would
need (:func:`simulator.cost.moe.touched_share`), and under expert parallelism one rank carries more. Uniform
routing left a hump in the MoE rows' TPOT error where a step's assignments are about as many as the experts
(TensorRT-LLM's Qwen3-235B at TP 4 / EP 4: −2, +10, +21, +20, +15, +5% at 4–128 clients). ``expert_load_cv``, the
popularity's coefficient of variation, is one number for every MoE model (the rows do not say more), fitted on the
fit rows of the aggregated MoE models (Qwen3-235B-A22B-FP8, gpt-oss-120b, MiniMax-M2.5): their median absolute log
TPOT error is 8.2% at 0, 8.1 at 0.25, 8.5 at 0.5, 7.7 at 0.75, 7.3 at 1, 6.8 at 1.25, 7.1 at 1.5, 7.7 at 1.75 and
8.6% at 2 (held out, median TPOT error: 6.7% at 0, 5.8 at 1, 6.2 at 1.25, 6.6 at 1.5); their TTFT moves by about a
point (fit 15.2 → 15.0%, held out 14.9 → 15.9%).

An aggregated row's ``tp_size`` wider than its system's NVLink domain, with the expert parallelism multiplied in
(``moe_tp`` × ``moe_ep`` = ``tp_size``, 1 < ``moe_ep`` ≤ ``moe_tp``), is ``moe_tp`` GPUs (:func:`tensor_parallel`).
A row whose weights the engine's default memory share cannot hold beside one request ran with a larger share, as its
launch must have given it (:func:`raised_memory_share`).

A disaggregated row (``mode = disagg``) becomes a prefill and a decode pool (:func:`disaggregated_cluster`). A row
that leaves its worker counts empty is not read as one worker per role (as an empty parallelism column is read as
1): rows that state one and the same configuration measure different TPOTs (DeepSeek-R1 at TP 16 per role:
TensorRT-LLM at 6 clients, 8.0 and 14.7 ms; SGLang at 8 clients, 12.2 and 23.4 ms), so what they leave out varied
between runs.
A row the simulator cannot represent gets ``status = unsupported: <reason>`` (attention data parallelism of a dense
model or with a client count that is not a whole number of ranks, MoE parallelism whose moe_tp × moe_ep does not
cover the GPUs, a disaggregated row that does not state its worker or client counts, an unknown model or system, an
architecture the importer refuses); a malformed row gets ``unsupported: file:line: <problem>``. Nothing stops the
run on one row.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, overload

import pandas as pd

from simulator.api import run
from simulator.catalog import load_engine, load_hardware, load_model
from simulator.config import ExperimentConfig, load_experiment
from simulator.config.workload import ClosedLoopArrival
from simulator.cost import build_cost_model
from simulator.cost.base import IterationShape
from simulator.dtypes import bytes_per_element
from simulator.errors import LLMSimError, MemoryShortError
from simulator.fidelity.clients import CLIENT_COLUMN, CLIENTS, DEFAULT_CLIENT, BenchmarkClient
from simulator.fidelity.split import MEASURED, Split
from simulator.fidelity.systems import SYSTEMS, WEIGHT_FORMATS
from simulator.results.progress import progress_bar

BACKENDS = ("vllm", "sglang", "trtllm")
REQUIRED = ("backend", "model_path", "system", "mode", "isl", "osl", "batch_size", "tp_size",
            "silicon_ttft_ms", "silicon_tpot_ms")
PRECISIONS = {"": "bf16", **WEIGHT_FORMATS}  # a row's gemm_quant_mode, else precision (empty: 16-bit)
# weight formats the benchmark recipe runs with an fp8 KV cache (see the module's docstring)
FP8_KV_PRECISIONS = ("fp8", "fp8_block", "nvfp4")
_DEFAULT = CLIENTS[DEFAULT_CLIENT]  # the client of rows that state none (RunSettings' defaults)


# the engine profiles of a backend's later versions: (first version, profile), oldest first (module docstring)
VERSION_ENGINES: dict[str, tuple[tuple[tuple[int, ...], str], ...]] = {"vllm": (((0, 14), "vllm-0.14"),)}


def release(version: str) -> tuple[int, ...] | None:
    """A version string's release numbers (``0.18.0`` -> (0, 18, 0); ``1.0.0rc3``, ``0.5.1.post1``: the numbers
    before the suffix); None when it starts with none."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", version or "")
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def row_engine(row: dict[str, str]) -> str:
    """The engine profile a row runs: its backend's, or the profile of the backend's later versions its
    ``backend_version`` reaches (:data:`VERSION_ENGINES`); a row without a version runs the backend's."""
    backend = (row.get("backend") or "").strip()
    version = release(row.get("backend_version") or "")
    engine = backend
    for first, profile in VERSION_ENGINES.get(backend, ()):
        if version is not None and version >= first:
            engine = profile
    return engine


def run_engine(row: dict[str, str], settings: RunSettings) -> str:
    """The engine profile a row is simulated with: :func:`row_engine`'s, or its replacement in
    ``settings.engines``."""
    engine = row_engine(row)
    return dict(settings.engines).get(engine, engine)


class Unsupported(Exception):
    """A row the simulator cannot represent; the message is the reason."""


@dataclass(frozen=True)
class RunSettings:
    """How each simulated benchmark runs: its client (by default aiperf's, :data:`DEFAULT_CLIENT`), how long, in
    multiples of its concurrency N, and the choices made for every row."""

    # the benchmark client these settings simulate, as the validate output's ``client`` column names it
    client: str = DEFAULT_CLIENT
    warmup: int = 0  # requests excluded at the start, × N, with no drain after them (module docstring)
    # requests measured, × N, the last N (as the concurrency falls) included (fitted), and at least min_measured
    measured: int = _DEFAULT.requests_per_client
    min_measured: int = _DEFAULT.min_requests
    client_jitter_ms: float = 20.0  # mean of an exponential delay before each client's next request (fitted)
    expert_load_cv: float = 1.25  # the served traffic's spread of routed-expert popularity (fitted; docstring)
    ramp: bool = False  # spread the clients' first requests over one request's duration
    # each request's prompt and output lengths uniform on [low·isl, high·isl] and [low·osl, high·osl] (a client
    # that draws lengths, e.g. a random dataset's range ratio); None: every request exactly isl and osl
    length_range: tuple[float, float] | None = _DEFAULT.length_range
    # the client's connection pool (``workload.client_connections``): a client of fewer connections than clients
    # runs at most this many requests, the others' TTFT holding their wait (docstring); None: one per client
    client_connections: int | None = None
    engines: tuple[tuple[str, str], ...] = ()  # engine profile a row runs (:func:`row_engine`) -> another (name/path)
    # price the rows' GPU with this generation's fitted parameters instead of its own (``<gpu>@<generation>``,
    # :func:`simulator.catalog.hardware.load_hardware`): what a GPU without measurements can expect; None: its own
    generation: str | None = None
    # backend -> "recipe" (the benchmark recipe's token budget, :func:`recipe_token_budget`) or "server" (the
    # engine profile's server default); chosen per backend on the fit rows (see the module docstring)
    token_budgets: tuple[tuple[str, str], ...] = (("vllm", "recipe"), ("sglang", "server"), ("trtllm", "recipe"))

    def with_client(self, client: BenchmarkClient) -> RunSettings:
        """These settings with ``client``'s name, request lengths and requests per client."""
        return replace(self, client=client.name, length_range=client.length_range,
                       measured=client.requests_per_client, min_measured=client.min_requests)


def stated_client(row: dict[str, str]) -> str:
    """The benchmark client a row names in its :data:`~simulator.fidelity.clients.CLIENT_COLUMN` (lower case,
    without surrounding blanks); '' where it names none."""
    return (row.get(CLIENT_COLUMN) or "").strip().lower()


def row_settings(row: dict[str, str], settings: RunSettings, where: str) -> RunSettings:
    """The settings a row is simulated with: ``settings``, with the benchmark client the row states in its
    :data:`~simulator.fidelity.clients.CLIENT_COLUMN` where it states one (:mod:`simulator.fidelity.clients`; an
    unknown name is :class:`Unsupported`)."""
    stated = stated_client(row)
    if not stated:
        return settings
    client = CLIENTS.get(stated)
    if client is None:
        raise Unsupported(f"{where}: {CLIENT_COLUMN} {stated!r} is not a benchmark client llmsim knows (known: "
                          f"{', '.join(CLIENTS)})")
    return settings.with_client(client)


# The most benchmark clients a row may have: 3x the largest in the measured files (10,860); a simulation's work
# grows with them, so a row that states more is refused before it runs.
MAX_CLIENTS = 32_768


def concurrency(row: dict[str, str], batch_size: int) -> int:
    """The benchmark's client count: :func:`stated_concurrency` where the row states it, else ``batch_size``."""
    return stated_concurrency(row) or batch_size


def stated_concurrency(row: dict[str, str]) -> int | None:
    """The client count a row states (``silicon_concurrency=N`` in ``silicon_data_source``, N > 0), else None."""
    match = re.search(r"silicon_concurrency=(\d+)", row.get("silicon_data_source") or "")
    return int(match.group(1)) if match and int(match.group(1)) > 0 else None


def data_parallelism(row: dict[str, str], backend: str, clients: int, per_rank: int, tp: int,
                     where: str) -> tuple[int, int, int]:
    """(attention-DP ranks, tensor parallelism within a rank, clients per rank) of a row. The ranks:
    :func:`attention_ranks`, or — where the row leaves them empty — its client count over its per-rank
    ``batch_size`` (five TensorRT-LLM rows). vLLM's and SGLang's ``tp_size`` is per rank, so a worker is ``tp_size``
    × ranks GPUs (``tp_size`` 1 with 8 ranks is "DEP8"). TensorRT-LLM's own configurations state the worker's GPUs
    as ``tp_size`` with ``enable_attention_dp``: a TensorRT-LLM row is read so where its ranks divide ``tp_size`` and
    its MoE columns do not span ``tp_size`` × ranks GPUs (they confirm the per-rank reading where they do)."""
    dp = attention_ranks(row, where)
    if dp != _degree(row, "attention_dp_size", where):  # the clients over the ranks the row ran (a whole number)
        per_rank = clients // dp
    if dp == 1 and clients != per_rank:
        if clients % per_rank:
            raise Unsupported(f"{where}: {clients} clients are not a whole number of ranks of batch_size {per_rank}")
        dp = clients // per_rank
    if dp > 1 and clients != dp * per_rank:
        raise Unsupported(f"attention data parallelism with {clients} clients for {dp} ranks of {per_rank}")
    if backend == "trtllm" and dp > 1 and tp % dp == 0:
        moe_tp, ep = _stated_degree(row, "moe_tp_size", where), _degree(row, "moe_ep_size", where)
        if max(moe_tp, 1) * ep != tp * dp:
            return dp, tp // dp, per_rank
    return dp, tp, per_rank


def attention_ranks(row: dict[str, str], where: str) -> int:
    """An aggregated row's attention-DP ranks: ``attention_dp_size``, except where the source writes a TensorRT-LLM
    row's with the MoE tensor parallelism multiplied in — ``tp_size`` 1, ``attention_dp_size`` = ``moe_tp_size`` ×
    ``moe_ep_size`` with ``moe_tp_size`` = ``moe_ep_size`` > 1, and the stated clients (``silicon_concurrency``)
    that ``attention_dp_size`` × ``batch_size`` (DEP 8 on 8 GPUs as ``attention_dp_size`` 64, ``moe_tp_size`` 8,
    ``moe_ep_size`` 8, ``batch_size`` the clients over 64) — which is ``moe_ep_size`` ranks, the experts over their
    GPUs by expert parallelism alone. Every one of the B200 file's 37 such rows that the file holds again under
    another deployment, the same run (16: :func:`simulator.fidelity.split.copy_groups`; DEP 8 and DEP 4), appears
    there so (``attention_dp_size`` 8, ``moe_tp_size`` 1, ``moe_ep_size`` 8, the clients over 8)."""
    dp = _degree(row, "attention_dp_size", where)
    moe_tp, ep = _stated_degree(row, "moe_tp_size", where), _degree(row, "moe_ep_size", where)
    if ((row.get("backend") or "").strip() != "trtllm" or _number(row, "tp_size", where) != 1
            or not 1 < ep == moe_tp or moe_tp * ep != dp):
        return dp
    if stated_concurrency(row) != dp * _number(row, "batch_size", where):
        return dp
    return ep


def layout_readings(row: dict[str, str], where: str) -> list[str]:
    """The rules an aggregated row's layout is read by beyond its columns' values (:func:`tensor_parallel`,
    :func:`attention_ranks`), by name; none for a disaggregated row."""
    if (row.get("mode") or "").strip() == "disagg":
        return []
    readings = []
    if tensor_parallel(row, where) != _number(row, "tp_size", where):
        readings.append(TP_TIMES_EP)
    if attention_ranks(row, where) != _degree(row, "attention_dp_size", where):
        readings.append(DP_TIMES_MOE_TP)
    return readings


def tensor_parallel(row: dict[str, str], where: str) -> int:
    """An aggregated row's ``tp_size``, read as the GPUs of one attention rank. The source writes some
    expert-parallel rows with the expert parallelism multiplied in: ``tp_size`` = tp × ep with ``moe_tp_size`` = tp
    and ``moe_ep_size`` = ep (TP 8 / EP 8 on one 8-GPU node as ``tp_size`` 64, ``moe_tp_size`` 8, ``moe_ep_size`` 8;
    the same measurements appear in the file as ``tp_size`` 8, ``moe_ep_size`` 8, and an engine's expert group is
    carved out of its tensor-parallel group, so ep ≤ tp). A ``tp_size`` wider than the system's NVLink domain
    (``node.gpus_per_node``), of a row with attention DP 1 whose ``moe_tp_size`` × ``moe_ep_size`` equals it with
    1 < ``moe_ep_size`` ≤ ``moe_tp_size``, is read so: ``moe_tp_size`` GPUs, the experts over ``moe_ep_size`` of
    them. Read as 64- and 16-way TP, the 172 such rows of the B200 file had a median TPOT error of 25.7% (fit) /
    21.8% (held out); read so, 17.1 / 13.8%."""
    tp = _number(row, "tp_size", where)
    moe_tp, ep = _stated_degree(row, "moe_tp_size", where), _degree(row, "moe_ep_size", where)
    system = SYSTEMS.get((row.get("system") or "").strip())
    if system is None or not 1 < ep <= moe_tp or moe_tp * ep != tp:
        return tp
    batch = _number(row, "batch_size", where)  # attention DP, stated or implied by the clients (data_parallelism)
    if _degree(row, "attention_dp_size", where) > 1 or concurrency(row, batch) != batch:
        return tp
    return moe_tp if tp > load_hardware(system).node.gpus_per_node else tp


def _check_moe_parallelism(row: dict[str, str], prefix: str, gpus: int, ep: int, where: str) -> None:
    """The MoE columns must cover the GPUs: ``moe_tp × moe_ep`` = dp × tp (a moe_tp left empty or 0, as the file
    writes a degree it does not state: whatever EP leaves)."""
    moe_tp = _stated_degree(row, f"{prefix}moe_tp_size", where) or gpus // ep
    if moe_tp * ep != gpus:
        raise Unsupported(f"MoE parallelism moe_tp {moe_tp} x moe_ep {ep} over {gpus} GPUs")


def disaggregated_cluster(row: dict[str, str], backend: str, spec, hardware: str, isl: int,
                          where: str) -> tuple[dict, int, int]:
    """(cluster section, client count, per-rank decode batch) of a disaggregated row: a prefill and a decode pool of
    ``<role>_num_workers`` workers, each ``<role>_attention_dp_size`` ranks of ``<role>_tp_size`` GPUs (per rank, as
    their MoE columns confirm: ``moe_tp × moe_ep`` = dp × tp) running at most ``<role>_batch_size`` requests per
    rank, each pool with the benchmark recipe's token budget (:func:`recipe_token_budget` of its batch: the server
    default may not hold a prompt). The clients: ``silicon_concurrency``; a row that does not state it is
    unsupported (where stated it equals ``decode_batch_size`` × workers, but the rows without it measure TPOTs that
    batch could not give — SGLang Qwen3-32B 112–560 ms — so the batch is a cap, not the client count). The KV moves
    over the prefill worker's network cards: its GPUs × the node's ``inter_node_gb_per_s``."""
    pools = {}
    for role in ("prefill", "decode"):
        if not (row.get(f"{role}_num_workers") or "").strip():
            raise Unsupported(f"disaggregated workers: {role}_num_workers is not stated")
        workers = _number(row, f"{role}_num_workers", where)
        tp, dp = _number(row, f"{role}_tp_size", where), _degree(row, f"{role}_attention_dp_size", where)
        ep = _degree(row, f"{role}_moe_ep_size", where)
        if dp > 1 and not spec.is_moe:
            raise Unsupported("attention data parallelism of a dense model")
        if spec.is_moe:
            _check_moe_parallelism(row, f"{role}_", dp * tp, ep, where)
        batch = _number(row, f"{role}_batch_size", where)
        pools[role] = {"replicas": workers, "tensor_parallel": tp, "pipeline_parallel": _degree(row, f"{role}_pp_size",
                       where), "data_parallel": dp, "expert_parallel": ep if spec.is_moe else 1,
                       "max_num_seqs": batch, "max_num_batched_tokens": recipe_token_budget(backend, isl, batch)}
    if stated_concurrency(row) is None:
        raise Unsupported("disaggregated workers: the client count (silicon_concurrency) is not stated")
    decode = pools["decode"]
    per_rank = decode["max_num_seqs"]
    users = concurrency(row, per_rank)
    prefill = pools["prefill"]
    gpus = prefill["tensor_parallel"] * prefill["data_parallel"] * prefill["pipeline_parallel"]
    link = gpus * load_hardware(hardware).node.inter_node_gb_per_s
    return ({"kind": "disaggregated", **pools, "transfer": {"bandwidth_gb_per_s": link}}, users, per_rank)


def row_gpus(row: dict[str, str], where: str) -> tuple[int, int]:
    """(GPUs, clients) of a row, read as :func:`row_experiment` reads it: an aggregated row's one worker of dp × tp
    × pp GPUs (:func:`data_parallelism`: attention-DP ranks of ``tp_size`` GPUs, or TensorRT-LLM's worker of
    ``tp_size`` GPUs split into ranks), a disaggregated row's ``<role>_num_workers`` × dp × tp × pp of both roles;
    the clients as :func:`concurrency` reads them (raises :class:`Unsupported` where the row cannot be read)."""
    if (row.get("mode") or "").strip() == "disagg":
        gpus = sum(_number(row, f"{role}_num_workers", where) * _number(row, f"{role}_tp_size", where)
                   * _degree(row, f"{role}_attention_dp_size", where) * _degree(row, f"{role}_pp_size", where)
                   for role in ("prefill", "decode"))
        return gpus, concurrency(row, _number(row, "decode_batch_size", where))
    per_rank = _number(row, "batch_size", where)
    users = concurrency(row, per_rank)
    dp, tp, _ = data_parallelism(row, (row.get("backend") or "").strip(), users, per_rank,
                                 tensor_parallel(row, where), where)
    return dp * tp * _degree(row, "pp_size", where), users


def recipe_token_budget(backend: str, isl: int, concurrency: int) -> int:
    """The per-iteration token budget the benchmark recipe gives the server (ai-dynamo/aiconfigurator,
    ``generator/rule_plugin/benchmark/*.rule``, aggregated workers): ``max_batch_size + isl + 1500`` as vLLM's
    ``--max-num-batched-tokens`` and TensorRT-LLM's ``max_num_tokens`` (``max_batch_size`` = the concurrency), and
    ``isl + 1500`` as SGLang's ``--max-prefill-tokens``."""
    return isl + 1500 if backend == "sglang" else concurrency + isl + 1500


def read_runs(path: str | Path) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) for every data row; a missing column or an unreadable file is an LLMSimError."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise LLMSimError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise LLMSimError(f"{path}:1: missing column(s) {missing}; a runs file needs {list(REQUIRED)}")
    return [(line, row) for line, row in enumerate(reader, start=2)]


@overload
def _number(row: dict[str, str], key: str, where: str, integer: Literal[True] = True) -> int: ...


@overload
def _number(row: dict[str, str], key: str, where: str, integer: Literal[False]) -> float: ...


def _number(row: dict[str, str], key: str, where: str, integer: bool = True) -> float:
    text = (row.get(key) or "").strip()
    try:
        value = float(text)
    except ValueError:
        raise Unsupported(f"{where}: {key} must be a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0 or (integer and value != int(value)):
        kind = "a positive integer" if integer else "a positive number"
        raise Unsupported(f"{where}: {key} must be {kind}, got {text!r}")
    return int(value) if integer else value


def _degree(row: dict[str, str], key: str, where: str) -> int:
    """A parallelism column: empty or 0 counts as 1; anything else must be a positive integer."""
    return max(_stated_degree(row, key, where), 1)


def _stated_degree(row: dict[str, str], key: str, where: str) -> int:
    """A parallelism column as stated: 0 when empty or 0 (not stated), else a positive integer."""
    text = (row.get(key) or "").strip()
    try:
        value = float(text) if text else 0.0
    except ValueError:
        raise Unsupported(f"{where}: {key} must be a number, got {text!r}") from None
    if not math.isfinite(value) or value != int(value) or value < 0:
        raise Unsupported(f"{where}: {key} must be a non-negative integer, got {text!r}")
    return int(value)


def model_path(model_id: str, model_dir: Path | None) -> str:
    """``org/name`` -> ``DIR/org--name_config.json`` when it exists, else the id itself (the catalog knows models
    by their Hugging Face ids)."""
    if model_dir is not None:
        candidate = model_dir / (model_id.replace("/", "--") + "_config.json")
        if candidate.is_file():
            return str(candidate)
    return model_id


def row_experiment(
    row: dict[str, str], where: str, model_dir: Path | None, settings: RunSettings = RunSettings()
) -> ExperimentConfig:
    """The experiment a silicon row describes under ``settings`` (for a row that names its benchmark client, the
    caller passes :func:`row_settings`'s); raises :class:`Unsupported` with the reason."""

    system = (row.get("system") or "").strip()
    if system not in SYSTEMS:
        raise Unsupported(f"{where}: unknown system {system!r} (known: {', '.join(SYSTEMS)})")
    backend = (row.get("backend") or "").strip()
    if backend not in BACKENDS:
        raise Unsupported(f"{where}: unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    mode = (row.get("mode") or "").strip()
    if mode not in ("agg", "disagg"):
        raise Unsupported(f"{where}: mode must be agg or disagg, got {mode!r}")
    isl, osl = _number(row, "isl", where), _number(row, "osl", where)
    precision = (row.get("gemm_quant_mode") or row.get("precision") or "").strip().lower()
    if precision not in PRECISIONS:
        raise Unsupported(f"weight precision {precision!r} (modelled: {', '.join(k for k in PRECISIONS if k)})")
    model = model_path((row.get("model_path") or "").strip(), model_dir)
    try:
        spec = load_model(model)
    except LLMSimError as exc:
        raise Unsupported(str(exc)) from None
    dtype = served_format(PRECISIONS[precision], spec.quantization.dtype if spec.quantization else None)
    hardware = SYSTEMS[system] + (f"@{settings.generation}" if settings.generation else "")
    if mode == "disagg":
        cluster, users, per_rank = disaggregated_cluster(row, backend, spec, hardware, isl, where)
    else:
        per_rank = _number(row, "batch_size", where)
        users = concurrency(row, per_rank)
        tp, pp = tensor_parallel(row, where), _degree(row, "pp_size", where)
        reread = bool(layout_readings(row, where))  # its MoE columns span the degree as written, not the GPUs
        dp, tp, per_rank = data_parallelism(row, backend, users, per_rank, tp, where)
        ep = _degree(row, "moe_ep_size", where)
        if dp > 1 and not spec.is_moe:
            raise Unsupported("attention data parallelism of a dense model")
        if spec.is_moe and not reread:
            _check_moe_parallelism(row, "", dp * tp, ep, where)
        cluster = {"replicas": 1, "tensor_parallel": tp, "pipeline_parallel": pp, "data_parallel": dp,
                   "expert_parallel": ep if spec.is_moe else 1}
    if users > MAX_CLIENTS:  # the simulation's work grows with the clients: refuse before it starts
        raise Unsupported(f"{where}: {users:,} clients (silicon_concurrency, else batch_size); at most "
                          f"{MAX_CLIENTS:,} are simulated")
    engine_name = run_engine(row, settings)
    measured = max(settings.measured * users, settings.min_measured)
    data: dict[str, Any] = {
        "name": where, "seed": 0, "model": model, "hardware": hardware, "dtype": dtype, "engine": engine_name,
        "cluster": cluster, "cost_model": {"kind": "roofline", "expert_load_cv": settings.expert_load_cv},
        "workload": {
            "num_requests": settings.warmup * users + measured,
            "arrival": {"kind": "closed_loop", "users": users, "think_ms": settings.client_jitter_ms},
            "input_tokens": request_lengths(isl, settings.length_range),
            "output_tokens": request_lengths(osl, settings.length_range),
            "client_connections": settings.client_connections,
        },
        # the recipe's max_batch_size (per rank); the rest: the engine's server defaults (config loader)
        "scheduler": {"max_model_len": longest(isl, settings.length_range) + longest(osl, settings.length_range),
                      "max_num_seqs": per_rank},
    }
    if PRECISIONS[precision] in FP8_KV_PRECISIONS:
        data["kv_cache"] = {"dtype": "fp8"}
    if dict(settings.token_budgets).get(backend) == "recipe" and mode == "agg":
        data["scheduler"]["max_num_batched_tokens"] = recipe_token_budget(backend, isl, per_rank)
    try:
        config = load_experiment(data, where=where)
        ramp = steady_request_seconds(config, spec, users, isl, osl) if settings.ramp else 0.0
    except LLMSimError as exc:
        raise Unsupported(str(exc)) from None
    arrival = config.workload.arrival
    assert arrival is not None  # the closed loop above
    return config.model_copy(update={"workload": config.workload.model_copy(update={
        "arrival": arrival.model_copy(update={"ramp_s": ramp})})})


def served_format(stated: str, shipped: str | None) -> str:
    """The weight format a row served: the checkpoint's own (no server converts a quantised checkpoint to another
    format of its width or wider: the row's format names the family), unless the row states fewer bits per weight
    than it ships, or as many of another kind (floating point where the checkpoint ships integers, or the reverse)
    — then the row ran a quantised derivative of the checkpoint, in the row's format: NVIDIA's NVFP4 DeepSeek-R1
    (4 bits against the checkpoint's 8) and Kimi-K2.5 (4-bit floats, E2M1 with fp8 scales, where Moonshot ships
    4-bit integers) under the base model's id; no kernel runs integer weights as floats. Widths are the formats'
    nominal bits (8 for fp8 and fp8_block, 4 for nvfp4, mxfp4 and int4)."""
    bits, shipped_bits = (_nominal_bits(stated), _nominal_bits(shipped)) if shipped is not None else (0, 0)
    if shipped is None or bits < shipped_bits or (
            bits == shipped_bits and stated.startswith("int") != shipped.startswith("int")):
        return stated
    return shipped


def _nominal_bits(dtype: str) -> int:
    return int(8 * bytes_per_element(dtype))  # the block scales' fraction of a bit dropped


def request_lengths(length: int, spread: tuple[float, float] | None) -> dict[str, Any]:
    """The workload's length distribution for a row's ``length`` (``isl`` or ``osl``): exactly that, or integers
    uniform on [low·length, high·length] (at least 1 token)."""
    if spread is None:
        return {"kind": "fixed", "value": length}
    return {"kind": "uniform", "min": max(1, math.floor(spread[0] * length)), "max": longest(length, spread)}


def longest(length: int, spread: tuple[float, float] | None) -> int:
    """The longest of :func:`request_lengths`."""
    return length if spread is None else max(1, math.floor(spread[1] * length))


def steady_request_seconds(config: ExperimentConfig, model, users: int, isl: int, osl: int) -> float:
    """Roughly how long one request lasts at concurrency ``users`` in steady state (the cycle of a closed-loop
    client): ``osl`` decode steps of the full batch at the mean context, plus the prefill of every client's prompt
    (each prompt is prefilled once per cycle, delaying everybody's decode). The clients' start is spread over it."""

    cost = build_cost_model(config, model, load_hardware(config.hardware), load_engine(config.engine))
    prefill = cost.iteration_time(IterationShape(((isl, 0),)))
    a, c = cost.decode_step_coefficients(users)
    return osl * (a + c * users * (isl + osl / 2)) + (users - 1) * prefill


def predict_row(config: ExperimentConfig, users: int, settings: RunSettings = RunSettings()) -> tuple[float, float]:
    """Mean TTFT and TPOT (ms) of the measured requests of a closed-loop benchmark experiment."""
    requests = run(config).requests
    assert requests is not None  # kept in memory (not streamed to a file)
    window = requests[(requests["request_id"] >= settings.warmup * users) & (requests["status"] == "finished")]
    if window.empty:
        reasons = requests["reject_reason"].dropna().unique().tolist()
        raise Unsupported(f"no request completed ({'; '.join(map(str, reasons[:2])) or 'none finished'})")
    return float(window["ttft_ms"].mean()), float(window["tpot_ms"].mean())


RAISED_MEMORY_SHARE = 0.95


def raised_memory_share(config: ExperimentConfig) -> ExperimentConfig:
    """``config`` with its engine's memory share at :data:`RAISED_MEMORY_SHARE`. A measured row ran, so its server
    held the weights and at least one request; where the engine's default share cannot (the sizing raises
    :class:`~simulator.errors.MemoryShortError`), the run's launch raised it, as operators do: SGLang's
    ``--mem-fraction-static`` (InferenceX's recipe for DeepSeek-R1 on 4 × B200 passes 0.95, where SGLang's default
    of 0.856 leaves nothing beside the 156.7 GiB of FP8 weights per GPU) or vLLM's ``--gpu-memory-utilization``.
    TensorRT-LLM's share is of the memory the weights leave, so its rows are not retried; a row that does not fit
    at the raised share either stays unsupported with its own reason."""
    kv = config.kv_cache
    share = "mem_fraction_static" if kv.mem_fraction_static is not None else "gpu_memory_utilization"
    return config.model_copy(update={"kv_cache": kv.model_copy(update={share: RAISED_MEMORY_SHARE})})


# what ``validate_runs``'s ``reading`` column says of a row that took one of the rules beyond its columns' values
TP_TIMES_EP = "tp_size read as moe_tp_size GPUs (the expert parallelism multiplied in)"
DP_TIMES_MOE_TP = "attention_dp_size read as moe_ep_size ranks (the MoE tensor parallelism multiplied in)"
RAISED_SHARE = f"memory share raised to {RAISED_MEMORY_SHARE} (the engine's default cannot hold the weights)"


def _one(line: int, row: dict[str, str], path: str, model_dir: Path | None, settings: RunSettings):
    """(predicted TTFT, predicted TPOT, status, reading) of one row: ``reading`` names the rules beyond its columns'
    literal values that the run took (:func:`layout_readings`, :func:`raised_memory_share`), '' where none."""
    where = f"{path}:{line}"
    try:
        for measured in MEASURED:  # what the prediction is judged against: a row without it cannot be judged
            _number(row, measured, where, integer=False)
        settings = row_settings(row, settings, where)
        config = row_experiment(row, where, model_dir, settings)
        arrival = config.workload.arrival
        assert isinstance(arrival, ClosedLoopArrival)  # row_experiment's clients
        readings = layout_readings(row, where)
        try:
            ttft, tpot = predict_row(config, int(arrival.users), settings)
        except MemoryShortError as short:  # the row ran, so its launch gave the server more of the GPU
            if config.kv_cache.free_memory_fraction is not None:  # a share of what the weights leave: no help
                raise
            try:
                ttft, tpot = predict_row(raised_memory_share(config), int(arrival.users), settings)
            except MemoryShortError:
                raise short from None  # the reason of the row as stated, not of the raised share
            readings.append(RAISED_SHARE)
        return ttft, tpot, "ok", "; ".join(readings)
    except (Unsupported, LLMSimError) as exc:
        reason = str(exc)
        if not reason.startswith(f"{where}:"):  # every reason names the row's file:line, once
            reason = f"{where}: {reason}"
        return math.nan, math.nan, f"unsupported: {reason}", ""


def validate_runs(
    path: str | Path, model_dir: str | Path | None = None, jobs: int = 1, settings: RunSettings = RunSettings(),
    keep: Callable[[dict[str, str]], bool] | None = None, progress: bool = True,
) -> pd.DataFrame:
    """Every row of a runs file (or those ``keep`` accepts) with ``predicted_ttft_ms``, ``predicted_tpot_ms``,
    ``status``, ``reading`` (the rules beyond its columns' values a row took, :func:`_one`), ``engine`` (the engine
    profile it ran, :func:`run_engine`), ``client`` (the benchmark client it was simulated as: its own, else
    ``settings.client``; :func:`row_settings`), ``subset`` (``fit`` or ``holdout``, :meth:`Split.is_fit_row`), ``run``
    (the file line of the first row of its group of copies: rows of one ``run`` measured one run,
    :func:`simulator.fidelity.split.copy_groups`) and the absolute percentage errors ``ttft_error`` and ``tpot_error``
    (NaN where not ok); ``progress``: a bar over the rows on a terminal."""
    every = read_runs(path)
    split = Split.of(row for _, row in every)
    kept = [i for i, (_, row) in enumerate(every) if keep is None or keep(row)]
    rows = [every[i] for i in kept]
    if not rows:
        raise LLMSimError(f"{path}: no rows to simulate (a runs file has a header and one row per run)")
    folder = Path(model_dir) if model_dir is not None else None
    bar = progress_bar(len(rows), "validate", "row", shown=progress)
    try:
        if jobs == 1 or len(rows) < 8:
            results = []
            for line, row in rows:
                results.append(_one(line, row, str(path), folder, settings))
                bar.update(1)
        else:
            from joblib import Parallel, delayed

            results = []
            for result in Parallel(n_jobs=jobs, batch_size=4, return_as="generator")(
                    delayed(_one)(line, row, str(path), folder, settings) for line, row in rows):
                results.append(result)
                bar.update(1)
    finally:
        bar.close()
    frame = pd.DataFrame([row for _, row in rows])
    for column in frame.columns:  # numbers as numbers where a whole column parses (empty cells become NaN)
        converted = pd.to_numeric(frame[column].replace("", None), errors="coerce")
        if converted.notna().sum() == (frame[column] != "").sum():
            frame[column] = converted
    frame["predicted_ttft_ms"] = [r[0] for r in results]
    frame["predicted_tpot_ms"] = [r[1] for r in results]
    frame["status"] = [r[2] for r in results]
    frame["reading"] = [r[3] for r in results]
    frame["engine"] = [run_engine(row, settings) for _, row in rows]
    frame["client"] = [stated_client(row) or settings.client for _, row in rows]
    frame["subset"] = ["fit" if split.is_fit_row(row) else "holdout" for _, row in rows]
    frame["run"] = [every[split.groups[i]][0] for i in kept]
    for metric in ("ttft", "tpot"):
        measured = pd.to_numeric(frame[f"silicon_{metric}_ms"], errors="coerce")
        frame[f"{metric}_error"] = (frame[f"predicted_{metric}_ms"] - measured).abs() / measured
    return frame
