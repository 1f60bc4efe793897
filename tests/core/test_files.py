"""Tests of simcoll.core.files: inputs only from bounded regular files, outputs written whole
and never over what simcoll did not write (issue 17, items 11, 15 and 19)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from simcoll.calibrate.read import read_measurements
from simcoll.cli import main
from simcoll.core.errors import ConfigError
from simcoll.core.files import check_nesting, file_sha256, read_input_bytes, write_output
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


# -- every door a path comes in by answers a special file at once (issue 41) --------------

SPECIAL = {"/dev/zero": "is a device, not a regular file", "FIFO": "is a FIFO, not a regular file"}
STAR4 = """schema = 1
builder = "switch_star"
[params]
n_gpus = 4
link_bandwidth = "1 Gbit/s"
link_latency = "30 us"
"""
#: Scenarios that name the special file ``{path}`` by each door a run reads a path from.
DOORS = {
    "sweep axis": '[workload]\ncollective = "allgather"\nsize_bytes = 4096\n'
                  '[sweep]\n"topology.file" = ["{path}"]\n',
    "workload calibration": '[workload]\nkind = "ddp"\nn_layers = 4\ncalibration = "{path}"\n',
    "model file": '[workload]\nkind = "training_step"\ntransformer = "{path}"\n',
}  # fmt: skip


def _special(tmp_path: Path, kind: str) -> Path:
    if kind == "/dev/zero":
        return Path(kind)
    os.mkfifo(tmp_path / "pipe")  # nobody writes to it: reading it would wait forever
    return tmp_path / "pipe"


def _limited_to_4_gib() -> None:  # in the child: a regression reading /dev/zero stops there
    import resource  # noqa: PLC0415

    resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))


def _answer(argv: list[str], cwd: Path) -> str:
    """What a command printed; a hang fails (after 30 s) instead of hanging the tests."""
    done = subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=30, check=False, preexec_fn=_limited_to_4_gib)  # fmt: skip
    printed = done.stdout + done.stderr
    assert "Traceback" not in printed, printed
    return printed


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("kind", SPECIAL)
def test_a_run_answers_a_special_file_at_each_door_in_one_line(
    tmp_path: Path, door: str, kind: str
) -> None:
    # issue 41: "topology.file" = ["/dev/zero"] as a sweep axis, or a workload's
    # calibration = "/dev/zero", hung forever hashing it for the run's digest
    path = _special(tmp_path, kind)
    (tmp_path / "star4.toml").write_text(STAR4)
    scenario = 'schema = 1\n[topology]\nfile = "star4.toml"\n' + DOORS[door].format(path=path)
    (tmp_path / "s.toml").write_text(scenario)
    printed = _answer(["-m", "simcoll", "run", "s.toml", "--out", "out", "--workers", "1"],
                      tmp_path)  # fmt: skip
    assert f"failed: {path}: {SPECIAL[kind]}\n" in printed, printed
    assert "simcoll: 1 of 1 point(s) failed" in printed, printed


READERS = """import sys
from simcoll.core.files import file_sha256
from simcoll.training import read_model_file
from simcoll.training.trace import read_execution_trace, read_kineto_durations

for read in (read_model_file, read_execution_trace, read_kineto_durations):
    try:
        read(sys.argv[1])
    except Exception as error:
        print(f"{read.__name__}: {error}", flush=True)
print(f"file_sha256: {file_sha256(sys.argv[1])}")
"""


@pytest.mark.parametrize("kind", SPECIAL)
def test_model_and_trace_readers_and_the_digest_refuse_a_special_file(
    tmp_path: Path, kind: str
) -> None:
    path = _special(tmp_path, kind)
    printed = _answer(["-c", READERS, str(path)], tmp_path)
    assert printed.splitlines() == [
        f"read_model_file: {path}: {SPECIAL[kind]}",
        f"read_execution_trace: {path}: {SPECIAL[kind]}",
        f"read_kineto_durations: {path}: {SPECIAL[kind]}",
        f"file_sha256: unreadable: {SPECIAL[kind]}",
    ]


def test_the_digest_of_a_file_over_the_cap_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    path.write_bytes(b"#" * 1001)
    assert file_sha256(path, max_bytes=1000) == (
        "unreadable: is 1001 bytes, over the 0 MiB limit of an input file"
    )
    assert file_sha256(path, max_bytes=1001) == hashlib.sha256(b"#" * 1001).hexdigest()
    assert file_sha256(tmp_path / "none") == "unreadable: no such file"


@pytest.mark.parametrize("named_by", ["calibration", "base"])
@pytest.mark.parametrize("kind", SPECIAL)
def test_a_run_refuses_a_topologys_special_params_file_in_one_line(
    tmp_path: Path, named_by: str, kind: str
) -> None:
    # a topology's calibration (or a base its params file builds on) naming /dev/zero hung
    # `simcoll run` while it listed the files the topology reads
    path = _special(tmp_path, kind)
    params = path if named_by == "calibration" else tmp_path / "params.toml"
    (tmp_path / "params.toml").write_text(f'base = "{path}"\n')
    (tmp_path / "star4.toml").write_text(STAR4.replace("[params]", f'calibration = "{params}"\n'
                                                       "[params]"))  # fmt: skip
    scenario = 'schema = 1\n[topology]\nfile = "star4.toml"\n' + DOORS["sweep axis"].split(
        "[sweep]")[0]  # fmt: skip
    (tmp_path / "s.toml").write_text(scenario)
    printed = _answer(["-m", "simcoll", "run", "s.toml", "--out", "out", "--workers", "1"],
                      tmp_path)  # fmt: skip
    via = "" if named_by == "calibration" else f"{params}: base: "
    assert printed.endswith(
        f"simcoll: error: star4.toml: calibration: {via}{path}: {SPECIAL[kind]}\n"
    ), printed
