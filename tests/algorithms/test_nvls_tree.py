"""Tests of NVLS-tree (simcoll.algorithms.nvls.nvls_tree_allreduce): that it computes an
all-reduce, what it moves by hand, where its switches sit, its rate on a cluster by hand,
and NCCL's model of it."""

from __future__ import annotations

import numpy as np
import pytest

from simcoll.algorithms import build_schedule
from simcoll.algorithms.nvls import nvls_tree_allreduce
from simcoll.core.checks import check_schedule
from simcoll.core.errors import ConfigError, ScheduleError
from simcoll.core.numeric import check_numeric
from simcoll.models.nccl import nccl_estimate, nccl_time_s
from simcoll.plan.placement import map_ranks, switch_endpoints
from simcoll.prediction import predict
from simcoll.topology.io import load

GIB = 2**30
CLUSTER = "topologies/h100-ib-fat-tree.toml"


def cluster(n_nodes: int):
    return load(CLUSTER, overrides={"n_nodes": str(n_nodes)})


@pytest.mark.parametrize(("n", "g"), [(2, 1), (4, 2), (6, 2), (8, 2), (12, 4), (16, 8),
                                      (24, 8), (32, 8), (40, 8)])  # fmt: skip
@pytest.mark.parametrize(("channels", "chunks"), [(1, 1), (2, 3)])
def test_it_computes_an_all_reduce(n: int, g: int, channels: int, chunks: int) -> None:
    size_bytes = 4 * n * 2 * channels * chunks * 3
    s = build_schedule("allreduce", "nvls_tree", n_ranks=n, size_bytes=size_bytes,
                       gpus_per_node=g, n_channels=channels, n_chunks=chunks)  # fmt: skip
    check_schedule(s)  # symbolically, with no race between transfers
    check_numeric(s, dtype=np.int32)  # on numbers, against numpy


def test_one_server_is_nvls() -> None:
    s = nvls_tree_allreduce(8, 8 * 64, gpus_per_node=8)
    assert s.algorithm == "nvls"
    assert s.n_switches == 1


def test_servers_must_split_the_ranks() -> None:
    with pytest.raises(ScheduleError, match="6 ranks do not split into servers"):
        nvls_tree_allreduce(6, 64, gpus_per_node=4)


def test_bytes_per_rank_by_hand_on_four_servers() -> None:
    # Over NVLink every GPU sends S (its whole buffer, up for every shard's reduction)
    # plus, as a head, S/g (its shard's sum up for the multicast): S (g + 1)/g, and
    # receives as much. Over the network, head k of server j sends half a shard (S/2g)
    # per tree edge it has (to its parent, and to each child on the way down).
    # ncclGetDtree on 4 servers: tree 0 is 0 -> 2 -> {1, 3}; tree 1 is 3 -> 1 -> {2, 0}.
    # Edges sent per server over both trees: server 0: 1 (down to 2) + 1 (up to 1) = 2;
    # server 1: 1 (up to 2) + 1 (up to 3) + 2 (down to 2, 0) = 4; server 2: 1 + 2 + 1 = 4;
    # server 3: 1 (up to 2) + 1 (down to 1) = 2.
    g, size = 4, 4 * 16 * 2 * 64
    s = nvls_tree_allreduce(16, size, gpus_per_node=g)
    nvlink = size * (g + 1) // g
    half_shard = size // (2 * g)
    edges = [2, 4, 4, 2]
    expected = [nvlink + edges[r // g] * half_shard for r in range(16)]
    assert s.bytes_sent_per_rank()[:16].tolist() == expected
    assert s.bytes_received_per_rank()[:16].tolist() == expected
    # Each switch takes in g x S (every GPU's buffer) + S (the g heads' sums) and sends
    # out S (the shards' sums to their heads) + g x S (the multicast).
    assert s.bytes_sent_per_rank()[16:].tolist() == [(g + 1) * size] * 4


def test_each_switch_endpoint_is_its_servers_nvswitch() -> None:
    topology = cluster(2)
    nodes = map_ranks(topology, 16)
    s = nvls_tree_allreduce(16, 16 * 64, gpus_per_node=8)
    switches = switch_endpoints(topology, nodes, s)
    assert len(switches) == 2
    for j, switch in enumerate(switches):
        hosts = {topology.nodes[gpu]["host"] for gpu in nodes[8 * j : 8 * j + 8]}
        assert len(hosts) == 1
        assert all(topology.has_edge(gpu, switch) for gpu in nodes[8 * j : 8 * j + 8])
        assert topology.nodes[switch].get("reduces") is True


def test_a_server_without_a_reducing_switch_is_refused() -> None:
    topology = load(CLUSTER, overrides={"n_nodes": "2", "nvls": "false"})
    with pytest.raises(ConfigError, match="switch that reduces"):
        predict(topology, "allreduce", [GIB], algorithm="nvls_tree", n_ranks=16)


@pytest.mark.parametrize(("n_nodes", "algbw_gbps"), [(2, 400.0), (4, 200.0)])
def test_its_rate_on_bare_links_by_hand(n_nodes: int, algbw_gbps: float) -> None:
    # Bare links (no calibration): a GPU's NVLink to its NVSwitch is 18 x 25 = 450 GB/s
    # and carries S (g + 1)/g = 9/8 S each way: S/400 GB/s. A head's NIC is 50 GB/s and
    # carries, per direction, S/g on two servers (S/400 GB/s) and 2 S/g on an inner
    # server of four (S/200 GB/s). The flow model pipelines them and tends to the slower
    # of the two from below.
    rows = predict(cluster(n_nodes), "allreduce", [4 * GIB], algorithm="nvls_tree",
                   n_ranks=8 * n_nodes, calibration=None).rows  # fmt: skip
    algbw = rows[0].algbw_bytes_per_s / 1e9
    assert algbw == pytest.approx(algbw_gbps, rel=0.04)
    assert algbw <= algbw_gbps * 1.0001


def test_nccls_model_of_it_by_hand() -> None:
    # tuning.cc: per channel, intraBw = bwIntra x nvlsEfficiency x (nCh - 1)/nCh x 2,
    # interBw = bwInter (x 2 on two nodes), capped at perChMaxNVLSTreeBw (Hopper: 57.7 on
    # 2 nodes, 45.5 on more); busBw = nCh x min(...), algBw = busBw x n / (2 (n - 1)).
    # 16 channels; bwIntra 450/16 per channel, bwInter (8 NICs x 50 GB/s)/16.
    # Latency: intraLat (NVLink, NVLSTree 25) + 2 log2(nNodes) x interLat (NET, 20.9).
    intra = 450 / 16 * 0.85 * 15 / 16 * 2
    for n_nodes, inter, cap in ((2, 400 / 16 * 2, 57.7), (4, 400 / 16, 45.5)):
        n = 8 * n_nodes
        bus = 16 * min(intra, inter, cap)
        lat_us = 25 + 2 * (n_nodes.bit_length() - 1) * 20.9
        e = nccl_estimate(cluster(n_nodes), "allreduce", "nvls_tree", "simple", n, GIB,
                          n_channels=16)  # fmt: skip
        assert e.bus_bandwidth_bytes_per_s == pytest.approx(bus * 1e9, rel=1e-9)
        assert e.latency_s == pytest.approx(lat_us * 1e-6, rel=1e-9)
        algbw = bus * n / (2 * (n - 1))
        assert e.time_s == pytest.approx((lat_us + GIB / (1000 * algbw)) * 1e-6, rel=1e-9)


def test_nccls_model_refuses_it_on_one_server() -> None:
    with pytest.raises(ConfigError, match="spans servers"):
        nccl_time_s(cluster(1), "allreduce", "nvls_tree", "simple", 8, GIB, n_channels=16)
    with pytest.raises(ConfigError, match="simple protocol"):
        nccl_time_s(cluster(2), "allreduce", "nvls_tree", "LL", 16, GIB, n_channels=16)


@pytest.mark.parametrize("n_nodes", [2, 4])
def test_nccls_pick_for_large_all_reduces_across_h100_servers_is_nvls_tree(n_nodes: int) -> None:
    # NVIDIA (nccl-tests#309, kiskra-nvidia): "You should see NVLS being used with
    # single-node runs, NVLSTree with multi-node."
    (row,) = predict(cluster(n_nodes), "allreduce", [GIB], n_ranks=8 * n_nodes).rows
    assert (row.algorithm, row.protocol) == ("nvls_tree", "simple")


def test_bus_bandwidth_falls_from_two_servers_to_four() -> None:
    # On two servers each head's NIC carries S/g each way, on four up to 2 S/g (an inner
    # server of a binary tree): with the shipped calibration the bus bandwidth at 4 GiB
    # falls by more than a fifth (measured in nccl-tests#309: 466 -> 325..365 GB/s).
    two, four = (predict(cluster(k), "allreduce", [4 * GIB], n_ranks=8 * k).rows[0]
                 for k in (2, 4))  # fmt: skip
    assert four.busbw_bytes_per_s < 0.8 * two.busbw_bytes_per_s


@pytest.mark.parametrize("n_nodes", [2, 4])
def test_the_analytical_model_estimates_it_within_a_tenth_of_flow(n_nodes: int) -> None:
    # Across servers the closed form is an estimate (its hops chain level by level, the
    # two trees' levels together): within 10 % of the flow model at 1 GiB.
    topology = cluster(n_nodes)
    flow, formula = (
        predict(topology, "allreduce", [GIB], algorithm="nvls_tree", n_ranks=8 * n_nodes,
                model=model).rows[0].time_s
        for model in ("flow", "analytical")
    )  # fmt: skip
    assert formula == pytest.approx(flow, rel=0.10)


def test_nccl_never_picks_it_where_it_cannot_run() -> None:
    # One GPU per server (NCCL turns NVLS off), ranks of a server not consecutive, a head
    # whose NIC is down: the default pick is something else, and NCCL's model refuses
    # the first two by name.
    topology = cluster(4)
    one_each = tuple(f"gpu{8 * j}" for j in range(4))
    strided = tuple(f"gpu{8 * (i % 4) + i // 4}" for i in range(16))
    for nodes, why in ((one_each, "two GPUs or more"), (strided, "consecutive")):
        with pytest.raises(ConfigError, match=why):
            nccl_time_s(topology, "allreduce", "nvls_tree", "simple", len(nodes), GIB,
                        n_channels=16, rank_nodes=nodes)  # fmt: skip
    from simcoll.topology.whatif import fail  # noqa: PLC0415

    (row,) = predict(fail(cluster(2), "node0.nic0"), "allreduce", [GIB], n_ranks=16).rows
    assert row.algorithm != "nvls_tree"


def test_the_cost_estimate_counts_its_transfers() -> None:
    # estimate_point: 2g shards of pieces (64 of ~512 KiB at most), each piece sent up by
    # every GPU and down to every GPU plus 4 transfers per server: 16 x 64 x (32 + 8).
    # The schedule has 8 shards x 2 trees x 64 pieces, each 16 up + 2 to the heads + 1 up
    # the tree + 1 down + 2 up for the multicast + 16 down = 38 transfers: 38,912.
    from simcoll.models.estimate import estimate_point  # noqa: PLC0415

    e = estimate_point("allreduce", "nvls_tree", n_ranks=16, size_bytes=GIB, gpus_per_node=8)
    assert e.transfers == 16 * 64 * (32 + 8)
    s = nvls_tree_allreduce(16, GIB, gpus_per_node=8, n_chunks=64)
    assert s.n_transfers == 8 * 2 * 64 * 38
    assert e.transfers == pytest.approx(s.n_transfers, rel=0.1)


@pytest.mark.parametrize(("n_ranks", "g", "n_channels", "n_chunks"),
                         [(16, 8, 2, 3), (12, 4, 3, 2), (6, 2, 1, 1), (40, 8, 1, 2)])  # fmt: skip
def test_the_repeated_blocks_are_the_pieces_built_one_by_one(n_ranks, g, n_channels, n_chunks):
    # The schedule repeats one piece's transfers per (shard, tree) (ScheduleBuilder.
    # add_block); built piece by piece with _tree_piece instead it is the same, array for
    # array.
    from simcoll.algorithms.nvls import _tree_piece  # noqa: PLC0415
    from simcoll.core.collectives import Collective  # noqa: PLC0415
    from simcoll.core.schedule import ScheduleBuilder  # noqa: PLC0415
    from simcoll.plan.trees import double_binary_tree  # noqa: PLC0415

    size = 2**20
    got = nvls_tree_allreduce(n_ranks, size, gpus_per_node=g, n_channels=n_channels,
                              n_chunks=n_chunks)  # fmt: skip
    per_shard = 2 * n_channels * n_chunks
    groups = tuple(tuple(range(j * g, (j + 1) * g)) for j in range(n_ranks // g))
    b = ScheduleBuilder(Collective.ALLREDUCE, "nvls_tree", n_ranks=n_ranks, size_bytes=size,
                        pieces_per_block=g * per_shard, n_switches=len(groups))  # fmt: skip
    trees = double_binary_tree(len(groups))
    for j in range(per_shard):
        channel = (j // 2) % n_channels
        for local in range(g):
            _tree_piece(b, b.piece(0, local * per_shard + j), groups, local, trees[j % 2],
                        channel=channel, down_channel=n_channels + channel)  # fmt: skip
    want = b.build()
    for name in ("src", "dst", "op", "channel", "pieces_indptr", "pieces", "deps_indptr", "deps"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
