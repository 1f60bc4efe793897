"""Bandwidth against message size: predictions, and measurements beside simulations."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simcoll.output.plot._axes import figure, save, size_axis, time_unit
from simcoll.output.results import Row, bandwidths

__all__ = ["Y_VALUES", "plot_busbw_vs_size", "plot_comparison", "plot_vs_size"]


#: What :func:`plot_vs_size` can put on its y axis: the row's value, and the axis label.
Y_VALUES = ("busbw", "algbw", "time")


def plot_busbw_vs_size(
    rows: Sequence[Row],
    path: str | Path,
    *,
    title: str,
    reference_bytes_per_s: float | None = None,
    reference_label: str = "link bandwidth",
) -> Path:
    """Bus bandwidth (GB/s) against message size, one line per algorithm; writes a PNG
    (:func:`plot_vs_size` with ``y="busbw"``)."""
    return plot_vs_size(rows, path, title=title, reference_bytes_per_s=reference_bytes_per_s,
                        reference_label=reference_label)  # fmt: skip


def plot_vs_size(
    rows: Sequence[Row],
    path: str | Path,
    *,
    title: str,
    y: str = "busbw",
    log_y: bool = False,
    reference_bytes_per_s: float | None = None,
    reference_label: str = "link bandwidth",
) -> Path:
    """Bus bandwidth, algorithm bandwidth (GB/s) or time against message size, one line
    per algorithm, the y axis linear or logarithmic (``log_y``); writes a PNG.

    Rows of size 0 are left out (their bandwidth is undefined). A dashed horizontal line
    marks ``reference_bytes_per_s`` on a bandwidth plot when given (e.g. the
    per-direction link bandwidth).

    Raises
    ------
    ValueError
        If ``y`` is not one of :data:`Y_VALUES`.
    """
    if y not in Y_VALUES:
        raise ValueError(f"y must be one of {', '.join(Y_VALUES)}, got {y!r}")
    shown = [r for r in rows if r.size_bytes > 0]
    scale, unit = time_unit(max((r.time_s for r in shown), default=1.0))

    def value(r: Row) -> float:
        if y == "time":
            return r.time_s / scale
        return (r.busbw_bytes_per_s if y == "busbw" else r.algbw_bytes_per_s) / 1e9

    label = {"busbw": "bus bandwidth (GB/s)", "algbw": "algorithm bandwidth (GB/s)",
             "time": f"time ({unit})"}[y]  # fmt: skip
    with figure(8, 5) as (fig, ax):
        # One colour per algorithm; a line joins an algorithm's points at consecutive sizes
        # of the plot, so an auto run's picks read as an envelope with gaps where another
        # algorithm won, and a sweep of several algorithms reads as one line each.
        colours = {a: f"C{i}" for i, a in enumerate(sorted({r.algorithm for r in shown}))}
        ordered = sorted(shown, key=lambda r: r.size_bytes)
        position = {size: i for i, size in enumerate(sorted({r.size_bytes for r in shown}))}
        for algorithm, colour in colours.items():
            mine = [r for r in ordered if r.algorithm == algorithm]
            protocols = ", ".join(dict.fromkeys(r.protocol for r in mine))  # in size order
            runs = itertools.groupby(
                enumerate(mine), key=lambda item: position[item[1].size_bytes] - item[0]
            )
            for i, (_, run) in enumerate(runs):
                pts = [r for _, r in run]
                ax.plot([r.size_bytes for r in pts], [value(r) for r in pts],
                        marker="o", markersize=3, color=colour,
                        label=f"{algorithm} ({protocols})" if i == 0 else None)  # fmt: skip
        if reference_bytes_per_s and y != "time":
            label_ref = f"{reference_label} ({reference_bytes_per_s / 1e9:.4g} GB/s)"
            ax.axhline(reference_bytes_per_s / 1e9, linestyle="--", color="grey", label=label_ref)
        size_axis(ax, [r.size_bytes for r in shown])
        if log_y:
            ax.set_yscale("log")
        ax.set_ylabel(label)
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(title="algorithm (protocols)")
        return save(fig, path)


def plot_comparison(points: Sequence[Any], path: str | Path, *, title: str | None = None) -> Path:
    """Measured (markers) and simulated (lines) busbw in GB/s over size, one colour per
    file and collective; ``points`` are :class:`simcoll.calibrate.compare.ComparedPoint`."""
    with figure(9, 5.5) as (fig, ax):
        keyed = sorted(points, key=lambda p: (p.source, p.collective, p.n_ranks, p.size_bytes))
        groups = itertools.groupby(keyed, key=lambda p: (p.source, p.collective, p.n_ranks))
        for i, ((source, collective, n_ranks), run) in enumerate(groups):
            mine = list(run)
            sizes = [p.size_bytes for p in mine]
            measured = [bandwidths(collective, n_ranks, p.size_bytes, p.measured_s)[1] / 1e9
                        for p in mine]  # fmt: skip
            simulated = [bandwidths(collective, n_ranks, p.size_bytes, p.simulated_s)[1] / 1e9
                         for p in mine]  # fmt: skip
            label = f"{collective}, {n_ranks} ranks ({source})"
            ax.plot(sizes, measured, "o", color=f"C{i}", label=f"measured: {label}")
            ax.plot(sizes, simulated, "-", color=f"C{i}", label=f"simcoll: {label}")
        size_axis(ax, [p.size_bytes for p in points])
        ax.set_ylabel("bus bandwidth (GB/s, 1e9 B/s)")
        ax.set_title(title or "measured (markers) vs simulated (lines) bus bandwidth")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize="small")
        return save(fig, path)
