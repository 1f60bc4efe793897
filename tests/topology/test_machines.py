"""Tests of simcoll.topology.machines: closed-form counts, the DGX-1 mesh, files and errors."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from simcoll.core.errors import ConfigError
from simcoll.topology import builders, machines
from simcoll.topology.io import load, parse_overrides
from simcoll.topology.machines import BUILDERS, hybrid_cube_mesh, nvswitch_node, pcie_tree
from simcoll.topology.schema import LinkKind, NodeKind, gpu_nodes, validate

TOPOLOGIES = Path(__file__).parents[2] / "topologies"
MACHINE_FILES = [
    "dgx-a100.toml",
    "dgx-h100.toml",
    "dgx-h200.toml",
    "dgx-b200.toml",
    "dgx1-v100.toml",
    "pcie-8x-rtx4090.toml",
    "pcie-4x-switch.toml",
]

NVLINK_BYTES_PER_S = 25e9  # one NVLink2/3/4 link, per direction
NVLINK5_BYTES_PER_S = 50e9  # one NVLink5 link, per direction
PCIE_BYTES_PER_S = 16e9
CPU_LINK_BYTES_PER_S = 40e9
NVLINK: dict[str, Any] = {
    "nvlink_bandwidth_bytes_per_s": NVLINK_BYTES_PER_S,
    "nvlink_latency_s": 0.7e-6,
}
PCIE: dict[str, Any] = {"pcie_bandwidth_bytes_per_s": PCIE_BYTES_PER_S, "pcie_latency_s": 1e-6}
CPU_LINK: dict[str, Any] = {
    "cpu_link_bandwidth_bytes_per_s": CPU_LINK_BYTES_PER_S,
    "cpu_link_latency_s": 2e-6,
}
ARGUMENTS: dict[str, dict[str, Any]] = {
    "nvswitch_node": {"n_gpus": 8, "nvlinks_per_gpu": 18, **NVLINK},
    "hybrid_cube_mesh": {**NVLINK, **PCIE, **CPU_LINK},
    "pcie_tree": {"n_gpus": 8, "gpus_per_switch": 2, **PCIE, **CPU_LINK},
}
SIZES = [1, 2, 3, 4, 8, 17]

# `nvidia-smi topo -m` on a DGX-1V, GPU rows and columns 0..7 (SYS: no NVLink, over the host).
DGX1_TOPO = """\
X   NV1 NV1 NV2 NV2 SYS SYS SYS
NV1 X   NV2 NV1 SYS NV2 SYS SYS
NV1 NV2 X   NV2 SYS SYS NV1 SYS
NV2 NV1 NV2 X   SYS SYS SYS NV1
NV2 SYS SYS SYS X   NV1 NV1 NV2
SYS NV2 SYS SYS NV1 X   NV2 NV1
SYS SYS NV1 SYS NV1 NV2 X   NV2
SYS SYS SYS NV1 NV2 NV1 NV2 X
"""
V100_NVLINK_PORTS = 6
# PCIe: 8 (Gen3) or 16 (Gen4) GT/s per lane, 16 lanes, 128b/130b encoding, 8 bits a byte.
PCIE_GEN3_X16_BYTES_PER_S = 8e9 * 16 * 128 / 130 / 8
PCIE_GEN4_X16_BYTES_PER_S = 16e9 * 16 * 128 / 130 / 8
QPI_E5_2698V4_BYTES_PER_S = 2 * 9.6e9 * 2  # 2 QPI links x 9.6 GT/s x 2 bytes
UPI_XEON_8380_BYTES_PER_S = 3 * 11.2e9 * 2  # 3 UPI links x 11.2 GT/s x 2 bytes


def _node_kinds(graph: nx.DiGraph[str]) -> Counter[NodeKind]:
    return Counter(attrs["kind"] for _, attrs in graph.nodes(data=True))


def _link_kinds(graph: nx.DiGraph[str]) -> Counter[LinkKind]:
    return Counter(attrs["kind"] for _, _, attrs in graph.edges(data=True))


def _link_values(graph: nx.DiGraph[str], key: str, kind: LinkKind | None = None) -> set[object]:
    return {
        attrs[key]
        for _, _, attrs in graph.edges(data=True)
        if kind is None or attrs["kind"] is kind
    }


def _dgx1_links() -> dict[tuple[int, int], int]:
    """NVLinks per ordered GPU pair, read from the `nvidia-smi topo -m` matrix."""
    rows = [line.split() for line in DGX1_TOPO.splitlines()]
    return {
        (a, b): int(cell.removeprefix("NV"))
        for a, row in enumerate(rows)
        for b, cell in enumerate(row)
        if cell.startswith("NV")
    }


# --- every machine builder ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_node_is_on_the_host_and_gpus_do_not_forward(name: str) -> None:
    graph = BUILDERS[name](**ARGUMENTS[name])
    assert validate(graph) is graph
    assert gpu_nodes(graph) == [f"gpu{rank}" for rank in range(8)]
    assert graph.graph["name"]
    for _, attrs in graph.nodes(data=True):
        assert attrs["host"] == "node0"
        if attrs["kind"] is NodeKind.GPU:
            assert attrs["transit"] is False
        else:
            assert "transit" not in attrs  # absent: switches and CPUs forward


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_links_have_their_own_attribute_dicts(name: str) -> None:
    graph = BUILDERS[name](**ARGUMENTS[name])
    first, *rest = graph.edges
    before = {edge: graph.edges[edge]["bandwidth_bytes_per_s"] for edge in rest}
    graph.edges[first]["bandwidth_bytes_per_s"] = 1.0
    assert {edge: graph.edges[edge]["bandwidth_bytes_per_s"] for edge in rest} == before


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_builders_are_deterministic(name: str) -> None:
    one, two = BUILDERS[name](**ARGUMENTS[name]), BUILDERS[name](**ARGUMENTS[name])
    assert list(one.nodes(data=True)) == list(two.nodes(data=True))
    assert list(one.edges(data=True)) == list(two.edges(data=True))
    assert one.graph == two.graph
    assert one is not two


@pytest.mark.parametrize(
    ("name", "positional"),
    [
        ("nvswitch_node", (8, 18, NVLINK_BYTES_PER_S, 0.5e-6)),
        ("hybrid_cube_mesh", (NVLINK_BYTES_PER_S, 0.7e-6)),
        ("pcie_tree", (8, 2, 0, PCIE_BYTES_PER_S, 1e-6)),
    ],
)
def test_physical_parameters_are_keyword_only(name: str, positional: tuple[object, ...]) -> None:
    builder: Callable[..., object] = BUILDERS[name]
    with pytest.raises(TypeError):
        builder(*positional)


def test_registry_names_the_functions_and_adds_no_clash() -> None:
    assert dict(machines.BUILDERS) == {
        "nvswitch_node": nvswitch_node,
        "hybrid_cube_mesh": hybrid_cube_mesh,
        "pcie_tree": pcie_tree,
    }
    assert not set(machines.BUILDERS) & set(builders.BUILDERS)


# --- nvswitch_node ------------------------------------------------------------------------


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("n_links", [1, 12, 18])
def test_nvswitch_node_counts(n: int, n_links: int) -> None:
    graph = nvswitch_node(n, nvlinks_per_gpu=n_links, **NVLINK)
    assert graph.graph["name"] == f"nvswitch_node_{n}"
    assert _node_kinds(graph) == Counter({NodeKind.GPU: n, NodeKind.NVSWITCH: 1})
    assert _link_kinds(graph) == Counter({LinkKind.NVLINK: 2 * n})
    gpus = [f"gpu{rank}" for rank in range(n)]
    assert set(graph.edges) == {(g, "nvsw") for g in gpus} | {("nvsw", g) for g in gpus}
    # One duplex link per GPU carrying all of its NVLinks.
    assert _link_values(graph, "bandwidth_bytes_per_s") == {n_links * NVLINK_BYTES_PER_S}
    assert _link_values(graph, "latency_s") == {0.7e-6}
    for a, b in itertools.permutations(range(n), 2):
        assert nx.shortest_path(graph, f"gpu{a}", f"gpu{b}") == [f"gpu{a}", "nvsw", f"gpu{b}"]


def test_nvswitch_node_defaults_to_eight_gpus_without_nvls() -> None:
    graph = nvswitch_node(nvlinks_per_gpu=12, **NVLINK)
    assert len(gpu_nodes(graph)) == 8
    assert graph.nodes["nvsw"] == {"kind": NodeKind.NVSWITCH, "host": "node0", "reduces": False}


@pytest.mark.parametrize("nvls", [False, True])
def test_nvls_makes_the_switch_reduce(nvls: bool) -> None:
    graph = nvswitch_node(4, nvlinks_per_gpu=18, nvls=nvls, **NVLINK)
    assert graph.nodes["nvsw"]["reduces"] is nvls


# --- hybrid_cube_mesh (DGX-1V) ------------------------------------------------------------


def test_dgx1_matrix_is_symmetric_and_uses_six_ports_per_gpu() -> None:
    links = _dgx1_links()
    assert all(links[b, a] == n for (a, b), n in links.items())
    for gpu in range(8):
        assert sum(n for (a, _), n in links.items() if a == gpu) == V100_NVLINK_PORTS


def test_hybrid_cube_mesh_counts() -> None:
    graph = hybrid_cube_mesh(**NVLINK, **PCIE, **CPU_LINK)
    assert graph.graph["name"] == "hybrid_cube_mesh"
    assert _node_kinds(graph) == Counter(
        {NodeKind.GPU: 8, NodeKind.PCIE_SWITCH: 4, NodeKind.CPU: 2}
    )
    # NVLink pairs: GPUs 0-3 and 4-7 fully connected (2 x C(4, 2) = 12) plus i -- i + 4 (4).
    nvlink_pairs = 2 * math.comb(4, 2) + 4
    pcie_cables = 8 + 4  # each GPU to its switch, each switch to its CPU
    assert _link_kinds(graph) == Counter(
        {LinkKind.NVLINK: 2 * nvlink_pairs, LinkKind.PCIE: 2 * pcie_cables, LinkKind.CPU_LINK: 2}
    )
    assert graph.number_of_nodes() == 14
    assert graph.number_of_edges() == 2 * (nvlink_pairs + pcie_cables + 1)


def test_hybrid_cube_mesh_nvlink_pairs_match_nvidia_smi() -> None:
    graph = hybrid_cube_mesh(**NVLINK, **PCIE, **CPU_LINK)
    links = _dgx1_links()
    for a, b in itertools.permutations(range(8), 2):
        edge = (f"gpu{a}", f"gpu{b}")
        if (a, b) not in links:
            assert not graph.has_edge(*edge)  # no NVLink: the pair goes over the host
            continue
        attrs = graph.edges[edge]
        assert attrs["kind"] is LinkKind.NVLINK
        assert attrs["bandwidth_bytes_per_s"] == links[a, b] * NVLINK_BYTES_PER_S
        assert attrs["latency_s"] == 0.7e-6
    # An NV2 pair (0-3) has twice the bandwidth of an NV1 pair (0-1); 0-5 has no NVLink.
    nv2 = graph.edges["gpu0", "gpu3"]["bandwidth_bytes_per_s"]
    nv1 = graph.edges["gpu0", "gpu1"]["bandwidth_bytes_per_s"]
    assert nv2 == 2 * nv1 == 2 * NVLINK_BYTES_PER_S
    assert not graph.has_edge("gpu0", "gpu5")


def test_hybrid_cube_mesh_every_gpu_has_six_nvlink_ports() -> None:
    graph = hybrid_cube_mesh(**NVLINK, **PCIE, **CPU_LINK)
    for rank in range(8):
        ports = [
            attrs["bandwidth_bytes_per_s"] / NVLINK_BYTES_PER_S
            for _, _, attrs in graph.out_edges(f"gpu{rank}", data=True)
            if attrs["kind"] is LinkKind.NVLINK
        ]
        assert sum(ports) == V100_NVLINK_PORTS
        assert graph.in_degree(f"gpu{rank}") == graph.out_degree(f"gpu{rank}")


def test_hybrid_cube_mesh_pcie_tree() -> None:
    graph = hybrid_cube_mesh(**NVLINK, **PCIE, **CPU_LINK)
    for rank in range(8):
        pcie = [v for _, v, k in graph.out_edges(f"gpu{rank}", data="kind") if k is LinkKind.PCIE]
        assert pcie == [f"pcie{rank // 2}"]  # GPUs 2j and 2j + 1 under switch j
    for switch in range(4):
        cpus = {v for v in graph.successors(f"pcie{switch}") if v.startswith("cpu")}
        assert cpus == {f"cpu{switch // 2}"}  # pcie0, pcie1 on cpu0; pcie2, pcie3 on cpu1
    assert graph.edges["cpu0", "cpu1"]["kind"] is LinkKind.CPU_LINK
    assert graph.edges["cpu1", "cpu0"]["bandwidth_bytes_per_s"] == CPU_LINK_BYTES_PER_S
    assert _link_values(graph, "bandwidth_bytes_per_s", LinkKind.PCIE) == {PCIE_BYTES_PER_S}


def test_hybrid_cube_mesh_pair_without_nvlink_crosses_both_sockets() -> None:
    # Structure only (no router): with the other GPUs left out, as transit=False will do,
    # gpu0 reaches gpu5 over its switch, both CPUs and gpu5's switch.
    graph = hybrid_cube_mesh(**NVLINK, **PCIE, **CPU_LINK)
    view = nx.subgraph_view(graph, filter_node=lambda n: n in ("gpu0", "gpu5") or "gpu" not in n)
    paths = list(nx.all_shortest_paths(view, "gpu0", "gpu5"))
    assert paths == [["gpu0", "pcie0", "cpu0", "cpu1", "pcie2", "gpu5"]]
    bottleneck = min(
        graph.edges[u, v]["bandwidth_bytes_per_s"] for u, v in nx.utils.pairwise(paths[0])
    )
    assert bottleneck == min(PCIE_BYTES_PER_S, CPU_LINK_BYTES_PER_S)


# --- pcie_tree ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "n_sockets", "per_switch"),
    [
        (1, 1, 0), (2, 2, 0), (6, 3, 0), (8, 2, 0), (17, 1, 0),
        (1, 1, 1), (4, 1, 4), (8, 2, 2), (8, 2, 4), (12, 3, 2), (16, 4, 1),
    ],
)  # fmt: skip
def test_pcie_tree_counts(n: int, n_sockets: int, per_switch: int) -> None:
    graph = pcie_tree(n, n_sockets=n_sockets, gpus_per_switch=per_switch, **PCIE, **CPU_LINK)
    n_switches = n // per_switch if per_switch else 0
    assert graph.graph["name"] == f"pcie_tree_{n}"
    assert _node_kinds(graph) == Counter(
        {NodeKind.GPU: n, NodeKind.CPU: n_sockets, NodeKind.PCIE_SWITCH: n_switches}
    )
    assert graph.number_of_nodes() == n + n_sockets + n_switches
    # One cable per GPU and per switch uplink; the sockets fully meshed: C(s, 2) cables.
    assert _link_kinds(graph) == Counter(
        {
            LinkKind.PCIE: 2 * (n + n_switches),
            LinkKind.CPU_LINK: 2 * math.comb(n_sockets, 2),
        }
    )
    per_socket = n // n_sockets
    for rank in range(n):
        parent = f"pcie{rank // per_switch}" if per_switch else f"cpu{rank // per_socket}"
        assert list(graph.successors(f"gpu{rank}")) == [parent]
        assert list(graph.predecessors(f"gpu{rank}")) == [parent]
    for switch in range(n_switches):
        uplink = [v for v in graph.successors(f"pcie{switch}") if v.startswith("cpu")]
        assert uplink == [f"cpu{switch * per_switch // per_socket}"]
    for a, b in itertools.permutations(range(n_sockets), 2):
        assert graph.edges[f"cpu{a}", f"cpu{b}"]["kind"] is LinkKind.CPU_LINK


def test_pcie_tree_root_ports_split_gpus_by_socket_in_rank_order() -> None:
    graph = pcie_tree(8, **PCIE, **CPU_LINK)  # default: 2 sockets, root ports
    assert sorted(v for v in graph.successors("cpu0") if v.startswith("gpu")) == [
        "gpu0",
        "gpu1",
        "gpu2",
        "gpu3",
    ]
    assert _link_values(graph, "bandwidth_bytes_per_s", LinkKind.PCIE) == {PCIE_BYTES_PER_S}
    assert _link_values(graph, "bandwidth_bytes_per_s", LinkKind.CPU_LINK) == {CPU_LINK_BYTES_PER_S}
    assert _link_values(graph, "latency_s", LinkKind.CPU_LINK) == {2e-6}


@pytest.mark.parametrize("p2p", [False, True])
def test_pcie_tree_records_p2p(p2p: bool) -> None:
    assert pcie_tree(2, p2p=p2p, **PCIE, **CPU_LINK).graph["p2p"] is p2p
    assert pcie_tree(2, **PCIE, **CPU_LINK).graph["p2p"] is True


# --- argument errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "overrides", "field", "message"),
    [
        ("nvswitch_node", {"n_gpus": 0}, "n_gpus", "must be an integer >= 1, got 0"),
        ("nvswitch_node", {"nvlinks_per_gpu": 0}, "nvlinks_per_gpu",
         "must be an integer >= 1, got 0"),
        ("nvswitch_node", {"nvlinks_per_gpu": 12.0}, "nvlinks_per_gpu",
         "must be an integer >= 1, got 12.0"),
        ("nvswitch_node", {"nvlinks_per_gpu": True}, "nvlinks_per_gpu",
         "must be an integer >= 1, got True"),
        ("nvswitch_node", {"nvlink_bandwidth_bytes_per_s": 0.0}, "nvlink_bandwidth_bytes_per_s",
         "must be positive and finite, got 0.0 bytes/s"),
        ("nvswitch_node", {"nvlink_latency_s": -1e-6}, "nvlink_latency_s",
         "must be non-negative and finite, got -1e-06 s"),
        ("nvswitch_node", {"nvls": "yes"}, "nvls", "must be true or false, got 'yes'"),
        ("hybrid_cube_mesh", {"nvlink_bandwidth_bytes_per_s": math.nan},
         "nvlink_bandwidth_bytes_per_s", "must be positive and finite, got nan bytes/s"),
        ("hybrid_cube_mesh", {"pcie_bandwidth_bytes_per_s": math.inf},
         "pcie_bandwidth_bytes_per_s", "must be positive and finite, got inf bytes/s"),
        ("hybrid_cube_mesh", {"pcie_latency_s": -1.0}, "pcie_latency_s",
         "must be non-negative and finite, got -1.0 s"),
        ("hybrid_cube_mesh", {"cpu_link_bandwidth_bytes_per_s": "38.4 GB/s"},
         "cpu_link_bandwidth_bytes_per_s", "must be a number in bytes/s, got '38.4 GB/s'"),
        ("hybrid_cube_mesh", {"cpu_link_latency_s": math.nan}, "cpu_link_latency_s",
         "must be non-negative and finite, got nan s"),
        ("pcie_tree", {"n_gpus": -2}, "n_gpus", "must be an integer >= 1, got -2"),
        ("pcie_tree", {"n_gpus": 6, "n_sockets": 4, "gpus_per_switch": 0}, "n_gpus",
         "6 GPUs do not split evenly across n_sockets=4; give a multiple of n_sockets"),
        ("pcie_tree", {"gpus_per_switch": 3}, "gpus_per_switch",
         "must divide the 4 GPUs per socket (n_gpus=8 / n_sockets=2), got 3"),
        ("pcie_tree", {"gpus_per_switch": 8}, "gpus_per_switch",
         "must divide the 4 GPUs per socket (n_gpus=8 / n_sockets=2), got 8"),
        ("pcie_tree", {"n_sockets": 0}, "n_sockets", "must be an integer >= 1, got 0"),
        ("pcie_tree", {"gpus_per_switch": -1}, "gpus_per_switch",
         "must be an integer >= 0, got -1"),
        ("pcie_tree", {"p2p": 1}, "p2p", "must be true or false, got 1"),
        ("pcie_tree", {"pcie_bandwidth_bytes_per_s": -1e9}, "pcie_bandwidth_bytes_per_s",
         "must be positive and finite, got -1000000000.0 bytes/s"),
        ("pcie_tree", {"cpu_link_bandwidth_bytes_per_s": 0}, "cpu_link_bandwidth_bytes_per_s",
         "must be positive and finite, got 0 bytes/s"),
    ],
)  # fmt: skip
def test_bad_arguments_give_one_exact_line(
    name: str, overrides: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        BUILDERS[name](**{**ARGUMENTS[name], **overrides})
    assert info.value.field == field
    assert str(info.value) == f"{field}: {message}"


# --- topology files -----------------------------------------------------------------------


@pytest.mark.parametrize("name", MACHINE_FILES)
def test_every_machine_file_loads_and_cites_its_spec(name: str) -> None:
    path = TOPOLOGIES / name
    graph = load(path)
    assert graph.graph["source"] == str(path)
    assert graph.graph["description"].strip()
    assert path.read_text(encoding="utf-8").startswith("#")
    assert {attrs["host"] for _, attrs in graph.nodes(data=True)} == {"node0"}


@pytest.mark.parametrize(
    ("name", "n_links", "link_bytes_per_s", "nvls"),
    [
        ("dgx-a100.toml", 12, NVLINK_BYTES_PER_S, False),  # NVLink3, NVSwitch gen 2
        ("dgx-h100.toml", 18, NVLINK_BYTES_PER_S, True),  # NVLink4, NVSwitch gen 3
        ("dgx-h200.toml", 18, NVLINK_BYTES_PER_S, True),  # NVLink4, NVSwitch gen 3
        ("dgx-b200.toml", 18, NVLINK5_BYTES_PER_S, True),  # NVLink5, NVSwitch gen 4
    ],
)
def test_dgx_switch_boxes_have_the_datasheet_bandwidth(
    name: str, n_links: int, link_bytes_per_s: float, nvls: bool
) -> None:
    graph = load(TOPOLOGIES / name)
    assert len(gpu_nodes(graph)) == 8
    assert graph.number_of_nodes() == 8 + 1
    assert graph.number_of_edges() == 2 * 8
    assert graph.nodes["nvsw"]["kind"] is NodeKind.NVSWITCH
    assert graph.nodes["nvsw"]["reduces"] is nvls
    assert _link_values(graph, "bandwidth_bytes_per_s") == {n_links * link_bytes_per_s}
    assert _link_values(graph, "latency_s") == {0.5e-6}
    assert _link_values(graph, "kind") == {LinkKind.NVLINK}
    # As with the former switch_star files: every GPU pair is two hops through the switch.
    for a, b in itertools.permutations(range(8), 2):
        assert nx.shortest_path(graph, f"gpu{a}", f"gpu{b}") == [f"gpu{a}", "nvsw", f"gpu{b}"]


def test_dgx1_file_has_the_datasheet_bandwidths() -> None:
    graph = load(TOPOLOGIES / "dgx1-v100.toml")
    assert len(gpu_nodes(graph)) == 8
    assert graph.edges["gpu0", "gpu1"]["bandwidth_bytes_per_s"] == NVLINK_BYTES_PER_S  # NV1
    assert graph.edges["gpu0", "gpu3"]["bandwidth_bytes_per_s"] == 2 * NVLINK_BYTES_PER_S  # NV2
    (pcie,) = _link_values(graph, "bandwidth_bytes_per_s", LinkKind.PCIE)
    assert pcie == 15.75e9
    assert pcie == pytest.approx(PCIE_GEN3_X16_BYTES_PER_S, rel=1e-3)
    assert _link_values(graph, "bandwidth_bytes_per_s", LinkKind.CPU_LINK) == {
        QPI_E5_2698V4_BYTES_PER_S
    }
    assert _link_values(graph, "latency_s", LinkKind.NVLINK) == {0.7e-6}
    assert _link_values(graph, "latency_s", LinkKind.PCIE) == {1e-6}
    assert _link_values(graph, "latency_s", LinkKind.CPU_LINK) == {1e-6}


def test_rtx4090_file_has_root_ports_and_no_p2p() -> None:
    path = TOPOLOGIES / "pcie-8x-rtx4090.toml"
    graph = load(path)
    assert _node_kinds(graph) == Counter({NodeKind.GPU: 8, NodeKind.CPU: 2})
    (pcie,) = _link_values(graph, "bandwidth_bytes_per_s", LinkKind.PCIE)
    assert pcie == 31.5e9
    assert pcie == pytest.approx(PCIE_GEN4_X16_BYTES_PER_S, rel=1e-3)
    assert _link_values(graph, "bandwidth_bytes_per_s", LinkKind.CPU_LINK) == {
        UPI_XEON_8380_BYTES_PER_S
    }
    assert graph.graph["p2p"] is False  # GeForce drivers: no PCIe P2P
    assert load(path, parse_overrides(["p2p=true"])).graph["p2p"] is True


def test_switch_file_puts_four_gpus_under_one_switch() -> None:
    graph = load(TOPOLOGIES / "pcie-4x-switch.toml")
    assert _node_kinds(graph) == Counter(
        {NodeKind.GPU: 4, NodeKind.PCIE_SWITCH: 1, NodeKind.CPU: 1}
    )
    assert _link_kinds(graph) == Counter({LinkKind.PCIE: 2 * (4 + 1)})
    assert all(list(graph.successors(f"gpu{rank}")) == ["pcie0"] for rank in range(4))
    assert _link_values(graph, "bandwidth_bytes_per_s") == {31.5e9}
    assert graph.graph["p2p"] is True


def test_builder_errors_name_the_file_and_key() -> None:
    path = TOPOLOGIES / "pcie-8x-rtx4090.toml"
    with pytest.raises(ConfigError) as info:
        load(path, parse_overrides(["n_sockets=3"]))
    assert str(info.value) == (
        f"{path}: params.n_gpus: 8 GPUs do not split evenly across n_sockets=3; "
        "give a multiple of n_sockets"
    )
