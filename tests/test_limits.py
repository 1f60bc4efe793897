"""Edges of the input space: empty and huge sizes, one rank, odd rank counts, uneven
splits, and nanosecond latencies under terabyte transfers (issue 8)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simcoll.algorithms import algorithm_names, build_schedule
from simcoll.core.checks import check_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.network.clock import TICK_S, on_grid
from simcoll.prediction import predict
from simcoll.sim.engine import simulate
from simcoll.topology import ring, switch_star

BANDWIDTH_BYTES_PER_S = 1e10
LATENCY_S = 1e-6
STAR = switch_star(8, link_bandwidth_bytes_per_s=BANDWIDTH_BYTES_PER_S, link_latency_s=LATENCY_S)


def finite_and_ordered(result) -> None:  # type: ignore[no-untyped-def]
    for name in ("issue_s", "start_s", "end_s"):
        values = getattr(result, name)
        assert np.all(np.isfinite(values)), name
        assert np.all(values >= 0), name
    assert np.all(result.end_s >= result.start_s)
    assert np.all(result.start_s >= result.issue_s)
    assert math.isfinite(result.time_s)
    assert result.time_s >= 0


@pytest.mark.parametrize("collective", list(Collective), ids=lambda c: c.value)
def test_zero_bytes_cost_only_latency(collective: Collective) -> None:
    for algorithm in algorithm_names(collective):
        if algorithm in ("nvls", "nvls_tree", "sharp", "collnet_direct", "collnet_chain"):
            continue  # they need switches that reduce; STAR has none
        schedule = build_schedule(collective, algorithm, n_ranks=8, size_bytes=0)
        result = simulate(STAR, schedule)
        finite_and_ordered(result)
        assert result.busbw_bytes_per_s == 0.0
        # each route's latency rounded up to the clock's tick (simcoll.network.clock)
        assert result.time_s <= schedule.n_transfers * on_grid(2 * LATENCY_S)


@pytest.mark.parametrize("collective", list(Collective), ids=lambda c: c.value)
def test_one_rank_moves_nothing_and_takes_no_time(collective: Collective) -> None:
    for algorithm in algorithm_names(collective):
        if algorithm in ("nvls", "sharp"):
            continue
        schedule = build_schedule(collective, algorithm, n_ranks=1, size_bytes=1024)
        assert schedule.n_transfers == 0
        assert simulate(STAR, schedule).time_s == 0.0


@pytest.mark.parametrize("n_ranks", [3, 5, 6, 7])
def test_odd_rank_counts_compute_their_collective_and_match_the_ring_closed_form(
    n_ranks: int,
) -> None:
    for collective in Collective:
        for algorithm in algorithm_names(collective):
            if algorithm in ("nvls", "sharp", "hierarchical"):
                continue
            size = 4 * n_ranks * n_ranks * 8
            check_schedule(build_schedule(collective, algorithm, n_ranks=n_ranks, size_bytes=size))
    size = 64 * n_ranks
    schedule = build_schedule("allreduce", "ring", n_ranks=n_ranks, size_bytes=size)
    # 2(n-1) steps, each GPU -> switch -> GPU: two latencies, then size/n over a link
    expected_s = 2 * (n_ranks - 1) * (2 * LATENCY_S + size / n_ranks / BANDWIDTH_BYTES_PER_S)
    assert simulate(STAR, schedule).time_s == pytest.approx(expected_s, rel=1e-12)


def test_uneven_sizes_split_into_pieces_that_differ_by_at_most_one_byte() -> None:
    # NCCL splits a count that does not divide as evenly as whole elements allow
    schedule = build_schedule("allreduce", "ring", n_ranks=3, size_bytes=1001)
    assert schedule.piece_bytes.tolist() == [334, 334, 333]
    check_schedule(schedule)
    chunked = build_schedule("allreduce", "ring", n_ranks=3, size_bytes=1001, n_chunks=4)
    assert int(chunked.piece_bytes.sum()) == 1001
    assert int(chunked.piece_bytes.max() - chunked.piece_bytes.min()) <= 1
    check_schedule(chunked)


def test_a_gathered_size_that_does_not_divide_by_the_ranks_is_a_clear_error() -> None:
    # all-gather's size is n x the per-rank count (nccl-tests), so it must divide by n
    with pytest.raises(ConfigError) as info:
        build_schedule("allgather", "ring", n_ranks=3, size_bytes=1001)
    assert str(info.value) == (
        "allgather size 1001 B does not divide into 3 equal blocks (one per rank); use a "
        "multiple of 3 B"
    )


def test_a_terabyte_ring_all_reduce_runs_at_the_link_bandwidth() -> None:
    row = predict(STAR, "allreduce", [2**40], algorithm="ring").rows[0]
    # S = 2^40: the 14 step latencies are 1e-8 of the time, so busbw = B to 1e-7
    assert row.busbw_bytes_per_s == pytest.approx(BANDWIDTH_BYTES_PER_S, rel=1e-7)


def test_nanosecond_latency_under_a_terabyte_keeps_both_exactly() -> None:
    topo = ring(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-9)
    result = simulate(topo, build_schedule("sendrecv", "direct", n_ranks=2, size_bytes=2**40))
    finite_and_ordered(result)
    # Both directions at once, each alone on its link. The latency is a whole number of the
    # clock's ticks (2^-50 s); the transfer's 1,100 s is past 2^53 ticks, where a float's
    # spacing is coarser than a tick and the grid leaves it as it is.
    latency_s = on_grid(1e-9)
    assert latency_s == pytest.approx(1e-9, abs=TICK_S)
    assert result.time_s == latency_s + 2**40 / 1e9
    assert result.start_s.tolist() == [latency_s, latency_s]
