"""The topology schema: node and link kinds, their attributes, and :func:`validate`.

A topology is a ``networkx.DiGraph`` whose node ids are readable strings (``"gpu3"``,
``"sw"``) and whose edges are *directed* links, one per direction, so a full-duplex cable
is two edges with their own bandwidth. Every builder returns a graph that passes
:func:`validate`, and every consumer (routing, the engine) may rely on this schema:

- node ``kind``: a :class:`NodeKind`;
- node ``rank``: on GPUs only, the collective rank; the ranks are exactly 0..n-1;
- edge ``kind``: a :class:`LinkKind`;
- edge ``bandwidth_bytes_per_s``: per direction, finite and at least 1 bit/s
  (:data:`~simcoll.core.limits.MIN_BANDWIDTH_BYTES_PER_S`);
- edge ``latency_s``: finite, >= 0 and at most :data:`~simcoll.core.limits.MAX_TIME_S`.

Optional attributes, checked when present:

- node ``host`` (str): the server a node belongs to (``"node3"``); set on every node
  inside a server, absent on fabric switches. Hierarchical algorithms group ranks by it
  and the P2P-off rule of :mod:`simcoll.topology.routing` applies within one host;
- node ``transit`` (bool, default True): False for a node that routes may start or end
  at but never cross (a GPU in a server does not forward traffic for others);
- node ``reduces`` (bool, default False): the switch can reduce in the network (NVLink
  SHARP on an NVSwitch, SHARP on an InfiniBand switch);
- node ``tier`` (int >= 0): the layer of a fabric switch, for drawing (leaf 1, spine or
  aggregation 2, core 3);
- graph ``p2p`` (bool, default True): False when GPU peer-to-peer is off, so copies
  between GPUs of one host bounce through host memory.

Every GPU must be able to reach every other GPU along directed links, on a path that
crosses no ``transit=False`` node (as :mod:`simcoll.topology.routing` routes), except
that between GPUs of two different servers (``host``) the path may cross the GPUs of
those two servers: NCCL's PXN sends through a GPU next to the right NIC, so a rail-only
or multi-plane fabric, where NIC ``i`` of a server reaches only NICs ``i``, is valid
(:mod:`simcoll.topology.reach` says the same of a graph with links failed).

>>> import networkx as nx
>>> g = nx.DiGraph()
>>> g.add_node("gpu0", kind=NodeKind.GPU, rank=0)
>>> g.add_node("gpu1", kind=NodeKind.GPU, rank=1)
>>> g.add_edge("gpu0", "gpu1", kind=LinkKind.NVLINK, bandwidth_bytes_per_s=3e11, latency_s=0.0)
>>> validate(g)
Traceback (most recent call last):
...
simcoll.core.errors.TopologyError: gpu1: GPU 'gpu1' (rank 1) cannot reach GPU 'gpu0' (rank 0)
>>> g.add_edge("gpu1", "gpu0", kind=LinkKind.NVLINK, bandwidth_bytes_per_s=3e11, latency_s=0.0)
>>> gpu_nodes(validate(g))
['gpu0', 'gpu1']
"""

from __future__ import annotations

import math
import numbers
import weakref
from collections.abc import Mapping
from enum import Enum
from typing import Any, NotRequired, TypedDict, TypeVar

import networkx as nx

from simcoll.core.errors import TopologyError
from simcoll.core.limits import MAX_TIME_S, MIN_BANDWIDTH_BYTES_PER_S
from simcoll.topology.gpu_reach import check_reachability

__all__ = ["LinkAttrs", "LinkKind", "NodeAttrs", "NodeKind", "gpu_nodes", "validate"]

_Kind = TypeVar("_Kind", bound=Enum)


class NodeKind(Enum):
    """What a node is: a GPU (holds a rank) or a device that forwards traffic."""

    GPU = "gpu"
    NVSWITCH = "nvswitch"
    PCIE_SWITCH = "pcie_switch"
    CPU = "cpu"
    NIC = "nic"
    SWITCH = "switch"


class LinkKind(Enum):
    """The technology of a directed link."""

    NVLINK = "nvlink"
    PCIE = "pcie"
    CPU_LINK = "cpu_link"
    IB = "ib"
    ETHERNET = "ethernet"


class NodeAttrs(TypedDict):
    """Attributes of a node; ``rank`` is present on GPUs and only on GPUs."""

    kind: NodeKind
    rank: NotRequired[int]


class LinkAttrs(TypedDict):
    """Attributes of one directed link (one direction of a full-duplex cable)."""

    kind: LinkKind
    bandwidth_bytes_per_s: float  # per direction
    latency_s: float


def validate(graph: nx.DiGraph[str], *, source: str | None = None) -> nx.DiGraph[str]:
    """Check that ``graph`` follows the topology schema and return it unchanged.

    Parameters
    ----------
    graph
        The topology to check. It is not modified.
    source
        The file the topology came from, named in the error when there is one.

    Returns
    -------
    networkx.DiGraph
        ``graph`` itself, so that ``return validate(g)`` ends a builder.

    Raises
    ------
    TopologyError
        On the first problem found, as one line naming the node id (or the edge as
        ``"a->b"``) in its field: a node id that is not a string, a node without a valid
        :class:`NodeKind`, a GPU without an int rank, ranks other than exactly 0..n-1, no
        GPU, a self-loop, an edge without a valid :class:`LinkKind`, a bandwidth that is
        missing, not a number, not finite or not positive, a latency that is missing, not
        a number, not finite or negative, or a GPU that cannot reach another GPU.

    Notes
    -----
    Reachability costs one forward and one reverse breadth-first search from the GPU
    of rank 0: if rank 0 reaches every GPU and every GPU reaches rank 0, every pair is
    connected through it. The pair reported is the first unreachable one in (source
    rank, destination rank) order. A graph with ``transit=False`` nodes is then searched
    again around them, from a transit node next to rank 0 (two more searches), or, when
    that node does not settle it, from every GPU.
    """
    p2p = graph.graph.get("p2p", True)
    if not isinstance(p2p, bool):
        raise TopologyError(
            f"must be true or false, got {_describe(p2p)}", source=source, field="p2p"
        )
    by_rank = _ranked_gpus(graph, source)
    for u, v, attrs in graph.edges(data=True):
        _check_link(u, v, attrs, source)
    check_reachability(graph, by_rank, source)
    _VALIDATED.add(graph)
    return graph


#: Graphs :func:`validate` passed, for :func:`validated` (weakly: they go with their graph).
_VALIDATED: weakref.WeakSet[nx.DiGraph[str]] = weakref.WeakSet()


def validated(graph: nx.DiGraph[str], *, source: str | None = None) -> nx.DiGraph[str]:
    """:func:`validate`, unless ``graph`` passed it already and has not been changed since
    in any way validate reads: for a graph a builder has just returned (every builder
    ends with ``return validate(graph)``), where checking half a million links again
    costs a second. The caller vouches that it changed nothing in between.

    >>> from simcoll.topology.builders import switch_star
    >>> star = switch_star(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    >>> validated(star) is star
    True
    """
    return graph if graph in _VALIDATED else validate(graph, source=source)


def gpu_nodes(graph: nx.DiGraph[str]) -> list[str]:
    """Return the GPU node ids indexed by rank.

    Raises
    ------
    TopologyError
        If a node breaks the node schema (see :func:`validate`).

    >>> import networkx as nx
    >>> g = nx.DiGraph()
    >>> g.add_node("b", kind=NodeKind.GPU, rank=0)
    >>> g.add_node("a", kind=NodeKind.GPU, rank=1)
    >>> gpu_nodes(g)
    ['b', 'a']
    """
    return _ranked_gpus(graph, None)


def _ranked_gpus(graph: nx.DiGraph[str], source: str | None) -> list[str]:
    """Check every node and return the GPU node ids indexed by rank."""
    holder: dict[int, str] = {}
    for node, attrs in graph.nodes(data=True):
        if not isinstance(node, str):
            raise TopologyError(
                f"node id must be a str, got {_describe(node)}", source=source, field=repr(node)
            )
        kind = _enum_attr(attrs, NodeKind, source=source, field=node)
        _check_optional(attrs, source=source, field=node)
        if kind is not NodeKind.GPU:
            continue
        rank = attrs.get("rank")
        if isinstance(rank, bool) or not isinstance(rank, int):
            what = "has no 'rank'" if rank is None else f"has rank {_describe(rank)}"
            raise TopologyError(f"GPU {what}; expected an int", source=source, field=node)
        if rank in holder:
            raise TopologyError(
                f"rank {rank} is already held by {holder[rank]!r}; ranks must be unique",
                source=source,
                field=node,
            )
        holder[rank] = node
    if not holder:
        raise TopologyError("topology has no GPU node", source=source)
    return _ranks_in_order(holder, source)


_OPTIONAL_NODE_ATTRS: dict[str, tuple[type, str]] = {
    "host": (str, "a string"),
    "transit": (bool, "true or false"),
    "reduces": (bool, "true or false"),
    "tier": (int, "an integer >= 0"),
}


def _check_optional(attrs: Mapping[str, Any], *, source: str | None, field: str) -> None:
    """Check the optional node attributes that are present."""
    for name, (expected, article) in _OPTIONAL_NODE_ATTRS.items():
        if name not in attrs:
            continue
        value = attrs[name]
        wrong_bool = isinstance(value, bool) and expected is not bool
        if wrong_bool or not isinstance(value, expected) or (isinstance(value, int) and value < 0):
            raise TopologyError(
                f"{name} must be {article}, got {_describe(value)}", source=source, field=field
            )


def _ranks_in_order(holder: dict[int, str], source: str | None) -> list[str]:
    """Return the holders of ranks 0..n-1, or name a rank that leaves a gap."""
    n_gpus = len(holder)
    outside = sorted(rank for rank in holder if not 0 <= rank < n_gpus)
    if outside:
        missing = [rank for rank in range(n_gpus) if rank not in holder]
        raise TopologyError(
            f"rank {outside[0]} is out of range for {n_gpus} GPUs: ranks must be "
            f"0..{n_gpus - 1} (missing: {', '.join(map(str, missing))})",
            source=source,
            field=holder[outside[0]],
        )
    return [holder[rank] for rank in range(n_gpus)]


def _check_link(u: str, v: str, attrs: Mapping[str, Any], source: str | None) -> None:
    field = f"{u}->{v}"
    if u == v:
        raise TopologyError(
            "self-loop: a link must join two different nodes", source=source, field=field
        )
    _enum_attr(attrs, LinkKind, source=source, field=field)
    bandwidth = _number_attr(attrs, "bandwidth_bytes_per_s", source, field)
    if bandwidth <= 0:
        raise TopologyError(
            f"bandwidth_bytes_per_s must be positive, got {bandwidth!r}",
            source=source,
            field=field,
        )
    if bandwidth < MIN_BANDWIDTH_BYTES_PER_S:
        raise TopologyError(f"bandwidth_bytes_per_s must be at least "
                            f"{MIN_BANDWIDTH_BYTES_PER_S} (1 bit/s), got {bandwidth!r}",
                            source=source, field=field)  # fmt: skip
    latency = _number_attr(attrs, "latency_s", source, field)
    if latency < 0:
        raise TopologyError(f"latency_s must be >= 0, got {latency!r}", source=source, field=field)
    if latency > MAX_TIME_S:
        raise TopologyError(f"latency_s must be at most {MAX_TIME_S:g}, got {latency!r}",
                            source=source, field=field)  # fmt: skip


def _enum_attr(
    attrs: Mapping[str, Any], enum: type[_Kind], *, source: str | None, field: str
) -> _Kind:
    value = attrs.get("kind")
    if isinstance(value, enum):
        return value
    valid = ", ".join(member.value for member in enum)
    got = "no 'kind'" if value is None else f"kind {_describe(value)}"
    raise TopologyError(
        f"has {got}; expected a {enum.__name__} ({valid})", source=source, field=field
    )


def _number_attr(attrs: Mapping[str, Any], name: str, source: str | None, field: str) -> float:
    value = attrs.get(name)
    if value is None:
        raise TopologyError(f"missing {name!r}", source=source, field=field)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TopologyError(
            f"{name} must be a number, got {_describe(value)}", source=source, field=field
        )
    if not math.isfinite(value):
        raise TopologyError(f"{name} must be finite, got {value!r}", source=source, field=field)
    return float(value)


def _describe(value: object) -> str:
    """``"str 'gpu'"``: the type and value, for an error message."""
    return f"{type(value).__name__} {value!r}"
