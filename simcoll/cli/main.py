"""The ``simcoll`` command line: the parser of every subcommand, and the one place where
errors become one line and an exit status. Each subcommand lives in its own module.

Errors simcoll raises on bad input are printed as one line, ``simcoll: error: ...``, and
the exit status is 2 (bad input) or 1 (a simulation that cannot finish).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from simcoll.cli._args import Parser
from simcoll.cli.bench import add_bench
from simcoll.cli.calibrate import add_calibrate, add_compare
from simcoll.cli.predict import add_predict
from simcoll.cli.run import add_run
from simcoll.cli.topo import add_topo
from simcoll.core.errors import SimcollError, SimulationError

__all__ = ["main"]


def _build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="simcoll",
        description="Simulate GPU collective communication (NCCL-style algorithms) on a "
        "cluster topology, with link-level contention.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    add_predict(sub)
    add_topo(sub)
    add_run(sub)
    add_calibrate(sub)
    add_compare(sub)
    add_bench(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except SimulationError as error:
        print(f"simcoll: error: {error}", file=sys.stderr)
        return 1
    except SimcollError as error:
        print(f"simcoll: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"simcoll: error: {error.filename or ''}: {error.strerror}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("simcoll: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
