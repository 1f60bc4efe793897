"""Routes as the fabric sees them: each transfer's pair, the links it crosses, its route and
protocol latency, and the wire's data fraction."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import networkx as nx
import numpy as np
import numpy.typing as npt

from simcoll.core.errors import ConfigError, SimulationError, TopologyError
from simcoll.core.protocols import Protocol
from simcoll.core.schedule import Schedule
from simcoll.topology import NodeKind, Router
from simcoll.topology.routing import Route

__all__ = [
    "EdgeFacts",
    "LinkArrays",
    "LinkTable",
    "Routes",
    "batch_costs",
    "bytes_per_link",
    "edge_facts",
    "link_table",
    "pair_efficiency",
    "pair_endpoint",
    "pair_latency_s",
    "route_pair",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False, kw_only=True)
class Routes:
    """Where each transfer's bytes go, as the fabric sees it.

    On the general path fabric links are the topology's directed edges and every weight
    is 1; on the symmetric path (:mod:`simcoll.sim.symmetry`) they are classes of identical
    links, and a weight is how many copies of the flow load each link of the class.
    """

    pair_of: IntArray  # per transfer: index of its (src, dst) pair
    pair_links: list[IntArray]  # per pair: fabric links crossed
    pair_weights: list[FloatArray | None]  # per pair: weight per link, None for all 1
    latency_s: FloatArray  # per pair: route (and protocol) latency
    capacity_bytes_per_s: FloatArray  # per fabric link
    # per pair: data fraction of the wire, where a calibrated protocol sets it per class
    efficiency: FloatArray | None = None


def bytes_per_link(
    pair_of: IntArray,
    wire_bytes: FloatArray,
    pair_links: list[IntArray],
    pair_weights: list[FloatArray | None],
    n_links: int,
) -> FloatArray:
    """Wire bytes over each fabric link: every transfer's bytes on each link of its pair,
    times the link's weight.

    >>> bytes_per_link(np.array([0, 1, 1]), np.array([3.0, 1.0, 2.0]),
    ...                [np.array([0]), np.array([0, 1])], [None, np.array([1.0, 2.0])],
    ...                2).tolist()
    [6.0, 6.0]
    """
    per_pair = np.bincount(pair_of, weights=wire_bytes, minlength=len(pair_links))
    total = np.zeros(n_links)
    for links, weights, moved in zip(pair_links, pair_weights, per_pair.tolist(), strict=True):
        total[links] += moved if weights is None else moved * weights
    return total


def route_pair(
    router: Router, nodes: tuple[str, ...], src: int, dst: int, via: tuple[str, ...] = ()
) -> Route:
    """The route of rank (or endpoint) ``src`` to ``dst``, through the nodes ``via`` in
    order (a plan's NICs and PXN proxy); no route is a SimulationError.

    >>> from simcoll.topology.builders import switch_star
    >>> star = switch_star(3, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    >>> route_pair(Router(star), ("gpu0", "gpu1"), 0, 1)
    (('gpu0', 'sw'), ('sw', 'gpu1'))
    """
    try:
        if not via:
            return router.route(nodes[src], nodes[dst])
        stops = (nodes[src], *via, nodes[dst])
        found = router.route(stops[0], stops[1])
        for a, b in itertools.pairwise(stops[1:]):
            found += router.route(a, b)
        return found
    except TopologyError as error:
        through = f" via {', '.join(via)}" if via else ""
        raise SimulationError(
            f"rank {src} ({nodes[src]}) -> rank {dst} ({nodes[dst]}){through}: {error.message}"
        ) from None


#: Per directed link: its latency and its kind's name (what routes' costs read).
EdgeFacts = dict[tuple[str, str], tuple[float, str]]


def edge_facts(topology: nx.DiGraph[str]) -> EdgeFacts:
    """Every link's latency and kind, read once for the many routes that cross it.

    >>> from simcoll.topology.builders import switch_star
    >>> edge_facts(switch_star(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6))[
    ...     ("gpu0", "sw")]
    (1e-06, 'nvlink')
    """
    return {
        (u, v): (float(attrs["latency_s"]), attrs["kind"].value)
        for u, v, attrs in topology.edges(data=True)
    }


def pair_latency_s(  # noqa: PLR0917 - one pair's facts, all needed
    topology: nx.DiGraph[str],
    edges: Route,
    src: int,
    dst: int,
    schedule: Schedule,
    nodes: tuple[str, ...],
    protocol: Protocol | None,
    facts: EdgeFacts | None = None,
) -> float:
    """Route latency of one pair, plus the protocol's step latency if any.

    An in-network endpoint (NVLS, SHARP) pays that protocol's endpoint latency.
    ``facts`` (:func:`edge_facts`) saves reading the links from ``topology``.
    """
    if facts is None:
        facts = {e: (float(topology.edges[e]["latency_s"]), topology.edges[e]["kind"].value)
                 for e in edges}  # fmt: skip
    latency_s = sum(facts[e][0] for e in edges)
    if protocol is None:
        return float(latency_s)
    kinds = [facts[e][1] for e in edges]
    endpoint = pair_endpoint(topology, src, dst, schedule, nodes)
    if endpoint is None:
        return float(latency_s + protocol.latency_s(kinds))
    if endpoint not in protocol.step_latency_s:
        raise ConfigError(
            f"{schedule.algorithm} runs with the simple protocol only, not {protocol.name}"
        )
    return float(latency_s + protocol.latency_s(kinds, endpoint))


def pair_endpoint(
    topology: nx.DiGraph[str], src: int, dst: int, schedule: Schedule, nodes: tuple[str, ...]
) -> str | None:
    """``"nvls"`` (an NVSwitch) or ``"collnet"`` (a fabric switch) when one end of the
    pair is an in-network switch endpoint of ``schedule``, else None."""
    switch = max(src, dst)
    if switch < schedule.n_ranks:
        return None
    kind = topology.nodes[nodes[switch]]["kind"]
    return "nvls" if kind is NodeKind.NVSWITCH else "collnet"


def pair_efficiency(
    topology: nx.DiGraph[str],
    edges: Route,
    protocol: Protocol | None,
    facts: EdgeFacts | None = None,
    endpoint: str | None = None,
) -> float:
    """The data fraction of the wire for one pair's route (1 without a protocol), to or
    from an in-network switch of class ``endpoint`` (:func:`pair_endpoint`) if given."""
    if protocol is None:
        return 1.0
    if facts is not None:
        return protocol.efficiency_of((facts[e][1] for e in edges), endpoint)
    return protocol.efficiency_of((topology.edges[e]["kind"].value for e in edges), endpoint)


def batch_costs(
    links: IntArray,
    offsets: IntArray,
    topology_links: LinkArrays,
    protocol: Protocol | None,
) -> tuple[FloatArray, FloatArray]:
    """Per route of a batch (``links[offsets[i]:offsets[i + 1]]``, link ids as in
    ``topology_links``), its latency and data fraction: what :func:`pair_latency_s` and
    :func:`pair_efficiency` give for a pair of ranks, to the bit (the latencies are added
    link by link in route order, and the protocol's terms depend on the route's set of
    link kinds only).

    >>> from simcoll.topology.builders import switch_star
    >>> arrays = LinkArrays(switch_star(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6))
    >>> latency_s, efficiency = batch_costs(np.array([0, 3]), np.array([0, 2, 2]), arrays, None)
    >>> latency_s.tolist(), efficiency.tolist()
    ([2e-06, 0.0], [1.0, 1.0])
    """
    hops = np.diff(offsets)
    latency_s = np.zeros(len(hops))
    kinds = np.zeros(len(hops), dtype=np.int64)  # a bit per link kind crossed
    for position in range(int(hops.max(initial=0))):
        on = np.flatnonzero(hops > position)
        link = links[offsets[on] + position]
        latency_s[on] += topology_links.latency_s[link]
        kinds[on] |= topology_links.kind_bit[link]
    efficiency = np.ones(len(hops))
    if protocol is None:
        return latency_s, efficiency
    for bits in np.unique(kinds).tolist():
        names = [name for i, name in enumerate(topology_links.kind_names) if bits >> i & 1]
        these = kinds == bits
        latency_s[these] += protocol.latency_s(names)
        efficiency[these] = protocol.efficiency_of(names)
    return latency_s, efficiency


class LinkArrays:
    """Every directed link's latency and kind, in ``topology.edges`` order, for
    :func:`batch_costs`."""

    def __init__(self, topology: nx.DiGraph[str]) -> None:
        kinds = [attrs["kind"].value for _, _, attrs in topology.edges(data=True)]
        self.kind_names = sorted(set(kinds))
        bit = {name: 1 << i for i, name in enumerate(self.kind_names)}
        self.kind_bit = np.array([bit[name] for name in kinds], dtype=np.int64)
        self.latency_s = np.array(
            [float(attrs["latency_s"]) for _, _, attrs in topology.edges(data=True)],
            dtype=np.float64,
        )


@dataclass(frozen=True, eq=False)
class LinkTable:
    """What runs read of every link of one topology, read once: the links in
    ``topology.edges`` order, each one's index, capacity, latency and kind
    (:func:`edge_facts`) and the same as arrays (:class:`LinkArrays`)."""

    links: tuple[tuple[str, str], ...]
    index: dict[tuple[str, str], int]
    capacity_bytes_per_s: FloatArray
    facts: EdgeFacts
    arrays: LinkArrays

    @classmethod
    def of(cls, topology: nx.DiGraph[str]) -> LinkTable:
        """Read every link of ``topology``."""
        links = tuple(topology.edges)
        capacity = np.array([topology.edges[e]["bandwidth_bytes_per_s"] for e in links],
                            dtype=np.float64)  # fmt: skip
        capacity.flags.writeable = False  # shared by every run on the topology
        return cls(links, {edge: i for i, edge in enumerate(links)}, capacity,
                   edge_facts(topology), LinkArrays(topology))  # fmt: skip


def link_table(topology: nx.DiGraph[str], router: Router | None = None) -> LinkTable:
    """``topology``'s :class:`LinkTable`: read once per router of that topology (every
    call of a session shares one), else afresh.

    >>> from simcoll.topology.builders import switch_star
    >>> topo = switch_star(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    >>> router = Router(topo)
    >>> table = link_table(topo, router)
    >>> table.index[("gpu0", "sw")], table.capacity_bytes_per_s.tolist()
    (0, [1000000000.0, 1000000000.0, 1000000000.0, 1000000000.0])
    >>> link_table(topo, router) is table
    True
    """
    if router is None or router.graph is not topology:
        return LinkTable.of(topology)
    return router.memo("link_table", lambda: LinkTable.of(topology))
