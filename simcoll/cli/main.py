"""The ``simcoll`` command line: parse, call the library, print. No logic lives here.

Errors simcoll raises on bad input are printed as one line, ``simcoll: error: ...``, and
the exit status is 2 (bad input) or 1 (a simulation that cannot finish).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from simcoll.algorithms import algorithm_names
from simcoll.cli.calibrate import add_calibrate, add_compare
from simcoll.cli.run import add_run
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, SimcollError, SimulationError
from simcoll.core.units import format_bytes
from simcoll.output.results import format_table, to_csv, to_json
from simcoll.prediction.pipeline import DEFAULT_ALGORITHM, align_size_bytes, parse_sizes, predict
from simcoll.topology import gpu_nodes, load, parse_overrides
from simcoll.topology.calibration import read_calibration
from simcoll.topology.inspect import report
from simcoll.topology.nodelink import dumps

__all__ = ["main"]

MODELS = ("flow", "ideal", "packet", "analytical", "nccl")
PROTOCOLS = ("auto", "simple", "LL", "LL128", "none")


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line (and name the subcommand)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="simcoll",
        description="Simulate GPU collective communication (NCCL-style algorithms) on a "
        "cluster topology, with link-level contention.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    p = sub.add_parser(
        "predict",
        help="predict a collective's time and bandwidth over message sizes",
        description="Simulate one collective over a range of message sizes on a topology "
        "and print an nccl-tests-style table (time in us, algbw and busbw in GB/s = 1e9 B/s).",
        epilog="example: simcoll predict topologies/dgx-a100.toml --collective allreduce "
        "--sizes 8:8G --plot allreduce.png",
    )
    p.add_argument("topology", metavar="TOPOLOGY", help="topology TOML file (see topologies/)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="override a builder parameter of the topology file, e.g. n_gpus=4 or "
                   "'link_bandwidth=100 GB/s' (repeatable)")  # fmt: skip
    p.add_argument("--collective", required=True, metavar="NAME",
                   help="one of: " + ", ".join(c.value for c in Collective))  # fmt: skip
    p.add_argument(
        "--algorithm",
        metavar="NAME|auto",
        default=None,
        help=f"algorithm (default: {DEFAULT_ALGORITHM} where the collective has it, "
        "else direct); 'auto' simulates NCCL's algorithms (ring, tree, nvls, sharp) where "
        "the topology can run them and keeps the fastest per size; 'all' tries every one",
    )
    p.add_argument("--protocol", metavar="NAME|auto", default="auto",
                   help="NCCL protocol: LL (half the wire is data, lowest per-step latency), "
                   "LL128 (120 of 128 bytes), simple (full bandwidth, highest per-step "
                   "latency), 'auto' (default: the fastest per size), or 'none' (the links "
                   "alone, no protocol cost)")  # fmt: skip
    p.add_argument(
        "--model",
        default="flow",
        metavar="NAME",
        help="fidelity: 'flow' (default: fluid flows with max-min fair sharing of "
        "every link), 'ideal' (no contention: each flow at its route's bottleneck), "
        "'packet' (store-and-forward 4 KiB packets hop by hop; slow, for small checks), "
        "'analytical' (alpha-beta closed form per algorithm, instant) or 'nccl' (NCCL's "
        "own tuning model, a baseline; ring, tree and nvls)",
    )
    p.add_argument(
        "--sizes",
        default="8:8G",
        metavar="MIN:MAX[:F] | A,B,...",
        help="message sizes in bytes, nccl-tests convention (default 8:8G: powers "
        "of 2 from 8 B to 8 GiB); bare K/M/G are binary, '1 GB' is 10^9",
    )
    p.add_argument(
        "--ranks",
        type=_positive_int,
        metavar="N",
        help="number of ranks, on GPUs 0..N-1 (default: every GPU of the topology)",
    )
    p.add_argument("--channels", type=_positive_int, metavar="N",
                   help="parallel channels (default 1)")  # fmt: skip
    p.add_argument(
        "--chunks",
        type=_positive_int,
        metavar="N",
        help="pipelined chunks per channel and block (default 1)",
    )
    p.add_argument(
        "--window",
        type=_positive_int,
        metavar="N",
        help="transfers in flight per connection (default 8, NCCL's step slots)",
    )
    p.add_argument(
        "--root",
        type=int,
        metavar="RANK",
        help="root rank of broadcast, reduce, gather, scatter (default 0)",
    )
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="output format (default table)")  # fmt: skip
    p.add_argument(
        "--plot",
        metavar="PNG",
        type=Path,
        help="also write a plot of bus bandwidth against size to this PNG file",
    )
    p.add_argument("--params", type=Path, metavar="PARAMS.toml",
                   help="calibration from `simcoll calibrate` to simulate with")  # fmt: skip
    p.set_defaults(run=_predict)
    _add_topo(sub)
    add_run(sub)
    add_calibrate(sub)
    add_compare(sub)
    _add_bench(sub)
    return parser


def _add_bench(sub: argparse._SubParsersAction[_Parser]) -> None:
    from simcoll.scenarios.bench import CASES  # noqa: PLC0415 - the suite's table, for --help

    cases = "\n".join(
        f"  {c.name:<14} {c.description}"
        + (f" (target < {c.target_wall_s:g} s)" if c.target_wall_s else "")
        for c in CASES
    )
    bench = sub.add_parser(
        "bench",
        help="run the fixed speed and scale suite (ranks, transfers, events, wall s, memory)",
        description="Run simcoll's benchmark suite on this machine, each case in its own "
        "process, and print per case: ranks, transfers of the whole schedule, transfers "
        "simulated (representatives on the exact symmetric path), events (distinct "
        "simulated instants), simulated time (ms), wall time (s), events per second, peak "
        "memory (MiB), busbw (GB/s = 1e9 B/s), the path taken and the wall-time target. "
        "Rows print as cases finish; a case past --timeout-s is stopped and reported.",
        epilog=f"cases:\n{cases}\n\nexample: simcoll bench --cases ring-8,ring-1024",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("--cases", type=_case_names, metavar="NAME,...",
                       help="run only these cases (default: all)")  # fmt: skip
    bench.add_argument("--timeout-s", type=_positive_int, default=600, metavar="S",
                       help="stop a case after S seconds of wall time (default 600)")  # fmt: skip
    bench.add_argument("--format", choices=("table", "csv", "json"), default="table",
                       help="output format (default table)")  # fmt: skip
    bench.set_defaults(run=_bench)


def _case_names(text: str) -> list[str]:
    from simcoll.scenarios.bench import CASES  # noqa: PLC0415

    names = [n.strip() for n in text.split(",") if n.strip()]
    valid = [c.name for c in CASES]
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown case {', '.join(unknown) or repr(text)}; valid: {', '.join(valid)}"
        )
    return names


def _bench(args: argparse.Namespace) -> int:
    from simcoll.scenarios.bench import print_rows, run_bench  # noqa: PLC0415

    rows = print_rows(run_bench(args.cases, timeout_s=args.timeout_s), args.format)
    return 0 if all(r.status == "ok" for r in rows) else 1


_TOPO_EXAMPLES = """examples:
  simcoll topo show topologies/dgx-a100.toml
  simcoll topo show topologies/dgx-a100.toml --set n_gpus=4
  simcoll topo draw topologies/h100-ib-fat-tree.toml -o fabric.png
  simcoll topo dump topologies/dgx-a100.toml -o dgx-a100.json"""
_SHOW_HELP = """\
Print a topology's summary: nodes and directed links by kind, each link group's
bandwidth (GB/s = 1e9 B/s, per direction) and latency (us), the switches that reduce
in the network, and the bisection bandwidth (GB/s: the max flow from the GPUs of ranks
0..n/2-1 to the others, one direction). Then the routed path between GPUs, as CUDA's
p2pBandwidthLatencyTest shows it: for up to 16 GPUs, GPU x GPU matrices of the path's
bottleneck bandwidth (GB/s) and latency (us); for more, classes of GPU pairs with the
same bandwidth, latency and hop count, from a sample of pairs to and from rank 0."""


def _add_topo(sub: argparse._SubParsersAction[_Parser]) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    topo = sub.add_parser(
        "topo",
        help="inspect a topology: print its summary, draw it, or dump it as JSON",
        description="Inspect a topology without simulating: 'show' prints its summary "
        "(bandwidths in GB/s = 1e9 B/s, per direction; latencies in us), 'draw' writes a "
        "PNG drawing, 'dump' writes the resolved graph as node-link JSON (SI units: "
        "bytes/s, seconds).",
        epilog=_TOPO_EXAMPLES,
        formatter_class=raw,
    )
    actions = topo.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    show = actions.add_parser(
        "show",
        help="print counts, bandwidths, bisection, GPU pairs",
        description=_SHOW_HELP,
        epilog="example: simcoll topo show topologies/dgx-a100.toml",
        formatter_class=raw,
    )
    draw = actions.add_parser(
        "draw",
        help="draw the topology in layers to a PNG file",
        description="Draw the topology in layers, from the bottom: GPUs, NVSwitches and "
        "PCIe switches, NICs, CPUs, then fabric switches by tier (leaf, spine, core). "
        "Each cable is one line, coloured by link kind (nvlink, pcie, ib, ...).",
        epilog="example: simcoll topo draw topologies/h100-ib-fat-tree.toml -o fabric.png",
    )
    dump = actions.add_parser(
        "dump",
        help="write the resolved graph as node-link JSON",
        description="Write the topology's graph, after the builder ran and --set applied, "
        "as NetworkX node-link JSON: every node and directed link with its attributes, "
        "bandwidth_bytes_per_s in bytes per second (per direction) and latency_s in "
        "seconds, so a run's exact topology can be attached to a report and reloaded.",
        epilog="example: simcoll topo dump topologies/dgx-a100.toml -o dgx-a100.json",
    )
    for action, run in ((show, _topo_show), (draw, _topo_draw), (dump, _topo_dump)):
        _topology_args(action)
        action.set_defaults(run=run)
    draw.add_argument("-o", "--output", required=True, type=Path, metavar="FILE.png",
                      help="the PNG file to write")  # fmt: skip
    dump.add_argument("-o", "--output", type=Path, metavar="FILE.json",
                      help="the JSON file to write (default: standard output)")  # fmt: skip


def _topology_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topology", metavar="TOPOLOGY", help="topology file (see topologies/)")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                        help="override a builder parameter of the topology file, e.g. "
                        "n_gpus=4 or 'link_bandwidth=100 GB/s' (repeatable)")  # fmt: skip


def _topo_show(args: argparse.Namespace) -> int:
    print(report(load(args.topology, parse_overrides(args.set))))
    return 0


def _topo_draw(args: argparse.Namespace) -> int:
    from simcoll.output.plot import plot_topology  # noqa: PLC0415 - matplotlib only when asked

    topology = load(args.topology, parse_overrides(args.set))
    print(f"simcoll: wrote {plot_topology(topology, args.output)}", file=sys.stderr)
    return 0


def _topo_dump(args: argparse.Namespace) -> int:
    text = dumps(load(args.topology, parse_overrides(args.set))) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
        print(f"simcoll: wrote {args.output}", file=sys.stderr)
    return 0


def _checked_choices(args: argparse.Namespace) -> tuple[Collective, str]:
    collective = Collective.parse(args.collective)
    if args.model not in MODELS:
        raise ConfigError(f"unknown --model {args.model!r}; valid: {', '.join(MODELS)}")
    if args.protocol not in PROTOCOLS:
        raise ConfigError(f"unknown --protocol {args.protocol!r}; valid: {', '.join(PROTOCOLS)}")
    names = algorithm_names(collective)
    algorithm = args.algorithm or (DEFAULT_ALGORITHM if DEFAULT_ALGORITHM in names else "direct")
    if algorithm not in ("auto", "all") and algorithm not in names:
        raise ConfigError(f"{collective.value} has no algorithm {algorithm!r}; valid: "
                          f"{', '.join(names)}, auto, all")  # fmt: skip
    return collective, algorithm


def _predict(args: argparse.Namespace) -> int:
    collective, algorithm = _checked_choices(args)
    sizes, is_range = parse_sizes(args.sizes)
    topology = load(args.topology, parse_overrides(args.set))
    n_ranks = args.ranks or len(gpu_nodes(topology))
    if is_range:  # round like nccl-tests does; explicit sizes must divide as given
        sizes = sorted({align_size_bytes(collective, n_ranks, s) for s in sizes})
    params = {k: v for k, v in (("n_channels", args.channels), ("n_chunks", args.chunks),
              ("max_in_flight", args.window), ("root", args.root)) if v is not None}  # fmt: skip
    protocol = None if args.protocol == "none" else args.protocol
    calibration = read_calibration(args.params) if args.params else None
    result = predict(topology, collective, sizes, algorithm=algorithm, protocol=protocol,
                     model=args.model, n_ranks=n_ranks, params=params,
                     skip_too_small=is_range, calibration=calibration)  # fmt: skip
    title = (
        f"simcoll predict: {collective.value} on {args.topology}"
        f" ({topology.graph.get('description', '')})\n"
        f"{n_ranks} ranks, algorithm {algorithm}, protocol {args.protocol}, model {args.model}; "
        "simulated times, bandwidths in GB/s = 1e9 B/s"
    )
    if args.format == "csv":
        sys.stdout.write(to_csv(result.rows))
    elif args.format == "json":
        sys.stdout.write(to_json(result.rows))
    else:
        print(format_table(result.rows, title=title))
        if {"auto", "all"} & {algorithm, args.protocol} and result.rows:
            how = (
                "simulation" if args.model in ("flow", "ideal", "packet") else f"{args.model} model"
            )
            print(f"# Picked by {how}: {_picks(result.rows)}")
    if result.skipped:
        smallest = max(size for size, _ in result.skipped)
        print(f"simcoll: note: skipped {len(result.skipped)} sizes up to {smallest} B: "
              f"{result.skipped[-1][1]}", file=sys.stderr)  # fmt: skip
    if args.plot:
        _plot(args, result.rows, topology, collective)
    return 0


def _picks(rows: list) -> str:  # type: ignore[type-arg]
    """What auto chose, as size ranges: 'tree/LL for 8 B..64 KiB, ring/simple from 128 KiB'."""
    runs: list[tuple[str, int, int]] = []
    for row in rows:
        choice = f"{row.algorithm}/{row.protocol}"
        if runs and runs[-1][0] == choice:
            runs[-1] = (choice, runs[-1][1], row.size_bytes)
        else:
            runs.append((choice, row.size_bytes, row.size_bytes))
    parts = []
    for i, (choice, low, high) in enumerate(runs):
        if len(runs) == 1:
            parts.append(f"{choice} at every size")
        elif i == len(runs) - 1:
            parts.append(f"{choice} from {format_bytes(low)}")
        else:
            span = (
                format_bytes(low) if low == high else f"{format_bytes(low)}..{format_bytes(high)}"
            )
            parts.append(f"{choice} for {span}")
    return ", ".join(parts)


def _plot(args: argparse.Namespace, rows: list, topology: object, collective: Collective) -> None:  # type: ignore[type-arg]
    from simcoll.output.plot import plot_busbw_vs_size  # noqa: PLC0415 - matplotlib only when asked

    out = plot_busbw_vs_size(
        rows,
        args.plot,
        title=f"{collective.value} on {Path(args.topology).name}: "
        f"{rows[0].n_ranks if rows else 0} ranks, model {args.model}",
    )
    print(f"simcoll: wrote {out}", file=sys.stderr)


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
