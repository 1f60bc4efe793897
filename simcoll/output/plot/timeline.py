"""Pictures of one :class:`~simcoll.sim.timeline.Timeline`: a Gantt chart and link utilisation."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simcoll.core.units import format_bytes, format_time
from simcoll.output.plot._axes import figure, save, time_unit
from simcoll.sim.timeline import COMPUTE, Timeline

__all__ = ["plot_gantt", "plot_link_utilisation"]

_COMPUTE_COLOUR = "#4c72b0"
_COMM_COLOUR = "#dd8452"
_MAX_NAMED_SPANS = 300  # span names are written inside their bars up to this many spans
_TIMES = "\u00d7"  # the multiplication sign


def plot_gantt(
    timeline: Timeline, path: str | Path, *, title: str | None = None, max_ranks: int = 64
) -> Path:
    """One row per (rank, stream), one bar per span; writes a PNG.

    Compute spans and communication spans have one colour each; span names are written
    inside bars wide enough to hold them. Rows read ``"rank 0 compute"``, ``"rank 0
    comm"``...; time is in the unit (s, ms, µs, ns) that suits the run. Ranks past the
    first ``max_ranks`` (in rank order) are left out, and the title says so.

    Raises
    ------
    ValueError
        If the timeline has no spans.
    """
    from matplotlib.patches import Patch  # noqa: PLC0415 - matplotlib lazily

    ranks = sorted({s.rank for s in timeline.spans})
    if not ranks:
        raise ValueError("plot_gantt: the timeline has no spans to draw")
    shown = ranks[:max_ranks]
    rows = [(rank, stream) for rank in shown for stream in timeline.streams(rank)]
    end_s = max([timeline.time_s, *(s.end_s for s in timeline.spans)])
    scale, unit = time_unit(end_s)
    width_in, height_in = 11.0, min(40.0, max(2.5, 0.25 * len(rows) + 1.8))
    named = sum(len(timeline.spans_of(rank)) for rank in shown) <= _MAX_NAMED_SPANS
    char = end_s / scale / ((width_in - 3.0) * 72 / (7 * 0.62))  # one 7-pt character, in x
    with figure(width_in, height_in) as (fig, ax):
        for y, (rank, stream) in enumerate(rows):
            spans = timeline.spans_of(rank, stream)
            colour = _COMPUTE_COLOUR if stream == COMPUTE else _COMM_COLOUR
            bars = [(s.start_s / scale, s.duration_s / scale) for s in spans]
            ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=colour, edgecolor="white",
                           linewidth=0.3)  # fmt: skip
            for span, (x, width) in zip(spans, bars, strict=True):
                if named and len(span.name) * char < width:
                    ax.text(x + width / 2, y, span.name, ha="center", va="center",
                            fontsize=7, color="white", clip_on=True)  # fmt: skip
        for y in np.cumsum([len(timeline.streams(rank)) for rank in shown])[:-1]:
            ax.axhline(y - 0.5, color="0.8", linewidth=0.6)
        row_pt = (height_in - 1.8) / len(rows) * 72  # height of one row, in points
        ax.set_yticks(range(len(rows)), [f"rank {r} {s}" for r, s in rows],
                      fontsize=min(8.0, max(3.0, 0.55 * row_pt)))  # fmt: skip
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(0, end_s / scale)
        ax.set_xlabel(f"time ({unit})")
        ax.grid(True, axis="x", alpha=0.3)
        kinds = {stream == COMPUTE for _, stream in rows}  # only what the chart shows
        handles = [Patch(color=_COMPUTE_COLOUR, label="compute")] if True in kinds else []
        handles += [Patch(color=_COMM_COLOUR, label="communication")] if False in kinds else []
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        heading = title or f"timeline: {timeline.n_ranks} ranks, {format_time(end_s)}"
        if len(shown) < len(ranks):
            omitted = len(ranks) - len(shown)
            heading += f"\n(first {len(shown)} of {len(ranks)} ranks shown, {omitted} omitted)"
        ax.set_title(heading)
        return save(fig, path)


def plot_link_utilisation(
    timeline: Timeline, path: str | Path, *, title: str | None = None, max_links: int = 60
) -> Path:
    """Utilisation of each directed link over the run, busiest first; writes a PNG.

    Utilisation is ``link_bytes / (bandwidth_bytes_per_s * time_s)``: the share of the
    link's capacity over the whole run that it used. One bar per link that carried
    bytes, labelled ``"src→dst"``, coloured on a fixed 0-100 % scale, with the bytes
    carried written beside it. Only the ``max_links`` busiest are shown, and the title
    says how many were left out and how many links stayed idle.

    Raises
    ------
    ValueError
        If the timeline has no links or no duration.
    """
    from matplotlib import colormaps  # noqa: PLC0415 - matplotlib lazily
    from matplotlib.cm import ScalarMappable  # noqa: PLC0415
    from matplotlib.colors import Normalize  # noqa: PLC0415

    n_links = len(timeline.links)
    if n_links == 0 or timeline.time_s <= 0:
        raise ValueError("plot_link_utilisation: the timeline has no links or no duration")
    capacity_bytes = timeline.link_bandwidth_bytes_per_s * timeline.time_s
    utilisation = np.divide(timeline.link_bytes, capacity_bytes,
                            out=np.zeros(n_links), where=capacity_bytes > 0)  # fmt: skip
    busy = np.flatnonzero(timeline.link_bytes > 0)
    order = busy[np.argsort(-utilisation[busy], kind="stable")][:max_links]
    percent = 100 * utilisation[order]
    cmap, norm = colormaps["viridis"], Normalize(0.0, 100.0)
    with figure(9.0, max(3.0, 0.22 * len(order) + 1.8)) as (fig, ax):
        y = np.arange(len(order))
        ax.barh(y, percent, color=cmap(norm(np.minimum(percent, 100.0))), height=0.75)
        for i, link in enumerate(order.tolist()):
            text = f" {percent[i]:.0f} %, {format_bytes(timeline.link_bytes[link])}"
            ax.text(percent[i], i, text, va="center", fontsize=7)
        labels = [f"{timeline.links[i][0]}\u2192{timeline.links[i][1]}" for i in order.tolist()]
        ax.set_yticks(y, labels, fontsize=8 if len(order) <= 40 else 6)
        ax.set_ylim(max(1, len(order)) - 0.5, -0.5)
        ax.set_xlim(0, max(100.0, 1.15 * float(percent.max(initial=0.0))))
        run = format_time(timeline.time_s)
        ax.set_xlabel(f"utilisation over the {run} run: bytes / (bandwidth {_TIMES} time), %")
        ax.grid(True, axis="x", alpha=0.3)
        fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="utilisation (%)",
                     fraction=0.04, pad=0.01)  # fmt: skip
        heading = title or "link utilisation"
        notes = []
        if len(busy) > len(order):
            omitted = len(busy) - len(order)
            notes.append(f"busiest {len(order)} of {len(busy)} busy links shown, {omitted} omitted")
        if len(busy) < n_links:
            notes.append(f"{n_links - len(busy)} idle links not shown")
        if not len(busy):
            ax.text(50, 0, "no link carried any bytes", ha="center", va="center")
        ax.set_title(heading + (f"\n({'; '.join(notes)})" if notes else ""))
        return save(fig, path)


def plot_link_heatmap(
    timeline: Timeline, path: str | Path, *, title: str | None = None, max_links: int = 40
) -> Path:
    """Utilisation of the busiest links over time, as a heatmap; writes a PNG.

    One row per directed link (the ``max_links`` most utilised over the run, busiest at
    the top), one column per time bin of :attr:`Timeline.link_load_bytes`, coloured by
    the share of the link's capacity used in that bin (0-100 %). Each transfer's bytes
    are spread evenly over its transfer time, so a bin shows the average rate.

    Raises
    ------
    ValueError
        If the timeline kept no per-link load or has no duration.
    """
    from matplotlib import colormaps  # noqa: PLC0415 - matplotlib lazily

    edges, used = timeline.link_utilisation_over_time()
    if used.size == 0 or timeline.time_s <= 0:
        raise ValueError("plot_link_heatmap: the timeline kept no per-link load over time")
    busy = np.flatnonzero(timeline.link_load_bytes.sum(axis=1) > 0)
    order = busy[np.argsort(-used[busy].sum(axis=1), kind="stable")]
    shown = order[:max_links]
    scale, unit = time_unit(timeline.time_s)
    with figure(10.0, max(3.0, 0.2 * len(shown) + 1.8)) as (fig, ax):
        if len(shown):
            image = ax.imshow(
                100 * used[shown],
                aspect="auto",
                interpolation="nearest",
                cmap=colormaps["viridis"],
                vmin=0.0,
                vmax=100.0,
                extent=(0.0, timeline.time_s / scale, len(shown) - 0.5, -0.5),
            )
            fig.colorbar(image, ax=ax, label="utilisation in the bin (%)", fraction=0.04, pad=0.01)
        else:
            ax.text(0.5, 0.5, "no link carried any bytes", ha="center", transform=ax.transAxes)
        labels = [f"{timeline.links[i][0]}\u2192{timeline.links[i][1]}" for i in shown.tolist()]
        ax.set_yticks(np.arange(len(shown)), labels, fontsize=8 if len(shown) <= 30 else 6)
        bin_text = format_time(float(edges[1] - edges[0])) if len(edges) > 1 else "-"
        ax.set_xlabel(f"time ({unit}); bins of {bin_text}")
        notes = (
            [f"busiest {len(shown)} of {len(busy)} busy links"] if len(busy) > len(shown) else []
        )
        heading = title or "link utilisation over time"
        ax.set_title(heading + (f"\n({'; '.join(notes)})" if notes else ""))
        return save(fig, path)
