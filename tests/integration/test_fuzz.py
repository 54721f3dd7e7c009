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
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from simulator.cli import main
from simulator.config.experiment import ExperimentConfig

EXAMPLES = int(os.environ.get("LLMSIM_FUZZ_EXAMPLES", "1000"))
# Without the explain phase: to explain a failure hypothesis traces every line of every example (sys.settrace on
# Python 3.11), which made one plan of 5 s take over 300 s
PHASES = [phase for phase in Phase if phase != Phase.explain]
SECONDS_PER_CASE = 20


def _paths(model: type[BaseModel], prefix: str = "", depth: int = 0) -> list[str]:
    """Every dotted field path of the schema (through unions — a plug-in section's from its registry —, optional
    sections and lists' element models)."""
    found = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        found.append(path)
        if depth < 3:
            plugins = next((meta for meta in field.metadata if hasattr(meta, "choices")), None)  # a plug-in section
            for sub in set(plugins.choices().values()) if plugins else _models(field.annotation):
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


class CaseTimeout(BaseException):
    """Not an Exception: code that records a failure and goes on (a sweep's point) must not swallow the bound."""


def _alarm(signum, frame):
    raise CaseTimeout


def _bounded(capsys, argv, seconds: int = SECONDS_PER_CASE) -> tuple[int, str, str]:
    """Run the CLI under a time bound (default the per-case one): (exit code, out, err), argparse's exits
    included."""
    capsys.readouterr()  # the fixture is shared by a test's examples
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: a malformed command line
        code = exc.code
    except CaseTimeout:
        pytest.fail(f"no answer within {seconds} s: {argv}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, argv
    return code, out, err


def _run_case(capsys, argv) -> None:
    """Exit 0 with every generated request accounted for, or exit 2 with one short line."""
    code, out, err = _bounded(capsys, argv)
    if code == 0:
        summary = json.loads(out)
        ends = ("completed", "num_rejected", "num_failed", "num_cancelled")  # every request ends one of these ways
        assert sum(summary[end] for end in ends) == summary["num_requests"], argv
    else:
        assert code == 2, (argv, err)
        assert err.startswith(("llmsim: error: ", "llmsim run: error: ")) and err.count("\n") == 1, (argv, err)
        assert len(err) < 2000, (argv, err)


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM for the per-case time bound")
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@pytest.mark.slow
@given(st.lists(OVERRIDE, min_size=1, max_size=3))
def test_random_overrides_run_or_fail_in_one_line(capsys, overrides):
    argv = ["run", "--json", "--set", "workload.num_requests=20"]
    for path, value in overrides:
        argv += ["--set", f"{path}={json.dumps(value)}"]
    _run_case(capsys, argv)


CSV_HEADERS = {
    "processed": "arrived_at,num_prefill_tokens,num_decode_tokens",
    "azure": "TIMESTAMP,ContextTokens,GeneratedTokens",
    "burstgpt": "Timestamp,Model,Request tokens,Response tokens",
}
FIELD = st.one_of(st.integers(-5, 10**22).map(str), st.floats(allow_nan=True, allow_infinity=True).map(str),
                  st.text(max_size=8), st.sampled_from(['"', '"10', "1e999", "2023-11-16 18:15:46.68", "", " 5 "]))
JSON_VALUE = st.recursive(st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.booleans(),
                                    st.none(), st.text(max_size=6)),
                          lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                  st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                          max_leaves=8)


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM for the per-case time bound")
@settings(max_examples=max(EXAMPLES // 5, 20), deadline=None, derandomize=True, database=None, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from([*CSV_HEADERS, "mooncake"]), rows=st.lists(st.lists(FIELD, min_size=2, max_size=5),
                                                                      max_size=6),
       skip_bad=st.booleans(), garbage=st.binary(max_size=12))
def test_random_trace_files_run_or_fail_in_one_line(tmp_path_factory, capsys, fmt, rows, skip_bad, garbage):
    folder = tmp_path_factory.mktemp("trace")
    if fmt == "mooncake":
        lines = [json.dumps(dict(zip(["timestamp", "input_length", "output_length", "hash_ids"], row,
                                     strict=False))) for row in rows]
        path = folder / "t.jsonl"
    else:
        lines = [CSV_HEADERS[fmt], *(",".join(row) for row in rows)]
        path = folder / "t.csv"
    path.write_bytes("\n".join(lines).encode() + b"\n" + garbage)
    _run_case(capsys, ["run", "--json", "--set", "workload.arrival=null", "--set", "workload.input_tokens=null",
                       "--set", "workload.output_tokens=null", "--set", "workload.num_requests=null",
                       "--set", f"workload.trace={json.dumps({'path': str(path), 'skip_bad': skip_bad})}"])


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM for the per-case time bound")
@settings(max_examples=max(EXAMPLES // 5, 20), deadline=None, derandomize=True, database=None, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(["num_hidden_layers", "hidden_size", "num_attention_heads",
                                                "num_key_value_heads", "head_dim", "intermediate_size",
                                                "vocab_size", "max_position_embeddings", "num_local_experts",
                                                "num_experts_per_tok", "model_type", "sliding_window",
                                                "quantization_config", "tie_word_embeddings"]),
                               JSON_VALUE, max_size=4))
def test_random_hugging_face_configs_run_or_fail_in_one_line(tmp_path_factory, capsys, changes):
    config = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000,
              "max_position_embeddings": 4096, **changes}
    path = tmp_path_factory.mktemp("model") / "m_config.json"
    path.write_text(json.dumps(config))
    _run_case(capsys, ["run", "--json", "--set", f"model={path}", "--set", "workload.num_requests=10"])


BOUND = st.one_of(st.integers(-3, 12), st.sampled_from([0.5, 0, -1, ".inf", ".nan", "x", None, True]))
AXIS = st.one_of(st.lists(SCALARS, max_size=3),  # ranges of at most a few dozen points: a big sweep is slow, not wrong
                 st.fixed_dictionaries({"start": BOUND, "last": BOUND, "step": BOUND}), SCALARS)


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM for the per-case time bound")
@settings(max_examples=max(EXAMPLES // 10, 20), deadline=None, derandomize=True, database=None, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(grid=st.dictionaries(st.sampled_from(["seed", "workload.arrival.rate", "scheduler.max_num_seqs",
                                             "workload.num_requests", "cluster.replicas", "nonsense.key"]),
                            AXIS, max_size=2),
       replicates=st.one_of(st.integers(-2, 4), st.sampled_from([0.5, "3", None, True, 10**9])), seed=SCALARS)
def test_random_sweep_files_run_or_fail_in_one_line(tmp_path_factory, capsys, grid, replicates, seed):
    folder = tmp_path_factory.mktemp("sweep")
    base = {"name": "fuzz", "seed": seed, "model": "llama-3-8b", "hardware": "h100-sxm",
            "cost_model": {"kind": "linear", "prefill_ms_per_token": 0.1, "decode_ms_per_step": 5.0},
            "workload": {"num_requests": 5, "arrival": {"kind": "poisson", "rate": 10.0},
                         "input_tokens": {"kind": "fixed", "value": 20},
                         "output_tokens": {"kind": "fixed", "value": 3}}}
    (folder / "s.yaml").write_text(json.dumps({"base": base, "grid": grid, "replicates": replicates}))
    code, _, err = _bounded(capsys, ["sweep", str(folder / "s.yaml"), "--out", str(folder / "out"), "--no-progress"])
    if code == 2:  # refused before anything ran
        assert err.count("\n") == 1 and not (folder / "out" / "index.parquet").exists(), err
    else:  # ran: every point is in the index, finished or with its error
        assert code in (0, 1), err
        assert (folder / "out" / "index.parquet").is_file()
