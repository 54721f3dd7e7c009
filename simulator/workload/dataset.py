"""Prompts and answers from a text dataset (``workload.dataset``), counted in tokens.

``sharegpt``: a JSON list (or JSON lines) of records with ``conversations`` — ``[{"from": "human" | "user",
"value": text}, {"from": "gpt" | "assistant" | ..., "value": text}, ...]``; each record gives its first human turn
and the turn after it (vLLM bench's reading of ShareGPT; records without such a pair are skipped and counted).
``jsonl``: one object per line with ``prompt_field`` and ``output_field``, each text or already a token count.
With ``workload.sessions``, a sharegpt record is a whole conversation instead (:func:`sample_conversations`): every
human turn followed by an answer is a turn, its new input the human text and its output the answer.
Tokens come from a Hugging Face ``tokenizer.json`` through the ``tokenizers`` package, or are ``ceil(characters /
chars_per_token)``; either way at least 1. Counts are kept per process, keyed by the file (path, size, mtime) and
the counting, so sweeps over one dataset count it once.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

import numpy as np

from simulator.config.workload import DatasetConfig
from simulator.errors import LLMSimError

HUMAN = ("human", "user")


def _records(path: Path, skip_bad: bool) -> tuple[list, int]:
    """The file's records — a JSON document's list, or one JSON value per non-empty line — and the lines skipped
    as not JSON (``skip_bad``; else the first such line is an error)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise LLMSimError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LLMSimError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
        return (records if isinstance(records, list) else [records]), 0
    records, skipped = [], 0
    for line_number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if not skip_bad:
                    raise LLMSimError(f"{path}:{line_number}: not JSON ({exc.msg}; dataset.skip_bad skips such "
                                      f"lines)") from None
                skipped += 1
    return records, skipped


def _objects(records: list, config: DatasetConfig, path: Path) -> tuple[list[tuple[int, dict]], int]:
    """The records that are objects, with their numbers from 1, and how many are not (skipped with ``skip_bad``,
    else the first is an error)."""
    objects, skipped = [], 0
    for number, record in enumerate(records, start=1):
        if isinstance(record, dict):
            objects.append((number, record))
        elif config.skip_bad:
            skipped += 1
        else:
            raise LLMSimError(f"{path}: record {number}: expected an object, got {type(record).__name__}")
    return objects, skipped


def _pairs(records: list, config: DatasetConfig, path: Path) -> tuple[list, int]:
    """(prompt, answer) pairs of texts or counts, and how many records gave none."""
    kind = config.format
    if kind == "auto":
        kind = "sharegpt" if records and isinstance(records[0], dict) and "conversations" in records[0] else "jsonl"
    pairs = []
    objects, skipped = _objects(records, config, path)
    for number, record in objects:
        if kind == "sharegpt":
            turns = record.get("conversations") or []
            first = next((i for i, t in enumerate(turns) if isinstance(t, dict) and t.get("from") in HUMAN), None)
            if first is None or first + 1 >= len(turns) or not isinstance(turns[first + 1], dict):
                skipped += 1
                continue
            pairs.append((turns[first].get("value") or "", turns[first + 1].get("value") or ""))
        else:
            missing = [f for f in (config.prompt_field, config.output_field) if f not in record]
            if missing and config.skip_bad:
                skipped += 1
                continue
            if missing:
                raise LLMSimError(f"{path}: record {number}: no {missing[0]!r} (dataset.prompt_field / output_field)")
            pairs.append((record[config.prompt_field], record[config.output_field]))
    if not pairs:
        raise LLMSimError(f"{path}: no prompt/answer pairs ({skipped} records without one)")
    return pairs, skipped


def _counter(config: DatasetConfig):
    """Text -> tokens: the tokenizer's, or characters / chars_per_token."""
    if config.tokenizer is None:
        ratio = config.chars_per_token
        return lambda text: max(1, math.ceil(len(text) / ratio))
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise LLMSimError("dataset.tokenizer needs the tokenizers package (pip install 'llmsim[tokenizers]'), or "
                          "leave it out to count characters / chars_per_token") from None
    try:
        tokenizer = Tokenizer.from_file(str(Path(config.tokenizer).expanduser()))
    except Exception as exc:  # the library's own error types: unreadable or not a tokenizer.json
        raise LLMSimError(f"dataset.tokenizer: cannot load {config.tokenizer}: {exc}") from None
    return lambda text: max(1, len(tokenizer.encode(text, add_special_tokens=False).ids))


def _tokens(config: DatasetConfig, path: str):
    """Text or a token count -> tokens (at least 1); anything else is an error naming the file."""
    count = _counter(config)

    def tokens(value) -> int:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise LLMSimError(f"{path}: a prompt or answer must be text or a token count, got {value!r}")
        return max(1, value) if isinstance(value, int) else count(value)

    return tokens


@cache
def _counted(path: str, size: int, mtime: float, config_json: str) -> tuple[np.ndarray, np.ndarray, int]:
    config = DatasetConfig.model_validate_json(config_json)
    records, bad_lines = _records(Path(path), config.skip_bad)
    pairs, skipped = _pairs(records, config, Path(path))
    skipped += bad_lines
    tokens = _tokens(config, path)
    inputs = np.array([tokens(p) for p, _ in pairs], dtype=np.int64)
    outputs = np.array([tokens(a) for _, a in pairs], dtype=np.int64)
    return inputs, outputs, skipped


def _cache_key(config: DatasetConfig) -> tuple[str, int, float, str]:
    """What the per-process counts are kept under: the file (path, size, mtime) and the counting."""
    path = Path(config.path).expanduser()
    try:
        stat = path.stat()
    except OSError as exc:
        raise LLMSimError(f"dataset: cannot read {path}: {exc.strerror or exc}") from None
    return str(path), stat.st_size, stat.st_mtime, config.model_dump_json()


def dataset_lengths(config: DatasetConfig) -> tuple[np.ndarray, np.ndarray, int]:
    """(input tokens, output tokens, records skipped) of every pair in the dataset."""
    return _counted(*_cache_key(config))


def sample_dataset(config: DatasetConfig, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """``n`` pairs' lengths: a seeded draw without replacement while the dataset has enough, else with it."""
    inputs, outputs, skipped = dataset_lengths(config)
    index = rng.choice(inputs.size, size=n, replace=n > inputs.size)
    return inputs[index], outputs[index], skipped


def _conversation_turns(records: list, config: DatasetConfig, path: Path) -> tuple[list, int]:
    """Per sharegpt record, its (human text, answer text) turns in order; records with none are skipped."""
    conversations = []
    objects, skipped = _objects(records, config, path)
    for _, record in objects:
        messages = [m for m in record.get("conversations") or [] if isinstance(m, dict)]
        turns = [(m.get("value") or "", messages[i + 1].get("value") or "") for i, m in enumerate(messages[:-1])
                 if m.get("from") in HUMAN and messages[i + 1].get("from") not in HUMAN]
        if turns:
            conversations.append(turns)
        else:
            skipped += 1
    if not conversations:
        raise LLMSimError(f"{path}: no conversation with a human turn followed by an answer ({skipped} records)")
    return conversations, skipped


@cache
def _counted_conversations(path: str, size: int, mtime: float, config_json: str) -> tuple[list, int]:
    config = DatasetConfig.model_validate_json(config_json)
    records, bad_lines = _records(Path(path), config.skip_bad)
    conversations, skipped = _conversation_turns(records, config, Path(path))
    tokens = _tokens(config, path)
    lengths = [(np.array([tokens(h) for h, _ in turns], dtype=np.int64),
                np.array([tokens(a) for _, a in turns], dtype=np.int64)) for turns in conversations]
    return lengths, skipped + bad_lines


def sample_conversations(config: DatasetConfig, n: int, rng: np.random.Generator) -> tuple[list, int]:
    """``n`` conversations' (new input tokens, output tokens) per turn — a seeded draw without replacement while
    the dataset has enough — and the records skipped."""
    conversations, skipped = _counted_conversations(*_cache_key(config))
    index = rng.choice(len(conversations), size=n, replace=n > len(conversations))
    return [conversations[i] for i in index.tolist()], skipped
