"""Imported machines get their hardware's calibration (issue 41, "one answer from every
door"): the GPU models simcoll describes (simcoll.topology._hardware), the hardware
parameter file a machine read from an NCCL or nvidia-smi dump is calibrated with, and one
DGX H100 giving one answer from its shipped file, its XML dump and its nvidia-smi matrix."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from simcoll.cli.main import main
from simcoll.core.errors import ConfigError
from simcoll.prediction import predict
from simcoll.topology._hardware import (
    GPU_MODELS,
    MAX_NVLINK_COUNT,
    NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM,
    GpuName,
    model_of_device,
)
from simcoll.topology.calibration import hardware_calibration, read_calibration
from simcoll.topology.gpu_spec import gpu_data
from simcoll.topology.io import load, source_files

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = REPO / "topologies"
EXAMPLES = TOPOLOGIES / "examples"
H100_PARAMS = TOPOLOGIES / "calibration" / "hardware" / "h100-sxm-nvlink4.params.toml"
SIZES = [2**k for k in range(10, 34)]  # every power of two from 1 KiB to 8 GiB

# What no dump says and no hardware file could know: the link between the two sockets (a
# CPU's UPI link count is its SKU's, not its family's) and the latencies of the PCIe and
# inter-socket hops. An 8-GPU call over NVSwitch crosses none of them; the importers need
# them to build the machine. nvidia-smi topo -m does not name the GPUs either.
XML_SET = {"cpu_link_bandwidth": "128 GB/s", "cpu_link_latency": "1 us", "pcie_latency": "1 us"}
SMI_SET = {**XML_SET, "gpu": "h100-sxm5-80gb"}

DOORS = {
    "the XML dump": (EXAMPLES / "dgx-h100.nccl.xml", XML_SET),
    "the nvidia-smi matrix": (EXAMPLES / "dgx-h100.nvsmi.txt", SMI_SET),
    "a TOML naming the XML": (EXAMPLES / "dgx-h100-from-nccl.toml", {}),
    "a TOML naming the matrix": (EXAMPLES / "dgx-h100-from-nvidia-smi.toml", {}),
}


@cache
def _shipped_busbw(collective: str) -> list[float]:
    rows = predict(load(TOPOLOGIES / "dgx-h100.toml"), collective, SIZES).rows
    return [r.busbw_bytes_per_s for r in rows]


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("collective", ["allreduce", "allgather"])
def test_one_dgx_h100_gives_one_answer_from_every_door(door: str, collective: str) -> None:
    # issue 41: 672.9 GB/s (XML, bare NVLS), 449.5 (nvidia-smi, bare ring) and 443.3
    # (dgx-h100.toml, calibrated) at 1 GiB for one machine. All-gather also copies its own
    # block at the GPU's memory bandwidth, which the dump's GPU model gives.
    path, overrides = DOORS[door]
    imported = predict(load(path, overrides), collective, SIZES).rows
    assert [r.size_bytes for r in imported] == SIZES
    assert [r.busbw_bytes_per_s for r in imported] == _shipped_busbw(collective)


@pytest.mark.parametrize("door", DOORS)
def test_an_imported_h100_is_calibrated_with_its_hardware_file(door: str) -> None:
    path, overrides = DOORS[door]
    graph = load(path, overrides)
    shipped = load(TOPOLOGIES / "dgx-h100.toml")  # its params file's base is the same file
    assert graph.graph["calibration"].values == read_calibration(H100_PARAMS).values
    assert graph.graph["calibration"].values == shipped.graph["calibration"].values
    assert Path(graph.graph["calibration_file"]) == H100_PARAMS
    assert graph.graph["hardware"] == "H100 SXM5 80 GB"
    assert "hardware_note" not in graph.graph
    # the GPU's data sheet comes with it, as the shipped file's [gpu] table gives it
    assert graph.graph["gpu"] == shipped.graph["gpu"]
    assert graph.graph["gpu_memory_bandwidth_bytes_per_s"] == 3.35e12  # HBM3, 3.35 TB/s
    assert graph.nodes["nvsw"]["reduces"] is True  # third-generation NVSwitch: NVLS
    assert graph.edges["gpu0", "nvsw"]["bandwidth_bytes_per_s"] == 18 * 25e9


def test_params_none_still_runs_an_import_on_bare_links() -> None:
    graph = load(EXAMPLES / "dgx-h100.nccl.xml", XML_SET)
    bare = predict(graph, "allreduce", [2**30], calibration=None).rows[0]
    shipped = predict(load(TOPOLOGIES / "dgx-h100.toml"), "allreduce", [2**30],
                      calibration=None).rows[0]  # fmt: skip
    assert bare.busbw_bytes_per_s == shipped.busbw_bytes_per_s  # same links, same latency


def test_a_dump_without_a_hardware_file_runs_bare_and_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The DGX-1's V100s (PCI device 0x1db1) are a model simcoll describes, without a file.
    monkeypatch.chdir(REPO)
    name = "topologies/examples/dgx1-v100-from-nccl.toml"
    graph = load(name)
    assert "calibration" not in graph.graph
    assert graph.graph["hardware"] == "V100 SXM2 16 GB"
    note = ("V100 SXM2 16 GB has no hardware parameter file (topologies/calibration/"
            "hardware/): bare links")  # fmt: skip
    assert graph.graph["hardware_note"] == note
    assert main(["predict", name, "--collective", "allreduce", "--sizes", "1M"]) == 0
    out, err = capsys.readouterr()
    assert [line for line in err.splitlines() if name in line] == [f"simcoll: note: {name}: {note}"]
    assert "bare links (--params none)" in out
    assert main(["predict", name, "--collective", "allreduce", "--sizes", "1M",
                 "--params", "none"]) == 0  # fmt: skip
    assert name not in capsys.readouterr().err  # bare on purpose: nothing to say


def test_a_calibrated_import_says_nothing_on_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    name = "topologies/examples/dgx-h100-from-nccl.toml"
    assert main(["predict", name, "--collective", "allreduce", "--sizes", "1M"]) == 0
    out, err = capsys.readouterr()
    assert name not in err
    assert f"params {H100_PARAMS}" in out


def _xml_of_device(device: str) -> str:
    return (EXAMPLES / "dgx-h100.nccl.xml").read_text().replace('device="0x2330"', device)


def test_an_unknown_gpu_model_runs_bare_and_says_which(tmp_path: Path) -> None:
    # 0x2339 is an H100 SXM5 94 GB (pci.ids), a model simcoll does not describe.
    dump = tmp_path / "dump.xml"
    dump.write_text(_xml_of_device('device="0x2339"'))
    with pytest.raises(ConfigError) as info:  # its NVLinks' latency is not known
        load(dump, XML_SET)
    known = ", ".join(name.value for name in GpuName)
    unknown = (f"the dump's GPUs (PCI device 0x2339, sm 90) are no model simcoll describes "
               f"(gpu=NAME names one: {known})")  # fmt: skip
    assert str(info.value) == (
        f"{dump}: params.nvlink_latency: missing: the dump has NVLinks, and {unknown}; a dump "
        "does not say it: give it with --set KEY=VALUE, or write a TOML file that names the "
        "dump (see topologies/examples/)"
    )
    graph = load(dump, {**XML_SET, "nvlink_latency": "0.5 us"})
    assert "calibration" not in graph.graph
    assert graph.graph["hardware_note"] == f"{unknown}: bare links"
    named = load(dump, {**XML_SET, "gpu": "h100-sxm5-80gb"})  # --set gpu names the model
    assert named.graph["calibration"].values == read_calibration(H100_PARAMS).values


def test_gpus_of_two_models_get_no_one_model_s_parameters(tmp_path: Path) -> None:
    dump = tmp_path / "dump.xml"
    dump.write_text(_xml_of_device('device="0x2335"').replace('device="0x2335"',
                                                            'device="0x2330"', 4))  # fmt: skip
    graph = load(dump, {**XML_SET, "nvlink_latency": "0.5 us"})
    assert "calibration" not in graph.graph
    assert graph.graph["hardware_note"] == (
        "the dump's GPUs are of several models (PCI devices 0x2330, 0x2335): bare links"
    )


def test_nvidia_smi_without_a_gpu_model_needs_the_nvlink_and_says_so() -> None:
    path = EXAMPLES / "dgx-h100.nvsmi.txt"
    with pytest.raises(ConfigError, match=r"params\.pcie_bandwidth: missing: the matrix "
                       "gives no PCIe speed, and nvidia-smi topo -m does not name the GPUs' "
                       r"model \(gpu=NAME names it: v100-sxm2-16gb, "):  # fmt: skip
        load(path, XML_SET)
    given = {**XML_SET, "pcie_bandwidth": "63 GB/s", "nvlink_bandwidth": "25 GB/s",
             "nvlink_latency": "0.5 us"}  # fmt: skip
    graph = load(path, given)
    assert "calibration" not in graph.graph
    assert graph.graph["hardware_note"].startswith("nvidia-smi topo -m does not name the GPUs'")
    assert graph.nodes["nvsw"]["reduces"] is False  # the generation is not known either


@pytest.mark.parametrize(
    ("gpu", "reduces", "per_gpu_bytes_per_s"),
    [
        ("a100-sxm4-80gb", False, 600e9 / 2),  # NVLink3, second-generation NVSwitch
        ("h200-sxm-141gb", True, 900e9 / 2),  # NVLink4, third generation: NVLink SHARP
    ],
)
def test_nvidia_smi_takes_the_nvlink_of_the_gpu_it_is_told(
    gpu: str, reduces: bool, per_gpu_bytes_per_s: float
) -> None:
    # The DGX H100's NV18 matrix, told its GPUs are another model: a GPU's link to the
    # switch is 18 of that model's NVLinks (its data sheet's total over its link count).
    model = GPU_MODELS[GpuName(gpu)]
    graph = load(EXAMPLES / "dgx-h100.nvsmi.txt", {**XML_SET, "gpu": gpu})
    assert graph.nodes["nvsw"]["reduces"] is reduces
    per_link = per_gpu_bytes_per_s / model.nvlinks
    assert graph.edges["gpu0", "nvsw"]["bandwidth_bytes_per_s"] == pytest.approx(18 * per_link)
    assert "calibration" not in graph.graph  # no hardware file for either


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"gpu": "rtx-4090"},
            "--set gpu: the GeForce RTX 4090 has no NVLink, but the matrix has NV cells",
        ),
        (
            {"gpu": "b200"},
            "params.pcie_bandwidth: missing: the matrix gives no PCIe speed, and simcoll knows "
            "no host interface of the B200 180 GB",
        ),
        (
            {"gpu": "h100"},
            "--set gpu: expected one of v100-sxm2-16gb, v100-sxm2-32gb, a100-sxm4-40gb, "
            "a100-sxm4-80gb, h100-sxm5-80gb, h200-sxm-141gb, b200, rtx-4090, got str 'h100'",
        ),
    ],
)
def test_a_gpu_model_that_does_not_fit_the_matrix_is_one_line(
    overrides: dict[str, str], expected: str
) -> None:
    path = EXAMPLES / "dgx-h100.nvsmi.txt"
    with pytest.raises(ConfigError) as info:
        load(path, {**XML_SET, **overrides})
    assert str(info.value).startswith(f"{path}: {expected}")
    assert "\n" not in str(info.value)


# --- the GPU models ------------------------------------------------------------------------

# Data sheets: total NVLink bandwidth per GPU, both directions, and its link count.
NVLINK_PER_GPU = {70: (300e9, 6), 80: (600e9, 12), 90: (900e9, 18), 100: (1.8e12, 18)}
# The PCI ID Repository (pci.ids), vendor 10de: the device ids an NCCL dump gives.
PCI_IDS = {
    0x1DB1: "V100_SXM2_16GB",  # GV100GL [Tesla V100 SXM2 16GB]
    0x1DB5: "V100_SXM2_32GB",  # GV100GL [Tesla V100 SXM2 32GB]
    0x20B0: "A100_SXM4_40GB",  # GA100 [A100 SXM4 40GB]
    0x20B2: "A100_SXM4_80GB",  # GA100 [A100 SXM4 80GB]
    0x2330: "H100_SXM5_80GB",  # GH100 [H100 SXM5 80GB]
    0x2335: "H200_SXM_141GB",  # GH100 [H200 SXM 141GB]
    0x2901: "B200",  # GB100 [B200]
    0x2684: "RTX_4090",  # AD102 [GeForce RTX 4090]
}


@pytest.mark.parametrize("name", list(GpuName))
def test_a_model_s_nvlink_is_its_data_sheet_s(name: GpuName) -> None:
    model = GPU_MODELS[name]
    if model.nvlinks == 0:  # the RTX 4090 has no NVLink
        return
    total_bytes_per_s, links = NVLINK_PER_GPU[model.sm]
    assert model.nvlinks == links
    assert model.nvlink_bandwidth_bytes_per_s == total_bytes_per_s / 2 / links
    assert model.nvlink_bandwidth_bytes_per_s == NVLINK_BANDWIDTH_BYTES_PER_S_BY_SM[model.sm]
    assert model.nvlinks <= MAX_NVLINK_COUNT


def test_pci_device_ids_name_their_models() -> None:
    for device, name in PCI_IDS.items():
        assert model_of_device(device) is GpuName[name]
    assert model_of_device(0x2339) is None  # GH100 [H100 SXM5 94GB]: not described


@pytest.mark.parametrize(
    ("name", "shipped"),
    [
        (GpuName.V100_SXM2_32GB, "dgx1-v100.toml"),
        (GpuName.A100_SXM4_40GB, "dgx-a100.toml"),
        (GpuName.H100_SXM5_80GB, "dgx-h100.toml"),
        (GpuName.H200_SXM_141GB, "dgx-h200.toml"),
        (GpuName.B200, "dgx-b200.toml"),
        (GpuName.RTX_4090, "pcie-8x-rtx4090.toml"),
    ],
)
def test_a_model_s_data_sheet_is_its_shipped_file_s(name: GpuName, shipped: str) -> None:
    graph = load(TOPOLOGIES / shipped)
    spec = GPU_MODELS[name].spec
    assert gpu_data(spec) == graph.graph["gpu"]
    assert spec.memory_bandwidth_bytes_per_s == graph.graph["gpu_memory_bandwidth_bytes_per_s"]


def test_only_models_with_a_file_name_one_and_every_file_is_read() -> None:
    named = {model.params for model in GPU_MODELS.values() if model.params is not None}
    assert named == {H100_PARAMS.name}
    calibration, path = hardware_calibration(H100_PARAMS.name)
    assert path == H100_PARAMS
    assert calibration.values == read_calibration(H100_PARAMS).values


@pytest.mark.parametrize("name", ["../dgx-h100.params.toml", "", "/etc/passwd"])
def test_a_hardware_file_is_a_name_in_its_folder(name: str) -> None:
    with pytest.raises(ConfigError, match="hardware_params: must name a file of "):
        hardware_calibration(name)


@pytest.mark.parametrize(
    "path", [EXAMPLES / "dgx-h100.nccl.xml", EXAMPLES / "dgx-h100-from-nvidia-smi.toml"]
)
def test_an_import_s_source_files_hold_the_hardware_files(path: Path) -> None:
    # what a resumed sweep and --plot's input check look at: an edited hardware file counts
    assert H100_PARAMS in source_files(path)


def test_the_docs_quote_what_the_import_prints() -> None:
    # README.md and topologies/README.md: 1 GiB all-reduce on one DGX H100, from any door
    busbw = predict(load(*DOORS["the XML dump"]), "allreduce", [2**30]).rows[0].busbw_bytes_per_s
    for doc in (REPO / "README.md", TOPOLOGIES / "README.md"):
        text = " ".join(doc.read_text().split())
        assert f"{busbw / 1e9:.1f} GB/s" in text, doc
    # and what the dumps printed before (issue 41): bare links, the matrix's switch not NVLS
    xml = predict(load(*DOORS["the XML dump"]), "allreduce", [2**30], calibration=None)
    bare = {**XML_SET, "pcie_bandwidth": "63 GB/s", "nvlink_bandwidth": "25 GB/s",
            "nvlink_latency": "0.5 us"}  # fmt: skip
    smi = predict(load(EXAMPLES / "dgx-h100.nvsmi.txt", bare), "allreduce", [2**30])
    before = [f"{p.rows[0].busbw_bytes_per_s / 1e9:.1f}" for p in (xml, smi)]
    readme = " ".join((REPO / "README.md").read_text().split())
    assert f"where it printed {before[0]} and {before[1]} on bare links" in readme
