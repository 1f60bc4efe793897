"""``simcoll topo show|draw|dump TOPOLOGY``: inspect a topology without simulating."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from simcoll.cli._args import Parser, SubParsers
from simcoll.core.errors import ConfigError
from simcoll.core.files import check_output, write_output
from simcoll.output.plot import PNG_MARK
from simcoll.topology import load, parse_overrides
from simcoll.topology.inspect import report
from simcoll.topology.io import source_files
from simcoll.topology.nodelink import to_node_link

__all__ = ["add_topo"]

_TOPO_EXAMPLES = """examples:
  simcoll topo show topologies/dgx-a100.toml
  simcoll topo show topologies/dgx-a100.toml --set n_gpus=4
  simcoll topo draw topologies/h100-ib-fat-tree.toml -o fabric.png
  simcoll topo dump topologies/dgx-a100.toml -o dgx-a100.json"""
_SHOW_HELP = """\
Print a topology's summary: nodes and directed links by kind, each link group's
bandwidth (GB/s = 1e9 B/s, per direction) and latency (us), the switches that reduce
in the network, the bisection bandwidth (GB/s: the max flow from the GPUs of ranks
0..n/2-1 to the others, one direction) and, where the file gives it, the GPUs' memory
bandwidth (what out-of-place copies run at). Then the routed path between GPUs, as CUDA's
p2pBandwidthLatencyTest shows it: for up to 16 GPUs, GPU x GPU matrices of the path's
bottleneck bandwidth (GB/s) and latency (us); for more, classes of GPU pairs with the
same bandwidth, latency and hop count, from a sample of pairs to and from rank 0."""


def add_topo(sub: SubParsers) -> None:
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
    actions = topo.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
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
    draw.add_argument("-o", "--output", required=True, metavar="FILE.png",
                      help="the PNG file to write (not an existing file simcoll did not "
                      "write)")  # fmt: skip
    dump.add_argument("-o", "--output", metavar="FILE.json",
                      help="the JSON file to write (default: standard output; not an "
                      "existing file simcoll did not write)")  # fmt: skip


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

    _check_target(args, ".png")
    topology = load(args.topology, parse_overrides(args.set))
    print(f"simcoll: wrote {plot_topology(topology, args.output)}", file=sys.stderr)
    return 0


#: The first key of a dump: it marks the file as simcoll's (``load`` ignores it).
DUMP_MARK_KEY = "_written_by"
_DUMP_MARK = f'"{DUMP_MARK_KEY}": "simcoll topo dump"'.encode()


def _topo_dump(args: argparse.Namespace) -> int:
    if args.output is not None:
        _check_target(args, ".json")
    data = {DUMP_MARK_KEY: "simcoll topo dump", **to_node_link(load(args.topology,
            parse_overrides(args.set)))}  # fmt: skip
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        written = write_output(args.output, text, mark=_DUMP_MARK, inputs=_inputs(args),
                               what="-o")  # fmt: skip
        print(f"simcoll: wrote {written}", file=sys.stderr)
    return 0


def _check_target(args: argparse.Namespace, suffix: str) -> None:
    """Refuse ``-o`` before any work: a wrong suffix, an input, a file simcoll did not write."""
    name = str(args.output)
    if Path(name).suffix.lower() != suffix:
        raise ConfigError(f"must name a {suffix} file, got {name!r}", field="-o")
    mark = _DUMP_MARK if suffix == ".json" else PNG_MARK
    check_output(name, mark=mark, inputs=_inputs(args), what="-o")


def _inputs(args: argparse.Namespace) -> list[str]:
    """The files the command reads: the topology and what it names (its params file)."""
    try:
        return [str(f) for f in source_files(args.topology, parse_overrides(args.set))]
    except ConfigError:
        return [str(args.topology)]
