"""Sections chosen by a plug-in's ``kind`` (``scheduler``, ``kv_cache``, ``cost_model``, ``cluster.router``): a
discriminated union whose members are not listed here but read from the family's registry.

A built-in plug-in registers its class with the config class of its section beside it, in a module of its family's
package (``@SCHEDULERS.register("chunked", config=ChunkedSchedulerConfig)``). A field annotated
``Annotated[SchedulerBase, PluginSection("scheduler", default="continuous", custom=CustomSchedulerConfig)]`` is
validated, when a section is, as the union of the registered config classes tagged by their kinds
(:func:`simulator.registry.family` imports the built-ins then; this layer, below the plug-in packages, never
imports them itself), plus, for a ``kind`` that is a dotted path or ``file.py:Class`` (a user's class), the
family's ``custom`` config class. So the contract of the section is what it was as a hand-written union:

- a section without ``kind`` takes ``default``; a ``kind`` neither registered nor (with ``custom``) a path is one
  error, ``unknown kind 'x' (allowed: ...)``, listing the registered kinds;
- the section's own errors carry its kind as a union tag in their location (``scheduler.chunked.foo``), which
  :func:`simulator.errors.validation_messages` drops through :meth:`PluginSection.model_for`;
- a validated section is an instance of the kind's config class, dumped with that class's fields (in its field
  order); the JSON schema is the union of the config classes.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Union

from pydantic import BaseModel, Discriminator, Tag, TypeAdapter
from pydantic_core import PydanticCustomError, core_schema

from simulator.registry import family, is_path

CUSTOM = "custom"  # the union tag of a user's class named by path


class PluginSection:
    """Pydantic metadata: the field is the section of plug-in ``family_name``, its config class chosen by ``kind``
    (``default`` when left out). ``custom``: the config class of a user's class named by path (None: the family
    takes registered kinds only). ``shorthand``: a bare string is the kind (``router: least_kv_load``)."""

    def __init__(self, family_name: str, default: str, custom: type[BaseModel] | None = None,
                 shorthand: bool = False) -> None:
        self.family_name = family_name
        self.default = default
        self.custom = custom
        self.shorthand = shorthand

    def choices(self) -> dict[str, type[BaseModel]]:
        """Union tag -> config class: each registered kind (sorted), then ``custom`` if the family has it."""
        registry = family(self.family_name)
        found: dict[str, type[BaseModel]] = {}
        for kind in registry.kinds():
            config = registry.config_class(kind)
            assert config is not None  # every registered kind has one
            found[kind] = config
        if self.custom is not None:
            found[CUSTOM] = self.custom
        return found

    def model_for(self, tag: str) -> type[BaseModel] | None:
        """The config class a union tag (a registered kind, or ``custom``) stands for; None for any other word."""
        return self.choices().get(tag)

    def _tag(self, value: Any) -> str | None:
        kind = value.get("kind", self.default) if isinstance(value, dict) else getattr(value, "kind", None)
        if isinstance(kind, str) and self.custom is not None and is_path(kind):
            return CUSTOM
        return kind if isinstance(kind, str) else None

    def validate(self, value: Any) -> Any:
        """The section ``value`` describes, as its kind's config class (raises pydantic's ValidationError)."""
        if self.shorthand and isinstance(value, str):
            value = {"kind": value}
        choices = self.choices()
        if isinstance(value, dict):
            tag = self._tag(value)
            if tag not in choices:
                allowed = ", ".join(repr(kind) for kind in choices if kind != CUSTOM)
                if self.custom is not None:
                    allowed += ", or a class of your own (file.py:Class or a dotted path)"
                raise PydanticCustomError("union_tag_invalid", "unknown kind '{tag}' (allowed: {expected_tags})",
                                          {"tag": str(value.get("kind", self.default)), "expected_tags": allowed})
        return _union(tuple(choices.items()), self).validate_python(value)

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            self.validate, serialization=core_schema.simple_ser_schema("any"))  # as the instance's own class

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema, handler: Any) -> Any:
        """The union of the config classes, with the default kind's defaults (a field's own default wins)."""
        return {**handler(_union(tuple(self.choices().items()), self).core_schema),
                "default": self.validate({}).model_dump(mode="json")}


@lru_cache(maxsize=64)
def _union(choices: tuple[tuple[str, type[BaseModel]], ...], section: PluginSection) -> TypeAdapter[Any]:
    """The discriminated union of ``choices`` (built once per set of registered kinds)."""
    members = tuple(Annotated[config, Tag(tag)] for tag, config in choices)
    union: Any = Annotated[Union[members], Discriminator(section._tag)]  # noqa: UP007 (of a built tuple)
    return TypeAdapter(union)
