"""What ``llmsim plan`` (from flags) writes: ``plan.csv`` (every deployment searched), ``pareto.csv`` (every simulated
level, the front marked), ``report.html`` (:func:`simulator.report.html.plan_page`) and, per top configuration, an
experiment YAML that ``llmsim run`` reproduces and the engine's launch commands.

Columns of ``plan.csv``: the deployment (its label, ``engine``, ``mode``, the decode — or aggregated — workers'
count and ``tp``/``pp``/``dp``/``ep``, the prefill workers' where disaggregated), ``gpus`` of one unit, ``status``
(``ok``, ``invalid: why``, ``infeasible: why``, ``pruned: bound``, ``misses: ...``), the analytic bound, and for
simulated ones the most closed-loop users meeting the SLO with the output tokens/s per GPU and per user, TTFT and
TPOT there, and the GPUs' energy per output token there (``energy_j_per_output_token``,
:mod:`simulator.results.energy`; empty for a GPU whose profile states no board power); for the top ones the capacity
(req/s, Poisson; with ``--seeds`` the mean and ``capacity_rps_ci95``, half its 95% confidence interval) and per GPU,
and the cost; with ``--gpus`` the copies of the unit they hold and the capacity those add up to; with ``--rate`` /
``--users`` the units and GPUs that meet it and the TTFT and TPOT their confirming run measured (``target_*``). A
point is on the Pareto front when no other point has both more output tokens/s per GPU and more tokens/s per user.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from simulator.api import config_yaml
from simulator.studies.deployment_search import PlanQuestion, Searched, experiment_of, tokens_per_gpu
from simulator.studies.deployment_space import Shape
from simulator.studies.launch import LaunchCommand, launch_commands


def _shape_columns(prefix: str, shape: Shape | None, count: int) -> dict[str, Any]:
    if shape is None:
        return {f"{prefix}workers": 0, f"{prefix}tp": None, f"{prefix}pp": None, f"{prefix}dp": None,
                f"{prefix}ep": None}
    return {f"{prefix}workers": count, f"{prefix}tp": shape.tensor_parallel, f"{prefix}pp": shape.pipeline_parallel,
            f"{prefix}dp": shape.data_parallel, f"{prefix}ep": shape.expert_parallel}


def plan_table(question: PlanQuestion, searched: list[Searched], price: float | None) -> pd.DataFrame:
    """``plan.csv``: one row per deployment searched, those meeting the SLO first (best output tokens/s per GPU
    first), then the rest in search order."""
    rows = []
    for entry in searched:
        candidate, level = entry.candidate, entry.best
        row: dict[str, Any] = {
            "deployment": candidate.label, "engine": candidate.engine or question.engines[0], "mode": candidate.mode,
            **_shape_columns("", candidate.shape, candidate.replicas),
            **_shape_columns("prefill_", candidate.prefill, candidate.prefill_replicas),
            "gpus": candidate.gpus, "token_budget": candidate.token_budget, "status": entry.status,
            "bound_tokens_per_s_per_gpu": round(entry.bound(question), 3) if entry.steady else None,
            "max_users": level.users if level else None,
            "tokens_per_s_per_gpu": tokens_per_gpu(entry) if level else None,
            "tokens_per_s_per_user": 1000 / level.summary["mean_tpot_ms"] if level else None,
            f"{question.percentile}_ttft_ms": level.summary[f"{question.percentile}_ttft_ms"] if level else None,
            f"{question.percentile}_tpot_ms": level.summary[f"{question.percentile}_tpot_ms"] if level else None,
            "capacity_rps": entry.capacity_rps,
            **({"capacity_rps_ci95": entry.capacity_ci_rps} if question.seeds > 1 else {}),
            "capacity_rps_per_gpu": entry.capacity_rps / candidate.gpus if entry.capacity_rps is not None else None,
            "energy_j_per_output_token": level.summary.get("energy_j_per_output_token") if level else None,
        }
        if price is not None:
            row["usd_per_hour"] = price * candidate.gpus
            throughput = level.summary["output_throughput"] if level else 0.0
            row["usd_per_million_tokens"] = price * candidate.gpus / (throughput * 3600 / 1e6) if throughput else None
        if question.gpus is not None:  # copies of the unit the GPUs hold, and the capacity they add up to
            held = question.gpus // candidate.gpus
            row["units_in_gpus"] = held
            row["capacity_rps_in_gpus"] = entry.capacity_rps * held if entry.capacity_rps is not None else None
        if question.target_rate is not None or question.users is not None:
            units = entry.units_for_target
            row["units_for_target"] = units
            row["gpus_for_target"] = units * candidate.gpus if units else None
            for metric in ("ttft", "tpot"):  # what the confirming run of that cluster measured
                key = f"{question.percentile}_{metric}_ms"
                row[f"target_{key}"] = entry.target_summary[key] if entry.target_summary else None
            if price is not None:
                row["usd_per_hour_for_target"] = price * candidate.gpus * units if units else None
        rows.append(row)
    frame = pd.DataFrame(rows)
    order = sorted(range(len(searched)), key=lambda i: (searched[i].best is None, -tokens_per_gpu(searched[i])))
    return frame.iloc[order].reset_index(drop=True)


def pareto_table(question: PlanQuestion, searched: list[Searched]) -> pd.DataFrame:
    """``pareto.csv``: every simulated level, with ``meets_slo`` and ``on_front``."""
    rows = [{"deployment": entry.candidate.label, "mode": entry.candidate.mode, "gpus": entry.candidate.gpus,
             "users": level.users,
             "tokens_per_s_per_gpu": level.summary["output_throughput"] / entry.candidate.gpus,
             "tokens_per_s_per_user": 1000 / level.summary["mean_tpot_ms"],
             f"{question.percentile}_ttft_ms": level.summary[f"{question.percentile}_ttft_ms"],
             f"{question.percentile}_tpot_ms": level.summary[f"{question.percentile}_tpot_ms"],
             "meets_slo": level.meets}
            for entry in searched for level in entry.levels]
    frame = pd.DataFrame(rows, columns=["deployment", "mode", "gpus", "users", "tokens_per_s_per_gpu",
                                        "tokens_per_s_per_user", f"{question.percentile}_ttft_ms",
                                        f"{question.percentile}_tpot_ms", "meets_slo"])
    frame["on_front"] = undominated(frame)
    return frame


def undominated(points: pd.DataFrame) -> list[bool]:
    """Per point, whether no other has both at least its output tokens/s per GPU and per user, and more of one."""
    gpu, user = points["tokens_per_s_per_gpu"].to_numpy(), points["tokens_per_s_per_user"].to_numpy()
    return [not ((gpu >= g) & (user >= u) & ((gpu > g) | (user > u))).any() for g, u in zip(gpu, user, strict=True)]


def pareto_figure(frame: pd.DataFrame, question: PlanQuestion, title: str):
    """Output tokens/s per GPU against tokens/s per user, aggregated and disaggregated points and their fronts,
    the TPOT limit as the slowest user speed allowed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(7, 4.5))
    for mode, colour in (("agg", "tab:blue"), ("disagg", "tab:orange")):
        points = frame[frame["mode"] == mode]
        if points.empty:
            continue
        ax.scatter(points["tokens_per_s_per_user"], points["tokens_per_s_per_gpu"], s=14, color=colour, alpha=0.35,
                   label=f"{mode}: every simulated concurrency")
        front = points[undominated(points)].sort_values("tokens_per_s_per_user")
        ax.plot(front["tokens_per_s_per_user"], front["tokens_per_s_per_gpu"], color=colour, marker="o",
                markersize=4, label=f"{mode}: Pareto front")
    ax.axvline(1000 / question.tpot_ms, color="tab:red", linestyle="--", linewidth=1,
               label=f"TPOT limit {question.tpot_ms:g} ms")
    ax.set(xlabel="output tokens/s per user (1000 / mean TPOT ms)", ylabel="output tokens/s per GPU", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    figure.tight_layout()
    return figure


def launch_script(commands: list[LaunchCommand]) -> str:
    """A shell script of ``commands``: each with where it runs and the simulated settings it cannot carry as
    comments."""
    lines = ["#!/bin/sh", "# Launch commands of a deployment llmsim simulated (llmsim plan). Run each command on each",
             "# of its replicas; side files (TensorRT-LLM's options) are written beside this script.", ""]
    for command in commands:
        lines += [command.comment, *(f"#   not expressible: {note}" for note in command.notes), command.shell, ""]
    return "\n".join(lines)


def write_top(question: PlanQuestion, top: list[Searched], folder: Path) -> list[Path]:
    """Per top configuration: ``N-<mode>.yaml`` (the experiment of its best level), ``N-<mode>.launch.sh`` (the
    engine's commands) and the side files they read, prefixed ``N-``."""
    written = []
    for rank, entry in enumerate(top, start=1):
        config = experiment_of(question, entry)
        stem = folder / f"{rank}-{entry.candidate.mode}"
        users = entry.best.users if entry.best else 0
        header = (f"# llmsim plan, rank {rank}: {entry.candidate.label}, {users} closed-loop users (its most within "
                  "the SLO).\n# llmsim run on this file reproduces its plan.csv row.\n")
        written.append(stem.with_suffix(".yaml"))
        written[-1].write_text(header + config_yaml(config), encoding="utf-8")
        commands = launch_commands(config)
        for command in commands:
            for name, text in command.files.items():
                written.append(folder / f"{rank}-{name}")
                written[-1].write_text(text, encoding="utf-8")
        renamed = [replace(c, argv=tuple(f"{rank}-{a}" if a in c.files else a for a in c.argv)) for c in commands]
        written.append(stem.with_suffix(".launch.sh"))
        written[-1].write_text(launch_script(renamed), encoding="utf-8")
    return written


def question_text(question: PlanQuestion, lengths: tuple[int, int]) -> str:
    """One line: what was asked."""
    source = question.workload or (f"trace {question.trace}" if question.trace else None)
    workload = (f"{source} (mean prompt {lengths[0]:,}, output {lengths[1]:,} tokens)" if source
                else f"prompts {lengths[0]:,}, outputs {lengths[1]:,} tokens")
    target = (f", {question.rate:g} req/s to serve" if question.rate is not None else
              f", {question.users:,} users to serve" if question.users is not None else
              f", the trace replayed at its own times ({question.target_rate:.4g} req/s) to serve" if question.trace
              else "")
    engines = "engine" + ("s " if len(question.engines) > 1 else " ") + ", ".join(question.engines)
    return (f"{question.model} on up to {question.max_gpus} × {question.gpu}, {engines}; {workload}; "
            f"SLO {question.percentile} TTFT ≤ {question.ttft_ms:g} ms and {question.percentile} TPOT ≤ "
            f"{question.tpot_ms:g} ms{target}")
