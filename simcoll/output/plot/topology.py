"""Topology drawings: a cluster graph in layers, GPUs at the bottom, switches on top."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np

from simcoll.output.plot._axes import figure, save
from simcoll.topology.inspect import natural_key
from simcoll.topology.schema import LinkKind, NodeKind

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["MAX_LABELLED_PER_LAYER", "plot_topology"]

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
    from matplotlib.collections import LineCollection  # noqa: PLC0415 - matplotlib lazily

    rows = _layers(graph)
    xy = _positions(graph, rows)
    cables = _cables(graph, xy)
    ys = [y for lines in cables.values() for line in lines for y in line[:, 1]]
    y_lim = (min([-0.9, *(y - 0.4 for y in ys)]), max([len(rows) - 0.5, *(y + 0.2 for y in ys)]))
    widest = max(len(nodes) for _, nodes in rows)
    size_in = (min(30.0, max(6.0, 0.3 * widest + 2.5)), 1.3 * (y_lim[1] - y_lim[0]) + 1.2)
    with figure(*size_in) as (fig, ax):
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
        return save(fig, path, dpi=110)


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
