"""Plug-ins named by path: an abstract class and a file of the standard library are refused in one line, the
latter before any of its code runs."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import pytest

from simulator.cli import main


@pytest.mark.parametrize(("field", "kind", "missing"), [
    ("scheduler.kind", "simulator.schedulers.base.Scheduler", "schedule, wants_boundary"),
    ("cluster.router.kind", "simulator.cluster.router.Router", "route"),
])
def test_an_abstract_plug_in_is_one_line_naming_what_it_leaves_out(capsys, field, kind, missing):
    assert main(["run", "--set", f"{field}={kind}", "--set", "workload.num_requests=2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{kind!r} is an abstract class (it leaves {missing} to a subclass)" in err


def test_a_standard_library_file_is_refused_before_it_runs(capsys):
    """``this.py`` prints the Zen of Python when imported: refused, nothing printed, the module never loaded."""
    this = Path(sysconfig.get_paths()["stdlib"]) / "this.py"
    assert this.is_file() and "this" not in sys.modules
    assert main(["run", "--set", f"scheduler.kind={this}:X", "--set", "workload.num_requests=2"]) == 2
    out, err = capsys.readouterr()
    assert "is a file of the standard library, not a plug-in" in err and "Zen" not in out
    assert "this" not in sys.modules
