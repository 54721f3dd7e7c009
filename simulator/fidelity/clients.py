"""The benchmark clients a runs file's measurements may come from, each as ``validate --runs`` simulates it.

A row's TTFT and TPOT are means over the requests its benchmark client sent, so the client is part of the
experiment: how its requests' lengths are drawn and how many each of its N concurrent clients sends (all measured).
A row states its client in the ``benchmark_client`` column where the file has one (that exact column name; the
value one of :data:`CLIENTS`' names, in any case); rows that state none take the run's client (``validate --runs
--client NAME``, default ``aiperf``), whose lengths and requests ``--length-range`` and ``--requests-per-client``
change. A client stated by its row wins over the run's, those options included: it is a fact about that
measurement (``validate`` says how many rows kept their own).

- ``aiperf``: aiconfigurator's benchmark recipe (``bench_run.sh.j2``: ``aiperf --concurrency N``, streaming, fixed
  lengths with ``ignore_eos``, about 20·N requests after 2·N warm-up ones), the recipe ``../shared/data``'s
  README states for its silicon files. Simulated as every request exactly ``isl`` and ``osl``, 12·N measured
  requests (at least 48) from a simultaneous start: chosen on the H100 fit rows (:mod:`simulator.fidelity.silicon`'s
  docstring).
- ``inferencex``: InferenceX's (SemiAnalysis) ``benchmark_serving.py --dataset-name random --random-input-len isl
  --random-output-len osl --random-range-ratio 0.8 --num-prompts 10·N --max-concurrency N --request-rate inf
  --ignore-eos``: every prompt and output length uniform on [0.8, 1] × (isl, osl), 10·N requests, all measured. Its
  clients fall out of step after their first round, as drawn lengths make them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BenchmarkClient:
    """A benchmark client as the simulated experiment runs it: each request's prompt and output lengths uniform on
    ``length_range`` × (isl, osl) (None: exactly isl and osl), and ``requests_per_client`` × N requests from its N
    clients, at least ``min_requests``, all measured."""

    name: str
    length_range: tuple[float, float] | None
    requests_per_client: int
    min_requests: int

    def describe(self) -> str:
        """One phrase for help texts: its lengths and requests."""
        lengths = (f"lengths uniform on {self.length_range[0]:g}-{self.length_range[1]:g} times isl and osl"
                   if self.length_range else "fixed lengths")
        least = f", at least {self.min_requests}" if self.min_requests > self.requests_per_client else ""
        return f"{self.name}: {lengths}, {self.requests_per_client} requests per client{least}"


CLIENTS: dict[str, BenchmarkClient] = {client.name: client for client in (
    BenchmarkClient("aiperf", None, 12, 48),
    BenchmarkClient("inferencex", (0.8, 1.0), 10, 10),
)}
DEFAULT_CLIENT = "aiperf"  # the client of rows that state none, unless the run names another
CLIENT_COLUMN = "benchmark_client"  # a runs file's optional column: the client each row's benchmark ran
