"""Numbers quoted in the docs come from their commands: each test reruns the command a
document names beside a number and fails if the number it prints is no longer there.

(The README's Python examples are doctests, ``tests/test_readme.py``; the numbers of
``simcoll bench`` and other timings are measured, not checked here.)"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from simcoll import load_topology, run_scenario
from simcoll.core.units import format_time
from simcoll.scenarios.workloads import run_workload

REPO = Path(__file__).resolve().parents[1]


def test_the_readme_ddp_step_on_128_gpus() -> None:
    # README, "Status": run_workload("ddp", ... n_nodes "16" ..., bucket_bytes=25*2**20)
    readme = " ".join((REPO / "README.md").read_text().split())
    graph = load_topology(REPO / "topologies/h100-ib-fat-tree.toml", overrides={"n_nodes": "16"})
    m = run_workload("ddp", graph, bucket_bytes=25 * 2**20).metrics
    quoted = f"step {m['time_s'] * 1e3:.2f} ms, all-reduces {m['allreduce_s'] * 1e3:.2f} ms in all"
    assert quoted in readme


def _scenario_rows(name: str, **sweep: Any) -> list[dict[str, Any]]:
    """A shipped scenario's rows, run in this process (timelines off: they only record)."""
    path = REPO / "scenarios" / f"{name}.toml"
    data = tomllib.loads(path.read_text())
    data["sweep"] = {**data.get("sweep", {}), **sweep}
    data["output"] = {**data.get("output", {}), "timelines": "none"}
    result = run_scenario(data, base=path.parent)
    assert not result.failures, [f.error for f in result.failures]
    return result.rows


def _only(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    (row,) = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    return row


def test_the_numbers_of_scenarios_readme_are_what_its_commands_print() -> None:
    text = " ".join((REPO / "scenarios/README.md").read_text().replace("µs", "us").split())
    quoted: list[str] = []
    t, gbps = format_time, lambda v: f"{v / 1e9:.2f}"
    us = lambda v: f"{v * 1e6:.1f} us"  # noqa: E731 - the nccl-tests table's microseconds
    rows = _scenario_rows("p2p-dgx1")
    first, second = _only(rows, dst_ranks=[1, 2, 4]), _only(rows, dst_ranks=[1, 2, 5])
    quoted += [
        t(first["time_s_to_1"]),
        t(first["time_s_to_4"]),
        t(second["time_s_to_5"]),
        gbps(first["bandwidth_bytes_per_s_to_4"]),
        gbps(second["bandwidth_bytes_per_s_to_5"]),
    ]
    rows = _scenario_rows("allreduce-compositions")
    ring = _only(rows, algorithm="ring", size_bytes=4 * 2**30)
    rsag = _only(rows, algorithm="reducescatter_allgather", size_bytes=4 * 2**30)
    rb = _only(rows, algorithm="reduce_broadcast", size_bytes=4 * 2**30)
    quoted += [
        f"{gbps(rsag['busbw_bytes_per_s'])} GB/s busbw against the ring's "
        f"{gbps(ring['busbw_bytes_per_s'])}",
        f"busbw {gbps(rb['busbw_bytes_per_s'])} GB/s",
        f"{rb['time_s'] / ring['time_s']:.2f}x slower at 4 GiB",
    ]
    rows = _scenario_rows("ring-allreduce-law")
    quoted += [
        f"{gbps(_only(rows, n_ranks=2)['algbw_bytes_per_s'])} GB/s at n = 2",
        f"{gbps(_only(rows, n_ranks=64)['algbw_bytes_per_s'])} GB/s at n = 64",
    ]
    rows = _scenario_rows("broadcast-chunks", model=["flow"])
    quoted += [
        f"{us(_only(rows, n_chunks=s)['time_s'])} at S = {s}"
        if s != 1
        else f"{us(_only(rows, n_chunks=1)['time_s'])} with S = 1"
        for s in (1, 256, 1024)
    ]
    rows = _scenario_rows("ddp-buckets")
    for bucket in (1, 4, 8, 16, 25, 256, 2048):
        row = _only(rows, bucket_bytes=bucket * 2**20)
        quoted += [t(row["time_s"]), t(row["exposed_comm_s"])]
    rows = _scenario_rows("scaling-designs")
    for design, n in (("dgx-h100", 8), ("pcie-8x-rtx4090", 8), ("h100-ib-fat-tree", 16),
                      ("h100-ib-fat-tree", 32)):  # fmt: skip
        row = _only(rows, n_ranks=n, **{"topology.file": f"../topologies/{design}.toml"})
        quoted.append(f"{gbps(row['busbw_bytes_per_s'])}")
    rows = _scenario_rows("fsdp-prefetch")
    quoted += [
        t(_only(rows, prefetch=p)[k]) for p in (0.0, 1.0) for k in ("time_s", "exposed_comm_s")
    ]
    rows = _scenario_rows("moe-alltoall")
    quoted += [t(row["exposed_comm_s"]) for row in rows]
    rows = _scenario_rows("concurrent-groups")
    quoted += [t(row["time_s"]) for row in rows if row["n_groups"] in (4, 8)]
    rows = _scenario_rows("training-step")
    for nic, tp in (("400 Gbit/s", 2), ("400 Gbit/s", 4), ("400 Gbit/s", 8), ("100 Gbit/s", 4)):
        row = _only(rows, tp=tp, **{"topology.nic_bandwidth": nic})
        quoted.append(" | ".join([t(row["time_s"]), f"{row['mfu']:.4g}"] + [
            t(row[f"exposed_{d}_s"]) for d in ("tp", "pp", "dp")] + [t(row["idle_s"]),
            f"{row['memory_total_bytes'] / 1e9:.2f} GB"]))  # fmt: skip
    missing = [q for q in quoted if q not in text.replace("**", "")]
    assert not missing, f"scenarios/README.md does not quote {missing}"


def test_the_readme_what_if_numbers() -> None:
    # README, "Using it": 1 GiB all-reduce on two DGX H100 of h100-ib-fat-tree, as is,
    # with the network at half rate, and with one NIC down
    from simcoll.prediction import predict  # noqa: PLC0415
    from simcoll.topology.whatif import degrade, fail  # noqa: PLC0415

    readme = " ".join((REPO / "README.md").read_text().split())
    graph = load_topology("h100-ib-fat-tree", overrides={"n_nodes": "2"})
    for variant in (graph, degrade(graph, "ib", 0.5), fail(graph, "node0.nic0")):
        (row,) = predict(variant, "allreduce", [2**30]).rows
        assert f"{row.busbw_bytes_per_s / 1e9:.1f}" in readme


def test_the_readme_diagnose_table(capsys: pytest.CaptureFixture[str]) -> None:
    # README, "Is it the cluster or the model?": the 4-node VM table, diagnosed
    from simcoll.cli import main  # noqa: PLC0415

    table = REPO / "validation/data/public/nccl_allreduce_4x8xH100_ndr_vm_nccltests309_qoofyk.csv"
    code = main(["compare", str(table), "--topology", "h100-ib-fat-tree", "--set", "n_nodes=4",
                 "--collective", "allreduce", "--ranks", "32", "--diagnose", "--min-size",
                 "64M"])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out.split("\n\nwhat-ifs", 1)[1].strip().splitlines()[1:]
    readme = (REPO / "README.md").read_text()
    for line in printed:
        if line:
            assert line in readme, line
