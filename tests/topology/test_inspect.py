"""Tests of simcoll.topology.inspect: bisection, path matrices, pair classes, the report."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pytest

from simcoll.topology.builders import _add_duplex, _gpus, full_mesh, ring, switch_star
from simcoll.topology.inspect import (
    MATRIX_MAX_GPUS,
    SAMPLE_TO_RANK0,
    LinkGroup,
    PathMatrix,
    bisection_bandwidth_bytes_per_s,
    format_summary,
    natural_key,
    pair_classes,
    path_matrix,
    report,
    sample_pairs,
    summarize,
)
from simcoll.topology.routing import Router
from simcoll.topology.schema import LinkAttrs, LinkKind, NodeKind, validate

BANDWIDTH_BYTES_PER_S = 3e11
LATENCY_S = 5e-7
LINK: dict[str, Any] = {
    "link_bandwidth_bytes_per_s": BANDWIDTH_BYTES_PER_S,
    "link_latency_s": LATENCY_S,
}
SIZES = [1, 2, 3, 4, 5, 8, 17]


def _link(
    bandwidth_bytes_per_s: float, latency_s: float = LATENCY_S, kind: LinkKind = LinkKind.NVLINK
) -> LinkAttrs:
    return LinkAttrs(kind=kind, bandwidth_bytes_per_s=bandwidth_bytes_per_s, latency_s=latency_s)


def two_switches(
    n_per_switch: int, gpu_bytes_per_s: float, up_bytes_per_s: float, down_bytes_per_s: float
) -> nx.DiGraph[str]:
    """GPUs 0..k-1 on sw0 and k..2k-1 on sw1; sw0->sw1 at ``up``, sw1->sw0 at ``down``."""
    graph = _gpus("two_switches", 2 * n_per_switch)
    for sw in ("sw0", "sw1"):
        graph.add_node(sw, kind=NodeKind.SWITCH, tier=1)
    for rank in range(2 * n_per_switch):
        _add_duplex(graph, f"gpu{rank}", f"sw{rank // n_per_switch}", _link(gpu_bytes_per_s))
    graph.add_edge("sw0", "sw1", **_link(up_bytes_per_s))
    graph.add_edge("sw1", "sw0", **_link(down_bytes_per_s))
    return validate(graph)


# --- bisection ------------------------------------------------------------------------------


@pytest.mark.parametrize("n", SIZES)
def test_bisection_of_a_star_is_the_lower_half_of_the_gpu_links(n: int) -> None:
    # The n // 2 lower ranks each send over their one link; the switch does not limit.
    expected = (n // 2) * BANDWIDTH_BYTES_PER_S
    assert bisection_bandwidth_bytes_per_s(switch_star(n, **LINK)) == pytest.approx(expected)


@pytest.mark.parametrize("n", SIZES)
def test_bisection_of_a_ring_cuts_two_links(n: int) -> None:
    # Two contiguous halves of a ring meet at two cables (one when n = 2; none when n = 1).
    cut_cables = {1: 0, 2: 1}.get(n, 2)
    expected = cut_cables * BANDWIDTH_BYTES_PER_S
    assert bisection_bandwidth_bytes_per_s(ring(n, **LINK)) == pytest.approx(expected)


@pytest.mark.parametrize("n", SIZES)
def test_bisection_of_a_full_mesh_is_every_cross_link(n: int) -> None:
    half = n // 2
    expected = half * (n - half) * BANDWIDTH_BYTES_PER_S
    assert bisection_bandwidth_bytes_per_s(full_mesh(n, **LINK)) == pytest.approx(expected)


def test_bisection_is_one_direction_lower_half_to_upper_half() -> None:
    # 2 GPUs a switch at 100 each; the switches are joined by 30 one way and 70 the other.
    graph = two_switches(2, gpu_bytes_per_s=100e9, up_bytes_per_s=30e9, down_bytes_per_s=70e9)
    assert bisection_bandwidth_bytes_per_s(graph) == pytest.approx(30e9)
    wide = two_switches(2, gpu_bytes_per_s=100e9, up_bytes_per_s=500e9, down_bytes_per_s=70e9)
    assert bisection_bandwidth_bytes_per_s(wide) == pytest.approx(2 * 100e9)  # GPU links


def test_bisection_ignores_transit() -> None:
    graph = full_mesh(6, **LINK)
    before = bisection_bandwidth_bytes_per_s(graph)
    nx.set_node_attributes(graph, False, "transit")
    assert bisection_bandwidth_bytes_per_s(graph) == before == 9 * BANDWIDTH_BYTES_PER_S


# --- path matrix ------------------------------------------------------------------------------


@pytest.mark.parametrize("n", SIZES)
def test_path_matrix_of_a_star(n: int) -> None:
    m = path_matrix(switch_star(n, **LINK))
    off = ~np.eye(n, dtype=bool)
    assert m.bandwidth_bytes_per_s.shape == m.latency_s.shape == m.hops.shape == (n, n)
    assert np.all(m.bandwidth_bytes_per_s[off] == BANDWIDTH_BYTES_PER_S)
    assert np.allclose(m.latency_s[off], 2 * LATENCY_S)  # GPU -> switch -> GPU
    assert np.all(m.hops[off] == 2)
    assert np.all(np.isinf(np.diag(m.bandwidth_bytes_per_s)))
    assert np.all(np.diag(m.latency_s) == 0.0)
    assert np.all(np.diag(m.hops) == 0)


@pytest.mark.parametrize("n", SIZES)
def test_path_matrix_of_a_ring_follows_the_shorter_arc(n: int) -> None:
    m = path_matrix(ring(n, **LINK))
    for a, b in itertools.permutations(range(n), 2):
        hops = min(abs(a - b), n - abs(a - b))
        assert m.hops[a, b] == hops
        assert m.latency_s[a, b] == pytest.approx(hops * LATENCY_S)
        assert m.bandwidth_bytes_per_s[a, b] == BANDWIDTH_BYTES_PER_S


def test_path_matrix_takes_the_bottleneck_and_sums_latencies() -> None:
    graph = _gpus("line", 2)
    graph.add_node("sw", kind=NodeKind.SWITCH)
    _add_duplex(graph, "gpu0", "sw", _link(100e9, 1e-6))
    _add_duplex(graph, "gpu1", "sw", _link(40e9, 3e-6))
    m = path_matrix(validate(graph))
    assert m.bandwidth_bytes_per_s[0, 1] == m.bandwidth_bytes_per_s[1, 0] == 40e9
    assert m.latency_s[0, 1] == pytest.approx(1e-6 + 3e-6)


def test_path_matrix_is_read_only_and_accepts_a_router() -> None:
    graph = switch_star(3, **LINK)
    m = path_matrix(graph, Router(graph))
    np.testing.assert_array_equal(m.hops, path_matrix(graph).hops)
    for array in (m.bandwidth_bytes_per_s, m.latency_s, m.hops):
        with pytest.raises(ValueError, match="read-only"):
            array[0, 1] = 0


# --- pair classes -----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5, SAMPLE_TO_RANK0 + 1, 1000])
def test_sample_pairs(n: int) -> None:
    pairs = sample_pairs(n)
    others = n - 1
    back = [a for a, b in pairs if b == 0]
    assert pairs[:others] == [(0, j) for j in range(1, n)]
    assert len(back) == min(others, SAMPLE_TO_RANK0)
    assert len(set(back)) == len(back)
    assert all(1 <= j < n for j in back)
    if back:
        assert back[0] == 1
        assert back[-1] > n - 1 - others / SAMPLE_TO_RANK0  # spread up to the last ranks


def test_pair_classes_of_a_star_are_one_class() -> None:
    n = 40
    (only,) = pair_classes(switch_star(n, **LINK))
    assert (only.bandwidth_bytes_per_s, only.hops) == (BANDWIDTH_BYTES_PER_S, 2)
    assert only.latency_s == pytest.approx(2 * LATENCY_S)
    assert only.n_pairs == len(sample_pairs(n)) == 2 * (n - 1)


def test_pair_classes_of_a_ring() -> None:
    n = 7  # from rank 0: ranks 1 and 6 at 1 hop, 2 and 5 at 2, 3 and 4 at 3; same back
    classes = pair_classes(ring(n, **LINK))
    assert [(c.hops, c.n_pairs) for c in classes] == [(1, 4), (2, 4), (3, 4)]
    assert [c.latency_s for c in classes] == pytest.approx(
        [LATENCY_S, 2 * LATENCY_S, 3 * LATENCY_S]
    )


def test_pair_classes_sorted_by_bandwidth_descending() -> None:
    # Same-switch pairs get the 100 GB/s GPU links; cross pairs the 30 or 70 GB/s trunk.
    classes = pair_classes(two_switches(2, 100e9, up_bytes_per_s=30e9, down_bytes_per_s=70e9))
    assert [(c.bandwidth_bytes_per_s, c.hops, c.n_pairs) for c in classes] == [
        (100e9, 2, 2),  # (0, 1) and (1, 0)
        (70e9, 3, 2),  # (2, 0) and (3, 0): sw1 -> sw0
        (30e9, 3, 2),  # (0, 2) and (0, 3): sw0 -> sw1
    ]


# --- summary and report -----------------------------------------------------------------------


def test_summarize_counts_by_kind() -> None:
    graph = switch_star(8, **LINK)
    graph.graph.update(description="a box", source="box.toml")
    graph.nodes["sw"]["reduces"] = True
    s = summarize(graph)
    assert (s.name, s.description, s.source, s.n_gpus) == ("switch_star_8", "a box", "box.toml", 8)
    assert s.nodes_by_kind == {"gpu": 8, "nvswitch": 1}
    assert s.links_by_kind == {"nvlink": 16}
    assert s.link_groups == (LinkGroup("nvlink", BANDWIDTH_BYTES_PER_S, LATENCY_S, 16),)
    assert s.reducing_switches == ("sw",)
    assert s.bisection_bytes_per_s == pytest.approx(4 * BANDWIDTH_BYTES_PER_S)


def test_summarize_without_optional_graph_attributes() -> None:
    graph = ring(3, **LINK)
    s = summarize(graph)
    assert (s.description, s.source, s.reducing_switches) == ("", "", ())


def _table(text: str, title: str) -> list[list[str]]:
    """The rows (without the rank column) of the matrix under a title line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        rows.append(line.split()[1:])
    return rows


def test_format_summary_prints_the_matrices_with_units() -> None:
    n = 4
    graph = switch_star(n, **LINK)
    text = format_summary(summarize(graph), path_matrix(graph))
    assert "units: bandwidths in GB/s (1e9 B/s), per direction; latencies in us" in text
    bandwidth = _table(text, "bottleneck bandwidth of the routed path (GB/s)")
    latency = _table(text, "latency of the routed path (us)")
    for rows, expected in (
        (bandwidth, BANDWIDTH_BYTES_PER_S / 1e9),
        (latency, 2 * LATENCY_S / 1e-6),
    ):
        assert len(rows) == n
        for a, b in itertools.product(range(n), repeat=2):
            if a == b:
                assert rows[a][b] == "-"
            else:
                assert float(rows[a][b]) == pytest.approx(expected)
    bisection = (n // 2) * BANDWIDTH_BYTES_PER_S / 1e9
    assert f"bisection bandwidth: {bisection:g} GB/s (max flow from ranks 0-1 to ranks 2-3" in text
    (links,) = [line.split() for line in text.splitlines() if line.startswith("  nvlink")]
    gb_s, us = f"{BANDWIDTH_BYTES_PER_S / 1e9:g}", f"{LATENCY_S / 1e-6:g}"
    assert links == ["nvlink", str(2 * n), gb_s, "GB/s", us, "us"]


def test_format_summary_of_a_big_matrix_prints_classes_of_all_pairs() -> None:
    n = MATRIX_MAX_GPUS + 1
    graph = switch_star(n, **LINK)
    text = format_summary(summarize(graph), path_matrix(graph))
    assert "bottleneck bandwidth of the routed path" not in text
    assert f"GPU pairs by routed path (all {n * (n - 1)} ordered pairs)" in text
    gb_s, us = f"{BANDWIDTH_BYTES_PER_S / 1e9:g}", f"{2 * LATENCY_S / 1e-6:g}"
    assert text.splitlines()[-1].split() == [gb_s, "GB/s", us, "us", "2", str(n * (n - 1))]


def test_report_switches_from_matrices_to_sampled_classes() -> None:
    assert "src\\dst" in report(switch_star(MATRIX_MAX_GPUS, **LINK))
    n = MATRIX_MAX_GPUS + 1
    text = report(switch_star(n, **LINK))
    assert "src\\dst" not in text
    assert f"(sample: rank 0 to each of the {n - 1} others, {n - 1} of them to rank 0)" in text
    assert text.splitlines()[-1].split()[-1] == str(2 * (n - 1))


def test_report_of_one_gpu() -> None:
    text = report(switch_star(1, **LINK))
    assert "bisection bandwidth: 0 GB/s (one GPU: no other half)" in text
    assert _table(text, "bottleneck bandwidth") == [["-"]]


def test_report_lists_reducing_switches() -> None:
    graph = two_switches(1, 1e9, 1e9, 1e9)
    nx.set_node_attributes(graph, {"sw0": True, "sw1": True}, "reduces")
    assert "in-network reduction: 2 switches (sw0, sw1)" in report(graph)


def test_report_gives_the_gpu_memory_where_the_topology_has_it() -> None:
    graph = switch_star(2, **LINK)
    assert "GPU memory" not in report(graph)
    graph.graph["gpu_memory_bandwidth_bytes_per_s"] = 1555e9
    assert summarize(graph).gpu_memory_bandwidth_bytes_per_s == 1555e9
    line = "GPU memory: 1555 GB/s per GPU (out-of-place all-gather and broadcast copy at it)"
    assert line in report(graph).splitlines()


def test_natural_key() -> None:
    ids = ["node10.nic0", "gpu10", "sw", "gpu9", "node2.nic11", "node2.nic3"]
    assert sorted(ids, key=natural_key) == [
        "gpu9", "gpu10", "node2.nic3", "node2.nic11", "node10.nic0", "sw",
    ]  # fmt: skip


def test_path_matrix_type() -> None:
    m = path_matrix(ring(2, **LINK))
    assert isinstance(m, PathMatrix)
    assert m.bandwidth_bytes_per_s.dtype == np.float64
    assert math.isinf(m.bandwidth_bytes_per_s[0, 0])


# --- drawing (simcoll.output.plot.plot_topology) ------------------------------------------

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def two_tier_cluster() -> nx.DiGraph[str]:
    """2 hosts x 2 GPUs (NVLink pair), a NIC per GPU, a leaf per host, one spine."""
    graph = _gpus("two_tier", 4)
    pcie, ib = _link(32e9, kind=LinkKind.PCIE), _link(50e9, kind=LinkKind.IB)
    for host in range(2):
        graph.add_node(f"leaf{host}", kind=NodeKind.SWITCH, tier=1)
        _add_duplex(graph, f"leaf{host}", "spine0", ib)
        _add_duplex(graph, f"gpu{2 * host}", f"gpu{2 * host + 1}", _link(300e9))
        for local in range(2):
            rank, nic = 2 * host + local, f"node{host}.nic{local}"
            graph.nodes[f"gpu{rank}"].update(host=f"node{host}", transit=False)
            graph.add_node(nic, kind=NodeKind.NIC, host=f"node{host}")
            _add_duplex(graph, f"gpu{rank}", nic, pcie)
            _add_duplex(graph, nic, f"leaf{host}", ib)
    graph.nodes["spine0"].update(kind=NodeKind.SWITCH, tier=2)
    return validate(graph)


@pytest.mark.parametrize(
    "graph",
    [switch_star(8, **LINK), two_tier_cluster(), switch_star(70, **LINK)],
    ids=["star", "two_tier", "star70_unlabelled"],
)
def test_plot_topology_writes_a_png(tmp_path: Path, graph: nx.DiGraph[str]) -> None:
    from simcoll.output.plot import plot_topology  # noqa: PLC0415 - matplotlib only in this test

    out = plot_topology(graph, tmp_path / "topology.png")
    assert out == tmp_path / "topology.png"
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 1000


def test_topology_layers_go_up_by_kind_and_tier() -> None:
    from simcoll.output.plot.topology import _layers, _positions  # noqa: PLC0415

    graph = two_tier_cluster()
    rows = _layers(graph)
    assert [nodes for _, nodes in rows] == [
        ["gpu0", "gpu1", "gpu2", "gpu3"],
        ["node0.nic0", "node0.nic1", "node1.nic0", "node1.nic1"],
        ["leaf0", "leaf1"],
        ["spine0"],
    ]
    xy = _positions(graph, rows)
    assert [xy[node][1] for node in ("gpu0", "node0.nic0", "leaf0", "spine0")] == [0, 1, 2, 3]
    assert xy["spine0"][0] == 0.5
    gpu_x = [xy[f"gpu{rank}"][0] for rank in range(4)]
    assert gpu_x == sorted(gpu_x)
    # A gap between the two hosts: wider than the step within one host.
    assert gpu_x[2] - gpu_x[1] > gpu_x[1] - gpu_x[0]
    assert gpu_x[1] - gpu_x[0] == pytest.approx(gpu_x[3] - gpu_x[2])


def test_topology_layers_sort_ids_naturally() -> None:
    from simcoll.output.plot.topology import _layers  # noqa: PLC0415

    (gpu_layer, gpus), (switch_layer, switches) = _layers(switch_star(12, **LINK))
    assert (gpu_layer, switch_layer) == (0, 1)  # GPUs, then NVSwitches
    assert gpus == [f"gpu{rank}" for rank in range(12)]  # gpu10 after gpu9
    assert switches == ["sw"]
