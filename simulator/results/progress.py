"""Progress bars for long commands: shown on a terminal, silent in pipes, logs and under ``llmsim --quiet``."""

from __future__ import annotations

import multiprocessing
import sys

QUIET = False  # ``--quiet``: no bars and no informational lines (simulator.cli sets it)


class NoProgress:
    """What a bar does when none is shown."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int | None, desc: str, unit: str, shown: bool = True):
    """A tqdm bar on stderr when it is a terminal (and ``shown``, and not ``QUIET``, and this is not a parallel
    worker, whose bars would interleave with the parent's), else :class:`NoProgress`."""
    if QUIET or not shown or not sys.stderr.isatty() or multiprocessing.parent_process() is not None:
        return NoProgress()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False)


def note(text: str) -> None:
    """An informational line for stderr (what was written where), dropped under ``--quiet``."""
    if not QUIET:
        print(text, file=sys.stderr)
