"""Error measures shared by every data family: absolute percentage error, medians and p90s per group."""

from __future__ import annotations

import numpy as np
import pandas as pd


def ape(predicted: pd.Series, measured: pd.Series) -> pd.Series:
    """|predicted − measured| / measured."""
    return (predicted - measured).abs() / measured


def summarize_errors(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Median and p90 absolute percentage error (and row count) per group."""
    grouped = frame.groupby(by)["error"]
    return pd.DataFrame({
        "rows": grouped.size(),
        "median_error_pct": grouped.median() * 100,
        "p90_error_pct": grouped.quantile(0.9) * 100,
    }).round(1)


def overall(frame: pd.DataFrame) -> tuple[float, float]:
    return float(np.median(frame["error"])), float(np.quantile(frame["error"], 0.9))
