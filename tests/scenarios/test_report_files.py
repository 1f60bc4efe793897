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


def _scenario(y: str) -> object:
    from types import SimpleNamespace  # noqa: PLC0415

    return SimpleNamespace(axes=("tp",), output={"y": y, "x": "tp"})


def test_the_table_names_the_best_point_lowest_time_or_highest_rate() -> None:
    from simcoll.scenarios.report import _optimum  # noqa: PLC0415 - the table's last line

    rows = [{"tp": 2, "time_s": 2.0, "mfu": 0.5}, {"tp": 4, "time_s": 1.0, "mfu": 0.4}]
    assert _optimum(rows, _scenario("time_s")) == ["# lowest time_s: 1 s at tp=4"]  # type: ignore[arg-type]
    assert _optimum(rows, _scenario("mfu")) == ["# highest mfu: 0.5 at tp=2"]  # type: ignore[arg-type]


def test_the_best_point_is_one_that_fits_in_memory() -> None:
    from simcoll.scenarios.report import _optimum  # noqa: PLC0415 - the table's last line

    rows = [{"tp": 2, "mfu": 0.6, "fits_in_memory": 0.0},
            {"tp": 4, "mfu": 0.5, "fits_in_memory": 1.0}]  # fmt: skip
    assert _optimum(rows, _scenario("mfu")) == [  # type: ignore[arg-type]
        "# highest mfu: 0.5 at tp=4 (of the points that fit in memory)"]  # fmt: skip


def test_a_plot_with_nothing_to_draw_is_one_line_after_the_results(tmp_path: Path) -> None:
    # Issue 41: a scaling plot of 0-byte points (it leaves out size 0) raised ValueError
    # from matplotlib's side, a traceback, after results.csv was written.
    (tmp_path / "star.toml").write_text(STAR)
    data = {"schema": 1, "topology": {"file": "star.toml"},
            "workload": {"collective": "allreduce", "algorithm": "ring", "size_bytes": 0},
            "sweep": {"n_ranks": [2, 4]}, "output": {"plots": ["scaling"]}}  # fmt: skip
    result = run_sweep(parse_scenario(data, source="s", base=tmp_path), workers=1)
    assert [p.error for p in result.points] == [None, None]
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as info:
        write_report(result, out)
    assert str(info.value) == (
        "s: output.plots: cannot draw 'scaling' from these results: plot_scaling: no rows to plot"
    )
    assert (out / "results.csv").read_text().count("\n") == 3  # the results are there
