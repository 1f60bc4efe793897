"""Facts about hardware the topology importers share (private to simcoll.topology).

>>> round(pcie_bandwidth_bytes_per_s(16.0, 16) / 1e9, 4)  # Gen4 x16
31.5077
>>> GPU_MODELS[GpuName.H100_SXM5_80GB].params, model_of_device(0x2330)
('h100-sxm-nvlink4.params.toml', <GpuName.H100_SXM5_80GB: 'h100-sxm5-80gb'>)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from simcoll.topology.builders import _check_number
from simcoll.topology.gpu_spec import GpuSpec, gpu_data
from simcoll.topology.schema import LinkAttrs, LinkKind

__all__ = [
    "GPU_MODELS",
    "HOST",
    "MAX_NVLINK_COUNT",
    "NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM",
    "GpuModel",
    "GpuName",
    "hardware_attributes",
    "known_models",
    "model_of_device",
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


# The most NVLinks any GPU has (H100, B200). Behind an NVSwitch, nvidia-smi shows every GPU
# pair as NV<all of the GPU's links>, so a row adds up to far more than a GPU can have.
_MAX_NVLINKS_PER_GPU = 18

MAX_NVLINK_COUNT = 4 * _MAX_NVLINKS_PER_GPU
"""The most NVLinks a dump may give one GPU (an ``nvidia-smi`` ``NV<n>`` cell, the
``count`` of an NCCL ``nvlink`` element, or a GPU's counts summed): 72, four times the 18 of
the GPUs with the most today (the H100 SXM and B200 datasheets: 18 NVLink4 or NVLink5
links) and twice the 36 reported for Rubin's NVLink 6. Generous, for GPUs to come, but
physical: ``NV999999999`` made 2.5e10 GB/s links (issue 41)."""


class GpuName(Enum):
    """A GPU model simcoll describes, as a topology file or ``--set gpu=NAME`` names it."""

    V100_SXM2_16GB = "v100-sxm2-16gb"
    V100_SXM2_32GB = "v100-sxm2-32gb"
    A100_SXM4_40GB = "a100-sxm4-40gb"
    A100_SXM4_80GB = "a100-sxm4-80gb"
    H100_SXM5_80GB = "h100-sxm5-80gb"
    H200_SXM_141GB = "h200-sxm-141gb"
    B200 = "b200"
    RTX_4090 = "rtx-4090"


@dataclass(frozen=True)
class GpuModel:
    """What a dump does not say about a GPU model and its data sheet does.

    ``spec``: its peaks, memory and memory bandwidth; ``pci_devices``: the PCI device ids
    (vendor 0x10de) an NCCL dump gives for it; ``nvlink_*``: one NVLink, per direction,
    and the latency the shipped topology file of this GPU gives a hop (a placeholder there
    too, which the hardware's parameters replace); ``nvswitch_reduces``: its NVSwitch
    boards reduce in the switch (NVLink SHARP); ``pcie_bandwidth_bytes_per_s``: its host
    interface, per direction (None where its data sheet does not say); ``params``: its
    hardware parameter file in ``topologies/calibration/hardware/``, or None.
    """

    spec: GpuSpec
    pci_devices: tuple[int, ...]
    sm: int
    nvlinks: int
    nvlink_bandwidth_bytes_per_s: float
    nvlink_latency_s: float
    nvswitch_reduces: bool
    pcie_bandwidth_bytes_per_s: float | None
    params: str | None = None


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


def _spec(name: str, memory_gb: int, memory_bandwidth: float, sms: int, kernels: str | None,
          **peaks_tflops: float) -> GpuSpec:  # fmt: skip
    peaks = {precision: tflops * 1e12 for precision, tflops in peaks_tflops.items()}
    return GpuSpec(name, peaks, memory_gb * 10**9, memory_bandwidth, sm_count=sms,
                   kernels=kernels, kernel_efficiency=_KERNEL_EFFICIENCY.get(sms))  # fmt: skip


#: The shipped files' ``kernel_efficiency`` by SM count (dgx-h100.toml and dgx-a100.toml
#: say where each was fitted): the H100 and H200 (132 SMs), the A100 (108).
_KERNEL_EFFICIENCY = {132: 0.709, 108: 0.870}


_V100 = {"fp16": 125, "fp32": 15.7}
_A100 = {"bf16": 312, "fp16": 312, "tf32": 156, "fp32": 19.5}
_H100 = {"bf16": 989, "fp16": 989, "fp8": 1979, "tf32": 494.5, "fp32": 67}
_GEN3, _GEN4, _GEN5 = (pcie_bandwidth_bytes_per_s(rate, 16) for rate in (8.0, 16.0, 32.0))

GPU_MODELS: dict[GpuName, GpuModel] = {
    # The figures of the shipped topology file of each GPU (topologies/dgx1-v100.toml,
    # dgx-a100.toml, dgx-h100.toml, dgx-h200.toml, dgx-b200.toml, pcie-8x-rtx4090.toml),
    # whose comments give the data sheets; the 80 GB A100's memory bandwidth is in
    # dgx-a100.toml's comment; host interfaces, x16, from the same data sheets (V100 SXM2
    # PCIe Gen3, A100 Gen4, H100 and H200 Gen5, RTX 4090 Gen4; the B200's is not given
    # there: None). PCI device ids: the PCI ID Repository (pci.ids, vendor 10de). SM
    # counts: the same data sheets and NVIDIA's architecture white papers (V100 80, A100
    # 108, H100 SXM and H200 132, B200 148, RTX 4090 128); measured kernel tables as the
    # shipped files name them (the H200 is the H100's chip at the same clocks).
    GpuName.V100_SXM2_16GB: GpuModel(
        _spec("V100 SXM2 16 GB", 16, 900e9, 80, None, **_V100),
        (0x1DB1, 0x1DF5), 70, 6, 25e9, 0.7e-6, False, _GEN3),
    GpuName.V100_SXM2_32GB: GpuModel(
        _spec("V100 SXM2 32 GB", 32, 900e9, 80, None, **_V100),
        (0x1DB5,), 70, 6, 25e9, 0.7e-6, False, _GEN3),
    GpuName.A100_SXM4_40GB: GpuModel(
        _spec("A100 SXM4 40 GB", 40, 1555e9, 108, "a100-sxm", **_A100),
        (0x20B0,), 80, 12, 25e9, 0.5e-6, False, _GEN4),
    GpuName.A100_SXM4_80GB: GpuModel(
        _spec("A100 SXM4 80 GB", 80, 2039e9, 108, "a100-sxm", **_A100),
        (0x20B2,), 80, 12, 25e9, 0.5e-6, False, _GEN4),
    GpuName.H100_SXM5_80GB: GpuModel(
        _spec("H100 SXM5 80 GB", 80, 3.35e12, 132, "h100-sxm", **_H100),
        (0x2330,), 90, 18, 25e9, 0.5e-6, True, _GEN5, params="h100-sxm-nvlink4.params.toml"),
    GpuName.H200_SXM_141GB: GpuModel(
        _spec("H200 SXM 141 GB", 141, 4.8e12, 132, "h100-sxm", **_H100),
        (0x2335,), 90, 18, 25e9, 0.5e-6, True, _GEN5),
    GpuName.B200: GpuModel(
        _spec("B200 180 GB", 180, 8e12, 148, "b200", bf16=2250, fp16=2250, fp8=4500),
        (0x2901,), 100, 18, 50e9, 0.5e-6, True, None),
    GpuName.RTX_4090: GpuModel(
        _spec("GeForce RTX 4090", 24, 1008e9, 128, None, bf16=165.2, fp16=165.2, fp8=330.3,
              fp32=82.6),
        (0x2684,), 89, 0, 0.0, 0.0, False, _GEN4),
}  # fmt: skip
"""The GPU models simcoll describes, with the figures a dump leaves out."""


def model_of_device(device: int) -> GpuName | None:
    """The model of an NVIDIA PCI device id, or None where simcoll describes none.

    >>> model_of_device(0x1DB1), model_of_device(0x2339)
    (<GpuName.V100_SXM2_16GB: 'v100-sxm2-16gb'>, None)
    """
    return next((name for name, model in GPU_MODELS.items() if device in model.pci_devices),
                None)  # fmt: skip


def hardware_attributes(name: GpuName | None, unknown: str) -> dict[str, object]:
    """The graph attributes an importer gives its machine for GPUs of model ``name``:
    ``hardware`` (the model's name), ``hardware_params`` (its parameter file, where it has
    one), ``gpu`` and ``gpu_memory_bandwidth_bytes_per_s`` (its data sheet), and
    ``hardware_note``, one line saying why the machine runs on bare links where it has
    no parameter file; for None, only the note, ``unknown`` (what the dump said instead).

    >>> hardware_attributes(GpuName.H100_SXM5_80GB, "")["hardware_params"]
    'h100-sxm-nvlink4.params.toml'
    >>> hardware_attributes(GpuName.V100_SXM2_16GB, "")["hardware_note"]
    'V100 SXM2 16 GB has no hardware parameter file (topologies/calibration/hardware/): bare links'
    """
    if name is None:
        return {"hardware_note": f"{unknown}: bare links"}
    model = GPU_MODELS[name]
    attributes: dict[str, object] = {
        "hardware": model.spec.name,
        "gpu": gpu_data(model.spec),
        "gpu_memory_bandwidth_bytes_per_s": model.spec.memory_bandwidth_bytes_per_s,
    }
    if model.params is None:
        attributes["hardware_note"] = (
            f"{model.spec.name} has no hardware parameter file "
            "(topologies/calibration/hardware/): bare links"
        )
    else:
        attributes["hardware_params"] = model.params
    return attributes


def known_models() -> str:
    """The names ``gpu`` takes, for a message: ``v100-sxm2-16gb, ...``."""
    return ", ".join(name.value for name in GpuName)


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
