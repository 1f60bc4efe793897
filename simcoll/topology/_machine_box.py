r"""The server inside the cluster builders, and the argument checks they share.

Private to :mod:`simcoll.topology.clusters`. One machine box is a server ("node<k>"):
its GPUs on one NVSwitch, and its NICs, each reached from its GPUs over PCIe, directly
(one NIC per GPU) or through a PCIe switch shared by the GPUs of that NIC::

    gpu0 ... gpu7  --NVLink--  node0.nvsw
     |        |
    nic0 ... nic7                  (nics_per_node == gpus_per_node)

    gpu0 gpu1      gpu6 gpu7
       \  /          \  /
     node0.pcie0 ... node0.pcie3   (nics_per_node == 4: two GPUs per PCIe switch)
         |              |
     node0.nic0  ... node0.nic3

Builders collect nodes and links in lists and add them with one ``add_nodes_from`` and
one ``add_edges_from`` (which copies each attribute dict, so every directed link owns
its attributes): a 16,384-GPU cluster builds in about a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.topology.builders import MAX_LINKS, _check_kind, _check_number
from simcoll.topology.schema import LinkAttrs, LinkKind, NodeKind

Nodes = list[tuple[str, dict[str, Any]]]
Link = dict[str, Any]
"""A link's attributes, a :class:`LinkAttrs`, typed as networkx takes them."""
Edges = list[tuple[str, str, Link]]


@dataclass(frozen=True)
class MachineBox:
    """One server's checked design, repeated by :func:`add_machines` for every node."""

    gpus_per_node: int
    nics_per_node: int
    nvls: bool
    nvlink: Link  # a GPU's NVLinks to the NVSwitch, as one aggregate link
    pcie: Link


def machine_box(
    *,
    gpus_per_node: int,
    nvlinks_per_gpu: int,
    nvlink_bandwidth_bytes_per_s: float,
    nvlink_latency_s: float,
    nvls: bool,
    nics_per_node: int,
    pcie_bandwidth_bytes_per_s: float,
    pcie_latency_s: float,
) -> MachineBox:
    """Check the server arguments of a cluster builder; raise ConfigError naming one."""
    check_count(gpus_per_node, "gpus_per_node")
    check_count(nvlinks_per_gpu, "nvlinks_per_gpu")
    nvlink = link(
        LinkKind.NVLINK,
        ("nvlink_bandwidth_bytes_per_s", nvlink_bandwidth_bytes_per_s),
        ("nvlink_latency_s", nvlink_latency_s),
        multiplier=nvlinks_per_gpu,
    )
    check_bool(nvls, "nvls")
    check_count(nics_per_node, "nics_per_node")
    if gpus_per_node % nics_per_node:
        raise ConfigError(
            f"must divide gpus_per_node ({gpus_per_node}), got {nics_per_node}",
            field="nics_per_node",
        )
    pcie = link(
        LinkKind.PCIE,
        ("pcie_bandwidth_bytes_per_s", pcie_bandwidth_bytes_per_s),
        ("pcie_latency_s", pcie_latency_s),
    )
    return MachineBox(gpus_per_node, nics_per_node, nvls, nvlink, pcie)


def add_machines(graph: nx.DiGraph[str], box: MachineBox, n_nodes: int) -> list[str]:
    """Add ``n_nodes`` servers to ``graph``; return their NIC ids, node-major."""
    gpus, n_nics = box.gpus_per_node, box.nics_per_node
    gpus_per_nic = gpus // n_nics
    nodes: Nodes = []
    edges: Edges = []
    nics: list[str] = []
    for k in range(n_nodes):
        host = f"node{k}"
        nvsw = f"{host}.nvsw"
        # A GPU reaches its NIC directly, or through the PCIe switch of that NIC.
        attach = [f"{host}.nic{i}" for i in range(n_nics)]
        if gpus_per_nic > 1:
            attach = [f"{host}.pcie{i}" for i in range(n_nics)]
        for local in range(gpus):
            rank = k * gpus + local
            gpu = f"gpu{rank}"
            nodes.append(
                (gpu, {"kind": NodeKind.GPU, "rank": rank, "host": host, "transit": False})
            )
            duplex(edges, gpu, nvsw, box.nvlink)
            duplex(edges, gpu, attach[local // gpus_per_nic], box.pcie)
        nodes.append((nvsw, {"kind": NodeKind.NVSWITCH, "host": host, "reduces": box.nvls}))
        for i in range(n_nics):
            nic = f"{host}.nic{i}"
            if gpus_per_nic > 1:
                nodes.append((attach[i], {"kind": NodeKind.PCIE_SWITCH, "host": host}))
                duplex(edges, attach[i], nic, box.pcie)
            nodes.append((nic, {"kind": NodeKind.NIC, "host": host}))
            nics.append(nic)
    graph.add_nodes_from(nodes)
    graph.add_edges_from(edges)
    return nics


def add_switches(graph: nx.DiGraph[str], names: list[str], *, tier: int, reduces: bool) -> None:
    """Add fabric switches (no ``host``)."""
    graph.add_nodes_from(
        (name, {"kind": NodeKind.SWITCH, "tier": tier, "reduces": reduces}) for name in names
    )


def duplex(edges: Edges, a: str, b: str, attrs: Link) -> None:
    """Append the two directed links of one full-duplex cable."""
    edges.append((a, b, attrs))
    edges.append((b, a, attrs))


def link(
    kind: LinkKind,
    bandwidth: tuple[str, float],
    latency: tuple[str, float],
    *,
    multiplier: int = 1,
    kind_name: str = "link_kind",
) -> Link:
    """Check a (name, value) bandwidth and latency and return the link's attributes."""
    _check_kind(kind, LinkKind, kind_name)
    _check_number(bandwidth[1], bandwidth[0], "bytes/s", zero_ok=False)
    _check_number(latency[1], latency[0], "s", zero_ok=True)
    return as_link(
        LinkAttrs(
            kind=kind,
            bandwidth_bytes_per_s=multiplier * float(bandwidth[1]),
            latency_s=float(latency[1]),
        )
    )


def as_link(attrs: LinkAttrs) -> Link:
    return cast(Link, attrs)


def fabric_links(
    kind: LinkKind, bandwidth_bytes_per_s: float, nic_latency_s: float, fabric_latency_s: float
) -> tuple[Link, Link]:
    """The NIC-to-leaf link and the switch-to-switch link of a switched cluster."""
    bandwidth = ("nic_bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    nic = link(kind, bandwidth, ("nic_latency_s", nic_latency_s), kind_name="fabric_link_kind")
    fabric = link(
        kind, bandwidth, ("fabric_latency_s", fabric_latency_s), kind_name="fabric_link_kind"
    )
    return nic, fabric


def join_all(edges: Edges, lower: list[str], upper: list[str], attrs: Link) -> None:
    """One full-duplex link from every switch of ``lower`` to every switch of ``upper``."""
    for a in lower:
        for b in upper:
            duplex(edges, a, b, attrs)


def uplinks(down_ports: int, oversubscription: float, field: str = "oversubscription") -> int:
    """Uplinks of a switch with ``down_ports`` downlinks at ``oversubscription`` : 1; a
    bad ratio is a ConfigError naming ``field``."""
    if (
        isinstance(oversubscription, bool)
        or not isinstance(oversubscription, int | float)
        or not math.isfinite(oversubscription)
        or oversubscription < 1
    ):
        raise ConfigError(
            f"must be a number >= 1 (downlinks per uplink), got {oversubscription!r}",
            field=field,
        )
    # Rounded first so that 21 / 1.4 (15.000000000000002 in floats) gives 15 uplinks.
    n_up = math.ceil(round(down_ports / oversubscription, 9))
    if n_up < 1:  # the leaves would be cut off from one another
        raise ConfigError(
            f"switches of {down_ports} down ports get no uplink at {oversubscription!r}:1",
            field=field,
        )
    return n_up


def check_count(value: int, name: str, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"must be an integer >= {minimum}, got {value!r}", field=name)
    if value > MAX_LINKS:  # no count of a design exceeds its number of links
        raise ConfigError(f"must be at most {MAX_LINKS}, got {value!r}", field=name)


def check_bool(value: bool, name: str) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"must be True or False, got {value!r}", field=name)
