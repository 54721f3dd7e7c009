"""Pydantic models of an experiment: the public contract of the YAML files.

Every model forbids unknown keys; policy families are chosen by ``kind``. Times carry their unit in the name
(``_ms``, ``_s``), sizes theirs (``_gib``), rates are per second. Numbers must be finite (no ``.inf`` / ``.nan``)
and a boolean is never a number; sizes are bounded by the limits below (stated in docs/guide/running.md), so that a typo
cannot ask for an allocation no machine has.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

MAX_REQUESTS = 100_000_000  # generated requests per run
MAX_REPLICAS = 100_000  # replicas per pool
MAX_PARALLEL = 4096  # tensor / pipeline parallel degree
MAX_TOKENS = 10_000_000  # tokens of one request (prompt, output, prefix), and of a length distribution's bounds
MAX_BLOCK_SIZE = 65_536  # tokens per KV block
MAX_SEED = 2**63 - 1
MAX_RATE = 1e9  # requests per second
MIN_RATE = 1e-6


def _is_number(annotation: Any) -> bool:
    """Whether a field takes a number (int or float, optionally None) and not a boolean."""
    if annotation in (int, float):
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = set(typing.get_args(annotation)) - {type(None)}
        return bool(args) and args <= {int, float}
    return False


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _booleans_are_not_numbers(cls, data: Any) -> Any:
        """YAML's ``true`` would otherwise count as 1 wherever a number goes: a boolean given for a number is passed
        on as the word it was written as, which the field then refuses (naming itself)."""
        if isinstance(data, dict) and any(isinstance(value, bool) for value in data.values()):
            fields = cls.model_fields
            data = {name: str(value).lower() if isinstance(value, bool) and name in fields
                    and _is_number(fields[name].annotation) else value for name, value in data.items()}
        return data
