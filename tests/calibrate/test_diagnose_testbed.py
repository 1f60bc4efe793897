"""``compare --diagnose`` on a real run with a slow link: the emulated testbed's star of 4
hosts (Linux namespaces, tc-shaped links, torch's gloo; ``validation/testbed/``) with
rank 3's link shaped to 200 Mbit/s where the others run at 1 Gbit/s, diagnosed against
the healthy 1 Gbit/s design. The measurement is the testbed's own
(``validation/data/testbed/star4-one-slow.csv``), not simcoll output."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from simcoll.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_the_testbeds_slow_link_is_diagnosed_as_a_slow_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "diag"
    assert main(["compare", str(REPO / "validation/data/testbed/star4-one-slow.csv"),
                 "--topology", str(REPO / "validation/topologies/star4-1gbit.toml"),
                 "--collective", "allreduce", "--diagnose", "--workers", "1",
                 "--out", str(out)]) == 0  # fmt: skip
    last = capsys.readouterr().out.strip().splitlines()[-1]
    # 1 Gbit/s against 200 Mbit/s: the closest of the what-ifs is the slowest link tried
    assert "the closest what-if is gpu0's links at 1/4 speed" in last, last
    with (out / "diagnose.csv").open() as handle:
        rows = {r["what_if"]: float(r["mean_abs_busbw_error"]) for r in csv.DictReader(handle)}
    assert set(rows) == {"healthy", "gpu0's links at 1/2 speed", "gpu0's links at 1/4 speed"}
    assert rows["gpu0's links at 1/4 speed"] < rows["gpu0's links at 1/2 speed"] < rows["healthy"]
    assert rows["healthy"] > 1.0  # measured busbw is several times below the design's
    # the README's figures
    assert (round(100 * rows["gpu0's links at 1/4 speed"]), round(100 * rows["healthy"])) == (
        33, 248)  # fmt: skip
