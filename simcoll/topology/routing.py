"""Routing: which directed links a transfer from one node to another crosses.

A route is the tuple of directed edges ``(u, v)`` of one path. The rule is static and
deterministic, so a simulation never depends on set or hash order:

1. fewest hops;
2. among those, the smallest total ``latency_s`` (summed along the path, in order);
3. among the paths still tied (equal-cost multipath, ECMP), the graph's ``routing``
   attribute decides: ``"ecmp"`` (the default) picks one per (source, destination) pair
   with a seeded hash, as switches spread flows over equal-cost next hops, so collisions
   on a fat-tree are realistic and reproducible; ``"lowest_ids"`` takes the
   lexicographically smallest sequence of node ids, so every tie resolves the same way;
   ``"dmodk"`` is InfiniBand's destination-mod-k (OpenSM's fat-tree routing): all routes
   to one destination agree, and destinations behind one leaf switch spread over its
   uplinks. ``graph.graph["ecmp_seed"]`` (an int, default 0) seeds the hash.

   d-mod-k here: ``d`` is the destination's port on its leaf, the position (in natural
   order: ``nic2`` before ``nic10``) of the route's last hop out of a ``switch`` among that
   switch's successors. Read back from the destination, the i-th tie takes predecessor
   ``(d // (n_0 ... n_{i-1})) mod n_i`` of its ``n_i`` (natural order): on a leaf-spine
   fabric with k spines, destination port d comes down from spine d mod k.

Two rules of the hardware restrict the paths considered:

- a node with ``transit=False`` (a GPU inside a server) may start or end a route but is
  never crossed: GPUs do not forward traffic for one another, so a DGX-1 pair without an
  NVLink goes over PCIe and the host rather than through a third GPU's NVLinks, and a
  direct NVLink, when there is one, is always the fewest-hop path;
- but where no path joins two GPUs of different servers (``host``) without crossing a
  GPU (a multi-plane or rail-only fabric: NIC ``i`` of a server reaches only NICs ``i``),
  the route crosses one GPU of those two servers, as NCCL's PXN sends: over NVLink into
  the GPU of the source's server whose NIC reaches the destination (else into a GPU of
  the destination's server), fewest hops first, then least latency, then lowest rank.
  ``pxn=False`` asks for a route without it (an NVLS-tree head sends by its own NIC);
- on a graph with ``p2p=False`` (PCIe peer-to-peer disabled), a copy between two GPUs of
  the same ``host`` bounces through host memory: it is routed to the CPU nearest the
  source (fewest hops, then latency, then id) and from there to the destination, so it
  crosses the root complex twice.

One breadth-first search from a source settles the routes to every destination: nodes
are taken level by level, and each node keeps all its predecessors on the level before
that reach it with the least latency; a route is read back from the destination, taking
one predecessor per node (by the hash, or the one of lowest order). That is exact because
hop count and latency both add along a path.

A :class:`Router` keeps one such search per source it is asked about, and grows it only
as far as the destinations asked for need: a destination up to three levels beyond the
last complete level is settled backwards, from its own predecessors (and theirs), without
expanding those levels. So a ring's neighbour routes through a switch with thousands of
ports cost the in-degree of the destination GPU each, a route across a leaf-spine fabric
expands the source's leaf and no more, not every port of every spine; a source's routes
to every node cost one full search, O(V + E) (after 32 destinations a source completes
its search level by level, which is cheaper than settling each one ahead); and nothing
is computed for all pairs up front. Routes are cached, up to half a million, and of the
whole searches the 256 most recent are kept: an all-to-all on 1,024 GPUs stays within
bounded memory.

A GPU's routes beyond its first levels share one search. Where one of those levels holds
a single node that forwards (its gateway: the leaf switch above its NIC, the NVLink
switch of a box without NICs), every shortest path to a node further on crosses it, so
the search from the gateway has the same predecessors for those nodes, in the same order,
each at the source's latency less a constant; femtosecond-rounded latencies sum exactly,
so the ties are the same. The route is then read back in the gateway's search, with the
GPU's own pick (its pair's hash, its d-mod-k port), and on in the GPU's from the gateway:
the same route, but the 32 GPUs under a leaf search the fabric beyond it once, not 32
times (NCCL's NVLS-tree on 65,536 GPUs of a three-tier Clos: 124 s to 49 s).

>>> from simcoll.topology.builders import ring
>>> g = ring(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
>>> Router(g).route("gpu0", "gpu1")
(('gpu0', 'gpu1'),)
>>> g.graph["routing"] = "lowest_ids"
>>> Router(g).route("gpu0", "gpu2")
(('gpu0', 'gpu1'), ('gpu1', 'gpu2'))
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import networkx as nx
import numpy as np
import numpy.typing as npt

from simcoll.core.errors import TopologyError
from simcoll.topology.schema import NodeKind
from simcoll.topology.source_routes import Adjacency, routes_from
from simcoll.topology.tiebreak import STEPS_PER_S as _FS_PER_S
from simcoll.topology.tiebreak import hash_index, natural_key, rounded_s

__all__ = [
    "ROUTING_RULES",
    "Route",
    "Router",
    "route",
    "route_bandwidth_bytes_per_s",
    "route_latency_s",
]

IntArray = npt.NDArray[np.int64]
_T = TypeVar("_T")

Route = tuple[tuple[str, str], ...]
"""The directed edges of one path, in order from source to destination."""

ROUTING_RULES = ("ecmp", "lowest_ids", "dmodk")
"""Values of ``graph.graph["routing"]``: how ties between equal-cost paths are broken."""


class Router:
    """Routes between the nodes of one topology, computed on demand and cached.

    Parameters
    ----------
    graph
        A topology that has passed :func:`simcoll.topology.schema.validate`. It must not
        change while the router is in use: routes are cached. Its ``routing``,
        ``ecmp_seed`` and ``p2p`` graph attributes, and its nodes' ``transit`` and
        ``host`` attributes, set the rules (see the module docstring).

    Raises
    ------
    TopologyError
        If ``routing`` or ``ecmp_seed`` has an invalid value.
    """

    def __init__(self, graph: nx.DiGraph[str]) -> None:
        self._graph = graph
        self._rule = graph.graph.get("routing", "ecmp")
        if self._rule not in ROUTING_RULES:
            raise TopologyError(
                f"unknown rule {self._rule!r}; valid: {', '.join(ROUTING_RULES)}",
                source=self._source,
                field="routing",
            )
        seed = graph.graph.get("ecmp_seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TopologyError(
                f"must be an integer, got {seed!r}", source=self._source, field="ecmp_seed"
            )
        self._seed = seed
        self._blocked = frozenset(
            node for node, attrs in graph.nodes.items() if attrs.get("transit") is False
        )
        self._bounce = graph.graph.get("p2p", True) is False
        self._searches: dict[str, _Search] = {}
        # Each link's latency, read once: every search reads it per node it settles.
        self._succ_latency_s = {
            u: {v: float(attrs["latency_s"]) for v, attrs in succ.items()}
            for u, succ in graph.succ.items()
        }
        self._ports: dict[str, dict[str, int]] = {}  # d-mod-k port numbers, per switch
        self._complete: list[str] = []  # sources whose search holds the whole graph
        self._routes: dict[tuple[str, str], Route] = {}
        self._cpus: dict[object, list[str]] | None = None
        self._host_gpus: dict[object, list[str]] | None = None
        self._arrays: Adjacency | None = None
        # Per (source, destinations): the links, the offsets, and whether no route of
        # them crosses a GPU (PXN).
        self._batched: dict[
            tuple[str, tuple[str, ...]], tuple[tuple[IntArray, IntArray], bool]
        ] = {}
        self._batched_links = 0
        self._memo: dict[str, object] = {}

    @property
    def graph(self) -> nx.DiGraph[str]:
        """The topology this router routes on."""
        return self._graph

    def memo(self, key: str, compute: Callable[[], _T]) -> _T:
        """``compute()``, called once per ``key`` for this router's topology (which does
        not change while the router is in use): what the layers above read of every link
        once per topology, not once per call (a 16,384-GPU fabric has 131,072 links).

        >>> from simcoll.topology.builders import switch_star
        >>> router = Router(switch_star(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6))
        >>> router.memo("n_links", lambda: router.graph.number_of_edges())
        4
        >>> router.memo("n_links", lambda: -1)  # computed once
        4
        """
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]  # type: ignore[return-value]  # what compute() gave for key

    def route(self, src_node: str, dst_node: str, *, pxn: bool = True) -> Route:
        """Return the directed edges of the route from ``src_node`` to ``dst_node``.

        A node's route to itself is the empty tuple. Between GPUs of two servers that no
        path joins without crossing a GPU, the route crosses one GPU of those servers
        (PXN, see :meth:`_through_a_server_gpu`), unless ``pxn`` is false.

        Raises
        ------
        TopologyError
            If either node is not in the graph, or no directed path joins them.
        """
        key = (src_node, dst_node)
        cached = self._routes.get(key)
        if cached is not None:
            if not pxn and self._forwarded(cached):
                return self._direct(src_node, dst_node)  # raises: only through a GPU
            return cached
        for node in key:
            if node not in self._graph:
                raise TopologyError(f"no node {node!r} in the topology", source=self._source)
        cpu = self._bounce_cpu(src_node, dst_node)
        if cpu is not None:
            found = self._direct(src_node, cpu) + self._direct(cpu, dst_node)
        else:
            try:
                found = self._direct(src_node, dst_node)
            except TopologyError:
                if not pxn:
                    raise
                found = self._through_a_server_gpu(src_node, dst_node)
        if len(self._routes) >= _MAX_ROUTES:  # bounded memory: start the cache afresh
            self._routes.clear()
        self._routes[key] = found
        return found

    def _forwarded(self, edges: Route) -> bool:
        """Whether a route crosses a node that forwards nothing (a GPU, by PXN)."""
        return any(v in self._blocked for _, v in edges[:-1])

    def routes_from(
        self, src_node: str, dst_nodes: Sequence[str], *, pxn: bool = True
    ) -> tuple[IntArray, IntArray]:
        """The routes from ``src_node`` to each of ``dst_nodes``, found together.

        Returns ``(links, offsets)``: the route to ``dst_nodes[i]`` crosses links
        ``links[offsets[i]:offsets[i + 1]]``, where link ``e`` is the ``e``-th of
        ``graph.edges``. They are the routes :meth:`route` returns, from one search over
        arrays (:mod:`simcoll.topology.source_routes`): cheaper than :meth:`route` once a
        source has more than a few dozen destinations. The answer is kept (up to
        ``_MAX_BATCHED_LINKS`` links in all) for the same question asked again, as a
        prediction asks once per protocol; callers must not write into it.

        >>> from simcoll.topology.builders import switch_star
        >>> router = Router(switch_star(3, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0))
        >>> links, offsets = router.routes_from("gpu2", ["gpu0", "gpu1"])
        >>> offsets.tolist()
        [0, 2, 4]
        >>> edges = list(router.graph.edges)
        >>> [edges[e] for e in links[2:4]] == list(router.route("gpu2", "gpu1"))
        True

        Raises
        ------
        TopologyError
            As :meth:`route`: a node not in the graph, or no directed path (with ``pxn``
            false: none that crosses no GPU).
        """
        for node in (src_node, *dst_nodes):
            if node not in self._graph:
                raise TopologyError(f"no node {node!r} in the topology", source=self._source)
        key = (src_node, tuple(dst_nodes))
        kept = self._batched.get(key)
        if kept is not None and (pxn or kept[1]):
            return kept[0]
        found, direct = self._routes_from(src_node, dst_nodes, pxn=pxn)
        self._batched_links += len(found[0])
        if self._batched_links > _MAX_BATCHED_LINKS:  # bounded memory: start afresh
            self._batched.clear()
            self._batched_links = len(found[0])
        self._batched[key] = (found, direct)
        return found

    def _routes_from(
        self, src_node: str, dst_nodes: Sequence[str], *, pxn: bool
    ) -> tuple[tuple[IntArray, IntArray], bool]:
        """The routes, and whether none of them crosses a GPU."""
        if self._arrays is None:
            self._arrays = Adjacency(self._graph)
        if not self._bounce:
            try:
                found = routes_from(
                    self._arrays, src_node, dst_nodes, rule=self._rule, seed=self._seed
                )
                return found, True
            except TopologyError as error:
                if not pxn or self._graph.nodes[src_node].get("host") is None:
                    raise TopologyError(error.message, source=self._source) from None
        # Through a CPU (copies inside a host without P2P) or, to some destination, a GPU
        # of one of the two servers (PXN): route each.
        routes = [self.route(src_node, dst, pxn=pxn) for dst in dst_nodes]
        ids = [self._arrays.link_ids(edges) for edges in routes]
        offsets = np.cumsum([0, *map(len, ids)], dtype=np.int64)
        links = np.array([e for one in ids for e in one], dtype=np.int64)
        return (links, offsets), not any(self._forwarded(edges) for edges in routes)

    def _through_a_server_gpu(self, src_node: str, dst_node: str) -> Route:
        """The route of two GPUs of different servers that no path joins without crossing
        a GPU: through a GPU of the source's server (NCCL's PXN: the sender writes over
        NVLink into the GPU next to a NIC that reaches the destination), else through one
        of the destination's server, else one of each (a plane down on both sides);
        fewest hops, then least latency, then lowest rank."""
        nodes = self._graph.nodes
        src_host, dst_host = nodes[src_node].get("host"), nodes[dst_node].get("host")
        if (
            src_host is None
            or dst_host is None
            or src_host == dst_host
            or nodes[src_node]["kind"] is not NodeKind.GPU
            or nodes[dst_node]["kind"] is not NodeKind.GPU
        ):
            return self._direct(src_node, dst_node)  # raises: no path, no PXN rule
        if self._host_gpus is None:
            self._host_gpus = {}
            for node, attrs in sorted(nodes.items(), key=lambda item: item[1].get("rank", -1)):
                if attrs["kind"] is NodeKind.GPU and attrs.get("host") is not None:
                    self._host_gpus.setdefault(attrs["host"], []).append(node)
        senders, receivers = self._host_gpus[src_host], self._host_gpus[dst_host]
        for stops in (
            [(p,) for p in senders if p != src_node],  # PXN: the usual way
            [(q,) for q in receivers if q != dst_node],  # into another GPU, then NVLink
            [(p, q) for p in senders if p != src_node for q in receivers if q != dst_node],
        ):
            best: tuple[int, float, int, Route] | None = None
            for order, via in enumerate(stops):
                hops = (src_node, *via, dst_node)
                try:
                    edges: Route = ()
                    for a, b in itertools.pairwise(hops):
                        edges += self._direct(a, b)
                except TopologyError:
                    continue
                key = (len(edges), rounded_s(route_latency_s(self._graph, edges)), order, edges)
                best = key if best is None or key[:3] < best[:3] else best
            if best is not None:
                return best[3]
        return self._direct(src_node, dst_node)  # raises: no route at all

    def _direct(self, src_node: str, dst_node: str) -> Route:
        walk = _Walk()
        if not self._walk_back(src_node, dst_node, self._pick(src_node, dst_node), walk):
            raise TopologyError(
                f"no route from {src_node!r} to {dst_node!r}: no directed path joins them",
                source=self._source,
            )
        return tuple(reversed(walk.edges))

    def _walk_back(
        self, src_node: str, dst_node: str, pick: _Pick, walk: _Walk, *, shared: bool = False
    ) -> bool:
        """Read the route from ``src_node`` to ``dst_node`` back into ``walk``; False if
        no path joins them. Beyond the source's gateway (:meth:`_Search.gateway`) the
        route is the gateway's own to ``dst_node``, read with the source's pick: one
        search from a leaf switch serves every GPU behind it."""
        search = self._search(src_node)
        # a GPU's gateway (a gateway's own is not looked for: a switch's first levels
        # are wide, and its routes are shared already)
        gpu = self._graph.nodes[src_node].get("kind") is NodeKind.GPU
        gateway = search.gateway() if gpu and not shared else None
        if gateway is not None and not search.before_gateway(dst_node):
            if not self._walk_back(gateway, dst_node, pick, walk, shared=True):
                return False
            search.walk_back(gateway, pick, walk)  # settled: its level is complete
            return True
        was_complete = search.complete
        found = search.settle(dst_node, whole_after=0 if shared else _FULL_SEARCH_AFTER)
        if search.complete and not was_complete:  # a whole search: keep the newest few
            self._complete.append(src_node)
            if len(self._complete) > _MAX_COMPLETE_SEARCHES:
                self._searches.pop(self._complete.pop(0), None)
        if not found:
            return False
        search.walk_back(dst_node, pick, walk)
        return True

    def _search(self, src_node: str) -> _Search:
        search = self._searches.get(src_node)
        if search is None:
            search = self._searches[src_node] = _Search(
                self._graph, src_node, self._blocked, self._ports, self._succ_latency_s
            )
        return search

    def _pick(self, src_node: str, dst_node: str) -> _Pick:
        if self._rule == "lowest_ids":
            return None
        if self._rule == "dmodk":
            return _DMODK
        return f"{self._seed}/{src_node}/{dst_node}"

    def _bounce_cpu(self, src_node: str, dst_node: str) -> str | None:
        """The CPU a P2P-less GPU-to-GPU copy bounces through, or None for a direct route."""
        if not self._bounce or src_node == dst_node:
            return None
        nodes = self._graph.nodes
        if (
            nodes[src_node]["kind"] is not NodeKind.GPU
            or nodes[dst_node]["kind"] is not NodeKind.GPU
        ):
            return None
        host = nodes[src_node].get("host")
        if host is None or nodes[dst_node].get("host") != host:
            return None
        if self._cpus is None:
            self._cpus = {}
            for node in sorted(nodes):
                if nodes[node]["kind"] is NodeKind.CPU:
                    self._cpus.setdefault(nodes[node].get("host"), []).append(node)
        best: tuple[int, float, str] | None = None
        for cpu in self._cpus.get(host, []):
            try:
                edges = self._direct(src_node, cpu)
            except TopologyError:
                continue
            key = (len(edges), rounded_s(route_latency_s(self._graph, edges)), cpu)
            best = key if best is None or key < best else best
        return None if best is None else best[2]

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


_Pick = str | None
"""How a route chooses among tied predecessors: a hash key (ECMP), ``_DMODK``, or None
(lowest ids)."""


class _Walk:
    """A route read back from its destination: its edges so far (last first), and the
    d-mod-k state (the destination's leaf port, the product of the ties met)."""

    __slots__ = ("edges", "port", "radix")

    def __init__(self) -> None:
        self.edges: list[tuple[str, str]] = []
        self.port: int | None = None
        self.radix = 1


_UNKNOWN = object()  # a search's gateway, not looked for yet

_DMODK = "\x00dmodk"  # not a hash key: no seed formats to a string starting with NUL

# How many levels beyond the last complete one a destination may be settled backwards.
_LOOK_AHEAD_LEVELS = 3
# A source's gateway is looked for on its first levels, up to this depth, while they
# hold at most this many nodes (a GPU: its switch and NIC, then its leaf and the GPUs of
# its server).
_GATEWAY_LEVELS = 3
_GATEWAY_WIDTH = 64
# After this many destinations from one source, its search is completed level by level.
_FULL_SEARCH_AFTER = 32
# Whole searches (every node of the graph) kept per router, the newest; routes already
# found stay cached, and a source asked again after its search went starts a new one.
_MAX_COMPLETE_SEARCHES = 256
# Routes kept per router; an all-to-all on 1,024 GPUs asks for a million, once each.
_MAX_ROUTES = 500_000
# Links kept per router in answers of routes_from (8 bytes each): an all-to-all on 1,024
# GPUs crosses about 8 million.
_MAX_BATCHED_LINKS = 1 << 24


class _Search:
    """A breadth-first search from one source, completed level by level on demand.

    Each settled node has its depth, the (rounded) latency of its best paths, and all
    predecessors on the level before that give that latency (``preds``, in ``order``).
    ``order`` is a node's rank within its level by the smallest node sequence of its best
    paths, so that sequences compare as integers. Nodes in ``blocked`` are settled but
    never expanded (except the source).
    """

    def __init__(
        self,
        graph: nx.DiGraph[str],
        src_node: str,
        blocked: frozenset[str],
        ports: dict[str, dict[str, int]] | None = None,
        succ_latency_s: dict[str, dict[str, float]] | None = None,
    ) -> None:
        self._graph = graph
        self._succ_latency_s = succ_latency_s or {
            u: {v: float(attrs["latency_s"]) for v, attrs in succ.items()}
            for u, succ in graph.succ.items()
        }
        self._ports = {} if ports is None else ports  # per switch: successor -> port
        # d-mod-k: a node's tied predecessors in natural order, with the list they sort
        # (a node settled again gets a new list, and is sorted again)
        self._natural_preds: dict[str, tuple[list[str], list[str]]] = {}
        self._src = src_node
        self._blocked = blocked
        self._preds: dict[str, list[str]] = {src_node: []}
        self._latency_s = {src_node: 0.0}
        self._order = {src_node: 0}
        self._depth = {src_node: 0}
        self._level = [src_node]  # the last complete level
        self._level_depth = 0
        self._not_ahead: set[tuple[str, int]] = set()  # (node, levels) found not ahead
        # the last level's successors (each with its predecessors there), once gathered,
        # and how many links leave that level
        self._level_successors: dict[str, list[str]] | None = None
        self._level_out_degree: int | None = None
        self._asked = 0  # destinations asked for
        self.complete = False  # every node settled, level by level
        self._gateway: str | object | None = _UNKNOWN  # see gateway()
        self._gateway_depth = 0

    def settle(self, dst_node: str, *, whole_after: int = _FULL_SEARCH_AFTER) -> bool:
        """Settle ``dst_node``; False when no path reaches it.

        A source asked for ``whole_after`` destinations (an all-to-all) completes its
        search level by level at once: a plain breadth-first search then costs less than
        settling each destination ahead of its level, and settles every node the same
        way. A gateway's search (``whole_after`` 0) never does: the GPUs behind it ask
        for few destinations each, and a whole search of a large fabric per leaf costs
        more than settling them.
        """
        self._asked += 1
        if self._asked == whole_after:
            while self._complete_next_level():
                pass
            self.complete = True
        while not self._ahead(dst_node, _LOOK_AHEAD_LEVELS):
            if not self._complete_next_level():
                return False
        return True

    def gateway(self) -> str | None:
        """The node every route from the source crosses beyond its first levels, if one
        is found there: the only node that forwards on some level of at most
        ``_GATEWAY_LEVELS`` (a GPU's leaf switch: past it, every shortest path goes on
        from that switch, so a search from the switch gives the same predecessors, in
        the same order, at the same latency plus the source's to it). None if there is
        none, or the first levels are wide (a switch, a host's PCIe tree).
        """
        if self._gateway is _UNKNOWN:
            self._gateway = None
            while self._level_depth < _GATEWAY_LEVELS and self._complete_next_level():
                forwarding = [v for v in self._level if v not in self._blocked]
                if len(forwarding) == 1:
                    self._gateway = forwarding[0]
                    self._gateway_depth = self._level_depth
                    break
                if len(self._level) > _GATEWAY_WIDTH:
                    break
        return self._gateway  # type: ignore[return-value]  # resolved above

    def before_gateway(self, node: str) -> bool:
        """Whether ``node`` lies no deeper than the gateway's level (whose levels are
        complete, so anything deeper is not settled there or is settled deeper)."""
        depth = self._depth.get(node)
        return depth is not None and depth <= self._gateway_depth

    def _ahead(self, v: str, levels: int) -> bool:
        """Settle ``v`` if it lies at most ``levels`` beyond the last complete level; say so.

        Its depth is one more than its shallowest expandable predecessor's; every
        predecessor within ``levels - 1`` of the last level is found by the same rule,
        so the predecessors kept (those on the level before ``v``) are all of them. Nodes
        settled this way are settled again, to the same result, when their level is
        completed. False says ``v`` lies further (or nowhere); it depends only on the last
        complete level, so it is kept until the next level completes (a leaf switch's
        thousands of predecessors are then walked once, not once per route through it).
        """
        depth = self._depth.get(v)
        if depth is not None:
            return depth <= self._level_depth + levels
        if levels == 0 or (v, levels) in self._not_ahead:
            return False
        if levels == 1:  # the predecessors must be settled already: no recursion
            found = self._on_last_level(v)
        else:
            found = [
                u for u in self._graph.pred[v] if self._expands(u) and self._ahead(u, levels - 1)
            ]
        if not found:
            self._not_ahead.add((v, levels))
            return False
        depth = min(self._depth[u] for u in found)
        self._settle(v, [u for u in found if self._depth[u] == depth], depth + 1)
        return True

    def _on_last_level(self, v: str) -> list[str]:
        """The expandable predecessors of ``v`` (not yet settled) on the last complete
        level: the only settled ones it can have, or ``v`` would be settled already.

        Read from whichever side is smaller: ``v``'s predecessors, or the successors of
        the whole level, gathered once per level (a spine's predecessors are every leaf
        of the fabric; a leaf's level, which asks about every spine, has a few dozen
        successors).
        """
        pred = self._graph.pred[v]
        if self._level_successors is None:
            if self._level_out_degree is None:
                self._level_out_degree = sum(
                    len(self._graph.succ[u]) for u in self._level if self._expands(u)
                )
            if len(pred) <= self._level_out_degree:
                known, last = self._depth, self._level_depth
                return [u for u in pred if known.get(u, last + 1) <= last and self._expands(u)]
            successors: dict[str, list[str]] = {}
            for u in self._level:
                if self._expands(u):
                    for w in self._graph.succ[u]:
                        successors.setdefault(w, []).append(u)
            self._level_successors = successors
        return self._level_successors.get(v, [])

    def _expands(self, node: str) -> bool:
        return node == self._src or node not in self._blocked

    def _settle(self, v: str, candidates: list[str], depth: int) -> None:
        """Settle ``v`` at ``depth`` from its predecessors on the level before."""
        latency_s, link_s = self._latency_s, self._succ_latency_s
        if len(candidates) == 1:  # most nodes of a fabric: no tie to break
            (u,) = candidates
            preds, best_s = candidates, rounded_s(latency_s[u] + link_s[u][v])
        else:
            try:  # rounded_s inlined: a validated topology's latencies are finite
                via = [(round((latency_s[u] + link_s[u][v]) * _FS_PER_S) / _FS_PER_S, u)
                       for u in candidates]  # fmt: skip
            except (OverflowError, ValueError):
                via = [(rounded_s(latency_s[u] + link_s[u][v]), u) for u in candidates]
            best_s = min(t for t, _ in via)
            preds = [u for t, u in via if t == best_s]
            if len(preds) > 1:
                order = self._order
                if all(u in order for u in preds):  # on a complete level: by rank there
                    preds.sort(key=order.__getitem__)
                else:
                    preds.sort(key=self._key)
        self._preds[v] = preds
        self._latency_s[v] = best_s
        self._depth[v] = depth

    def _key(self, node: str) -> tuple[int | str, ...]:
        """A node's rank in its level, as ``order``; beyond the last complete level, the
        rank of its first predecessor followed by its id, which sorts the same way."""
        order = self._order.get(node)
        if order is not None:
            return (order,)
        return (*self._key(self._preds[node][0]), node)

    def _complete_next_level(self) -> bool:
        """Settle every node one hop beyond the last level; False if there is none."""
        candidates: dict[str, list[str]] = {}
        # the successors in the graph's order, from plain dicts (networkx's views cost
        # more per lookup, and a level of a large fabric looks up millions)
        successors, depth_of, last = self._succ_latency_s, self._depth.get, self._level_depth
        blocked, src = self._blocked, self._src
        for u in self._level:
            if u in blocked and u != src:  # not self._expands(u)
                continue
            for v in successors[u]:
                # Nodes settled early (one level ahead, by settle) are settled again,
                # to the same result, so that they take their place in the level.
                if depth_of(v, last + 1) > last:
                    candidates.setdefault(v, []).append(u)
        for v, preds in candidates.items():
            self._settle(v, preds, self._level_depth + 1)
        # A node's smallest sequence is its first predecessor's, then itself.
        level = sorted(candidates, key=lambda v: (self._order[self._preds[v][0]], v))
        self._level = level
        self._level_depth += 1
        self._not_ahead.clear()
        self._level_successors = None
        self._level_out_degree = None
        for index, v in enumerate(level):
            self._order[v] = index
        return bool(level)

    def walk_back(self, node: str, pick: _Pick, walk: _Walk) -> None:
        """Append the route from the source to settled ``node``, read back from
        ``node``, to ``walk`` (which may hold the route on from ``node`` already)."""
        edges = walk.edges
        while node != self._src:
            preds = self._preds[node]
            if pick is None or len(preds) == 1:
                u = preds[0]
            elif pick == _DMODK:
                if walk.port is None:
                    walk.port = self._leaf_port(edges, node)
                u = self._in_natural_order(node, preds)[(walk.port // walk.radix) % len(preds)]
                walk.radix *= len(preds)
            else:
                u = preds[hash_index(pick, node, len(preds))]
            edges.append((u, node))
            node = u

    def _in_natural_order(self, node: str, preds: list[str]) -> list[str]:
        """``preds`` (``node``'s) sorted by :func:`natural_key`, sorted once per settling."""
        found = self._natural_preds.get(node)
        if found is None or found[0] is not preds:
            found = self._natural_preds[node] = (preds, sorted(preds, key=natural_key))
        return found[1]

    def _leaf_port(self, edges_back: list[tuple[str, str]], node: str) -> int:
        """Position of the destination's access node among its leaf switch's successors.

        ``edges_back`` is the route read back so far, ``node`` the node reached; the leaf
        is the route's last ``switch`` (``node`` itself if none was passed yet, or the
        destination's side of the route when there is no switch at all).
        """
        nodes = self._graph.nodes
        below = edges_back[-1][1] if edges_back else node
        leaf = node
        for u, v in edges_back:
            if nodes[u]["kind"] is NodeKind.SWITCH:
                leaf, below = u, v
                break
        ports = self._ports.get(leaf)
        if ports is None:
            ordered = sorted(self._graph.succ[leaf], key=natural_key)
            ports = self._ports[leaf] = {v: i for i, v in enumerate(ordered)}
        return ports.get(below, 0)
