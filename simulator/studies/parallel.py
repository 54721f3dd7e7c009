"""Where a study's independent simulations run: in this process, on ``jobs`` local processes (joblib), or on a Ray
cluster (``backend`` ray, ``pip install -e '.[ray]'``). Results never depend on where: every task is a pure
function of its arguments and its seed, and results come back in task order.

``with ray_session(address) as ray:`` connects to the Ray cluster at ``address`` (None: the session already started
in this process, else a local one), yields the ``ray`` module, and shuts down only a session it started.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from simulator.errors import LLMSimError

BACKENDS = ("local", "ray")


@contextmanager
def ray_session(address: str | None = None) -> Iterator[ModuleType]:
    try:
        import ray  # the ray extra: only when a study runs on it
    except ImportError:
        raise LLMSimError("--backend ray needs Ray: pip install -e '.[ray]'") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def map_in_order(function: Callable[..., Any], tasks: list[tuple[Any, ...]], jobs: int = 1, backend: str = "local",
                 address: str | None = None) -> list[Any]:
    """``[function(*task) for task in tasks]``, on a Ray cluster (``backend`` ray), on ``jobs`` local processes, or
    here (one job, or one task)."""
    if backend not in BACKENDS:
        raise LLMSimError(f"--backend: must be local or ray, got {backend!r}")
    if backend == "ray" and tasks:
        with ray_session(address) as ray:
            remote = ray.remote(function)
            return list(ray.get([remote.remote(*task) for task in tasks]))
    if jobs > 1 and len(tasks) > 1:
        from joblib import Parallel, delayed

        return list(Parallel(n_jobs=jobs)(delayed(function)(*task) for task in tasks))
    return [function(*task) for task in tasks]
