"""Files from elsewhere (a checkpoint's config.json, a trace to fit a preset to, published length statistics) are
data: every count they state is bounded before work grows with it, a pattern they carry cannot backtrack for
minutes, and a bad one is a one-line error naming the file (and line) instead of a traceback."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from simulator.catalog import load_model
from simulator.catalog.workloads import PERCENTILES, fit_preset, max_entropy_lengths
from simulator.cli import main
from simulator.errors import LLMSimError

MISTRAL = {  # Mistral-7B-v0.1's published config.json
    "model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 32768,
}


def _config(tmp_path, **changes) -> str:
    path = tmp_path / "m_config.json"
    path.write_text(json.dumps({**MISTRAL, **changes}))
    return str(path)


@pytest.mark.parametrize("layers", [10**8, 2**63])
def test_a_config_with_absurdly_many_layers_is_refused_before_any_work(tmp_path, layers):
    start = time.perf_counter()
    with pytest.raises(LLMSimError, match=rf"num_hidden_layers: {layers:,} is above 10,000"):
        load_model(_config(tmp_path, num_hidden_layers=layers))
    assert time.perf_counter() - start < 1.0


def test_a_model_yaml_with_absurdly_many_layers_is_refused(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: m\nhidden_size: 64\nvocab_size: 100\nmax_position_embeddings: 128\n"
                    "layers: [{count: 100000000, attention: {kind: full, num_heads: 4, num_kv_heads: 4, head_dim: 16},"
                    " ffn: {kind: dense, intermediate_size: 128}}]\n")
    with pytest.raises(LLMSimError, match=r"layers\[0\]\.count: must be <= 10000, got 100000000"):
        load_model(str(path))


def test_a_backtracking_pattern_in_a_checkpoint_is_matched_in_linear_time(tmp_path):
    """``(a+)+b``-style nesting takes Python's backtracking matcher 2^n steps on a near miss; the importer matches in
    linear time, and the pattern (which names no module) keeps every part quantised."""
    quant = {"quant_method": "compressed-tensors", "format": "float-quantized",
             "config_groups": {"g": {"weights": {"type": "float", "num_bits": 8}}},
             "ignore": ["re:(.*.*.*)+(model\\.layers\\.0\\.self_attn\\.q_proj)+x", "re:(a|a)*(b)\\1"]}
    start = time.perf_counter()
    spec = load_model(_config(tmp_path, quantization_config=quant))
    assert time.perf_counter() - start < 2.0
    assert spec.quantization is not None and spec.quantization.parts == ("attention", "dense_ffn", "experts")


def test_a_pattern_that_names_a_part_still_keeps_it_in_16_bits(tmp_path):
    quant = {"quant_method": "compressed-tensors", "format": "float-quantized",
             "config_groups": {"g": {"weights": {"type": "float", "num_bits": 8}}}, "ignore": ["re:.*self_attn.*"]}
    spec = load_model(_config(tmp_path, quantization_config=quant))
    assert spec.quantization is not None and spec.quantization.parts == ("dense_ffn", "experts")


@pytest.mark.parametrize(("text", "problem"), [
    ("", r"empty file"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n", r"0 rows; a preset is fitted to at least 2"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,12,5\n1,nan,4\n",
     r"t\.csv:3: num_prefill_tokens: nan is not a finite number >= 0"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,12,5\n1,3,many\n",
     r"t\.csv:3: num_decode_tokens: 'many' is not a finite number >= 0"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n2,12,5\n2,3,4\n", r"every request arrives at 2 s"),
])
def test_fitting_a_preset_to_a_bad_file_is_one_line(tmp_path, capsys, text, problem):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(LLMSimError, match=problem):
        fit_preset(path, "x")
    assert main(["workloads", "--fit", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("llmsim: error: ")


@pytest.mark.parametrize(("mean", "low", "high"), [(99.99, 1, 100), (1.001, 1, 100), (30, 1, 100), (90, 1, 100)])
def test_max_entropy_lengths_keep_their_mean_even_beside_a_bound(mean, low, high):
    """The quantiles of the law on [low, high] with ``mean``: non-decreasing, within the bounds, and their average
    over evenly spaced probabilities (the percentiles 0.5 … 99.5, midpoints of the first 100) is the mean."""
    values = np.array(max_entropy_lengths(mean, low, high)["values"], dtype=float)
    assert np.all(np.diff(values) >= 0) and values[0] >= low and values[-1] <= high
    unrounded = np.interp(np.arange(100) + 0.5, PERCENTILES, values)
    assert unrounded.mean() == pytest.approx(mean, abs=0.02 * (high - low))
