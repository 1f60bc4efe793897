"""``simcoll bench``: a fixed suite of speed and scale cases, measured, never asserted.

Each case runs in its own process (so its peak memory is its own, and a case that runs
past its time limit is stopped without losing the rows already printed) and reports:

- ``ranks``: GPUs of the collective;
- ``transfers``: transfers of the whole schedule (a 16,384-GPU ring all-reduce has 4.3
  billion), ``simulated``: those the engine ran (representatives, on the symmetric path);
- ``events``: distinct simulated instants at which flows started or finished;
- ``sim_time_ms``: simulated time of the collective (for the sweep: summed over its sizes);
- ``wall_s``: wall-clock seconds of the case (topology, schedule, routing, simulation);
- ``events_per_s``: events / wall_s; ``peak_MiB``: peak resident memory of the process
  (or of the command a case runs, where that is more);
- ``busbw_GB/s``: nccl-tests bus bandwidth (for the sweep: at its largest size);
- ``path``: ``symmetric`` (exact quotient, :mod:`simcoll.sim.symmetry`) or ``general``;
- ``estimate_s``: what :mod:`simcoll.models.estimate` (the cost check of ``simcoll run``)
  predicts for the case's wall time, by the path it takes: its constants are calibrated
  on these rows.

The cases and their targets (issue 5) are in :data:`CASES`.
"""

from __future__ import annotations

import csv
import json
import math
import multiprocessing
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import networkx as nx
import numpy as np

from simcoll.algorithms import build_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.shipped import data_root
from simcoll.models.estimate import estimate_point
from simcoll.plan.placement import place_ranks
from simcoll.plan.search import search_plan
from simcoll.plan.tuning import ring_chunks
from simcoll.prediction import predict, simulated
from simcoll.prediction.call import Machine, call_setup
from simcoll.prediction.call_cost import expected_s
from simcoll.sim.engine import SimulationResult, simulate
from simcoll.sim.symmetry import simulate_ring_fast
from simcoll.topology import gpu_nodes
from simcoll.topology import load as load_topology

__all__ = ["CASES", "BenchRow", "Case", "run_bench"]

TOPOLOGIES = data_root() / "topologies"
GIB = 2**30
MIB = 2**20


@dataclass(frozen=True)
class Case:
    """One benchmark case: what it runs and the wall-time target it is held to."""

    name: str
    description: str
    target_wall_s: float | None
    run: Callable[[], BenchRow]


@dataclass
class BenchRow:
    """What one case measured (see the module docstring for each field)."""

    case: str
    ranks: int
    transfers: int
    simulated: int
    events: int
    sim_time_ms: float
    wall_s: float = math.nan
    events_per_s: float = math.nan
    peak_MiB: float = math.nan  # noqa: N815 - the unit's own spelling
    busbw_GBps: float = math.nan  # noqa: N815 - GB/s
    path: str = ""
    estimate_s: float = math.nan
    target_wall_s: float | None = None
    status: str = "ok"
    estimating_s: float = 0.0  # wall time the case spent estimating, not in wall_s


def _topology(
    file: str, n_nodes: int | None = None, routing: str | None = None, **overrides: str
) -> nx.DiGraph[str]:
    if n_nodes is not None:
        overrides["n_nodes"] = str(n_nodes)
    graph = load_topology(TOPOLOGIES / file, overrides=overrides)
    if routing is not None:
        graph.graph["routing"] = routing
    return graph


def _ring_case(name: str, file: str, n_nodes: int | None) -> BenchRow:
    """Ring all-reduce of 1 GiB, 8 channels, on the symmetric path (d-mod-k routing)."""
    graph = _topology(file, n_nodes, routing="dmodk")
    n = len(gpu_nodes(graph))
    found = simulate_ring_fast(graph, "allreduce", n, GIB, n_channels=8)
    if found is None:
        raise ConfigError(f"{file}: the ring is not symmetric on this fabric")
    result, sym = found
    row = _row(name, result, transfers=sym.n_transfers, path="symmetric")
    row.estimate_s = estimate_point("allreduce", "ring", n_ranks=n, size_bytes=GIB, n_channels=8,
                                    n_chunks=1, period_ranks=sym.period_ranks).seconds  # fmt: skip
    return row


def _planned_ring_case(name: str, file: str, n_nodes: int) -> BenchRow:
    """Ring all-reduce of 1 GiB on NCCL's plan (16 channels over the 8 NICs, PXN), one
    piece per channel and block, on the symmetric path (d-mod-k routing)."""
    graph = _topology(file, n_nodes, routing="dmodk")
    n = len(gpu_nodes(graph))
    plan = search_plan(graph)
    found = simulate_ring_fast(graph, "allreduce", n, GIB, n_channels=plan.n_channels, plan=plan)
    if found is None:
        raise ConfigError(f"{file}: NCCL's rings are not symmetric on this fabric")
    result, sym = found
    row = _row(
        name, result, transfers=sym.n_transfers, path=f"symmetric, period {sym.period_ranks}"
    )
    row.estimate_s = estimate_point("allreduce", "ring", n_ranks=n, size_bytes=GIB,
                                    n_channels=plan.n_channels, n_chunks=1,
                                    period_ranks=sym.period_ranks).seconds  # fmt: skip
    return row


def _general_case(  # noqa: PLR0917 - a case's own description
    name: str,
    file: str,
    n_nodes: int,
    collective: str,
    algorithm: str,
    size_bytes: int,
    routing: str | None = "dmodk",
) -> BenchRow:
    graph = _topology(file, n_nodes, routing=routing)
    n = len(gpu_nodes(graph))
    params = {"gpus_per_node": 8} if algorithm == "tree" else {}
    schedule = build_schedule(collective, algorithm, n_ranks=n, size_bytes=size_bytes, **params)
    result = simulate(graph, schedule)
    row = _row(name, result, transfers=schedule.n_transfers, path="general")
    row.estimate_s = estimate_point(collective, algorithm, n_ranks=n, size_bytes=size_bytes,
                                    n_chunks=1, symmetric=False).seconds  # fmt: skip
    return row


def _sweep_case(name: str) -> BenchRow:
    """64 sizes of ring all-reduce, 1 MiB..1 GiB, 128 GPUs, 8 channels, chunks as predict."""
    graph = _topology("h100-rail-optimized.toml", 16, routing="dmodk")
    n, channels = 128, 8
    grain = n * channels * 64  # every size splits evenly into the pieces of any chunking
    sizes = np.unique(np.round(np.logspace(20, 30, 64, base=2) / grain).astype(np.int64) * grain)
    transfers = simulated = events = 0
    sim_time_s = estimate_s = 0.0
    busbw = math.nan
    for size in sizes.tolist():
        chunks = ring_chunks(Collective.ALLREDUCE, n, size, channels)
        found = simulate_ring_fast(
            graph, "allreduce", n, size, n_channels=channels, n_chunks=chunks
        )
        if found is None:
            raise ConfigError("the 128-GPU ring is not symmetric on this fabric")
        result, sym = found
        estimate_s += estimate_point("allreduce", "ring", n_ranks=n, size_bytes=size,
                                     n_channels=channels, n_chunks=chunks,
                                     period_ranks=sym.period_ranks).seconds  # fmt: skip
        transfers += sym.n_transfers
        simulated += sym.representatives.n_transfers
        events += result.stats.instants
        sim_time_s += result.time_s
        busbw = result.busbw_bytes_per_s / 1e9
    return BenchRow(
        case=f"{name} ({len(sizes)} sizes)",
        ranks=n,
        transfers=transfers,
        simulated=simulated,
        events=events,
        sim_time_ms=sim_time_s * 1e3,
        busbw_GBps=busbw,
        path="symmetric",
        estimate_s=estimate_s,
    )


def _build_case(name: str, file: str, n_nodes: int) -> BenchRow:
    """Build and validate a shipped design at ``n_nodes``: what a topology of that size
    costs to hold, before any call runs on it."""
    graph = _topology(file, n_nodes)
    return BenchRow(
        case=name,
        ranks=len(gpu_nodes(graph)),
        transfers=0,
        simulated=0,
        events=0,
        sim_time_ms=math.nan,
        path=f"topology: {graph.number_of_nodes():,} nodes, {graph.number_of_edges():,} links",
    )


def _predict_case(  # noqa: PLR0917 - a case's own description
    name: str,
    file: str,
    n_nodes: int,
    sizes_bytes: list[int],
    algorithm: str,
    protocol: str,
    routing: str | None = None,
    placement: str = "linear",
    overrides: dict[str, str] | None = None,
    collective: str = "allreduce",
    extend_rings: bool = False,
    model: str = "flow",
) -> BenchRow:
    """What ``simcoll predict`` runs (NCCL's plan and tuning, the file's routing unless
    ``routing``, bare links): the wall time a user waits. Busbw at the largest size.
    ``extend_rings`` turns on :data:`simcoll.prediction.simulated.EXTEND_RINGS` in this
    case's process."""
    simulated.EXTEND_RINGS = extend_rings
    graph = _topology(file, n_nodes, routing=routing, **(overrides or {}))
    started = time.perf_counter()
    estimate_s = _predict_estimate(graph, collective, sizes_bytes, algorithm, protocol, placement)
    estimating_s = time.perf_counter() - started
    rows = predict(graph, collective, sizes_bytes, algorithm=algorithm, protocol=protocol,
                   calibration=None, placement=placement, model=model).rows  # fmt: skip
    last = rows[-1]
    return BenchRow(
        estimate_s=estimate_s,
        estimating_s=estimating_s,
        case=name if len(sizes_bytes) == 1 else f"{name} ({len(sizes_bytes)} sizes)",
        ranks=last.n_ranks,
        transfers=0,
        simulated=0,
        events=0,
        sim_time_ms=sum(row.time_s for row in rows) * 1e3,
        busbw_GBps=last.busbw_bytes_per_s / 1e9,
        path=f"predict: {last.algorithm}/{last.protocol}, "
        + (f"routing {last.routing}" if last.routing else f"model {last.model}"),
    )


def _predict_estimate(  # noqa: PLR0917 - predict's own arguments
    graph: nx.DiGraph[str],
    collective: str,
    sizes_bytes: list[int],
    algorithm: str,
    protocol: str,
    placement: str,
) -> float:
    """What the cost check estimates for this ``predict`` (on a machine of its own, so
    that the run finds nothing routed ahead of it)."""
    machine = Machine.of(graph, None)
    nodes = place_ranks(graph, machine.n_gpus, placement)
    setup = call_setup(machine, collective, nodes, algorithm=algorithm, protocol=protocol,
                       placement=placement)  # fmt: skip
    return expected_s(setup, sizes_bytes)


def _ddp_case(name: str, n_nodes: int) -> BenchRow:
    """The README's DDP step (24 layers, 1.36 GB of gradients, 25 MiB buckets) on
    ``n_nodes`` DGX H100 of h100-ib-fat-tree, with every default: each bucket's all-reduce
    is the call ``predict`` runs (NCCL's plan over the 8 NICs, protocol auto, the file's
    calibration). Busbw: one bucket's all-reduce, from ``allreduce_s``."""
    from simcoll.scenarios.cost import estimate_run  # noqa: PLC0415 - with the workloads
    from simcoll.scenarios.workloads import run_workload  # noqa: PLC0415 - the workloads

    graph = _topology("h100-ib-fat-tree.toml", n_nodes)
    started = time.perf_counter()
    found = estimate_run("ddp", graph, {"bucket_bytes": 25 * MIB})
    estimating_s = time.perf_counter() - started
    result = run_workload("ddp", graph, bucket_bytes=25 * MIB)
    m = result.metrics
    n = result.timeline.n_ranks
    per_call_s = m["allreduce_s"] / m["n_buckets"]
    bucket = m["grad_bytes"] / m["n_buckets"]
    return BenchRow(
        case=name, ranks=n, transfers=0, simulated=0, events=0,
        sim_time_ms=m["time_s"] * 1e3,
        busbw_GBps=bucket / per_call_s * 2 * (n - 1) / n / 1e9,
        path=f"workload ddp: {int(m['n_buckets'])} buckets, step {m['time_s'] * 1e3:.2f} ms",
        estimate_s=found[0] if found else math.nan, estimating_s=estimating_s,
    )  # fmt: skip


def _step_case(
    name: str,
    model_file: str,
    n_nodes: int,
    *,
    topology: str = "h100-ib-fat-tree.toml",
    **layout: Any,
) -> BenchRow:
    """A shipped model's training step with its file's layout (or ``layout``'s changes to
    it) on ``n_nodes`` DGX H100 of ``topology``, every default (each call is
    ``predict``'s; compute from the file's ``[gpu]``): the step as a scenario's
    ``training_step`` point runs it."""
    from simcoll.scenarios.workloads import run_workload  # noqa: PLC0415 - the workloads

    graph = _topology(topology, n_nodes)
    m = run_workload("training_step", graph, transformer=model_file, **layout).metrics
    return BenchRow(
        case=name, ranks=int(m["n_gpus"]), transfers=0, simulated=0, events=0,
        sim_time_ms=m["time_s"] * 1e3,
        path=(f"workload training_step {model_file}: tp {m['tp']:.0f} pp {m['pp']:.0f} "
              f"dp {m['dp']:.0f} ep {m['ep']:.0f}, {m['n_microbatches']:.0f} micro-batches, "
              f"MFU {m['mfu']:.3f}, {m['tokens_per_s']:,.0f} tokens/s"),
    )  # fmt: skip


def _search_case(name: str, model: str, n_nodes: int) -> BenchRow:
    """``simcoll step MODEL h100-ib-fat-tree --set n_nodes=N --search`` on one core (one
    worker), run as the command itself: every layout screened, the promising ones
    simulated."""
    command = [sys.executable, "-m", "simcoll", "step", model,
               str(TOPOLOGIES / "h100-ib-fat-tree.toml"), "--set", f"n_nodes={n_nodes}",
               "--search", "--format", "json"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise ConfigError(f"simcoll step --search failed: {done.stderr.strip()}")
    out, err = done.stdout, done.stderr
    found = json.loads(out)
    best = found["ranked"][0]
    counts = re.search(r"(\d+) layouts, (\d+) divide and fit", err)
    n_layouts, n_fit = (int(counts[1]), int(counts[2])) if counts else (0, 0)
    n_skipped = len(found["skipped"])
    return BenchRow(
        case=name, ranks=n_nodes * 8, transfers=0, simulated=0, events=0,
        sim_time_ms=best["time_s"] * 1e3,
        path=(f"simcoll step --search: {n_layouts} layouts, {n_fit} divide and fit, "
              f"{n_fit - n_skipped} simulated, {n_skipped} skipped (compute alone slower than "
              f"the 10th best); best tp {best['tp']} pp {best['pp']} vp {best['vp']} "
              f"{best['data_parallel']} mb {best['micro_batch_size']}, step "
              f"{best['time_s']:.3f} s"),
    )  # fmt: skip


def _calibrate_case(name: str) -> BenchRow:
    """``simcoll calibrate`` on the 2 x 8 H100 ring all-reduce table (14 sizes, 1 MiB to
    8 GiB): efficiency per link class, per protocol, and the launch cost. Run as the
    command itself (``calibrate`` is a layer of its own), into a scratch folder."""
    table = (TOPOLOGIES.parent / "validation/data/public/"
             "nccl_allreduce_2x8xH100_ndr_ring_mincta24_nccltests309_gjaion.csv")  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        command = [
            sys.executable, "-m", "simcoll", "calibrate",
            "--topology", str(TOPOLOGIES / "h100-ib-fat-tree.toml"), "--set", "n_nodes=2",
            "--collective", "allreduce", "--ranks", "16", "--algorithm", "ring",
            "--fit", "efficiency,protocol_efficiency,launch_s",
            "-o", str(Path(scratch) / "h100.params.toml"), str(table),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise ConfigError(f"simcoll calibrate failed: {done.stderr.strip()}")
    summary = next(
        (line.strip() for line in done.stdout.splitlines() if "|error|" in line), "fitted"
    )
    return BenchRow(
        case=name, ranks=16, transfers=0, simulated=0, events=0, sim_time_ms=math.nan,
        path=f"simcoll calibrate: {summary}",
    )  # fmt: skip


def _diagnose_case(name: str, n_nodes: int) -> BenchRow:
    """``simcoll compare --diagnose`` of a 25-size all-reduce table (1 KiB to 16 GiB) on
    ``n_nodes`` DGX H100 of h100-ib-fat-tree: the design and its seven what-ifs, each
    simulated at every size, one process per core. The table is a bus at 80 GB/s with 50
    us of latency (the times do not matter to the cost), written as nccl-tests' columns;
    run as the command itself, into a scratch folder."""
    n_ranks = 8 * n_nodes
    with tempfile.TemporaryDirectory() as scratch:
        table = Path(scratch) / "slow.csv"
        lines = ["size_bytes,count,type,redop,time_us_oop,algbw_oop,busbw_oop,time_us_ip,"
                 "algbw_ip,busbw_ip"]  # fmt: skip
        for size_bytes in (2**k for k in range(10, 35)):
            time_s = 50e-6 + 2 * (n_ranks - 1) / n_ranks * size_bytes / 80e9
            algbw = size_bytes / time_s / 1e9
            busbw = algbw * 2 * (n_ranks - 1) / n_ranks
            lines.append(f"{size_bytes},{size_bytes // 4},float,sum,{time_s * 1e6:.2f},"
                         f"{algbw:.2f},{busbw:.2f},{time_s * 1e6:.2f},{algbw:.2f},"
                         f"{busbw:.2f}")  # fmt: skip
        table.write_text("\n".join(lines) + "\n")
        command = [sys.executable, "-m", "simcoll", "compare", str(table),
                   "--topology", str(TOPOLOGIES / "h100-ib-fat-tree.toml"),
                   "--set", f"n_nodes={n_nodes}", "--collective", "allreduce",
                   "--ranks", str(n_ranks), "--diagnose"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise ConfigError(f"simcoll compare --diagnose failed: {done.stderr.strip()}")
    verdict = done.stdout.strip().splitlines()[-1]
    return BenchRow(
        case=name, ranks=n_ranks, transfers=0, simulated=0, events=0, sim_time_ms=math.nan,
        path=f"simcoll compare --diagnose, 25 sizes: {verdict}",
    )  # fmt: skip


def _row(name: str, result: SimulationResult, *, transfers: int, path: str) -> BenchRow:
    return BenchRow(
        case=name,
        ranks=result.schedule.n_ranks,
        transfers=transfers,
        simulated=result.schedule.n_transfers,
        events=result.stats.instants,
        sim_time_ms=result.time_s * 1e3,
        busbw_GBps=result.busbw_bytes_per_s / 1e9,
        path=path,
    )


CASES: tuple[Case, ...] = (
    Case(
        "ring-8",
        "ring all-reduce 1 GiB, 8 channels, one DGX H100 (NVSwitch)",
        None,
        lambda: _ring_case("ring-8", "dgx-h100.toml", None),
    ),
    Case(
        "ring-1024",
        "ring all-reduce 1 GiB, 8 channels, 128 DGX H100 on a rail-optimized fat-tree",
        10.0,
        lambda: _ring_case("ring-1024", "h100-rail-optimized.toml", 128),
    ),
    Case(
        "ring-16384",
        "ring all-reduce 1 GiB, 8 channels, 2,048 DGX H100 on a rail-optimized fat-tree",
        300.0,
        lambda: _ring_case("ring-16384", "h100-rail-optimized.toml", 2048),
    ),
    Case(
        "build-131072-multiplane",
        "build and validate the 131,072-GPU multi-plane design: 16,384 DGX H100, NIC i on "
        "plane i, each plane a 3-tier NDR Clos (h100-multi-plane, n_nodes=16384; target "
        "also < 4 GiB)",
        60.0,
        lambda: _build_case("build-131072-multiplane", "h100-multi-plane.toml", 16384),
    ),
    Case(
        "ring-16384-multiplane",
        "predict: ring all-reduce 1 GiB, simple, NCCL's plan, 2,048 DGX H100 on 8 planes of "
        "2-tier NDR fat trees (DeepSeek-V3's multi-plane fat tree at its full 16,384 GPUs; "
        "h100-multi-plane with levels=2)",
        60.0,
        lambda: _predict_case(
            "ring-16384-multiplane",
            "h100-multi-plane.toml",
            2048,
            [GIB],
            "ring",
            "simple",
            overrides={"levels": "2"},
        ),
    ),
    Case(
        "ring-1024-nccl",
        "ring all-reduce 1 GiB on NCCL's plan (16 channels, 8 NICs per node, PXN), 128 DGX "
        "H100 on a rail-optimized fat-tree",
        10.0,
        lambda: _planned_ring_case("ring-1024-nccl", "h100-rail-optimized.toml", 128),
    ),
    Case(
        "ring-16384-nccl",
        "ring all-reduce 1 GiB on NCCL's plan (16 channels, 8 NICs per node, PXN), 2,048 DGX "
        "H100 on a rail-optimized fat-tree",
        60.0,
        lambda: _planned_ring_case("ring-16384-nccl", "h100-rail-optimized.toml", 2048),
    ),
    Case(
        "alltoall-1024",
        "all-to-all 256 MiB, 128 A100 nodes on a 2:1 oversubscribed RoCE fat-tree, d-mod-k "
        "routing: the general path",
        30.0,
        lambda: _general_case(
            "alltoall-1024", "a100-roce-2to1.toml", 128, "alltoall", "direct", 256 * MIB
        ),
    ),
    Case(
        "alltoall-1024-ecmp",
        "predict: direct all-to-all 256 MiB, every protocol, 128 A100 nodes on a 2:1 RoCE "
        "fat-tree routed by its shipped hashed ECMP (closed form: every flow starts at once)",
        30.0,
        lambda: _predict_case(
            "alltoall-1024-ecmp",
            "a100-roce-2to1.toml",
            128,
            [256 * MIB],
            "direct",
            "auto",
            collective="alltoall",
        ),
    ),
    Case(
        "ring-ecmp-256",
        "ring all-reduce 64 MiB, 32 DGX H100, rail-optimized fat-tree with hashed ECMP: the "
        "general path (collisions break the symmetry)",
        None,
        lambda: _general_case(
            "ring-ecmp-256", "h100-rail-optimized.toml", 32, "allreduce", "ring", 64 * MIB, None
        ),
    ),
    Case(
        "tree-1024",
        "double binary tree all-reduce 1 GiB, 128 DGX H100, rail-optimized fat-tree",
        None,
        lambda: _general_case(
            "tree-1024", "h100-rail-optimized.toml", 128, "allreduce", "tree", GIB
        ),
    ),
    Case(
        "ring-1024-ecmp",
        "predict: ring all-reduce 1 GiB, simple, NCCL's plan, 128 DGX H100, rail-optimized "
        "fat-tree routed by hashed ECMP (as RoCE fabrics are)",
        30.0,
        lambda: _predict_case(
            "ring-1024-ecmp",
            "h100-rail-optimized.toml",
            128,
            [GIB],
            "ring",
            "simple",
            routing="ecmp",
        ),
    ),
    Case(
        "nvls-tree-1024",
        "predict: NVLS-tree all-reduce 1 GiB (NCCL's pick there), 128 DGX H100 on the NDR "
        "fat-tree: each server's NVSwitch reduces, trees over the servers (the general path)",
        30.0,
        lambda: _predict_case(
            "nvls-tree-1024", "h100-ib-fat-tree.toml", 128, [GIB], "nvls_tree", "simple"
        ),
    ),
    Case(
        "ring-1024-random",
        "predict: ring all-reduce 1 GiB, simple, NCCL's plan, random placement (seed 1), "
        "128 A100 nodes on a 2:1 RoCE fat-tree (hashed ECMP: no symmetry, and over one "
        "schedule's transfers: refused by default; here with EXTEND_RINGS on, its first 32 "
        "steps extended at their pace, an extrapolation, not exact)",
        30.0,
        lambda: _predict_case(
            "ring-1024-random",
            "a100-roce-2to1.toml",
            128,
            [GIB],
            "ring",
            "simple",
            placement="random:1",
            extend_rings=True,
        ),
    ),
    Case(
        "ring-16384-random",
        "predict --model analytical: ring all-reduce 1 GiB, simple, NCCL's plan, random "
        "placement (seed 1), 2,048 A100 nodes on a 2:1 RoCE fat-tree routed by hashed ECMP "
        "(over any schedule's transfers; the closed form with each pair at its busiest "
        "link's pace, the flow model's time at 128 GPUs)",
        300.0,
        lambda: _predict_case(
            "ring-16384-random",
            "a100-roce-2to1.toml",
            2048,
            [GIB],
            "ring",
            "simple",
            placement="random:1",
            model="analytical",
        ),
    ),
    Case(
        "allreduce-65536-3tier",
        "predict --model analytical: NCCL's default all-reduce 1 GiB (its pick: NVLS-tree), "
        "8,192 DGX H100 on the 3-tier NDR Clos at its largest (h100-3tier-clos, 64 pods; "
        "the closed form, within 2.4 % of the flow model at 1,024 GPUs)",
        120.0,
        lambda: _predict_case(
            "allreduce-65536-3tier",
            "h100-3tier-clos.toml",
            8192,
            [GIB],
            "nccl",
            "auto",
            model="analytical",
        ),
    ),
    Case(
        "allreduce-131072-multiplane",
        "predict --model analytical: NCCL's default all-reduce 1 GiB (its pick: NVLS-tree), "
        "16,384 DGX H100 on 8 planes of 3-tier NDR Clos (h100-multi-plane; target also "
        "< 16 GiB)",
        300.0,
        lambda: _predict_case(
            "allreduce-131072-multiplane",
            "h100-multi-plane.toml",
            16384,
            [GIB],
            "nccl",
            "auto",
            model="analytical",
        ),
    ),
    Case(
        "ring-1024-random-ib",
        "predict: ring all-reduce 1 GiB, simple, NCCL's plan, random placement (seed 1), "
        "128 DGX H100 on h100-ib-fat-tree made 2:1 (d-mod-k routing: the channel copies hold)",
        30.0,
        lambda: _predict_case(
            "ring-1024-random-ib",
            "h100-ib-fat-tree.toml",
            128,
            [GIB],
            "ring",
            "simple",
            placement="random:1",
            overrides={"oversubscription": "2"},
        ),
    ),
    Case(
        "tree-1024-nccl",
        "predict: double binary tree all-reduce 1 GiB, simple, NCCL's trees and pieces, "
        "128 DGX H100, rail-optimized fat-tree",
        30.0,
        lambda: _predict_case(
            "tree-1024-nccl", "h100-rail-optimized.toml", 128, [GIB], "tree", "simple"
        ),
    ),
    Case(
        "auto-128",
        "predict --algorithm auto --sizes 8:8G (31 sizes, every protocol), 16 DGX H100 on "
        "h100-ib-fat-tree",
        60.0,
        lambda: _predict_case(
            "auto-128", "h100-ib-fat-tree.toml", 16, [2**k for k in range(3, 34)], "auto", "auto"
        ),
    ),
    Case(
        "ddp-128",
        "the README's DDP step (24 layers, 1.36 GB, 25 MiB buckets), 16 DGX H100 on "
        "h100-ib-fat-tree, every default: each all-reduce is predict's call",
        3.0,
        lambda: _ddp_case("ddp-128", 16),
    ),
    Case(
        "ddp-1024",
        "the same DDP step on 128 DGX H100 (target also < 2 GiB)",
        30.0,
        lambda: _ddp_case("ddp-1024", 128),
    ),
    Case(
        "step-gpt3-1024",
        "a GPT-3 175B training step, TP 8 x PP 16 x DP 8 (1,536 sequences of 2,048 tokens), "
        "128 DGX H100 on h100-ib-fat-tree (target also < 4 GiB)",
        60.0,
        lambda: _step_case("step-gpt3-1024", "gpt3-175b", 128),
    ),
    Case(
        "step-70b-fsdp-128",
        "a Llama 2 70B step with PyTorch FSDP, one unit per block, full recomputation (128 "
        "sequences of 4,096 tokens), 16 DGX H100 on h100-ib-fat-tree (issue 42's target: "
        "10 s)",
        10.0,
        lambda: _step_case(
            "step-70b-fsdp-128",
            "llama2-70b",
            16,
            tp=1,
            pp=1,
            data_parallel="fsdp",
            global_batch_size=128,
            seq_length=4096,
            recompute="full",
        ),
    ),
    Case(
        "step-405b-2048",
        "Llama 3 405B in its pre-training layout, TP 8 x PP 16 (7 layers on the first and "
        "last stages) x DP 16, 256 sequences of 8,192 tokens, 256 DGX H100 on "
        "h100-rail-optimized (issue 42's 16,384-GPU case at an eighth of its GPUs)",
        60.0,
        lambda: _step_case(
            "step-405b-2048",
            "llama3-405b",
            256,
            topology="h100-rail-optimized.toml",
            tp=8,
            pp=16,
            first_stage_layers=7,
            last_stage_layers=7,
            global_batch_size=256,
        ),
    ),
    Case(
        "step-405b-16384",
        "issue 42's Llama 3 405B step: TP 8 x PP 16 (7 layers on the first and last stages) "
        "x DP 128, 2,048 sequences of 8,192 tokens, 2,048 DGX H100 on h100-rail-optimized "
        "(target also < 8 GiB)",
        60.0,
        lambda: _step_case(
            "step-405b-16384",
            "llama3-405b",
            2048,
            topology="h100-rail-optimized.toml",
            tp=8,
            pp=16,
            first_stage_layers=7,
            last_stage_layers=7,
            global_batch_size=2048,
        ),
    ),
    Case(
        "search-70b-1024",
        "simcoll step --search for Llama 3 70B on 128 DGX H100 of h100-ib-fat-tree (every "
        "layout that divides and fits ranked, one worker; issue 42's target: 5 min)",
        300.0,
        lambda: _search_case("search-70b-1024", "llama3-70b", 128),
    ),
    Case(
        "step-mixtral-256",
        "a Mixtral 8x7B training step, EP 8 x PP 4 x DP 64 (1,024 sequences of 4,096 tokens), "
        "32 DGX H100 on h100-ib-fat-tree",
        60.0,
        lambda: _step_case("step-mixtral-256", "mixtral-8x7b", 32),
    ),
    Case(
        "calibrate-h100",
        "calibrate efficiency, protocol factors and launch cost on the 2 x 8 H100 ring "
        "all-reduce table (14 sizes)",
        120.0,
        lambda: _calibrate_case("calibrate-h100"),
    ),
    Case(
        "diagnose-256",
        "simcoll compare --diagnose of a 25-size all-reduce table (1 KiB to 16 GiB) on 32 "
        "DGX H100 of h100-ib-fat-tree: the design and seven what-ifs (issue 43's target: "
        "2 min)",
        120.0,
        lambda: _diagnose_case("diagnose-256", 32),
    ),
    Case(
        "sweep-128",
        "ring all-reduce at 64 sizes (1 MiB..1 GiB), 16 DGX H100, 8 channels",
        30.0,
        lambda: _sweep_case("sweep-128"),
    ),
)


def _child(index: int, queue: multiprocessing.Queue[Any]) -> None:  # pragma: no cover
    start = time.perf_counter()
    try:
        row = CASES[index].run()
    except Exception as error:  # reported as the case's status, not lost
        queue.put(("error", f"{type(error).__name__}: {error}"))
        return
    row.wall_s = time.perf_counter() - start - row.estimating_s
    row.peak_MiB = max(resource.getrusage(who).ru_maxrss for who in  # a command it ran: its
                       (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024  # fmt: skip
    queue.put(("ok", asdict(row)))


def run_bench(names: list[str] | None = None, *, timeout_s: float = 600.0) -> Iterator[BenchRow]:
    """Run the cases named (all by default), each in a fresh process; yield rows as done.

    A case that fails or runs past ``timeout_s`` yields a row whose ``status`` says so.
    """
    chosen = [c for c in CASES if names is None or c.name in names]
    context = multiprocessing.get_context("spawn")
    for case in chosen:
        index = CASES.index(case)
        queue: multiprocessing.Queue[Any] = context.Queue()
        process = context.Process(target=_child, args=(index, queue), daemon=True)
        start = time.perf_counter()
        process.start()
        try:
            status, payload = queue.get(timeout=timeout_s)
        except Exception:  # queue.Empty: the case ran out of time
            status, payload = "timeout", f"stopped after {timeout_s:g} s"
        process.kill()
        process.join()
        if status == "ok":
            row = BenchRow(**payload)
        else:
            row = BenchRow(case.name, 0, 0, 0, 0, math.nan, status=f"{status}: {payload}")
            row.wall_s = time.perf_counter() - start
        row.target_wall_s = case.target_wall_s
        if row.wall_s > 0 and row.events:
            row.events_per_s = row.events / row.wall_s
        yield row


COLUMNS = (
    ("case", "case", "{}"),
    ("ranks", "ranks", "{:,}"),
    ("transfers", "transfers", "{:,}"),
    ("simulated", "simulated", "{:,}"),
    ("events", "events", "{:,}"),
    ("sim_time_ms", "sim time (ms)", "{:.3f}"),
    ("wall_s", "wall (s)", "{:.3f}"),
    ("estimate_s", "estimate (s)", "{:.3g}"),
    ("events_per_s", "events/s", "{:,.0f}"),
    ("peak_MiB", "peak mem (MiB)", "{:,.0f}"),
    ("busbw_GBps", "busbw (GB/s)", "{:.2f}"),
    ("path", "path", "{}"),
    ("target_wall_s", "target (s)", "{:g}"),
    ("status", "status", "{}"),
)


#: The table's columns: COLUMNS with the path moved last (the CSV keeps COLUMNS' order).
_TABLE = tuple(c for c in COLUMNS if c[0] != "path") + tuple(c for c in COLUMNS if c[0] == "path")


def _aligned(text: str, key: str) -> str:
    """A table cell: the case name left-aligned in 28 characters, the path as it is, the
    numbers right-aligned in 14."""
    if key == "case":
        return f"{text:<28}"
    return text if key == "path" else f"{text:>14}"


def _cell(row: BenchRow, key: str, fmt: str) -> str:
    value = getattr(row, key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if key in {"transfers", "simulated", "events"} and not value:
        return "-"  # a case timing a whole command does not count them
    if key == "status" and value == "ok" and row.target_wall_s is not None:
        return "ok" if row.wall_s <= row.target_wall_s else "over target"
    return fmt.format(value)


def print_rows(rows: Iterator[BenchRow], fmt: str, out: TextIO | None = None) -> list[BenchRow]:
    """Print rows as they come (table, csv or json lines) on ``out`` (the standard output
    of the moment the call is made, by default); return them."""
    out = sys.stdout if out is None else out
    done = []
    if fmt == "csv":
        writer = csv.writer(out)
        writer.writerow([key for key, _, _ in COLUMNS])
    elif fmt == "table":  # the case's name first and its path last: free-width text
        out.write("  ".join(_aligned(title, key) for key, title, _ in _TABLE) + "\n")
    for row in rows:
        done.append(row)
        if fmt == "csv":
            writer.writerow([getattr(row, key) for key, _, _ in COLUMNS])
        elif fmt == "json":
            out.write(json.dumps(asdict(row)) + "\n")
        else:
            out.write("  ".join(_aligned(_cell(row, k, f), k) for k, _, f in _TABLE) + "\n")
        out.flush()
    return done
