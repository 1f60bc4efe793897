"""Tests of simcoll.topology.gpu_reach: the PXN rule across servers, and its quick paths."""

from __future__ import annotations

from typing import Any

import pytest

from simcoll.core.errors import TopologyError
from simcoll.topology.clos import multi_plane
from simcoll.topology.gpu_reach import check_reachability
from simcoll.topology.schema import LinkKind, gpu_nodes

BOX: dict[str, Any] = {
    "nvlinks_per_gpu": 18,
    "nvlink_bandwidth_bytes_per_s": 25e9,
    "nvlink_latency_s": 1e-7,
    "nic_bandwidth_bytes_per_s": 50e9,
    "nic_latency_s": 1e-6,
    "pcie_bandwidth_bytes_per_s": 63e9,
    "pcie_latency_s": 2e-7,
    "fabric_latency_s": 5e-7,
}
LINK = {"kind": LinkKind.IB, "bandwidth_bytes_per_s": 5e10, "latency_s": 1e-6}


def _planes(n_nodes: int) -> Any:
    return multi_plane(n_nodes, gpus_per_node=2, nics_per_node=2, levels=1, **BOX)


def test_a_server_on_one_plane_only_reaches_the_others_through_its_gpus() -> None:
    graph = _planes(3)
    # node2 keeps only its plane-1 NIC: its GPU 4 sends through GPU 5 (PXN), fine.
    graph.remove_edges_from([("node2.nic0", "plane0.leaf0"), ("plane0.leaf0", "node2.nic0")])
    check_reachability(graph, gpu_nodes(graph), None)
    # With its plane-1 cable cut one way, nothing leaves node2: the first pair is named.
    graph.remove_edge("node2.nic1", "plane1.leaf0")
    with pytest.raises(TopologyError, match=r"GPU 'gpu4' \(rank 4\) cannot reach GPU 'gpu0'"):
        check_reachability(graph, gpu_nodes(graph), None)


def test_a_direct_link_between_two_servers_is_searched_pair_by_pair() -> None:
    # node2 has no fabric link at all, only a cable from its NIC 1 into node1's NIC 1, one
    # way: the islands of the quick path cannot join two servers' nodes, the search from
    # every GPU does. Nothing reaches node2.
    graph = _planes(3)
    for p in range(2):
        graph.remove_edges_from([(f"node2.nic{p}", f"plane{p}.leaf0"),
                                 (f"plane{p}.leaf0", f"node2.nic{p}")])  # fmt: skip
    graph.add_edge("node2.nic1", "node1.nic1", **LINK)
    with pytest.raises(TopologyError, match=r"GPU 'gpu0' \(rank 0\) cannot reach GPU 'gpu4'"):
        check_reachability(graph, gpu_nodes(graph), None)
    # Both ways: gpu0 reaches node2 over plane 1 and node1's NIC 1, crossing no GPU of
    # node1 (a NIC forwards), and node2 reaches node0 the same way back.
    graph.add_edge("node1.nic1", "node2.nic1", **LINK)
    check_reachability(graph, gpu_nodes(graph), None)
