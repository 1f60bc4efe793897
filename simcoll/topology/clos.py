r"""Folded-Clos fabrics of one, two or three switch tiers, and fabrics of many planes.

:func:`add_clos` wires a list of NICs to a folded Clos (a fat tree): leaves of
``leaf_down_ports`` NICs; above them spines, or pods of leaves under aggregation switches
under cores. :func:`~simcoll.topology.clusters.fat_tree` puts every NIC of a cluster on
one such fabric; :func:`multi_plane` gives each NIC index of the servers a fabric of its
own, a *plane*, as large clusters are now built (each NIC of a server on a different
plane, planes joined only through the servers' NVLink):

- DeepSeek's multi-plane fat tree (Zhao et al., "Insights into DeepSeek-V3", ISCA 2025):
  eight planes of two-tier fat trees of 64-port 400 Gbit/s InfiniBand switches, one
  plane per GPU-NIC pair, up to 16,384 GPUs; three tiers per plane go further;
- the rail-only network (Wang et al., "How to Build Low-cost Networks for Large Language
  Models (without Sacrificing Performance)", 2023): every rail (the GPUs of one local
  index) on a network of its own and no spine joining the rails; traffic between rails
  crosses the NVLink domain of a server first, as NCCL's PXN forwards it. That is this
  fabric with one plane per rail.

Switch names and tiers: one tier is ``"leaf0"`` (``tier`` 1); two are ``"leaf<j>"`` and
``"spine<k>"`` (``tier`` 2); three are ``"leaf<j>"``, ``"agg<pod>.<j>"`` (2) and
``"core<k>"`` (3). Plane ``p`` prefixes its switches with ``"plane<p>."``. A tier that
would join a single switch is left out: one leaf has no spine, one pod no core.

Bisection: a leaf has ``u = ceil(leaf_down_ports / oversubscription)`` uplinks and an
aggregation switch ``v = ceil(leaves_per_pod / core_oversubscription)``, so a pod's
links to the cores carry ``1 / (oversubscription x core_oversubscription)`` of what its
NICs can send.

>>> from simcoll.core.units import GB, Gbit, us
>>> g = multi_plane(4, gpus_per_node=2, nics_per_node=2, nvlinks_per_gpu=18,
...     nvlink_bandwidth_bytes_per_s=25 * GB, nvlink_latency_s=0.5 * us,
...     nic_bandwidth_bytes_per_s=400 * Gbit, nic_latency_s=1 * us,
...     pcie_bandwidth_bytes_per_s=63 * GB, pcie_latency_s=0.5 * us,
...     leaf_down_ports=2, fabric_latency_s=0.5 * us)
>>> g.graph["name"], sorted(g.successors("plane1.leaf0"))
('multi_plane_4x2', ['node0.nic1', 'node1.nic1', 'plane1.spine0', 'plane1.spine1'])
>>> sorted(n for n in g if n.startswith("plane0."))
['plane0.leaf0', 'plane0.leaf1', 'plane0.spine0', 'plane0.spine1']
"""

from __future__ import annotations

import math

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.topology._machine_box import (
    Edges,
    Link,
    add_machines,
    add_switches,
    check_bool,
    check_count,
    duplex,
    fabric_links,
    join_all,
    machine_box,
    uplinks,
)
from simcoll.topology.builders import _check_size, _largest
from simcoll.topology.schema import LinkKind, validate

__all__ = ["ClosShape", "add_clos", "clos_cluster", "clos_links", "multi_plane"]


class ClosShape:
    """A checked folded Clos: its tiers, ports per leaf and the uplinks of each tier.

    >>> shape = ClosShape(levels=3, leaf_down_ports=32, oversubscription=1.0,
    ...     leaves_per_pod=32, core_oversubscription=2.0)
    >>> shape.leaf_uplinks, shape.agg_uplinks
    (32, 16)
    """

    __slots__ = ("agg_uplinks", "leaf_down_ports", "leaf_uplinks", "leaves_per_pod", "levels")

    def __init__(
        self,
        *,
        levels: int,
        leaf_down_ports: int,
        oversubscription: float,
        leaves_per_pod: int,
        core_oversubscription: float,
    ) -> None:
        if isinstance(levels, bool) or levels not in (1, 2, 3):
            raise ConfigError(f"must be 1, 2 or 3, got {levels!r}", field="levels")
        check_count(leaf_down_ports, "leaf_down_ports")
        check_count(leaves_per_pod, "leaves_per_pod")
        self.levels = levels
        self.leaf_down_ports = leaf_down_ports
        self.leaves_per_pod = leaves_per_pod
        self.leaf_uplinks = uplinks(leaf_down_ports, oversubscription)
        self.agg_uplinks = uplinks(
            leaves_per_pod, core_oversubscription, field="core_oversubscription"
        )

    def n_leaves(self, n_nics: int) -> int:
        """Leaves for ``n_nics`` NICs; a one-tier fabric refuses more than one leaf holds."""
        leaves = math.ceil(n_nics / self.leaf_down_ports)
        if self.levels == 1 and leaves > 1:
            raise ConfigError(
                f"one tier is one switch of {self.leaf_down_ports} ports, too few for "
                f"{n_nics} NICs; use levels = 2 or more leaf_down_ports",
                field="levels",
            )
        return leaves


def clos_links(shape: ClosShape, n_nics: int) -> int:
    """Directed links of the fabric :func:`add_clos` builds for ``n_nics`` NICs, NICs'
    own cables included: known before anything is built.

    >>> shape = ClosShape(levels=2, leaf_down_ports=32, oversubscription=1.0,
    ...     leaves_per_pod=16, core_oversubscription=1.0)
    >>> clos_links(shape, 128)  # 128 NIC cables, 4 leaves x 32 spines, both directions
    512
    """
    leaves = shape.n_leaves(n_nics)
    cables = n_nics
    if leaves > 1 and shape.levels == 2:
        cables += leaves * shape.leaf_uplinks
    elif leaves > 1 and shape.levels == 3:
        pods = math.ceil(leaves / shape.leaves_per_pod)
        cables += leaves * shape.leaf_uplinks
        if pods > 1:
            cables += pods * shape.leaf_uplinks * shape.agg_uplinks
    return 2 * cables


def add_clos(
    graph: nx.DiGraph[str],
    edges: Edges,
    nics: list[str],
    shape: ClosShape,
    *,
    prefix: str,
    nic_link: Link,
    fabric_link: Link,
    sharp: bool,
) -> None:
    """Add to ``graph`` the switches of one fabric over ``nics`` (in order, filling each
    leaf before the next), and append its links to ``edges`` (see the module docstring)."""
    leaves = [f"{prefix}leaf{j}" for j in range(shape.n_leaves(len(nics)))]
    for index, nic in enumerate(nics):
        duplex(edges, nic, leaves[index // shape.leaf_down_ports], nic_link)
    add_switches(graph, leaves, tier=1, reduces=sharp)
    n_up = shape.leaf_uplinks
    if len(leaves) > 1 and shape.levels == 2:
        spines = [f"{prefix}spine{k}" for k in range(n_up)]
        add_switches(graph, spines, tier=2, reduces=sharp)
        join_all(edges, leaves, spines, fabric_link)
    elif len(leaves) > 1 and shape.levels == 3:
        per_pod = shape.leaves_per_pod
        pods = [leaves[p : p + per_pod] for p in range(0, len(leaves), per_pod)]
        aggs = [[f"{prefix}agg{p}.{j}" for j in range(n_up)] for p in range(len(pods))]
        add_switches(graph, [agg for pod in aggs for agg in pod], tier=2, reduces=sharp)
        for pod_leaves, pod_aggs in zip(pods, aggs, strict=True):
            join_all(edges, pod_leaves, pod_aggs, fabric_link)
        if len(pods) > 1:
            block = shape.agg_uplinks
            cores = [f"{prefix}core{k}" for k in range(n_up * block)]
            add_switches(graph, cores, tier=3, reduces=sharp)
            for pod_aggs in aggs:
                for j, agg in enumerate(pod_aggs):
                    join_all(edges, [agg], cores[j * block : (j + 1) * block], fabric_link)


def multi_plane(
    n_nodes: int,
    *,
    gpus_per_node: int = 8,
    nvlinks_per_gpu: int,
    nvlink_bandwidth_bytes_per_s: float,
    nvlink_latency_s: float,
    nvls: bool = False,
    nics_per_node: int = 8,
    nic_bandwidth_bytes_per_s: float,
    nic_latency_s: float,
    pcie_bandwidth_bytes_per_s: float,
    pcie_latency_s: float,
    leaf_down_ports: int = 32,
    oversubscription: float = 1.0,
    levels: int = 2,
    leaves_per_pod: int = 16,
    core_oversubscription: float = 1.0,
    fabric_latency_s: float,
    fabric_link_kind: LinkKind = LinkKind.IB,
    sharp: bool = False,
) -> nx.DiGraph[str]:
    r"""``n_nodes`` servers whose NIC ``i`` all sit on plane ``i``, a fabric of its own.

    ::

        plane0: leaf0 .. spine0 ..      plane7: leaf0 .. spine0 ..
                 |                                |
        node0.nic0 node1.nic0 ...       node0.nic7 node1.nic7 ...

    Plane ``p`` is a folded Clos (:func:`add_clos`) over NIC ``p`` of every server, in
    node order, with ``levels`` tiers; no link joins two planes, so a GPU reaches a NIC of
    another plane only through its server's NVLink (PXN), as on a rail-only network.

    Parameters
    ----------
    n_nodes, gpus_per_node, nvlinks_per_gpu, nvlink_bandwidth_bytes_per_s, nvlink_latency_s
        As :func:`~simcoll.topology.clusters.fat_tree`.
    nvls, nics_per_node, nic_bandwidth_bytes_per_s, nic_latency_s
        As :func:`~simcoll.topology.clusters.fat_tree`; ``nics_per_node`` is the number
        of planes.
    pcie_bandwidth_bytes_per_s, pcie_latency_s, fabric_latency_s, fabric_link_kind, sharp
        As :func:`~simcoll.topology.clusters.fat_tree`.
    leaf_down_ports, oversubscription, leaves_per_pod
        Each plane's leaves, as :func:`~simcoll.topology.clusters.fat_tree`.
    levels
        Switch tiers of each plane: 1 (one switch, at most ``leaf_down_ports`` servers),
        2 (leaves and spines) or 3 (leaves, aggregation switches in pods, cores).
    core_oversubscription
        With ``levels=3``: a pod's leaves per uplink of its aggregation switches, >= 1.

    Returns
    -------
    networkx.DiGraph
        ``n_nodes * gpus_per_node`` GPUs, named ``"multi_plane_<n>x<gpus>"``.

    Raises
    ------
    ConfigError
        As :func:`~simcoll.topology.clusters.fat_tree`; also a one-tier plane too small
        for the servers, and a design past :data:`~simcoll.topology.builders.MAX_GPUS`
        GPUs or :data:`~simcoll.topology.builders.MAX_LINKS` links, before building.
    """
    params = dict(locals())  # this builder's parameters, as given
    return clos_cluster("multi_plane", per_nic_planes=True, **params)


def clos_cluster(
    name: str,
    n_nodes: int,
    *,
    per_nic_planes: bool,
    gpus_per_node: int,
    nvlinks_per_gpu: int,
    nvlink_bandwidth_bytes_per_s: float,
    nvlink_latency_s: float,
    nvls: bool,
    nics_per_node: int,
    nic_bandwidth_bytes_per_s: float,
    nic_latency_s: float,
    pcie_bandwidth_bytes_per_s: float,
    pcie_latency_s: float,
    leaf_down_ports: int,
    oversubscription: float,
    levels: int,
    leaves_per_pod: int,
    core_oversubscription: float,
    fabric_latency_s: float,
    fabric_link_kind: LinkKind,
    sharp: bool,
) -> nx.DiGraph[str]:
    """The servers of :func:`~simcoll.topology.clusters.fat_tree` and :func:`multi_plane`
    (their parameters) on one Clos of every NIC, or with ``per_nic_planes`` on one Clos
    per NIC index (``plane<i>.``); the design's size is checked before anything is built."""
    check_count(n_nodes, "n_nodes")
    box = machine_box(
        gpus_per_node=gpus_per_node,
        nvlinks_per_gpu=nvlinks_per_gpu,
        nvlink_bandwidth_bytes_per_s=nvlink_bandwidth_bytes_per_s,
        nvlink_latency_s=nvlink_latency_s,
        nvls=nvls,
        nics_per_node=nics_per_node,
        pcie_bandwidth_bytes_per_s=pcie_bandwidth_bytes_per_s,
        pcie_latency_s=pcie_latency_s,
    )
    nic_link, fabric_link = fabric_links(
        fabric_link_kind, nic_bandwidth_bytes_per_s, nic_latency_s, fabric_latency_s
    )
    shape = ClosShape(
        levels=levels,
        leaf_down_ports=leaf_down_ports,
        oversubscription=oversubscription,
        leaves_per_pod=leaves_per_pod,
        core_oversubscription=core_oversubscription,
    )
    check_bool(sharp, "sharp")
    planes = nics_per_node if per_nic_planes else 1
    counts = {"n_nodes": n_nodes, "gpus_per_node": gpus_per_node}
    _check_size(
        gpus=n_nodes * gpus_per_node,
        links=server_links(n_nodes, gpus_per_node, nics_per_node)
        + planes * clos_links(shape, n_nodes * nics_per_node // planes),
        field=_largest(counts),
    )
    graph: nx.DiGraph[str] = nx.DiGraph(name=f"{name}_{n_nodes}x{gpus_per_node}")
    nics = add_machines(graph, box, n_nodes)
    edges: Edges = []
    for plane in range(planes):
        add_clos(
            graph,
            edges,
            nics[plane::planes],
            shape,
            prefix=f"plane{plane}." if per_nic_planes else "",
            nic_link=nic_link,
            fabric_link=fabric_link,
            sharp=sharp,
        )
    graph.add_edges_from(edges)
    return validate(graph)


def server_links(n_nodes: int, gpus_per_node: int, nics_per_node: int) -> int:
    """Directed links inside ``n_nodes`` machine boxes: each GPU's NVLink and PCIe link,
    and each PCIe switch's link to its NIC where GPUs share one.

    >>> server_links(2, 8, 8), server_links(2, 8, 4)
    (64, 80)
    """
    shared = nics_per_node if gpus_per_node > nics_per_node else 0
    return 2 * n_nodes * (2 * gpus_per_node + shared)
