"""The Hugging Face importer against mistyped fields: every field of a real ``config.json`` (the bundled ones in
../shared/data/model_configs) replaced by a value of another type or out of range either imports or is refused in
one line naming that field — never another exception, never a message about something else."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.catalog import hf_import
from simulator.catalog.hf_import import spec_from_hf_config
from simulator.errors import LLMSimError
from tests.helpers import SHARED_DATA

CONFIGS = SHARED_DATA / "model_configs"
NAMES = sorted(p.name for p in CONFIGS.glob("*_config.json") if not p.name.endswith("_hf_quant_config.json")) \
    if CONFIGS.is_dir() else []
# sections whose fields the importer reads as if at the top level, or whose fields it reads itself
SECTIONS = ("text_config", "attn_config", "ffn_config", "quantization_config")

# values of every JSON type, and integers at and beyond the edges of what a count can be (null is "not given",
# which may leave the config describing another model, so it is not a mistyped field)
MISTYPED = st.one_of(
    st.text(max_size=4), st.sampled_from(["1", "auto", "", "full_attention"]),
    st.integers(-3, 3), st.sampled_from([2**31, 2**63, 10**30, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
    st.lists(st.one_of(st.integers(-2, 3), st.text(max_size=2), st.booleans()), max_size=4),
    st.dictionaries(st.text(max_size=3), st.integers(-1, 2), max_size=2),
)


# the fields the importer reads, given to a config that lacks them too
READ = sorted({*(key for keys in hf_import.ALIASES.values() for key in keys), *hf_import.COUNT_FIELDS,
               *hf_import.WHOLE_FIELDS, *hf_import.FLAG_FIELDS, *hf_import.INDEX_FIELDS, *hf_import.TEXT_FIELDS,
               *hf_import.MTP_FIELDS, *hf_import.UNMODELLED_FEATURES, "layer_types", "hybrid_override_pattern",
               "sliding_window_pattern", "no_rope_layers", "moe_layer_freq", "indexer_types", "mamba_d_head",
               "quantization_config", "text_config", *hf_import.NESTED_SECTIONS})
QUANTIZATION_READ = ("quant_method", "quant_algo", "bits", "w_bit", "weight_block_size", "modules_to_not_convert",
                     "exclude_modules", "ignore", "config_groups", "format", "kv_cache_quant_algo", "kv_cache_scheme")


@cache
def _config(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / name).read_text(encoding="utf-8"))


def _fields(config: dict[str, Any]) -> list[tuple[str, ...]]:
    """Every field of the config: the top level's, and those of its :data:`SECTIONS`."""
    paths: set[tuple[str, ...]] = {(key,) for key in (*config, *READ)}
    for section in SECTIONS:
        if isinstance(config.get(section), dict):
            more = QUANTIZATION_READ if section == "quantization_config" else READ
            paths |= {(section, key) for key in (*config[section], *more)}
    groups = (config.get("quantization_config") or {}).get("config_groups") or {}
    for name, group in groups.items():  # compressed-tensors schemes: each one's weights and activations
        for part in ("weights", "input_activations"):
            if isinstance(group.get(part), dict):
                paths |= {("quantization_config", "config_groups", name, part, key) for key in group[part]}
    return sorted(paths)


def _with(config: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of the config with the field at ``path`` (its keys, section by section) set to ``value``."""
    if len(path) == 1:
        return {**config, path[0]: value}
    return {**config, path[0]: _with(config[path[0]], path[1:], value)}


@pytest.mark.skipif(not NAMES, reason="../shared/data/model_configs not present")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_mistyped_field_imports_or_is_one_line_naming_it(data):
    name = data.draw(st.sampled_from(NAMES), label="config")
    config = _config(name)
    path = data.draw(st.sampled_from(_fields(config)), label="field")
    value = data.draw(MISTYPED, label="value")
    try:
        spec_from_hf_config(_with(config, path, value), name, name)
    except LLMSimError as exc:
        message = str(exc)
        # a section replaced by another mapping is another model, refused for what it lacks
        named = path[-1] in message or (path[-1] in SECTIONS and isinstance(value, dict))
        assert "\n" not in message and named, (path, value, message)


TINY = {"model_type": "qwen3_moe", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 512, "moe_intermediate_size": 64, "num_experts": 8,
        "num_experts_per_tok": 2, "vocab_size": 100, "sliding_window": 64, "use_sliding_window": True,
        "max_window_layers": 2}


@pytest.mark.parametrize("fields, problem", [
    # found by the fuzzing above: each was read, or dropped, without a word
    ({"max_window_layers": "2"}, "max_window_layers must be a non-negative integer, got '2'"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": "128"}},
     "quantization_config: weight_block_size must be a list of two positive integers (rows, columns), got '128'"),
    ({"quantization_config": {"quant_method": "fp8", "modules_to_not_convert": "lm_head"}},
     "quantization_config: modules_to_not_convert must be a list of module names, got 'lm_head'"),
    ({"quantization_config": {"quant_method": ["fp8"]}}, "quantization_config: quant_method must be a string"),
    ({"mlp_only_layers": [0, 9]}, "mlp_only_layers must list layer indices in [0, 4) (num_hidden_layers = 4), "
                                  "got [0, 9]"),
    ({"model_type": ["qwen3_moe"]}, "model_type must be a single value"),
    ({"text_config": {"model_type": 3}}, "model_type must be a string, got 3"),
    ({"decoder_sparse_step": 0.5}, "decoder_sparse_step must be a positive integer, got 0.5"),
    ({"use_qk_norm": "true"}, "use_qk_norm must be true or false, got 'true'"),
    ({"num_key_value_heads": 3}, "num_attention_heads (4) must be a multiple of num_key_value_heads (3)"),
    ({"num_experts_per_tok": 9}, "num_experts_per_tok must be <= num_experts, got 9 > 8"),
    ({"kv_lora_rank": 32}, "lacks required key 'qk_rope_head_dim', needed by kv_lora_rank's latent attention"),
    # DeepSeek-V4 (out of scope): refused by the field that declares what is not modelled, not by a side effect
    ({"compress_ratios": [0, 4, 128, 4], "index_topk": 512}, "compress_ratios: compressed and heavily compressed"),
])
def test_a_field_the_importer_cannot_read_is_one_line_naming_it(fields, problem):
    with pytest.raises(LLMSimError) as caught:
        spec_from_hf_config({**TINY, **fields}, "tiny", "tiny.json")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("tiny.json: ") and problem in message, message
