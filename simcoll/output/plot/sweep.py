"""Sweeps over rank counts: scaling curves and the algorithm crossover map.

Rows are :class:`~simcoll.output.results.Row` objects or mappings with the same fields (the
records a sweep writes); both are read through one accessor.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from simcoll.core.units import format_bytes
from simcoll.output.plot._axes import figure, get_field, ranks_axis, save, size_axis, time_unit

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Crossover", "fastest_by_cell", "plot_crossover", "plot_scaling"]

_MARKERS = "osD^vPX*"
_REFERENCE_STYLES = ("--", ":", "-.")
_LOG_SPAN = 50  # values spanning more than this factor get a log axis
_MAX_LEGEND_INSIDE = 6  # longer legends go beside the axes
_CELL_IN = 0.5  # width of a crossover cell, in inches, when the figure is not too wide
_MIN_TEXT_CELL_IN = 0.42  # narrower cells are left without text
_MAX_WIDTH_IN = 16.0
_TIMES = "\u00d7"  # the multiplication sign


_QUANTITIES = {  # plot_scaling's y -> (row field, axis label)
    "busbw": ("busbw_bytes_per_s", "bus bandwidth"),
    "algbw": ("algbw_bytes_per_s", "algorithm bandwidth"),
    "time": ("time_s", "time"),
}


@dataclass(frozen=True)
class _Point:
    collective: str
    algorithm: str
    protocol: str
    n_ranks: int
    size_bytes: int
    value: float  # the quantity plotted, in base units
    series: str  # the value of the extra series field, or ""


def _points(rows: Iterable[Any], column: str, series: str | None) -> list[_Point]:
    return [
        _Point(
            collective=str(get_field(row, "collective")),
            algorithm=str(get_field(row, "algorithm")),
            protocol=str(get_field(row, "protocol")),
            n_ranks=int(get_field(row, "n_ranks")),
            size_bytes=int(get_field(row, "size_bytes")),
            value=float(get_field(row, column)),
            series="" if series is None else _short(get_field(row, series)),
        )
        for row in rows
    ]


def _short(value: Any) -> str:
    """A legend label for a value: a path by its file name."""
    text = str(value)
    return Path(text).name if "/" in text else text


# --- scaling ----------------------------------------------------------------------------------


def plot_scaling(
    rows: Sequence[Any],
    path: str | Path,
    *,
    y: Literal["busbw", "algbw", "time"] = "busbw",
    title: str | None = None,
    reference: Mapping[str, tuple[Sequence[int], Sequence[float]]] | None = None,
    series: str | None = None,
) -> Path:
    """Bus bandwidth (GB/s, 1e9 B/s) or time against the number of ranks; writes a PNG.

    One line per algorithm (and per protocol, when the rows hold several protocols for
    one point; otherwise the legend lists the protocols chosen), per collective when
    several, and per size when several (labelled ``"ring (simple), 1 GiB"``). The x axis
    is log2 with the rank counts present as ticks; times are shown in the unit (s, ms,
    µs, ns) that suits the largest. Rows of size 0 are left out of a bandwidth plot.

    Parameters
    ----------
    rows
        :class:`~simcoll.output.results.Row` objects or mappings with at least ``collective,
        algorithm, protocol, n_ranks, size_bytes`` and the field plotted.
    y
        ``"busbw"`` (``busbw_bytes_per_s``), ``"algbw"`` (``algbw_bytes_per_s``) or
        ``"time"`` (``time_s``).
    reference
        Extra curves drawn dashed, e.g. an ideal law: label -> ``(n_ranks, values)``,
        values in base units (bytes/s for a bandwidth, seconds for time).
    series
        A further row field that splits lines (a sweep axis such as ``"topology.file"``).

    Raises
    ------
    ValueError
        If ``y`` is unknown, a row lacks a field, or there is nothing to plot.
    """
    if y not in _QUANTITIES:
        raise ValueError(f"plot_scaling: y must be one of {', '.join(_QUANTITIES)}, got {y!r}")
    column, what = _QUANTITIES[y]
    points = [p for p in _points(rows, column, series) if y == "time" or p.size_bytes > 0]
    if not points:
        raise ValueError("plot_scaling: no rows to plot")
    refs = {k: (list(x), [float(v) for v in vs]) for k, (x, vs) in (reference or {}).items()}
    if y == "time":
        scale, unit = time_unit(
            max([p.value for p in points] + [v for _, vs in refs.values() for v in vs])
        )
        y_label = f"time ({unit})"
    else:
        scale, y_label = 1e9, f"{what} (GB/s, 1e9 B/s)"
    with figure(10, 5.5) as (fig, ax):
        _scaling_lines(ax, points, scale)
        styles = itertools.cycle(_REFERENCE_STYLES)
        for (label, (n_ranks, ref)), style in zip(refs.items(), styles, strict=False):
            ax.plot(n_ranks, [v / scale for v in ref], style, color="0.3", label=label)
        ranks_axis(ax, [p.n_ranks for p in points] + [n for x, _ in refs.values() for n in x])
        _value_axis(ax, [p.value / scale for p in points])
        ax.set_ylabel(y_label)
        collectives = ", ".join(dict.fromkeys(p.collective for p in points))
        ax.set_title(title or f"{collectives}: {what} against the number of ranks")
        ax.grid(True, which="major", alpha=0.3)
        legend = "algorithm (protocols)" + (f", {series}" if series else "")
        if len(ax.get_legend_handles_labels()[1]) > _MAX_LEGEND_INSIDE:
            ax.legend(title=legend, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
        else:
            ax.legend(title=legend, fontsize="small")
        return save(fig, path)


def _scaling_lines(ax: Axes, points: list[_Point], scale: float) -> None:
    """One line per series, coloured by (collective, algorithm, protocol, series), marked
    by size."""
    protocols: dict[tuple[str, str, str, int, int], set[str]] = {}
    for p in points:
        point = (p.collective, p.algorithm, p.series, p.size_bytes, p.n_ranks)
        protocols.setdefault(point, set()).add(p.protocol)
    split_protocols = any(len(chosen) > 1 for chosen in protocols.values())
    lines: dict[tuple[str, str, str, str, int], list[tuple[int, float, str]]] = {}
    for p in points:
        key = (p.collective, p.algorithm, p.protocol if split_protocols else "", p.series,
               p.size_bytes)  # fmt: skip
        lines.setdefault(key, []).append((p.n_ranks, p.value / scale, p.protocol))
    colours = list(dict.fromkeys(key[:4] for key in sorted(lines)))
    sizes = sorted({key[4] for key in lines})
    several_collectives = len({key[0] for key in lines}) > 1
    for (collective, algorithm, protocol, extra, size), run in sorted(lines.items()):
        run.sort()
        label = f"{algorithm} ({protocol or ', '.join(dict.fromkeys(pr for *_, pr in run))})"
        if several_collectives:
            label = f"{collective} {label}"
        if len(sizes) > 1:
            label += f", {format_bytes(size)}"
        if extra:
            label += f", {extra}"
        ax.plot([n for n, _, _ in run], [v for _, v, _ in run],
                marker=_MARKERS[sizes.index(size) % len(_MARKERS)], markersize=4,
                color=f"C{colours.index((collective, algorithm, protocol, extra)) % 10}",
                label=label)  # fmt: skip


def _value_axis(ax: Axes, shown: list[float]) -> None:
    """Linear from 0, or log when the values span more than :data:`_LOG_SPAN`."""
    positive = [v for v in shown if v > 0]
    if positive and max(positive) > _LOG_SPAN * min(positive):
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)


# --- crossover --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Crossover:
    """The fastest algorithm at each (number of ranks, size) of a sweep.

    ``winner[i][j]`` is the algorithm with the lowest ``time_s`` at ``n_ranks[i]`` and
    ``sizes_bytes[j]`` (``None`` where no row has that point); ``speedup[i][j]`` is the
    runner-up's time over the winner's (``None`` where only one algorithm ran). Ties go
    to the algorithm first in alphabetical order.
    """

    collective: str
    sizes_bytes: tuple[int, ...]
    n_ranks: tuple[int, ...]
    algorithms: tuple[str, ...]
    winner: tuple[tuple[str | None, ...], ...]
    speedup: tuple[tuple[float | None, ...], ...]


def fastest_by_cell(rows: Iterable[Any]) -> Crossover:
    """Which algorithm is fastest at each (n_ranks, size_bytes) of ``rows``.

    Rows need ``collective, algorithm, n_ranks, size_bytes, time_s``. An algorithm run
    with several protocols counts with its fastest. Rows whose time is not a finite,
    non-negative number are ignored.

    Raises
    ------
    ValueError
        If there are no usable rows, or they mix collectives.

    >>> rows = [
    ...     {"collective": "allreduce", "algorithm": a, "n_ranks": 8, "size_bytes": s,
    ...      "time_s": t}
    ...     for a, s, t in [("ring", 1024, 4e-5), ("tree", 1024, 1e-5),
    ...                     ("ring", 2**30, 0.01), ("tree", 2**30, 0.02)]
    ... ]
    >>> grid = fastest_by_cell(rows)
    >>> grid.sizes_bytes, grid.n_ranks, grid.winner, grid.speedup
    ((1024, 1073741824), (8,), (('tree', 'ring'),), ((4.0, 2.0),))
    """
    best: dict[tuple[int, int], dict[str, float]] = {}
    collectives: set[str] = set()
    for row in rows:
        time_s = float(get_field(row, "time_s"))
        if not math.isfinite(time_s) or time_s < 0:
            continue
        collectives.add(str(get_field(row, "collective")))
        cell = best.setdefault(
            (int(get_field(row, "n_ranks")), int(get_field(row, "size_bytes"))), {}
        )
        algorithm = str(get_field(row, "algorithm"))
        cell[algorithm] = min(time_s, cell.get(algorithm, math.inf))
    if not best:
        raise ValueError("fastest_by_cell: no rows with a time to compare")
    if len(collectives) > 1:
        raise ValueError(f"fastest_by_cell: rows mix collectives {sorted(collectives)}; give one")
    n_ranks = tuple(sorted({n for n, _ in best}))
    sizes = tuple(sorted({s for _, s in best}))
    winner: list[tuple[str | None, ...]] = []
    speedup: list[tuple[float | None, ...]] = []
    for n in n_ranks:
        ranked = [
            sorted(best.get((n, s), {}).items(), key=lambda kv: (kv[1], kv[0])) for s in sizes
        ]
        winner.append(tuple(r[0][0] if r else None for r in ranked))
        speedup.append(
            tuple(r[1][1] / r[0][1] if len(r) > 1 and r[0][1] > 0 else None for r in ranked)
        )
    algorithms = tuple(sorted({a for cell in best.values() for a in cell}))
    return Crossover(collectives.pop(), sizes, n_ranks, algorithms, tuple(winner), tuple(speedup))


def plot_crossover(rows: Sequence[Any], path: str | Path, *, title: str | None = None) -> Path:
    """Map of the fastest algorithm by message size (x) and number of ranks (y); a PNG.

    Each cell is coloured by the winner of :func:`fastest_by_cell` and, when the grid
    is small enough to read, says how much slower the runner-up is (``1.3x``). Both axes
    are log2; sizes have binary-prefix ticks. Rows of size 0 are left out.

    Raises
    ------
    ValueError
        As :func:`fastest_by_cell`.
    """
    from matplotlib.colors import ListedColormap, to_rgb  # noqa: PLC0415 - matplotlib lazily
    from matplotlib.patches import Patch  # noqa: PLC0415

    grid = fastest_by_cell(r for r in rows if int(get_field(r, "size_bytes")) > 0)
    colours = [f"C{i % 10}" for i in range(len(grid.algorithms))]
    index = {a: i for i, a in enumerate(grid.algorithms)}
    codes = np.ma.masked_invalid(
        np.array([[np.nan if w is None else index[w] for w in row] for row in grid.winner])
    )
    n_rows, n_cols = codes.shape
    width_in = min(_MAX_WIDTH_IN, max(6.0, _CELL_IN * n_cols + 3.5))
    with figure(width_in, max(3.5, 0.4 * n_rows + 2.5)) as (fig, ax):
        ax.pcolormesh(_edges(grid.sizes_bytes), _edges(grid.n_ranks), codes,
                      cmap=ListedColormap(colours), vmin=-0.5, vmax=len(colours) - 0.5,
                      edgecolors="white", linewidth=0.5)  # fmt: skip
        size_axis(ax, grid.sizes_bytes)
        ranks_axis(ax, grid.n_ranks, axis="y")
        if (width_in - 3.5) / n_cols >= _MIN_TEXT_CELL_IN:
            for (i, j), code in np.ndenumerate(codes.filled(-1)):
                ratio = grid.speedup[i][j]
                if ratio is None or code < 0:
                    continue
                dark = sum(to_rgb(colours[int(code)]) * np.array([0.3, 0.59, 0.11])) < 0.5
                ax.text(grid.sizes_bytes[j], grid.n_ranks[i], _times(ratio), ha="center",
                        va="center", fontsize=7, color="white" if dark else "black")  # fmt: skip
            ax.set_xlabel(f"{ax.get_xlabel()}\ncell text: runner-up time / fastest time")
        winners = [a for a in grid.algorithms if any(a in row for row in grid.winner)]
        ax.legend(handles=[Patch(color=colours[index[a]], label=a) for a in winners],
                  title="fastest", loc="upper left", bbox_to_anchor=(1.01, 1.0))  # fmt: skip
        ax.set_title(title or f"{grid.collective}: fastest algorithm by size and rank count")
        return save(fig, path)


def _edges(centres: Sequence[int]) -> list[float]:
    """Cell edges around ``centres``, halfway between neighbours on a log2 axis.

    >>> _edges([4, 16])
    [2.0, 8.0, 32.0]
    """
    logs = np.log2(np.asarray(centres, dtype=np.float64))
    gaps = np.diff(logs) if len(logs) > 1 else np.array([1.0])
    inner = (logs[:-1] + logs[1:]) / 2
    edges = np.concatenate([[logs[0] - gaps[0] / 2], inner, [logs[-1] + gaps[-1] / 2]])
    return [float(e) for e in np.exp2(edges)]


def _times(ratio: float) -> str:
    return f"{ratio:.2f}{_TIMES}" if ratio < 10 else f"{ratio:.0f}{_TIMES}"
