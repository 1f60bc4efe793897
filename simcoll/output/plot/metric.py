"""Any result column against any sweep axis: the generic plot of a scenario."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simcoll.output.plot._axes import figure, get_field, ranks_axis, save, size_axis, time_unit

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["plot_metric"]

_LOG_SPAN = 16  # a positive numeric x axis spanning this factor or more is drawn log2


def plot_metric(
    rows: Sequence[Any],
    path: str | Path,
    *,
    x: str,
    y: str = "time_s",
    series: str | None = None,
    title: str | None = None,
) -> Path:
    """Column ``y`` against column ``x``, one line per value of ``series``; writes a PNG.

    Units follow the column names: ``*_bytes_per_s`` is drawn in GB/s (1e9 B/s),
    ``*_s`` in the time unit that suits the data, a ``*_bytes`` or ``n_ranks`` x axis
    is log2 with readable ticks, another numeric x axis is log2 when it spans a factor
    of 16 or more. A non-numeric x (a topology file, an algorithm) is categorical, in
    first-seen order.

    Raises
    ------
    ValueError
        If there are no rows, or a row lacks one of the columns.
    """
    if not rows:
        raise ValueError("plot_metric: no rows to plot")
    xs = [get_field(row, x) for row in rows]
    ys = [float(get_field(row, y)) for row in rows]
    keys = ["" if series is None else str(get_field(row, series)) for row in rows]
    scale, y_label = _y_scale(y, ys)
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in xs)
    categories = list(dict.fromkeys(str(v) for v in xs))
    with figure(8, 5) as (fig, ax):
        for i, key in enumerate(dict.fromkeys(keys)):
            mine = sorted(
                (v if numeric else categories.index(str(v)), w / scale)
                for v, w, k in zip(xs, ys, keys, strict=True)
                if k == key
            )
            ax.plot([p[0] for p in mine], [p[1] for p in mine], marker="o", markersize=4,
                    color=f"C{i % 10}", label=key or None)  # fmt: skip
        _x_axis(ax, x, xs if numeric else None, categories)
        ax.set_ylabel(y_label)
        ax.set_title(title or f"{y} against {x}")
        ax.grid(True, which="major", alpha=0.3)
        if series is not None:
            ax.legend(title=series, fontsize="small")
        return save(fig, path)


def _y_scale(y: str, ys: list[float]) -> tuple[float, str]:
    if y.endswith("_bytes_per_s"):
        return 1e9, f"{y} (GB/s, 1e9 B/s)"
    if y.endswith("_per_s"):
        return 1.0, f"{y.removesuffix('_per_s')} per second"
    if y.endswith("_s"):
        scale, unit = time_unit(max(ys, default=0.0))
        return scale, f"{y.removesuffix('_s')} ({unit})"
    return 1.0, y


def _x_axis(ax: Axes, x: str, numeric: list[Any] | None, categories: list[str]) -> None:
    if numeric is None:
        ax.set_xticks(range(len(categories)), categories, rotation=20, ha="right")
        ax.set_xlabel(x)
        return
    positive = all(v > 0 for v in numeric)
    if positive and x.endswith("_bytes"):
        size_axis(ax, [int(v) for v in numeric])
        if x != "size_bytes":
            ax.set_xlabel(x)
    elif positive and x == "n_ranks":
        ranks_axis(ax, [int(v) for v in numeric])
    else:
        if positive and max(numeric) >= _LOG_SPAN * min(numeric):
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter("{x:g}")
        ax.set_xlabel(x)
