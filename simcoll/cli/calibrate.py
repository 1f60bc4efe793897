"""``simcoll calibrate`` and ``simcoll compare``: measured runs in, parameters and errors out."""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any

import networkx as nx

from simcoll.calibrate.compare import REGIMES, format_summary, regime_of, summarise
from simcoll.calibrate.diagnose import (
    Diagnosis,
    WhatIf,
    diagnose,
    format_diagnoses,
    verdict,
    what_ifs,
)
from simcoll.calibrate.fit import (
    ALL_GROUPS,
    PARAMETER_GROUPS,
    FitPoint,
    Model,
    estimate_points,
    fit,
    simulations,
)
from simcoll.calibrate.gloo import BACKENDS, Recipe, default_protocol, recipe_for
from simcoll.calibrate.measurements import MeasurementSet, sidecar_path
from simcoll.calibrate.p2p_matrix import fit_p2p, is_p2p_log, read_p2p_matrices
from simcoll.calibrate.read import read_measurements
from simcoll.calibrate.residuals import max_abs_error, median_abs_error
from simcoll.cli._args import (
    add_what_if,
    positive_int,
    positive_int_at_most,
    read_params,
    too_few_gpus,
    what_if,
)
from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.files import check_output
from simcoll.core.limits import MAX_RANKS
from simcoll.core.shipped import find
from simcoll.core.units import format_duration
from simcoll.output.folder import OutputFolder
from simcoll.output.progress import Progress
from simcoll.plan.placement import map_ranks, place_ranks
from simcoll.plan.tuning import NcclKnobs, parse_nccl_knobs
from simcoll.topology.calibration import (
    PARAMS_MARK,
    PROTOCOL_NAMES,
    Calibration,
    read_calibration,
    write_calibration,
)
from simcoll.topology.io import load, parse_overrides, source_files

__all__ = ["add_calibrate", "add_compare"]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("measurements", nargs="+", metavar="MEASUREMENTS",
                   help="measurement CSV files (with sidecar JSON) or nccl-tests logs; for "
                   "calibrate, also one p2pBandwidthLatencyTest (CUDA sample) or nvbandwidth "
                   "output, whose GPU pairs' copies give the links' efficiency and "
                   "bandwidth")  # fmt: skip
    p.add_argument("--topology", required=True, metavar="TOPOLOGY",
                   help="topology TOML the runs were made on")  # fmt: skip
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="override a builder parameter of the topology (repeatable)")  # fmt: skip
    p.add_argument("--backend", choices=BACKENDS, default=None,
                   help="library that made the runs: decides the algorithm per collective "
                   "(gloo: gloo's fixed ones; nccl: auto) and the protocol (gloo: none; "
                   "nccl: auto). Default: the sidecar's 'backend', else nccl")  # fmt: skip
    p.add_argument("--algorithm", metavar="NAME|auto|nccl|all", default=None,
                   help="simulate every collective with this algorithm instead")  # fmt: skip
    p.add_argument("--protocol", metavar="NAME|auto|none", default=None,
                   help="NCCL protocol to simulate (default from --backend)")  # fmt: skip
    p.add_argument("--model", choices=("flow", "ideal"), default="flow",
                   help="simulation model (default flow)")  # fmt: skip
    p.add_argument("--nccl", metavar="NAME=VALUE", action="append", default=[],
                   help="an NCCL setting the runs were made with, as in their environment "
                   "(NCCL_MIN_CTAS, NCCL_MAX_CTAS, NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, "
                   "NCCL_BUFFSIZE, NCCL_ALGO, NCCL_PROTO, NCCL_COLLNET_ENABLE; "
                   "repeatable), simulated as "
                   "`simcoll predict --nccl` does")  # fmt: skip
    p.add_argument("--collective", metavar="NAME", default=None,
                   help="collective of files that do not say it (nccl-tests logs); in a "
                   "measurement CSV, use only this collective's rows")  # fmt: skip
    p.add_argument("--ranks", type=positive_int_at_most(MAX_RANKS), metavar="N", default=None,
                   help="rank count of files that do not say it")  # fmt: skip
    p.add_argument(
        "--in-place",
        action="store_true",
        help="use the in-place half of nccl-tests data, simulated as in-place calls, which "
        "copy nothing from input to output (default: the out-of-place half)",
    )


def add_calibrate(sub: argparse._SubParsersAction[Any]) -> None:
    """Register ``simcoll calibrate``."""
    p = sub.add_parser(
        "calibrate",
        help="fit link efficiency, latency and overheads to measured runs",
        description="Fit simcoll's calibration parameters (efficiency per link class, "
        "latency per link kind, step latency per class, launch cost per call) to measured "
        "times by least squares on log(simulated/measured), and write them with their "
        "provenance and residuals to a params TOML for `simcoll compare --params` and "
        "`simcoll predict --params`. Given a p2pBandwidthLatencyTest or nvbandwidth output "
        "instead, fit "
        "the links' efficiency per class and bandwidth per kind to its GPU pairs' copies "
        "(P2P=Enabled matrices where the topology has p2p = true, else P2P=Disabled; "
        "bidirectional first), in closed form.",
        epilog="examples (shipped measurements and topologies are found by name): simcoll "
        "calibrate nccl_allreduce_8xA100_nvswitch_superbench --topology dgx-a100 "
        "--collective allreduce -o a100.params.toml; simcoll calibrate "
        "p2p_matrices_8xRTX4090_pcie_P2Pdriver_chlc --topology pcie-8x-rtx4090 --set p2p=true "
        "-o rtx4090-p2p.params.toml (a p2pBandwidthLatencyTest run)",
    )
    _common(p)
    p.add_argument("-o", "--output", required=True, metavar="PARAMS.toml",
                   help="params file to write (not an input, nor an existing file simcoll "
                   "did not write)")  # fmt: skip
    p.add_argument("--base", metavar="PARAMS.toml", action="append", default=[],
                   help="hardware parameters to build on (repeatable): held at their values "
                   "while the others are fitted, and named as the written file's base, so "
                   "that every topology of that hardware shares them")  # fmt: skip
    p.add_argument("--fit", default=",".join(PARAMETER_GROUPS), metavar="GROUPS",
                   help="parameter groups that may be fitted, in priority order where two "
                   f"move the times alike (default {','.join(PARAMETER_GROUPS)}; also "
                   "protocol_efficiency, a factor per NCCL protocol, and floor_s, the least "
                   "time of a call, measured from the 0-byte rows)")  # fmt: skip
    p.add_argument("--regimes", default="latency,middle,bandwidth", metavar="NAMES",
                   help="size regimes whose points are fitted (latency < 64 KiB <= middle "
                   "< 64 MiB <= bandwidth; default all three)")  # fmt: skip
    p.set_defaults(run=_calibrate)


def add_compare(sub: argparse._SubParsersAction[Any]) -> None:
    """Register ``simcoll compare``."""
    p = sub.add_parser(
        "compare",
        help="simulate measured points and report the error per size regime",
        description="Simulate every measured point and print signed and absolute errors "
        "of time and busbw per file, collective and size regime (latency < 64 KiB, middle, "
        "bandwidth >= 64 MiB). With --out, also writes points.csv, summary.csv and "
        "compare.png (measured vs simulated busbw over size). With --diagnose, also "
        "simulates named what-ifs (one NIC down or its cable slow, GPUDirect RDMA off, "
        "PCIe a generation lower, half the channels, the spine at half speed) and ranks "
        "them by how well each explains the measurement (diagnose.csv with --out).",
        epilog="example (shipped measurements and topologies are found by name): simcoll "
        "compare nccl_allgather_8xA100_nvswitch_superbench --topology dgx-a100 "
        "--out compare-a100",
    )
    _common(p)
    add_what_if(p)
    p.add_argument("--params", metavar="PARAMS.toml|none",
                   help="calibration from `simcoll calibrate`, or none for the bare links "
                   "(default: the topology file's own calibration, if it names one)")  # fmt: skip
    p.add_argument(
        "--out",
        metavar="DIR",
        help="folder for CSVs and the plot; files simcoll did not write there are never changed",
    )
    p.add_argument("--force", action="store_true", help="use an --out that holds other files "
                   "(they stay untouched)")  # fmt: skip
    p.add_argument("--min-size", default="0", metavar="BYTES",
                   help="leave out smaller sizes (e.g. 1M)")  # fmt: skip
    p.add_argument("--diagnose", action="store_true",
                   help="also simulate the what-ifs a slow cluster may be (one NIC down, "
                   "its cable at 1/2 or 1/4 speed, GPUDirect RDMA off, PCIe a generation "
                   "lower, half the channels, the spine at half speed; those the topology "
                   "and the runs can show) and rank them by "
                   "the mean |busbw error| of the measurement against each, the closest in one "
                   "line")  # fmt: skip
    p.add_argument("--workers", type=positive_int, metavar="N", default=None,
                   help="with --diagnose: processes simulating what-ifs at once (default: "
                   "one per core, at most one per what-if; 1: in this process)")  # fmt: skip
    p.set_defaults(run=_compare)


def _inputs(args: argparse.Namespace) -> tuple[nx.DiGraph[str], list[MeasurementSet]]:
    for path in args.measurements:  # compare's: calibrate takes these apart, alone
        if is_p2p_log(find(path, "measurements")):
            raise ConfigError(f"{path}: holds copies between GPU pairs (p2pBandwidthLatencyTest "
                              "or nvbandwidth), not timed calls; simcoll calibrate fits the "
                              "links to it, given alone")  # fmt: skip
    topology = load(args.topology, parse_overrides(args.set))
    sets = [
        read_measurements(path, collective=args.collective, n_ranks=args.ranks)
        for path in args.measurements
    ]
    for s in sets:
        _check_ranks(args, topology, s)
    for s in sets:
        if s.metadata.get("dropped_rows"):
            print(f"simcoll: warning: {s.source}: dropped {s.metadata['dropped_rows']} row(s) "
                  f"that failed nccl-tests' data check ({s.metadata['failed_check']}); a wrong "
                  "result is no timing", file=sys.stderr)  # fmt: skip
    return topology, sets


def _check_ranks(args: argparse.Namespace, topology: nx.DiGraph[str], runs: MeasurementSet) -> None:
    """Refuse runs on more ranks than the topology has GPUs, before any estimate or
    simulation, with the ``--set n_nodes=N`` that fits them where the topology file's
    builder takes one (N from the runs' ranks and the GPUs per server)."""
    n_ranks = max((m.n_ranks for m in runs.rows), default=0)
    why = too_few_gpus(args.topology, _overrides(args), topology, n_ranks)
    if why:
        raise ConfigError(f"runs on {why}", source=runs.source)
    runs.metadata["placement"] = _placement_of(args, topology, runs)


def _placement_of(args: argparse.Namespace, topology: nx.DiGraph[str], runs: MeasurementSet) -> str:
    """Where the runs' ranks go (:func:`~simcoll.plan.placement.place_ranks`), as an
    nccl-tests log says they ran (its ``#  Rank ... on HOST device D`` lines): rank r on
    the topology's GPU r where that puts them on the same servers; K on each server
    (``per-server:K``) where the run started K a server on devices 0..K-1 (``mpirun -N K``
    on servers bigger than the job), said on stderr. Any other layout is refused in one
    line (2 servers of 4 ranks simulated as one full server of 8 time another machine),
    with the ``--set`` that builds servers of the run's size where the file's builder takes
    it (tried before it is suggested)."""
    devices = sorted(runs.metadata.get("devices", []), key=lambda d: d.get("rank", 0))
    hosts = [d.get("host") for d in devices]
    if not hosts or None in hosts:
        return "linear"
    measured = _host_sequence(hosts)
    simulated = _host_sequence([topology.nodes[g].get("host")
                                for g in map_ranks(topology, len(hosts))])  # fmt: skip
    if measured == simulated:
        return "linear"
    per_host = [measured.count(h) for h in range(max(measured) + 1)]
    shape = (
        f"{len(per_host)} host{'s' * (len(per_host) != 1)} of {per_host[0]}"
        if len(set(per_host)) == 1
        else f"hosts of {', '.join(map(str, per_host))}"
    )
    placed = [simulated.count(h) for h in range(max(simulated) + 1)]
    hint = "; give a topology whose servers hold the ranks as the run did"
    contiguous = measured == sorted(measured) and len(set(per_host)) == 1
    local = [d.get("device") for d in devices] == [r % per_host[0] for r in range(len(hosts))]
    placement = f"per-server:{per_host[0]}"
    if contiguous and local:
        with suppress(SimcollError):  # K larger than a server: refused below
            gpus = place_ranks(topology, len(hosts), placement)
            if _host_sequence([topology.nodes[g].get("host") for g in gpus]) == measured:
                print(f"simcoll: note: {runs.source}: its {len(hosts)} ranks ran on {shape} "
                      f"(its 'Rank ... on HOST' lines): simulated so, on the first "
                      f"{per_host[0]} GPUs of each server ({placement})",
                      file=sys.stderr)  # fmt: skip
                return placement
    size = {"n_nodes": str(len(per_host)), "gpus_per_node": str(per_host[0])}
    for extra in ({}, {"nics_per_node": str(per_host[0])}) if contiguous else ():
        tried = {**_overrides(args), **size, **extra}
        try:  # suggest only what loads and places the ranks as the run did
            built = load(args.topology, tried)
            fits = _host_sequence([built.nodes[g].get("host")
                                   for g in map_ranks(built, len(hosts))]) == measured  # fmt: skip
        except SimcollError:
            fits = False
        if fits:
            sets = " ".join(f"--set {k}={v}" for k, v in {**size, **extra}.items())
            hint = f"; pass {sets} (servers of the run's size)"
            break
    raise ConfigError(f"its {len(hosts)} ranks ran on {shape} (its 'Rank ... on HOST' lines); "
                      f"{args.topology} puts them on {len(placed)} server"
                      f"{'s' * (len(placed) != 1)} of {', '.join(map(str, placed))}{hint}",
                      source=runs.source)  # fmt: skip


def _host_sequence(hosts: list[object]) -> list[int]:
    """Each rank's host as the order in which hosts first appear: ``[0, 0, 1, 1]``."""
    first: dict[object, int] = {}
    return [first.setdefault(h, len(first)) for h in hosts]


def _points(sets: list[MeasurementSet], in_place: bool) -> list[FitPoint]:
    points = [
        FitPoint(
            m.collective,
            m.n_ranks,
            m.size_bytes,
            m.time_s,
            source,
            in_place=m.in_place,
            placement=str(s.metadata.get("placement", "linear")),
        )
        for s in sets
        for source in [Path(s.source).name]
        for m in s.rows
        if m.in_place == in_place
    ]
    if not points:
        half, hint = (
            ("in-place", "drop --in-place") if in_place else ("out-of-place", "pass --in-place")
        )
        other = any(m.in_place != in_place for s in sets for m in s.rows)
        raise ConfigError(
            f"{sets[0].source}: no {half} rows to use" + (f"; {hint}" if other else "")
        )
    return points


def _choices(args: argparse.Namespace, sets: list[MeasurementSet]) -> tuple[Model, str | None, str]:
    """What to simulate per point, the protocol, and the backend they came from."""
    backend = args.backend or str(sets[0].metadata.get("backend", "nccl"))
    if backend not in BACKENDS:
        raise ConfigError(f"{sets[0].source}: backend {backend!r} is not one of "
                          f"{', '.join(BACKENDS)}; pass --backend")  # fmt: skip
    fixed = args.algorithm

    def recipe(collective: str, n_ranks: int, size_bytes: int) -> Recipe:
        return Recipe(fixed) if fixed else recipe_for(backend, collective, n_ranks, size_bytes)

    protocol = default_protocol(backend) if args.protocol is None else args.protocol
    if protocol == "none":
        protocol = None
    return recipe, protocol, backend


def _calibrate(args: argparse.Namespace) -> int:
    # say so before the fit (minutes), not after it
    check_output(args.output, mark=PARAMS_MARK.encode(), inputs=_input_files(args), what="-o")
    _check_writable(args.output)
    p2p_logs = [m for m in args.measurements if is_p2p_log(find(m, "measurements"))]
    if p2p_logs:
        return _calibrate_p2p(args, p2p_logs)
    groups = [g.strip() for g in args.fit.split(",") if g.strip()]
    if not groups:
        raise ConfigError(f"names no parameter group; valid: {', '.join(ALL_GROUPS)}",
                          field="--fit")  # fmt: skip
    for group in groups:
        if group.split(".")[0] not in ALL_GROUPS:
            raise ConfigError(f"--fit: unknown parameter group {group!r}; valid (or one of a "
                              "group's parameters, as efficiency.net): "
                              f"{', '.join(ALL_GROUPS)}")  # fmt: skip
    names = [name for name, _, _ in REGIMES]
    regimes = [r.strip() for r in args.regimes.split(",") if r.strip()]
    if not regimes:
        raise ConfigError(f"names no regime; valid: {', '.join(names)}", field="--regimes")
    for r in regimes:
        if r not in names:
            raise ConfigError(f"--regimes: unknown regime {r!r}; valid: {', '.join(names)}")
    topology, sets = _inputs(args)
    measured = _points(sets, args.in_place)
    points = [p for p in measured if regime_of(p.size_bytes) in regimes]
    if not points:
        sizes = sorted(p.size_bytes for p in measured)
        found = ", ".join(n for n in names if n in {regime_of(s) for s in sizes})
        raise ConfigError(
            f"none of the {len(measured)} measured points is in {', '.join(regimes)} (their "
            f"sizes, {sizes[0]} B to {sizes[-1]} B, are {found})",
            field="--regimes",
        )
    recipe, protocol, backend = _choices(args, sets)
    knobs = parse_nccl_knobs(args.nccl)
    held = _held(args.base)
    _say_estimate("calibrate", topology, points, held, recipe, protocol, args.model,
                  per_pass=True, knobs=knobs)  # fmt: skip
    bar = Progress(sys.stderr, None, "passes over the points", each_step=True, about=True)
    try:
        result = fit(topology, points, recipe=recipe, protocol=protocol, model=args.model,
                     parameters=groups, held=held, knobs=knobs,
                     progress=lambda _, total: bar.advance(total=total))  # fmt: skip
    finally:
        bar.close()
    provenance = {
        "command": shlex.join(["simcoll", *sys.argv[1:]]),
        "inputs": [str(s.source) for s in sets],
        "topology": str(args.topology),
        "overrides": list(args.set),
        "nccl": list(args.nccl),
        "backend": backend,
        "algorithms": _recipes(recipe, result.points),
        "protocol": protocol or "none",
        "model": args.model,
        "regimes": regimes,
        "points": len(result.points),
        "fitted": result.fitted,
        "not_identifiable": result.not_identifiable,
        "iterations": result.iterations,
        # one definition with compare's (simcoll.calibrate.residuals): of [[residuals]]'s errors
        "median_abs_error": median_abs_error(result.relative_errors),
        "max_abs_error": max_abs_error(result.relative_errors),
        "at_bounds": result.at_bounds,
    }
    calibration = Calibration(**{**_sections(result.calibration), "provenance": provenance})
    write_calibration(args.output, calibration, result.residual_rows(), base=_bases(args))
    print(f"fitted on {len(result.points)} points ({backend}, protocol {protocol or 'none'}):")
    values = result.calibration.values  # and a fitted launch cost of 0, which it leaves out
    for name in [*values, *(n for n in result.fitted if n not in values)]:
        unit = "" if "efficiency" in name else " s"
        print(f"  {name} = {values.get(name, 0.0):.6g}{unit}")
    _print_fit_quality("not identifiable from these runs (left uncalibrated)",
                       result.not_identifiable, provenance["median_abs_error"],
                       provenance["max_abs_error"])  # fmt: skip
    for text in result.at_bounds:
        print(f"simcoll: note: {text}", file=sys.stderr)
    print(f"simcoll: wrote {args.output}", file=sys.stderr)
    return 0


#: The options that choose how calls are simulated: none applies to a P2P matrix.
_CALL_OPTIONS: dict[str, tuple[str, object]] = {
    "--backend": ("backend", None), "--algorithm": ("algorithm", None),
    "--protocol": ("protocol", None), "--nccl": ("nccl", []),
    "--collective": ("collective", None), "--ranks": ("ranks", None),
    "--in-place": ("in_place", False), "--model": ("model", "flow"),
    "--fit": ("fit", ",".join(PARAMETER_GROUPS)),
    "--regimes": ("regimes", "latency,middle,bandwidth"),
}  # fmt: skip


def _calibrate_p2p(args: argparse.Namespace, p2p_logs: list[str]) -> int:
    """``simcoll calibrate`` of a ``p2pBandwidthLatencyTest`` output: the link
    parameters its GPU pairs' copies give (:mod:`simcoll.calibrate.p2p_matrix`)."""
    if len(args.measurements) > 1:
        raise ConfigError(f"{p2p_logs[0]}: a matrix of GPU pairs' copies is calibrated "
                          "alone: one such file, and no measured calls beside it")  # fmt: skip
    for flag, (name, default) in _CALL_OPTIONS.items():
        if getattr(args, name) != default:
            raise ConfigError("chooses how measured calls are simulated; a matrix of GPU "
                              "pairs' copies holds none", field=flag)  # fmt: skip
    topology = load(args.topology, parse_overrides(args.set))
    matrices = read_p2p_matrices(find(p2p_logs[0], "measurements"))
    fitted = fit_p2p(topology, matrices)
    errors = [p.relative_error for p in fitted.pairs]
    provenance = {
        "command": shlex.join(["simcoll", *sys.argv[1:]]),
        "inputs": [matrices.source],
        "topology": str(args.topology),
        "overrides": list(args.set),
        "matrix": fitted.matrix,
        "points": len(fitted.pairs),
        "fitted": [*(f"efficiency.{c}" for c in fitted.efficiency),
                   *(f"link_bandwidth_bytes_per_s.{k}" for k in fitted.link_bandwidth_bytes_per_s)],
        "not_identifiable": fitted.not_identifiable,
        "median_abs_error": median_abs_error(errors),
        "max_abs_error": max_abs_error(errors),
    }  # fmt: skip
    calibration = Calibration(efficiency=fitted.efficiency,
                              link_bandwidth_bytes_per_s=fitted.link_bandwidth_bytes_per_s,
                              provenance=provenance)  # fmt: skip
    rows = [{"source": Path(matrices.source).name, "src_gpu": p.src_gpu, "dst_gpu": p.dst_gpu,
             "links": "+".join(p.kinds), "measured_GBps": p.measured_bytes_per_s / 1e9,
             "simulated_GBps": p.simulated_bytes_per_s / 1e9, "error": p.relative_error}
            for p in fitted.pairs]  # fmt: skip
    if args.base:
        _held(args.base)  # read now: a bad base is said before the file is written
    write_calibration(args.output, calibration, rows, base=_bases(args))
    print(f"fitted on {len(fitted.pairs)} GPU pairs of {fitted.matrix} (each way):")
    for cls, value in fitted.efficiency.items():
        print(f"  efficiency.{cls} = {value:.6g}")
    for kind, value in fitted.link_bandwidth_bytes_per_s.items():
        print(f"  link_bandwidth_bytes_per_s.{kind} = {value:.6g} ({value / 1e9:.2f} GB/s)")
    _print_fit_quality("not binding on any pair (left as the topology has them)",
                       fitted.not_identifiable, median_abs_error(errors),
                       max_abs_error(errors))  # fmt: skip
    print(f"simcoll: wrote {args.output}", file=sys.stderr)
    return 0


def _check_writable(path: str) -> None:
    """Create and remove a scratch file beside ``path``, as writing it will: a folder
    that takes no file (``/proc``, read-only, not ours) is said before the fit, not
    after it."""
    target = Path(path)
    try:
        fd, scratch = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as error:
        raise ConfigError(f"cannot write a file in {target.parent}: {error.strerror}",
                          source=f"-o {path}") from None  # fmt: skip
    os.close(fd)
    os.unlink(scratch)


def _overrides(args: argparse.Namespace) -> dict[str, str]:
    """``--set`` as overrides, or none where they do not parse (loading will say why)."""
    try:
        return parse_overrides(args.set)
    except ConfigError:
        return {}


def _input_files(args: argparse.Namespace) -> list[str]:
    """Every file the command reads: -o must be none of them."""
    files = [str(f) for f in source_files(args.topology, _overrides(args))]  # with its params
    files += list(args.measurements)
    files += [str(sidecar_path(m)) for m in args.measurements]
    if getattr(args, "params", None) not in (None, "none"):
        files.append(str(args.params))
    files += list(getattr(args, "base", []))
    return files


def _recipes(recipe: Model, points: list[FitPoint]) -> dict[str, list[str]]:
    """Per collective, the recipes its points were simulated with, in words."""
    out: dict[str, list[str]] = {}
    for p in points:
        text = _describe(recipe(p.collective, p.n_ranks, p.size_bytes))
        if text not in out.setdefault(p.collective, []):
            out[p.collective].append(text)
    return out


def _describe(recipe: Recipe | str) -> str:
    """A recipe in words for the params file: 'ring (n_chunks=2, max_in_flight=2)'."""
    if isinstance(recipe, str):
        return recipe
    text = recipe.algorithm
    if recipe.params:
        text += " (" + ", ".join(f"{k}={v}" for k, v in recipe.params) + ")"
    if recipe.simulate_as:
        text += f" as {recipe.simulate_as}"
    return text


def _sections(calibration: Calibration) -> dict[str, Any]:
    return {
        "efficiency": dict(calibration.efficiency),
        "protocol_efficiency": dict(calibration.protocol_efficiency),
        "step_latency_s": dict(calibration.step_latency_s),
        "link_latency_s": dict(calibration.link_latency_s),
        "link_bandwidth_bytes_per_s": dict(calibration.link_bandwidth_bytes_per_s),
        "launch_s": calibration.launch_s,
        "floor_s": calibration.floor_s,
    }


#: Every name ``compare --out`` writes.
COMPARE_FILES = ("points.csv", "summary.csv", "compare.png", "diagnose.csv")


def _compare(args: argparse.Namespace) -> int:
    if args.out is None:
        return _run_compare(args, None)
    with OutputFolder.open(args.out, pattern="|".join(re.escape(n) for n in COMPARE_FILES)) as out:
        others = out.others()
        if others and not args.force:
            raise ConfigError(
                f"holds files simcoll did not write ({', '.join(others[:3])}); choose another "
                "--out or pass --force to write beside them; they stay untouched",
                source=str(args.out),
            )
        clashes = [name for name in others if name in COMPARE_FILES]
        if clashes:
            raise ConfigError(
                f"holds {', '.join(clashes)}, which simcoll writes but did not write here; "
                "will not overwrite (move them or choose another --out)",
                source=str(args.out),
            )
        return _run_compare(args, out)


def _run_compare(args: argparse.Namespace, out: OutputFolder | None) -> int:
    from simcoll.core.units import parse_size_bytes  # noqa: PLC0415

    topology, sets = _inputs(args)
    topology = what_if(topology, args)
    calibration = topology.graph.get("calibration")  # the topology file's own, by default
    if args.params is not None:
        calibration = (None if args.params == "none"
                       else read_params(args.params, topology, args.topology))  # fmt: skip
    recipe, protocol, backend = _choices(args, sets)
    knobs = parse_nccl_knobs(args.nccl)
    try:
        min_size = parse_size_bytes(args.min_size)
    except SimcollError as error:
        raise ConfigError(f"--min-size: {error.message}") from None
    points = [p for p in _points(sets, args.in_place) if p.size_bytes >= min_size]
    shown = [p for p in points if p.size_bytes > 0]
    if args.workers is not None and not args.diagnose:
        raise ConfigError("it sets the processes of --diagnose; a plain compare runs in "
                          "this process", field="--workers")  # fmt: skip
    candidates = [WhatIf("healthy", "", topology, knobs)]
    if args.diagnose and shown:
        widest = max(shown, key=lambda p: p.n_ranks)
        candidates = what_ifs(topology, widest.n_ranks, knobs, nccl=backend == "nccl",
                              placement=widest.placement)  # fmt: skip
    _say_estimate("compare", topology, shown, calibration, recipe, protocol, args.model,
                  knobs=knobs, what_ifs=len(candidates))  # fmt: skip
    bar = Progress(sys.stderr, simulations(shown, recipe) * len(candidates), "sizes",
                   tty_only=True)  # fmt: skip
    skipped: list[tuple[str, str]] = []
    try:
        ranked = diagnose(candidates, points, recipe=recipe, protocol=protocol,
                          model=args.model, calibration=calibration, progress=bar.advance,
                          workers=args.workers or os.cpu_count() or 1,
                          skipped=skipped)  # fmt: skip
    finally:
        bar.close()
    for name, why in skipped:
        print(f"simcoll: note: what-if {name!r} left out: it cannot be simulated ({why})",
              file=sys.stderr)  # fmt: skip
    compared = list(next(d for d in ranked if d.what_if.name == "healthy").points)
    if not compared:
        raise ConfigError(f"{sets[0].source}: no point could be simulated")
    summary = summarise(compared)
    params = f"params {args.params or 'of the topology file'}"
    if calibration is None:
        params = "uncalibrated"
    print(f"simcoll compare on {args.topology} ({params}); errors: simulated vs measured, "
          "time err = sim/meas - 1")  # fmt: skip
    print(format_summary(summary))
    if args.diagnose:
        print(f"\nwhat-ifs, closest first (busbw err = the what-if's busbw / measured - 1, "
              f"over {len(compared)} points):")  # fmt: skip
        print(format_diagnoses(ranked))
        print(f"\n{verdict(ranked)}")
    if out is not None:
        _write_outputs(out, compared, summary)
        if args.diagnose:
            _write_diagnoses(out, ranked)
    return 0


def _write_diagnoses(out: OutputFolder, ranked: list[Diagnosis]) -> None:
    """``diagnose.csv``: one row per what-if, closest first."""
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(["what_if", "change", "points", "mean_abs_busbw_error",
                     "median_busbw_error", "same_as"])  # fmt: skip
    for d in ranked:
        writer.writerow([d.what_if.name, d.what_if.change, len(d.points), f"{d.residual:.6g}",
                         f"{d.bias:.6g}", d.same_as or ""])  # fmt: skip
    print(f"simcoll: wrote {out.write_text('diagnose.csv', text.getvalue())}", file=sys.stderr)


def _held(bases: list[str]) -> Calibration | None:
    """The parameters of the ``--base`` files, later ones over earlier ones."""
    values: dict[str, float] = {}
    for base in bases:
        values.update(read_calibration(base).values)
    return Calibration.from_values(values) if bases else None


def _say_estimate(  # noqa: PLR0917 - what the simulations will be
    command: str,
    topology: nx.DiGraph[str],
    points: list[FitPoint],
    calibration: Calibration | None,
    recipe: Model,
    protocol: str | None,
    model: str,
    *,
    per_pass: bool = False,
    knobs: NcclKnobs | None = None,
    what_ifs: int = 1,
) -> None:
    """Say on stderr what simulating the points will take, before it starts (a table of
    thousands of rows may take an hour): the calls, and the estimate by the path each
    will run (:func:`simcoll.calibrate.fit.estimate_points`). A fit makes several passes
    (``per_pass``): one per protocol, parameter and iteration, each a pass over the
    points, with a fresh calibration."""
    calls = simulations(points, recipe)
    protocols = PROTOCOL_NAMES if protocol == "auto" and per_pass else (protocol,)
    seconds = what_ifs * sum(estimate_points(topology, points, calibration, recipe=recipe,
                                             protocol=p, model=model, knobs=knobs)
                             for p in protocols)  # fmt: skip
    what = "a pass over them (a fit makes several)" if per_pass else "them"
    if what_ifs > 1:
        calls *= what_ifs
        what = f"them on the design and {what_ifs - 1} what-ifs"
    print(f"{command}: {len(points)} measured point(s), {calls} call(s) to simulate; "
          f"estimated about {format_duration(seconds)} for {what}", file=sys.stderr)  # fmt: skip


def _write_outputs(out: OutputFolder, compared: list[Any], summary: list[dict[str, Any]]) -> None:
    from simcoll.output.plot import plot_comparison  # noqa: PLC0415 - matplotlib only when asked

    rows = [
        {
            **asdict(p),
            "regime": p.regime,
            "time_error": p.time_error,
            "busbw_error": p.busbw_error,
        }
        for p in compared
    ]
    written = []
    for name, table in (("points.csv", rows), ("summary.csv", summary)):
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
        written.append(out.write_text(name, text.getvalue()))
    written.append(plot_comparison(compared, out.reserve("compare.png")))
    print(f"simcoll: wrote {', '.join(map(str, written))}", file=sys.stderr)


def _bases(args: argparse.Namespace) -> list[str]:
    """The ``--base`` params files as the written file names them: relative to its folder."""
    out_dir = Path(args.output).resolve().parent
    return [os.path.relpath(Path(b).resolve(), out_dir) for b in args.base]


def _print_fit_quality(left_out: str, names: Sequence[str], median: float,
                       worst: float) -> None:  # fmt: skip
    """A fit's closing lines: what it left as it was, and its |error| over the points."""
    if names:
        print(f"  {left_out}: " + ", ".join(names))
    print(f"  |error| median {100 * median:.1f} %, max {100 * worst:.1f} %")
