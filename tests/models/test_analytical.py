"""The analytical models: alpha-beta formulas against the simulator and hand derivations,
and NCCL's tuning model against numbers worked out by hand from its tables.

Notation: n ranks, S bytes (nccl-tests size), B link bandwidth per direction, alpha the
latency of a route (two links on a switch star: GPU -> switch -> GPU), k chunks, W the
in-flight window, tau the wire time of one chunk of one pair.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import math
from pathlib import Path

import pytest

from simcoll.algorithms import ALGORITHMS, build_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.protocols import PROTOCOLS
from simcoll.models import (
    ALPHABETA_ALGORITHMS,
    HOPPER,
    NCCL_PROTOCOLS,
    alphabeta_algorithm_names,
    alphabeta_time_s,
    chain_time_s,
    nccl_estimate,
    nccl_time_s,
    pattern_cost,
)
from simcoll.plan.trees import double_binary_tree
from simcoll.sim.engine import simulate
from simcoll.topology import (
    Router,
    fat_tree,
    full_mesh,
    nvswitch_node,
    pcie_tree,
    ring,
    switch_star,
)

B = 100e9
LINK_S = 1e-6
STAR_ALPHA = 2 * LINK_S
REL = 1e-9
GIB = 2**30


def star(n: int, bandwidth: float = B):
    return switch_star(n, link_bandwidth_bytes_per_s=bandwidth, link_latency_s=LINK_S)


def pipelined(m: int, k: int, alpha: float, tau: float, window: int) -> float:
    """m ring steps of k chunks on one connection (tests/test_engine.py derives W=1 and
    W unbounded): the longest path through the chunks q = 0..mk-1 of a connection moves
    one chunk on (tau: bytes back to back), or jumps to the same chunk of the next step
    (+k, alpha + tau: wait for the arrival, pay latency), or, with a window W, to the
    chunk W further (+W, alpha + tau: wait for chunk q to arrive before issuing q + W).
    The cheapest jump in distance is w = min(W, k); it beats w single moves when
    alpha > (w - 1) tau, and fits floor((mk - 1) / w) times in the mk - 1 moves."""
    w = min(window, k)
    return alpha + m * k * tau + (m * k - 1) // w * max(0.0, alpha - (w - 1) * tau)


def chained(hops: int, k: int, alpha: float, tau: float, window: int) -> float:
    """k chunks through a chain of hops: hops - 1 hop changes and the first hop
    (alpha + tau each) plus k - 1 chunk moves (tau), of which floor((k - 1) / w) may be
    window jumps of w = min(W, k) chunks costing alpha + tau instead of w tau."""
    w = min(window, k)
    return hops * (alpha + tau) + (k - 1) * tau + (k - 1) // w * max(0.0, alpha - (w - 1) * tau)


def assert_agree(topology, collective, algorithm, n, size, expected=None, **params):
    """alpha-beta == flow simulation (== the hand formula when given), to 1e-9."""
    model = {k: params.pop(k) for k in ("rank_nodes",) if k in params}
    schedule = build_schedule(collective, algorithm, n_ranks=n, size_bytes=size, **params)
    simulated = simulate(topology, schedule, **model).time_s
    analytic = alphabeta_time_s(topology, collective, algorithm, n, size, **params, **model)
    assert analytic == pytest.approx(simulated, rel=REL)
    if expected is not None:
        assert analytic == pytest.approx(expected, rel=REL)


# --- ring -----------------------------------------------------------------------------------

RING_CASES = list(itertools.product(["star", "ring"], [2, 5], [1, 4], [1, 2], [1, 2, 10**6]))


@pytest.mark.parametrize(("kind", "n", "chunks", "channels", "window"), RING_CASES)
@pytest.mark.parametrize("per_piece", [1_000, 10**6])
@pytest.mark.parametrize("collective", ["allreduce", "allgather", "reducescatter"])
def test_ring_equals_the_simulator_and_the_pipelined_formula(
    kind, n, chunks, channels, window, per_piece, collective
):
    # Every ring edge has its own links on both topologies; channels share them, so
    # tau = (S / (n k)) / B. All-reduce has m = 2(n - 1) steps, the others n - 1.
    if kind == "ring":
        topo, alpha = ring(n, link_bandwidth_bytes_per_s=B, link_latency_s=LINK_S), LINK_S
    else:
        topo, alpha = star(n), STAR_ALPHA
    size = n * channels * chunks * per_piece
    m = 2 * (n - 1) if collective == "allreduce" else n - 1
    expected = pipelined(m, chunks, alpha, size / (n * chunks) / B, window)
    assert_agree(topo, collective, "ring", n, size, expected, n_channels=channels,
                 n_chunks=chunks, max_in_flight=window)  # fmt: skip


@pytest.mark.parametrize(
    ("n", "chunks", "window", "root"),
    list(itertools.product([2, 3, 5], [1, 4], [1, 2, 10**6], [0, 1])),
)
@pytest.mark.parametrize("collective", ["broadcast", "reduce"])
def test_ring_broadcast_and_reduce_are_pipelined_chains(n, chunks, window, root, collective):
    # n - 1 hops on a star, tau = (S / k) / B.
    size = 4096 * chunks
    expected = chained(n - 1, chunks, STAR_ALPHA, size / chunks / B, window)
    assert_agree(star(n), collective, "ring", n, size, expected, n_chunks=chunks,
                 max_in_flight=window, root=root)  # fmt: skip


def test_chain_closed_form_matches_the_hand_formula():
    for hops, k, window in itertools.product([1, 3], [1, 2, 7], [1, 3, 100]):
        assert chain_time_s(hops, k, 2.0, 0.5, window) == chained(hops, k, 2.0, 0.5, window)


# --- direct and reduce_broadcast ------------------------------------------------------------

DIRECT = {
    # collective: (pairs through the busiest star link, bytes each pair moves, steps)
    # all-gather, reduce-scatter, all-to-all: every rank sends S/n to each of the n - 1
    # others, so its uplink (and every downlink) carries n - 1 pairs.
    "allgather": (lambda n: n - 1, lambda s, n: s / n, 1),
    "reducescatter": (lambda n: n - 1, lambda s, n: s / n, 1),
    "alltoall": (lambda n: n - 1, lambda s, n: s / n, 1),
    # all-reduce: a direct reduce-scatter, then a direct all-gather (2 steps).
    "allreduce": (lambda n: n - 1, lambda s, n: s / n, 2),
    # broadcast and scatter load the root's uplink, reduce and gather its downlink.
    "broadcast": (lambda n: n - 1, lambda s, n: s, 1),
    "reduce": (lambda n: n - 1, lambda s, n: s, 1),
    "scatter": (lambda n: n - 1, lambda s, n: s / n, 1),
    "gather": (lambda n: n - 1, lambda s, n: s / n, 1),
    # send/recv: each rank sends S to its successor, one pair per link.
    "sendrecv": (lambda n: 1, lambda s, n: s, 1),
}


@pytest.mark.parametrize(
    ("n", "chunks", "window"), list(itertools.product([2, 3, 5], [1, 3], [1, 2, 10**6]))
)
@pytest.mark.parametrize("collective", sorted(DIRECT))
def test_direct_shares_the_uplink_as_derived(collective, n, chunks, window):
    # P(steps, k) with tau = (bytes / k) / (B / pairs on the busiest link).
    sharing, per_pair, steps = DIRECT[collective]
    size = n * n * chunks * 1000
    tau = per_pair(size, n) / chunks / (B / sharing(n))
    expected = pipelined(steps, chunks, STAR_ALPHA, tau, window)
    assert_agree(star(n), collective, "direct", n, size, expected, n_chunks=chunks,
                 max_in_flight=window)  # fmt: skip


@pytest.mark.parametrize(
    ("n", "chunks", "window"), [(3, 1, 8), (4, 1, 8), (4, 5, 2), (5, 5, 10**6)]
)
def test_reduce_broadcast_is_a_two_hop_chain(n, chunks, window):
    # Reduce into the root (its downlink carries n - 1 pairs) then broadcast from it (its
    # uplink carries n - 1): two hops of tau = (S / k) / (B / (n - 1)).
    size = n * chunks * 10**4
    expected = chained(2, chunks, STAR_ALPHA, size / chunks * (n - 1) / B, window)
    assert_agree(star(n), "allreduce", "reduce_broadcast", n, size, expected, n_chunks=chunks,
                 max_in_flight=window)  # fmt: skip


# --- in-network reduction -------------------------------------------------------------------


def nvswitch(n: int):
    # 4 NVLinks of 25 GB/s per GPU: B = 100 GB/s; one GPU-switch hop: alpha = 1 us.
    return nvswitch_node(n, nvlinks_per_gpu=4, nvlink_bandwidth_bytes_per_s=25e9,
                         nvlink_latency_s=LINK_S, nvls=True)  # fmt: skip


@pytest.mark.parametrize(
    ("n", "chunks", "window"), list(itertools.product([2, 4, 12], [1, 3], [1, 2, 10**6]))
)
def test_nvls_reduce_scatter_and_all_gather(n, chunks, window):
    # alpha = one GPU-switch link. Reduce-scatter: a GPU's up connection carries all n
    # blocks (n k pieces of S / (n k)), then block r's last piece comes down:
    # P(1, n k) + alpha + tau (paced at B: the up link is the busiest). All-gather: block
    # r goes up, and each GPU's down connection carries the n k pieces of every block
    # (multimem.st writes the storing GPU too); the down links are the busiest (S each),
    # so the store (S / n) is paced at B / n and its first piece takes n tau:
    # alpha + n tau + P(1, n k).
    size = n * chunks * 6000
    topo = nvswitch(n)
    params = {"n_chunks": chunks, "max_in_flight": window}
    tau = size / (n * chunks) / B
    rs = pipelined(1, n * chunks, LINK_S, tau, window) + LINK_S + tau
    assert_agree(topo, "reducescatter", "nvls", n, size, rs, **params)
    ag = LINK_S + n * tau + pipelined(1, n * chunks, LINK_S, tau, window)
    assert_agree(topo, "allgather", "nvls", n, size, ag, **params)


@pytest.mark.parametrize("window", [2, 8, 10**6])
def test_nvls_all_reduce_unchunked_on_two_gpus_by_hand(window):
    # n = 2, k = 1, shard h = S/2, tau = h / B, a = one GPU-switch link (a > tau). Every
    # uplink carries 3 h (both shards up, its own shard's store): the busiest links, 3 tau.
    # Paced, the reduce leg (2 h) moves at 2 h / 3 tau = 2 B / 3, the store (h) at B / 3.
    # Each uplink sends shard 0 then shard 1 up, 1.5 tau each: in at a + 1.5 tau and
    # a + 3 tau. Shard 0's sum comes down to GPU 0 (the switch's send, not paced): in at
    # 2a + 2.5 tau; GPU 0 stores it up at B / 3: in at 3a + 5.5 tau; the switch writes it
    # to both GPUs: 4a + 6.5 tau. Shard 1: its sum in at GPU 1 at 2a + 4 tau, stored by
    # 3a + 7 tau, written to both: 4a + 8 tau. The form, an upper estimate, is tau above.
    size = 2 * 6000
    tau = size / 2 / B
    params = {"n_chunks": 1, "max_in_flight": window}
    schedule = build_schedule("allreduce", "nvls", n_ranks=2, size_bytes=size, **params)
    assert simulate(nvswitch(2), schedule).time_s == pytest.approx(8 * tau + 4 * LINK_S, rel=REL)
    analytic = alphabeta_time_s(nvswitch(2), "allreduce", "nvls", 2, size, **params)
    assert analytic == pytest.approx(9 * tau + 4 * LINK_S, rel=REL)


@pytest.mark.parametrize("n", [2, 3, 8])
def test_nvls_all_reduce_is_within_1pct_of_flow_when_pipelined(n):
    # 64 chunks per shard: every link carries (n + 1) x 64 pieces; the form's fill
    # ((n + 4) tau at the legs' pace) is off the simulated one by at most tau.
    size = n * 64 * 60000
    params = {"n_chunks": 64, "max_in_flight": 8}
    schedule = build_schedule("allreduce", "nvls", n_ranks=n, size_bytes=size, **params)
    simulated = simulate(nvswitch(n), schedule).time_s
    analytic = alphabeta_time_s(nvswitch(n), "allreduce", "nvls", n, size, **params)
    assert analytic == pytest.approx(simulated, rel=0.01)
    assert analytic >= (n + 1) * size / (n * B)  # no link moves its pieces faster than B


def test_nvls_all_reduce_tends_to_s_n_plus_1_over_n_b():
    # 4 alpha + ((n + 1) k + n + 4) tau with tau = S / (n k B): (n + 1) S / (n B) for
    # many chunks.
    n, size, k = 8, 64 * 2**20, 64
    t = alphabeta_time_s(nvswitch(n), "allreduce", "nvls", n, size, n_chunks=k,
                         max_in_flight=10**6)  # fmt: skip
    tau = size / (n * k * B)
    assert t == pytest.approx(4 * LINK_S + (n + 1) * size / (n * B) + (n + 4) * tau, rel=REL)


def sharp_tree(leaf_down_ports: int):
    # 2 nodes x 4 GPUs, 2 NICs per node: GPUs i and i+1 share a PCIe switch to their NIC.
    return fat_tree(2, gpus_per_node=4, nvlinks_per_gpu=4, nvlink_bandwidth_bytes_per_s=25e9,
                    nvlink_latency_s=0.5e-6, nics_per_node=2, nic_bandwidth_bytes_per_s=50e9,
                    nic_latency_s=1e-6, pcie_bandwidth_bytes_per_s=64e9, pcie_latency_s=0.5e-6,
                    leaf_down_ports=leaf_down_ports, fabric_latency_s=0.7e-6,
                    sharp=True)  # fmt: skip


@pytest.mark.skipif((Collective.ALLREDUCE, "sharp") not in ALGORITHMS, reason="no sharp")
@pytest.mark.parametrize(("chunks", "window"), [(1, 8), (3, 1), (3, 10**6)])
def test_sharp_on_one_leaf_is_a_two_hop_chain(chunks, window):
    # One leaf holds all 4 NICs, so it is the group switch. Up: GPU -> PCIe switch (0.5
    # us) -> NIC (0.5 us) -> leaf (1 us): alpha = 2 us; two GPUs' pieces share their PCIe
    # switch's link to the NIC (64/2 GB/s) and the NIC's link (50/2 GB/s): B = 25 GB/s.
    # Down is the mirror image.
    n, size = 8, 8 * 3 * 10**4
    tau = size / chunks / 25e9
    expected = chained(2, chunks, 2e-6, tau, window)
    assert_agree(sharp_tree(32), "allreduce", "sharp", n, size, expected, n_chunks=chunks,
                 max_in_flight=window, ranks_per_switch=n)  # fmt: skip


@pytest.mark.skipif((Collective.ALLREDUCE, "sharp") not in ALGORITHMS, reason="no sharp")
@pytest.mark.parametrize("chunks", [1, 3])
def test_sharp_two_levels_matches_the_simulator(chunks):
    # 2 leaves (2 NICs each) under spines: groups of 4 ranks, a 4-hop chain.
    assert_agree(sharp_tree(2), "allreduce", "sharp", 8, 8 * 3 * 10**4, n_chunks=chunks,
                 ranks_per_switch=4)  # fmt: skip


# --- protocols and the ideal model ----------------------------------------------------------


@pytest.mark.parametrize("name", ["LL", "LL128", "simple"])
def test_a_protocol_adds_its_step_latency_and_divides_the_bandwidth(name):
    # alpha = 2 us + the protocol's NVLink step latency; B = 100 GB/s x efficiency.
    protocol = PROTOCOLS[name]
    n, size = 4, 4 * 10**6
    schedule = build_schedule("allreduce", "ring", n_ranks=n, size_bytes=size)
    simulated = simulate(star(n), schedule, protocol=protocol).time_s
    alpha = STAR_ALPHA + protocol.step_latency_s["nvlink"]
    expected = 2 * (n - 1) * (alpha + size / n / (B * protocol.efficiency))
    analytic = alphabeta_time_s(star(n), "allreduce", "ring", n, size, protocol=name)
    assert analytic == pytest.approx(expected, rel=REL)
    assert analytic == pytest.approx(simulated, rel=REL)


def test_without_contention_every_pair_gets_its_route():
    # With 2 channels each moving half of every block: a direct broadcast takes
    # alpha + (S / 2) / B instead of alpha + (n - 1) S / B (the root's uplink no longer
    # shared), a ring step alpha + (S / (2 n)) / B.
    n, size = 4, 4 * 2 * 10**5
    for collective, algorithm, expected in [
        ("broadcast", "direct", STAR_ALPHA + size / 2 / B),
        ("allreduce", "ring", 2 * (n - 1) * (STAR_ALPHA + size / (2 * n) / B)),
    ]:
        schedule = build_schedule(collective, algorithm, n_ranks=n, size_bytes=size,
                                  n_channels=2)  # fmt: skip
        ideal = simulate(star(n), schedule, model="ideal").time_s
        analytic = alphabeta_time_s(star(n), collective, algorithm, n, size, n_channels=2,
                                    contention=False)  # fmt: skip
        assert analytic == pytest.approx(expected, rel=REL)
        assert analytic == pytest.approx(ideal, rel=REL)


# --- placement: the k_max rule --------------------------------------------------------------


def two_by_two():
    """2 servers x 2 GPUs, one NIC per server behind a PCIe switch, on one leaf.

    Between servers a route is GPU -> PCIe switch -> NIC -> leaf -> NIC -> PCIe switch ->
    GPU: alpha = 0.25 + 0.25 + 1 + 1 + 0.25 + 0.25 = 3 us; within a server GPU -> NVSwitch
    -> GPU: 2 x 0.2 = 0.4 us at 4 x 25 = 100 GB/s (fewer microseconds than the other
    two-hop path, GPU -> PCIe switch -> GPU, so the router takes it).
    """
    return fat_tree(2, gpus_per_node=2, nvlinks_per_gpu=4, nvlink_bandwidth_bytes_per_s=25e9,
                    nvlink_latency_s=0.2e-6, nics_per_node=1, nic_bandwidth_bytes_per_s=50e9,
                    nic_latency_s=1e-6, pcie_bandwidth_bytes_per_s=64e9, pcie_latency_s=0.25e-6,
                    fabric_latency_s=0.7e-6)  # fmt: skip


INTERLEAVED = ("gpu0", "gpu2", "gpu1", "gpu3")  # ranks alternate between the servers
CROSS_ALPHA, NIC, INTRA_ALPHA = 3e-6, 50e9, 0.4e-6


def test_a_badly_placed_ring_runs_at_the_pace_of_its_most_loaded_link():
    # Ring 0 -> 1 -> 2 -> 3 -> 0 on GPUs 0, 2, 1, 3: every edge crosses servers, and
    # gpu0 -> gpu2 and gpu1 -> gpu3 both leave through server 0's single NIC (likewise
    # the two edges going back): k_max = 2 on the NIC links (and on the PCIe switch-NIC
    # links, 64/2 = 32 GB/s > 50/2), so B = 50 / 2 GB/s.
    topo = two_by_two()
    edges = [(0, 1), (1, 2), (2, 3), (3, 0)]
    bad = pattern_cost(topo, edges, rank_nodes=INTERLEAVED)
    assert (bad.k_max, bad.alpha_s) == (2, pytest.approx(CROSS_ALPHA, rel=REL))
    assert bad.bandwidth_bytes_per_s == NIC / 2
    assert bad.busiest_link in {("node0.nic0", "leaf0"), ("leaf0", "node0.nic0"),
                                ("node1.nic0", "leaf0"), ("leaf0", "node1.nic0")}  # fmt: skip
    # In rank order only 1 -> 2 and 3 -> 0 cross, one per NIC direction.
    assert pattern_cost(topo, edges, n_ranks=4).k_max == 1
    # DESIGN.md: T = 2 (N - 1)(alpha_max + k_max (M / N) / B), exact here because the
    # four edges are symmetric (same route, same load).
    n, size = 4, 4 * 10**5
    expected = 2 * (n - 1) * (CROSS_ALPHA + 2 * (size / n) / NIC)
    assert_agree(topo, "allreduce", "ring", n, size, expected, rank_nodes=INTERLEAVED)
    # Pipelined too: tau = (S / (n k)) / (B / 2).
    expected = pipelined(2 * (n - 1), 4, CROSS_ALPHA, size / (n * 4) / (NIC / 2), 8)
    assert_agree(topo, "allreduce", "ring", n, size, expected, n_chunks=4,
                 rank_nodes=INTERLEAVED)  # fmt: skip


def test_in_order_placement_halves_the_bandwidth_term():
    # In rank order two edges cross the servers, each with a NIC of its own (50 GB/s,
    # alpha 3 us), and two stay inside one (NVSwitch, 100 GB/s, 0.4 us): an uneven ring.
    # Each pair sends its 2 (N - 1) steps back to back, so the ring takes at least
    # alpha_max + 6 M/(N B) (its slowest pair's bytes, the others' slack hiding the
    # latency); and the steps go round the ring, so at least 6 (mean alpha + mean tau).
    # Large M: the first, exactly what the flow model gives, against the interleaved
    # ring's 6 (alpha + 2 M/(N B)): a ratio that tends to 2 from above.
    topo = two_by_two()
    size = 4 * 2**26
    bad = alphabeta_time_s(topo, "allreduce", "ring", 4, size, rank_nodes=INTERLEAVED)
    step = (size / 4) / NIC
    expected = CROSS_ALPHA + 6 * step
    assert_agree(topo, "allreduce", "ring", 4, size, expected)
    assert bad / expected == pytest.approx(6 * (CROSS_ALPHA + 2 * step) / expected, rel=REL)
    assert 2 < bad / expected < 2.01
    # Small M: the cycle round the ring binds, 6 ((3 + 0.4) / 2 us + (step + step / 2) / 2),
    # an estimate within 3.1 % of the flow model (which starts an intra-server step before
    # the slow pair's latency has passed).
    size = 4 * 10**5
    step = (size / 4) / NIC
    cycle = 6 * ((CROSS_ALPHA + INTRA_ALPHA) / 2 + (step + step / 2) / 2)
    assert cycle > CROSS_ALPHA + 6 * step
    analytic = alphabeta_time_s(topo, "allreduce", "ring", 4, size)
    assert analytic == pytest.approx(cycle, rel=REL)
    schedule = build_schedule("allreduce", "ring", n_ranks=4, size_bytes=size)
    assert analytic == pytest.approx(simulate(topo, schedule).time_s, rel=0.031)


# --- textbook algorithms --------------------------------------------------------------------


def registered(collective: str, algorithm: str) -> bool:
    return (Collective.parse(collective), algorithm) in ALGORITHMS


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_bruck_and_pairwise(n):
    # Bruck all-gather: ceil(log2 n) steps sending min(2^i, n - 2^i) blocks of S/n, n - 1
    # blocks in all: ceil(log2 n) alpha + (n - 1)/n S / B. Pairwise all-to-all: n - 1
    # steps of one block: (n - 1)(alpha + S / (n B)). One uplink and downlink per pair.
    size = n * 3000
    steps = math.ceil(math.log2(n))
    bruck = steps * STAR_ALPHA + (n - 1) / n * size / B
    pairwise = (n - 1) * (STAR_ALPHA + size / n / B)
    for collective, algorithm, expected in [
        ("allgather", "bruck", bruck),
        ("alltoall", "pairwise", pairwise),
    ]:
        if registered(collective, algorithm):
            assert_agree(star(n), collective, algorithm, n, size, expected)
        t = alphabeta_time_s(star(n), collective, algorithm, n, size)
        assert t == pytest.approx(expected, rel=REL)


def test_bruck_all_to_all_sends_half_the_buffer_each_step():
    # n = 8: step i sends the 4 blocks whose distance has bit i set: 3 (alpha + S/(2B)).
    n, size = 8, 8 * 1000
    t = alphabeta_time_s(star(n), "alltoall", "bruck", n, size)
    assert t == pytest.approx(3 * (STAR_ALPHA + size / 2 / B), rel=REL)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_halving_doubling_on_powers_of_two(n):
    # Rabenseifner: log2 n halving steps (S/2, S/4, ... S/n) and as many doubling steps:
    # 2 log2(n) alpha + 2 (n - 1)/n S / B; reduce-scatter and all-gather one half each.
    size = n * 8000
    steps = n.bit_length() - 1
    half = steps * STAR_ALPHA + (n - 1) / n * size / B
    for collective, expected in [
        ("allreduce", 2 * half),
        ("reducescatter", half),
        ("allgather", half),
    ]:
        if registered(collective, "halving_doubling"):
            assert_agree(star(n), collective, "halving_doubling", n, size, expected)
        t = alphabeta_time_s(star(n), collective, "halving_doubling", n, size)
        assert t == pytest.approx(expected, rel=REL)


def test_halving_doubling_folds_other_rank_counts_in_two_extra_steps():
    # n = 6: p = 4; ranks 0 and 2 add S into 1 and 3 (alpha + S/B), the 4 others run the
    # power-of-two algorithm (4 alpha + 2 (3/4) S/B), and the result goes back (alpha +
    # S/B) (Thakur, Rabenseifner & Gropp 2005).
    n, size = 6, 6 * 4000
    expected = 2 * (STAR_ALPHA + size / B) + 4 * STAR_ALPHA + 2 * 3 / 4 * size / B
    t = alphabeta_time_s(star(n), "allreduce", "halving_doubling", n, size)
    assert t == pytest.approx(expected, rel=REL)


def test_each_step_pays_its_own_route():
    # Halving-doubling on 2 x 2 GPUs: the distance-2 steps cross servers, two pairs per
    # NIC (B = 50/2 GB/s, alpha 3 us) and carry S/2; the distance-1 steps stay on the
    # NVSwitch (100 GB/s, 0.4 us) and carry S/4. Halving goes 2 then 1, doubling 1 then 2.
    n, size = 4, 4 * 10**5
    expected = 2 * (CROSS_ALPHA + size / 2 / (NIC / 2)) + 2 * (INTRA_ALPHA + size / 4 / 100e9)
    if registered("allreduce", "halving_doubling"):
        assert_agree(two_by_two(), "allreduce", "halving_doubling", n, size, expected)
    t = alphabeta_time_s(two_by_two(), "allreduce", "halving_doubling", n, size)
    assert t == pytest.approx(expected, rel=REL)


def test_nccl_double_binary_tree():
    # NCCL's first tree on 8 ranks (src/graph/trees.cc): 0 -> 4; 4 -> 2, 6; 2 -> 1, 3;
    # 6 -> 5, 7. The second mirrors it (n even): rank r's parent is 7 - parent(7 - r),
    # so its root is 7, with child 3; 3 -> 5, 1; 5 -> 6, 4; 1 -> 2, 0.
    first, second = double_binary_tree(8)
    assert first.parent == (-1, 2, 4, 2, 0, 6, 4, 6)
    assert second.parent == (1, 3, 1, 7, 5, 3, 5, -1)
    depths = (first.depth(), second.depth(), double_binary_tree(5)[1].depth())
    assert depths == (3, 3, 3)
    # All-reduce over depth D = 3 on a star, each tree S/2 in k chunks:
    # 2 D (alpha + tau) + 2 (k - 1) tau with tau = S / (k B); with many chunks
    # 2 D alpha + 2 S / B (each rank sends 2S in all).
    n, size = 8, 8 * 2**20
    for k in (1, 16):
        tau = size / k / B
        t = alphabeta_time_s(star(n), "allreduce", "tree", n, size, n_chunks=k)
        assert t == pytest.approx(6 * (STAR_ALPHA + tau) + 2 * (k - 1) * tau, rel=REL)


@pytest.mark.parametrize("root", [0, 3])
def test_binomial_trees(root):
    # Broadcast, n = 5, binomial tree in relative ranks: 0 -> 4, 2, 1 at once and 2 -> 3.
    # On a star the root's three sends share its link: alpha + 3 S/B, then alpha + S/B
    # for the second level: 2 alpha + 4 S/B. Reduce, as MPICH runs it: the root adds in
    # rank 1's sum, then rank 2's (which has 3's), then rank 4's, one after another:
    # ceil(log2 5) = 3 steps of alpha + S/B.
    # Scatter/gather, n = 8: 3 steps of 4, 2, 1 blocks: 3 alpha + 7/8 S/B.
    size = 5 * 8 * 1000
    t = alphabeta_time_s(star(8), "broadcast", "tree", 5, size, root=root)
    assert t == pytest.approx(2 * STAR_ALPHA + 4 * size / B, rel=REL)
    t = alphabeta_time_s(star(8), "reduce", "tree", 5, size, root=root)
    assert t == pytest.approx(3 * STAR_ALPHA + 3 * size / B, rel=REL)
    for collective in ("scatter", "gather"):
        t = alphabeta_time_s(star(8), collective, "tree", 8, size, root=root)
        assert t == pytest.approx(3 * STAR_ALPHA + 7 / 8 * size / B, rel=REL)


def test_hierarchical_and_reducescatter_allgather():
    # On 2 x 2 GPUs (g = 2 per host, N = 2 hosts): ring reduce-scatter and all-gather
    # inside each host, (g - 1)(0.4 us + (S/g)/100 GB/s) each; ring all-reduce of S/g
    # across hosts, 2 (N - 1)(3 us + (S/g/N) / (50/2 GB/s)): ranks 0 -> 2 and 1 -> 3
    # share server 0's NIC.
    n, size = 4, 4 * 10**5
    intra = INTRA_ALPHA + size / 2 / 100e9
    inter = 2 * (CROSS_ALPHA + size / 2 / 2 / (NIC / 2))
    t = alphabeta_time_s(two_by_two(), "allreduce", "hierarchical", n, size)
    assert t == pytest.approx(2 * intra + inter, rel=REL)
    # Reduce-scatter then all-gather, not overlapped: 2 (n - 1)(alpha + S / (n B)).
    t = alphabeta_time_s(star(n), "allreduce", "reducescatter_allgather", n, size)
    assert t == pytest.approx(2 * (n - 1) * (STAR_ALPHA + size / n / B), rel=REL)


# --- edges and errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("collective", "algorithm"), sorted((c.value, a) for c, a in ALPHABETA_ALGORITHMS)
)
def test_one_rank_takes_no_time(collective, algorithm):
    assert alphabeta_time_s(star(2), collective, algorithm, 1, 64) == 0.0


def test_an_empty_message_still_pays_latency_like_the_simulator():
    # Zero-byte transfers still cross their routes: 2 (n - 1) alpha.
    assert_agree(star(4), "allreduce", "ring", 4, 0, 6 * STAR_ALPHA)


def test_every_registered_algorithm_has_a_formula():
    missing = sorted((c.value, a) for c, a in ALGORITHMS if (c, a) not in ALPHABETA_ALGORITHMS)
    assert not missing, f"no alpha-beta formula for {missing}"


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ConfigError, match=r"^no alpha-beta formula for sendrecv/ring; valid: "
                                          r"direct$"):  # fmt: skip
        alphabeta_time_s(star(4), "sendrecv", "ring", 4, 64)
    with pytest.raises(ConfigError, match="unknown collective 'all_reduce'"):
        alphabeta_time_s(star(4), "all_reduce", "ring", 4, 64)
    assert alphabeta_algorithm_names(Collective.BROADCAST) == ["direct", "msb_tree", "ring", "tree"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ({"n_ranks": 9}, "switch_star_8 has 8 GPUs, fewer than the 9 ranks asked for"),
        ({"size_bytes": 10}, "allgather size 10 B does not divide into 8 equal blocks"),
        ({"n_chunks": 0}, "n_chunks must be a positive integer, got 0"),
        ({"root": 8}, "root 8 is not a rank of 8"),
        ({"algorithm": "nvls"}, "nvls needs a switch that reduces in the network"),
    ],
)
def test_bad_inputs_are_refused(call, message):
    args = {"collective": "allgather", "algorithm": "ring", "n_ranks": 8, "size_bytes": 64}
    args |= call
    with pytest.raises(ConfigError, match=message):
        alphabeta_time_s(star(8), **args)


def test_hierarchical_needs_equal_hosts():
    g = two_by_two()
    g.nodes["gpu1"]["host"] = "node1"  # 1 + 3 ranks
    with pytest.raises(ConfigError, match=r"hierarchical needs the same number of ranks on every "
                                          r"host; got \[1, 3\]"):  # fmt: skip
        alphabeta_time_s(g, "allreduce", "hierarchical", 4, 64)


FORBIDDEN = ("simpy", "simcoll.sim.engine", "simcoll.network.fabric", "matplotlib")


def test_a_router_can_be_reused_across_calls():
    topo = two_by_two()
    router = Router(topo)
    first = alphabeta_time_s(topo, "allreduce", "ring", 4, 4000, router=router)
    assert router.route("gpu1", "gpu2")  # cached by the first call
    assert alphabeta_time_s(topo, "allreduce", "ring", 4, 4000, router=router) == first
    with pytest.raises(ConfigError, match="router routes another topology"):
        alphabeta_time_s(star(4), "allreduce", "ring", 4, 4000, router=router)


def test_the_analytical_package_stays_off_the_engine():
    package = Path(__file__).resolve().parents[2] / "simcoll" / "models"
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )  # fmt: skip
            for name in names:
                assert not name.startswith(FORBIDDEN), f"{path.name} imports {name}"


# --- NCCL's tuning model --------------------------------------------------------------------


def star300():
    return switch_star(8, link_bandwidth_bytes_per_s=300e9, link_latency_s=0.5e-6)


def us(x: float) -> float:
    return x * 1e-6


def test_nccl_ring_simple_all_reduce_by_hand():
    # 8 GPUs of 300 GB/s on one switch, 8 channels of bwIntra = 300/8 GB/s:
    # busBw = nChannels x bwIntra = 300; algBw = busBw x n / nsteps = 300 x 8/14.
    # lat = baseLat(ring, simple) + nsteps x hwLat(NVLink, ring, simple) = 8.4 + 14 x 3.4.
    # time_us = lat + nBytes / (1000 x algBw).
    e = nccl_estimate(star300(), "allreduce", "ring", "simple", 8, GIB, n_channels=8)
    algbw = 300 * 8 / 14
    assert e.latency_s == pytest.approx(us(8.4 + 14 * 3.4), rel=REL)
    assert e.bus_bandwidth_bytes_per_s == pytest.approx(300e9, rel=REL)
    assert e.algorithm_bandwidth_bytes_per_s == pytest.approx(algbw * 1e9, rel=REL)
    assert e.time_s == pytest.approx(us(56.0 + GIB / (1000 * algbw)), rel=REL)
    assert (e.n_nodes, e.intra_link) == (1, "nvlink")


def test_nccl_ring_ll_and_ll128_by_hand():
    # LL: busBw = min(llMaxBw = 141, 0.5 x 300); lat = 6.6 + 14 x 0.6.
    t = nccl_time_s(star300(), "allreduce", "ring", "LL", 8, 65536, n_channels=8)
    assert t == pytest.approx(us(6.6 + 14 * 0.6 + 65536 / (1000 * 141 * 8 / 14)), rel=REL)
    # LL128 with 4 channels: busBw = min(0.92 x 300, 4 x 36.7) = 146.8; lat = 14 + 14 x 1.9.
    t = nccl_time_s(star300(), "allreduce", "ring", "ll128", 8, 2**20, n_channels=4)
    assert t == pytest.approx(us(14 + 14 * 1.9 + 2**20 / (1000 * 146.8 * 8 / 14)), rel=REL)


def cluster(n_nodes: int):
    # 8 H100-like GPUs per server (18 NVLinks x 25 GB/s = 450 GB/s) and 8 NICs of
    # 50 GB/s: a server sends 400 GB/s into the fabric.
    return fat_tree(n_nodes, gpus_per_node=8, nvlinks_per_gpu=18,
                    nvlink_bandwidth_bytes_per_s=25e9, nvlink_latency_s=0.5e-6,
                    nic_bandwidth_bytes_per_s=50e9, nic_latency_s=1e-6,
                    pcie_bandwidth_bytes_per_s=64e9, pcie_latency_s=0.5e-6,
                    fabric_latency_s=0.7e-6)  # fmt: skip


def test_nccl_tree_on_four_nodes_by_hand():
    # 32 ranks on 4 nodes (ppn 8): bw = min(450, 400) = 400; busBw = min(0.92 x 400,
    # 8 channels x perChMaxTreeBw(N4) = 8 x 36.0) = 288; algBw = 288 / 2 = 144.
    # lat = 8.4 + 2 ((8 - 1) x hwLat(NVLink, tree, simple) 4.0 + log2(4) x hwLat(NET,
    # tree, simple) 14.0) = 8.4 + 2 (28 + 28) = 120.4.
    # 1 MiB: treeCorrectionFactor[simple][log2(2^20 / 64) = 14] = 0.5; 1 GiB: none.
    topo = cluster(4)
    e = nccl_estimate(topo, "allreduce", "tree", "simple", 32, 2**20, n_channels=8)
    assert e.algorithm_bandwidth_bytes_per_s == pytest.approx(144e9, rel=REL)
    assert e.time_s == pytest.approx(us(120.4 + 2**20 / (1000 * 144 * 0.5)), rel=REL)
    t = nccl_time_s(topo, "allreduce", "tree", "simple", 32, GIB, n_channels=8)
    assert t == pytest.approx(us(120.4 + GIB / (1000 * 144)), rel=REL)


def test_nccl_ring_across_two_nodes_by_hand():
    # 16 ranks on 2 nodes: nsteps 30, nInterSteps 2 (nNodes - 1) = 2; netOverhead 1 us
    # x 3 for simple = 3 < intraLat 3.4; interLat = hwLat(NET, ring, simple) = 14.
    # lat = 8.4 + 28 x 3.4 + 2 x 14 = 131.6, x 1.4 (ring plateau: 1 GiB / (8 x 16) >= 64).
    # busBw = min(450, 400) = 400; algBw = 400 x 16 / 30.
    t = nccl_time_s(cluster(2), "allreduce", "ring", "simple", 16, GIB, n_channels=8)
    assert t == pytest.approx(us(131.6 * 1.4 + GIB / (1000 * 400 * 16 / 30)), rel=REL)


def test_nccl_nvls_by_hand():
    # NVSwitch box with NVLink SHARP, 450 GB/s per GPU, 16 channels of 450/16 GB/s:
    # all-reduce intraBw = 450/16 x 0.85 x 15/16 x 2 per channel; busBw = 16 x that;
    # algBw = busBw x 8/14; lat = hwLat(NVLink, NVLS) = 25 us.
    # all-gather: x (ppn - 1)/ppn = 7/8 instead of 2, algBw = busBw x 8/7.
    topo = nvswitch_node(8, nvlinks_per_gpu=18, nvlink_bandwidth_bytes_per_s=25e9,
                         nvlink_latency_s=0.5e-6, nvls=True)  # fmt: skip
    ar = 450 * 0.85 * 15 / 16 * 2 * 8 / 14
    t = nccl_time_s(topo, "allreduce", "nvls", "simple", 8, GIB, n_channels=16)
    assert t == pytest.approx(us(25 + GIB / (1000 * ar)), rel=REL)
    ag = 450 * 0.85 * 15 / 16 * 7 / 8 * 8 / 7
    t = nccl_time_s(topo, "allgather", "nvls", "simple", 8, GIB, n_channels=16)
    assert t == pytest.approx(us(25 + GIB / (1000 * ag)), rel=REL)


def test_nccl_ring_broadcast_latency():
    # Broadcast: nsteps = n, algBw = busBw x n / n = 300; lat = 8.4 + hwLat(NVLink, ring,
    # simple) when all channels are the same ring, else 8.4 + n x hwLat(NVLink, tree,
    # simple) = 8.4 + 8 x 4.0.
    t = nccl_time_s(star300(), "broadcast", "ring", "simple", 8, GIB, n_channels=8)
    assert t == pytest.approx(us(8.4 + 3.4 + GIB / (1000 * 300)), rel=REL)
    different = dataclasses.replace(HOPPER, same_channels=False)
    t = nccl_time_s(star300(), "broadcast", "ring", "simple", 8, GIB, n_channels=8,
                    constants=different)  # fmt: skip
    assert t == pytest.approx(us(8.4 + 8 * 4.0 + GIB / (1000 * 300)), rel=REL)


def test_nccl_reads_the_pci_row_on_a_pcie_machine():
    # 4 GPUs on CPU root ports: intra routes cross PCIe, so tree LL pays hwLat(PCI, tree,
    # LL) = 1.0 per intra hop: lat = 6.8 + 2 x (4 - 1) x 1.0; LL128 is off there.
    topo = pcie_tree(4, pcie_bandwidth_bytes_per_s=32e9, pcie_latency_s=1e-6,
                     cpu_link_bandwidth_bytes_per_s=40e9, cpu_link_latency_s=1e-6)  # fmt: skip
    e = nccl_estimate(topo, "allreduce", "tree", "LL", 4, 64, n_channels=2)
    assert (e.intra_link, e.latency_s) == ("pci", pytest.approx(us(6.8 + 6 * 1.0), rel=REL))
    with pytest.raises(ConfigError, match="NCCL enables LL128 only where the GPUs talk over "
                                          "NVLink"):  # fmt: skip
        nccl_time_s(topo, "allreduce", "ring", "LL128", 4, 64, n_channels=2)


def test_nccl_picks_ll_for_small_ll128_for_medium_and_simple_for_large_messages():
    # Ring on 8 x 300 GB/s, 8 channels: LL (15 us, 80.6 GB/s) beats LL128 (40.6 us,
    # 157.7 GB/s) below about 4 MB, LL128 beats simple (56 us, 171.4 GB/s) below ~30 MB.
    def fastest(size: int) -> str:
        times = {p: nccl_time_s(star300(), "allreduce", "ring", p, 8, size, n_channels=8)
                 for p in NCCL_PROTOCOLS}  # fmt: skip
        return min(times, key=times.__getitem__)

    assert [fastest(s) for s in (8, 2**20, 16 * 2**20, GIB)] == ["LL", "LL", "LL128", "simple"]


def test_nccl_refuses_what_nccl_does_not_run():
    cases = [
        ("allgather", "tree", "simple", "does not cost allgather with tree; valid: ring, nvls"),
        ("alltoall", "ring", "simple", "does not cost alltoall with ring; valid: none"),
        ("allreduce", "pat", "simple", "has no algorithm 'pat'; valid: ring, tree, nvls"),
        ("allreduce", "ring", "LL64", "unknown protocol 'LL64'; valid: LL, LL128, simple"),
        ("allreduce", "nvls", "LL", "NVLS with the simple protocol and at least 2"),
        ("allreduce", "nvls", "simple", "nvls needs a switch that reduces"),
    ]
    for collective, algorithm, protocol, message in cases:
        with pytest.raises(ConfigError, match=message):
            nccl_time_s(star300(), collective, algorithm, protocol, 8, 64, n_channels=4)


def test_nccl_one_rank_or_no_bytes_is_free():
    assert nccl_time_s(star300(), "allreduce", "ring", "simple", 1, GIB, n_channels=8) == 0.0
    assert nccl_time_s(star300(), "allreduce", "tree", "LL", 8, 0, n_channels=8) == 0.0


@pytest.mark.parametrize("n", [3, 5, 6, 8])
@pytest.mark.parametrize("k", [1, 4])
def test_binomial_broadcast_formula_equals_the_simulated_tree(n: int, k: int) -> None:
    # The tree's levels pipeline like a chain: on full_mesh (nothing shared) and on a star
    # (the root's children share its link, all at once) the formula is exact.
    for make in (full_mesh, switch_star):
        topo = make(n, link_bandwidth_bytes_per_s=1e11, link_latency_s=1e-6)
        size = n * 4096 * k
        schedule = build_schedule("broadcast", "tree", n_ranks=n, size_bytes=size, n_chunks=k)
        expected = simulate(topo, schedule).time_s
        assert alphabeta_time_s(topo, "broadcast", "tree", n, size, n_chunks=k) == pytest.approx(
            expected, rel=1e-9
        )
