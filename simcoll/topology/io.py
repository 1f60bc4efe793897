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

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import networkx as nx

from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.files import TOO_DEEP, check_nesting, read_input_bytes, read_input_text
from simcoll.core.shipped import find, is_bare_name, shipped_names
from simcoll.topology.builder_params import (
    Param,
    builder_params,
    collect_params,
    convert,
    describe,
    file_field,
)
from simcoll.topology.calibration import (
    Calibration,
    hardware_calibration,
    hardware_files,
    read_calibration,
)
from simcoll.topology.catalog import BUILDERS, IMPORTERS
from simcoll.topology.explicit import from_document, key_text
from simcoll.topology.gpu_spec import gpu_data, read_gpu_table
from simcoll.topology.nodelink import from_node_link
from simcoll.topology.routing import ROUTING_RULES
from simcoll.topology.schema import validated
from simcoll.topology.whatif import gpudirect_rdma_off

__all__ = ["SCHEMA_VERSION", "load", "parse_overrides", "source_files"]

SCHEMA_VERSION = 1
"""The ``schema`` value this version of simcoll reads."""

# tomllib ends its messages with "(at line 3, column 10)" or "(at end of document)".
_POSITION = re.compile(
    r"^(?P<message>.*) \(at (?:line (?P<line>\d+), column (?P<column>\d+)|end of document)\)$"
)

_BUILDER_KEYS = ("schema", "builder", "description", "calibration", "calibration_when",
                 "gpu_memory_bandwidth", "host_memory_bandwidth", "gpu", "params", "routing",
                 "transport")  # fmt: skip
_EXPLICIT_KEYS = ("schema", "description", "calibration", "gpu_memory_bandwidth",
                  "host_memory_bandwidth", "gpu", "p2p", "routing", "transport", "nodes",
                  "links")  # fmt: skip
#: The ``[transport]`` table's keys: how the NICs move data (``--set transport.KEY=VALUE``).
_TRANSPORT_KEYS = ("gpudirect_rdma",)


def load(path: str | Path, overrides: Mapping[str, str] | None = None) -> nx.DiGraph[str]:
    """Read a topology file, build its graph and validate it.

    ``overrides`` named ``routing.rule`` and ``routing.ecmp_seed`` replace the file's
    ``[routing]`` table (what-if: the same fabric routed by hashed ECMP or d-mod-k).

    Parameters
    ----------
    path
        The TOML file, named as given in every error; or the name of a shipped topology
        (``dgx-a100``: :func:`simcoll.core.shipped.find`).
    overrides
        ``[params]`` values from the command line (``--set KEY=VALUE``, see
        :func:`parse_overrides`), keyed as in the file and given as strings: digits for
        integers, unit strings for quantities, enum values by name, ``true``/``false``.
        They replace or add to the file's values.

    Returns
    -------
    networkx.DiGraph
        The builder's graph, validated, with ``graph.graph["source"]`` (the path as a
        string) and ``graph.graph["description"]`` set, and, where the file gives them,
        ``"calibration"`` (its params file, read), ``"gpu_memory_bandwidth_bytes_per_s"``,
        ``"host_memory_bandwidth_bytes_per_s"`` (each server's CPU memory, which traffic
        staged through the host pays: :func:`simcoll.topology.whatif.gpudirect_rdma_off`)
        and ``"gpu"`` (its ``[gpu]`` table: :mod:`simcoll.topology.gpu_spec`).

    Raises
    ------
    ConfigError
        If the file is missing, not UTF-8 or not TOML; has an unknown key, a wrong
        ``schema`` or an unknown builder; misses a required parameter; has a value of the
        wrong type or unit; or an override names an unknown key.
    TopologyError
        If the builder rejects a value or the graph breaks the schema.
    """
    if isinstance(path, bool) or not isinstance(path, str | Path):
        raise ConfigError(f"a topology is a file's path, got {type(path).__name__} {path!r:.40}")
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ConfigError(f"overrides must be a mapping of names to strings, got "
                          f"{type(overrides).__name__}")  # fmt: skip
    path = _resolved(path)
    source = str(path)
    routing = {k: v for k, v in (overrides or {}).items() if k.startswith("routing.")}
    transport = {k: v for k, v in (overrides or {}).items() if k.startswith("transport.")}
    overrides = {k: v for k, v in (overrides or {}).items()
                 if not k.startswith(("routing.", "transport."))}  # fmt: skip
    detected = _detected(Path(path))
    if detected == "json":
        _refuse_overrides({**overrides, **routing, **transport}, source, "a node-link JSON file")
        graph = from_node_link(_read_json(Path(path), source), source=source)
        graph.graph["source"] = source
        return graph
    document: dict[str, Any]
    if detected is not None:  # a dump an importer reads, as if a TOML file named it
        document = {"schema": 1, "builder": detected, "params": {"file": Path(path).name},
                    "description": f"{Path(path).name}, read as {_DUMPS[detected]}"}  # fmt: skip
    else:
        document = _read_toml(Path(path), source)
    _check_schema(document, source)
    if "builder" not in document and ("nodes" in document or "links" in document):
        _check_keys(document, _EXPLICIT_KEYS, source)
        _refuse_overrides(overrides, source, "an explicit topology (nodes and links)")
        graph = from_document(document, source=source)
    else:
        _check_keys(document, _BUILDER_KEYS, source)
        graph = _built(document, overrides or {}, source, Path(path).parent, dump=detected)
    _apply_routing(graph, _routing_table(document, routing, source), source)
    graph.graph["source"] = source
    graph.graph["description"] = _description(document, source, overrides)
    graph = validated(graph, source=source)  # once: builders validate what they return
    graph = _with_hardware(graph, document, transport, source)
    named, field = _calibration_named(document, overrides, source)
    if named is not None:
        graph.graph["calibration"] = _calibration(named, source, Path(path), field)
        graph.graph["calibration_file"] = str(Path(path).parent / str(named))
    elif "hardware_params" in graph.graph:  # an imported machine: its hardware's parameters
        calibration, file = hardware_calibration(graph.graph["hardware_params"])
        graph.graph["calibration"], graph.graph["calibration_file"] = calibration, str(file)
    return graph


def _resolved(path: str | Path) -> str | Path:
    """``path``, or the shipped topology a bare name names (``dgx-a100``)."""
    if not is_bare_name(path):
        return path
    found = find(path, "topologies")
    if not found.exists():
        names = ", ".join(shipped_names("topologies"))
        raise ConfigError(f"no such file, nor a shipped topology of that name (shipped: "
                          f"{names})", source=str(path))  # fmt: skip
    return found


def _built(
    document: dict[str, Any],
    overrides: Mapping[str, str],
    source: str,
    folder: Path,
    *,
    dump: str | None,
) -> nx.DiGraph[str]:
    """:func:`_build`; for a dump read directly, a missing parameter says how to give it."""
    try:
        return _build(document, overrides, source, folder)
    except ConfigError as error:
        if dump is None or "missing" not in error.message:
            raise
        raise ConfigError(f"{error.message}; a dump does not say it: give it with --set "
                          "KEY=VALUE, or write a TOML file that names the dump (see "
                          "topologies/examples/)", source=source,
                          field=error.field) from None  # fmt: skip


#: The dumps a TOPOLOGY may be, by their importer (:data:`simcoll.topology.catalog.IMPORTERS`).
_DUMPS = {"nccl_xml": "an NCCL topology dump (NCCL_TOPO_DUMP_FILE)",
          "nvidia_smi": "an nvidia-smi topo -m matrix"}  # fmt: skip
_NVSMI_ROW = re.compile(r"^GPU0\s+X\s", re.MULTILINE)  # the matrix's first row


def _detected(path: Path) -> str | None:
    """What a topology file is, from its content (not its name): ``"json"`` (node-link
    JSON), an importer's name (an NCCL XML dump, an ``nvidia-smi topo -m`` matrix), or
    None (TOML, read as such; a missing or unreadable file is reported there)."""
    try:
        if not path.is_file():  # a FIFO or a device would block here: the read says why
            return None
        with path.open("rb") as handle:
            head = handle.read(2**16).decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    except OSError:
        return None
    if path.suffix.lower() == ".json" or head.startswith("{"):
        return "json"
    if head.startswith(("<?xml", "<system", "<!--")) and "<system" in head:
        return "nccl_xml"
    if _NVSMI_ROW.search(head):
        return "nvidia_smi"
    return None


def source_files(path: str | Path, overrides: Mapping[str, str] | None = None) -> list[Path]:
    """The files :func:`load` reads for ``path``: the file itself, for an importer (an
    NCCL XML dump, an ``nvidia-smi`` matrix) the file its ``params.file`` names, and its
    params file with the files that one builds on (``base``); for an imported machine
    without one, every hardware parameter file (its GPUs' model decides which it reads).

    A file that cannot be read is still listed (loading it will say why); nothing here
    raises.
    """
    if is_bare_name(path):
        path = find(path, "topologies")
    files = [Path(path)]
    if Path(path).suffix.lower() == ".json":
        return files
    if _detected(Path(path)) in _DUMPS:  # its hardware's parameters, whichever its GPUs are
        return files + [f for params in hardware_files() for f in (params, *_base_files(params))]
    try:
        document = _read_toml(Path(path), str(path))
    except ConfigError:
        return files
    params = document.get("params")
    named = params.get("file") if isinstance(params, dict) else None
    named = (overrides or {}).get("file", named)
    builder = document.get("builder")  # anything at all: a list raised TypeError (issue 41)
    if isinstance(builder, str) and builder in IMPORTERS and isinstance(named, str):
        files.append(Path(path).parent / named)
        if "calibration" not in document:
            files += [f for params in hardware_files() for f in (params, *_base_files(params))]
    when = document.get("calibration_when")
    named = [document.get("calibration"), *(when.values() if isinstance(when, dict) else [])]
    for name in named:
        if isinstance(name, str):
            params = Path(path).parent / name
            files += [params, *_base_files(params)]
    return files


def _base_files(params: Path, depth: int = 0) -> list[Path]:
    """The ``base`` files a params file builds on, and theirs (unreadable ones skipped:
    reading the params file will say why)."""
    try:  # bounded: a FIFO or /dev/zero named as a base is refused, never read
        document = tomllib.loads(read_input_text(params))
    except (ConfigError, ValueError, RecursionError):
        return []
    named = document.get("base", [])
    names = [named] if isinstance(named, str) else named
    if not isinstance(names, list) or depth >= 4:
        return []
    found = [params.parent / n for n in names if isinstance(n, str)]
    return found + [f for base in found for f in _base_files(base, depth + 1)]


def _build(
    document: dict[str, Any], overrides: Mapping[str, str], source: str, folder: Path
) -> nx.DiGraph[str]:
    """Call the builder (or importer) the file names with the file's parameters."""
    builder_name = _builder_name(document, source)
    builder = BUILDERS.get(builder_name)
    table = document.get("params", {})
    if not isinstance(table, dict):
        raise ConfigError(
            f"must be a table ([params]), got {describe(table)}",
            source=source,
            field="params",
        )
    if builder is None:  # an importer: its first argument is the text of params.file
        importer = IMPORTERS[builder_name]
        params = builder_params(importer, skip_first=True)
        params["file"] = Param("file", "file", "str", None, required=True)
    else:
        params = builder_params(builder)
    values, fields = collect_params(builder_name, params, table, overrides, source)
    try:
        if builder is None:
            file_name = str(values.pop("file"))
            text = _read_text(folder / file_name, source, file_name, field=fields["file"])
            return importer(text, **values)
        return builder(**values)
    except SimcollError as error:
        arguments = {param.name for param in params.values()}  # an importer's: the file's
        if builder is None and error.source is None and error.field not in arguments:
            raise type(error)(error.message, source=file_name, field=error.field) from error
        raise type(error)(
            error.message, source=source, field=file_field(error.field, fields, params)
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
    raw = read_input_bytes(path)  # a regular file of bounded size, or a one-line error
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
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise _toml_error(error, source) from None
    except ValueError as error:  # an integer of more than sys.get_int_max_str_digits() digits
        message = str(error).split(";")[0]
        raise ConfigError(f"invalid TOML: {message}", source=source) from None
    except RecursionError:
        raise ConfigError(TOO_DEEP, source=source) from None
    check_nesting(document, source=source)
    return document


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


def _description(
    document: dict[str, Any], source: str, overrides: Mapping[str, str] | None = None
) -> str:
    """The file's description, each ``{name}`` in it the value of parameter ``name`` as
    built (``--set`` over the file's ``[params]``), so that it never states a value the
    run no longer has: ``"two-level {oversubscription}:1 fat tree"``."""
    description = document.get("description", "")
    if not isinstance(description, str):
        message = f"must be a string, got {describe(description)}"
        raise ConfigError(message, source=source, field="description")
    params = document.get("params")
    if "builder" not in document or not isinstance(params, dict):
        return description
    values = {**params, **(overrides or {})}

    def value(match: re.Match[str]) -> str:
        if match[1] not in values:
            raise ConfigError(f"{match[0]} names no parameter of [params] (valid: "
                              f"{', '.join(values)})", source=source,
                              field="description")  # fmt: skip
        return _value_text(values[match[1]])

    return _PLACEHOLDER.sub(value, description)


_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")


def _value_text(value: object) -> str:
    """A parameter as a description prints it: ``2.0`` and ``"2"`` as ``2``, strings
    (``"400 Gbit/s"``) as written, booleans as ``true`` or ``false``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _calibration(value: object, source: str, path: Path, field: str) -> Calibration:
    """The params file the topology file's ``calibration`` key (or the entry ``field`` of
    ``calibration_when``) names, relative to it: the parameters fitted on measurements of
    the machine, used unless ``--params`` says otherwise."""
    if not isinstance(value, str) or not value:
        message = f"must name a params file (relative to the topology file), got {describe(value)}"
        raise ConfigError(message, source=source, field=field)
    try:
        return read_calibration(path.parent / value)
    except ConfigError as error:  # one line: the topology's key, then the params file's
        raise ConfigError(str(error), source=source, field=field) from None


def _calibration_named(
    document: dict[str, Any], overrides: Mapping[str, str] | None, source: str
) -> tuple[object, str]:
    """The params file the machine as built takes, and the key that names it: the entry of
    ``[calibration_when]`` whose ``"name=value"`` the built parameters match (``--set``
    over ``[params]``: ``"p2p=true"``, a machine whose links another fit describes),
    else ``calibration`` (None: neither)."""
    when = document.get("calibration_when", {})
    if not isinstance(when, dict):
        raise ConfigError(f"must be a table of \"name=value\" = params file, got "
                          f"{describe(when)}", source=source, field="calibration_when")  # fmt: skip
    params = document.get("params")
    values = {**(params if isinstance(params, dict) else {}), **(overrides or {})}
    matched = []
    for condition, named in when.items():
        field = f'calibration_when."{condition}"'
        name, equals, value = condition.partition("=")
        if not equals or name.strip() not in values:
            raise ConfigError(f"must be \"name=value\" with a name of [params] (valid: "
                              f"{', '.join(values)})", source=source, field=field)  # fmt: skip
        if _value_text(values[name.strip()]).lower() == _value_text(value.strip()).lower():
            matched.append((named, field))
    if len(matched) > 1:
        raise ConfigError(f"{matched[0][1]} and {matched[1][1]} both hold for this machine; "
                          "one params file describes it", source=source)  # fmt: skip
    if matched:
        return matched[0]
    return document.get("calibration"), "calibration"


def _memory_bandwidth(value: object, source: str, field: str) -> float:
    """The optional ``gpu_memory_bandwidth`` (every GPU's memory bandwidth, its data
    sheet's HBM figure, which out-of-place calls pay to copy their own block:
    :meth:`~simcoll.core.collectives.Collective.local_copy_bytes`) or
    ``host_memory_bandwidth`` (each server's CPU memory, all sockets together, its data
    sheets' figure), positive."""
    param = Param(field, field, "bytes_per_s", None, required=False)
    bandwidth_bytes_per_s = convert(param, value, source=source, field=field)
    assert isinstance(bandwidth_bytes_per_s, float)  # a bytes_per_s parameter parses to float
    if not bandwidth_bytes_per_s > 0:
        message = f"must be positive, got {bandwidth_bytes_per_s!r} bytes/s"
        raise ConfigError(message, source=source, field=field)
    return bandwidth_bytes_per_s


def _routing_table(document: dict[str, Any], overrides: Mapping[str, str], source: str) -> object:
    """The file's ``[routing]`` table with the ``routing.KEY=VALUE`` ``overrides`` over it
    (``--set routing.rule=ecmp``, ``--set routing.ecmp_seed=3``)."""
    table = document.get("routing", {})
    given = {
        k.removeprefix("routing."): v for k, v in overrides.items() if k.startswith("routing.")
    }
    if not given or not isinstance(table, dict):
        return table
    merged = dict(table)
    for key, text in given.items():
        merged[key] = int(text) if key == "ecmp_seed" and text.lstrip("-").isdigit() else text
    return merged


def _with_hardware(
    graph: nx.DiGraph[str], document: dict[str, Any], transport: Mapping[str, str], source: str
) -> nx.DiGraph[str]:
    """``graph`` with the file's memory bandwidths and ``[gpu]`` table, its NICs staged
    through host memory where ``[transport]`` turns GPUDirect RDMA off."""
    for field in ("gpu_memory_bandwidth", "host_memory_bandwidth"):
        if field in document:
            graph.graph[f"{field}_bytes_per_s"] = _memory_bandwidth(document[field], source, field)
    if "gpu" in document:
        graph.graph["gpu"] = gpu_data(read_gpu_table(document["gpu"], source))
    if not _gpudirect_rdma(document, transport, source):
        graph = gpudirect_rdma_off(graph)
        graph.graph["gpudirect_rdma"] = False
    return graph


def _gpudirect_rdma(document: dict[str, Any], overrides: Mapping[str, str], source: str) -> bool:
    """The ``[transport]`` table's ``gpudirect_rdma`` (default true), or its
    ``--set transport.gpudirect_rdma=true|false`` override. Off, every NIC's data is staged
    in host memory (:func:`simcoll.topology.whatif.gpudirect_rdma_off`)."""
    table = document.get("transport", {})
    if not isinstance(table, dict):
        raise ConfigError(f"must be a table ([transport]), got {describe(table)}",
                          source=source, field="transport")  # fmt: skip
    # --set gives strings: "true" or "false" there; the file's TOML its own booleans
    typed = {k.removeprefix("transport."): {"true": True, "false": False}.get(v.lower(), v)
             for k, v in overrides.items()}  # fmt: skip
    given = {**table, **typed}
    for key in given:
        if key not in _TRANSPORT_KEYS:
            raise ConfigError(f"unknown key; valid: {', '.join(_TRANSPORT_KEYS)}",
                              source=source, field=f"transport.{key_text(key)}")  # fmt: skip
    value = given.get("gpudirect_rdma", True)
    if not isinstance(value, bool):
        raise ConfigError(f"expected true or false, got {describe(value)}", source=source,
                          field="transport.gpudirect_rdma")  # fmt: skip
    return value


def _apply_routing(graph: nx.DiGraph[str], table: object, source: str) -> None:
    """Copy the optional ``[routing]`` table onto the graph's attributes."""
    if not isinstance(table, dict):
        raise ConfigError(
            f"must be a table ([routing]), got {describe(table)}",
            source=source,
            field="routing",
        )
    for key, value in table.items():
        field = f"routing.{key_text(key)}"
        if key == "rule":
            if value not in ROUTING_RULES:
                valid = ", ".join(ROUTING_RULES)
                raise ConfigError(
                    f"expected one of {valid}, got {describe(value)}",
                    source=source,
                    field=field,
                )
            graph.graph["routing"] = value
        elif key == "ecmp_seed":
            if type(value) is not int:
                raise ConfigError(
                    f"expected an integer, got {describe(value)}", source=source, field=field
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
    missing = f"no such file {name!r} (relative to the topology file)"
    try:
        return read_input_text(path, missing=missing)
    except ConfigError as error:
        message = error.message
        if message != missing:
            message = f"cannot read {name!r}: {message.removeprefix('cannot read: ')}"
        raise ConfigError(message, source=source, field=field) from None


def _read_json(path: Path, source: str) -> Any:
    try:
        text = read_input_text(path)
    except ConfigError as error:
        raise error.located(source=source) from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise ConfigError(TOO_DEEP, source=source) from None
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"invalid JSON: {error.msg}",
            source=source,
            field=f"line {error.lineno}, column {error.colno}",
        ) from None
    except ValueError as error:  # an integer of more than sys.get_int_max_str_digits() digits
        raise ConfigError(f"invalid JSON: {str(error).split(';')[0]}", source=source) from None
    check_nesting(data, source=source)
    return data
