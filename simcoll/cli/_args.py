"""What every subcommand's parser shares: one-line usage errors, and argument types."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn, TypeAlias

import networkx as nx

from simcoll.topology.calibration import Calibration, foreign_parameters
from simcoll.topology.whatif import degrade, fail, parse_degrade

__all__ = [
    "Parser",
    "SubParsers",
    "add_what_if",
    "positive_int",
    "positive_int_at_most",
    "warn_foreign",
    "what_if",
]


class Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line (and name the subcommand)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def positive_int_at_most(maximum: int) -> Callable[[str], int]:
    """An argparse type: a positive integer of at most ``maximum``.

    >>> positive_int_at_most(64)("65")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a positive integer of at most 64, got 65
    """

    def parse(text: str) -> int:
        value = positive_int(text)
        if value > maximum:
            raise argparse.ArgumentTypeError(
                f"expected a positive integer of at most {maximum}, got {value}"
            )
        return value

    return parse


#: What ``add_parser`` is called on (a string: argparse's class is not subscriptable at run time).
SubParsers: TypeAlias = "argparse._SubParsersAction[Parser]"


def warn_foreign(calibration: Calibration, topology: nx.DiGraph[str], params: str,
                 name: str) -> None:  # fmt: skip
    """Say on stderr when ``--params`` calibrates no link of the topology (another
    machine's file: every link stays bare)."""
    foreign = foreign_parameters(calibration, topology)
    if foreign:
        kinds = sorted({attrs["kind"].value for _, _, attrs in topology.edges(data=True)})
        print(f"simcoll: warning: --params {params}: {', '.join(foreign)} apply to no link "
              f"of {name} (its links: {', '.join(kinds)}); its links stay bare: is it "
              "another machine's file?", file=sys.stderr)  # fmt: skip


def add_what_if(p: argparse.ArgumentParser) -> None:
    """``--degrade`` and ``--fail``: what-if changes to the topology once it is loaded."""
    p.add_argument("--degrade", metavar="TARGET=FACTOR", action="append", default=[],
                   help="run links at FACTOR (0 < FACTOR <= 1) of their bandwidth; TARGET is a "
                   "link kind (nvlink, pcie, cpu_link, ib, ethernet), a link A-B (both "
                   "directions) or a node (all its links) (repeatable)")  # fmt: skip
    p.add_argument("--fail", metavar="TARGET", action="append", default=[],
                   help="remove a link A-B (both directions), a node's links, or every link "
                   "of a kind; refused if a GPU could then not reach another "
                   "(repeatable)")  # fmt: skip


def what_if(topology: nx.DiGraph[str], args: argparse.Namespace) -> nx.DiGraph[str]:
    """``topology`` with the ``--degrade`` and ``--fail`` of ``args`` applied, in order."""
    for item in getattr(args, "degrade", []):
        topology = degrade(topology, *parse_degrade(item))
    for target in getattr(args, "fail", []):
        topology = fail(topology, target)
    return topology
