"""Calls inside one server, decided once per server shape.

The servers of a cluster are alike: a call on GPUs 0-7 of one DGX takes what the same
call on GPUs 0-7 of another takes, on that server's own links. A training step on 16,384
GPUs makes the same tensor-parallel calls in 2,048 servers; deciding each (NCCL's plan,
its tuning, a simulation alone) costs the same every time. So a :class:`Session` decides
a call inside a server once per server *shape* and moves the decision to the other
servers of that shape (:func:`moved_links`).

A server's shape (:func:`host_shape`) is

- its members (the nodes whose ``host`` is the server) in one order: GPUs by rank, then
  the other nodes by kind and natural name (``nic2`` before ``nic10``);
- every member's attributes but its name, ``rank`` and ``host``, in that order;
- every link between two members, numbered in that order, with all its attributes.

Two servers of one shape are the same graph under that numbering (their members map one
to one, links to links with equal bandwidth, latency and kind). A decision moves from one
to the other only where it cannot have read anything else:

- every link the call crossed alone joins two members of its server (checked on the
  call: a call that leaves the server through a NIC is decided where it runs);
- between any two GPUs of the server the route is forced (a direct link, or exactly one
  node, not a GPU that forwards nothing, joined to both: the NVSwitch), so no ECMP hash of
  node names can route the other server's copy differently (routes take the fewest hops
  first: :mod:`simcoll.topology.routing`); a server whose GPUs reach each other through
  PCIe and the host, or a graph with ``p2p = false``, has no shape and decides each call.

>>> from simcoll.topology.builders import switch_star
>>> from simcoll.topology import Router
>>> star = switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
>>> for gpu in ("gpu0", "gpu1"):
...     star.nodes[gpu]["host"] = "a"
>>> for gpu in ("gpu2", "gpu3"):
...     star.nodes[gpu]["host"] = "b"
>>> router = Router(star)
>>> a, b = host_shape(star, router, "a"), host_shape(star, router, "b")
>>> a.key == b.key, a.members, b.members
(True, ('gpu0', 'gpu1'), ('gpu2', 'gpu3'))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np
import numpy.typing as npt

from simcoll.sim.routes import link_table
from simcoll.topology import NodeKind, Router
from simcoll.topology.tiebreak import natural_key

__all__ = ["HostShape", "group_shape", "host_shape", "moved_links"]

IntArray = npt.NDArray[np.int64]

#: Node attributes a shape leaves out: which server and which rank, not what it is.
_NAMING = ("rank", "host")


@dataclass(frozen=True)
class HostShape:
    """A server's shape: ``key`` (equal keys: one shape), its ``members`` in the shape's
    order, and each member's place in it (``local``)."""

    key: int
    members: tuple[str, ...]
    local: dict[str, int]


def host_shape(topology: nx.DiGraph[str], router: Router, host: str) -> HostShape | None:
    """The shape of server ``host`` (read once per router), or None where calls inside it
    are not forced onto one route per pair of GPUs (see the module docstring)."""
    shapes: dict[str, HostShape | None] = router.memo("host_shapes", dict)
    if host not in shapes:
        shapes[host] = _shape(topology, router, host)
    return shapes[host]


def group_shape(
    topology: nx.DiGraph[str], router: Router, nodes: Sequence[str]
) -> tuple[HostShape, tuple[int, ...]] | None:
    """The shape of the one server every node of ``nodes`` is on, and their places in
    it; None where they span servers or the server has no shape."""
    hosts = {topology.nodes[node].get("host") for node in nodes}
    if len(hosts) != 1:
        return None
    (host,) = hosts
    if host is None:
        return None
    shape = host_shape(topology, router, str(host))
    if shape is None:
        return None
    return shape, tuple(shape.local[node] for node in nodes)


def moved_links(
    topology: nx.DiGraph[str], router: Router, links: IntArray, source: HostShape,
    target: HostShape,
) -> IntArray | None:  # fmt: skip
    """The links of ``target`` that ``links`` (of ``source``, topology link ids) are
    under the shapes' numbering, in the same order; None if one of them leaves
    ``source``."""
    table = link_table(topology, router)
    moved = np.empty(len(links), dtype=np.int64)
    for i, link in enumerate(links.tolist()):
        u, v = table.links[link]
        lu, lv = source.local.get(u), source.local.get(v)
        if lu is None or lv is None:
            return None
        moved[i] = table.index[(target.members[lu], target.members[lv])]
    return moved


# -- reading a server -------------------------------------------------------------------------


def _shape(topology: nx.DiGraph[str], router: Router, host: str) -> HostShape | None:
    if topology.graph.get("p2p", True) is False:
        return None
    by_host: dict[str, list[str]] = router.memo("host_members", lambda: _members(topology))
    members = tuple(sorted(by_host.get(host, ()), key=lambda node: _order(topology, node)))
    local = {node: i for i, node in enumerate(members)}
    gpus = [n for n in members if topology.nodes[n]["kind"] is NodeKind.GPU]
    if not _forced(topology, gpus):
        return None
    nodes = tuple(_attrs(topology.nodes[n]) for n in members)
    links = tuple(sorted(
        (local[u], local[v], _attrs(attrs))
        for u in members for v, attrs in topology.succ[u].items() if v in local
    ))  # fmt: skip
    keys: dict[object, int] = router.memo("host_shape_keys", dict)
    key = keys.setdefault((nodes, links), len(keys))
    return HostShape(key, members, local)


def _members(topology: nx.DiGraph[str]) -> dict[str, list[str]]:
    by_host: dict[str, list[str]] = {}
    for node, attrs in topology.nodes(data=True):
        host = attrs.get("host")
        if host is not None:
            by_host.setdefault(str(host), []).append(node)
    return by_host


def _order(topology: nx.DiGraph[str], node: str) -> tuple[object, ...]:
    attrs = topology.nodes[node]
    if attrs["kind"] is NodeKind.GPU:
        return (0, attrs["rank"], ())
    return (1, attrs["kind"].value, natural_key(node))


def _attrs(attrs: dict[str, object]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in attrs.items() if k not in _NAMING))


def _forced(topology: nx.DiGraph[str], gpus: Sequence[str]) -> bool:
    """Whether every ordered pair of ``gpus`` has one fewest-hop path: a direct link, or
    one middle node that may forward (``transit`` not false)."""
    for a in gpus:
        out = topology.succ[a]
        for b in gpus:
            if a == b or b in out:
                continue
            middles = [m for m in out if m in topology.pred[b]
                       and topology.nodes[m].get("transit", True) is not False]  # fmt: skip
            if len(middles) != 1:
                return False
    return True
