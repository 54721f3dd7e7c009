"""Calibration recovers known parameters from timings synthesised with them."""

from __future__ import annotations

import pandas as pd
import pytest

from simulator.catalog import load_hardware
from simulator.cost.gemm import GemmModel
from simulator.fidelity.calibrate import calibrate
from simulator.fidelity.operators import GEMM_OPS


def _write_ops(folder, truth):
    """Operator CSVs in the a100_ops format for a Llama-3-8B-shaped layer at TP 1 and 2, timed with ``truth``."""
    gemm = GemmModel(truth, "fp16")
    rows = []
    for tp in (1, 2):
        for tokens in (1, 3, 17, 64, 100, 256, 700, 1024, 2048, 4096, 8192):
            heads, kv, hidden, inter = 32 / tp, 8 / tp, 4096, 14336 / tp
            shapes = {"attn_pre_proj": (tokens, (heads + 2 * kv) * 128, hidden),
                      "attn_post_proj": (tokens, hidden, heads * 128),
                      "mlp_up_proj": (tokens, 2 * inter, hidden), "mlp_down_proj": (tokens, hidden, inter)}
            row = {f"time_stats.{op}.median": gemm.time(*shapes[op]) * 1e3 for op in GEMM_OPS}
            row.update(n_head=32, n_kv_head=8, n_embd=4096, n_expanded_embd=14336, vocab_size=128256,
                       use_gated_mlp=True, num_tokens=tokens, num_tensor_parallel_workers=tp)
            rows.append(row)
    folder.mkdir()
    pd.DataFrame(rows).to_csv(folder / "synthetic.csv", index=False)


def test_calibrate_recovers_gemm_parameters(tmp_path):
    truth = load_hardware("h100-sxm").model_copy(update={
        "flops_efficiency": 0.6, "bandwidth_efficiency": 0.7, "kernel_overhead_us": 4, "gemm_knee": 3.0,
        "gemm_tile_m": 32,
    })
    _write_ops(tmp_path / "ops", truth)
    fitted, report = calibrate(load_hardware("h100-sxm"), tmp_path / "ops")
    assert fitted.flops_efficiency == pytest.approx(0.6)
    assert fitted.bandwidth_efficiency == pytest.approx(0.7)
    assert fitted.kernel_overhead_us == 4 and fitted.gemm_knee == 3.0 and fitted.gemm_tile_m == 32
    assert fitted.peak_tflops == truth.peak_tflops  # spec-sheet numbers untouched
    assert "median error 0.0%" in report[0]
