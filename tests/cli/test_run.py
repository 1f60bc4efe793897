"""Tests of ``simcoll run``: the files it writes, resuming, and its one-line errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib.image
import pytest

from simcoll.cli import main

REPO = Path(__file__).resolve().parents[2]
CONTRACT_HEADER = (
    "collective,algorithm,protocol,n_ranks,size_bytes,time_s,algbw_bytes_per_s,busbw_bytes_per_s"
)
STAR = """\
schema = 1
builder = "switch_star"
description = "4 GPUs on one switch"
[params]
n_gpus = 4
link_bandwidth = "10 GB/s"
link_latency = "1 us"
"""


def scenario(tmp_path: Path, sweep: str, output: str = "") -> Path:
    (tmp_path / "star.toml").write_text(STAR)
    path = tmp_path / "s.toml"
    path.write_text(
        'schema = 1\ntitle = "ring all-gather on a star"\n[topology]\nfile = "star.toml"\n'
        f'[workload]\ncollective = "allgather"\nalgorithm = "ring"\nprotocol = "none"\n'
        f"[sweep]\n{sweep}\n{output}"
    )
    return path


def test_run_writes_csv_json_table_and_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    path = scenario(tmp_path, 'size_bytes = "4K:16K"')
    assert main(["run", str(path), "--out", str(out), "--workers", "1"]) == 0
    printed = capsys.readouterr()
    with (out / "results.csv").open() as f:
        lines = f.read().splitlines()
    assert lines[0].startswith(CONTRACT_HEADER + ",")
    rows = list(csv.DictReader(lines))
    # ring all-gather on a star: 3 steps of (2 x 1 us + size/4 at 10 GB/s)
    for row in rows:
        expected_s = 3 * (2e-6 + int(row["size_bytes"]) / 4 / 10e9)
        assert float(row["time_s"]) == pytest.approx(expected_s, rel=1e-9)
    assert [int(r["size_bytes"]) for r in rows] == [4096, 8192, 16384]
    assert len(json.loads((out / "results.json").read_text())) == 3
    table = (out / "table.txt").read_text()
    assert "# allgather on 4 ranks" in table
    assert "(GB/s)" in table
    image = matplotlib.image.imread(out / "busbw-vs-size.png")
    assert image.shape[0] > 100
    assert f"results in {out}/" in printed.err
    # issue 31: every command says what it wrote on stderr, as predict and topo do
    assert "wrote" not in printed.out
    assert f"simcoll: wrote {out}/results.csv, " in printed.err


def test_run_again_skips_what_is_done(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    path = scenario(tmp_path, 'size_bytes = "4K:16K"')
    main(["run", str(path), "--out", str(out), "--workers", "1"])
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(out), "--workers", "1"]) == 0
    assert "# 3 point(s) were already in" in capsys.readouterr().out


def test_failed_points_make_the_exit_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = scenario(tmp_path, 'size_bytes = [4096]\nalgorithm = ["ring", "bogus"]')
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--workers", "1"]) == 1
    captured = capsys.readouterr()
    assert "simcoll: 1 of 2 point(s) failed; see table.txt" in captured.err
    assert (
        "failed: allgather has no algorithm 'bogus'; valid: bruck, direct, halving_doubling, "
        "nvls, ring\n" in captured.out
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "nowhere.toml"], "simcoll: error: nowhere.toml: no such scenario file\n"),
        (
            ["run", "SCEN", "--workers", "0"],
            "simcoll: error: --workers: must be at least 1, got 0\n",
        ),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    path = scenario(tmp_path, "size_bytes = [4096]")
    args = [str(path) if a == "SCEN" else a for a in args]
    assert main(args) == 2
    assert capsys.readouterr().err == message


def test_occupied_out_folder_needs_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    path = scenario(tmp_path, "size_bytes = [4096]")
    assert main(["run", str(path), "--out", str(out)]) == 2
    assert capsys.readouterr().err.endswith(
        f"simcoll: error: {out}: holds files simcoll did not write (notes.txt); choose another "
        "--out or pass --force to write beside them; they stay untouched\n"
    )
    assert main(["run", str(path), "--out", str(out), "--force", "--workers", "1"]) == 0
    assert (out / "notes.txt").read_text() == "mine"
