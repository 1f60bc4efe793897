"""Work counters, not seconds: a regression to per-flow or per-hop recomputation fails.

Expected counts are derived by hand from the schedule's structure (see each test).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.algorithms.ring import ring_allreduce
from simcoll.sim.engine import simulate
from simcoll.sim.symmetry import simulate_ring_fast
from simcoll.topology import load, switch_star

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


@pytest.mark.parametrize(("n", "channels"), [(8, 1), (16, 4)])
def test_ring_on_a_star_recomputes_once_per_instant_and_only_its_component(
    n: int, channels: int
) -> None:
    # All n x channels flows of a ring step join together (equal latency, paid after
    # the previous step arrived) and finish together (equal bytes and rates): per step,
    # one instant to join and one to finish, so 2 x 2(n - 1) instants. Rates are
    # recomputed once per join instant (not per flow); at a finish instant no flow is
    # left in flight to recompute. Each recomputation covers only the flows that share
    # links, and each flow joins once: flow rate updates = transfers.
    topology = switch_star(n, link_bandwidth_bytes_per_s=10e9, link_latency_s=1e-6)
    steps = 2 * (n - 1)
    schedule = ring_allreduce(n, n * channels * 4096, n_channels=channels)
    stats = simulate(topology, schedule).stats
    assert stats.instants == 2 * steps
    assert stats.reshares == steps
    assert stats.flow_rate_updates == steps * n * channels  # each flow once, when it joins


def test_symmetric_ring_simulates_one_node_of_ranks_and_one_channel() -> None:
    # 64 GPUs (8 nodes of 8, d-mod-k rails): the period is one node, 8 ranks, and the 8
    # channels are copies: 2(n - 1) x 8 representatives, not 2(n - 1) x 64 x 8 transfers.
    graph = load(
        TOPOLOGIES / "h100-rail-optimized.toml",
        overrides={"n_nodes": "8", "rail_nodes_per_leaf": "4"},
    )
    graph.graph["routing"] = "dmodk"
    n = 64
    found = simulate_ring_fast(graph, "allreduce", n, 2**26, n_channels=8)
    assert found is not None
    result, sym = found
    assert sym.period_ranks == 8
    assert result.schedule.n_transfers == 2 * (n - 1) * 8
    assert sym.n_transfers == 2 * (n - 1) * n * 8
    # Each representative joins once and leaves once: at most two instants each, and
    # at most one rate recomputation per instant.
    assert result.stats.instants <= 2 * result.schedule.n_transfers
    assert result.stats.reshares <= result.stats.instants
