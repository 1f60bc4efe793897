"""``simcoll calibrate`` you can watch and trust (issue 41): progress with a total and the
time left, one median for calibrate and compare, values on a bound named, ``-o`` and
the inputs checked before the fit.

The small fits here run on the testbed's star of 4 hosts at 1 Gbit/s (two links of
0.2 ms per route) with the bare links (``--algorithm direct --protocol none``), on
times written in the tests: ``2 x 0.2 ms + size / (efficiency x 125e6 B/s)``.
"""

from __future__ import annotations

import csv
import re
import tomllib
from pathlib import Path

import pytest

from simcoll.cli import main

REPO = Path(__file__).resolve().parents[2]
STAR = str(REPO / "validation" / "topologies" / "star4-1gbit.toml")
PUBLIC = REPO / "validation" / "data" / "public"
B = 125e6  # bytes per second
HOPS_S = 2 * 0.2e-3
SIZES = [4096 * 4**k for k in range(6)]  # 4 KiB .. 4 MiB
BARE = ["--topology", STAR, "--algorithm", "direct", "--protocol", "none", "--fit", "efficiency"]


def runs(folder: Path, efficiency: float, misses: list[float] | None = None) -> str:
    """A measurement CSV of sendrecv on the star: the closed form, times (1 + miss)."""
    misses = misses or [0.0] * len(SIZES)
    lines = ["collective,n_ranks,size_bytes,time_s"]
    lines += [f"sendrecv,4,{s},{(HOPS_S + s / (efficiency * B)) * (1 + miss)!r}"
              for s, miss in zip(SIZES, misses, strict=True)]  # fmt: skip
    path = folder / "runs.csv"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_off_a_terminal_each_pass_is_a_line_with_the_total_and_the_time_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 41: off a terminal calibrate printed its estimate and nothing more for 22.5
    # minutes; on one it counted passes with no total
    assert main(["calibrate", runs(tmp_path, 0.9), *BARE, "-o", str(tmp_path / "p.toml")]) == 0
    err = capsys.readouterr().err.splitlines()
    bar = re.compile(r"^\[[#.]{30}\] (\d+)/~(\d+) passes over the points, \d+\.\d s elapsed, "
                     r"~\d+ (s|min) left$")  # fmt: skip
    passes = [bar.match(line) for line in err if line.startswith("[")]
    assert passes
    assert all(passes)
    counts = [(int(m.group(1)), int(m.group(2))) for m in passes if m]
    assert [done for done, _ in counts] == list(range(1, len(counts) + 1))
    assert all(total >= done for done, total in counts)
    assert err[0].startswith("calibrate: 6 measured point(s), 6 call(s) to simulate; ")
    assert err[-1] == f"simcoll: wrote {tmp_path / 'p.toml'}"


def test_the_printed_median_is_that_of_the_written_residuals_and_of_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 41: calibrate printed 12.4 % (the upper of its 14 errors' middle two), where
    # the residuals it wrote have a median of 9.97 % and compare printed 10.0 %
    misses = [0.05, -0.03, 0.08, -0.06, 0.02, -0.01]
    params = tmp_path / "p.toml"
    assert main(["calibrate", runs(tmp_path, 0.9, misses), *BARE, "-o", str(params)]) == 0
    printed = re.search(r"\|error\| median (\d+\.\d) %", capsys.readouterr().out)
    assert printed
    written = tomllib.loads(params.read_text())
    errors = sorted(abs(row["error"]) for row in written["residuals"])
    by_hand = (errors[2] + errors[3]) / 2  # six points: the mean of the middle two
    assert written["fit"]["median_abs_error"] == pytest.approx(by_hand, rel=1e-12)
    assert printed.group(1) == f"{100 * by_hand:.1f}"
    assert main(["compare", runs(tmp_path, 0.9, misses), *BARE[:6], "--params",
                 str(params)]) == 0  # fmt: skip
    every = next(line for line in capsys.readouterr().out.splitlines() if "  all  " in line)
    medians = re.findall(r"(\d+\.\d) %", every)  # mean, median, max, busbw median
    assert medians[1] == printed.group(1)


def test_values_on_a_bound_are_named_on_stderr_and_in_the_written_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 41: efficiency.nvlink = 1, step_latency_s.nvlink = 0, launch_s = 0 were not
    # flagged. Measured faster than the wire (efficiency 1.25): the fit stops at 1.
    params = tmp_path / "p.toml"
    assert main(["calibrate", runs(tmp_path, 1.25), *BARE, "-o", str(params)]) == 0
    captured = capsys.readouterr()
    assert "  efficiency.net = 1\n" in captured.out
    note = "efficiency.net = 1 is at its upper bound 1"
    assert f"simcoll: note: {note}\n" in captured.err
    assert tomllib.loads(params.read_text())["fit"]["at_bounds"] == [note]


def test_an_output_that_cannot_be_written_is_refused_before_the_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 41: `calibrate -o /proc/x.toml` failed only after the whole fit
    assert main(["calibrate", runs(tmp_path, 0.9), *BARE, "-o", "/proc/x.toml"]) == 2
    error = "cannot write a file in /proc: No such file or directory"
    assert capsys.readouterr().err == f"simcoll: error: -o /proc/x.toml: {error}\n"
    # and what simcoll did not write is never overwritten, before the fit as well
    mine = tmp_path / "mine.toml"
    mine.write_text("x = 1\n")
    assert main(["calibrate", runs(tmp_path, 0.9), *BARE, "-o", str(mine)]) == 2
    assert capsys.readouterr().err == (
        f"simcoll: error: -o {mine}: exists and was not written by simcoll; will not overwrite "
        "it (remove it or choose another name)\n"
    )
    assert mine.read_text() == "x = 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.toml", "runs.csv"]


@pytest.mark.parametrize("folder", ["/", "."])
def test_a_folder_named_as_measurements_is_one_line(
    folder: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 41: `calibrate /` raised ValueError ('/' has an empty name) from the sidecar's
    # path, before reading the measurements refused the folder as compare does
    out = str(tmp_path / "p.toml")
    assert main(["calibrate", folder, *BARE, "-o", out]) == 2
    assert capsys.readouterr().err == f"simcoll: error: {folder}: is a directory, not a file\n"
    assert main(["compare", folder, "--topology", STAR]) == 2
    assert capsys.readouterr().err == f"simcoll: error: {folder}: is a directory, not a file\n"


V100_TABLE = PUBLIC / "nccl_allreduce_8xV100_oci_bmgpu38_ocitutorials.csv"
V100_LOG = REPO / "validation/data/nccl-tests-logs" / V100_TABLE.with_suffix(".log").name


@pytest.mark.parametrize(
    ("kind", "time", "message"),
    [
        ("table", "1e300", "line 2: time_us_oop: got 1e300 us (1e+294 s), more than a day "
         "(86400 s) for one call; is it in other units?"),
        ("table", "nan", "line 2: time_us_oop: not a finite number: 'nan'"),
        ("table", "-5", "line 2: time_us_oop: must be positive, got -5"),
        ("table", "0", "line 2: time_us_oop: must be positive, got 0"),
        ("log", "1e300", "line 16: out-of-place time: got 1e300 us (1e+294 s), more than a day "
         "(86400 s) for one call; is it in other units?"),
        ("csv", "1e300", "line 2: time_s: got 1e+300, more than a day (86400 s) for one call; "
         "is it in other units?"),
        ("csv", "nan", "line 2: time_s: not a finite number: 'nan'"),
        ("csv", "0", "line 2: time_s: must be positive, got 0.0"),
    ],
)  # fmt: skip
def test_a_time_no_call_takes_is_refused_naming_the_file_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, time: str, message: str
) -> None:
    # issue 41: calibrate on a file with a 1e300 us time did not name the file
    if kind == "table":  # 1 GiB on 8 V100: 13867 us out of place
        bad = tmp_path / "nccl_allreduce_8xV100.csv"
        bad.write_text(V100_TABLE.read_text().replace(",13867,", f",{time},", 1))
    elif kind == "log":
        bad = tmp_path / "nccl_allreduce_8xV100.log"
        bad.write_text(V100_LOG.read_text().replace(" 13867 ", f" {time} ", 1))
    else:
        bad = tmp_path / "runs.csv"
        bad.write_text(f"collective,n_ranks,size_bytes,time_s\nallreduce,8,1024,{time}\n")
    assert bad.read_text().count(time) >= 1
    command = ["calibrate", str(bad), "--topology", "topologies/dgx1-v100.toml", "--collective",
               "allreduce", "--ranks", "8", "-o", str(tmp_path / "p.toml")]  # fmt: skip
    assert main(command) == 2
    assert capsys.readouterr().err == f"simcoll: error: {bad}: {message}\n"


@pytest.mark.parametrize("command", ["calibrate", "compare"])
def test_more_ranks_than_gpus_is_refused_before_any_estimate_with_the_set_that_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # issue 41: the 8 x 8 H100 table on the file's default 4 nodes estimated "about 0 ns"
    # before its error, and the error did not say --set n_nodes=8
    table = PUBLIC / "nccl_allreduce_8x8xH100_ndr_nccltests309_gjaion.csv"
    n_ranks, per_node = 8 * 8, 8  # the file's name: 8 servers of 8 H100
    out = ["-o", str(tmp_path / "p.toml")] if command == "calibrate" else []
    assert main([command, str(table), "--topology", "topologies/h100-ib-fat-tree.toml",
                 "--collective", "allreduce", *out]) == 2  # fmt: skip
    assert capsys.readouterr().err == (
        f"simcoll: error: {table}: runs on {n_ranks} ranks, but topologies/h100-ib-fat-tree.toml "
        f"has 32 GPUs (4 nodes of {per_node}); pass --set n_nodes={n_ranks // per_node} "
        f"({n_ranks} ranks / {per_node} GPUs per node)\n"
    )
    # a file without that parameter (one DGX H100) gets no --set to try
    assert main([command, str(table), "--topology", "topologies/dgx-h100.toml",
                 "--collective", "allreduce", *out]) == 2  # fmt: skip
    assert capsys.readouterr().err == (
        f"simcoll: error: {table}: runs on {n_ranks} ranks, but topologies/dgx-h100.toml has 8 "
        f"GPUs (1 node of 8); give a topology of at least {n_ranks} GPUs\n"
    )


def test_an_empty_params_file_is_refused_by_compare(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    # Issue 41: an empty --params file was taken as no parameters (the bare links).
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    status = main(["compare", runs(tmp_path, 0.9), *BARE[:2], "--params", str(empty)])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert err.startswith(f"simcoll: error: --params {empty}: sets no parameter")
    assert "\n" not in err


@pytest.mark.parametrize("command", ["calibrate", "compare"])
def test_the_help_examples_run_from_any_folder(command, tmp_path, monkeypatch, capsys):  # type: ignore[no-untyped-def]
    # Issue 41: compare --help's example named a file the wheel does not ship. The
    # examples now name shipped measurements and topologies, found by name from anywhere.
    with pytest.raises(SystemExit):
        main([command, "--help"])
    examples = " ".join(capsys.readouterr().out.split()).split("found by name): simcoll ")[1]
    monkeypatch.chdir(tmp_path)
    for example in examples.split("; simcoll "):  # calibrate's second: a P2P matrix
        words = example.split(" (")[0].split(" ")
        assert words[0] == command
        assert main(words) == 0, capsys.readouterr().err


def _log_on(hosts: list[str], path: Path) -> Path:
    """An nccl-tests log of a 2-size all-reduce whose rank r ran on ``hosts[r]``."""
    from simcoll.calibrate.measurements import Measurement  # noqa: PLC0415
    from simcoll.calibrate.nccltests.write import LogHeader, format_log  # noqa: PLC0415

    n = len(hosts)
    rows = [(Measurement(collective="allreduce", n_ranks=n, size_bytes=s, time_s=s / 2e11,
                         in_place=False),
             Measurement(collective="allreduce", n_ranks=n, size_bytes=s, time_s=s / 2e11,
                         in_place=True))
            for s in (2**26, 2**27)]  # fmt: skip
    text = format_log(rows, collective="allreduce", n_ranks=n,
                      header=LogHeader(hosts=tuple(dict.fromkeys(hosts)), n_gpus=1))  # fmt: skip
    lines = text.splitlines() if isinstance(text, str) else list(text)
    rank_lines = [i for i, line in enumerate(lines) if re.match(r"#\s+Rank\s+\d", line)]
    for rank, i in enumerate(rank_lines):  # each rank on the host asked for
        lines[i] = re.sub(r" on +\S+ ", f" on {hosts[rank]:>10} ", lines[i])
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_log_is_simulated_on_the_servers_its_ranks_ran_on(tmp_path, capsys):
    # 2 servers of 4 ranks each (mpirun -N 4): on a topology of 8-GPU servers the ranks go
    # on the first 4 GPUs of each (per-server:4), as predict --placement per-server:4 puts
    # them, and stderr says so; simulated as one full server of 8 they would time another
    # machine.
    from simcoll.prediction import predict  # noqa: PLC0415
    from simcoll.topology import load  # noqa: PLC0415

    log = _log_on(["a"] * 4 + ["b"] * 4, tmp_path / "nccl_allreduce_2x4.log")
    fat_tree = str(REPO / "topologies/h100-ib-fat-tree.toml")
    out = tmp_path / "cmp"
    args = ["compare", str(log), "--topology", fat_tree, "--set", "n_nodes=2", "--out", str(out)]
    assert main(args) == 0
    err = capsys.readouterr().err
    note = (f"simcoll: note: {log}: its 8 ranks ran on 2 hosts of 4 (its 'Rank ... on HOST' "
            "lines): simulated so, on the first 4 GPUs of each server (per-server:4)")  # fmt: skip
    assert note in err
    with (out / "points.csv").open() as handle:
        simulated = {int(r["size_bytes"]): float(r["simulated_s"]) for r in csv.DictReader(handle)}
    rows = predict(load(fat_tree, {"n_nodes": "2"}), "allreduce", sorted(simulated),
                   placement="per-server:4").rows  # fmt: skip
    assert {r.size_bytes: r.time_s for r in rows} == pytest.approx(simulated, rel=1e-12)
    # one 8-GPU server cannot hold 2 servers' ranks; ranks dealt round-robin over the hosts
    # fit no such placement: both refused in one line
    dgx = str(REPO / "topologies/dgx-h100.toml")
    assert main(["compare", str(log), "--topology", dgx]) == 2
    assert capsys.readouterr().err == (
        f"simcoll: error: {log}: its 8 ranks ran on 2 hosts of 4 (its 'Rank ... on HOST' "
        f"lines); {dgx} puts them on 1 server of 8; give a topology whose servers hold the "
        "ranks as the run did\n"
    )
    dealt = _log_on(["a", "b"] * 4, tmp_path / "nccl_allreduce_dealt.log")
    assert main(["compare", str(dealt), "--topology", fat_tree, "--set", "n_nodes=2"]) == 2
    assert "ran on 2 hosts of 4" in capsys.readouterr().err
    # the shipped 2-server log places as simulated, with no note
    logs = REPO / "validation/data/nccl-tests-logs"
    shipped = logs / "nccl_allreduce_2x8xH100_ndr_nccltests309_qoofyk.log"
    assert main(["compare", str(shipped), "--topology", fat_tree, "--set", "n_nodes=2"]) == 0
    assert "note" not in capsys.readouterr().err
