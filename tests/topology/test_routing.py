"""Tests of simcoll.topology.routing: path choice, tie-breaks, caching and errors."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from typing import Any, ClassVar

import networkx as nx
import pytest

from simcoll.core.errors import TopologyError
from simcoll.topology import load, routing
from simcoll.topology.builders import full_mesh, ring, switch_star
from simcoll.topology.routing import (
    Router,
    route,
    route_bandwidth_bytes_per_s,
    route_latency_s,
)
from simcoll.topology.schema import LinkKind, NodeKind

LATENCY_S = 0.5e-6
BANDWIDTH_BYTES_PER_S = 3e11
LINK: dict[str, Any] = {
    "link_bandwidth_bytes_per_s": BANDWIDTH_BYTES_PER_S,
    "link_latency_s": LATENCY_S,
}


def _edges(path: list[str]) -> tuple[tuple[str, str], ...]:
    return tuple(itertools.pairwise(path))


def _oracle(graph: nx.DiGraph[str], src: str, dst: str) -> tuple[tuple[str, str], ...]:
    """The rule stated directly: among all fewest-hop paths, the least latency, then the
    smallest node sequence. Exponential in general, fine on small graphs."""

    def key(path: list[str]) -> tuple[float, list[str]]:
        latency_s = 0.0
        for u, v in _edges(path):
            latency_s += graph.edges[u, v]["latency_s"]
        return latency_s, path

    return _edges(min(nx.all_shortest_paths(graph, src, dst), key=key))


def _lowest_ids(graph: nx.DiGraph[str]) -> nx.DiGraph[str]:
    graph.graph["routing"] = "lowest_ids"
    return graph


def _add_link(graph: nx.DiGraph[str], a: str, b: str, latency_s: float) -> None:
    for u, v in ((a, b), (b, a)):
        graph.add_edge(u, v, kind=LinkKind.NVLINK, bandwidth_bytes_per_s=1e9, latency_s=latency_s)


def test_switch_star_route_crosses_the_switch() -> None:
    graph = switch_star(4, **LINK)
    edges = route(graph, "gpu0", "gpu3")
    assert edges == (("gpu0", "sw"), ("sw", "gpu3"))
    assert route_latency_s(graph, edges) == pytest.approx(2 * LATENCY_S, rel=1e-12)
    assert route_bandwidth_bytes_per_s(graph, edges) == BANDWIDTH_BYTES_PER_S


def test_full_mesh_route_is_the_direct_link() -> None:
    graph = full_mesh(5, **LINK)
    router = Router(graph)
    for a, b in itertools.permutations(range(5), 2):
        assert router.route(f"gpu{a}", f"gpu{b}") == ((f"gpu{a}", f"gpu{b}"),)


def test_ring_route_goes_the_short_way() -> None:
    n = 7
    router = Router(ring(n, **LINK))
    for a, b in itertools.permutations(range(n), 2):
        clockwise = (b - a) % n
        step = 1 if clockwise <= n - clockwise else -1
        hops = min(clockwise, n - clockwise)
        nodes = [f"gpu{(a + step * i) % n}" for i in range(hops + 1)]
        assert router.route(f"gpu{a}", f"gpu{b}") == _edges(nodes)


def test_even_ring_opposite_node_breaks_the_tie_by_node_ids() -> None:
    # gpu0 -> gpu3 on a 6-ring: two 3-hop paths with equal latency, 0-1-2-3 and 0-5-4-3;
    # ["gpu0", "gpu1", ...] < ["gpu0", "gpu5", ...], so the route goes through gpu1.
    router = Router(_lowest_ids(ring(6, **LINK)))
    assert router.route("gpu0", "gpu3") == _edges(["gpu0", "gpu1", "gpu2", "gpu3"])
    # Back: 3-2-1-0 against 3-4-5-0; "gpu2" < "gpu4".
    assert router.route("gpu3", "gpu0") == _edges(["gpu3", "gpu2", "gpu1", "gpu0"])


def test_node_ids_compare_as_strings() -> None:
    # On a 12-ring, gpu0 -> gpu6 ties between gpu0-gpu1-... and gpu0-gpu11-...;
    # as strings "gpu1" < "gpu11", and the route leaves through gpu1.
    edges = route(_lowest_ids(ring(12, **LINK)), "gpu0", "gpu6")
    assert edges[0] == ("gpu0", "gpu1")


def test_latency_breaks_a_hop_tie_before_node_ids() -> None:
    graph = _lowest_ids(ring(6, **LINK))
    graph.edges["gpu1", "gpu2"]["latency_s"] = 3 * LATENCY_S
    # 0-1-2-3 now costs 5 latencies against 3 for 0-5-4-3.
    assert route(graph, "gpu0", "gpu3") == _edges(["gpu0", "gpu5", "gpu4", "gpu3"])
    # The other direction is untouched (links are directed): still through gpu2.
    assert route(graph, "gpu3", "gpu0") == _edges(["gpu3", "gpu2", "gpu1", "gpu0"])


def test_fewer_hops_beat_lower_latency() -> None:
    graph: nx.DiGraph[str] = nx.DiGraph()
    for rank, name in enumerate(["a", "b", "c"]):
        graph.add_node(name, kind=NodeKind.GPU, rank=rank)
    _add_link(graph, "a", "c", latency_s=1.0)  # one slow hop
    _add_link(graph, "a", "b", latency_s=1e-6)  # two fast hops
    _add_link(graph, "b", "c", latency_s=1e-6)
    assert route(graph, "a", "c") == (("a", "c"),)


def test_best_prefix_is_kept_when_latencies_differ_between_levels() -> None:
    # Two 3-hop routes s->x->z->t and s->y->z->t share the link z->t. Up to z, via x
    # costs 1 + 1 = 2 and via y 3 + 0.5 = 3.5, so x wins; at 1.25 + 0.5 = 1.75 y wins,
    # although "x" < "y": latency decides before node ids.
    graph: nx.DiGraph[str] = nx.DiGraph()
    for rank, name in enumerate(["s", "t"]):
        graph.add_node(name, kind=NodeKind.GPU, rank=rank)
    for name in ("x", "y", "z"):
        graph.add_node(name, kind=NodeKind.SWITCH)
    _add_link(graph, "s", "x", 1.0)
    _add_link(graph, "x", "z", 1.0)
    _add_link(graph, "s", "y", 3.0)
    _add_link(graph, "y", "z", 0.5)
    _add_link(graph, "z", "t", 1.0)
    assert route(graph, "s", "t") == _edges(["s", "x", "z", "t"])
    graph.edges["s", "y"]["latency_s"] = 1.25  # via y: 1.75 < 2.0
    assert route(graph, "s", "t") == _edges(["s", "y", "z", "t"])


def _grid() -> nx.DiGraph[str]:
    """A 3x4 grid with uneven latencies: many fewest-hop paths per pair, few ties."""
    grid: nx.DiGraph[str] = nx.DiGraph()
    for u, v in nx.grid_2d_graph(3, 4).edges:
        a, b = f"n{u[0]}{u[1]}", f"n{v[0]}{v[1]}"
        _add_link(grid, a, b, latency_s=float(len(grid.edges) % 3))
    return grid


def _uneven_leaves_and_spines() -> nx.DiGraph[str]:
    """3 leaves of 2 GPUs under 3 spines, each leaf-spine cable 0, 1 or 2 us: a GPU's
    routes past its leaf (its gateway) tie on hops and differ in latency."""
    graph = _leaves_and_spines(n_leaves=3, gpus_per_leaf=2, n_spines=3)
    for leaf, spine in itertools.product(range(3), range(3)):
        for u, v in ((f"leaf{leaf}", f"spine{spine}"), (f"spine{spine}", f"leaf{leaf}")):
            graph.edges[u, v]["latency_s"] = ((leaf + 2 * spine) % 3) * 1e-6
    return graph


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: ring(6, **LINK), id="ring6"),
        pytest.param(lambda: ring(9, **LINK), id="ring9"),
        pytest.param(lambda: switch_star(5, **LINK), id="star5"),
        pytest.param(_grid, id="grid3x4"),
        pytest.param(_uneven_leaves_and_spines, id="leaf-spine"),
    ],
)
def test_router_agrees_with_the_rule_on_every_pair(make: Callable[[], nx.DiGraph[str]]) -> None:
    graph = _lowest_ids(make())
    pairs = list(itertools.permutations(sorted(graph.nodes), 2))
    # Near destinations first settles most routes one level beyond the search; far ones
    # first completes every level before: both must follow the rule.
    hops = dict(nx.all_pairs_shortest_path_length(graph))
    far_first = sorted(pairs, key=lambda pair: (-hops[pair[0]][pair[1]], pair))
    for order in (pairs, far_first):
        router = Router(graph)
        for src, dst in order:
            assert router.route(src, dst) == _oracle(graph, src, dst)


def test_routes_do_not_depend_on_insertion_order() -> None:
    forward: nx.DiGraph[str] = nx.DiGraph()
    backward: nx.DiGraph[str] = nx.DiGraph()
    n = 8
    cables = [(f"gpu{i}", f"gpu{(i + 1) % n}") for i in range(n)]
    for a, b in cables:
        _add_link(forward, a, b, 1e-6)
    for a, b in reversed(cables):
        _add_link(backward, b, a, 1e-6)
    assert list(forward.edges) != list(backward.edges)
    for src, dst in itertools.permutations(sorted(forward.nodes), 2):
        assert route(forward, src, dst) == route(backward, src, dst)


def test_route_to_self_is_empty() -> None:
    graph = switch_star(2, **LINK)
    edges = route(graph, "gpu1", "gpu1")
    assert edges == ()
    assert route_latency_s(graph, edges) == 0.0
    assert route_bandwidth_bytes_per_s(graph, edges) == math.inf


class _CountingSearch(routing._Search):
    created: ClassVar[list[str]] = []
    levels_completed: ClassVar[list[int]] = []

    def __init__(self, graph: nx.DiGraph[str], src_node: str, *rest: Any) -> None:
        super().__init__(graph, src_node, *rest)
        self.created.append(src_node)

    def _complete_next_level(self) -> bool:
        self.levels_completed.append(1)
        return super()._complete_next_level()


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> type[_CountingSearch]:
    monkeypatch.setattr(_CountingSearch, "created", [])
    monkeypatch.setattr(_CountingSearch, "levels_completed", [])
    monkeypatch.setattr(routing, "_Search", _CountingSearch)
    return _CountingSearch


def test_routes_are_cached(counting: type[_CountingSearch]) -> None:
    router = Router(ring(8, **LINK))
    first = router.route("gpu0", "gpu4")
    assert router.route("gpu0", "gpu4") is first
    for dst in range(8):  # one search from gpu0 serves every destination
        router.route("gpu0", f"gpu{dst}")
    assert counting.created == ["gpu0"]
    router.route("gpu3", "gpu0")
    assert counting.created == ["gpu0", "gpu3"]


def test_routes_through_a_big_switch_do_not_search_every_port(
    counting: type[_CountingSearch],
) -> None:
    # Every GPU is two levels from gpu0, through "sw", the only node of gpu0's first
    # level: its gateway. gpu0's search completes that one level ({sw}); each route past
    # it is the search from sw's, which settles each GPU backwards from its single
    # predecessor sw and never builds a level. Asked for every destination (an
    # all-to-all), still one level in all, not one search of every port per route.
    n = 512
    router = Router(switch_star(n, **LINK))
    for dst in range(1, n):
        assert router.route("gpu0", f"gpu{dst}") == (("gpu0", "sw"), ("sw", f"gpu{dst}"))
    assert counting.levels_completed == [1]
    assert counting.created == ["gpu0", "sw"]


def test_leaf_spine_route_expands_only_the_source_side(
    counting: type[_CountingSearch],
) -> None:
    # fat_tree with 4 leaves of 4 GPUs, 2 spines: gpu0 -> gpu15 is gpu0, leaf0, spine,
    # leaf3, gpu15 (4 hops). Levels 0..1 complete ({gpu0}, {leaf0}) leave spines,
    # leaf3 and gpu15 within the three levels settled backwards: one level completed.
    graph = _leaves_and_spines(n_leaves=4, gpus_per_leaf=4, n_spines=2)
    edges = Router(graph).route("gpu0", "gpu15")
    assert [v for _, v in edges][-2:] == ["leaf3", "gpu15"]
    assert len(edges) == 4
    assert len(counting.levels_completed) == 1


def test_no_path_names_both_nodes() -> None:
    graph: nx.DiGraph[str] = nx.DiGraph(source="oneway.toml")
    graph.add_edge("gpu0", "gpu1", kind=LinkKind.PCIE, bandwidth_bytes_per_s=1e9, latency_s=0.0)
    assert route(graph, "gpu0", "gpu1") == (("gpu0", "gpu1"),)
    with pytest.raises(TopologyError) as info:
        route(graph, "gpu1", "gpu0")
    assert str(info.value) == (
        "oneway.toml: no route from 'gpu1' to 'gpu0': no directed path joins them"
    )


def test_unknown_node_is_an_error() -> None:
    router = Router(switch_star(2, **LINK))
    with pytest.raises(TopologyError) as info:
        router.route("gpu0", "gpu9")
    assert str(info.value) == "no node 'gpu9' in the topology"


def test_route_helpers_sum_latency_and_take_the_narrowest_link() -> None:
    graph = ring(4, **LINK)
    graph.edges["gpu1", "gpu2"]["bandwidth_bytes_per_s"] = BANDWIDTH_BYTES_PER_S / 4
    graph.edges["gpu1", "gpu2"]["latency_s"] = 3 * LATENCY_S
    edges = _edges(["gpu0", "gpu1", "gpu2"])
    assert route_latency_s(graph, edges) == pytest.approx(LATENCY_S + 3 * LATENCY_S, rel=1e-12)
    assert route_bandwidth_bytes_per_s(graph, edges) == BANDWIDTH_BYTES_PER_S / 4
    # The router avoids the slow link: 0-3-2 ties 0-1-2 on hops and wins on latency.
    assert route(graph, "gpu0", "gpu2") == _edges(["gpu0", "gpu3", "gpu2"])


def _leaf_spine(n_spines: int, gpus_per_leaf: int) -> nx.DiGraph[str]:
    """Two leaves, each joined to every spine; GPUs 0..g-1 on leaf0, g..2g-1 on leaf1."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    for rank in range(2 * gpus_per_leaf):
        graph.add_node(f"gpu{rank}", kind=NodeKind.GPU, rank=rank)
        _add_link(graph, f"gpu{rank}", f"leaf{rank // gpus_per_leaf}", 1e-6)
    for spine in range(n_spines):
        graph.add_node(f"spine{spine}", kind=NodeKind.SWITCH)
        for leaf in range(2):
            graph.add_node(f"leaf{leaf}", kind=NodeKind.SWITCH)
            _add_link(graph, f"leaf{leaf}", f"spine{spine}", 1e-6)
    return graph


def _cross_leaf_routes(graph: nx.DiGraph[str], gpus_per_leaf: int) -> dict[tuple[int, int], Any]:
    router = Router(graph)
    return {
        (a, b): router.route(f"gpu{a}", f"gpu{b}")
        for a in range(gpus_per_leaf)
        for b in range(gpus_per_leaf, 2 * gpus_per_leaf)
    }


def test_ecmp_spreads_flows_over_every_equal_cost_spine() -> None:
    # 8 x 8 = 64 cross-leaf pairs over 4 spines: each route is gpu-leaf-spine-leaf-gpu,
    # and a hash spreads them; all four spines end up used (the chance that a fixed
    # hash leaves one idle is (3/4)^64 ~ 1e-8, and the result is deterministic).
    routes = _cross_leaf_routes(_leaf_spine(4, 8), 8)
    spines = set()
    for (a, b), edges in routes.items():
        assert len(edges) == 4
        assert edges[0] == (f"gpu{a}", "leaf0")
        assert edges[-1] == ("leaf1", f"gpu{b}")
        spines.add(edges[1][1])
    assert spines == {f"spine{k}" for k in range(4)}


def test_ecmp_is_reproducible_and_the_seed_changes_the_collisions() -> None:
    first = _cross_leaf_routes(_leaf_spine(4, 8), 8)
    assert _cross_leaf_routes(_leaf_spine(4, 8), 8) == first
    seeded = []
    for seed in range(1, 4):
        graph = _leaf_spine(4, 8)
        graph.graph["ecmp_seed"] = seed
        seeded.append(_cross_leaf_routes(graph, 8))
    assert any(routes != first for routes in seeded)


def test_lowest_ids_rule_puts_every_flow_on_the_first_spine() -> None:
    routes = _cross_leaf_routes(_lowest_ids(_leaf_spine(4, 8)), 8)
    assert {edges[1][1] for edges in routes.values()} == {"spine0"}


def test_ecmp_only_picks_among_the_least_latency_paths() -> None:
    graph = _leaf_spine(4, 8)
    graph.edges["leaf0", "spine2"]["latency_s"] = 2e-6  # spine2 is now a longer way up
    for edges in _cross_leaf_routes(graph, 8).values():
        assert edges[1] != ("leaf0", "spine2")


@pytest.mark.parametrize(("rule", "value"), [("routing", "random"), ("ecmp_seed", "1")])
def test_bad_routing_attributes_are_named(rule: str, value: str) -> None:
    graph = switch_star(2, **LINK)
    graph.graph[rule] = value
    graph.graph["source"] = "x.toml"
    with pytest.raises(TopologyError) as info:
        Router(graph)
    expected = {
        "routing": "x.toml: routing: unknown rule 'random'; valid: ecmp, lowest_ids, dmodk",
        "ecmp_seed": "x.toml: ecmp_seed: must be an integer, got '1'",
    }
    assert str(info.value) == expected[rule]


def _two_gpus_and_a_host(*, transit: bool) -> nx.DiGraph[str]:
    """gpu0 - gpu1 - gpu2 in a line of NVLinks, and every GPU on one PCIe switch."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    for rank in range(3):
        graph.add_node(f"gpu{rank}", kind=NodeKind.GPU, rank=rank, transit=transit)
        _add_link(graph, f"gpu{rank}", "pcie", 1e-6)
    graph.add_node("pcie", kind=NodeKind.PCIE_SWITCH)
    _add_link(graph, "gpu0", "gpu1", 1e-6)
    _add_link(graph, "gpu1", "gpu2", 1e-6)
    return graph


def test_gpus_that_do_not_forward_are_never_crossed() -> None:
    # gpu0 -> gpu2: through gpu1's NVLinks (2 hops, equal to the PCIe switch's 2 hops);
    # with transit=False on GPUs only the switch is left.
    forwarding = _two_gpus_and_a_host(transit=True)
    forwarding.graph["routing"] = "lowest_ids"
    assert route(forwarding, "gpu0", "gpu2") == _edges(["gpu0", "gpu1", "gpu2"])
    blocked = _two_gpus_and_a_host(transit=False)
    blocked.graph["routing"] = "lowest_ids"
    assert route(blocked, "gpu0", "gpu2") == _edges(["gpu0", "pcie", "gpu2"])
    # A direct link still wins, and a blocked node may be the source or the target.
    assert route(blocked, "gpu0", "gpu1") == _edges(["gpu0", "gpu1"])


def test_blocked_gpus_make_a_pair_unreachable_rather_than_forward() -> None:
    graph: nx.DiGraph[str] = nx.DiGraph()
    for rank in range(3):
        graph.add_node(f"gpu{rank}", kind=NodeKind.GPU, rank=rank, transit=False)
    _add_link(graph, "gpu0", "gpu1", 1e-6)
    _add_link(graph, "gpu1", "gpu2", 1e-6)
    with pytest.raises(TopologyError, match="no route from 'gpu0' to 'gpu2'"):
        route(graph, "gpu0", "gpu2")


def _pcie_box(*, p2p: bool) -> nx.DiGraph[str]:
    """Two sockets; on each a PCIe switch with two GPUs. host 'node0' everywhere."""
    graph: nx.DiGraph[str] = nx.DiGraph(p2p=p2p)
    for socket in range(2):
        graph.add_node(f"cpu{socket}", kind=NodeKind.CPU, host="node0")
        graph.add_node(f"pcie{socket}", kind=NodeKind.PCIE_SWITCH, host="node0")
        _add_link(graph, f"pcie{socket}", f"cpu{socket}", 1e-6)
        for local in range(2):
            rank = 2 * socket + local
            graph.add_node(f"gpu{rank}", kind=NodeKind.GPU, rank=rank, host="node0", transit=False)
            _add_link(graph, f"gpu{rank}", f"pcie{socket}", 1e-6)
    _add_link(graph, "cpu0", "cpu1", 1e-6)
    return graph


def test_p2p_on_turns_at_the_pcie_switch() -> None:
    assert route(_pcie_box(p2p=True), "gpu0", "gpu1") == _edges(["gpu0", "pcie0", "gpu1"])


def test_p2p_off_bounces_through_the_nearest_cpu() -> None:
    graph = _pcie_box(p2p=False)
    # Same switch: up to the root complex and back down, crossing it twice.
    assert route(graph, "gpu0", "gpu1") == _edges(["gpu0", "pcie0", "cpu0", "pcie0", "gpu1"])
    # Other socket: the source's CPU, then the inter-socket link, as without P2P.
    assert route(graph, "gpu1", "gpu3") == _edges(
        ["gpu1", "pcie0", "cpu0", "cpu1", "pcie1", "gpu3"]
    )
    assert route(graph, "gpu2", "gpu0") == _edges(
        ["gpu2", "pcie1", "cpu1", "cpu0", "pcie0", "gpu0"]
    )


def test_p2p_off_does_not_touch_gpus_of_other_hosts_or_other_nodes() -> None:
    graph = _pcie_box(p2p=False)
    graph.nodes["gpu3"]["host"] = "node1"  # as if in another server
    assert route(graph, "gpu0", "gpu3") == _edges(
        ["gpu0", "pcie0", "cpu0", "cpu1", "pcie1", "gpu3"]
    )
    assert route(graph, "gpu0", "cpu1") == _edges(["gpu0", "pcie0", "cpu0", "cpu1"])


def test_ecmp_routes_do_not_depend_on_insertion_order() -> None:
    forward = _leaf_spine(4, 4)
    backward: nx.DiGraph[str] = nx.DiGraph()
    backward.add_nodes_from(reversed(list(forward.nodes(data=True))))
    backward.add_edges_from(reversed(list(forward.edges(data=True))))
    assert _cross_leaf_routes(backward, 4) == _cross_leaf_routes(forward, 4)


def _leaves_and_spines(*, n_leaves: int, gpus_per_leaf: int, n_spines: int) -> nx.DiGraph[str]:
    """GPUs under leaves, every leaf linked to every spine; duplex links, equal latency."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    for leaf in range(n_leaves):
        graph.add_node(f"leaf{leaf}", kind=NodeKind.SWITCH)
        for i in range(gpus_per_leaf):
            rank = leaf * gpus_per_leaf + i
            graph.add_node(f"gpu{rank}", kind=NodeKind.GPU, rank=rank, transit=False)
            _duplex(graph, f"gpu{rank}", f"leaf{leaf}")
        for spine in range(n_spines):
            graph.add_node(f"spine{spine}", kind=NodeKind.SWITCH)
            _duplex(graph, f"leaf{leaf}", f"spine{spine}")
    return graph


def _duplex(graph: nx.DiGraph[str], a: str, b: str) -> None:
    for u, v in ((a, b), (b, a)):
        graph.add_edge(u, v, kind=LinkKind.IB, bandwidth_bytes_per_s=1e9, latency_s=1e-6)


@pytest.mark.parametrize("n_spines", [2, 3, 12])
def test_dmodk_sends_each_port_of_a_leaf_down_from_spine_port_mod_k(n_spines: int) -> None:
    # d-mod-k on a leaf-spine fabric: the GPU on port d of its leaf (ports in natural
    # order: gpu12 before gpu13 ... the spines come after, "s" > "g") is reached through
    # spine d mod k, from every source on another leaf.
    gpus_per_leaf = 12
    graph = _leaves_and_spines(n_leaves=3, gpus_per_leaf=gpus_per_leaf, n_spines=n_spines)
    graph.graph["routing"] = "dmodk"
    router = Router(graph)
    for dst in range(gpus_per_leaf, 2 * gpus_per_leaf):
        port = dst - gpus_per_leaf
        for src in (0, 5, 2 * gpus_per_leaf + 3):
            edges = router.route(f"gpu{src}", f"gpu{dst}")
            assert edges[2] == (f"spine{port % n_spines}", "leaf1")


@pytest.mark.parametrize(
    "rule", ["ecmp", *(pytest.param(r, marks=pytest.mark.slow) for r in ("dmodk", "lowest_ids"))]
)  # 5 s each on 2 cores
def test_a_gpus_routes_past_its_leaf_are_those_of_a_search_of_its_own(
    rule: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A GPU's routes past its leaf switch are read from one search from that leaf,
    # shared by every GPU behind it, with the GPU's own pick (ECMP's hash of the pair,
    # d-mod-k's port). On a three-tier Clos (2 pods of DGX H100 servers: GPU, NVSwitch
    # and NIC, leaf, aggregation, core) they must be the routes of each GPU's own search
    # (no gateway looked for), hop for hop, for 800 random pairs.
    def routes(gateway_levels: int) -> list[tuple[tuple[str, str], ...]]:
        monkeypatch.setattr(routing, "_GATEWAY_LEVELS", gateway_levels)
        graph = load("topologies/h100-3tier-clos.toml")
        graph.graph["routing"] = rule
        gpus = sorted(n for n, a in graph.nodes.items() if a["kind"] is NodeKind.GPU)
        pick = random.Random(7)
        pairs = [(pick.choice(gpus), pick.choice(gpus)) for _ in range(800)]
        router = Router(graph)
        return [router.route(a, b) for a, b in pairs]

    shared = routes(routing._GATEWAY_LEVELS)
    assert routes(0) == shared
    assert max(len(r) for r in shared) == 8  # gpu, nic, leaf, agg, core, and back down
