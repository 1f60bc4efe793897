"""NCCL's graph search: the channels, rings, trees and NICs NCCL builds for a set of ranks.

This follows NCCL's rules (``src/graph/search.cc``, ``connect.cc``, ``paths.cc``,
``topo.cc`` and ``trees.cc``, read at 2.20.5 and 2.28.3; the notes behind each rule are in
the docstrings below), not an exhaustive search: where NCCL's search is a heuristic over
bandwidth targets, this is the same heuristic.

Servers are the ``host`` attributes of the GPUs; ranks are grouped by server, servers
ordered by their lowest rank (``connect.cc``: node index by first appearance). Inside a
server NCCL finds rings over its GPU fabric:

- **NVSwitch** (every GPU linked to one NVSwitch): any order is as good; NCCL keeps the
  GPU index order on every channel (``Channel 00/24 :    0   1   2   3   4   5   6   7`` on
  DGX A100 and H100 logs).
- **NVLink mesh** (GPUs linked to each other, as the DGX-1's hybrid cube mesh): rings that
  use NVLink only, found by NCCL's recursive search (:func:`nvlink_rings`), never a PCIe or
  CPU hop when NVLink rings exist.
- **PCIe** (no NVLink): one ring in PCI order, the GPU index order, which keeps the GPUs
  under one PCIe switch next to each other.

Across servers (``search.cc:ncclTopoSearchRecNet``), one search channel per NIC: channel
``c`` enters every server by the c-th NIC of the list of preferred NICs
(``topo.cc:ncclTopoGetLocalNet``) at the GPU closest to that NIC, walks down the GPU index,
and leaves from a GPU that reaches the same NIC: another GPU as close to it (DGX A100: the
GPU sharing the NIC's PCIe switch) or, through PXN, the next GPU, which writes over
NVLink into the entry GPU that posts the send (DGX H100; ``paths.cc``, PATH_PXN). So each
channel stays on one rail, and the channels spread evenly over the NICs.

Trees (``connect.cc``): per search channel, NCCL's double binary tree over the servers
(:func:`~simcoll.plan.trees.double_binary_tree`) joins the servers' heads, the GPU next to
the channel's NIC, and the other GPUs of a server hang below its head in a chain.

Channel counts (``search.cc:ncclTopoCompute``, ``ncclTopoDupChannels``,
``connect.cc:ncclTopoPostset``): the search channels at the highest per-channel speed NCCL's
speed table allows, doubled when that speed is 25 GB/s or more (not for H100-class NVLink
under 50 GB/s with more than 4 channels), then doubled again into compute channels, ring
``c + n`` copying ring ``c`` and tree ``c + n`` using the second tree. Logs confirm 24 on
one DGX A100 or H100 and 16 on 8-NIC multi-node DGX clusters; 12 on a DGX-1 V100 is what
the rules give (no public DGX-1 log shows it).

>>> from simcoll.topology import load
>>> plan = search_plan(load("topologies/h100-ib-fat-tree.toml", {"n_nodes": "2"}))
>>> plan.n_channels, plan.rings[1][:9]
(16, (1, 0, 7, 6, 5, 4, 3, 2, 9))
>>> plan.channels[1].net[2, 9]
NetHop(send_nic='node0.nic1', recv_nic='node1.nic1', proxy='gpu1')
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import networkx as nx

from simcoll.core.errors import ConfigError, TopologyError
from simcoll.plan.channels import Channel, NetHop, Plan
from simcoll.plan.placement import place_ranks
from simcoll.plan.trees import Tree, double_binary_tree
from simcoll.topology import LinkKind, NodeKind, Router, gpu_nodes
from simcoll.topology.tiebreak import natural_key

__all__ = ["MAX_SEARCH_CHANNELS", "nvlink_rings", "search_plan"]

#: NCCL searches rings with at most MAXCHANNELS / 2 channels (MAXCHANNELS = 32 up to
#: NCCL 2.22, ``init.cc``); duplication then doubles them, and compute channels double again.
MAX_SEARCH_CHANNELS = 16
#: NCCL's per-channel speed targets, GB/s, highest first (``search.cc``, 2.20.5): before
#: Hopper, and for Hopper (sm90) GPUs, inside a server.
SPEEDS_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEEDS_INTRA_SM90 = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
#: The same across servers, where a channel's speed is bounded by its NIC's.
SPEEDS_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0,
                3.0, 2.4, 1.2, 0.24, 0.12)  # fmt: skip
SPEEDS_INTER_SM90 = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
                     2.4, 1.2, 0.24, 0.12)  # fmt: skip
#: NCCL models a link below its wire rate (``topo.h``: 20 GB/s per NVLink2/3 link against
#: 25 on the wire, 20.6 for NVLink4; PCIe Gen3 x16 12 against 15.75): 0.8 of the wire.
NCCL_LINK_FRACTION = 0.8
#: A GPU with this much NVLink bandwidth per direction, or more, is Hopper-class for the
#: speed table (H100: 18 x 25 GB/s).
HOPPER_NVLINK_BYTES_PER_S = 450e9
#: NCCL lowers its speed target only while the next one is above this fraction of the best
#: found (``search.cc:ncclTopoCompute``).
SPEED_STEP_FRACTION = 0.49


@dataclass(frozen=True)
class _Server:
    """One server's ranks: GPU nodes in GPU index order, and their ranks."""

    name: str
    gpus: tuple[str, ...]
    ranks: tuple[int, ...]


def search_plan(
    topology: nx.DiGraph[str],
    rank_nodes: Sequence[str] | None = None,
    *,
    placement: str = "linear",
    router: Router | None = None,
) -> Plan:
    """The plan NCCL builds for ranks on ``rank_nodes`` (default: every GPU, linear).

    Without servers (GPUs with no ``host`` attribute: a bare ring, star or torus), the
    plan is one channel whose ring is the rank order: NCCL's rules are rules about servers.

    Raises
    ------
    ConfigError
        If two ranks share a GPU.
    """
    nodes = tuple(rank_nodes) if rank_nodes is not None else place_ranks(
        topology, len(gpu_nodes(topology)), placement
    )  # fmt: skip
    if len(set(nodes)) != len(nodes):
        raise ConfigError("two ranks are placed on one GPU")
    router = router or Router(topology)
    routing = str(topology.graph.get("routing", "ecmp"))
    servers = _servers(topology, nodes, router)
    if servers is None:
        ring = tuple(range(len(nodes)))
        return Plan(nodes, (Channel(ring, _chain_tree(ring)),), placement, routing, "rank order")
    if len(servers) == 1:
        channels = _one_server(topology, servers[0], router)
    else:
        channels = _many_servers(topology, servers, router)
    return Plan(nodes, channels, placement, routing)


def _servers(
    topology: nx.DiGraph[str], nodes: tuple[str, ...], router: Router
) -> list[_Server] | None:
    """Ranks grouped by server, servers by lowest rank; None if a GPU has no server."""
    index = router.memo("gpu_index",
                        lambda: {gpu: i for i, gpu in enumerate(gpu_nodes(topology))})  # fmt: skip
    by_host: dict[str, list[int]] = {}
    for rank, gpu in enumerate(nodes):
        host = topology.nodes[gpu].get("host")
        if host is None:
            return None
        by_host.setdefault(str(host), []).append(rank)
    servers = []
    for host, ranks in by_host.items():
        local = sorted(ranks, key=lambda r: index[nodes[r]])
        servers.append(_Server(host, tuple(nodes[r] for r in local), tuple(local)))
    return servers


# -- inside one server ------------------------------------------------------------------------


def _fabric(topology: nx.DiGraph[str], gpus: Sequence[str]) -> str:
    """``nvswitch``, ``nvlink`` (GPUs linked by NVLink) or ``pcie`` for one server."""
    if len(gpus) < 2:
        return "pcie"
    switches = [
        {s for s in topology.successors(g) if topology.nodes[s]["kind"] is NodeKind.NVSWITCH}
        for g in gpus
    ]
    if set.intersection(*switches):
        return "nvswitch"
    linked = set(gpus)
    if any(
        v in linked and attrs["kind"] is LinkKind.NVLINK
        for g in gpus
        for _, v, attrs in topology.out_edges(g, data=True)
    ):
        return "nvlink"
    return "pcie"


def _nvlink_bytes_per_s(topology: nx.DiGraph[str], gpu: str) -> float:
    """A GPU's NVLink bandwidth out, per direction, summed over its NVLink links."""
    return float(
        sum(
            attrs["bandwidth_bytes_per_s"]
            for _, _, attrs in topology.out_edges(gpu, data=True)
            if attrs["kind"] is LinkKind.NVLINK
        )
    )


def _speeds(topology: nx.DiGraph[str], gpu: str) -> tuple[float, ...]:
    """NCCL's speed table for this GPU's generation (Hopper-class by its NVLink)."""
    hopper = _nvlink_bytes_per_s(topology, gpu) >= HOPPER_NVLINK_BYTES_PER_S
    return SPEEDS_INTRA_SM90 if hopper else SPEEDS_INTRA


def _compute_channels(search: int, speed_gbps: float, *, hopper: bool) -> int:
    """Compute channels from search channels (``ncclTopoDupChannels``, then ``Postset``).

    >>> _compute_channels(6, 40.0, hopper=False), _compute_channels(6, 20.0, hopper=False)
    (24, 12)
    >>> _compute_channels(8, 24.0, hopper=True)
    16
    """
    duplicated = search
    if speed_gbps >= 25 and not (hopper and speed_gbps < 50 and search > 4):
        duplicated = min(2 * search, MAX_SEARCH_CHANNELS)
    return 2 * duplicated


def _one_server(topology: nx.DiGraph[str], server: _Server, router: Router) -> tuple[Channel, ...]:
    """Channels of a job inside one server: rings over its GPUs, chains as trees."""
    gpus, ranks = server.gpus, server.ranks
    fabric = _fabric(topology, gpus)
    hopper = _speeds(topology, gpus[0]) is SPEEDS_INTRA_SM90
    if fabric == "nvswitch" and len(gpus) > 1:
        total = NCCL_LINK_FRACTION * _nvlink_bytes_per_s(topology, gpus[0]) / 1e9
        speed = next((s for s in _speeds(topology, gpus[0]) if s <= total), total)
        search = max(1, min(MAX_SEARCH_CHANNELS, math.floor(total / speed + 1e-9)))
        orders = [tuple(range(len(gpus)))] * search
    elif fabric == "nvlink":
        speed, orders = nvlink_rings(topology, gpus)
        search = len(orders)
    else:
        speed, orders, search = 0.0, [tuple(range(len(gpus)))], 1
    n = _compute_channels(search, speed, hopper=hopper)
    rings = [tuple(ranks[i] for i in orders[c % search]) for c in range(n)]
    return tuple(Channel(ring, _chain_tree(ring)) for ring in rings)


def _chain_tree(ring: Sequence[int]) -> Tree:
    """The ring's order as a chain from its first rank: NCCL's tree inside one server."""
    n = len(ring)
    parent = [-1] * n
    children: list[tuple[int, ...]] = [()] * n
    for i in range(1, n):
        parent[ring[i]] = ring[i - 1]
        children[ring[i - 1]] = (ring[i],)
    return Tree(ring[0], tuple(parent), tuple(children))


def nvlink_rings(
    topology: nx.DiGraph[str], gpus: Sequence[str]
) -> tuple[float, list[tuple[int, ...]]]:
    """NCCL's ring search over direct NVLinks: the per-channel speed and the rings found.

    As ``search.cc:ncclTopoCompute``: try the speeds of NCCL's table from the highest the
    links allow; at each, add rings one at a time by a depth-first search from GPU 0 that
    tries the GPUs with the most NVLink bandwidth left first, and charges the speed to
    every link a ring uses; keep the set with the most bandwidth (rings x speed), stop
    when it uses all of a GPU's NVLink bandwidth or the next speed is below
    :data:`SPEED_STEP_FRACTION` of the best. Bandwidths are NCCL's (0.8 of the wire).
    Rings are positions in ``gpus``.

    On the DGX-1 (six NVLinks per GPU, two of them doubled) this finds two rings at
    40 GB/s, then six at 20: every NVLink used once in each direction.

    >>> from simcoll.topology import load
    >>> dgx1 = load("topologies/dgx1-v100.toml")
    >>> speed, rings = nvlink_rings(dgx1, [f"gpu{i}" for i in range(8)])
    >>> speed, len(rings), rings[0]
    (20.0, 6, (0, 3, 2, 1, 5, 6, 7, 4))
    """
    position = {g: i for i, g in enumerate(gpus)}
    capacity: dict[tuple[int, int], float] = {}
    for g in gpus:
        for _, v, attrs in topology.out_edges(g, data=True):
            if v in position and attrs["kind"] is LinkKind.NVLINK:
                gbps = NCCL_LINK_FRACTION * attrs["bandwidth_bytes_per_s"] / 1e9
                capacity[position[g], position[v]] = (
                    capacity.get((position[g], position[v]), 0) + gbps
                )
    total = min(sum(c for (a, _), c in capacity.items() if a == i) for i in range(len(gpus)))
    widest = max(capacity.values(), default=0.0)
    best_speed, best = 0.0, list[tuple[int, ...]]()
    for speed in _speeds(topology, gpus[0]):
        if speed > widest + 1e-9:
            continue
        if best and speed < SPEED_STEP_FRACTION * best_speed:
            break
        target = min(MAX_SEARCH_CHANNELS, math.floor(total / speed + 1e-9))
        rings = _rings_at(dict(capacity), len(gpus), speed, target)
        if len(rings) * speed > len(best) * best_speed + 1e-9:
            best_speed, best = speed, rings
        if best and len(best) * best_speed >= total - 1e-9:
            break
    if not best:
        return 0.0, [tuple(range(len(gpus)))]
    return best_speed, best


def _rings_at(
    left: dict[tuple[int, int], float], n: int, speed: float, target: int, budget: int = 1 << 16
) -> list[tuple[int, ...]]:
    """The most rings over all n GPUs (up to ``target``), each charging ``speed`` to its
    links, found depth first as NCCL's ``ncclTopoSearchRec`` does: every ring from GPU 0,
    the GPUs with the most bandwidth left to them tried first (then the lowest index), and
    a finished ring followed by the search for the next, backtracking within ``budget``
    steps; the best set found is kept."""
    best: list[tuple[int, ...]] = []
    rings: list[tuple[int, ...]] = []
    steps = 0

    def fits(a: int, b: int) -> bool:
        return left.get((a, b), 0.0) >= speed - 1e-9

    def grow(path: list[int]) -> bool:
        """Extend the ring in progress; True once ``target`` rings are found."""
        nonlocal steps, best
        steps += 1
        if steps > budget:
            return False
        here = path[-1]
        if len(path) == n:
            if not fits(here, path[0]):
                return False
            ring = tuple(path)
            edges = list(zip(ring, ring[1:] + ring[:1], strict=True))
            for edge in edges:
                left[edge] -= speed
            rings.append(ring)
            if len(rings) > len(best):
                best = list(rings)
            done = len(rings) >= target or grow([0])
            rings.pop()
            for edge in edges:
                left[edge] += speed
            return done
        options = sorted(
            (g for g in range(n) if g not in path and fits(here, g)),
            key=lambda g: (-left[here, g], g),
        )
        return any(grow([*path, g]) for g in options)

    if n > 1 and target > 0:
        grow([0])
    return best


# -- across servers ---------------------------------------------------------------------------


def _host_members(topology: nx.DiGraph[str]) -> dict[str, set[str]]:
    """Every server's nodes (those whose ``host`` is the server), by server name."""
    members: dict[str, set[str]] = {}
    for node, attrs in topology.nodes(data=True):
        host = attrs.get("host")
        if host is not None:
            members.setdefault(str(host), set()).add(node)
    return members


def _hops_inside(
    topology: nx.DiGraph[str], gpu: str, members: set[str], targets: set[str]
) -> dict[str, int]:
    """Hops from ``gpu`` to each of ``targets`` over the server's own nodes, GPUs not
    forwarding (a breadth-first search; a target not reached is left out)."""
    hops: dict[str, int] = {}
    seen = {gpu}
    level = [gpu]
    depth = 0
    while level and len(hops) < len(targets):
        depth += 1
        following = []
        for u in level:
            if u != gpu and topology.nodes[u]["kind"] is NodeKind.GPU:
                continue  # a GPU ends a path, never forwards it
            for v in topology.succ[u]:
                if v in members and v not in seen:
                    seen.add(v)
                    following.append(v)
                    if v in targets:
                        hops[v] = depth
        level = following
    return hops


def _preferred_nics(
    topology: nx.DiGraph[str], server: _Server, members: set[str], router: Router
) -> tuple[list[str], dict[str, int], dict[tuple[str, str], int]]:
    """NCCL's NIC order for a server, each NIC's distance to its closest GPU, and the
    hops from every GPU to every NIC.

    Each GPU prefers its closest NICs (fewest hops, inside the server: NCCL's PCI paths;
    the fabric's routes only where the server's own nodes join no GPU to a NIC); GPUs
    equally close to the same NICs take them in turn, the i-th GPU the i-th NIC
    (``topo.cc:ncclTopoGetLocalNet``). The list is each GPU's preferred NIC in GPU index
    order, then the other NICs as close to one of the server's GPUs as its nearest
    (``search.cc:ncclTopoSelectNets`` adds NICs by path type, and a search that finds its
    channels at a GPU's nearest path type goes no farther). A NIC farther from every
    GPU of the job than its nearest is not used: a job with one GPU of a DGX H100 runs
    over that GPU's NIC, not over the seven others through the host bridge or the fabric.
    """
    nics = sorted(
        (n for n in members if topology.nodes[n]["kind"] is NodeKind.NIC), key=natural_key
    )
    far = 1 << 30
    inside = {gpu: _hops_inside(topology, gpu, members, set(nics)) for gpu in server.gpus}
    hops: dict[tuple[str, str], int] = {}
    for gpu in server.gpus:
        for nic in nics:
            if inside[gpu]:
                hops[gpu, nic] = inside[gpu].get(nic, far)
                continue
            try:  # a channel's NIC sends from its GPU and receives into it: both ways
                hops[gpu, nic] = len(router.route(gpu, nic))
                router.route(nic, gpu)
            except TopologyError:
                hops[gpu, nic] = far
    order: list[str] = []
    turn: dict[tuple[str, ...], int] = {}
    near: set[str] = set()
    for gpu in server.gpus:
        nearest = min(hops[gpu, nic] for nic in nics)
        if nearest >= far:
            continue  # no NIC of its own, none it can receive from: it takes no channel's
        local = tuple(nic for nic in nics if hops[gpu, nic] == nearest)
        near.update(local)
        pick = local[turn.get(local, 0) % len(local)]
        turn[local] = turn.get(local, 0) + 1
        if pick not in order:
            order.append(pick)
    order += [nic for nic in nics if nic not in order and nic in near]
    closest = {nic: min(hops[g, nic] for g in server.gpus) for nic in nics}
    return order, closest, hops


def _many_servers(
    topology: nx.DiGraph[str], servers: list[_Server], router: Router
) -> tuple[Channel, ...]:
    """Channels across servers: one search channel per NIC, rails kept, doubled twice."""
    first = servers[0]
    members = router.memo("host members", lambda: _host_members(topology))
    nic_lists = [  # per server's GPUs of the group, once per router (read, never changed)
        router.memo(f"preferred nics {s.name} {s.gpus}",
                    partial(_preferred_nics, topology, s, members.get(s.name, set()), router))
        for s in servers
    ]  # fmt: skip
    n_search = min(len(nic_lists[0][0]), MAX_SEARCH_CHANNELS) if nic_lists[0][0] else 0
    if n_search == 0:  # servers without NICs: the rank order across them
        ring = tuple(r for s in servers for r in s.ranks)
        return (Channel(ring, _chain_tree(ring)),)
    _check_stranded(servers, [nics for nics, _, _ in nic_lists])
    fabric = _fabric(topology, first.gpus)
    intra_rings = None
    if fabric == "nvlink":
        intra_rings = [nvlink_rings(topology, s.gpus)[1] for s in servers]
    search: list[tuple[list[tuple[int, ...]], dict[tuple[int, int], NetHop]]] = []
    for c in range(n_search):
        chains, net = [], {}
        for k, server in enumerate(servers):
            nics, closest, hops = nic_lists[k]
            nic = nics[c % len(nics)]
            rings_here = intra_rings[k] if intra_rings else None
            chains.append(_chain(server, nic, closest[nic], hops, rings_here, c))
        for k, server in enumerate(servers):
            nxt = (k + 1) % len(servers)
            exit_gpu, entry_gpu = chains[k][-1], chains[k][0]
            send_nic = nic_lists[k][0][c % len(nic_lists[k][0])]
            recv_nic = nic_lists[nxt][0][c % len(nic_lists[nxt][0])]
            proxy = _proxy(topology, exit_gpu, entry_gpu, send_nic, nic_lists[k][2])
            src = server.ranks[server.gpus.index(exit_gpu)]
            dst = servers[nxt].ranks[servers[nxt].gpus.index(chains[nxt][0])]
            net[src, dst] = NetHop(send_nic, recv_nic, proxy)
        rank_chains = [
            tuple(s.ranks[s.gpus.index(g)] for g in chain)
            for s, chain in zip(servers, chains, strict=True)
        ]
        search.append((rank_chains, net))
    hopper = _speeds(topology, first.gpus[0]) is SPEEDS_INTRA_SM90
    # One channel per NIC, at the highest speed of NCCL's inter-server table the NIC
    # carries (48 GB/s on 400 Gbit/s, 24 on 200 Gbit/s).
    nic_gbps = _nic_gbps(topology, nic_lists[0][0][0])
    table = SPEEDS_INTER_SM90 if hopper else SPEEDS_INTER
    speed = next((s for s in table if s <= nic_gbps + 1e-9), table[-1])
    n = _compute_channels(n_search, speed, hopper=hopper)
    trees = [double_binary_tree(len(servers))]
    channels = []
    for c in range(n):
        rank_chains, net = search[c % n_search]
        tree = trees[0][0] if c < n // 2 else trees[0][1]  # Postset: copies use tree 1
        ring = tuple(r for chain in rank_chains for r in chain)
        tree_net = dict(net)
        rank_tree = _server_tree(rank_chains, tree)
        heads = [chain[0] for chain in rank_chains]
        for k, head in enumerate(heads):
            up = tree.parent[k]
            if up < 0:
                continue
            nic_k = nic_lists[k][0][c % n_search % len(nic_lists[k][0])]
            nic_up = nic_lists[up][0][c % n_search % len(nic_lists[up][0])]
            tree_net[head, heads[up]] = NetHop(nic_k, nic_up)
            tree_net[heads[up], head] = NetHop(nic_up, nic_k)
        channels.append(Channel(ring, rank_tree, tree_net))
    return tuple(channels)


def _check_stranded(servers: Sequence[_Server], nics: Sequence[list[str]]) -> None:
    """Refuse a server none of whose GPUs of the job reaches a NIC both ways (its own
    NICs cut, the others behind GPUs that are not the job's)."""
    for server, found in zip(servers, nics, strict=True):
        if not found:
            raise TopologyError(f"no GPU of the job on server {server.name} has a NIC it can "
                                "send by and receive from")  # fmt: skip


def _nic_gbps(topology: nx.DiGraph[str], nic: str) -> float:
    """The bandwidth of a NIC's link into the fabric, GB/s."""
    out = [
        attrs["bandwidth_bytes_per_s"]
        for _, v, attrs in topology.out_edges(nic, data=True)
        if topology.nodes[v]["kind"] is NodeKind.SWITCH
    ]
    return max(out, default=0.0) / 1e9


def _chain(  # noqa: PLR0917 - one server's facts for one channel
    server: _Server,
    nic: str,
    nearest_hops: int,
    hops: dict[tuple[str, str], int],
    rings: list[tuple[int, ...]] | None,
    channel: int,
) -> list[str]:
    """The GPUs of ``server`` in channel order: enter by ``nic``, leave towards it.

    The entry GPU is the first GPU as close to the NIC as any; the exit is another equally
    close GPU if there is one, else the entry's predecessor in GPU index order; the others
    walk down the GPU index from the entry (``search.cc``: next GPUs tried in descending
    index when they tie). On an NVLink mesh the chain follows the channel's NVLink ring,
    cut open at the entry GPU.
    """
    gpus = list(server.gpus)
    close = [g for g in gpus if hops[g, nic] == nearest_hops]
    entry = close[0] if close else gpus[0]
    i = gpus.index(entry)
    if rings:
        ring = rings[channel % len(rings)]
        start = ring.index(i)
        return [gpus[ring[(start + k) % len(ring)]] for k in range(len(ring))]
    partners = [g for g in close if g != entry]
    exit_gpu = partners[0] if partners else gpus[(i + 1) % len(gpus)]
    middle = [gpus[(i - k) % len(gpus)] for k in range(1, len(gpus))]
    return [entry, *(g for g in middle if g != exit_gpu), exit_gpu] if len(gpus) > 1 else [entry]


def _proxy(
    topology: nx.DiGraph[str],
    exit_gpu: str,
    entry_gpu: str,
    nic: str,
    hops: dict[tuple[str, str], int],
) -> str | None:
    """The GPU the exit GPU sends through (PXN), or None when it is as close to the NIC.

    NCCL routes a GPU's send through a GPU next to the NIC when its own path to the NIC
    is worse than through a PCIe switch and it has NVLink to that GPU (``paths.cc``).
    """
    if exit_gpu == entry_gpu or hops[exit_gpu, nic] <= hops[entry_gpu, nic]:
        return None
    nvlinked = any(
        attrs["kind"] is LinkKind.NVLINK for _, _, attrs in topology.out_edges(exit_gpu, data=True)
    )
    return entry_gpu if nvlinked else None


def _server_tree(chains: Sequence[tuple[int, ...]], across: Tree) -> Tree:
    """A tree over ranks: servers joined by ``across`` at their chains' first ranks."""
    n = sum(len(c) for c in chains)
    parent = [-1] * n
    children: list[tuple[int, ...]] = [()] * n  # one tuple each, built once (32,768 ranks)
    for k, chain in enumerate(chains):
        up = across.parent[k]
        parent[chain[0]] = chains[up][0] if up >= 0 else -1
        for i in range(1, len(chain)):
            parent[chain[i]] = chain[i - 1]
            children[chain[i - 1]] = (chain[i],)
        heads = tuple(chains[child][0] for child in across.children[k])
        children[chain[0]] = chain[1:2] + heads  # its chain's next, then the servers below
    root = chains[across.root][0]
    return Tree(root, tuple(parent), tuple(children))
