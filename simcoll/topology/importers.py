"""Importers: the topology of a machine you have, from what NCCL or nvidia-smi say about it.

Two pure functions read the text of a file (they do no I/O) and return one validated
machine in the conventions of :mod:`simcoll.topology.machines`: every node has
``host="node0"``, GPUs are ``"gpu<rank>"`` with ``transit=False``, CPU sockets (NUMA
nodes) are ``"cpu<numa>"``, joined pairwise by ``CPU_LINK``, the NVSwitch is ``"nvsw"``.

- :func:`from_nccl_xml` reads the XML NCCL writes with ``NCCL_TOPO_DUMP_FILE=<path>``:
  NCCL's own view of the machine (CPUs, the PCIe tree with its link speeds, GPUs and their
  NVLinks, NICs and their ports).
- :func:`from_nvidia_smi` reads the matrix ``nvidia-smi topo -m`` prints (how each pair
  of GPUs and NICs is connected) and infers the PCIe tree from it.

Sources, read for the formats (no code is taken from them):

- NVIDIA/nccl ``src/graph/xml.cc`` and ``src/graph/xml.h``: the element and attribute
  names NCCL writes (``system version="1"``; ``cpu`` numaid, affinity, arch, vendor,
  familyid, modelid, host_hash; ``pci`` busid, class, vendor, device, link_speed,
  link_width; ``gpu`` dev, sm, rank, gdr; ``nvlink`` target, count, tclass; ``c2c`` bw,
  count; ``nic`` > ``net`` name, dev, speed, port, latency, guid, maxconn, gdr); that the
  NVLinks of a GPU to one remote device are one ``nvlink`` element with a ``count``; that
  a remote device NCCL cannot see (an NVSwitch seen from a VM or container) is written
  ``fffffff:ff:ff.0`` with class ``0x068000``; that a PCIe switch appears as the pci
  element of its upstream port, with the GPUs and NICs under it as children.
- NVIDIA/nccl ``src/graph/topo.cc`` and ``src/graph/topo.h``: how NCCL reads the XML
  back. Classes are matched by prefix (``0x060400`` bridge and unknown classes: PCIe
  switch; ``0x068000`` NVSwitch; ``0x068001`` an IBM NVLink CPU; ``0x03`` GPU; ``0x02``
  NIC); a pci element with a ``gpu`` or ``nic`` child *is* that device; the link rates
  ``"8 GT/s"`` and ``"8.0 GT/s PCIe"`` both occur; every NVSwitch target is merged into
  one switch, joined to each GPU by count x per-link bandwidth; a ``net`` speed is in
  Mbit/s, and NCCL takes 10 Gbit/s when it is missing or not positive; a ``c2c`` bw is in
  MB/s per link; a ``nic`` may sit directly under a ``cpu`` (a NIC without a PCI device);
  NCCL's own per-link NVLink bandwidths by compute capability (``SM70_NVLINK_BW``...).
- ``nvidia-smi topo -m``: the legend it prints under the matrix (X, SYS, NODE, PHB, PXB,
  PIX, NV#) and outputs quoted in public issue threads: NVIDIA/nccl#933 and
  NVIDIA/nccl-tests#256 (``NIC<k>`` columns, ``CPU Affinity``, ``NUMA Affinity``,
  ``GPU NUMA ID``, the ``NIC Legend``; NV18 between every pair of an NVSwitch machine;
  H100/H200 dumps with one ``nvlink`` per NVSwitch chip on bare metal and one
  ``fffffff:ff:ff.0`` target inside a VM), kubernetes/kubernetes#53497 (older outputs
  naming NIC columns ``mlx4_0``, and ``SOC`` where newer drivers write ``SYS``).
"""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass

import networkx as nx

from simcoll.errors import ConfigError
from simcoll.topology.builders import _add_duplex, _check_number
from simcoll.topology.schema import LinkAttrs, LinkKind, NodeKind, validate

__all__ = [
    "NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM",
    "from_nccl_xml",
    "from_nvidia_smi",
    "pcie_bandwidth_bytes_per_s",
]

HOST = "node0"
"""The ``host`` of every node an importer makes: the dump describes one machine."""

NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM: dict[int, float] = {
    60: 20e9,  # P100, NVLink1: 4 links, 160 GB/s both directions together
    70: 25e9,  # V100, NVLink2: 6 links, 300 GB/s
    80: 25e9,  # A100, NVLink3: 12 links, 600 GB/s
    90: 25e9,  # H100 and H200, NVLink4: 18 links, 900 GB/s
    100: 50e9,  # B200, NVLink5: 18 links, 1.8 TB/s
    103: 50e9,  # B300, NVLink5: 18 links, 1.8 TB/s
}
"""Signalling bandwidth of one NVLink, per direction, by the GPU's ``sm`` (compute
capability x 10): the vendor's total NVLink bandwidth per GPU (NVIDIA's P100 white paper
and the V100, A100, H100 and B200/B300 datasheets) divided by 2 directions and the link
count. NCCL plans with lower, measured values (``src/graph/topo.h``: 18, 20, 20, 20.6
and 40.1 GB/s for sm 60, 70, 80, 90 and 100); calibration may scale these."""

_NVLS_MIN_SM = 90  # NVLink SHARP needs the third-generation NVSwitch of H100 and later
_NET_FALLBACK_MBIT_S = 10_000  # NCCL's speed for a net whose speed is missing or <= 0
# The most NVLinks any GPU has (H100, B200). Behind an NVSwitch, nvidia-smi shows every GPU
# pair as NV<all of the GPU's links>, so a row adds up to far more than a GPU can have.
_MAX_NVLINKS_PER_GPU = 18
_LINK_SPEED = re.compile(r"\s*(\d+(?:\.\d+)?)\s*GT/s(?:\s+PCIe)?\s*")
_INTEGER = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+|\d+)")
_BUSID = re.compile(r"[0-9a-fA-F]+:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]")
# NCCL's class table (topo.cc), matched by prefix in this order; other classes are switches.
_PCI_CLASSES = (
    ("0x060400", "switch"),
    ("0x080100", "switch"),
    ("0x068000", "nvswitch"),
    ("0x068001", "cpu"),
    ("0x03", "gpu"),
    ("0x02", "nic"),
)
_SMI_ATTRIBUTES = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_SMI_CELL = re.compile(r"X|NV[1-9]\d*|PIX|PXB|PHB|NODE|SYS|SOC")
_SMI_GPU = re.compile(r"GPU(\d+)")
_SMI_LEGEND = re.compile(r"\s*(NIC\d+)\s*:\s*(\S+)\s*")
_SAME_SWITCH = ("PIX", "PXB")
_SAME_CPU = ("PIX", "PXB", "PHB", "NODE")


def pcie_bandwidth_bytes_per_s(gigatransfers_per_s: float, lanes: int) -> float:
    """Bandwidth of a PCIe link, per direction, from its rate per lane and its width.

    Each lane carries one bit per transfer; PCIe 1.0 and 2.0 (2.5 and 5 GT/s) spend 10
    bits for 8 (8b/10b), PCIe 3.0 and later 130 bits for 128 (128b/130b; PCIe 6.0's FLIT
    mode is taken at the same rate, an approximation).

    >>> round(pcie_bandwidth_bytes_per_s(8.0, 16) / 1e9, 4)  # Gen3 x16
    15.7538
    >>> pcie_bandwidth_bytes_per_s(2.5, 1)  # Gen1 x1
    250000000.0
    """
    encoding = 8 / 10 if gigatransfers_per_s < 8 else 128 / 130
    return gigatransfers_per_s * 1e9 * lanes * encoding / 8


def from_nccl_xml(
    text: str,
    *,
    cpu_link_bandwidth_bytes_per_s: float,
    cpu_link_latency_s: float,
    nvlink_latency_s: float,
    pcie_latency_s: float,
    nic_latency_s: float,
) -> nx.DiGraph[str]:
    r"""Build the machine an NCCL topology dump (``NCCL_TOPO_DUMP_FILE``) describes.

    ::

        <system version="1">
          <cpu numaid="0" ...>                       -> cpu0
            <pci busid="0000:03:00.0" class="0x060400" link_speed="8.0 GT/s PCIe"
                 link_width="16">                    -> pcie0000:03:00.0, PCIe to cpu0
              <pci busid="0000:06:00.0" ...>         -> the GPU, PCIe to the switch
                <gpu dev="0" sm="70" rank="0">       -> gpu0
                  <nvlink target="0000:07:00.0" count="2" tclass="0x030200"/>
              <pci busid="0000:05:00.0" ...><nic><net name="mlx5_0" speed="100000" .../>
                                                     -> nic0, PCIe to the switch

    A ``cpu`` is the CPU ``"cpu<numaid>"``. A ``pci`` element with a ``gpu`` child is that
    GPU; one with a ``nic`` child is the NIC ``"nic<k>"`` (k in file order); any other
    pci element that NCCL takes for a switch (a bridge, class ``0x0604..``) is the PCIe
    switch ``"pcie<busid>"``, and its ``pci`` children hang from it; a pci element of a
    GPU, NIC or NVSwitch without its ``gpu``/``nic`` child is left out, as NCCL does.
    Each pci element has one duplex ``PCIE`` link to its parent of
    :func:`pcie_bandwidth_bytes_per_s` (``link_speed``, ``link_width``). NVLinks:

    - to a GPU (``tclass`` 0x03...): one duplex ``NVLINK`` link of ``count`` x the
      per-link bandwidth of the GPU's ``sm`` (:data:`NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM`),
      added once although both GPUs list it;
    - to an NVSwitch (``0x068000``): every such target, whatever its bus id, is the one
      switch ``"nvsw"`` (``reduces`` when every GPU on it has sm >= 90: NVLink SHARP needs
      the third-generation NVSwitch); each GPU gets one duplex link of its summed counts;
    - to an IBM CPU (``0x068001``), and NVLink-C2C (``c2c``, ``bw`` MB/s per link x
      ``count``): one duplex ``NVLINK`` link to the GPU's own CPU, which replaces the PCIe
      link when the GPU hangs from that CPU directly (a graph holds one link per pair).

    A NIC records the summed speed of its ``net`` ports (Mbit/s) as
    ``port_bandwidth_bytes_per_s`` and ``nic_latency_s`` as ``port_latency_s``: a dump
    of one machine has no network to link them to. A ``nic`` directly under a ``cpu``
    (no PCI device) is joined to it at its port bandwidth. GPUs are ranked by their
    ``rank`` attributes in order (a dump of ranks 8..15 gives gpu0..gpu7), or by ``dev``
    when no GPU has a rank. ``pcilink`` elements (Broadcom switch-to-switch P2P links)
    and the ``net`` latencies are not modelled.

    Parameters
    ----------
    text
        The XML, as the file holds it.
    cpu_link_bandwidth_bytes_per_s
        Bandwidth between each pair of CPUs (UPI, xGMI), per direction; the dump does
        not give it.
    cpu_link_latency_s
        Latency between each pair of CPUs.
    nvlink_latency_s
        Latency of every NVLink hop (GPU-GPU, GPU-NVSwitch, GPU-CPU).
    pcie_latency_s
        Latency of every PCIe hop.
    nic_latency_s
        Latency of a NIC's network port, stored on the NIC as ``port_latency_s``.

    Returns
    -------
    networkx.DiGraph
        The validated machine; ``graph.graph["name"]`` is ``"nccl_xml_<n_gpus>"``. GPU,
        NIC and PCIe switch nodes keep their PCI ``busid``.

    Raises
    ------
    ConfigError
        On one line naming the element (``gpu[busid=0000:07:00.0]``, ``cpu[numaid=1]``) or
        the line and column of malformed XML: a missing or malformed attribute, an
        NVLink target that is not in the file, NVLink counts two GPUs disagree on, an
        ``sm`` without a known NVLink bandwidth, duplicate bus ids, numaids or ranks, CPUs
        of several machines, or an argument that is not a finite number (positive for
        the bandwidth, non-negative for latencies).
    TopologyError
        If the machine breaks the schema, e.g. it has no GPU.

    Examples
    --------
    >>> from pathlib import Path
    >>> from simcoll.units import GB, us
    >>> g = from_nccl_xml(
    ...     Path("topologies/examples/dgx1-v100.nccl.xml").read_text(),
    ...     cpu_link_bandwidth_bytes_per_s=38.4 * GB, cpu_link_latency_s=1 * us,
    ...     nvlink_latency_s=0.7 * us, pcie_latency_s=1 * us, nic_latency_s=2 * us,
    ... )
    >>> g.number_of_nodes(), g.number_of_edges(), g.graph["name"]
    (18, 66, 'nccl_xml_8')
    >>> g.edges["gpu0", "gpu3"]["bandwidth_bytes_per_s"]  # count="2", sm 70
    50000000000.0
    >>> sorted(g.successors("gpu0"))
    ['gpu1', 'gpu2', 'gpu3', 'gpu4', 'pcie0000:03:00.0']
    >>> g.nodes["nic0"]["name"], g.nodes["nic0"]["port_bandwidth_bytes_per_s"]
    ('mlx5_0', 12500000000.0)
    """
    _check_number(
        cpu_link_bandwidth_bytes_per_s, "cpu_link_bandwidth_bytes_per_s", "bytes/s", zero_ok=False
    )
    for name, value in (
        ("cpu_link_latency_s", cpu_link_latency_s),
        ("nvlink_latency_s", nvlink_latency_s),
        ("pcie_latency_s", pcie_latency_s),
        ("nic_latency_s", nic_latency_s),
    ):
        _check_number(value, name, "s", zero_ok=True)
    reader = _NcclXml(float(nvlink_latency_s), float(pcie_latency_s), float(nic_latency_s))
    for index, cpu in enumerate(_parse_system(text).findall("cpu"), start=1):
        reader.add_cpu(cpu, index)
    graph = reader.finish(
        _attrs(LinkKind.CPU_LINK, cpu_link_bandwidth_bytes_per_s, cpu_link_latency_s)
    )
    return validate(graph)


@dataclass(frozen=True)
class _XmlGpu:
    busid: str
    key: int
    element: ET.Element
    parent: str
    cpu: str
    pcie: LinkAttrs

    @property
    def field(self) -> str:
        return f"gpu[busid={self.busid}]"


class _NcclXml:
    """The walk over an NCCL dump: CPUs, switches and NICs at once, GPUs at the end."""

    def __init__(self, nvlink_latency_s: float, pcie_latency_s: float, nic_latency_s: float):
        self.graph: nx.DiGraph[str] = nx.DiGraph()
        self.gpus: list[_XmlGpu] = []
        self.busids: dict[int, str] = {}
        self.nics = 0
        self.host_hash: tuple[str, str] | None = None  # (value, the CPU that gave it)
        self.nvlink_latency_s = nvlink_latency_s
        self.pcie_latency_s = pcie_latency_s
        self.nic_latency_s = nic_latency_s

    def add_cpu(self, element: ET.Element, index: int) -> None:
        numaid = _int_attr(element, "numaid", f"cpu[{index}]")
        cpu, field = f"cpu{numaid}", f"cpu[numaid={numaid}]"
        if cpu in self.graph:
            raise ConfigError("another <cpu> has the same numaid", field=field)
        host_hash = element.get("host_hash")
        if host_hash is not None:
            if self.host_hash is not None and host_hash != self.host_hash[0]:
                raise ConfigError(
                    f"host_hash {host_hash} differs from {self.host_hash[1]}'s "
                    f"{self.host_hash[0]}: the file holds several machines; import one "
                    "machine's dump",
                    field=field,
                )
            self.host_hash = self.host_hash or (host_hash, field)
        self.graph.add_node(cpu, kind=NodeKind.CPU, host=HOST)
        for child in element:
            if child.tag == "pci":
                self._add_pci(child, cpu, cpu)
            elif child.tag == "nic":
                self._add_nic([child], None, cpu, f"{field} > nic")

    def _add_pci(self, element: ET.Element, parent: str, cpu: str) -> None:
        busid = _attr(element, "busid", f"pci under {parent}")
        field = f"pci[busid={busid}]"
        key = _bus_key(busid, field)
        if key in self.busids:
            raise ConfigError("another <pci> has the same busid", field=field)
        self.busids[key] = busid
        gpus = element.findall("gpu")
        nics = element.findall("nic")
        if len(gpus) > 1:
            raise ConfigError(
                f"has {len(gpus)} <gpu> elements (a GPU split by MLOPart); simcoll models "
                "one GPU per PCI device",
                field=field,
            )
        if gpus:
            pcie = self._pcie(element, field)
            self.gpus.append(_XmlGpu(busid, key, gpus[0], parent, cpu, pcie))
        elif nics:
            self._add_nic(nics, busid, parent, field, self._pcie(element, field))
        elif _pci_class(_attr(element, "class", field)) == "switch":
            switch = f"pcie{busid}"
            self.graph.add_node(switch, kind=NodeKind.PCIE_SWITCH, host=HOST, busid=busid)
            _add_duplex(self.graph, switch, parent, self._pcie(element, field))
            for child in element.findall("pci"):
                self._add_pci(child, switch, cpu)

    def _add_nic(
        self,
        nics: list[ET.Element],
        busid: str | None,
        parent: str,
        field: str,
        pcie: LinkAttrs | None = None,
    ) -> None:
        names: list[str] = []
        port_bytes_per_s = 0.0
        for net in (net for nic in nics for net in nic.findall("net")):
            if net.get("dev") is None or net.get("net") == "0":
                continue  # NCCL skips a net without dev and one fused into a virtual NIC
            name = net.get("name", "")
            speed = net.get("speed")
            mbit_s = _int_attr(net, "speed", f"net[name={name}]") if speed else 0
            port_bytes_per_s += (mbit_s if mbit_s > 0 else _NET_FALLBACK_MBIT_S) * 1e6 / 8
            names.append(name)
        if not names:
            raise ConfigError("has no <net> element with a dev attribute", field=field)
        nic = f"nic{self.nics}"
        self.nics += 1
        attrs = {"busid": busid} if busid is not None else {}
        self.graph.add_node(
            nic,
            kind=NodeKind.NIC,
            host=HOST,
            name=",".join(names),
            port_bandwidth_bytes_per_s=port_bytes_per_s,
            port_latency_s=self.nic_latency_s,
            **attrs,
        )
        if pcie is None:  # a NIC without a PCI device: its port is the bottleneck
            pcie = LinkAttrs(
                kind=LinkKind.PCIE,
                bandwidth_bytes_per_s=port_bytes_per_s,
                latency_s=self.pcie_latency_s,
            )
        _add_duplex(self.graph, nic, parent, pcie)

    def _pcie(self, element: ET.Element, field: str) -> LinkAttrs:
        speed = _attr(element, "link_speed", field)
        match = _LINK_SPEED.fullmatch(speed)
        if match is None or float(match[1]) == 0:
            raise ConfigError(
                f"link_speed {speed!r} is not a PCIe rate such as '16.0 GT/s PCIe'", field=field
            )
        lanes = _int_attr(element, "link_width", field)
        if lanes < 1:
            raise ConfigError(f"link_width must be >= 1, got {lanes}", field=field)
        bandwidth = pcie_bandwidth_bytes_per_s(float(match[1]), lanes)
        return LinkAttrs(
            kind=LinkKind.PCIE, bandwidth_bytes_per_s=bandwidth, latency_s=self.pcie_latency_s
        )

    def finish(self, cpu_link: LinkAttrs) -> nx.DiGraph[str]:
        graph = self.graph
        ranked = _ranked(self.gpus)
        ids = {gpu.key: f"gpu{rank}" for rank, gpu in enumerate(ranked)}
        for rank, gpu in enumerate(ranked):
            attrs = {"rank": rank, "host": HOST, "transit": False, "busid": gpu.busid}
            graph.add_node(ids[gpu.key], kind=NodeKind.GPU, **attrs)
            _add_duplex(graph, ids[gpu.key], gpu.parent, gpu.pcie)
        self._add_nvlinks(ids)
        cpus = [node for node, attrs in graph.nodes(data=True) if attrs["kind"] is NodeKind.CPU]
        for a, b in itertools.combinations(cpus, 2):
            _add_duplex(graph, a, b, cpu_link)
        graph.graph["name"] = f"nccl_xml_{len(self.gpus)}"
        return graph

    def _add_nvlinks(self, ids: dict[int, str]) -> None:
        by_key = {gpu.key: gpu for gpu in self.gpus}
        pairs: dict[tuple[int, int], int] = defaultdict(int)
        to_switch: dict[int, int] = defaultdict(int)
        to_cpu: dict[int, float] = defaultdict(float)
        for gpu in self.gpus:
            for nvlink in gpu.element.findall("nvlink"):
                target, count = _nvlink_target(gpu, nvlink, by_key)
                if isinstance(target, int):
                    pairs[gpu.key, target] += count
                elif target == "nvswitch":
                    to_switch[gpu.key] += count
                else:
                    to_cpu[gpu.key] += count * _nvlink_per_link(gpu)
            for c2c in gpu.element.findall("c2c"):
                megabytes_per_s = _count_attr(c2c, "bw", gpu.field)
                to_cpu[gpu.key] += _count_attr(c2c, "count", gpu.field) * megabytes_per_s * 1e6
        for (a, b), count in pairs.items():
            back = pairs.get((b, a))
            if back is not None and back != count:
                raise ConfigError(
                    f"nvlink to {by_key[a].busid} has count {back}, but "
                    f"{by_key[a].field} gives count {count} for it",
                    field=by_key[b].field,
                )
            if a < b or back is None:
                bandwidth = count * _nvlink_per_link(by_key[a])
                _add_duplex(self.graph, ids[a], ids[b], self._nvlink(bandwidth))
        if to_switch:
            sms = [_int_attr(by_key[key].element, "sm", by_key[key].field) for key in to_switch]
            self.graph.add_node(
                "nvsw", kind=NodeKind.NVSWITCH, host=HOST, reduces=min(sms) >= _NVLS_MIN_SM
            )
        for key, count in to_switch.items():
            bandwidth = count * _nvlink_per_link(by_key[key])
            _add_duplex(self.graph, ids[key], "nvsw", self._nvlink(bandwidth))
        for key, bandwidth in to_cpu.items():
            _add_duplex(self.graph, ids[key], by_key[key].cpu, self._nvlink(bandwidth))

    def _nvlink(self, bandwidth_bytes_per_s: float) -> LinkAttrs:
        return LinkAttrs(
            kind=LinkKind.NVLINK,
            bandwidth_bytes_per_s=float(bandwidth_bytes_per_s),
            latency_s=self.nvlink_latency_s,
        )


def _nvlink_target(
    gpu: _XmlGpu, nvlink: ET.Element, by_key: dict[int, _XmlGpu]
) -> tuple[int | str, int]:
    """The bus key of the GPU an ``nvlink`` element reaches, or "nvswitch" or "cpu"; and
    its count. The GPU's sm must have a known per-link bandwidth."""
    count = _count_attr(nvlink, "count", gpu.field)
    tclass = _attr(nvlink, "tclass", gpu.field)
    kind = _pci_class(tclass)
    _nvlink_per_link(gpu)
    if kind in ("nvswitch", "cpu"):
        return kind, count
    if kind != "gpu":
        raise ConfigError(
            f"nvlink tclass {tclass} is not a GPU (0x03...), an NVSwitch (0x068000) or a "
            "CPU (0x068001)",
            field=gpu.field,
        )
    target = _attr(nvlink, "target", gpu.field)
    key = _bus_key(target, gpu.field)
    if key not in by_key or key == gpu.key:
        raise ConfigError(
            f"nvlink target {target} is not a GPU or NVSwitch in this file", field=gpu.field
        )
    return key, count


def _parse_system(text: str) -> ET.Element:
    """Parse the XML and return its ``<system>`` root; refuse DTDs (entity expansion)."""
    text = text.removeprefix("\ufeff")  # tolerate a byte-order mark
    doctype = text.find("<!DOCTYPE")
    if doctype >= 0:
        raise ConfigError(
            "invalid XML: a DOCTYPE is not allowed in a topology dump",
            field=f"line {text.count(chr(10), 0, doctype) + 1}",
        )
    try:
        root = ET.fromstring(text)
    except ET.ParseError as error:
        line, column = error.position
        message = re.sub(r": line \d+, column \d+$", "", str(error))
        raise ConfigError(
            f"invalid XML: {message}", field=f"line {line}, column {column + 1}"
        ) from None
    if root.tag != "system":
        raise ConfigError(
            'is the root element; an NCCL topology dump starts with <system version="1">',
            field=f"<{root.tag}>",
        )
    version = _attr(root, "version", "system")
    if version.strip() != "1":
        raise ConfigError(
            f"version {version!r} is not 1, the NCCL topology format this reads", field="system"
        )
    return root


def _ranked(gpus: list[_XmlGpu]) -> list[_XmlGpu]:
    """The GPUs in rank order: by ``rank``, or by ``dev`` when no GPU has a rank."""
    name = "rank" if any(gpu.element.get("rank") is not None for gpu in gpus) else "dev"
    holder: dict[int, _XmlGpu] = {}
    for gpu in gpus:
        value = _int_attr(gpu.element, name, gpu.field)
        if value in holder:
            raise ConfigError(
                f"{name} {value} is also {holder[value].field}'s; each GPU needs its own",
                field=gpu.field,
            )
        holder[value] = gpu
    return [holder[value] for value in sorted(holder)]


def _nvlink_per_link(gpu: _XmlGpu) -> float:
    sm = _int_attr(gpu.element, "sm", gpu.field)
    if sm not in NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM:
        known = ", ".join(map(str, NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM))
        raise ConfigError(
            f"has NVLinks but its sm {sm} has no known NVLink bandwidth (known: {known})",
            field=gpu.field,
        )
    return NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM[sm]


def _pci_class(value: str) -> str:
    lowered = value.strip().lower()
    return next((kind for prefix, kind in _PCI_CLASSES if lowered.startswith(prefix)), "switch")


def _bus_key(busid: str, field: str) -> int:
    """The bus id as a number, as NCCL compares them: ``0000:07:00.0`` = ``00000000:07:00.0``."""
    if _BUSID.fullmatch(busid.strip()) is None:
        raise ConfigError(
            f"bus id {busid!r} is not a PCI address such as 0000:07:00.0", field=field
        )
    return int(re.sub(r"[:.]", "", busid.strip()), 16)


def _attr(element: ET.Element, name: str, field: str) -> str:
    value = element.get(name)
    if value is None:
        raise ConfigError(f"<{element.tag}> has no {name!r} attribute", field=field)
    return value


def _int_attr(element: ET.Element, name: str, field: str) -> int:
    text = _attr(element, name, field).strip()
    if _INTEGER.fullmatch(text) is None:
        raise ConfigError(f"<{element.tag}> {name}={text!r} is not an integer", field=field)
    return int(text, 16 if text.lower().lstrip("+-").startswith("0x") else 10)


def _count_attr(element: ET.Element, name: str, field: str) -> int:
    value = _int_attr(element, name, field)
    if value < 1:
        raise ConfigError(f"<{element.tag}> {name} must be >= 1, got {value}", field=field)
    return value


def _attrs(kind: LinkKind, bandwidth_bytes_per_s: float, latency_s: float) -> LinkAttrs:
    return LinkAttrs(
        kind=kind, bandwidth_bytes_per_s=float(bandwidth_bytes_per_s), latency_s=float(latency_s)
    )


def from_nvidia_smi(
    text: str,
    *,
    nvlink_bandwidth_bytes_per_s: float,
    nvlink_latency_s: float,
    pcie_bandwidth_bytes_per_s: float,
    pcie_latency_s: float,
    cpu_link_bandwidth_bytes_per_s: float,
    cpu_link_latency_s: float,
    nvswitch: bool | None = None,
) -> nx.DiGraph[str]:
    r"""Build the machine the matrix of ``nvidia-smi topo -m`` describes.

    ::

                GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity
        GPU0     X      NV4     PIX     0-31            0
        GPU1    NV4      X      PHB     0-31            0
        NIC0    PIX     PHB      X

    Row ``GPU<k>`` is ``"gpu<k>"`` (rank k); each NIC column, in order, is
    ``"nic<j>"`` (named after the ``NIC Legend`` or its column). A cell says how two
    devices are joined: ``NV<n>`` is one duplex ``NVLINK`` link of n x
    ``nvlink_bandwidth_bytes_per_s``; the others give the PCIe tree, inferred so:

    - devices related by ``PIX`` or ``PXB`` share a PCIe switch ``"pcie<j>"`` (numbered in
      order of their first device; a chain of switches, PXB, is flattened to one);
      a device with no such partner hangs from its CPU directly;
    - ``PIX``, ``PXB``, ``PHB`` and ``NODE`` put both devices under one CPU, ``SYS``
      (``SOC`` in old drivers) under two. The CPU is ``"cpu<numa>"`` from the ``NUMA
      Affinity`` column; without it, GPUs with the same ``CPU Affinity`` share a CPU
      (numbered ``"cpu0"``... in order) unless the cells contradict it (VMs often give
      every GPU the same CPUs), when the cells alone decide. A group of devices joined
      by those cells none of whose GPUs gives an affinity joins the first CPU it has no
      SYS cell to, or else takes the next free number.

    NV hides the PCIe relation of a GPU pair, so GPUs joined by NVLink are only placed
    on one switch through a third device (a NIC) that is PIX to both. Behind an NVSwitch,
    nvidia-smi shows every GPU pair as NV<all of the GPU's links>: the GPUs then hang
    from one ``"nvsw"`` (``reduces=False``: the matrix does not say the generation; set it
    on H100 and later) by one link of that many links each. Every link but the CPU links
    is PCIe at ``pcie_bandwidth_bytes_per_s``; the matrix gives no PCIe speeds.

    Parameters
    ----------
    text
        The output of ``nvidia-smi topo -m``, tabs or spaces; lines before the header
        (starting ``GPU0``) and the legends after the matrix are allowed.
    nvlink_bandwidth_bytes_per_s
        Bandwidth of one NVLink, per direction (NVLink2 to NVLink4: 25 GB/s).
    nvlink_latency_s
        Latency of every NVLink hop.
    pcie_bandwidth_bytes_per_s
        Bandwidth of every PCIe link, per direction.
    pcie_latency_s
        Latency of every PCIe hop.
    cpu_link_bandwidth_bytes_per_s
        Bandwidth between each pair of CPUs, per direction.
    cpu_link_latency_s
        Latency between each pair of CPUs.
    nvswitch
        Whether the GPUs' NVLinks go through an NVSwitch. ``None`` decides from the
        matrix: yes when a GPU's NV counts add up to more than 18 (no GPU has more
        links), which tells the NV18 of a DGX H100 from the NV2 mesh of four V100s.

    Returns
    -------
    networkx.DiGraph
        The validated machine; ``graph.graph["name"]`` is ``"nvidia_smi_<n_gpus>"``.

    Raises
    ------
    ConfigError
        On one line naming the row and column (``row GPU1, column GPU3``): no header, a
        row of the wrong length or not in the header, an unknown cell (``NV`` without a
        count), a matrix that is not symmetric, X off the diagonal, NV to a NIC, an
        NVSwitch matrix whose GPU pairs are not all NV with one count per GPU, relations
        that contradict each other or the affinities, or a bad argument.
    TopologyError
        If the machine breaks the schema, e.g. GPU labels leave a gap.

    Examples
    --------
    >>> from simcoll.units import GB, us
    >>> text = '''
    ...         GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity
    ... GPU0     X      NV4     PIX     0-31            0
    ... GPU1    NV4      X      PHB     0-31            0
    ... NIC0    PIX     PHB      X
    ... '''
    >>> g = from_nvidia_smi(
    ...     text, nvlink_bandwidth_bytes_per_s=25 * GB, nvlink_latency_s=0.7 * us,
    ...     pcie_bandwidth_bytes_per_s=31.5 * GB, pcie_latency_s=1 * us,
    ...     cpu_link_bandwidth_bytes_per_s=64 * GB, cpu_link_latency_s=1 * us,
    ... )
    >>> sorted(g.nodes), g.edges["gpu0", "gpu1"]["bandwidth_bytes_per_s"]
    (['cpu0', 'gpu0', 'gpu1', 'nic0', 'pcie0'], 100000000000.0)
    >>> sorted(g.successors("pcie0")), sorted(g.successors("gpu1"))
    (['cpu0', 'gpu0', 'nic0'], ['cpu0', 'gpu0'])
    """
    nvlink = _checked(LinkKind.NVLINK, "nvlink", nvlink_bandwidth_bytes_per_s, nvlink_latency_s)
    pcie = _checked(LinkKind.PCIE, "pcie", pcie_bandwidth_bytes_per_s, pcie_latency_s)
    cpu_link = _checked(
        LinkKind.CPU_LINK, "cpu_link", cpu_link_bandwidth_bytes_per_s, cpu_link_latency_s
    )
    if nvswitch is not None and not isinstance(nvswitch, bool):
        raise ConfigError(f"must be True, False or None, got {nvswitch!r}", field="nvswitch")
    matrix = _read_matrix(text)
    graph: nx.DiGraph[str] = nx.DiGraph(name=f"nvidia_smi_{len(matrix.gpus)}")
    ids = matrix.node_ids()
    for label in matrix.gpus:
        rank = int(label[3:])
        graph.add_node(ids[label], kind=NodeKind.GPU, rank=rank, host=HOST, transit=False)
    for label in matrix.nics:
        name = matrix.legend.get(label, label)
        graph.add_node(ids[label], kind=NodeKind.NIC, host=HOST, name=name)
    _smi_nvlinks(graph, matrix, ids, nvlink, nvswitch)
    cpu_of = _smi_cpus(matrix)
    groups = _smi_switch_groups(matrix)
    for j, group in enumerate(groups):
        graph.add_node(f"pcie{j}", kind=NodeKind.PCIE_SWITCH, host=HOST)
        _add_duplex(graph, f"pcie{j}", cpu_of[group[0]], pcie)
        for label in group:
            _add_duplex(graph, ids[label], f"pcie{j}", pcie)
    switched = {label for group in groups for label in group}
    for label in matrix.labels:
        if label not in switched:
            _add_duplex(graph, ids[label], cpu_of[label], pcie)
    cpus = sorted(set(cpu_of.values()), key=lambda cpu: int(cpu[3:]))
    graph.add_nodes_from((cpu, {"kind": NodeKind.CPU, "host": HOST}) for cpu in cpus)
    for a, b in itertools.combinations(cpus, 2):
        _add_duplex(graph, a, b, cpu_link)
    return validate(graph)


@dataclass
class _Matrix:
    """The cells of ``nvidia-smi topo -m``, by (row label, column label)."""

    labels: list[str]
    cells: dict[tuple[str, str], str]
    affinity: dict[str, dict[str, str]]  # GPU label -> {"NUMA Affinity": "0", ...}
    legend: dict[str, str]

    @property
    def gpus(self) -> list[str]:
        return [label for label in self.labels if _SMI_GPU.fullmatch(label)]

    @property
    def nics(self) -> list[str]:
        return [label for label in self.labels if not _SMI_GPU.fullmatch(label)]

    def node_ids(self) -> dict[str, str]:
        ids = {label: f"gpu{label[3:]}" for label in self.gpus}
        ids.update((label, f"nic{j}") for j, label in enumerate(self.nics))
        return ids

    def pairs(self) -> list[tuple[str, str, str]]:
        """Every unordered pair (a, b) in column order, with its cell."""
        return [(a, b, self.cells[a, b]) for a, b in itertools.combinations(self.labels, 2)]


def _read_matrix(text: str) -> _Matrix:
    lines = text.removeprefix("\ufeff").splitlines()
    start = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]), None)
    if start is None:
        raise ConfigError(
            "no matrix: expected a header line of columns GPU0, GPU1, ... as "
            "`nvidia-smi topo -m` prints it"
        )
    labels, columns = _read_header(lines[start].split())
    cells: dict[tuple[str, str], str] = {}
    affinity: dict[str, dict[str, str]] = {}
    for line in lines[start + 1 :]:
        tokens = line.split()
        if not tokens or tokens[0] == "Legend:":
            break
        label, values = tokens[0], tokens[1:]
        if label not in labels:
            raise ConfigError(
                f"is not a column of the header ({', '.join(labels)})", field=f"row {label}"
            )
        if label in affinity or (label, label) in cells:
            raise ConfigError("appears twice", field=f"row {label}")
        is_gpu = _SMI_GPU.fullmatch(label) is not None
        if len(values) != len(labels) + len(columns) and (is_gpu or len(values) != len(labels)):
            expected = f"{len(labels)} cells ({labels[0]}..{labels[-1]})"
            if columns and is_gpu:
                expected += f" then {', '.join(columns)}"
            raise ConfigError(
                f"has {len(values)} values, expected {expected}", field=f"row {label}"
            )
        for column, cell in zip(labels, values, strict=False):
            if _SMI_CELL.fullmatch(cell) is None:
                raise ConfigError(
                    f"unknown cell {cell!r}; expected X, NV<links>, PIX, PXB, PHB, NODE or SYS",
                    field=f"row {label}, column {column}",
                )
            cells[label, column] = "SYS" if cell == "SOC" else cell
        if is_gpu:
            affinity[label] = dict(zip(columns, values[len(labels) :], strict=True))
    legend = {}
    for line in lines[start + 1 :]:
        match = _SMI_LEGEND.fullmatch(line)
        if match:
            legend[match[1]] = match[2]
    matrix = _Matrix(labels, cells, affinity, legend)
    _check_matrix(matrix)
    return matrix


def _read_header(tokens: list[str]) -> tuple[list[str], list[str]]:
    """Split the header into device labels and the affinity columns after them."""
    labels: list[str] = []
    columns: list[str] = []
    i = 0
    while i < len(tokens):
        phrase = next((p for p in _SMI_ATTRIBUTES if _starts(tokens[i:], p)), None)
        if phrase is not None:
            columns.append(phrase)
            i += len(phrase.split())
            continue
        if columns:
            raise ConfigError(
                f"unknown column {tokens[i]!r} after {columns[-1]!r}; expected "
                f"{', '.join(_SMI_ATTRIBUTES)}",
                field="header",
            )
        if tokens[i] in labels:
            raise ConfigError(f"column {tokens[i]} appears twice", field="header")
        labels.append(tokens[i])
        i += 1
    return labels, columns


def _starts(tokens: list[str], phrase: str) -> bool:
    words = phrase.split()
    return tokens[: len(words)] == words


def _check_matrix(matrix: _Matrix) -> None:
    """A row per column, X on the diagonal only, symmetric, NV between GPUs only."""
    for label in matrix.labels:
        if (label, label) not in matrix.cells:
            raise ConfigError("has no row", field=f"column {label}")
    for a in matrix.labels:
        if matrix.cells[a, a] != "X":
            raise ConfigError(
                f"is {matrix.cells[a, a]!r}; the diagonal must be X", field=f"row {a}, column {a}"
            )
    for a, b, cell in matrix.pairs():
        back = matrix.cells[b, a]
        where = f"row {b}, column {a}"
        if back != cell:
            raise ConfigError(
                f"is {back} but row {a}, column {b} is {cell}; the matrix must be symmetric",
                field=where,
            )
        if cell == "X":
            raise ConfigError("is X, which marks a device with itself", field=where)
        if cell.startswith("NV") and not (a in matrix.gpus and b in matrix.gpus):
            raise ConfigError(f"is {cell}, but NVLink joins GPUs only", field=where)


def _smi_nvlinks(
    graph: nx.DiGraph[str],
    matrix: _Matrix,
    ids: dict[str, str],
    nvlink: LinkAttrs,
    nvswitch: bool | None,
) -> None:
    counts = {(a, b): int(cell[2:]) for a, b, cell in matrix.pairs() if cell.startswith("NV")}
    totals: dict[str, int] = defaultdict(int)
    for (a, b), count in counts.items():
        totals[a] += count
        totals[b] += count
    if nvswitch is None:
        nvswitch = any(total > _MAX_NVLINKS_PER_GPU for total in totals.values())
    if not nvswitch:
        for (a, b), count in counts.items():
            _add_duplex(graph, ids[a], ids[b], _times(nvlink, count))
        return
    graph.add_node("nvsw", kind=NodeKind.NVSWITCH, host=HOST, reduces=False)
    for gpu in matrix.gpus:
        links = set()
        for other in matrix.gpus:
            cell = matrix.cells[gpu, other]
            if other != gpu and not cell.startswith("NV"):
                raise ConfigError(
                    f"is {cell}, but behind an NVSwitch every GPU pair shows NV<links>",
                    field=f"row {gpu}, column {other}",
                )
            links.add(cell)
        links.discard("X")
        if len(links) > 1:
            raise ConfigError(
                f"has {', '.join(sorted(links))}; behind an NVSwitch a GPU shows its own "
                "link count to every other GPU",
                field=f"row {gpu}",
            )
        if links:
            _add_duplex(graph, ids[gpu], "nvsw", _times(nvlink, int(links.pop()[2:])))


def _smi_switch_groups(matrix: _Matrix) -> list[list[str]]:
    """Devices sharing a PCIe switch (PIX or PXB), in column order; check consistency."""
    groups = [g for g in _components(matrix, _SAME_SWITCH) if len(g) > 1]
    for group in groups:
        for a, b in itertools.combinations(group, 2):
            cell = matrix.cells[a, b]
            if not cell.startswith("NV") and cell not in _SAME_SWITCH:
                raise ConfigError(
                    f"is {cell}, but PIX/PXB cells put {a} and {b} under one PCIe switch",
                    field=f"row {b}, column {a}",
                )
    return groups


def _smi_cpus(matrix: _Matrix) -> dict[str, str]:
    """The CPU of every device: by NUMA (or CPU) affinity, then by PCIe relations."""
    source, keys = _affinity_keys(matrix)
    if source == "CPU Affinity":
        try:
            return _place_cpus(matrix, source, keys)
        except ConfigError:  # a hint only: VMs often give every GPU the same CPUs
            source, keys = "", {}
    return _place_cpus(matrix, source, keys)


def _place_cpus(matrix: _Matrix, source: str, keys: dict[str, str]) -> dict[str, str]:
    numbered: dict[str, int] = {}
    if source == "NUMA Affinity":
        numbered = {key: int(key) for key in keys.values()}
    else:
        for key in keys.values():
            numbered.setdefault(key, len(numbered))
    members: dict[int, list[str]] = defaultdict(list)
    groups = _components(matrix, _SAME_CPU)
    for group in groups:
        keyed = [(label, keys[label]) for label in group if label in keys]
        for (a, x), (b, y) in itertools.pairwise(keyed):
            if x != y:
                raise ConfigError(
                    f"PCIe cells (PIX, PXB, PHB or NODE) put it on the CPU of {a}, but its "
                    f"{source} is {y} and {a}'s is {x}",
                    field=f"row {b}",
                )
        if keyed:
            members[numbered[keyed[0][1]]].extend(group)
    free = max(numbered.values(), default=-1) + 1
    for group in groups:
        if any(label in keys for label in group):
            continue
        # No affinity: the first CPU it has no SYS cell to, else a new one.
        number = next((n for n in sorted(members) if not _any_sys(matrix, group, members[n])), None)
        if number is None:
            number, free = free, free + 1
        members[number].extend(group)
    cpu_of = {label: f"cpu{n}" for n, group in members.items() for label in group}
    for a, b, cell in matrix.pairs():
        if cell == "SYS" and cpu_of[a] == cpu_of[b]:
            raise ConfigError(
                f"is SYS (across CPUs), but the matrix puts {a} and {b} on {cpu_of[a]}",
                field=f"row {b}, column {a}",
            )
    return cpu_of


def _any_sys(matrix: _Matrix, group: list[str], others: list[str]) -> bool:
    return any(matrix.cells[a, b] == "SYS" for a in group for b in others)


def _affinity_keys(matrix: _Matrix) -> tuple[str, dict[str, str]]:
    """Which column places the GPUs on CPUs, and each GPU's value in it."""
    for column, usable in (
        ("NUMA Affinity", lambda value: re.fullmatch(r"\d+", value) is not None),
        ("CPU Affinity", lambda value: value != "N/A"),
    ):
        values = {gpu: matrix.affinity[gpu].get(column, "N/A") for gpu in matrix.gpus}
        if all(usable(value) for value in values.values()):
            return column, values
    return "", {}


def _components(matrix: _Matrix, relations: tuple[str, ...]) -> list[list[str]]:
    """Devices joined by the given cells, each group in column order, groups in order."""
    joined: nx.Graph[str] = nx.Graph()
    joined.add_nodes_from(matrix.labels)
    joined.add_edges_from((a, b) for a, b, cell in matrix.pairs() if cell in relations)
    order = {label: i for i, label in enumerate(matrix.labels)}
    return [sorted(group, key=order.__getitem__) for group in nx.connected_components(joined)]


def _checked(kind: LinkKind, name: str, bandwidth: float, latency: float) -> LinkAttrs:
    _check_number(bandwidth, f"{name}_bandwidth_bytes_per_s", "bytes/s", zero_ok=False)
    _check_number(latency, f"{name}_latency_s", "s", zero_ok=True)
    return _attrs(kind, bandwidth, latency)


def _times(link: LinkAttrs, count: int) -> LinkAttrs:
    return LinkAttrs(
        kind=link["kind"],
        bandwidth_bytes_per_s=count * link["bandwidth_bytes_per_s"],
        latency_s=link["latency_s"],
    )
