"""Fitted kernel parameters per GPU generation, and which generation's fit a GPU without measurements takes.

A hardware profile names its ``generation``; every fitted parameter the profile does not set itself comes from the
generation's file, ``hardware_profiles/generations/NAME.yaml``: either its ``fit`` (the parameters, grouped as a
profile's :class:`~simulator.catalog.hardware_fit.HardwareFit`, with where they were measured in the file's
comments; ``llmsim calibrate`` reproduces them) or, for a generation without measurements, ``borrows_from`` — the
generation whose fit it takes (the newest earlier generation of the same vendor that has measurements). Values
tuned toward guesses of an unmeasured part are never used: Blackwell predictions are its spec sheet with the Hopper
fit. A new generation is one new file.

The share of a prefill kernel's softmax exponentials not hidden behind its tensor cores
(``fit.prefill_attention.exp_exposed``, priced at the GPU's spec-sheet ``sfu_exp_tera_per_s``) is told apart from its
FLOP rate only by timings of several head widths: Hopper's tables hold widths 64–512 (0.7 exposed, pooled;
0.5–0.65 for each framework), Ampere's width 128 only, so Ampere's is none (its FLOP rate carries its exponentials)
and a GPU that borrows Hopper's fit (Blackwell) pays Hopper's share of its own exponential rate. A profile that
does not state that rate keeps the balance of the GPU its generation's fit comes from (``sfu_exp_per_bf16_flop``:
exponentials per 16-bit tensor FLOP), so that a fit whose FLOP rate was fitted beside its exponentials does not
price them as free on a GPU whose spec sheet is silent about them. Likewise each fit names the SMs of the GPU it
was fitted on (``fit.sm_count``): the attention kernels' whole-GPU costs per work item are that GPU's SMs' time,
and another GPU spreads the same work over its own (:func:`simulator.cost.attention.spread_over_sms`).
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.catalog.hardware_fit import HardwareFit, grouped
from simulator.catalog.loading import read_mapping, validate
from simulator.catalog.paths import HARDWARE_DIR
from simulator.errors import LLMSimError

GENERATIONS_DIR = HARDWARE_DIR / "generations"


class GenerationFile(BaseModel):
    """One ``hardware_profiles/generations/NAME.yaml``: a generation's ``fit`` with the balance of exponentials to
    16-bit tensor FLOPs of the GPU it was fitted on, or the generation it ``borrows_from``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str
    sfu_exp_per_bf16_flop: float | None = Field(
        default=None, ge=0, description="the exponentials per 16-bit tensor FLOP of the GPU the fit comes from (its "
        "spec sheet's sfu_exp_tera_per_s / bf16 peak), which a GPU of the generation whose spec sheet is silent "
        "about its exponentials keeps")
    fit: HardwareFit | None = None
    borrows_from: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, data: Any) -> Any:
        """A fit in the flat names of before the groups, which held the balance of exponentials too (a file that
        gives both a fit and borrows_from is refused first: neither is read)."""
        if not isinstance(data, dict) or not isinstance(data.get("fit"), dict):
            return data
        if data.get("borrows_from") is not None:
            raise ValueError("give either fit (the generation's parameters) or borrows_from (a measured generation)")
        fit = dict(data["fit"])
        data = {**data, "fit": fit}
        if "sfu_exp_per_bf16_flop" in fit and "sfu_exp_per_bf16_flop" not in data:
            data["sfu_exp_per_bf16_flop"] = fit.pop("sfu_exp_per_bf16_flop")
        data["fit"] = grouped(fit, f"generation {data.get('name')}: fit")
        return data

    @model_validator(mode="after")
    def _one_source(self) -> GenerationFile:
        if (self.fit is None) == (self.borrows_from is None):
            raise ValueError("give either fit (the generation's parameters) or borrows_from (a measured generation)")
        if (self.fit is None) != (self.sfu_exp_per_bf16_flop is None):
            raise ValueError("sfu_exp_per_bf16_flop goes with a fit (the balance of the GPU it was fitted on)")
        return self


@functools.cache
def _generations() -> dict[str, GenerationFile]:
    """Every generation file by name; a name that is not its file's stem, or a borrowed generation without a fit of
    its own, is an error naming the file."""
    files: dict[str, GenerationFile] = {}
    for path in sorted(GENERATIONS_DIR.glob("*.yaml")):
        entry = validate(GenerationFile, read_mapping(path), str(path))
        if entry.name != path.stem:
            raise LLMSimError(f"{path}: name: {entry.name!r} must be the file's stem {path.stem!r}")
        files[entry.name] = entry
    fitted = sorted(name for name, entry in files.items() if entry.fit is not None)
    for name, entry in files.items():
        if entry.borrows_from is not None and entry.borrows_from not in fitted:
            raise LLMSimError(f"{GENERATIONS_DIR / name}.yaml: borrows_from: {entry.borrows_from!r} is not a "
                              f"generation with a fit (fitted: {', '.join(fitted)})")
    return files


def borrowed_generation(generation: str) -> str | None:
    """The generation whose fit ``generation`` takes, where it has none of its own (None otherwise)."""
    entry = _generations().get(generation)
    return entry.borrows_from if entry is not None else None


def _fitted(generation: str) -> GenerationFile:
    """The file of the generation whose fit ``generation`` takes: its own, or the one it borrows from (raises
    ``KeyError`` for an unknown generation)."""
    entry = _generations()[generation]
    return entry if entry.fit is not None else _generations()[entry.borrows_from or ""]


def generation_fit(generation: str) -> HardwareFit:
    """The fitted parameters a GPU of ``generation`` takes (raises ``KeyError`` for an unknown generation)."""
    fit = _fitted(generation).fit
    assert fit is not None  # checked when the files were read
    return fit


def generation_exp_balance(generation: str) -> float:
    """The exponentials per 16-bit tensor FLOP of the GPU whose fit ``generation`` takes (``sfu_exp_per_bf16_flop``),
    what a GPU of it whose spec sheet is silent about its exponential rate keeps (raises ``KeyError`` for an unknown
    generation)."""
    balance = _fitted(generation).sfu_exp_per_bf16_flop
    assert balance is not None  # checked when the files were read
    return balance


def generation_names() -> list[str]:
    return sorted(_generations())
