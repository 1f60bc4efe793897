"""What every subcommand's parser shares: one-line usage errors, and argument types."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn, TypeAlias

import networkx as nx

from simcoll.core.errors import ConfigError, SimcollError
from simcoll.topology import gpu_nodes, load
from simcoll.topology.calibration import Calibration, foreign_parameters, read_calibration
from simcoll.topology.whatif import degrade, fail, parse_degrade

__all__ = [
    "Parser",
    "SubParsers",
    "add_what_if",
    "positive_int",
    "positive_int_at_most",
    "read_params",
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


def read_params(params: str, topology: nx.DiGraph[str], name: str) -> Calibration:
    """The ``--params`` file: refused if it sets no parameter (an empty file is a
    mistake: ``--params none`` asks for the bare links), with a warning if it calibrates
    no link of the topology."""
    calibration = read_calibration(params)
    if not calibration.values:
        raise ConfigError("sets no parameter, so every link would stay bare (an empty "
                          "file?): give a file from `simcoll calibrate`, or --params none "
                          "for the bare links", field=f"--params {params}")  # fmt: skip
    warn_foreign(calibration, topology, params, name)
    return calibration


def add_what_if(p: argparse.ArgumentParser) -> None:
    """``--degrade`` and ``--fail``: what-if changes to the topology once it is loaded."""
    p.add_argument("--degrade", metavar="TARGET=FACTOR", action="append", default=[],
                   help="run links at FACTOR (0 < FACTOR <= 1) of their bandwidth; TARGET is a "
                   "link kind (nvlink, pcie, cpu_link, ib, ethernet), a link A-B (both "
                   "directions) or a node (all its links); node names may be shell "
                   "patterns: 'plane3.*' (a plane), 'agg3.*-core*' (pod 3's uplinks) "
                   "(repeatable)")  # fmt: skip
    p.add_argument("--fail", metavar="TARGET", action="append", default=[],
                   help="remove a link A-B (both directions), a node's links, or every link "
                   "of a kind, names as for --degrade ('spine7', 'plane0.core*'); refused if a "
                   "GPU could then not reach another (repeatable)")  # fmt: skip


def what_if(
    topology: nx.DiGraph[str], args: argparse.Namespace, gpus: Sequence[str] | None = None
) -> nx.DiGraph[str]:
    """``topology`` with the ``--degrade`` and ``--fail`` of ``args`` applied, in order; a
    failure is refused only if it parts two of ``gpus`` (the ranks' GPUs; default every
    GPU)."""
    for item in getattr(args, "degrade", []):
        topology = degrade(topology, *parse_degrade(item))
    for target in getattr(args, "fail", []):
        topology = fail(topology, target, gpus=gpus)
    return topology


def too_few_gpus(
    topology_file: str, overrides: Mapping[str, str], topology: nx.DiGraph[str], n_ranks: int
) -> str:
    """Why ``n_ranks`` ranks do not fit ``topology`` and what would ('' where they fit):
    its GPUs and servers, and the ``--set n_nodes=N`` that holds them where the file's
    builder takes one (N from the ranks and the GPUs per server, tried before it is
    suggested), else a topology of that many GPUs."""
    gpus = gpu_nodes(topology)
    if n_ranks <= len(gpus):
        return ""
    hosts = {topology.nodes[g].get("host") for g in gpus}
    per_node = len(gpus) // len(hosts) if None not in hosts and len(gpus) % len(hosts) == 0 else 0
    nodes = f"{len(hosts)} node{'s' * (len(hosts) != 1)}"
    shape = f" ({nodes} of {per_node})" if per_node else ""
    hint = f"; give a topology of at least {n_ranks} GPUs"
    if per_node:
        n_nodes = math.ceil(n_ranks / per_node)
        try:  # suggest the --set only where it loads and holds the ranks
            bigger = load(topology_file, {**overrides, "n_nodes": str(n_nodes)})
            fits = len(gpu_nodes(bigger)) >= n_ranks
        except SimcollError:
            fits = False
        if fits:
            hint = f"; pass --set n_nodes={n_nodes} ({n_ranks} ranks / {per_node} GPUs per node)"
    return f"{n_ranks} ranks, but {topology_file} has {len(gpus)} GPUs{shape}{hint}"
