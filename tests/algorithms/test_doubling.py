"""Recursive halving/doubling: the checker, per-rank volumes and hand-derived closed forms.

Notation: n ranks, p = 2^floor(log2 n), L = log2 p, S the nccl-tests size, B the link
bandwidth per direction, a the latency of one route. On ``full_mesh`` every ordered pair
of GPUs has its own link (one hop, latency a), so flows never share a link: a transfer of
x bytes issued at t on an idle connection arrives at t + a + x / B, under either model.
"""

from __future__ import annotations

import itertools
import math

import pytest

from simcoll.algorithms.doubling import (
    ALGORITHMS,
    fold,
    halving_doubling_allgather,
    halving_doubling_allreduce,
    halving_doubling_reducescatter,
)
from simcoll.core.checks import check_schedule
from simcoll.core.collectives import Collective
from simcoll.sim.engine import simulate
from simcoll.topology import full_mesh, switch_star

B = 100e9  # bytes/s per direction
A = 2e-6  # latency of one link
REL = 1e-9
WIDE = 10**6  # an in-flight window that never binds

FUNCTIONS = {
    "reducescatter": halving_doubling_reducescatter,
    "allgather": halving_doubling_allgather,
    "allreduce": halving_doubling_allreduce,
}


def _mesh(n: int):
    return full_mesh(n, link_bandwidth_bytes_per_s=B, link_latency_s=A)


def test_registered_names_and_integer_parameters():
    assert set(ALGORITHMS) == {
        (Collective.REDUCESCATTER, "halving_doubling"),
        (Collective.ALLGATHER, "halving_doubling"),
        (Collective.ALLREDUCE, "halving_doubling"),
    }
    s = halving_doubling_allreduce(8, 8 * 6, n_channels=2, n_chunks=3, max_in_flight=4)
    assert (s.algorithm, s.params) == (
        "halving_doubling", {"n_channels": 2, "n_chunks": 3, "max_in_flight": 4}
    )  # fmt: skip


def test_fold_keeps_the_odd_ranks_of_the_first_pairs():
    # n = 11: p = 8, r = 3; ranks 0, 2, 4 sit out; positions are 1, 3, 5, then 6..10.
    assert fold(11) == (8, [1, 3, 5, 6, 7, 8, 9, 10])
    assert fold(1) == (1, [0])
    assert fold(16) == (16, list(range(16)))


# (channels, chunks, bytes per block); 7 bytes into 6 pieces and 0 bytes are uneven cases.
CUTS = [(1, 1, 5), (2, 3, 7), (1, 4, 64), (1, 2, 0)]


@pytest.mark.parametrize(("channels", "chunks", "per_block"), CUTS)
@pytest.mark.parametrize("n", range(1, 17))
@pytest.mark.parametrize("collective", list(FUNCTIONS))
def test_computes_its_collective(collective, n, channels, chunks, per_block):
    # All-reduce has one block, cut into p sub-blocks: one odd byte makes them uneven.
    if collective == "allreduce":
        size = fold(n)[0] * per_block + (1 if per_block else 0)
    else:
        size = n * per_block
    check_schedule(FUNCTIONS[collective](n, size, n_channels=channels, n_chunks=chunks))


def test_one_rank_moves_nothing():
    for fn in FUNCTIONS.values():
        assert fn(1, 64).n_transfers == 0


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_power_of_two_volumes_are_the_textbook_ones(n):
    # Halving sends S/2 + S/4 + ... + S/n = (n-1)/n S and receives as much; doubling the
    # same sums in reverse; all-reduce does both: 2(n-1)/n S each way.
    size = n * 96
    one = (n - 1) * size // n
    for fn, volume in [(halving_doubling_reducescatter, one), (halving_doubling_allgather, one),
                       (halving_doubling_allreduce, 2 * one)]:  # fmt: skip
        s = fn(n, size)
        assert s.bytes_sent_per_rank().tolist() == [volume] * n
        assert s.bytes_received_per_rank().tolist() == [volume] * n


@pytest.mark.parametrize("n", [3, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15])
def test_folded_allreduce_volumes(n):
    # Ranks 2i < 2r send S to 2i + 1 and get S back. Ranks 2i + 1 take that S in, give it
    # back, and in between run the core on p ranks like every other core rank:
    # 2(p-1)/p S each way.
    p, ranks = fold(n)
    size = p * 60
    core = 2 * (p - 1) * size // p
    extra = n - p
    want = [size] * n
    for i in range(p):
        want[ranks[i]] = core + (size if i < extra else 0)
    s = halving_doubling_allreduce(n, size)
    assert s.bytes_sent_per_rank().tolist() == want
    assert s.bytes_received_per_rank().tolist() == want


@pytest.mark.parametrize("n", range(2, 17))
def test_allgather_delivers_every_other_block_once(n):
    # Each rank receives each block it lacks exactly once (the core delivers each
    # position's blocks to each other position once; the send-back skips the sitting-out
    # rank's own block): (n-1)/n S for every rank and every n.
    size = n * 10
    s = halving_doubling_allgather(n, size)
    assert s.bytes_received_per_rank().tolist() == [(n - 1) * 10] * n


def test_six_ranks_volumes_by_hand():
    # n = 6: p = 4, r = 2; ranks 0 and 2 fold into 1 and 3; positions 0..3 are ranks
    # 1, 3, 4, 5, owning blocks {0,1}, {2,3}, {4}, {5}. One block is b bytes.
    # Reduce-scatter: fold 0->1, 2->3: all 6 blocks. Distance 2: 1->4 and 3->5 send
    # positions 2,3 (blocks 4,5: 2b); 4->1 and 5->3 send positions 0,1 (blocks 0..3: 4b).
    # Distance 1: 1<->3 swap 2b each way, 4<->5 b each way. Then 1->0, 3->2: b.
    #   sent     0: 6b  1: 2+2+1 = 5b  2: 6b  3: 5b  4: 4+1 = 5b  5: 5b
    #   received 0: b   1: 6+4+2 = 12b 2: b   3: 12b 4: 2+1 = 3b  5: 3b
    # All-gather: fold 0->1, 2->3: b. Distance 1: 1<->3 swap 2b, 4<->5 swap b. Distance 2:
    # 1->4, 3->5 send 4b; 4->1, 5->3 send 2b. Then 1->0, 3->2 send the other 5 blocks.
    #   sent 0: b  1: 2+4+5 = 11b  2: b  3: 11b  4: 1+2 = 3b  5: 3b
    b = 10
    rs = halving_doubling_reducescatter(6, 6 * b)
    assert rs.bytes_sent_per_rank().tolist() == [6 * b, 5 * b, 6 * b, 5 * b, 5 * b, 5 * b]
    assert rs.bytes_received_per_rank().tolist() == [b, 12 * b, b, 12 * b, 3 * b, 3 * b]
    ag = halving_doubling_allgather(6, 6 * b)
    assert ag.bytes_sent_per_rank().tolist() == [b, 11 * b, b, 11 * b, 3 * b, 3 * b]


@pytest.mark.parametrize("model", ["ideal", "flow"])
@pytest.mark.parametrize("n", [2, 4, 8, 16])
@pytest.mark.parametrize("collective", list(FUNCTIONS))
def test_power_of_two_closed_forms(collective, n, model):
    # Every rank does the same thing at the same time: at each step it issues one transfer
    # once its previous step's receive arrived (the data it forwards or adds), to a partner
    # over the partner's own link. Step of x bytes: a + x / B.
    # Halving: x = S/2, S/4, ..., S/n:  T = L a + (n-1)/n S/B.  Doubling: the same sums.
    # Rabenseifner: both, one after the other: T = 2 L a + 2 (n-1)/n S/B.
    size = n * 2**16
    steps = int(math.log2(n))
    one = steps * A + (n - 1) / n * size / B
    expected = 2 * one if collective == "allreduce" else one
    s = FUNCTIONS[collective](n, size)
    assert simulate(_mesh(n), s, model=model).time_s == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_allreduce_on_a_switch_star(n):
    # On a star each rank talks to one partner per step: one flow per uplink and one per
    # downlink, so nothing is shared; a route is two links: a = 2 x link latency.
    star = switch_star(n, link_bandwidth_bytes_per_s=B, link_latency_s=A)
    size = n * 2**16
    steps = int(math.log2(n))
    expected = 2 * steps * (2 * A) + 2 * (n - 1) / n * size / B
    s = halving_doubling_allreduce(n, size, n_channels=2)
    assert simulate(star, s).time_s == pytest.approx(expected, rel=REL)


def grid_time_s(alpha: float, taus: list[float], chunks: int) -> float:
    """Pipelined time of steps with piece times ``taus``, each step on its own connection.

    Chunk j of step s is issued when chunk j of step s - 1 has arrived (its data) and
    moves after chunk j - 1 of step s on the same connection:
        F(s, j) = max(F(s-1, j) + alpha, F(s, j-1)) + tau_s,   F(-1, j) = 0.
    That is the longest path through the (step, chunk) grid from (0, 0) to (m-1, k-1):
    alpha to start, alpha per step change, and tau_s per node visited. Every path visits
    m + k - 1 nodes, one per step at least, so the longest spends its k - 1 extra nodes
    on the slowest step:  T = m alpha + sum(tau) + (k - 1) max(tau).
    """
    return len(taus) * alpha + sum(taus) + (chunks - 1) * max(taus)


@pytest.mark.parametrize(
    ("n", "chunks", "channels"), list(itertools.product([4, 8], [2, 5], [1, 2]))
)
@pytest.mark.parametrize("collective", ["reducescatter", "allgather"])
def test_pipelined_halving_and_doubling(collective, n, chunks, channels):
    # Each step of halving or doubling talks to a different partner, so each has its own
    # connection (grid_time_s applies). A chunk is 1/k of the step's data; channels split
    # it further but share the link equally in lockstep, so per channel the piece time is
    # the same as with one channel. Halving: tau_s = S / 2^(s+1) / (k B); doubling:
    # tau_s = 2^s (S/n) / (k B). Either way sum(tau) = (n-1)/n S/(kB), max = S/(2kB).
    size = n * channels * chunks * 3000
    steps = int(math.log2(n))
    taus = [size / 2 ** (s + 1) / (chunks * B) for s in range(steps)]
    if collective == "allgather":
        taus.reverse()
    s = FUNCTIONS[collective](n, size, n_channels=channels, n_chunks=chunks, max_in_flight=WIDE)
    assert simulate(_mesh(n), s).time_s == pytest.approx(grid_time_s(A, taus, chunks), rel=REL)


@pytest.mark.parametrize("channels", [1, 2])
def test_pipelined_allreduce_when_latency_dominates(channels):
    # The 2L steps form the grid of grid_time_s (tau: S/2, ..., S/n, S/n, ..., S/2, over
    # kB), except that the connection of halving step s is also that of doubling step
    # L-1-s (same partner): its first doubling chunk also waits for its last halving
    # chunk. A path through such an edge has 2s + 1 <= 2L - 1 latencies and 2s + 2k
    # nodes, so costs at most (2L-1) a + (2L-2+2k) tau_max; the grid path costs at least
    # 2L a. With a >= (2L-2+2k) tau_max the grid wins:
    #   T = 2L a + 2 (n-1)/n S/(kB) + (k-1) S/(2kB).
    # Here n = 8, k = 4: tau_max = S/(8B), so 12 S/(8B) = 0.96 us <= a = 2 us.
    n, chunks = 8, 4
    size = n * chunks * channels * 1000
    tau_max = size / (2 * chunks * B)
    assert (2 * 3 - 2 + 2 * chunks) * tau_max <= A
    halving = [size / 2 ** (s + 1) / (chunks * B) for s in range(3)]
    expected = grid_time_s(A, halving + halving[::-1], chunks)
    assert expected == pytest.approx(
        6 * A + 2 * 7 / 8 * size / (chunks * B) + 3 * size / (2 * chunks * B), rel=1e-12
    )
    s = halving_doubling_allreduce(n, size, n_channels=channels, n_chunks=chunks,
                                   max_in_flight=WIDE)  # fmt: skip
    assert simulate(_mesh(n), s).time_s == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("model", ["ideal", "flow"])
@pytest.mark.parametrize("n", [3, 5, 6, 7, 9, 12])
def test_folded_allreduce_closed_form(n, model):
    # Lockstep phases: fold (S), halving (S/2 .. S/p), doubling (S/p .. S/2), send-back (S).
    # Upper bound: a transfer of phase step i depends only on earlier steps and its link
    # is its own, so it ends by E_i = E_{i-1} + a + x_i / B.
    # Lower bound, a chain of transfers each reading what the one before wrote: 0 -> 1
    # (fold into position 0), position 0 -> p/2 -> 3p/4 -> ... -> p-1 (halving, each
    # forwards the half it just received into), p-1 -> p-2 -> p-4 -> ... -> 0 (doubling,
    # each forwards what it just got), position 0 (rank 1) -> 0 (send-back). It has one
    # transfer per phase step, so
    #   T = 2 (a + S/B) + 2 L a + 2 (p-1)/p S/B.
    # For n = 6 (p = 4): 6 a + 3.5 S/B.
    p, _ = fold(n)
    size = p * 2**16
    steps = int(math.log2(p))
    expected = 2 * (A + size / B) + 2 * steps * A + 2 * (p - 1) / p * size / B
    s = halving_doubling_allreduce(n, size)
    assert simulate(_mesh(n), s, model=model).time_s == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("model", ["ideal", "flow"])
def test_six_rank_reducescatter_step_by_step(model):
    # n = 6, block b bytes, t = b / B. Positions 0..3 = ranks 1, 3, 4, 5 (see volumes).
    # Each step is an MPI_Sendrecv: a transfer starts once both partners have finished
    # their last step (sent and received).
    #   fold 0->1, 2->3 (6 blocks)                        start 0          end a + 6t
    #   distance 2: 1->4, 3->5 (blocks 4,5)               start a + 6t     end 2a + 8t
    #               4->1, 5->3 (blocks 0..3; 4, 5 wait for their folding partners)
    #                                                     start a + 6t     end 2a + 10t
    #   distance 1: 1->3, 3->1 (2 blocks)                 start 2a + 10t   end 3a + 12t
    #               4->5, 5->4 (1 block)                  start 2a + 10t   end 3a + 11t
    #   redistribute 1->0, 3->2 (1 block)                 start 3a + 12t   end 4a + 13t
    # T = 4a + 13t: MPICH's steps one after another, each at its largest transfer.
    b = 2**16
    s = halving_doubling_reducescatter(6, 6 * b)
    expected = 4 * A + 13 * b / B
    assert simulate(_mesh(6), s, model=model).time_s == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("model", ["ideal", "flow"])
def test_six_rank_allgather_step_by_step(model):
    # n = 6, block b bytes, t = b / B. Positions 0..3 = ranks 1, 3, 4, 5.
    #   fold 0->1, 2->3 (block 0 / 2)                     start 0          end a + t
    #   distance 1: 4->5, 5->4 (own block; no fold)       start 0          end a + t
    #               1->3, 3->1 (blocks 0,1 / 2,3)         start a + t      end 2a + 3t
    #   distance 2: 1->4, 3->5 (blocks 0..3; after 1<->3) start 2a + 3t    end 3a + 7t
    #               4->1, 5->3 (blocks 4,5)               start 2a + 3t    end 3a + 5t
    #   send-back 1->0, 3->2 (5 blocks)                   start 3a + 7t    end 4a + 12t
    # T = 4a + 12t: MPICH's steps one after another, each at its largest transfer.
    b = 2**16
    s = halving_doubling_allgather(6, 6 * b)
    expected = 4 * A + 12 * b / B
    assert simulate(_mesh(6), s, model=model).time_s == pytest.approx(expected, rel=REL)
