"""The YAML every input is read with: YAML 1.2 scalars, no duplicate keys, bounded nesting and alias expansion.

PyYAML's ``safe_load`` follows YAML 1.1, which reads ``1:30`` as the integer 90 (sexagesimal), ``on`` / ``yes`` as
booleans and ``1e-3`` as a string, and lets a repeated key silently replace the first. Here, as in YAML 1.2's core
schema: booleans are ``true`` / ``false`` only, integers are decimal (or ``0x`` / ``0o``), floats include ``1e-3``
and ``.inf`` / ``.nan`` (which the experiment schema then refuses), anything else is a string; a repeated key is an
error. Documents nested deeper than :data:`MAX_DEPTH` or expanding more than :data:`MAX_NODES` nodes through aliases
("billion laughs") are refused, and so are integers of more than :data:`MAX_DIGITS` digits.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

MAX_DEPTH = 100
MAX_NODES = 1_000_000
MAX_DIGITS = 40


class YAMLInputError(ValueError):
    """A document this reader refuses; ``line`` is 1-based where known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]  # C parser if built
    """SafeLoader (on libyaml's C parser where PyYAML has it: 6× faster) with YAML 1.2 core-schema scalars and the
    checks above."""

    def construct_document(self, node: yaml.Node) -> Any:
        self._check_size(node, 0, {})
        return super().construct_document(node)

    def _check_size(self, node: yaml.Node, depth: int, seen: dict[int, int]) -> int:
        """Nodes the document expands to (aliases counted each time they are used); raises beyond the limits."""
        if depth > MAX_DEPTH:
            raise YAMLInputError(f"nested more than {MAX_DEPTH} levels deep", node.start_mark.line + 1)
        if id(node) in seen:
            count = seen[id(node)]
        else:
            count = 1
            if isinstance(node, yaml.SequenceNode):
                count += sum(self._check_size(item, depth + 1, seen) for item in node.value)
            elif isinstance(node, yaml.MappingNode):
                count += sum(self._check_size(key, depth + 1, seen) + self._check_size(value, depth + 1, seen)
                             for key, value in node.value)
            seen[id(node)] = count
        if count > MAX_NODES:
            raise YAMLInputError(f"expands to more than {MAX_NODES:,} values (aliases)", node.start_mark.line + 1)
        return count

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        keys: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in keys
            except TypeError:  # an unhashable key: SafeLoader reports it
                break
            if duplicate:
                raise YAMLInputError(f"duplicate key {key!r}", key_node.start_mark.line + 1)
            keys.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = self.construct_scalar(node).replace("_", "")
        if len(text.lstrip("+-")) > MAX_DIGITS:
            raise YAMLInputError(f"an integer of more than {MAX_DIGITS} digits", node.start_mark.line + 1)
        return int(text, 0) if text.lstrip("+-").startswith(("0x", "0o")) else int(text)


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
StrictLoader.add_constructor("tag:yaml.org,2002:map", StrictLoader.construct_yaml_map)

# YAML 1.2 core schema resolvers in place of YAML 1.1's
StrictLoader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers
          if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0x[0-9a-fA-F]+|0o[0-7]+)$"), list("-+0123456789"))
_FLOAT = (r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
          r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(_FLOAT), list("-+0123456789."))


def load_yaml(text: str) -> Any:
    """Parse one YAML document with :class:`StrictLoader` (raises ``yaml.YAMLError`` or :class:`YAMLInputError`)."""
    try:
        return yaml.load(text, Loader=StrictLoader)
    except RecursionError:
        raise YAMLInputError(f"nested more than {MAX_DEPTH} levels deep") from None
