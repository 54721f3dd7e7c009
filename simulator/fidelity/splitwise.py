"""Whole-model prefill and decode iterations of the Splitwise A100 measurements
(``../shared/data/calibration/splitwise_a100_iterations.csv``: Llama-2-70B TP 2/4/8, BLOOM-176B TP 8, fp16,
A100-80GB DGX), medians of the repeats; the rows the data README flags (Llama-2-70B TP2 batch 64) are excluded.
Predicted with the roofline cost model and an engine profile: prefill = one iteration of ``batch`` prompts;
decode = the mean step while contexts grow from ``prompt`` to ``prompt + tokens``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator.catalog import HardwareSpec, load_model
from simulator.catalog.engines import load_engine
from simulator.cost.base import IterationShape
from simulator.cost.roofline import RooflineCostModel
from simulator.fidelity.errors import ape

SPLITWISE_MODELS = {"llama2-70b": "llama-2-70b", "bloom-176b": "bloom-176b"}


def splitwise_errors(data_dir: Path, hardware: HardwareSpec, engine: str) -> pd.DataFrame:
    """One row per (model, TP, batch, prompt, tokens) with measured and predicted prefill and decode seconds."""
    table = pd.read_csv(data_dir / "calibration" / "splitwise_a100_iterations.csv")
    table = table[table["model"].isin(SPLITWISE_MODELS)]
    defective = (table["model"] == "llama2-70b") & (table["tensor_parallel"] == 2) & (table["batch_size"] == 64)
    keys = ["model", "tensor_parallel", "batch_size", "prompt_size", "token_size"]
    table = table[~defective].groupby(keys)[["prompt_time", "token_time"]].median().reset_index()
    profile = load_engine(engine)
    costs: dict[tuple[str, int], RooflineCostModel] = {}
    rows = []
    for r in table.itertuples(index=False):
        key = (r.model, r.tensor_parallel)
        if key not in costs:
            model = load_model(SPLITWISE_MODELS[r.model])
            costs[key] = RooflineCostModel(model, hardware, r.tensor_parallel, "fp16", engine=profile)
        cost, batch, prompt, tokens = costs[key], r.batch_size, r.prompt_size, r.token_size
        prefill = cost.iteration_time(IterationShape(((prompt, 0),) * batch))
        a, c = cost.decode_step_coefficients(batch)
        # mean over the decode steps: contexts prompt+1 … prompt+tokens−1 (after each step's write)
        steps = max(tokens - 1, 1)
        decode = a + c * batch * (prompt + 1 + (steps - 1) / 2)
        rows.append((r.model, r.tensor_parallel, batch, prompt, tokens, "prefill", r.prompt_time * 1e-3, prefill))
        rows.append((r.model, r.tensor_parallel, batch, prompt, tokens, "decode", r.token_time * 1e-3, decode))
    frame = pd.DataFrame(rows, columns=["model", "tp", "batch", "prompt", "tokens", "phase", "measured_s",
                                        "predicted_s"])
    frame["error"] = ape(frame["predicted_s"], frame["measured_s"])
    return frame
