"""Scenario keys of issue 18: placement, plan and calibration, and where they show."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from simcoll import run_scenario
from simcoll.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
H100 = str(REPO / "topologies" / "h100-ib-fat-tree.toml")


def _scenario(workload: dict[str, object], sweep: dict[str, object]) -> dict[str, object]:
    return {
        "schema": 1,
        "topology": {"file": H100, "set": {"n_nodes": 2}},
        "workload": {"collective": "allreduce", "algorithm": "ring", "protocol": "simple",
                     "size_bytes": "256 MiB", "calibration": "none", **workload},
        "sweep": sweep,
    }  # fmt: skip


def test_plan_and_placement_are_axes_and_columns(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_scenario(
        _scenario({}, {"plan": ["nccl", "rank"], "placement": ["linear", "random:1"]}), out=out
    )
    assert not result.failures, [f.error for f in result.failures]
    busbw = {(r["plan"], r["placement"]): r["busbw_bytes_per_s"] for r in result.rows}
    # 2 servers x 8 NICs of 50 GB/s: NCCL's plan keeps every NIC busy (16 channels, one
    # crossing per server each), the rank-order ring one NIC per server: 8x the busbw
    # on the network, bounded by nothing else here.
    assert busbw["nccl", "linear"] / busbw["rank", "linear"] == pytest.approx(8, rel=0.05)
    rows = list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))
    assert {(r["plan"], r["placement"], r["routing"]) for r in rows} == {
        (p, q, "dmodk") for p in ("nccl", "rank") for q in ("linear", "random:1")
    }
    stored = json.loads((out / "results.json").read_text())
    assert {r["placement"] for r in stored} == {"linear", "random:1"}


def test_placement_is_a_collectives_key_only() -> None:
    scenario = _scenario({}, {})
    scenario["workload"] = {"kind": "p2p", "src_rank": 0, "dst_ranks": [1], "size_bytes": 1024,
                            "placement": "random:1"}  # fmt: skip
    with pytest.raises(ConfigError, match=r"workload.placement: p2p has no parameter 'placement'"):
        run_scenario(scenario)


def test_in_place_leaves_out_the_own_blocks_copy(tmp_path: Path) -> None:
    """An out-of-place all-gather of S on 16 H100s also reads and writes its own S / 16
    at the H100's 3.35 TB/s (the file's gpu_memory_bandwidth); in place it does not."""
    size_bytes = 256 * 2**20
    scenario = _scenario({"collective": "allgather"}, {"in_place": [False, True]})
    result = run_scenario(scenario, out=tmp_path / "run")
    assert not result.failures, [f.error for f in result.failures]
    time_s = {r["in_place"]: r["time_s"] for r in result.rows}
    assert time_s[False] - time_s[True] == pytest.approx(2 * size_bytes / 16 / 3.35e12)


def test_in_place_must_be_true_or_false() -> None:
    result = run_scenario(_scenario({"in_place": "yes"}, {}))
    assert [f.error for f in result.failures] == [
        "workload.in_place: must be true or false, got 'yes'"
    ]
