"""Acceptance checks across builders, importers, files and routing (issue 3's "done when").

Each expected figure is derived in the test from the public spec arithmetic the files
cite (NVLink2 25 GB/s per link, PCIe Gen3 x16 = 8 GT/s x 16 x 128/130 / 8).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simcoll.prediction import predict
from simcoll.topology.inspect import path_matrix
from simcoll.topology.io import load
from simcoll.topology.machines import hybrid_cube_mesh
from simcoll.topology.nodelink import dumps
from simcoll.topology.routing import Router

EXAMPLES = Path("topologies/examples")
GEN3_X16_BYTES_PER_S = 8e9 * 16 * 128 / 130 / 8
NVLINK2_BYTES_PER_S = 25e9
QPI_BYTES_PER_S = 2 * 9.6e9 * 2


def _dgx1_builder(pcie_bandwidth_bytes_per_s: float) -> object:
    return hybrid_cube_mesh(
        nvlink_bandwidth_bytes_per_s=NVLINK2_BYTES_PER_S,
        nvlink_latency_s=0.7e-6,
        pcie_bandwidth_bytes_per_s=pcie_bandwidth_bytes_per_s,
        pcie_latency_s=1e-6,
        cpu_link_bandwidth_bytes_per_s=QPI_BYTES_PER_S,
        cpu_link_latency_s=1e-6,
    )


def _expected_dgx1_bandwidths(pcie_bytes_per_s: float) -> np.ndarray:
    """GPU x GPU bottleneck bandwidth on a DGX-1V, from the NV1/NV2 table by hand."""
    nv2 = {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}
    nv1 = {(0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7)}
    expected = np.full((8, 8), min(pcie_bytes_per_s, QPI_BYTES_PER_S))
    for pairs, links in ((nv1, 1), (nv2, 2)):
        for a, b in pairs:
            expected[a, b] = expected[b, a] = links * NVLINK2_BYTES_PER_S
    np.fill_diagonal(expected, np.inf)
    return expected


@pytest.mark.parametrize(
    ("name", "pcie_bytes_per_s"),
    [
        ("dgx1-v100-from-nccl.toml", GEN3_X16_BYTES_PER_S),  # the XML gives 8 GT/s x16
        ("dgx1-v100-from-nvidia-smi.toml", 15.75e9),  # the file gives "15.75 GB/s"
    ],
)
def test_imported_dgx1_matches_the_builder_path_for_path(
    name: str, pcie_bytes_per_s: float
) -> None:
    imported = path_matrix(load(EXAMPLES / name))
    built = path_matrix(_dgx1_builder(pcie_bytes_per_s))  # type: ignore[arg-type]
    expected = _expected_dgx1_bandwidths(pcie_bytes_per_s)
    np.testing.assert_allclose(imported.bandwidth_bytes_per_s, expected, rtol=1e-12)
    np.testing.assert_allclose(built.bandwidth_bytes_per_s, expected, rtol=1e-12)
    np.testing.assert_array_equal(imported.hops, built.hops)
    np.testing.assert_allclose(imported.latency_s, built.latency_s, rtol=1e-12)


def test_shipped_dgx1_file_has_the_hand_derived_matrix() -> None:
    matrix = path_matrix(load("topologies/dgx1-v100.toml"))
    np.testing.assert_allclose(
        matrix.bandwidth_bytes_per_s, _expected_dgx1_bandwidths(15.75e9), rtol=1e-12
    )
    # Pairs without NVLink cross GPU-PCIe-CPU-CPU-PCIe-GPU: 5 links; with NVLink 1.
    assert matrix.hops[0].tolist() == [0, 1, 1, 1, 1, 5, 5, 5]


@pytest.mark.parametrize("path", ["topologies/dgx-h100.toml", "topologies/dgx1-v100.toml"])
def test_dumped_json_reloads_to_the_same_graph(tmp_path: Path, path: str) -> None:
    graph = load(path)
    dumped = tmp_path / "topology.json"
    dumped.write_text(dumps(graph))
    again = load(dumped)
    assert dict(again.nodes(data=True)) == dict(graph.nodes(data=True))
    assert {(u, v): d for u, v, d in again.edges(data=True)} == {
        (u, v): d for u, v, d in graph.edges(data=True)
    }
    assert again.graph["source"] == str(dumped)
    assert json.loads(dumped.read_text())["graph"]["name"] == graph.graph["name"]


def test_p2p_off_makes_a_ring_share_the_switch_uplink() -> None:
    # 4 GPUs under one PCIe switch. P2P on: ring edge i -> i+1 turns at the switch, every
    # GPU link carries one flow per direction, so busbw tends to B. P2P off: every ring
    # edge bounces through the CPU, so all 4 flows cross the switch uplink in each
    # direction and share it: busbw tends to B / 4.
    path = "topologies/pcie-4x-switch.toml"
    size_bytes = 2**28
    on = predict(load(path, {"p2p": "true"}), "allreduce", [size_bytes]).rows[0]
    off = predict(load(path, {"p2p": "false"}), "allreduce", [size_bytes]).rows[0]
    gen4_x16_bytes_per_s = 16e9 * 16 * 128 / 130 / 8
    assert on.busbw_bytes_per_s == pytest.approx(gen4_x16_bytes_per_s, rel=2e-2)
    assert off.busbw_bytes_per_s == pytest.approx(gen4_x16_bytes_per_s / 4, rel=2e-2)


def test_p2p_off_route_crosses_the_root_complex_twice() -> None:
    graph = load("topologies/pcie-4x-switch.toml", {"p2p": "false"})
    nodes = [u for u, _ in Router(graph).route("gpu0", "gpu1")] + ["gpu1"]
    assert nodes == ["gpu0", "pcie0", "cpu0", "pcie0", "gpu1"]


def test_real_dumps_from_an_h100_vm_load() -> None:
    # Dumped on the project's GPU machine with validation/dump_topology.py. NCCL wrote
    # link_width="0" (hidden by the VM): NCCL's rule, and simcoll's, is x16; at 32 GT/s
    # that is 32e9 x 16 x 128/130 / 8 B/s. nvidia-smi underlined its header with escapes.
    from_nccl = load(EXAMPLES / "h100-vm-1gpu-from-nccl.toml")
    assert from_nccl.edges["gpu0", "cpu-1"]["bandwidth_bytes_per_s"] == pytest.approx(
        32e9 * 16 * 128 / 130 / 8, rel=1e-12
    )
    assert from_nccl.nodes["gpu0"]["kind"].value == "gpu"
    from_smi = load(EXAMPLES / "h100-vm-1gpu-from-nvidia-smi.toml")
    assert sorted(from_smi.nodes) == ["cpu0", "gpu0"]
    assert from_smi.edges["gpu0", "cpu0"]["bandwidth_bytes_per_s"] == 63e9
