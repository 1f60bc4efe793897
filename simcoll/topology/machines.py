"""Single-machine builders: an NVSwitch box, the DGX-1 hybrid cube mesh, a PCIe tree.

Each builder returns one server ("node0") as a validated graph: every node has
``host="node0"``, GPUs have ``transit=False`` (a GPU never forwards traffic for two
others, so GPUs without a direct link talk over PCIe and the host), and
``graph.graph["name"]`` is set. The NVSwitch is ``"nvsw"``, PCIe switches ``"pcie<j>"``
and CPU sockets ``"cpu<k>"``. Bandwidths are per direction; every cable is two directed
links. :data:`BUILDERS` names these builders for topology files.
"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.topology.builders import (
    MAX_LINKS,
    _add_duplex,
    _check_n_gpus,
    _check_number,
    _check_size,
    _gpus,
)
from simcoll.topology.schema import LinkAttrs, LinkKind, NodeKind, validate

__all__ = ["BUILDERS", "hybrid_cube_mesh", "nvswitch_node", "pcie_tree"]

HOST = "node0"
"""The ``host`` of every node a single-machine builder makes."""

# The DGX-1 (V100) NVLink pairs as `nvidia-smi topo -m` prints them: (gpu, gpu, links),
# where 2 ("NV2") is two bonded links. Every GPU uses all 6 of its NVLink2 ports.
_DGX1_NVLINKS: tuple[tuple[int, int, int], ...] = (
    (0, 1, 1), (0, 2, 1), (0, 3, 2), (0, 4, 2), (1, 2, 2), (1, 3, 1), (1, 5, 2), (2, 3, 2),
    (2, 6, 1), (3, 7, 1), (4, 5, 1), (4, 6, 1), (4, 7, 2), (5, 6, 2), (5, 7, 1), (6, 7, 2),
)  # fmt: skip
_DGX1_GPUS = 8
_DGX1_GPUS_PER_PCIE_SWITCH = 2
_DGX1_PCIE_SWITCHES_PER_CPU = 2


def nvswitch_node(
    n_gpus: int = 8,
    *,
    nvlinks_per_gpu: int,
    nvlink_bandwidth_bytes_per_s: float,
    nvlink_latency_s: float,
    nvls: bool = False,
) -> nx.DiGraph[str]:
    r"""One NVSwitch server: every GPU's NVLinks go to a non-blocking switch ``"nvsw"``.

    ::

        gpu0  gpu1  ...  gpu7
           \    |         /
            `--nvsw------'      one duplex link per GPU = nvlinks_per_gpu NVLinks

    This is a DGX/HGX A100, H100, H200 or B200 board. Its NVSwitch chips are modelled as
    one switch that forwards at full rate from every port at once, and a GPU's
    ``nvlinks_per_gpu`` links as one full-duplex link of their summed bandwidth, so only
    the GPU links can be bottlenecks.

    Parameters
    ----------
    n_gpus
        Number of GPUs, ranks 0..n_gpus-1, node ids ``"gpu0"``...
    nvlinks_per_gpu
        NVLinks from each GPU to the switches (A100: 12, H100/H200: 18, B200: 18).
    nvlink_bandwidth_bytes_per_s
        Bandwidth of one NVLink, per direction (NVLink3/4: 25 GB/s, NVLink5: 50 GB/s).
    nvlink_latency_s
        Latency of one GPU-to-switch hop. A GPU-to-GPU route crosses two.
    nvls
        Whether the switch reduces in the network (NVLink SHARP, from the third-generation
        NVSwitch of H100 on); stored as the switch's ``reduces``.

    Returns
    -------
    networkx.DiGraph
        ``n_gpus + 1`` nodes and ``2 * n_gpus`` directed NVLINK links of
        ``nvlinks_per_gpu * nvlink_bandwidth_bytes_per_s`` each.

    Raises
    ------
    ConfigError
        If ``n_gpus`` or ``nvlinks_per_gpu`` is not an integer >= 1, the bandwidth is not
        finite and positive, the latency is not finite and non-negative, or ``nvls`` is
        not a bool.

    Examples
    --------
    >>> from simcoll.core.units import GB, us
    >>> g = nvswitch_node(
    ...     8, nvlinks_per_gpu=18, nvlink_bandwidth_bytes_per_s=25 * GB,
    ...     nvlink_latency_s=0.5 * us, nvls=True,
    ... )
    >>> g.number_of_nodes(), g.number_of_edges(), g.graph["name"]
    (9, 16, 'nvswitch_node_8')
    >>> g.edges["gpu3", "nvsw"]["bandwidth_bytes_per_s"]
    450000000000.0
    >>> g.nodes["nvsw"]["reduces"], g.nodes["gpu3"]["transit"], g.nodes["gpu3"]["host"]
    (True, False, 'node0')
    """
    _check_n_gpus(n_gpus)
    _check_count(nvlinks_per_gpu, "nvlinks_per_gpu", minimum=1)
    _check_bool(nvls, "nvls")
    link = _link(LinkKind.NVLINK, nvlink_bandwidth_bytes_per_s, nvlink_latency_s, "nvlink")
    attrs = LinkAttrs(
        kind=LinkKind.NVLINK,
        bandwidth_bytes_per_s=nvlinks_per_gpu * link["bandwidth_bytes_per_s"],
        latency_s=link["latency_s"],
    )
    graph = _machine(f"nvswitch_node_{n_gpus}", n_gpus)
    graph.add_node("nvsw", kind=NodeKind.NVSWITCH, host=HOST, reduces=nvls)
    for rank in range(n_gpus):
        _add_duplex(graph, f"gpu{rank}", "nvsw", attrs)
    return validate(graph)


def hybrid_cube_mesh(
    *,
    nvlink_bandwidth_bytes_per_s: float,
    nvlink_latency_s: float,
    pcie_bandwidth_bytes_per_s: float,
    pcie_latency_s: float,
    cpu_link_bandwidth_bytes_per_s: float,
    cpu_link_latency_s: float,
) -> nx.DiGraph[str]:
    r"""The 8-GPU NVLink hybrid cube mesh of the DGX-1 (V100), with its PCIe tree.

    NVLink pairs, as ``nvidia-smi topo -m`` prints them on a DGX-1V (``NV2`` is two
    bonded links, one duplex link of twice the bandwidth; ``-`` is no NVLink)::

               gpu0 gpu1 gpu2 gpu3 gpu4 gpu5 gpu6 gpu7
        gpu0     X   NV1  NV1  NV2  NV2   -    -    -
        gpu1    NV1   X   NV2  NV1   -   NV2   -    -
        gpu2    NV1  NV2   X   NV2   -    -   NV1   -
        gpu3    NV2  NV1  NV2   X    -    -    -   NV1
        gpu4    NV2   -    -    -    X   NV1  NV1  NV2
        gpu5     -   NV2   -    -   NV1   X   NV2  NV1
        gpu6     -    -   NV1   -   NV1  NV2   X   NV2
        gpu7     -    -    -   NV1  NV2  NV1  NV2   X

    GPUs 0-3 and 4-7 are each fully connected, plus one link from GPU i to GPU i + 4;
    every GPU uses all six of its NVLink ports. Under the NVLinks is the PCIe tree::

            cpu0 ------------------ cpu1         one CPU_LINK (QPI)
           /    \                  /    \
        pcie0  pcie1           pcie2  pcie3      PCIe switches
        /  \    /  \           /  \    /  \
     gpu0 gpu1 gpu2 gpu3    gpu4 gpu5 gpu6 gpu7

    Since GPUs do not forward traffic (``transit=False``), a pair without NVLink, such as
    gpu0 and gpu5, goes gpu0 -> pcie0 -> cpu0 -> cpu1 -> pcie2 -> gpu5.

    Parameters
    ----------
    nvlink_bandwidth_bytes_per_s
        Bandwidth of one NVLink, per direction (NVLink2: 25 GB/s); an NV2 pair gets twice.
    nvlink_latency_s
        Latency of one NVLink hop.
    pcie_bandwidth_bytes_per_s
        Bandwidth of every PCIe link (GPU to switch, switch to CPU), per direction.
    pcie_latency_s
        Latency of one PCIe hop.
    cpu_link_bandwidth_bytes_per_s
        Bandwidth between the two CPU sockets, per direction.
    cpu_link_latency_s
        Latency between the two CPU sockets.

    Returns
    -------
    networkx.DiGraph
        14 nodes (8 GPUs ``"gpu0"``..., PCIe switches ``"pcie0"``..``"pcie3"``, CPUs
        ``"cpu0"``, ``"cpu1"``) and 58 directed links: 32 NVLINK, 24 PCIE, 2 CPU_LINK.

    Raises
    ------
    ConfigError
        If a bandwidth is not finite and positive or a latency not finite and
        non-negative.

    Examples
    --------
    >>> from simcoll.core.units import GB, us
    >>> g = hybrid_cube_mesh(
    ...     nvlink_bandwidth_bytes_per_s=25 * GB, nvlink_latency_s=0.7 * us,
    ...     pcie_bandwidth_bytes_per_s=15.75 * GB, pcie_latency_s=1 * us,
    ...     cpu_link_bandwidth_bytes_per_s=38.4 * GB, cpu_link_latency_s=1 * us,
    ... )
    >>> g.number_of_nodes(), g.number_of_edges(), g.graph["name"]
    (14, 58, 'hybrid_cube_mesh')
    >>> g.edges["gpu0", "gpu3"]["bandwidth_bytes_per_s"]  # NV2
    50000000000.0
    >>> g.edges["gpu0", "gpu1"]["bandwidth_bytes_per_s"]  # NV1
    25000000000.0
    >>> sorted(g.successors("gpu0"))
    ['gpu1', 'gpu2', 'gpu3', 'gpu4', 'pcie0']
    """
    nvlink = _link(LinkKind.NVLINK, nvlink_bandwidth_bytes_per_s, nvlink_latency_s, "nvlink")
    pcie = _link(LinkKind.PCIE, pcie_bandwidth_bytes_per_s, pcie_latency_s, "pcie")
    cpu_link = _link(
        LinkKind.CPU_LINK, cpu_link_bandwidth_bytes_per_s, cpu_link_latency_s, "cpu_link"
    )
    graph = _machine("hybrid_cube_mesh", _DGX1_GPUS)
    for a, b, n_links in _DGX1_NVLINKS:
        bonded = LinkAttrs(
            kind=LinkKind.NVLINK,
            bandwidth_bytes_per_s=n_links * nvlink["bandwidth_bytes_per_s"],
            latency_s=nvlink["latency_s"],
        )
        _add_duplex(graph, f"gpu{a}", f"gpu{b}", bonded)
    n_switches = _DGX1_GPUS // _DGX1_GPUS_PER_PCIE_SWITCH
    _add_cpus(graph, n_switches // _DGX1_PCIE_SWITCHES_PER_CPU, cpu_link)
    for switch in range(n_switches):
        cpu = f"cpu{switch // _DGX1_PCIE_SWITCHES_PER_CPU}"
        _add_pcie_switch(graph, f"pcie{switch}", cpu, pcie)
    for rank in range(_DGX1_GPUS):
        _add_duplex(graph, f"gpu{rank}", f"pcie{rank // _DGX1_GPUS_PER_PCIE_SWITCH}", pcie)
    return validate(graph)


def pcie_tree(
    n_gpus: int,
    *,
    n_sockets: int = 2,
    gpus_per_switch: int = 0,
    pcie_bandwidth_bytes_per_s: float,
    pcie_latency_s: float,
    cpu_link_bandwidth_bytes_per_s: float,
    cpu_link_latency_s: float,
    p2p: bool = True,
) -> nx.DiGraph[str]:
    r"""GPUs on PCIe only: on CPU root ports or under PCIe switches, CPUs fully meshed.

    ``gpus_per_switch=0`` (root ports) and ``gpus_per_switch=2``, with 4 GPUs on 2 sockets::

          cpu0 ------- cpu1            cpu0 ------- cpu1
          /  \         /  \              |            |
        gpu0 gpu1    gpu2 gpu3          pcie0        pcie1
                                        /  \         /  \
                                      gpu0 gpu1    gpu2 gpu3

    GPUs are split evenly across the sockets in rank order, and within a socket into
    switches of ``gpus_per_switch``, each switch on its CPU by one x16 uplink that its
    GPUs share. This is, for instance, a server of GeForce or workstation GPUs without
    NVLink.

    Parameters
    ----------
    n_gpus
        Number of GPUs, ranks 0..n_gpus-1, node ids ``"gpu0"``...; a multiple of
        ``n_sockets``.
    n_sockets
        Number of CPU sockets, ``"cpu0"``...; every pair is joined by one CPU_LINK.
    gpus_per_switch
        0 puts every GPU straight on a root port of its CPU; otherwise GPUs are grouped
        in PCIe switches ``"pcie0"``... of this many GPUs each, which must divide the
        GPUs per socket.
    pcie_bandwidth_bytes_per_s
        Bandwidth of every PCIe link (GPU to switch or CPU, switch to CPU), per direction.
    pcie_latency_s
        Latency of one PCIe hop.
    cpu_link_bandwidth_bytes_per_s
        Bandwidth between two sockets (UPI, xGMI), per direction.
    cpu_link_latency_s
        Latency between two sockets.
    p2p
        Whether GPUs may copy to each other directly over PCIe, stored as
        ``graph.graph["p2p"]``. Off means a copy crosses the root complex twice: the
        router sends GPU-to-GPU traffic through the nearest CPU (host memory), even
        between two GPUs under one switch.

    Returns
    -------
    networkx.DiGraph
        ``n_gpus + n_sockets`` nodes, plus ``n_gpus / gpus_per_switch`` switches if
        ``gpus_per_switch > 0``; ``2 * n_gpus`` (plus ``2 * n_gpus / gpus_per_switch``)
        directed PCIE links and ``n_sockets * (n_sockets - 1)`` directed CPU_LINK links.

    Raises
    ------
    ConfigError
        If a count is not an integer (``n_gpus``, ``n_sockets`` >= 1,
        ``gpus_per_switch`` >= 0), ``n_sockets`` does not divide ``n_gpus``,
        ``gpus_per_switch`` does not divide the GPUs per socket, a bandwidth is not finite
        and positive, a latency not finite and non-negative, or ``p2p`` is not a bool.

    Examples
    --------
    >>> from simcoll.core.units import GB, us
    >>> g = pcie_tree(
    ...     8, gpus_per_switch=2, pcie_bandwidth_bytes_per_s=31.5 * GB, pcie_latency_s=1 * us,
    ...     cpu_link_bandwidth_bytes_per_s=67.2 * GB, cpu_link_latency_s=1 * us, p2p=False,
    ... )
    >>> g.number_of_nodes(), g.number_of_edges(), g.graph["name"], g.graph["p2p"]
    (14, 26, 'pcie_tree_8', False)
    >>> sorted(g.predecessors("cpu1"))
    ['cpu0', 'pcie2', 'pcie3']
    >>> sorted(g.successors("pcie3"))
    ['cpu1', 'gpu6', 'gpu7']
    """
    _check_n_gpus(n_gpus)
    _check_count(n_sockets, "n_sockets", minimum=1)
    _check_count(gpus_per_switch, "gpus_per_switch", minimum=0)
    _check_bool(p2p, "p2p")
    if n_gpus % n_sockets:
        raise ConfigError(
            f"{n_gpus} GPUs do not split evenly across n_sockets={n_sockets}; "
            "give a multiple of n_sockets",
            field="n_gpus",
        )
    _check_size(links=n_sockets * (n_sockets - 1), field="n_sockets")  # every pair linked
    gpus_per_socket = n_gpus // n_sockets
    if gpus_per_switch and gpus_per_socket % gpus_per_switch:
        raise ConfigError(
            f"must divide the {gpus_per_socket} GPUs per socket "
            f"(n_gpus={n_gpus} / n_sockets={n_sockets}), got {gpus_per_switch}",
            field="gpus_per_switch",
        )
    pcie = _link(LinkKind.PCIE, pcie_bandwidth_bytes_per_s, pcie_latency_s, "pcie")
    cpu_link = _link(
        LinkKind.CPU_LINK, cpu_link_bandwidth_bytes_per_s, cpu_link_latency_s, "cpu_link"
    )
    graph = _machine(f"pcie_tree_{n_gpus}", n_gpus)
    graph.graph["p2p"] = p2p
    _add_cpus(graph, n_sockets, cpu_link)
    for switch in range(n_gpus // gpus_per_switch if gpus_per_switch else 0):
        cpu = f"cpu{switch * gpus_per_switch // gpus_per_socket}"
        _add_pcie_switch(graph, f"pcie{switch}", cpu, pcie)
    for rank in range(n_gpus):
        if gpus_per_switch:
            parent = f"pcie{rank // gpus_per_switch}"
        else:
            parent = f"cpu{rank // gpus_per_socket}"  # a root port of the GPU's socket
        _add_duplex(graph, f"gpu{rank}", parent, pcie)
    return validate(graph)


BUILDERS: dict[str, Callable[..., nx.DiGraph[str]]] = {
    "nvswitch_node": nvswitch_node,
    "hybrid_cube_mesh": hybrid_cube_mesh,
    "pcie_tree": pcie_tree,
}
"""Single-machine builders by the name a topology file gives in its ``builder`` key."""


def _machine(name: str, n_gpus: int) -> nx.DiGraph[str]:
    """GPUs ``gpu0``... of one host; they never forward traffic for other GPUs."""
    graph = _gpus(name, n_gpus)
    for rank in range(n_gpus):
        graph.nodes[f"gpu{rank}"].update(host=HOST, transit=False)
    return graph


def _add_cpus(graph: nx.DiGraph[str], n_sockets: int, cpu_link: LinkAttrs) -> None:
    """CPU sockets ``cpu0``..., every pair joined by one duplex CPU link."""
    for socket in range(n_sockets):
        graph.add_node(f"cpu{socket}", kind=NodeKind.CPU, host=HOST)
    for a in range(n_sockets):
        for b in range(a + 1, n_sockets):
            _add_duplex(graph, f"cpu{a}", f"cpu{b}", cpu_link)


def _add_pcie_switch(graph: nx.DiGraph[str], switch: str, cpu: str, pcie: LinkAttrs) -> None:
    graph.add_node(switch, kind=NodeKind.PCIE_SWITCH, host=HOST)
    _add_duplex(graph, switch, cpu, pcie)


def _link(kind: LinkKind, bandwidth_bytes_per_s: float, latency_s: float, name: str) -> LinkAttrs:
    """Check ``<name>_bandwidth_bytes_per_s`` and ``<name>_latency_s``; return the link."""
    _check_number(bandwidth_bytes_per_s, f"{name}_bandwidth_bytes_per_s", "bytes/s", zero_ok=False)
    _check_number(latency_s, f"{name}_latency_s", "s", zero_ok=True)
    return LinkAttrs(
        kind=kind, bandwidth_bytes_per_s=float(bandwidth_bytes_per_s), latency_s=float(latency_s)
    )


def _check_count(value: int, name: str, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"must be an integer >= {minimum}, got {value!r}", field=name)
    if value > MAX_LINKS:  # no count of a design exceeds its number of links
        raise ConfigError(f"must be at most {MAX_LINKS}, got {value!r}", field=name)


def _check_bool(value: bool, name: str) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"must be true or false, got {value!r}", field=name)
