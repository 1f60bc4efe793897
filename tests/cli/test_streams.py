"""The command line and its standard output: closed (``>&-``) is one line, a pipe closed by
its reader (``| head -1``) ends quietly (issue 17, item 17); and scheduler addresses that
do not parse are one line (item 16)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from simcoll.cli import main
from simcoll.cli.main import BROKEN_PIPE_STATUS

REPO = Path(__file__).resolve().parents[2]
DGX = str(REPO / "topologies" / "dgx-a100.toml")
PREDICT = ["predict", DGX, "--collective", "allreduce", "--sizes", "1K:1M", "--model", "analytical"]
COMMANDS = {
    "table": PREDICT,
    "csv": [*PREDICT, "--format", "csv"],
    "json": [*PREDICT, "--format", "json"],
    "dump": ["topo", "dump", DGX],
    "bench": ["bench", "--cases", "ring-8", "--format", "csv"],
}


def simcoll(args: list[str], stdout: int | None) -> subprocess.Popen[bytes]:
    """``simcoll ARGS`` in a new process; ``stdout=None``: with standard output closed."""
    code = "import sys; from simcoll.cli import main; sys.exit(main())"
    argv = [sys.executable, "-c", code, *args]
    if stdout is None:  # as the shell runs `simcoll ... >&-`
        argv = ["sh", "-c", 'exec "$@" >&-', "sh", *argv]
    return subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, cwd=REPO)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_closed_stdout_is_one_line(command: str) -> None:
    # it raised AttributeError: 'NoneType' object has no attribute 'write'
    process = simcoll(COMMANDS[command], stdout=None)
    _, err = process.communicate(timeout=120)
    assert (process.returncode, err.decode()) == (
        2,
        "simcoll: error: standard output is closed; redirect it (> FILE or > /dev/null)\n",
    )


@pytest.mark.parametrize("command", ["table", "csv", "json", "dump"])
def test_a_pipe_closed_by_its_reader_ends_quietly(command: str) -> None:
    # it printed "simcoll: error: : Broken pipe" and exited 2
    process = simcoll(COMMANDS[command], stdout=subprocess.PIPE)
    assert process.stdout is not None
    process.stdout.close()  # the reader is gone before anything is written: | head -0
    _, err = process.communicate(timeout=120)
    assert (process.returncode, err.decode()) == (BROKEN_PIPE_STATUS, "")
    assert BROKEN_PIPE_STATUS == 141


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("foo", "'foo' names no host; expected tcp://HOST:PORT"),
        ("", "expected tcp://HOST:PORT, got ''"),
        ("tcp://[::1", "'tcp://[::1' has an IPv6 host without its closing ']'; expected "
         "tcp://HOST:PORT"),
        ("inproc://x", "'inproc://x' uses inproc://, which no other process reaches; expected "
         "tcp://HOST:PORT (or tls://)"),
        ("tcp://:8786", "'tcp://:8786' names no host; expected tcp://HOST:PORT"),
        ("tcp://host:99999", "'tcp://host:99999' has no port in 1..65535; expected "
         "tcp://HOST:PORT"),
    ],
)  # fmt: skip
def test_an_odd_scheduler_address_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], address: str, message: str
) -> None:
    # they raised ValueError or TypeError from distributed
    (tmp_path / "s.toml").write_text(
        f'schema = 1\n[topology]\nfile = "{DGX}"\n[workload]\ncollective = "allreduce"\n'
        '[sweep]\nsize_bytes = ["1 MiB"]\n'
    )
    argv = ["run", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o"), "--scheduler", address]
    assert main(argv) == 2
    assert capsys.readouterr().err.endswith(f"simcoll: error: --scheduler: {message}\n")
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize("command", ["table", "csv", "dump"])
def test_a_full_stdout_names_it(command: str) -> None:
    # Issue 29: `> /dev/full` said "No space left on device" without naming stdout.
    with open("/dev/full", "wb") as full:
        process = simcoll(COMMANDS[command], stdout=full.fileno())
        _, err = process.communicate(timeout=120)
    assert (process.returncode, err.decode()) == (
        2, "simcoll: error: standard output: No space left on device\n")  # fmt: skip
