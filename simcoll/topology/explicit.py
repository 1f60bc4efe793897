"""The explicit topology format: lists of nodes and links, for designs no builder covers.

A topology file without a ``builder`` lists its graph instead (see
``topologies/README.md``)::

    schema = 1
    description = "two GPUs on one PCIe switch"
    p2p = true                  # optional: false bounces GPU copies through the host

    [[nodes]]
    id = "gpu0"
    kind = "gpu"
    rank = 0

    [[links]]
    from = "gpu0"
    to = "sw"
    kind = "pcie"
    bandwidth = "31.5 GB/s"     # per direction
    latency = "1 us"
    duplex = true               # optional, default true: one link each way

A node takes ``id`` and ``kind`` and, as the schema allows, ``rank`` (GPUs), ``host``,
``transit``, ``reduces`` and ``tier``. A link takes ``from``, ``to``, ``kind``,
``bandwidth``, ``latency`` and ``duplex``. Every problem names the element:

>>> document = {"nodes": [{"id": "gpu0", "kind": "gpu", "rank": 0}],
...             "links": [{"from": "gpu0", "to": "gpu9", "kind": "nvlink",
...                        "bandwidth": "1 GB/s", "latency": "1 us"}]}
>>> from_document(document, source="my.toml")
Traceback (most recent call last):
...
simcoll.core.errors.ConfigError: my.toml: links[0].to: no node 'gpu9' is defined in [[nodes]]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import networkx as nx

from simcoll.core.errors import ConfigError, UnitError
from simcoll.core.units import parse_bandwidth_bytes_per_s, parse_time_s
from simcoll.topology.schema import LinkKind, NodeKind, validate

__all__ = ["from_document"]

_NODE_KEYS = ("id", "kind", "rank", "host", "transit", "reduces", "tier")
_LINK_KEYS = ("from", "to", "kind", "bandwidth", "latency", "duplex")
_NODE_TYPES: dict[str, tuple[type, str]] = {
    "id": (str, "a string"),
    "rank": (int, "an integer"),
    "host": (str, "a string"),
    "transit": (bool, "true or false"),
    "reduces": (bool, "true or false"),
    "tier": (int, "an integer"),
}


def from_document(document: Mapping[str, Any], *, source: str) -> nx.DiGraph[str]:
    """Build and validate the graph of a parsed explicit-format topology file.

    Parameters
    ----------
    document
        The TOML document: ``nodes`` and ``links`` arrays of tables, optional
        ``description`` and ``p2p``. Other top-level keys are checked by the caller.
    source
        The file, named in every error.

    Raises
    ------
    ConfigError
        On a missing or mistyped key, an unknown kind, a duplicate node id or link, a
        link to an undefined node, or a quantity without its unit.
    TopologyError
        If the graph breaks the schema (duplicate or missing ranks, a GPU that cannot
        reach another).
    """
    graph: nx.DiGraph[str] = nx.DiGraph(name="explicit")
    graph.graph["p2p"] = _typed(document, "p2p", bool, "true or false", source, default=True)
    defined: dict[str, int] = {}
    for index, table in enumerate(_tables(document, "nodes", source)):
        node, attrs = _node(table, f"nodes[{index}]", source)
        if node in defined:
            raise ConfigError(
                f"{node!r} is already defined at nodes[{defined[node]}]",
                source=source,
                field=f"nodes[{index}].id",
            )
        defined[node] = index
        graph.add_node(node, **attrs)
    if not any(attrs["kind"] is NodeKind.GPU for attrs in graph.nodes.values()):
        raise ConfigError('has no GPU (a node of kind = "gpu")', source=source, field="nodes")
    seen: dict[tuple[str, str], int] = {}
    for index, table in enumerate(_tables(document, "links", source)):
        for u, v, attrs in _links(table, f"links[{index}]", defined, source):
            if (u, v) in seen:
                raise ConfigError(
                    f"link {u}->{v} is already defined at links[{seen[u, v]}]",
                    source=source,
                    field=f"links[{index}]",
                )
            seen[u, v] = index
            graph.add_edge(u, v, **attrs)
    return validate(graph, source=source)


def _tables(document: Mapping[str, Any], key: str, source: str) -> list[dict[str, Any]]:
    tables = document.get(key)
    if tables is None:
        raise ConfigError(
            f"missing; an explicit topology lists its [[{key}]]", source=source, field=key
        )
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"must be an array of tables ([[{key}]])", source=source, field=key)
    return tables


def _node(table: dict[str, Any], where: str, source: str) -> tuple[str, dict[str, object]]:
    _check_keys(table, _NODE_KEYS, where, source)
    attrs: dict[str, object] = {"kind": _kind(table, NodeKind, where, source)}
    for key in ("rank", "host", "transit", "reduces", "tier"):
        if key in table:
            expected, article = _NODE_TYPES[key]
            attrs[key] = _typed(table, key, expected, article, source, where=where)
    node = _typed(table, "id", str, "a string", source, where=where)
    return node, attrs


def _links(
    table: dict[str, Any], where: str, defined: Mapping[str, int], source: str
) -> list[tuple[str, str, dict[str, object]]]:
    _check_keys(table, _LINK_KEYS, where, source)
    ends = []
    for key in ("from", "to"):
        node = _typed(table, key, str, "a node id", source, where=where)
        if node not in defined:
            raise ConfigError(
                f"no node {node!r} is defined in [[nodes]]", source=source, field=f"{where}.{key}"
            )
        ends.append(node)
    attrs: dict[str, object] = {
        "kind": _kind(table, LinkKind, where, source),
        "bandwidth_bytes_per_s": _quantity(table, "bandwidth", where, source),
        "latency_s": _quantity(table, "latency", where, source),
    }
    u, v = ends
    if u == v:
        raise ConfigError(f"link {u}-{v} goes from {u} to itself; a link must join two "
                          "different nodes", source=source, field=where)  # fmt: skip
    duplex = _typed(table, "duplex", bool, "true or false", source, where=where, default=True)
    return [(u, v, attrs), (v, u, dict(attrs))] if duplex else [(u, v, attrs)]


def _check_keys(table: dict[str, Any], valid: tuple[str, ...], where: str, source: str) -> None:
    for key in table:
        if key not in valid:
            raise ConfigError(
                f"unknown key; valid keys: {', '.join(valid)}",
                source=source,
                field=f"{where}.{key_text(key)}",
            )


def key_text(key: str) -> str:
    """A TOML key as an error's field names it: quoted (``''``, ``'a\\nb'``) when it is
    empty, has a control character (a line break) or spaces around it, so that the error
    stays one readable line."""
    return key if key and key.isprintable() and key.strip() == key else repr(key)


def _kind(
    table: dict[str, Any], enum: type[NodeKind] | type[LinkKind], where: str, source: str
) -> NodeKind | LinkKind:
    value = table.get("kind")
    choices = {member.value: member for member in enum}
    if not isinstance(value, str) or value not in choices:
        got = "missing" if value is None else f"unknown kind {value!r}"
        raise ConfigError(
            f"{got}; valid: {', '.join(choices)}", source=source, field=f"{where}.kind"
        )
    return choices[value]


def _quantity(table: dict[str, Any], key: str, where: str, source: str) -> float:
    parse, example = {
        "bandwidth": (parse_bandwidth_bytes_per_s, "'300 GB/s'"),
        "latency": (parse_time_s, "'0.5 us'"),
    }[key]
    value = table.get(key)
    field = f"{where}.{key}"
    if not isinstance(value, str):
        got = "missing" if value is None else f"got {type(value).__name__} {value!r}"
        raise ConfigError(
            f"{got}; expected a quantity string with its unit, e.g. {example}",
            source=source,
            field=field,
        )
    try:
        quantity = parse(value)
    except UnitError as error:
        raise ConfigError(error.message, source=source, field=field) from None
    if key == "bandwidth" and not quantity > 0:
        raise ConfigError(f"must be positive, got {value!r}", source=source, field=field)
    return quantity


def _typed(
    table: Mapping[str, Any],
    key: str,
    expected: type,
    article: str,
    source: str,
    *,
    where: str | None = None,
    default: Any = None,
) -> Any:
    field = f"{where}.{key}" if where else key
    if key not in table:
        if default is not None:
            return default
        raise ConfigError(f"missing; expected {article}", source=source, field=field)
    value = table[key]
    if isinstance(value, bool) is not (expected is bool) or not isinstance(value, expected):
        raise ConfigError(
            f"expected {article}, got {type(value).__name__} {value!r}", source=source, field=field
        )
    return value
