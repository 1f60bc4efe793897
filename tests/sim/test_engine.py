"""The engine against closed forms derived by hand, contention, accounting and errors.

Notation: n ranks, message S bytes, link bandwidth B per direction, alpha the latency of a
route (one link on a ring topology, two on a switch star: GPU -> switch -> GPU).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from simcoll.algorithms import build_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, SimulationError
from simcoll.core.protocols import PROTOCOLS
from simcoll.core.schedule import ScheduleBuilder
from simcoll.sim import engine
from simcoll.sim.engine import simulate
from simcoll.topology import NodeKind, load, ring, switch_star
from simcoll.topology.schema import LinkKind

B = 100e9  # bytes/s per direction
LINK_LATENCY_S = 2e-6
REL = 1e-9


def _topology(kind: str, n: int) -> tuple[nx.DiGraph, float]:
    """The topology and the latency alpha of one GPU-to-neighbour route on it."""
    if kind == "ring":
        return ring(n, link_bandwidth_bytes_per_s=B, link_latency_s=LINK_LATENCY_S), LINK_LATENCY_S
    star = switch_star(n, link_bandwidth_bytes_per_s=B, link_latency_s=LINK_LATENCY_S)
    return star, 2 * LINK_LATENCY_S


def pipelined_time_s(m: int, k: int, alpha: float, tau: float, window: int) -> float:
    """Time of m ring steps of k pieces each, piece time tau, route latency alpha.

    Each piece is issued when its predecessor in the step before has arrived (data
    dependency) and pays alpha before its bytes move; a connection moves its pieces'
    bytes one after another. The finish time is the longest path through the grid of
    pieces (step s, piece j), where moving to the next piece of the same connection costs
    tau (bytes go back to back) and moving to the same piece of the next step costs
    alpha + tau (wait for the arrival, pay latency, move).

    - Window 1: a piece is issued only after the previous one arrived, so every piece
      costs alpha + tau in sequence: T = m k (alpha + tau).
    - Unbounded window: the path through all m k pieces costs alpha + m k tau; each of
      the m - 1 step changes may instead jump "down" (alpha + tau), skipping k - 1 pieces
      of tau: worth it when alpha > (k - 1) tau. So
      T = alpha + m k tau + (m - 1) max(0, alpha - (k - 1) tau).
    """
    if window == 1:
        return m * k * (alpha + tau)
    return alpha + m * k * tau + (m - 1) * max(0.0, alpha - (k - 1) * tau)


CASES = list(itertools.product(["ring", "star"], [2, 3, 4, 8], [1, 2, 5], [1, 3], [1, 10**6]))


@pytest.mark.parametrize(("kind", "n", "chunks", "channels", "window"), CASES)
@pytest.mark.parametrize("per_piece_bytes", [1_000, 10**6])
@pytest.mark.parametrize("collective", ["allreduce", "allgather", "reducescatter"])
def test_ring_equals_its_closed_form(
    kind, n, chunks, channels, window, per_piece_bytes, collective
):
    # The ring uses each link direction once per channel; the channels of a link share
    # it equally (B / channels each) and run in lockstep, so one channel's piece of
    # S / (n channels chunks) bytes takes tau = (S / (n chunks)) / B.
    # All-reduce is 2(n - 1) steps, all-gather and reduce-scatter n - 1.
    topo, alpha = _topology(kind, n)
    size = n * channels * chunks * per_piece_bytes
    schedule = build_schedule(
        collective, "ring", n_ranks=n, size_bytes=size,
        n_channels=channels, n_chunks=chunks, max_in_flight=window,
    )  # fmt: skip
    m = 2 * (n - 1) if collective == "allreduce" else n - 1
    tau = size / (n * chunks) / B
    result = simulate(topo, schedule)
    assert result.time_s == pytest.approx(pipelined_time_s(m, chunks, alpha, tau, window), rel=REL)


@pytest.mark.parametrize(
    ("n", "chunks", "window"), list(itertools.product([2, 3, 5, 8], [1, 4, 16], [1, 10**6]))
)
@pytest.mark.parametrize("collective", ["broadcast", "reduce"])
def test_ring_broadcast_and_reduce_pipeline_as_the_textbook_says(n, chunks, window, collective):
    # A chain of n - 1 hops; piece j may move on hop h once it arrived from hop h - 1.
    # Longest path through the (hop, piece) grid from the first piece at the first hop to
    # the last piece at the last hop: n - 2 hop changes (alpha + tau each) and k - 1
    # piece changes (tau each with an unbounded window, alpha + tau with a window of 1,
    # as each piece then waits for the previous one to arrive):
    #   T = (n - 1)(alpha + tau) + (k - 1) tau           (unbounded window)
    #   T = (n - 1 + k - 1)(alpha + tau)                   (window 1)
    # The second is the textbook N (S + k - 2) / (S B) for S chunks of an N-byte message
    # on k ranks, plus latency.
    topo, alpha = _topology("star", n)
    size = chunks * 4096
    schedule = build_schedule(collective, "ring", n_ranks=n, size_bytes=size, n_chunks=chunks,
                              max_in_flight=window)  # fmt: skip
    tau = size / chunks / B
    if window == 1:
        expected = (n - 1 + chunks - 1) * (alpha + tau)
    else:
        expected = (n - 1) * (alpha + tau) + (chunks - 1) * tau
    assert simulate(topo, schedule).time_s == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_direct_broadcast_shares_the_roots_uplink(n):
    # The root's one uplink to the switch carries all n - 1 flows at B / (n - 1) each:
    #   T = alpha + (n - 1) S / B.
    # With no contention (model "ideal") each flow would run at B: T = alpha + S / B.
    topo, alpha = _topology("star", n)
    size = 8 * 2**20
    schedule = build_schedule("broadcast", "direct", n_ranks=n, size_bytes=size)
    assert simulate(topo, schedule).time_s == pytest.approx(alpha + (n - 1) * size / B, rel=REL)
    ideal = simulate(topo, schedule, model="ideal").time_s
    assert ideal == pytest.approx(alpha + size / B, rel=REL)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_direct_alltoall_and_allreduce_on_a_switch(n):
    # Each GPU sends S/n to each of the n - 1 others: its uplink carries n - 1 flows and
    # each downlink n - 1 flows, all at B / (n - 1). One step of all-to-all:
    #   T = alpha + (n - 1)(S / n) / B.
    # Direct all-reduce is a reduce-scatter and an all-gather of that shape: twice that.
    topo, alpha = _topology("star", n)
    size = n * 3 * 2**20
    step = alpha + (n - 1) * (size / n) / B
    a2a = build_schedule("alltoall", "direct", n_ranks=n, size_bytes=size)
    assert simulate(topo, a2a).time_s == pytest.approx(step, rel=REL)
    ar = build_schedule("allreduce", "direct", n_ranks=n, size_bytes=size)
    assert simulate(topo, ar).time_s == pytest.approx(2 * step, rel=REL)


@pytest.mark.parametrize("n", [3, 4, 8])
def test_reduce_broadcast_is_slower_than_ring_by_the_root_bottleneck(n):
    # Reduce: the root's downlink carries n - 1 flows of S (B / (n - 1) each), then the
    # broadcast loads its uplink the same way: T = 2 (alpha + (n - 1) S / B).
    # Ring all-reduce: T = 2 (n - 1)(alpha + S / (n B)). For large S the ratio tends to n.
    topo, alpha = _topology("star", n)
    size = n * 2**26
    slow = simulate(
        topo, build_schedule("allreduce", "reduce_broadcast", n_ranks=n, size_bytes=size)
    )
    fast = simulate(topo, build_schedule("allreduce", "ring", n_ranks=n, size_bytes=size))
    assert slow.time_s == pytest.approx(2 * (alpha + (n - 1) * size / B), rel=REL)
    assert fast.time_s == pytest.approx(2 * (n - 1) * (alpha + size / (n * B)), rel=REL)
    # Here alpha is under 1% of a ring step, so the ratio is within 1% of n (and below n).
    assert 0.99 * n < slow.time_s / fast.time_s < n


def test_a_transfer_released_mid_way_runs_after_its_dependency():
    # On a 3-GPU star, rank 0 sends S to rank 2 (a) and S to rank 1 (b) at once; rank 1
    # forwards S to rank 2 (c) once b has arrived.
    # a and b share rank 0's uplink at B/2: both end at t_ab = alpha + 2 S / B.
    # c is issued at t_ab, pays alpha, and moves alone at B: it ends at
    # t_ab + alpha + S / B.
    topo, alpha = _topology("star", 3)
    size = 8 * 2**20
    b = ScheduleBuilder(Collective.SENDRECV, "hand", n_ranks=3, size_bytes=size, pieces_per_block=1)
    b.add(src=0, dst=2, pieces=[0])
    to_rank1 = b.add(src=0, dst=1, pieces=[0])
    b.add(src=1, dst=2, pieces=[0], deps=[to_rank1])
    result = simulate(topo, b.build())
    t_ab = alpha + 2 * size / B
    assert result.end_s.tolist() == pytest.approx([t_ab, t_ab, t_ab + alpha + size / B], rel=REL)
    assert result.issue_s[2] == pytest.approx(t_ab, rel=REL)


def test_accounting_link_bytes_busy_time_and_rank_volumes(star8):
    # Ring all-reduce of S on 8 ranks, one chunk: every GPU uplink and downlink carries
    # 2 (n - 1) / n S bytes and is busy 2 (n - 1) transfers of S / (n B) each.
    n, size = 8, 8 * 2**20
    result = simulate(star8, build_schedule("allreduce", "ring", n_ranks=n, size_bytes=size))
    per_link = 2 * (n - 1) * size / n
    assert result.link_bytes.tolist() == pytest.approx([per_link] * (2 * n), rel=1e-12)
    assert result.link_busy_s.tolist() == pytest.approx(
        [2 * (n - 1) * size / (n * 100e9)] * (2 * n), rel=REL
    )
    assert result.bytes_sent_per_rank.tolist() == [per_link] * n
    assert result.bytes_received_per_rank.tolist() == [per_link] * n
    assert result.links == tuple(star8.edges)


def test_times_are_ordered_issue_start_end(star8):
    result = simulate(star8, build_schedule("allreduce", "ring", n_ranks=8, size_bytes=2**20,
                                            n_chunks=4, n_channels=2))  # fmt: skip
    latency = 2e-6  # star8: 1 us per link, two links
    assert np.all(result.start_s >= result.issue_s + latency * (1 - 1e-12))
    assert np.all(result.end_s > result.start_s)
    assert result.time_s == result.end_s.max()


def test_busbw_follows_nccl_tests(star8):
    # busbw = S / T x 2 (n - 1) / n for all-reduce.
    result = simulate(star8, build_schedule("allreduce", "ring", n_ranks=8, size_bytes=2**24))
    assert result.algbw_bytes_per_s == 2**24 / result.time_s
    assert result.busbw_bytes_per_s == pytest.approx(2**24 / result.time_s * 14 / 8, rel=1e-15)


def test_same_inputs_give_bit_identical_results(star8):
    schedule = build_schedule("alltoall", "direct", n_ranks=8, size_bytes=8 * 3 * 1000 + 8 * 8,
                              n_chunks=3, n_channels=2)  # fmt: skip
    first, second = simulate(star8, schedule), simulate(star8, schedule)
    for name in ("issue_s", "start_s", "end_s", "link_bytes", "link_busy_s"):
        assert np.array_equal(getattr(first, name), getattr(second, name))
    assert first.time_s == second.time_s


def test_one_rank_and_empty_schedules_take_no_time(star8):
    assert (
        simulate(star8, build_schedule("allreduce", "ring", n_ranks=1, size_bytes=64)).time_s == 0.0
    )
    assert (
        simulate(star8, build_schedule("sendrecv", "direct", n_ranks=1, size_bytes=64)).time_s
        == 0.0
    )


def test_a_dependency_cycle_is_reported_not_hung(star8):
    b = ScheduleBuilder(Collective.SENDRECV, "bad", n_ranks=2, size_bytes=4, pieces_per_block=1)
    b.add(src=0, dst=1, pieces=[0], deps=[1])
    b.add(src=1, dst=0, pieces=[1], deps=[0])
    with pytest.raises(SimulationError) as caught:
        simulate(star8, b.build())
    assert str(caught.value) == (
        "sendrecv/bad cannot finish: 2 of 2 transfers never arrive (a dependency cycle or a "
        "wait for a transfer that never comes); transfer 0 (rank 0->1, channel 0) waits for "
        "[1]; transfer 1 (rank 1->0, channel 0) waits for [0]"
    )


def test_a_connection_blocked_behind_its_own_later_transfer_is_reported(star8):
    # Transfers 0 and 1 share the connection 0 -> 1 and go in order; 0 waits for 1.
    b = ScheduleBuilder(Collective.ALLREDUCE, "bad", n_ranks=2, size_bytes=2, pieces_per_block=2)
    b.add(src=0, dst=1, pieces=[0], deps=[1])
    b.add(src=0, dst=1, pieces=[1])
    with pytest.raises(
        SimulationError, match=r"transfer 0 \(rank 0->1, channel 0\) waits for \[1\]"
    ):
        simulate(star8, b.build())


def test_a_pair_with_no_route_is_an_error_naming_both_ranks():
    g = nx.DiGraph()
    for r in range(2):
        g.add_node(f"gpu{r}", kind=NodeKind.GPU, rank=r)
    g.add_node("sw", kind=NodeKind.NVSWITCH)
    g.add_edge("gpu0", "sw", kind=LinkKind.NVLINK, bandwidth_bytes_per_s=B, latency_s=1e-6)
    schedule = build_schedule("sendrecv", "direct", n_ranks=2, size_bytes=8)
    with pytest.raises(SimulationError, match=r"rank 0 \(gpu0\) -> rank 1 \(gpu1\)"):
        simulate(g, schedule, rank_nodes=("gpu0", "gpu1"))


def test_more_ranks_than_gpus_and_unknown_models_are_refused(star8):
    with pytest.raises(ConfigError, match="has 8 GPUs, fewer than the 9 ranks asked for"):
        simulate(star8, build_schedule("allreduce", "ring", n_ranks=9, size_bytes=72))
    with pytest.raises(ConfigError, match="unknown model 'fluid'; valid: flow, ideal, packet"):
        simulate(
            star8, build_schedule("allreduce", "ring", n_ranks=8, size_bytes=64), model="fluid"
        )


# -- routes of many destinations found together -----------------------------------------


@pytest.mark.parametrize("protocol", [None, "LL", "simple"])
@pytest.mark.parametrize("rule", ["dmodk", "ecmp"])
def test_routing_a_source_all_at_once_changes_nothing(
    rule: str, protocol: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 64 ranks of an all-to-all on a leaf-spine fabric: each rank's 63 routes are found
    # together (one search over arrays). The same run with every pair routed one by one
    # must give the same route latencies, data fractions and arrival times, to the bit.
    graph = load(
        Path(__file__).resolve().parents[2] / "topologies/a100-roce-2to1.toml",
        overrides={"n_nodes": "8"},
    )
    graph.graph["routing"] = rule
    schedule = build_schedule("alltoall", "direct", n_ranks=64, size_bytes=64 * 2**20)
    chosen = PROTOCOLS[protocol] if protocol else None
    together = simulate(graph, schedule, protocol=chosen)
    monkeypatch.setattr(engine, "_BATCH_DESTINATIONS", 10**9)
    one_by_one = simulate(graph, schedule, protocol=chosen)
    assert np.array_equal(together.start_s, one_by_one.start_s)
    assert np.array_equal(together.end_s, one_by_one.end_s)
    assert np.array_equal(together.link_bytes, one_by_one.link_bytes)
    assert together.time_s == one_by_one.time_s > 0


def test_a_missing_route_in_a_batch_names_the_ranks() -> None:
    # 40 ranks: each source's 39 routes are found together; one GPU cannot be reached,
    # and the error names the ranks as the pair-by-pair routing does.
    star = switch_star(40, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    star.remove_edge("sw", "gpu39")
    schedule = build_schedule("alltoall", "direct", n_ranks=40, size_bytes=40 * 1024)
    with pytest.raises(SimulationError, match=r"rank 0 \(gpu0\) -> rank 39 \(gpu39\): no route"):
        simulate(star, schedule)


def test_a_released_run_goes_with_its_last_reference():
    # The fabric calls back into its run, a reference cycle: without release() an
    # all-to-all's route arrays (hundreds of MB) wait for the cyclic collector.
    import gc  # noqa: PLC0415
    import weakref  # noqa: PLC0415

    topo, _ = _topology("star", 4)
    schedule = build_schedule("alltoall", "direct", n_ranks=4, size_bytes=4_000)
    gc.disable()
    try:
        for release in (False, True):
            run = engine.prepare(topo, schedule)
            run.run("flow")
            if release:
                run.release()
            gone = weakref.ref(run)
            del run
            assert (gone() is None) is release
            gc.collect()
    finally:
        gc.enable()


def test_the_api_refuses_what_is_not_a_topology_a_schedule_or_a_protocol() -> None:
    # Issue 29: simulate(topo, sched, protocol="LL") and simulate(topo, 42) raised
    # AttributeError; a protocol may be named, anything else is a one-line ConfigError.
    from simcoll.topology import load, switch_star  # noqa: PLC0415

    star = switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    schedule = build_schedule("allgather", "ring", n_ranks=4, size_bytes=4000)
    named = simulate(star, schedule, protocol="LL").time_s
    assert named == simulate(star, schedule, protocol=PROTOCOLS["LL"]).time_s
    for call, message in [
        (lambda: simulate(star, 42), "a schedule is a Schedule (simcoll.build_schedule), got "
         "int 42"),
        (lambda: simulate("star", schedule), "a topology is a networkx DiGraph "
         "(simcoll.load_topology), got str"),
        (lambda: simulate(star, schedule, protocol=3), "a protocol is a name (LL, LL128, simple) "
         "or a Protocol, got int 3"),
        (lambda: simulate(star, schedule, protocol="LL64"), "unknown protocol 'LL64'; valid: LL, "
         "LL128, simple"),
        (lambda: load(42), "a topology is a file's path, got int 42"),
    ]:  # fmt: skip
        with pytest.raises(ConfigError) as info:
            call()
        assert str(info.value) == message
