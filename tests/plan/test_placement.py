"""Rank placement (simcoll.plan.placement.place_ranks) and what it costs on a fabric."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from simcoll import predict
from simcoll.core.errors import ConfigError
from simcoll.plan.placement import place_ranks
from simcoll.topology.builders import switch_star
from simcoll.topology.clusters import fat_tree

NIC_BYTES_PER_S = 25e9


def _two_leaves_2_to_1():
    """8 one-GPU servers, 4 NICs per leaf, 2 uplinks per leaf (2:1), d-mod-k routing."""
    graph = fat_tree(
        8, gpus_per_node=1, nvlinks_per_gpu=1, nvlink_bandwidth_bytes_per_s=1e11,
        nvlink_latency_s=1e-6, nics_per_node=1, nic_bandwidth_bytes_per_s=NIC_BYTES_PER_S,
        nic_latency_s=1e-6, pcie_bandwidth_bytes_per_s=64e9, pcie_latency_s=1e-6,
        leaf_down_ports=4, oversubscription=2.0, fabric_latency_s=1e-6,
    )  # fmt: skip
    graph.graph["routing"] = "dmodk"
    return graph


def _most_loaded_uplink(gpu_of_rank: list[int]) -> int:
    """Ring edges sharing the busiest leaf uplink, counted by hand.

    One GPU per server, so NCCL's ring is the rank order. GPU i sits on leaf i // 4 at port
    i % 4; an edge to another leaf climbs the uplink to spine (destination port mod 2),
    as d-mod-k routes every flow to one destination through one spine.
    """
    load: Counter[tuple[int, int]] = Counter()
    n = len(gpu_of_rank)
    for r in range(n):
        a, b = gpu_of_rank[r], gpu_of_rank[(r + 1) % n]
        if a // 4 != b // 4:
            load[a // 4, b % 4 % 2] += 1
    return max(load.values())


@pytest.mark.parametrize("placement", ["random:0", "random:1", "random:2", "random:3"])
def test_random_placement_is_slower_by_its_most_loaded_uplink(placement: str) -> None:
    # A ring edge alone on its uplink runs at the NIC rate; m edges on one uplink share it,
    # and the ring goes as fast as its slowest edge: busbw falls by m / m_linear.
    topology = _two_leaves_2_to_1()
    size = [2**28]
    linear = predict(topology, "allreduce", size, algorithm="ring", protocol="simple")
    moved = predict(topology, "allreduce", size, algorithm="ring", protocol="simple",
                    placement=placement)  # fmt: skip
    gpus = [int(node.removeprefix("gpu")) for node in place_ranks(topology, 8, placement)]
    m_linear, m = _most_loaded_uplink(list(range(8))), _most_loaded_uplink(gpus)
    assert (m_linear, m) == (1, 2)
    assert linear.rows[0].busbw_bytes_per_s == pytest.approx(NIC_BYTES_PER_S, rel=0.01)
    ratio = linear.rows[0].busbw_bytes_per_s / moved.rows[0].busbw_bytes_per_s
    assert ratio == pytest.approx(m / m_linear, rel=0.01)
    assert moved.rows[0].placement == placement


def test_placement_file(tmp_path: Path) -> None:
    star = switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    path = tmp_path / "hosts.txt"
    path.write_text("# rank 0 first\ngpu3\n2  # by GPU number\n\ngpu0\n")
    assert place_ranks(star, 3, str(path)) == ("gpu3", "gpu2", "gpu0")
    for text, n_ranks, message in [
        ("gpu3\n3\n", 2, r"hosts.txt: line 2: GPU 'gpu3' is placed twice \(also line 1\)"),
        ("gpu9\n", 1, r"hosts.txt: line 1: no GPU 'gpu9' in the topology"),
        ("gpu1\n", 2, r"hosts.txt: places 1 ranks, fewer than the 2 asked for"),
        # issue 29: lines past n, duplicates among them, were accepted
        ("gpu1\ngpu2\ngpu3\n", 2, r"hosts.txt: places 3 ranks, more than the 2 asked for"),
        ("gpu1\ngpu2\ngpu1\n", 2, r"hosts.txt: line 3: GPU 'gpu1' is placed twice"),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            place_ranks(star, n_ranks, str(path))
    with pytest.raises(ConfigError, match="no such file"):
        place_ranks(star, 2, str(tmp_path / "none.txt"))


def test_random_placement_is_reproducible_and_a_permutation() -> None:
    star = switch_star(16, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    a, b = place_ranks(star, 16, "random:7"), place_ranks(star, 16, "random:7")
    assert a == b
    assert sorted(a) == sorted(f"gpu{i}" for i in range(16))
    assert place_ranks(star, 16, "random") == place_ranks(star, 16, "random:0")
    with pytest.raises(ConfigError, match=r"GPUs"):
        place_ranks(star, 17, "random:1")


def test_per_server_places_k_ranks_on_each_server_in_turn():
    from simcoll.plan.placement import per_server_ranks  # noqa: PLC0415
    from simcoll.topology import load  # noqa: PLC0415

    two = load("topologies/h100-ib-fat-tree.toml", {"n_nodes": "2"})  # 2 servers of 8 GPUs
    # by hand: GPUs are numbered server by server, 8 each; 3 a server are 0-2 and 8-10
    assert place_ranks(two, 6, "per-server:3") == ("gpu0", "gpu1", "gpu2", "gpu8", "gpu9", "gpu10")
    assert place_ranks(two, 4, "per-server:3") == ("gpu0", "gpu1", "gpu2", "gpu8")
    assert per_server_ranks(two, "per-server:3") == 6
    assert per_server_ranks(two, "linear") is None
    for placement, message in [
        ("per-server:0", "per-server:0: K must be 1 to 8, the GPUs of the smallest server"),
        ("per-server:9", "per-server:9: K must be 1 to 8"),
    ]:
        with pytest.raises(ConfigError, match=f"^--placement: {message}"):
            place_ranks(two, 2, placement)
    with pytest.raises(ConfigError, match=r"^--placement: per-server:2 holds 4 ranks on these "
                       r"servers, fewer than the 6 asked for$"):  # fmt: skip
        place_ranks(two, 6, "per-server:2")


def test_predict_runs_k_ranks_a_server_where_none_are_asked_for(capsys):
    from simcoll.cli import main  # noqa: PLC0415

    topology = str(Path(__file__).resolve().parents[2] / "topologies/h100-ib-fat-tree.toml")
    assert main(["predict", topology, "--set", "n_nodes=2", "--placement", "per-server:4",
                 "--collective", "allreduce", "--sizes", "1M", "--format", "csv"]) == 0  # fmt: skip
    header, row = capsys.readouterr().out.splitlines()[:2]
    fields = dict(zip(header.split(","), row.split(","), strict=True))
    assert (fields["n_ranks"], fields["placement"]) == ("8", "per-server:4")  # 2 servers x 4
