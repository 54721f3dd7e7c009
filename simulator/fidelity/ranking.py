"""Ranking deployments on the real runs (``llmsim validate --runs FILE --ranking [CSV]``, or ``--ranking-from`` an
earlier ``validate --runs --output`` file): does the deployment the simulator ranks best at a per-user speed win?

**Throughput per row.** The silicon files hold no throughput column, so both sides are derived alike, measured from
``silicon_ttft_ms`` / ``silicon_tpot_ms`` and predicted from ``predicted_ttft_ms`` / ``predicted_tpot_ms``, for the
closed-loop benchmark of ``c`` clients each with one request in flight (the clients' turnaround left out)::

    tokens/s per user = 1000 / TPOT_ms
    request time (ms) = TTFT_ms + (osl − 1) · TPOT_ms
    tokens/s per GPU  = c · osl · 1000 / request time / GPUs

— output tokens; ``c`` and the GPUs as :func:`simulator.fidelity.silicon.row_gpus` reads the row (aggregated: one
worker of dp × tp × pp GPUs; disaggregated: the prefill and decode workers' GPUs together).

**Groups.** (model_path, system, backend, isl, osl), rows of status ok: every deployment of one model on one GPU and
engine for one request shape — layout, mode, precision and concurrency — is a candidate, as ``llmsim plan`` puts agg
and disagg on one front. A group of one row has nothing to rank and is left out.

**Speed floors.** For a group's distinct measured per-user speeds v1 < … < vn: 0 (the best throughput at any speed)
and the geometric midpoints √(v(k−1)·vk), k = 2 … n. So every set of rows that truly meets a floor is asked about
once, a floor never sits on a row's own speed (where the answer would hinge on a 0.1% prediction error: a coin flip
for an unbiased model), and the floors scale with the group (a fixed grid of tokens/s per user means one thing for an
8B model and another for DeepSeek-R1).

**A decision** at floor s: the measured best = the row of most measured tokens/s per GPU among rows measured at ≥ s
per user; the pick = the row of most predicted tokens/s per GPU among rows predicted at ≥ s. Outcome: ``hit`` — the
pick's measured speed ≥ s and its measured tokens/s per GPU ≥ 0.9 × the best's; ``miss`` — fast enough, below 90%,
losing 1 − pick / best of the throughput; ``too_slow`` — the pick's measured speed < s (a deployment that misses the
speed it was picked for); ``none`` — no row predicted at ≥ s.

**Baselines** (exact expectations, no sampling): ``random`` — a uniform pick among the rows measured at ≥ s, i.e. the
share of them within 10% of the best (no simulator, told the true speeds, never too slow); ``random_predicted`` — a
uniform pick among the rows predicted at ≥ s, the share of them that are hits (the simulator's speed filter without
its ranking).

**Scopes.** ``all``: every ok row. ``holdout``: the held-out ok rows only, each group's held-out deployments ranked
among themselves (the fit/held-out split is by row id within every slice, so no group is wholly held out).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.errors import LLMSimError
from simulator.fidelity.silicon import REQUIRED, Unsupported, attention_ranks, row_gpus, tensor_parallel

GROUP = ["model_path", "system", "backend", "isl", "osl"]
HIT_SHARE = 0.9  # a pick within 10% of the measured best is a hit
VALIDATED = (*REQUIRED, "predicted_ttft_ms", "predicted_tpot_ms", "status", "subset")
SIDES = (("measured", "silicon"), ("predicted", "predicted"))
RATES = ["gpus", "clients"] + [f"{side}_tok_s_{per}" for side, _ in SIDES for per in ("gpu", "user")]


def read_validated(path: str | Path) -> pd.DataFrame:
    """An earlier ``validate --runs --output`` file (a missing column or an unreadable file: LLMSimError)."""
    try:
        frame = pd.read_csv(path, low_memory=False)
    except (OSError, ValueError) as exc:
        raise LLMSimError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    missing = [column for column in VALIDATED if column not in frame.columns]
    if missing:
        raise LLMSimError(f"{path}:1: missing column(s) {missing}: give the file `llmsim validate --runs FILE "
                          f"--output OUT.csv` wrote")
    return frame


def row_rates(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (a validate output) with :data:`RATES` — GPUs, clients, and tokens/s per GPU and per user, measured
    and predicted (module docstring) — and ``read_tp_size`` and ``read_attention_dp_size``, an aggregated row's
    ``tp_size`` and ``attention_dp_size`` as simulated (:func:`simulator.fidelity.silicon.tensor_parallel`,
    :func:`~simulator.fidelity.silicon.attention_ranks`; NaN on a disaggregated row, whose roles state their own);
    NaN on rows not ok."""
    frame = frame.copy()
    sizes = [_sizes(record) if record["status"] == "ok" else (math.nan,) * 4 for record in frame.to_dict("records")]
    frame["gpus"] = [size[0] for size in sizes]
    frame["clients"] = [size[1] for size in sizes]
    frame["read_tp_size"] = [size[2] for size in sizes]
    frame["read_attention_dp_size"] = [size[3] for size in sizes]
    osl, ok = pd.to_numeric(frame["osl"], errors="coerce"), frame["status"] == "ok"
    for side, prefix in SIDES:
        ttft = pd.to_numeric(frame[f"{prefix}_ttft_ms"], errors="coerce")
        tpot = pd.to_numeric(frame[f"{prefix}_tpot_ms"], errors="coerce")
        frame[f"{side}_tok_s_user"] = (1000 / tpot).where(ok)
        frame[f"{side}_tok_s_gpu"] = (frame["clients"] * osl * 1000 / (ttft + (osl - 1) * tpot)
                                      / frame["gpus"]).where(ok)
    return frame


def _sizes(record: dict) -> tuple[float, float, float, float]:
    """(GPUs, clients, tp_size and attention_dp_size as read) of one ok row of a validate output."""
    row = {key: "" if _missing(value) else str(value) for key, value in record.items()}
    where = f"row {row.get('id', '')}"
    try:
        gpus, clients = row_gpus(row, where)
        if row.get("mode", "").strip() == "disagg":
            return gpus, clients, math.nan, math.nan
        return gpus, clients, tensor_parallel(row, where), attention_ranks(row, where)
    except Unsupported:  # an ok row was read this way to be simulated; anything else is left out of the ranking
        return math.nan, math.nan, math.nan, math.nan


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def label(row: pd.Series) -> str:
    """A readable deployment as simulated: mode, layout per worker, clients, weights, GPUs (``agg TP4·DP4·EP16 c256
    fp8 (16 GPUs)``, ``disagg 1×TP1·DP16 + 3×TP16 c6 fp8 (64 GPUs)``; an aggregated row's ``tp_size`` and
    ``attention_dp_size`` as read, so a stated ``tp_size`` 64 with ``moe_tp_size`` 8 × ``moe_ep_size`` 8 is ``agg
    TP8·EP8 … (8 GPUs)``, a TensorRT-LLM ``attention_dp_size`` 64 with 8 × 8 ``agg TP1·DP8·EP8 … (8 GPUs)``)."""
    if row["mode"] == "disagg":
        layout = " + ".join(f"{_int(row.get(f'{role}_num_workers'))}×{_layout(row, f'{role}_')}"
                            for role in ("prefill", "decode"))
    else:
        layout = _layout(row, "")
    weights = next((str(row[key]) for key in ("gemm_quant_mode", "precision")
                    if key in row and not _missing(row[key]) and str(row[key]).strip()), "bf16")
    return f"{row['mode']} {layout} c{_int(row['clients'])} {weights} ({_int(row['gpus'])} GPUs)"


def _layout(row: pd.Series, prefix: str) -> str:
    def read(key: str) -> object:  # an aggregated row's degree as simulated where validate read it, else as stated
        value = row.get(f"read_{key}") if not prefix else None
        return row.get(f"{prefix}{key}") if _missing(value) else value

    parts = [f"TP{_int(read('tp_size'))}"]
    for key, name in (("pp_size", "PP"), ("attention_dp_size", "DP"), ("moe_ep_size", "EP")):
        if _int(read(key)) > 1:
            parts.append(f"{name}{_int(read(key))}")
    return "·".join(parts)


def _int(value: object) -> int:
    return 0 if _missing(value) or str(value).strip() == "" else int(float(str(value)))


def speed_floors(speeds: np.ndarray) -> np.ndarray:
    """0 and the geometric midpoints of consecutive distinct speeds (module docstring)."""
    distinct = np.unique(speeds)
    return np.concatenate(([0.0], np.sqrt(distinct[:-1] * distinct[1:])))


def group_decisions(rows: pd.DataFrame) -> list[dict]:
    """One decision per speed floor of a group's rows (with :data:`RATES`); see the module docstring."""
    real_speed, real_rate = rows["measured_tok_s_user"], rows["measured_tok_s_gpu"]
    seen_speed, seen_rate = rows["predicted_tok_s_user"], rows["predicted_tok_s_gpu"]
    decisions = []
    for floor in speed_floors(real_speed.to_numpy(float)):
        real = rows[real_speed >= floor]
        best = real.loc[real["measured_tok_s_gpu"].idxmax()]
        good = (real_speed >= floor) & (real_rate >= HIT_SHARE * best["measured_tok_s_gpu"])
        seen = rows[seen_speed >= floor]
        decision = {
            "floor_tok_s_user": floor, "deployments": len(rows), "measured_eligible": len(real),
            "predicted_eligible": len(seen), "best": label(best), "best_id": best.get("id"),
            "best_tok_s_gpu": best["measured_tok_s_gpu"], "best_tok_s_user": best["measured_tok_s_user"],
            "random": good[real.index].mean(), "random_predicted": good[seen.index].mean() if len(seen) else 0.0,
        }
        if seen.empty:
            decision.update(outcome="none", loss=math.nan)
        else:
            pick = seen.loc[seen_rate[seen.index].idxmax()]
            share = pick["measured_tok_s_gpu"] / best["measured_tok_s_gpu"]
            outcome = ("too_slow" if pick["measured_tok_s_user"] < floor else "hit" if share >= HIT_SHARE
                       else "miss")
            decision.update({
                "pick": label(pick), "pick_id": pick.get("id"), "pick_tok_s_gpu": pick["measured_tok_s_gpu"],
                "pick_tok_s_user": pick["measured_tok_s_user"],
                "pick_predicted_tok_s_gpu": pick["predicted_tok_s_gpu"],
                "pick_predicted_tok_s_user": pick["predicted_tok_s_user"],
                "outcome": outcome, "loss": 1 - share if outcome == "miss" else math.nan})
        decisions.append(decision)
    return decisions


def rank(frame: pd.DataFrame) -> pd.DataFrame:
    """Every decision (module docstring) of a validate output, with the scope (``all`` / ``holdout``), the group's
    columns and its ``modes`` (agg, disagg or agg+disagg)."""
    if "gpus" not in frame.columns:
        frame = row_rates(frame)
    ok = frame[(frame["status"] == "ok") & frame[RATES].notna().all(axis=1)]
    records = []
    for scope, rows in (("all", ok), ("holdout", ok[ok["subset"] == "holdout"])):
        for key, group in rows.groupby(GROUP, sort=True):
            if len(group) < 2:
                continue
            modes = "+".join(sorted(set(group["mode"])))
            for decision in group_decisions(group):
                records.append({"scope": scope, **dict(zip(GROUP, key, strict=True)), "modes": modes, **decision})
    columns = ["scope", *GROUP, "modes", "floor_tok_s_user", "deployments", "measured_eligible",
               "predicted_eligible", "outcome", "loss", "best", "best_id", "best_tok_s_gpu", "best_tok_s_user",
               "pick", "pick_id", "pick_tok_s_gpu", "pick_tok_s_user", "pick_predicted_tok_s_gpu",
               "pick_predicted_tok_s_user", "random", "random_predicted"]
    return pd.DataFrame(records, columns=columns)


def summary_table(decisions: pd.DataFrame) -> pd.DataFrame:
    """Per scope, overall, per backend and per group modes: groups, decisions, hit rate, the misses by kind, the
    median and p90 throughput lost on the misses (fast enough, below 90%), and the random baselines' hit rates."""
    stats = {}
    for scope, part in decisions.groupby("scope", sort=False):
        slices = [("all", part)] + [(f"backend {name}", some) for name, some in part.groupby("backend")]
        slices += [(f"modes {name}", some) for name, some in part.groupby("modes")]
        for name, some in slices:
            losses, outcome = some["loss"].dropna(), some["outcome"]
            stats[(scope, name)] = {
                "groups": len(some.drop_duplicates(GROUP)), "decisions": len(some),
                "hit_pct": 100 * (outcome == "hit").mean(), "miss": int((outcome == "miss").sum()),
                "too_slow": int((outcome == "too_slow").sum()), "none": int((outcome == "none").sum()),
                "loss_median_pct": 100 * losses.median() if len(losses) else math.nan,
                "loss_p90_pct": 100 * losses.quantile(0.9) if len(losses) else math.nan,
                "random_pct": 100 * some["random"].mean(),
                "random_predicted_pct": 100 * some["random_predicted"].mean(),
            }
    table = pd.DataFrame.from_dict(stats, orient="index")
    table.index.names = ["scope", "slice"]
    return table.round(1)


def ranking_report(decisions: pd.DataFrame) -> str:
    """The summary table with a line on what its columns mean."""
    if decisions.empty:
        return "== ranking: no group of two or more ok rows to rank =="
    return "\n".join([
        "== ranking: is the deployment predicted best (output tokens/s per GPU at a per-user speed floor) within "
        "10% of the measured best? ==",
        summary_table(decisions).to_string(),
        "hit: picked and measured fast enough and within 10%; miss: fast enough, below (loss: 1 - pick / best); "
        "too_slow: measured below the floor; none: nothing predicted fast enough; random: a uniform pick among the "
        "rows measured fast enough; random_predicted: among those predicted fast enough."])
