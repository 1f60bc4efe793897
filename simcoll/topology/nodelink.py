"""Node-link JSON: a resolved topology graph as data, to attach to a report and reload.

NetworkX's node-link form (:func:`networkx.node_link_data` with ``edges="links"``) lists
every node with its attributes and every directed link with its endpoints and
attributes; simcoll writes the ``kind`` of each as its value string (``"gpu"``,
``"nvlink"``) and keeps the graph attributes (``name``, ``description``, ``source``,
``p2p``...)::

    {"directed": true, "multigraph": false,
     "graph": {"name": "switch_star_2"},
     "nodes": [{"id": "gpu0", "kind": "gpu", "rank": 0}, ...],
     "links": [{"source": "gpu0", "target": "sw", "kind": "nvlink",
                "bandwidth_bytes_per_s": 300000000000.0, "latency_s": 5e-07}, ...]}

Quantities are numbers in SI base units (bytes per second per direction, seconds),
exactly as the graph holds them, so a graph read back equals the graph written.

>>> from simcoll.topology.builders import switch_star
>>> g = switch_star(2, link_bandwidth_bytes_per_s=3e11, link_latency_s=5e-7)
>>> data = to_node_link(g)
>>> data["nodes"][0], data["links"][0]["kind"]
({'kind': 'gpu', 'rank': 0, 'id': 'gpu0'}, 'nvlink')
>>> import networkx as nx
>>> nx.utils.graphs_equal(from_node_link(data), g)
True
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.topology.calibration import Calibration
from simcoll.topology.gpu_spec import gpu_data, spec_from_data
from simcoll.topology.schema import LinkKind, NodeKind, validate

__all__ = ["dumps", "from_node_link", "to_node_link"]

_Kind = TypeVar("_Kind", bound=Enum)
_QUANTITIES = ("bandwidth_bytes_per_s", "latency_s")
_MAX_REPR = 60


def to_node_link(graph: nx.DiGraph[str]) -> dict[str, Any]:
    """Return the node-link form of a validated topology, ready for :func:`json.dumps`.

    The graph is not modified. Node and link ``kind`` enums become their value strings;
    every other attribute is copied as it is.
    """
    data: dict[str, Any] = nx.node_link_data(graph, edges="links")
    data["graph"] = dict(graph.graph)  # node_link_data hands out the graph's own dict
    calibration = data["graph"].get("calibration")
    if isinstance(calibration, Calibration):  # as data, read back by from_node_link
        data["graph"]["calibration"] = {
            "values": calibration.values,
            "provenance": dict(calibration.provenance),
        }
    for element in (*data["nodes"], *data["links"]):  # fresh dicts, safe to change
        element["kind"] = element["kind"].value
    return data


def _calibration(value: object, source: str | None) -> Calibration:
    """The ``graph.calibration`` object of node-link data: ``values`` and ``provenance``."""
    table = _mapping(value, "calibration parameters", source, "graph.calibration")
    values = _mapping(table.get("values", {}), "parameter values", source,
                      "graph.calibration.values")  # fmt: skip
    provenance = _mapping(table.get("provenance", {}), "provenance", source,
                          "graph.calibration.provenance")  # fmt: skip
    try:
        return Calibration.from_values(values, provenance)
    except KeyError as error:
        message = (f"unknown parameter section {error.args[0]!r}; valid: efficiency, "
                   "protocol_efficiency, step_latency_s, link_latency_s, launch_s, "
                   "floor_s")  # fmt: skip
        raise ConfigError(message, source=source, field="graph.calibration") from None
    except (ConfigError, TypeError, ValueError) as error:
        message = error.message if isinstance(error, ConfigError) else str(error)
        raise ConfigError(message, source=source, field="graph.calibration") from None


def dumps(graph: nx.DiGraph[str]) -> str:
    """The node-link JSON text of a topology: one-space indents, keys sorted.

    >>> from simcoll.topology.builders import ring
    >>> print(dumps(ring(1, link_bandwidth_bytes_per_s=5e10, link_latency_s=1e-6)))
    {
     "directed": true,
     "graph": {
      "name": "ring_1"
     },
     "links": [],
     "multigraph": false,
     "nodes": [
      {
       "id": "gpu0",
       "kind": "gpu",
       "rank": 0
      }
     ]
    }
    """
    return json.dumps(to_node_link(graph), indent=1, sort_keys=True)


def from_node_link(data: object, *, source: str | None = None) -> nx.DiGraph[str]:
    """Build and validate a topology from its node-link form (the inverse of :func:`to_node_link`).

    Parameters
    ----------
    data
        Parsed JSON: a mapping with ``"directed": true``, optional ``"multigraph": false``
        and ``"graph"`` (the graph attributes), and the lists ``"nodes"`` and ``"links"``.
    source
        The file the data came from, named in every error. It is not stored on the graph.

    Returns
    -------
    networkx.DiGraph
        Nodes and links in the order listed, with ``kind`` as :class:`NodeKind` or
        :class:`LinkKind` and link quantities as floats.

    Raises
    ------
    ConfigError
        If the data is not node-link data of a directed graph: a missing or mistyped
        key, an element that is not an object, a node id that is not a string or is
        given twice, a kind that is not a valid value, a link to an unlisted node, a link
        listed twice, or a link without its bandwidth or latency. The field names the
        element, as ``links[3]``.
    TopologyError
        If the graph breaks the schema (see :func:`simcoll.topology.schema.validate`).

    >>> from_node_link({"directed": True, "nodes": [{"id": "gpu0", "kind": "gpu", "rank": 0}],
    ...                 "links": [{"source": "gpu0", "target": "sw"}]}, source="x.json")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: x.json: links[0].target: no node 'sw' among the nodes
    """
    document = _mapping(data, "node-link data", source, None)
    _check_flag(document, "directed", True, source)
    _check_flag(document, "multigraph", False, source)
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.graph.update(_mapping(document.get("graph", {}), "the graph attributes", source, "graph"))
    calibration = graph.graph.get("calibration")
    if calibration is not None:
        graph.graph["calibration"] = _calibration(calibration, source)
    memory = graph.graph.get(_MEMORY)
    if memory is not None:
        graph.graph[_MEMORY] = _positive(memory, source, f"graph.{_MEMORY}")
    if "gpu" in graph.graph:
        graph.graph["gpu"] = gpu_data(spec_from_data(graph.graph["gpu"], source))
    listed: dict[str, str] = {}  # node id -> where it is listed
    for where, element in _elements(document, "nodes", source):
        node, attrs = _node(element, where, listed, source)
        graph.add_node(node, **attrs)
    links: dict[tuple[str, str], str] = {}
    for where, element in _elements(document, "links", source):
        u, v, attrs = _link(element, where, listed, links, source)
        graph.add_edge(u, v, **attrs)
    return validate(graph, source=source)


#: The graph attribute of a topology file's ``gpu_memory_bandwidth`` (bytes/s).
_MEMORY = "gpu_memory_bandwidth_bytes_per_s"


def _positive(value: object, source: str | None, field: str) -> float:
    """A positive finite number of the JSON data, as a float."""
    number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0
    if not (0 < number < math.inf):
        message = f"must be a positive number (bytes/s), got {_describe(value)}"
        raise ConfigError(message, source=source, field=field)
    return number


def _node(
    element: object, where: str, listed: dict[str, str], source: str | None
) -> tuple[str, dict[str, Any]]:
    attrs = dict(_mapping(element, "a node", source, where))
    node = _id(attrs.pop("id", None), f"{where}.id", source)
    if node in listed:
        raise ConfigError(
            f"node {node!r} is listed twice (also {listed[node]})",
            source=source,
            field=f"{where}.id",
        )
    listed[node] = where
    attrs["kind"] = _kind(attrs, NodeKind, where, source)
    return node, attrs


def _link(
    element: object,
    where: str,
    listed: dict[str, str],
    links: dict[tuple[str, str], str],
    source: str | None,
) -> tuple[str, str, dict[str, Any]]:
    attrs = dict(_mapping(element, "a link", source, where))
    u, v = (
        _endpoint(attrs.pop(end, None), f"{where}.{end}", listed, source)
        for end in ("source", "target")
    )
    if (u, v) in links:
        raise ConfigError(
            f"link {u}->{v} is listed twice (also {links[u, v]})", source=source, field=where
        )
    links[u, v] = where
    attrs["kind"] = _kind(attrs, LinkKind, where, source)
    for name in _QUANTITIES:
        value = attrs.get(name)
        if value is None:
            raise ConfigError(f"missing {name!r}", source=source, field=where)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigError(
                f"must be a number, got {_describe(value)}", source=source, field=f"{where}.{name}"
            )
        try:
            attrs[name] = float(value)
        except OverflowError:  # an integer such as 10**400, beyond any float
            raise ConfigError(
                f"must be a finite number, got an integer of {len(str(value))} digits",
                source=source,
                field=f"{where}.{name}",
            ) from None
    return u, v, attrs


def _endpoint(value: object, field: str, listed: dict[str, str], source: str | None) -> str:
    node = _id(value, field, source)
    if node not in listed:
        raise ConfigError(f"no node {node!r} among the nodes", source=source, field=field)
    return node


def _id(value: object, field: str, source: str | None) -> str:
    if value is None:
        raise ConfigError("missing; expected a node id string", source=source, field=field)
    if not isinstance(value, str):
        raise ConfigError(f"must be a string, got {_describe(value)}", source=source, field=field)
    return value


def _kind(attrs: Mapping[str, Any], enum: type[_Kind], where: str, source: str | None) -> _Kind:
    value = attrs.get("kind")
    if value is None:
        raise ConfigError("missing 'kind'", source=source, field=where)
    choices = {member.value: member for member in enum}
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(
            f"expected one of {', '.join(choices)}, got {_describe(value)}",
            source=source,
            field=f"{where}.kind",
        )
    return choices[value]


def _elements(
    document: Mapping[str, Any], key: str, source: str | None
) -> list[tuple[str, object]]:
    items = document.get(key)
    if not isinstance(items, list):
        got = "missing" if items is None else f"must be a list, got {_describe(items)}"
        raise ConfigError(got, source=source, field=key)
    return [(f"{key}[{index}]", item) for index, item in enumerate(items)]


def _check_flag(document: Mapping[str, Any], key: str, expected: bool, source: str | None) -> None:
    value = document.get(key, expected if key == "multigraph" else None)
    if value is not expected:
        got = "missing" if value is None else f"got {_describe(value)}"
        raise ConfigError(
            f"must be {str(expected).lower()} for a topology (one edge per link direction); {got}",
            source=source,
            field=key,
        )


def _mapping(value: object, what: str, source: str | None, field: str | None) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{what} must be a JSON object, got {_describe(value)}", source=source, field=field
        )
    return value


def _describe(value: object) -> str:
    """``"str 'gpu'"``: the type and value, for an error message, cut to one short line."""
    text = repr(value)
    if len(text) > _MAX_REPR:
        text = text[: _MAX_REPR - 3] + "..."
    return f"{type(value).__name__} {text}"
