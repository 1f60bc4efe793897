"""What every subcommand's parser shares: one-line usage errors, and argument types."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn, TypeAlias

__all__ = ["Parser", "SubParsers", "positive_int", "positive_int_at_most"]


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
