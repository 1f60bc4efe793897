"""Tests of simcoll.sim.graph: spans, calls and their dependencies on one fabric, against
hand counts and against each call simulated alone; the compiled loop against the SimPy
reference, to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from simcoll.algorithms import build_schedule
from simcoll.core.errors import ConfigError
from simcoll.network.clock import on_grid
from simcoll.sim import engine
from simcoll.sim.engine import prepare, simulate
from simcoll.sim.graph import ExecutionGraph
from simcoll.topology import ring, switch_star

B, L = 10e9, 1e-6


@pytest.fixture
def star():  # type: ignore[no-untyped-def]
    return switch_star(4, link_bandwidth_bytes_per_s=B, link_latency_s=L)


def test_a_span_ends_its_time_after_the_last_of_what_it_waits_for(star) -> None:  # type: ignore[no-untyped-def]
    g = ExecutionGraph(star)
    a, b = g.span(1e-3), g.span(3e-3)
    c = g.span(2e-3, [a, b])
    joined = g.span(0.0, [a, c])
    done = g.simulate()
    # spans last whole ticks of the clock (simcoll.network.clock)
    a_s, b_s, c_s = on_grid(1e-3), on_grid(3e-3), on_grid(2e-3)
    assert done.end_s.tolist() == [a_s, b_s, b_s + c_s, b_s + c_s]
    assert done.issue_s[c] == b_s  # issued when its last dependency ended
    assert done.end_s[joined] == done.end_s[c]


def test_a_call_alone_in_a_graph_takes_its_own_time_after_its_opening(star) -> None:  # type: ignore[no-untyped-def]
    schedule = build_schedule("allgather", "ring", n_ranks=4, size_bytes=4_000_000, n_chunks=2,
                              max_in_flight=1)  # fmt: skip
    alone = simulate(star, schedule).time_s
    g = ExecutionGraph(star)
    opened = g.span(7e-3)
    call = g.call(prepare(star, schedule), after=opened)
    done = g.simulate()
    assert done.end_s[call.end] == pytest.approx(7e-3 + alone, rel=1e-12)
    assert done.issue_s[call.transfers].min() == on_grid(7e-3)


def test_calls_on_disjoint_links_keep_their_own_windows_and_times() -> None:
    # Two 2-rank calls on a 4-GPU ring's links 0-1 and 2-3, with windows 1 and 4: beside
    # each other they take exactly what each takes alone.
    topo = ring(4, link_bandwidth_bytes_per_s=B, link_latency_s=L)
    first = build_schedule("allreduce", "ring", n_ranks=2, size_bytes=2**22, n_chunks=8,
                           max_in_flight=1)  # fmt: skip
    second = build_schedule("allreduce", "ring", n_ranks=2, size_bytes=2**22, n_chunks=8,
                            max_in_flight=4)  # fmt: skip
    alone = [simulate(topo, first, rank_nodes=("gpu0", "gpu1")).time_s,
             simulate(topo, second, rank_nodes=("gpu2", "gpu3")).time_s]  # fmt: skip
    assert alone[0] > alone[1]  # the window shows
    g = ExecutionGraph(topo)
    calls = [g.call(prepare(topo, first, rank_nodes=("gpu0", "gpu1"))),
             g.call(prepare(topo, second, rank_nodes=("gpu2", "gpu3")))]  # fmt: skip
    done = g.simulate()
    assert [done.end_s[c.end] for c in calls] == pytest.approx(alone, rel=1e-12)


def test_calls_on_one_link_share_it(star) -> None:  # type: ignore[no-untyped-def]
    # Two send/recv pairs with GPU 0 at once (each rank sends its whole buffer to the
    # other): the switch's link into GPU 0, and GPU 0's out, carry both calls' transfers,
    # half the bandwidth each; every other link one transfer.
    size = 10_000_000
    g = ExecutionGraph(star)
    for src in (1, 2):
        b = build_schedule("sendrecv", "direct", n_ranks=2, size_bytes=size)
        g.call(prepare(star, b, rank_nodes=(f"gpu{src}", "gpu0")))
    done = g.simulate()
    assert done.time_s == pytest.approx(2 * L + 2 * size / B, rel=1e-12)
    assert np.isclose(done.link_bytes.sum(), 2 * 2 * 2 * size)  # 2 calls x 2 transfers x 2 links


def test_the_compiled_loop_and_the_reference_give_the_same_floats(
    star,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    def run():  # type: ignore[no-untyped-def]
        g = ExecutionGraph(star)
        first = g.call(prepare(star, build_schedule("allreduce", "ring", n_ranks=3,
                                                    size_bytes=3_000_000, n_chunks=3),
                               rank_nodes=("gpu0", "gpu1", "gpu2")))  # fmt: skip
        work = g.span(1e-4, [first.end])
        g.call(prepare(star, build_schedule("alltoall", "direct", n_ranks=4,
                                            size_bytes=4_000_000)), after=work)  # fmt: skip
        g.call(prepare(star, build_schedule("allgather", "ring", n_ranks=2, size_bytes=2**21),
                       rank_nodes=("gpu3", "gpu1")), after=work)  # fmt: skip
        return g.simulate()

    monkeypatch.setattr(engine, "COMPILE_FROM_TRANSFERS", 0)
    monkeypatch.setattr(engine, "COMPILED", True)
    compiled = run()
    monkeypatch.setattr(engine, "COMPILED", False)
    reference = run()
    for name in ("issue_s", "start_s", "end_s", "link_bytes", "link_busy_s"):
        assert np.array_equal(getattr(compiled, name), getattr(reference, name)), name


def test_bad_graphs_are_refused(star) -> None:  # type: ignore[no-untyped-def]
    g = ExecutionGraph(star)
    with pytest.raises(ConfigError, match="node 0 is not a node added before this one"):
        g.span(1.0, [0])
    with pytest.raises(ConfigError, match=r"a span takes a finite time >= 0 s, got -1\.0"):
        g.span(-1.0)
    other = switch_star(2, link_bandwidth_bytes_per_s=B, link_latency_s=L)
    run = prepare(other, build_schedule("allreduce", "ring", n_ranks=2, size_bytes=8))
    with pytest.raises(ConfigError, match="prepared on another topology"):
        g.call(run)
    with pytest.raises(ConfigError, match="model 'flow' or 'ideal', not 'packet'"):
        ExecutionGraph(star, model="packet")
