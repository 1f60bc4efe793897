"""``python -m validation.testbed``: show, run and cleanup."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from simcoll.core.errors import ConfigError, SimcollError
from validation.testbed._system import (
    STATE_DIRS,
    cleanup_leftovers,
)
from validation.testbed.core import Testbed


def _format_rate(bytes_per_s: float) -> str:
    bits = bytes_per_s * 8
    if bits >= 1e9:
        return f"{bits / 1e9:.4g} Gbit/s"
    return f"{bits / 1e6:.4g} Mbit/s"


def _print_description(description: Mapping[str, Any], goodput: Mapping[str, Any] | None) -> None:
    ranks = description["ranks"]
    print(
        f"testbed {description['id']}: {description['topology']}, {len(ranks)} ranks,"
        f" subnet {description['subnet']}, ranks run {description['sched']}"
    )
    print(f"{'rank':>4}  {'namespace':<15} ip")
    for rank in ranks:
        print(f"{rank['rank']:>4}  {rank['namespace']:<15} {rank['ip']}")
    print(f"{'link':<24} {'interface':<15} {'requested':>13} {'tbf rate':>13} "
          f"{'latency':>9} applied")  # fmt: skip
    for link in description["links"]:
        shaped = link["shaped_rate_bit_per_s"]
        print(
            f"{link['link']:<24} {link['interface']:<15}"
            f" {_format_rate(link['bandwidth_bytes_per_s']):>13}"
            f" {_format_rate(shaped / 8) if shaped else '(none)':>13}"
            f" {link['latency_s'] * 1e6:>6.4g} us {'yes' if link['latency_applied'] else 'no'}"
        )
    print(f"latency: {description['latency_note']}")
    rtt = description["rtt"]
    if rtt is not None:
        print(
            f"native RTT rank 0 <-> rank 1: {rtt['median_s'] * 1e6:.1f} us median of"
            f" {rtt['samples']} TCP echo round trips (min {rtt['min_s'] * 1e6:.1f} us,"
            f" p90 {rtt['p90_s'] * 1e6:.1f} us)"
        )
    if goodput is not None:
        line = (
            f"TCP goodput rank 0 -> rank 1: {_format_rate(goodput['bytes_per_s'])} over"
            f" {goodput['seconds']:.2f} s"
        )
        if goodput.get("bottleneck_bytes_per_s"):
            share = goodput["bytes_per_s"] / goodput["bottleneck_bytes_per_s"]
            line += (
                f" ({share:.1%} of the slowest link's rate; the 1500-byte MTU allows"
                f" 1448/1514 = {1448 / 1514:.1%})"
            )
        print(line)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (and exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m validation.testbed",
        description=(
            "Emulate a simcoll topology with network namespaces (one per rank), Linux"
            " bridges (the switches, in one extra namespace) and tbf on every link"
            " direction. Needs root. Latency cannot be added where the kernel lacks netem;"
            " the native latency is measured instead."
        ),
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    show = commands.add_parser(
        "show",
        help="build, print links, rates, RTT and one flow's goodput, tear down",
        description="Build the testbed, print describe() as a table with the median TCP"
        " echo RTT rank 0 <-> rank 1 and the goodput of one TCP flow rank 0 -> rank 1,"
        " then tear it down.",
    )
    show.add_argument("topology", help="a topology TOML file (validation/topologies/...)")
    show.add_argument(
        "--duration-s", type=float, default=2.0, help="length of the goodput flow (default 2)"
    )
    run = commands.add_parser(
        "run",
        usage="%(prog)s [-h] [--timeout-s S] TOPOLOGY -- CMD [ARGS...]",
        help="build, run a command on every rank, tear down",
        description="Build the testbed, run CMD once per rank inside its namespace with"
        " RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and OMP_NUM_THREADS=1 set, print"
        " what each rank wrote (prefixed [rank N]), tear down.",
    )
    run.add_argument("topology", help="a topology TOML file")
    run.add_argument(
        "--timeout-s", type=float, default=600.0, help="kill all ranks after this (default 600)"
    )
    run.add_argument(
        "cmd", nargs="*", metavar="-- CMD ARGS", help="what each rank runs, after '--'"
    )
    cleanup = commands.add_parser(
        "cleanup",
        help="delete what state files of dead testbed processes list",
        description="Delete the namespaces and interfaces listed in leftover state files"
        f" ({', '.join(map(str, STATE_DIRS))}) whose owning process is gone, e.g. after"
        " kill -9. Live testbeds are left alone unless --force.",
    )
    cleanup.add_argument("--force", action="store_true", help="also tear down live testbeds")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status (2 on any error, printed as one line)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after the first '--' is the ranks' command, options and all
    cmd = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = _parser().parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    try:
        if args.command == "cleanup":
            removed = cleanup_leftovers(force=args.force)
            print(f"removed {', '.join(removed)}" if removed else "nothing to clean up")
        elif args.command == "show":
            with Testbed(args.topology) as bed:
                description = bed.describe()
                goodput = None
                if bed.world_size > 1:
                    goodput = bed.measure_goodput(0, 1, duration_s=args.duration_s)
                    goodput["bottleneck_bytes_per_s"] = bed.bottleneck_bytes_per_s(0, 1)
                _print_description(description, goodput)
        else:
            if args.cmd:
                raise ConfigError(f"put the command after '--': run TOPOLOGY -- {args.cmd[0]} ...")
            if not cmd:
                raise ConfigError("no command given; write: run TOPOLOGY -- CMD ARGS...")
            with Testbed(args.topology) as bed:
                results = bed.run_ranks(cmd, env={}, timeout_s=args.timeout_s)
            for result in results:
                for line in result.stdout.splitlines():
                    print(f"[rank {result.rank}] {line}")
                for line in result.stderr.splitlines():
                    print(f"[rank {result.rank}] {line}", file=sys.stderr)
    except (SimcollError, OSError) as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted; the testbed was torn down", file=sys.stderr)
        return 2
    return 0
