"""What the analytical models read off a topology: ranks on GPUs, routes, and link loads.

Private to :mod:`simcoll.models`. A *pattern* is a set of (source, destination) node
pairs that communicate at the same time, each carrying the same bytes. Its cost is an
alpha (the largest route latency among the pairs) and a per-pair bandwidth: the pace of
the most loaded link, ``min over links of bandwidth / (pairs routed over it)``, each pair
counted as ``1 / efficiency`` (its wire bytes per byte of data)
(DESIGN.md: a ring "runs at the pace of its most loaded link"). That is exactly what the
flow model gives when the pairs start together and are symmetric, and an estimate
otherwise.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.core.protocols import Protocol
from simcoll.plan.placement import nearest_switches
from simcoll.topology import NodeKind, Router
from simcoll.topology.routing import Route, route_latency_s

__all__ = [
    "Network",
    "PatternCost",
    "fabric_switches",
    "hosts_of",
    "reducing_switch",
]

#: Two nodes that communicate, then the nodes their route must pass in order (a plan's
#: NICs and PXN proxy: :meth:`simcoll.plan.channels.Plan.waypoints`), if any.
NodePair = tuple[str, ...]


def hosts_of(topology: nx.DiGraph[str], nodes: Sequence[str]) -> list[list[int]]:
    """Ranks grouped by the ``host`` of their GPU, hosts in order of their lowest rank.

    GPUs without a ``host`` count as one host together (a bare switch or ring builder).
    """
    groups: dict[object, list[int]] = {}
    for rank, node in enumerate(nodes):
        groups.setdefault(topology.nodes[node].get("host"), []).append(rank)
    return list(groups.values())


def reducing_switch(topology: nx.DiGraph[str], nodes: Sequence[str], algorithm: str) -> str:
    """The switch an in-network reduction runs on (the engine's rule for NVLS endpoints).

    A switch qualifies when its ``reduces`` attribute is true and it has a link to and
    from every rank's GPU; the first by node id is taken.

    Raises
    ------
    ConfigError
        If no switch qualifies.
    """
    # Only a neighbour of the first GPU can be linked to every GPU.
    for node in sorted(topology.successors(nodes[0])) if nodes else ():
        if topology.nodes[node].get("reduces") is True and all(
            topology.has_edge(gpu, node) and topology.has_edge(node, gpu) for gpu in nodes
        ):
            return str(node)
    name = topology.graph.get("source") or topology.graph.get("name", "topology")
    raise ConfigError(
        f"{algorithm} needs a switch that reduces in the network (reduces = true, e.g. an "
        f"NVSwitch with NVLink SHARP such as dgx-h100's) linked to all {len(nodes)} GPUs; "
        f"{name} has none"
    )


def fabric_switches(
    topology: nx.DiGraph[str],
    nodes: Sequence[str],
    groups: Sequence[Sequence[int]],
    algorithm: str,
    router: Router | None = None,
    *,
    share: bool = False,
) -> list[str]:
    """The reducing fabric switch of each group of ranks (the engine's rule for SHARP).

    The engine's rule, :func:`simcoll.plan.placement.nearest_switches`; each switch
    serves one group unless ``share`` (CollNet's trees).

    Raises
    ------
    ConfigError
        If a group finds no such switch.
    """
    chosen = nearest_switches(topology, nodes, groups, share=share, router=router)
    if len(chosen) < len(groups):
        name = topology.graph.get("source") or topology.graph.get("name", "topology")
        raise ConfigError(
            f"{algorithm} needs a switch that reduces in the network (reduces = true, "
            f"e.g. sharp = true in a fat-tree file) reachable from all {len(nodes)} GPUs; "
            f"{name} has none"
        )
    return chosen


@dataclass(frozen=True)
class PatternCost:
    """Alpha-beta parameters of a communication pattern (pairs that move data at once).

    Attributes
    ----------
    alpha_s
        The largest latency of the pairs' routes (plus the protocol's step latency).
    bandwidth_bytes_per_s
        Bandwidth one pair gets: the smallest ``bandwidth / load`` over the links the
        pattern uses, where ``load`` is how many of its pairs a link carries (1 for every
        link without contention), times the protocol's efficiency.
    k_max
        The largest number of the pattern's pairs routed over one link.
    busiest_link
        The link that sets ``bandwidth_bytes_per_s`` (None for an empty pattern).
    """

    alpha_s: float
    bandwidth_bytes_per_s: float
    k_max: int
    busiest_link: tuple[str, str] | None


EMPTY = PatternCost(alpha_s=0.0, bandwidth_bytes_per_s=math.inf, k_max=0, busiest_link=None)


class Network:
    """Routes and pattern costs on one topology, with an optional protocol cost.

    Parameters
    ----------
    topology
        A validated topology.
    protocol
        An NCCL protocol (:mod:`simcoll.core.protocols`): every route pays its step latency and
        bandwidth is scaled by its efficiency, as :func:`simcoll.sim.engine.simulate` does.
    contention
        True (the flow model): pairs routed over one link share it. False (the ``ideal``
        model): every pair gets its route's bottleneck bandwidth.
    router
        A router of ``topology`` to reuse (it caches routes); a new one by default.
    """

    def __init__(
        self,
        topology: nx.DiGraph[str],
        *,
        protocol: Protocol | None,
        contention: bool,
        router: Router | None = None,
    ) -> None:
        if router is not None and router.graph is not topology:
            raise ConfigError("router routes another topology than the one given")
        self.topology = topology
        self.router = router if router is not None else Router(topology)
        self.protocol = protocol
        self.contention = contention
        self._via: dict[NodePair, Route] = {}

    def route(self, pair: NodePair) -> Route:
        """The route of one pair, through its waypoints if it names any (cached)."""
        if len(pair) == 2:
            return self.router.route(*pair)
        found = self._via.get(pair)
        if found is None:
            found = self._via[pair] = tuple(
                link for a, b in itertools.pairwise(pair[:1] + pair[2:] + pair[1:2])
                for link in self.router.route(a, b)
            )  # fmt: skip
        return found

    def latency_s(self, pair: NodePair) -> float:
        """Route latency of one pair, plus the protocol's step latency."""
        edges = self.route(pair)
        latency = route_latency_s(self.topology, edges)
        if self.protocol is not None:
            kinds = [self.topology.edges[e]["kind"].value for e in edges]
            latency += self.protocol.latency_s(kinds, self._endpoint(pair))
        return latency

    def _endpoint(self, pair: NodePair) -> str | None:
        """``"nvls"`` or ``"collnet"`` for a pair with an in-network switch, as the engine."""
        for node in pair[:2]:
            kind = self.topology.nodes[node]["kind"]
            if kind is not NodeKind.GPU:
                return "nvls" if kind is NodeKind.NVSWITCH else "collnet"
        return None

    def efficiency(self, pair: NodePair) -> float:
        """The data fraction of the wire for one pair, as the engine's
        (:func:`simcoll.sim.routes.pair_efficiency`): the protocol's and calibration's
        for the route's class, times an in-network switch's own."""
        if self.protocol is None:
            return 1.0
        kinds = [self.topology.edges[e]["kind"].value for e in self.route(pair)]
        return self.protocol.efficiency_of(kinds, self._endpoint(pair))

    def load(self, pairs: Iterable[NodePair]) -> Counter[tuple[str, str]]:
        """How many of ``pairs`` each link carries."""
        load: Counter[tuple[str, str]] = Counter()
        for pair, times in Counter(pairs).items():  # each distinct pair routed once
            for link in self.route(pair):
                load[link] += times
        return load

    def wire_load(self, pairs: Iterable[NodePair]) -> dict[tuple[str, str], float]:
        """What each link carries per byte of data that each of ``pairs`` moves: the sum
        of ``1 / efficiency`` over the pairs routed over it (a pair's wire bytes are its
        bytes over its efficiency, :meth:`efficiency`)."""
        wire: dict[tuple[str, str], float] = {}
        for pair, times in Counter(pairs).items():
            per_byte = times / self.efficiency(pair)
            for link in self.route(pair):
                wire[link] = wire.get(link, 0.0) + per_byte
        return wire

    def pace(self, pair: NodePair, wire: dict[tuple[str, str], float]) -> float:
        """The data rate of ``pair`` when every pair of a link moves data at one rate and
        ``wire`` (:meth:`wire_load`) counts what they put on each: ``min over its links of
        bandwidth / wire``; a pair of no link is not limited (``inf``)."""
        edges = self.topology.edges
        return min((float(edges[link]["bandwidth_bytes_per_s"]) / wire[link]
                    for link in self.route(pair)), default=math.inf)  # fmt: skip

    def cost(
        self,
        pairs: Iterable[NodePair],
        *,
        share: bool = True,
        load: Counter[tuple[str, str]] | None = None,
        wire: dict[tuple[str, str], float] | None = None,
    ) -> PatternCost:
        """Alpha, per-pair bandwidth and k_max of pairs that communicate at once.

        ``load`` counts the pairs on each link, and ``wire`` their wire bytes per byte of
        data (:meth:`wire_load`), when more pairs than these run at the same time (the
        other hops of a pipelined chain); by default they are these pairs' own. Under
        contention every pair moves data at the pace of the link whose wire bytes take
        longest, ``min over links of bandwidth / wire``: a link's pairs each put their
        bytes over their own efficiency on it. ``share=False`` ignores sharing even under
        contention (for textbook formulas that already count a rank's several transfers
        themselves): the slowest link's bandwidth times the least efficiency.
        """
        pairs = list(pairs)
        if not pairs:
            return EMPTY
        if load is None:
            load = self.load(pairs)
        if wire is None and share and self.contention:
            wire = self.wire_load(pairs)
        pairs = list(dict.fromkeys(pairs))  # a pair repeated costs as once from here on
        links = {link for pair in pairs for link in self.route(pair)}
        alpha_s = max(self.latency_s(pair) for pair in pairs)
        if not links:  # every pair is a node to itself: nothing limits it
            return PatternCost(alpha_s, math.inf, 0, None)
        edges = self.topology.edges
        shared = share and self.contention

        def pace(link: tuple[str, str]) -> tuple[float, int, tuple[str, str]]:
            per_byte = wire[link] if wire is not None and shared else 1.0
            return float(edges[link]["bandwidth_bytes_per_s"]) / per_byte, -load[link], link

        bandwidth, _, busiest = min(pace(link) for link in links)
        if not shared:
            bandwidth *= min(self.efficiency(pair) for pair in pairs)
        return PatternCost(
            alpha_s=alpha_s,
            bandwidth_bytes_per_s=bandwidth,
            k_max=max(load[link] for link in links),
            busiest_link=busiest,
        )
