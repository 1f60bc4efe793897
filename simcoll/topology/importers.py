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

Both know the GPU models of :data:`GPU_MODELS` (the XML by its PCI device ids, the matrix,
which does not print them, by its ``gpu`` argument): a model gives what the dump leaves
out (its NVLink's bandwidth and latency, its NVSwitch's reduction, its PCIe host
interface, its data sheet) and names its hardware parameter file, which
:func:`simcoll.topology.load` applies as it does a shipped file's ``calibration``: one
machine gives one answer, whichever file describes it (issue 41).

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
- The PCI ID Repository (``pci.ids``, vendor ``10de``): the device ids of the GPU models.
"""

from __future__ import annotations

from simcoll.topology._hardware import (
    GPU_MODELS,
    HOST,
    MAX_NVLINK_COUNT,
    NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM,
    GpuName,
    pcie_bandwidth_bytes_per_s,
)
from simcoll.topology.nccl_xml import from_nccl_xml
from simcoll.topology.nvidia_smi import from_nvidia_smi

__all__ = [
    "GPU_MODELS",
    "HOST",
    "MAX_NVLINK_COUNT",
    "NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM",
    "GpuName",
    "from_nccl_xml",
    "from_nvidia_smi",
    "pcie_bandwidth_bytes_per_s",
]
