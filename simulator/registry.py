"""One registry per plug-in family (schedulers, KV allocators, cost models, routers, ...).

Implementations register under the YAML ``kind:`` with a decorator; a duplicate name is a programming error; an
unknown name raises :class:`LLMSimError` listing the valid ones. A dotted path (``mypkg.module.ClassName``) names a
user's own class without registering it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
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
        if "." in kind:
            module_name, _, attr = kind.rpartition(".")
            try:
                return getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError) as exc:
                raise LLMSimError(f"{self.family}: cannot import {kind!r}: {exc}") from None
        raise LLMSimError(
            f"{self.family}: unknown kind {kind!r} (allowed: {', '.join(self.kinds())}, or a dotted path to a class)"
        )
