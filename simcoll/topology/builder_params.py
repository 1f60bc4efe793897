"""A builder's parameters read from a topology file's ``[params]`` and ``--set``: names,
types and units come from the builder's signature (``link_bandwidth_bytes_per_s`` is
written ``link_bandwidth = "300 GB/s"``), so a new builder needs no table here."""

from __future__ import annotations

import builtins
import inspect
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.units import parse_bandwidth_bytes_per_s, parse_size_bytes, parse_time_s
from simcoll.topology.explicit import key_text

_ValueKind = Literal["int", "float", "bool", "str", "enum", "bytes", "seconds", "bytes_per_s"]


# Longest suffix first: "_bytes_per_s" also ends in "_s".
_UNIT_SUFFIXES: tuple[tuple[str, _ValueKind], ...] = (
    ("_bytes_per_s", "bytes_per_s"),
    ("_s", "seconds"),
    ("_bytes", "bytes"),
)


_ARTICLE = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


_INTEGER = re.compile(r"[+-]?\d+")


_BOOLEANS = {"true": True, "false": False}


@dataclass(frozen=True)
class Param:
    """One builder argument as a topology file spells it."""

    name: str  # the builder's keyword, e.g. "link_bandwidth_bytes_per_s"
    key: str  # the TOML key, e.g. "link_bandwidth"
    kind: _ValueKind
    enum: type[Enum] | None
    required: bool


def builder_params(builder: Callable[..., object], *, skip_first: bool = False) -> dict[str, Param]:
    """The builder's arguments keyed by their TOML key, in signature order.

    ``skip_first`` leaves out an importer's first argument, the text it parses.
    """
    params: dict[str, Param] = {}
    arguments = list(inspect.signature(builder).parameters.values())
    for parameter in arguments[1:] if skip_first else arguments:
        annotation = _resolve(builder, parameter.annotation)
        param = _param(parameter.name, annotation, parameter.default is inspect.Parameter.empty)
        if param.key in params:
            raise TypeError(
                f"builder arguments {params[param.key].name!r} and {param.name!r} "
                f"would both be written {param.key!r} in a topology file"
            )
        params[param.key] = param
    return params


def file_field(
    builder_field: str | None, fields: dict[str, str], params: dict[str, Param]
) -> str | None:
    """Where a builder's complaint about one of its arguments points in the file."""
    if builder_field in fields:
        return fields[builder_field]
    keys = {param.name: param.key for param in params.values()}
    return f"params.{keys[builder_field]}" if builder_field in keys else builder_field


def _resolve(builder: Callable[..., object], annotation: object) -> object:
    """Turn a postponed annotation (``"int"``, ``"LinkKind"``) into the object it names."""
    if not isinstance(annotation, str):
        return annotation
    # An optional argument ("bool | None", default None) is given in a file as its type.
    annotation = annotation.removesuffix(" | None")
    namespace = getattr(builder, "__globals__", {})
    return namespace.get(annotation, getattr(builtins, annotation, annotation))


def _param(name: str, annotation: object, required: bool) -> Param:
    if annotation in (int, float):
        for suffix, kind in _UNIT_SUFFIXES:
            if name.endswith(suffix):
                return Param(name, name.removesuffix(suffix), kind, None, required)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return Param(name, name, "enum", annotation, required)
    if isinstance(annotation, type) and annotation in _SIMPLE_KINDS:
        return Param(name, name, _SIMPLE_KINDS[annotation], None, required)
    raise TypeError(
        f"builder argument {name!r} has a type topology files cannot give: {annotation!r}"
    )


def collect_params(
    builder_name: str,
    params: dict[str, Param],
    table: dict[str, Any],
    overrides: Mapping[str, str],
    source: str,
) -> tuple[dict[str, object], dict[str, str]]:
    """Convert the file's and the overrides' values into builder keyword arguments.

    Returns the arguments and, for each argument, the field its value came from.
    """
    valid = ", ".join(params)
    values: dict[str, object] = {}
    fields: dict[str, str] = {}
    items = [(f"params.{key_text(key)}", key, value, False) for key, value in table.items()]
    items += [(f"--set {key_text(key)}", key, text, True) for key, text in overrides.items()]
    for field, key, raw, is_text in items:
        param = params.get(key)
        if param is None:
            raise ConfigError(
                f"unknown parameter of builder {builder_name!r}; valid: {valid}",
                source=source,
                field=field,
            )
        value = _from_text(param, raw) if is_text else raw
        values[param.name] = convert(param, value, source=source, field=field)
        fields[param.name] = field
    for param in params.values():
        if param.required and param.name not in values:
            raise ConfigError(
                f"missing; builder {builder_name!r} needs it (required: "
                f"{', '.join(p.key for p in params.values() if p.required)})",
                source=source,
                field=f"params.{param.key}",
            )
    return values, fields


def _from_text(param: Param, text: str) -> object:
    """Read a command-line string as the TOML value it stands for, when it is one."""
    if param.kind == "int" and _INTEGER.fullmatch(text):
        return int(text)
    if param.kind == "float":
        try:
            return float(text)
        except ValueError:
            return text
    if param.kind == "bool":
        return _BOOLEANS.get(text, text)
    return text


def convert(param: Param, value: object, *, source: str, field: str) -> object:
    """``value`` of the file's key ``field`` as ``param`` takes it, or a one-line error."""
    try:
        return _convert_value(param, value)
    except SimcollError as error:
        raise ConfigError(error.message, source=source, field=field) from error


def _convert_value(param: Param, value: object) -> object:
    """Check a TOML value's type and convert it; raise ConfigError (no location) if wrong."""
    if param.kind in _QUANTITY_PARSERS:
        parse, example = _QUANTITY_PARSERS[param.kind]
        if not isinstance(value, str) or _is_bare_number(value):
            raise ConfigError(
                f"expected a quantity string with its unit, e.g. {example}, got {describe(value)}"
            )
        return parse(value)
    if param.enum is not None:
        choices = {member.value: member for member in param.enum}
        if not isinstance(value, str) or value not in choices:
            raise ConfigError(f"expected one of {', '.join(choices)}, got {describe(value)}")
        return choices[value]
    if param.kind == "bool" and isinstance(value, bool):
        return value
    if param.kind == "str" and isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):  # an int serves int and float
        if param.kind == "int":
            return value
        if param.kind == "float":
            if abs(value) > sys.float_info.max:
                raise ConfigError(f"expected a number, got an integer beyond floats: {value}")
            return float(value)
    if param.kind == "float" and isinstance(value, float):
        return value
    raise ConfigError(f"expected {_ARTICLE[param.kind]}, got {describe(value)}")


def _is_bare_number(text: str) -> bool:
    """True for ``"0.5"``: a quantity without its unit, which nobody can read safely."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def describe(value: object) -> str:
    """``"float 8.0"``: the type and value, for an error message."""
    return f"{type(value).__name__} {value!r}"


_QUANTITY_PARSERS: dict[_ValueKind, tuple[Callable[[str], float], str]] = {
    "bytes_per_s": (parse_bandwidth_bytes_per_s, "'300 GB/s'"),
    "seconds": (parse_time_s, "'0.5 us'"),
    "bytes": (parse_size_bytes, "'256 MiB'"),
}


_SIMPLE_KINDS: dict[type, _ValueKind] = {bool: "bool", int: "int", float: "float", str: "str"}
