"""``simcoll predict TOPOLOGY --collective NAME``: one collective over message sizes, as an
nccl-tests-style table, CSV or JSON, and a plot."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

import networkx as nx

from simcoll.algorithms import algorithm_names
from simcoll.algorithms.ring import PREFIX_STEPS
from simcoll.cli._args import (
    SubParsers,
    add_what_if,
    positive_int_at_most,
    read_params,
    too_few_gpus,
    what_if,
)
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.files import check_output
from simcoll.core.limits import MAX_CHANNELS, MAX_CHUNKS, MAX_IN_FLIGHT, MAX_RANKS, MAX_TRANSFERS
from simcoll.core.sizes import DTYPE_BYTES, REDOPS, align_size_bytes, parse_sizes, size_notes
from simcoll.core.units import format_bandwidth, format_bytes, format_duration
from simcoll.output.progress import Progress
from simcoll.output.results import Row, format_side_by_side, format_table, to_csv, to_json
from simcoll.plan.channels import Plan
from simcoll.plan.nccl_log import log_plan, read_nccl_log
from simcoll.plan.placement import per_server_ranks, place_ranks
from simcoll.plan.tuning import parse_nccl_knobs
from simcoll.prediction import predict
from simcoll.prediction.choices import DEFAULT_ALGORITHM, candidates, default_algorithm
from simcoll.prediction.pipeline import Prediction
from simcoll.topology import gpu_nodes, load, parse_overrides
from simcoll.topology.calibration import Calibration
from simcoll.topology.io import source_files

__all__ = ["add_predict"]

MODELS = ("flow", "ideal", "packet", "analytical", "nccl")
PROTOCOLS = ("auto", "simple", "LL", "LL128", "none")


def add_predict(sub: SubParsers) -> None:
    """Register ``simcoll predict``."""
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
                   "'link_bandwidth=100 GB/s', or its routing (routing.rule=ecmp) or "
                   "transport (transport.gpudirect_rdma=false) (repeatable)")  # fmt: skip
    add_what_if(p)
    p.add_argument("--collective", required=True, metavar="NAME",
                   help="one of: " + ", ".join(c.value for c in Collective))  # fmt: skip
    p.add_argument(
        "--algorithm",
        metavar="NAME|auto|nccl|all",
        default=None,
        help=f"algorithm (default: {DEFAULT_ALGORITHM}: the (algorithm, protocol) NCCL's own "
        "tuning model picks per size, simulated, as nccl-tests with no NCCL_ALGO runs; "
        "NCCL's send/receive path for all-to-all, send/recv, gather and scatter); 'auto' "
        "simulates NCCL's algorithms (ring, tree, nvls, sharp) where the topology can run "
        "them and keeps the fastest per size; 'all' tries every one; or a name (ring, ...)",
    )
    p.add_argument("--protocol", metavar="NAME|auto|none", default="auto",
                   help="NCCL protocol: LL (half the wire is data, lowest per-step latency), "
                   "LL128 (120 of 128 bytes), simple (full bandwidth, highest per-step "
                   "latency), 'auto' (default: NCCL's pick per size, or the fastest for a "
                   "named algorithm), or 'none' (the links alone, no protocol cost); with "
                   "--algorithm nccl a named protocol is NCCL_PROTO")  # fmt: skip
    p.add_argument(
        "--model",
        default="flow",
        metavar="NAME",
        help="fidelity: 'flow' (default: fluid flows with max-min fair sharing of "
        "every link), 'ideal' (no contention: each flow at its route's bottleneck), "
        "'packet' (store-and-forward 4 KiB packets hop by hop; slow, for small checks), "
        "'analytical' (alpha-beta closed form per algorithm, decided as flow decides it; "
        "exact on one switch, an estimate from above across servers) or 'nccl' (NCCL's "
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
        type=positive_int_at_most(MAX_RANKS),
        metavar="N",
        help="number of ranks (default: every GPU of the topology, or K per server with "
        "--placement per-server:K), placed by --placement",
    )
    p.add_argument("--placement", default="linear",
                   metavar="linear|random[:SEED]|per-server:K|FILE",
                   help="which GPU each rank runs on: 'linear' (default: rank r on GPU r), "
                   "'random' or 'random:SEED' (a seeded random choice of GPUs, as a "
                   "scheduler that ignores the network would make), 'per-server:K' (K ranks "
                   "on each server, on its first K GPUs, as mpirun -N K starts a job smaller "
                   "than its servers), or a file naming one GPU per line (a node id such as "
                   "gpu12, or its number)")  # fmt: skip
    p.add_argument("--plan", default="nccl", metavar="nccl|rank|LOG",
                   help="the rings, trees and NICs of each channel: 'nccl' (default: what "
                   "NCCL's graph search builds for this topology and placement), 'rank' "
                   "(one ring in rank order, the textbook model), or an NCCL_DEBUG=INFO log "
                   "of a real run whose 'Channel'/'Trees' lines are simulated exactly "
                   "(see 'simcoll plan show')")  # fmt: skip
    p.add_argument("--nccl", metavar="NAME=VALUE", action="append", default=[],
                   help="an NCCL setting of the run, as in its environment: "
                   "NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS (ring and tree channels), "
                   "NCCL_MIN_CTAS, NCCL_MAX_CTAS (those and NVLS's CTAs, 16 by default, "
                   "which bound NVLS-tree's rate), NCCL_BUFFSIZE, NCCL_ALGO, NCCL_PROTO, "
                   "NCCL_COLLNET_ENABLE (1: NCCL's pick considers CollNet, on a fabric whose "
                   "switches reduce) (repeatable; simcoll never reads the environment "
                   "itself)")  # fmt: skip
    p.add_argument("--channels", type=positive_int_at_most(MAX_CHANNELS), metavar="N",
                   help="channels used at every size (default: NCCL's choice per size on "
                   f"the plan; 1 with --plan rank; at most {MAX_CHANNELS})")  # fmt: skip
    p.add_argument(
        "--chunks",
        type=positive_int_at_most(MAX_CHUNKS),
        metavar="N",
        help="pipelined pieces per channel and block (default: NCCL's slices per protocol "
        "on the plan, about 512 KiB pieces with --plan rank)",
    )
    p.add_argument(
        "--window",
        type=positive_int_at_most(MAX_IN_FLIGHT),
        metavar="N",
        help="pieces in flight per connection (default: NCCL's, 8 slots over the slots a "
        "piece takes)",
    )
    p.add_argument(
        "--root",
        type=int,
        metavar="RANK",
        help="root rank of broadcast, reduce, gather, scatter (default 0)",
    )
    p.add_argument("--in-place", action="store_true",
                   help="time in-place calls (nccl-tests' second half); by default calls are "
                   "out-of-place, and an all-gather or a broadcast also copies each GPU's own "
                   "block from input to output at the topology's gpu_memory_bandwidth")  # fmt: skip
    p.add_argument("--format", choices=("table", "csv", "json", "nccl-tests"), default="table",
                   help="output format (default table); nccl-tests: the log nccl-tests prints, "
                   "out-of-place and in-place side by side with #wrong (always 0: simcoll "
                   "moves no data), which simcoll compare and calibrate read back")  # fmt: skip
    p.add_argument("-d", "--dtype", choices=tuple(DTYPE_BYTES), default="float",
                   help="data type, as nccl-tests' -d: sets the count and type columns and "
                   "the element sizes are rounded to (default float)")  # fmt: skip
    p.add_argument("-o", "--op", choices=REDOPS, default="sum",
                   help="reduction, as nccl-tests' -o: printed in the redop column; the "
                   "simulated time does not depend on it (default sum)")  # fmt: skip
    p.add_argument(
        "--plot",
        metavar="PNG",
        help="also write a plot of bus bandwidth against size to this PNG file (not an "
        "existing file simcoll did not write)",
    )
    p.add_argument("--plot-y", choices=("busbw", "algbw", "time"), default="busbw",
                   help="what --plot draws against size: bus bandwidth (default), "
                   "algorithm bandwidth, or time")  # fmt: skip
    p.add_argument(
        "--log-y",
        action="store_true",
        help="a logarithmic y axis for --plot (sizes are always on a log axis)",
    )
    p.add_argument("--params", metavar="PARAMS.toml|none",
                   help="calibration to simulate with: a file from `simcoll calibrate`, or "
                   "'none' for the bare links; default: the parameters the topology file "
                   "carries (fitted on public measurements), else the bare links")  # fmt: skip
    p.set_defaults(run=_predict)


def _checked_choices(args: argparse.Namespace) -> tuple[Collective, str]:
    collective = Collective.parse(args.collective)
    if args.model not in MODELS:
        raise ConfigError(f"unknown --model {args.model!r}; valid: {', '.join(MODELS)}")
    if args.protocol not in PROTOCOLS:
        raise ConfigError(f"unknown --protocol {args.protocol!r}; valid: {', '.join(PROTOCOLS)}")
    names = algorithm_names(collective)
    algorithm = args.algorithm or default_algorithm(collective)
    if algorithm not in ("auto", "all", "nccl") and algorithm not in names:
        raise ConfigError(f"{collective.value} has no algorithm {algorithm!r}; valid: "
                          f"{', '.join(names)}, auto, nccl, all")  # fmt: skip
    if args.model == "nccl":
        ignored = [f for f, v in (("--chunks", args.chunks), ("--window", args.window)) if v]
        if ignored:
            verb = "do" if len(ignored) > 1 else "does"
            raise ConfigError(
                f"{' and '.join(ignored)} {verb} not apply to --model nccl: NCCL's tuning "
                "model costs channels, not pieces or a window; drop it or use --model flow"
            )
    return collective, algorithm


def _check_plot(args: argparse.Namespace) -> None:
    """Refuse ``--plot`` before simulating: not a .png name, an input, a file not ours."""
    from simcoll.output.plot import PNG_MARK  # noqa: PLC0415

    name = str(args.plot)
    if Path(name).suffix.lower() != ".png":
        raise ConfigError(f"must name a .png file, got {name!r}", field="--plot")
    try:
        files = source_files(args.topology, parse_overrides(args.set))  # with its params
    except ConfigError:
        files = [Path(args.topology)]
    inputs = [str(f) for f in files] + ([args.params] if args.params not in (None, "none") else [])
    check_output(name, mark=PNG_MARK, inputs=inputs, what="--plot")


def _predict(args: argparse.Namespace) -> int:
    collective, algorithm = _checked_choices(args)
    if args.plot is not None:
        _check_plot(args)
    if algorithm == "all" and args.format == "nccl-tests":
        raise ConfigError("prints one algorithm's log, as nccl-tests does; name one, or "
                          "use --format table, csv or json for every algorithm",
                          field="--format nccl-tests")  # fmt: skip
    sizes, is_range = parse_sizes(args.sizes)
    for sizes_note in size_notes(args.sizes):
        print(f"simcoll: note: {sizes_note}", file=sys.stderr)
    topology = load(args.topology, parse_overrides(args.set))
    n_ranks = (args.ranks or per_server_ranks(topology, args.placement)
               or len(gpu_nodes(topology)))  # fmt: skip
    too_many = too_few_gpus(args.topology, parse_overrides(args.set), topology, n_ranks)
    if too_many:
        raise ConfigError(f"--ranks: {too_many}")
    # a failure must leave the GPUs the ranks run on reaching each other, not every GPU
    gpus = place_ranks(topology, n_ranks, args.placement) if args.fail else None
    topology = what_if(topology, args, gpus)
    if is_range:  # round like nccl-tests does; explicit sizes must divide as given
        element = DTYPE_BYTES[args.dtype]
        sizes = sorted({align_size_bytes(collective, n_ranks, s, element) for s in sizes})
    calibration = _calibration(args.params, topology, args.topology)
    note = topology.graph.get("hardware_note")  # an imported machine without its hardware's
    if calibration == "default" and topology.graph.get("calibration") is None and note:
        print(f"simcoll: note: {args.topology}: {note}", file=sys.stderr)
    call: dict[str, Any] = {  # what every predict() call of this command shares
        "protocol": None if args.protocol == "none" else args.protocol,
        "model": args.model,
        "n_ranks": n_ranks,
        "params": {k: v for k, v in (("n_channels", args.channels), ("n_chunks", args.chunks),
                   ("max_in_flight", args.window), ("root", args.root)) if v is not None},
        "calibration": calibration,
        "placement": args.placement,
        "plan": _plan(args.plan, topology, n_ranks, args.placement),
        "knobs": parse_nccl_knobs(args.nccl),
    }  # fmt: skip
    names = candidates(collective, "all") if algorithm == "all" else [algorithm]
    result = _every(topology, collective, sizes, names, call, skip=is_range,
                    in_place=args.in_place)  # fmt: skip
    result = replace(result, rows=[_typed(row, args.dtype, args.op) for row in result.rows])
    title = _title(args, topology, collective, algorithm, n_ranks=n_ranks,
                   calibration=calibration, rows=result.rows)  # fmt: skip
    if args.format == "nccl-tests":
        in_place = predict(
            topology,
            collective,
            [r.size_bytes for r in result.rows],
            algorithm=algorithm,
            in_place=True,
            **call,
        ).rows
        sys.stdout.write(_nccl_tests_log(result.rows, in_place, args.dtype, args.op, title))
    elif args.format in ("csv", "json"):
        sys.stdout.write((to_csv if args.format == "csv" else to_json)(result.rows))
    else:
        _print_table(result.rows, title, algorithm, args)
    _notes(result)
    if args.plot is not None:
        _plot(args, result.rows, topology, collective)
    return 0


#: A simulation expected to take longer than this (wall seconds) is said on stderr first.
SAY_EXPECTED_AFTER_S = 10.0


def _say_expected(what: str, seconds: float) -> None:
    """Say on stderr how long simulating ``what`` is expected to take, where it is long
    enough for a user to wonder (:data:`SAY_EXPECTED_AFTER_S`)."""
    if seconds > SAY_EXPECTED_AFTER_S:
        print(f"simcoll: note: simulating {what} is expected to take about "
              f"{format_duration(seconds)} (an estimate; Ctrl-C stops it)",
              file=sys.stderr)  # fmt: skip


def _every(
    topology: nx.DiGraph[str],
    collective: Collective,
    sizes: list[int],
    names: list[str],
    call: dict[str, Any],
    *,
    skip: bool,
    in_place: bool,
) -> Prediction:
    """Each algorithm of ``names`` at every size (``--algorithm all``: each with its
    fastest protocol, side by side; one that cannot run here is named on stderr)."""
    bar = Progress(sys.stderr, len(sizes) * len(names), "sizes", tty_only=True)
    results: list[Prediction] = []
    try:
        for name in names:
            try:
                results.append(
                    predict(
                        topology,
                        collective,
                        sizes,
                        algorithm=name,
                        skip_too_small=skip,
                        in_place=in_place,
                        progress=bar.advance,
                        estimate=partial(_say_expected, f"{collective.value} ({name})"),
                        **call,
                    )
                )
            except SimcollError as refusal:
                if len(names) == 1:
                    raise
                print(f"simcoll: note: {name} not run: {refusal}", file=sys.stderr)
    finally:
        bar.close()
    if not results:
        raise ConfigError(f"no algorithm of {collective.value} could run here")
    return _together(results)


def _print_table(rows: list[Row], title: str, algorithm: str, args: argparse.Namespace) -> None:
    """The table, and what was picked (``auto``, ``nccl``) or fastest (``all``)."""
    if algorithm == "all":
        print(format_side_by_side(rows, title=title))
        if rows:
            print(f"# Fastest per size: {_picks(_fastest(rows))}")
        return
    print(format_table(rows, title=title))
    if {"auto", "nccl"} & {algorithm, args.protocol} and rows:
        how = "simulation" if args.model in ("flow", "ideal", "packet") else f"{args.model} model"
        if algorithm == "nccl":
            costed = {"flow": "simulated", "ideal": "simulated", "packet": "simulated",
                      "analytical": "costed by formula"}.get(args.model)  # fmt: skip
            how = "NCCL's tuning model" + (f", then {costed}" if costed else "")
        print(f"# Picked by {how}: {_picks(rows)}")


def _together(results: list[Prediction]) -> Prediction:
    """One prediction of several algorithms: rows by size, then in the order run."""
    if len(results) == 1:
        return results[0]
    order = {id(r): i for i, p in enumerate(results) for r in p.rows}
    rows = sorted((r for p in results for r in p.rows),
                  key=lambda r: (r.size_bytes, order[id(r)]))  # fmt: skip
    return Prediction(
        rows,
        skipped=sorted({item for p in results for item in p.skipped}),
        extended=sorted({size for p in results for size in p.extended}),
        unsimulated=[item for p in results for item in p.unsimulated],
        simulated=sorted({item for p in results for item in p.simulated}),
    )


def _fastest(rows: list[Row]) -> list[Row]:
    """The fastest row of each size, in size order."""
    best: dict[int, Row] = {}
    for row in rows:
        if row.size_bytes not in best or row.time_s < best[row.size_bytes].time_s:
            best[row.size_bytes] = row
    return [best[size] for size in sorted(best)]


def _notes(result: Prediction) -> None:
    """What the rows do not say, on stderr: sizes skipped, rings extended, choices too large."""
    if result.skipped:
        smallest = max(size for size, _ in result.skipped)
        print(f"simcoll: note: skipped {len(result.skipped)} sizes up to {smallest} B: "
              f"{result.skipped[-1][1]}", file=sys.stderr)  # fmt: skip
    if result.extended:
        sizes_note = ", ".join(format_bytes(size) for size in result.extended)
        print(f"simcoll: note: the ring at {sizes_note} ran its first {PREFIX_STEPS} steps "
              "and was extended at their pace: whole, it is over one schedule's "
              f"{MAX_TRANSFERS} transfers (simcoll/sim/periodic.py)", file=sys.stderr)  # fmt: skip
    by_reason: dict[str, list[int]] = {}
    for size, why in result.simulated:
        by_reason.setdefault(why, []).append(size)
    for why, sizes in by_reason.items():
        sizes_note = ", ".join(format_bytes(size) for size in sorted(sizes))
        print(f"simcoll: note: {why}: at {sizes_note} the flow model costed it "
              "(those rows' model is flow)", file=sys.stderr)  # fmt: skip
    for size, choices in result.unsimulated:
        print(f"simcoll: note: at {format_bytes(size)}, {', '.join(choices)} could not be "
              f"simulated (over one schedule's {MAX_TRANSFERS} transfers, and no fast path "
              "folds it) and might have been faster; the row is the fastest of the others",
              file=sys.stderr)  # fmt: skip


def _typed(row: Row, dtype: str, op: str) -> Row:
    """``row`` with nccl-tests' count, type and redop columns for ``-d`` and ``-o``."""
    c = Collective.parse(row.collective)
    count = c.count(row.size_bytes, row.n_ranks, DTYPE_BYTES[dtype])
    return replace(row, count=count, type=dtype, redop=op if c.reduces else "none")


def _nccl_tests_log(
    out_of_place: list[Row], in_place: list[Row], dtype: str, op: str, title: str
) -> str:
    """The rows as the log nccl-tests prints (:func:`format_log`, its new layout): each
    size's out-of-place and in-place times side by side, ``#wrong`` 0."""
    from simcoll.calibrate.measurements import Measurement  # noqa: PLC0415 - this format only
    from simcoll.calibrate.nccltests.write import LogHeader, format_log  # noqa: PLC0415

    if not out_of_place:
        return ""
    first = out_of_place[0]

    def measured(r: Row, ip: bool) -> Measurement:
        return Measurement(collective=r.collective, n_ranks=r.n_ranks, size_bytes=r.size_bytes,
                           time_s=r.time_s, in_place=ip, count=r.count, dtype=dtype,
                           redop=r.redop, root=r.root)  # fmt: skip

    pairs = [(measured(o, False), measured(i, True))
             for o, i in zip(out_of_place, in_place, strict=True)]  # fmt: skip
    header = LogHeader(n_gpus=first.n_ranks, device_name="simcoll (simulated)")
    lines = "".join(f"# {line}\n" for line in title.splitlines())
    return lines + format_log(pairs, collective=first.collective, n_ranks=first.n_ranks,
                              layout="new", header=header)  # fmt: skip


def _calibration(
    value: str | None, topology: nx.DiGraph[str], name: str
) -> Calibration | Literal["default"] | None:
    """``--params``: a file (a warning if it calibrates no link of the topology), ``none``
    (bare links) or, when absent, the topology's own."""
    if value is None:
        return "default"
    if value == "none":
        return None
    return read_params(value, topology, name)


def _plan(
    value: str, topology: nx.DiGraph[str], n_ranks: int, placement: str
) -> Plan | Literal["nccl", "rank"]:
    """``--plan``: ``nccl``, ``rank``, or the plan of an NCCL log on the placed ranks."""
    if value == "nccl":
        return "nccl"
    if value == "rank":
        return "rank"
    return log_plan(read_nccl_log(value), topology, n_ranks, placement=placement)


def _title(
    args: argparse.Namespace,
    topology: nx.DiGraph[str],
    collective: Collective,
    algorithm: str,
    *,
    n_ranks: int,
    calibration: Calibration | str | None,
    rows: list[Row],
) -> str:
    """The table's header: what ran where, with which plan, placement, routing, params."""
    source = args.params
    if calibration == "default":
        calibration = topology.graph.get("calibration")
        source = topology.graph.get("calibration_file", "the topology file's")
    params = "bare links (--params none)" if calibration is None else f"params {source}"
    channels = sorted({r.n_channels for r in rows if r.n_channels})
    plan = rows[0].plan if rows and rows[0].plan else args.plan
    used = f", {channels[0]}..{channels[-1]} channels" if len(channels) > 1 else (
        f", {channels[0]} channels" if channels else "")  # fmt: skip
    # The file's description is its own text: say what --set changed beside it.
    overrides = "".join(f"; --set {item}" for item in args.set)
    return (
        f"simcoll predict: {collective.value} on {args.topology}"
        f" ({topology.graph.get('description', '')}{overrides})\n"
        f"{n_ranks} ranks, algorithm {algorithm}, protocol {args.protocol}, model {args.model}; "
        "simulated times, bandwidths in GB/s = 1e9 B/s\n"
        f"plan {plan}{used}; placement {args.placement}; routing "
        f"{topology.graph.get('routing', 'ecmp')}; {params}{_copy(args, topology, collective)}"
    )


def _copy(args: argparse.Namespace, topology: nx.DiGraph[str], collective: Collective) -> str:
    """What the header says of out-of-place copies: only where one was simulated or
    ``--in-place`` skipped it."""
    if args.in_place:
        return "; in-place calls"
    bandwidth = topology.graph.get("gpu_memory_bandwidth_bytes_per_s")
    if not bandwidth or not collective.copies_locally:
        return ""
    return f"; out-of-place: own block copied at {format_bandwidth(bandwidth)}"


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
    from simcoll.output.plot import plot_vs_size  # noqa: PLC0415 - matplotlib only when asked

    out = plot_vs_size(
        rows,
        args.plot,
        title=f"{collective.value} on {Path(args.topology).name}: "
        f"{rows[0].n_ranks if rows else 0} ranks, model {args.model}",
        y=args.plot_y,
        log_y=args.log_y,
    )
    print(f"simcoll: wrote {out}", file=sys.stderr)
