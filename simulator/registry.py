"""One registry per plug-in family (schedulers, KV allocators, cost models, routers, ...).

Implementations register under the YAML ``kind:`` with a decorator; a duplicate name is a programming error; an
unknown name raises :class:`LLMSimError` listing the valid ones. A user's own class is named without registering
it, by a dotted path (``mypkg.module.ClassName``) or by a Python file and class (``path/to/file.py:ClassName``).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from simulator.errors import LLMSimError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps ``kind`` names to classes of one family."""

    def __init__(self, family: str) -> None:
        self.family = family
        self._entries: dict[str, type[T]] = {}

    def register(self, kind: str) -> Callable[[type[T]], type[T]]:
        def decorate(cls: type[T]) -> type[T]:
            if kind in self._entries:
                raise ValueError(f"{self.family} kind {kind!r} registered twice")
            self._entries[kind] = cls
            return cls

        return decorate

    def kinds(self) -> list[str]:
        return sorted(self._entries)

    def get(self, kind: str) -> type[T]:
        if kind in self._entries:
            return self._entries[kind]
        if ":" in kind or "." in kind:
            return self._import(kind)
        raise LLMSimError(
            f"{self.family}: unknown kind {kind!r} (allowed: {', '.join(self.kinds())}, or a dotted path to a class)"
        )

    def _import(self, kind: str) -> type[T]:
        try:
            if ":" in kind:
                path, _, attr = kind.rpartition(":")
                spec = importlib.util.spec_from_file_location(Path(path).stem, path)
                if spec is None or spec.loader is None:
                    raise ImportError(f"no Python module at {path}")
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            else:
                module_name, _, attr = kind.rpartition(".")
                module = importlib.import_module(module_name)
            return getattr(module, attr)
        except (ImportError, AttributeError, OSError) as exc:
            raise LLMSimError(f"{self.family}: cannot import {kind!r}: {exc}") from None
