"""Tests of simcoll.algorithms.sharp and of placing its switch endpoints."""

from __future__ import annotations

import networkx as nx
import pytest

from simcoll.algorithms import build_schedule
from simcoll.algorithms.sharp import sharp_allreduce
from simcoll.core.checks import check_schedule
from simcoll.core.errors import ConfigError
from simcoll.plan.placement import ranks_per_reducing_switch
from simcoll.prediction import predict
from simcoll.sim.engine import simulate
from simcoll.topology.io import load
from simcoll.topology.schema import LinkKind, NodeKind, validate

B = 50e9  # bytes/s per link and direction
A = 1e-6  # s per link


@pytest.mark.parametrize("n", range(1, 17))
def test_sharp_computes_an_allreduce_for_every_grouping(n: int) -> None:
    for g in [d for d in range(1, n + 1) if n % d == 0]:
        for channels, chunks in [(1, 1), (2, 3)]:
            size_bytes = n * 24 * channels * chunks
            check_schedule(
                build_schedule("allreduce", "sharp", n_ranks=n, size_bytes=size_bytes,
                               ranks_per_switch=g, n_channels=channels, n_chunks=chunks)
            )  # fmt: skip


def test_traffic_per_rank_and_per_switch() -> None:
    # 6 ranks, groups of 3: each rank sends S and receives S; a group switch receives
    # 3 S from its ranks and S from the root, sends S to the root and 3 S down; the root
    # receives 2 S and sends 2 S.
    s = 6 * 100
    schedule = sharp_allreduce(6, s, ranks_per_switch=3)
    assert schedule.n_switches == 3
    assert schedule.bytes_sent_per_rank().tolist() == [s] * 6 + [4 * s, 4 * s, 2 * s]
    assert schedule.bytes_received_per_rank().tolist() == [s] * 6 + [4 * s, 4 * s, 2 * s]


def _two_leaves_and_a_root() -> nx.DiGraph[str]:
    """gpu0, gpu1 on leaf0; gpu2, gpu3 on leaf1; both leaves on root; all reduce."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    for name in ("leaf0", "leaf1", "root", "decoy"):
        graph.add_node(name, kind=NodeKind.SWITCH, reduces=True)
    cables = [("gpu0", "leaf0"), ("gpu1", "leaf0"), ("gpu2", "leaf1"), ("gpu3", "leaf1"),
              ("leaf0", "root"), ("leaf1", "root"), ("root", "decoy")]  # fmt: skip
    for rank in range(4):
        graph.add_node(f"gpu{rank}", kind=NodeKind.GPU, rank=rank)
    for u, v in cables:
        for a, b in ((u, v), (v, u)):
            graph.add_edge(a, b, kind=LinkKind.IB, bandwidth_bytes_per_s=B, latency_s=A)
    return validate(graph)


@pytest.mark.parametrize("model", ["ideal", "flow"])
def test_two_level_closed_form_and_placement(model: str) -> None:
    # Four one-link stages (rank -> leaf, leaf -> root, root -> leaf, leaf -> rank), each
    # a + S/B with nothing shared: T = 4 (a + S/B). The groups' switches are the leaves
    # (1 hop from their GPUs) and the root endpoint is 'root' (2 hops from every GPU;
    # 'decoy' is 3).
    size_bytes = 2**24
    graph = _two_leaves_and_a_root()
    result = simulate(graph, sharp_allreduce(4, size_bytes, ranks_per_switch=2), model=model)
    assert result.rank_nodes[4:] == ("leaf0", "leaf1", "root")
    assert result.time_s == pytest.approx(4 * (A + size_bytes / B), rel=1e-9)


def test_predict_finds_the_leaf_groups_of_a_fat_tree() -> None:
    # 16 DGX H100 nodes on 32-port leaves: 4 nodes x 8 NICs = 32 GPUs per leaf.
    tree = load("topologies/h100-ib-fat-tree.toml", {"n_nodes": "16", "sharp": "true"})
    assert ranks_per_reducing_switch(tree, 128) == 32
    # Both in rank order, one NIC per node (plan="rank"): the rings NCCL builds over all
    # eight NICs are tested in tests/plan/. Ring: every GPU's NIC carries 2(n-1)/n S each
    # way, busbw -> 50 GB/s. SHARP: S each way, algbw -> 50 GB/s, busbw -> 2(n-1)/n x 50
    # = 99.2 GB/s; pipelining costs a little.
    size = [2**28]
    (ring,) = predict(tree, "allreduce", size, algorithm="ring", protocol="simple",
                     plan="rank").rows  # fmt: skip
    (sharp,) = predict(tree, "allreduce", size, algorithm="sharp", protocol="simple",
                       plan="rank").rows  # fmt: skip
    assert ring.busbw_bytes_per_s < 50e9
    assert 1.8 * ring.busbw_bytes_per_s < sharp.busbw_bytes_per_s < 2 * 127 / 128 * 50e9


def test_sharp_without_reducing_switches_is_a_clear_error() -> None:
    tree = load("topologies/h100-ib-fat-tree.toml", {"n_nodes": "2"})
    with pytest.raises(ConfigError) as info:
        predict(tree, "allreduce", [2**20], algorithm="sharp")
    assert str(info.value) == (
        "sharp needs a switch that reduces in the network (reduces = true, e.g. sharp = true "
        "in a fat-tree file) reachable from all 16 GPUs; topologies/h100-ib-fat-tree.toml has none"
    )
