"""Small all-reduces across H100 servers take their time from NCCL's structure (issue 32):
NCCL's hop latencies (``hwLat``), the tree's depth and NCCL's base latency of an LL call,
with nothing fitted on the time of a small call."""

from __future__ import annotations

import math

import networkx as nx
import pytest

from simcoll.prediction import predict
from simcoll.topology.io import load


@pytest.mark.parametrize("n_nodes", [2, 4, 8])
def test_a_tiny_tree_ll_allreduce_is_launch_plus_its_hops(n_nodes):
    graph = load("topologies/h100-ib-fat-tree.toml", overrides={"n_nodes": str(n_nodes)})
    (row,) = predict(graph, "allreduce", [8]).rows
    assert (row.algorithm, row.protocol) == ("tree", "LL")

    # The critical path of NCCL's tree by hand: up a server's chain of 8 GPUs (7 NVLink
    # hops), up the double binary tree's log2(n_nodes) network hops to the root, and the
    # same back down. NVLink hop: NCCL's LL 0.6 us, the links none of their own (the H100
    # server's params). Network hop: NCCL's LL 2.7 us plus the route's links, from one
    # server's first GPU to the next server's, through their NICs and the fabric (LL does
    # not pay the network latency fitted on Simple). The call: NCCL's LL base latency,
    # 6.8 us, as the server's launch cost.
    def call_s(route_s: float) -> float:
        nvlink_hop_s, net_hop_s = 0.6e-6, 2.7e-6 + route_s
        return 6.8e-6 + 2 * (7 * nvlink_hop_s + math.log2(n_nodes) * net_hop_s)

    # 4 servers to a leaf: 2 and 4 servers share one, 8 cross the spines on some hops
    same_leaf_s = nx.shortest_path_length(graph, "gpu0", "gpu8", weight="latency_s")  # 3 us
    if n_nodes <= 4:
        assert row.time_s == pytest.approx(call_s(same_leaf_s), rel=0.01)
    else:
        spine_s = nx.shortest_path_length(graph, "gpu0", "gpu32", weight="latency_s")  # 4 us
        assert spine_s > same_leaf_s
        assert call_s(same_leaf_s) < row.time_s <= call_s(spine_s) * 1.01
    # qoofyk's public runs (nccl-tests#309): 25-30 us on 2 servers, 35-40 on 4
    if n_nodes in (2, 4):
        assert {2: 24e-6, 4: 34e-6}[n_nodes] <= row.time_s <= {2: 31e-6, 4: 41e-6}[n_nodes]


def test_ll_on_one_h100_server_runs_at_nccls_cap():
    # issue 32: ring/LL reached 184 GB/s busbw at 256 MiB on the links alone; NCCL caps
    # LL's bus bandwidth in one Hopper server at llMaxBw = 141 GB/s (tuning.cc), which
    # the server's params carry as LL's protocol efficiency
    graph = load("topologies/dgx-h100.toml")
    (row,) = predict(graph, "allreduce", [8 * 2**30], algorithm="ring", protocol="LL").rows
    assert row.busbw_bytes_per_s == pytest.approx(141e9, rel=0.005)
