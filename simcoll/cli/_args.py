"""What every subcommand's parser shares: one-line usage errors, and argument types."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn, TypeAlias

import networkx as nx

from simcoll.topology.calibration import Calibration, foreign_parameters

__all__ = ["Parser", "SubParsers", "positive_int", "positive_int_at_most", "warn_foreign"]


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
