"""Tests of simcoll.topology.schema: the node/link schema and validate()."""

from __future__ import annotations

import math
from collections.abc import Callable

import networkx as nx
import numpy as np
import pytest

from simcoll.core.errors import TopologyError
from simcoll.topology.builders import switch_star
from simcoll.topology.schema import LinkKind, NodeKind, gpu_nodes, validate

NODE_KINDS = "gpu, nvswitch, pcie_switch, cpu, nic, switch"
LINK_KINDS = "nvlink, pcie, cpu_link, ib, ethernet"


def _link(graph: nx.DiGraph[str], a: str, b: str, *, both: bool = True) -> None:
    attrs = {"kind": LinkKind.PCIE, "bandwidth_bytes_per_s": 2.5e10, "latency_s": 1e-6}
    graph.add_edge(a, b, **attrs)
    if both:
        graph.add_edge(b, a, **attrs)


def _gpus(n_gpus: int) -> nx.DiGraph[str]:
    """n GPUs on a PCIe switch, written out by hand rather than with a builder."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_node("pcie", kind=NodeKind.PCIE_SWITCH)
    for rank in range(n_gpus):
        graph.add_node(f"gpu{rank}", kind=NodeKind.GPU, rank=rank)
        _link(graph, f"gpu{rank}", "pcie")
    return graph


def _error(graph: nx.DiGraph[str], source: str | None = None) -> str:
    with pytest.raises(TopologyError) as info:
        validate(graph, source=source)
    text = str(info.value)
    assert "\n" not in text
    return text


def test_valid_graph_is_returned_unchanged() -> None:
    graph = _gpus(3)
    before = (list(graph.nodes(data=True)), list(graph.edges(data=True)))
    assert validate(graph) is graph
    assert (list(graph.nodes(data=True)), list(graph.edges(data=True))) == before


def test_single_gpu_without_links_is_valid() -> None:
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_node("gpu0", kind=NodeKind.GPU, rank=0)
    assert validate(graph) is graph


def test_zero_latency_and_numpy_numbers_are_accepted() -> None:
    graph = _gpus(2)
    graph.edges["gpu0", "pcie"]["latency_s"] = 0
    graph.edges["gpu1", "pcie"]["bandwidth_bytes_per_s"] = np.float64(1e9)
    graph.edges["pcie", "gpu1"]["bandwidth_bytes_per_s"] = np.int64(7)
    assert validate(graph) is graph


def test_error_names_the_source_file() -> None:
    graph = _gpus(2)
    del graph.nodes["gpu1"]["rank"]
    assert _error(graph, source="box.toml") == "box.toml: gpu1: GPU has no 'rank'; expected an int"


def _set_node(node: str, key: str, value: object) -> Callable[[nx.DiGraph[str]], None]:
    def mutate(graph: nx.DiGraph[str]) -> None:
        graph.nodes[node][key] = value

    return mutate


def _drop_node_attr(node: str, key: str) -> Callable[[nx.DiGraph[str]], None]:
    def mutate(graph: nx.DiGraph[str]) -> None:
        del graph.nodes[node][key]

    return mutate


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        pytest.param(
            _drop_node_attr("pcie", "kind"),
            f"pcie: has no 'kind'; expected a NodeKind ({NODE_KINDS})",
            id="node-without-kind",
        ),
        pytest.param(
            _set_node("gpu0", "kind", "gpu"),
            f"gpu0: has kind str 'gpu'; expected a NodeKind ({NODE_KINDS})",
            id="node-kind-as-string",
        ),
        pytest.param(
            _set_node("pcie", "kind", LinkKind.PCIE),
            f"pcie: has kind LinkKind <LinkKind.PCIE: 'pcie'>; expected a NodeKind ({NODE_KINDS})",
            id="node-kind-of-wrong-enum",
        ),
        pytest.param(
            _drop_node_attr("gpu1", "rank"),
            "gpu1: GPU has no 'rank'; expected an int",
            id="gpu-without-rank",
        ),
        pytest.param(
            _set_node("gpu1", "rank", 1.0),
            "gpu1: GPU has rank float 1.0; expected an int",
            id="float-rank",
        ),
        pytest.param(
            _set_node("gpu1", "rank", True),
            "gpu1: GPU has rank bool True; expected an int",
            id="bool-rank",
        ),
        pytest.param(
            _set_node("gpu2", "rank", 0),
            "gpu2: rank 0 is already held by 'gpu0'; ranks must be unique",
            id="duplicate-rank",
        ),
        pytest.param(
            _set_node("gpu1", "rank", 5),
            "gpu1: rank 5 is out of range for 3 GPUs: ranks must be 0..2 (missing: 1)",
            id="gap-in-ranks",
        ),
        pytest.param(
            _set_node("gpu0", "rank", -1),
            "gpu0: rank -1 is out of range for 3 GPUs: ranks must be 0..2 (missing: 0)",
            id="negative-rank",
        ),
    ],
)
def test_bad_node_gives_one_exact_line(
    mutate: Callable[[nx.DiGraph[str]], None], expected: str
) -> None:
    graph = _gpus(3)
    mutate(graph)
    assert _error(graph) == expected


def test_no_gpu_is_an_error() -> None:
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_node("sw", kind=NodeKind.SWITCH)
    assert _error(graph, source="empty.toml") == "empty.toml: topology has no GPU node"


def test_node_id_must_be_a_string() -> None:
    graph = _gpus(1)
    graph.add_node(7, kind=NodeKind.CPU)  # type: ignore[arg-type]
    assert _error(graph) == "7: node id must be a str, got int 7"


def test_self_loop_is_an_error() -> None:
    graph = _gpus(2)
    _link(graph, "gpu1", "gpu1", both=False)
    assert _error(graph) == "gpu1->gpu1: self-loop: a link must join two different nodes"


_MISSING = object()
BW = "bandwidth_bytes_per_s"


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("kind", _MISSING, f"has no 'kind'; expected a LinkKind ({LINK_KINDS})"),
        ("kind", "pcie", f"has kind str 'pcie'; expected a LinkKind ({LINK_KINDS})"),
        (BW, _MISSING, f"missing '{BW}'"),
        (BW, "25 GB/s", f"{BW} must be a number, got str '25 GB/s'"),
        (BW, True, f"{BW} must be a number, got bool True"),
        (BW, math.nan, f"{BW} must be finite, got nan"),
        (BW, math.inf, f"{BW} must be finite, got inf"),
        (BW, 0.0, f"{BW} must be positive, got 0.0"),
        (BW, -1e9, f"{BW} must be positive, got -1000000000.0"),
        ("latency_s", _MISSING, "missing 'latency_s'"),
        ("latency_s", None, "missing 'latency_s'"),
        ("latency_s", math.nan, "latency_s must be finite, got nan"),
        ("latency_s", -math.inf, "latency_s must be finite, got -inf"),
        ("latency_s", -1e-6, "latency_s must be >= 0, got -1e-06"),
        # issue 41: 1e-300 B/s and 1e300 s made times past a float (RuntimeWarning, "cannot
        # finish"); 1 bit/s and 1e9 s are the bounds, and they pass (below)
        (BW, 0.1, f"{BW} must be at least 0.125 (1 bit/s), got 0.1"),
        (BW, 1e-300, f"{BW} must be at least 0.125 (1 bit/s), got 1e-300"),
        ("latency_s", 1.5e9, "latency_s must be at most 1e+09, got 1500000000.0"),
        ("latency_s", 1e300, "latency_s must be at most 1e+09, got 1e+300"),
    ],
)
def test_bad_link_gives_one_exact_line(key: str, value: object, expected: str) -> None:
    graph = _gpus(2)
    attrs = graph.edges["pcie", "gpu1"]
    if value is _MISSING:
        del attrs[key]
    else:
        attrs[key] = value
    assert _error(graph, source="box.toml") == f"box.toml: pcie->gpu1: {expected}"


def test_the_slowest_and_longest_links_simulated_are_accepted() -> None:
    graph = _gpus(2)
    for u, v in graph.edges:
        graph.edges[u, v].update(bandwidth_bytes_per_s=0.125, latency_s=1e9)
    assert validate(graph) is graph


def test_gpu_that_cannot_be_reached_is_named_with_its_rank() -> None:
    graph = _gpus(2)
    graph.add_node("gpu2", kind=NodeKind.GPU, rank=2)
    _link(graph, "gpu2", "pcie", both=False)  # gpu2 can send but never receive
    assert _error(graph) == "gpu0: GPU 'gpu0' (rank 0) cannot reach GPU 'gpu2' (rank 2)"


def test_gpu_that_cannot_send_is_named_with_its_rank() -> None:
    graph = _gpus(3)
    graph.remove_edge("gpu1", "pcie")  # gpu1 can receive but never send
    assert _error(graph) == "gpu1: GPU 'gpu1' (rank 1) cannot reach GPU 'gpu0' (rank 0)"


def test_first_unreachable_pair_is_reported_in_rank_order() -> None:
    # Two islands {gpu0, gpu2} and {gpu1, gpu3}: in (source rank, destination rank)
    # order the first pair without a path is (0, 1).
    graph: nx.DiGraph[str] = nx.DiGraph()
    for rank in range(4):
        graph.add_node(f"gpu{rank}", kind=NodeKind.GPU, rank=rank)
    _link(graph, "gpu0", "gpu2")
    _link(graph, "gpu1", "gpu3")
    assert _error(graph) == "gpu0: GPU 'gpu0' (rank 0) cannot reach GPU 'gpu1' (rank 1)"


def test_gpus_may_reach_each_other_through_other_gpus() -> None:
    # A one-way ring gpu0 -> gpu1 -> gpu2 -> gpu0 connects every ordered pair.
    graph: nx.DiGraph[str] = nx.DiGraph()
    for rank in range(3):
        graph.add_node(f"gpu{rank}", kind=NodeKind.GPU, rank=rank)
    for rank in range(3):
        _link(graph, f"gpu{rank}", f"gpu{(rank + 1) % 3}", both=False)
    assert validate(graph) is graph


def test_non_gpu_nodes_need_not_be_reachable() -> None:
    graph = _gpus(2)
    graph.add_node("cpu0", kind=NodeKind.CPU)  # isolated host bridge: no GPU pair needs it
    assert validate(graph) is graph


def test_gpu_nodes_are_indexed_by_rank_not_insertion_order() -> None:
    graph: nx.DiGraph[str] = nx.DiGraph()
    names = ["zeta", "alpha", "mid"]
    ranks = [2, 0, 1]
    for name, rank in zip(names, ranks, strict=True):
        graph.add_node(name, kind=NodeKind.GPU, rank=rank)
    graph.add_node("sw", kind=NodeKind.SWITCH)
    assert gpu_nodes(graph) == ["alpha", "mid", "zeta"]


def test_gpu_nodes_rejects_a_broken_node() -> None:
    graph = _gpus(2)
    graph.nodes["gpu1"]["rank"] = 3
    with pytest.raises(TopologyError, match=r"^gpu1: rank 3 is out of range"):
        gpu_nodes(graph)


def test_enum_values_are_the_documented_names() -> None:
    assert [kind.value for kind in NodeKind] == NODE_KINDS.split(", ")
    assert [kind.value for kind in LinkKind] == LINK_KINDS.split(", ")


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("host", 3, "host must be a string, got int 3"),
        ("transit", "no", "transit must be true or false, got str 'no'"),
        ("reduces", 1, "reduces must be true or false, got int 1"),
        ("tier", -1, "tier must be an integer >= 0, got int -1"),
        ("tier", True, "tier must be an integer >= 0, got bool True"),
    ],
)
def test_optional_node_attributes_are_checked(name: str, value: object, expected: str) -> None:
    graph = switch_star(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    graph.nodes["sw"][name] = value
    with pytest.raises(TopologyError) as info:
        validate(graph, source="t.toml")
    assert str(info.value) == f"t.toml: sw: {expected}"


def test_optional_attributes_with_good_values_pass() -> None:
    graph = switch_star(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    graph.nodes["sw"].update(host="node0", transit=True, reduces=True, tier=0)
    graph.nodes["gpu0"].update(host="node0", transit=False)
    graph.graph["p2p"] = False
    assert validate(graph) is graph


def test_p2p_must_be_a_bool() -> None:
    graph = switch_star(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    graph.graph["p2p"] = "off"
    with pytest.raises(TopologyError) as info:
        validate(graph, source="t.toml")
    assert str(info.value) == "t.toml: p2p: must be true or false, got str 'off'"
