"""Hierarchical and reduce-scatter + all-gather all-reduces: checker, volumes, closed forms.

Notation: n ranks in m nodes of g GPUs (n = g m), message S bytes, K chunks, C channels.
On ``switch_star`` a GPU-to-GPU route is two links (alpha = 2 x link latency) and every
GPU has one uplink and one downlink; a ring rank sends only to r + 1 and receives only
from r - 1, so each link carries one flow per channel and nothing else.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from simcoll.algorithms.hierarchical import (
    ALGORITHMS,
    hierarchical_allreduce,
    reducescatter_allgather_allreduce,
    reducescatter_gather_reduce,
)
from simcoll.algorithms.ring import ring_allreduce
from simcoll.core.checks import check_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError
from simcoll.sim.engine import simulate
from simcoll.topology import switch_star
from simcoll.topology.clusters import rail_optimized

B = 100e9  # bytes/s per direction, switch star
LINK_LATENCY_S = 2e-6
ALPHA = 2 * LINK_LATENCY_S  # GPU -> switch -> GPU
REL = 1e-9
WIDE = 10**6  # an in-flight window that never binds

# The rail-optimized cluster of the hierarchical tests. Inside a node a GPU reaches
# another over its NVLinks to the NVSwitch and the other's NVLinks: two links of
# 2 x 100 GB/s and 0.5 us each. Local rank l of one node reaches local rank l of another
# over its PCIe link to its NIC, the NIC's link to rail leaf l, and down the same way:
# four links, the bottleneck is the 25 GB/s NIC link. GPUs do not forward, so these are
# the only shortest routes, and the fabric's spines are never used.
NVLINK_B, NVLINK_LATENCY_S = 100e9, 0.5e-6
NIC_B, NIC_LATENCY_S = 25e9, 1e-6
PCIE_B, PCIE_LATENCY_S = 50e9, 0.25e-6
B_INTRA = 2 * NVLINK_B
A_INTRA = 2 * NVLINK_LATENCY_S
B_INTER = min(NIC_B, PCIE_B)
A_INTER = 2 * PCIE_LATENCY_S + 2 * NIC_LATENCY_S


def _star(n: int):
    return switch_star(n, link_bandwidth_bytes_per_s=B, link_latency_s=LINK_LATENCY_S)


def _rails(n_nodes: int, gpus_per_node: int):
    return rail_optimized(
        n_nodes, gpus_per_node=gpus_per_node, nics_per_node=gpus_per_node, nvlinks_per_gpu=2,
        nvlink_bandwidth_bytes_per_s=NVLINK_B, nvlink_latency_s=NVLINK_LATENCY_S,
        nic_bandwidth_bytes_per_s=NIC_B, nic_latency_s=NIC_LATENCY_S,
        pcie_bandwidth_bytes_per_s=PCIE_B, pcie_latency_s=PCIE_LATENCY_S,
        fabric_latency_s=0.3e-6,
    )  # fmt: skip


def pipelined_time_s(m: int, k: int, alpha: float, tau: float, window: int) -> float:
    """m ring steps of k pieces on one connection each, as derived in tests/test_engine.py.

    Window 1: T = m k (alpha + tau). Unbounded window: the longest path through the
    (step, piece) grid, T = alpha + m k tau + (m - 1) max(0, alpha - (k - 1) tau).
    """
    if window == 1:
        return m * k * (alpha + tau)
    return alpha + m * k * tau + (m - 1) * max(0.0, alpha - (k - 1) * tau)


def _divisors(n: int) -> list[int]:
    return [g for g in range(1, n + 1) if n % g == 0]


def test_registered_names_and_integer_parameters():
    assert dict(ALGORITHMS) == {
        (Collective.ALLREDUCE, "hierarchical"): hierarchical_allreduce,
        (Collective.ALLREDUCE, "reducescatter_allgather"): reducescatter_allgather_allreduce,
        (Collective.REDUCE, "reducescatter_gather"): reducescatter_gather_reduce,
    }
    s = hierarchical_allreduce(8, 8 * 6, gpus_per_node=4, n_channels=2, n_chunks=3,
                               max_in_flight=4)  # fmt: skip
    assert (s.algorithm, s.params, s.max_in_flight) == (
        "hierarchical",
        {"gpus_per_node": 4, "n_channels": 2, "n_chunks": 3, "max_in_flight": 4},
        4,
    )
    s = reducescatter_allgather_allreduce(4, 4 * 6, n_channels=2, n_chunks=3, max_in_flight=4)
    assert (s.algorithm, s.params) == (
        "reducescatter_allgather", {"n_channels": 2, "n_chunks": 3, "max_in_flight": 4}
    )  # fmt: skip


# (channels, chunks, bytes per piece); one extra byte makes the pieces uneven; 0 bytes.
CUTS = [(1, 1, 5), (2, 3, 7), (1, 2, 0)]


def _size(n: int, channels: int, chunks: int, per_piece: int) -> int:
    # The single block is cut into n x channels x chunks pieces.
    return n * channels * chunks * per_piece + (1 if per_piece else 0)


@pytest.mark.parametrize(("channels", "chunks", "per_piece"), CUTS)
@pytest.mark.parametrize("n", range(1, 17))
def test_hierarchical_computes_allreduce_for_every_node_size(n, channels, chunks, per_piece):
    size = _size(n, channels, chunks, per_piece)
    for g in [*_divisors(n), n + 3]:  # n + 3: more GPUs per node than ranks, one node
        s = hierarchical_allreduce(n, size, gpus_per_node=g, n_channels=channels,
                                   n_chunks=chunks)  # fmt: skip
        check_schedule(s)


@pytest.mark.parametrize(("channels", "chunks", "per_piece"), CUTS)
@pytest.mark.parametrize("n", range(1, 17))
def test_reducescatter_allgather_computes_allreduce(n, channels, chunks, per_piece):
    size = _size(n, channels, chunks, per_piece)
    check_schedule(reducescatter_allgather_allreduce(n, size, n_channels=channels, n_chunks=chunks))


def test_one_rank_moves_nothing():
    assert hierarchical_allreduce(1, 64).n_transfers == 0
    assert reducescatter_allgather_allreduce(1, 64).n_transfers == 0


@pytest.mark.parametrize(("n", "g"), [(12, 8), (6, 4), (10, 3)])
def test_nodes_must_divide_the_ranks(n, g):
    with pytest.raises(ScheduleError) as caught:
        hierarchical_allreduce(n, 64 * n, gpus_per_node=g)
    assert str(caught.value) == (
        f"hierarchical: {n} ranks do not split into nodes of gpus_per_node = {g} GPUs; "
        f"use a gpus_per_node that divides {n}"
    )


def _moves(s):
    return [(t.src, t.dst, t.pieces, t.op, t.channel) for t in s.transfers()]


@pytest.mark.parametrize(("n", "channels", "chunks"), [(2, 1, 1), (5, 2, 3), (8, 1, 4)])
def test_one_node_and_the_composition_move_what_the_ring_moves(n, channels, chunks):
    # With one node (gpus_per_node >= n) phases 1 and 3 are the ring's reduce-scatter and
    # all-gather, phase 2 is empty; the composition is the ring's transfers with a barrier.
    size = n * channels * chunks * 8
    ring = _moves(ring_allreduce(n, size, n_channels=channels, n_chunks=chunks))
    for g in (n, 8):
        s = hierarchical_allreduce(n, size, gpus_per_node=g, n_channels=channels,
                                   n_chunks=chunks)  # fmt: skip
        assert _moves(s) == ring
    composed = reducescatter_allgather_allreduce(n, size, n_channels=channels, n_chunks=chunks)
    assert _moves(composed) == ring


@pytest.mark.parametrize("n", range(1, 17))
def test_hierarchical_volumes_inside_and_across_nodes(n):
    # Phase 1 and phase 3 send g - 1 slices of S/g each inside the node; phase 2 sends
    # 2(m - 1) blocks of S/(g m) across nodes:
    #   inside  2 (g - 1)/g x S,   across  2 (m - 1)/m x S/g,   sent and received alike.
    # S = 720720 x 3 divides by every n <= 16 times 3 pieces (channels x chunks).
    size = 720720 * 3
    for g in _divisors(n):
        m = n // g
        s = hierarchical_allreduce(n, size, gpus_per_node=g, n_chunks=3)
        nbytes = s.transfer_bytes
        inside = s.src // g == s.dst // g
        for mask, want in [(inside, 2 * (g - 1) * size // g),
                           (~inside, 2 * (m - 1) * size // (m * g))]:  # fmt: skip
            sent = np.bincount(s.src[mask], weights=nbytes[mask], minlength=n)
            received = np.bincount(s.dst[mask], weights=nbytes[mask], minlength=n)
            assert sent.tolist() == [want] * n
            assert received.tolist() == [want] * n


@pytest.mark.parametrize("n", range(1, 17))
def test_composition_volumes_are_the_rings(n):
    # n - 1 reduce-scatter and n - 1 all-gather steps of S/n each: 2 (n - 1)/n x S.
    size = 720720
    s = reducescatter_allgather_allreduce(n, size)
    assert s.bytes_sent_per_rank().tolist() == [2 * (n - 1) * size // n] * n
    assert s.bytes_received_per_rank().tolist() == [2 * (n - 1) * size // n] * n


@pytest.mark.parametrize("model", ["ideal", "flow"])
@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
def test_composition_without_chunks_is_as_fast_as_the_ring(n, model):
    # One piece per ring block: every rank's reduce-scatter step s sends S/n once step
    # s - 1 has arrived, alpha + S/(n B) per step; all ranks finish the n - 1 steps at
    # the same moment, so the barrier waits for nothing the ring would not also wait for
    # (its first all-gather send needs the last reduce-scatter arrival as well):
    #   T = 2 (n - 1)(alpha + S/(n B)), the ring's.
    size = n * 2**18
    expected = 2 * (n - 1) * (ALPHA + size / (n * B))
    composed = simulate(_star(n), reducescatter_allgather_allreduce(n, size), model=model)
    ring = simulate(_star(n), ring_allreduce(n, size), model=model)
    assert composed.time_s == pytest.approx(expected, rel=REL)
    assert ring.time_s == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize(
    ("n", "chunks", "channels", "window"),
    list(itertools.product([2, 3, 8], [1, 2, 5], [1, 3], [1, WIDE])),
)
@pytest.mark.parametrize("per_piece_bytes", [1_000, 10**6])
def test_pipelined_composition_is_a_reducescatter_then_an_allgather(
    n, chunks, channels, window, per_piece_bytes
):
    # Channels share a link equally and run in lockstep, so a piece of S/(n C K) takes
    # tau = S/(n K B) (as in tests/test_engine.py). The reduce-scatter alone is n - 1
    # pipelined steps: T_RS = P(n - 1). By symmetry every connection's last transfer ends
    # at T_RS; the barrier releases every all-gather transfer then, all the data it
    # reads is there, every connection is idle, so the all-gather runs as if alone from
    # T_RS: T = 2 P(n - 1). The ring streams both phases: P(2(n - 1)). With an unbounded
    # window, P(m) = alpha + m K tau + (m - 1) X with X = max(0, alpha - (K - 1) tau):
    #   2 P(n - 1) - P(2(n - 1)) = alpha - X = min(alpha, (K - 1) tau)
    # -- the barrier drains the pipeline and fills it again. With a window of 1 every
    # piece costs alpha + tau in sequence anyway, and the two are equal.
    size = n * channels * chunks * per_piece_bytes
    tau = size / (n * chunks) / B
    kwargs = {"n_channels": channels, "n_chunks": chunks, "max_in_flight": window}
    composed = simulate(_star(n), reducescatter_allgather_allreduce(n, size, **kwargs))
    ring = simulate(_star(n), ring_allreduce(n, size, **kwargs))
    half = pipelined_time_s(n - 1, chunks, ALPHA, tau, window)
    assert composed.time_s == pytest.approx(2 * half, rel=REL)
    assert ring.time_s == pytest.approx(
        pipelined_time_s(2 * (n - 1), chunks, ALPHA, tau, window), rel=REL
    )
    barrier_cost = 0.0 if window == 1 else min(ALPHA, (chunks - 1) * tau)
    assert composed.time_s - ring.time_s == pytest.approx(barrier_cost, rel=1e-6, abs=1e-15)


# (nodes m, GPUs per node g): one node, one GPU per node, and real two-level cases.
SHAPES = [(1, 4), (4, 1), (2, 2), (2, 4), (3, 4), (4, 2)]


@pytest.mark.parametrize(("model", "channels"), [("ideal", 1), ("flow", 1), ("flow", 2)])
@pytest.mark.parametrize(("m", "g"), SHAPES)
def test_hierarchical_closed_form_on_a_rail_optimized_cluster(m, g, model, channels):
    # One chunk. Inside a node a rank sends only to the next local rank, over its own
    # NVLink up and that rank's NVLink down; across nodes it sends only to the same local
    # rank of the next node, over its own PCIe, NIC and rail leaf ports. No link carries
    # two flows of one channel, and phases 1 and 3 use only NVLinks, phase 2 only the
    # rails. All ranks are alike, so every phase starts when the last ended:
    #   phase 1: g - 1 steps of S/g:        (g - 1)(a_intra + S/(g B_intra))
    #   phase 2: 2(m - 1) steps of S/(g m): 2 (m - 1)(a_inter + S/(n B_inter))
    #   phase 3: as phase 1.
    # Channels split each transfer C ways and share the links equally (flow model).
    n = m * g
    size = n * channels * 2**16
    expected = 2 * (g - 1) * (A_INTRA + size / (g * B_INTRA)) + 2 * (m - 1) * (
        A_INTER + size / (n * B_INTER)
    )
    s = hierarchical_allreduce(n, size, gpus_per_node=g, n_channels=channels, max_in_flight=WIDE)
    assert simulate(_rails(m, g), s, model=model).time_s == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize(
    ("m", "g", "chunks", "channels"),
    [(3, 4, 4, 1), (2, 2, 3, 2), (4, 2, 5, 1), (2, 4, 2, 2), (1, 4, 3, 1), (4, 1, 3, 1)],
)
def test_pipelined_hierarchical_when_latency_hides_the_chunks(m, g, chunks, channels):
    # K chunks flow through the M = 2(g - 1) + 2(m - 1) steps of the three phases, chunk
    # j of a step once chunk j of the step before has arrived (phase 2 of a chunk needs
    # only that chunk of its slice; phase 3 only that chunk of the all-reduced slice).
    # Piece times: tau_i = S/(g K B_intra) inside nodes, tau_e = S/(n K B_inter) across.
    # With an unbounded window F(s, j) = max(F(s-1, j) + a_s, F(s, j-1)) + tau_s, the
    # longest path through the (step, chunk) grid: every step's latency and piece time
    # once, and the K - 1 moves along chunks on the slowest step:
    #   T = sum(a_s + tau_s) + (K - 1) max(tau_i, tau_e),
    # provided a connection never holds a chunk back: its previous step's last chunk
    # ends at most (K - 1) max(tau) after the first, within the next step's latency,
    # and phase 3 (on the connections of phase 1) starts after phase 1's last chunk.
    # The size below keeps (K - 1) max(tau) <= min(a_intra, a_inter).
    n = m * g
    size = n * channels * chunks * 1000
    tau_i = size / (g * chunks * B_INTRA)
    tau_e = size / (n * chunks * B_INTER)
    assert (chunks - 1) * max(tau_i, tau_e) <= min(A_INTRA, A_INTER)
    expected = (
        2 * (g - 1) * (A_INTRA + tau_i)
        + 2 * (m - 1) * (A_INTER + tau_e)
        + (chunks - 1) * max(tau_i if g > 1 else 0.0, tau_e if m > 1 else 0.0)
    )
    s = hierarchical_allreduce(n, size, gpus_per_node=g, n_channels=channels,
                               n_chunks=chunks, max_in_flight=WIDE)  # fmt: skip
    assert simulate(_rails(m, g), s).time_s == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize(("m", "g"), [(3, 4), (2, 4), (4, 2)])
def test_hierarchical_beats_a_flat_ring_that_crosses_the_nics(m, g):
    # A flat ring over ranks 0..n-1 sends 2(n - 1)/n x S out of every rank, also out of
    # the last GPU of each node, whose successor is in the next node: through its NIC at
    # B_inter, so T_ring >= 2(n - 1)/n x S / B_inter. The hierarchical all-reduce (the
    # closed form above, one chunk) puts only 2(m - 1)/m x S/g on each NIC.
    n = m * g
    size = n * 2**20
    ring = simulate(_rails(m, g), ring_allreduce(n, size)).time_s
    hierarchical = simulate(_rails(m, g), hierarchical_allreduce(n, size, gpus_per_node=g))
    assert ring >= 2 * (n - 1) / n * size / B_INTER
    assert hierarchical.time_s == pytest.approx(
        2 * (g - 1) * (A_INTRA + size / (g * B_INTRA))
        + 2 * (m - 1) * (A_INTER + size / (n * B_INTER)),
        rel=REL,
    )
    assert hierarchical.time_s < ring


@pytest.mark.parametrize(("m", "g", "chunks"), [(3, 4, 8), (2, 4, 4), (4, 2, 6)])
def test_pipelined_hierarchical_bandwidth_bounds(m, g, chunks):
    # Large chunks (bandwidth-bound): no closed form here, but bounds. Each rank's NVLink
    # up must carry 2(g - 1)/g x S and its NIC 2(m - 1)/m x S/g, each at its bandwidth,
    # after at least one latency. And with chunks this large, overlapping the phases (a
    # chunk crosses nodes while the next one is still reduced inside the node) beats the
    # one-chunk closed form above.
    n = m * g
    size = n * chunks * 2**18
    unchunked = 2 * (g - 1) * (A_INTRA + size / (g * B_INTRA)) + 2 * (m - 1) * (
        A_INTER + size / (n * B_INTER)
    )
    s = hierarchical_allreduce(n, size, gpus_per_node=g, n_chunks=chunks, max_in_flight=WIDE)
    t = simulate(_rails(m, g), s).time_s
    lower = max(2 * (g - 1) * size / (g * B_INTRA), 2 * (m - 1) * size / (n * B_INTER))
    assert lower + min(A_INTRA, A_INTER) < t < unchunked


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize(("n_channels", "n_chunks"), [(1, 1), (2, 3)])
def test_gloos_reduce_computes_a_reduce_at_every_root(n: int, n_channels: int,
                                                      n_chunks: int) -> None:  # fmt: skip
    for root in range(n):
        s = reducescatter_gather_reduce(n, 7 * n * n_channels * n_chunks, root=root,
                                        n_channels=n_channels, n_chunks=n_chunks)  # fmt: skip
        check_schedule(s)
        # each non-root rank sends (n - 1)/n of S in the ring and its S/n block to the root
        sent = s.bytes_sent_per_rank().tolist()
        block = 7 * n_channels * n_chunks
        assert sent == [(n - 1) * block + (block if r != root else 0) for r in range(n)]


def test_gloos_reduce_on_a_star_is_the_ring_then_the_gather_into_the_root() -> None:
    # 4 ranks on a star of B-per-direction links and latency a per link (2 a a route),
    # one chunk: 3 ring steps of S/4 each (every GPU's up-link carries one block at a
    # time), then three blocks of S/4 into the root's down-link at once: 3 S / 4 at B.
    bandwidth, latency, size = 10e9, 1e-6, 4_000_000
    graph = switch_star(4, link_bandwidth_bytes_per_s=bandwidth, link_latency_s=latency)
    s = reducescatter_gather_reduce(4, size, root=0)
    ring_s = 3 * (2 * latency + size / 4 / bandwidth)
    gather_s = 2 * latency + 3 * size / 4 / bandwidth
    assert simulate(graph, s).time_s == pytest.approx(ring_s + gather_s, rel=1e-9)
