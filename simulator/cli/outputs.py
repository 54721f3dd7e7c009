"""Where commands write: output files and folders checked before the work, and a run's files published atomically."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from simulator.errors import LLMSimError


def check_output_file(path: Path, option: str) -> None:
    """Fail before the run, not after it, when ``path`` cannot be written as a file."""
    if path.is_dir():
        raise LLMSimError(f"{option} {path}: is a folder; give a file name")
    if not path.parent.is_dir():
        raise LLMSimError(f"{option} {path}: folder {path.parent} does not exist")


def output_folder(out: Path, option: str = "--out") -> Path:
    """``out``, created if needed; a file of that name or an unwritable place is a one-line error."""
    if out.exists() and not out.is_dir():
        raise LLMSimError(f"{option} {out}: is a file; give a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LLMSimError(f"{option} {out}: cannot create the folder: {exc.strerror or exc}") from None
    if not os.access(out, os.W_OK):
        raise LLMSimError(f"{option} {out}: the folder is not writable")
    return out


def staging_folder(out: Path) -> Path:
    """A fresh hidden folder inside ``out`` where a run writes its outputs before they replace the old ones
    (``.run-PID.tmp``); those of runs whose process is gone (killed before they could clean up) are removed."""
    output_folder(out)
    for left in out.glob(".run-*.tmp"):
        pid = left.name.removeprefix(".run-").removesuffix(".tmp")
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(left, ignore_errors=True)
    staging = out / f".run-{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    return staging


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user counts: its folder is not ours to remove)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def publish(staging: Path, out: Path) -> None:
    """Move a finished run's files over the folder's old ones (each move atomic), dropping outputs of an earlier
    run that this one does not write (an old timeline beside a new summary would mislead)."""
    for stale in ("timeline.parquet", "iterations.parquet"):
        if not (staging / stale).exists():
            (out / stale).unlink(missing_ok=True)
    for path in sorted(staging.iterdir(), key=lambda p: p.name == "summary.json"):  # summary last: "complete"
        os.replace(path, out / path.name)
