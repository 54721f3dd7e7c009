"""One registry per plug-in family (schedulers, KV allocators, cost models, routers, ...).

Implementations register under the YAML ``kind:`` with a decorator, together with the config class of their
section (``@SCHEDULERS.register("chunked", config=ChunkedSchedulerConfig)``); a duplicate name is a programming
error; an unknown name raises :class:`LLMSimError` listing the valid ones. A user's own class is named without
registering it, by a dotted path (``mypkg.module.ClassName``) or by a Python file and class
(``path/to/file.py:ClassName``).

Built-ins are found, not listed: :data:`PACKAGES` names each family's package, and the first time a registry is
asked for its kinds (or for a kind it does not hold) it imports every module of that package, so a built-in
plug-in is one new module there. :func:`family` hands a family's registry, built-ins registered, to code below
the plug-in packages (the config schema builds each section's union from it when it validates one), by name and
through :mod:`importlib`, so that no module imports a layer above its own.

Naming a plug-in runs its module's code (as importing any Python module does): an experiment file that names one is
code, to be trusted as such. Standard-library modules are refused before anything is imported (they hold no
plug-ins, and importing some of them has effects); a plug-in that fails to import (a syntax error, an exception in
its top-level code) is a one-line error naming the file and line.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import sys
import sysconfig
import traceback
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from simulator.errors import LLMSimError

T = TypeVar("T")

# family -> the package whose modules hold its built-in plug-ins (each module is imported when first needed)
PACKAGES = {
    "scheduler": "simulator.schedulers",
    "kv_cache": "simulator.kv",
    "cost_model": "simulator.cost",
    "cluster.router": "simulator.cluster",
}
_FAMILIES: dict[str, Registry[Any]] = {}


class Registry(Generic[T]):
    """Maps ``kind`` names to classes of one family, and each to the config class of its section."""

    def __init__(self, family: str) -> None:
        self.family = family
        self._entries: dict[str, type[T]] = {}
        self._configs: dict[str, type[BaseModel]] = {}
        self._package = PACKAGES.get(family)
        if self._package is not None:
            if family in _FAMILIES:
                raise ValueError(f"a second registry of {family} plug-ins")
            _FAMILIES[family] = self

    def register(self, kind: str, config: type[BaseModel]) -> Callable[[type[T]], type[T]]:
        """Register a class under ``kind``, its section validated by ``config`` (whose ``kind`` field, if a
        ``Literal``, must be ``kind``; several kinds may share one config class whose ``kind`` is a ``str``)."""
        field = config.model_fields.get("kind")
        declared = typing.get_args(field.annotation) if field is not None else ()
        if field is None or (declared and declared != (kind,)):
            raise ValueError(f"{self.family} kind {kind!r}: {config.__name__}.kind must be Literal[{kind!r}] (or a "
                             "str shared by several kinds)")

        def decorate(cls: type[T]) -> type[T]:
            if kind in self._entries:
                raise ValueError(f"{self.family} kind {kind!r} registered twice")
            self._entries[kind] = cls
            self._configs[kind] = config
            return cls

        return decorate

    def _import_builtins(self) -> None:
        """Import every module of the family's package (once), so that each built-in has registered."""
        package, self._package = self._package, None
        if package is not None:
            for module in pkgutil.iter_modules(importlib.import_module(package).__path__, f"{package}."):
                importlib.import_module(module.name)

    def kinds(self) -> list[str]:
        self._import_builtins()
        return sorted(self._entries)

    def config_class(self, kind: str) -> type[BaseModel] | None:
        """The config class of a registered ``kind`` (None: not a registered kind)."""
        if kind not in self._configs:
            self._import_builtins()
        return self._configs.get(kind)

    def get(self, kind: str) -> type[T]:
        if kind not in self._entries:
            self._import_builtins()
        if kind in self._entries:
            return self._entries[kind]
        if is_path(kind):
            found = self._import(kind)
            if inspect.isabstract(found):
                missing = ", ".join(sorted(getattr(found, "__abstractmethods__", ())))
                raise LLMSimError(f"{self.family}: {kind!r} is an abstract class (it leaves {missing} to a subclass); "
                                  "name a class that implements them")
            return found
        raise LLMSimError(
            f"{self.family}: unknown kind {kind!r} (allowed: {', '.join(self.kinds())}, or a dotted path to a class)"
        )

    def _import(self, kind: str) -> type[T]:
        if ":" not in kind and kind.partition(".")[0] in sys.stdlib_module_names:
            raise LLMSimError(f"{self.family}: {kind!r} names a standard-library module, not a plug-in")
        if ":" in kind and _in_standard_library(Path(kind.rpartition(":")[0])):
            raise LLMSimError(f"{self.family}: {kind!r} is a file of the standard library, not a plug-in")
        try:
            if ":" in kind:
                path, _, attr = kind.rpartition(":")
                if Path(path).suffix != ".py" or not Path(path).is_file():
                    raise ImportError(f"no Python file at {path}")
                spec = importlib.util.spec_from_file_location(Path(path).stem, path)
                if spec is None or spec.loader is None:
                    raise ImportError(f"no Python module at {path}")
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            else:
                module_name, _, attr = kind.rpartition(".")
                if not module_name or not attr or module_name.startswith("."):
                    raise ImportError("a dotted path is package.module.Class")
                module = importlib.import_module(module_name)
            return getattr(module, attr)
        except (ImportError, AttributeError, OSError) as exc:
            raise LLMSimError(f"{self.family}: cannot import {kind!r}: {exc}") from None
        except SyntaxError as exc:
            raise LLMSimError(f"{self.family}: {exc.filename}:{exc.lineno}: syntax error in the plug-in: {exc.msg}"
                              ) from None
        except Exception as exc:  # the plug-in's own top-level code failed
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            raise LLMSimError(f"{self.family}: {frame.filename}:{frame.lineno}: importing {kind!r} raised "
                              f"{type(exc).__name__}: {exc}") from None


def is_path(kind: str) -> bool:
    """Whether ``kind`` names a user's class (``pkg.module.Class`` or ``file.py:Class``) rather than a built-in."""
    return "." in kind or ":" in kind


def family(name: str) -> Registry[Any]:
    """The registry of the plug-in family ``name`` (a key of :data:`PACKAGES`), its built-ins registered."""
    importlib.import_module(PACKAGES[name])  # where the family's registry is made
    registry = _FAMILIES[name]
    registry.kinds()
    return registry


def _in_standard_library(path: Path) -> bool:
    """Whether ``path`` lies in the running interpreter's standard library (site-packages excepted)."""
    resolved = path.resolve()
    roots = {Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "platstdlib")}
    packages = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    return any(resolved.is_relative_to(root) for root in roots) and not any(
        resolved.is_relative_to(site) for site in packages)

