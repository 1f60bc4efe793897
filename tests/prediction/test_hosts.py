"""A call inside one server is decided once per server shape and moved to the others
(simcoll.prediction.hosts): the moved call is the call decided where it runs.

On h100-ib-fat-tree (8 GPUs per server on one NVSwitch), the all-gather of node 3's GPUs
is the all-gather of node 0's on node 3's links: the same time, the same bytes on each
link, and the links are node 3's 16 NVLink ports. A call across servers, and a server
whose GPUs do not reach each other over one forced route, are decided where they run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.prediction.hosts import group_shape, host_shape
from simcoll.prediction.session import Session
from simcoll.topology import LinkKind, Router, load

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
SIZE_BYTES = 64 * 2**20


@pytest.fixture(scope="module")
def graph():  # type: ignore[no-untyped-def]
    return load(TOPOLOGIES / "h100-ib-fat-tree.toml", overrides={"n_nodes": "4"})


def _solo(session: Session, index: int):  # type: ignore[no-untyped-def]
    return session._ops[index].solo  # type: ignore[union-attr]


def test_a_call_moved_from_another_server_is_the_call_decided_where_it_runs(graph) -> None:  # type: ignore[no-untyped-def]
    shared = Session(graph)
    shared.collective("allgather", SIZE_BYTES, range(0, 8), stream="a")  # decided here
    shared.collective("allgather", SIZE_BYTES, range(24, 32), stream="b")  # moved here
    alone = Session(graph)
    alone.collective("allgather", SIZE_BYTES, range(24, 32), stream="b")  # decided here
    moved, decided = _solo(shared, 1), _solo(alone, 0)
    assert moved is not _solo(shared, 0)
    edges = tuple(graph.edges)
    ports = {(u, v) for k in range(24, 32) for u, v, kind in graph.edges(f"gpu{k}", data="kind")
             if kind is LinkKind.NVLINK}  # fmt: skip
    ports |= {(v, u) for u, v in ports}
    assert {edges[i] for i in moved.links.tolist()} == ports
    assert sorted(zip(moved.links.tolist(), moved.link_bytes.tolist(), strict=True)) == sorted(
        zip(decided.links.tolist(), decided.link_bytes.tolist(), strict=True)
    )
    assert moved.time_s == decided.time_s
    assert shared.run().spans_of(24, "b")[0].end_s == alone.run().spans_of(24, "b")[0].end_s


def test_calls_across_servers_and_unforced_servers_have_no_shape(graph) -> None:  # type: ignore[no-untyped-def]
    router = Router(graph)
    assert group_shape(graph, router, ["gpu0", "gpu8"]) is None  # two servers
    a, b = host_shape(graph, router, "node0"), host_shape(graph, router, "node3")
    assert a is not None
    assert b is not None
    assert a.key == b.key
    # DGX-1 (V100): GPU 0 and GPU 5 share no NVLink; GPUs forward nothing (GPU 1 and GPU
    # 4 join both), so their route climbs PCIe: not one forced hop, so no shape
    dgx1 = load(TOPOLOGIES / "dgx1-v100.toml")
    assert "gpu5" not in dgx1.succ["gpu0"]
    assert host_shape(dgx1, Router(dgx1), "node0") is None
