"""Tests of simcoll.core.files: inputs only from bounded regular files, outputs written whole
and never over what simcoll did not write (issue 17, items 11, 15 and 19)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from simcoll.calibrate.read import read_measurements
from simcoll.cli import main
from simcoll.core.errors import ConfigError
from simcoll.core.files import check_nesting, read_input_bytes, write_output
from simcoll.scenarios.scenario import load_scenario
from simcoll.topology.calibration import read_calibration
from simcoll.topology.io import load

LOADERS: dict[str, Callable[[Path], object]] = {
    "topology": load,
    "scenario": load_scenario,
    "measurements": read_measurements,
    "params": read_calibration,
}


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.toml"
    os.mkfifo(path)  # nobody writes to it: reading it would wait forever
    return path


@pytest.mark.parametrize("loader", LOADERS)
def test_a_fifo_is_refused_not_waited_on(fifo: Path, loader: str) -> None:
    with pytest.raises(ConfigError) as info:
        LOADERS[loader](fifo)
    assert str(info.value) == f"{fifo}: is a FIFO, not a regular file"


@pytest.mark.parametrize("loader", LOADERS)
def test_dev_zero_is_refused_not_read(loader: str) -> None:
    with pytest.raises(ConfigError) as info:
        LOADERS[loader](Path("/dev/zero"))
    assert str(info.value) == "/dev/zero: is a device, not a regular file"


def test_a_file_over_the_cap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    path.write_bytes(b"#" * 1001)
    with pytest.raises(ConfigError) as info:
        read_input_bytes(path, max_bytes=1000)
    assert str(info.value) == f"{path}: is 1001 bytes, over the 0 MiB limit of an input file"
    assert read_input_bytes(path, max_bytes=1001) == b"#" * 1001


def test_a_big_scenario_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_bytes(b"#" * (2**20 + 1))
    with pytest.raises(ConfigError, match=r"is 1048577 bytes, over the 1 MiB limit"):
        load_scenario(path)


def test_cli_names_the_special_file(capsys: pytest.CaptureFixture[str], fifo: Path) -> None:
    assert main(["topo", "show", str(fifo)]) == 2
    assert capsys.readouterr().err == f"simcoll: error: {fifo}: is a FIFO, not a regular file\n"
    assert main(["run", "/dev/zero"]) == 2
    assert capsys.readouterr().err == "simcoll: error: /dev/zero: is a device, not a regular file\n"


DEEP = 600


@pytest.mark.parametrize(
    ("loader", "name", "text"),
    [
        ("topology", "t.toml", "schema = 1\nx = " + "[" * DEEP + "]" * DEEP + "\n"),
        ("topology", "t.toml", "schema = 1\nx = " + "{a = " * DEEP + "1" + "}" * DEEP + "\n"),
        ("topology", "t.json", "[" * DEEP + "]" * DEEP),
        ("topology", "t.json", "[" * 5000 + "]" * 5000),
        ("scenario", "s.toml", "schema = 1\nx = " + "[" * DEEP + "]" * DEEP + "\n"),
        ("params", "p.toml", "x = " + "[" * DEEP + "]" * DEEP + "\n"),
    ],
)
def test_deep_nesting_is_one_line(tmp_path: Path, loader: str, name: str, text: str) -> None:
    # issue 17 item 15: 600 levels raised RecursionError
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        LOADERS[loader](path)
    assert str(info.value) == f"{path}: tables and lists nest more than 64 levels deep"


def test_a_deep_sidecar_is_one_line(tmp_path: Path) -> None:
    runs = tmp_path / "runs.csv"
    runs.write_text("collective,n_ranks,size_bytes,time_s\nallreduce,2,8,1e-5\n")
    sidecar = tmp_path / "runs.json"
    for text in ("[" * DEEP + "]" * DEEP, '{"a": ' * 5000 + "1" + "}" * 5000):
        sidecar.write_text(text)
        with pytest.raises(ConfigError) as info:
            read_measurements(runs)
        assert str(info.value) == f"{sidecar}: tables and lists nest more than 64 levels deep"


def test_check_nesting_counts_without_recursion() -> None:
    value: object = 1
    for _ in range(100_000):
        value = [value]
    with pytest.raises(ConfigError, match="nest more than 64 levels"):
        check_nesting(value, source="x")
    check_nesting([[[1]]], source="x", limit=3)


def test_a_failed_write_names_the_file_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 17 item 19: "simcoll: error: : No space left on device", and a .tmp left behind
    target = tmp_path / "out.txt"

    def full(fd: int) -> None:  # a full disk shows when the data are flushed
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ConfigError) as info:
        write_output(target, "x" * 100_000, mark=None)
    monkeypatch.undo()
    assert str(info.value) == f"{target}: cannot write: No space left on device"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_text("mine"), "exists and was not written by simcoll"),
        (lambda p: p.mkdir(), "is a directory; give a file name"),
        (os.mkfifo, "is a FIFO; simcoll writes only plain files"),
        (lambda p: p.symlink_to(p.parent / "elsewhere"), "is a symbolic link"),
    ],
)
def test_an_output_is_never_written_over_what_simcoll_did_not_write(
    tmp_path: Path, make: Callable[[Path], object], message: str
) -> None:
    target = tmp_path / "out.txt"
    make(target)
    with pytest.raises(ConfigError, match=message):
        write_output(target, "simcoll's", mark=b"simcoll")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_an_output_that_is_an_input_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "in.toml"
    source.write_text("simcoll: this one is marked")
    with pytest.raises(ConfigError) as info:
        write_output(tmp_path / "." / "in.toml", "x", mark=b"simcoll", inputs=[source])
    assert "is an input of this command" in str(info.value)
    assert source.read_text() == "simcoll: this one is marked"
