"""One registry per plug-in family (schedulers, KV allocators, cost models, routers, ...).

Implementations register under the YAML ``kind:`` with a decorator; a duplicate name is a programming error; an
unknown name raises :class:`LLMSimError` listing the valid ones. A user's own class is named without registering
it, by a dotted path (``mypkg.module.ClassName``) or by a Python file and class (``path/to/file.py:ClassName``).

Naming a plug-in runs its module's code (as importing any Python module does): an experiment file that names one is
code, to be trusted as such. Standard-library modules are refused before anything is imported (they hold no
plug-ins, and importing some of them has effects); a plug-in that fails to import (a syntax error, an exception in
its top-level code) is a one-line error naming the file and line.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import sysconfig
import traceback
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


def _in_standard_library(path: Path) -> bool:
    """Whether ``path`` lies in the running interpreter's standard library (site-packages excepted)."""
    resolved = path.resolve()
    roots = {Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "platstdlib")}
    packages = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    return any(resolved.is_relative_to(root) for root in roots) and not any(
        resolved.is_relative_to(site) for site in packages)

