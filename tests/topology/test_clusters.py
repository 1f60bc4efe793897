"""Tests of simcoll.topology.clusters: closed-form counts, bisection, hops, files, errors."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from simcoll.core.errors import ConfigError
from simcoll.topology import builders, io
from simcoll.topology.clusters import (
    BUILDERS,
    dragonfly,
    fat_tree,
    multi_plane,
    rail_optimized,
    torus,
)
from simcoll.topology.schema import LinkKind, NodeKind, gpu_nodes

TOPOLOGIES = Path(__file__).parents[2] / "topologies"
NVLINK_LINK_BYTES_PER_S = 25e9
NVLINKS_PER_GPU = 18
NIC_BYTES_PER_S = 50e9  # 400 Gbit/s
PCIE_BYTES_PER_S = 63e9
NVLINK_LATENCY_S, PCIE_LATENCY_S, NIC_LATENCY_S, FABRIC_LATENCY_S = 1e-7, 2e-7, 1e-6, 5e-7
BOX: dict[str, Any] = {
    "nvlinks_per_gpu": NVLINKS_PER_GPU,
    "nvlink_bandwidth_bytes_per_s": NVLINK_LINK_BYTES_PER_S,
    "nvlink_latency_s": NVLINK_LATENCY_S,
    "nic_bandwidth_bytes_per_s": NIC_BYTES_PER_S,
    "nic_latency_s": NIC_LATENCY_S,
    "pcie_bandwidth_bytes_per_s": PCIE_BYTES_PER_S,
    "pcie_latency_s": PCIE_LATENCY_S,
    "fabric_latency_s": FABRIC_LATENCY_S,
}
TORUS_LINK: dict[str, Any] = {"link_bandwidth_bytes_per_s": 5e10, "link_latency_s": 5e-7}
DRAGONFLY_LINKS: dict[str, Any] = {
    "injection_bandwidth_bytes_per_s": 25e9,
    "injection_latency_s": 1e-6,
    "local_bandwidth_bytes_per_s": 25e9,
    "local_latency_s": 5e-7,
    "global_bandwidth_bytes_per_s": 25e9,
    "global_latency_s": 5e-7,
}
SMALL: dict[str, Callable[[], nx.DiGraph[str]]] = {
    "fat_tree": lambda: fat_tree(3, gpus_per_node=4, nics_per_node=2, leaf_down_ports=4, **BOX),
    "fat_tree_3": lambda: fat_tree(
        4, gpus_per_node=2, nics_per_node=2, leaf_down_ports=2, levels=3, leaves_per_pod=2, **BOX
    ),
    "rail_optimized": lambda: rail_optimized(
        3, gpus_per_node=2, nics_per_node=2, rail_nodes_per_leaf=2, **BOX
    ),
    "torus": lambda: torus(dim_x=3, dim_y=2, **TORUS_LINK),
    "dragonfly": lambda: dragonfly(
        routers_per_group=2,
        gpus_per_router=2,
        global_links_per_router=1,
        n_groups=3,
        **DRAGONFLY_LINKS,
    ),
}


def _kinds(graph: nx.DiGraph[str]) -> tuple[Counter[NodeKind], Counter[LinkKind]]:
    nodes = Counter(attrs["kind"] for _, attrs in graph.nodes(data=True))
    edges = Counter(attrs["kind"] for _, _, attrs in graph.edges(data=True))
    return nodes, edges


def _hops(graph: nx.DiGraph[str], a: int, b: int) -> int:
    """Fewest links from gpu<a> to gpu<b>, crossing no node with ``transit=False``."""
    ends = {f"gpu{a}", f"gpu{b}"}
    view = nx.subgraph_view(
        graph, filter_node=lambda node: node in ends or graph.nodes[node].get("transit", True)
    )
    return int(nx.shortest_path_length(view, f"gpu{a}", f"gpu{b}"))


def _bisection_bytes_per_s(graph: nx.DiGraph[str]) -> float:
    """Max flow from the GPUs of ranks < n/2 to the others, links at their bandwidth."""
    gpus = gpu_nodes(graph)
    flow = graph.copy()
    half = len(gpus) // 2
    flow.add_edges_from(("source", gpu) for gpu in gpus[:half])  # no capacity: infinite
    flow.add_edges_from((gpu, "sink") for gpu in gpus[half:])
    return float(nx.maximum_flow_value(flow, "source", "sink", capacity="bandwidth_bytes_per_s"))


def _neighbours_of_kind(graph: nx.DiGraph[str], node: str, kind: NodeKind) -> int:
    return sum(graph.nodes[other]["kind"] is kind for other in graph.successors(node))


# --- fat tree -------------------------------------------------------------------------

# (n_nodes, gpus_per_node, nics_per_node, leaf_down_ports, oversubscription, levels, pod)
FAT_TREES = [
    (1, 8, 8, 32, 1.0, 2, 16),  # one leaf: no spine
    (4, 8, 8, 32, 1.0, 2, 16),
    (16, 8, 8, 32, 1.0, 2, 16),
    (16, 8, 8, 32, 2.0, 2, 16),
    (5, 8, 4, 8, 3.0, 2, 16),  # PCIe switches; a partly filled last leaf
    (7, 4, 1, 3, 1.5, 2, 16),  # a single NIC per node
    (4, 8, 8, 8, 1.0, 3, 16),  # three levels, one pod: no core
    (40, 8, 8, 8, 1.0, 3, 4),
    (12, 8, 8, 16, 2.0, 3, 2),
    (9, 8, 8, 16, 1.0, 3, 2),  # a partly filled last pod
]


def _fat_tree(case: tuple[int, int, int, int, float, int, int]) -> nx.DiGraph[str]:
    n, gpus, nics, down, over, levels, pod = case
    return fat_tree(
        n,
        gpus_per_node=gpus,
        nics_per_node=nics,
        leaf_down_ports=down,
        oversubscription=over,
        levels=levels,
        leaves_per_pod=pod,
        **BOX,
    )


@pytest.mark.parametrize("case", FAT_TREES, ids=str)
def test_fat_tree_counts(case: tuple[int, int, int, int, float, int, int]) -> None:
    n, gpus, nics, down, over, levels, pod = case
    n_nics = n * nics
    pcie_switches = n * nics if nics < gpus else 0
    n_leaves = math.ceil(n_nics / down)
    up = math.ceil(down / over)
    n_pods = math.ceil(n_leaves / pod)
    if levels == 2:
        middle = up if n_leaves > 1 else 0
        cores = 0
        cables = n_leaves * middle
    else:
        middle = n_pods * up if n_leaves > 1 else 0
        cores = up * pod if n_pods > 1 else 0
        cables = (n_leaves * up if n_leaves > 1 else 0) + (n_pods * up * pod if cores else 0)
    nodes, edges = _kinds(_fat_tree(case))
    assert nodes == {
        NodeKind.GPU: n * gpus,
        NodeKind.NVSWITCH: n,
        NodeKind.NIC: n_nics,
        NodeKind.SWITCH: n_leaves + middle + cores,
        **({NodeKind.PCIE_SWITCH: pcie_switches} if pcie_switches else {}),
    }
    assert edges == {
        LinkKind.NVLINK: 2 * n * gpus,
        LinkKind.PCIE: 2 * n * gpus + 2 * pcie_switches,
        LinkKind.IB: 2 * n_nics + 2 * cables,
    }


@pytest.mark.parametrize("case", FAT_TREES, ids=str)
def test_fat_tree_switch_ports(case: tuple[int, int, int, int, float, int, int]) -> None:
    n, _, nics, down, over, levels, pod = case
    graph = _fat_tree(case)
    n_leaves = math.ceil(n * nics / down)
    up = math.ceil(down / over) if n_leaves > 1 else 0
    n_pods = math.ceil(n_leaves / pod)
    for j in range(n_leaves):
        leaf = f"leaf{j}"
        filled = min(down, n * nics - j * down)
        assert _neighbours_of_kind(graph, leaf, NodeKind.NIC) == filled
        assert _neighbours_of_kind(graph, leaf, NodeKind.SWITCH) == up
        assert graph.in_degree(leaf) == graph.out_degree(leaf) == filled + up
        assert graph.nodes[leaf]["tier"] == 1
    tiers = Counter(attrs.get("tier") for _, attrs in graph.nodes(data=True))
    if levels == 2:
        assert tiers[2] == up
        assert all(graph.out_degree(f"spine{k}") == n_leaves for k in range(up))
        return
    for p in range(n_pods if n_leaves > 1 else 0):
        pod_leaves = min(pod, n_leaves - p * pod)
        for j in range(up):
            agg = f"agg{p}.{j}"
            assert graph.out_degree(agg) == pod_leaves + (pod if n_pods > 1 else 0)
            assert graph.nodes[agg]["tier"] == 2
    cores = [node for node, attrs in graph.nodes(data=True) if attrs.get("tier") == 3]
    assert len(cores) == (up * pod if n_pods > 1 else 0)
    assert all(graph.out_degree(core) == n_pods for core in cores)


def test_fat_tree_core_blocks() -> None:
    # Aggregation switch j of every pod reaches cores j*pod .. (j+1)*pod - 1, nothing else.
    graph = _fat_tree((12, 8, 8, 16, 2.0, 3, 2))
    pod, up = 2, 8
    for p, j in itertools.product(range(3), range(up)):
        cores = {node for node in graph.successors(f"agg{p}.{j}") if node.startswith("core")}
        assert cores == {f"core{k}" for k in range(j * pod, (j + 1) * pod)}


@pytest.mark.parametrize("levels", [2, 3])
@pytest.mark.parametrize("n_nodes", [8, 16])
@pytest.mark.parametrize("over", [1.0, 2.0])
def test_fat_tree_bisection(levels: int, n_nodes: int, over: float) -> None:
    # 32 NICs per leaf and one pod per leaf, so each half of the ranks fills whole leaves
    # (and pods); at 1:1 the NICs of one half are the cut, at 2:1 the leaves' uplinks.
    graph = fat_tree(n_nodes, levels=levels, leaves_per_pod=1, oversubscription=over, **BOX)
    n_gpus = n_nodes * 8
    expected = n_gpus / 2 * NIC_BYTES_PER_S / over
    assert _bisection_bytes_per_s(graph) == pytest.approx(expected, rel=1e-12)


def test_fat_tree_hops_two_levels() -> None:
    # 4 nodes x 4 GPUs, one NIC per GPU, 8 NICs per leaf: nodes 0-1 on leaf0, 2-3 on leaf1.
    graph = fat_tree(4, gpus_per_node=4, nics_per_node=4, leaf_down_ports=8, **BOX)
    for a, b in itertools.permutations(range(16), 2):
        if a // 4 == b // 4:
            expected = 2  # gpu - nvsw - gpu
        elif a // 8 == b // 8:
            expected = 4  # gpu - nic - leaf - nic - gpu
        else:
            expected = 6  # ... leaf - spine - leaf ...
        assert _hops(graph, a, b) == expected


def test_fat_tree_hops_three_levels() -> None:
    # 8 nodes x 2 GPUs, one NIC per GPU, 2 NICs per leaf (one node), 2 leaves per pod.
    graph = fat_tree(
        8, gpus_per_node=2, nics_per_node=2, leaf_down_ports=2, levels=3, leaves_per_pod=2, **BOX
    )
    for a, b in itertools.permutations(range(16), 2):
        if a // 2 == b // 2:
            expected = 2
        elif a // 4 == b // 4:
            expected = 6  # leaf - agg - leaf
        else:
            expected = 8  # leaf - agg - core - agg - leaf
        assert _hops(graph, a, b) == expected


def test_fat_tree_hops_through_pcie_switches() -> None:
    # 4 GPUs and 2 NICs per node: gpu - pcie - nic - leaf ...; 4 NICs (2 nodes) per leaf.
    graph = fat_tree(4, gpus_per_node=4, nics_per_node=2, leaf_down_ports=4, **BOX)
    for a, b in itertools.permutations(range(16), 2):
        if a // 4 == b // 4:
            expected = 2
        elif a // 8 == b // 8:
            expected = 6  # gpu - pcie - nic - leaf - nic - pcie - gpu
        else:
            expected = 8
        assert _hops(graph, a, b) == expected
    assert set(graph.successors("node1.pcie1")) == {"gpu6", "gpu7", "node1.nic1"}


# --- rail-optimized -------------------------------------------------------------------

# (n_nodes, gpus_per_node, rail_nodes_per_leaf, oversubscription)
RAILS = [(1, 1, 32, 1.0), (1, 8, 32, 1.0), (32, 8, 32, 1.0), (70, 8, 32, 2.0), (5, 4, 2, 1.5)]


@pytest.mark.parametrize("case", RAILS, ids=str)
def test_rail_optimized_counts_and_ports(case: tuple[int, int, int, float]) -> None:
    n, gpus, per_leaf, over = case
    graph = rail_optimized(
        n,
        gpus_per_node=gpus,
        nics_per_node=gpus,
        rail_nodes_per_leaf=per_leaf,
        oversubscription=over,
        **BOX,
    )
    n_groups = math.ceil(n / per_leaf)
    n_leaves = n_groups * gpus
    spines = math.ceil(per_leaf / over) if n_leaves > 1 else 0
    nodes, edges = _kinds(graph)
    assert nodes == {
        NodeKind.GPU: n * gpus,
        NodeKind.NVSWITCH: n,
        NodeKind.NIC: n * gpus,
        NodeKind.SWITCH: n_leaves + spines,
    }
    assert edges == {
        LinkKind.NVLINK: 2 * n * gpus,
        LinkKind.PCIE: 2 * n * gpus,
        LinkKind.IB: 2 * n * gpus + 2 * n_leaves * spines,
    }
    for g, rail in itertools.product(range(n_groups), range(gpus)):
        leaf = f"leaf{g * gpus + rail}"
        members = range(g * per_leaf, min(n, (g + 1) * per_leaf))
        nics = {f"node{k}.nic{rail}" for k in members}
        assert {v for v in graph.successors(leaf) if v.startswith("node")} == nics
        assert graph.out_degree(leaf) == len(nics) + spines
    assert all(graph.out_degree(f"spine{k}") == n_leaves for k in range(spines))


@pytest.mark.parametrize("over", [1.0, 2.0])
def test_rail_optimized_bisection(over: float) -> None:
    # Two groups of 4 nodes: the low half of the ranks is group 0, its 8 rail leaves.
    graph = rail_optimized(8, rail_nodes_per_leaf=4, oversubscription=over, **BOX)
    expected = 64 / 2 * NIC_BYTES_PER_S / over
    assert _bisection_bytes_per_s(graph) == pytest.approx(expected, rel=1e-12)


def test_rail_optimized_hops() -> None:
    gpus, per_leaf = 4, 2
    graph = rail_optimized(
        6, gpus_per_node=gpus, nics_per_node=gpus, rail_nodes_per_leaf=per_leaf, **BOX
    )
    for a, b in itertools.permutations(range(6 * gpus), 2):
        (node_a, rail_a), (node_b, rail_b) = divmod(a, gpus), divmod(b, gpus)
        if node_a == node_b:
            expected = 2  # NVSwitch
        elif rail_a == rail_b and node_a // per_leaf == node_b // per_leaf:
            expected = 4  # one rail leaf
        else:
            expected = 6  # leaf - spine - leaf, same rail or not
        assert _hops(graph, a, b) == expected


# --- machine box and fabric attributes ------------------------------------------------


@pytest.mark.parametrize(
    ("builder", "kind", "nvls", "sharp"),
    [
        (fat_tree, LinkKind.IB, True, False),
        (fat_tree, LinkKind.ETHERNET, False, True),
        (rail_optimized, LinkKind.ETHERNET, True, True),
    ],
)
def test_machine_box_and_fabric_attributes(
    builder: Callable[..., nx.DiGraph[str]], kind: LinkKind, nvls: bool, sharp: bool
) -> None:
    graph = builder(
        3, gpus_per_node=2, nics_per_node=2, fabric_link_kind=kind, nvls=nvls, sharp=sharp, **BOX
    )
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] is NodeKind.SWITCH:
            assert "host" not in attrs
            assert attrs["reduces"] is sharp
            assert attrs["tier"] in (1, 2)
            continue
        assert node.startswith(attrs["host"] + ".") or attrs["kind"] is NodeKind.GPU
        assert "tier" not in attrs
    for rank in range(6):
        gpu = graph.nodes[f"gpu{rank}"]
        assert (gpu["rank"], gpu["host"], gpu["transit"]) == (rank, f"node{rank // 2}", False)
    assert graph.nodes["node2.nvsw"]["reduces"] is nvls
    nvlink = graph.edges["gpu5", "node2.nvsw"]
    assert nvlink == {
        "kind": LinkKind.NVLINK,
        "bandwidth_bytes_per_s": NVLINKS_PER_GPU * NVLINK_LINK_BYTES_PER_S,
        "latency_s": NVLINK_LATENCY_S,
    }
    assert graph.edges["node2.nic1", "gpu5"] == {
        "kind": LinkKind.PCIE,
        "bandwidth_bytes_per_s": PCIE_BYTES_PER_S,
        "latency_s": PCIE_LATENCY_S,
    }
    nic_link = {"kind": kind, "bandwidth_bytes_per_s": NIC_BYTES_PER_S}
    fabric = [
        attrs
        for u, v, attrs in graph.edges(data=True)
        if graph.nodes[u]["kind"] is NodeKind.SWITCH or graph.nodes[v]["kind"] is NodeKind.SWITCH
    ]
    assert fabric
    for attrs in fabric:
        assert attrs in (
            {**nic_link, "latency_s": NIC_LATENCY_S},
            {**nic_link, "latency_s": FABRIC_LATENCY_S},
        )


@pytest.mark.parametrize("name", sorted(SMALL))
def test_cluster_graphs_are_deterministic_with_own_link_dicts(name: str) -> None:
    one, two = SMALL[name](), SMALL[name]()
    assert list(one.nodes(data=True)) == list(two.nodes(data=True))
    assert list(one.edges(data=True)) == list(two.edges(data=True))
    first, *rest = one.edges
    before = [one.edges[edge]["bandwidth_bytes_per_s"] for edge in rest]
    one.edges[first]["bandwidth_bytes_per_s"] = 1.0
    assert [one.edges[edge]["bandwidth_bytes_per_s"] for edge in rest] == before
    assert type(one.edges[first]["latency_s"]) is float


def test_registry() -> None:
    assert dict(BUILDERS) == {
        "fat_tree": fat_tree,
        "multi_plane": multi_plane,
        "rail_optimized": rail_optimized,
        "torus": torus,
        "dragonfly": dragonfly,
    }
    assert set(BUILDERS).isdisjoint(builders.BUILDERS)


def test_physical_parameters_are_keyword_only() -> None:
    builder: Callable[..., object] = fat_tree
    with pytest.raises(TypeError):
        builder(2, 8, 18)


# --- torus ----------------------------------------------------------------------------

TORI = [(1, 1, 1), (2, 1, 1), (5, 1, 1), (2, 2, 2), (3, 2, 1), (4, 3, 2), (4, 4, 4)]


@pytest.mark.parametrize("dims", TORI, ids=str)
def test_torus_counts_and_hops(dims: tuple[int, int, int]) -> None:
    dim_x, dim_y, dim_z = dims
    graph = torus(dim_x=dim_x, dim_y=dim_y, dim_z=dim_z, **TORUS_LINK)
    n = dim_x * dim_y * dim_z
    # A dimension of size D has n / D lines of D cables (D >= 3), one cable (D = 2) or none.
    cables = sum(n // size * {1: 0, 2: 1}.get(size, size) for size in dims)
    assert graph.graph["name"] == f"torus_{dim_x}x{dim_y}x{dim_z}"
    assert graph.number_of_nodes() == n
    assert graph.number_of_edges() == 2 * cables
    assert all("transit" not in attrs for _, attrs in graph.nodes(data=True))

    def coordinates(rank: int) -> tuple[int, int, int]:
        return rank % dim_x, rank // dim_x % dim_y, rank // (dim_x * dim_y)

    lengths = dict(nx.all_pairs_shortest_path_length(graph))
    for a, b in itertools.product(range(n), repeat=2):
        deltas = [abs(p - q) for p, q in zip(coordinates(a), coordinates(b), strict=True)]
        expected = sum(min(d, size - d) for d, size in zip(deltas, dims, strict=True))
        assert lengths[f"gpu{a}"][f"gpu{b}"] == expected


def test_torus_link_kind_is_applied() -> None:
    graph = torus(dim_x=3, link_kind=LinkKind.ETHERNET, **TORUS_LINK)
    assert {attrs["kind"] for _, _, attrs in graph.edges(data=True)} == {LinkKind.ETHERNET}


# --- dragonfly ------------------------------------------------------------------------

# (routers_per_group, gpus_per_router, global_links_per_router, n_groups)
DRAGONFLIES = [(4, 2, 2, 9), (4, 2, 2, 5), (1, 1, 1, 2), (3, 1, 2, 7), (2, 3, 3, 4)]


@pytest.mark.parametrize("case", DRAGONFLIES, ids=str)
def test_dragonfly_counts_and_global_links(case: tuple[int, int, int, int]) -> None:
    a, p, h, g = case
    graph = dragonfly(
        routers_per_group=a,
        gpus_per_router=p,
        global_links_per_router=h,
        n_groups=g,
        **DRAGONFLY_LINKS,
    )
    nodes, edges = _kinds(graph)
    assert nodes == {NodeKind.GPU: g * a * p, NodeKind.SWITCH: g * a}
    assert edges == {LinkKind.ETHERNET: 2 * (g * a * p + g * a * (a - 1) // 2 + g * (g - 1) // 2)}

    def group(router: str) -> int:
        return int(router[1:].partition(".")[0])

    routers = [f"r{i}.{r}" for i in range(g) for r in range(a)]
    global_links = [(u, v) for u, v in graph.edges(routers) if v.startswith("r")]
    global_links = [(u, v) for u, v in global_links if group(u) != group(v)]
    pairs = Counter(frozenset((group(u), group(v))) for u, v in global_links)
    assert pairs == {frozenset(pair): 2 for pair in itertools.combinations(range(g), 2)}
    per_router = Counter(u for u, _ in global_links)
    assert max(per_router.values()) <= h
    if g == a * h + 1:
        assert set(per_router.values()) == {h}
        assert len(per_router) == g * a
    for u, v in global_links:  # the serving rule, written as list positions
        i, j = group(u), group(v)
        assert u == f"r{i}.{[k for k in range(g) if k != i].index(j) // h}"
    for r in routers:
        local = {v for v in graph.successors(r) if v.startswith("r") and group(v) == group(r)}
        assert len(local) == a - 1
        assert _neighbours_of_kind(graph, r, NodeKind.GPU) == p


def test_dragonfly_hops() -> None:
    a, p = 4, 2
    graph = dragonfly(
        routers_per_group=a,
        gpus_per_router=p,
        global_links_per_router=2,
        n_groups=9,
        **DRAGONFLY_LINKS,
    )
    lengths = dict(nx.all_pairs_shortest_path_length(graph))
    for x, y in itertools.permutations(range(9 * a * p), 2):
        hops = lengths[f"gpu{x}"][f"gpu{y}"]
        if x // p == y // p:
            assert hops == 2  # gpu - router - gpu
        elif x // (a * p) == y // (a * p):
            assert hops == 3  # one local link
        else:
            assert 3 <= hops <= 5  # at most local, global, local


# --- topology files -------------------------------------------------------------------

FILES = {
    "h100-ib-fat-tree.toml": 4 * 8,
    "h100-rail-optimized.toml": 32 * 8,
    "h100-3tier-clos.toml": 256 * 8,
    "h100-multi-plane.toml": 128 * 8,
    "h100-rail-only.toml": 64 * 8,
    "a100-roce-2to1.toml": 16 * 8,
    "torus-3d.toml": 4 * 4 * 4,
    "dragonfly.toml": 9 * 4 * 2,
}


@pytest.mark.parametrize(("name", "n_gpus"), FILES.items())
def test_cluster_files_load(name: str, n_gpus: int) -> None:
    path = TOPOLOGIES / name
    graph = io.load(path)
    assert len(gpu_nodes(graph)) == n_gpus
    assert graph.graph["description"].strip()
    assert path.read_text(encoding="utf-8").startswith("#")  # cites its public spec


def test_h100_fat_tree_file_numbers() -> None:
    graph = io.load(TOPOLOGIES / "h100-ib-fat-tree.toml", {"n_nodes": "16"})
    assert len(gpu_nodes(graph)) == 128
    assert graph.edges["gpu9", "node1.nvsw"]["bandwidth_bytes_per_s"] == 18 * 25e9
    assert graph.edges["node1.nic1", "leaf0"]["bandwidth_bytes_per_s"] == 400e9 / 8
    assert graph.nodes["node1.nvsw"]["reduces"] is True
    # 128 NICs on 32-port leaves, 32 uplinks each (1:1): 4 leaves of 64 ports, 32 spines.
    assert [graph.out_degree(f"leaf{j}") for j in range(4)] == [64] * 4
    assert graph.out_degree("spine31") == 4


def test_a100_roce_file_numbers() -> None:
    graph = io.load(TOPOLOGIES / "a100-roce-2to1.toml")
    assert graph.edges["gpu0", "node0.nvsw"]["bandwidth_bytes_per_s"] == 12 * 25e9
    assert graph.nodes["node0.nvsw"]["reduces"] is False
    assert graph.edges["leaf0", "spine0"]["kind"] is LinkKind.ETHERNET
    assert _neighbours_of_kind(graph, "leaf0", NodeKind.SWITCH) == 32 // 2
    assert _bisection_bytes_per_s(graph) == pytest.approx(128 / 2 * 200e9 / 8 / 2)


# --- errors ---------------------------------------------------------------------------

KINDS = (
    "must be one of LinkKind.NVLINK, LinkKind.PCIE, LinkKind.CPU_LINK, LinkKind.IB, "
    "LinkKind.ETHERNET, got 'ib'"
)


@pytest.mark.parametrize("builder", [fat_tree, rail_optimized])
@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"n_nodes": 0}, "n_nodes: must be an integer >= 1, got 0"),
        ({"n_nodes": 2.0}, "n_nodes: must be an integer >= 1, got 2.0"),
        ({"gpus_per_node": 0}, "gpus_per_node: must be an integer >= 1, got 0"),
        ({"nvlinks_per_gpu": True}, "nvlinks_per_gpu: must be an integer >= 1, got True"),
        ({"nics_per_node": -1}, "nics_per_node: must be an integer >= 1, got -1"),
        ({"nvls": 1}, "nvls: must be True or False, got 1"),
        ({"sharp": "yes"}, "sharp: must be True or False, got 'yes'"),
        (
            {"nvlink_bandwidth_bytes_per_s": "25 GB/s"},
            "nvlink_bandwidth_bytes_per_s: must be a number in bytes/s, got '25 GB/s'",
        ),
        (
            {"nic_bandwidth_bytes_per_s": 0.0},
            "nic_bandwidth_bytes_per_s: must be positive and finite, got 0.0 bytes/s",
        ),
        (
            {"pcie_bandwidth_bytes_per_s": math.inf},
            "pcie_bandwidth_bytes_per_s: must be positive and finite, got inf bytes/s",
        ),
        (
            {"pcie_latency_s": -1e-6},
            "pcie_latency_s: must be non-negative and finite, got -1e-06 s",
        ),
        ({"nic_latency_s": math.nan}, "nic_latency_s: must be non-negative and finite, got nan s"),
        (
            {"fabric_latency_s": -1.0},
            "fabric_latency_s: must be non-negative and finite, got -1.0 s",
        ),
        ({"fabric_link_kind": "ib"}, f"fabric_link_kind: {KINDS}"),
        (
            {"oversubscription": 0.5},
            "oversubscription: must be a number >= 1 (downlinks per uplink), got 0.5",
        ),
        (
            {"oversubscription": math.nan},
            "oversubscription: must be a number >= 1 (downlinks per uplink), got nan",
        ),
        (
            {"oversubscription": True},
            "oversubscription: must be a number >= 1 (downlinks per uplink), got True",
        ),
    ],
)
def test_switched_cluster_errors(
    builder: Callable[..., object], overrides: dict[str, object], expected: str
) -> None:
    arguments: dict[str, object] = {"n_nodes": 2, **BOX, **overrides}
    with pytest.raises(ConfigError) as info:
        builder(**arguments)
    assert str(info.value) == expected


@pytest.mark.parametrize(
    ("builder", "overrides", "expected"),
    [
        (fat_tree, {"nics_per_node": 3}, "nics_per_node: must divide gpus_per_node (8), got 3"),
        (fat_tree, {"levels": 4}, "levels: must be 1, 2 or 3, got 4"),
        (fat_tree, {"levels": True}, "levels: must be 1, 2 or 3, got True"),
        (fat_tree, {"leaf_down_ports": 0}, "leaf_down_ports: must be an integer >= 1, got 0"),
        (fat_tree, {"leaves_per_pod": 0}, "leaves_per_pod: must be an integer >= 1, got 0"),
        (
            rail_optimized,
            {"nics_per_node": 4},
            "nics_per_node: must equal gpus_per_node (8) for one rail per GPU, got 4",
        ),
        (
            rail_optimized,
            {"rail_nodes_per_leaf": 0},
            "rail_nodes_per_leaf: must be an integer >= 1, got 0",
        ),
        (torus, {"dim_y": 0}, "dim_y: must be an integer >= 1, got 0"),
        (torus, {"dim_x": 4.0}, "dim_x: must be an integer >= 1, got 4.0"),
        (
            torus,
            {"link_latency_s": math.nan},
            "link_latency_s: must be non-negative and finite, got nan s",
        ),
        (torus, {"link_kind": "ib"}, f"link_kind: {KINDS}"),
        (
            dragonfly,
            {"n_groups": 10},
            "n_groups: must be an integer from 2 to routers_per_group * "
            "global_links_per_router + 1 = 9, got 10",
        ),
        (
            dragonfly,
            {"n_groups": 1},
            "n_groups: must be an integer from 2 to routers_per_group * "
            "global_links_per_router + 1 = 9, got 1",
        ),
        (dragonfly, {"routers_per_group": 0}, "routers_per_group: must be an integer >= 1, got 0"),
        (
            dragonfly,
            {"global_bandwidth_bytes_per_s": -1.0},
            "global_bandwidth_bytes_per_s: must be positive and finite, got -1.0 bytes/s",
        ),
        (
            dragonfly,
            {"local_latency_s": math.inf},
            "local_latency_s: must be non-negative and finite, got inf s",
        ),
        (dragonfly, {"link_kind": "ib"}, f"link_kind: {KINDS}"),
    ],
)
def test_builder_specific_errors(
    builder: Callable[..., object], overrides: dict[str, object], expected: str
) -> None:
    defaults: dict[Callable[..., object], dict[str, object]] = {
        fat_tree: {"n_nodes": 2, **BOX},
        rail_optimized: {"n_nodes": 2, **BOX},
        torus: {"dim_x": 4, **TORUS_LINK},
        dragonfly: {
            "routers_per_group": 4,
            "gpus_per_router": 2,
            "global_links_per_router": 2,
            "n_groups": 9,
            **DRAGONFLY_LINKS,
        },
    }
    with pytest.raises(ConfigError) as info:
        builder(**{**defaults[builder], **overrides})
    assert str(info.value) == expected


@pytest.mark.parametrize(
    ("down", "over", "up"),
    [(32, 1.0, 32), (32, 2.0, 16), (21, 1.4, 15), (32, 3.0, 11), (1, 4.0, 1)],
)
def test_uplinks_round_up_without_float_noise(down: int, over: float, up: int) -> None:
    # up = ceil(down / over), by hand; 21 / 1.4 is 15.000000000000002 in floats.
    # down + 1 single-NIC nodes fill leaf0 and start leaf1, so leaf0 has its uplinks.
    graph = fat_tree(
        down + 1,
        gpus_per_node=1,
        nics_per_node=1,
        leaf_down_ports=down,
        oversubscription=over,
        **BOX,
    )
    assert graph.out_degree("leaf0") == down + up


@pytest.mark.slow
def test_rail_optimized_builds_16384_gpus() -> None:
    graph = rail_optimized(2048, **BOX)
    n_leaves, spines = 2048 // 32 * 8, 32
    assert graph.number_of_nodes() == 2048 * (8 + 1 + 8) + n_leaves + spines
    assert graph.number_of_edges() == 2048 * 8 * 2 * 3 + 2 * n_leaves * spines
