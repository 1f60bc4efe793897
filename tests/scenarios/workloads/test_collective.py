"""One collective call: the ring closed forms on a ring of GPUs (the links alone, one piece
per block: ``protocol=None, n_chunks=1``), and what ``predict`` gives by default."""

from __future__ import annotations

import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.workloads.collective import collective

BANDWIDTH_BYTES_PER_S = 100e9  # the ring4 fixture
LATENCY_S = 2e-6


def ring_allreduce_s(n, size_bytes):
    """2(n - 1) steps, each one link latency plus S/n bytes at the link bandwidth."""
    return 2 * (n - 1) * (LATENCY_S + size_bytes / n / BANDWIDTH_BYTES_PER_S)


def test_a_ring_allreduce_on_a_ring_takes_the_closed_form(ring4):
    size = 8_000_000
    m = collective(ring4, collective="allreduce", size_bytes=size, protocol=None,
                   n_chunks=1).metrics  # fmt: skip
    t = ring_allreduce_s(4, size)
    assert m["time_s"] == pytest.approx(t, rel=1e-12)
    assert m["comm_s"] == m["exposed_comm_s"] == pytest.approx(t, rel=1e-12)
    assert m["hidden_comm_s"] == 0.0
    assert m["compute_s"] == 0.0
    assert m["algbw_bytes_per_s"] == pytest.approx(size / t)
    assert m["busbw_bytes_per_s"] == pytest.approx(size / t * 2 * 3 / 4)


def test_iterations_run_back_to_back_and_metrics_are_per_call(ring4):
    size = 4_000_000
    m = collective(ring4, size_bytes=size, iterations=3, protocol=None, n_chunks=1).metrics
    assert m["time_s"] == pytest.approx(3 * ring_allreduce_s(4, size), rel=1e-12)
    assert m["iteration_time_s"] == pytest.approx(ring_allreduce_s(4, size), rel=1e-12)


def test_n_ranks_picks_the_first_ranks(ring4):
    # Ranks 0 and 1 are neighbours: a 2-rank ring over their one duplex link.
    m = collective(ring4, size_bytes=2_000_000, n_ranks=2, protocol=None, n_chunks=1).metrics
    assert m["time_s"] == pytest.approx(ring_allreduce_s(2, 2_000_000), rel=1e-12)


def test_allgather_with_chunks_uses_the_algorithm_parameters(ring4):
    # One chunk per step: (n - 1)(L + S/n/B). The parameter reaches the algorithm.
    size = 8_000_000
    expected = 3 * (LATENCY_S + size / 4 / BANDWIDTH_BYTES_PER_S)
    m = collective(ring4, collective="allgather", size_bytes=size, n_chunks=1,
                   protocol=None).metrics  # fmt: skip
    assert m["time_s"] == pytest.approx(expected, rel=1e-12)


def test_by_default_the_pieces_follow_one_another_on_each_link(ring4):
    # predict's default cuts each 2 MB block into pieces of at most 512 KiB (4 here) that
    # keep every link busy: one latency, then the 3 steps' bytes back to back.
    size = 8_000_000
    m = collective(ring4, collective="allgather", size_bytes=size, protocol=None).metrics
    assert m["time_s"] == pytest.approx(LATENCY_S + 3 * size / 4 / BANDWIDTH_BYTES_PER_S,
                                        rel=1e-12)  # fmt: skip


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"size_bytes": -8}, "collective: size_bytes must be a whole number of bytes >= 0, got -8"),
        ({"iterations": 0}, "collective: iterations must be an integer >= 1, got 0"),
        ({"n_ranks": 5}, "collective: n_ranks must be at most 4 (the topology's GPUs), got 5"),
        ({"n_chunks": 0}, "collective: n_chunks must be an integer >= 1, got 0"),
    ],
)
def test_bad_parameters(ring4, params, message):
    with pytest.raises(ConfigError) as info:
        collective(ring4, **params)
    assert str(info.value) == message
