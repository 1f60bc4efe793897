"""The ``simcoll`` command line: the parser of every subcommand, and the one place where
errors become one line and an exit status. Each subcommand lives in its own module.

Errors simcoll raises on bad input are printed as one line, ``simcoll: error: ...``, and
the exit status is 2 (bad input) or 1 (a simulation that cannot finish).
"""

from __future__ import annotations

import argparse
import errno
import io
import os
import signal
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import TextIO

from simcoll.cli._args import Parser
from simcoll.cli.bench import add_bench
from simcoll.cli.calibrate import add_calibrate, add_compare
from simcoll.cli.plan import add_plan
from simcoll.cli.predict import add_predict
from simcoll.cli.run import add_run
from simcoll.cli.step import add_step
from simcoll.cli.topo import add_topo
from simcoll.core.errors import SimcollError, SimulationError, one_line
from simcoll.core.shipped import shipped_names

__all__ = ["main"]


def _build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="simcoll",
        description="Simulate GPU collective communication (NCCL-style algorithms) on a "
        "cluster topology, with link-level contention. A TOPOLOGY or SCENARIO is a file, "
        f"or the name of a shipped one (topologies: {', '.join(shipped_names('topologies'))}; "
        f"scenarios: {', '.join(shipped_names('scenarios'))}).",
    )
    parser.add_argument("--version", action="version", version=f"simcoll {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    add_predict(sub)
    add_topo(sub)
    add_plan(sub)
    add_run(sub)
    add_calibrate(sub)
    add_compare(sub)
    add_step(sub)
    add_bench(sub)
    return parser


def _version() -> str:
    """The installed package's version (its metadata, from ``pyproject.toml``)."""
    try:
        return metadata.version("simcoll")
    except metadata.PackageNotFoundError:  # run from a tree that was never installed
        return "unknown (not installed)"


#: The exit status of a process that wrote into a pipe closed by its reader (128 +
#: SIGPIPE), as the shell reports for ``yes | head -1``.
BROKEN_PIPE_STATUS = 128 + signal.SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Standard output closed (``>&-``) is a one-line error; a pipe closed by its reader
    (``| head -1``) ends the command quietly, as other Unix tools end.
    """
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()
    parser = _build_parser()
    args = parser.parse_args(argv)
    _notice_compiling()
    real_stdout = sys.stdout
    sys.stdout = _NamedStdout(real_stdout)  # a full disk names standard output
    try:
        status = int(args.run(args))
        sys.stdout.flush()
        return status
    except _StdoutClosedError:
        print("simcoll: error: standard output is closed; redirect it (> FILE or > /dev/null)",
              file=sys.stderr)  # fmt: skip
        return 2
    except BrokenPipeError:
        _silence_stdout()
        return BROKEN_PIPE_STATUS
    except SimulationError as error:
        print(f"simcoll: error: {error}", file=sys.stderr)
        return 1
    except SimcollError as error:
        print(f"simcoll: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        where = f"{error.filename}: " if error.filename else ""
        if isinstance(error, _StdoutWriteError):
            _silence_stdout()
        # one line of at most 2,000 characters, as every error: a 100,000-character path
        # (ENAMETOOLONG) was echoed whole (issue 41)
        print(f"simcoll: error: {one_line(f'{where}{error.strerror or error}')}",
              file=sys.stderr)  # fmt: skip
        return 2
    except KeyboardInterrupt:
        print("simcoll: interrupted", file=sys.stderr)
        return 130
    finally:
        if isinstance(sys.stdout, _NamedStdout):
            sys.stdout = real_stdout


def _notice_compiling() -> None:
    """On a terminal, say so when the event loop is being compiled (its first run after
    install, 10-15 s of silence otherwise)."""
    from simcoll.network import kernel  # noqa: PLC0415 - numba loads with the network layer

    if sys.stderr is not None and sys.stderr.isatty():
        kernel.COMPILE_NOTICE = lambda: print(
            "simcoll: compiling the flow model's event loop (once after install, about "
            "15 s; cached after)", file=sys.stderr, flush=True)  # fmt: skip


class _StdoutWriteError(OSError):
    """Standard output refused what was written to it (a full disk: ``> /dev/full``)."""


class _NamedStdout(io.TextIOBase):
    """Standard output whose write errors name it (``standard output: No space left on
    device``), where the OS names no file."""

    def __init__(self, stream: TextIO | io.TextIOBase) -> None:
        self._stream = stream

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (BrokenPipeError, _StdoutClosedError):
            raise
        except OSError as error:
            raise _StdoutWriteError(error.errno, error.strerror, "standard output") from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (BrokenPipeError, _StdoutClosedError):
            raise
        except OSError as error:
            raise _StdoutWriteError(error.errno, error.strerror, "standard output") from None

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return self._stream.isatty()


class _StdoutClosedError(OSError):
    """Written to a standard output that the shell closed."""


class _ClosedStdout(io.TextIOBase):
    """What ``sys.stdout`` is when file descriptor 1 was closed: writing raises."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise _StdoutClosedError(errno.EBADF, "standard output is closed")


def _silence_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush of what is
    still buffered does not fail on the closed pipe as well."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, io.UnsupportedOperation):
        pass


if __name__ == "__main__":
    sys.exit(main())
