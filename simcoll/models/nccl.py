r"""NCCL's own tuning model (``src/graph/tuning.cc``) as a baseline, with inputs from a topology.

NCCL picks an algorithm and protocol per call by the time this model predicts
(``ncclTopoTuneModel`` fills a latency and a bandwidth per (collective, algorithm,
protocol); ``ncclTopoGetAlgoTime`` adds them up). This module restates it after
``shared/reference/state-of-the-art.md`` section 3 (NVIDIA/nccl at 5067397), in NCCL's
units: latencies in microseconds, bandwidths in GB/s (1e9 B/s),
``time_us = lat + nBytes / (1000 bw)``.

Inputs read off the topology (NCCL gets them from its graph search):

- nodes: the GPUs' ``host`` attributes (GPUs without one count as one node), ``ppn =
  nRanks / nNodes``;
- ``bwIntra``: the bandwidth the ranks' ring inside each host sustains, i.e. the least
  ``bandwidth / load`` over the links of the routes from each rank to the next rank on its
  host (:func:`simcoll.models.pattern_cost`); on an NVSwitch box, a GPU's NVLink
  bandwidth;
- ``bwInter`` (several nodes): the least total bandwidth of the links leaving a host (its
  NICs);
- the graph's bandwidth is split over its channels, ``bw = total / nChannels`` per
  channel, so ``busBw = nChannels x bw`` is the total again unless a per-channel cap
  binds. Ring and tree channels cross the network on several nodes, so their total is
  ``min(bwIntra, bwInter)`` there (NCCL's search gives a channel one speed that every link
  on its path must sustain);
- the intra-node link type (NVLink, or PCI if an intra-host route crosses PCIe or a CPU
  link) picks the row of ``hwLat``.

Model (``nsteps``: all-reduce 2(n-1), all-gather and reduce-scatter n-1, broadcast and
reduce n):

==================  ==================================================================
busBw refinements   ring LL: ``min(llMaxBw, 0.5 busBw)``; ring LL128: ``min(0.92 busBw,
                    nCh perChMaxRingLL128Bw)``; tree: ``min(0.92 busBw, nCh
                    perChMaxTreeBw)``, then LL ``min(busBw / 3.8, llMaxBw)``, LL128
                    ``min(busBw x (7/9 on one node, else 120/128), nCh
                    perChMaxTreeLL128Bw)``; NVLS: ``nCh x min(bwIntra x 0.85 x (nCh-1)/nCh
                    x (2 for all-reduce, else (ppn-1)/ppn), bwInter)``; NVLS-tree
                    (all-reduce, several nodes): the same with ``bwInter`` doubled on two
                    nodes, and at most ``perChMaxNVLSTreeBw`` per channel
algBw               ring, NVLS: ``busBw x n / nsteps``; tree: ``busBw / 2``
latency             ring all-reduce/all-gather/reduce-scatter: ``baseLat + (nsteps -
                    nInterSteps) max(intraLat, netOverhead) + nInterSteps interLat``;
                    ring broadcast/reduce: ``baseLat + hwLat`` (all channels identical,
                    as simcoll's rings are), else ``baseLat + nsteps hwLat``; tree:
                    ``baseLat + 2 ((ppn-1) intraLat + log2(nNodes) interLat)``; NVLS:
                    ``intraLat (+ interLat on several nodes)``; NVLS-tree: ``intraLat +
                    2 log2(nNodes) interLat``
time                ``lat + nBytes / (1000 algBw)``; tree all-reduce bandwidth times
                    ``treeCorrectionFactor[proto][log2(nBytes / 64)]``; ring simple
                    all-reduce on several nodes with ``nBytes / (nCh n) >= 64``: ``lat x
                    1.4``
==================  ==================================================================

The constants are :class:`NcclConstants` (Hopper defaults, :data:`HOPPER`), each with its
source. Things NCCL's model depends on that a topology does not say (the CPU vendor, the
graph's ``latencyInter``, whether the tree search fell back to the TREE pattern) are
fields there too.

>>> from simcoll.topology import switch_star
>>> star = switch_star(8, link_bandwidth_bytes_per_s=300e9, link_latency_s=0.5e-6)
>>> e = nccl_estimate(star, "allreduce", "ring", "simple", 8, 2**30, n_channels=8)
>>> round(e.latency_s * 1e6, 6), round(e.algorithm_bandwidth_bytes_per_s / 1e9, 6)
(56.0, 171.428571)
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field

import networkx as nx

from simcoll.algorithms.collnet import collnet_servers
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.protocols import link_class
from simcoll.models._net import Network, fabric_switches, hosts_of, reducing_switch
from simcoll.plan.placement import map_ranks
from simcoll.topology import Router
from simcoll.topology.schema import NodeKind

__all__ = [
    "HOPPER",
    "NCCL_ALGORITHMS",
    "NCCL_PROTOCOLS",
    "NcclConstants",
    "NcclEstimate",
    "nccl_estimate",
    "nccl_time_s",
]

NCCL_PROTOCOLS = ("LL", "LL128", "simple")
"""Protocol names, in the order of NCCL's tables (``NCCL_PROTO_LL``, ``LL128``, ``SIMPLE``)."""

C = Collective
NCCL_ALGORITHMS: dict[str, frozenset[Collective]] = {
    "ring": frozenset({C.ALLREDUCE, C.ALLGATHER, C.REDUCESCATTER, C.BROADCAST, C.REDUCE}),
    "tree": frozenset({C.ALLREDUCE}),
    "nvls": frozenset({C.ALLREDUCE, C.ALLGATHER, C.REDUCESCATTER}),
    "nvls_tree": frozenset({C.ALLREDUCE}),
    "collnet_direct": frozenset({C.ALLREDUCE}),
    "collnet_chain": frozenset({C.ALLREDUCE}),
}
"""The algorithms of NCCL's model simcoll implements, and the collectives it costs them for."""

Triple = tuple[float, float, float]  # (LL, LL128, simple) or (N1, N2, N4)


def _base_latency() -> dict[str, Triple]:
    return {
        "tree": (6.8, 14.0, 8.4),
        "ring": (6.6, 14.0, 8.4),
        "nvls": (0.0, 0.0, 0.0),
        "nvls_tree": (0.0, 0.0, 0.0),
        "collnet_direct": (0.0, 0.0, 0.0),
        "collnet_chain": (0.0, 0.0, 0.0),
    }


def _hw_latency() -> dict[str, dict[str, Triple]]:
    return {
        "nvlink": {
            "tree": (0.6, 1.25, 4.0),
            "ring": (0.6, 1.9, 3.4),
            "nvls": (0.0, 0.0, 25.0),
            "nvls_tree": (0.0, 0.0, 25.0),
            "collnet_direct": (0.0, 0.0, 3.7),
            "collnet_chain": (0.0, 0.0, 2.8),
        },
        "pci": {
            "tree": (1.0, 1.9, 4.0),
            "ring": (1.0, 2.5, 5.7),
            "nvls": (0.0, 0.0, 0.0),
            "nvls_tree": (0.0, 0.0, 0.0),
            "collnet_direct": (0.0, 0.0, 3.7),
            "collnet_chain": (0.0, 0.0, 2.8),
        },
        "net": {
            "tree": (5.0, 8.5, 14.0),
            "ring": (2.7, 4.0, 14.0),
            "nvls": (0.0, 0.0, 18.0),
            "nvls_tree": (0.0, 0.0, 20.9),
            "collnet_direct": (0.0, 0.0, 31.0),
            "collnet_chain": (0.0, 0.0, 30.0),
        },
    }


def _tree_correction() -> dict[str, tuple[float, ...]]:
    return {
        "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9,
               1.0, 1.0, 1.0, 1.0),
        "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9,
                  .9, .9, .9, 1.0, 1.0),
        "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7,
                   .7, .8, .9, .9),
    }  # fmt: skip


@dataclass(frozen=True)
class NcclConstants:
    """The constants of NCCL's tuning model, Hopper defaults, each with its source.

    "SOTA 3" is ``shared/reference/state-of-the-art.md`` section 3, which restates
    NVIDIA/nccl ``src/graph/tuning.cc`` at commit 5067397; "tuning.cc@b647562" is that file
    at NVIDIA/nccl commit b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2, for the two tables the
    notes do not list. Latencies in microseconds, bandwidths in GB/s; triples are
    (LL, LL128, simple) for latencies and (1 node, 2 nodes, more) for scale-indexed caps.
    Override a field with :func:`dataclasses.replace` (what calibration refits).
    """

    #: ``baseLat[algo][proto]`` (SOTA 3.3).
    base_latency_us: Mapping[str, Triple] = field(default_factory=_base_latency)
    #: ``hwLat[link][algo][proto]``, per hop (SOTA 3.3; NVLS on NVLink 25, on NET 18;
    #: NVLS-tree on NVLink 25, on NET 20.9, tuning.cc@b647562).
    hw_latency_us: Mapping[str, Mapping[str, Triple]] = field(default_factory=_hw_latency)
    #: ``llMaxBw``: one node by GPU (Hopper 141), several by CPU (Intel 39.0 / 20.4; AMD
    #: would be 22.5 / 19.0) (SOTA 3.2; index rule in tuning.cc@b647562).
    ll_max_bw_gbps: Triple = (141.0, 39.0, 20.4)
    #: ``perChMaxRingLL128Bw``, Hopper (SOTA 3.2).
    per_channel_max_ring_ll128_bw_gbps: Triple = (36.7, 36.7, 36.7)
    #: ``perChMaxTreeBw``, Hopper (SOTA 3.2).
    per_channel_max_tree_bw_gbps: Triple = (38.7, 41.4, 36.0)
    #: ``perChMaxTreeLL128Bw``, Hopper (tuning.cc@b647562).
    per_channel_max_tree_ll128_bw_gbps: Triple = (36.7, 36.7, 29.0)
    #: ``perChMaxNVLSTreeBw``, Hopper (SOTA 3.2; no one-node value: NVLS-tree spans nodes).
    per_channel_max_nvls_tree_bw_gbps: Triple = (0.0, 57.7, 45.5)
    #: Ring LL: an 8-byte line carries 4 data bytes and a 4-byte flag (SOTA 3.2).
    ll_factor: float = 0.5
    #: Ring LL128 and tree: "120.0/128.0", written 0.92 in NCCL (SOTA 3.2).
    ll128_factor: float = 0.92
    tree_factor: float = 0.92
    #: Tree LL: busBw / 3.8 (SOTA 3.2).
    tree_ll_divisor: float = 3.8
    #: Tree LL128: 7/9 on one node, 120/128 on several (SOTA 3.2).
    tree_ll128_factor_one_node: float = 7 / 9
    tree_ll128_factor_nodes: float = 120 / 128
    #: x 0.85 when the tree search falls back to the TREE pattern; 1.0 for the default
    #: BALANCED_TREE pattern (SOTA 3.2).
    tree_pattern_factor: float = 1.0
    #: ``nvlsEfficiency``: 0.85 on Hopper, 0.74 on Blackwell (SOTA 3.2).
    nvls_efficiency: float = 0.85
    #: CollNet Direct's all-reduce busBw x 0.85 from compute capability 9.0 on (tuning.cc
    #: at NVIDIA/nccl's snapshot b647562 and later).
    collnet_direct_factor: float = 0.85
    #: ``netOverhead`` in us when nNodes > 1: Intel 1, AMD 2; times 3 for simple (SOTA 3.3).
    net_overhead_us: float = 1.0
    net_overhead_simple_factor: float = 3.0
    #: The graph's ``latencyInter`` (us), added to the NET hwLat (twice for simple, the
    #: "flush"); the network's own latency, 0 unless calibrated (SOTA 3.3).
    latency_inter_us: float = 0.0
    #: Ring simple all-reduce on several nodes: lat x 1.4 (1.9 before SM80) (SOTA 3.4).
    ring_plateau_factor: float = 1.4
    #: All ring channels identical (simcoll's rings are): broadcast/reduce pay one hwLat.
    same_channels: bool = True
    #: ``treeCorrectionFactor[proto][log2(nBytes/64)]``, 64 B to 256 MB (tuning.cc@b647562).
    tree_correction: Mapping[str, tuple[float, ...]] = field(default_factory=_tree_correction)


HOPPER = NcclConstants()
"""NCCL's constants for Hopper GPUs (H100, H200) on Intel hosts."""


@dataclass(frozen=True)
class NcclEstimate:
    """NCCL's model for one call: its latency and bandwidths, and the time they give.

    ``algorithm_bandwidth_bytes_per_s`` is ``comm->bandwidths`` (before the tree
    correction); ``bus_bandwidth_bytes_per_s`` the busBw it came from; ``latency_s``
    includes the ring plateau factor when it applies.
    """

    time_s: float
    latency_s: float
    algorithm_bandwidth_bytes_per_s: float
    bus_bandwidth_bytes_per_s: float
    n_nodes: int
    intra_link: str


def _protocol_index(protocol: str) -> int:
    for index, name in enumerate(NCCL_PROTOCOLS):
        if name.lower() == protocol.lower():
            return index
    raise ConfigError(f"unknown protocol {protocol!r}; valid: {', '.join(NCCL_PROTOCOLS)}")


@dataclass(frozen=True)
class _Graph:
    """What NCCL's graph search would report: nodes, bandwidths (GB/s), link type."""

    n_nodes: int
    ppn: float
    intra_gbps: float
    inter_gbps: float
    intra_link: str


#: The graph facts of the last few (topology, ranks) asked about: NCCL's model is asked
#: once per candidate (algorithm, protocol) of one call, and on 32,768 GPUs each answer
#: routes every ring pair (about a second). Keyed by the topology object, kept no longer
#: than it lives; a topology is not changed once built.
_GRAPHS: weakref.WeakKeyDictionary[nx.DiGraph[str], dict[object, _Graph]] = (
    weakref.WeakKeyDictionary()
)
_GRAPHS_PER_TOPOLOGY = 8


def _graph(
    topology: nx.DiGraph[str],
    nodes: tuple[str, ...],
    bw_intra: float | None,
    bw_inter: float | None,
    router: Router | None,
) -> _Graph:
    """:func:`_graph_of`, remembered per topology for the same ranks and bandwidths."""
    kept = _GRAPHS.setdefault(topology, {})
    key = (tuple(nodes), bw_intra, bw_inter)
    found = kept.get(key)
    if found is None:
        if len(kept) >= _GRAPHS_PER_TOPOLOGY:
            kept.clear()
        found = kept[key] = _graph_of(topology, nodes, bw_intra, bw_inter, router)
    return found


#: Per topology: each node's host, and each host's bandwidth out of it (bytes/s, summed
#: over the links that leave it), read once: a 16,384-GPU fabric has 131,072 links and a
#: training step asks for hundreds of groups' graphs.
_EGRESS: weakref.WeakKeyDictionary[
    nx.DiGraph[str], tuple[dict[str, object], dict[object, float]]
] = weakref.WeakKeyDictionary()


def _egress(topology: nx.DiGraph[str]) -> tuple[dict[str, object], dict[object, float]]:
    found = _EGRESS.get(topology)
    if found is None:
        host = nx.get_node_attributes(topology, "host")
        egress: dict[object, float] = {}
        for u, v, data in topology.edges(data=True):
            if host.get(u) is not None and host.get(u) != host.get(v):
                egress[host[u]] = egress.get(host[u], 0.0) + float(data["bandwidth_bytes_per_s"])
        found = _EGRESS[topology] = (host, egress)
    return found


def _graph_of(
    topology: nx.DiGraph[str],
    nodes: tuple[str, ...],
    bw_intra: float | None,
    bw_inter: float | None,
    router: Router | None,
) -> _Graph:
    groups = hosts_of(topology, nodes)
    net = Network(topology, protocol=None, contention=True, router=router)
    ring = [
        (nodes[g[i]], nodes[g[(i + 1) % len(g)]])
        for g in groups
        if len(g) > 1
        for i in range(len(g))
    ]
    kinds = [topology.edges[e]["kind"].value for pair in ring for e in net.route(pair)]
    intra_link = "nvlink" if link_class(kinds) == "nvlink" else "pci"
    if bw_intra is None:
        bw_intra = net.cost(ring).bandwidth_bytes_per_s
    if bw_inter is None:
        bw_inter = math.inf
        if len(groups) > 1:
            host, egress = _egress(topology)
            used = {host.get(nodes[g[0]]) for g in groups}
            bw_inter = min(egress.get(h, 0.0) for h in used)
    return _Graph(
        n_nodes=len(groups),
        ppn=len(nodes) / len(groups),
        intra_gbps=bw_intra / 1e9,
        inter_gbps=bw_inter / 1e9,
        intra_link=intra_link,
    )


def nccl_estimate(  # noqa: PLR0917 - NCCL's model: collective, algorithm, protocol, ...
    topology: nx.DiGraph[str],
    collective: Collective | str,
    algorithm: str,
    protocol: str,
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int,
    constants: NcclConstants = HOPPER,
    rank_nodes: tuple[str, ...] | None = None,
    bw_intra_bytes_per_s: float | None = None,
    bw_inter_bytes_per_s: float | None = None,
    router: Router | None = None,
) -> NcclEstimate:
    """NCCL's predicted latency, bandwidth and time for one call (see the module docstring).

    Parameters
    ----------
    topology
        A validated topology, read as described in the module docstring.
    collective, algorithm, protocol
        ``algorithm`` is one of :data:`NCCL_ALGORITHMS` (``ring``, ``tree``, ``nvls``,
        ``nvls_tree``),
        ``protocol`` one of :data:`NCCL_PROTOCOLS` (case-insensitive).
    n_ranks, size_bytes
        Ranks (on the GPUs with ``rank`` 0..n_ranks-1 unless ``rank_nodes`` is given) and
        NCCL's ``nBytes``, which is the nccl-tests size.
    n_channels
        The graph's ``nChannels``.
    constants
        The model's constants (:data:`HOPPER` by default).
    bw_intra_bytes_per_s, bw_inter_bytes_per_s
        Total intra- and inter-node bandwidth of a rank, replacing what the topology says.
    router
        A :class:`~simcoll.topology.Router` of ``topology`` to reuse across calls.

    Raises
    ------
    ConfigError
        On a collective NCCL's model does not cost with that algorithm, an unknown
        algorithm or protocol (the message lists the valid ones), NVLS with a protocol
        other than simple, fewer than 2 channels or no reducing switch, LL128 where the
        GPUs are not on NVLink (NCCL turns it off there), or bad numbers.
    """
    c = collective if isinstance(collective, Collective) else Collective.parse(collective)
    covered = NCCL_ALGORITHMS.get(algorithm)
    if covered is None:
        raise ConfigError(
            f"NCCL's model has no algorithm {algorithm!r}; valid: {', '.join(NCCL_ALGORITHMS)}"
        )
    if c not in covered:
        valid = ", ".join(a for a, colls in NCCL_ALGORITHMS.items() if c in colls) or "none"
        raise ConfigError(f"NCCL's model does not cost {c.value} with {algorithm}; valid: {valid}")
    p = _protocol_index(protocol)
    if isinstance(n_channels, bool) or not isinstance(n_channels, int) or n_channels < 1:
        raise ConfigError(f"n_channels must be a positive integer, got {n_channels!r}")
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise ConfigError(f"size_bytes must be a non-negative integer, got {size_bytes!r}")
    if algorithm in ("nvls", "nvls_tree") and (p != 2 or n_channels < 2):
        raise ConfigError(
            f"NCCL runs NVLS with the simple protocol and at least 2 channels only; got "
            f"{NCCL_PROTOCOLS[p]} with {n_channels} channel(s)"
        )
    if algorithm.startswith("collnet") and p != 2:
        raise ConfigError(f"NCCL runs CollNet with the simple protocol only; got "
                          f"{NCCL_PROTOCOLS[p]}")  # fmt: skip
    nodes = map_ranks(topology, n_ranks) if rank_nodes is None else tuple(rank_nodes)
    if len(nodes) != n_ranks:
        raise ConfigError(f"rank_nodes names {len(nodes)} GPUs for {n_ranks} ranks")
    _check_switches(topology, nodes, algorithm)
    g = _graph(topology, nodes, bw_intra_bytes_per_s, bw_inter_bytes_per_s, router)
    if p == 1 and g.intra_link != "nvlink":
        raise ConfigError("NCCL enables LL128 only where the GPUs talk over NVLink; here an "
                          "intra-node route crosses PCIe or a CPU link")  # fmt: skip
    if n_ranks == 1 or size_bytes == 0:  # NCCL does no communication
        return NcclEstimate(0.0, 0.0, math.inf, math.inf, g.n_nodes, g.intra_link)
    bus = _bus_bandwidth_gbps(c, algorithm, p, n_channels, g, constants)
    nsteps = {C.ALLREDUCE: 2 * (n_ranks - 1), C.BROADCAST: n_ranks, C.REDUCE: n_ranks}.get(
        c, n_ranks - 1
    )
    halved = algorithm == "tree" or algorithm.startswith("collnet")  # NCCL's ratio .5
    algbw = bus * 0.5 if halved else bus * n_ranks / nsteps  # NVLS-tree: x n/nsteps
    lat = _latency_us(c, algorithm, p, n_ranks, nsteps, g, constants)
    bw = algbw
    if algorithm == "tree" and size_bytes >= 64:
        log_size = (size_bytes >> 6).bit_length() - 1
        table = constants.tree_correction[NCCL_PROTOCOLS[p]]
        if log_size < len(table):
            bw *= table[log_size]
    if (algorithm == "ring" and p == 2 and g.n_nodes > 1 and c is C.ALLREDUCE
            and size_bytes / (n_channels * n_ranks) >= 64):  # fmt: skip
        lat *= constants.ring_plateau_factor
    time_us = lat + size_bytes / (1000 * bw)
    return NcclEstimate(
        time_s=time_us * 1e-6,
        latency_s=lat * 1e-6,
        algorithm_bandwidth_bytes_per_s=algbw * 1e9,
        bus_bandwidth_bytes_per_s=bus * 1e9,
        n_nodes=g.n_nodes,
        intra_link=g.intra_link,
    )


def _check_switches(topology: nx.DiGraph[str], nodes: tuple[str, ...], algorithm: str) -> None:
    """Refuse NVLS without a switch that reduces for every rank, and NVLS-tree on one
    server or on a server without one."""
    if algorithm == "nvls":
        reducing_switch(topology, nodes, algorithm)
    if algorithm.startswith("collnet"):
        servers = hosts_of(topology, nodes)
        collnet_servers(algorithm, len(nodes), len(servers[0]))  # the schedule's refusal
        fabric_switches(topology, nodes, [list(range(len(nodes)))], algorithm)
        nvswitch = any(topology.nodes[v]["kind"] is NodeKind.NVSWITCH
                       for v in topology.successors(nodes[0]))  # fmt: skip
        if algorithm == "collnet_direct" and not nvswitch:
            raise ConfigError("NCCL runs CollNet Direct only where the GPUs of a server "
                              "share an NVSwitch (tuning.cc); use collnet_chain")  # fmt: skip
        return
    if algorithm != "nvls_tree":
        return
    servers = hosts_of(topology, nodes)
    if len(servers) < 2:
        raise ConfigError("nvls_tree spans servers; these ranks are on one (use nvls)")
    g = len(servers[0])
    if any(server != list(range(j * g, (j + 1) * g)) for j, server in enumerate(servers)):
        raise ConfigError("nvls_tree needs each server's ranks consecutive and as many per server")
    if g < 2:
        raise ConfigError("NCCL runs NVLS only with two GPUs or more per server")
    for server in servers:
        reducing_switch(topology, [nodes[r] for r in server], "nvls_tree")


def _bus_bandwidth_gbps(  # noqa: PLR0917 - private step of nccl_estimate
    c: Collective, algorithm: str, p: int, n_ch: int, g: _Graph, k: NcclConstants
) -> float:
    scale = min(g.n_nodes, 3) - 1  # N1, N2, N4 columns
    if algorithm in ("nvls", "nvls_tree"):
        share = 2.0 if c is C.ALLREDUCE else (g.ppn - 1) / g.ppn
        intra = g.intra_gbps / n_ch * k.nvls_efficiency * (n_ch - 1) / n_ch * share
        if g.n_nodes == 1:
            return n_ch * intra
        if algorithm == "nvls":
            return n_ch * min(intra, g.inter_gbps / n_ch)
        inter = g.inter_gbps / n_ch * (2 if g.n_nodes <= 2 else 1)
        return n_ch * min(intra, inter, k.per_channel_max_nvls_tree_bw_gbps[scale])
    if algorithm.startswith("collnet"):
        # NCCL costs CollNet by the graph's bwIntra at any node count; Direct's GPU/NIC
        # ratio is 1 here (simcoll's Direct makes every GPU a head), then x 0.85 (Hopper)
        factor = k.collnet_direct_factor if algorithm == "collnet_direct" else 1.0
        return g.intra_gbps * factor
    total = g.intra_gbps if g.n_nodes == 1 else min(g.intra_gbps, g.inter_gbps)
    bus = n_ch * (total / n_ch)
    ll, ll128 = p == 0, p == 1
    if algorithm == "ring":
        if ll:
            return min(k.ll_max_bw_gbps[scale], bus * k.ll_factor)
        if ll128:
            return min(bus * k.ll128_factor, n_ch * k.per_channel_max_ring_ll128_bw_gbps[scale])
        return bus
    bus = min(bus * k.tree_factor, n_ch * k.per_channel_max_tree_bw_gbps[scale])
    if ll:
        bus = min(bus / k.tree_ll_divisor, k.ll_max_bw_gbps[scale])
    elif ll128:
        factor = k.tree_ll128_factor_one_node if g.n_nodes == 1 else k.tree_ll128_factor_nodes
        bus = min(bus * factor, n_ch * k.per_channel_max_tree_ll128_bw_gbps[scale])
    return bus * k.tree_pattern_factor


def _latency_us(  # noqa: PLR0917 - private step of nccl_estimate
    c: Collective, algorithm: str, p: int, n: int, nsteps: int, g: _Graph, k: NcclConstants
) -> float:
    hw = k.hw_latency_us
    simple = p == 2
    intra_lat = hw[g.intra_link][algorithm][p]
    inter_algo = "tree" if g.ppn == 1 and algorithm not in ("nvls", "nvls_tree") else algorithm
    inter_lat = hw["net"][inter_algo][p] + k.latency_inter_us * (2 if simple else 1)
    base = k.base_latency_us[algorithm][p]
    if algorithm == "nvls":
        return intra_lat + (inter_lat if g.n_nodes > 1 else 0.0)
    ppn = n // g.n_nodes
    if algorithm == "collnet_direct":  # 0.4 us per peer: the arity's serialization
        return base + 2 * (min(1, ppn - 1) * intra_lat + (ppn - 1) * 0.4) + inter_lat
    if algorithm == "collnet_chain":
        return base + 2 * (ppn - 1) * intra_lat + inter_lat
    if algorithm == "nvls_tree":
        return base + intra_lat + 2 * (g.n_nodes.bit_length() - 1) * inter_lat
    if algorithm == "tree":
        ppn = n // g.n_nodes
        log_nodes = g.n_nodes.bit_length() - 1
        return base + 2 * ((ppn - 1) * intra_lat + log_nodes * inter_lat)
    if c in (C.BROADCAST, C.REDUCE):
        link = g.intra_link if g.n_nodes == 1 else "net"
        if k.same_channels:
            return base + hw[link]["ring"][p]
        return base + nsteps * hw[link]["tree" if simple else "ring"][p]
    if g.n_nodes == 1:
        return base + nsteps * intra_lat
    inter_steps = 2 * (g.n_nodes - 1) if c is C.ALLREDUCE else g.n_nodes - 1
    overhead = k.net_overhead_us * (k.net_overhead_simple_factor if simple else 1.0)
    return base + (nsteps - inter_steps) * max(intra_lat, overhead) + inter_steps * inter_lat


def nccl_time_s(  # noqa: PLR0917 - as nccl_estimate
    topology: nx.DiGraph[str],
    collective: Collective | str,
    algorithm: str,
    protocol: str,
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int,
    constants: NcclConstants = HOPPER,
    rank_nodes: tuple[str, ...] | None = None,
    bw_intra_bytes_per_s: float | None = None,
    bw_inter_bytes_per_s: float | None = None,
    router: Router | None = None,
) -> float:
    """NCCL's predicted time of one call in seconds (:func:`nccl_estimate`'s ``time_s``).

    >>> from simcoll.topology import switch_star
    >>> star = switch_star(8, link_bandwidth_bytes_per_s=300e9, link_latency_s=0.5e-6)
    >>> t = nccl_time_s(star, "allreduce", "ring", "LL", 8, 65536, n_channels=8)
    >>> round(t * 1e6, 6)  # 6.6 + 14 x 0.6 us, plus 64 KiB at min(141, 150) x 8/14 GB/s
    15.81339
    """
    return nccl_estimate(
        topology,
        collective,
        algorithm,
        protocol,
        n_ranks,
        size_bytes,
        n_channels=n_channels,
        constants=constants,
        rank_nodes=rank_nodes,
        bw_intra_bytes_per_s=bw_intra_bytes_per_s,
        bw_inter_bytes_per_s=bw_inter_bytes_per_s,
        router=router,
    ).time_s
