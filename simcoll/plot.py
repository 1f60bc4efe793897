"""Figures. The only module that imports matplotlib (lazily, with the Agg backend)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np

from simcoll.results import Row
from simcoll.topology.inspect import natural_key
from simcoll.topology.schema import LinkKind, NodeKind
from simcoll.units import format_bytes

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["plot_busbw_vs_size", "plot_comparison", "plot_topology"]


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
    # One colour per algorithm; a line only joins consecutive sizes that chose it, so an
    # auto run's picks read as an envelope with gaps where another algorithm won.
    colours = {a: f"C{i}" for i, a in enumerate(sorted({r.algorithm for r in shown}))}
    ordered = sorted(shown, key=lambda r: r.size_bytes)
    for algorithm, run in itertools.groupby(ordered, key=lambda r: r.algorithm):
        mine = list(run)
        everything = [r for r in shown if r.algorithm == algorithm]
        protocols = ", ".join(dict.fromkeys(r.protocol for r in everything))  # in size order
        first = mine[0] is next(r for r in ordered if r.algorithm == algorithm)
        ax.plot([r.size_bytes for r in mine], [r.busbw_bytes_per_s / 1e9 for r in mine],
                marker="o", markersize=3, color=colours[algorithm],
                label=f"{algorithm} ({protocols})" if first else None)  # fmt: skip
    if reference_bytes_per_s:
        ax.axhline(reference_bytes_per_s / 1e9, linestyle="--", color="grey",
                   label=f"{reference_label} ({reference_bytes_per_s / 1e9:.4g} GB/s)")  # fmt: skip
    _size_axis(ax, [r.size_bytes for r in shown])
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(title="algorithm (protocols)")
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


# --- topology drawing -------------------------------------------------------------------------

MAX_LABELLED_PER_LAYER = 64
"""Layers with more nodes than this are drawn without node labels."""
_MACHINE_LAYERS = {NodeKind.GPU: 0, NodeKind.NVSWITCH: 1, NodeKind.PCIE_SWITCH: 1,
                   NodeKind.NIC: 2, NodeKind.CPU: 3}  # fmt: skip
_FIRST_SWITCH_LAYER = 4  # layer of tier 0; a switch of tier t is drawn in layer 4 + t
_KIND_NAMES = {
    NodeKind.GPU: "GPU",
    NodeKind.NVSWITCH: "NVSwitch",
    NodeKind.PCIE_SWITCH: "PCIe switch",
    NodeKind.NIC: "NIC",
    NodeKind.CPU: "CPU",
}
_TIER_NAMES = {1: "leaf", 2: "spine / agg", 3: "core"}
_LINK_COLOURS = {LinkKind.NVLINK: "#76b900", LinkKind.PCIE: "#1f77b4",
                 LinkKind.CPU_LINK: "#9467bd", LinkKind.IB: "#ff7f0e",
                 LinkKind.ETHERNET: "#7f7f7f"}  # fmt: skip
_MARKERS = {NodeKind.GPU: "s", NodeKind.NVSWITCH: "D", NodeKind.PCIE_SWITCH: "D",
            NodeKind.NIC: "^", NodeKind.CPU: "o", NodeKind.SWITCH: "h"}  # fmt: skip
_HOST_GAP = 0.6  # extra slots between the nodes of two hosts in a layer
_BULGE = 0.35  # height of an arc between nodes of one layer, in layers per unit of width


def plot_topology(graph: nx.DiGraph[str], path: str | Path, *, title: str | None = None) -> Path:
    """Draw a topology in layers and write a PNG.

    From the bottom: GPUs; NVSwitches and PCIe switches; NICs; CPUs; then fabric
    switches by their ``tier`` attribute (1 leaf, 2 spine or aggregation, 3 core; a
    switch without one sits with the leaves). Empty layers are left out. Each layer
    spreads its nodes evenly in the natural order of their ids, grouped by ``host``
    with a gap between hosts. A cable (a link and its reverse) is drawn once, coloured
    by its :class:`~simcoll.topology.schema.LinkKind`; links within one layer are
    arcs. Node labels are left out in layers of more than
    :data:`MAX_LABELLED_PER_LAYER` nodes, and the title says so. The figure widens with
    the widest layer, up to 30 inches.
    """
    import matplotlib  # noqa: PLC0415 - keep matplotlib off the import path of the library

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.collections import LineCollection  # noqa: PLC0415

    rows = _layers(graph)
    xy = _positions(graph, rows)
    cables = _cables(graph, xy)
    ys = [y for lines in cables.values() for line in lines for y in line[:, 1]]
    y_lim = (min([-0.9, *(y - 0.4 for y in ys)]), max([len(rows) - 0.5, *(y + 0.2 for y in ys)]))
    widest = max(len(nodes) for _, nodes in rows)
    size_in = (min(30.0, max(6.0, 0.3 * widest + 2.5)), 1.3 * (y_lim[1] - y_lim[0]) + 1.2)
    fig, ax = plt.subplots(figsize=size_in, layout="constrained")
    ax.set_ylim(*y_lim)
    for kind, segments in cables.items():
        ax.add_collection(LineCollection(segments, colors=_LINK_COLOURS[kind],
                                         linewidths=1.4 if len(segments) < 200 else 0.5,
                                         alpha=0.8, label=kind.value, zorder=1))  # fmt: skip
    size = max(6.0, min(90.0, 3000.0 / widest))
    omitted = False
    for _, nodes in rows:
        for kind in dict.fromkeys(graph.nodes[n]["kind"] for n in nodes):
            mine = [n for n in nodes if graph.nodes[n]["kind"] is kind]
            ax.scatter([xy[n][0] for n in mine], [xy[n][1] for n in mine], s=size,
                       marker=_MARKERS[kind], color="#333333", zorder=2)  # fmt: skip
        if len(nodes) > MAX_LABELLED_PER_LAYER:
            omitted = True
            continue
        _label(ax, nodes, xy)
    _style(ax, rows, graph)
    ax.set_title(_topology_title(graph, title, omitted))
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _layer(attrs: dict[str, Any]) -> int:
    """The drawing layer of a node: machine layers 0-3, then one per switch tier."""
    kind = attrs["kind"]
    if kind in _MACHINE_LAYERS:
        return _MACHINE_LAYERS[kind]
    return _FIRST_SWITCH_LAYER + int(attrs.get("tier", 1))


def _layers(graph: nx.DiGraph[str]) -> list[tuple[int, list[str]]]:
    """Occupied layers from the bottom, each with its nodes in drawing order."""
    by_layer: dict[int, list[str]] = {}
    for node, attrs in graph.nodes(data=True):
        by_layer.setdefault(_layer(attrs), []).append(node)

    def order(node: str) -> tuple[tuple[str | int, ...], tuple[str | int, ...]]:
        return natural_key(str(graph.nodes[node].get("host", ""))), natural_key(node)

    return [(layer, sorted(by_layer[layer], key=order)) for layer in sorted(by_layer)]


def _positions(
    graph: nx.DiGraph[str], rows: list[tuple[int, list[str]]]
) -> dict[str, tuple[float, float]]:
    """x in (0, 1), evenly spread with a gap between hosts; y the row index."""
    xy: dict[str, tuple[float, float]] = {}
    for y, (_, nodes) in enumerate(rows):
        slots: list[float] = []
        slot, host = -1.0, None
        for node in nodes:
            here = graph.nodes[node].get("host")
            slot += 1.0 + (_HOST_GAP if slots and here != host else 0.0)
            slots.append(slot)
            host = here
        for node, x in zip(nodes, slots, strict=True):
            xy[node] = ((x + 0.5) / (slots[-1] + 1.0), float(y))
    return xy


def _cables(
    graph: nx.DiGraph[str], xy: dict[str, tuple[float, float]]
) -> dict[LinkKind, list[Any]]:
    """Polylines of each cable (both directions drawn once), grouped by link kind."""
    seen: set[tuple[str, str]] = set()
    segments: dict[LinkKind, list[Any]] = {}
    for u, v, attrs in graph.edges(data=True):
        if (v, u) in seen:
            continue
        seen.add((u, v))
        (x1, y1), (x2, y2) = xy[u], xy[v]
        if y1 == y2:  # an arc, away from the layer below (or, at the bottom, downwards)
            t = np.linspace(0.0, 1.0, 17)
            lift = (-1.0 if y1 == 0 else 1.0) * 2 * _BULGE * abs(x2 - x1)
            line = np.column_stack([x1 + (x2 - x1) * t, y1 + lift * t * (1 - t)])
        else:
            line = np.array([(x1, y1), (x2, y2)])
        segments.setdefault(attrs["kind"], []).append(line)
    return {kind: segments[kind] for kind in LinkKind if kind in segments}


def _label(ax: Axes, nodes: list[str], xy: dict[str, tuple[float, float]]) -> None:
    crowded = len(nodes) > 12
    for node in nodes:
        x, y = xy[node]
        ax.text(x, y - 0.12, node, fontsize=7, ha="center", va="top",
                rotation=90 if crowded else 0, zorder=3,
                bbox={"boxstyle": "round,pad=0.1", "facecolor": "white", "edgecolor": "none",
                      "alpha": 0.8})  # fmt: skip


def _style(ax: Axes, rows: list[tuple[int, list[str]]], graph: nx.DiGraph[str]) -> None:
    ax.set_yticks(range(len(rows)), [_layer_name(graph, layer, nodes) for layer, nodes in rows])
    ax.set_xticks([])
    ax.set_xlim(0.0, 1.0)
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    if graph.number_of_edges():
        ax.legend(title="links", loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


def _layer_name(graph: nx.DiGraph[str], layer: int, nodes: list[str]) -> str:
    if layer >= _FIRST_SWITCH_LAYER:
        tier = layer - _FIRST_SWITCH_LAYER
        return f"switch\ntier {tier}" + (f"\n({_TIER_NAMES[tier]})" if tier in _TIER_NAMES else "")
    kinds = dict.fromkeys(graph.nodes[node]["kind"] for node in nodes)
    return ",\n".join(_KIND_NAMES[kind] for kind in kinds)


def _topology_title(graph: nx.DiGraph[str], title: str | None, omitted: bool) -> str:
    if title is None:
        n_gpus = sum(1 for _, attrs in graph.nodes(data=True) if attrs["kind"] is NodeKind.GPU)
        title = (
            f"{graph.graph.get('name', 'topology')}: {n_gpus} GPUs, "
            f"{graph.number_of_nodes()} nodes, {graph.number_of_edges()} directed links"
        )
    if omitted:
        title += f"\n(node labels omitted in layers of more than {MAX_LABELLED_PER_LAYER} nodes)"
    return title


def plot_comparison(points: Sequence[Any], path: str | Path, *, title: str | None = None) -> Path:
    """Measured (markers) and simulated (lines) busbw in GB/s over size, one colour per
    file and collective; ``points`` are :class:`simcoll.compare.ComparedPoint`."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    from simcoll.results import bandwidths  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(9, 5.5), layout="constrained")
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
    _size_axis(ax, [p.size_bytes for p in points])
    ax.set_ylabel("bus bandwidth (GB/s, 1e9 B/s)")
    ax.set_title(title or "measured (markers) vs simulated (lines) bus bandwidth")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="small")
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
