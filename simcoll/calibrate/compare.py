"""Measured against simulated: per-point errors and their summary per size regime.

Errors are signed and relative: ``time_error = simulated / measured - 1`` (positive: the
simulator is slow) and ``busbw_error = measured / simulated - 1`` in busbw's terms
(positive: the simulator's busbw is high). Regimes follow how collectives behave: below
64 KiB latency-bound, from 64 MiB bandwidth-bound, the middle in between.

>>> p = ComparedPoint("x.csv", "allreduce", 8, 2**20, measured_s=1e-3, simulated_s=1.1e-3)
>>> round(p.time_error, 6), round(p.busbw_error, 6), p.regime
(0.1, -0.090909, 'middle')
>>> rows = summarise([p], by=("collective",))
>>> [(r["collective"], r["regime"], r["points"], round(r["median_abs_time_error"], 6))
...  for r in rows]
[('allreduce', 'middle', 1, 0.1), ('allreduce', 'all', 1, 0.1)]
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx

from simcoll.calibrate.fit import FitPoint, Model, simulate_points
from simcoll.calibrate.residuals import max_abs_error, median_abs_error, time_error
from simcoll.core.units import format_bytes
from simcoll.plan.tuning import NcclKnobs
from simcoll.topology.calibration import Calibration

__all__ = ["REGIMES", "ComparedPoint", "compare", "format_summary", "regime_of", "summarise"]

#: (name, smallest size, first size past it) in bytes.
REGIMES = (
    ("latency", 0, 64 * 2**10),
    ("middle", 64 * 2**10, 64 * 2**20),
    ("bandwidth", 64 * 2**20, 2**63),
)


def regime_of(size_bytes: int) -> str:
    """The regime a size falls in.

    >>> regime_of(4096), regime_of(64 * 2**10), regime_of(2**30)
    ('latency', 'middle', 'bandwidth')
    """
    return next(name for name, low, high in REGIMES if low <= size_bytes < high)


@dataclass(frozen=True)
class ComparedPoint:
    """One measured point and its simulation."""

    source: str
    collective: str
    n_ranks: int
    size_bytes: int
    measured_s: float
    simulated_s: float

    @property
    def time_error(self) -> float:
        """Signed relative error of the simulated time
        (:func:`simcoll.calibrate.residuals.time_error`)."""
        return time_error(self.measured_s, self.simulated_s)

    @property
    def busbw_error(self) -> float:
        """Signed relative error of the simulated busbw (and algbw)."""
        return self.measured_s / self.simulated_s - 1

    @property
    def regime(self) -> str:
        """``latency``, ``middle`` or ``bandwidth`` (see :data:`REGIMES`)."""
        return regime_of(self.size_bytes)


def compare(
    topology: nx.DiGraph[str],
    points: Sequence[FitPoint],
    *,
    recipe: Model,
    protocol: str | None = None,
    model: str = "flow",
    calibration: Calibration | None = None,
    progress: Callable[[], None] | None = None,
    knobs: NcclKnobs | None = None,
) -> list[ComparedPoint]:
    """Simulate every measured point and pair the two; sizes of 0 bytes and sizes too
    small to cut for the algorithm (see :func:`simcoll.calibrate.fit.simulate_points`) are
    left out. ``progress`` is called once per distinct size simulated; ``knobs`` are
    the NCCL settings of the runs."""
    shown = [p for p in points if p.size_bytes > 0]
    simulated = simulate_points(
        topology, shown, calibration, recipe=recipe, protocol=protocol, model=model,
        progress=progress, knobs=knobs,
    )  # fmt: skip
    return [
        ComparedPoint(p.source, p.collective, p.n_ranks, p.size_bytes, p.time_s, s)
        for p, s in zip(shown, simulated, strict=True)
        if math.isfinite(s)
    ]


def summarise(
    points: Sequence[ComparedPoint], *, by: Sequence[str] = ("source", "collective", "n_ranks")
) -> list[dict[str, Any]]:
    """Per group and regime (then ``all``): counts, signed mean and median |error|."""
    groups: dict[tuple[Any, ...], list[ComparedPoint]] = defaultdict(list)
    for p in points:
        groups[tuple(getattr(p, key) for key in by)].append(p)
    out = []
    for key, members in groups.items():
        for regime in [name for name, _, _ in REGIMES] + ["all"]:
            chosen = [p for p in members if regime in ("all", p.regime)]
            if not chosen:
                continue
            row: dict[str, Any] = dict(zip(by, key, strict=True))
            times = [p.time_error for p in chosen]
            busbw = [p.busbw_error for p in chosen]
            row.update(
                regime=regime,
                points=len(chosen),
                min_size_bytes=min(p.size_bytes for p in chosen),
                max_size_bytes=max(p.size_bytes for p in chosen),
                mean_time_error=statistics.fmean(times),
                median_abs_time_error=median_abs_error(times),
                max_abs_time_error=max_abs_error(times),
                mean_busbw_error=statistics.fmean(busbw),
                median_abs_busbw_error=median_abs_error(busbw),
            )
            out.append(row)
    return out


def format_summary(rows: Sequence[dict[str, Any]]) -> str:
    """A fixed-width table of :func:`summarise` rows, errors in percent."""
    keys = [k for k in ("source", "collective", "n_ranks") if rows and k in rows[0]]
    head = [*keys, "regime", "points", "sizes", "time err (mean)", "|time err| (median)",
            "|time err| (max)", "|busbw err| (median)"]  # fmt: skip
    table = [head]
    for r in rows:
        sizes = f"{format_bytes(r['min_size_bytes'])}..{format_bytes(r['max_size_bytes'])}"
        table.append(
            [str(r[k]) for k in keys]
            + [r["regime"], str(r["points"]), sizes]
            + [
                f"{100 * r[k]:+.1f} %" if k.startswith("mean") else f"{100 * r[k]:.1f} %"
                for k in (
                    "mean_time_error",
                    "median_abs_time_error",
                    "max_abs_time_error",
                    "median_abs_busbw_error",
                )
            ]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    return "\n".join(
        "  ".join(
            cell.rjust(w) if i >= len(keys) else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in table
    )
