"""Topology files: TOML that names a builder and its parameters, with units in the values.

A topology file (see ``topologies/README.md``) looks like::

    schema = 1
    builder = "switch_star"
    description = "NVIDIA DGX A100: 8 A100 GPUs on NVSwitch"
    [params]
    n_gpus = 8
    link_bandwidth = "300 GB/s"   # per direction
    link_latency = "0.5 us"

The keys of ``[params]`` are the builder's keyword names without their unit suffix: the
argument ``link_bandwidth_bytes_per_s`` is written ``link_bandwidth`` and its value is a
bandwidth string, ``*_s`` arguments take durations and ``*_bytes`` arguments sizes. The
mapping is read from the builder's signature, so a new builder needs no table here.

Every problem is a :class:`~simcoll.core.errors.ConfigError` (or, from the builder or the
schema, a :class:`~simcoll.core.errors.TopologyError`) that renders as one line naming the
file and the key, e.g. ``dgx.toml: params.link_bandwidth: ...``.

>>> parse_overrides(["n_gpus=4", "link_bandwidth = 100 GB/s"])
{'n_gpus': '4', 'link_bandwidth': '100 GB/s'}
"""

from __future__ import annotations

import builtins
import inspect
import json
import re
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import networkx as nx

from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.units import parse_bandwidth_bytes_per_s, parse_size_bytes, parse_time_s
from simcoll.topology.catalog import BUILDERS, IMPORTERS
from simcoll.topology.explicit import from_document, key_text
from simcoll.topology.nodelink import from_node_link
from simcoll.topology.routing import ROUTING_RULES
from simcoll.topology.schema import validate

__all__ = ["SCHEMA_VERSION", "load", "parse_overrides"]

SCHEMA_VERSION = 1
"""The ``schema`` value this version of simcoll reads."""

_BUILDER_KEYS = ("schema", "builder", "description", "params", "routing")
_EXPLICIT_KEYS = ("schema", "description", "p2p", "routing", "nodes", "links")
_ValueKind = Literal["int", "float", "bool", "str", "enum", "bytes", "seconds", "bytes_per_s"]
# Longest suffix first: "_bytes_per_s" also ends in "_s".
_UNIT_SUFFIXES: tuple[tuple[str, _ValueKind], ...] = (
    ("_bytes_per_s", "bytes_per_s"),
    ("_s", "seconds"),
    ("_bytes", "bytes"),
)
_QUANTITY_PARSERS: dict[_ValueKind, tuple[Callable[[str], float], str]] = {
    "bytes_per_s": (parse_bandwidth_bytes_per_s, "'300 GB/s'"),
    "seconds": (parse_time_s, "'0.5 us'"),
    "bytes": (parse_size_bytes, "'256 MiB'"),
}
# tomllib ends its messages with "(at line 3, column 10)" or "(at end of document)".
_POSITION = re.compile(
    r"^(?P<message>.*) \(at (?:line (?P<line>\d+), column (?P<column>\d+)|end of document)\)$"
)
_SIMPLE_KINDS: dict[type, _ValueKind] = {bool: "bool", int: "int", float: "float", str: "str"}
_ARTICLE = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}
_INTEGER = re.compile(r"[+-]?\d+")
_BOOLEANS = {"true": True, "false": False}


@dataclass(frozen=True)
class _Param:
    """One builder argument as a topology file spells it."""

    name: str  # the builder's keyword, e.g. "link_bandwidth_bytes_per_s"
    key: str  # the TOML key, e.g. "link_bandwidth"
    kind: _ValueKind
    enum: type[Enum] | None
    required: bool


def load(path: str | Path, overrides: Mapping[str, str] | None = None) -> nx.DiGraph[str]:
    """Read a topology file, build its graph and validate it.

    Parameters
    ----------
    path
        The TOML file. It is named, as given, in every error.
    overrides
        ``[params]`` values from the command line (``--set KEY=VALUE``, see
        :func:`parse_overrides`), keyed as in the file and given as strings: digits for
        integers, unit strings for quantities, enum values by name, ``true``/``false``.
        They replace or add to the file's values.

    Returns
    -------
    networkx.DiGraph
        The builder's graph, validated, with ``graph.graph["source"]`` (the path as a
        string) and ``graph.graph["description"]`` set.

    Raises
    ------
    ConfigError
        If the file is missing, not UTF-8 or not TOML; has an unknown key, a wrong
        ``schema`` or an unknown builder; misses a required parameter; has a value of the
        wrong type or unit; or an override names an unknown key.
    TopologyError
        If the builder rejects a value or the graph breaks the schema.
    """
    source = str(path)
    if Path(path).suffix.lower() == ".json":
        _refuse_overrides(overrides, source, "a node-link JSON file")
        graph = from_node_link(_read_json(Path(path), source), source=source)
        graph.graph["source"] = source
        return graph
    document = _read_toml(Path(path), source)
    _check_schema(document, source)
    if "builder" not in document and ("nodes" in document or "links" in document):
        _check_keys(document, _EXPLICIT_KEYS, source)
        _refuse_overrides(overrides, source, "an explicit topology (nodes and links)")
        graph = from_document(document, source=source)
    else:
        _check_keys(document, _BUILDER_KEYS, source)
        graph = _build(document, overrides or {}, source, Path(path).parent)
    _apply_routing(graph, document.get("routing", {}), source)
    graph.graph["source"] = source
    graph.graph["description"] = _description(document, source)
    return validate(graph, source=source)


def _build(
    document: dict[str, Any], overrides: Mapping[str, str], source: str, folder: Path
) -> nx.DiGraph[str]:
    """Call the builder (or importer) the file names with the file's parameters."""
    builder_name = _builder_name(document, source)
    builder = BUILDERS.get(builder_name)
    table = document.get("params", {})
    if not isinstance(table, dict):
        raise ConfigError(
            f"must be a table ([params]), got {_describe(table)}", source=source, field="params"
        )
    if builder is None:  # an importer: its first argument is the text of params.file
        importer = IMPORTERS[builder_name]
        params = _builder_params(importer, skip_first=True)
        params["file"] = _Param("file", "file", "str", None, required=True)
    else:
        params = _builder_params(builder)
    values, fields = _collect(builder_name, params, table, overrides, source)
    try:
        if builder is None:
            file_name = str(values.pop("file"))
            text = _read_text(folder / file_name, source, file_name, field=fields["file"])
            return importer(text, **values)
        return builder(**values)
    except SimcollError as error:
        if builder is None and error.source is None:
            raise type(error)(error.message, source=file_name, field=error.field) from error
        raise type(error)(
            error.message, source=source, field=_file_field(error.field, fields, params)
        ) from error


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    """Parse ``--set KEY=VALUE`` items into a mapping for :func:`load`.

    Whitespace around the key and the value is dropped; the value may contain ``=``.

    Raises
    ------
    ConfigError
        If an item has no ``=`` or an empty key, or a key is given twice.

    >>> parse_overrides(["n_gpus"])
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: --set: expected KEY=VALUE (e.g. n_gpus=4), got 'n_gpus'
    """
    overrides: dict[str, str] = {}
    for item in items:
        key, equals, value = item.partition("=")
        key = key.strip()
        if not equals or not key:
            raise ConfigError(f"expected KEY=VALUE (e.g. n_gpus=4), got {item!r}", field="--set")
        if key in overrides:
            raise ConfigError(
                f"given twice ({overrides[key]!r} and {value.strip()!r}); give it once",
                field=f"--set {key}",
            )
        overrides[key] = value.strip()
    return overrides


def _read_toml(path: Path, source: str) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("no such file", source=source) from None
    except OSError as error:
        raise ConfigError(f"cannot read the file: {error.strerror}", source=source) from None
    except ValueError as error:  # a NUL in the path
        raise ConfigError(f"cannot read the file: {error}", source=source) from None
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")  # tolerate a byte-order mark
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise ConfigError(
            f"not UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start}); "
            "save the file as UTF-8",
            source=source,
            field=f"line {line}",
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise _toml_error(error, source) from None
    except ValueError as error:  # an integer of more than sys.get_int_max_str_digits() digits
        message = str(error).split(";")[0]
        raise ConfigError(f"invalid TOML: {message}", source=source) from None


def _toml_error(error: tomllib.TOMLDecodeError, source: str) -> ConfigError:
    """Move tomllib's "(at line 3, column 10)" into the error's field."""
    match = _POSITION.match(str(error))
    if match is None:
        return ConfigError(f"invalid TOML: {error}", source=source)
    where = f"line {match['line']}, column {match['column']}" if match["line"] else None
    return ConfigError(
        f"invalid TOML: {match['message']}", source=source, field=where or "end of document"
    )


def _check_schema(document: dict[str, Any], source: str) -> None:
    schema = document.get("schema")
    if schema is None:
        message = f"missing; the file must start with schema = {SCHEMA_VERSION}"
        raise ConfigError(message, source=source, field="schema")
    if type(schema) is not int or schema != SCHEMA_VERSION:
        message = f"unsupported version {schema!r}; this simcoll reads schema = {SCHEMA_VERSION}"
        raise ConfigError(message, source=source, field="schema")


def _check_keys(document: dict[str, Any], valid: tuple[str, ...], source: str) -> None:
    for key in document:
        if key not in valid:
            raise ConfigError(
                f"unknown key; valid keys: {', '.join(valid)}", source=source, field=key_text(key)
            )


def _builder_name(document: dict[str, Any], source: str) -> str:
    name = document.get("builder")
    if not isinstance(name, str) or not (name in BUILDERS or name in IMPORTERS):
        got = "missing" if name is None else f"unknown builder {name!r}"
        valid = ", ".join(sorted([*BUILDERS, *IMPORTERS]))
        hint = " (or list [[nodes]] and [[links]] instead)" if name is None else ""
        raise ConfigError(f"{got}{hint}; valid: {valid}", source=source, field="builder")
    return name


def _description(document: dict[str, Any], source: str) -> str:
    description = document.get("description", "")
    if not isinstance(description, str):
        message = f"must be a string, got {_describe(description)}"
        raise ConfigError(message, source=source, field="description")
    return description


def _apply_routing(graph: nx.DiGraph[str], table: object, source: str) -> None:
    """Copy the optional ``[routing]`` table onto the graph's attributes."""
    if not isinstance(table, dict):
        raise ConfigError(
            f"must be a table ([routing]), got {_describe(table)}", source=source, field="routing"
        )
    for key, value in table.items():
        field = f"routing.{key_text(key)}"
        if key == "rule":
            if value not in ROUTING_RULES:
                valid = ", ".join(ROUTING_RULES)
                raise ConfigError(
                    f"expected one of {valid}, got {_describe(value)}", source=source, field=field
                )
            graph.graph["routing"] = value
        elif key == "ecmp_seed":
            if type(value) is not int:
                raise ConfigError(
                    f"expected an integer, got {_describe(value)}", source=source, field=field
                )
            graph.graph["ecmp_seed"] = value
        else:
            raise ConfigError(
                "unknown key; valid keys: rule, ecmp_seed", source=source, field=field
            )


def _refuse_overrides(overrides: Mapping[str, str] | None, source: str, what: str) -> None:
    if overrides:
        key = next(iter(overrides))
        raise ConfigError(
            f"--set only changes builder parameters, and {what} has none",
            source=source,
            field=f"--set {key}",
        )


def _read_text(path: Path, source: str, name: str, *, field: str | None = None) -> str:
    """The UTF-8 text of a file an importer reads; errors name the key that names it."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"no such file {name!r} (relative to the topology file)", source=source, field=field
        ) from None
    except (OSError, ValueError) as error:  # ValueError: not UTF-8, or a NUL in the name
        raise ConfigError(f"cannot read {name!r}: {error}", source=source, field=field) from None


def _read_json(path: Path, source: str) -> Any:
    text = _read_text(path, source, path.name)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"invalid JSON: {error.msg}",
            source=source,
            field=f"line {error.lineno}, column {error.colno}",
        ) from None
    except ValueError as error:  # an integer of more than sys.get_int_max_str_digits() digits
        raise ConfigError(f"invalid JSON: {str(error).split(';')[0]}", source=source) from None


def _builder_params(
    builder: Callable[..., object], *, skip_first: bool = False
) -> dict[str, _Param]:
    """The builder's arguments keyed by their TOML key, in signature order.

    ``skip_first`` leaves out an importer's first argument, the text it parses.
    """
    params: dict[str, _Param] = {}
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


def _file_field(
    builder_field: str | None, fields: dict[str, str], params: dict[str, _Param]
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


def _param(name: str, annotation: object, required: bool) -> _Param:
    if annotation in (int, float):
        for suffix, kind in _UNIT_SUFFIXES:
            if name.endswith(suffix):
                return _Param(name, name.removesuffix(suffix), kind, None, required)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _Param(name, name, "enum", annotation, required)
    if isinstance(annotation, type) and annotation in _SIMPLE_KINDS:
        return _Param(name, name, _SIMPLE_KINDS[annotation], None, required)
    raise TypeError(
        f"builder argument {name!r} has a type topology files cannot give: {annotation!r}"
    )


def _collect(
    builder_name: str,
    params: dict[str, _Param],
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
        values[param.name] = _convert(param, value, source=source, field=field)
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


def _from_text(param: _Param, text: str) -> object:
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


def _convert(param: _Param, value: object, *, source: str, field: str) -> object:
    try:
        return _convert_value(param, value)
    except SimcollError as error:
        raise ConfigError(error.message, source=source, field=field) from error


def _convert_value(param: _Param, value: object) -> object:
    """Check a TOML value's type and convert it; raise ConfigError (no location) if wrong."""
    if param.kind in _QUANTITY_PARSERS:
        parse, example = _QUANTITY_PARSERS[param.kind]
        if not isinstance(value, str) or _is_bare_number(value):
            raise ConfigError(
                f"expected a quantity string with its unit, e.g. {example}, got {_describe(value)}"
            )
        return parse(value)
    if param.enum is not None:
        choices = {member.value: member for member in param.enum}
        if not isinstance(value, str) or value not in choices:
            raise ConfigError(f"expected one of {', '.join(choices)}, got {_describe(value)}")
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
    raise ConfigError(f"expected {_ARTICLE[param.kind]}, got {_describe(value)}")


def _is_bare_number(text: str) -> bool:
    """True for ``"0.5"``: a quantity without its unit, which nobody can read safely."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _describe(value: object) -> str:
    """``"float 8.0"``: the type and value, for an error message."""
    return f"{type(value).__name__} {value!r}"
