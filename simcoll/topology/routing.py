"""Routing: which directed links a transfer from one node to another crosses.

A route is the tuple of directed edges ``(u, v)`` of one path. The rule is static and
deterministic, so a simulation never depends on set or hash order:

1. fewest hops;
2. among those, the smallest total ``latency_s`` (summed along the path, in order);
3. among those, the lexicographically smallest sequence of node ids.

One breadth-first search from a source settles the routes to every destination: nodes
are taken level by level, and each node keeps the best of its predecessors on the level
before. That is exact because both tie-breaks are preserved when a path is extended by
one edge (adding the same latency, appending the same node).

A :class:`Router` keeps one such search per source it is asked about, and grows it only
as far as the destinations asked for need: a destination one level beyond the last
complete level is settled from its own predecessors, without expanding that level. So a
ring's neighbour routes through a switch with thousands of ports cost the in-degree of
the destination GPU each, not a search over every port; a source's routes to every node
cost one full search, O(V + E); and nothing is computed for all pairs up front. Routes
are cached.

>>> from simcoll.topology.builders import ring
>>> g = ring(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
>>> Router(g).route("gpu0", "gpu2")
(('gpu0', 'gpu1'), ('gpu1', 'gpu2'))
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import networkx as nx

from simcoll.errors import TopologyError

__all__ = ["Route", "Router", "route", "route_bandwidth_bytes_per_s", "route_latency_s"]

Route = tuple[tuple[str, str], ...]
"""The directed edges of one path, in order from source to destination."""


class Router:
    """Routes between the nodes of one topology, computed on demand and cached.

    Parameters
    ----------
    graph
        A topology that has passed :func:`simcoll.topology.schema.validate`. It must not
        change while the router is in use: routes are cached.
    """

    def __init__(self, graph: nx.DiGraph[str]) -> None:
        self._graph = graph
        self._searches: dict[str, _Search] = {}
        self._routes: dict[tuple[str, str], Route] = {}

    @property
    def graph(self) -> nx.DiGraph[str]:
        """The topology this router routes on."""
        return self._graph

    def route(self, src_node: str, dst_node: str) -> Route:
        """Return the directed edges of the route from ``src_node`` to ``dst_node``.

        A node's route to itself is the empty tuple.

        Raises
        ------
        TopologyError
            If either node is not in the graph, or no directed path joins them.
        """
        key = (src_node, dst_node)
        cached = self._routes.get(key)
        if cached is not None:
            return cached
        for node in key:
            if node not in self._graph:
                raise TopologyError(f"no node {node!r} in the topology", source=self._source)
        search = self._searches.get(src_node)
        if search is None:
            search = self._searches[src_node] = _Search(self._graph, src_node)
        found = search.route_to(dst_node)
        if found is None:
            raise TopologyError(
                f"no route from {src_node!r} to {dst_node!r}: no directed path joins them",
                source=self._source,
            )
        self._routes[key] = found
        return found

    @property
    def _source(self) -> str | None:
        source = self._graph.graph.get("source")
        return source if isinstance(source, str) else None


def route(graph: nx.DiGraph[str], src_node: str, dst_node: str) -> Route:
    """Return the route from ``src_node`` to ``dst_node``; see :class:`Router`.

    This searches the graph afresh on every call: use a :class:`Router` for more than a
    few routes.

    >>> from simcoll.topology.builders import switch_star
    >>> g = switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    >>> route(g, "gpu1", "gpu3")
    (('gpu1', 'sw'), ('sw', 'gpu3'))
    """
    return Router(graph).route(src_node, dst_node)


def route_latency_s(graph: nx.DiGraph[str], edges: Sequence[tuple[str, str]]) -> float:
    """Total latency of a route: the sum of its links' ``latency_s``, 0.0 for no links.

    >>> from simcoll.topology.builders import switch_star
    >>> g = switch_star(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.25)
    >>> route_latency_s(g, route(g, "gpu0", "gpu1"))
    0.5
    """
    latency_s = 0.0
    for u, v in edges:
        latency_s += graph.edges[u, v]["latency_s"]
    return latency_s


def route_bandwidth_bytes_per_s(graph: nx.DiGraph[str], edges: Sequence[tuple[str, str]]) -> float:
    """Bandwidth of a route: the smallest ``bandwidth_bytes_per_s`` of its links.

    A route with no links (a node to itself) is not limited by any link: ``math.inf``.

    >>> from simcoll.topology.builders import ring
    >>> g = ring(3, link_bandwidth_bytes_per_s=2e9, link_latency_s=0.0)
    >>> g.edges["gpu1", "gpu2"]["bandwidth_bytes_per_s"] = 5e8
    >>> route_bandwidth_bytes_per_s(g, [("gpu0", "gpu1"), ("gpu1", "gpu2")])
    500000000.0
    """
    return min(
        (float(graph.edges[u, v]["bandwidth_bytes_per_s"]) for u, v in edges), default=math.inf
    )


class _Search:
    """A breadth-first search from one source, completed level by level on demand.

    Each node of a complete level has its best predecessor (``parent``), the latency of
    its best path, and ``order``: its rank within its level by the node sequence of that
    path, so that sequences compare as integers.
    """

    def __init__(self, graph: nx.DiGraph[str], src_node: str) -> None:
        self._graph = graph
        self._src = src_node
        self._parent = {src_node: src_node}
        self._latency_s = {src_node: 0.0}
        self._order = {src_node: 0}
        self._depth = {src_node: 0}
        self._level = [src_node]  # the last complete level
        self._level_depth = 0

    def route_to(self, dst_node: str) -> Route | None:
        """The route to ``dst_node``, or None when no path reaches it."""
        while dst_node not in self._parent:
            # dst_node may lie one level further: settle it from its own predecessors,
            # without completing that level (behind a switch it holds every GPU).
            on_level = [
                u for u in self._graph.pred[dst_node] if self._depth.get(u) == self._level_depth
            ]
            if on_level:
                _, _, u = min(self._candidate(u, dst_node) for u in on_level)
                return (*self._walk_back(u), (u, dst_node))
            if not self._complete_next_level():
                return None
        return self._walk_back(dst_node)

    def _candidate(self, u: str, v: str) -> tuple[float, int, str]:
        """The key of the path to v through u: latency, then node sequence (by u's order)."""
        return self._latency_s[u] + self._graph.succ[u][v]["latency_s"], self._order[u], u

    def _complete_next_level(self) -> bool:
        """Settle every node one hop beyond the last level; False if there is none."""
        best: dict[str, tuple[float, int, str]] = {}
        for u in self._level:
            for v in self._graph.succ[u]:
                if v not in self._parent:
                    candidate = self._candidate(u, v)
                    if v not in best or candidate < best[v]:
                        best[v] = candidate
        # A path's node sequence is its parent's, then itself: order by both.
        self._level = sorted(best, key=lambda v: (best[v][1], v))
        self._level_depth += 1
        for index, v in enumerate(self._level):
            self._latency_s[v], _, self._parent[v] = best[v]
            self._order[v] = index
            self._depth[v] = self._level_depth
        return bool(self._level)

    def _walk_back(self, node: str) -> Route:
        edges: list[tuple[str, str]] = []
        while node != self._src:
            edges.append((self._parent[node], node))
            node = self._parent[node]
        return tuple(reversed(edges))
