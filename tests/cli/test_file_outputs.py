"""Single-file outputs (``predict --plot``, ``topo draw -o``, ``topo dump -o``): exactly the
file named is written, and what simcoll did not write is never overwritten (issue 17,
item 8)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from simcoll.cli import main

REPO = Path(__file__).resolve().parents[2]
DGX = str(REPO / "topologies" / "dgx-a100.toml")
PREDICT = ["predict", DGX, "--collective", "allreduce", "--sizes", "1M", "--model", "analytical"]


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("adir", "--plot: must name a .png file, got 'adir'"),
        ("", "--plot: must name a .png file, got ''"),
        ("x.txt", "--plot: must name a .png file, got 'x.txt'"),
        ("/dev/full", "--plot: must name a .png file, got '/dev/full'"),
        ("adir.png", "--plot adir.png: is a directory; give a file name"),
        ("mine.png", "--plot mine.png: exists and was not written by simcoll; will not "
         "overwrite it (remove it or choose another name)"),
    ],
)  # fmt: skip
def test_predict_plot_refuses_in_one_line_and_writes_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    target: str,
    message: str,
) -> None:
    # it wrote adir.png, /dev/full.png or ./.png and printed another name; x.txt raised
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "adir.png").mkdir()
    (tmp_path / "mine.png").write_bytes(b"\x89PNG my picture")
    before = listing(tmp_path)
    assert main([*PREDICT, "--plot", target]) == 2
    assert capsys.readouterr().err == f"simcoll: error: {message}\n"
    assert listing(tmp_path) == before
    assert listing(tmp_path / "adir") == []
    assert (tmp_path / "mine.png").read_bytes() == b"\x89PNG my picture"


def test_predict_plot_says_exactly_what_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # the second run replaces the plot the first one wrote
        assert main([*PREDICT, "--plot", "busbw.png"]) == 0
        assert capsys.readouterr().err == "simcoll: wrote busbw.png\n"
    assert listing(tmp_path) == ["busbw.png"]
    assert (tmp_path / "busbw.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_topo_draw_refuses_an_unsupported_extension(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.foo"
    assert main(["topo", "draw", DGX, "-o", str(out)]) == 2
    assert capsys.readouterr().err == f"simcoll: error: -o: must name a .png file, got '{out}'\n"
    assert listing(tmp_path) == []


def test_topo_draw_and_dump_never_overwrite_what_they_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    photo, notes = tmp_path / "photo.png", tmp_path / "notes.json"
    photo.write_bytes(b"\x89PNG mine")
    notes.write_text('{"mine": true}')
    assert main(["topo", "draw", DGX, "-o", str(photo)]) == 2
    assert main(["topo", "dump", DGX, "-o", str(notes)]) == 2
    assert photo.read_bytes() == b"\x89PNG mine"
    assert notes.read_text() == '{"mine": true}'
    drawn, dumped = tmp_path / "t.png", tmp_path / "t.json"
    for _ in range(2):
        assert main(["topo", "draw", DGX, "-o", str(drawn)]) == 0
        assert main(["topo", "dump", DGX, "-o", str(dumped)]) == 0
    assert main(["topo", "dump", str(dumped), "-o", str(dumped)]) == 2
    assert capsys.readouterr().err.endswith(
        f"simcoll: error: -o {dumped}: is an input of this command ({dumped}); will not "
        "overwrite it\n"
    )
    assert main(["topo", "show", str(dumped)]) == 0  # the dump still loads


def test_a_plot_into_a_full_disk_names_the_file_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def full(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "replace", full)
    assert main([*PREDICT, "--plot", "p.png"]) == 2
    assert (
        capsys.readouterr().err == "simcoll: error: p.png: cannot write: No space left on device\n"
    )
    assert listing(tmp_path) == []


def test_no_output_replaces_the_params_file_its_topology_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 29: `calibrate -o calibration/dgx-a100.params.toml` beside its topology exited
    # 0 and replaced the params file the topology reads (298.99 GB/s at 1 GiB after, where
    # the file gives 221.68).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "calibration").mkdir()
    params = tmp_path / "calibration" / "dgx-a100.params.toml"
    params.write_bytes((REPO / "topologies/calibration/dgx-a100.params.toml").read_bytes())
    topology = tmp_path / "dgx-a100.toml"
    topology.write_bytes((REPO / "topologies/dgx-a100.toml").read_bytes())
    before = params.read_bytes()
    table = str(REPO / "validation/data/public/nccl_allreduce_8xA100_nvswitch_superbench.csv")
    assert main(["calibrate", table, "--topology", str(topology), "-o", str(params)]) == 2
    assert capsys.readouterr().err == (
        f"simcoll: error: -o {params}: is an input of this command ({params}); will not "
        "overwrite it\n"
    )
    assert params.read_bytes() == before
