"""The model catalog: the built-in models, current models from their Hugging Face configs
(:mod:`simulator.catalog.current_models`, imported by :mod:`simulator.catalog.hf_import`), model YAML files and
Hugging Face ``config.json`` files, all resolved to a :class:`~simulator.catalog.model_spec.ModelSpec`.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from simulator.catalog.current_models import CURRENT_MODELS, HF_ALIASES
from simulator.catalog.hf_import import spec_from_hf_config
from simulator.catalog.loading import read_mapping, validate
from simulator.catalog.model_spec import QUANTIZABLE_PARTS, ModelSpec, Quantization
from simulator.errors import LLMSimError


def _spec(name, layers, hidden, heads, kv_heads, head_dim, inter, vocab, max_pos, source, **kw) -> ModelSpec:
    """A built-in model in the flat shorthand of one group of equal layers (ModelSpec's ``_shorthand``)."""
    return ModelSpec.model_validate({
        "name": name, "num_layers": layers, "hidden_size": hidden, "num_heads": heads, "num_kv_heads": kv_heads,
        "head_dim": head_dim, "intermediate_size": inter, "vocab_size": vocab, "max_position_embeddings": max_pos,
        "source": source, **kw,
    })


_HF = "https://huggingface.co/{}/blob/main/config.json"
# Values from each model's published config.json (also tabulated in ../shared/reference/models.csv).
BUILTIN_MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        _spec("llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000, 4096, _HF.format("meta-llama/Llama-2-7b-hf")),
        _spec("llama-2-13b", 40, 5120, 40, 40, 128, 13824, 32000, 4096, _HF.format("meta-llama/Llama-2-13b-hf")),
        _spec("llama-2-70b", 80, 8192, 64, 8, 128, 28672, 32000, 4096, _HF.format("meta-llama/Llama-2-70b-hf")),
        _spec("llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256, 8192, _HF.format("meta-llama/Meta-Llama-3-8B")),
        _spec("llama-3-70b", 80, 8192, 64, 8, 128, 28672, 128256, 8192, _HF.format("meta-llama/Meta-Llama-3-70B")),
        _spec("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, 131072, _HF.format("meta-llama/Llama-3.1-8B")),
        _spec("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, 131072, _HF.format("meta-llama/Llama-3.1-70B")),
        _spec("mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000, 32768, _HF.format("mistralai/Mistral-7B-v0.1")),
        _spec("mixtral-8x7b", 32, 4096, 32, 8, 128, 14336, 32000, 32768, _HF.format("mistralai/Mixtral-8x7B-v0.1"),
              num_experts=8, experts_per_token=2),
        _spec("qwen2.5-7b", 28, 3584, 28, 4, 128, 18944, 152064, 131072, _HF.format("Qwen/Qwen2.5-7B")),
        _spec("qwen2.5-72b", 80, 8192, 64, 8, 128, 29568, 152064, 131072, _HF.format("Qwen/Qwen2.5-72B")),
        _spec("llama-3.1-405b", 126, 16384, 128, 8, 128, 53248, 128256, 131072,
              _HF.format("meta-llama/Llama-3.1-405B")),
        _spec("phi-2", 32, 2560, 32, 32, 80, 10240, 51200, 2048, _HF.format("microsoft/phi-2"), gated_mlp=False),
        # Qwen v1 config.json says intermediate_size 49152 for the gate and up projections together: 24576 each.
        _spec("qwen-72b", 80, 8192, 64, 64, 128, 24576, 152064, 32768, _HF.format("Qwen/Qwen-72B")),
        _spec("codellama-34b", 48, 8192, 64, 8, 128, 22016, 32000, 16384, _HF.format("codellama/CodeLlama-34b-hf")),
        _spec("internlm-20b", 60, 5120, 40, 40, 128, 13824, 103168, 4096, _HF.format("internlm/internlm-20b")),
        # OPT: ReLU MLP (not gated), LM head tied to the embeddings; the PagedAttention paper's model.
        _spec("opt-13b", 40, 5120, 40, 40, 128, 20480, 50272, 2048, _HF.format("facebook/opt-13b"),
              gated_mlp=False, tie_word_embeddings=True),
        # BLOOM: GELU MLP (not gated), word embeddings tied to the LM head.
        _spec("bloom-176b", 70, 14336, 112, 112, 128, 57344, 250880, 2048, _HF.format("bigscience/bloom"),
              gated_mlp=False, tie_word_embeddings=True),
    ]
}


@functools.cache
def _catalog() -> dict[str, ModelSpec]:
    """Every catalog model by its short name and, lower-cased, by its Hugging Face id."""
    models = dict(BUILTIN_MODELS)
    for name, (hf_id, config) in CURRENT_MODELS.items():
        models[name] = spec_from_hf_config(config, name, _HF.format(hf_id))
    by_id = {}
    for spec in models.values():
        match = re.fullmatch(r"https://huggingface\.co/(.+)/blob/main/config\.json", spec.source)
        if match:
            by_id[match.group(1).lower()] = spec
    by_id.update({hf_id.lower(): models[name] for hf_id, name in HF_ALIASES.items()})
    return {**by_id, **models}


def model_names() -> list[str]:
    """The catalog's short names (each model is also found by its Hugging Face id, any case)."""
    return sorted(name for name in _catalog() if "/" not in name)


def load_model(name_or_path: str) -> ModelSpec:
    """A catalog name (``llama-3-8b``) or Hugging Face id (``meta-llama/Meta-Llama-3-8B``), any case; a model YAML
    (ModelSpec fields) or a Hugging Face ``config.json`` (named after its folder, or ``NAME_config.json``)."""
    catalog = _catalog()
    if name_or_path.lower() in catalog:
        return catalog[name_or_path.lower()]
    path = Path(name_or_path)
    if path.suffix not in (".json", ".yaml", ".yml"):
        derivative = quantized_derivative(name_or_path)
        if derivative is not None:
            return derivative
        raise LLMSimError(
            f"model: unknown model {name_or_path!r} (catalog: {', '.join(model_names())}; a quantised checkpoint "
            f"of one, its id ending -{'/-'.join(s.upper() for s in QUANTIZED_SUFFIXES)}; "
            "or a path to a model YAML or a Hugging Face config.json)"
        )
    if not path.is_file():
        raise LLMSimError(f"model: file not found: {name_or_path}")
    data = read_mapping(path)
    if path.suffix == ".json":
        name = path.parent.name if path.name == "config.json" else path.stem.removesuffix("_config")
        return spec_from_hf_config(data, name=name or path.stem, where=str(path), path=path)
    return validate(ModelSpec, data, str(path))


# A quantised checkpoint's id names its base model and its weight format (NVIDIA ModelOpt's and most publishers'
# naming: nvidia/DeepSeek-R1-NVFP4, RedHatAI/...-FP8-dynamic, ...-AWQ): suffix -> the simulator's weight format.
QUANTIZED_SUFFIXES: dict[str, str] = {
    "nvfp4": "nvfp4", "fp4": "nvfp4", "mxfp4": "mxfp4", "fp8": "fp8", "fp8-dynamic": "fp8", "awq": "int4",
    "gptq-int4": "int4", "int4": "int4", "w4a16": "int4",
}


def quantized_derivative(model_id: str) -> ModelSpec | None:
    """A quantised checkpoint of a catalog model, by an id ``[org/]<base>-<suffix>`` (:data:`QUANTIZED_SUFFIXES`,
    any case): the base model's architecture (found by its short name or the name part of its Hugging Face id, under
    any organisation) with its quantisable parts — the base checkpoint's quantised parts where it ships quantised,
    else all three — stored in the suffix's format, and no KV-cache format declared (the id does not say). None
    when the id has no such suffix or its base is not exactly one catalog model."""
    suffixes = "|".join(re.escape(s) for s in sorted(QUANTIZED_SUFFIXES, key=len, reverse=True))
    match = re.fullmatch(rf"(?:[^/]+/)?(.+?)-({suffixes})", model_id, flags=re.IGNORECASE)
    if match is None:
        return None
    base_name = match.group(1).lower()
    bases = {id(spec): spec for key, spec in _catalog().items() if key.rpartition("/")[2] == base_name}
    if len(bases) != 1:
        return None
    (base,) = bases.values()
    parts = base.quantization.parts if base.quantization else QUANTIZABLE_PARTS
    dtype = QUANTIZED_SUFFIXES[match.group(2).lower()]
    return base.model_copy(update={"name": model_id, "quantization": Quantization(dtype=dtype, parts=parts)})
