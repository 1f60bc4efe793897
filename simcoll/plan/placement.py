"""Placement: which GPU node each rank runs on, which switch serves each in-network
endpoint, and how ranks group into servers and under reducing switches."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from pathlib import Path

import networkx as nx
import numpy as np

from simcoll.core.errors import ConfigError, TopologyError
from simcoll.core.files import read_input_text
from simcoll.core.schedule import Schedule
from simcoll.topology import NodeKind, Router, gpu_nodes

__all__ = [
    "PLACEMENTS",
    "gpus_per_host",
    "map_ranks",
    "nvls_tree_servers",
    "per_server_ranks",
    "place_ranks",
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


def gpus_per_host(
    topology: nx.DiGraph[str], n_ranks: int, rank_nodes: Sequence[str] | None = None
) -> int:
    """GPUs per server among the ranks' GPUs (``rank_nodes``, else the first ``n_ranks``
    GPUs), from their ``host`` attribute.

    Ranks without a host count as one server; unequal servers give the largest count
    that divides them all (so hierarchical groups never straddle two servers).

    >>> from simcoll.topology import switch_star
    >>> gpus_per_host(switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0), 4)
    4
    """
    hosts: dict[object, int] = {}
    for node in gpu_nodes(topology)[:n_ranks] if rank_nodes is None else rank_nodes:
        host = topology.nodes[node].get("host")
        hosts[host] = hosts.get(host, 0) + 1
    return math.gcd(*hosts.values())


#: The placements :func:`place_ranks` takes besides a file: ``linear`` (rank r on the GPU
#: whose ``rank`` is r), ``random`` or ``random:SEED`` (a seeded random choice of GPUs) and
#: ``per-server:K`` (K ranks on each server, on its first K GPUs, as ``mpirun -N K``).
PLACEMENTS = ("linear", "random", "random:SEED", "per-server:K")
_RANDOM = re.compile(r"^random(?::(?P<seed>-?\d+))?$")
_PER_SERVER = re.compile(r"^per-server:(?P<k>-?\d+)$")
#: Placement files are small; a bigger file is refused before it is read.
MAX_PLACEMENT_FILE_BYTES = 4 * 2**20


def place_ranks(
    topology: nx.DiGraph[str], n_ranks: int, placement: str = "linear"
) -> tuple[str, ...]:
    """GPU node of each rank, by ``placement``.

    ``linear``: rank r on the GPU whose ``rank`` attribute is r (:func:`map_ranks`).
    ``random`` or ``random:SEED``: ``n_ranks`` GPUs drawn without replacement, in random
    order, by numpy's ``default_rng(SEED)`` (SEED 0 by default), as a scheduler that does
    not care where a job lands would. ``per-server:K``: K ranks on each server in turn (its
    GPUs of the K lowest ranks), as ``mpirun -N K`` starts a job smaller than its servers
    (:func:`per_server_ranks` ranks at most). Anything else is a file: one GPU per line for
    ranks 0, 1, ..., each a GPU node id (``gpu12``) or the GPU's ``rank`` number; ``#``
    starts a comment. Its first ``n_ranks`` GPUs are used.

    >>> from simcoll.topology import switch_star
    >>> star = switch_star(8, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    >>> place_ranks(star, 3), place_ranks(star, 3, "random:1")
    (('gpu0', 'gpu1', 'gpu2'), ('gpu5', 'gpu0', 'gpu1'))
    >>> from simcoll.topology import load
    >>> two = load("topologies/h100-ib-fat-tree.toml", {"n_nodes": "2"})  # 8 GPUs a server
    >>> place_ranks(two, 4, "per-server:2")
    ('gpu0', 'gpu1', 'gpu8', 'gpu9')

    Raises
    ------
    ConfigError
        On too few GPUs, or a placement file that is missing, not a regular file, too
        big, names an unknown GPU, names one twice or holds fewer than ``n_ranks``; the
        message names the file and line.
    """
    nodes = map_ranks(topology, n_ranks)  # checks n_ranks against the GPUs
    if placement == "linear":
        return nodes
    per_server = _PER_SERVER.match(placement)
    if per_server is not None:
        servers = _per_server(topology, int(per_server["k"]))
        if n_ranks > len(servers):
            raise ConfigError(f"{placement} holds {len(servers)} ranks on these servers, fewer "
                              f"than the {n_ranks} asked for", field="--placement")  # fmt: skip
        return servers[:n_ranks]
    match = _RANDOM.match(placement)
    gpus = gpu_nodes(topology)
    if match is not None:
        seed = int(match["seed"] or 0)
        if seed < 0:
            raise ConfigError(f"the seed must be >= 0, got {seed}", field="--placement")
        chosen = np.random.default_rng(seed).permutation(len(gpus))[:n_ranks]
        return tuple(gpus[int(i)] for i in chosen)
    return _placement_file(Path(placement), gpus, n_ranks)


def per_server_ranks(topology: nx.DiGraph[str], placement: str) -> int | None:
    """How many ranks ``per-server:K`` holds on ``topology`` (K on every server), or None
    for another placement: the ranks a call has where none are asked for.

    Raises
    ------
    ConfigError
        On K below 1 or above a server's GPUs.
    """
    found = _PER_SERVER.match(placement)
    return None if found is None else len(_per_server(topology, int(found["k"])))


def _per_server(topology: nx.DiGraph[str], per_server: int) -> tuple[str, ...]:
    """The first ``per_server`` GPUs (by rank) of every server (``host``), servers in
    the order of their first GPU."""
    servers: dict[object, list[str]] = {}
    for gpu in map_ranks(topology, len(gpu_nodes(topology))):
        servers.setdefault(topology.nodes[gpu].get("host"), []).append(gpu)
    smallest = min(len(gpus) for gpus in servers.values())
    if not 1 <= per_server <= smallest:
        raise ConfigError(f"per-server:{per_server}: K must be 1 to {smallest}, the GPUs of "
                          "the smallest server", field="--placement")  # fmt: skip
    return tuple(gpu for gpus in servers.values() for gpu in gpus[:per_server])


def _placement_file(path: Path, gpus: list[str], n_ranks: int) -> tuple[str, ...]:
    source = str(path)
    missing = "no such file (a placement is linear, random, random:SEED or a file of GPUs)"
    text = read_input_text(path, missing=missing, max_bytes=MAX_PLACEMENT_FILE_BYTES)
    lines = text.splitlines()
    known = set(gpus)
    chosen: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        gpu = gpus[int(text)] if text.isdigit() and int(text) < len(gpus) else text
        where = f"line {number}"
        if gpu not in known:
            raise ConfigError(f"no GPU {text!r} in the topology", source=source, field=where)
        if gpu in seen:
            raise ConfigError(
                f"GPU {gpu!r} is placed twice (also line {seen[gpu]})", source=source, field=where
            )
        seen[gpu] = number
        chosen.append(gpu)
    if len(chosen) != n_ranks:  # every line is a rank: a longer file is not cut short
        what = "fewer" if len(chosen) < n_ranks else "more"
        raise ConfigError(f"places {len(chosen)} ranks, {what} than the {n_ranks} asked for",
                          source=source)  # fmt: skip
    return tuple(chosen)


def nvls_tree_servers(
    topology: nx.DiGraph[str], rank_nodes: tuple[str, ...], router: Router | None = None
) -> bool:
    """Whether NVLS-tree can run on these ranks: two servers or more (GPUs' ``host``),
    each holding an equal run of two or more consecutive ranks (NCCL turns NVLS off with
    one GPU per server), each with a switch that reduces
    (``reduces`` true) linked to and from all of its GPUs, and local rank k of the first
    server with a route to and from local rank k of every other (a head whose NIC is
    down has none).

    >>> from simcoll.topology import switch_star
    >>> star = switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    >>> nvls_tree_servers(star, ("gpu0", "gpu1"))  # one server, and no switch that reduces
    False
    """
    hosts = [topology.nodes[gpu].get("host") for gpu in rank_nodes]
    runs = [len(list(run)) for _, run in itertools.groupby(hosts)]
    if len(runs) < 2 or len(set(runs)) != 1 or len(runs) != len(set(hosts)) or runs[0] < 2:
        return False
    g = runs[0]
    servers = [rank_nodes[i : i + g] for i in range(0, len(rank_nodes), g)]
    if not all(_has_reducing_switch(topology, server) for server in servers):
        return False
    router = router if router is not None else Router(topology)
    # Routes from each head of the first server to its peers, found together; back, where
    # some link has no twin the other way (else a route back is the route there, reversed).
    one_way = any(not topology.has_edge(v, u) for u, v in topology.edges)
    try:
        for local, head in enumerate(servers[0]):
            peers = [server[local] for server in servers[1:]]
            router.routes_from(head, peers, pxn=False)  # a head sends by its own NIC
            if one_way:
                for peer in peers:
                    router.route(peer, head, pxn=False)
    except TopologyError:
        return False
    return True


def _reducing_neighbours(topology: nx.DiGraph[str], gpu: str) -> list[str]:
    """The switches that reduce (``reduces`` true) linked from ``gpu``, by id: only those
    can be linked to a group of GPUs that holds it (a 131,072-GPU design has 16,384
    reducing NVSwitches; scanning them all per server took minutes)."""
    return sorted(n for n in topology.successors(gpu) if topology.nodes[n].get("reduces") is True)


def _has_reducing_switch(topology: nx.DiGraph[str], gpus: Sequence[str]) -> bool:
    """Whether a switch that reduces (``reduces`` true) is linked to and from every one
    of ``gpus`` (only a neighbour of the first can be)."""
    return any(
        topology.nodes[r].get("reduces") is True
        and all(topology.has_edge(gpu, r) and topology.has_edge(r, gpu) for gpu in gpus)
        for r in topology.successors(gpus[0])
    )


def switch_endpoints(
    topology: nx.DiGraph[str], rank_nodes: tuple[str, ...], schedule: Schedule
) -> tuple[str, ...]:
    """The switches that serve a schedule's in-network endpoints.

    Only switches whose ``reduces`` attribute is true qualify. Without
    ``schedule.params["switch_groups"]`` (NVLS) an endpoint needs a switch with a link to
    and from every rank's GPU (the NVSwitch of the node). With it and
    ``params["switch_scope"] == "server"`` (NVLS-tree), endpoint j needs a switch linked
    to and from every GPU of group j (that server's NVSwitch). With groups alone (SHARP),
    endpoint j goes to the qualifying fabric switch (kind ``switch``) nearest to the GPUs
    of group j: the fewest hops to the farthest of them, then to all of them, then the
    smallest id; each switch serves one endpoint, unless ``params["switch_share"]``
    (CollNet's SHARP trees, one per head index, share the fabric's switches).

    Raises
    ------
    ConfigError
        If an endpoint finds no qualifying switch; the message says what is needed.
    """
    if schedule.n_switches == 0:
        return ()
    groups = schedule.params.get("switch_groups")
    if groups is None:
        chosen = [
            node
            for node in _reducing_neighbours(topology, rank_nodes[0])
            if all(topology.has_edge(g, node) and topology.has_edge(node, g) for g in rank_nodes)
        ][: schedule.n_switches]
        what = "an NVSwitch with NVLink SHARP such as dgx-h100's) linked to all"
    elif schedule.params.get("switch_scope") == "server":
        chosen = []
        for group in groups:
            gpus = [rank_nodes[r] for r in group]
            linked = [
                node
                for node in _reducing_neighbours(topology, gpus[0])
                if node not in chosen
                and all(topology.has_edge(g, node) and topology.has_edge(node, g) for g in gpus)
            ]
            if not linked:
                break
            chosen.append(linked[0])
        what = ("an NVSwitch with NVLink SHARP, as in h100-ib-fat-tree's servers) linked to "
                "the GPUs of each server of")  # fmt: skip
    else:
        chosen = nearest_switches(topology, rank_nodes, groups,
                                  share=bool(schedule.params.get("switch_share")))  # fmt: skip
        what = "sharp = true in a fat-tree file) reachable from all"
    if len(chosen) < schedule.n_switches:
        name = topology.graph.get("source") or topology.graph.get("name", "topology")
        raise ConfigError(
            f"{schedule.algorithm} needs a switch that reduces in the network (reduces = "
            f"true, e.g. {what} {len(rank_nodes)} GPUs; {name} has none"
        )
    return tuple(chosen)


def nearest_switches(
    topology: nx.DiGraph[str],
    rank_nodes: Sequence[str],
    groups: Sequence[Sequence[int]],
    *,
    share: bool = False,
    router: Router | None = None,
) -> list[str]:
    """The fabric switch that reduces (kind ``switch``, ``reduces`` true) nearest to each
    group of ranks, in order: the fewest hops to the farthest of its GPUs (both ways),
    then to all of them, then the least used so far (shared: trees spread over the
    spines), then the smallest id. Each switch serves one group unless ``share``. The
    list stops at the first group no such switch reaches (the caller says why).

    One rule for the engine's endpoints (:func:`switch_endpoints`) and the closed forms
    (:func:`simcoll.models._net.fabric_switches`).
    """
    router = router if router is not None else Router(topology)
    candidates = sorted(
        n
        for n, attrs in topology.nodes.items()
        if attrs.get("reduces") is True and attrs["kind"] is NodeKind.SWITCH
    )
    chosen: list[str] = []
    for group in groups:
        best: tuple[int, int, int, str] | None = None
        for switch in candidates:
            if switch in chosen and not share:
                continue
            try:
                hops = [len(router.route(rank_nodes[r], switch)) for r in group]
                hops += [len(router.route(switch, rank_nodes[r])) for r in group]
            except TopologyError:
                continue
            key = (max(hops), sum(hops), chosen.count(switch), switch)
            best = key if best is None or key < best else best
        if best is None:
            break
        chosen.append(best[3])
    return chosen
