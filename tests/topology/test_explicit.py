"""Tests of the explicit topology format (simcoll.topology.explicit, through io.load)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.core.errors import SimcollError
from simcoll.topology.io import load
from simcoll.topology.routing import Router
from simcoll.topology.schema import LinkKind, NodeKind, gpu_nodes

GOOD = """\
schema = 1
description = "two GPUs on a switch"

[[nodes]]
id = "gpu0"
kind = "gpu"
rank = 0

[[nodes]]
id = "gpu1"
kind = "gpu"
rank = 1

[[nodes]]
id = "sw"
kind = "nvswitch"
reduces = true

[[links]]
from = "gpu0"
to = "sw"
kind = "nvlink"
bandwidth = "300 GB/s"
latency = "0.5 us"

[[links]]
from = "gpu1"
to = "sw"
kind = "nvlink"
bandwidth = "2400 Gbit/s"
latency = "500 ns"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "explicit.toml"
    path.write_text(text)
    return path


def test_explicit_file_builds_duplex_links_with_units(tmp_path: Path) -> None:
    graph = load(_write(tmp_path, GOOD))
    assert gpu_nodes(graph) == ["gpu0", "gpu1"]
    assert graph.nodes["sw"] == {"kind": NodeKind.NVSWITCH, "reduces": True}
    # Two duplex links: four directed edges; 2400 Gbit/s = 2400e9 / 8 = 300e9 B/s.
    assert graph.number_of_edges() == 4
    for u, v in [("gpu0", "sw"), ("sw", "gpu0"), ("gpu1", "sw"), ("sw", "gpu1")]:
        assert graph.edges[u, v] == {
            "kind": LinkKind.NVLINK,
            "bandwidth_bytes_per_s": 300e9,
            "latency_s": pytest.approx(0.5e-6, rel=1e-12),
        }
    assert graph.graph["description"] == "two GPUs on a switch"


def test_one_way_links(tmp_path: Path) -> None:
    text = GOOD.replace('latency = "500 ns"\n', 'latency = "500 ns"\nduplex = false\n')
    text += '\n[[links]]\nfrom = "sw"\nto = "gpu1"\nkind = "nvlink"\n'
    text += 'bandwidth = "100 GB/s"\nlatency = "1 us"\nduplex = false\n'
    graph = load(_write(tmp_path, text))
    assert graph.edges["gpu1", "sw"]["bandwidth_bytes_per_s"] == 300e9
    assert graph.edges["sw", "gpu1"]["bandwidth_bytes_per_s"] == 100e9


def test_shipped_explicit_example_loads_and_routes_over_the_uplink() -> None:
    graph = load("topologies/examples/two-switches.toml")
    edges = Router(graph).route("gpu0", "gpu3")
    assert edges == (("gpu0", "sw0"), ("sw0", "sw1"), ("sw1", "gpu3"))
    assert graph.edges["sw0", "sw1"]["bandwidth_bytes_per_s"] == 100e9 / 8


def _bad(name: str, old: str, new: str, message: str) -> object:
    return pytest.param(old, new, message, id=name)


# fmt: off
BAD = [
    _bad("link-to-undefined-node", 'to = "sw"\nkind = "nvlink"\nbandwidth = "300',
         'to = "sw9"\nkind = "nvlink"\nbandwidth = "300',
         "links[0].to: no node 'sw9' is defined in [[nodes]]"),
    _bad("duplicate-node", 'id = "gpu1"', 'id = "gpu0"',
         "nodes[1].id: 'gpu0' is already defined at nodes[0]"),
    _bad("duplicate-rank", "rank = 1", "rank = 0",
         "gpu1: rank 0 is already held by 'gpu0'; ranks must be unique"),
    _bad("gbps", '"300 GB/s"', '"2400 Gbps"',
         "links[0].bandwidth: unit 'Gbps' is ambiguous (bits or bytes?): "
         "write '2400 Gbit/s' or '2400 GB/s'"),
    _bad("bare-number", '"300 GB/s"', "300",
         "links[0].bandwidth: got int 300; expected a quantity string with its unit, "
         "e.g. '300 GB/s'"),
    _bad("zero-bandwidth", '"300 GB/s"', '"0 GB/s"',
         "links[0].bandwidth: must be positive, got '0 GB/s'"),
    _bad("unknown-node-kind", 'kind = "nvswitch"', 'kind = "router"',
         "nodes[2].kind: unknown kind 'router'; valid: gpu, nvswitch, pcie_switch, cpu, nic, "
         "switch"),
    _bad("unknown-link-key", 'latency = "0.5 us"', 'latency = "0.5 us"\nspeed = 1',
         "links[0].speed: unknown key; valid keys: from, to, kind, bandwidth, latency, duplex"),
    _bad("rank-as-string", "rank = 1", 'rank = "1"',
         "nodes[1].rank: expected an integer, got str '1'"),
    _bad("bool-as-rank", "rank = 1", "rank = true",
         "nodes[1].rank: expected an integer, got bool True"),
    _bad("unreachable-gpu", 'latency = "500 ns"\n', 'latency = "500 ns"\nduplex = false\n',
         "gpu0: GPU 'gpu0' (rank 0) cannot reach GPU 'gpu1' (rank 1)"),
    _bad("negative-memory-bandwidth", "schema = 1\n",
         'schema = 1\ngpu_memory_bandwidth = "-3 GB/s"\n',
         "gpu_memory_bandwidth: must be positive, got -3000000000.0 bytes/s"),
    _bad("unknown-top-level-key", "schema = 1\n", "schema = 1\nbuilders = 2\n",
         "builders: unknown key; valid keys: schema, description, calibration, "
         "gpu_memory_bandwidth, host_memory_bandwidth, gpu, p2p, routing, transport, nodes, links"),
]
# fmt: on


@pytest.mark.parametrize(("old", "new", "message"), BAD)
def test_bad_explicit_files_get_one_line_naming_the_element(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    assert old in GOOD
    path = _write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(SimcollError) as info:
        load(path)
    assert str(info.value) == f"{path}: {message}"


def test_overrides_are_refused_on_explicit_files(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    with pytest.raises(SimcollError) as info:
        load(path, {"n_gpus": "4"})
    assert str(info.value) == (
        f"{path}: --set n_gpus: --set only changes builder parameters, and an explicit "
        "topology (nodes and links) has none"
    )


def test_routing_table_sets_the_rule_and_seed(tmp_path: Path) -> None:
    graph = load(_write(tmp_path, GOOD + '\n[routing]\nrule = "lowest_ids"\necmp_seed = 7\n'))
    assert (graph.graph["routing"], graph.graph["ecmp_seed"]) == ("lowest_ids", 7)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'rule = "random"',
            "routing.rule: expected one of ecmp, lowest_ids, dmodk, got str 'random'",
        ),
        ("ecmp_seed = 1.5", "routing.ecmp_seed: expected an integer, got float 1.5"),
        ("hash = 1", "routing.hash: unknown key; valid keys: rule, ecmp_seed"),
    ],
)
def test_bad_routing_table(tmp_path: Path, table: str, message: str) -> None:
    path = _write(tmp_path, GOOD + f"\n[routing]\n{table}\n")
    with pytest.raises(SimcollError) as info:
        load(path)
    assert str(info.value) == f"{path}: {message}"


def test_nodes_must_be_tables(tmp_path: Path) -> None:
    path = _write(tmp_path, "schema = 1\nnodes = 3\nlinks = []\n")
    with pytest.raises(SimcollError) as info:
        load(path)
    assert str(info.value) == f"{path}: nodes: must be an array of tables ([[nodes]])"
