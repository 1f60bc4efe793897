"""Which fault explains a measured table: the healthy design and named what-ifs, each
simulated at the measured points and ranked by how far the measurement is from it.

A cluster whose nccl-tests tables fall below what its design gives is misconfigured, or
broken, or simcoll's model of it is wrong. :func:`diagnose` simulates the measured points
on the design as given and on each what-if of :func:`what_ifs` (one change each), and
ranks them by the mean |busbw error| of the measured points against each
(:attr:`~simcoll.calibrate.compare.ComparedPoint.busbw_error`); :func:`verdict` says it in
one line. The what-ifs, each where the topology and the runs have what it changes:

- **healthy**: the design as given;
- **one NIC down**: the first NIC of the first rank's server failed (NCCL's channels then
  leave through the others, PXN forwarding to them over NVLink);
- **one NIC cable at 1/2 or 1/4 speed**: that NIC's link to the fabric slow (on one
  server, or with no NICs: the first rank's GPU's links); on a fabric of like servers,
  one NIC stands for any;
- **GPUDirect RDMA off**: every NIC's traffic staged in host memory
  (:func:`~simcoll.topology.whatif.gpudirect_rdma_off`; needs the file's
  ``host_memory_bandwidth``);
- **PCIe a generation lower**: every PCIe link at half its bandwidth (a GPU or NIC trained
  at Gen4 in a Gen5 slot, or at x8);
- **half the channels**: NCCL's channels and NVLS's CTAs halved (``NCCL_MAX_CTAS``; runs
  of NCCL only);
- **spine at half speed**: every switch-to-switch link at half its bandwidth (links
  trained at half their rate; unlike a 2:1 oversubscribed spine, half the uplinks at full
  speed, which slows only traffic that needs more uplinks than it has).

What-ifs that simulate exactly the same times as one ranked before them (the spine of a
job inside one leaf) are marked ``same as`` it: these runs cannot tell them apart. A fault
ranks above the healthy design only if closer by :data:`CLEARER`, and the line says a
fault is no evidence where the design is itself within simcoll's own error
(:data:`MODEL_ERROR`).
Not yet among them: NCCL's socket transport and PXN off (simcoll models neither).
"""

from __future__ import annotations

import multiprocessing
import statistics
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import Any

import networkx as nx

from simcoll.calibrate.compare import ComparedPoint, compare
from simcoll.calibrate.fit import FitPoint, Model, simulations
from simcoll.core.errors import SimcollError
from simcoll.plan.placement import place_ranks
from simcoll.plan.search import search_plan
from simcoll.plan.tuning import NcclKnobs
from simcoll.topology.calibration import Calibration
from simcoll.topology.schema import LinkKind, NodeKind
from simcoll.topology.tiebreak import natural_key
from simcoll.topology.whatif import degrade, fail, gpudirect_rdma_off

__all__ = ["Diagnosis", "WhatIf", "diagnose", "format_diagnoses", "rank", "verdict", "what_ifs"]

#: A slow link's what-ifs: the link at 1/k of its bandwidth, each k (a port trained at a
#: lower rate, a bad cable, a shaped link).
SLOW = (2, 4)
#: Below this mean |busbw error| a what-if explains the measurement.
EXPLAINS = 0.25
#: simcoll's own error on healthy clusters it was not fitted on: held-out multi-node
#: tables from 64 MiB, median 4-5 % on other clusters, up to 16 % on 4-8 nodes
#: (``validation/README.md``, leave-one-out). A healthy design this close is no evidence
#: of a fault, whatever fits better.
MODEL_ERROR = 0.10
#: A fault closer than the healthy design by less than this (mean |busbw error|, absolute)
#: fits no better than it, and ranks below it.
CLEARER = 0.02


@dataclass(frozen=True)
class WhatIf:
    """One named change to the design: its name, what it changes (in words a user can
    repeat with ``--fail``, ``--degrade`` or ``--nccl`` where those can), the changed
    topology and the NCCL settings to simulate it with."""

    name: str
    change: str
    topology: nx.DiGraph[str]
    knobs: NcclKnobs | None


@dataclass(frozen=True)
class Diagnosis:
    """A what-if and the measured points against its simulation."""

    what_if: WhatIf
    points: tuple[ComparedPoint, ...]
    same_as: str | None = None  # an earlier what-if that simulates the same times

    @property
    def residual(self) -> float:
        """Mean |busbw error| of the measured points against this what-if: a mean, not a
        median, as most faults show in one size regime only (fewer channels below 64 MiB,
        a slow NIC above)."""
        return statistics.fmean(abs(p.busbw_error) for p in self.points)

    @property
    def bias(self) -> float:
        """Median signed busbw error: positive where the what-if is faster than measured."""
        return statistics.median(p.busbw_error for p in self.points)


def what_ifs(
    topology: nx.DiGraph[str], n_ranks: int, knobs: NcclKnobs | None = None, *,
    nccl: bool = True, placement: str = "linear",
) -> list[WhatIf]:  # fmt: skip
    """The what-ifs that can change runs of ``n_ranks`` ranks placed by ``placement`` (as
    ``compare`` simulates them: linear, or K on each server as the run's log says) on
    ``topology``, the healthy design first; NCCL's channels only for runs of NCCL
    (``nccl``; gloo has none).

    >>> from simcoll.topology import load
    >>> [w.name for w in what_ifs(load("topologies/h100-ib-fat-tree.toml", {"n_nodes": "8"}), 64)]
    ['healthy', 'one NIC down', 'one NIC cable at 1/2 speed', 'one NIC cable at 1/4 speed', \
'GPUDirect RDMA off', 'PCIe a generation lower', 'half the channels', 'spine at half speed']
    >>> [w.name for w in what_ifs(load("topologies/dgx-a100.toml"), 8)]
    ['healthy', "gpu0's links at 1/2 speed", "gpu0's links at 1/4 speed", 'half the channels']
    """
    knobs = knobs or NcclKnobs()
    gpus = place_ranks(topology, n_ranks, placement)
    hosts = [topology.nodes[g].get("host") for g in gpus]
    found = [WhatIf("healthy", "the design as given", topology, knobs)]
    kinds = {attrs["kind"] for _, _, attrs in topology.edges(data=True)}
    nics = sorted((n for n, a in topology.nodes(data=True)
                   if a["kind"] is NodeKind.NIC and a.get("host") == hosts[0]),
                  key=natural_key)  # fmt: skip
    if nics and None not in hosts and len(set(hosts)) > 1:
        with suppress(SimcollError):  # the NIC is its server's only way out: a cut
            found.append(WhatIf("one NIC down", f"--fail {nics[0]}",
                                fail(topology, nics[0], gpus=gpus), knobs))  # fmt: skip
        cable = _cable(topology, nics[0])
        if cable is not None:
            found += [WhatIf(f"one NIC cable at 1/{k} speed", f"--degrade {cable}={1 / k:g}",
                             degrade(topology, cable, 1 / k), knobs) for k in SLOW]  # fmt: skip
    elif any(topology.nodes[v]["kind"] is not NodeKind.GPU for v in topology.succ[gpus[0]]):
        found += [WhatIf(f"{gpus[0]}'s links at 1/{k} speed", f"--degrade {gpus[0]}={1 / k:g}",
                         degrade(topology, gpus[0], 1 / k), knobs) for k in SLOW]  # fmt: skip
    if nics and None not in hosts and len(set(hosts)) > 1:
        staged = topology.graph.get("gpudirect_rdma") is False  # the design is staged already
        if topology.graph.get("host_memory_bandwidth_bytes_per_s") is not None and not staged:
            rate_gbps = topology.graph["host_memory_bandwidth_bytes_per_s"] / 4 / len(nics) / 1e9
            found.append(WhatIf("GPUDirect RDMA off",
                                f"every NIC staged through host memory (at most "
                                f"{rate_gbps:.3g} GB/s each way)",
                                gpudirect_rdma_off(topology), knobs))  # fmt: skip
    if LinkKind.PCIE in kinds:
        found.append(WhatIf("PCIe a generation lower", "--degrade pcie=0.5",
                            degrade(topology, "pcie", 0.5), knobs))  # fmt: skip
    channels = knobs.channels(search_plan(topology, gpus).n_channels) if nccl else 1
    if channels > 1:
        half = replace(knobs, min_channels=None, min_ctas=None, max_ctas=channels // 2)
        found.append(WhatIf("half the channels", f"--nccl NCCL_MAX_CTAS={channels // 2} "
                            f"(of {channels})", topology, half))  # fmt: skip
    spine = _fabric_links(topology)
    if spine:
        slow = topology
        for u, v in spine:
            slow = degrade(slow, f"{u}-{v}", 0.5) if slow.has_edge(u, v) else slow
        found.append(WhatIf("spine at half speed",
                            "every switch-to-switch link at half its bandwidth", slow,
                            knobs))  # fmt: skip
    return found


def _cable(topology: nx.DiGraph[str], nic: str) -> str | None:
    """``NIC-SWITCH``: the NIC's link out of its server (None if it has no such link)."""
    host = topology.nodes[nic].get("host")
    out = [v for v in topology.succ[nic] if topology.nodes[v].get("host") != host]
    return f"{nic}-{out[0]}" if out else None


def _fabric_links(topology: nx.DiGraph[str]) -> list[tuple[str, str]]:
    """The links between two fabric switches, one direction of each pair."""
    switches = {n for n, a in topology.nodes(data=True) if a["kind"] is NodeKind.SWITCH}
    return sorted((u, v) for u, v in topology.edges if u in switches and v in switches and u < v)


def diagnose(
    candidates: Sequence[WhatIf],
    points: Sequence[FitPoint],
    *,
    recipe: Model,
    protocol: str | None = None,
    model: str = "flow",
    calibration: Calibration | None = None,
    progress: Callable[[], None] | None = None,
    workers: int = 1,
    skipped: list[tuple[str, str]] | None = None,
) -> list[Diagnosis]:
    """Every candidate simulated at ``points`` (as ``compare`` simulates them), ranked by
    :func:`rank`; ``workers`` forked processes simulate that many candidates at once
    (``progress`` is then called for a candidate's sizes when it is done). A fault that
    cannot be simulated (the plan finds no route for it) is left out and named, with why,
    in ``skipped``; the healthy design's failure is raised."""
    options = {"recipe": recipe, "protocol": protocol, "model": model,
               "calibration": calibration}  # fmt: skip
    if workers <= 1 or len(candidates) <= 1:
        results = [_compared(w, points, progress, options) for w in candidates]
    else:
        sizes = simulations([p for p in points if p.size_bytes > 0], recipe)
        _WORK.update(candidates=candidates, points=points, options=options)
        results = []
        try:
            with multiprocessing.get_context("fork").Pool(min(workers, len(candidates))) as pool:
                for found in pool.imap(_compare_one, range(len(candidates))):
                    results.append(found)
                    for _ in range(sizes if progress else 0):
                        progress()  # type: ignore[misc]
        finally:
            _WORK.clear()
    simulated = []
    for w, found in zip(candidates, results, strict=True):
        if isinstance(found, str):
            if w.name == "healthy":
                raise SimcollError(found)
            if skipped is not None:
                skipped.append((w.name, found))
            continue
        simulated.append((w, found))
    return rank(simulated)


def _compared(
    what_if: WhatIf, points: Sequence[FitPoint], progress: Callable[[], None] | None,
    options: dict[str, Any],
) -> list[ComparedPoint] | str:  # fmt: skip
    """``what_if`` compared at ``points``, or why it cannot be simulated."""
    try:
        return compare(what_if.topology, points, knobs=what_if.knobs, progress=progress,
                       **options)  # fmt: skip
    except SimcollError as error:
        return str(error)


#: What the forked workers of :func:`diagnose` simulate (inherited, not pickled).
_WORK: dict[str, Any] = {}


def _compare_one(index: int) -> list[ComparedPoint] | str:
    work = _WORK
    return _compared(work["candidates"][index], work["points"], None, work["options"])


def rank(simulated: Sequence[tuple[WhatIf, Sequence[ComparedPoint]]]) -> list[Diagnosis]:
    """The what-ifs by residual, least first (ties in the given order; a fault ranks above
    the healthy design only if closer by :data:`CLEARER`), each marked as the same as an
    earlier one (in the given order) that simulated the same times.

    >>> w = [WhatIf(n, "", nx.DiGraph(), None) for n in ("healthy", "slow", "spine")]
    >>> def points(*s):
    ...     return [ComparedPoint("t", "allreduce", 16, 2**30, 2.0, x) for x in s]
    >>> ranked = rank([(w[0], points(1.0)), (w[1], points(2.1)), (w[2], points(1.0))])
    >>> [(d.what_if.name, round(d.residual, 3), d.same_as) for d in ranked]
    [('slow', 0.048, None), ('healthy', 1.0, None), ('spine', 1.0, 'healthy')]
    """
    out: list[Diagnosis] = []
    for what_if, compared in simulated:
        times = [p.simulated_s for p in compared]
        same = next((d.what_if.name for d in out
                     if [p.simulated_s for p in d.points] == times), None)  # fmt: skip
        out.append(Diagnosis(what_if, tuple(compared), same))
    return sorted(out, key=lambda d: (d.residual - CLEARER * (d.what_if.name == "healthy"),
                                      d.same_as is not None))  # fmt: skip


def verdict(ranked: Sequence[Diagnosis]) -> str:
    """One line: how far the measurement is from the healthy design (its bandwidth-bound
    points, from 64 MiB, where the table has them) and which what-if is closest.

    >>> w = [WhatIf(n, "", nx.DiGraph(), None) for n in ("healthy", "GPUDirect RDMA off")]
    >>> def points(s):
    ...     return tuple(ComparedPoint("t", "allreduce", 16, 2**30, 2.4, s) for _ in range(3))
    >>> print(verdict([Diagnosis(w[1], points(2.3)), Diagnosis(w[0], points(1.0))]))
    measured busbw is 2.4x below this design; the closest what-if is GPUDirect RDMA off \
(mean residual 4 %; then healthy at 140 %)
    """
    healthy = next(d for d in ranked if d.what_if.name == "healthy")
    big = [p for p in healthy.points if p.regime == "bandwidth"] or list(healthy.points)
    ratio = statistics.median(p.measured_s / p.simulated_s for p in big)
    if ratio >= 1.1:
        head = f"measured busbw is {ratio:.2g}x below this design"
    elif ratio <= 1 / 1.1:
        head = f"measured busbw is {1 / ratio:.2g}x above this design"
    else:
        head = f"measured busbw is within {_percent(abs(ratio - 1))} of this design"
    best = ranked[0]
    details = [f"mean residual {_percent(best.residual)}"]
    alike = [d.what_if.name for d in ranked if d.same_as == best.what_if.name]
    if alike:  # what these runs cannot tell from the closest
        details.append(f"the same on these runs: {', '.join(alike)}")
    runner = next((d for d in ranked[1:] if d.same_as is None), None)
    if runner is not None and runner.residual < best.residual:  # the healthy design kept
        details.append(f"{runner.what_if.name} at {_percent(runner.residual)} is not closer "
                       f"by {_percent(CLEARER)}")  # fmt: skip
    elif runner is not None:
        details.append(f"then {runner.what_if.name} at {_percent(runner.residual)}")
    name = "the healthy cluster" if best.what_if.name == "healthy" else best.what_if.name
    line = f"{head}; the closest what-if is {name} ({'; '.join(details)})"
    if best.what_if.name != "healthy" and healthy.residual <= MODEL_ERROR:
        line += (f"; but the healthy design is within simcoll's own error "
                 f"({_percent(healthy.residual)}), so this is no evidence of a fault")  # fmt: skip
    if best.residual > EXPLAINS:
        line += f"; none explains it within {_percent(EXPLAINS)}"
        regimes = {p.regime for p in best.points}
        if "bandwidth" in regimes and len(regimes) > 1:
            line += " (simcoll's own error is largest below 64 MiB: try --min-size 64M)"
    return line


def _percent(fraction: float) -> str:
    """``0.043`` as ``4 %``."""
    return f"{100 * fraction:.0f} %"


def format_diagnoses(ranked: Sequence[Diagnosis]) -> str:
    """A fixed-width table: what-if, mean |busbw error|, median signed error, change."""
    table = [["what-if", "|busbw err| (mean)", "busbw err (median)", "change"]]
    for d in ranked:
        change = d.what_if.change + (f" (same as {d.same_as} here)" if d.same_as else "")
        residual, bias = f"{100 * d.residual:.1f} %", f"{100 * d.bias:+.1f} %"
        table.append([d.what_if.name, residual, bias, change])
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    return "\n".join(
        "  ".join(
            [row[0].ljust(widths[0]), row[1].rjust(widths[1]), row[2].rjust(widths[2]), row[3]]
        )
        for row in table
    )
