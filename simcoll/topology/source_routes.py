"""Every route from one source at once: :class:`~simcoll.topology.routing.Router`'s rules
on numpy arrays, for a source asked about many destinations (an all-to-all).

The router settles one breadth-first search per source and reads each route back from its
destination, one Python step per hop. Here the same search runs level by level on the
graph's adjacency arrays, and the routes to all destinations are read back together, one
vectorised step per hop. The rules are the router's, to the bit:

- a level's candidates are the unsettled successors of its expandable nodes; each keeps
  the predecessors whose path latency, rounded as :func:`rounded_s` rounds it, is least,
  in the order of their level;
- a level is ordered by its nodes' first predecessor's order, then by node id;
- reading back, a node with one predecessor takes it; with several, ``lowest_ids`` takes
  the first, ``dmodk`` the ``(port // radix) mod n``-th in natural order, and ``ecmp`` the
  seeded hash's choice (:func:`~simcoll.topology.routing.hash_index`, one Python call per
  tied hop: ties are few per route).

A route is given as link ids: positions in ``graph.edges`` order, which is the order of
the adjacency arrays. ``tests/topology/test_source_routes.py`` checks every route against
the router's, on fabrics with each rule.

>>> from simcoll.topology.builders import switch_star
>>> g = switch_star(3, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
>>> arrays = Adjacency(g)
>>> links, offsets = routes_from(arrays, "gpu0", ["gpu1", "gpu2", "gpu0"], rule="ecmp", seed=0)
>>> edges = list(g.edges)
>>> [[edges[i] for i in links[a:b]] for a, b in zip(offsets[:-1], offsets[1:])]
[[('gpu0', 'sw'), ('sw', 'gpu1')], [('gpu0', 'sw'), ('sw', 'gpu2')], []]
"""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx
import numpy as np
import numpy.typing as npt

from simcoll.core.errors import TopologyError
from simcoll.topology.schema import NodeKind
from simcoll.topology.tiebreak import hash_index, natural_key, rounded_s

__all__ = ["Adjacency", "routes_from"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class Adjacency:
    """A topology's adjacency as arrays, with what the routing rules read per node and link.

    Link ``e`` is the ``e``-th of ``graph.edges``: the successors of node ``i`` are
    ``succ[ptr[i]:ptr[i + 1]]``, reached over links ``ptr[i]`` to ``ptr[i + 1] - 1``.
    """

    def __init__(self, graph: nx.DiGraph[str]) -> None:
        self.names: list[str] = list(graph.nodes)
        self.index = {name: i for i, name in enumerate(self.names)}
        n = len(self.names)
        counts = np.array([len(graph.succ[name]) for name in self.names], dtype=np.int64)
        self.ptr: IntArray = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        index = self.index
        self.succ: IntArray = np.array(
            [index[v] for name in self.names for v in graph.succ[name]], dtype=np.int64
        )
        self.link_latency_s: FloatArray = np.array(
            [float(attrs["latency_s"]) for _, _, attrs in graph.edges(data=True)], dtype=np.float64
        )
        self.link_from: IntArray = np.repeat(np.arange(n, dtype=np.int64), counts)
        self.expands = np.array(
            [graph.nodes[name].get("transit") is not False for name in self.names], dtype=bool
        )
        self.is_switch = np.array(
            [graph.nodes[name]["kind"] is NodeKind.SWITCH for name in self.names], dtype=bool
        )
        # Level order breaks ties by node id (string order); d-mod-k reads natural order,
        # where names with equal keys tie (and keep the order they had).
        self.name_rank = _ranks(self.names, key=None)
        self.natural_rank = _ranks(self.names, key=natural_key)
        # d-mod-k: the position of each link's head among its tail's successors, in
        # natural order (a switch's port number).
        port = np.zeros(len(self.succ), dtype=np.int64)
        for i in range(n):
            lo, hi = int(self.ptr[i]), int(self.ptr[i + 1])
            heads = self.succ[lo:hi]
            order = np.argsort(self.natural_rank[heads], kind="stable")
            port[lo + order] = np.arange(hi - lo)
        self.link_port: IntArray = port
        self._link_of: dict[tuple[str, str], int] | None = None

    def link_ids(self, edges: Sequence[tuple[str, str]]) -> list[int]:
        """The link ids of a route given as edges."""
        if self._link_of is None:
            ends = zip(self.link_from.tolist(), self.succ.tolist(), strict=True)
            self._link_of = {(self.names[u], self.names[v]): e for e, (u, v) in enumerate(ends)}
        return [self._link_of[edge] for edge in edges]


class _Settled:
    """One complete search: per node its depth, and its tied predecessors (and the links
    from them) in level order, as ``pred_node[start[v]:start[v] + count[v]]``."""

    def __init__(self, adjacency: Adjacency, src: int) -> None:
        a = adjacency
        n = len(a.names)
        self.depth = np.full(n, -1, dtype=np.int64)
        latency_s = np.zeros(n)
        order = np.full(n, -1, dtype=np.int64)
        self.start = np.zeros(n, dtype=np.int64)
        self.count = np.zeros(n, dtype=np.int64)
        self.depth[src], order[src] = 0, 0
        preds: list[IntArray] = []
        links: list[IntArray] = []
        owners: list[IntArray] = []
        n_preds = 0
        level = np.array([src], dtype=np.int64)
        depth = 0
        while level.size:
            # The source expands even where nothing else may (a GPU that is not a transit).
            tails = level[a.expands[level] | (level == src)]
            first, last = a.ptr[tails], a.ptr[tails + 1]
            link = _ranges(first, last)
            head = a.succ[link]
            fresh = self.depth[head] < 0
            link, head = link[fresh], head[fresh]
            if not link.size:
                break
            tail = a.link_from[link]
            via_s = rounded_s(latency_s[tail] + a.link_latency_s[link])
            by = np.lexsort((order[tail], via_s, head))
            link, head, tail, via_s = link[by], head[by], tail[by], via_s[by]
            new = np.flatnonzero(np.r_[True, head[1:] != head[:-1]])
            heads = head[new]
            best_s = np.repeat(via_s[new], np.diff(np.r_[new, len(head)]))
            keep = via_s == best_s
            link, head, tail = link[keep], head[keep], tail[keep]
            counts = np.bincount(np.searchsorted(heads, head), minlength=len(heads))
            starts = np.r_[0, np.cumsum(counts)[:-1]]
            self.start[heads] = n_preds + starts
            self.count[heads] = counts
            n_preds += len(tail)
            preds.append(tail)
            links.append(link)
            owners.append(head)
            depth += 1
            self.depth[heads] = depth
            latency_s[heads] = via_s[new]
            level = heads[np.lexsort((a.name_rank[heads], order[tail[starts]]))]
            order[level] = np.arange(len(level))
        none = np.zeros(0, dtype=np.int64)
        self.pred_node = np.concatenate(preds) if preds else none
        self.pred_link = np.concatenate(links) if links else none
        # d-mod-k reads a node's tied predecessors in natural order: natural[start[v] + j]
        # is the position of its j-th (each node's predecessors are consecutive, so
        # sorting by their start keeps every node's block in place).
        owner = np.concatenate(owners) if owners else none
        self.natural = np.lexsort((a.natural_rank[self.pred_node], self.start[owner]))


def routes_from(
    adjacency: Adjacency,
    src_node: str,
    dst_nodes: Sequence[str],
    *,
    rule: str,
    seed: int,
) -> tuple[IntArray, IntArray]:
    """The routes from ``src_node`` to each of ``dst_nodes``, as the router finds them.

    Returns ``(links, offsets)``: the route to ``dst_nodes[i]`` crosses the links
    ``links[offsets[i]:offsets[i + 1]]``, in order from the source. ``rule`` and ``seed``
    are the graph's ``routing`` and ``ecmp_seed``. A destination no path reaches is a
    TopologyError, as from the router.
    """
    a = adjacency
    src = a.index[src_node]
    dst = np.array([a.index[name] for name in dst_nodes], dtype=np.int64)
    found = _Settled(a, src)
    hops = found.depth[dst]
    if (hops < 0).any():
        missing = dst_nodes[int(np.flatnonzero(hops < 0)[0])]
        raise TopologyError(
            f"no route from {src_node!r} to {missing!r}: no directed path joins them"
        )
    offsets = np.concatenate([[0], np.cumsum(hops)]).astype(np.int64)
    links = np.zeros(int(offsets[-1]), dtype=np.int64)
    node = dst.copy()
    port = np.full(len(dst), -1, dtype=np.int64)  # d-mod-k: the destination's leaf port
    radix = np.ones(len(dst), dtype=np.int64)  # d-mod-k: product of the ties met so far
    leaf_link = np.full(len(dst), -1, dtype=np.int64)  # the last switch's link down
    last_link = np.full(len(dst), -1, dtype=np.int64)  # the link read back last
    active = np.flatnonzero(hops > 0)
    step = 0
    while active.size:
        at = node[active]
        n_tied = found.count[at]
        pick = found.start[at]
        tied = np.flatnonzero(n_tied > 1)
        if tied.size and rule == "dmodk":
            pick = pick.copy()
            routes, tied_at, n = active[tied], at[tied], n_tied[tied]
            unset = routes[port[routes] < 0]
            below = np.where(leaf_link[unset] >= 0, leaf_link[unset], last_link[unset])
            port[unset] = np.where(below >= 0, a.link_port[below], 0)
            choice = (port[routes] // radix[routes]) % n
            radix[routes] *= n
            pick[tied] = found.natural[found.start[tied_at] + choice]
        elif tied.size and rule == "ecmp":
            pick = pick.copy()
            for i in tied.tolist():
                key = f"{seed}/{src_node}/{dst_nodes[int(active[i])]}"
                pick[i] += hash_index(key, a.names[int(at[i])], int(n_tied[i]))
        link = found.pred_link[pick]
        links[offsets[active] + hops[active] - 1 - step] = link
        tail = found.pred_node[pick]
        first_switch = (leaf_link[active] < 0) & a.is_switch[tail]
        leaf_link[active[first_switch]] = link[first_switch]
        last_link[active] = link
        node[active] = tail
        step += 1
        active = active[hops[active] > step]
    return links, offsets


def _ranges(first: IntArray, last: IntArray) -> IntArray:
    """The integers of the ranges ``first[i]..last[i] - 1``, one range after another."""
    lengths = last - first
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    shift: IntArray = np.repeat(first - np.r_[0, np.cumsum(lengths)[:-1]], lengths)
    return np.arange(total, dtype=np.int64) + shift


def _ranks(names: list[str], key: object) -> IntArray:
    """Each name's dense rank in sorted order (by ``key``, if given): equal keys share it."""
    keys = names if key is None else [key(name) for name in names]  # type: ignore[operator]
    order = sorted(range(len(names)), key=keys.__getitem__)
    rank = np.zeros(len(names), dtype=np.int64)
    current = -1
    previous: object = None
    for position, i in enumerate(order):
        if position == 0 or keys[i] != previous:
            current += 1
            previous = keys[i]
        rank[i] = current
    return rank
