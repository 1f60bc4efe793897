"""Every command that writes files, pointed at a folder of someone's files: afterwards every
one of those files is byte for byte what it was, or the command refused (issue 17).

The folder holds photos, notes, a thesis, and files named exactly as simcoll names its
outputs (``table.txt``, ``results.csv``, ``busbw-vs-size.png``, ``points.csv``,
``compare.png``, ``timelines/``...), each with distinctive bytes, plus the inputs the
commands read (a topology, a scenario, measurements). Each command runs in that folder
and at it: ``run`` (with and without ``--force``, ``--out .``, ``--out ''``, the default
folder), ``compare --out``, ``calibrate -o``, ``predict --plot``, ``topo draw -o``,
``topo dump -o`` and ``bench``. A command may succeed (writing beside the files) or refuse
in one line; it may not print a traceback, and it may not change a byte of what it did
not write. The tally is printed (``pytest -s``).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections import Counter
from pathlib import Path

import pytest

from simcoll.calibrate.measurements import Measurement, MeasurementWriter
from simcoll.cli import main

STAR = """schema = 1
builder = "switch_star"
[params]
n_gpus = 4
link_bandwidth = "1 Gbit/s"
link_latency = "30 us"
link_kind = "ethernet"
switch_kind = "switch"
"""
SCENARIO = """schema = 1
title = "ring all-gather on a star"
[topology]
file = "star4.toml"
[workload]
collective = "allgather"
algorithm = "ring"
[sweep]
size_bytes = ["4 KiB", "8 KiB"]
[output]
timelines = "first"
"""
#: Someone's files: named like simcoll's outputs or not, each with its own bytes.
USER_FILES = {
    "holiday.png": b"\x89PNG\r\n\x1a\n a holiday photo",
    "thesis.tex": b"\\documentclass{article} my thesis",
    "notes.txt": b"my notes",
    "table.txt": b"my table",
    "results.csv": b"my,results",
    "results.json": b'{"mine": true}',
    "results.jsonl": b'{"mine": 1}\n',
    "sweep.json": b'{"mine": "sweep"}',
    "busbw-vs-size.png": b"\x89PNG my plot",
    "scaling.png": b"\x89PNG my other plot",
    "points.csv": b"my,points",
    "summary.csv": b"my,summary",
    "compare.png": b"\x89PNG my comparison",
    "params.toml": b"# my own params\n",
    "topology.json": b'{"directed": true, "mine": 1}',
    "plot.png": b"\x89PNG mine too",
    "timelines/point-0000.trace.json": b'{"traceEvents": ["mine"]}',
    "runs/s/table.txt": b"a table in runs/",
}


def make_folder(folder: Path) -> dict[str, bytes]:
    """The user's folder, with the inputs the commands read."""
    for name, data in USER_FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    (folder / "star4.toml").write_text(STAR)
    (folder / "s.toml").write_text(SCENARIO)
    with MeasurementWriter(folder / "sendrecv.csv", metadata={"backend": "gloo"}) as w:
        for size in (4096, 65536, 2**20):
            w.append(Measurement(collective="sendrecv", n_ranks=4, size_bytes=size,
                                 time_s=60e-6 + size / 112.5e6))  # fmt: skip
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def commands() -> list[list[str]]:
    """Every writing command, aimed at the folder (run from inside it)."""
    measured = ["sendrecv.csv", "--topology", "star4.toml"]
    cmds = [
        ["run", "s.toml", "--workers", "1"],  # the default folder, runs/s, holds a file
        ["run", "s.toml", "--out", ".", "--workers", "1"],
        ["run", "s.toml", "--out", ".", "--force", "--workers", "1"],
        ["run", "s.toml", "--out", "", "--force", "--workers", "1"],
        ["run", "s.toml", "--out", "timelines", "--force", "--workers", "1"],
        ["run", "s.toml", "--out", "fresh", "--workers", "1"],
        ["run", "s.toml", "--out", "fresh", "--force", "--workers", "1"],
        ["compare", *measured, "--out", "."],
        ["compare", *measured, "--out", ".", "--force"],
        ["compare", *measured, "--out", "cmp"],
        ["calibrate", *measured, "-o", "my-fit.toml"],
        ["calibrate", *measured, "-o", "my-fit.toml"],  # replaces its own file
        ["predict", "star4.toml", "--collective", "allreduce", "--sizes", "1M", "--plot",
         "mine.png"],
        ["topo", "draw", "star4.toml", "-o", "drawn.png"],
        ["topo", "dump", "star4.toml", "-o", "dumped.json"],
        ["bench", "--cases", "ring-8"],
    ]  # fmt: skip
    for name in [*USER_FILES, "star4.toml", "s.toml", "sendrecv.csv", "sendrecv.json", "", "."]:
        cmds.append(["calibrate", *measured, "-o", name])
        cmds.append(["predict", "star4.toml", "--collective", "allreduce", "--sizes", "1M",
                     "--plot", name])  # fmt: skip
        cmds.append(["topo", "draw", "star4.toml", "-o", name])
        cmds.append(["topo", "dump", "star4.toml", "-o", name])
    return cmds


def run(argv: list[str]) -> tuple[int, str]:
    """``simcoll ARGV`` in this process: the exit status and what it printed on stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as exit_:  # argparse's usage errors
            status = int(exit_.code or 0)
    return status, err.getvalue()


def test_no_command_changes_a_file_it_did_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    before = make_folder(folder)
    monkeypatch.chdir(folder)
    tally: Counter[str] = Counter()
    for argv in commands():
        status, err = run(argv)
        tally["commands"] += 1
        assert "Traceback" not in err, (argv, err)
        if status == 2:  # run prints its point count and estimate first
            errors = [line for line in err.splitlines() if ": error: " in line]
            assert errors == err.splitlines()[-1:], (argv, err)
            assert errors[0].startswith("simcoll"), (argv, err)
            tally["refused in one line"] += 1
        else:
            assert status == 0, (argv, status, err)
            tally["succeeded"] += 1
        changed = [n for n, data in before.items() if (folder / n).read_bytes() != data]
        lost = [n for n in before if not (folder / n).is_file()]
        assert (changed, lost) == ([], []), argv
    after = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
    assert set(before) <= after
    tally["files checked"] = len(before)
    tally["files lost or changed"] = 0
    print("\nfile safety:", ", ".join(f"{k} {v}" for k, v in tally.items()))
    assert tally["succeeded"] >= 10  # the commands did write, beside the user's files
    assert tally["refused in one line"] >= 4 * len(USER_FILES)


def test_the_folder_is_left_with_simcolls_files_listed(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    make_folder(folder)
    cwd = Path.cwd()
    os.chdir(folder)
    try:
        assert run(["run", "s.toml", "--out", "fresh", "--workers", "1"])[0] == 0
        assert run(["run", "s.toml", "--out", "fresh", "--workers", "1"])[0] == 0  # resumes
    finally:
        os.chdir(cwd)
    names = sorted(p.name for p in (folder / "fresh").iterdir())
    assert names == [
        ".simcoll-manifest.json", "busbw-vs-size.png", "results.csv", "results.json",
        "results.jsonl", "sweep.json", "table.txt", "timelines"]  # fmt: skip
