"""p2pBandwidthLatencyTest matrices: read as the CUDA sample prints them, fitted to link
parameters in closed form, and the collectives those parameters predict."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simcoll.calibrate.p2p_matrix import (
    fit_p2p,
    is_p2p_log,
    parse_p2p_log,
    read_p2p_matrices,
)
from simcoll.cli import main
from simcoll.core.errors import ConfigError
from simcoll.core.units import GB, us
from simcoll.prediction import predict
from simcoll.topology.calibration import read_calibration
from simcoll.topology.io import load
from simcoll.topology.machines import pcie_tree

REPO = Path(__file__).resolve().parents[2]
RTX = str(REPO / "topologies" / "pcie-8x-rtx4090.toml")

BI_ON = "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)"
UNI_ON = "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)"


def _matrix(title: str, grid: list[list[float]]) -> str:
    n = len(grid)
    lines = [title, "   D\\D" + "".join(f"{k:7d}" for k in range(n))]
    lines += [f"{i:6d} " + " ".join(f"{v:6.2f}" for v in row) for i, row in enumerate(grid)]
    return "\n".join(lines) + "\n"


def _two_sockets(inside: float, across: float, self_rate: float = 900.0) -> list[list[float]]:
    """A 4-GPU matrix: GPUs 0, 1 on one socket, 2, 3 on the other."""
    return [[self_rate if i == j else inside if i // 2 == j // 2 else across for j in range(4)]
            for i in range(4)]  # fmt: skip


def _sample_output(bidirectional: list[list[float]]) -> str:
    """The sample's stdout around the matrices, as it prints it (tabs in the connectivity
    matrix, a latency matrix's GPU and CPU blocks)."""
    half = [[v / 2 for v in row] for row in bidirectional]
    return (
        "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]\n"
        "Device: 0, NVIDIA GeForce RTX 4090, pciBusID: 1, pciDeviceID: 0, pciDomainID:0\n"
        "Device=0 CAN Access Peer Device=1\n\n"
        "P2P Connectivity Matrix\n     D\\D     0     1     2     3\n"
        + "".join(f"     {i}\t     1     1     1     1\n" for i in range(4))
        + _matrix("Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)", half)
        + _matrix(UNI_ON, half)
        + _matrix("Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)", bidirectional)
        + _matrix(BI_ON, bidirectional)
        + "P2P=Disabled Latency Matrix (us)\n   GPU     0      1      2      3\n"
        + "".join(f"     {i}   1.50  11.60  20.17  20.18\n" for i in range(4))
        + "\n   CPU     0      1      2      3\n"
        + "".join(f"     {i}   2.71   5.92   5.80   5.83\n" for i in range(4))
        + "\nNOTE: The CUDA Samples are not meant for performance measurements. Results may "
        "vary when GPU Boost is enabled.\n"
    )


def _four_gpus(*, p2p: bool = True, cpu_link_gbps: float = 64.0):
    return pcie_tree(4, n_sockets=2, pcie_bandwidth_bytes_per_s=32 * GB, pcie_latency_s=1 * us,
                     cpu_link_bandwidth_bytes_per_s=cpu_link_gbps * GB,
                     cpu_link_latency_s=1 * us, p2p=p2p)  # fmt: skip


def test_the_samples_output_is_read_matrix_by_matrix():
    text = _sample_output(_two_sockets(48.0, 36.0))
    m = parse_p2p_log(text, source="p2p.txt")
    assert sorted(m.matrices) == sorted([
        "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)", UNI_ON,
        "Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)", BI_ON])  # fmt: skip
    assert m.n_gpus == 4
    assert m.matrices[BI_ON][0, 2] == 36.0
    assert m.matrices[UNI_ON][1, 0] == 24.0


def test_a_file_is_told_apart_by_its_content(tmp_path):
    log = tmp_path / "p2p.txt"
    log.write_text(_sample_output(_two_sockets(48.0, 36.0)))
    table = tmp_path / "t.csv"
    table.write_text("phase,matrix,src_gpu,dst_gpu,value\n")
    nccl = tmp_path / "nccl.log"
    nccl.write_text("#  Rank  0 Group  0 Pid 1 on host device  0 [0x1] NVIDIA H100\n")
    assert is_p2p_log(log)
    assert is_p2p_log(table)
    assert not is_p2p_log(nccl)
    assert not is_p2p_log(tmp_path / "missing.txt")


def test_the_csv_transcription_is_read_one_run_at_a_time(tmp_path):
    rows = ["phase,matrix,src_gpu,dst_gpu,value"]
    rows += [f"a,{BI_ON},{i},{j},{40 if i != j else 900}" for i in range(2) for j in range(2)]
    rows += ["a,P2P=Enabled Latency (P2P Writes) Matrix (us),0,1,1.2"]  # not a bandwidth
    path = tmp_path / "m.csv"
    path.write_text("\n".join(rows) + "\n")
    m = read_p2p_matrices(path)
    assert list(m.matrices) == [BI_ON]
    np.testing.assert_array_equal(m.matrices[BI_ON], [[900, 40], [40, 900]])
    path.write_text("\n".join([*rows, f"b,{BI_ON},0,1,41"]) + "\n")
    with pytest.raises(ConfigError, match=r"m\.csv: holds the matrices of 2 runs \(phases a, b\); "
                       r"keep one phase's rows$"):  # fmt: skip
        read_p2p_matrices(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no matrices here\n",
         "no GPU-to-GPU bandwidth matrix of p2pBandwidthLatencyTest or nvbandwidth"),
        (f"{BI_ON}\n     0 900.00  40.00\n", "line 2: expected the header 'D\\\\D 0 1 ...'"),
        (f"{BI_ON}\n   D\\D     0      1\n     0 900.00  40.00\n     1  40.00\n",
         "line 4: row 1 of .* does not follow its header"),
        (f"{BI_ON}\n   D\\D     0      1\n     0 900.00  40.00\n",
         r"matrix '.*' is not square over GPUs 0..n-1 \(1 rows, columns 0 1\)"),
        (f"{BI_ON}\n   D\\D     0      1\n     0 900.00   0.00\n     1  40.00 900.00\n",
         "line 3: a rate must be positive GB/s, got 0.00"),
        (f"{BI_ON}\n   D\\D     0      1\n     0 900.00   fast\n     1  40.00 900.00\n",
         "line 3: 'fast' is not a rate in GB/s"),
        (_matrix(BI_ON, [[9, 1], [1, 9]]) + _matrix(UNI_ON, _two_sockets(4, 3)),
         r"matrices of \[2, 4\] GPUs"),
    ],
)  # fmt: skip
def test_a_malformed_output_is_one_line_naming_the_file(tmp_path, text, message):
    path = tmp_path / "p2p.txt"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"p2p\.txt: " + message) as info:
        read_p2p_matrices(path)
    assert "\n" not in str(info.value)


def test_inside_a_socket_gives_pcie_its_efficiency_and_across_the_socket_link_its_rate():
    # By hand: each way, 24 GB/s inside a socket over 32 GB/s PCIe links: efficiency 0.75.
    # Across, 18 GB/s; the route (PCIe, socket link, PCIe) moves min(32, B) x 0.75, so the
    # socket link's rate B = 18 / 0.75 = 24 GB/s (its wire, 64, would allow 24 each way).
    m = parse_p2p_log(_sample_output(_two_sockets(48.0, 36.0)), source="p2p.txt")
    fitted = fit_p2p(_four_gpus(), m)
    assert fitted.matrix == BI_ON
    assert fitted.efficiency == {"pcie": pytest.approx(0.75)}
    assert fitted.link_bandwidth_bytes_per_s == {"cpu_link": pytest.approx(24 * GB)}
    assert fitted.not_identifiable == []
    assert len(fitted.pairs) == 12
    assert max(abs(p.relative_error) for p in fitted.pairs) == pytest.approx(0.0, abs=1e-12)
    across = next(p for p in fitted.pairs if (p.src_gpu, p.dst_gpu) == (1, 2))
    assert across.kinds == ("cpu_link", "pcie")
    assert across.measured_bytes_per_s == pytest.approx(18 * GB)


def test_a_socket_link_no_pair_is_held_back_by_is_left_as_the_file_has_it():
    m = parse_p2p_log(_sample_output(_two_sockets(48.0, 47.0)), source="p2p.txt")
    fitted = fit_p2p(_four_gpus(), m)  # 23.5 each way across: within 5 % of 24
    assert fitted.link_bandwidth_bytes_per_s == {}
    assert fitted.not_identifiable == ["cpu_link"]


def test_without_p2p_the_staged_matrices_are_read_and_their_absence_is_said():
    m = parse_p2p_log(_sample_output(_two_sockets(48.0, 36.0)), source="p2p.txt")
    staged = fit_p2p(_four_gpus(p2p=False), m)
    assert staged.matrix == "Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)"
    only_on = parse_p2p_log(_matrix(BI_ON, _two_sockets(48.0, 36.0)), source="p2p.txt")
    with pytest.raises(ConfigError, match=r"^p2p\.txt: has no P2P=Disabled bandwidth matrix, "
                       r"which a topology with p2p = false needs$"):  # fmt: skip
        fit_p2p(_four_gpus(p2p=False), only_on)
    with pytest.raises(ConfigError, match=r"^p2p\.txt: measured 4 GPUs; the topology has 8$"):
        fit_p2p(pcie_tree(8, n_sockets=2, pcie_bandwidth_bytes_per_s=32 * GB,
                          pcie_latency_s=1 * us, cpu_link_bandwidth_bytes_per_s=64 * GB,
                          cpu_link_latency_s=1 * us), m)  # fmt: skip


def test_calibrate_writes_them_and_a_ring_then_moves_at_the_socket_links_rate(tmp_path, capsys):
    log = tmp_path / "p2p.txt"
    log.write_text(_sample_output(_two_sockets(48.0, 36.0)))
    out = tmp_path / "p2p.params.toml"
    settings = ["--set", "n_gpus=4", "--set", "p2p=true", "--set", "pcie_bandwidth=32 GB/s"]
    assert main(["calibrate", str(log), "--topology", RTX, *settings, "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "efficiency.pcie = 0.75" in printed
    assert "link_bandwidth_bytes_per_s.cpu_link = 2.4e+10 (24.00 GB/s)" in printed
    cal = read_calibration(out)
    assert cal.efficiency == {"pcie": pytest.approx(0.75)}
    assert cal.provenance["fitted"] == ["efficiency.pcie", "link_bandwidth_bytes_per_s.cpu_link"]
    # A ring all-reduce on GPUs 0-3 crosses between the sockets once each way: each byte
    # crosses a link 2(n-1)/n times, so busbw tends to the slowest link's data rate, the
    # socket link's 24 GB/s x 0.75 = 18 GB/s; at 1 GiB the hops' latencies (microseconds
    # against ~90 ms) take under 0.1 % of it.
    topology = load(RTX, {"n_gpus": "4", "p2p": "true", "pcie_bandwidth": "32 GB/s"})
    row = predict(topology, "allreduce", [2**30], algorithm="ring", protocol="simple",
                  calibration=cal).rows[0]  # fmt: skip
    assert row.busbw_bytes_per_s == pytest.approx(18 * GB, rel=1e-3)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--collective", "allreduce"], "--collective: chooses how measured calls are simulated"),
        (["--fit", "efficiency"], "--fit: chooses how measured calls are simulated"),
    ],
)
def test_calibrate_refuses_call_options_and_other_files_beside_a_matrix(
    tmp_path, capsys, extra, message
):
    log = tmp_path / "p2p.txt"
    log.write_text(_sample_output(_two_sockets(48.0, 36.0)))
    out = tmp_path / "p.toml"
    options = ["--topology", RTX, "--set", "n_gpus=4", "-o", str(out)]
    assert main(["calibrate", str(log), *options, *extra]) == 2
    assert message in capsys.readouterr().err
    nccl = str(REPO / "validation/data/public/nccl_allreduce_8xRTX4090_pcie_noP2P_chlc.csv")
    assert main(["calibrate", str(log), nccl, *options]) == 2
    assert "is calibrated alone" in capsys.readouterr().err
    assert not out.exists()


NVBANDWIDTH = """nvbandwidth Version: v0.7
Device 0: NVIDIA H100 80GB HBM3
Device 1: NVIDIA H100 80GB HBM3
Device 2: NVIDIA H100 80GB HBM3

Running device_to_device_memcpy_read_ce.
memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)
          0         1         2
0       N/A    300.00    310.00
1    320.00       N/A    330.00
2    340.00    350.00       N/A

SUM device_to_device_memcpy_read_ce 1950.00

Running device_to_device_bidirectional_memcpy_read_ce.
memcpy CE GPU(row) <-> GPU(column) bandwidth (GB/s)
          0         1         2
0       N/A    290.00    290.00
1    290.00       N/A    290.00
2    290.00    290.00       N/A
"""


def test_nvbandwidths_one_way_copies_are_read_as_the_data_moves():
    # A read runs on the destination: row 0, column 1 is GPU 1's data read by GPU 0, so
    # the rate from GPU 1 to GPU 0. The bidirectional test is not read.
    m = parse_p2p_log(NVBANDWIDTH, source="nvb.txt")
    assert list(m.matrices) == ["device_to_device_memcpy_read_ce"]
    grid = m.matrices["device_to_device_memcpy_read_ce"]
    assert grid[1, 0] == 300.0
    assert grid[0, 1] == 320.0
    assert grid[2, 1] == 330.0
    assert np.isnan(grid[2, 2])
    written = NVBANDWIDTH.replace("read_ce", "write_ce")
    assert parse_p2p_log(written, source="nvb.txt").matrices[
        "device_to_device_memcpy_write_ce"][0, 1] == 300.0  # fmt: skip


def test_a_malformed_nvbandwidth_matrix_is_one_line():
    broken = NVBANDWIDTH.replace("1    320.00       N/A", "1    320.00    100.00")
    with pytest.raises(ConfigError, match=r"^nvb\.txt: line 10: row 1 of "
                       r"device_to_device_memcpy_read_ce does not follow its header "
                       r"\(3 GPUs, N/A on the diagonal\)$"):  # fmt: skip
        parse_p2p_log(broken, source="nvb.txt")


def test_azures_nvbandwidth_on_an_h100_server_gives_nvlink_its_copies_rate():
    # ND H100 v5's expected nvbandwidth output (validation/data/public): every pair's
    # copy crosses two 450 GB/s NVLink links through the NVSwitch, so NVLink's efficiency
    # is the median copy rate over 450 GB/s, the value the H100 hardware file states from
    # "about 370 GB/s" (370 / 449.94) within 0.3 %.
    path = REPO / "validation/data/public/nvbandwidth_d2d_read_ce_8xH100_ndv5_azurenhc.txt"
    m = read_p2p_matrices(path)
    values = m.matrices["device_to_device_memcpy_read_ce"]
    rates = values[~np.isnan(values)]
    fitted = fit_p2p(load(str(REPO / "topologies/dgx-h100.toml")), m)
    assert fitted.efficiency == {"nvlink": pytest.approx(float(np.median(rates)) / 450)}
    assert fitted.efficiency["nvlink"] == pytest.approx(370 / 449.94, rel=3e-3)


def test_compare_refuses_a_matrix_and_calibrate_one_without_gpu_pairs(tmp_path, capsys):
    # compare times calls: a matrix of copies is calibrate's, said so instead of a parse
    # error about nccl-tests' header; an nvbandwidth run of host copies only has no pairs
    log = tmp_path / "nvb.txt"
    log.write_text(NVBANDWIDTH)
    dgx = str(REPO / "topologies/dgx-h100.toml")
    assert main(["compare", str(log), "--topology", dgx]) == 2
    assert capsys.readouterr().err == (
        f"simcoll: error: {log}: holds copies between GPU pairs (p2pBandwidthLatencyTest or "
        "nvbandwidth), not timed calls; simcoll calibrate fits the links to it, given alone\n"
    )
    host = tmp_path / "h2d.txt"
    host.write_text("nvbandwidth Version: v0.7\n\nRunning host_to_device_memcpy_ce.\n"
                    "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)\n"
                    "          0         1\n0     51.80     51.81\n")  # fmt: skip
    out = tmp_path / "p.toml"
    assert main(["calibrate", str(host), "--topology", dgx, "-o", str(out)]) == 2
    assert "no GPU-to-GPU bandwidth matrix" in capsys.readouterr().err
    assert not out.exists()
