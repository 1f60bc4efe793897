"""Bruck all-gather and pairwise all-to-all: the checker, volumes and closed forms.

Notation: n ranks, S the nccl-tests size, B the link bandwidth per direction, a the
latency of one route. Block sizes follow :meth:`Collective.block_bytes`: all-gather has
n blocks of S/n; all-to-all has n x n blocks, (source, destination), of S/n each (S is
one rank's send buffer, count x n x type size), so a rank sends n - 1 blocks of S/n.
On ``full_mesh`` every ordered pair of GPUs has its own link, so flows never share one.
"""

from __future__ import annotations

import itertools
import math

import pytest

from simcoll.algorithms.bruck import ALGORITHMS, bruck_allgather, pairwise_alltoall
from simcoll.core.checks import check_schedule
from simcoll.core.collectives import Collective
from simcoll.sim.engine import simulate
from simcoll.topology import full_mesh, switch_star

B = 100e9  # bytes/s per direction
A = 2e-6  # latency of one link
REL = 1e-9
WIDE = 10**6  # an in-flight window that never binds

FUNCTIONS = {"bruck": bruck_allgather, "pairwise": pairwise_alltoall}


def _mesh(n: int):
    return full_mesh(n, link_bandwidth_bytes_per_s=B, link_latency_s=A)


def bruck_counts(n: int) -> list[int]:
    """Blocks a rank sends at each Bruck step: min(2^k, n - 2^k) while 2^k < n.

    Before step k a rank holds 2^k blocks and lacks n - 2^k; it sends what the receiver
    lacks, at most all it holds. The steps are ceil(log2 n), and the counts add up to
    1 + 2 + ... + 2^(L-2) + (n - 2^(L-1)) = n - 1.
    """
    return [min(2**k, n - 2**k) for k in range(math.ceil(math.log2(n)))] if n > 1 else []


def test_registered_names():
    assert set(ALGORITHMS) == {
        (Collective.ALLGATHER, "bruck"),
        (Collective.ALLTOALL, "pairwise"),
    }
    assert bruck_allgather(4, 64).algorithm == "bruck"
    assert pairwise_alltoall(4, 64, n_chunks=2).params == {
        "n_channels": 1, "n_chunks": 2, "max_in_flight": 8
    }  # fmt: skip


def test_bruck_counts_add_up():
    assert bruck_counts(5) == [1, 2, 1]
    assert bruck_counts(8) == [1, 2, 4]
    assert all(sum(bruck_counts(n)) == n - 1 for n in range(1, 33))


# (channels, chunks, bytes per block); 7 bytes into 6 pieces and 0 bytes are uneven cases.
CUTS = [(1, 1, 5), (2, 3, 7), (1, 4, 64), (1, 2, 0)]


@pytest.mark.parametrize(("channels", "chunks", "per_block"), CUTS)
@pytest.mark.parametrize("n", range(1, 17))
@pytest.mark.parametrize("algorithm", list(FUNCTIONS))
def test_computes_its_collective(algorithm, n, channels, chunks, per_block):
    check_schedule(FUNCTIONS[algorithm](n, n * per_block, n_channels=channels, n_chunks=chunks))


@pytest.mark.parametrize("n", range(1, 17))
def test_volumes_are_the_textbook_ones(n):
    # Bruck: every rank sends sum(counts) = n - 1 blocks and receives the n - 1 it lacks.
    # Pairwise: every rank sends one block of S/n to each of the n - 1 others.
    size = n * 24
    for fn in FUNCTIONS.values():
        s = fn(n, size)
        assert s.bytes_sent_per_rank().tolist() == [(n - 1) * 24] * n
        assert s.bytes_received_per_rank().tolist() == [(n - 1) * 24] * n


@pytest.mark.parametrize("n", [2, 3, 5, 6, 7, 8, 12, 16])
def test_bruck_step_k_goes_2_to_the_k_down(n):
    # Rank r sends to r - 2^k at step k, a different peer every step.
    s = bruck_allgather(n, n * 8)
    peers = [t.dst for t in s.transfers() if t.src == 0]
    assert peers == [(-(2**k)) % n for k in range(len(bruck_counts(n)))]


def test_pairwise_steps_wait_for_the_previous_receive():
    # One chunk: transfer (s - 1) n + r is rank r's step s send, to r + s. From step 2 on
    # it depends on exactly the step s - 1 send into r, from r - (s - 1), and is issued
    # the moment that arrives.
    n, size = 5, 5 * 4000
    s = pairwise_alltoall(n, size)
    result = simulate(_mesh(n), s)
    for step, rank in itertools.product(range(1, n), range(n)):
        t = s.transfer((step - 1) * n + rank)
        assert (t.src, t.dst) == (rank, (rank + step) % n)
        if step == 1:
            assert t.deps == ()
            continue
        dep = (step - 2) * n + (rank - step + 1) % n
        assert t.deps == (dep,)
        assert result.issue_s[t.index] == result.end_s[dep]


@pytest.mark.parametrize("model", ["ideal", "flow"])
@pytest.mark.parametrize("n", range(2, 17))
def test_bruck_closed_form(n, model):
    # All ranks do the same at the same time; step k starts when step k - 1's receive
    # arrived (its data, and for the last step also MPI's step order) and sends count_k
    # blocks of S/n over the receiver's own link:
    #   T = sum_k (a + count_k S/(n B)) = ceil(log2 n) a + (n-1)/n S/B.
    size = n * 2**16
    expected = math.ceil(math.log2(n)) * A + (n - 1) / n * size / B
    s = bruck_allgather(n, size)
    assert simulate(_mesh(n), s, model=model).time_s == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("model", ["ideal", "flow"])
@pytest.mark.parametrize("n", range(2, 17))
def test_pairwise_closed_form(n, model):
    # n - 1 steps, each one block of S/n per rank over its own link, each starting when
    # the previous step's receive arrived: T = (n - 1)(a + S/(n B)).
    size = n * 2**16
    expected = (n - 1) * (A + size / (n * B))
    s = pairwise_alltoall(n, size)
    assert simulate(_mesh(n), s, model=model).time_s == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("n", [3, 4, 6, 8])
@pytest.mark.parametrize("algorithm", list(FUNCTIONS))
def test_on_a_switch_star(algorithm, n):
    # Each step a rank sends to one peer and receives from one: one flow per uplink and
    # per downlink, nothing shared; a route is two links, so a = 2 x link latency.
    star = switch_star(n, link_bandwidth_bytes_per_s=B, link_latency_s=A)
    size = n * 2**16
    steps = len(bruck_counts(n)) if algorithm == "bruck" else n - 1
    expected = steps * 2 * A + (n - 1) / n * size / B
    s = FUNCTIONS[algorithm](n, size)
    assert simulate(star, s).time_s == pytest.approx(expected, rel=REL)


def grid_time_s(alpha: float, taus: list[float], chunks: int) -> float:
    """Pipelined time of steps with piece times ``taus``, each step on its own connection.

    Chunk j of step s is issued when chunk j of step s - 1 has arrived and moves after
    chunk j - 1 of step s on the same connection:
        F(s, j) = max(F(s-1, j) + alpha, F(s, j-1)) + tau_s,   F(-1, j) = 0.
    That is the longest path through the (step, chunk) grid: alpha to start, alpha per
    step change, tau_s per node visited. Every path visits m + k - 1 nodes, one per step
    at least, so the longest spends its k - 1 extra nodes on the slowest step:
        T = m alpha + sum(tau) + (k - 1) max(tau).
    """
    return len(taus) * alpha + sum(taus) + (chunks - 1) * max(taus)


@pytest.mark.parametrize(
    ("n", "chunks", "channels"), list(itertools.product([3, 5, 6, 8], [2, 5], [1, 2]))
)
@pytest.mark.parametrize("algorithm", list(FUNCTIONS))
def test_pipelined(algorithm, n, chunks, channels):
    # Every step talks to a different peer, so has its own connection: grid_time_s. A
    # chunk is 1/k of a step's data; channels split it further but share the link equally
    # in lockstep, so a channel's piece takes as long as one channel's would.
    # Bruck: tau_k = count_k (S/n) / (kB); pairwise: tau = (S/n) / (kB), n - 1 steps.
    size = n * channels * chunks * 3000
    per_block = size / n / (chunks * B)
    if algorithm == "bruck":
        taus = [count * per_block for count in bruck_counts(n)]
    else:
        taus = [per_block] * (n - 1)
    s = FUNCTIONS[algorithm](n, size, n_channels=channels, n_chunks=chunks, max_in_flight=WIDE)
    assert simulate(_mesh(n), s).time_s == pytest.approx(grid_time_s(A, taus, chunks), rel=REL)
