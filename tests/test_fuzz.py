"""Fuzzing the command line (issue 16): random ``--set`` overrides of the experiment schema's fields with values of
every type and size, each run must end in exit 0 with every generated request accounted for, or exit 2 with one
line and no traceback, within a time bound. Deterministic (``derandomize``); ``LLMSIM_FUZZ_EXAMPLES`` sets the
number of cases (CI: 1,000; the nightly size is 20,000)."""

from __future__ import annotations

import json
import os
import signal
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from simulator.cli import main
from simulator.config.schema import ExperimentConfig

EXAMPLES = int(os.environ.get("LLMSIM_FUZZ_EXAMPLES", "1000"))
SECONDS_PER_CASE = 20


def _paths(model: type[BaseModel], prefix: str = "", depth: int = 0) -> list[str]:
    """Every dotted field path of the schema (through unions, optional sections and lists' element models)."""
    found = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        found.append(path)
        if depth < 3:
            for sub in _models(field.annotation):
                found.extend(_paths(sub, f"{path}.", depth + 1))
    return sorted(set(found))


def _models(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


PATHS = _paths(ExperimentConfig)
SCALARS = st.one_of(
    st.integers(-(2**70), 2**70), st.integers(-3, 70000),
    st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 1),
    st.booleans(), st.none(), st.text(max_size=12),
    st.sampled_from(["fixed", "lognormal", "poisson", "chunked", "paged", "continuous", "static", "closed_loop",
                     "piecewise", "gamma", "uniform", "normal", ".inf", "-.nan", "1:30", "on", "0x10", "1e400"]),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from(["kind", "value", "rate",
                                                                                        "min", "max", "mean",
                                                                                        "sigma", "users"]),
                                                                       inner, max_size=3)), max_leaves=6)
OVERRIDE = st.tuples(st.one_of(st.sampled_from(PATHS), st.text(min_size=1, max_size=10)), VALUES)


class CaseTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CaseTimeout


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM for the per-case time bound")
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(OVERRIDE, min_size=1, max_size=3))
def test_random_overrides_run_or_fail_in_one_line(capsys, overrides):
    argv = ["run", "--json", "--set", "workload.num_requests=20"]
    for path, value in overrides:
        argv += ["--set", f"{path}={json.dumps(value)}"]
    capsys.readouterr()  # the fixture is shared by the examples
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(SECONDS_PER_CASE)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: a malformed command line
        code = exc.code
    except CaseTimeout:
        pytest.fail(f"no answer within {SECONDS_PER_CASE} s: {argv}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, argv
    if code == 0:
        summary = json.loads(out)
        assert summary["completed"] + summary["num_rejected"] == summary["num_requests"], argv
    else:
        assert code == 2, (argv, err)
        assert err.startswith(("llmsim: error: ", "llmsim run: error: ")) and err.count("\n") == 1, (argv, err)
        assert len(err) < 2000, (argv, err)
