"""Expected error bands: what ``llmsim validate --runs`` measured on held-out benchmark runs, per slice of the
predictions it judged, and the band a new prediction falls in.

A slice is (GPU generation, engine profile, model family, mode): the generation whose fitted parameters priced the
GPU (:attr:`simulator.catalog.HardwareSpec.generation`), the engine profile's name, the model's family
(:func:`model_family`) and ``agg`` (prefill and decode on the same replicas) or ``disagg``. Its band is the median
and 90th percentile of the absolute percentage errors of mean TTFT and TPOT over the slice's held-out rows that ran
(:meth:`simulator.fidelity.split.Split.is_fit_row`: no fit or choice was made on them, nor on a copy of their
measurement), with the row count and the GPUs they were measured on. A slice of fewer than :data:`MIN_RUNS` such
rows states no band.

The bands ship in ``engine_profiles/accuracy.csv`` (:data:`BANDS_PATH`), written by ``llmsim validate --runs FILE
--bands PATH``: the slices of FILE replace the file's rows of the same slices (a slice FILE measures too thinly for
a band loses the one it had), the others are kept, so the files of several GPUs add up. ``llmsim run``, ``plan`` and
``capacity`` print the band of the slice a prediction falls in (:func:`band_line`), and say so when it falls outside
every validated slice.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pandas as pd

from simulator.catalog import ModelSpec, load_engine, load_hardware, load_model
from simulator.catalog.engines import ENGINE_DIR
from simulator.catalog.generations import borrowed_generation
from simulator.config.experiment import ExperimentConfig
from simulator.errors import LLMSimError
from simulator.fidelity.silicon import model_path
from simulator.fidelity.systems import SYSTEMS

BANDS_PATH = ENGINE_DIR / "accuracy.csv"
MIN_RUNS = 10  # held-out rows a slice needs for its band
KEY = ["generation", "engine", "family", "mode"]
COLUMNS = [*KEY, "runs", "gpus", "ttft_median_pct", "ttft_p90_pct", "tpot_median_pct", "tpot_p90_pct"]
MODES = {"colocated": "agg", "disaggregated": "disagg"}  # cluster.kind -> the runs files' mode


def model_family(spec: ModelSpec) -> str:
    """``mla`` (latent attention anywhere, priced by the MLA kernels: DeepSeek-V3, Kimi-K2, GLM-5), else ``hybrid``
    (layers that keep a fixed state instead of KV: Qwen3.5's linear attention, Nemotron-H's Mamba), else ``moe``
    (routed experts), else ``dense`` — read from the layer kinds' hooks, so a new kind falls in its family."""
    attention = [group.attention for group in spec.layers]
    if any(layer.kernel_fit == "latent" for layer in attention):
        return "mla"
    if any(layer.state_elements() > 0 for layer in attention):
        return "hybrid"
    return "moe" if spec.is_moe else "dense"


def measured_bands(frame: pd.DataFrame, model_dir: Path | None = None) -> pd.DataFrame:
    """The bands (:data:`COLUMNS`) of every slice of a ``validate_runs`` frame's held-out rows that ran, each row's
    model found as the validation found it (``model_dir`` first); a slice of fewer than :data:`MIN_RUNS` rows has
    its row count and no band (NaN errors: measured, too thinly to state one)."""
    rows = frame[(frame["status"] == "ok") & (frame["subset"] == "holdout")].copy()
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    rows["generation"] = [_generation(SYSTEMS[system]) for system in rows["system"]]
    rows["family"] = [_family(model_path(str(model), model_dir)) for model in rows["model_path"]]
    records = []
    for key, group in rows.groupby(KEY, sort=True):
        thin = len(group) < MIN_RUNS
        records.append({**dict(zip(KEY, key, strict=True)), "runs": len(group),
                        "gpus": " ".join(sorted(SYSTEMS[s] for s in group["system"].unique())),
                        **{f"{metric}_{stat}_pct": math.nan if thin
                           else round(100 * group[f"{metric}_error"].quantile(q), 1)
                           for metric in ("ttft", "tpot") for stat, q in (("median", 0.5), ("p90", 0.9))}})
    return pd.DataFrame(records, columns=COLUMNS)


def with_band(bands: pd.DataFrame) -> pd.DataFrame:
    """The slices of ``bands`` that state a band (:func:`measured_bands` keeps thin slices without one)."""
    return bands[bands["ttft_median_pct"].notna()]


def update_bands(path: Path, bands: pd.DataFrame) -> pd.DataFrame:
    """``path``'s bands with every slice of ``bands`` replaced by its new band, or dropped where the new measurement
    of it states none (an old band of a slice now measured too thinly is not kept), written back sorted by slice;
    returns them."""
    old = read_bands(path) if path.is_file() else pd.DataFrame(columns=COLUMNS)
    keys = set(map(tuple, bands[KEY].to_numpy())) if len(bands) else set()
    kept = old[[tuple(row) not in keys for row in old[KEY].to_numpy()]] if len(old) else old
    merged = pd.concat([frame for frame in (kept, with_band(bands)) if len(frame)] or [old.iloc[:0]],
                       ignore_index=True)
    merged = merged.sort_values(KEY, kind="stable").reset_index(drop=True)
    merged.to_csv(path, index=False)
    read_bands.cache_clear()
    return merged


@functools.cache
def read_bands(path: Path = BANDS_PATH) -> pd.DataFrame:
    """The bands of ``path`` (an empty table when it is absent); a file without the columns is an LLMSimError."""
    if not path.is_file():
        return pd.DataFrame(columns=COLUMNS)
    try:
        bands = pd.read_csv(path, dtype={"gpus": str})
    except (OSError, ValueError) as exc:
        raise LLMSimError(f"{path}: cannot read the accuracy bands: {exc}") from None
    missing = [column for column in COLUMNS if column not in bands.columns]
    if missing:
        raise LLMSimError(f"{path}:1: missing column(s) {missing}; accuracy bands have {COLUMNS}")
    return bands


def prediction_slice(config: ExperimentConfig) -> dict[str, str]:
    """The slice (:data:`KEY`) an experiment's predictions fall in, and its GPU's catalog name (``gpu``)."""
    hardware = load_hardware(config.hardware)
    return {"generation": hardware.generation, "engine": load_engine(config.engine).name,
            "family": model_family(load_model(config.model)), "mode": MODES[config.cluster.kind],
            "gpu": hardware.name}


def band_line(config: ExperimentConfig, path: Path = BANDS_PATH) -> str:
    """One line: the expected error of ``config``'s mean TTFT and TPOT — its slice's band, with how many held-out
    runs measured it and whether on this GPU or another of its generation — or that the slice was never validated,
    naming the validated slices of its generation and engine, and, for a generation without measurements, whose fit
    priced it."""
    where = prediction_slice(config)
    label = " × ".join(where[key] for key in KEY)
    bands = read_bands(path)
    match = bands[(bands[KEY] == pd.Series({key: where[key] for key in KEY})).all(axis=1)] if len(bands) else bands
    if len(match):
        band = match.iloc[0]
        gpus = str(band["gpus"]).split()
        measured = "this GPU" if where["gpu"] in gpus else f"{', '.join(gpus)}; this GPU from its spec sheet"
        return (f"expected error ({label}: {int(band['runs'])} held-out benchmark runs, {measured}): mean TTFT "
                f"±{band['ttft_median_pct']:.0f}% median, ±{band['ttft_p90_pct']:.0f}% p90; mean TPOT "
                f"±{band['tpot_median_pct']:.0f}% median, ±{band['tpot_p90_pct']:.0f}% p90")
    near = bands[(bands["generation"] == where["generation"]) & (bands["engine"] == where["engine"])] if len(
        bands) else bands
    validated = ", ".join(f"{row.family} × {row.mode}" for row in near.itertuples()) or "none"
    borrowed = borrowed_generation(where["generation"])
    fit = (f"; {where['generation']} has no measurements of its own: its fitted parameters are {borrowed}'s"
           if borrowed is not None else "")
    return (f"expected error: not validated — no held-out benchmark runs of {label} (validated for "
            f"{where['generation']} × {where['engine']}: {validated}){fit}")


@functools.cache
def _generation(hardware: str) -> str:
    return load_hardware(hardware).generation


@functools.cache
def _family(model: str) -> str:
    try:
        return model_family(load_model(model))
    except LLMSimError:
        return "unknown"
