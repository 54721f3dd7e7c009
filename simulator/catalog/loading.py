"""Reading a YAML/JSON file into a validated pydantic model, with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from simulator.errors import LLMSimError


def read_mapping(path: Path) -> dict[str, Any]:
    """Parse a YAML or JSON file that must hold a mapping; errors name ``file:line``."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise LLMSimError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise LLMSimError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
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
    from simulator.config.errors import format_validation_error  # local: config imports the catalog

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
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = folder / f"{name_or_path}.yaml"
        if not path.is_file():
            raise LLMSimError(
                f"{field}: unknown {what} {name_or_path!r} (catalog: {', '.join(catalog_names(folder))}; "
                f"or a path to a {what} YAML)"
            )
    elif not path.is_file():
        raise LLMSimError(f"{field}: file not found: {name_or_path}")
    return validate(model_cls, read_mapping(path), str(path))
