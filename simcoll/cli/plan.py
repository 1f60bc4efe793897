"""``simcoll plan show TOPOLOGY``: the channels, rings, trees and NICs NCCL would build, as
NCCL prints them, with the NIC use per channel and the channels NCCL uses per size."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import networkx as nx

from simcoll.cli._args import Parser, SubParsers, positive_int_at_most
from simcoll.core.collectives import Collective
from simcoll.core.errors import SimcollError
from simcoll.core.limits import MAX_RANKS
from simcoll.core.units import format_bytes
from simcoll.plan.channels import Plan, ring_plan
from simcoll.plan.nccl_log import format_plan, log_plan, read_nccl_log
from simcoll.plan.placement import per_server_ranks, place_ranks
from simcoll.plan.search import search_plan
from simcoll.plan.tuning import parse_nccl_knobs, tune_call
from simcoll.prediction import predict
from simcoll.topology import gpu_nodes, load, parse_overrides

__all__ = ["add_plan"]

_SHOW_HELP = """\
Print the plan NCCL's graph search builds for the ranks on this topology, in the format
NCCL prints with NCCL_DEBUG=INFO: rank 0's 'Channel cc/NN :' ring of every channel, every
rank's 'Trees [c] down0/down1/down2->rank->up' line, and the 'Channel cc/0 : a[d] -> b[d]
[send] via NET/IB/k(proxy)' line of every edge that crosses servers (NIC k of the server,
through the GPU of rank 'proxy' when PXN forwards it). Then how many ring edges leave and
enter by each NIC, and, for an all-reduce, the channels and pieces NCCL uses per size.
With --plan LOG the plan is read from a real NCCL log instead."""


def add_plan(sub: SubParsers) -> None:
    """Register ``simcoll plan``."""
    plan = sub.add_parser(
        "plan",
        help="show the channels, rings, trees and NICs NCCL builds (NCCL_DEBUG=INFO format)",
        description="Inspect a communication plan without simulating: 'show' prints it.",
        epilog="example: simcoll plan show topologies/h100-ib-fat-tree.toml --set n_nodes=2",
    )
    actions = plan.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    actions.required = True
    show = actions.add_parser(
        "show",
        help="print the plan as NCCL prints it, NIC use, channels per size",
        description=_SHOW_HELP,
        epilog="examples:\n  simcoll plan show topologies/dgx1-v100.toml\n"
        "  simcoll plan show topologies/h100-ib-fat-tree.toml --set n_nodes=2\n"
        "  simcoll plan show topologies/a100-roce-2to1.toml --ranks 64 --placement random:1",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument("topology", metavar="TOPOLOGY", help="topology file (see topologies/)")
    show.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                      help="override a builder parameter of the topology file "
                      "(repeatable)")  # fmt: skip
    show.add_argument("--ranks", type=positive_int_at_most(MAX_RANKS), metavar="N",
                      help="number of ranks (default: every GPU)")  # fmt: skip
    show.add_argument("--placement", default="linear",
                      metavar="linear|random[:SEED]|per-server:K|FILE",
                      help="which GPU each rank runs on (as for predict; default "
                      "linear)")  # fmt: skip
    show.add_argument("--plan", default="nccl", metavar="nccl|rank|LOG",
                      help="'nccl' (default: NCCL's search), 'rank' (one ring in rank "
                      "order) or an NCCL_DEBUG=INFO log to read")  # fmt: skip
    show.add_argument("--nccl", metavar="NAME=VALUE", action="append", default=[],
                      help="NCCL settings, e.g. NCCL_MAX_NCHANNELS=8 (repeatable)")  # fmt: skip
    show.set_defaults(run=_show)


def _show(args: argparse.Namespace) -> int:
    topology = load(args.topology, parse_overrides(args.set))
    knobs = parse_nccl_knobs(args.nccl)
    n = args.ranks or per_server_ranks(topology, args.placement) or len(gpu_nodes(topology))
    if args.plan == "nccl":
        nodes = place_ranks(topology, n, args.placement)
        plan = search_plan(topology, nodes, placement=args.placement)
    elif args.plan == "rank":  # one ring in rank order, as predict --plan rank runs
        nodes = place_ranks(topology, n, args.placement)
        plan = replace(ring_plan(nodes, [range(n)]), placement=args.placement,
                       source="rank order")  # fmt: skip
    else:
        plan = log_plan(read_nccl_log(args.plan), topology, n, placement=args.placement)
    plan = plan.using(knobs.channels(plan.n_channels))
    print(f"# simcoll plan show: {args.topology} ({topology.graph.get('description', '')})")
    print(f"# {plan.n_ranks} ranks, placement {plan.placement}, routing "
          f"{plan.routing or 'ecmp'}, plan "
          f"{'nccl (NCCL search rules)' if plan.source == 'search' else plan.source}")  # fmt: skip
    print(format_plan(plan, topology, nvls_channels=_nvls_channels(topology, n, args.placement)))
    _print_nic_use(plan)
    _print_tuning(plan, buffsize_bytes=knobs.buffsize_bytes)
    return 0


def _nvls_channels(topology: nx.DiGraph[str], n_ranks: int, placement: str) -> int:
    """The channels ``simcoll predict`` runs an NVLS all-reduce on for these ranks (NVLS
    on one server, NVLS-tree across servers), as its rows say; 0 where it cannot run."""
    hosts = {topology.nodes[g].get("host") for g in place_ranks(topology, n_ranks, placement)}
    name = "nvls" if len(hosts) == 1 else "nvls_tree"
    try:
        rows = predict(topology, Collective.ALLREDUCE, [n_ranks * 4], algorithm=name,
                       protocol="simple", n_ranks=n_ranks, placement=placement,
                       plan="rank").rows  # fmt: skip
    except SimcollError:  # no switch that reduces, or one that does not reach every rank
        return 0
    return rows[0].n_channels


def _print_nic_use(plan: Plan) -> None:
    use = plan.nic_use()
    if not use:
        print("# NIC use: no edge of the rings crosses servers")
        return
    print("# NIC use: ring edges (channels) leaving / entering by each NIC")
    for nic, (out, into) in use.items():
        print(f"#   {nic:<16} {out:>3} out {into:>3} in")
    outs = sorted({out for out, _ in use.values()})
    even = "evenly" if len(outs) == 1 else f"unevenly ({outs[0]}..{outs[-1]} out)"
    print(f"# {len(use)} NICs carry the channels {even}")


def _print_tuning(plan: Plan, *, buffsize_bytes: int) -> None:
    print("# all-reduce per size (NCCL's per-call choice): channels used, pieces per channel")
    print(f"#   {'size':>10}  {'simple':>14}  {'LL128':>14}  {'LL':>14}")
    for size in (2**10, 2**16, 2**20, 2**24, 2**28, 2**30):
        cells = []
        for proto in ("simple", "LL128", "LL"):
            t = tune_call(Collective.ALLREDUCE, "ring", proto, plan.n_ranks, size,
                          n_channels=plan.n_channels, buffsize_bytes=buffsize_bytes)  # fmt: skip
            cells.append(f"{t.n_channels:>3} ch x {t.n_chunks:>3} pc")
        print(f"#   {format_bytes(size):>10}  " + "  ".join(f"{c:>14}" for c in cells))
    sys.stdout.flush()
