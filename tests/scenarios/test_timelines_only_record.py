"""Looking never changes the answer: a scenario gives the same rows, every column, with
timelines kept and without."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from simcoll import run_scenario
from simcoll.scenarios.points import evaluate_point
from simcoll.scenarios.scenario import parse_scenario

REPO = Path(__file__).resolve().parents[2]
#: 5-11 s each on 2 cores; ``-m slow`` runs them.
SLOW = {"training-step", "allreduce-crossover", "ddp-buckets"}
SCENARIOS = [
    pytest.param(p, id=p.stem, marks=pytest.mark.slow)
    if p.stem in SLOW
    else pytest.param(p, id=p.stem)
    for p in sorted((REPO / "scenarios").glob("*.toml"))
]


def _rows(data: dict[str, Any], base: Path, timelines: str) -> list[dict[str, Any]]:
    data = {**data, "output": {**data.get("output", {}), "timelines": timelines}}
    result = run_scenario(data, base=base)
    assert not result.failures, [f.error for f in result.failures]
    return result.rows


@pytest.mark.parametrize("path", SCENARIOS)
def test_every_shipped_scenario_gives_the_same_rows_with_timelines_on_and_off(path: Path) -> None:
    data = tomllib.loads(path.read_text())
    assert _rows(data, path.parent, "all") == _rows(data, path.parent, "none")


def test_a_collective_point_with_its_timeline_is_the_predict_row() -> None:
    # Issue 28: 2 x 8 H100, all-reduce of 1 GiB, printed 5,213.7 us without timelines and
    # 41,109 us with them, with an empty algorithm column and a count of 0.
    spec = parse_scenario(
        {
            "schema": 1,
            "topology": {"file": str(REPO / "topologies/h100-ib-fat-tree.toml"),
                         "set": {"n_nodes": 2}},
            "workload": {"collective": "allreduce", "size_bytes": "1 GiB"},
        },
        source="<test>",
    )  # fmt: skip
    (point,) = spec.points()
    looked, plain = (evaluate_point(spec, point, timeline=t) for t in (True, False))
    assert looked.rows == plain.rows
    (row,) = looked.rows
    # NCCL's pick for a large all-reduce across H100 servers: NVLS-tree (nccl-tests#309)
    assert (row["collective"], row["algorithm"], row["count"]) == ("allreduce", "nvls_tree", 2**28)
    assert looked.timeline is not None
    assert looked.timeline.time_s == pytest.approx(row["time_s"], rel=1e-12)
