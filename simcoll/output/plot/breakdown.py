"""Where each point's step went: stacked bars of compute, exposed communication and idle.

One bar per scenario point (a training step: :mod:`simcoll.training.step`), its parts
stacked in the order the breakdown assigns them (compute, then each dimension's exposed
communication, then idle), so each bar is the step's time. A point whose memory does not
fit (``fits_in_memory`` 0) is hatched and says so under its label.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simcoll.output.plot._axes import figure, get_field, save, time_unit

__all__ = ["BREAKDOWN_PARTS", "plot_breakdown"]

#: The parts of a step, bottom to top, as a training step reports them.
BREAKDOWN_PARTS = ("compute_s", "exposed_tp_s", "exposed_ep_s", "exposed_cp_s",
                   "exposed_pp_s", "exposed_dp_s", "idle_s")  # fmt: skip


def plot_breakdown(
    rows: Sequence[Any],
    path: str | Path,
    *,
    label_by: Sequence[str],
    title: str | None = None,
) -> Path:
    """One stacked bar per row, labelled by its ``label_by`` columns; writes a PNG.

    Raises
    ------
    ValueError
        If there are no rows, or a row lacks a part (:data:`BREAKDOWN_PARTS`).
    """
    if not rows:
        raise ValueError("plot_breakdown: no rows to plot")
    missing = [p for p in BREAKDOWN_PARTS if not all(_has(row, p) for row in rows)]
    if missing:
        raise ValueError(f"plot_breakdown: the rows have no {missing[0]} (a training step's "
                         "breakdown)")  # fmt: skip
    parts = [p for p in BREAKDOWN_PARTS if any(float(get_field(r, p)) > 0 for r in rows)]
    totals = [sum(float(get_field(r, p)) for p in BREAKDOWN_PARTS) for r in rows]
    scale, unit = time_unit(max(totals))
    labels = []
    for row in rows:
        label = "\n".join(f"{k.removeprefix('topology.')}=\n{get_field(row, k)}"
                           if len(str(get_field(row, k))) + len(k) > 14 else
                           f"{k.removeprefix('topology.')}={get_field(row, k)}"
                           for k in label_by)  # fmt: skip
        if _has(row, "fits_in_memory") and not float(get_field(row, "fits_in_memory")):
            label += "\n(does not fit)"
        labels.append(label)
    from matplotlib.patches import Patch  # noqa: PLC0415 - matplotlib only when plotting

    with figure(max(6.0, 1.3 * len(rows) + 2.5), 5.5) as (fig, ax):
        bottoms = [0.0] * len(rows)
        handles = []
        for i, part in enumerate(parts):
            heights = [float(get_field(r, part)) / scale for r in rows]
            hatches = ["//" if "(does not fit)" in lab else "" for lab in labels]
            bars = ax.bar(range(len(rows)), heights, bottom=bottoms, color=f"C{i % 10}")
            handles.append(Patch(color=f"C{i % 10}",
                                 label=part.removesuffix("_s").replace("_", " ")))  # fmt: skip
            for bar, hatch in zip(bars, hatches, strict=True):
                bar.set_hatch(hatch)
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
        ax.set_xticks(range(len(rows)), labels, fontsize="small")
        ax.set_ylabel(f"time per step ({unit})")
        ax.set_title(title or "where the step goes")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(handles=handles[::-1], fontsize="small", loc="upper left",
                  bbox_to_anchor=(1.0, 1.0))  # fmt: skip
        return save(fig, path)


def _has(row: Any, name: str) -> bool:
    try:
        get_field(row, name)
    except ValueError:
        return False
    return True
