"""``llmsim steptime``: predicted iteration times, with the time of each operator group, for a CSV of batch shapes.

Input columns: ``num_prefill_seqs, prefill_tokens_per_seq, num_decode_seqs, decode_context_per_seq`` (the decode
context is each decoding sequence's KV length after the step). The output keeps them and adds ``predicted_ms`` and
one ``*_ms`` column per operator group (GEMMs, attention, elementwise, communication, LM head and sampling, engine),
then why the step costs that (:mod:`simulator.cost.work`): ``gflop_per_gpu`` and ``hbm_gb_per_gpu`` (its FLOPs and
HBM bytes on one GPU, 10^9), the shares of its time limited by compute, memory and neither (``compute_frac``,
``memory_frac``, ``fixed_frac``) and its ``bound`` (the largest).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

from simulator.catalog import load_hardware, load_model
from simulator.catalog.engines import load_engine
from simulator.cost.base import IterationShape
from simulator.cost.roofline import RooflineCostModel
from simulator.errors import LLMSimError

STEP_COLUMNS = ("num_prefill_seqs", "prefill_tokens_per_seq", "num_decode_seqs", "decode_context_per_seq")


def read_steps(path: str | Path) -> list[tuple[int, ...]]:
    """Rows of non-negative integers; an error names file:line."""
    rows = []
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise LLMSimError(f"{path}: cannot read: {exc.strerror}") from None
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in STEP_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise LLMSimError(f"{path}:1: missing column(s) {missing}; a steps file needs {list(STEP_COLUMNS)}")
    for line, record in enumerate(reader, start=2):
        try:
            values = tuple(int(record[c]) for c in STEP_COLUMNS)
        except (TypeError, ValueError):
            raise LLMSimError(f"{path}:{line}: expected non-negative integers in {list(STEP_COLUMNS)}") from None
        if min(values) < 0:
            raise LLMSimError(f"{path}:{line}: expected non-negative integers, got {values}")
        rows.append(values)
    return rows


def predict_steps(
    rows: list[tuple[int, ...]], model: str, hardware: str, tensor_parallel: int = 1, engine: str = "default",
    dtype: str = "bf16", pipeline_parallel: int = 1,
) -> pd.DataFrame:
    cost = RooflineCostModel(load_model(model), load_hardware(hardware), tensor_parallel, dtype,
                             engine=load_engine(engine), pipeline_parallel=pipeline_parallel)
    records = []
    for prefills, prompt, decodes, context in rows:
        shape = IterationShape(((prompt, 0),) * prefills if prompt else (), decodes, decodes * context)
        parts = cost.breakdown(shape)
        record: dict[str, float | str] = dict(zip(STEP_COLUMNS, (prefills, prompt, decodes, context), strict=True))
        seconds = sum(parts.values())
        record["predicted_ms"] = seconds * 1000
        record.update({name.removesuffix("_s") + "_ms": part * 1000 for name, part in parts.items()})
        work = cost.iteration_work(shape)
        share = 1 / seconds if seconds else 0.0
        record.update({"gflop_per_gpu": work.flops / 1e9, "hbm_gb_per_gpu": work.hbm_bytes / 1e9,
                       "compute_frac": work.compute_s * share, "memory_frac": work.memory_s * share,
                       "fixed_frac": work.fixed_s * share, "bound": work.bound if seconds else ""})
        records.append(record)
    return pd.DataFrame(records)
