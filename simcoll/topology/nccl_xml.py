"""NCCL's topology dump (``NCCL_TOPO_DUMP_FILE``) as a simcoll topology.

See :mod:`simcoll.topology.importers` for the sources of the format.
"""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.topology._hardware import (
    GPU_MODELS,
    HOST,
    MAX_NVLINK_COUNT,
    NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM,
    GpuName,
    _attrs,
    hardware_attributes,
    known_models,
    model_of_device,
    pcie_bandwidth_bytes_per_s,
)
from simcoll.topology.builders import _add_duplex, _check_number
from simcoll.topology.schema import LinkAttrs, LinkKind, NodeKind, validate

__all__ = ["from_nccl_xml"]

_NVLS_MIN_SM = 90  # NVLink SHARP needs the third-generation NVSwitch of H100 and later
_NET_FALLBACK_MBIT_S = 10_000  # NCCL's speed for a net whose speed is missing or <= 0
_NET_UNKNOWN_MBIT_S = -1  # what /sys (and so NCCL) gives for a NIC that reports no speed
_NVIDIA = 0x10DE  # the PCI vendor id of NVIDIA
# The widths a PCIe link may have (PCI Express Base Specification: x1, x2, x4, x8, x12, x16,
# x32); 0 is NCCL's "not given" (src/graph/topo.cc: a width /sys did not give counts as x16).
_PCIE_WIDTHS = (0, 1, 2, 4, 8, 12, 16, 32)
_LINK_SPEED = re.compile(r"\s*(\d+(?:\.\d+)?)\s*GT/s(?:\s+PCIe)?\s*")
_INTEGER = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+|\d+)")
_MAX_DIGITS = 20  # a 64-bit integer, as NCCL writes them, in decimal or hex
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


def from_nccl_xml(
    text: str,
    *,
    cpu_link_bandwidth_bytes_per_s: float,
    cpu_link_latency_s: float,
    pcie_latency_s: float,
    nvlink_latency_s: float | None = None,
    nic_latency_s: float | None = None,
    gpu: GpuName | None = None,
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
    ``port_bandwidth_bytes_per_s`` and ``nic_latency_s``, where given, as
    ``port_latency_s``: a dump of one machine has no network to link them to. A ``nic``
    directly under a ``cpu`` (no PCI device) is joined to it at its port bandwidth. GPUs
    are ranked by their ``rank`` attributes in order (a dump of ranks 8..15 gives
    gpu0..gpu7; the ranks of one machine are consecutive), or by ``dev`` when no GPU has
    a rank. ``pcilink`` elements (Broadcom switch-to-switch P2P links) and the ``net``
    latencies are not modelled.

    The GPUs' model is read from their PCI ``device`` id (vendor ``0x10de``; or ``gpu``
    names it): the machine then carries the model's data sheet (``graph["gpu"]``,
    ``graph["gpu_memory_bandwidth_bytes_per_s"]``), its name (``graph["hardware"]``) and
    its hardware parameter file (``graph["hardware_params"]``, a name in
    ``topologies/calibration/hardware/``, which :func:`simcoll.topology.load` applies as
    a shipped file's ``calibration``), or ``graph["hardware_note"]``: one line saying why
    it has none (a model without a file, an unknown or mixed device id).

    Parameters
    ----------
    text
        The XML, as the file holds it.
    cpu_link_bandwidth_bytes_per_s
        Bandwidth between each pair of CPUs (UPI, xGMI), per direction; the dump does
        not give it.
    cpu_link_latency_s
        Latency between each pair of CPUs.
    pcie_latency_s
        Latency of every PCIe hop.
    nvlink_latency_s
        Latency of every NVLink hop (GPU-GPU, GPU-NVSwitch, GPU-CPU); by default the GPU
        model's (:data:`~simcoll.topology._hardware.GPU_MODELS`), needed where the
        GPUs have NVLinks and no known model.
    nic_latency_s
        Latency of a NIC's network port, stored on the NIC as ``port_latency_s``
        (nothing in one machine uses it; by default not stored).
    gpu
        The GPUs' model, where the dump's device ids do not name a known one.

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
        NVLink without a target or whose GPU target is not in the file, NVLink counts two
        GPUs disagree on or more than :data:`~simcoll.topology._hardware.MAX_NVLINK_COUNT`
        on one GPU, an ``sm`` without a known NVLink bandwidth, a net ``speed`` below -1
        (NCCL's "unknown"), a ``link_width`` no PCIe link has, duplicate bus ids or
        numaids, ranks that are negative, repeated or not consecutive, CPUs of several
        machines, NVLinks without ``nvlink_latency_s`` on GPUs of no known model, or an
        argument that is not a finite number (positive for the bandwidth, non-negative for
        latencies).
    TopologyError
        If the machine breaks the schema, e.g. it has no GPU.

    Examples
    --------
    >>> from pathlib import Path
    >>> from simcoll.core.units import GB, us
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
    >>> g.graph["hardware"]  # PCI device 0x1db1; no hardware parameter file: bare links
    'V100 SXM2 16 GB'
    >>> "hardware_params" in g.graph, g.graph["hardware_note"].endswith(": bare links")
    (False, True)
    """
    _check_number(
        cpu_link_bandwidth_bytes_per_s, "cpu_link_bandwidth_bytes_per_s", "bytes/s", zero_ok=False
    )
    for name, value in (
        ("cpu_link_latency_s", cpu_link_latency_s),
        ("pcie_latency_s", pcie_latency_s),
        ("nvlink_latency_s", nvlink_latency_s),
        ("nic_latency_s", nic_latency_s),
    ):
        if value is not None or name in ("cpu_link_latency_s", "pcie_latency_s"):
            _check_number(value, name, "s", zero_ok=True)  # type: ignore[arg-type]
    if gpu is not None and not isinstance(gpu, GpuName):
        raise ConfigError(f"must be a GpuName ({known_models()}), got {gpu!r}", field="gpu")
    nic_latency = None if nic_latency_s is None else float(nic_latency_s)
    reader = _NcclXml(float(pcie_latency_s), nic_latency)
    for index, cpu in enumerate(_parse_system(text).findall("cpu"), start=1):
        reader.add_cpu(cpu, index)
    model, unknown = _gpu_model(reader.gpus, gpu)
    if nvlink_latency_s is None and model is not None:
        nvlink_latency_s = GPU_MODELS[model].nvlink_latency_s
    cpu_link = _attrs(LinkKind.CPU_LINK, cpu_link_bandwidth_bytes_per_s, cpu_link_latency_s)
    graph = reader.finish(cpu_link, nvlink_latency_s, unknown)
    graph.graph.update(hardware_attributes(model, unknown))
    return validate(graph)


def _gpu_model(gpus: list[_XmlGpu], given: GpuName | None) -> tuple[GpuName | None, str]:
    """The model of every GPU of the dump (``given``, or their PCI device id's), or None
    and what the dump says instead."""
    if given is not None:
        return given, ""
    devices = sorted({gpu.device for gpu in gpus}, key=lambda d: -1 if d is None else d)
    models = {model_of_device(device) for device in devices if device is not None}
    if len(devices) == 1 and devices[0] is not None and None not in models and models:
        return models.pop(), ""
    hint = f"gpu=NAME names one: {known_models()}"
    if not devices:
        return None, "the dump has no GPU"
    if None in devices:
        return None, f"a GPU of the dump gives no NVIDIA PCI device id ({hint})"
    listed = ", ".join(f"0x{device:04x}" for device in devices if device is not None)
    sms = sorted({gpu.element.get("sm", "?") for gpu in gpus})
    if len(devices) > 1:
        return None, f"the dump's GPUs are of several models (PCI devices {listed})"
    return None, (f"the dump's GPUs (PCI device {listed}, sm {', '.join(sms)}) are no model "
                  f"simcoll describes ({hint})")  # fmt: skip


@dataclass(frozen=True)
class _XmlGpu:
    busid: str
    key: int
    element: ET.Element
    parent: str
    cpu: str
    pcie: LinkAttrs
    device: int | None  # its NVIDIA PCI device id, where the dump gives one

    @property
    def field(self) -> str:
        return f"gpu[busid={self.busid}]"


class _NcclXml:
    """The walk over an NCCL dump: CPUs, switches and NICs at once, GPUs at the end."""

    def __init__(self, pcie_latency_s: float, nic_latency_s: float | None):
        self.graph: nx.DiGraph[str] = nx.DiGraph()
        self.gpus: list[_XmlGpu] = []
        self.busids: dict[int, str] = {}
        self.nics = 0
        self.host_hash: tuple[str, str] | None = None  # (value, the CPU that gave it)
        self.pcie_latency_s = pcie_latency_s
        self.nic_latency_s = nic_latency_s
        self.nvlink_latency_s: float | None = None  # set by finish()
        self.unknown = ""  # why the GPUs' model is unknown, for a missing NVLink latency

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
            device = _nvidia_device(element, field)
            self.gpus.append(_XmlGpu(busid, key, gpus[0], parent, cpu, pcie, device))
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
            if mbit_s < _NET_UNKNOWN_MBIT_S:
                raise ConfigError(
                    f"<net> speed={mbit_s} is not a speed in Mbit/s (-1, as NCCL writes it, "
                    "is a NIC that reports none)",
                    field=f"net[name={name}]",
                )
            port_bytes_per_s += (mbit_s if mbit_s > 0 else _NET_FALLBACK_MBIT_S) * 1e6 / 8
            names.append(name)
        if not names:
            raise ConfigError("has no <net> element with a dev attribute", field=field)
        nic = f"nic{self.nics}"
        self.nics += 1
        attrs: dict[str, object] = {"busid": busid} if busid is not None else {}
        if self.nic_latency_s is not None:
            attrs["port_latency_s"] = self.nic_latency_s
        self.graph.add_node(
            nic,
            kind=NodeKind.NIC,
            host=HOST,
            name=",".join(names),
            port_bandwidth_bytes_per_s=port_bytes_per_s,
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
        if lanes < 0:
            raise ConfigError(f"link_width must be >= 0, got {lanes}", field=field)
        if lanes not in _PCIE_WIDTHS:
            widths = ", ".join(map(str, _PCIE_WIDTHS[1:]))
            raise ConfigError(
                f"link_width {lanes} is no PCIe link's width ({widths} lanes; 0: not given)",
                field=field,
            )
        if lanes == 0:
            # NCCL's own rule (src/graph/topo.cc, ncclTopoAddPci): a width /sys did not
            # give (as in a VM's passthrough GPU) counts as x16.
            lanes = 16
        bandwidth = pcie_bandwidth_bytes_per_s(float(match[1]), lanes)
        return LinkAttrs(
            kind=LinkKind.PCIE, bandwidth_bytes_per_s=bandwidth, latency_s=self.pcie_latency_s
        )

    def finish(
        self, cpu_link: LinkAttrs, nvlink_latency_s: float | None, unknown: str
    ) -> nx.DiGraph[str]:
        """The machine, with its GPUs and NVLinks (of ``nvlink_latency_s``; None where the
        GPUs' model is unknown, for which ``unknown`` says why) and its CPU links."""
        self.nvlink_latency_s, self.unknown = nvlink_latency_s, unknown
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
            _check_link_count(gpu)
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
        if self.nvlink_latency_s is None:
            raise ConfigError(
                f"missing: the dump has NVLinks, and {self.unknown}",
                field="nvlink_latency_s",
            )
        return LinkAttrs(
            kind=LinkKind.NVLINK,
            bandwidth_bytes_per_s=float(bandwidth_bytes_per_s),
            latency_s=self.nvlink_latency_s,
        )


def _check_link_count(gpu: _XmlGpu) -> None:
    """Refuse a GPU whose ``nvlink`` counts add up to more links than a GPU has."""
    links = sum(_count_attr(nvlink, "count", gpu.field) for nvlink in gpu.element.findall("nvlink"))
    if links > MAX_NVLINK_COUNT:
        raise ConfigError(
            f"has {links} NVLinks (its nvlink counts summed), more than a GPU has: at most "
            f"{MAX_NVLINK_COUNT} (simcoll.topology._hardware.MAX_NVLINK_COUNT; 18 on an H100 "
            "or B200)",
            field=gpu.field,
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
    target = _attr(nvlink, "target", gpu.field)  # NCCL writes one for every class
    key = _bus_key(target, gpu.field)
    if kind in ("nvswitch", "cpu"):
        return kind, count
    if kind != "gpu":
        raise ConfigError(
            f"nvlink tclass {tclass} is not a GPU (0x03...), an NVSwitch (0x068000) or a "
            "CPU (0x068001)",
            field=gpu.field,
        )
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
    """The GPUs in rank order: by ``rank``, or by ``dev`` when no GPU has a rank. Ranks are
    those of one machine in a job: consecutive, from any first rank (8..15 on a job's
    second server of 8 GPUs)."""
    name = "rank" if any(gpu.element.get("rank") is not None for gpu in gpus) else "dev"
    holder: dict[int, _XmlGpu] = {}
    for gpu in gpus:
        value = _int_attr(gpu.element, name, gpu.field)
        if value in holder:
            raise ConfigError(
                f"{name} {value} is also {holder[value].field}'s; each GPU needs its own",
                field=gpu.field,
            )
        if name == "rank" and value < 0:
            raise ConfigError(f"rank {value} is negative", field=gpu.field)
        holder[value] = gpu
    ordered = sorted(holder)
    if name == "rank":
        for before, value in itertools.pairwise(ordered):
            if value != before + 1:
                raise ConfigError(
                    f"rank {value} does not fit: one machine's ranks are consecutive (its "
                    f"{len(ordered)} GPUs from rank {ordered[0]}: {ordered[0]}.."
                    f"{ordered[0] + len(ordered) - 1}), and no GPU has rank {before + 1}; "
                    "remove every rank attribute to order the GPUs by dev",
                    field=holder[value].field,
                )
    return [holder[value] for value in ordered]


def _nvlink_per_link(gpu: _XmlGpu) -> float:
    sm = _int_attr(gpu.element, "sm", gpu.field)
    if sm not in NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM:
        known = ", ".join(map(str, NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM))
        raise ConfigError(
            f"has NVLinks but its sm {sm} has no known NVLink bandwidth (known: {known})",
            field=gpu.field,
        )
    return NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM[sm]


def _nvidia_device(element: ET.Element, field: str) -> int | None:
    """The PCI device id of a pci element of NVIDIA's (vendor 0x10de), else None."""
    if element.get("vendor") is None or element.get("device") is None:
        return None
    if _int_attr(element, "vendor", field) != _NVIDIA:
        return None
    return _int_attr(element, "device", field)


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
    if len(text) > _MAX_DIGITS:  # int() refuses 4,300 digits with a traceback
        raise ConfigError(f"<{element.tag}> {name} has {len(text)} digits; no value of a "
                          f"topology dump has more than {_MAX_DIGITS}", field=field)  # fmt: skip
    return int(text, 16 if text.lower().lstrip("+-").startswith("0x") else 10)


def _count_attr(element: ET.Element, name: str, field: str) -> int:
    value = _int_attr(element, name, field)
    if value < 1:
        raise ConfigError(f"<{element.tag}> {name} must be >= 1, got {value}", field=field)
    return value
