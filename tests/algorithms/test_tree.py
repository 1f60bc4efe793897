"""Binomial and double binary trees: shapes, the checker, volumes and closed forms.

Notation: n ranks, S the nccl-tests size, B the link bandwidth per direction, a the
latency of one link. On ``full_mesh`` every ordered pair of GPUs has its own link (one
hop, latency a); a rank's sends to different children and a parent's receives from
different children are on different links, so they run at once at B each. Flows share a
link only when they are channels of one connection pair; with the ``ideal`` model nothing
is shared at all.

Binomial tree, relative ranks v = (r - root) mod n: the parent of v is v minus its lowest
one bit, so v is as deep as it has one bits; the deepest rank below n has floor(log2 n)
of them (n - 1 itself if n is a power of two, else 2^floor(log2 n) - 1):
D_binomial = floor(log2 n). (Thakur et al.'s ceil(log2 n) rounds count the root's
ceil(log2 n) sends as sequential; here they overlap, so a non-power of two saves a round.)

NCCL's tree 0: lowest one bits strictly decrease from a parent to its children, and the
down0 child ``r - 2^(h-1)`` always exists, so a rank with lowest bit 2^h is the top of a
subtree of height h. The root's only child is the largest power of two below n,
2^(ceil(log2 n) - 1): D_btree = ceil(log2 n) for n >= 2. Tree 1 relabels tree 0: the
same depth.
"""

from __future__ import annotations

import math
import random

import pytest

from simcoll.algorithms.tree import (
    ALGORITHMS,
    _down,
    _up,
    msb_tree_broadcast,
    tree_allreduce,
    tree_broadcast,
    tree_gather,
    tree_reduce,
    tree_scatter,
)
from simcoll.core.checks import check_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError
from simcoll.core.schedule import Op, ScheduleBuilder
from simcoll.plan.trees import Tree, double_binary_tree, msb_binomial_tree
from simcoll.sim.engine import simulate
from simcoll.topology import full_mesh

B = 100e9  # bytes/s per direction
A = 2e-6  # latency of one link
REL = 1e-9
WIDE = 10**6  # an in-flight window that never binds

ROOTED = {
    "broadcast": tree_broadcast,
    "reduce": tree_reduce,
    "gather": tree_gather,
    "scatter": tree_scatter,
}


def _mesh(n: int):
    return full_mesh(n, link_bandwidth_bytes_per_s=B, link_latency_s=A)


def test_registered_names_and_integer_parameters():
    assert set(ALGORITHMS) == {
        (Collective.BROADCAST, "tree"),
        (Collective.BROADCAST, "msb_tree"),
        (Collective.REDUCE, "tree"),
        (Collective.GATHER, "tree"),
        (Collective.SCATTER, "tree"),
        (Collective.ALLREDUCE, "tree"),
    }
    s = tree_allreduce(8, 8 * 12, n_channels=2, n_chunks=3, max_in_flight=4)
    assert (s.algorithm, s.params, s.max_in_flight) == (
        "tree", {"n_channels": 2, "n_chunks": 3, "max_in_flight": 4}, 4
    )  # fmt: skip
    assert tree_gather(4, 40, root=3).root == 3


# (channels, chunks, bytes per block); 7 bytes into 6 pieces and 0 bytes are uneven cases.
CUTS = [(1, 1, 12), (2, 3, 7), (1, 4, 0)]


@pytest.mark.parametrize(("channels", "chunks", "per_block"), CUTS)
@pytest.mark.parametrize("n", range(1, 17))
@pytest.mark.parametrize("collective", [*ROOTED, "allreduce"])
def test_computes_its_collective(collective, n, channels, chunks, per_block):
    if collective == "allreduce":
        # One block cut into 2 x channels x chunks pieces; + 1 makes them uneven.
        size = 2 * per_block + (1 if per_block else 0)
        check_schedule(tree_allreduce(n, size, n_channels=channels, n_chunks=chunks))
        return
    size = per_block * (n if collective in {"gather", "scatter"} else 1)
    for root in sorted({0, n // 2, n - 1}):
        fn = ROOTED[collective]
        check_schedule(fn(n, size, root=root, n_channels=channels, n_chunks=chunks))


def test_one_rank_moves_nothing():
    for fn in [*ROOTED.values(), tree_allreduce]:
        s = fn(1, 64)
        assert s.n_transfers == 0
        assert simulate(_mesh(1), s).time_s == 0.0


def test_double_tree_channels_alternate_trees():
    # Channel c runs tree c mod 2: every transfer of channel c is an edge of that tree.
    n = 7
    trees = double_binary_tree(n)
    s = tree_allreduce(n, 4 * 10, n_channels=2)
    assert s.n_channels == 4
    for t in s.transfers():
        tree = trees[t.channel % 2]
        assert tree.parent[t.src] == t.dst or tree.parent[t.dst] == t.src
        assert (t.op is Op.REDUCE) == (tree.parent[t.src] == t.dst)  # reduce up, copy down


# ---- volumes ----------------------------------------------------------------------


def _subtree_size(v: int, n: int) -> int:
    # The subtree of relative rank v > 0 is v + x for x < lowbit(v) (the ranks that share
    # v's higher bits), cut off at n; the root's is everyone.
    return min(v & -v, n - v) if v else n


def test_broadcast_and_reduce_volumes_by_hand():
    # n = 6, root 2, relative v = r - 2 mod 6: v0 -> v4, v2, v1; v4 -> v5; v2 -> v3, that
    # is 2 -> 0, 4, 3;  0 -> 1;  4 -> 5. Broadcast: each edge carries S down.
    size = 60
    s = tree_broadcast(6, size, root=2, n_chunks=2, n_channels=3)
    assert s.bytes_sent_per_rank().tolist() == [size, 0, 3 * size, 0, size, 0]
    assert s.bytes_received_per_rank().tolist() == [size, size, 0, size, size, size]
    r = tree_reduce(6, size, root=2)
    assert r.bytes_received_per_rank().tolist() == [size, 0, 3 * size, 0, size, 0]
    assert r.bytes_sent_per_rank().tolist() == [size, size, 0, size, size, size]


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13, 16])
@pytest.mark.parametrize("collective", ["broadcast", "reduce"])
def test_broadcast_and_reduce_volumes(collective, n):
    # Every rank but the root receives S once (n - 1 edges of S); the root's children are
    # v = 2^i < n: it sends ceil(log2 n) S. For n = 2^L the children of v are v + 2^i for
    # 2^i < lowbit(v), all < n: v sends log2(lowbit(v)) S. Reduce: the same, reversed.
    size = 4 * 6 * 10
    root = n // 3
    s = ROOTED[collective](n, size, root=root, n_channels=4, n_chunks=6)
    sent, received = s.bytes_sent_per_rank().tolist(), s.bytes_received_per_rank().tolist()
    if collective == "reduce":
        sent, received = received, sent
    assert received == [0 if r == root else size for r in range(n)]
    assert sum(sent) == (n - 1) * size
    assert sent[root] == math.ceil(math.log2(n)) * size
    if n & (n - 1) == 0:
        lowbit = [(v & -v).bit_length() - 1 for v in range(n)]
        assert sent == [lowbit[(r - root) % n] * size if r != root else sent[root]
                        for r in range(n)]  # fmt: skip


@pytest.mark.parametrize("n", [2, 3, 6, 7, 8, 11, 16])
@pytest.mark.parametrize("collective", ["gather", "scatter"])
def test_gather_and_scatter_volumes(collective, n):
    # The edge above v carries its subtree's blocks, b bytes each: v sends
    # size(v) b up (gather) and receives (size(v) - 1) b from its children; the root
    # receives the other n - 1 blocks. Scatter: the same, reversed.
    b = 2 * 3 * 5
    root = n - 1
    s = ROOTED[collective](n, n * b, root=root, n_channels=2, n_chunks=3)
    up = [_subtree_size((r - root) % n, n) for r in range(n)]
    sent = [0 if r == root else up[r] * b for r in range(n)]
    received = [(up[r] - 1) * b for r in range(n)]
    if collective == "scatter":
        sent, received = received, sent
    assert s.bytes_sent_per_rank().tolist() == sent
    assert s.bytes_received_per_rank().tolist() == received


def test_double_tree_volumes_for_eight_ranks_by_hand():
    # Tree 0: 0 -> 4 -> {2, 6}, 2 -> {1, 3}, 6 -> {5, 7}; tree 1 its mirror (7 -> 3 ...).
    # Each tree edge carries S/2 up and S/2 down. Ranks 1..6 are inner in one tree (parent
    # and two children: 3 edges) and leaves in the other (1 edge): 4 S/2 = 2S each way.
    # Ranks 0 and 7 are the root with one child in one tree and a leaf in the other: S.
    size = 8 * 2 * 3
    s = tree_allreduce(8, size, n_chunks=3)
    want = [size] + [2 * size] * 6 + [size]
    assert s.bytes_sent_per_rank().tolist() == want
    assert s.bytes_received_per_rank().tolist() == want


@pytest.mark.parametrize("n", range(2, 17))
def test_double_tree_volumes_follow_the_degrees(n):
    # In a tree, a rank with k children and a parent receives k S/2 (up) + S/2 (down) and
    # sends S/2 (up) + k S/2 (down): S/2 per edge it touches, both ways, summed over trees.
    channels, chunks = 2, 3
    size = 2 * channels * chunks * 10
    s = tree_allreduce(n, size, n_channels=channels, n_chunks=chunks)
    degree = [0] * n
    for tree in double_binary_tree(n):
        for r in range(n):
            degree[r] += len(tree.children[r]) + (tree.parent[r] != -1)
    want = [d * size // 2 for d in degree]
    assert s.bytes_sent_per_rank().tolist() == want
    assert s.bytes_received_per_rank().tolist() == want
    # An inner node with two children plus a leaf: 3 + 1 edges, 2S. No rank does more
    # than inner-with-two-children twice (rank 0 for odd n): 3 S.
    assert max(want) <= 3 * size


# ---- closed forms on full_mesh ----------------------------------------------------


def chain_time_s(hops: int, chunks: int, alpha: float, tau: float, window: int) -> float:
    """Time of k pieces pipelined over a chain of ``hops`` connections (tests/test_engine).

    Piece j on hop h is issued when it arrived from hop h - 1 and pays alpha, then moves
    after piece j - 1 of the same connection: the longest path through the (hop, piece)
    grid has hops - 1 hop changes (alpha + tau) and k - 1 piece changes (tau with an
    unbounded window; alpha + tau with a window of 1, as each piece then waits for the
    previous one to arrive).
    """
    if window == 1:
        return (hops + chunks - 1) * (alpha + tau)
    return hops * (alpha + tau) + (chunks - 1) * tau


# A tree with every edge its own connection and link pipelines like a chain. Broadcast:
# a rank's sends to its children all depend on the same arrival, so chunk j reaches a
# rank at a time that depends only on its depth: D = floor(log2 n) hops. Reduce (MPICH's
# order): a parent receives from its children one after another, mask 1, 2, 4, ... first,
# chunk j of a child waiting for chunk j of the child before; the root's receives from
# ranks 1, 2, 4, ..., 2^(L-1) are a chain of L = ceil(log2 n) hops, and every other path
# to the root is a chain of at most L hops (a rank at mask 2^i gathers i hops below it),
# so D = ceil(log2 n). Either way T = chain_time_s(D, k, a, tau, window); for k = 1:
# T = D (a + S/B).
# tau: a piece is S / (c k); with "ideal" each channel runs at B: tau = S / (c k B);
# with "flow" the c channels of an edge share its link in lockstep: tau = S / (k B).
@pytest.mark.parametrize(("model", "channels"), [("ideal", 1), ("ideal", 3), ("flow", 1),
                                                 ("flow", 2)])  # fmt: skip
@pytest.mark.parametrize(("chunks", "window"), [(1, WIDE), (4, WIDE), (4, 1)])
@pytest.mark.parametrize("n", [2, 3, 5, 8, 13])
@pytest.mark.parametrize("collective", ["broadcast", "reduce"])
def test_binomial_broadcast_and_reduce_closed_form(collective, n, chunks, window, model,
                                                    channels):  # fmt: skip
    size = channels * chunks * 2**14
    root = n - 2
    s = ROOTED[collective](n, size, root=root, n_channels=channels, n_chunks=chunks,
                           max_in_flight=window)  # fmt: skip
    depth = math.floor(math.log2(n)) if collective == "broadcast" else math.ceil(math.log2(n))
    tau = size / (chunks * B) / (channels if model == "ideal" else 1)
    expected = chain_time_s(depth, chunks, A, tau, window)
    if chunks == 1:
        assert expected == pytest.approx(depth * (A + size / (channels * B)) if model == "ideal"
                                         else depth * (A + size / B), rel=1e-12)  # fmt: skip
    assert simulate(_mesh(n), s, model=model).time_s == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("model", ["ideal", "flow"])
@pytest.mark.parametrize("n", [2, 4, 8, 16])
@pytest.mark.parametrize("collective", ["gather", "scatter"])
def test_binomial_gather_and_scatter_power_of_two(collective, n, model):
    # n = 2^L, block b = S / n, t = b / B. Gather: rank v with lowbit 2^h sends its 2^h
    # blocks once its children (subtrees of 2^0 .. 2^(h-1) blocks) have: its transfer
    # arrives at G(h) = G(h - 1) + a + 2^h t, G(-1) = 0, so G(h) = (h + 1) a +
    # (2^(h+1) - 1) t, and the root's last child (h = L - 1) arrives at
    #   T = L a + (n - 1) t = L a + (n - 1)/n S/B.
    # Scatter: the root sends each child its subtree at once; a path root -> ... -> v
    # carries 2^(L-1), 2^(L-2), ... blocks at most, each hop a + 2^h t: T the same.
    size = n * 2**14
    levels = int(math.log2(n))  # L
    expected = levels * A + (n - 1) / n * size / B
    s = ROOTED[collective](n, size, root=n // 2)
    assert simulate(_mesh(n), s, model=model).time_s == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("model", ["ideal", "flow"])
@pytest.mark.parametrize("collective", ["gather", "scatter"])
def test_binomial_gather_and_scatter_six_ranks_by_hand(collective, model):
    # n = 6, root 0: 0 -> 4, 2, 1;  4 -> 5;  2 -> 3. Block b, t = b / B. MPICH's order:
    # a rank receives from its children mask 1 first, sends to them mask 4 first, one
    # after another.
    # Gather:  1->0, 3->2, 5->4 (b each)                  start 0       end a + t
    #          2->0 (blocks 2,3; after 3->2 and 1->0)     start a + t   end 2a + 3t
    #          4->0 (blocks 4,5; after 5->4 and 2->0)     start 2a + 3t end 3a + 5t
    # Scatter: 0->4 (2b)                                  start 0       end a + 2t
    #          0->2 (2b; after 0->4), 4->5 (b)            start a + 2t  end 2a + 4t / 2a + 3t
    #          0->1 (b; after 0->2), 2->3 (b)             start 2a + 4t end 3a + 5t
    # T = 3a + 5t = 3a + 5 S/(6B) either way: ceil(log2 6) steps of the most blocks each
    # (2, 2, 1), as MPICH's step formula says.
    b = 2**16
    s = ROOTED[collective](6, 6 * b, root=0)
    assert simulate(_mesh(6), s, model=model).time_s == pytest.approx(3 * A + 5 * b / B, rel=REL)


# Double binary tree, each tree on its own channels, each channel on its own connections;
# with the "ideal" model nothing is shared (a parent takes its two children's pieces on
# two links at once), so T is one tree's. In a tree, a chunk goes up from the deepest
# leaf to the root (D hops, the parent forwarding once all its children's copies arrived:
# the tallest child's, as for reduce) and then down to the deepest leaf (D hops): a
# chain of 2D connections, T = chain_time_s(2D, k, a, tau, window), D = ceil(log2 n), a
# piece being S / (2 c k): tau = S / (2 c k B). For k = 1, c = 1:
#   T = 2 ceil(log2 n) (a + S / (2B)).
# (With "flow", both trees may load one link at once where an edge of tree 0 is also one
# of tree 1; so only "ideal" here, and "flow" for n = 2 with an unbounded window: link
# 0 -> 1 carries tree 1's pieces up during [a, a + k tau] and tree 0's down from
# 2a + tau on, 1 -> 0 the mirror image; no overlap as a >= (k - 1) tau.)
@pytest.mark.parametrize(("chunks", "window"), [(1, WIDE), (3, WIDE), (3, 1)])
@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 12, 13, 16])
def test_double_tree_allreduce_closed_form(n, channels, chunks, window):
    size = 2 * channels * chunks * 2**14
    s = tree_allreduce(n, size, n_channels=channels, n_chunks=chunks, max_in_flight=window)
    depth = math.ceil(math.log2(n))
    tau = size / (2 * channels * chunks * B)
    expected = chain_time_s(2 * depth, chunks, A, tau, window)
    if (chunks, channels) == (1, 1):
        assert expected == pytest.approx(2 * depth * (A + size / (2 * B)), rel=1e-12)
    assert simulate(_mesh(n), s, model="ideal").time_s == pytest.approx(expected, rel=REL)
    if n == 2 and channels == 1 and window == WIDE:
        assert (chunks - 1) * tau <= A
        assert simulate(_mesh(n), s, model="flow").time_s == pytest.approx(expected, rel=REL)


def test_double_tree_beats_one_binomial_reduce_and_broadcast():
    # Sanity of scale: the tree all-reduce moves S/2 per tree per edge, so for large S it
    # is about twice as fast as a binomial reduce then broadcast of the whole S over a
    # tree of similar depth: 2 ceil(log2 n) (a + S/(2B)) vs 2 floor(log2 n) (a + S/B).
    n, size = 8, 2 * 2**24
    tree = simulate(_mesh(n), tree_allreduce(n, size), model="ideal").time_s
    both = sum(simulate(_mesh(n), fn(n, size), model="ideal").time_s
               for fn in (tree_reduce, tree_broadcast))  # fmt: skip
    assert tree == pytest.approx(6 * (A + size / (2 * B)), rel=REL)
    assert both == pytest.approx(6 * (A + size / B), rel=REL)
    assert 1.95 < both / tree < 2


@pytest.mark.parametrize("n", range(1, 17))
def test_node_trees_allreduce_computes_for_every_node_size(n: int) -> None:
    for g in [d for d in range(1, n + 1) if n % d == 0]:
        for channels, chunks in [(1, 1), (2, 3)]:
            size = 2 * channels * chunks * 8
            check_schedule(
                tree_allreduce(n, size, gpus_per_node=g, n_channels=channels, n_chunks=chunks)
            )


def test_node_trees_refuse_a_node_size_that_does_not_divide() -> None:
    with pytest.raises(ScheduleError, match=r"^tree: 6 ranks do not split into nodes of"):
        tree_allreduce(6, 96, gpus_per_node=4)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8, 13, 16])
def test_msb_tree_is_gloos_rule_and_broadcasts(n):
    """gloo's rule by hand: the parent of relative rank v is v minus its highest bit."""
    for root in {0, n - 1, n // 2}:
        tree = msb_binomial_tree(n, root)
        for v in range(1, n):
            high = 1 << (v.bit_length() - 1)
            assert tree.parent[(v + root) % n] == (v - high + root) % n
        assert tree.parent[root] == -1
        assert sorted(r for kids in tree.children for r in kids) == sorted(
            r for r in range(n) if r != root
        )
        schedule = msb_tree_broadcast(n, 64 * n, root=root, n_chunks=2)
        check_schedule(schedule)  # every rank ends with the root's buffer
        # every non-root rank receives the buffer once; the root sends it per child
        assert schedule.bytes_sent_per_rank()[root] == 64 * n * len(tree.children[root])


def _random_tree(n: int, rng: random.Random) -> Tree:
    """A random spanning tree: each rank (in random order) hangs under an earlier one."""
    order = list(range(n))
    rng.shuffle(order)
    parent = [-1] * n
    children: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        p = order[rng.randrange(i)]
        parent[order[i]] = p
        children[p].append(order[i])
    return Tree(root=order[0], parent=tuple(parent), children=tuple(map(tuple, children)))


@pytest.mark.parametrize("n", [2, 3, 5, 8, 17])
@pytest.mark.parametrize("chunks", [1, 3])
def test_double_tree_arrays_are_the_up_and_down_walks(n: int, chunks: int) -> None:
    """tree_allreduce builds its transfers with numpy; the reference is the walk that the
    other tree collectives use, rank by rank (``_up`` then ``_down`` per channel)."""
    rng = random.Random(n * 10 + chunks)
    trees = [_random_tree(n, rng) for _ in range(3)]
    size = n * len(trees) * chunks * 8
    b = ScheduleBuilder(Collective.ALLREDUCE, "tree", n_ranks=n, size_bytes=size,
                        pieces_per_block=len(trees) * chunks)  # fmt: skip

    def pieces(_: int, channel: int, chunk: int) -> list[int]:
        return [channel * chunks + chunk]

    for channel, tree in enumerate(trees):
        lanes = [(channel, chunk) for chunk in range(chunks)]
        reduced = _up(b, tree, lanes, pieces, Op.REDUCE)
        at_root = {key: ts for key, ts in reduced.items() if key[0] == tree.root}
        _down(b, tree, lanes, pieces, at_root=at_root)
    walked = b.build()
    built = tree_allreduce(n, size, trees=trees, n_chunks=chunks)
    for name in ("src", "dst", "op", "channel", "pieces_indptr", "pieces", "deps_indptr", "deps"):
        assert getattr(built, name).tolist() == getattr(walked, name).tolist(), name
    check_schedule(built)
