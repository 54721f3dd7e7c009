"""Reading a YAML/JSON file into a validated pydantic model, with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from simulator.catalog.yaml_text import YAMLInputError, load_yaml
from simulator.errors import LLMSimError, format_validation_error


def read_text(path: Path) -> str:
    """A text file's contents (UTF-8, a byte-order mark dropped); errors are one line naming the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LLMSimError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise LLMSimError(f"{path}:{line}: not UTF-8 text (byte {data[exc.start]:#04x})") from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise LLMSimError(f"{path}:{line}: a NUL byte: not a text file")
    return text


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a repeated key (the last would silently win)."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise YAMLInputError(f"duplicate key {key!r}")
        result[key] = value
    return result


def read_mapping(path: Path) -> dict[str, Any]:
    """Parse a YAML or JSON file that must hold a mapping (YAML read by :mod:`simulator.catalog.yaml_text`);
    errors name ``file:line``."""
    text = read_text(path)
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys) if path.suffix == ".json" else load_yaml(text)
    except json.JSONDecodeError as exc:
        raise LLMSimError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    except (RecursionError, ValueError) as exc:  # YAMLInputError; JSON nested too deep or an over-long integer
        line = getattr(exc, "line", None)
        where = f"{path}:{line}" if line else str(path)
        problem = str(exc) if isinstance(exc, YAMLInputError) else "nested too deeply or a number too long"
        raise LLMSimError(f"{where}: {problem}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise LLMSimError(f"{where}: invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise LLMSimError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def validate(model_cls: type[BaseModel], data: dict[str, Any], where: str) -> Any:
    """Validate ``data`` as ``model_cls``; the first problem becomes a one-line error prefixed by ``where``."""
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        raise LLMSimError(f"{where}: {format_validation_error(exc, model_cls)}") from None


def catalog_names(folder: Path) -> list[str]:
    """Entries of a folder catalog: the stems of its YAML files."""
    return sorted(p.stem for p in folder.glob("*.yaml"))


def load_catalog_entry(name_or_path: str, folder: Path, model_cls: type[BaseModel], field: str, what: str) -> Any:
    """A catalog name (a YAML file in ``folder``) or a path to a YAML, validated as ``model_cls``; errors name the
    config ``field`` and list the catalog."""
    path = catalog_path(name_or_path, folder, field, what)
    return validate(model_cls, read_mapping(path), str(path))


def catalog_path(name_or_path: str, folder: Path, field: str, what: str) -> Path:
    """The file of a catalog name (a YAML file in ``folder``, case-insensitive) or of a path to a YAML; errors name
    the config ``field`` and list the catalog."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        names = {name.lower(): name for name in catalog_names(folder)}  # catalog names are case-insensitive
        path = folder / f"{names.get(name_or_path.lower(), name_or_path)}.yaml"
        if not path.is_file():
            raise LLMSimError(
                f"{field}: unknown {what} {name_or_path!r} (catalog: {', '.join(catalog_names(folder))}; "
                f"or a path to {'an' if what[0] in 'aeiou' else 'a'} {what} YAML)"
            )
    elif not path.is_file():
        raise LLMSimError(f"{field}: file not found: {name_or_path}")
    return path
