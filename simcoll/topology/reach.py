"""Whether GPUs can still reach each other, as simcoll's calls route them.

Inside a server (GPUs of one ``host``, or of none) a transfer takes the topology's route
(:mod:`simcoll.topology.routing`): never through another GPU, so a DGX-1 pair without an
NVLink goes over PCIe and the CPUs. Across servers NCCL's plans also pass GPUs of the
two servers: a send leaves by another GPU's NIC (PXN) and a ring enters a server at the
GPU by its NIC and goes on over NVLink. So two GPUs of different servers reach each
other if a path joins the servers that crosses no GPU of a third one.

:func:`parted` names the first pair of GPUs that cannot, and why.

>>> from simcoll.topology.builders import switch_star
>>> star = switch_star(3, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
>>> parted(star, ["gpu0", "gpu1", "gpu2"]) is None
True
>>> star.remove_edges_from([("gpu2", "sw"), ("sw", "gpu2")])
>>> print(parted(star, ["gpu0", "gpu1", "gpu2"]))
gpu0 and gpu2 can no longer reach each other (the fabric is cut)
>>> parted(star, ["gpu0", "gpu1"]) is None
True
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import networkx as nx

from simcoll.core.errors import TopologyError
from simcoll.topology.gpu_reach import Unreachable, first_unreachable
from simcoll.topology.routing import Router

__all__ = ["Parting", "parted"]

#: Why a pair is parted: no path at all, or only paths through another GPU.
CUT = "the fabric is cut"
THROUGH_A_GPU = "every path left between them crosses another GPU, and GPUs forward no traffic"


@dataclass(frozen=True)
class Parting:
    """GPU ``a`` can no longer reach GPU ``b`` (nor ``b`` reach ``a``, if ``mutual``)."""

    a: str
    b: str
    mutual: bool
    why: str

    def __str__(self) -> str:
        if self.mutual:
            return f"{self.a} and {self.b} can no longer reach each other ({self.why})"
        return f"{self.a} can no longer reach {self.b} ({self.why})"


def parted(graph: nx.DiGraph[str], gpus: Sequence[str]) -> Parting | None:
    """Two of ``gpus`` such that one can no longer reach the other (see the module
    docstring), and why; None where every one reaches every other.

    The pair is the first that validation's check finds
    (:func:`~simcoll.topology.gpu_reach.check_reachability`, in rank order from ``gpus``'
    first): a few searches where the fabric holds, at any size, rather than one per
    server (a what-if on 16,384 GPUs of planes took 113 s in that check alone)."""
    if len(gpus) < 2 or _joined(graph, gpus):
        return None
    try:
        first_unreachable(graph, list(gpus), None)
    except Unreachable as cut:
        a, b = cut.src, cut.dst
    else:
        return None
    host = graph.nodes[a].get("host")
    if host is None or host == graph.nodes[b].get("host"):  # inside one server
        why = THROUGH_A_GPU if nx.has_path(graph, a, b) else CUT
        return Parting(a, b, not _routes(Router(graph), b, a), why)
    return Parting(a, b, not _server_reaches(graph, gpus, b, a), CUT)


def _blocked(graph: nx.DiGraph[str], node: str) -> bool:
    return graph.nodes[node].get("transit") is False


def _joined(graph: nx.DiGraph[str], gpus: Sequence[str]) -> bool:
    """A quick test, exact when true: every GPU has a link into and a link out of one
    strongly connected part of the nodes routes may cross (not GPUs). Not where copies
    bounce through a CPU (``p2p = false``): routes tell."""
    if graph.graph.get("p2p", True) is False:
        return False
    crossed = graph.subgraph(n for n in graph if not _blocked(graph, n))
    part = {n: i for i, c in enumerate(nx.strongly_connected_components(crossed)) for n in c}
    for first in {part[n] for n in graph.successors(gpus[0]) if n in part}:
        if all(part.get(g) == first or (_touches(part, graph.successors(g), first)
                                        and _touches(part, graph.predecessors(g), first))
               for g in gpus):  # fmt: skip
            return True
    return False


def _touches(part: dict[str, int], nodes: Iterable[str], component: int) -> bool:
    return any(part.get(n) == component for n in nodes)


def _routes(router: Router, a: str, b: str) -> bool:
    try:
        router.route(a, b)
    except TopologyError:
        return False
    return True


def _server_reaches(graph: nx.DiGraph[str], gpus: Sequence[str], a: str, b: str) -> bool:
    """Whether GPU ``a``'s server reaches GPU ``b``'s on a path that crosses no GPU of a
    third server (each server's GPUs among ``gpus`` taken as one node that forwards; a
    GPU no rank runs on forwards nothing)."""
    server_of: dict[str, Hashable] = {g: ("server", graph.nodes[g].get("host")) for g in gpus}
    merged: nx.DiGraph[Hashable] = nx.DiGraph()
    merged.add_nodes_from(server_of.values())
    for u, v in graph.edges:
        if any(_blocked(graph, n) and n not in server_of for n in (u, v)):
            continue
        x, y = server_of.get(u, u), server_of.get(v, v)
        if x != y:
            merged.add_edge(x, y)
    return server_of[b] in _reached(merged, server_of[a], set(server_of.values()))


def _reached(graph: nx.DiGraph[Hashable], start: Hashable, ends: set[Hashable]) -> set[Hashable]:
    """The nodes a search from ``start`` reaches without going on from another of ``ends``."""
    seen, stack = {start}, [start]
    while stack:
        node = stack.pop()
        if node in ends and node != start:
            continue
        for nxt in graph.successors(node):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen
