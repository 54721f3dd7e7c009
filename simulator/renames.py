"""Old spellings of renamed configuration keys: read with a one-line ``FutureWarning`` naming the new spelling;
both spellings in one section is an error. The CLI prints warnings as one line."""

from __future__ import annotations

import warnings
from typing import Any


def renamed(value: Any, section: str, names: dict[str, str]) -> Any:
    """``value`` with each old key of ``names`` (old -> new) spelled anew, if ``value`` is a mapping; ``section`` is
    where the keys sit (``slo``, ``hardware``, ...), for the messages. Raises ``ValueError`` when a section gives a
    key in both spellings."""
    if not isinstance(value, dict) or not any(old in value for old in names):
        return value
    for old, new in names.items():
        if old not in value:
            continue
        if new in value:
            raise ValueError(f"give {new} only ({old} is its old spelling)")
        warnings.warn(f"{section}.{old} is renamed {section}.{new}; the old spelling goes in the next release",
                      FutureWarning, stacklevel=2)
    return {names.get(key, key): item for key, item in value.items()}
