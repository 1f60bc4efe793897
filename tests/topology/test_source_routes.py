"""Tests of simcoll.topology.source_routes: all routes from a source at once must be the
router's own routes, link for link, under every tie-break rule."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from simcoll.core.errors import TopologyError
from simcoll.topology import load
from simcoll.topology.builders import ring
from simcoll.topology.routing import Router
from simcoll.topology.schema import LinkKind, NodeKind
from simcoll.topology.tiebreak import rounded_s

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def _shipped(file: str, **overrides: str) -> Callable[[], nx.DiGraph[str]]:
    return lambda: load(TOPOLOGIES / file, overrides=overrides)


def _uneven_latencies() -> nx.DiGraph[str]:
    """Leaves and spines whose links' latencies add up to equal costs only in exact
    arithmetic (0.1 + 0.2 against 0.3 us): the rounding decides which paths tie."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    latency = {"spine0": (0.1e-6, 0.2e-6), "spine1": (0.3e-6, 0.0), "spine2": (0.2e-6, 0.1e-6)}
    for leaf in range(3):
        graph.add_node(f"leaf{leaf}", kind=NodeKind.SWITCH)
        for i in range(3):
            gpu = f"gpu{3 * leaf + i}"
            graph.add_node(gpu, kind=NodeKind.GPU, rank=3 * leaf + i, transit=False)
            _duplex(graph, gpu, f"leaf{leaf}", 1e-6)
        for spine, (up_s, down_s) in latency.items():
            graph.add_node(spine, kind=NodeKind.SWITCH)
            graph.add_edge(f"leaf{leaf}", spine, kind=LinkKind.IB,
                           bandwidth_bytes_per_s=1e9, latency_s=up_s)  # fmt: skip
            graph.add_edge(spine, f"leaf{leaf}", kind=LinkKind.IB,
                           bandwidth_bytes_per_s=1e9, latency_s=down_s)  # fmt: skip
    return graph


def _duplex(graph: nx.DiGraph[str], a: str, b: str, latency_s: float) -> None:
    for u, v in ((a, b), (b, a)):
        graph.add_edge(u, v, kind=LinkKind.IB, bandwidth_bytes_per_s=1e9, latency_s=latency_s)


FABRICS = {
    "a100-roce-2to1": _shipped("a100-roce-2to1.toml", n_nodes="6"),
    "h100-rail-optimized": _shipped("h100-rail-optimized.toml", n_nodes="4"),
    "h100-ib-fat-tree": _shipped("h100-ib-fat-tree.toml", n_nodes="3"),
    "dgx1-v100": _shipped("dgx1-v100.toml"),  # GPUs do not forward: NVLink or PCIe
    "pcie-8x-rtx4090": _shipped("pcie-8x-rtx4090.toml"),  # no P2P: bounces via the CPU
    "dragonfly": _shipped("dragonfly.toml"),
    "torus-3d": _shipped("torus-3d.toml"),
    "uneven-latencies": _uneven_latencies,
    "ring7": lambda: ring(7, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6),
}


@pytest.mark.parametrize("rule", ["ecmp", "dmodk", "lowest_ids"])
@pytest.mark.parametrize("fabric", sorted(FABRICS))
def test_every_route_from_every_gpu_is_the_routers(fabric: str, rule: str) -> None:
    graph = FABRICS[fabric]()
    graph.graph["routing"] = rule
    graph.graph["ecmp_seed"] = 3
    gpus = [n for n, kind in graph.nodes(data="kind") if kind is NodeKind.GPU]
    everything = list(graph.nodes)
    edges = list(graph.edges)
    together = Router(graph)
    for src in gpus[:: max(1, len(gpus) // 12)]:
        one_by_one = Router(graph)  # asked in turn: ahead of its levels, then completed
        expected, unreachable = {}, []
        for dst in everything:
            try:
                expected[dst] = one_by_one.route(src, dst)
            except TopologyError:
                unreachable.append(dst)  # a switch behind GPUs that do not forward
        links, offsets = together.routes_from(src, list(expected))
        for i, dst in enumerate(expected):
            found = tuple(edges[e] for e in links[offsets[i] : offsets[i + 1]])
            assert found == expected[dst], (src, dst)
        for dst in unreachable[:3]:
            with pytest.raises(TopologyError, match="no directed path"):
                together.routes_from(src, [dst])


def test_latencies_equal_to_the_femtosecond_tie() -> None:
    # gpu0 -> leaf0 -> spine -> leaf1 -> gpu3: 1 + 0.1 + 0.2 us over spine0, 1 + 0.3 + 0.0
    # over spine1, 1 + 0.2 + 0.1 over spine2. In floats the first sum is the largest;
    # rounded to the femtosecond all three are equal, so the lowest ids (spine0) win.
    via = {"spine0": (0.1e-6, 0.2e-6), "spine1": (0.3e-6, 0.0), "spine2": (0.2e-6, 0.1e-6)}
    raw = {spine: 1e-6 + up_s + down_s for spine, (up_s, down_s) in via.items()}
    assert raw["spine0"] > raw["spine1"] == raw["spine2"]
    assert len({rounded_s(rounded_s(1e-6 + up_s) + down_s) for up_s, down_s in via.values()}) == 1
    graph = _uneven_latencies()
    graph.graph["routing"] = "lowest_ids"
    links, offsets = Router(graph).routes_from("gpu0", ["gpu3"])
    edges = list(graph.edges)
    assert [edges[e] for e in links] == [
        ("gpu0", "leaf0"),
        ("leaf0", "spine0"),
        ("spine0", "leaf1"),
        ("leaf1", "gpu3"),
    ]
    assert offsets.tolist() == [0, 4]


def test_unreachable_destination_is_named() -> None:
    graph = ring(3, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    graph.add_node("island", kind=NodeKind.GPU, rank=3)
    with pytest.raises(TopologyError, match="no route from 'gpu0' to 'island'"):
        Router(graph).routes_from("gpu0", ["gpu1", "island"])


def test_unknown_node_is_named() -> None:
    graph = ring(3, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    with pytest.raises(TopologyError, match="no node 'gpu9'"):
        Router(graph).routes_from("gpu0", ["gpu9"])


def test_no_destinations_give_no_routes() -> None:
    graph = ring(3, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    links, offsets = Router(graph).routes_from("gpu0", [])
    assert links.tolist() == []
    assert offsets.tolist() == [0]
    assert np.issubdtype(links.dtype, np.integer)


def test_an_answer_is_kept_for_the_same_question_within_a_bound(monkeypatch) -> None:
    # A prediction asks the same sources once per protocol: the second asking reads the
    # first answer. Past the bound on links kept, what was kept goes.
    from simcoll.topology import routing  # noqa: PLC0415 - the bound under test

    graph = ring(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    router = Router(graph)
    first = router.routes_from("gpu0", ["gpu1", "gpu2"])
    assert router.routes_from("gpu0", ["gpu1", "gpu2"]) is first
    assert router.routes_from("gpu0", ["gpu2", "gpu1"]) is not first  # another question
    monkeypatch.setattr(routing, "_MAX_BATCHED_LINKS", 4)
    router.routes_from("gpu1", ["gpu3"])  # 2 more links: over the bound, start afresh
    assert router.routes_from("gpu0", ["gpu1", "gpu2"]) is not first
