"""The fit and held-out halves of a runs file (the format of ``../shared/data/silicon``), and the copies of one run
a file may hold.

A source may repeat a run under other ids — under other names of one architecture (DeepSeek-R1 and -V3), other
deployment labels, other versions — and may write a copy to fewer digits than the run it copies (the B200 file holds
93 rows of two decimals, each the two-decimal rounding of a row written to 12–15). Two rows are copies of one run
(:meth:`Measurement.same_run`) when they state the same GPU and the same of the two means (TTFT, TPOT), and each
mean written by both agrees to the digits the coarser of the two writes — the finer rounded half up to that many
decimals is the coarser (``134.73297602613457`` and ``134.73``; ``41.25`` and ``41.250``) — or, written to a
double's full precision, within :data:`NOISE` of each other (``30.104162261016178`` and ``30.104162261016175``: one
mean summed in another order: 72 and 12 pairs of distinct values in the B200 and H100 files, and between 1e-12 and
1e-6 only one more, a two-decimal copy). Two runs do not measure the same two means to the digits a copy keeps: a
measurement is timing noise in its last digits, and both means must agree. Copies form groups (the relation closed
over chains: a coarse row that could be the copy of two fine rows joins them), and a group of copies is one run
(:func:`copy_groups`).

A row is in the fit half when its ``id`` has an even CRC-32 or when a row of its group has such an id
(:class:`Split`): a held-out row is a run no fit-half row carries. Copies of one run thus never sit on both sides,
and the id's half still decides for every row without copies (about half of them); a run held by k rows is held
out with probability 2⁻ᵏ, so the held-out half is the smaller and leans to runs the source holds once — the price
of keeping every fit made on the ids' halves valid: the rows it saw stay in the fit half, and a split that finds
more copies only moves rows into it.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation

import numpy as np

# the systems whose rows fits and choices were made on: H100 (the engine profiles' fixed costs and the settings of
# RunSettings) and B200 (Blackwell, whose kernel fits come from its tables); every other GPU's rows are held out
FITTED_SYSTEMS = ("h100_sxm", "b200_sxm")
MEASURED = ("silicon_ttft_ms", "silicon_tpot_ms")  # a row's measured mean TTFT and TPOT
NOISE = Decimal("1e-12")  # relative: two means closer than this are one mean (a double carries ~16 digits)
# rounding to the coarser's digits is exact for values of up to 400 digits there (longer ones agree within NOISE only)
_ROUNDING = Context(prec=400, rounding=ROUND_HALF_UP)
_FINEST = 6  # the search's finest class: rows written to more decimals share one (a window of 5e-7 and the noise)


def _stated(text: str | None) -> Decimal | None:
    """A cell's number as written (its digits kept), or None where it states none (empty, not a number, infinite, or
    beyond a double's range: no mean of milliseconds is)."""
    try:
        value = Decimal((text or "").strip())
    except InvalidOperation:
        return None
    return value if value.is_finite() and math.isfinite(float(value)) else None


def _decimals(value: Decimal) -> int:
    """How many decimals a number is written to (``134.73`` 2, ``41.250`` 3, ``12`` and ``1E+2`` 0)."""
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)  # finite (_stated)
    return max(0, -exponent)


def _reach(value: float | np.ndarray, decimals: int | np.ndarray = 0) -> float | np.ndarray:
    """How far, as floats, a copy's mean can lie from ``value`` when the coarser of the two is written to
    ``decimals``: half its last digit, plus the noise allowance and the floats' own rounding (a bound: the search
    looks this far, :meth:`Measurement.same_run` decides)."""
    return 0.5 * 10.0 ** -np.asarray(decimals, dtype=float) + 2 * float(NOISE) * (np.abs(value) + 1.0)


def _agree(a: Decimal | None, b: Decimal | None) -> bool:
    """Whether two cells state one mean (the module docstring): both unstated, or both stated and equal at the
    coarser's decimals or within the noise allowance."""
    if a is None or b is None:
        return a is b
    if abs(a - b) <= NOISE * max(abs(a), abs(b)):
        return True
    step = Decimal(1).scaleb(-min(_decimals(a), _decimals(b)))
    try:
        return a.quantize(step, context=_ROUNDING) == b.quantize(step, context=_ROUNDING)
    except InvalidOperation:  # more digits than the context holds: not the same as written, not a copy
        return False


@dataclass(frozen=True)
class Measurement:
    """What a row measured: its GPU and its mean TTFT and TPOT as written, digits kept (None where not stated)."""

    system: str
    ttft: Decimal | None
    tpot: Decimal | None
    # the stated means as floats and the decimals each is written to, where the search for copies looks
    floats: tuple[float, ...] = field(init=False, compare=False, repr=False)
    decimals: tuple[int, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        stated = [value for value in (self.ttft, self.tpot) if value is not None]
        object.__setattr__(self, "floats", tuple(float(value) for value in stated))
        object.__setattr__(self, "decimals", tuple(_decimals(value) for value in stated))

    @property
    def stated(self) -> tuple[str, bool, bool]:
        """Which GPU and which means: rows that differ in it are never copies."""
        return self.system, self.ttft is not None, self.tpot is not None

    def same_run(self, other: Measurement) -> bool:
        """Whether two rows' measurements are copies of one run (the module docstring)."""
        return self.stated == other.stated and _agree(self.ttft, other.ttft) and _agree(self.tpot, other.tpot)


def measurement(row: dict[str, str]) -> Measurement | None:
    """What a row measured, or None when it states neither mean (such a row is a run of its own)."""
    ttft, tpot = (_stated(row.get(column)) for column in MEASURED)
    if ttft is None and tpot is None:
        return None
    return Measurement((row.get("system") or "").strip(), ttft, tpot)


class _Index:
    """Measurements searchable for copies: per (GPU, means stated) and per decimals the first stated mean is written to
    (up to :data:`_FINEST`), their means as floats and decimals as written, sorted by the first mean. A search
    looks, in each such class, as far as a copy written to the coarser of its and the class's decimals can lie
    (:func:`_reach`: full-precision rows search a hair's breadth of each other, two-decimal ones ±0.005), keeps
    those whose every mean lies within reach and confirms each with :meth:`Measurement.same_run` — exact work only
    for rows that could be copies."""

    def __init__(self, measurements: Iterable[tuple[int, Measurement]]):
        classes: dict[tuple[tuple[str, bool, bool], int], list[tuple[int, Measurement]]] = {}
        for index, item in sorted(measurements, key=lambda entry: (entry[1].floats, entry[0])):
            classes.setdefault((item.stated, min(item.decimals[0], _FINEST)), []).append((index, item))
        self.classes: dict[tuple[str, bool, bool], list[tuple[int, np.ndarray, np.ndarray, list]]] = {}
        for (stated, digits), entries in sorted(classes.items(), key=lambda entry: entry[0][1]):
            self.classes.setdefault(stated, []).append((digits, np.array([item.floats for _, item in entries]),
                                                        np.array([item.decimals for _, item in entries]), entries))

    def copies(self, item: Measurement) -> list[int]:
        """The indices of the measurements that are copies of ``item``'s run."""
        found = []
        first = item.floats[0]
        for digits, floats, decimals, entries in self.classes.get(item.stated, []):
            widest = float(_reach(first, min(digits, item.decimals[0])))
            start = int(np.searchsorted(floats[:, 0], first - widest, side="left"))
            stop = int(np.searchsorted(floats[:, 0], first + widest, side="right"))
            coarser = np.minimum(decimals[start:stop], item.decimals)
            near = (np.abs(floats[start:stop] - item.floats) <= _reach(np.asarray(item.floats), coarser)).all(axis=1)
            found += [entries[start + k][0] for k in np.flatnonzero(near) if item.same_run(entries[start + k][1])]
        return found


def copy_groups(rows: Sequence[dict[str, str]]) -> list[int]:
    """Each row's group of copies (the module docstring), as the smallest index of the rows in it; a row that states
    no measurement is a group of its own. Rows that write the same cells are searched for once."""
    found = [measurement(row) for row in rows]
    parent = list(range(len(rows)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(i: int, j: int) -> None:
        a, b = root(i), root(j)
        parent[max(a, b)] = min(a, b)

    first_of: dict[tuple[str, str, str], int] = {}  # rows written alike, digits and all: one search for them
    for i, item in enumerate(found):
        if item is not None:
            join(i, first_of.setdefault((item.system, str(item.ttft), str(item.tpot)), i))
    index = _Index((i, found_item) for i in first_of.values() if (found_item := found[i]) is not None)
    for i in first_of.values():
        item = found[i]
        assert item is not None  # only stated measurements were keyed
        for j in index.copies(item):
            join(i, j)
    return [root(i) for i in range(len(rows))]


def _even_id(row: dict[str, str]) -> bool:
    """Whether a row's ``id`` has an even CRC-32: the half its id alone puts it in."""
    return zlib.crc32((row.get("id") or "").strip().encode()) % 2 == 0


@dataclass(frozen=True)
class Split:
    """The two halves of a runs file's rows (the module docstring): a row of the file is in the fit half when its
    ``id`` has an even CRC-32 or when a row of its group of copies has such an id; a row from outside the file, when
    its id is even or it is a copy of a fit-half row of the file (it joins no group)."""

    groups: list[int]  # each row's group of copies, in the order the split was made of (:func:`copy_groups`)
    fitted: _Index  # the measurements of the fit half's rows

    @classmethod
    def of(cls, rows: Iterable[dict[str, str]]) -> Split:
        """The split of a file's rows (all of them: a copy outside a subset still decides its half)."""
        rows = list(rows)
        groups = copy_groups(rows)
        even = {group for row, group in zip(rows, groups, strict=True) if _even_id(row)}
        return cls(groups, _Index((i, item) for i, (row, group) in enumerate(zip(rows, groups, strict=True))
                                  if group in even and (item := measurement(row)) is not None))

    def in_fit_half(self, row: dict[str, str]) -> bool:
        """Whether the row is in the fit half (the class docstring): for a row of the file the same as its group's
        half, since the fit half's index holds every row of a group with an even id, and a row that is a copy of one
        of them is in that group."""
        item = measurement(row)
        return _even_id(row) or (item is not None and bool(self.fitted.copies(item)))

    def is_fit_row(self, row: dict[str, str]) -> bool:
        """The rows this repository's fits and choices are made on: rows of a system measured for fitting
        (:data:`FITTED_SYSTEMS`) in the fit half. The others — every row of another GPU, whatever its id — are held
        out and reported apart."""
        return (row.get("system") or "").strip() in FITTED_SYSTEMS and self.in_fit_half(row)
