"""What ``llmsim validate --runs`` prints and draws from the frame :func:`simulator.fidelity.silicon.validate_runs`
returns: the errors per slice of rows (with the bias beside them), the reasons rows could not run, the overall
errors, and predicted against measured TTFT and TPOT."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.fidelity.ranking import row_rates

SLICE = ["system", "backend", "engine", "model_path", "mode", "subset"]


def slice_table(frame: pd.DataFrame, by: list[str] | None = None) -> pd.DataFrame:
    """Rows, rows ok, and per slice the median / p90 absolute percentage error of TTFT and TPOT and their bias: the
    median signed error, predicted / measured − 1 (positive: predicted too slow); and the bias of a request's
    latency, TTFT + (osl − 1) · TPOT — near 0 while TTFT's and TPOT's are not, the split between them is off, not
    the speed (a first token that leaves earlier or later than the engine hands it out)."""
    by = by or SLICE
    ok = frame[frame["status"] == "ok"].copy()
    for metric in ("ttft", "tpot"):
        ok[f"{metric}_signed"] = ok[f"predicted_{metric}_ms"] / pd.to_numeric(ok[f"silicon_{metric}_ms"]) - 1
    decode_steps = pd.to_numeric(ok["osl"]) - 1
    ok["e2e_signed"] = ((ok["predicted_ttft_ms"] + decode_steps * ok["predicted_tpot_ms"])
                        / (pd.to_numeric(ok["silicon_ttft_ms"]) + decode_steps * pd.to_numeric(ok["silicon_tpot_ms"]))
                        - 1)
    grouped = ok.groupby(by)
    table = pd.DataFrame({"rows": frame.groupby(by).size()})
    table["ok"] = grouped.size()
    for metric in ("ttft", "tpot"):
        table[f"{metric}_median_pct"] = grouped[f"{metric}_error"].median() * 100
        table[f"{metric}_p90_pct"] = grouped[f"{metric}_error"].quantile(0.9) * 100
        table[f"{metric}_bias_pct"] = grouped[f"{metric}_signed"].median() * 100
    table["e2e_bias_pct"] = grouped["e2e_signed"].median() * 100
    return table.fillna({"ok": 0}).astype({"ok": int}).round(1)


def load_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`slice_table` of the rows that ran, per GPU and subset, the rows with the most clients — the top quartile
    of clients per model and GPU, the largest batches the engines ran — apart from the rest: whether the large
    batches are priced as well as the small ones."""
    rated = row_rates(frame)
    ok = rated[rated["status"] == "ok"].copy()
    top = ok.groupby(["model_path", "system"])["clients"].transform(lambda clients: clients >= clients.quantile(0.75))
    ok["load"] = top.map({True: "top quartile of clients", False: "rest"})
    return slice_table(ok, by=["system", "subset", "load"])


def reason_counts(frame: pd.DataFrame) -> pd.Series:
    """How many rows each unsupported reason covers (file:line prefixes removed so equal reasons count together)."""
    reasons = frame.loc[frame["status"] != "ok", "status"].str.replace(r"^unsupported: (\S+:\d+: )?", "", regex=True)
    return reasons.value_counts()


def overall_errors(frame: pd.DataFrame) -> dict[str, float]:
    ok = frame[frame["status"] == "ok"]
    out = {}
    for metric in ("ttft", "tpot"):
        values = ok[f"{metric}_error"].to_numpy(float)
        out[f"{metric}_median"] = float(np.median(values)) if values.size else math.nan
        out[f"{metric}_p90"] = float(np.quantile(values, 0.9)) if values.size else math.nan
    return out


def runs_report(frame: pd.DataFrame, plot_path: Path | None = None) -> str:
    """The per-slice error table, overall errors per subset (with how many distinct measurements its rows hold where
    some repeat another's: ``validate_runs``'s ``run`` column, :func:`~simulator.fidelity.split.copy_groups`), the
    rows read by a rule and the unsupported reasons counted, and optionally a predicted-vs-measured plot (log-log,
    TTFT and TPOT, fit and held-out rows apart)."""
    lines = ["== runs: absolute percentage error per slice (mean TTFT / TPOT of the measured requests) ==",
             slice_table(frame).to_string(), ""]
    for subset, rows in frame.groupby("subset"):
        errors = overall_errors(rows)
        distinct = rows["run"].nunique()
        copies = f"; the {len(rows)} rows hold {distinct} distinct measurements" if distinct < len(rows) else ""
        lines.append(
            f"{subset}: {int((rows['status'] == 'ok').sum())} of {len(rows)} rows ok; TTFT median "
            f"{errors['ttft_median']:.1%} p90 {errors['ttft_p90']:.1%}; TPOT median {errors['tpot_median']:.1%} "
            f"p90 {errors['tpot_p90']:.1%}{copies}"
        )
    if (frame["status"] == "ok").any():
        lines += ["", "== by load: the top quartile of clients per model and GPU against the rest ==",
                  load_table(frame).to_string()]
    if "reading" in frame:
        readings = frame.loc[frame["status"] == "ok", "reading"].fillna("").str.split("; ").explode()
        counts = readings[readings != ""].value_counts()
        if not counts.empty:
            lines += ["", "rows read by a rule beyond their columns' values:"] + [
                f"  {count:4d}  {reading}" for reading, count in counts.items()]
    reasons = reason_counts(frame)
    if not reasons.empty:
        lines += ["", "unsupported rows by reason:"] + [f"  {count:4d}  {reason}" for reason, count in reasons.items()]
    if plot_path is not None:
        lines += ["", f"plot: {_plot(frame, plot_path)}"]
    return "\n".join(lines)


def _plot(frame: pd.DataFrame, path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure = runs_figure(frame)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def runs_figure(frame: pd.DataFrame):
    """Predicted against measured TTFT and TPOT of the ok rows (log-log; fit and held-out rows apart)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = frame[frame["status"] == "ok"]
    figure, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for axis, metric in zip(axes, ("ttft", "tpot"), strict=True):
        for subset, marker in (("fit", "o"), ("holdout", "x")):
            rows = ok[ok["subset"] == subset]
            axis.loglog(rows[f"silicon_{metric}_ms"], rows[f"predicted_{metric}_ms"], marker, markersize=3,
                        alpha=0.5, linestyle="none", label=subset)
        values = ok[[f"silicon_{metric}_ms", f"predicted_{metric}_ms"]].to_numpy(float)
        if values.size:
            low, high = values.min(), values.max()
            axis.plot([low, high], [low, high], "k--", linewidth=0.8)
        axis.set(title=f"{metric.upper()}: predicted vs measured", xlabel="measured (ms)", ylabel="predicted (ms)")
        axis.legend(title="rows")
    figure.tight_layout()
    return figure
