"""The fit and held-out halves of a runs file (the format of ``../shared/data/silicon``), and the copies of one run
a file may hold.

A source may repeat a run under other ids — under other names of one architecture (DeepSeek-R1 and -V3), other
deployment labels, other versions — and may write a copy to fewer digits than the run it copies (the B200 file holds
93 rows of two decimals, each the two-decimal rounding of a row written to 9-15). Two rows are copies of one run
(:meth:`Measurement.same_run`) when they state the same GPU and the same of the two means (TTFT, TPOT), and each
mean written by both agrees to the digits the coarser of the two writes: the finer rounded half up to that many
decimals is the coarser (``134.73297602613457`` and ``134.73``; ``41.25`` and ``41.250``). Two runs do not measure
the same two means to the digits a copy keeps: a measurement is timing noise in its last digits, and both means
must agree. Copies form groups (the relation closed over chains: a coarse row that could be the copy of two fine
rows joins them), and a group of copies is one run (:func:`distinct_measurements`).

A row is in the fit half when its ``id`` has an even CRC-32 or when a row of its group has such an id
(:class:`Split`): a held-out row is a run no fit-half row carries. Copies of one run thus never sit on both sides,
and the id's half still decides for every row without copies (about half of them); a run held by k rows is held
out with probability 2⁻ᵏ, so the held-out half is the smaller and leans to runs the source holds once — the price
of keeping every fit made on the ids' halves valid: the rows it saw stay in the fit half, and a split that finds
more copies only moves rows into it.
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation

# the systems whose rows fits and choices were made on: H100 (the engine profiles' fixed costs and the settings of
# RunSettings) and B200 (Blackwell, whose kernel fits come from its tables); every other GPU's rows are held out
FITTED_SYSTEMS = ("h100_sxm", "b200_sxm")
MEASURED = ("silicon_ttft_ms", "silicon_tpot_ms")  # a row's measured mean TTFT and TPOT
# two means that agree to the digits of the coarser differ by at most half its last digit; a value written to no
# decimals is the widest a search for copies looks (0.5 ms either side, and a hair for binary rounding)
_WIDEST = 0.5 + 1e-9
_ROUNDING = Context(prec=400, rounding=ROUND_HALF_UP)  # exact for any finite value a cell can write at its digits


def _stated(text: str | None) -> Decimal | None:
    """A cell's number as written (its digits kept), or None where it states none (empty, not a number, infinite)."""
    try:
        value = Decimal((text or "").strip())
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def _decimals(value: Decimal) -> int:
    """How many decimals a number is written to (``134.73`` 2, ``41.250`` 3, ``12`` and ``1E+2`` 0)."""
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)  # finite (_stated)
    return max(0, -exponent)


def _agree(a: Decimal | None, b: Decimal | None) -> bool:
    """Whether two cells state one mean: both unstated, or both stated and equal at the coarser's decimals."""
    if a is None or b is None:
        return a is b
    step = Decimal(1).scaleb(-min(_decimals(a), _decimals(b)))
    try:
        return a.quantize(step, context=_ROUNDING) == b.quantize(step, context=_ROUNDING)
    except InvalidOperation:  # more digits than the context holds: only an exact match is a copy
        return a == b


@dataclass(frozen=True)
class Measurement:
    """What a row measured: its GPU and its mean TTFT and TPOT as written, digits kept (None where not stated)."""

    system: str
    ttft: Decimal | None
    tpot: Decimal | None

    @property
    def stated(self) -> tuple[str, bool, bool]:
        """Which GPU and which means: rows that differ in it are never copies."""
        return self.system, self.ttft is not None, self.tpot is not None

    @property
    def position(self) -> float:
        """Where a search for its copies looks: its first stated mean (copies' differ by at most ``_WIDEST``)."""
        first = self.ttft if self.ttft is not None else self.tpot
        assert first is not None  # measurement() returns None for a row that states neither
        return float(first)

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
    """Measurements searchable for copies: per (GPU, means stated), sorted by :attr:`Measurement.position`."""

    def __init__(self, measurements: Iterable[tuple[int, Measurement]]):
        self.groups: dict[tuple[str, bool, bool], tuple[list[float], list[tuple[int, Measurement]]]] = {}
        for index, item in sorted(measurements, key=lambda entry: (entry[1].position, entry[0])):
            positions, items = self.groups.setdefault(item.stated, ([], []))
            positions.append(item.position)
            items.append((index, item))

    def copies(self, item: Measurement) -> list[int]:
        """The indices of the measurements that are copies of ``item``'s run."""
        positions, items = self.groups.get(item.stated, ([], []))
        start = bisect.bisect_left(positions, item.position - _WIDEST)
        stop = bisect.bisect_right(positions, item.position + _WIDEST)
        return [index for index, other in items[start:stop] if item.same_run(other)]


def copy_groups(rows: Sequence[dict[str, str]]) -> list[int]:
    """Each row's group of copies (the module docstring), as the smallest index of the rows in it; a row that states
    no measurement is a group of its own."""
    found = [measurement(row) for row in rows]
    parent = list(range(len(rows)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    index = _Index((i, item) for i, item in enumerate(found) if item is not None)
    for i, item in enumerate(found):
        if item is not None:
            for j in index.copies(item):
                a, b = root(i), root(j)
                parent[max(a, b)] = min(a, b)
    return [root(i) for i in range(len(rows))]


def distinct_measurements(rows: Iterable[dict[str, str]]) -> int:
    """How many runs ``rows`` hold: their groups of copies (:func:`copy_groups`), a row that states none alone."""
    return len(set(copy_groups(list(rows))))


def _even_id(row: dict[str, str]) -> bool:
    """Whether a row's ``id`` has an even CRC-32: the half its id alone puts it in."""
    return zlib.crc32((row.get("id") or "").encode()) % 2 == 0


@dataclass(frozen=True)
class Split:
    """The two halves of a runs file's rows (the module docstring): a row is in the fit half when its ``id`` has an
    even CRC-32 or when it is a copy of a run that a row of the file with such an id carries, directly or through
    other copies."""

    fitted: _Index  # the measurements of every row in a group of copies that holds an even id

    @classmethod
    def of(cls, rows: Iterable[dict[str, str]]) -> Split:
        """The split of a file's rows (all of them: a copy outside a subset still decides its half)."""
        rows = list(rows)
        groups = copy_groups(rows)
        even = {group for row, group in zip(rows, groups, strict=True) if _even_id(row)}
        return cls(_Index((i, item) for i, (row, group) in enumerate(zip(rows, groups, strict=True))
                          if group in even and (item := measurement(row)) is not None))

    def in_fit_half(self, row: dict[str, str]) -> bool:
        """Whether the row is in the fit half (the class docstring)."""
        item = measurement(row)
        return _even_id(row) or (item is not None and bool(self.fitted.copies(item)))

    def is_fit_row(self, row: dict[str, str]) -> bool:
        """The rows this repository's fits and choices are made on: rows of a system measured for fitting
        (:data:`FITTED_SYSTEMS`) in the fit half. The others — every row of another GPU, whatever its id — are held
        out and reported apart."""
        return (row.get("system") or "").strip() in FITTED_SYSTEMS and self.in_fit_half(row)
