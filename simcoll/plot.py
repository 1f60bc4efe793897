"""Figures. The only module that imports matplotlib (lazily, with the Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from simcoll.results import Row
from simcoll.units import format_bytes

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["plot_busbw_vs_size"]


def _size_axis(ax: Axes, sizes_bytes: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes_bytes))
    step = max(1, len(ticks) // 10)
    shown = ticks[::step]
    ax.set_xticks(shown)
    ax.set_xticklabels([format_bytes(s).replace(" ", "\u202f") for s in shown], rotation=45)
    ax.set_xlabel("message size (nccl-tests convention)")


def plot_busbw_vs_size(
    rows: Sequence[Row],
    path: str | Path,
    *,
    title: str,
    reference_bytes_per_s: float | None = None,
    reference_label: str = "link bandwidth",
) -> Path:
    """Bus bandwidth (GB/s) against message size, one line per algorithm; writes a PNG.

    Rows of size 0 are left out (their bandwidth is undefined). A dashed horizontal line
    marks ``reference_bytes_per_s`` when given (e.g. the per-direction link bandwidth).
    """
    import matplotlib  # noqa: PLC0415 - keep matplotlib off the import path of the library

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    shown = [r for r in rows if r.size_bytes > 0]
    fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    for algorithm in sorted({r.algorithm for r in shown}):
        mine = [r for r in shown if r.algorithm == algorithm]
        ax.plot([r.size_bytes for r in mine], [r.busbw_bytes_per_s / 1e9 for r in mine],
                marker="o", markersize=3, label=f"{algorithm}")  # fmt: skip
    if reference_bytes_per_s:
        ax.axhline(reference_bytes_per_s / 1e9, linestyle="--", color="grey",
                   label=f"{reference_label} ({reference_bytes_per_s / 1e9:.4g} GB/s)")  # fmt: skip
    _size_axis(ax, [r.size_bytes for r in shown])
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(title="algorithm")
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
