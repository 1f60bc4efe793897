"""Tests of simcoll.scenarios.report: files are replaced atomically, never left half-written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.report import write_report
from simcoll.scenarios.scenario import parse_scenario
from simcoll.scenarios.sweep import run_sweep

STAR = (
    'schema = 1\nbuilder = "switch_star"\ndescription = "star"\n[params]\nn_gpus = 4\n'
    'link_bandwidth = "10 GB/s"\nlink_latency = "1 us"\n'
)


def test_a_failed_write_leaves_the_previous_results_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "star.toml").write_text(STAR)
    data = {"schema": 1, "topology": {"file": "star.toml"},
            "workload": {"collective": "allgather", "algorithm": "ring"},
            "sweep": {"size_bytes": [4096, 8192]}}  # fmt: skip
    result = run_sweep(parse_scenario(data, source="s", base=tmp_path), workers=1)
    out = tmp_path / "out"
    write_report(result, out)
    before = (out / "results.csv").read_bytes()
    assert before.count(b"\n") == 3

    def crash(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    smaller = type(result)(result.scenario, result.points[:1])
    with pytest.raises(ConfigError) as info:
        write_report(smaller, out)
    # one line naming the file (issue 17: it was ": No space left on device"), and the
    # half-written file is gone (it was left behind as .results.csv.tmp)
    assert str(info.value) == f"{out / 'results.csv'}: cannot write: No space left on device"
    assert (out / "results.csv").read_bytes() == before
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
