"""Tests of simcoll.algorithms.collnet: NCCL's CollNet Direct and Chain all-reduces."""

from __future__ import annotations

import networkx as nx
import pytest

from simcoll.algorithms import build_schedule
from simcoll.algorithms.chunking import transfer_count
from simcoll.algorithms.collnet import collnet_chain_allreduce, collnet_direct_allreduce
from simcoll.core.checks import check_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, ScheduleError
from simcoll.models import alphabeta_time_s
from simcoll.plan.tuning import parse_nccl_knobs
from simcoll.prediction import predict
from simcoll.sim.engine import simulate
from simcoll.topology.io import load
from simcoll.topology.schema import LinkKind, NodeKind, validate

NAMES = ("collnet_direct", "collnet_chain")
B_NVLINK = 400e9  # bytes/s per direction, each GPU to its server's NVSwitch
B_NIC = 50e9  # each GPU's NIC to the reducing switch
A_NVLINK = 0.5e-6  # s per link
A_NIC = 2e-6


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("n_nodes", "g"), [(2, 1), (2, 2), (3, 2), (2, 4), (4, 4), (6, 2)])
def test_collnet_computes_an_allreduce(name: str, n_nodes: int, g: int) -> None:
    # every grouping of the servers under first-level switches, with channels and chunks
    n = n_nodes * g
    for per_switch in [d for d in range(1, n_nodes + 1) if n_nodes % d == 0]:
        for channels, chunks in [(1, 1), (3, 2)]:
            schedule = build_schedule("allreduce", name, n_ranks=n, size_bytes=n * 48 * 6,
                                      gpus_per_node=g, ranks_per_switch=per_switch * g,
                                      n_channels=channels, n_chunks=chunks)  # fmt: skip
            check_schedule(schedule)
            # the count the cost check refuses by, before anything is built
            assert schedule.n_transfers == transfer_count(
                Collective.ALLREDUCE, name, n, n_channels=channels, n_chunks=chunks,
                gpus_per_node=g, ranks_per_switch=per_switch * g)  # fmt: skip


def test_with_one_gpu_a_server_collnet_is_sharp() -> None:
    # no server to reduce within: every rank is its server's head, straight to the switch
    direct = build_schedule("allreduce", "collnet_direct", n_ranks=4, size_bytes=64,
                            gpus_per_node=1)  # fmt: skip
    sharp = build_schedule("allreduce", "sharp", n_ranks=4, size_bytes=64)
    assert direct.bytes_sent_per_rank().tolist() == sharp.bytes_sent_per_rank().tolist()
    assert direct.n_transfers == sharp.n_transfers == 8


def test_traffic_per_gpu_and_per_switch() -> None:
    # 2 servers x 4 GPUs, S = 4 x 1,000. Direct: a GPU sends its 3 other heads S / 4 each,
    # S / 4 up and S / 4 to each of 3 GPUs: 7 S / 4; each of the 4 switch endpoints
    # (one per head index) gets S / 4 from 2 heads and sends it back to both. Chain, one
    # channel (head 0, chain 0-1-2-3): GPUs 1 and 2 send S up and S down, GPU 0 S to the
    # switch and S down, GPU 3 S up only.
    s = 4000
    direct = collnet_direct_allreduce(8, s, gpus_per_node=4)
    assert direct.bytes_sent_per_rank().tolist() == [7 * s // 4] * 8 + [2 * s // 4] * 4
    assert direct.bytes_received_per_rank().tolist() == [7 * s // 4] * 8 + [2 * s // 4] * 4
    chain = collnet_chain_allreduce(8, s, gpus_per_node=4)
    assert chain.bytes_sent_per_rank().tolist() == [2 * s, 2 * s, 2 * s, s] * 2 + [2 * s]
    assert chain.bytes_received_per_rank().tolist() == [2 * s, 2 * s, 2 * s, s] * 2 + [2 * s]
    # with 4 channels every GPU heads one: the load spreads, S / 4 a channel
    spread = collnet_chain_allreduce(8, s, gpus_per_node=4, n_channels=4)
    assert spread.n_switches == 4
    assert spread.bytes_sent_per_rank().tolist() == [7 * s // 4] * 8 + [2 * s // 4] * 4


def test_one_server_and_uneven_servers_are_refused() -> None:
    with pytest.raises(ScheduleError, match=r"^collnet_chain: 8 ranks on 1 server of 8 GPUs"):
        collnet_chain_allreduce(8, 64, gpus_per_node=8)
    with pytest.raises(ScheduleError, match=r"^collnet_direct: 6 ranks do not split into "
                                            r"servers of 4 GPUs$"):  # fmt: skip
        collnet_direct_allreduce(6, 64, gpus_per_node=4)
    with pytest.raises(ScheduleError, match=r"first-level switches of 2 servers each"):
        collnet_direct_allreduce(6, 64, gpus_per_node=2, ranks_per_switch=4)


def _two_servers(g: int, *, pcie: bool = False) -> nx.DiGraph[str]:
    """Two servers of ``g`` GPUs: each server's GPUs on its NVSwitch (or, ``pcie``, a
    PCIe switch), every GPU's NIC on one reducing switch."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_node("sw", kind=NodeKind.SWITCH, reduces=True)
    local_kind, local_link = ((NodeKind.PCIE_SWITCH, LinkKind.PCIE) if pcie
                              else (NodeKind.NVSWITCH, LinkKind.NVLINK))  # fmt: skip
    cables = []
    for server in range(2):
        graph.add_node(f"nvs{server}", kind=local_kind)
        for local in range(g):
            rank = server * g + local
            graph.add_node(f"gpu{rank}", kind=NodeKind.GPU, rank=rank, host=f"h{server}")
            cables.append((f"gpu{rank}", f"nvs{server}", local_link, B_NVLINK, A_NVLINK))
            cables.append((f"gpu{rank}", "sw", LinkKind.IB, B_NIC, A_NIC))
    for u, v, kind, bandwidth, latency in cables:
        for a, b in ((u, v), (v, u)):
            graph.add_edge(a, b, kind=kind, bandwidth_bytes_per_s=bandwidth, latency_s=latency)
    return validate(graph)


@pytest.mark.parametrize("model", ["ideal", "flow"])
def test_direct_and_chain_take_their_hops_one_after_another(model: str) -> None:
    # Unchunked, each hop runs alone. 2 servers x 4 GPUs, S = 2^24 bytes.
    # Direct: the scatter (each GPU's NVLink out carries 3 S / 4, to 3 heads; 2 links),
    # up (S / 4 on each NIC), back, the gather: 2 (3 S / (4 Bn) + 2 an) + 2 (S / (4 Bi) + ai).
    # Chain, one channel: 3 hops up the chain (S each, 2 links), up, back, 3 hops down:
    # 6 (S / Bn + 2 an) + 2 (S / Bi + ai). Both endpoints of direct's 4 head groups sit
    # on the one switch ('sw', shared).
    # Without contention (ideal) each of the scatter's 3 flows has the link alone: S / 4.
    s, graph = 2**24, _two_servers(4)
    direct = simulate(graph, collnet_direct_allreduce(8, s, gpus_per_node=4), model=model)
    assert direct.rank_nodes[8:] == ("sw",) * 4
    shares = 3 if model == "flow" else 1
    expected = (2 * (shares * s / (4 * B_NVLINK) + 2 * A_NVLINK)
                + 2 * (s / (4 * B_NIC) + A_NIC))  # fmt: skip
    assert direct.time_s == pytest.approx(expected, rel=1e-9)
    chain = simulate(graph, collnet_chain_allreduce(8, s, gpus_per_node=4), model=model)
    expected = 6 * (s / B_NVLINK + 2 * A_NVLINK) + 2 * (s / B_NIC + A_NIC)
    assert chain.time_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_without_contention_the_closed_form_is_the_ideal_run(name: str) -> None:
    # Each flow alone on its links (model "ideal"): the formula is the run's time, with
    # channels (Chain's are chains of their own, each with a quarter) and chunks.
    s, graph = 2**26, _two_servers(4)
    for channels, chunks in ((1, 1), (4, 1), (4, 8)):
        schedule = build_schedule("allreduce", name, n_ranks=8, size_bytes=s, gpus_per_node=4,
                                  n_channels=channels, n_chunks=chunks)  # fmt: skip
        ideal = simulate(graph, schedule, model="ideal").time_s
        closed = alphabeta_time_s(graph, "allreduce", name, 8, s, n_channels=channels,
                                  n_chunks=chunks, contention=False)  # fmt: skip
        assert closed == pytest.approx(ideal, rel=1e-9), (channels, chunks)


@pytest.mark.parametrize("name", NAMES)
def test_the_closed_form_is_the_flow_models_time(name: str) -> None:
    # The analytical model's formula against the run, unchunked (exact) and chunked (the
    # first chunk through every hop alone, the rest at the busiest hop's loaded pace:
    # conservative, within 25 %, where the flow model overlaps the fill with the rest).
    s, graph = 2**24, _two_servers(4)
    for chunks in (1, 8):
        schedule = build_schedule("allreduce", name, n_ranks=8, size_bytes=s, gpus_per_node=4,
                                  n_chunks=chunks)  # fmt: skip
        flow = simulate(graph, schedule, model="flow").time_s
        closed = alphabeta_time_s(graph, "allreduce", name, 8, s, n_chunks=chunks)
        assert closed == pytest.approx(flow, rel=1e-9 if chunks == 1 else 0.25), chunks
        assert closed >= flow * (1 - 1e-9)


def test_ncclalgo_names_collnet_as_nccl_runs_it() -> None:
    assert parse_nccl_knobs(["NCCL_ALGO=CollNetDirect"]).algorithm == "collnet_direct"
    assert parse_nccl_knobs(["NCCL_ALGO=CollNetChain"]).algorithm == "collnet_chain"
    assert parse_nccl_knobs(["NCCL_ALGO=CollNet"]).algorithm == "collnet_direct"


def test_collnet_on_sharp_switches_of_a_dgx_fat_tree() -> None:
    # 2 DGX H100 on h100-ib-fat-tree with SHARP: CollNet Direct moves S / 8 over each NIC
    # each way where NCCL's ring moves about 2 S / 8 (2 (n - 1) / n S per GPU, over 8
    # NICs for 16 ranks' traffic between 2 servers... each NIC half the ring's bytes): at
    # 1 GiB its busbw beats the ring's; both runs on the one path predict takes, NCCL's
    # plan for the ring, the file's switches reducing for CollNet.
    tree = load("topologies/h100-ib-fat-tree.toml", {"n_nodes": "2", "sharp": "true"})
    size = [2**30]
    (ring,) = predict(tree, "allreduce", size, algorithm="ring", protocol="simple").rows
    for name in NAMES:
        (row,) = predict(tree, "allreduce", size, algorithm=name, protocol="simple").rows
        assert row.algorithm == name
        assert row.busbw_bytes_per_s > ring.busbw_bytes_per_s, name
    plain = load("topologies/h100-ib-fat-tree.toml", {"n_nodes": "2"})
    with pytest.raises(ConfigError, match="collnet_direct needs a switch that reduces"):
        predict(plain, "allreduce", size, algorithm="collnet_direct")


def test_each_head_indexs_tree_gets_a_root_of_its_own_where_the_fabric_has_them() -> None:
    # 8 DGX H100 on h100-ib-fat-tree with SHARP: 4 servers a leaf (32 ranks), so each of
    # Direct's 8 head groups is 2 leaves under a root. The roots spread over the spines
    # (the least used of the nearest), as the closed form places them in the same pass:
    # unchunked, its time is the flow model's.
    tree = load("topologies/h100-ib-fat-tree.toml", {"n_nodes": "8", "sharp": "true"})
    schedule = build_schedule("allreduce", "collnet_direct", n_ranks=64, size_bytes=2**24,
                              gpus_per_node=8, ranks_per_switch=32)  # fmt: skip
    result = simulate(tree, schedule, model="flow")
    endpoints = result.rank_nodes[64:]
    roots = endpoints[2::3]  # per head: leaf, leaf, root
    assert len(endpoints) == 24
    assert len(set(roots)) == 8
    assert set(endpoints) - set(roots) == {"leaf0", "leaf1"}
    closed = alphabeta_time_s(tree, "allreduce", "collnet_direct", 64, 2**24,
                              ranks_per_switch=32)  # fmt: skip
    assert closed == pytest.approx(result.time_s, rel=1e-9)


def test_nccls_model_costs_collnet_as_tuning_cc_does() -> None:
    # NCCL's tuning.cc for CollNet, Simple, on 2 servers of 4 GPUs whose intra-server ring
    # runs at 400 GB/s (each GPU's NVLink to its NVSwitch): busBw = bwIntra (x 0.85 for
    # Direct from compute capability 9.0; every GPU has its NIC, so no GPU/NIC factor),
    # algbw = busBw / 2; latency Direct 2 (min(1, ppn - 1) 3.7 + (ppn - 1) 0.4) + 31 us,
    # Chain 2 (ppn - 1) 2.8 + 30 us (NVLink hwLat, NET hwLat; base 0).
    from simcoll.models.nccl import nccl_estimate  # noqa: PLC0415

    s, graph = 2**30, _two_servers(4)
    for name, bus_gbps, latency_us in (("collnet_direct", 400 * 0.85, 2 * (3.7 + 3 * 0.4) + 31),
                                       ("collnet_chain", 400.0, 2 * 3 * 2.8 + 30)):  # fmt: skip
        estimate = nccl_estimate(graph, "allreduce", name, "simple", 8, s, n_channels=4)
        assert estimate.bus_bandwidth_bytes_per_s == pytest.approx(bus_gbps * 1e9, rel=1e-12)
        assert estimate.latency_s == pytest.approx(latency_us * 1e-6, rel=1e-12)
        assert estimate.time_s == pytest.approx(latency_us * 1e-6 + s / (bus_gbps / 2 * 1e9),
                                                rel=1e-12)  # fmt: skip
    with pytest.raises(ConfigError, match="NCCL runs CollNet with the simple protocol only"):
        nccl_estimate(graph, "allreduce", "collnet_chain", "LL128", 8, s, n_channels=4)
    with pytest.raises(ScheduleError, match="8 ranks on 1 server of 8 GPUs"):
        nccl_estimate(load("topologies/dgx-h100.toml"), "allreduce", "collnet_direct",
                      "simple", 8, s, n_channels=4)  # fmt: skip
    # NCCL disables CollNet Direct where a server's GPUs share no NVSwitch; Chain runs
    pcie = _two_servers(4, pcie=True)
    with pytest.raises(ConfigError, match="CollNet Direct only where the GPUs of a server "
                                          "share an NVSwitch"):  # fmt: skip
        nccl_estimate(pcie, "allreduce", "collnet_direct", "simple", 8, s, n_channels=4)
    chain = nccl_estimate(pcie, "allreduce", "collnet_chain", "simple", 8, s, n_channels=4)
    assert chain.latency_s == pytest.approx((2 * 3 * 2.8 + 30) * 1e-6, rel=1e-12)  # PCIe's


def test_ncclcollnetenable_lets_nccls_pick_consider_collnet() -> None:
    # NCCL considers CollNet only with NCCL_COLLNET_ENABLE=1 (and its SHARP plugin: here,
    # switches that reduce). On 2 DGX H100 with SHARP, its model then picks CollNet Direct
    # at 1 MiB (latency 2 (3.7 + 7 x 0.4) + 31 = 44 us, against the tree's and NVLS-tree's
    # more); without the knob, or without SHARP, never.
    sharp = load("topologies/h100-ib-fat-tree.toml", {"n_nodes": "2", "sharp": "true"})
    plain = load("topologies/h100-ib-fat-tree.toml", {"n_nodes": "2"})
    enabled = parse_nccl_knobs(["NCCL_COLLNET_ENABLE=1"])
    assert enabled.collnet_enable
    assert not parse_nccl_knobs(["NCCL_COLLNET_ENABLE=0"]).collnet_enable
    with pytest.raises(ConfigError, match="expected 0 or 1, got 'yes'"):
        parse_nccl_knobs(["NCCL_COLLNET_ENABLE=yes"])
    sizes = [2**20, 2**30]
    picked = [r.algorithm for r in predict(sharp, "allreduce", sizes, knobs=enabled).rows]
    assert picked[0] == "collnet_direct"
    default = [r.algorithm for r in predict(sharp, "allreduce", sizes).rows]
    assert not {"collnet_direct", "collnet_chain"} & set(default)
    without = [r.algorithm for r in predict(plain, "allreduce", sizes, knobs=enabled).rows]
    assert not {"collnet_direct", "collnet_chain"} & set(without)
