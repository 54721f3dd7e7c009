"""The ``llmsim`` entry point: parse, run the subcommand's handler, turn input errors into one line.

Input errors print one line (``llmsim: error: ...``) and exit with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from simulator.cli.parser import build_parser, one_line
from simulator.errors import LLMSimError
from simulator.results import progress


def warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 line: str | None = None) -> str:
    """A warning as the CLI prints it: one line, no source excerpt."""
    return f"llmsim: warning: {one_line(str(message))}\n"


def main(argv: list[str] | None = None) -> int:
    """Run ``llmsim`` with ``argv`` (default: the command line); returns the exit status."""
    warnings.formatwarning = warning_line
    args = build_parser().parse_args(argv)
    progress.QUIET = args.quiet
    try:
        return _dispatch(args)
    finally:
        progress.QUIET = False  # main() may be called again in the same process (tests, notebooks)


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command's handler (its module imported now); an error of the input or of the system is one line and
    exit status 2."""
    family, function = args.handler
    handler = getattr(importlib.import_module(f"simulator.cli.{family}"), function)
    try:
        return handler(args)
    except BrokenPipeError:  # the reader went away (llmsim run | head -1): not an error of the run
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python flushes stdout at exit: let that go nowhere
        return 0
    except LLMSimError as exc:
        print(f"llmsim: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file name or place the system refuses (too long, no permission, ...)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"llmsim: error: {one_line(where + (exc.strerror or str(exc)))}", file=sys.stderr)
        return 2
