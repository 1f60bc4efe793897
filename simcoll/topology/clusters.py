"""Cluster builders: many servers on a switched fabric, and switchless torus and dragonfly.

:func:`fat_tree` and :func:`rail_optimized` repeat one server ("machine box") per node:
``gpus_per_node`` GPUs on an NVSwitch, and ``nics_per_node`` NICs reached over PCIe (see
:mod:`simcoll.topology._machine_box`). Ranks are node-major, server-internal node ids carry
the host (``"node3.nic5"``), and fabric switches are ``"leaf<j>"``, ``"spine<k>"``,
``"agg<pod>.<j>"`` and ``"core<k>"`` with their ``tier``. :func:`torus` and
:func:`dragonfly` are direct networks without servers. Like the builders of
:mod:`simcoll.topology.builders`, these are pure, keyword-only in their physical
parameters, and return a validated graph with ``graph.graph["name"]`` set.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.topology._machine_box import (
    Edges,
    add_machines,
    add_switches,
    as_link,
    check_bool,
    check_count,
    duplex,
    fabric_links,
    join_all,
    link,
    machine_box,
    uplinks,
)
from simcoll.topology.builders import _check_size, _largest, _link_attrs
from simcoll.topology.clos import clos_cluster, multi_plane
from simcoll.topology.schema import LinkKind, NodeKind, validate

__all__ = ["BUILDERS", "dragonfly", "fat_tree", "multi_plane", "rail_optimized", "torus"]


def fat_tree(
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
    r"""``n_nodes`` servers on a one-, two- or three-level fat tree (folded Clos) of switches.

    ::

         spine0 ... spine<u-1>          every leaf links once to every spine
           |  \       /  |
         leaf0  ...  leaf<L-1>          leaf_down_ports NICs each, in NIC order
         / | \        / | \
        node0.nic0 ...   node<n-1>.nic<m-1>

    The NICs, node-major, fill leaves ``leaf_down_ports`` at a time (the last leaf may
    be partly filled). Each leaf has ``u = ceil(leaf_down_ports / oversubscription)``
    uplinks. With ``levels=1`` there is one leaf; with ``levels=2`` there are ``u``
    spines; with ``levels=3`` the leaves are grouped ``leaves_per_pod`` per pod, each pod
    has ``u`` aggregation switches ``"agg<pod>.<j>"`` joined to every leaf of the pod,
    and each has ``v = ceil(leaves_per_pod / core_oversubscription)`` uplinks:
    aggregation switch ``j`` of every pod links to the core switches ``j * v`` .. ``(j +
    1) * v - 1`` (at ``core_oversubscription=1`` the tree is non-blocking above the
    leaves). A level that would join a single switch is left out: one leaf has no spine,
    one pod no core. Every fabric link has the NIC bandwidth. The wiring is
    :func:`simcoll.topology.clos.add_clos`'s.

    Parameters
    ----------
    n_nodes
        Number of servers, hosts ``"node0"``...; GPU ranks are node-major.
    gpus_per_node
        GPUs per server, ``"gpu<rank>"`` with ``transit=False``.
    nvlinks_per_gpu, nvlink_bandwidth_bytes_per_s, nvlink_latency_s
        A GPU's NVLinks to its server's ``"node<k>.nvsw"``, modelled as one link of
        ``nvlinks_per_gpu * nvlink_bandwidth_bytes_per_s`` per direction.
    nvls
        Whether the NVSwitch reduces in the network (NVLink SHARP); its ``reduces``.
    nics_per_node
        NICs per server; must divide ``gpus_per_node``. With one NIC per GPU, GPU ``i``
        links to NIC ``i`` over PCIe; otherwise each group of ``gpus_per_node //
        nics_per_node`` GPUs shares a PCIe switch ``"node<k>.pcie<i>"`` with NIC ``i``.
    nic_bandwidth_bytes_per_s, nic_latency_s
        Each NIC's link to its leaf; the bandwidth is also that of every fabric link.
    pcie_bandwidth_bytes_per_s, pcie_latency_s
        Every PCIe link (GPU to NIC, GPU to PCIe switch, PCIe switch to NIC).
    leaf_down_ports
        NICs per leaf switch.
    oversubscription
        Downlinks per uplink of a leaf, >= 1 (1 is non-blocking; 2 halves bisection).
    levels
        1 (one leaf, at most ``leaf_down_ports`` NICs), 2 (leaf, spine) or 3 (leaf,
        aggregation, core).
    leaves_per_pod
        Leaves per pod, with ``levels=3``.
    core_oversubscription
        Leaves per uplink of an aggregation switch, >= 1, with ``levels=3``.
    fabric_latency_s
        Latency of each switch-to-switch link.
    fabric_link_kind
        Technology of the NIC and switch-to-switch links (``LinkKind.ETHERNET`` for RoCE).
    sharp
        Whether the fabric switches reduce in the network (SHARP); their ``reduces``.

    Returns
    -------
    networkx.DiGraph
        ``n_nodes * gpus_per_node`` GPUs; fabric switches have ``tier`` 1 (leaf), 2
        (spine, aggregation) or 3 (core).

    Raises
    ------
    ConfigError
        Naming the argument: a count below 1, ``nics_per_node`` not dividing
        ``gpus_per_node``, ``levels`` not 1, 2 or 3 (or 1 with too many NICs), an
        oversubscription below 1, a bandwidth not finite and positive, a latency not
        finite and non-negative, a flag or kind of the wrong type, or a design past
        :data:`~simcoll.topology.builders.MAX_GPUS` GPUs or
        :data:`~simcoll.topology.builders.MAX_LINKS` links, before building.

    Examples
    --------
    >>> from simcoll.core.units import GB, Gbit, us
    >>> g = fat_tree(8, nvlinks_per_gpu=18, nvlink_bandwidth_bytes_per_s=25 * GB,
    ...     nvlink_latency_s=0.5 * us, nic_bandwidth_bytes_per_s=400 * Gbit,
    ...     nic_latency_s=1 * us, pcie_bandwidth_bytes_per_s=63 * GB, pcie_latency_s=0.5 * us,
    ...     fabric_latency_s=0.5 * us)
    >>> g.number_of_nodes(), g.number_of_edges(), g.graph["name"]
    (170, 512, 'fat_tree_8x8')
    >>> g.out_degree("leaf0"), g.out_degree("spine0"), g.edges["gpu0", "node0.nvsw"]["kind"]
    (64, 2, <LinkKind.NVLINK: 'nvlink'>)
    """
    params = dict(locals())  # this builder's parameters, as given
    return clos_cluster("fat_tree", per_nic_planes=False, **params)


def rail_optimized(
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
    rail_nodes_per_leaf: int = 32,
    oversubscription: float = 1.0,
    fabric_latency_s: float,
    fabric_link_kind: LinkKind = LinkKind.IB,
    sharp: bool = False,
) -> nx.DiGraph[str]:
    r"""``n_nodes`` servers on a rail-optimized leaf-spine fabric (DGX SuperPOD style).

    ::

              spine0  ...  spine<u-1>        every leaf links once to every spine
              /   |          |    \
         leaf0  leaf1 ... leaf7   leaf8 ...  rail leaves of group 0, then group 1
           |      |         |       |
        nic0 of  nic1 of  nic7 of  nic0 of
        node0..31 ...     node0..31 node32..

    The nodes form groups of ``rail_nodes_per_leaf``; in group ``g``, NIC ``i`` of every
    node (the NIC of local GPU ``i``, its "rail") links to leaf ``g * gpus_per_node +
    i``. GPUs of one rank-in-node in one group are one leaf apart; other pairs cross a
    spine (or the NVSwitch, inside a server). Each leaf has ``u =
    ceil(rail_nodes_per_leaf / oversubscription)`` uplinks, one to each of ``u``
    spines; spines are left out only when there is a single leaf.

    Parameters
    ----------
    n_nodes, gpus_per_node, nvlinks_per_gpu, nvlink_bandwidth_bytes_per_s, nvlink_latency_s
        As :func:`fat_tree`.
    nvls, nic_bandwidth_bytes_per_s, nic_latency_s, pcie_bandwidth_bytes_per_s
        As :func:`fat_tree`.
    pcie_latency_s, oversubscription, fabric_latency_s, fabric_link_kind, sharp
        As :func:`fat_tree`.
    nics_per_node
        Must equal ``gpus_per_node``: one NIC, and one rail, per GPU.
    rail_nodes_per_leaf
        Nodes per group, i.e. NICs per rail leaf.

    Returns
    -------
    networkx.DiGraph
        ``n_nodes * gpus_per_node`` GPUs and ``ceil(n_nodes / rail_nodes_per_leaf) *
        gpus_per_node`` leaves.

    Raises
    ------
    ConfigError
        As :func:`fat_tree`, and if ``nics_per_node != gpus_per_node``.

    Examples
    --------
    >>> from simcoll.core.units import GB, Gbit, us
    >>> g = rail_optimized(4, gpus_per_node=2, nics_per_node=2, nvlinks_per_gpu=18,
    ...     nvlink_bandwidth_bytes_per_s=25 * GB, nvlink_latency_s=0.5 * us,
    ...     nic_bandwidth_bytes_per_s=400 * Gbit, nic_latency_s=1 * us,
    ...     pcie_bandwidth_bytes_per_s=63 * GB, pcie_latency_s=0.5 * us,
    ...     rail_nodes_per_leaf=2, fabric_latency_s=0.5 * us)
    >>> g.graph["name"], sorted(g.successors("node3.nic1")), g.out_degree("spine0")
    ('rail_optimized_4x2', ['gpu7', 'leaf3'], 4)
    """
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
    if nics_per_node != gpus_per_node:
        raise ConfigError(
            f"must equal gpus_per_node ({gpus_per_node}) for one rail per GPU, got {nics_per_node}",
            field="nics_per_node",
        )
    counts = {"n_nodes": n_nodes, "gpus_per_node": gpus_per_node}
    _check_size(gpus=n_nodes * gpus_per_node, field=_largest(counts))
    check_count(rail_nodes_per_leaf, "rail_nodes_per_leaf")
    n_up = uplinks(rail_nodes_per_leaf, oversubscription)
    n_leaves = -(-n_nodes // rail_nodes_per_leaf) * gpus_per_node
    if n_leaves > 1:  # every leaf links to every spine
        _check_size(links=2 * n_leaves * n_up, field="rail_nodes_per_leaf")
    check_bool(sharp, "sharp")
    graph: nx.DiGraph[str] = nx.DiGraph(name=f"rail_optimized_{n_nodes}x{gpus_per_node}")
    nics = add_machines(graph, box, n_nodes)
    n_groups = math.ceil(n_nodes / rail_nodes_per_leaf)
    leaves = [f"leaf{j}" for j in range(n_groups * gpus_per_node)]
    add_switches(graph, leaves, tier=1, reduces=sharp)
    edges: Edges = []
    for index, nic in enumerate(nics):
        node, rail = divmod(index, nics_per_node)
        group = node // rail_nodes_per_leaf
        duplex(edges, nic, leaves[group * gpus_per_node + rail], nic_link)
    if len(leaves) > 1:
        spines = [f"spine{k}" for k in range(n_up)]
        add_switches(graph, spines, tier=2, reduces=sharp)
        join_all(edges, leaves, spines, fabric_link)
    graph.add_edges_from(edges)
    return validate(graph)


def torus(
    *,
    dim_x: int,
    dim_y: int = 1,
    dim_z: int = 1,
    link_bandwidth_bytes_per_s: float,
    link_latency_s: float,
    link_kind: LinkKind = LinkKind.NVLINK,
) -> nx.DiGraph[str]:
    """GPUs on a 1-, 2- or 3-D torus, each linked to its neighbours (TPU-pod style).

    ::

        gpu0 -- gpu1 -- gpu2 -- gpu3 --(wraps to gpu0)
         |       |       |       |
        gpu4 -- gpu5 -- gpu6 -- gpu7 --(wraps to gpu4)      dim_x=4, dim_y=2

    The GPU at ``(x, y, z)`` has rank ``x + dim_x * (y + dim_y * z)`` and one full-duplex
    link to ``(x + 1) mod dim_x`` (and likewise in y and z). A dimension of size 2 has
    one link between its two GPUs, not two; a dimension of size 1 has none. There are no
    switches: GPUs forward traffic for one another.

    Parameters
    ----------
    dim_x, dim_y, dim_z
        GPUs along each dimension, each >= 1.
    link_bandwidth_bytes_per_s, link_latency_s
        Each link, per direction.
    link_kind
        Technology of the links.

    Returns
    -------
    networkx.DiGraph
        ``dim_x * dim_y * dim_z`` GPUs, named ``"torus_<x>x<y>x<z>"``.

    Raises
    ------
    ConfigError
        If a dimension is below 1, or as :func:`~simcoll.topology.builders.ring`.

    Examples
    --------
    >>> from simcoll.core.units import GB, us
    >>> g = torus(dim_x=4, dim_y=4, dim_z=4, link_bandwidth_bytes_per_s=50 * GB,
    ...     link_latency_s=0.5 * us)
    >>> g.graph["name"], g.number_of_nodes(), g.number_of_edges()
    ('torus_4x4x4', 64, 384)
    >>> sorted(g.successors("gpu0"))
    ['gpu1', 'gpu12', 'gpu16', 'gpu3', 'gpu4', 'gpu48']
    """
    dims = (dim_x, dim_y, dim_z)
    for name, size in zip(("dim_x", "dim_y", "dim_z"), dims, strict=True):
        check_count(size, name)
    names = dict(zip(("dim_x", "dim_y", "dim_z"), dims, strict=True))
    _check_size(gpus=math.prod(dims), field=_largest(names))
    attrs = as_link(_link_attrs(link_kind, link_bandwidth_bytes_per_s, link_latency_s))
    graph: nx.DiGraph[str] = nx.DiGraph(name=f"torus_{dim_x}x{dim_y}x{dim_z}")
    graph.add_nodes_from(
        (f"gpu{rank}", {"kind": NodeKind.GPU, "rank": rank}) for rank in range(math.prod(dims))
    )
    strides = (1, dim_x, dim_x * dim_y)
    edges: Edges = []
    for z, y, x in itertools.product(range(dim_z), range(dim_y), range(dim_x)):
        point = (x, y, z)
        rank = x + dim_x * (y + dim_y * z)
        for axis, size in enumerate(dims):
            # Size 2: only the GPU at 0 links to the one at 1 (its "+1" and "-1" agree).
            if size > 2 or (size == 2 and point[axis] == 0):
                step = 1 if point[axis] + 1 < size else 1 - size
                duplex(edges, f"gpu{rank}", f"gpu{rank + step * strides[axis]}", attrs)
    graph.add_edges_from(edges)
    return validate(graph)


def dragonfly(
    *,
    routers_per_group: int,
    gpus_per_router: int,
    global_links_per_router: int,
    n_groups: int,
    injection_bandwidth_bytes_per_s: float,
    injection_latency_s: float,
    local_bandwidth_bytes_per_s: float,
    local_latency_s: float,
    global_bandwidth_bytes_per_s: float,
    global_latency_s: float,
    link_kind: LinkKind = LinkKind.ETHERNET,
) -> nx.DiGraph[str]:
    r"""A dragonfly (Kim, Dally, Scott and Abts, ISCA 2008): groups of routers, all-to-all.

    ::

        group 0: r0.0 == r0.1 == ... (all pairs)    gpus_per_router GPUs on each router
                   \
                    `-- one global link to each other group --> group 1, group 2, ...

    Group ``g`` has routers ``"r<g>.<a>"`` (switches, ``tier`` 1), every pair of them
    joined by a local link, and ``gpus_per_router`` GPUs on each router (ranks in group,
    router, GPU order, ``transit=False``). Every pair of groups is joined by exactly one
    global link: group ``i`` lists its peer groups ``j != i`` in increasing order, and
    its ``p``-th peer is served by its router ``p // global_links_per_router``; the link
    joins group ``i``'s router serving ``j`` to group ``j``'s router serving ``i``.
    Routers therefore have at most ``global_links_per_router`` global links, and exactly
    that many when ``n_groups = routers_per_group * global_links_per_router + 1``.

    Parameters
    ----------
    routers_per_group
        Routers per group (``a`` in the paper).
    gpus_per_router
        GPUs per router (``p``).
    global_links_per_router
        Global links per router at most (``h``).
    n_groups
        Number of groups (``g``), from 2 to ``routers_per_group * global_links_per_router
        + 1``.
    injection_bandwidth_bytes_per_s, injection_latency_s
        Each GPU's link to its router.
    local_bandwidth_bytes_per_s, local_latency_s
        Each router-to-router link inside a group.
    global_bandwidth_bytes_per_s, global_latency_s
        Each link between groups.
    link_kind
        Technology of every link.

    Returns
    -------
    networkx.DiGraph
        ``n_groups * routers_per_group * gpus_per_router`` GPUs, named
        ``"dragonfly_<g>x<a>x<p>"``.

    Raises
    ------
    ConfigError
        If a count is below 1, ``n_groups`` is out of range, a bandwidth is not finite
        and positive, a latency not finite and non-negative, or the kind has the wrong
        type.

    Examples
    --------
    >>> from simcoll.core.units import Gbit, us
    >>> speed = {f"{name}_bandwidth_bytes_per_s": 200 * Gbit
    ...     for name in ("injection", "local", "global")}
    >>> g = dragonfly(routers_per_group=4, gpus_per_router=2, global_links_per_router=2,
    ...     n_groups=9, injection_latency_s=1 * us, local_latency_s=0.5 * us,
    ...     global_latency_s=0.5 * us, **speed)
    >>> g.graph["name"], g.number_of_nodes(), sorted(g.successors("r0.1"))
    ('dragonfly_9x4x2', 108, ['gpu2', 'gpu3', 'r0.0', 'r0.2', 'r0.3', 'r3.0', 'r4.0'])
    """
    a, p, h = routers_per_group, gpus_per_router, global_links_per_router
    for name, count in (
        ("routers_per_group", a),
        ("gpus_per_router", p),
        ("global_links_per_router", h),
    ):
        check_count(count, name)
    if (
        isinstance(n_groups, bool)
        or not isinstance(n_groups, int)
        or not 2 <= n_groups <= a * h + 1
    ):
        raise ConfigError(
            f"must be an integer from 2 to routers_per_group * global_links_per_router + 1 "
            f"= {a * h + 1}, got {n_groups!r}",
            field="n_groups",
        )
    counts = {"n_groups": n_groups, "routers_per_group": a, "gpus_per_router": p}
    routers = n_groups * a
    _check_size(
        gpus=routers * p,
        links=2 * routers * p + routers * (a - 1) + n_groups * (n_groups - 1),
        field=_largest(counts),
    )
    injection, local, global_ = (
        link(
            link_kind, (f"{name}_bandwidth_bytes_per_s", bandwidth), (f"{name}_latency_s", latency)
        )
        for name, bandwidth, latency in (
            ("injection", injection_bandwidth_bytes_per_s, injection_latency_s),
            ("local", local_bandwidth_bytes_per_s, local_latency_s),
            ("global", global_bandwidth_bytes_per_s, global_latency_s),
        )
    )
    graph: nx.DiGraph[str] = nx.DiGraph(name=f"dragonfly_{n_groups}x{a}x{p}")
    graph.add_nodes_from(
        (f"gpu{rank}", {"kind": NodeKind.GPU, "rank": rank, "transit": False})
        for rank in range(n_groups * a * p)
    )
    add_switches(
        graph, [f"r{g}.{r}" for g in range(n_groups) for r in range(a)], tier=1, reduces=False
    )
    edges: Edges = []
    for g, r in itertools.product(range(n_groups), range(a)):
        for k in range(p):
            duplex(edges, f"gpu{(g * a + r) * p + k}", f"r{g}.{r}", injection)
        for other in range(r + 1, a):
            duplex(edges, f"r{g}.{r}", f"r{g}.{other}", local)
    for i, j in itertools.combinations(range(n_groups), 2):
        # j is peer j - 1 of group i (i < j skips i itself); i is peer i of group j.
        duplex(edges, f"r{i}.{(j - 1) // h}", f"r{j}.{i // h}", global_)
    graph.add_edges_from(edges)
    return validate(graph)


BUILDERS: dict[str, Callable[..., nx.DiGraph[str]]] = {
    "fat_tree": fat_tree,
    "multi_plane": multi_plane,
    "rail_optimized": rail_optimized,
    "torus": torus,
    "dragonfly": dragonfly,
}
"""The cluster builders by the name a topology file gives in its ``builder`` key."""
