"""Tests of simcoll.topology.clos: hand counts of tiers and links, bisection, PXN routes."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Any

import networkx as nx
import pytest

from simcoll.core.errors import ConfigError, TopologyError
from simcoll.topology import builders
from simcoll.topology.clos import ClosShape, clos_links, multi_plane
from simcoll.topology.clusters import fat_tree
from simcoll.topology.reach import parted
from simcoll.topology.routing import Router
from simcoll.topology.schema import LinkKind, NodeKind, gpu_nodes, validate

NIC_BYTES_PER_S = 50e9
BOX: dict[str, Any] = {
    "nvlinks_per_gpu": 18,
    "nvlink_bandwidth_bytes_per_s": 25e9,
    "nvlink_latency_s": 1e-7,
    "nic_bandwidth_bytes_per_s": NIC_BYTES_PER_S,
    "nic_latency_s": 1e-6,
    "pcie_bandwidth_bytes_per_s": 63e9,
    "pcie_latency_s": 2e-7,
    "fabric_latency_s": 5e-7,
}

# (n_nodes, gpus, nics, leaf_down_ports, oversubscription, levels, leaves_per_pod, core_over)
PLANES = [
    (4, 8, 8, 64, 1.0, 1, 16, 1.0),  # rail-only: one switch per rail
    (4, 2, 2, 2, 1.0, 2, 16, 1.0),
    (9, 4, 2, 4, 2.0, 2, 16, 1.0),  # two GPUs per NIC, a part-filled leaf, 2:1
    (16, 2, 2, 2, 1.0, 3, 2, 1.0),  # 8 leaves, 4 pods per plane
    (16, 2, 2, 2, 1.0, 3, 4, 2.0),  # 2 pods, half the pod uplinks
    (5, 2, 2, 2, 1.0, 3, 8, 1.0),  # one pod: no core
]


def _bisection_bytes_per_s(graph: nx.DiGraph[str]) -> float:
    """Max flow from the GPUs of ranks < n/2 to the others, links at their bandwidth."""
    gpus = gpu_nodes(graph)
    flow = graph.copy()
    half = len(gpus) // 2
    flow.add_edges_from(("source", gpu) for gpu in gpus[:half])  # no capacity: infinite
    flow.add_edges_from((gpu, "sink") for gpu in gpus[half:])
    return float(nx.maximum_flow_value(flow, "source", "sink", capacity="bandwidth_bytes_per_s"))


Plane = tuple[int, int, int, int, float, int, int, float]


@pytest.mark.parametrize("case", PLANES, ids=str)
def test_multi_plane_counts_by_hand(case: Plane) -> None:
    n, gpus, nics, down, over, levels, pod, core_over = case
    graph = multi_plane(
        n,
        gpus_per_node=gpus,
        nics_per_node=nics,
        leaf_down_ports=down,
        oversubscription=over,
        levels=levels,
        leaves_per_pod=pod,
        core_oversubscription=core_over,
        **BOX,
    )
    # One plane: n NICs on ceil(n / down) leaves with u uplinks each.
    leaves = math.ceil(n / down)
    up, agg_up = math.ceil(down / over), math.ceil(pod / core_over)
    pods = math.ceil(leaves / pod)
    if levels == 1 or leaves == 1:
        upper, cables = 0, 0
    elif levels == 2:
        upper, cables = up, leaves * up
    else:
        cores = up * agg_up if pods > 1 else 0
        upper = pods * up + cores
        cables = leaves * up + (pods * up * agg_up if pods > 1 else 0)
    shared = nics if gpus > nics else 0  # a PCIe switch per NIC when GPUs share it
    nodes = Counter(attrs["kind"] for _, attrs in graph.nodes(data=True))
    edges = Counter(attrs["kind"] for _, _, attrs in graph.edges(data=True))
    expected_nodes = {
        NodeKind.GPU: n * gpus,
        NodeKind.NVSWITCH: n,
        NodeKind.NIC: n * nics,
        NodeKind.SWITCH: nics * (leaves + upper),
    }
    if shared:
        expected_nodes[NodeKind.PCIE_SWITCH] = n * nics
    assert nodes == expected_nodes
    assert edges == {
        LinkKind.NVLINK: 2 * n * gpus,
        LinkKind.PCIE: 2 * n * gpus + 2 * n * shared,
        LinkKind.IB: 2 * (n * nics + nics * cables),
    }
    shape = ClosShape(levels=levels, leaf_down_ports=down, oversubscription=over,
                      leaves_per_pod=pod, core_oversubscription=core_over)  # fmt: skip
    assert nics * clos_links(shape, n) == edges[LinkKind.IB]  # known before building
    # No link joins two planes, and plane p's leaves hold NIC p of every node.
    for u, v in graph.edges:
        planes = {x.split(".")[0] for x in (u, v) if x.startswith("plane")}
        assert len(planes) <= 1
    for p in range(nics):
        on_leaves = {nic for j in range(leaves) for nic in graph.successors(f"plane{p}.leaf{j}")
                     if nic.startswith("node")}  # fmt: skip
        assert on_leaves == {f"node{k}.nic{p}" for k in range(n)}


@pytest.mark.parametrize(("over", "core_over", "factor"), [(1.0, 1.0, 1.0), (2.0, 1.0, 0.5),
                                                            (1.0, 2.0, 0.5)])  # fmt: skip
def test_multi_plane_bisection(over: float, core_over: float, factor: float) -> None:
    # 8 nodes x 2 GPUs, 2 planes; each plane: 4 leaves of 2 NICs, pods of 2 leaves, so the
    # low half of the ranks (nodes 0-3) is pod 0 of every plane. At 1:1 each plane carries
    # 4 NICs' worth across; a 2:1 leaf or a 2:1 aggregation switch halves it.
    graph = multi_plane(8, gpus_per_node=2, nics_per_node=2, leaf_down_ports=2, levels=3,
                        leaves_per_pod=2, oversubscription=over, core_oversubscription=core_over,
                        **BOX)  # fmt: skip
    expected = 2 * 4 * NIC_BYTES_PER_S * factor
    assert _bisection_bytes_per_s(graph) == pytest.approx(expected, rel=1e-12)


def test_fat_tree_core_oversubscription_and_one_tier() -> None:
    # 16 single-GPU nodes, 2 NICs per leaf, 2 leaves per pod: 8 leaves, 4 pods; each leaf
    # has 2 uplinks, so each pod 2 aggregation switches, each with ceil(2 / 2) = 1 core
    # link: 2 cores. Bisection (pods 0-1 against 2-3): 2 pods x 2 aggs x 1 link.
    graph = fat_tree(16, gpus_per_node=1, nics_per_node=1, leaf_down_ports=2, levels=3,
                     leaves_per_pod=2, core_oversubscription=2.0, **BOX)  # fmt: skip
    assert sorted(n for n, a in graph.nodes(data=True) if a.get("tier") == 3) == ["core0", "core1"]
    assert all(graph.out_degree(f"agg{p}.{j}") == 2 + 1 for p in range(4) for j in range(2))
    assert _bisection_bytes_per_s(graph) == pytest.approx(4 * NIC_BYTES_PER_S, rel=1e-12)
    one = fat_tree(4, gpus_per_node=2, nics_per_node=2, leaf_down_ports=8, levels=1, **BOX)
    assert [n for n, a in one.nodes(data=True) if a["kind"] is NodeKind.SWITCH] == ["leaf0"]


def test_pxn_routes_through_the_gpu_of_the_destination_plane() -> None:
    # node0 local 0 to node1 local 1: plane 0 does not reach NIC 1 of node1, so the sender
    # writes over NVLink into node0's GPU 1, whose NIC is on plane 1.
    graph = multi_plane(2, gpus_per_node=2, nics_per_node=2, levels=1, **BOX)
    assert Router(graph).route("gpu0", "gpu3") == (
        ("gpu0", "node0.nvsw"), ("node0.nvsw", "gpu1"), ("gpu1", "node0.nic1"),
        ("node0.nic1", "plane1.leaf0"), ("plane1.leaf0", "node1.nic1"), ("node1.nic1", "gpu3"),
    )  # fmt: skip
    router = Router(graph)
    links, offsets = router.routes_from("gpu0", ["gpu2", "gpu3"])
    edges = list(graph.edges)
    assert [edges[e] for e in links[offsets[1] : offsets[2]]] == list(router.route("gpu0", "gpu3"))


def test_multi_plane_hops_by_hand() -> None:
    # 8 nodes x 2 GPUs, one NIC each; per plane 4 leaves of 2 NICs, 2 leaves per pod.
    graph = multi_plane(8, gpus_per_node=2, nics_per_node=2, leaf_down_ports=2, levels=3,
                        leaves_per_pod=2, **BOX)  # fmt: skip
    router = Router(graph)
    for a, b in itertools.permutations(range(16), 2):
        node_a, node_b = a // 2, b // 2
        if node_a == node_b:
            expected = 2  # gpu - nvsw - gpu
        elif node_a // 2 == node_b // 2:
            expected = 4  # gpu - nic - leaf - nic - gpu
        elif node_a // 4 == node_b // 4:
            expected = 6  # ... leaf - agg - leaf ...
        else:
            expected = 8  # ... leaf - agg - core - agg - leaf ...
        if node_a != node_b and a % 2 != b % 2:
            expected += 2  # PXN: first over NVLink to the GPU on the destination's plane
        assert len(router.route(f"gpu{a}", f"gpu{b}")) == expected


def test_validate_lets_servers_forward_for_their_own_gpus_only() -> None:
    graph = multi_plane(3, gpus_per_node=2, nics_per_node=2, levels=1, **BOX)
    assert parted(graph, gpu_nodes(graph)) is None
    cut = graph.copy()
    for p in range(2):  # node2's two NIC cables
        cut.remove_edges_from([(f"node2.nic{p}", f"plane{p}.leaf0"),
                               (f"plane{p}.leaf0", f"node2.nic{p}")])  # fmt: skip
    with pytest.raises(TopologyError, match=r"GPU 'gpu0' \(rank 0\) cannot reach GPU 'gpu4'"):
        validate(cut)
    # Inside a server the old rule holds: no GPU forwards for another of its own server.
    inside = graph.copy()
    inside.remove_edges_from([("gpu1", "node0.nvsw"), ("node0.nvsw", "gpu1")])
    with pytest.raises(TopologyError, match=r"GPU 'gpu0' \(rank 0\) cannot reach GPU 'gpu1'"):
        validate(inside)


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"levels": 1, "leaf_down_ports": 2}, "levels",
         "one tier is one switch of 2 ports, too few for 3 NICs"),
        ({"levels": 4}, "levels", "must be 1, 2 or 3, got 4"),
        ({"core_oversubscription": 0.5}, "core_oversubscription",
         "must be a number >= 1 (downlinks per uplink), got 0.5"),
    ],
)  # fmt: skip
def test_multi_plane_errors(params: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        multi_plane(3, gpus_per_node=2, nics_per_node=2, **{**BOX, **params})
    assert error.value.field == field
    assert message in error.value.message


def test_a_design_past_the_link_cap_is_refused_before_building(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 64 nodes x 8 GPUs: 2 x 64 x 16 = 2,048 links inside the servers, 8 planes x 2 x 64
    # NIC cables = 1,024 and 8 planes x 2 x (2 leaves x 32 spines) = 1,024: 4,096 in all.
    monkeypatch.setattr(builders, "MAX_LINKS", 4095)
    with pytest.raises(ConfigError, match="the design would have 4096 directed links"):
        multi_plane(64, **BOX)
    monkeypatch.setattr(builders, "MAX_LINKS", 4096)
    assert multi_plane(64, **BOX).number_of_edges() == 4096


@pytest.mark.slow
def test_the_131072_gpu_multi_plane_design_by_hand() -> None:
    # 16,384 DGX H100 (8 GPUs, an NVSwitch, 8 NICs each) on 8 planes; a plane: 16,384 NICs
    # on 512 leaves of 32, 16 pods of 32 leaves with 32 aggregation switches each (512),
    # 32 x 32 = 1,024 cores. Cables per plane: 16,384 NIC cables, 512 x 32 leaf uplinks,
    # 16 pods x 32 aggregation switches x 32 core links.
    graph = multi_plane(16384, leaf_down_ports=32, levels=3, leaves_per_pod=32, **BOX)
    switches_per_plane = 512 + 512 + 1024
    assert graph.number_of_nodes() == 16384 * (8 + 1 + 8) + 8 * switches_per_plane
    cables_per_plane = 16384 + 512 * 32 + 16 * 32 * 32
    assert graph.number_of_edges() == 2 * 16384 * 16 + 8 * 2 * cables_per_plane
    assert len(gpu_nodes(graph)) == 131072
