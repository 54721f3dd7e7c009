"""What ``llmsim plan`` serves when the lengths are not fixed: a workload preset, a workload file, or a request trace.

The planner sets the arrivals itself (closed-loop users for the Pareto front, Poisson for the capacity), so a
source contributes its request shapes only — :func:`lengths_section`, the workload keys without ``arrival``,
``num_requests`` or ``duration_s``:

- a **preset** (``workloads/*.yaml``, by name): ``{"preset": name}``;
- a **workload file** (a YAML whose ``workload:`` section, or the whole mapping, is a workload section, as an
  experiment file holds one): that section without its arrivals; a trace inside it is refused (``--trace`` replays
  one);
- a **trace** (any format :mod:`simulator.workload.trace` reads): its prompt and output lengths as two quantile
  distributions of :data:`TRACE_QUANTILES` points each (``inverted_cdf``: every value one the trace holds), so the
  marginal distributions are the trace's to within a quarter of a percentile; the pairing of a prompt with its
  output, and the trace's prefix ids, are not kept. Its own mean arrival rate, ``(n − 1) / (last − first arrival)``,
  is what the planner serves by default (:func:`trace_rate`), and the top deployments are confirmed by replaying the
  trace itself at its own times (at most :data:`MAX_REPLAY_REQUESTS` of its first requests).

Everything is read once per process (cached by the source's path and format).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from simulator.catalog.yaml_text import YAMLInputError, load_yaml
from simulator.config.workload import TraceConfig
from simulator.errors import LLMSimError
from simulator.workload.trace import read_trace

TRACE_QUANTILES = 401  # points of each length distribution taken from a trace (every quarter percentile)
MAX_REPLAY_REQUESTS = 50_000  # the most requests of a trace one replay sends (its first ones)
_ARRIVAL_KEYS = ("arrival", "num_requests", "duration_s")


def is_workload_file(workload: str) -> bool:
    """``workload`` names a file (a YAML path) rather than a preset."""
    return workload.endswith((".yaml", ".yml")) or Path(workload).is_file()


@functools.cache
def lengths_section(workload: str | None, trace: str | None, trace_format: str = "auto") -> dict[str, Any]:
    """The workload keys that shape requests, from a preset name or file (``workload``) or a trace (see the module
    docstring); one of the two is given."""
    if trace is not None:
        prompts, outputs, _ = _trace_lengths(trace, trace_format)
        return {"input_tokens": _quantiles(prompts), "output_tokens": _quantiles(outputs)}
    assert workload is not None  # (the question gives lengths, a workload or a trace)
    if not is_workload_file(workload):
        return {"preset": workload}
    return _file_section(workload)


def trace_rate(trace: str, trace_format: str = "auto") -> float:
    """The trace's mean arrival rate, requests/s: ``(n − 1) / (last − first arrival)``."""
    return _trace_lengths(trace, trace_format)[2]


def replay_section(trace: str, trace_format: str = "auto") -> dict[str, Any]:
    """The workload that replays ``trace`` at its own times (its first :data:`MAX_REPLAY_REQUESTS` requests)."""
    requests = len(_trace_lengths(trace, trace_format)[0])
    section: dict[str, Any] = {"trace": {"path": trace, "format": trace_format}}
    if requests > MAX_REPLAY_REQUESTS:
        section["num_requests"] = MAX_REPLAY_REQUESTS
    return section


@functools.cache
def _trace_lengths(trace: str, trace_format: str) -> tuple[np.ndarray, np.ndarray, float]:
    try:
        config = TraceConfig(path=trace, format=trace_format)  # type: ignore[arg-type]
    except ValueError as exc:
        raise LLMSimError(f"plan: --trace-format {trace_format!r}: {exc}") from None
    if not Path(trace).is_file():
        raise LLMSimError(f"plan: --trace: file not found: {trace}")
    read = read_trace(config)
    span = float(read.arrival_s[-1] - read.arrival_s[0])
    if len(read.arrival_s) < 2 or span <= 0:
        raise LLMSimError(f"plan: --trace {trace}: its {len(read.arrival_s)} request(s) arrive at one instant, so "
                          "it has no arrival rate to serve; give --rate or --users")
    return read.input_tokens, read.output_tokens, (len(read.arrival_s) - 1) / span


def _quantiles(values: np.ndarray) -> dict[str, Any]:
    points = np.quantile(values, np.linspace(0, 1, TRACE_QUANTILES), method="inverted_cdf")
    return {"kind": "quantiles", "values": [int(v) for v in points]}


def _file_section(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LLMSimError(f"plan: --workload {path}: file not found (or give a preset: llmsim workloads)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LLMSimError(f"plan: --workload {path}: cannot read it ({exc})") from None
    try:
        data = load_yaml(text)  # as every input is read (YAML 1.2 scalars, no duplicate keys, bounded)
    except YAMLInputError as exc:
        where = f"{path}:{exc.line}" if exc.line is not None else path
        raise LLMSimError(f"plan: --workload {where}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        raise LLMSimError(f"plan: --workload {where}: not YAML ({getattr(exc, 'problem', exc)})") from None
    section = data.get("workload", data) if isinstance(data, dict) else data
    if not isinstance(section, dict):
        raise LLMSimError(f"plan: --workload {path}: expected a workload section (a mapping, or a mapping with a "
                          f"workload: key), got {type(section).__name__}")
    if section.get("trace") is not None:
        raise LLMSimError(f"plan: --workload {path}: its workload replays a trace; give the trace with --trace "
                          "(the planner sets the arrivals)")
    return {key: value for key, value in section.items() if key not in _ARRIVAL_KEYS}

