"""Fuzzing the input files and flags issue 16's fuzzers leave out (issue 57): ``validate --runs`` CSVs,
``workloads --fit`` length files, ``report`` on corrupted run folders, plug-in kinds named by path, and ``plan``
from flags. Each case ends in exit 0, or exit 2 with one ``llmsim: error:`` line and no traceback, within the
per-case time bound. Deterministic; ``LLMSIM_FUZZ_EXAMPLES`` scales every count (default 1,000)."""

from __future__ import annotations

import csv
import io
import json
import shutil
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration import test_fuzz as base

EXAMPLES = base.EXAMPLES
SILICON = Path(__file__).resolve().parents[3] / "shared" / "data" / "silicon" / "silicon_h100.csv"
needs_alarm = pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM for the per-case time bound")


def _fuzz(examples: int):
    return settings(max_examples=max(examples, 5), deadline=None, derandomize=True, database=None, phases=base.PHASES,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _exit_0_or_one_line(capsys, argv, seconds: int = base.SECONDS_PER_CASE) -> tuple[int, str]:
    code, out, err = base._bounded(capsys, argv, seconds)
    if code != 0:
        assert code == 2, (argv, err)
        # ours: "llmsim: error: ..."; argparse's, for a malformed flag: "llmsim <command>: error: ..."
        assert err.startswith(("llmsim: error: ", f"llmsim {argv[0]}: error: ")) and err.count("\n") == 1, (argv, err)
        assert len(err) < 2000, (argv, err)
    return code, out


# --- validate --runs -------------------------------------------------------------------------------------------
# A small aggregated row of the runs format (the real file's column order where it is present).
ROW = {"id": "fuzz", "silicon_data_source": "silicon_concurrency=2", "backend": "vllm", "backend_version": "0",
       "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm", "precision": "", "mode": "agg",
       "isl": "16", "osl": "3", "gemm_quant_mode": "", "moe_quant_mode": "", "batch_size": "2", "tp_size": "1",
       "pp_size": "1", "attention_dp_size": "", "moe_tp_size": "1", "moe_ep_size": "1", "silicon_ttft_ms": "50",
       "silicon_tpot_ms": "8"}
DISAGG = {"mode": "disagg", "model_path": "Qwen/Qwen3-32B", **{f"{role}_{k}": "1" for role in ("prefill", "decode")
                                                               for k in ("batch_size", "num_workers", "tp_size",
                                                                         "pp_size", "attention_dp_size",
                                                                         "moe_tp_size", "moe_ep_size")}}
CELL = st.one_of(st.sampled_from(["", "0", "-1", "1.5", "nan", "inf", "-inf", "1e999", "10000000000000000000000",
                                  "32769", "100000000", "x", " 2 ", "2", "4", "agg", "disagg", "sglang", "trtllm",
                                  "nope", "b200_sxm", "fp8", "nvfp4", "silicon_concurrency=40000",
                                  "silicon_concurrency=0", "acme/no-such-model", '"', "\x00"]),
                 st.text(max_size=6))


def _header() -> list[str]:
    if SILICON.is_file():
        with SILICON.open(encoding="utf-8") as f:
            return next(csv.reader(f))
    return [*ROW, *DISAGG]


@needs_alarm
@pytest.mark.slow
@_fuzz(EXAMPLES // 25)
@given(drop=st.sets(st.sampled_from(list(ROW)), max_size=2), rows=st.lists(
    st.tuples(st.booleans(), st.dictionaries(st.sampled_from([*ROW, *DISAGG]), CELL, max_size=3)),
    min_size=0, max_size=2),
    encoding=st.sampled_from(["utf-8", "utf-8-sig", "latin-1", "utf-16"]), tail=st.binary(max_size=6),
    header_only=st.booleans())
def test_random_runs_files_validate_or_fail_in_one_line(tmp_path_factory, capsys, drop, rows, encoding, tail,
                                                         header_only):
    header = [c for c in _header() if c not in drop]
    text = io.StringIO()
    writer = csv.DictWriter(text, header, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for disagg, changes in [] if header_only else rows:
        writer.writerow({**ROW, **(DISAGG if disagg else {}), **changes})
    path = tmp_path_factory.mktemp("runs") / "runs.csv"
    path.write_bytes(text.getvalue().encode(encoding, errors="replace") + tail)
    _exit_0_or_one_line(capsys, ["validate", "--runs", str(path), "--jobs", "1", "--quiet",
                                 "--output", str(path.with_name("out.csv"))])


@needs_alarm
@pytest.mark.skipif(not SILICON.is_file(), reason="needs ../shared/data/silicon/silicon_h100.csv")
@_fuzz(EXAMPLES // 100)
@given(index=st.integers(0, 10**6), changes=st.dictionaries(st.sampled_from(["isl", "osl", "batch_size", "tp_size",
                                                                               "silicon_data_source", "backend",
                                                                               "silicon_ttft_ms"]), CELL,
                                                             max_size=2))
def test_a_real_row_with_random_cells_validates_or_fails_in_one_line(tmp_path_factory, capsys, index, changes):
    with SILICON.open(encoding="utf-8") as f:
        real = [r for r in csv.DictReader(f) if r["model_path"] == ROW["model_path"]]
    row = {**real[index % len(real)], "isl": "16", "osl": "3", "batch_size": "2",
           "silicon_data_source": "silicon_concurrency=2", **changes}  # the real row's shape, small sizes
    path = tmp_path_factory.mktemp("runs") / "runs.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, list(row))
        writer.writeheader()
        writer.writerow(row)
    _exit_0_or_one_line(capsys, ["validate", "--runs", str(path), "--jobs", "1", "--quiet"])


# --- workloads --fit -------------------------------------------------------------------------------------------
LENGTH = st.one_of(st.integers(-5, 10**22).map(str), st.floats(allow_nan=True, allow_infinity=True).map(str),
                   st.sampled_from(["", "x", "1e999", "1e308", " 7 ", '"'] ), st.text(max_size=4))
HEADERS = ["arrived_at,num_prefill_tokens,num_decode_tokens", "input_length,output_length",
           "num_prefill_tokens,num_decode_tokens", "a,b", "", "input_length"]


@needs_alarm
@_fuzz(EXAMPLES // 10)
@given(fmt=st.sampled_from(["csv", "jsonl"]), header=st.sampled_from(HEADERS),
       rows=st.lists(st.lists(LENGTH, min_size=0, max_size=4), max_size=5), tail=st.binary(max_size=4),
       name=st.one_of(st.none(), st.text(max_size=6)))
def test_random_length_files_fit_or_fail_in_one_line(tmp_path_factory, capsys, fmt, header, rows, tail, name):
    keys = header.split(",") if header else []
    if fmt == "jsonl":
        text = "\n".join(json.dumps(dict(zip(keys, row, strict=False))) for row in rows)
    else:
        text = "\n".join([header, *(",".join(row) for row in rows)]) if header or rows else ""
    path = tmp_path_factory.mktemp("fit") / f"lengths.{fmt}"
    path.write_bytes(text.encode() + tail)
    argv = ["workloads", "--fit", str(path), "--quiet"] + (["--name", name] if name else [])
    _exit_0_or_one_line(capsys, argv)


JSON_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-2, 2**64), st.floats(allow_nan=False),
                       st.text(max_size=3), st.lists(st.integers(-1, 3), max_size=3),
                       st.dictionaries(st.text(max_size=2), st.integers(0, 3), max_size=2))
IDS = st.one_of(JSON_VALUE, st.lists(st.one_of(st.integers(-1, 5), JSON_VALUE), max_size=4))
PART = st.one_of(JSON_VALUE, st.fixed_dictionaries({"ids": IDS, "tokens": IDS}))
RECORD = st.fixed_dictionaries(
    {"input_length": st.one_of(st.integers(1, 3000), JSON_VALUE), "output_length": st.integers(1, 50)},
    optional={"timestamp": st.one_of(st.integers(0, 10**6), JSON_VALUE), "session_id": JSON_VALUE,
              "hash_ids": IDS, "parts": st.one_of(JSON_VALUE, st.dictionaries(st.sampled_from("ab"), PART))})


@needs_alarm
@_fuzz(EXAMPLES // 10)
@given(records=st.lists(RECORD, max_size=6), order=st.one_of(st.none(), st.sampled_from(["a", "a,b", "b,a", "a,a"])))
def test_random_content_id_files_fit_or_fail_in_one_line(tmp_path_factory, capsys, records, order):
    """JSON lines with hash_ids or prompt parts of any shape: a fitted preset, or one line (issue 54)."""
    path = tmp_path_factory.mktemp("fit") / "ids.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    argv = ["workloads", "--fit", str(path), "--quiet"] + (["--order", order] if order else [])
    _exit_0_or_one_line(capsys, argv)


# --- report on a corrupted run folder --------------------------------------------------------------------------
_RUN: dict[str, Path] = {}


def _run_folder(tmp_path_factory) -> Path:
    if "run" not in _RUN:
        folder = tmp_path_factory.mktemp("run") / "out"
        from simulator.cli import main

        assert main(["run", "--set", "workload.num_requests=20", "--out", str(folder), "--quiet"]) == 0
        _RUN["run"] = folder
    return _RUN["run"]


CORRUPTION = st.one_of(st.just(("keep", 0, b"")), st.just(("remove", 0, b"")),
                       st.tuples(st.just("truncate"), st.integers(0, 4000), st.just(b"")),
                       st.tuples(st.just("garble"), st.integers(0, 4000), st.binary(min_size=1, max_size=8)),
                       st.tuples(st.just("json"), st.integers(0, 60), st.just(b"")))


@needs_alarm
@_fuzz(EXAMPLES // 20)
@given(corruptions=st.fixed_dictionaries({name: CORRUPTION for name in ("summary.json", "config.yaml",
                                                                        "requests.parquet")}),
       value=base.JSON_VALUE)
def test_corrupted_run_folders_report_or_fail_in_one_line(tmp_path_factory, capsys, corruptions, value):
    folder = tmp_path_factory.mktemp("report") / "run"
    shutil.copytree(_run_folder(tmp_path_factory), folder)
    for name, (how, at, garbage) in corruptions.items():
        path = folder / name
        data = path.read_bytes()
        if how == "remove":
            path.unlink()
        elif how == "truncate":
            path.write_bytes(data[:at])
        elif how == "garble":
            path.write_bytes(data[:at] + garbage + data[at + len(garbage):])
        elif how == "json" and name == "summary.json":  # a field of the wrong type
            summary = json.loads(data)
            key = sorted(summary)[at % len(summary)]
            summary[key] = value
            path.write_text(json.dumps(summary))
    _exit_0_or_one_line(capsys, ["report", str(folder), "--quiet", "--output", str(folder.with_name("r.html"))])


# --- plug-in kinds ---------------------------------------------------------------------------------------------
PLUGINS = {
    "raises.py": "raise RuntimeError('boom')\n",
    "empty.py": "x = 1\n",
    "plain.py": "class Policy:\n    pass\n",
    "abstract.py": "import abc\n\n\nclass Policy(abc.ABC):\n    @abc.abstractmethod\n    def choose(self): ...\n",
    "syntax.py": "def (:\n",
    "notes.txt": "not Python\n",
    "binary.py": "\udcff\n",
}
KIND = st.one_of(st.text(max_size=12), st.tuples(st.sampled_from([*PLUGINS, "missing.py", "", "dir"]),
                                                  st.sampled_from([":Policy", ":Nope", ":", "", ".Policy", ":x.y"])))


@needs_alarm
@_fuzz(EXAMPLES // 20)
@given(field=st.sampled_from(["scheduler.kind", "cluster.router", "kv_cache.kind", "cluster.router.kind"]),
       kind=KIND)
def test_random_plugin_kinds_run_or_fail_in_one_line(tmp_path_factory, capsys, field, kind):
    folder = tmp_path_factory.mktemp("plugins")
    for name, text in PLUGINS.items():
        (folder / name).write_bytes(text.encode(errors="surrogateescape"))
    (folder / "dir").mkdir()
    if isinstance(kind, tuple):
        kind = f"{folder / kind[0]}{kind[1]}"
    code, out = _exit_0_or_one_line(capsys, ["run", "--json", "--set", "workload.num_requests=5",
                                             "--set", "cluster.replicas=2", "--set", f"{field}={json.dumps(kind)}"])
    if code == 0:
        summary = json.loads(out)
        assert summary["completed"] + summary["num_rejected"] == summary["num_requests"]


# --- plan from flags -------------------------------------------------------------------------------------------
PLAN_SECONDS = 120
FLAG = {
    "--model": st.sampled_from(["llama-3-8b", "nope", "", "qwen3-30b-a3b"]),
    "--gpu": st.sampled_from(["h100-sxm", "nope", "h100-sxm@nope"]),
    "--max-gpus": st.sampled_from(["1", "2", "8", "0", "-1", "100000", "1" + "0" * 30, "x", "1.5"]),
    "--isl": st.sampled_from(["8", "0", "100000000", "1e3", "-4"]),
    "--osl": st.sampled_from(["2", "0", "100000000", "nan"]),
    "--ttft": st.sampled_from(["1000", "1e-9", "0", "inf", "nan", "-1"]),
    "--tpot": st.sampled_from(["50", "1e-9", "0", "inf", "nan"]),
    "--engine": st.sampled_from(["vllm", "vllm,,x", ",", "sglang,vllm", ""]),
    "--modes": st.sampled_from(["agg", "agg", "disagg", "x", ",", "agg,agg", ""]),
    "--workload": st.sampled_from(["chat-sharegpt", "nope"]),
    "--rate": st.sampled_from(["1e12", "0.001", "0", "nan"]),
    "--users": st.sampled_from(["1000000000", "1", "0"]),
    "--percentile": st.sampled_from(["p99", "p100"]),
    "--keep": st.sampled_from(["1", "0", "1000000"]),
    "--top": st.sampled_from(["1", "100000"]),
    "--requests-per-user": st.sampled_from(["1", "100000000"]),
    "--seeds": st.sampled_from(["1", "2", "0"]),
}


@needs_alarm
@pytest.mark.slow
@_fuzz(EXAMPLES // 50)
@given(flags=st.dictionaries(st.sampled_from(list(FLAG)), st.none(), max_size=6).flatmap(
    lambda keys: st.fixed_dictionaries({k: FLAG[k] for k in keys})))
def test_random_plan_flags_plan_or_fail_in_one_line(tmp_path_factory, capsys, flags):
    argv = {"--model": "llama-3-8b", "--gpu": "h100-sxm", "--max-gpus": "1", "--isl": "8", "--osl": "2",
            "--ttft": "1000", "--tpot": "50", "--keep": "1", "--top": "1", "--modes": "agg",
            "--requests-per-user": "1", **flags}
    if "--workload" in flags:
        argv.pop("--isl", None), argv.pop("--osl", None)
    out = tmp_path_factory.mktemp("plan") / "out"
    # a plan is many simulations by design: its bound is the most any flag here may cost (--keep 1000000 on 8 GPUs
    # simulates every deployment, --seeds 2 doubles each capacity search)
    _exit_0_or_one_line(capsys, ["plan", *(x for kv in argv.items() for x in kv), "--out", str(out), "--quiet"],
                        seconds=PLAN_SECONDS)
