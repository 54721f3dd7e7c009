"""MkDocs hook: the reference pages, generated from the code at build time (never written into docs/).

- ``reference/cli.md``: every ``llmsim`` subcommand with its help and options, from the argparse parser
  (``simulator.cli.build_parser``);
- ``reference/configuration.md``: every field of an experiment file, from the pydantic schema
  (``simulator.config.ExperimentConfig``), walked recursively through nested sections, lists, maps and the
  discriminated unions on ``kind`` (a plug-in section's from its family's registry: each kind's config class)
  — dotted path, type and bounds, default, description;
- ``reference/hardware-profiles.md`` and ``reference/engine-profiles.md``: the fields of a GPU profile
  (``HardwareSpec``) and of a serving-engine profile (``EngineProfile``), the same way;
- ``reference/metrics.md``: the metric definitions, from the docstring of the metrics module;
- ``reference/study-files.md``: the fields of sweep, plan and comparison files (``simulator.studies``);
- ``reference/catalog.md``: the built-in models, GPUs and workload presets, as ``llmsim models --json``,
  ``llmsim gpus --json`` and ``llmsim workloads --json`` print them;
- ``changelog.md``: the repository's ``CHANGELOG.md``, so that the site can link to it.

Registered in ``mkdocs.yml`` (``hooks: [docs/hooks/reference.py]``); ``mkdocs build --strict`` fails on any warning
this hook logs (a page it could not generate).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import logging
import re
import types
import typing
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.reference")

GENERATED_NOTE = (
    "!!! note \"Generated\"\n"
    "    This page is generated from the code when the site is built (`docs/hooks/reference.py`); "
    "edit {source}, not this page.\n"
)


# --- text helpers -----------------------------------------------------------------------------------------------
_RST_ROLE = re.compile(r":(?:mod|func|class|attr|meth|data|obj|exc):`~?([^`]+)`")


def _markdown(text: str | None) -> str:
    """Docstring / description text as Markdown: RST roles and double backticks as code spans."""
    if not text:
        return ""
    text = _RST_ROLE.sub(r"`\1`", text)
    return text.replace("``", "`")


def _cell(text: str | None) -> str:
    """Text fit for one Markdown table cell: one line, pipes escaped."""
    text = " ".join(_markdown(text).split())
    parts = text.split("`")  # odd parts are code spans, where a pipe does not split a cell (and a backslash shows)
    return "`".join(part if i % 2 else part.replace("|", "\\|") for i, part in enumerate(parts))


def _own_doc(cls: type) -> str:
    """The class's own docstring (not one inherited from pydantic's BaseModel)."""
    doc = cls.__dict__.get("__doc__")
    return inspect.cleandoc(doc) if doc else ""


def _value(value: Any) -> str:
    """A default value as YAML would spell it, in a code span."""
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float, str)):
        text = str(value)
    else:
        try:
            text = json.dumps(value, default=str, ensure_ascii=False)
        except (TypeError, ValueError):
            text = str(value)
    text = text.replace("`", "'")
    return f"`{text}`" if text else "`\"\"`"


# --- pydantic models --------------------------------------------------------------------------------------------
def _strip_annotated(annotation: Any) -> tuple[Any, list[Any]]:
    metadata: list[Any] = []
    while typing.get_origin(annotation) is typing.Annotated:
        args = typing.get_args(annotation)
        annotation, metadata = args[0], metadata + list(args[1:])
    return annotation, metadata


def _is_model(annotation: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _union_members(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return list(typing.get_args(annotation))
    return [annotation]


def _literal_values(annotation: Any) -> list[Any] | None:
    annotation, _ = _strip_annotated(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    return None


def _variant_tag(member: Any) -> str | None:
    """The ``kind`` a member of a discriminated union is chosen by: its ``Tag``, else its ``kind`` Literal."""
    inner, metadata = _strip_annotated(member)
    for item in metadata:
        tag = getattr(item, "tag", None)
        if isinstance(tag, str):
            return tag
    if _is_model(inner) and "kind" in inner.model_fields:
        values = _literal_values(inner.model_fields["kind"].annotation)
        if values:
            return ", ".join(str(v) for v in values)
    return None


def _type_text(annotation: Any) -> str:
    """A field's type in words: int, float, one of the listed words, a section, a list or map of them."""
    annotation, _ = _strip_annotated(annotation)
    if annotation is type(None):
        return "null"
    if annotation is Any:
        return "any"
    literal = _literal_values(annotation)
    if literal is not None:
        return " or ".join(_value(v) for v in literal)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = _union_members(annotation)
        models = [m for m in members if _is_model(_strip_annotated(m)[0])]
        rest = [_type_text(m) for m in members if m not in models]
        if len(models) > 1:
            tags = [_variant_tag(m) for m in models]
            rest.insert(0, "section chosen by `kind`" if all(tags) else "section")
        elif models:
            rest.insert(0, "section")
        seen: list[str] = []
        for text in rest:
            if text not in seen:
                seen.append(text)
        return " or ".join(seen)
    if origin in (list, tuple, set, frozenset):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return f"list of {_type_text(args[0])}" if args else "list"
    if origin is dict:
        key, val = typing.get_args(annotation) or (Any, Any)
        return f"map of {_type_text(key)} to {_type_text(val)}"
    if _is_model(annotation):
        return "section"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(metadata: list[Any]) -> list[str]:
    words = []
    for item in metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(item, attr, None)
            if value is not None and type(item).__name__.lower() == attr:
                words.append(f"{sign} {value:,}" if isinstance(value, int) else f"{sign} {value:g}")
        if type(item).__name__ == "MinLen":
            words.append(f"at least {item.min_length} items")
        if type(item).__name__ == "MaxLen":
            words.append(f"at most {item.max_length:,} items")
    return words


def _plugin_section(field: Any) -> Any:
    """The plug-in section (``simulator.config.plugins.PluginSection``) a field is, or None."""
    return next((meta for meta in field.metadata if hasattr(meta, "choices")), None)


def _plugin_models(section: Any, path: str) -> list[tuple[str, type, str | None]]:
    """A plug-in section's config classes, each with the kinds it is registered under (none where one class
    serves every kind, as the routers' does)."""
    kinds: dict[type, list[str]] = {}
    for tag, model in section.choices().items():
        kinds.setdefault(model, []).append(tag)
    if len(kinds) == 1:
        return [(path, next(iter(kinds)), None)]
    return [(path, model, ", ".join(tags)) for model, tags in kinds.items()]


def _default_text(field: Any) -> str:
    from pydantic import BaseModel

    if field.is_required():
        return "required"
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:
            return "(computed)"
    else:
        value = field.default
    section = _plugin_section(field)
    if section is not None and isinstance(value, dict):  # the default kind's defaults
        value = section.validate(value)
    if isinstance(value, BaseModel):
        dumped = value.model_dump(mode="json")
        text = json.dumps(dumped, ensure_ascii=False)
        return "the section's defaults" if len(text) > 60 else _value(dumped)
    return _value(value)


_MAP_KEYS = {"_by_generation": "generation", "_by_dtype": "format", "_by_gpu": "gpu", "collectives": "operation",
             "deepep": "mode", "grid": "path", "zip": "path"}


def _nested_models(annotation: Any, path: str) -> list[tuple[str, type, str | None]]:
    """The sections a field holds, as (dotted path, model, union tag): itself, list items, map values."""
    annotation, _ = _strip_annotated(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [m for m in _union_members(annotation) if _is_model(_strip_annotated(m)[0])]
        if len(members) > 1:
            return [(path, _strip_annotated(m)[0], _variant_tag(m)) for m in members]
        found = []
        for member in _union_members(annotation):
            found.extend(_nested_models(member, path))
        return found
    if origin in (list, tuple, set, frozenset):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return _nested_models(args[0], f"{path}[]") if args else []
    if origin is dict:
        key, val = typing.get_args(annotation) or (Any, Any)
        field_name = path.rsplit(".", 1)[-1]
        name = next((word for suffix, word in _MAP_KEYS.items() if field_name.endswith(suffix)), "name")
        if "bf16" in (_literal_values(key) or ()):
            name = "format"
        return _nested_models(val, f"{path}.<{name}>")
    if _is_model(annotation):
        return [(path, annotation, None)]
    return []


def _sections_below(model: type, path: str, stack: tuple[type, ...]) -> list[tuple[str, list]]:
    """The sections (or unions of them) ``model``'s fields hold: (path, [(path, model, tag), ...])."""
    below = []
    for name, field in model.model_fields.items():
        dotted = f"{path}.{name}" if path else name
        section = _plugin_section(field)
        found = _plugin_models(section, dotted) if section else _nested_models(field.annotation, dotted)
        nested = [n for n in found if n[1] not in (*stack, model)]
        if nested:
            below.append((nested[0][0], nested))
    return below


def _canonical_paths(model: type) -> dict[Any, str]:
    """Where each section (or union of sections) is described in full: the shallowest path it is met at."""
    found: dict[Any, tuple[int, int, str]] = {}
    queue: list[tuple[type, str, tuple[type, ...]]] = [(model, "", ())]
    order = 0
    while queue:
        current, path, stack = queue.pop(0)
        for sub_path, nested in _sections_below(current, path, stack):
            key = frozenset(n[1] for n in nested)
            order += 1
            depth = sub_path.count(".")
            if key not in found or (depth, order) < found[key][:2]:
                found[key] = (depth, order, sub_path)
            if found[key][2] == sub_path:
                queue.extend((n_model, n_path, (*stack, current)) for n_path, n_model, _ in nested)
    return {key: value[2] for key, value in found.items()}


def _model_sections(model: type, path: str, tag: str | None = None, stack: tuple[type, ...] = (),
                    canonical: dict[Any, str] | None = None, described: set | None = None) -> list[str]:
    """Markdown for ``model`` at ``path`` and, after it, every section below it. A section (or a union of
    sections) met at several paths is described in full once, at the shallowest, and named at the others; one
    that every kind of a union holds at the same path is described under the first kind."""
    canonical = _canonical_paths(model) if canonical is None else canonical
    described = set() if described is None else described
    title = f"`{path}`" if path else "Top level"
    kind_field = model.model_fields.get("kind")
    if tag and kind_field is not None and _literal_values(kind_field.annotation) is None:
        title += " — `kind:` a class of your own (`file.py:Class` or a dotted path)"
    elif tag:
        title += f" — `kind: {tag}`"
    lines = [f"## {title}", ""]
    doc = _own_doc(model)
    if doc:
        lines += [_markdown(doc), ""]
    lines += ["| field | type | default | description |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        dotted = f"{path}.{name}" if path else name
        section = _plugin_section(field)
        plural = section is not None and len(_plugin_models(section, dotted)) > 1
        type_words = "section chosen by `kind`" if plural else _type_text(field.annotation)
        bounds = _bounds(list(field.metadata))
        if bounds:
            type_words += ", " + ", ".join(bounds)
        lines.append(f"| `{dotted}` | {type_words} | {_default_text(field)} | {_cell(field.description)} |")
    lines.append("")
    for sub_path, nested in _sections_below(model, path, stack):
        key = frozenset(n[1] for n in nested)
        home = canonical.get(key, sub_path)
        if (key, sub_path) in described:
            continue
        described.add((key, sub_path))
        if home != sub_path:
            what = "kinds and fields" if len(nested) > 1 else "fields"
            lines += [f"## `{sub_path}`", "", f"The same {what} as `{home}`.", ""]
            continue
        for n_path, n_model, n_tag in nested:
            lines += _model_sections(n_model, n_path, n_tag, (*stack, model), canonical, described)
    return lines


# --- pages ------------------------------------------------------------------------------------------------------
def configuration_page() -> str:
    from simulator.config import ExperimentConfig

    lines = [
        "# Configuration reference",
        "",
        GENERATED_NOTE.format(source="the pydantic models in `simulator/config/` (their docstrings and `Field("
                              "description=...)`)"),
        "Every key an experiment file may hold, by its dotted path — the same path `--set` takes "
        "(`--set workload.arrival.rate=12`; list elements as `workload.classes[0].share=2`). "
        "Unknown keys are refused, a section with several kinds is chosen by its `kind:` "
        "(each kind has its own table below), times carry their unit in the name (`_ms`, `_s`), sizes theirs "
        "(`_gib`), rates are per second. A `scheduler` or `kv_cache` section left out takes the engine profile's "
        "server defaults on the experiment's GPU; a section that names no kind (or the engine's kind) takes those "
        "defaults for the keys it leaves out. See the [guide](../guide/running.md) for worked examples.",
        "",
    ]
    lines += _model_sections(ExperimentConfig, "")
    return "\n".join(lines) + "\n"


def _profile_page(title: str, model: type, source: str, intro: str) -> str:
    module_doc = inspect.getdoc(inspect.getmodule(model)) or ""
    lines = [f"# {title}", "", GENERATED_NOTE.format(source=source), intro, ""]
    if module_doc:
        lines += ["From the module's docstring:", "", _markdown(module_doc), ""]
    lines += _model_sections(model, "")
    return "\n".join(lines) + "\n"


def hardware_page() -> str:
    from simulator.catalog import HardwareSpec

    return _profile_page(
        "Hardware profile fields", HardwareSpec, "`HardwareSpec` in `simulator/catalog/hardware.py`",
        "A GPU is a YAML file in `hardware_profiles/` (its catalog name is the file's stem) or any YAML given by "
        "path in `hardware:`. Spec-sheet numbers cite their datasheet in a comment; the fitted parameters sit under "
        "`fit`, grouped by kind of kernel, and those a profile leaves out come from its `generation` "
        "(`hardware_profiles/generations/GEN.yaml`), field by field. `hardware: NAME@GENERATION` keeps the spec sheet "
        "and takes another generation's fitted parameters. See "
        "[Extending: a GPU](../extending.md#a-gpu-hardware-profile).",
    )


def engine_page() -> str:
    try:
        from simulator.catalog import EngineProfile
    except ImportError:
        from simulator.cost.engine import EngineProfile

    return _profile_page(
        "Engine profile fields", EngineProfile, "`EngineProfile` in `simulator/catalog/engines.py`",
        "A serving engine is a YAML file in `engine_profiles/` (`vllm`, `vllm-0.14`, `sglang`, `trtllm`, "
        "`splitwise`, `ideal`) or any YAML given by path in `engine:` / `--engine`. A profile may start with "
        "`extends: NAME` and state only what differs. Its `server_defaults` fill the `scheduler` and `kv_cache` "
        "settings an experiment leaves out. See [Extending: an engine profile](../extending.md#an-engine-profile).",
    )


def metrics_page() -> str:
    try:
        import simulator.results.metrics as metrics
    except ImportError:
        import simulator.metrics as metrics

    doc = inspect.getdoc(metrics) or ""
    lines = [
        "# Metric definitions",
        "",
        GENERATED_NOTE.format(source="the docstring of `simulator/results/metrics.py`"),
        "Every number in `summary.json`, `llmsim run --json` and `Result.summary` is computed in one module from "
        "the per-request table (one row per request) and the inter-token-gap histogram. Names follow vLLM's "
        "benchmark output: `mean_`, `median_`, `std_`, `p90_`, `p95_`, `p99_`, `p99.9_` of `ttft_ms`, "
        "`tpot_ms`, `itl_ms`, `e2el_ms` and `max_itl_ms`; `request_throughput`, `output_throughput`, "
        "`total_token_throughput`, `request_goodput`, `slo_attainment`. The summary also carries "
        "`schema_version`, `llmsim_version` and `about` (what the run describes); see "
        "[Running experiments](../guide/running.md#outputs).",
        "",
        "## Definitions",
        "",
        _markdown(doc.split("\n", 1)[1] if "\n" in doc else doc),
        "",
    ]
    try:
        from simulator.studies.comparison import summary_keys
    except ImportError:
        from simulator.comparison import summary_keys
    keys = summary_keys()
    lines += [
        "## Every summary key",
        "",
        f"The {len(keys)} keys a run's summary can hold (the disaggregated, multi-turn, autoscaling, LoRA, fault and "
        "speculative-decoding keys appear only in such runs), in the order `summary.json` gives them; with "
        "`workload.classes`, also `<class>.<metric>` per class, and with speculative decoding "
        "`acceptance_rate_pos<i>` per drafted position. A comparison or regression suite may name any of them.",
        "",
        ", ".join(f"`{key}`" for key in keys),
        "",
    ]
    return "\n".join(lines) + "\n"


def study_files_page() -> str:
    try:
        from simulator.studies.comparison import ComparisonConfig
        from simulator.studies.plan import PlanConfig
        from simulator.studies.sweep import SweepConfig
    except ImportError:
        from simulator.comparison import ComparisonConfig
        from simulator.plan import PlanConfig
        from simulator.sweep import SweepConfig

    lines = [
        "# Study files: sweeps, plans, comparisons",
        "",
        GENERATED_NOTE.format(source="the pydantic models in `simulator/studies/`"),
        "The files `llmsim sweep`, `llmsim plan`, `llmsim compare` and `llmsim regress` read. Each names a `base` "
        "experiment (a path relative to the file, or an inline experiment) and changes it by dotted paths, the "
        "same paths as the [configuration reference](configuration.md). Guides: [sweeps](../guide/sweeps.md), "
        "[plans](../guide/deployments.md), [comparisons and the regression suite](../guide/policies-in-ci.md).",
        "",
    ]
    for title, model in (("Sweep file", SweepConfig), ("Plan file", PlanConfig), ("Comparison file", ComparisonConfig)):
        section = _model_sections(model, "")
        section[0] = f"# {title}"  # each model's top level as a page section
        lines += [line.replace("## ", "### ", 1) if line.startswith("## ") else line.replace("# ", "## ", 1)
                  if line.startswith("# ") else line for line in section]
    return "\n".join(lines) + "\n"


def _cli_json(*argv: str) -> Any:
    """What ``llmsim ARGV`` prints as JSON, run in this process (``simulator.cli:main``, the console script)."""
    from simulator.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main([*argv, "--quiet"])
    if status:
        raise RuntimeError(f"llmsim {' '.join(argv)} exited with status {status}")
    return json.loads(out.getvalue())


def _params(count: float | None) -> str:
    if not count:
        return ""
    return f"{count / 1e9:,.1f}B" if count >= 1e9 else f"{count / 1e6:,.0f}M"


def catalog_page() -> str:
    models = _cli_json("models", "--json")
    gpus = _cli_json("gpus", "--json")
    presets = _cli_json("workloads", "--json")
    lines = [
        "# Catalog: models, GPUs, workload presets",
        "",
        GENERATED_NOTE.format(source="the catalogs (`simulator/catalog/`, `hardware_profiles/`, `workloads/`)"),
        "What `llmsim models`, `llmsim gpus` and `llmsim workloads` list (each takes `--json`). A model is also "
        "found by its Hugging Face id, in any case; any other model is a model YAML or a Hugging Face "
        "`config.json` given by path (see [Models](../concepts/models.md)).",
        "",
        "## Models",
        "",
        "| name | layer groups | total / active parameters | checkpoint | KV bytes per token | source |",
        "|---|---|---|---|---|---|",
    ]
    for m in models:
        groups = "; ".join(m.get("groups", []))
        params = _params(m.get("total_params"))
        if m.get("active_params") and m.get("active_params") != m.get("total_params"):
            params += f" / {_params(m['active_params'])}"
        kv = m.get("kv_bytes_per_token")
        kv_text = f"{kv:,.0f}" if isinstance(kv, (int, float)) else ""
        source = m.get("source", "")
        link = source.removeprefix("https://huggingface.co/").removesuffix("/blob/main/config.json")
        lines.append(f"| `{m['name']}` | {_cell(groups)} | {params} | {m.get('checkpoint_dtype', '')} | {kv_text} | "
                     f"{_cell(link)} |")
    lines += ["", "## GPUs", "",
              "| name | generation | memory GiB | HBM GB/s | peak dense TFLOP/s | link GB/s | GPUs per node | SMs "
              "| what |",
              "|---|---|---|---|---|---|---|---|---|"]
    for g in gpus:
        peaks = ", ".join(f"{k} {v:g}" for k, v in (g.get("peak_tflops") or {}).items() if v)
        lines.append(f"| `{g['name']}` | {g.get('generation', '')} | {g.get('memory_gib', ''):g} | "
                     f"{g.get('memory_bandwidth_gb_per_s', 0):g} | {peaks} | {g.get('interconnect_gb_per_s', 0):g} | "
                     f"{g.get('gpus_per_node', '')} | {g.get('sm_count', '')} | {_cell(g.get('description'))} |")
    lines += ["", "## Workload presets", "",
              "Used as `workload: {preset: NAME, num_requests: N}`; see [Workloads and traces]"
              "(../guide/workloads.md#named-workloads-presets).", ""]
    for p in presets:
        lines += [f"### `{p.get('name', '?')}`", "", _markdown(p.get("description", "")), ""]
        if p.get("source"):
            lines += [f"- **source**: {_cell(p['source'])}"]
        if p.get("fitted_by"):
            lines += [f"- **fitted by**: `{p['fitted_by']}`"]
        if p.get("statistics"):
            lines += [f"- **statistics it reproduces**: `{json.dumps(p['statistics'], ensure_ascii=False)}`"]
        lines += [f"- **its lengths and arrival**: `workloads/{p.get('name', '?')}.yaml`", ""]
    return "\n".join(lines) + "\n"


def _expanded_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    try:
        return parser._get_formatter()._expand_help(action)
    except (KeyError, TypeError, ValueError):
        return action.help


def _argument_row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    takes_value = action.nargs != 0
    metavar = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    if action.option_strings:
        name = ", ".join(action.option_strings)
        if takes_value:
            name += f" {metavar}"
    else:
        name = metavar
    default = action.default
    default_text = "" if default in (None, argparse.SUPPRESS, False, []) or not takes_value else _value(default)
    notes = []
    if action.required:
        notes.append("required")
    elif not action.option_strings and action.nargs == "?":
        notes.append("optional")
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        notes.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
    help_text = _cell(_expanded_help(parser, action))
    if isinstance(action, argparse._AppendAction) and "repeatable" not in help_text:
        notes.append("repeatable")
    if notes:
        help_text = (help_text + " " if help_text else "") + "(" + "; ".join(notes) + ")"
    return f"| `{name}` | {default_text} | {help_text} |"


def cli_page() -> str:
    from simulator.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in subparsers._choices_actions}
    lines = [
        "# Command line reference (`llmsim`)",
        "",
        GENERATED_NOTE.format(source="the argparse parser in `simulator/cli/` (`build_parser`)"),
        _markdown(parser.description or ""),
        "",
        "Every subcommand takes `--quiet` (no progress bars, no \"wrote …\" lines; results on stdout and errors "
        "stay). An error of the input is one line on stderr naming the field or `file:line`, with exit status 2; "
        "`compare` and `regress` exit 1 when a finding breaks or a metric leaves its tolerance.",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    for name in subparsers.choices:
        lines.append(f"| [`llmsim {name}`](#llmsim-{name}) | {_cell(helps.get(name))} |")
    lines.append("")
    for name, sub in subparsers.choices.items():
        sub.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100, max_help_position=40)
        usage = sub.format_usage().strip().removeprefix("usage: ")
        first, *rest = usage.splitlines()
        usage = "\n".join([first, *(line[len("usage: "):] if line.startswith(" " * 7) else line for line in rest)])
        lines += [f"## `llmsim {name}`", "", _markdown(helps.get(name) or ""), "", "```text", usage, "```", ""]
        rows = [_argument_row(sub, a) for a in sub._actions if not isinstance(a, argparse._HelpAction)]
        if rows:
            lines += ["| argument | default | meaning |", "|---|---|---|", *rows, ""]
    return "\n".join(lines) + "\n"


def changelog_page(config: Any) -> str:
    path = Path(config["config_file_path"]).parent / "CHANGELOG.md"
    return path.read_text(encoding="utf-8")


PAGES = {
    "reference/cli.md": cli_page,
    "reference/configuration.md": configuration_page,
    "reference/metrics.md": metrics_page,
    "reference/hardware-profiles.md": hardware_page,
    "reference/engine-profiles.md": engine_page,
    "reference/catalog.md": catalog_page,
    "reference/study-files.md": study_files_page,
}


def on_files(files, config):
    for uri, build in PAGES.items():
        try:
            content = build()
        except Exception as exc:  # a page the code could not give: the build warns (and --strict fails)
            log.warning("reference page %s could not be generated: %s: %s", uri, type(exc).__name__, exc)
            content = f"# {uri}\n\nThis page could not be generated: `{type(exc).__name__}: {exc}`.\n"
        files.append(File.generated(config, uri, content=content))
    try:
        files.append(File.generated(config, "changelog.md", content=changelog_page(config)))
    except OSError as exc:
        log.warning("CHANGELOG.md could not be read: %s", exc)
    return files
