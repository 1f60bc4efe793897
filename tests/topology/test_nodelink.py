"""Tests of simcoll.topology.nodelink: JSON round trips and one-line errors naming the element."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from simcoll.core.errors import ConfigError, TopologyError
from simcoll.topology import load
from simcoll.topology.builders import full_mesh, ring, switch_star
from simcoll.topology.nodelink import dumps, from_node_link, to_node_link
from simcoll.topology.schema import LinkKind, NodeKind

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY_FILES = sorted(
    p for p in (REPO / "topologies").rglob("*.toml") if "calibration" not in p.parts
)
LINK: dict[str, Any] = {"link_bandwidth_bytes_per_s": 3e11, "link_latency_s": 5e-7}


def assert_same_graph(a: nx.DiGraph[str], b: nx.DiGraph[str]) -> None:
    """Identical nodes, edges and graph attributes, attribute by attribute and in order."""
    assert nx.utils.graphs_equal(a, b)
    assert list(a.nodes(data=True)) == list(b.nodes(data=True))
    assert list(a.edges(data=True)) == list(b.edges(data=True))
    assert a.graph == b.graph
    for _, attrs in b.nodes(data=True):
        assert type(attrs["kind"]) is NodeKind
    for _, _, attrs in b.edges(data=True):
        assert type(attrs["kind"]) is LinkKind
        assert type(attrs["bandwidth_bytes_per_s"]) is float


def round_trip(graph: nx.DiGraph[str]) -> nx.DiGraph[str]:
    return from_node_link(json.loads(dumps(graph)))


@pytest.mark.parametrize("builder", [switch_star, ring, full_mesh])
@pytest.mark.parametrize("n", [1, 2, 5])
def test_round_trip_of_the_basic_builders(builder: Callable[..., nx.DiGraph[str]], n: int) -> None:
    graph = builder(n, **LINK)
    assert_same_graph(graph, round_trip(graph))


def test_round_trip_keeps_optional_attributes() -> None:
    graph = switch_star(3, **LINK)
    graph.graph.update(description="box", source="box.toml", p2p=False, routing="ecmp")
    nx.set_node_attributes(graph, "node0", "host")
    nx.set_node_attributes(graph, {f"gpu{r}": False for r in range(3)}, "transit")
    graph.nodes["sw"].update(reduces=True, tier=1)
    assert_same_graph(graph, round_trip(graph))


@pytest.mark.parametrize("path", TOPOLOGY_FILES, ids=lambda p: p.name)
def test_round_trip_of_every_shipped_topology(path: Path) -> None:
    # These exercise the machine and cluster builders (simcoll.topology.machines,
    # clusters) through the designs the repository ships, whatever their parameters.
    graph = load(path)
    assert_same_graph(graph, round_trip(graph))


def test_to_node_link_leaves_the_graph_alone() -> None:
    graph = switch_star(2, **LINK)
    before = copy.deepcopy(graph)
    data = to_node_link(graph)
    data["graph"]["name"] = "changed"
    assert_same_graph(before, graph)


def test_dumps_is_sorted_json_with_kind_values() -> None:
    text = dumps(ring(2, **LINK))
    data = json.loads(text)
    assert text == json.dumps(data, indent=1, sort_keys=True)
    assert {n["kind"] for n in data["nodes"]} == {"gpu"}
    assert [(e["source"], e["target"], e["kind"]) for e in data["links"]] == [
        ("gpu0", "gpu1", "nvlink"),
        ("gpu1", "gpu0", "nvlink"),
    ]


# --- errors ---------------------------------------------------------------------------------


def _data() -> dict[str, Any]:
    return to_node_link(switch_star(2, **LINK))


def _error(data: object, error: type[Exception] = ConfigError) -> str:
    with pytest.raises(error) as caught:
        from_node_link(data, source="x.json")
    message = str(caught.value)
    assert "\n" not in message
    return message


def _edited(edit: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    data = _data()
    edit(data)
    return data


def test_missing_bandwidth_names_the_link() -> None:
    data = _edited(lambda d: d["links"][3].pop("bandwidth_bytes_per_s"))
    assert _error(data) == "x.json: links[3]: missing 'bandwidth_bytes_per_s'"


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: d.pop("nodes"), "x.json: nodes: missing"),
        (lambda d: d.update(links={}), "x.json: links: must be a list, got dict {}"),
        (lambda d: d.update(directed=False), "x.json: directed: must be true for a topology"),
        (lambda d: d.update(multigraph=True), "x.json: multigraph: must be false for a topology"),
        (lambda d: d.update(graph=[]), "x.json: graph: the graph attributes must be a JSON object"),
        (
            lambda d: d["nodes"].append(3),
            "x.json: nodes[3]: a node must be a JSON object, got int 3",
        ),
        (lambda d: d["nodes"][1].pop("id"), "x.json: nodes[1].id: missing"),
        (lambda d: d["nodes"][1].update(id=7), "x.json: nodes[1].id: must be a string, got int 7"),
        (
            lambda d: d["nodes"][1].update(id="gpu0"),
            "x.json: nodes[1].id: node 'gpu0' is listed twice (also nodes[0])",
        ),
        (lambda d: d["nodes"][2].pop("kind"), "x.json: nodes[2]: missing 'kind'"),
        (
            lambda d: d["nodes"][0].update(kind="GPU"),
            "x.json: nodes[0].kind: expected one of gpu, ",
        ),
        (
            lambda d: d["links"][0].update(kind="nvlink4"),
            "x.json: links[0].kind: expected one of nvlink, ",
        ),
        (
            lambda d: d["links"][1].update(target="gpu9"),
            "x.json: links[1].target: no node 'gpu9' among the nodes",
        ),
        (lambda d: d["links"][2].pop("source"), "x.json: links[2].source: missing"),
        (
            lambda d: d["links"].append(dict(d["links"][0])),
            "x.json: links[4]: link gpu0->sw is listed twice (also links[0])",
        ),
        (
            lambda d: d["links"][0].update(latency_s="1 us"),
            "x.json: links[0].latency_s: must be a number, got str '1 us'",
        ),
        (
            lambda d: d["links"][0].update(latency_s=True),
            "x.json: links[0].latency_s: must be a number, got bool True",
        ),
        (
            lambda d: d["graph"].update(gpu_memory_bandwidth_bytes_per_s="1555 GB/s"),
            "x.json: graph.gpu_memory_bandwidth_bytes_per_s: must be a positive number "
            "(bytes/s), got str '1555 GB/s'",
        ),
        (
            lambda d: d["graph"].update(gpu_memory_bandwidth_bytes_per_s=-1),
            "x.json: graph.gpu_memory_bandwidth_bytes_per_s: must be a positive number "
            "(bytes/s), got int -1",
        ),
    ],
)
def test_malformed_data_is_one_line_naming_the_element(
    edit: Callable[[dict[str, Any]], object], expected: str
) -> None:
    assert _error(_edited(edit)).startswith(expected)


def test_not_an_object() -> None:
    assert _error([1, 2]) == "x.json: node-link data must be a JSON object, got list [1, 2]"


def test_long_values_are_cut_in_the_message() -> None:
    message = _error({"directed": True, "nodes": [list(range(1000))], "links": []})
    assert message.startswith("x.json: nodes[0]: a node must be a JSON object, got list [0, 1, ")
    assert message.endswith("...")
    assert len(message) < 200


def test_schema_errors_come_from_validate() -> None:
    data = _edited(lambda d: d["links"][0].update(bandwidth_bytes_per_s=-1.0))
    assert _error(data, TopologyError) == (
        "x.json: gpu0->sw: bandwidth_bytes_per_s must be positive, got -1.0"
    )
    data = _edited(lambda d: d["links"].pop(0))  # gpu0 can no longer send
    assert "cannot reach" in _error(data, TopologyError)


def test_integer_quantities_become_floats() -> None:
    data = _edited(lambda d: d["links"][0].update(bandwidth_bytes_per_s=300_000_000_000))
    graph = from_node_link(data)
    assert graph.edges["gpu0", "sw"]["bandwidth_bytes_per_s"] == 3e11
    assert type(graph.edges["gpu0", "sw"]["bandwidth_bytes_per_s"]) is float
