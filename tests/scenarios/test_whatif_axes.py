"""Issue 31: --degrade and --fail work as scenario axes (``topology.degrade``,
``topology.fail``) and in a scenario's ``[topology] set``, with errors that name the
scenario's field."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll import load_topology, run_scenario
from simcoll.core.errors import ConfigError
from simcoll.prediction import predict
from simcoll.topology.calibration import read_calibration
from simcoll.topology.whatif import degrade, fail

REPO = Path(__file__).resolve().parents[2]
FAT_TREE = str(REPO / "topologies" / "h100-ib-fat-tree.toml")


def _scenario(sweep: dict, topology_set: dict | None = None) -> dict:
    return {
        "schema": 1,
        "topology": {"file": FAT_TREE, "set": {"n_nodes": 2, **(topology_set or {})}},
        "workload": {"collective": "allreduce", "size_bytes": "1 GiB"},
        "sweep": sweep,
    }


def test_each_point_is_predict_on_the_changed_fabric():
    rows = run_scenario(_scenario({
        "topology.degrade": ["", "ib=0.5", "node0.nic0=0.25"],
        "topology.fail": ["", "node0.nic0"],
    })).rows  # fmt: skip
    graph = load_topology(FAT_TREE, overrides={"n_nodes": "2"})

    def expected(degraded: str, failed: str) -> float:
        g = graph
        if degraded:
            target, factor = degraded.rsplit("=", 1)
            g = degrade(g, target, float(factor))
        if failed:
            g = fail(g, failed)
        (row,) = predict(g, "allreduce", [2**30]).rows
        return row.time_s

    assert len(rows) == 6
    for row in rows:
        assert row["time_s"] == expected(row["topology.degrade"], row["topology.fail"])
    plain = next(r for r in rows if not r["topology.degrade"] and not r["topology.fail"])
    half = next(r for r in rows if r["topology.degrade"] == "ib=0.5" and not r["topology.fail"])
    # Every network link at half rate. NCCL's pick here is NVLS-tree, whose heads each move
    # S/8 over their NIC each way (nvls.py): at 25 GB/s x the file's net efficiency
    # that alone takes S/8 / (25 GB/s x that efficiency), more than the whole call at full rate.
    params = REPO / "topologies" / "calibration" / "h100-ib-fat-tree.params.toml"
    floor_s = 2**30 / 8 / (25e9 * read_calibration(params).efficiency["net"])
    assert half["time_s"] >= floor_s > plain["time_s"]


def test_a_what_if_in_the_topology_set_applies_to_every_point():
    (row,) = run_scenario(_scenario({}, {"fail": "node0.nic0, node1.nic0"})).rows
    g = fail(fail(load_topology(FAT_TREE, overrides={"n_nodes": "2"}), "node0.nic0"),
             "node1.nic0")  # fmt: skip
    assert row["time_s"] == predict(g, "allreduce", [2**30]).rows[0].time_s


@pytest.mark.parametrize(
    ("value", "message"),
    [("ib=2", "ib: the factor must be in (0, 1], got 2.0"),
     ("ib", "expected TARGET=FACTOR, got 'ib'")],
)  # fmt: skip
def test_a_bad_what_if_point_fails_alone_naming_the_axis(value, message):
    # a sweep records a point that cannot run and goes on with the others
    result = run_scenario(_scenario({"topology.degrade": ["", value]}))
    assert len(result.rows) == 1
    (failure,) = result.failures
    assert "sweep.topology.degrade" in failure.error
    assert message in failure.error


def test_a_bad_what_if_in_the_topology_set_is_one_line_naming_it():
    with pytest.raises(ConfigError) as info:
        run_scenario(_scenario({}, {"fail": "node9.nic0"}))
    assert info.value.field == "topology.set.fail"
    assert "node9.nic0" in info.value.message
