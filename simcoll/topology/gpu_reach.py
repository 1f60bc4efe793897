"""Whether every GPU of a topology reaches every other, as simcoll routes calls.

:func:`check_reachability` is :func:`simcoll.topology.schema.validate`'s last check: along
directed links, on a path that crosses no ``transit=False`` node (a GPU in a server
forwards nothing), except that between GPUs of two different servers (``host``) the path
may cross the GPUs of those two servers, as NCCL's PXN sends (see
:mod:`simcoll.topology.routing`). A multi-plane or rail-only fabric, where NIC ``i`` of a
server reaches only NICs ``i``, passes; a server cut off from the fabric does not.

It costs a few searches on most designs: one hub next to rank 0 that reaches every GPU
(a switch or NVSwitch), or, on a fabric of planes, one search inside each server and one
pass over the strongly connected parts of the fabric (about 6 s of the 13 s a
131,072-GPU multi-plane design takes to build).

>>> from simcoll.topology.builders import switch_star
>>> star = switch_star(3, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
>>> check_reachability(star, ["gpu0", "gpu1", "gpu2"], None)
>>> star.remove_edge("sw", "gpu2")
>>> check_reachability(star, ["gpu0", "gpu1", "gpu2"], None)
Traceback (most recent call last):
...
simcoll.core.errors.TopologyError: gpu0: GPU 'gpu0' (rank 0) cannot reach GPU 'gpu2' (rank 2)
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from simcoll.core.errors import TopologyError

__all__ = ["Unreachable", "check_reachability", "first_unreachable"]


class Unreachable(TopologyError):  # noqa: N818 - a TopologyError, named for its case
    """No path joins GPU ``src`` to GPU ``dst`` (by the rule of the module docstring)."""

    def __init__(self, message: str, *, src: str, dst: str, source: str | None) -> None:
        super().__init__(message, source=source, field=src)
        self.src = src
        self.dst = dst


def check_reachability(graph: nx.DiGraph[str], by_rank: list[str], source: str | None) -> None:
    """Raise on the first GPU pair, in (source rank, destination rank) order, with no path."""
    try:
        first_unreachable(graph, by_rank, source)
    except Unreachable as cut:
        raise TopologyError(cut.message, source=cut.source, field=cut.field) from None


def first_unreachable(graph: nx.DiGraph[str], by_rank: list[str], source: str | None) -> None:
    """:func:`check_reachability`, raising :class:`Unreachable`, which names the pair."""
    root = by_rank[0]
    forward = nx.descendants(graph, root)
    for rank, node in enumerate(by_rank[1:], start=1):
        if node not in forward:
            _raise_unreachable(root, 0, node, rank, source)
    backward = nx.ancestors(graph, root)
    for rank, node in enumerate(by_rank[1:], start=1):
        if node not in backward:
            _raise_unreachable(node, rank, root, 0, source)
    blocked = {node for node, attrs in graph.nodes.items() if attrs.get("transit") is False}
    if not blocked or len(by_rank) < 2:
        return
    if _hub_reaches_all(graph, by_rank, blocked):
        return
    hosts = [graph.nodes[node].get("host") for node in by_rank]
    if None in hosts or len(set(hosts)) < 2:
        _check_routes_around(graph, by_rank, blocked, source)
    else:
        _check_servers(graph, by_rank, hosts, blocked, source)


def _hub_reaches_all(
    graph: nx.DiGraph[str], by_rank: list[str], blocked: set[str], *, every_hub: bool = False
) -> bool:
    """Whether a transit node next to rank 0 (the first in id order, or with
    ``every_hub`` any) reaches every GPU and is reached by every GPU crossing no blocked
    node (the quick, exact test of most designs)."""
    hubs = sorted(node for node in graph.successors(by_rank[0]) if node not in blocked)
    for hub in hubs if every_hub else hubs[:1]:
        forward = _reach(graph, hub, blocked, reverse=False)
        backward = _reach(graph, hub, blocked, reverse=True)
        if all(gpu in forward and gpu in backward for gpu in by_rank):
            return True
    return False


def _check_servers(
    graph: nx.DiGraph[str],
    by_rank: list[str],
    hosts: list[Any],
    blocked: set[str],
    source: str | None,
) -> None:
    """The rule of the module docstring on a graph whose GPUs all have a ``host``.

    Inside a server, every GPU reaches every other crossing no blocked node (searched
    inside the server first). Across servers, take the *islands*, the strongly connected
    parts of the graph without its blocked nodes: server ``a`` reaches server ``b`` where
    an island some GPU of ``a`` links into reaches (through islands) one that links into
    a GPU of ``b``. Only *shared* islands (holding a node of no server, or of two) can
    join two servers, unless a link joins two servers' nodes directly: then every pair
    is searched. Servers that reach and are reached from the same shared islands are
    checked once.
    """
    members: dict[Any, list[int]] = {}
    for rank, host in enumerate(hosts):
        members.setdefault(host, []).append(rank)
    inside: dict[Any, set[str]] = {}
    for node, attrs in graph.nodes.items():
        inside.setdefault(attrs.get("host"), set()).add(node)
    for host, ranks in members.items():
        gpus = [by_rank[r] for r in ranks]
        if not _hub_reaches_all(graph.subgraph(inside[host]), gpus, blocked, every_hub=True):
            _check_routes_around(graph, gpus, blocked, source, ranks=ranks)
    host_of = nx.get_node_attributes(graph, "host")
    if any(None is not host_of.get(u) != host_of.get(v) is not None for u, v in graph.edges):
        _check_every_pair(graph, by_rank, hosts, blocked, source)
        return
    kinds = _server_kinds(graph, by_rank, members, blocked)
    for (reach, _), senders in kinds.items():
        for (_, into), receivers in kinds.items():
            if senders is receivers and len(senders) < 2:
                continue
            if reach.isdisjoint(into):
                host = senders[0]
                other = next(h for h in receivers if h != host)
                src, dst = members[host][0], members[other][0]
                _raise_unreachable(by_rank[src], src, by_rank[dst], dst, source)


def _server_kinds(
    graph: nx.DiGraph[str],
    by_rank: list[str],
    members: dict[Any, list[int]],
    blocked: set[str],
) -> dict[tuple[frozenset[int], frozenset[int]], list[Any]]:
    """Servers by the shared islands (a fabric's, not one server's own) that their GPUs
    reach and are reached from."""
    island, condensed = _islands(graph, blocked)
    own: dict[int, set[Any]] = {}
    for node, number in island.items():
        own.setdefault(number, set()).add(graph.nodes[node].get("host"))
    shared = {number for number, owners in own.items() if len(owners) > 1 or None in owners}
    below: dict[int, frozenset[int]] = {}
    above: dict[int, frozenset[int]] = {}
    kinds: dict[tuple[frozenset[int], frozenset[int]], list[Any]] = {}
    for host, ranks in members.items():
        gpus = [by_rank[r] for r in ranks]
        outs = {island[n] for g in gpus for n in graph.successors(g) if n in island}
        ins = {island[n] for g in gpus for n in graph.predecessors(g) if n in island}
        for c in outs - below.keys():
            later = nx.descendants(condensed, c) if condensed is not None else set()
            below[c] = frozenset({c} | later) & shared
        for c in ins - above.keys():
            earlier = nx.ancestors(condensed, c) if condensed is not None else set()
            above[c] = frozenset({c} | earlier) & shared
        key = (frozenset().union(*(below[c] for c in outs)),
               frozenset().union(*(above[c] for c in ins)))  # fmt: skip
        kinds.setdefault(key, []).append(host)
    return kinds


def _islands(
    graph: nx.DiGraph[str], blocked: set[str]
) -> tuple[dict[str, int], nx.DiGraph[int] | None]:
    """The strongly connected parts of the graph without ``blocked`` nodes: each node's
    part, and the DAG of the parts (None where no link joins two parts).

    Where every link between unblocked nodes has its twin the other way (every builder's
    cables), the parts are the connected ones, found by one search each, and no link
    joins two of them: at 131,072 GPUs that is seconds less than networkx's condensation.
    """
    succ = graph.succ
    duplex = all(u in succ[v] for u, v in graph.edges if u not in blocked and v not in blocked)
    if not duplex:
        condensed = nx.condensation(graph.subgraph(n for n in graph if n not in blocked))
        return condensed.graph["mapping"], condensed
    island: dict[str, int] = {}
    number = 0
    for start in graph:
        if start in blocked or start in island:
            continue
        number += 1
        island[start] = number
        stack = [start]
        while stack:
            for nxt in succ[stack.pop()]:
                if nxt not in blocked and nxt not in island:
                    island[nxt] = number
                    stack.append(nxt)
    return island, None


def _check_every_pair(
    graph: nx.DiGraph[str],
    by_rank: list[str],
    hosts: list[Any],
    blocked: set[str],
    source: str | None,
) -> None:
    """The rule across servers, one search per GPU: it may cross its own server's GPUs,
    and reaches another server's GPUs where it reaches any GPU of that server."""
    for rank, node in enumerate(by_rank):
        mine = {g for g, h in zip(by_rank, hosts, strict=True) if h == hosts[rank]}
        reached = _reach(graph, node, blocked - mine, reverse=False)
        servers = {h for g, h in zip(by_rank, hosts, strict=True) if g in reached}
        for other_rank, host in enumerate(hosts):
            if host != hosts[rank] and host not in servers:
                _raise_unreachable(node, rank, by_rank[other_rank], other_rank, source)


def _check_routes_around(
    graph: nx.DiGraph[str],
    gpus: list[str],
    blocked: set[str],
    source: str | None,
    *,
    ranks: list[int] | None = None,
) -> None:
    """Every one of ``gpus`` (of ``ranks``, default 0, 1, ...) reaches every other
    without crossing a ``blocked`` (non-transit) node, searched from each in turn."""
    ranks = list(range(len(gpus))) if ranks is None else ranks
    for rank, node in zip(ranks, gpus, strict=True):
        reached = _reach(graph, node, blocked, reverse=False)
        for other_rank, other in zip(ranks, gpus, strict=True):
            if other != node and other not in reached:
                _raise_unreachable(node, rank, other, other_rank, source)


def _reach(graph: nx.DiGraph[str], start: str, blocked: set[str], *, reverse: bool) -> set[str]:
    """The nodes ``start`` reaches (or, ``reverse``, that reach it) crossing no blocked node."""
    step = graph.predecessors if reverse else graph.successors
    seen = {start}
    stack = [start]
    while stack:
        for node in step(stack.pop()):
            if node not in seen:
                seen.add(node)
                if node not in blocked:
                    stack.append(node)
    return seen


def _raise_unreachable(
    src: str, src_rank: int, dst: str, dst_rank: int, source: str | None
) -> None:
    raise Unreachable(
        f"GPU {src!r} (rank {src_rank}) cannot reach GPU {dst!r} (rank {dst_rank})",
        src=src,
        dst=dst,
        source=source,
    )
