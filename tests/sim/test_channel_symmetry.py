"""Channel copies (NCCL's channels through each NIC in turn) against the general path.

The oracle is the general engine on the whole schedule: where :func:`channel_symmetric`
and the route check accept a schedule, the quotient's time and per-link bytes must equal
the whole run's to 1e-9; the families it finds are checked by hand on small trees, and it
must refuse channels that are not copies (other bytes, other shape, cross-channel waits).
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from simcoll.algorithms import build_schedule
from simcoll.algorithms.ring import ring_allreduce
from simcoll.algorithms.tree import tree_allreduce
from simcoll.core.collectives import Collective
from simcoll.core.protocols import PROTOCOLS
from simcoll.core.schedule import Op, ScheduleBuilder
from simcoll.plan.search import search_plan
from simcoll.plan.trees import Tree
from simcoll.sim.channel_symmetry import channel_symmetric
from simcoll.sim.engine import simulate
from simcoll.sim.symmetry import simulate_symmetric
from simcoll.topology import load

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
REL = 1e-9

CHAIN = Tree(root=0, parent=(-1, 0, 1, 2), children=((1,), (2,), (3,), ()))
SHIFTED = Tree(root=1, parent=(3, -1, 1, 2), children=((), (2,), (3,), (0,)))  # CHAIN + 1
# A star is no relabelling of a chain: another family.
STAR = Tree(root=0, parent=(-1, 0, 0, 0), children=((1, 2, 3), (), (), ()))
STAR_SHIFTED = Tree(root=1, parent=(1, -1, 1, 1), children=((), (2, 3, 0), (), ()))


def _cluster(file: str, n_nodes: int, routing: str = "dmodk") -> nx.DiGraph[str]:
    graph = load(TOPOLOGIES / file, overrides={"n_nodes": str(n_nodes)})
    graph.graph["routing"] = routing
    graph.graph.pop("calibration", None)  # the bare links
    return graph


def test_families_and_permutations_by_hand() -> None:
    # Channels: chain, star, chain + 1, star + 1 (every rank of the tree plus one).
    trees = [CHAIN, STAR, SHIFTED, STAR_SHIFTED]
    schedule = tree_allreduce(4, 4 * 4 * 64, trees=trees)
    sym = channel_symmetric(schedule)
    assert sym is not None
    # Two families (channels 0 and 1) of two copies: the identity, then rank + 1.
    assert sym.channel_copies == 2
    assert sym.channel_maps.tolist() == [[0, 1, 2, 3], [1, 2, 3, 0]]
    assert sorted(set(sym.representatives.channel.tolist())) == [0, 1]
    assert [sym.plan_channel(0, k) for k in range(2)] == [0, 2]
    assert [sym.plan_channel(1, k) for k in range(2)] == [1, 3]
    # 6 transfers per channel (3 up, 3 down), 2 of 4 channels kept.
    assert sym.representatives.n_transfers == 12
    assert sym.n_transfers == schedule.n_transfers == 24
    np.testing.assert_array_equal(sym.bytes_sent_per_rank(), schedule.bytes_sent_per_rank())


def test_refuses_what_is_not_a_copy() -> None:
    assert channel_symmetric(tree_allreduce(4, 64, trees=[CHAIN])) is None  # one channel
    # A chain and a star: families of one channel each, nothing to save.
    assert channel_symmetric(tree_allreduce(4, 4 * 2 * 64, trees=[CHAIN, STAR])) is None
    # Three channels, families of two and one: unequal families.
    assert channel_symmetric(tree_allreduce(4, 4 * 3 * 64, trees=[CHAIN, SHIFTED, STAR])) is None
    # Families of two whose second copies are different permutations (+1, identity).
    trees = [CHAIN, SHIFTED, STAR, STAR]
    assert channel_symmetric(tree_allreduce(4, 4 * 4 * 64, trees=trees)) is None
    # Pieces one byte apart: the copies move different bytes.
    assert channel_symmetric(tree_allreduce(4, 4 * 2 * 64 + 1, trees=[CHAIN, CHAIN])) is None
    # A transfer of channel 1 that waits for one of channel 0.
    b = ScheduleBuilder(Collective.BROADCAST, "custom", n_ranks=2, size_bytes=2,
                        pieces_per_block=2)  # fmt: skip
    first = b.add(src=0, dst=1, pieces=[0], op=Op.COPY, channel=0)
    b.add(src=0, dst=1, pieces=[1], op=Op.COPY, channel=1, deps=(first,))
    assert channel_symmetric(b.build()) is None


def _both(graph: nx.DiGraph[str], schedule, plan, protocol):
    sym = channel_symmetric(schedule)
    assert sym is not None
    fast = simulate_symmetric(graph, sym, protocol=protocol, plan=plan)
    whole = simulate(graph, schedule, protocol=protocol, rank_nodes=plan.rank_nodes, plan=plan)
    return sym, fast, whole


@pytest.mark.parametrize("n_nodes", [2, 3, 4])
@pytest.mark.parametrize("protocol", [None, "simple", "LL"])
def test_nccl_trees_on_the_quotient_equal_the_whole_run(n_nodes: int, protocol) -> None:
    graph = _cluster("h100-rail-optimized.toml", n_nodes)
    plan = search_plan(graph)
    n = plan.n_ranks
    size = n * plan.n_channels * 3 * 4096
    schedule = build_schedule(Collective.ALLREDUCE, "tree", plan, n_ranks=n, size_bytes=size,
                              n_chunks=3, max_in_flight=2)  # fmt: skip
    proto = PROTOCOLS[protocol] if protocol else None
    sym, fast, whole = _both(graph, schedule, plan, proto)
    if fast is None:
        # Tree 1 is tree 0 with the nodes relabelled; on 3 nodes that relabelling is no
        # symmetry of the leaves, and the route check says so.
        assert n_nodes == 3
        return
    assert sym.representatives.n_transfers * sym.channel_copies == schedule.n_transfers
    assert fast.time_s == pytest.approx(whole.time_s, rel=REL)
    np.testing.assert_allclose(fast.link_bytes, whole.link_bytes, rtol=REL)


def test_nccl_rings_of_a_random_placement_on_the_quotient_equal_the_whole_run() -> None:
    # Random placement breaks the rank shifts the ring path needs, not the rail shift.
    graph = _cluster("h100-ib-fat-tree.toml", 4)
    plan = search_plan(graph, placement="random:3")
    n = plan.n_ranks
    schedule = ring_allreduce(n, n * plan.n_channels * 2 * 512, n_channels=plan.n_channels,
                              n_chunks=2, rings=plan.rings)  # fmt: skip
    _, fast, whole = _both(graph, schedule, plan, PROTOCOLS["simple"])
    assert fast is not None
    assert fast.time_s == pytest.approx(whole.time_s, rel=REL)
    np.testing.assert_allclose(fast.link_bytes, whole.link_bytes, rtol=REL)


@pytest.mark.parametrize(("file", "n_nodes", "exact"), [
    ("h100-ib-fat-tree.toml", 8, False),  # hash collisions load spine links unevenly
    ("h100-rail-optimized.toml", 4, True),  # rail-local: the hash never reaches a spine
])  # fmt: skip
def test_hashed_ecmp_is_taken_only_where_exact(file: str, n_nodes: int, exact: bool) -> None:
    graph = _cluster(file, n_nodes, routing="ecmp")
    plan = search_plan(graph)
    n = plan.n_ranks
    schedule = build_schedule(Collective.ALLREDUCE, "tree", plan, n_ranks=n,
                              size_bytes=n * plan.n_channels * 4096)  # fmt: skip
    _, fast, whole = _both(graph, schedule, plan, None)
    assert (fast is not None) == exact
    if fast is not None:
        assert fast.time_s == pytest.approx(whole.time_s, rel=REL)


def test_rounded_up_pieces_are_within_one_byte_per_piece() -> None:
    # NCCL's trees on 2 servers, 16 channels x 2 chunks: pieces of 1,000 B and, for the
    # first 5, 1,001 B. Channels then differ by a byte; rounded up, every piece carries
    # 1,001 B, as the general path times them too (Schedule.timed_bytes): the same time.
    graph = _cluster("h100-rail-optimized.toml", 2)
    plan = search_plan(graph)
    n, pieces = plan.n_ranks, plan.n_channels * 2
    size = pieces * 1_000 + 5
    schedule = build_schedule(Collective.ALLREDUCE, "tree", plan, n_ranks=n, size_bytes=size,
                              n_chunks=2)  # fmt: skip
    assert sorted(set(schedule.piece_bytes.tolist())) == [1_000, 1_001]
    assert channel_symmetric(schedule) is None
    sym = channel_symmetric(schedule, round_up_pieces=True)
    assert sym is not None
    assert sym.rounded_up
    assert set(sym.representatives.transfer_bytes.tolist()) == {1_001}
    fast = simulate_symmetric(graph, sym, plan=plan)
    assert fast is not None
    whole = simulate(graph, schedule, rank_nodes=plan.rank_nodes, plan=plan)
    assert fast.time_s == pytest.approx(whole.time_s, rel=1e-12)
    # Pieces under 1,000 B: one byte is more than 1e-3 of them, refused.
    small = build_schedule(Collective.ALLREDUCE, "tree", plan, n_ranks=n,
                           size_bytes=pieces * 100 + 5, n_chunks=2)  # fmt: skip
    assert channel_symmetric(small, round_up_pieces=True) is None
