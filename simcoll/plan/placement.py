"""Placement: which GPU node each rank of a collective runs on."""

from __future__ import annotations

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.topology import gpu_nodes

__all__ = ["map_ranks"]


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
