"""Concurrent groups on one cluster: tensor-parallel all-reduces inside 8 DGX H100 nodes
beside a data-parallel all-reduce across them, on h100-ib-fat-tree.

Which links each call crosses is derived here from the machine, by hand:

- a tensor-parallel group is one node's 8 GPUs: NCCL's rings stay on the node's NVSwitch,
  so the call crosses the 16 NVLink links between those GPUs and the switch, nothing else;
- the data-parallel group is GPU 0 of every node (local rank 0, as Megatron lays out DP
  with TP = 8): one GPU per node, so NCCL uses that GPU's own NIC (nic0, on its PCIe
  switch), and the call crosses PCIe between GPU 0 and nic0 and the InfiniBand fabric,
  no NVLink.

So they share no link, and each takes exactly its time alone (``predict``'s) while they
run at once. A second all-reduce inside node 0 over GPUs 0-3, on another stream, crosses
the 8 NVLink links of those GPUs, which the node's tensor-parallel call also crosses:
those two run together transfer by transfer and both take longer than alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simcoll.prediction import predict
from simcoll.prediction.session import Session
from simcoll.topology import LinkKind, load

TOPOLOGY = Path(__file__).resolve().parents[2] / "topologies" / "h100-ib-fat-tree.toml"
NODES = 8
TP_BYTES, DP_BYTES = 64 * 2**20, 256 * 2**20


@pytest.fixture(scope="module")
def graph():  # type: ignore[no-untyped-def]
    return load(TOPOLOGY, overrides={"n_nodes": str(NODES)})


def _links(session: Session, index: int) -> set[tuple[str, str]]:
    """The links call ``index`` of the session loaded when run alone (its own record)."""
    solo = session._ops[index].solo  # type: ignore[union-attr]
    edges = tuple(session.topology.edges)
    return {edges[i] for i in solo.links.tolist()}


def _nvlink_ports(graph, gpus: range) -> set[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """Every GPU's NVLink links to its node's NVSwitch, both ways."""
    ports = set()
    for k in gpus:
        for u, v, kind in graph.edges(f"gpu{k}", data="kind"):
            if kind is LinkKind.NVLINK:
                ports |= {(u, v), (v, u)}
    return ports


def test_tensor_parallel_groups_beside_a_data_parallel_call_share_no_link(  # type: ignore[no-untyped-def]
    graph, tmp_path: Path
) -> None:
    s = Session(graph)
    for k in range(NODES):
        s.collective("allreduce", TP_BYTES, range(8 * k, 8 * k + 8), stream="tp", name=f"tp {k}")
    s.collective("allreduce", DP_BYTES, range(0, 8 * NODES, 8), stream="dp", name="dp")
    timeline = s.run()
    for k in range(NODES):
        assert _links(s, k) == _nvlink_ports(graph, range(8 * k, 8 * k + 8))
    dp = _links(s, NODES)
    kinds = {graph.edges[link]["kind"] for link in dp}
    assert kinds == {LinkKind.PCIE, LinkKind.IB}
    assert {(f"gpu{8 * k}", f"node{k}.nic0") for k in range(NODES)} <= dp
    assert not any("nic" in u and u.split(".")[1] != "nic0" for u, _ in dp)
    # nothing shared: every call ends at its time alone, all starting at 0
    tp_alone = predict(graph, "allreduce", [TP_BYTES], n_ranks=8).rows[0].time_s
    placement = tmp_path / "dp.txt"  # the data-parallel group's GPUs, one per line
    placement.write_text("".join(f"gpu{8 * k}\n" for k in range(NODES)))
    dp_alone = predict(graph, "allreduce", [DP_BYTES], n_ranks=NODES,
                       placement=str(placement)).rows[0].time_s  # fmt: skip
    for k in range(NODES):
        (span,) = timeline.spans_of(8 * k, "tp")
        assert (span.start_s, span.end_s) == (0.0, pytest.approx(tp_alone, rel=1e-12))
    (span,) = timeline.spans_of(0, "dp")
    assert span.end_s == pytest.approx(dp_alone, rel=1e-12)
    assert timeline.time_s == pytest.approx(max(tp_alone, dp_alone), rel=1e-12)


def test_two_calls_on_the_same_nvlink_ports_run_together_and_both_slow_down(graph) -> None:  # type: ignore[no-untyped-def]
    s = Session(graph)
    s.collective("allreduce", TP_BYTES, range(8), stream="tp", name="tp")
    s.collective("allreduce", TP_BYTES, range(4), stream="other", name="half")
    timeline = s.run()
    shared = _links(s, 0) & _links(s, 1)
    assert shared == _nvlink_ports(graph, range(4))  # GPUs 0-3's ports, both ways: 8 links
    assert len(shared) == 8
    alone = [predict(graph, "allreduce", [TP_BYTES], n_ranks=n).rows[0].time_s for n in (8, 4)]
    together = [timeline.spans_of(0, stream)[0].end_s for stream in ("tp", "other")]
    assert together[0] > alone[0] * 1.05
    assert together[1] > alone[1] * 1.05
    # and what ran is the execution graph's, as with every call in detail
    again = Session(graph)
    again.collective("allreduce", TP_BYTES, range(8), stream="tp", name="tp")
    again.collective("allreduce", TP_BYTES, range(4), stream="other", name="half")
    detailed = again.run(every_call_in_detail=True)
    assert [detailed.spans_of(0, x)[0].end_s for x in ("tp", "other")] == together


def test_a_call_keeps_per_link_data_for_its_own_links_only(graph) -> None:  # type: ignore[no-untyped-def]
    """A training step decides thousands of calls on a fabric of up to 131,072 links
    (16,384 GPUs): each keeps bytes and busy time for the links it crosses, the 16
    NVLink ports of one node's call here, and the timeline's per-link bytes are its own."""
    s = Session(graph)
    s.collective("allreduce", TP_BYTES, range(8), stream="tp", name="tp")
    solo = s._ops[0].solo  # type: ignore[union-attr]
    assert len(solo.links) == len(solo.link_bytes) == len(solo.link_busy_s) == 16
    assert solo.result is None or len(solo.result.link_bytes) == 0
    timeline = s.run()
    assert np.flatnonzero(timeline.link_bytes > 0).tolist() == sorted(solo.links.tolist())
    assert timeline.link_bytes[solo.links].tolist() == solo.link_bytes.tolist()
