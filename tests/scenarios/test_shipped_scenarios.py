"""The classic questions shipped in scenarios/: each runs, and its answer matches what the
topology's own numbers say from first principles (closed forms written here)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

from simcoll import load_topology, run_scenario
from simcoll.cli import main
from simcoll.scenarios.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((REPO / "scenarios").glob("*.toml"))


def run(name: str, **sweep: Any) -> list[dict[str, Any]]:
    """Run a shipped scenario in this process, optionally with fewer sweep values."""
    path = REPO / "scenarios" / f"{name}.toml"
    data = tomllib.loads(path.read_text())
    data["sweep"] = {**data.get("sweep", {}), **sweep}
    result = run_scenario(data, base=path.parent)
    assert not result.failures, [f.error for f in result.failures]
    return result.rows


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_shipped_scenario_parses(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.points()
    assert scenario.title


def test_p2p_copies_follow_the_links_of_their_routes() -> None:
    topo = load_topology(REPO / "topologies" / "dgx1-v100.toml")
    rows = run("p2p-dgx1")
    first = next(r for r in rows if r["dst_ranks"] == [1, 2, 4])
    size_bytes, n_copies = 40_000_000, 10

    def direct_s(dst: int) -> float:  # one NVLink hop: latency then the bytes, per copy
        link = topo.edges["gpu0", f"gpu{dst}"]
        return n_copies * (link["latency_s"] + size_bytes / link["bandwidth_bytes_per_s"])

    for dst in (1, 2, 4):
        assert first[f"time_s_to_{dst}"] == pytest.approx(direct_s(dst), rel=1e-9)
    # GPU 4 sits behind two bonded NVLinks (NV2), GPUs 1 and 2 behind one each (NV1)
    assert first["time_s_to_4"] < first["time_s_to_1"] == first["time_s_to_2"]
    assert first["time_s_to_1"] / first["time_s_to_4"] == pytest.approx(2.0, rel=1e-3)
    # GPU 5 has no NVLink to GPU 0: the copy crosses PCIe Gen3 x16 (15.75 GB/s) at best
    second = next(r for r in rows if r["dst_ranks"] == [1, 2, 5])
    pcie_s = n_copies * size_bytes / 15.75e9
    assert second["time_s_to_5"] == pytest.approx(pcie_s, rel=2e-3)


def test_chunked_broadcast_matches_n_times_s_plus_k_minus_2_over_s_b() -> None:
    topo = load_topology(REPO / "topologies" / "dgx-a100.toml")
    link = topo.edges["gpu0", "nvsw"]
    bandwidth, hop_s = link["bandwidth_bytes_per_s"], 2 * link["latency_s"]  # GPU-switch-GPU
    size_bytes, k = 256 * 2**20, 8
    # out-of-place: the root also copies its buffer, read and written at the A100 40 GB's
    # 1,555 GB/s (the file's gpu_memory_bandwidth)
    copy_s = 2 * size_bytes / 1555e9
    rows = run("broadcast-chunks", n_chunks=[1, 4, 64, 1024])
    assert len(rows) == 8
    for row in rows:
        s = row["n_chunks"]
        # the first chunk crosses k-1 hops; the others follow one chunk time apart, their
        # latency hidden behind the chunks in flight (8 per connection, as NCCL's slots)
        expected = (k - 1) * hop_s + (s + k - 2) * size_bytes / s / bandwidth + copy_s
        assert row["time_s"] == pytest.approx(expected, rel=1e-9), row["model"]


def test_ring_allreduce_algbw_follows_n_over_2_n_minus_1() -> None:
    nic_bytes_per_s = 400e9 / 8  # NDR 400 Gbit/s
    for row in run("ring-allreduce-law"):
        n = row["n_ranks"]
        assert row["algbw_bytes_per_s"] == pytest.approx(
            nic_bytes_per_s * n / (2 * (n - 1)), rel=0.01
        )
        assert row["busbw_bytes_per_s"] == pytest.approx(nic_bytes_per_s, rel=0.01)


def test_reduce_broadcast_is_n_over_2_slower_than_ring_for_large_messages() -> None:
    rows = run("allreduce-compositions", size_bytes=[2**32])
    time_s = {row["algorithm"]: row["time_s"] for row in rows}
    # root link: (n-1) S each way (both phases pipelined) vs the ring's 2(n-1)/n S: ratio n/2
    assert time_s["reduce_broadcast"] / time_s["ring"] == pytest.approx(8 / 2, rel=0.02)
    # reduce-scatter then all-gather moves the ring's bytes in the ring's steps
    assert time_s["reducescatter_allgather"] == pytest.approx(time_s["ring"], rel=1e-3)


def test_designs_scale_as_their_links_say() -> None:
    path = REPO / "scenarios" / "scaling-designs.toml"
    result = run_scenario(path)
    assert sum(1 for p in result.points if p.skipped) == 4  # 16 and 32 ranks in 8-GPU boxes
    by_design: dict[str, dict[int, float]] = {}
    for row in result.rows:
        by_design.setdefault(Path(row["topology.file"]).stem, {})[row["n_ranks"]] = row[
            "busbw_bytes_per_s"
        ]

    def efficiency(name: str, link_class: str) -> float:  # the file's own calibration
        calibration = load_topology(REPO / "topologies" / f"{name}.toml").graph.get("calibration")
        return calibration.efficiency.get(link_class, 1.0) if calibration else 1.0

    nvlink = 18 * 25e9  # DGX H100: 18 NVLink4 links of 25 GB/s per GPU
    e_nvlink = efficiency("dgx-h100", "nvlink")
    assert by_design["dgx-h100"][8] == pytest.approx(e_nvlink * nvlink, rel=0.01)
    assert by_design["pcie-8x-rtx4090"][8] <= 31.5e9  # PCIe Gen4 x16
    # 4 servers, NCCL's 16 channels: each leaves every server once, so a server's 8 NICs
    # (400 Gbit/s = 50 GB/s each) carry the ring's 2(n-1)/n S: busbw <= 8 x 50 GB/s x the
    # file's net efficiency. Each GPU sends over NVLink in 7 of each channel's 8 hops
    # through its server: 7/8 x 2(n-1)/n S at 450 GB/s x the NVLink efficiency, a bound
    # above the NICs' (8/7 x 370 GB/s = 423 GB/s), so the NICs bind; the rest is latency
    # per call and per transfer over the net.
    net, nvl = efficiency("h100-ib-fat-tree", "net"), efficiency("h100-ib-fat-tree", "nvlink")
    nic_bound = 8 * 50e9 * net
    assert nic_bound < 8 / 7 * nvlink * nvl
    assert 0.93 * nic_bound <= by_design["h100-ib-fat-tree"][32] <= nic_bound
    # the same server, alone, whatever the file: the hardware's parameters (issue 32)
    assert by_design["h100-ib-fat-tree"][8] == pytest.approx(by_design["dgx-h100"][8], rel=1e-12)


def test_ddp_step_time_falls_then_rises_with_bucket_size(tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    path = REPO / "scenarios" / "ddp-buckets.toml"
    data = tomllib.loads(path.read_text())
    data["sweep"] = {"bucket_bytes": ["1 MiB", "25 MiB", "2 GiB"]}
    data["output"]["timelines"] = "none"
    rows = run_scenario(data, base=path.parent, out=out).rows
    times = [row["time_s"] for row in rows]
    assert times[1] < times[0]
    assert times[1] < times[2]
    for row in rows:
        # never faster than the compute, never slower than compute then every all-reduce
        assert row["compute_s"] <= row["time_s"] <= row["no_overlap_time_s"]
        assert row["exposed_comm_s"] + row["hidden_comm_s"] == pytest.approx(row["comm_s"])
    table = (out / "table.txt").read_text()
    assert "# lowest time_s: " in table
    assert table.rstrip().splitlines()[-1].endswith("at bucket_bytes=25 MiB")


@pytest.mark.slow
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_shipped_scenario_runs_from_the_command_line(path: Path, tmp_path: Path) -> None:
    out = tmp_path / path.stem
    assert main(["run", str(path), "--out", str(out), "--workers", "2"]) == 0
    assert (out / "results.csv").read_text().startswith("collective,algorithm,protocol,")
    pngs = sorted(out.rglob("*.png"))
    assert pngs
    for png in pngs:
        assert matplotlib.image.imread(png).shape[0] > 100
    for trace in out.rglob("*.trace.json"):
        assert json.loads(trace.read_text())["traceEvents"]
