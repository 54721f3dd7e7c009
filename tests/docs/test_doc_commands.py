"""Every shell command shown in README.md and docs/**/*.md runs, as shown, in a fresh copy of the repository.

How a command is found: each fenced block tagged ``bash``, ``sh``, ``shell`` or ``console`` is read line by line;
a trailing ``\\`` joins the next line; a ``$ `` prompt is dropped (in a ``console`` block only the prompted lines are
commands, the rest is output); a trailing ``# comment`` and lines that are only a comment are dropped. A block right
after an HTML comment ``<!-- no-run: why -->`` is not run (none is marked today), and the few commands in ``SKIP``
are not run, each for the reason written next to it; a ``pip install ... && rest`` runs ``rest``. The few in
``EXPENSIVE`` (minutes each) are not run either, except to check their error without ``../shared``. A ``yaml`` block
that starts ``# my-model.yaml: ...`` is a file the reader is shown saving: when a command on the page names it and
the repository has no such file, it is written before the page's commands run.

How it runs: one test per page, its commands in document order (a ``llmsim plot results/x`` reads what the
``llmsim run --out results/x`` above it wrote), in one temporary copy of the repository's tracked files (so
``results/`` never lands in the checkout), with ``llmsim`` and ``python`` on ``PATH`` running this tree's code.
A command that names ``../shared`` (or reads a file that such a command above it writes) needs the shared data:

* ``[absent]`` — no ``../shared`` next to the copy, as in a fresh clone: every command that does not need it must
  succeed, and every command that does must fail with one line on stderr, exit status 2, naming the missing file;
* ``[shared]`` — ``../shared`` next to the copy (skipped when this checkout has no ``../shared/data``): the commands
  that need it, which ``[absent]`` only saw fail, must succeed.

A failing command is reported as ``page:line``, the command, its exit status and the tail of its stderr. Each
command has ``LLMSIM_DOC_TIMEOUT_S`` seconds (default 900). Pages whose commands take more than a second or two are
marked slow (``pytest -m slow``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import REPO, SHARED_DATA

SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
NO_RUN = re.compile(r"^\s*<!--\s*no-run\b")
SHARED_PATH = re.compile(r"\.\./shared[^\s,'\"}]*")
# flags whose value is a file or folder the command writes (what a later command on the page may read)
WRITES = {"--out", "--output", "--ranking", "--plot", "--report", "--trace", ">"}

# Commands shown but not run here, each with its reason. Keep this short: a command a reader is told to type should
# run; prefer fixing the page.
SKIP: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^pip install\b"), "installs into the current environment; .ci/run does this install first"),
    (re.compile(r"^pytest\b"), "the test suite itself (this test would run itself); .ci/run runs it"),
    (re.compile(r"^mkdocs serve\b"), "a live-preview server that never exits"),
    (re.compile(r"^mkdocs build\b"), ".ci/run builds the site with --strict, into a temporary folder"),
    (re.compile(r"^python benchmarks/count_instructions\.py .*--against \.\./main-base"),
     "needs valgrind and a second checkout at ../main-base to compare against"),
)
# The most expensive few, not run to keep CI's time (the rest take ~15 min on 2 busy cores); without ../shared the
# one-line error of those that need it is still checked (it costs nothing).
EXPENSIVE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^python benchmarks/bench_scale\.py$"),
     "a 1M-request speed measurement (~3 min); benchmarks stay outside the test run (DESIGN.md)"),
    (re.compile(r"^llmsim calibrate --kernels "),
     "a kernel fit, ~2 min each; tests/fidelity/test_calibration.py runs `calibrate --kernels --framework` (slow)"),
    (re.compile(r"^llmsim calibrate --runs "),
     "90 grid points over the H100 file's vLLM 0.14+ rows (~75 s idle); tests/fidelity/test_engine_fit.py runs "
     "`calibrate --runs` on a small file"),
    (re.compile(r"^llmsim validate --runs \.\./shared/data/silicon/silicon_b200\.csv "),
     "1,749 simulated runs (~80 s idle, minutes on a busy machine); the same path runs on silicon_h100.csv above"),
)


@dataclass(frozen=True)
class Command:
    page: str  # relative to the repository
    line: int  # where the command starts on the page
    text: str  # continuations joined, prompt and trailing comment dropped
    needs_shared: bool  # names ../shared, or reads what a command above it that names ../shared writes
    missing: tuple[str, ...] = ()  # without ../shared: the paths it names of which its error should name one
    expensive: str | None = None  # why it is not run where it would succeed (EXPENSIVE)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def strip_comment(line: str) -> str:
    """``line`` without a trailing shell comment: a ``#`` that starts a word outside quotes."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def skip_reason(text: str) -> str | None:
    """Why ``text`` is not run (each part of an ``&&`` chain is looked at on its own), or None to run it."""
    for pattern, reason in SKIP:
        if pattern.search(text):
            return reason
    return None


def runnable(text: str) -> str | None:
    """What of ``text`` runs: the parts of an ``a && b`` chain that are not skipped; None when none is left."""
    parts = [part.strip() for part in text.split(" && ")]
    kept = [part for part in parts if skip_reason(part) is None]
    return " && ".join(kept) if kept else None


def shell_blocks(page: Path, languages: set[str] = SHELL_LANGUAGES) -> list[tuple[int, str, list[tuple[int, str]]]]:
    """The page's fenced blocks in ``languages`` (shell by default): (line of the fence, language, [(line, text)]);
    blocks marked no-run left out."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, language = match.group(1), match.group(2).lower()
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append((i + 1, lines[i]))
            i += 1
        i += 1
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        if language in languages and not NO_RUN.match(previous):
            blocks.append((start + 1, language, body))
    return blocks


def page_commands(page: Path) -> list[Command]:
    """Every command of ``page`` to run, in document order."""
    relative = page.relative_to(REPO).as_posix()
    commands: list[Command] = []
    written_from_shared: set[str] = set()
    for _, language, body in shell_blocks(page):
        pending: list[str] = []
        first = 0
        for number, raw in body:
            line = raw.strip()
            if not pending:
                if language == "console":
                    if not line.startswith("$ "):
                        continue  # output, not a command
                    line = line[2:]
                first = number
            continued = line.endswith("\\")
            pending.append(line[:-1].rstrip() if continued else line)
            if continued:
                continue
            text = strip_comment(" ".join(pending))
            pending = []
            run = runnable(text) if text else None
            if run is None:
                continue
            words = run.split()
            missing = SHARED_PATH.findall(run) + [
                word for word in words if word in written_from_shared or word.split("/")[0] in written_from_shared]
            if missing:
                written_from_shared.update(words[i + 1] for i, word in enumerate(words[:-1]) if word in WRITES)
            expensive = next((why for pattern, why in EXPENSIVE if pattern.search(run)), None)
            commands.append(Command(relative, first, run, bool(missing), tuple(missing), expensive))
    return commands


def page_files(page: Path, commands: list[Command]) -> dict[str, str]:
    """The files a page shows for the reader to save and then names in a command: a ``yaml`` block whose first line is
    ``# my-model.yaml: ...``, keyed by that name."""
    named = {word for command in commands for word in re.split(r"[\s=]", command.text)}
    files = {}
    for _, _, body in shell_blocks(page, languages={"yaml", "yml"}):
        header = re.match(r"#\s*([\w./-]+\.ya?ml)\b", body[0][1].strip()) if body else None
        if header and header.group(1) in named:
            files[header.group(1)] = "\n".join(text for _, text in body) + "\n"
    return files


def doc_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def is_slow(commands: list[Command]) -> bool:
    """A page is slow unless every command is a cheap ``llmsim`` listing (the catalog, a KV size)."""
    cheap = re.compile(r"^llmsim (models|gpus|workloads|kv-size)\b(?!.*--fit)")
    return not all(cheap.match(command.text) for command in commands)


def cases() -> list:
    params = []
    for page in doc_pages():
        commands = page_commands(page)
        if not commands:
            continue
        marks = [pytest.mark.slow] if is_slow(commands) else []
        relative = page.relative_to(REPO).as_posix()
        files = page_files(page, commands)
        params.append(pytest.param(commands, files, False, id=f"{relative}[absent]", marks=marks))
        if any(command.needs_shared for command in commands):
            shared = [command for command in commands if command.needs_shared]
            params.append(pytest.param(shared, files, True, id=f"{relative}[shared]", marks=[pytest.mark.slow]))
    return params


def fresh_copy(root: Path, with_shared: bool) -> tuple[Path, dict[str, str]]:
    """A copy of the repository's tracked files at ``root/repo`` (``root/shared`` linked to ../shared when asked),
    and the environment that runs this tree's ``llmsim`` and ``python`` there."""
    repo = root / "repo"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in listed.decode().split("\0"):
        source = REPO / name
        if name and source.is_file():  # a file deleted in the working tree but not yet in git is not copied
            target = repo / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    if with_shared:
        (root / "shared").symlink_to(SHARED_DATA.parent, target_is_directory=True)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for name, body in (("llmsim", f'exec "{sys.executable}" -m simulator.cli "$@"'),
                       ("python", f'exec "{sys.executable}" "$@"')):
        shim = bin_dir / name
        shim.write_text(f"#!/bin/sh\n{body}\n")
        shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(repo),
           "MPLBACKEND": "Agg"}
    return repo, env


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def report(command: Command, result: subprocess.CompletedProcess[str], problem: str) -> str:
    return (f"{command.where}: {problem}\n  $ {command.text}\n  exit status {result.returncode}\n"
            f"  stderr (tail):\n{tail(result.stderr)}")


@pytest.mark.parametrize(("commands", "files", "with_shared"), cases())
def test_doc_commands_run(commands: list[Command], files: dict[str, str], with_shared: bool, tmp_path: Path) -> None:
    if with_shared and not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    repo, env = fresh_copy(tmp_path, with_shared)
    for name, text in files.items():  # what the page shows the reader saving, unless the repository has it
        if not (repo / name).exists():
            (repo / name).write_text(text)
    timeout = float(os.environ.get("LLMSIM_DOC_TIMEOUT_S", "900"))
    for command in commands:
        if command.expensive and (with_shared or not command.needs_shared):
            continue
        started = time.perf_counter()
        try:
            result = subprocess.run(["bash", "-c", command.text], cwd=repo, env=env, capture_output=True, text=True,
                                    timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{command.where}: did not finish in {timeout:.0f} s\n  $ {command.text}")
        if os.environ.get("LLMSIM_DOC_TIMES"):
            print(f"{time.perf_counter() - started:7.1f} s  {command.where}  {command.text}", file=sys.stderr)
        if with_shared or not command.needs_shared:
            assert result.returncode == 0, report(command, result, "failed")
            continue
        # ../shared is absent: one line, exit status 2, naming what is missing
        assert result.returncode == 2, report(command, result, "without ../shared: expected exit status 2")
        error = result.stderr.strip()
        assert len(error.splitlines()) == 1, report(command, result, "without ../shared: expected a one-line error")
        assert any(path in error for path in command.missing), report(
            command, result, "without ../shared: the error does not name the missing file")
