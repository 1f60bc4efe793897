"""--fail refuses what parts the ranks' GPUs as routing routes them, and only that
(simcoll.topology.whatif; issue 41)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.core.errors import ConfigError, TopologyError
from simcoll.topology import load
from simcoll.topology.reach import parted
from simcoll.topology.routing import Router
from simcoll.topology.whatif import degrade, fail

REPO = Path(__file__).resolve().parents[2]
DGX1 = REPO / "topologies" / "dgx1-v100.toml"
DGX_A100 = REPO / "topologies" / "dgx-a100.toml"

#: The DGX-1V hybrid cube mesh (NVIDIA's DGX-1 with Tesla V100 white paper, figure 4):
#: each GPU's NVLink peers; GPUs 0-3 sit under CPU 0, 4-7 under CPU 1.
NVLINK_PEERS = {0: {1, 2, 3, 4}, 1: {0, 2, 3, 5}, 2: {0, 1, 3, 6}, 3: {0, 1, 2, 7},
                4: {0, 5, 6, 7}, 5: {1, 4, 6, 7}, 6: {2, 4, 5, 7}, 7: {3, 4, 5, 6}}  # fmt: skip


def test_failing_the_cpu_link_of_a_dgx1_parts_gpus_that_only_a_third_gpu_joins() -> None:
    # The graph stays connected through GPUs' NVLinks, but routes never cross a GPU: a pair
    # without an NVLink goes over PCIe and the CPUs, which the cut parts when the GPUs sit
    # under different CPUs. By hand, the first such pair in order is gpu0 (peers 1-4, CPU 0)
    # and gpu5 (CPU 1). It used to pass the check and fail later as "no route from gpu3 to
    # gpu4" without naming --fail.
    cut = [(a, b) for a in range(8) for b in range(a + 1, 8)
           if b not in NVLINK_PEERS[a] and (a < 4) != (b < 4)]  # fmt: skip
    assert cut[0] == (0, 5)
    with pytest.raises(TopologyError) as info:
        fail(load(DGX1), "cpu_link")
    assert str(info.value) == (
        "--fail cpu_link: gpu0 and gpu5 can no longer reach each other (every path left "
        "between them crosses another GPU, and GPUs forward no traffic)"
    )


def test_the_gpus_a_cpu_link_failure_leaves_joined_are_accepted_and_route() -> None:
    # gpu0..gpu3 share CPU 0 and are NVLink peers of one another: the cut does not part them
    gpus = ["gpu0", "gpu1", "gpu2", "gpu3"]
    failed = fail(load(DGX1), "cpu_link", gpus=gpus)
    assert not failed.has_edge("cpu0", "cpu1")
    router = Router(failed)
    assert all(router.route(a, b) for a in gpus for b in gpus if a != b)
    with pytest.raises(TopologyError, match="--fail cpu_link: gpu0 and gpu5 "):
        fail(load(DGX1), "cpu_link", gpus=["gpu0", "gpu5"])


def test_only_the_ranks_gpus_must_still_reach_each_other() -> None:
    # gpu7 down on a DGX A100: ranks on gpu0 and gpu1 never touch it
    failed = fail(load(DGX_A100), "gpu7", gpus=["gpu0", "gpu1"])
    assert failed.degree("gpu7") == 0
    with pytest.raises(TopologyError, match="--fail gpu7: gpu0 and gpu7 can no longer reach"):
        fail(load(DGX_A100), "gpu7")  # every GPU by default


def test_a_degrade_below_one_bit_per_second_is_one_line() -> None:
    # issue 41: --degrade ib=1e-300 made links of 1e-292 B/s, times past a float
    star = load(REPO / "validation/topologies/star4-1gbit.toml")
    with pytest.raises(ConfigError) as info:
        degrade(star, "ethernet", 1e-300)
    assert str(info.value) == (
        "--degrade: ethernet=1e-300 leaves gpu0->sw 1.25e-292 B/s, less than the 1 bit/s of "
        "the slowest link simcoll simulates"
    )
    slow = degrade(star, "ethernet", 1e-9)  # 0.125 B/s: the slowest accepted
    assert {d["bandwidth_bytes_per_s"] for _, _, d in slow.edges(data=True)} == {0.125}


def test_a_nic_with_its_uplink_cut_is_down_as_if_failed_whole() -> None:
    # the cable from node0.nic0 to its leaf cut: the NIC reaches nothing outside its
    # server, so it goes (NCCL uses the other seven); before, the plan still chose it and
    # the call found no route out of it
    from simcoll.prediction import predict  # noqa: PLC0415

    design = load(REPO / "topologies" / "h100-ib-fat-tree.toml", {"n_nodes": "2"})
    cable = fail(design, "node0.nic0-leaf0")
    whole = fail(design, "node0.nic0")
    assert "node0.nic0" not in cable
    assert sorted(cable.edges) == sorted(whole.edges)
    (by_cable,) = predict(cable, "allreduce", [2**30]).rows
    (by_nic,) = predict(whole, "allreduce", [2**30]).rows
    assert by_cable.time_s == by_nic.time_s
    # the NIC's PCIe link to its GPU cut instead: the NIC still has its cable, and stays
    assert "node0.nic0" in fail(design, "gpu0-node0.nic0")


# --- patterns: a plane, a pod's uplinks, a tier ------------------------------------------

BOX = {
    "nvlinks_per_gpu": 18,
    "nvlink_bandwidth_bytes_per_s": 25e9,
    "nvlink_latency_s": 1e-7,
    "nic_bandwidth_bytes_per_s": 50e9,
    "nic_latency_s": 1e-6,
    "pcie_bandwidth_bytes_per_s": 63e9,
    "pcie_latency_s": 2e-7,
    "fabric_latency_s": 5e-7,
}


def _halved(before: object, after: object) -> set[tuple[str, str]]:
    return {e for e in before.edges  # type: ignore[attr-defined]
            if after.edges[e]["bandwidth_bytes_per_s"]  # type: ignore[attr-defined]
            != before.edges[e]["bandwidth_bytes_per_s"]}  # type: ignore[attr-defined]  # fmt: skip


def test_a_pattern_degrades_one_plane() -> None:
    from simcoll.topology.clos import multi_plane  # noqa: PLC0415

    # 8 nodes x 2 GPUs, 2 planes, each 4 leaves of 2 NICs and 2 spines (2 uplinks a
    # leaf). Plane 1 by hand: 8 NIC cables + 4 leaves x 2 spines = 16 cables, 32 links.
    graph = multi_plane(8, gpus_per_node=2, nics_per_node=2, leaf_down_ports=2, **BOX)
    slow = degrade(graph, "plane1.*", 0.5)
    halved = _halved(graph, slow)
    assert len(halved) == 32
    assert all("plane1." in u + v for u, v in halved)
    assert all(slow.edges[e]["bandwidth_bytes_per_s"] == 25e9 for e in halved)


def test_a_pattern_names_one_pods_uplinks_and_a_tier() -> None:
    from simcoll.topology.clusters import fat_tree  # noqa: PLC0415

    # 16 single-GPU nodes, 2 NICs per leaf, 2 leaves per pod: 4 pods of 2 aggregation
    # switches, each with 2 core links: pod 1's uplinks are 2 x 2 cables, 8 links.
    graph = fat_tree(16, gpus_per_node=1, nics_per_node=1, leaf_down_ports=2, levels=3,
                     leaves_per_pod=2, **BOX)  # fmt: skip
    halved = _halved(graph, degrade(graph, "agg1.*-core*", 0.5))
    assert halved == {e for a in ("agg1.0", "agg1.1") for c in ("core0", "core1", "core2",
                                                               "core3")
                      for e in ((a, c), (c, a)) if graph.has_edge(*e)}  # fmt: skip
    assert len(halved) == 8
    # Failing every core parts the pods; failing one keeps them joined.
    with pytest.raises(TopologyError, match=r"--fail core\*: gpu0 and gpu4 can no longer"):
        fail(graph, "core*")
    one = fail(graph, "core[0]")
    assert "core0" not in one
    assert "core1" in one


def test_failing_a_whole_plane_leaves_the_others_and_pxn() -> None:
    from simcoll.topology.clos import multi_plane  # noqa: PLC0415

    graph = multi_plane(4, gpus_per_node=2, nics_per_node=2, levels=1, **BOX)
    left = fail(graph, "plane1.*")
    # The plane's switch goes, and with it every NIC 1 (no cable left out of its server).
    assert "plane1.leaf0" not in left
    assert not any(n.endswith(".nic1") for n in left)
    # GPU 1 of node 0 now reaches GPU 3 of node 1 through GPU 0, plane 0 and GPU 2: a GPU
    # of each server forwards.
    route = Router(left).route("gpu1", "gpu3")
    assert [v for _, v in route] == ["node0.nvsw", "gpu0", "node0.nic0", "plane0.leaf0",
                                     "node1.nic0", "gpu2", "node1.nvsw", "gpu3"]  # fmt: skip


def test_a_pattern_that_names_nothing_says_patterns_work() -> None:
    with pytest.raises(ConfigError, match=r"'spine\*' names no link: .*patterns: plane3"):
        degrade(load(DGX_A100), "spine*", 0.5)


def test_cutting_a_plane_into_pods_parts_servers_of_different_pods() -> None:
    # 2 planes of 2-tier Clos (leaves of 2 NICs, 2 spines), 4 servers of 2 GPUs: servers
    # 0-1 under leaf 0 of each plane, 2-3 under leaf 1. Failing every spine of both planes
    # leaves each leaf's servers alone: gpu0 (server 0) can no longer reach gpu4 (server
    # 2), nor gpu4 gpu0, by any plane or through any GPU. One plane's spines alone: the
    # other plane (and PXN) joins them all.
    from simcoll.topology.clos import multi_plane  # noqa: PLC0415

    graph = multi_plane(4, gpus_per_node=2, nics_per_node=2, levels=2, leaf_down_ports=2, **BOX)
    assert len(fail(graph, "plane0.spine*")) < len(graph)  # accepted
    with pytest.raises(TopologyError) as cut:
        fail(graph, "plane*.spine*")
    assert str(cut.value) == (
        "--fail plane*.spine*: gpu0 and gpu4 can no longer reach each other (the fabric is cut)"
    )


def test_a_one_way_cut_says_which_way() -> None:
    # The same fabric with only the links down from plane 0's and plane 1's spines to
    # leaf 1 failed: servers 2-3 still send up to every spine, but nothing comes down to
    # them: gpu0 can no longer reach gpu4, and gpu4 still reaches gpu0.
    from simcoll.topology.clos import multi_plane  # noqa: PLC0415

    graph = multi_plane(4, gpus_per_node=2, nics_per_node=2, levels=2, leaf_down_ports=2, **BOX)
    down = [(u, v) for u, v in graph.edges if "spine" in u and v.endswith("leaf1")]
    graph.remove_edges_from(down)
    gpus = [f"gpu{r}" for r in range(8)]
    found = parted(graph, gpus)
    assert found is not None
    assert str(found) == "gpu0 can no longer reach gpu4 (the fabric is cut)"
