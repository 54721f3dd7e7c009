"""What bad input becomes.

Every mistake a user can make (bad YAML, unknown model, a model that does not fit, a malformed trace row) raises
:class:`LLMSimError` with a one-line message that names the field or ``file:line``, the bad value and what is
allowed. The CLI prints that line and exits with status 2; it never shows a traceback for these.

:func:`format_validation_error` turns a pydantic validation error into that one line
(``dotted.path: what is wrong, got VALUE``). :func:`renamed` reads old spellings of renamed configuration keys
with a one-line ``FutureWarning`` naming the new spelling; both spellings in one section is an error.
"""

from __future__ import annotations

import difflib
import re
import typing
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError


class LLMSimError(Exception):
    """A problem with the user's input, explained in one line."""


class ConfigError(LLMSimError):
    """An experiment (or override) that does not validate."""


class MemoryShortError(LLMSimError):
    """A deployment whose weights leave its GPUs too little memory for the KV cache of one request."""


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Every pydantic model class inside an annotation (through Annotated, unions and Optional)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found.extend(_models_in(arg))
    return found


def _kind_of(model_cls: type[BaseModel]) -> Any:
    """The ``Literal`` value of a model's ``kind`` field (its union tag), or None."""
    field = model_cls.model_fields.get("kind")
    args = typing.get_args(field.annotation) if field is not None else ()
    return args[0] if len(args) == 1 else None


def _subclasses(model_cls: type[BaseModel]) -> list[type[BaseModel]]:
    """Every subclass of a model class, depth first (the kinds of an open union typed by its base class, as
    :mod:`simulator.catalog.layers` builds them)."""
    found: list[type[BaseModel]] = []
    for sub in model_cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def _walk(root: type[BaseModel], loc: tuple) -> tuple[str, type[BaseModel] | None]:
    """The user-facing dotted path of ``loc`` (union tags dropped) and the model class it ends in. A field whose
    metadata has a ``model_for(tag)`` method (a plug-in section, :mod:`simulator.config.plugins`) is a union whose
    members are known only when it validates: that method names the member a tag stands for."""
    parts: list[str] = []
    candidates: list[type[BaseModel]] = [root]
    chooser: Any = None
    for item in loc:
        chosen = chooser.model_for(item) if chooser is not None and isinstance(item, str) else None
        chooser = None
        if chosen is not None:
            candidates = [chosen]
            continue
        if isinstance(item, int):
            parts.append(f"[{item}]")
            continue
        tagged = [c for c in candidates if _kind_of(c) == item]
        if len(candidates) > 1 and tagged:
            candidates = tagged
            continue
        current = candidates[0] if len(candidates) == 1 else None
        if current is not None and item not in current.model_fields:  # an open union: a kind of the base class
            tagged = [c for c in _subclasses(current) if _kind_of(c) == item]
            if tagged:
                candidates = tagged[:1]
                continue
        if current is not None and item in current.model_fields:
            field = current.model_fields[item]
            candidates = _models_in(field.annotation)
            chooser = next((meta for meta in field.metadata if hasattr(meta, "model_for")), None)
        else:
            candidates = []
        parts.append(str(item))
    path = ".".join(parts).replace(".[", "[")
    return path, candidates[0] if len(candidates) == 1 else None


NAMES_ITS_FIELD = re.compile(r"[A-Za-z_][\w.\[\]]*: ")  # a message that starts with the dotted path it is about
MAX_SHOWN = 120  # characters of an offending value an error line quotes


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr`` of the value an error quotes (a NumPy scalar as the Python number it holds), cut to ``limit``
    characters (a huge value stays one short line)."""
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _describe(error: Mapping[str, Any], model_cls: type[BaseModel] | None) -> str:
    kind, ctx, value = error["type"], error.get("ctx", {}), error.get("input")
    bounds = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
    if kind in bounds:
        limit = next(iter(ctx.values()))
        return f"must be {bounds[kind]} {limit}, got {shown(value)}"
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        if model_cls is None:
            return "unknown key (see the documentation)"
        close = difflib.get_close_matches(str(error["loc"][-1]), list(model_cls.model_fields), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown key ({hint}allowed: {', '.join(model_cls.model_fields)})"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {shown(value)}"
    if kind == "union_tag_invalid":
        return f"unknown kind {ctx.get('tag')!r} (allowed: {ctx.get('expected_tags')})"
    if kind == "union_tag_not_found":
        return f"needs a 'kind' (one of the registered kinds), got {shown(value)}"
    if kind == "value_error":
        return error["msg"].removeprefix("Value error, ")
    message = error["msg"][0].lower() + error["msg"][1:]
    return f"{message}, got {shown(value)}"


def validation_messages(exc: ValidationError, root: type[BaseModel]) -> list[str]:
    """One ``path: problem`` line per error."""
    lines = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        if error["type"] == "extra_forbidden":
            parent_path, parent = _walk(root, loc[:-1])
            path = f"{parent_path}.{loc[-1]}" if parent_path else str(loc[-1])
            lines.append(f"{path}: {_describe(error, parent)}")
        else:
            path, _ = _walk(root, loc)
            problem = _describe(error, None)
            if path or not NAMES_ITS_FIELD.match(problem):
                problem = f"{path or '(top level)'}: {problem}"
            lines.append(problem)  # (a whole-experiment rule's message that names its field stands as it is)
    return lines


def format_validation_error(exc: ValidationError, root: type[BaseModel]) -> str:
    """All problems joined on one line with ``; ``."""
    return "; ".join(validation_messages(exc, root))


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
