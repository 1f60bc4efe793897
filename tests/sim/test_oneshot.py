"""One-shot schedules in closed form: against hand counts, against the engine on hashed-ECMP
fat-trees, and the cases the closed form must refuse (where it would be wrong).

Notation: S the collective's size, n ranks, B link bandwidth per direction, alpha the
latency of a route (two links on a switch star: GPU -> switch -> GPU).
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from simcoll.algorithms import build_schedule
from simcoll.core.collectives import Collective
from simcoll.core.protocols import PROTOCOLS
from simcoll.core.schedule import Schedule, ScheduleBuilder
from simcoll.sim.engine import prepare, simulate
from simcoll.sim.oneshot import _components, link_bound_s, one_shot
from simcoll.topology import load, switch_star

B = 10e9  # bytes/s per direction
ALPHA_S = 2 * 1e-6  # two links of 1 us
TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
REL = 1e-12


def _star(n: int) -> nx.DiGraph[str]:
    return switch_star(n, link_bandwidth_bytes_per_s=B, link_latency_s=ALPHA_S / 2)


def _roce(n_nodes: int, routing: str | None) -> nx.DiGraph[str]:
    """The shipped 2:1 RoCE fat-tree (hashed ECMP unless ``routing``), 8 GPUs a node."""
    graph = load(TOPOLOGIES / "a100-roce-2to1.toml", overrides={"n_nodes": str(n_nodes)})
    if routing is not None:
        graph.graph["routing"] = routing
    return graph


# -- hand counts -------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 4, 7])
def test_alltoall_on_a_star_is_n_minus_1_blocks_through_one_link(n):
    # Every GPU's uplink (and downlink) carries its n-1 blocks of S/n, all from time alpha.
    size = n * 3_000_000
    shot = one_shot(prepare(_star(n), build_schedule("alltoall", "direct", n_ranks=n,
                                                     size_bytes=size)))  # fmt: skip
    assert shot is not None
    assert shot.time_s == pytest.approx(ALPHA_S + (n - 1) * (size / n) / B, rel=REL)
    assert shot.n_flows == n * (n - 1)
    assert shot.link_bytes.max() == (n - 1) * size / n


@pytest.mark.parametrize(
    ("collective", "blocks_through_root"),
    [("scatter", lambda n, s: (n - 1) * s / n), ("gather", lambda n, s: (n - 1) * s / n),
     ("broadcast", lambda n, s: (n - 1) * s)],
)  # fmt: skip
def test_root_collectives_are_the_roots_link(collective, blocks_through_root):
    # The root's one link carries every flow: scatter and gather a block per peer,
    # broadcast the whole buffer per peer.
    n, size = 5, 5_000_000
    schedule = build_schedule(collective, "direct", n_ranks=n, size_bytes=size)
    shot = one_shot(prepare(_star(n), schedule))
    assert shot is not None
    assert shot.time_s == pytest.approx(ALPHA_S + blocks_through_root(n, size) / B, rel=REL)
    assert shot.critical_link in {("gpu0", "sw"), ("sw", "gpu0")}


def test_pieces_back_to_back_count_as_one_flow():
    # 8 pieces per block, window 2: a piece of (S/n)/8 at B takes 37.5 us, far more than
    # the 2 us latency, so each piece starts as the one before arrives: the same time.
    n, size = 4, 4 * 3_000_000
    schedule = build_schedule("alltoall", "direct", n_ranks=n, size_bytes=size, n_chunks=8,
                              max_in_flight=2)  # fmt: skip
    shot = one_shot(prepare(_star(n), schedule))
    assert shot is not None
    assert shot.time_s == pytest.approx(ALPHA_S + (n - 1) * (size / n) / B, rel=REL)


# -- against the engine -------------------------------------------------------------------


@pytest.mark.parametrize("n_nodes", [2, 4, 8])
@pytest.mark.parametrize("routing", [None, "dmodk"])
@pytest.mark.parametrize(
    "knobs", [{}, {"n_chunks": 4}, {"n_channels": 2, "n_chunks": 2, "max_in_flight": 2}]
)
def test_equals_the_engine_on_a_hashed_ecmp_fat_tree(n_nodes, routing, knobs):
    # Hashed ECMP loads the uplinks unevenly, so flows run at many rates and the engine
    # reshares at hundreds of instants; the closed form must land on the same time. NVLink
    # flows start before the fabric's (shorter routes) on links of their own.
    graph = _roce(n_nodes, routing)
    n = 8 * n_nodes
    schedule = build_schedule("alltoall", "direct", n_ranks=n, size_bytes=n * 2**20, **knobs)
    shot = one_shot(prepare(graph, schedule))
    result = simulate(graph, schedule)
    assert shot is not None
    assert shot.time_s == pytest.approx(result.time_s, rel=REL)
    np.testing.assert_allclose(shot.link_bytes, result.link_bytes, rtol=REL)
    if routing is None and n_nodes == 8:  # eight leaves: collisions, and many instants
        assert result.stats.instants > 50


@pytest.mark.parametrize("protocol", ["LL", "LL128", "simple"])
def test_equals_the_engine_with_a_protocol(protocol):
    # A protocol puts more bytes on the wire and adds its step latency to every route.
    graph = _roce(4, None)
    schedule = build_schedule("alltoall", "direct", n_ranks=32, size_bytes=32 * 2**18)
    proto = PROTOCOLS[protocol]
    shot = one_shot(prepare(graph, schedule, protocol=proto))
    assert shot is not None
    assert shot.time_s == pytest.approx(simulate(graph, schedule, protocol=proto).time_s, rel=REL)


# -- refusals: where the closed form would be wrong --------------------------------------


def _uneven_sends() -> Schedule:
    """Rank 0 sends one 1 MB piece to rank 1 and two to rank 2, independently."""
    b = ScheduleBuilder(Collective.BROADCAST, "direct", n_ranks=3, size_bytes=3_000_000,
                        pieces_per_block=3)  # fmt: skip
    b.add(src=0, dst=1, pieces=[0])
    b.add(src=0, dst=2, pieces=[1, 2])
    return b.build()


def test_refuses_unequal_flows_on_the_least_share_link():
    # gpu0 sends 1 MB to gpu1 and 2 MB to gpu2 over its one uplink: both at B/2 until the
    # first is through (2 MB / B), then the second's last 1 MB at B: 3 MB / B in all. The
    # closed form's t0 + 2 MB / (B / 2) = 4 MB / B would be wrong.
    schedule = _uneven_sends()
    assert one_shot(prepare(_star(3), schedule)) is None
    assert simulate(_star(3), schedule).time_s == pytest.approx(ALPHA_S + 3e6 / B, rel=REL)


def test_refuses_a_window_that_leaves_gaps():
    # Window 1: each piece is issued when the one before arrives and pays alpha again, so
    # k pieces take k (alpha + tau), not alpha + k tau.
    k, piece_bytes = 4, 1_000_000
    schedule = build_schedule("alltoall", "direct", n_ranks=2, size_bytes=2 * k * piece_bytes,
                              n_chunks=k, max_in_flight=1)  # fmt: skip
    assert one_shot(prepare(_star(2), schedule)) is None
    assert simulate(_star(2), schedule).time_s == pytest.approx(
        k * (ALPHA_S + piece_bytes / B), rel=REL
    )


def test_refuses_dependencies():
    schedule = build_schedule("allreduce", "ring", n_ranks=4, size_bytes=4_000_000)
    assert one_shot(prepare(_star(4), schedule)) is None


def test_components_label_routes_that_share_links():
    # Routes 0 and 2 share link 5, 1 and 3 share link 7, 2 and 4 share link 9: {0, 2, 4}
    # and {1, 3}, each labelled by its least route.
    routes = [[0, 5], [1, 7], [5, 9], [7, 8], [9]]
    flat = np.array([lk for route in routes for lk in route])
    ptr = np.cumsum([0, *map(len, routes)])
    assert _components(flat, ptr, 10).tolist() == [0, 1, 0, 1, 0]


# -- the link bound ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("collective", "algorithm", "knobs"),
    [("alltoall", "pairwise", {}), ("alltoall", "direct", {"n_chunks": 2}),
     ("allreduce", "ring", {"n_chunks": 2}), ("allgather", "bruck", {}),
     ("allreduce", "tree", {"gpus_per_node": 8}), ("broadcast", "ring", {})],
)  # fmt: skip
def test_the_link_bound_is_never_above_the_engine(collective, algorithm, knobs):
    # Every link's first flow starts after its route latency and the link moves at most
    # its bandwidth: no schedule, dependent or not, ends sooner.
    graph = _roce(4, None)
    schedule = build_schedule(collective, algorithm, n_ranks=32, size_bytes=32 * 2**18, **knobs)
    run = prepare(graph, schedule)
    assert link_bound_s(run) <= simulate(graph, schedule).time_s * (1 + REL)


def test_the_link_bound_is_the_one_shot_time_where_that_holds():
    graph = _roce(8, None)
    schedule = build_schedule("alltoall", "direct", n_ranks=64, size_bytes=64 * 2**20)
    run = prepare(graph, schedule)
    shot = one_shot(run)
    assert shot is not None
    assert link_bound_s(run) == pytest.approx(shot.time_s, rel=REL)
