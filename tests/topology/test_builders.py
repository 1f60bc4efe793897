"""Tests of simcoll.topology.builders: closed-form counts, attributes and argument errors."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import networkx as nx
import pytest

from simcoll.core.errors import ConfigError
from simcoll.topology.builders import BUILDERS, full_mesh, ring, switch_star
from simcoll.topology.schema import LinkKind, NodeKind, gpu_nodes, validate

BANDWIDTH_BYTES_PER_S = 3e11
LATENCY_S = 5e-7
LINK: dict[str, Any] = {
    "link_bandwidth_bytes_per_s": BANDWIDTH_BYTES_PER_S,
    "link_latency_s": LATENCY_S,
}
SIZES = [1, 2, 3, 4, 5, 8, 17]


def _hops(graph: nx.DiGraph[str], a: int, b: int) -> int:
    return int(nx.shortest_path_length(graph, f"gpu{a}", f"gpu{b}"))


@pytest.mark.parametrize("n", SIZES)
def test_switch_star_counts(n: int) -> None:
    graph = switch_star(n, **LINK)
    assert graph.number_of_nodes() == n + 1
    assert graph.number_of_edges() == 2 * n
    assert graph.out_degree("sw") == graph.in_degree("sw") == n
    for rank in range(n):
        assert graph.out_degree(f"gpu{rank}") == graph.in_degree(f"gpu{rank}") == 1
    for a, b in itertools.permutations(range(n), 2):
        assert _hops(graph, a, b) == 2


@pytest.mark.parametrize("n", SIZES)
def test_ring_counts(n: int) -> None:
    graph = ring(n, **LINK)
    # n >= 3: n cables, two directions each; n = 2: one cable; n = 1: none.
    expected_edges = {1: 0, 2: 2}.get(n, 2 * n)
    assert graph.number_of_nodes() == n
    assert graph.number_of_edges() == expected_edges
    for rank in range(n):
        assert graph.out_degree(f"gpu{rank}") == min(n - 1, 2)
    for a, b in itertools.permutations(range(n), 2):
        assert _hops(graph, a, b) == min(abs(a - b), n - abs(a - b))


@pytest.mark.parametrize("n", [n for n in SIZES if n >= 2])
def test_ring_matches_networkx_cycle(n: int) -> None:
    cycle = nx.cycle_graph(n).to_directed()
    expected = {(f"gpu{a}", f"gpu{b}") for a, b in cycle.edges}
    assert set(ring(n, **LINK).edges) == expected


@pytest.mark.parametrize("n", SIZES)
def test_full_mesh_counts(n: int) -> None:
    graph = full_mesh(n, **LINK)
    assert graph.number_of_nodes() == n
    assert graph.number_of_edges() == n * (n - 1)
    complete = nx.complete_graph(n).to_directed()
    assert set(graph.edges) == {(f"gpu{a}", f"gpu{b}") for a, b in complete.edges}
    for a, b in itertools.permutations(range(n), 2):
        assert _hops(graph, a, b) == 1


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("n", [1, 4])
def test_every_builder_sets_the_schema(name: str, n: int) -> None:
    graph = BUILDERS[name](n, **LINK)
    assert validate(graph) is graph
    assert graph.graph["name"] == f"{name}_{n}"
    assert gpu_nodes(graph) == [f"gpu{rank}" for rank in range(n)]
    for _, attrs in graph.nodes(data=True):
        assert attrs["kind"] in (NodeKind.GPU, NodeKind.NVSWITCH)
    for _, _, attrs in graph.edges(data=True):
        assert attrs == {
            "kind": LinkKind.NVLINK,
            "bandwidth_bytes_per_s": BANDWIDTH_BYTES_PER_S,
            "latency_s": LATENCY_S,
        }


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_link_kind_is_applied(name: str) -> None:
    graph = BUILDERS[name](3, link_kind=LinkKind.PCIE, **LINK)
    assert {attrs["kind"] for _, _, attrs in graph.edges(data=True)} == {LinkKind.PCIE}


def test_switch_kind_is_applied() -> None:
    graph = switch_star(2, switch_kind=NodeKind.PCIE_SWITCH, **LINK)
    assert graph.nodes["sw"]["kind"] is NodeKind.PCIE_SWITCH


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_links_have_their_own_attribute_dicts(name: str) -> None:
    # Changing one direction of one cable (as calibration may) must not change another.
    graph = BUILDERS[name](3, **LINK)
    first, *rest = graph.edges
    graph.edges[first]["bandwidth_bytes_per_s"] = 1.0
    assert all(graph.edges[e]["bandwidth_bytes_per_s"] == BANDWIDTH_BYTES_PER_S for e in rest)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_builders_are_deterministic(name: str) -> None:
    one, two = BUILDERS[name](5, **LINK), BUILDERS[name](5, **LINK)
    assert list(one.nodes(data=True)) == list(two.nodes(data=True))
    assert list(one.edges(data=True)) == list(two.edges(data=True))
    assert one is not two


def test_integer_quantities_are_stored_as_floats() -> None:
    graph = ring(3, link_bandwidth_bytes_per_s=10**9, link_latency_s=0)
    attrs = graph.edges["gpu0", "gpu1"]
    assert type(attrs["bandwidth_bytes_per_s"]) is float
    assert type(attrs["latency_s"]) is float


def test_physical_parameters_are_keyword_only() -> None:
    builder: Callable[..., object] = switch_star
    with pytest.raises(TypeError):
        builder(4, BANDWIDTH_BYTES_PER_S, LATENCY_S)


def test_registry_names_the_functions() -> None:
    assert dict(BUILDERS) == {"switch_star": switch_star, "ring": ring, "full_mesh": full_mesh}


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"n_gpus": 0}, "n_gpus: must be an integer >= 1, got 0"),
        ({"n_gpus": -3}, "n_gpus: must be an integer >= 1, got -3"),
        ({"n_gpus": 2.0}, "n_gpus: must be an integer >= 1, got 2.0"),
        ({"n_gpus": True}, "n_gpus: must be an integer >= 1, got True"),
        (
            {"link_bandwidth_bytes_per_s": 0.0},
            "link_bandwidth_bytes_per_s: must be positive and finite, got 0.0 bytes/s",
        ),
        (
            {"link_bandwidth_bytes_per_s": -1e9},
            "link_bandwidth_bytes_per_s: must be positive and finite, got -1000000000.0 bytes/s",
        ),
        (
            {"link_bandwidth_bytes_per_s": math.inf},
            "link_bandwidth_bytes_per_s: must be positive and finite, got inf bytes/s",
        ),
        (
            {"link_bandwidth_bytes_per_s": math.nan},
            "link_bandwidth_bytes_per_s: must be positive and finite, got nan bytes/s",
        ),
        (
            {"link_bandwidth_bytes_per_s": "300 GB/s"},
            "link_bandwidth_bytes_per_s: must be a number in bytes/s, got '300 GB/s'",
        ),
        (
            {"link_latency_s": -1e-6},
            "link_latency_s: must be non-negative and finite, got -1e-06 s",
        ),
        (
            {"link_latency_s": math.nan},
            "link_latency_s: must be non-negative and finite, got nan s",
        ),
        (
            {"link_kind": "nvlink"},
            "link_kind: must be one of LinkKind.NVLINK, LinkKind.PCIE, LinkKind.CPU_LINK, "
            "LinkKind.IB, LinkKind.ETHERNET, got 'nvlink'",
        ),
    ],
)
def test_bad_arguments_give_one_exact_line(
    name: str, overrides: dict[str, object], expected: str
) -> None:
    arguments: dict[str, object] = {"n_gpus": 4, **LINK, **overrides}
    with pytest.raises(ConfigError) as info:
        BUILDERS[name](**arguments)
    assert str(info.value) == expected


def test_switch_cannot_be_a_gpu() -> None:
    with pytest.raises(ConfigError) as info:
        switch_star(2, switch_kind=NodeKind.GPU, **LINK)
    assert str(info.value) == "switch_kind: the switch cannot be a GPU; pick a switch kind"
