"""Facts about hardware the topology importers share (private to simcoll.topology).

>>> round(pcie_bandwidth_bytes_per_s(16.0, 16) / 1e9, 4)  # Gen4 x16
31.5077
"""

from __future__ import annotations

from simcoll.topology.builders import _check_number
from simcoll.topology.schema import LinkAttrs, LinkKind

__all__ = ["HOST", "NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM", "pcie_bandwidth_bytes_per_s"]

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


# The most NVLinks any GPU has (H100, B200). Behind an NVSwitch, nvidia-smi shows every GPU
# pair as NV<all of the GPU's links>, so a row adds up to far more than a GPU can have.
_MAX_NVLINKS_PER_GPU = 18


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


def _attrs(kind: LinkKind, bandwidth_bytes_per_s: float, latency_s: float) -> LinkAttrs:
    return LinkAttrs(
        kind=kind, bandwidth_bytes_per_s=float(bandwidth_bytes_per_s), latency_s=float(latency_s)
    )


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
