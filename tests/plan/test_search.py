"""The plans of simcoll.plan.search, derived by hand from NCCL's rules on small cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.algorithms import build_schedule
from simcoll.core.checks import check_schedule
from simcoll.core.errors import ConfigError
from simcoll.plan.channels import NetHop, Plan
from simcoll.plan.search import search_plan
from simcoll.prediction import predict
from simcoll.topology import LinkKind, load
from simcoll.topology.builders import ring
from simcoll.topology.clusters import fat_tree

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def _cluster(*, gpus: int, nics: int, nvlinks: int, nic_bytes_per_s: float, n_nodes: int = 2):
    return fat_tree(
        n_nodes, gpus_per_node=gpus, nvlinks_per_gpu=nvlinks, nvlink_bandwidth_bytes_per_s=25e9,
        nvlink_latency_s=1e-6, nics_per_node=nics, nic_bandwidth_bytes_per_s=nic_bytes_per_s,
        nic_latency_s=1e-6, pcie_bandwidth_bytes_per_s=32e9, pcie_latency_s=1e-6,
        fabric_latency_s=1e-6,
    )  # fmt: skip


def test_hopper_servers_enter_by_each_nic_and_leave_through_pxn() -> None:
    # 2 servers x 4 GPUs, one 400 Gbit/s NIC per GPU, 18 NVLinks (450 GB/s: Hopper).
    # One search channel per NIC (4). Inter speed: 50 GB/s NIC -> 48 on the SM90 table,
    # >= 25 and only 4 search channels, so duplicated to 8, then doubled to 16.
    plan = search_plan(_cluster(gpus=4, nics=4, nvlinks=18, nic_bytes_per_s=50e9))
    assert plan.n_channels == 16
    # Channel c enters each server at GPU c (next to NIC c), walks down the GPU index and
    # leaves from GPU c + 1, which has no path to NIC c as short as GPU c's: PXN through c.
    chains = {0: (0, 3, 2, 1), 1: (1, 0, 3, 2), 2: (2, 1, 0, 3), 3: (3, 2, 1, 0)}
    for c in range(16):
        chain = chains[c % 4]
        assert plan.rings[c] == (*chain, *(4 + g for g in chain))
        exit0, entry1 = chain[-1], 4 + chain[0]
        assert plan.channels[c].net[exit0, entry1] == NetHop(
            f"node0.nic{c % 4}", f"node1.nic{c % 4}", proxy=f"gpu{chain[0]}"
        )
    # 16 channels x 2 server crossings = 32 ring edges, each leaving by one of the 8 NICs
    # and arriving by another: 4 out and 4 in per NIC, all NICs alike.
    assert plan.nic_use() == {f"node{k}.nic{i}": (4, 4) for k in range(2) for i in range(4)}
    # Trees: the double binary tree over 2 servers is 0 -> 1 (tree 0) and 1 -> 0 (tree 1);
    # channels 0..7 use tree 0, their copies 8..15 tree 1; inside a server, a chain.
    first, copy = plan.channels[0].tree, plan.channels[8].tree
    assert first is not None
    assert copy is not None
    assert (first.root, first.parent) == (0, (-1, 2, 3, 0, 0, 6, 7, 4))
    assert (copy.root, copy.parent) == (4, (4, 2, 3, 0, -1, 6, 7, 4))
    assert first.children[0] == (3, 4)
    assert copy.children[4] == (7, 0)


def test_ampere_servers_leave_by_the_gpu_that_shares_the_nic() -> None:
    # 2 servers x 4 GPUs, 2 NICs of 200 Gbit/s each under a PCIe switch with 2 GPUs,
    # 12 NVLinks (300 GB/s: not Hopper). NIC order: gpu0 and gpu1 prefer nic0, gpu2 and
    # gpu3 nic1. Speed 25 GB/s -> 24 on the table, below 25: no duplication; 2 x 2 = 4.
    plan = search_plan(_cluster(gpus=4, nics=2, nvlinks=12, nic_bytes_per_s=25e9))
    assert plan.n_channels == 4
    # Channel 0 enters at gpu0 and leaves at gpu1 (as close to nic0): 0, 3, 2, 1.
    # Channel 1 enters at gpu2 and leaves at gpu3: 2, 1, 0, 3. No proxy either way.
    assert plan.rings == ((0, 3, 2, 1, 4, 7, 6, 5), (2, 1, 0, 3, 6, 5, 4, 7)) * 2
    assert plan.channels[0].net[1, 4] == NetHop("node0.nic0", "node1.nic0")
    assert plan.channels[1].net[7, 2] == NetHop("node1.nic1", "node0.nic1")
    # 4 channels x 2 crossings = 8 ring edges over 4 NICs: 2 out and 2 in each.
    assert plan.nic_use() == {f"node{k}.nic{i}": (2, 2) for k in range(2) for i in range(2)}


@pytest.mark.parametrize(
    ("name", "channels"),
    # NVLink out per GPU x 0.8 (NCCL's link model): A100 240 GB/s -> 40 GB/s channels on
    # the pre-Hopper table, 6 of them; H100 360 -> 60 on the SM90 table, 6. Both >= 25
    # (and >= 50 for Hopper): duplicated to 12, doubled to 24, as NCCL's logs print.
    [("dgx-a100.toml", 24), ("dgx-h100.toml", 24)],
)
def test_one_nvswitch_server_keeps_the_gpu_order(name: str, channels: int) -> None:
    plan = search_plan(load(TOPOLOGIES / name))
    assert plan.n_channels == channels
    assert set(plan.rings) == {tuple(range(8))}
    tree = plan.channels[0].tree
    assert tree is not None
    assert tree.parent == (-1, 0, 1, 2, 3, 4, 5, 6)


def test_dgx1_rings_use_nvlink_only() -> None:
    topology = load(TOPOLOGIES / "dgx1-v100.toml")
    plan = search_plan(topology)
    # Six rings at 20 GB/s use each of the 16 NVLink pairs' 24 directed links once
    # (6 rings x 8 edges = 48 = 24 links x 2 bonded lanes); < 25 GB/s: no duplication.
    assert plan.n_channels == 12
    nvlink = {(u, v) for u, v, a in topology.edges(data=True) if a["kind"] is LinkKind.NVLINK}
    for r in plan.rings:
        edges = zip(r, r[1:] + r[:1], strict=True)
        assert all((plan.rank_nodes[a], plan.rank_nodes[b]) in nvlink for a, b in edges)


def test_pcie_box_rings_in_pci_order() -> None:
    plan = search_plan(load(TOPOLOGIES / "pcie-4x-switch.toml"))
    assert plan.n_channels == 2  # one search channel below 25 GB/s, doubled
    assert set(plan.rings) == {tuple(range(plan.n_ranks))}


def test_gpus_without_servers_get_the_rank_order() -> None:
    plan = search_plan(ring(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0))
    assert plan.source == "rank order"
    assert plan.rings == ((0, 1, 2, 3),)


def test_a_plan_follows_any_placement() -> None:
    # Ranks on the GPUs in reverse: servers in order of their lowest rank (server 1 holds
    # rank 0), GPUs inside a server in GPU index order.
    topology = _cluster(gpus=4, nics=4, nvlinks=18, nic_bytes_per_s=50e9)
    nodes = tuple(f"gpu{7 - r}" for r in range(8))
    plan = search_plan(topology, nodes)
    # Server node1 (gpu4..7 = ranks 3..0) first; channel 0 enters at gpu4 = rank 3.
    assert plan.rings[0] == (3, 0, 1, 2, 7, 4, 5, 6)
    with pytest.raises(ConfigError, match="two ranks"):
        search_plan(topology, ("gpu0", "gpu0"))


def _plans() -> list[tuple[str, Plan]]:
    cluster = _cluster(gpus=4, nics=4, nvlinks=18, nic_bytes_per_s=50e9)
    return [
        ("hopper-2x4", search_plan(cluster)),
        (
            "hopper-3x4",
            search_plan(_cluster(gpus=4, nics=2, nvlinks=18, nic_bytes_per_s=50e9, n_nodes=3)),
        ),
        ("dgx1", search_plan(load(TOPOLOGIES / "dgx1-v100.toml"))),
        ("dgx-a100", search_plan(load(TOPOLOGIES / "dgx-a100.toml"))),
    ]


@pytest.mark.parametrize(("name", "plan"), _plans())
@pytest.mark.parametrize(
    ("collective", "algorithm"),
    [("allreduce", "ring"), ("allgather", "ring"), ("reducescatter", "ring"),
     ("broadcast", "ring"), ("reduce", "ring"), ("allreduce", "tree")],
)  # fmt: skip
def test_every_plan_computes_its_collective(
    name: str, plan: Plan, collective: str, algorithm: str
) -> None:
    n = plan.n_ranks
    schedule = build_schedule(collective, algorithm, plan.using(3), n_ranks=n,
                              size_bytes=n * 3 * 2 * 64)  # fmt: skip
    check_schedule(schedule)


def test_a_job_on_part_of_a_server_whose_nic_is_down_enters_by_its_other_gpus_nics() -> None:
    # 4 ranks a server of 2 DGX H100, node0's gpu0 without its NIC: gpu0 can send through
    # a neighbour's NIC (PXN) but no NIC of node0 writes into it except through a GPU that
    # is not the job's, so node0's channels enter and leave by the NICs of gpu1-3; the plan
    # once took node0.nic4, which reaches gpu0 only through gpu4, and the run failed.
    from simcoll.plan.placement import place_ranks  # noqa: PLC0415
    from simcoll.topology.whatif import fail  # noqa: PLC0415

    topology = fail(load("topologies/h100-ib-fat-tree.toml", {"n_nodes": "2"}), "node0.nic0")
    plan = search_plan(topology, place_ranks(topology, 8, "per-server:4"))
    node0 = {hop.recv_nic for c in plan.channels for (_, dst), hop in c.net.items() if dst < 4}
    node0 |= {hop.send_nic for c in plan.channels for (src, _), hop in c.net.items() if src < 4}
    assert node0 == {"node0.nic1", "node0.nic2", "node0.nic3"}
    row = predict(topology, "allreduce", [2**26], placement="per-server:4").rows[0]
    assert row.n_ranks == 8
