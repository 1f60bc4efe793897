"""``compare --diagnose``: tables simulated with a fault, injected by another route than
the what-if's own, are diagnosed as that fault; the GPUDirect-off cap by hand."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from simcoll.calibrate.compare import ComparedPoint, compare
from simcoll.calibrate.diagnose import WhatIf, diagnose, rank, verdict, what_ifs
from simcoll.calibrate.fit import FitPoint
from simcoll.calibrate.gloo import recipe_for
from simcoll.cli import main as simcoll
from simcoll.core.errors import ConfigError
from simcoll.plan.tuning import NcclKnobs
from simcoll.topology.io import load
from simcoll.topology.schema import NodeKind
from simcoll.topology.whatif import degrade, gpudirect_rdma_off

TOPOLOGY = "topologies/h100-ib-fat-tree.toml"
MIB = 2**20
SIZES = (4 * MIB, 64 * MIB, 512 * MIB)
N_NODES = 8  # 64 GPUs on two leaves (32 down ports each): the spine carries traffic


def _recipe(collective: str, n_ranks: int, size_bytes: int) -> object:
    return recipe_for("nccl", collective, n_ranks, size_bytes)


def _simulated_s(
    topology: object, knobs: NcclKnobs | None = None, sizes: tuple[int, ...] = SIZES
) -> list[float]:
    """The all-reduce's simulated seconds at ``sizes`` on every GPU of ``topology``."""
    points = [FitPoint("allreduce", 8 * N_NODES, s, 1.0, "t") for s in sizes]
    compared = compare(topology, points, recipe=_recipe, protocol="auto", knobs=knobs)  # type: ignore[arg-type]
    return [p.simulated_s for p in compared]


def _design(**overrides: str) -> object:
    return load(TOPOLOGY, {"n_nodes": str(N_NODES), **overrides})


def test_gpudirect_off_caps_each_nic_at_a_quarter_of_its_share_of_host_memory() -> None:
    # DGX H100: 2 sockets x 8 channels x DDR5-4800 (4.8e9 transfers/s x 8 bytes); each
    # staged byte is written and read once in host memory, each way: 4 bytes of memory
    # traffic per byte a NIC moves each way, 8 NICs busy at once
    host_bytes_per_s = 2 * 8 * 4.8e9 * 8
    cap_bytes_per_s = host_bytes_per_s / (4 * 8)
    assert cap_bytes_per_s == pytest.approx(19.2e9)
    design = _design()
    off = gpudirect_rdma_off(design)
    for u, v, attrs in design.edges(data=True):
        touches_nic = NodeKind.NIC in (design.nodes[u]["kind"], design.nodes[v]["kind"])
        expected = min(attrs["bandwidth_bytes_per_s"], cap_bytes_per_s) if touches_nic else (
            attrs["bandwidth_bytes_per_s"])  # fmt: skip
        assert off.edges[u, v]["bandwidth_bytes_per_s"] == pytest.approx(expected)
    assert design.edges["node0.nic0", "leaf0"]["bandwidth_bytes_per_s"] == 50e9  # unchanged


def test_gpudirect_off_needs_the_host_memory_bandwidth() -> None:
    design = _design()
    del design.graph["host_memory_bandwidth_bytes_per_s"]
    with pytest.raises(ConfigError, match="host_memory_bandwidth"):
        gpudirect_rdma_off(design)


#: What each run set shows: NCCL's own choice per size (the spine of two leaves carries
#: little of its trees), and rings only (``NCCL_ALGO=Ring``, NVIDIA's advice for testing a
#: network), whose every channel crosses the spine twice but which NCCL's channel count
#: barely changes. (A 2:1 oversubscribed spine, half the uplinks at full speed, slows
#: neither: each leaf's crossing channels still get an uplink each.)
FAULTS = {
    None: ("healthy", "one NIC down", "GPUDirect RDMA off", "PCIe a generation lower",
           "half the channels"),
    "ring": ("one NIC down", "GPUDirect RDMA off", "PCIe a generation lower",
             "spine at half speed"),
}  # fmt: skip
SIZES_BY = {None: (MIB // 4, MIB, 4 * MIB, 64 * MIB, 512 * MIB), "ring": (64 * MIB, 512 * MIB)}


@pytest.fixture(scope="module", params=list(FAULTS))
def matrix(request: pytest.FixtureRequest) -> tuple[str | None, list[tuple[WhatIf, list[float]]]]:
    """An algorithm, and every what-if of the 64-GPU design with its simulated seconds."""
    algorithm = request.param
    found = what_ifs(_design(), 8 * N_NODES, NcclKnobs(algorithm=algorithm))
    return algorithm, [(w, _simulated_s(w.topology, w.knobs, SIZES_BY[algorithm])) for w in found]


def _injected(fault: str, algorithm: str | None) -> list[float]:
    """The fault's table, made another way than the what-if makes it."""
    design, sizes = _design(), SIZES_BY[algorithm]
    knobs = NcclKnobs(algorithm=algorithm)
    if fault == "one NIC down":  # the NIC taken out of the graph by hand
        # (which NIC matters: node5.nic3 down moves rail 3's channels of that server onto
        # other rails, over the spine, and its tables look like a 2:1 spine's)
        design = design.copy()
        design.remove_node("node0.nic0")
        return _simulated_s(design, knobs, sizes)
    if fault == "GPUDirect RDMA off":  # 19.2 / 50 of every NIC link, by hand
        for nic in [n for n, a in design.nodes(data=True) if a["kind"] is NodeKind.NIC]:
            design = degrade(design, nic, 19.2e9 / 50e9)
        return _simulated_s(design, knobs, sizes)
    if fault == "PCIe a generation lower":  # the builder's Gen4 x16
        return _simulated_s(_design(pcie_bandwidth="31.5 GB/s"), knobs, sizes)
    if fault == "half the channels":  # as the run's environment would say it
        return _simulated_s(design, NcclKnobs(max_ctas=8, algorithm=algorithm), sizes)
    if fault == "spine at half speed":  # every switch-to-switch link halved by hand
        design = design.copy()
        for u, v, attrs in design.edges(data=True):
            if design.nodes[u]["kind"] is design.nodes[v]["kind"] is NodeKind.SWITCH:
                attrs["bandwidth_bytes_per_s"] /= 2
        return _simulated_s(design, knobs, sizes)
    return _simulated_s(design, knobs, sizes)


def test_each_injected_fault_is_diagnosed_as_itself(
    matrix: tuple[str | None, list[tuple[WhatIf, list[float]]]],
) -> None:
    algorithm, candidates = matrix
    sizes = SIZES_BY[algorithm]
    assert [w.name for w, _ in candidates] == [
        "healthy", "one NIC down", "one NIC cable at 1/2 speed", "one NIC cable at 1/4 speed",
        "GPUDirect RDMA off", "PCIe a generation lower", "half the channels",
        "spine at half speed"]  # fmt: skip
    for fault in FAULTS[algorithm]:
        measured = _injected(fault, algorithm)
        noisy = [t * (1.02 if i % 2 else 0.98) for i, t in enumerate(measured)]  # a real run's
        ranked = rank([
            (w, [ComparedPoint("t", "allreduce", 8 * N_NODES, s, m, x)
                 for s, m, x in zip(sizes, noisy, times, strict=True)])
            for w, times in candidates
        ])  # fmt: skip
        found = [(d.what_if.name, round(d.residual, 3), d.same_as) for d in ranked]
        # first, or the same times as the first (a ring cannot tell the spine at half speed
        # from one NIC cable at half speed: either halves the crossing channels' rate)
        named = next(d for d in ranked if d.what_if.name == fault)
        assert ranked[0].what_if.name == fault or named.same_as == ranked[0].what_if.name, (
            fault, found)  # fmt: skip
        assert ranked[0].residual < 0.05, (fault, found)
        if fault != "healthy":  # every fault here is told from the healthy design
            healthy = next(d for d in ranked if d.what_if.name == "healthy")
            assert healthy.residual > ranked[0].residual + 0.01, (fault, found)


def test_gpudirect_off_binds_rings_at_its_nic_cap(
    matrix: tuple[str | None, list[tuple[WhatIf, list[float]]]],
) -> None:
    algorithm, candidates = matrix
    if algorithm != "ring":
        pytest.skip("the rings' NICs bind alone; NCCL's trees also wait on NVLS")
    times = {w.name: t for w, t in candidates}
    # at 512 MiB a ring's bandwidth is its NICs' (50 GB/s, then 19.2): time scales by 50/19.2
    slower = times["GPUDirect RDMA off"][-1] / times["healthy"][-1]
    assert slower == pytest.approx(50 / 19.2, rel=0.1)


def test_compare_diagnose_names_the_fault_and_writes_its_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    design = load(TOPOLOGY, {"n_nodes": "2"})
    sizes = (64 * MIB, 512 * MIB)
    points = [FitPoint("allreduce", 16, s, 1.0, "t") for s in sizes]
    params = design.graph["calibration"]  # the file's own, as compare uses by default
    staged, healthy = (compare(g, points, recipe=_recipe, protocol="auto", calibration=params)  # type: ignore[arg-type]
                       for g in (gpudirect_rdma_off(design), design))  # fmt: skip
    ratio = sorted(s.simulated_s / h.simulated_s for s, h in zip(staged, healthy, strict=True))
    table = tmp_path / "slow.csv"
    with table.open("w", newline="") as handle:  # nccl-tests' columns, as the public tables
        writer = csv.writer(handle)
        writer.writerow(["size_bytes", "count", "type", "redop", "time_us_oop", "algbw_oop",
                         "busbw_oop", "time_us_ip", "algbw_ip", "busbw_ip"])  # fmt: skip
        for p in staged:
            algbw = p.size_bytes / p.simulated_s / 1e9
            busbw = algbw * 2 * 15 / 16
            writer.writerow([p.size_bytes, p.size_bytes // 4, "float", "sum",
                             p.simulated_s * 1e6, algbw, busbw, p.simulated_s * 1e6, algbw,
                             busbw])  # fmt: skip
    out = tmp_path / "out"
    code = simcoll(["compare", str(table), "--topology", TOPOLOGY, "--set", "n_nodes=2",
                    "--collective", "allreduce", "--ranks", "16", "--diagnose", "--out",
                    str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0
    last = printed.strip().splitlines()[-1]
    assert "the closest what-if is GPUDirect RDMA off" in last, printed
    assert last.startswith(f"measured busbw is {sum(ratio) / 2:.2g}x below this design")
    with (out / "diagnose.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows[0]["what_if"] == "GPUDirect RDMA off"
    assert float(rows[0]["mean_abs_busbw_error"]) < 1e-6


def test_verdict_says_when_nothing_explains_it() -> None:
    design = _design()
    healthy = WhatIf("healthy", "", design, None)
    far = [ComparedPoint("t", "allreduce", 64, 2**30, 9.0, 1.0)]
    line = verdict(rank([(healthy, far)]))
    assert line.startswith("measured busbw is 9x below this design")
    assert line.endswith("none explains it within 25 %")  # a 1 GiB point: no --min-size hint


def test_forked_workers_rank_what_one_process_ranks() -> None:
    design = load(TOPOLOGY, {"n_nodes": "2"})
    points = [FitPoint("allreduce", 16, s, 1e-3, "t") for s in (MIB, 64 * MIB)]
    candidates = what_ifs(design, 16)
    alone, forked = (
        [(d.what_if.name, [p.simulated_s for p in d.points])
         for d in diagnose(candidates, points, recipe=_recipe, protocol="auto", workers=n)]  # type: ignore[arg-type]
        for n in (1, 2)
    )  # fmt: skip
    assert forked == alone
    assert len(alone) == len(candidates) > 1


def test_a_fault_barely_closer_than_a_healthy_design_is_no_evidence() -> None:
    design = _design()
    healthy = WhatIf("healthy", "", design, None)
    pcie = WhatIf("PCIe a generation lower", "", design, None)
    line = verdict(rank([
        (healthy, [ComparedPoint("t", "allreduce", 64, 2**30, 1.0, 0.95)]),
        (pcie, [ComparedPoint("t", "allreduce", 64, 2**30, 1.0, 0.99)]),
    ]))  # fmt: skip
    assert "the closest what-if is PCIe a generation lower (mean residual 1 %;" in line
    assert line.endswith("within simcoll's own error (5 %), so this is no evidence of a fault")


def test_a_fault_that_fits_no_better_than_the_design_is_no_evidence() -> None:
    design = _design()
    healthy = WhatIf("healthy", "", design, None)
    cable = WhatIf("one NIC cable at 1/2 speed", "", design, None)
    line = verdict(rank([
        (healthy, [ComparedPoint("t", "allreduce", 64, 2**30, 1.0, 1 / 1.15)]),
        (cable, [ComparedPoint("t", "allreduce", 64, 2**30, 1.0, 1 / 1.145)]),
    ]))  # fmt: skip
    # closer by half a point: the healthy design ranks first, the cable after it
    assert (
        "the closest what-if is the healthy cluster (mean residual 15 %; one NIC cable at "
        "1/2 speed at 15 % is not closer by 2 %)" in line
    )
