"""Load an experiment from YAML or a dict, apply ``a.b.c=value`` overrides, validate.

Relative file paths inside an experiment (model, hardware, trace) are resolved against the experiment file's folder,
falling back to the current directory, and stored absolute in the resolved config.

The engine profile's server defaults (:meth:`simulator.catalog.engines.EngineProfile.server_experiment`: how the
framework's server batches and sizes its KV cache when started without flags on the experiment's GPU) fill what the
experiment leaves out: a missing ``scheduler`` or ``kv_cache`` section is the server's, and a section that names no
``kind`` or the server's kind takes the server's values for the keys it does not set. A section of another kind is
used as written. A pool of another GPU whose server would start with other batch limits gets those as its own.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from simulator.catalog import load_engine, load_hardware, load_model
from simulator.catalog.loading import read_mapping
from simulator.catalog.paths import EXPERIMENTS_DIR
from simulator.catalog.yaml_text import YAMLInputError, load_yaml
from simulator.config.experiment import ExperimentConfig
from simulator.errors import ConfigError, LLMSimError, format_validation_error

DEFAULT_EXPERIMENT = EXPERIMENTS_DIR / "quickstart.yaml"
_PATH_SUFFIXES = (".yaml", ".yml", ".json", ".csv", ".py")


def parse_override(text: str) -> tuple[list[str], Any]:
    """``scheduler.max_num_seqs=64`` -> (["scheduler", "max_num_seqs"], 64); the value is parsed as YAML."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected dotted.key=value")
    try:
        value = load_yaml(raw)
    except YAMLInputError as exc:
        raise ConfigError(f"--set {key.strip()}: {exc}") from None
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


_INDEXED = re.compile(r"^(.+?)((?:\[\d+\])+)$")


def _steps(keys: list[str]) -> list[str | int]:
    """Dotted keys with list indexes split out: ``classes[0]`` -> "classes", 0."""
    steps: list[str | int] = []
    for key in keys:
        match = _INDEXED.match(key)
        if match is None:
            steps.append(key)
        else:
            steps.append(match.group(1))
            steps.extend(int(i) for i in re.findall(r"\d+", match.group(2)))
    return steps


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """A copy of ``data`` with each ``dotted.key=value`` set (intermediate mappings are created); ``name[i]``
    addresses element i of an existing list (``workload.classes[0].share=2``)."""
    result = copy.deepcopy(data)
    for text in overrides:
        keys, value = parse_override(text)
        steps = _steps(keys)
        node: Any = result
        for depth, step in enumerate(steps[:-1]):
            where = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps[: depth + 1]).lstrip(".")
            if isinstance(step, int):
                if not isinstance(node, list) or step >= len(node):
                    size = f"a list of {len(node)}" if isinstance(node, list) else "not a list"
                    raise ConfigError(f"--set {text!r}: {where}: no such element ({size})")
                node = node[step]
                continue
            if not isinstance(node, dict):
                raise ConfigError(f"--set {text!r}: {where.rpartition('.')[0] or where} is a list; address an "
                                  "element as [i]")
            child = node.setdefault(step, {})
            if not isinstance(child, dict | list):
                raise ConfigError(f"--set {text!r}: {where} is {child!r}, not a mapping")
            node = child
        last = steps[-1]
        if isinstance(last, int):
            if not isinstance(node, list) or last >= len(node):
                raise ConfigError(f"--set {text!r}: no such element [{last}]")
            node[last] = value
        elif not isinstance(node, dict):
            raise ConfigError(f"--set {text!r}: {'.'.join(keys[:-1])} is a list; address an element as [i]")
        else:
            node[last] = value
    return result


def _resolve(value: str, base_dir: Path | None) -> str:
    path = Path(value)
    if path.is_absolute() or path.suffix not in _PATH_SUFFIXES:
        return value
    if base_dir is not None and (base_dir / path).exists():
        return str((base_dir / path).resolve())
    return str(path.resolve()) if path.exists() else value


def _resolve_paths(data: dict[str, Any], base_dir: Path | None) -> None:
    for key in ("model", "hardware", "engine"):
        if isinstance(data.get(key), str):
            data[key] = _resolve(data[key], base_dir)
    workload, cluster = data.get("workload"), data.get("cluster")  # not mappings: validation names them
    workload = workload if isinstance(workload, dict) else {}
    for section in (workload.get("trace"), workload.get("input_tokens"), workload.get("output_tokens")):
        if isinstance(section, dict) and isinstance(section.get("path"), str):
            section["path"] = _resolve(section["path"], base_dir)
    routers = [cluster.get(key) for key in ("router", "decode_router")] if isinstance(cluster, dict) else []
    for section in (data.get("scheduler"), *routers):
        if isinstance(section, dict) and isinstance(section.get("kind"), str) and ".py:" in section["kind"]:
            path, _, cls = section["kind"].rpartition(":")
            section["kind"] = f"{_resolve(path, base_dir)}:{cls}"


def _resolve_checkpoint(data: dict[str, Any], where: str) -> None:
    """``dtype: auto`` (or no dtype) becomes the checkpoint's quantisation (a Hugging Face ``quantization_config``,
    :attr:`simulator.catalog.ModelSpec.quantization`), else ``bf16``, as vLLM's ``--dtype auto`` reads it; and a
    checkpoint served in its own format that declares its KV-cache format (calibrated fp8 KV scales) gets that cache
    where the experiment leaves ``kv_cache.dtype`` out or ``auto``, as ``--kv-cache-dtype auto`` does in vLLM, SGLang
    and TensorRT-LLM. Without a declaration the cache keeps the activations' 16-bit format."""
    if not isinstance(data.get("model"), str):
        return
    try:
        quantization = load_model(data["model"]).quantization
    except LLMSimError as exc:
        if data.get("dtype") == "auto":
            raise ConfigError(f"{where}: dtype: auto needs the model's checkpoint format: {exc}") from None
        return  # the run reports the model
    if data.get("dtype", "auto") == "auto":
        data["dtype"] = quantization.dtype if quantization else "bf16"
    kv_cache = data.get("kv_cache")
    if quantization is None or quantization.kv_cache is None or data["dtype"] != quantization.dtype:
        return
    if kv_cache is None:
        data["kv_cache"] = {"dtype": quantization.kv_cache}
    elif isinstance(kv_cache, dict) and kv_cache.get("dtype", "auto") == "auto":
        kv_cache["dtype"] = quantization.kv_cache


def _gpu(name: Any):
    """The hardware profile ``name`` names, or None where it names none (validation or the run reports it)."""
    try:
        return load_hardware(name) if isinstance(name, str) else None
    except LLMSimError:
        return None


def _apply_server_defaults(data: dict[str, Any]) -> None:
    """Fill the scheduler and KV-cache settings the experiment leaves out from its engine's server defaults on the
    experiment's GPU, and give a pool of another GPU that GPU's batch limits (:func:`_pool_server_defaults`)."""
    engine = data.get("engine", ExperimentConfig.model_fields["engine"].default)
    if not isinstance(engine, str):
        return  # validation names the field
    profile, hardware = load_engine(engine), _gpu(data.get("hardware"))
    scheduler = data.get("scheduler")
    _pool_server_defaults(data, profile, hardware, scheduler if isinstance(scheduler, dict) else {})
    for section, defaults in profile.server_experiment(hardware).items():
        given = data.get(section)
        if given is None:
            data[section] = defaults
        elif isinstance(given, dict) and given.get("kind", defaults.get("kind")) == defaults.get("kind"):
            for pair in ALTERNATIVES:  # the experiment's choice of one excludes the default's other
                if any(key in given for key in pair):
                    defaults = {key: value for key, value in defaults.items() if key not in pair}
            data[section] = {**defaults, **given}


def _pool_server_defaults(data: dict[str, Any], profile, hardware, given: dict[str, Any]) -> None:
    """A pool of another GPU (``cluster.pools``, ``prefill``, ``decode``) whose server would start with other batch
    limits (``max_num_seqs``, ``max_num_batched_tokens``) than the experiment's GPU's takes its own, unless the pool
    or the experiment's scheduler section states them."""
    cluster = data.get("cluster")
    if not isinstance(cluster, dict):
        return
    listed = cluster.get("pools")
    pools = [*(listed if isinstance(listed, list) else []), cluster.get("prefill"), cluster.get("decode")]
    base = profile.server_experiment(hardware).get("scheduler", {})
    if given.get("kind", base.get("kind")) != base.get("kind"):
        return  # a scheduler of another kind takes nothing from the server's
    for pool in pools:
        if not isinstance(pool, dict) or pool.get("hardware") in (None, data.get("hardware")):
            continue
        own = profile.server_experiment(_gpu(pool["hardware"])).get("scheduler", {})
        for key in ("max_num_seqs", "max_num_batched_tokens"):
            if key in own and own[key] != base.get(key) and key not in given and key not in pool:
                pool[key] = own[key]


# settings of which a section takes one: the KV pool as a share of the GPU (vLLM), of what is left free
# (TensorRT-LLM), or the weights and the pool together as one (SGLang)
ALTERNATIVES = (("gpu_memory_utilization", "free_memory_fraction", "mem_fraction_static"),)


KINDS = (  # files of another kind: their name, the top-level keys only they have, and the command that runs them
    ("plan", ("base", "grid", "prices"), "llmsim plan"),
    ("comparison", ("base", "variants"), "llmsim compare"),
    ("sweep", ("base", "grid"), "llmsim sweep"),
)


def _other_kind(data: Mapping[str, Any], where: str) -> str:
    """Why ``data`` is not an experiment but another kind of spec ('' when it may be one)."""
    if "model" in data:
        return ""
    for name, keys, command in KINDS:
        if all(key in data for key in keys):
            return f"{where}: a {name} (it has {' and '.join(keys)}), not an experiment: run it with {command}"
    return ""


def load_experiment(
    source: str | Path | Mapping[str, Any] | None = None, overrides: Iterable[str] = (),
    *, base_dir: Path | None = None, where: str = "experiment",
) -> ExperimentConfig:
    """Validated experiment from a YAML path, a mapping, or (None) the built-in quickstart. Relative paths in a
    mapping resolve against ``base_dir``; ``where`` prefixes its error messages."""
    if isinstance(source, Mapping):
        data = dict(source)
    else:
        path = Path(source) if source is not None else DEFAULT_EXPERIMENT
        if not path.is_file():
            raise ConfigError(f"{path}: experiment file not found")
        data, base_dir, where = read_mapping(path), path.parent, str(path)
    other = _other_kind(data, where)
    if other:
        raise ConfigError(other)
    data = apply_overrides(data, overrides)
    _resolve_paths(data, base_dir)
    _resolve_checkpoint(data, where)
    _apply_server_defaults(data)
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {format_validation_error(exc, ExperimentConfig)}") from None


Spec = TypeVar("Spec", bound=BaseModel)


def load_spec(path: str | Path, model: type[Spec], what: str) -> tuple[Spec, Path]:
    """A YAML file validated as ``model`` (a comparison, sweep or plan), with one-line errors; returns it and the
    file's folder."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: {what} file not found")
    try:
        return model.model_validate(read_mapping(path)), path.parent
    except ValidationError as exc:
        raise ConfigError(f"{path}: {format_validation_error(exc, model)}") from None


def resolve_base(base: dict[str, Any] | str, folder: Path, where: str) -> tuple[dict[str, Any], Path]:
    """The base experiment of a comparison, sweep or plan: a mapping (paths relative to ``folder``) or a YAML path
    relative to ``folder``; returns the mapping and the folder its relative paths resolve against."""
    if isinstance(base, dict):
        return base, folder
    base_path = Path(base) if Path(base).is_absolute() else folder / base
    if not base_path.is_file():
        raise ConfigError(f"{where}: base: experiment file {base} not found")
    return read_mapping(base_path), base_path.parent
