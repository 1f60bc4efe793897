"""Placement: which GPU node each rank runs on, which switch serves each in-network
endpoint, and how ranks group into servers and under reducing switches."""

from __future__ import annotations

import itertools
import math

import networkx as nx

from simcoll.core.errors import (
    ConfigError,
    TopologyError,
)
from simcoll.core.schedule import Schedule
from simcoll.topology import NodeKind, Router, gpu_nodes

__all__ = [
    "gpus_per_host",
    "map_ranks",
    "ranks_per_reducing_switch",
    "switch_endpoints",
]


def map_ranks(topology: nx.DiGraph[str], n_ranks: int) -> tuple[str, ...]:
    """GPU node of each rank: ranks 0..n_ranks-1 go to the GPUs with those ``rank`` ids.

    >>> from simcoll.topology import switch_star
    >>> map_ranks(switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0), 2)
    ('gpu0', 'gpu1')

    Raises
    ------
    ConfigError
        If ``n_ranks`` is below 1 or the topology has fewer GPUs than ``n_ranks``.
    """
    if isinstance(n_ranks, bool) or not isinstance(n_ranks, int) or n_ranks < 1:
        raise ConfigError(f"n_ranks must be an integer >= 1, got {n_ranks!r}")
    nodes = gpu_nodes(topology)
    if n_ranks > len(nodes):
        name = topology.graph.get("source") or topology.graph.get("name", "topology")
        raise ConfigError(f"{name} has {len(nodes)} GPUs, fewer than the {n_ranks} ranks asked for")
    return tuple(nodes[:n_ranks])


def ranks_per_reducing_switch(topology: nx.DiGraph[str], n_ranks: int) -> int:
    """Ranks per nearest in-network-reducing fabric switch, when they group evenly.

    Each rank's GPU has a nearest fabric switch (kind ``switch``) with ``reduces`` true
    (fewest hops, then smallest id); when those switches split the ranks into equal runs
    of consecutive ranks, that run length is returned (the first level of a SHARP tree),
    else 0.
    """
    switches = sorted(
        node
        for node, attrs in topology.nodes.items()
        if attrs["kind"] is NodeKind.SWITCH and attrs.get("reduces") is True
    )
    if not switches:
        return 0
    router = Router(topology)
    nearest = []
    for gpu in gpu_nodes(topology)[:n_ranks]:
        hops = []
        for switch in switches:
            try:
                hops.append((len(router.route(gpu, switch)), switch))
            except TopologyError:
                continue
        if not hops:
            return 0
        nearest.append(min(hops)[1])
    runs = [len(list(run)) for _, run in itertools.groupby(nearest)]
    if len(runs) != len(set(nearest)) or len(set(runs)) != 1:
        return 0
    return runs[0]


def gpus_per_host(topology: nx.DiGraph[str], n_ranks: int) -> int:
    """GPUs per server among the first ``n_ranks`` GPUs, from their ``host`` attribute.

    Ranks without a host count as one server; unequal servers give the largest count
    that divides them all (so hierarchical groups never straddle two servers).

    >>> from simcoll.topology import switch_star
    >>> gpus_per_host(switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0), 4)
    4
    """
    hosts: dict[object, int] = {}
    for node in gpu_nodes(topology)[:n_ranks]:
        host = topology.nodes[node].get("host")
        hosts[host] = hosts.get(host, 0) + 1
    return math.gcd(*hosts.values())


def switch_endpoints(
    topology: nx.DiGraph[str], rank_nodes: tuple[str, ...], schedule: Schedule
) -> tuple[str, ...]:
    """The switches that serve a schedule's in-network endpoints.

    Only switches whose ``reduces`` attribute is true qualify. Without
    ``schedule.params["switch_groups"]`` (NVLS) an endpoint needs a switch with a link to
    and from every rank's GPU (the NVSwitch of the node). With it (SHARP), endpoint j goes
    to the qualifying fabric switch (kind ``switch``) nearest to the GPUs of group j: the
    fewest hops to the farthest of them, then to all of them, then the smallest id; each
    switch serves one endpoint.

    Raises
    ------
    ConfigError
        If an endpoint finds no qualifying switch; the message says what is needed.
    """
    if schedule.n_switches == 0:
        return ()
    groups = schedule.params.get("switch_groups")
    reducing = sorted(
        node for node in topology.nodes if topology.nodes[node].get("reduces") is True
    )
    if groups is None:
        chosen = [
            node
            for node in reducing
            if all(topology.has_edge(g, node) and topology.has_edge(node, g) for g in rank_nodes)
        ][: schedule.n_switches]
        what = "an NVSwitch with NVLink SHARP such as dgx-h100's) linked to all"
    else:
        fabric = [n for n in reducing if topology.nodes[n]["kind"] is NodeKind.SWITCH]
        chosen = _nearest_switches(topology, rank_nodes, groups, fabric)
        what = "sharp = true in a fat-tree file) reachable from all"
    if len(chosen) < schedule.n_switches:
        name = topology.graph.get("source") or topology.graph.get("name", "topology")
        raise ConfigError(
            f"{schedule.algorithm} needs a switch that reduces in the network (reduces = "
            f"true, e.g. {what} {len(rank_nodes)} GPUs; {name} has none"
        )
    return tuple(chosen)


def _nearest_switches(
    topology: nx.DiGraph[str],
    rank_nodes: tuple[str, ...],
    groups: tuple[tuple[int, ...], ...],
    candidates: list[str],
) -> list[str]:
    router = Router(topology)
    chosen: list[str] = []
    for group in groups:
        best: tuple[int, int, str] | None = None
        for switch in candidates:
            if switch in chosen:
                continue
            try:
                hops = [len(router.route(rank_nodes[r], switch)) for r in group]
                hops += [len(router.route(switch, rank_nodes[r])) for r in group]
            except TopologyError:
                continue
            key = (max(hops), sum(hops), switch)
            best = key if best is None or key < best else best
        if best is None:
            break
        chosen.append(best[2])
    return chosen
