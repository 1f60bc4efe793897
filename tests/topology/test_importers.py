"""Tests of simcoll.topology.importers: the shipped examples against the machines' specs,
the two formats against each other, and one-line errors for malformed files."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from simcoll.core.errors import ConfigError, TopologyError
from simcoll.topology.importers import (
    NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM,
    from_nccl_xml,
    from_nvidia_smi,
    pcie_bandwidth_bytes_per_s,
)
from simcoll.topology.nvidia_smi import MAX_SMI_DEVICES
from simcoll.topology.schema import LinkKind, NodeKind, gpu_nodes

EXAMPLES = Path(__file__).parents[2] / "topologies" / "examples"

# Spec arithmetic. NVLink: a GPU's total bandwidth (both directions) / 2 / its link count.
NVLINK2_BYTES_PER_S = 300e9 / 2 / 6  # V100 SXM2: 300 GB/s over 6 links
NVLINK3_BYTES_PER_S = 600e9 / 2 / 12  # A100 SXM4: 600 GB/s over 12 links
NVLINK4_BYTES_PER_S = 900e9 / 2 / 18  # H100 SXM5: 900 GB/s over 18 links
H100_LINKS_PER_GPU = 5 + 4 + 4 + 5  # to the four NVSwitch chips of a DGX H100
# PCIe: GT/s x lanes x encoding / 8 bits.
GEN3_X16_BYTES_PER_S = 8e9 * 16 * 128 / 130 / 8
GEN4_X16_BYTES_PER_S = 16e9 * 16 * 128 / 130 / 8
GEN5_X16_BYTES_PER_S = 32e9 * 16 * 128 / 130 / 8
EDR_BYTES_PER_S = 100_000 * 1e6 / 8  # net speed="100000" (Mbit/s)
NDR_BYTES_PER_S = 400_000 * 1e6 / 8  # net speed="400000"

CPU_LINK_BYTES_PER_S = 38.4e9
CPU_LINK_LATENCY_S = 1.5e-6
NVLINK_LATENCY_S = 7e-7
PCIE_LATENCY_S = 1e-6
NIC_LATENCY_S = 2e-6
XML_ARGS: dict[str, Any] = {
    "cpu_link_bandwidth_bytes_per_s": CPU_LINK_BYTES_PER_S,
    "cpu_link_latency_s": CPU_LINK_LATENCY_S,
    "nvlink_latency_s": NVLINK_LATENCY_S,
    "pcie_latency_s": PCIE_LATENCY_S,
    "nic_latency_s": NIC_LATENCY_S,
}


def _smi_args(pcie_bytes_per_s: float) -> dict[str, Any]:
    return {
        "nvlink_bandwidth_bytes_per_s": NVLINK2_BYTES_PER_S,
        "nvlink_latency_s": NVLINK_LATENCY_S,
        "pcie_bandwidth_bytes_per_s": pcie_bytes_per_s,
        "pcie_latency_s": PCIE_LATENCY_S,
        "cpu_link_bandwidth_bytes_per_s": CPU_LINK_BYTES_PER_S,
        "cpu_link_latency_s": CPU_LINK_LATENCY_S,
    }


# The DGX-1 (V100) hybrid cube mesh: (gpu, gpu) -> bonded NVLinks, as nvidia-smi prints it.
DGX1_NVLINKS = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2,
    (2, 6): 1, (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2,
}  # fmt: skip
DGX1_LINKS_PER_GPU = 6  # every V100 uses all six of its NVLink2 ports


def _read(name: str) -> str:
    return (EXAMPLES / name).read_text(encoding="utf-8")


def _dgx1_xml(text: str | None = None) -> nx.DiGraph[str]:
    return from_nccl_xml(_read("dgx1-v100.nccl.xml") if text is None else text, **XML_ARGS)


def _dgx1_smi(text: str | None = None, **extra: Any) -> nx.DiGraph[str]:
    text = _read("dgx1-v100.nvsmi.txt") if text is None else text
    return from_nvidia_smi(text, **_smi_args(GEN3_X16_BYTES_PER_S), **extra)


def _h100_xml(text: str | None = None) -> nx.DiGraph[str]:
    return from_nccl_xml(_read("dgx-h100.nccl.xml") if text is None else text, **XML_ARGS)


def _h100_smi(**extra: Any) -> nx.DiGraph[str]:
    args = {**_smi_args(GEN5_X16_BYTES_PER_S), "nvlink_bandwidth_bytes_per_s": NVLINK4_BYTES_PER_S}
    return from_nvidia_smi(_read("dgx-h100.nvsmi.txt"), **args, **extra)


def _kinds(graph: nx.DiGraph[str]) -> dict[NodeKind, int]:
    counts: dict[NodeKind, int] = {}
    for _, attrs in graph.nodes(data=True):
        counts[attrs["kind"]] = counts.get(attrs["kind"], 0) + 1
    return counts


def _link_kinds(graph: nx.DiGraph[str]) -> dict[LinkKind, int]:
    counts: dict[LinkKind, int] = {}
    for _, _, attrs in graph.edges(data=True):
        counts[attrs["kind"]] = counts.get(attrs["kind"], 0) + 1
    return counts


def _canonical(graph: nx.DiGraph[str]) -> dict[tuple[str, str], tuple[LinkKind, int, float]]:
    """Links with each PCIe switch named after the GPUs and NICs under it; bandwidths in
    whole bytes/s (the two importers compute Gen3 x16 in a different float order)."""

    def name(node: str) -> str:
        if graph.nodes[node]["kind"] is not NodeKind.PCIE_SWITCH:
            return node
        below = [n for n in graph.successors(node) if graph.nodes[n]["kind"] is not NodeKind.CPU]
        return "switch(" + ",".join(sorted(below)) + ")"

    return {
        (name(a), name(b)): (
            attrs["kind"],
            round(attrs["bandwidth_bytes_per_s"]),
            attrs["latency_s"],
        )
        for a, b, attrs in graph.edges(data=True)
    }


def _without_nics(graph: nx.DiGraph[str]) -> nx.DiGraph[str]:
    nics = [node for node, attrs in graph.nodes(data=True) if attrs["kind"] is NodeKind.NIC]
    smaller = graph.copy()
    smaller.remove_nodes_from(nics)
    return smaller


# --- PCIe arithmetic ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gigatransfers_per_s", "lanes", "expected"),
    [
        (2.5, 1, 2.5e9 * 1 * 8 / 10 / 8),  # Gen1: 8b/10b
        (5.0, 8, 5e9 * 8 * 8 / 10 / 8),  # Gen2: 8b/10b
        (8.0, 16, GEN3_X16_BYTES_PER_S),  # Gen3 onwards: 128b/130b
        (16.0, 4, 16e9 * 4 * 128 / 130 / 8),
        (32.0, 16, GEN5_X16_BYTES_PER_S),
    ],
)
def test_pcie_bandwidth_closed_form(
    gigatransfers_per_s: float, lanes: int, expected: float
) -> None:
    assert pcie_bandwidth_bytes_per_s(gigatransfers_per_s, lanes) == pytest.approx(expected)


def test_nvlink_table_matches_the_datasheets() -> None:
    assert NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM == {
        60: 160e9 / 2 / 4,  # P100: 160 GB/s over 4 NVLink1 links
        70: NVLINK2_BYTES_PER_S,
        80: NVLINK3_BYTES_PER_S,
        90: NVLINK4_BYTES_PER_S,
        100: 1800e9 / 2 / 18,  # B200: 1.8 TB/s over 18 NVLink5 links
        103: 1800e9 / 2 / 18,  # B300
    }


# --- the DGX-1 (V100) examples ----------------------------------------------------------


Import = Callable[[], "nx.DiGraph[str]"]
DGX1_IMPORTS: dict[str, Import] = {"xml": _dgx1_xml, "nvidia-smi": _dgx1_smi}


@pytest.mark.parametrize("source", sorted(DGX1_IMPORTS))
def test_dgx1_counts(source: str) -> None:
    graph = DGX1_IMPORTS[source]()
    # 8 GPUs, 4 PCIe switches with 2 GPUs and 1 NIC each, 2 sockets.
    assert _kinds(graph) == {
        NodeKind.GPU: 8,
        NodeKind.PCIE_SWITCH: 4,
        NodeKind.NIC: 4,
        NodeKind.CPU: 2,
    }
    assert _link_kinds(graph) == {
        LinkKind.NVLINK: 2 * len(DGX1_NVLINKS),
        LinkKind.PCIE: 2 * (8 + 4 + 4),  # GPU-switch, NIC-switch, switch-CPU
        LinkKind.CPU_LINK: 2,
    }


@pytest.mark.parametrize("source", sorted(DGX1_IMPORTS))
def test_dgx1_nvlinks_reproduce_the_nv_table(source: str) -> None:
    graph = DGX1_IMPORTS[source]()
    expected = {}
    for (x, y), links in DGX1_NVLINKS.items():
        expected[f"gpu{x}", f"gpu{y}"] = expected[f"gpu{y}", f"gpu{x}"] = (
            links * NVLINK2_BYTES_PER_S
        )
    direct = {
        (a, b): attrs["bandwidth_bytes_per_s"]
        for a, b, attrs in graph.edges(data=True)
        if a.startswith("gpu") and b.startswith("gpu")
    }
    assert direct == expected
    for edge in direct:
        assert graph.edges[edge]["kind"] is LinkKind.NVLINK
        assert graph.edges[edge]["latency_s"] == NVLINK_LATENCY_S
    for rank in range(8):
        total = sum(links for pair, links in DGX1_NVLINKS.items() if rank in pair)
        assert total == DGX1_LINKS_PER_GPU


@pytest.mark.parametrize("source", sorted(DGX1_IMPORTS))
def test_dgx1_pcie_tree(source: str) -> None:
    graph = DGX1_IMPORTS[source]()

    def parent(node: str) -> str:
        (up,) = [
            n
            for n in graph.successors(node)
            if graph.nodes[n]["kind"] in (NodeKind.PCIE_SWITCH, NodeKind.CPU)
        ]
        return up

    for rank in range(8):
        # GPUs 2j and 2j+1 under switch j; switches 0, 1 under cpu0 and 2, 3 under cpu1.
        switch = parent(f"gpu{rank}")
        assert switch == parent(f"gpu{rank ^ 1}")
        assert parent(f"nic{rank // 2}") == switch
        assert parent(switch) == f"cpu{rank // 4}"
        assert graph.edges[f"gpu{rank}", switch]["kind"] is LinkKind.PCIE
    for _, _, attrs in graph.edges(data=True):
        if attrs["kind"] is LinkKind.PCIE:
            assert attrs["bandwidth_bytes_per_s"] == pytest.approx(GEN3_X16_BYTES_PER_S)
            assert attrs["latency_s"] == PCIE_LATENCY_S
    assert graph.edges["cpu0", "cpu1"]["bandwidth_bytes_per_s"] == CPU_LINK_BYTES_PER_S
    assert graph.edges["cpu1", "cpu0"]["latency_s"] == CPU_LINK_LATENCY_S


def test_dgx1_nics() -> None:
    xml, smi = _dgx1_xml(), _dgx1_smi()
    for k in range(4):
        assert xml.nodes[f"nic{k}"] == {
            "kind": NodeKind.NIC,
            "host": "node0",
            "name": f"mlx5_{k}",  # from the net element, and from the NIC Legend
            "port_bandwidth_bytes_per_s": EDR_BYTES_PER_S,
            "port_latency_s": NIC_LATENCY_S,
            "busid": ("0000:05:00.0", "0000:0c:00.0", "0000:84:00.0", "0000:8b:00.0")[k],
        }
        assert smi.nodes[f"nic{k}"] == {"kind": NodeKind.NIC, "host": "node0", "name": f"mlx5_{k}"}


def test_dgx1_xml_and_nvidia_smi_agree() -> None:
    xml, smi = _dgx1_xml(), _dgx1_smi()
    assert _canonical(xml) == _canonical(smi)
    assert set(xml.nodes) - set(smi.nodes) == {
        f"pcie{busid}" for busid in ("0000:03:00.0", "0000:08:00.0", "0000:83:00.0", "0000:87:00.0")
    }
    assert nx.is_isomorphic(xml, smi, node_match=lambda a, b: a["kind"] is b["kind"])


def test_dgx1_matches_the_hybrid_cube_mesh_builder() -> None:
    machines = pytest.importorskip("simcoll.topology.machines")
    if not hasattr(machines, "hybrid_cube_mesh"):
        pytest.skip("hybrid_cube_mesh is not written yet")
    built = machines.hybrid_cube_mesh(
        nvlink_bandwidth_bytes_per_s=NVLINK2_BYTES_PER_S,
        nvlink_latency_s=NVLINK_LATENCY_S,
        pcie_bandwidth_bytes_per_s=GEN3_X16_BYTES_PER_S,
        pcie_latency_s=PCIE_LATENCY_S,
        cpu_link_bandwidth_bytes_per_s=CPU_LINK_BYTES_PER_S,
        cpu_link_latency_s=CPU_LINK_LATENCY_S,
    )
    # The examples carry the DGX-1's four InfiniBand NICs, which the builder leaves out.
    for imported in (_dgx1_xml(), _dgx1_smi()):
        assert _canonical(_without_nics(imported)) == _canonical(built)


# --- the DGX H100 examples -------------------------------------------------------------


def test_h100_xml_nvswitch() -> None:
    graph = _h100_xml()
    assert graph.nodes["nvsw"] == {"kind": NodeKind.NVSWITCH, "host": "node0", "reduces": True}
    to_switch = {
        (a, b): attrs["bandwidth_bytes_per_s"]
        for a, b, attrs in graph.edges(data=True)
        if "nvsw" in (a, b)
    }
    expected = H100_LINKS_PER_GPU * NVLINK4_BYTES_PER_S
    assert to_switch == {
        **{(f"gpu{rank}", "nvsw"): expected for rank in range(8)},
        **{("nvsw", f"gpu{rank}"): expected for rank in range(8)},
    }
    assert H100_LINKS_PER_GPU * NVLINK4_BYTES_PER_S == 450e9  # 900 GB/s both ways


def test_h100_xml_counts_nics_and_pcie() -> None:
    graph = _h100_xml()
    assert _kinds(graph) == {
        NodeKind.GPU: 8,
        NodeKind.NIC: 8,
        NodeKind.PCIE_SWITCH: 8,  # one per GPU-NIC pair
        NodeKind.CPU: 2,
        NodeKind.NVSWITCH: 1,
    }
    assert _link_kinds(graph) == {
        LinkKind.NVLINK: 2 * 8,
        LinkKind.PCIE: 2 * (8 + 8 + 8),
        LinkKind.CPU_LINK: 2,
    }
    for k in range(8):
        nic = graph.nodes[f"nic{k}"]
        assert nic["name"] == f"mlx5_{k}"
        assert nic["port_bandwidth_bytes_per_s"] == NDR_BYTES_PER_S
        assert nic["port_latency_s"] == NIC_LATENCY_S
        (switch,) = list(graph.successors(f"nic{k}"))
        assert f"gpu{k}" in graph.predecessors(switch)
        assert f"cpu{k // 4}" in graph.successors(switch)
    for _, _, attrs in graph.edges(data=True):
        if attrs["kind"] is LinkKind.PCIE:
            assert attrs["bandwidth_bytes_per_s"] == pytest.approx(GEN5_X16_BYTES_PER_S)


def test_h100_nvidia_smi_detects_the_nvswitch_and_agrees_with_xml() -> None:
    smi, xml = _h100_smi(), _h100_xml()
    assert smi.nodes["nvsw"]["reduces"] is False  # nvidia-smi does not name the generation
    assert _canonical(smi) == _canonical(xml)


def test_h100_nvidia_smi_as_a_mesh_when_told_there_is_no_switch() -> None:
    graph = _h100_smi(nvswitch=False)
    assert "nvsw" not in graph
    pairs = 8 * 7 // 2
    assert _link_kinds(graph)[LinkKind.NVLINK] == 2 * pairs
    assert graph.edges["gpu0", "gpu7"]["bandwidth_bytes_per_s"] == 18 * NVLINK4_BYTES_PER_S


def test_nvswitch_xml_seen_from_a_vm_is_the_same_switch() -> None:
    # Inside a VM NCCL writes the hidden NVSwitch as one target fffffff:ff:ff.0 of 18 links.
    text = re.sub(
        r'(\s*<nvlink target="0000:a\d:00.0" count="\d" tclass="0x068000"/>)+',
        '\n          <nvlink target="fffffff:ff:ff.0" count="18" tclass="0x068000"/>',
        _read("dgx-h100.nccl.xml"),
    )
    assert text.count('count="18"') == 8
    assert _canonical(_h100_xml(text)) == _canonical(_h100_xml())


# --- conventions shared by every import --------------------------------------------------


ALL_IMPORTS: dict[str, Import] = {
    **DGX1_IMPORTS,
    "h100 xml": _h100_xml,
    "h100 nvidia-smi": _h100_smi,
}


@pytest.mark.parametrize("source", sorted(ALL_IMPORTS))
def test_machine_conventions(source: str) -> None:
    graph = ALL_IMPORTS[source]()
    assert gpu_nodes(graph) == [f"gpu{rank}" for rank in range(8)]
    assert graph.graph["name"] in ("nccl_xml_8", "nvidia_smi_8")
    for node, attrs in graph.nodes(data=True):
        assert attrs["host"] == "node0", node
        if attrs["kind"] is NodeKind.GPU:
            assert attrs["transit"] is False
    for _, _, attrs in graph.edges(data=True):
        assert type(attrs["bandwidth_bytes_per_s"]) is float


@pytest.mark.parametrize("source", sorted(ALL_IMPORTS))
def test_imports_are_deterministic(source: str) -> None:
    one, two = ALL_IMPORTS[source](), ALL_IMPORTS[source]()
    assert list(one.nodes(data=True)) == list(two.nodes(data=True))
    assert list(one.edges(data=True)) == list(two.edges(data=True))


# --- NCCL XML variants --------------------------------------------------------------------


def test_xml_ranks_are_renumbered_in_order() -> None:
    # A dump taken on the second node of a job holds ranks 8..15.
    text = re.sub(r'rank="(\d)"', lambda m: f'rank="{int(m[1]) + 8}"', _read("dgx1-v100.nccl.xml"))
    assert _canonical(_dgx1_xml(text)) == _canonical(_dgx1_xml())


def test_xml_without_ranks_orders_gpus_by_dev() -> None:
    text = re.sub(r' rank="\d"', "", _read("dgx1-v100.nccl.xml"))
    text = re.sub(r'<gpu dev="(\d)"', lambda m: f'<gpu dev="{7 - int(m[1])}"', text)
    graph = _dgx1_xml(text)
    assert graph.nodes["gpu0"]["busid"] == "0000:8a:00.0"  # the GPU written dev="0" now
    assert graph.nodes["gpu7"]["busid"] == "0000:06:00.0"


def test_xml_nvlink_listed_by_one_side_only() -> None:
    # Keep each GPU-GPU nvlink only in the GPU with the lower bus id.
    lines = _read("dgx1-v100.nccl.xml").splitlines(keepends=True)
    kept, current = [], ""
    for line in lines:
        if "<pci busid=" in line:
            current = line.split('busid="')[1][:12]
        target = re.search(r'<nvlink target="([^"]+)"', line)
        if target is None or target[1] > current:
            kept.append(line)
    assert _canonical(_dgx1_xml("".join(kept))) == _canonical(_dgx1_xml())


def test_xml_old_kernel_link_speed() -> None:
    # Kernels up to 5.6 write "8 GT/s" without " PCIe"; NCCL reads both.
    text = _read("dgx1-v100.nccl.xml").replace("8.0 GT/s PCIe", "8 GT/s")
    assert _canonical(_dgx1_xml(text)) == _canonical(_dgx1_xml())


# A two-GPU machine written for the error cases: two A100 (sm 80) with 4 NVLinks between
# them, on one PCIe Gen4 switch.
PAIR = """\
<system version="1">
  <cpu numaid="0" host_hash="0x1" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="1">
    <pci busid="0000:02:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
      <pci busid="0000:07:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="80" rank="0" gdr="1">
          <nvlink target="0000:08:00.0" count="4" tclass="0x030200"/>
        </gpu>
      </pci>
      <pci busid="0000:08:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="1" sm="80" rank="1" gdr="1">
          <nvlink target="0000:07:00.0" count="4" tclass="0x030200"/>
        </gpu>
      </pci>
    </pci>
  </cpu>
</system>
"""


def test_xml_pair() -> None:
    graph = from_nccl_xml(PAIR, **XML_ARGS)
    assert sorted(graph.nodes) == ["cpu0", "gpu0", "gpu1", "pcie0000:02:00.0"]
    assert graph.edges["gpu0", "gpu1"]["bandwidth_bytes_per_s"] == 4 * NVLINK3_BYTES_PER_S
    assert graph.edges["pcie0000:02:00.0", "cpu0"]["bandwidth_bytes_per_s"] == pytest.approx(
        GEN4_X16_BYTES_PER_S
    )
    assert graph.nodes["gpu1"]["busid"] == "0000:08:00.0"


def test_xml_c2c_replaces_the_pcie_link_to_the_cpu() -> None:
    # A Grace Hopper: the GPU hangs from the CPU and reaches it over NVLink-C2C.
    text = """<system version="1">
      <cpu numaid="0" arch="arm64">
        <pci busid="0009:01:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16">
          <gpu dev="0" sm="90" rank="0" gdr="1"><c2c bw="45000" count="10"/></gpu>
        </pci>
        <nic><net name="eth0" dev="0" speed="-1" port="1"/></nic>
      </cpu>
    </system>"""
    graph = from_nccl_xml(text, **XML_ARGS)
    link = graph.edges["gpu0", "cpu0"]
    assert link["kind"] is LinkKind.NVLINK
    assert link["bandwidth_bytes_per_s"] == 10 * 45_000 * 1e6  # count x bw (MB/s)
    # A NIC without a PCI device hangs from its CPU; speed -1 reads as NCCL's 10 Gbit/s.
    assert graph.nodes["nic0"]["port_bandwidth_bytes_per_s"] == 10_000 * 1e6 / 8
    assert graph.edges["nic0", "cpu0"]["bandwidth_bytes_per_s"] == 10_000 * 1e6 / 8


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "</cpu>",
            "</cpux>",
            "line 15, column 5: invalid XML: mismatched tag",
        ),
        (
            '<system version="1">',
            '<!DOCTYPE x>\n<system version="1">',
            "line 1: invalid XML: a DOCTYPE is not allowed in a topology dump",
        ),
        (
            '<system version="1">',
            '<system version="2">',
            "system: version '2' is not 1, the NCCL topology format this reads",
        ),
        (
            '<system version="1">',
            "<system>",
            "system: <system> has no 'version' attribute",
        ),
        (
            'numaid="0" ',
            "",
            "cpu[1]: <cpu> has no 'numaid' attribute",
        ),
        (
            'pci busid="0000:02:00.0" ',
            "pci ",
            "pci under cpu0: <pci> has no 'busid' attribute",
        ),
        (
            'busid="0000:02:00.0"',
            'busid="02:00"',
            "pci[busid=02:00]: bus id '02:00' is not a PCI address such as 0000:07:00.0",
        ),
        (
            'sm="80" rank="0"',
            'rank="0"',
            "gpu[busid=0000:07:00.0]: <gpu> has no 'sm' attribute",
        ),
        (
            'sm="80" rank="0"',
            'sm="75" rank="0"',
            "gpu[busid=0000:07:00.0]: has NVLinks but its sm 75 has no known NVLink bandwidth "
            "(known: 60, 70, 80, 90, 100, 103)",
        ),
        (
            'target="0000:08:00.0"',
            'target="0000:99:00.0"',
            "gpu[busid=0000:07:00.0]: nvlink target 0000:99:00.0 is not a GPU or NVSwitch in "
            "this file",
        ),
        (
            'target="0000:08:00.0" count="4"',
            'target="0000:08:00.0" count="2"',
            "gpu[busid=0000:08:00.0]: nvlink to 0000:07:00.0 has count 4, but "
            "gpu[busid=0000:07:00.0] gives count 2 for it",
        ),
        (
            'target="0000:08:00.0" count="4"',
            'target="0000:08:00.0" count="four"',
            "gpu[busid=0000:07:00.0]: <nvlink> count='four' is not an integer",
        ),
        (
            'target="0000:08:00.0" count="4"',
            'target="0000:08:00.0" count="0"',
            "gpu[busid=0000:07:00.0]: <nvlink> count must be >= 1, got 0",
        ),
        (
            'count="4" tclass="0x030200"/>\n        </gpu>\n      </pci>\n      <pci',
            'count="4" tclass="0x060400"/>\n        </gpu>\n      </pci>\n      <pci',
            "gpu[busid=0000:07:00.0]: nvlink tclass 0x060400 is not a GPU (0x03...), an "
            "NVSwitch (0x068000) or a CPU (0x068001)",
        ),
        (
            'busid="0000:02:00.0" class="0x060400" link_speed="16.0 GT/s PCIe"',
            'busid="0000:02:00.0" class="0x060400" link_speed="Unknown"',
            "pci[busid=0000:02:00.0]: link_speed 'Unknown' is not a PCIe rate such as "
            "'16.0 GT/s PCIe'",
        ),
        (
            'busid="0000:02:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16"',
            'busid="0000:02:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="-1"',
            "pci[busid=0000:02:00.0]: link_width must be >= 0, got -1",
        ),
        (
            'busid="0000:02:00.0" class="0x060400" ',
            'busid="0000:02:00.0" ',
            "pci[busid=0000:02:00.0]: <pci> has no 'class' attribute",
        ),
        (
            'rank="1"',
            'rank="0"',
            "gpu[busid=0000:08:00.0]: rank 0 is also gpu[busid=0000:07:00.0]'s; each GPU needs "
            "its own",
        ),
        (
            ' rank="1"',
            "",
            "gpu[busid=0000:08:00.0]: <gpu> has no 'rank' attribute",
        ),
        (
            'busid="0000:08:00.0" class',
            'busid="0000:07:00.0" class',
            "pci[busid=0000:07:00.0]: another <pci> has the same busid",
        ),
        (
            '<gpu dev="1" sm="80" rank="1" gdr="1">',
            '<gpu dev="1" sm="80" rank="1" gdr="1" mlopart="0"/><gpu dev="1" sm="80" rank="2">',
            "pci[busid=0000:08:00.0]: has 2 <gpu> elements (a GPU split by MLOPart); simcoll "
            "models one GPU per PCI device",
        ),
        (
            "  </cpu>\n",
            '  </cpu>\n  <cpu numaid="0" host_hash="0x1"/>\n',
            "cpu[numaid=0]: another <cpu> has the same numaid",
        ),
        (
            "  </cpu>\n",
            '  </cpu>\n  <cpu numaid="1" host_hash="0x2"/>\n',
            "cpu[numaid=1]: host_hash 0x2 differs from cpu[numaid=0]'s 0x1: the file holds "
            "several machines; import one machine's dump",
        ),
    ],
)
def test_xml_errors_are_one_exact_line(old: str, new: str, expected: str) -> None:
    assert old in PAIR
    with pytest.raises(ConfigError) as info:
        from_nccl_xml(PAIR.replace(old, new, 1), **XML_ARGS)
    assert str(info.value) == expected


# A NIC on PAIR's switch, for the values issue 41 found accepted.
_GPU0_NVLINK = '<nvlink target="0000:08:00.0" count="4" tclass="0x030200"/>'  # first: gpu0's
NIC = """\
      <pci busid="0000:09:00.0" class="0x020000" link_speed="16.0 GT/s PCIe"
           link_width="16">
        <nic><net name="mlx5_0" dev="0" speed="100000" port="1"/></nic>
      </pci>
    </pci>
  </cpu>"""
PAIR_NIC = PAIR.replace("    </pci>\n  </cpu>", NIC, 1)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (  # issue 41: a NIC of -5 Mbit/s was read as NCCL's 10 Gbit/s (NCCL's "unknown" is -1)
            'speed="100000"',
            'speed="-5"',
            "net[name=mlx5_0]: <net> speed=-5 is not a speed in Mbit/s (-1, as NCCL writes it, "
            "is a NIC that reports none)",
        ),
        (  # PCIe links are x1, x2, x4, x8, x12, x16 or x32 (0: not given, read as x16)
            'link_width="16">\n        <nic>',
            'link_width="3">\n        <nic>',
            "pci[busid=0000:09:00.0]: link_width 3 is no PCIe link's width (1, 2, 4, 8, 12, 16, "
            "32 lanes; 0: not given)",
        ),
        (  # issue 41: rank 99 on a machine of 2 GPUs holding rank 0 was renumbered 1
            'rank="1"',
            'rank="99"',
            "gpu[busid=0000:08:00.0]: rank 99 does not fit: one machine's ranks are consecutive "
            "(its 2 GPUs from rank 0: 0..1), and no GPU has rank 1; remove every rank attribute "
            "to order the GPUs by dev",
        ),
        ('rank="0"', 'rank="-1"', "gpu[busid=0000:07:00.0]: rank -1 is negative"),
        (  # issue 41: an NVLink to an NVSwitch needed no target
            '<nvlink target="0000:08:00.0" count="4" tclass="0x030200"/>',
            '<nvlink count="18" tclass="0x068000"/>',
            "gpu[busid=0000:07:00.0]: <nvlink> has no 'target' attribute",
        ),
        (
            '<nvlink target="0000:08:00.0" count="4" tclass="0x030200"/>',
            '<nvlink target="nvswitch" count="18" tclass="0x068000"/>',
            "gpu[busid=0000:07:00.0]: bus id 'nvswitch' is not a PCI address such as 0000:07:00.0",
        ),
        (  # no GPU has more than 72 NVLinks (MAX_NVLINK_COUNT: 4 x the 18 of an H100)
            _GPU0_NVLINK,
            _GPU0_NVLINK + '<nvlink target="0000:a1:00.0" count="69" tclass="0x068000"/>',
            "gpu[busid=0000:07:00.0]: has 73 NVLinks (its nvlink counts summed), more than a GPU "
            "has: at most 72 (simcoll.topology._hardware.MAX_NVLINK_COUNT; 18 on an H100 or "
            "B200)",
        ),
        (
            'count="4"',
            'count="' + "9" * 5000 + '"',
            "gpu[busid=0000:07:00.0]: <nvlink> count has 5000 digits; no value of a topology "
            "dump has more than 20",
        ),
    ],
)
def test_xml_values_no_machine_has_are_one_exact_line(old: str, new: str, expected: str) -> None:
    assert old in PAIR_NIC
    with pytest.raises(ConfigError) as info:
        from_nccl_xml(PAIR_NIC.replace(old, new, 1), **XML_ARGS)
    assert str(info.value) == expected


def test_xml_values_at_the_bounds_are_read() -> None:
    # 4 + 68 = 72 NVLinks on a GPU; NCCL's speed -1 (unknown) reads as 10 Gbit/s; a width
    # of 0 (not given, as in a VM) as x16, NCCL's rule; ranks 8 and 9 are a second server's.
    text = PAIR_NIC
    for old, new in (
        (
            _GPU0_NVLINK,
            _GPU0_NVLINK + '<nvlink target="0000:a1:00.0" count="68" tclass="0x068000"/>',
        ),
        ('speed="100000"', 'speed="-1"'),
        ('link_width="16">\n        <nic>', 'link_width="0">\n        <nic>'),
        ('rank="0"', 'rank="8"'),
        ('rank="1"', 'rank="9"'),
    ):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    graph = from_nccl_xml(text, **XML_ARGS)
    assert graph.edges["gpu0", "nvsw"]["bandwidth_bytes_per_s"] == 68 * NVLINK3_BYTES_PER_S
    assert graph.nodes["nic0"]["port_bandwidth_bytes_per_s"] == 10_000 * 1e6 / 8
    assert graph.edges["nic0", "pcie0000:02:00.0"]["bandwidth_bytes_per_s"] == pytest.approx(
        GEN4_X16_BYTES_PER_S
    )
    assert [graph.nodes[f"gpu{k}"]["busid"] for k in (0, 1)] == ["0000:07:00.0", "0000:08:00.0"]


def test_xml_root_must_be_system() -> None:
    with pytest.raises(ConfigError) as info:
        from_nccl_xml("<graphs version='1'/>", **XML_ARGS)
    assert str(info.value) == (
        '<graphs>: is the root element; an NCCL topology dump starts with <system version="1">'
    )


def test_xml_without_gpus_breaks_the_schema() -> None:
    with pytest.raises(TopologyError, match="topology has no GPU node"):
        from_nccl_xml('<system version="1"><cpu numaid="0"/></system>', **XML_ARGS)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (
            "cpu_link_bandwidth_bytes_per_s",
            0.0,
            "cpu_link_bandwidth_bytes_per_s: must be positive and finite, got 0.0 bytes/s",
        ),
        ("pcie_latency_s", -1.0, "pcie_latency_s: must be non-negative and finite, got -1.0 s"),
        ("nic_latency_s", "2 us", "nic_latency_s: must be a number in s, got '2 us'"),
    ],
)
def test_xml_argument_errors(name: str, value: object, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_nccl_xml(PAIR, **{**XML_ARGS, name: value})
    assert str(info.value) == expected


# --- nvidia-smi variants ------------------------------------------------------------------


def _drop_column(text: str, column: str) -> str:
    """Remove a tab-separated affinity column from the header and the GPU rows."""
    lines = text.splitlines()
    index = lines[0].split("\t").index(column)
    out = []
    for number, line in enumerate(lines):
        cells = line.split("\t")
        if number == 0 or line.startswith("GPU"):
            del cells[index]
        out.append("\t".join(cells))
    return "\n".join(out) + "\n"


def test_nvidia_smi_spaces_instead_of_tabs() -> None:
    text = "$ nvidia-smi topo -m\n" + _read("dgx1-v100.nvsmi.txt").expandtabs(8)
    assert _canonical(_dgx1_smi(text)) == _canonical(_dgx1_smi())


@pytest.mark.parametrize(
    "dropped", [["NUMA Affinity"], ["CPU Affinity"], ["NUMA Affinity", "CPU Affinity"]]
)
def test_nvidia_smi_places_cpus_without_numa_affinity(dropped: list[str]) -> None:
    text = _read("dgx1-v100.nvsmi.txt")
    for column in dropped:
        text = _drop_column(text, column)
    assert _canonical(_dgx1_smi(text)) == _canonical(_dgx1_smi())


def test_nvidia_smi_old_nic_names_and_soc() -> None:
    # Drivers before 2017: NIC columns named after the device, SOC for SYS, no NIC Legend.
    text = _read("dgx1-v100.nvsmi.txt").split("\nNIC Legend:")[0]
    text = re.sub(r"NIC(\d)", r"mlx5_\1", text).replace("SYS", "SOC")
    graph = _dgx1_smi(text)
    assert [graph.nodes[f"nic{k}"]["name"] for k in range(4)] == [f"mlx5_{k}" for k in range(4)]
    assert _canonical(graph) == _canonical(_dgx1_smi())


def test_nvidia_smi_cpu_affinity_is_only_a_hint() -> None:
    # As in a VM: every GPU lists the same CPUs, but SOC says the pairs are on two sockets.
    text = """\
        GPU0    GPU1    GPU2    GPU3    CPU Affinity
GPU0     X      PIX     SOC     SOC     0-3
GPU1    PIX      X      SOC     SOC     0-3
GPU2    SOC     SOC      X      PIX     0-3
GPU3    SOC     SOC     PIX      X      0-3
"""
    graph = _smi(text)
    assert _kinds(graph)[NodeKind.CPU] == 2
    assert sorted(graph.successors("pcie1")) == ["cpu1", "gpu2", "gpu3"]


def test_nvidia_smi_cpu_affinity_separates_nvlinked_gpus() -> None:
    # Two GPUs on an NVLink bridge hide their PCIe relation; their CPU lists tell the sockets.
    text = """\
        GPU0    GPU1    CPU Affinity
GPU0     X      NV4     0-15
GPU1    NV4      X      16-31
"""
    graph = _smi(text)
    assert sorted(graph.successors("gpu1")) == ["cpu1", "gpu0"]


def test_nvidia_smi_single_gpu() -> None:
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-63\t0\t\tN/A\n"
    graph = _smi(text)
    assert sorted(graph.edges) == [("cpu0", "gpu0"), ("gpu0", "cpu0")]


# Three GPUs and a NIC: GPU0 and GPU1 NVLinked and on one switch with NIC0 (NUMA 0), GPU2
# alone on NUMA 1.
SMI = """\
        GPU0    GPU1    GPU2    NIC0    CPU Affinity    NUMA Affinity
GPU0     X      NV2     SYS     PIX     0-15            0
GPU1    NV2      X      SYS     PIX     0-15            0
GPU2    SYS     SYS      X      SYS     16-31           1
NIC0    PIX     PIX     SYS      X
"""


def _smi(text: str, **extra: Any) -> nx.DiGraph[str]:
    return from_nvidia_smi(text, **_smi_args(GEN4_X16_BYTES_PER_S), **extra)


def test_nvidia_smi_small_matrix() -> None:
    graph = _smi(SMI)
    assert sorted(graph.successors("pcie0")) == ["cpu0", "gpu0", "gpu1", "nic0"]
    assert sorted(graph.successors("gpu2")) == ["cpu1"]  # no switch partner: on its CPU
    assert graph.edges["gpu0", "gpu1"]["bandwidth_bytes_per_s"] == 2 * NVLINK2_BYTES_PER_S
    assert graph.nodes["nic0"]["name"] == "NIC0"  # no NIC Legend
    assert _link_kinds(graph) == {
        LinkKind.NVLINK: 2,
        LinkKind.PCIE: 2 * (3 + 1 + 1),  # 3 devices on the switch, switch-cpu0, gpu2-cpu1
        LinkKind.CPU_LINK: 2,
    }


def _row(text: str, label: str, new: str) -> str:
    """Replace the row that starts with ``label``."""
    return re.sub(rf"(?m)^{label} .*$", new, text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "no matrix here\n",
            "no matrix: expected a header line of columns GPU0, GPU1, ... as "
            "`nvidia-smi topo -m` prints it",
        ),
        (
            _row(SMI, "GPU1", "GPU1    NV2      X      SYS     0-15            0"),
            "row GPU1: has 5 values, expected 4 cells (GPU0..NIC0) then CPU Affinity, "
            "NUMA Affinity",
        ),
        (
            _row(SMI, "NIC0", "NIC0    PIX     PIX     SYS"),
            "row NIC0: has 3 values, expected 4 cells (GPU0..NIC0)",
        ),
        (
            _row(SMI, "GPU0", "GPU0     X      NV      SYS     PIX     0-15            0"),
            "row GPU0, column GPU1: unknown cell 'NV'; expected X, NV<links>, PIX, PXB, PHB, "
            "NODE or SYS",
        ),
        (
            _row(SMI, "GPU1", "GPU1    NV1      X      SYS     PIX     0-15            0"),
            "row GPU1, column GPU0: is NV1 but row GPU0, column GPU1 is NV2; the matrix must "
            "be symmetric",
        ),
        (
            SMI.replace("NIC0    PIX     PIX     SYS      X\n", ""),
            "column NIC0: has no row",
        ),
        (
            SMI + "GPU3    SYS     SYS     SYS     SYS     0-15            0\n",
            "row GPU3: is not a column of the header (GPU0, GPU1, GPU2, NIC0)",
        ),
        (
            SMI + "NIC0    PIX     PIX     SYS      X\n",
            "row NIC0: appears twice",
        ),
        (
            SMI.replace(" X      NV2     SYS     PIX", "PIX     NV2     SYS     PIX"),
            "row GPU0, column GPU0: is 'PIX'; the diagonal must be X",
        ),
        (
            _row(
                _row(SMI, "GPU1", "GPU1    NV2      X      X       PIX     0-15            0"),
                "GPU2",
                "GPU2    SYS     X        X      SYS     16-31           1",
            ),
            "row GPU2, column GPU1: is X, which marks a device with itself",
        ),
        (
            SMI.replace("NV2     SYS     PIX     0-15", "NV2     SYS     NV1     0-15").replace(
                "NIC0    PIX", "NIC0    NV1"
            ),
            "row NIC0, column GPU0: is NV1, but NVLink joins GPUs only",
        ),
        (
            _row(
                _row(SMI, "GPU0", "GPU0     X      PHB     SYS     PIX     0-15            0"),
                "GPU1",
                "GPU1    PHB      X      SYS     PIX     0-15            0",
            ),
            "row GPU1, column GPU0: is PHB, but PIX/PXB cells put GPU0 and GPU1 under one "
            "PCIe switch",
        ),
        (
            _row(SMI, "GPU1", "GPU1    NV2      X      SYS     PIX     0-15            1"),
            "row GPU1: PCIe cells (PIX, PXB, PHB or NODE) put it on the CPU of GPU0, but its "
            "NUMA Affinity is 1 and GPU0's is 0",
        ),
        (
            SMI.replace("16-31           1", "16-31           0"),
            "row GPU2, column GPU0: is SYS (across CPUs), but the matrix puts GPU0 and GPU2 "
            "on cpu0",
        ),
        (
            SMI.replace("CPU Affinity    NUMA Affinity", "CPU Affinity    Foo"),
            "header: unknown column 'Foo' after 'CPU Affinity'; expected CPU Affinity, NUMA "
            "Affinity, GPU NUMA ID",
        ),
        (  # issue 41: NV999999999 made links of 2.5e10 GB/s
            SMI.replace("NV2", "NV999999999"),
            "row GPU0, column GPU1: NV999999999 is more NVLinks than a GPU has: at most 72 "
            "(simcoll.topology._hardware.MAX_NVLINK_COUNT; 18 on an H100 or B200)",
        ),
        (
            SMI.replace("NV2", "NV73"),
            "row GPU0, column GPU1: NV73 is more NVLinks than a GPU has: at most 72 "
            "(simcoll.topology._hardware.MAX_NVLINK_COUNT; 18 on an H100 or B200)",
        ),
        (
            SMI.replace("NV2", "NV" + "9" * 5000),
            "row GPU0, column GPU1: NV9999999999... (5000 digits) is more NVLinks than a GPU "
            "has: at most 72 (simcoll.topology._hardware.MAX_NVLINK_COUNT; 18 on an H100 or "
            "B200)",
        ),
    ],
)
def test_nvidia_smi_errors_are_one_exact_line(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        _smi(text)
    assert str(info.value) == expected


def _mesh(n: int) -> str:
    """A matrix of ``n`` GPUs behind an NVSwitch (NV4 between every pair)."""
    header = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\n"
    rows = (f"GPU{i}\t" + "\t".join(" X " if i == j else "NV4" for j in range(n)) for i in range(n))
    return header + "\n".join(rows) + "\n"


def test_nvidia_smi_more_devices_than_a_host_has_is_one_line() -> None:
    # issue 41: 3,000 GPUs took 32 s and 2.4 GB to read; the header alone refuses them
    with pytest.raises(ConfigError) as info:
        _smi(_mesh(MAX_SMI_DEVICES + 1))
    assert str(info.value) == (
        f"header: lists {MAX_SMI_DEVICES + 1} devices; one host's matrix has at most "
        f"{MAX_SMI_DEVICES} (simcoll.topology.nvidia_smi.MAX_SMI_DEVICES)"
    )


def test_nvidia_smi_nv72_is_the_most_a_pair_may_have() -> None:
    text = "        GPU0    GPU1\nGPU0     X      NV72\nGPU1    NV72     X\n"
    graph = _smi(text)  # 72 > 18 links a GPU: behind an NVSwitch
    assert graph.edges["gpu0", "nvsw"]["bandwidth_bytes_per_s"] == 72 * NVLINK2_BYTES_PER_S


def test_nvidia_smi_nvswitch_needs_nv_between_every_pair() -> None:
    with pytest.raises(ConfigError) as info:
        _smi(SMI, nvswitch=True)
    assert str(info.value) == (
        "row GPU0, column GPU2: is SYS, but behind an NVSwitch every GPU pair shows NV<links>"
    )


def test_nvidia_smi_nvswitch_needs_one_count_per_gpu() -> None:
    text = """\
        GPU0    GPU1    GPU2
GPU0     X      NV12    NV18
GPU1    NV12     X      NV18
GPU2    NV18    NV18     X
"""
    with pytest.raises(ConfigError) as info:
        _smi(text)  # 12 + 18 links in GPU0's row: more than any GPU has, so an NVSwitch
    assert str(info.value) == (
        "row GPU0: has NV12, NV18; behind an NVSwitch a GPU shows its own link count to every "
        "other GPU"
    )


def test_nvidia_smi_four_gpu_mesh_is_not_a_switch() -> None:
    # Four V100s, NV2 between every pair: 3 x 2 = 6 links per GPU, a mesh.
    text = """\
        GPU0    GPU1    GPU2    GPU3
GPU0     X      NV2     NV2     NV2
GPU1    NV2      X      NV2     NV2
GPU2    NV2     NV2      X      NV2
GPU3    NV2     NV2     NV2      X
"""
    graph = _smi(text)
    assert "nvsw" not in graph
    assert _link_kinds(graph)[LinkKind.NVLINK] == 2 * (4 * 3 // 2)
    assert sorted(graph.successors("gpu3")) == ["cpu0", "gpu0", "gpu1", "gpu2"]


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (
            "nvlink_bandwidth_bytes_per_s",
            0.0,
            "nvlink_bandwidth_bytes_per_s: must be positive and finite, got 0.0 bytes/s",
        ),
        (
            "cpu_link_latency_s",
            -1.0,
            "cpu_link_latency_s: must be non-negative and finite, got -1.0 s",
        ),
        ("nvswitch", "yes", "nvswitch: must be True, False or None, got 'yes'"),
    ],
)
def test_nvidia_smi_argument_errors(name: str, value: object, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_nvidia_smi(SMI, **{**_smi_args(GEN4_X16_BYTES_PER_S), name: value})
    assert str(info.value) == expected
