"""Tree schedules: broadcast, reduce, gather and scatter down and up MPI's binomial tree,
and all-reduce on NCCL's double binary tree. The trees' shapes are :mod:`simcoll.plan.trees`.

Binomial tree (broadcast, reduce, gather, scatter)
    MPICH's classic binomial tree (:func:`simcoll.plan.trees.binomial_tree`).
    Broadcast moves the whole buffer over every edge, cut into ``n_channels x n_chunks``
    pieces (as the ring does): a rank forwards a piece to all its children at once, one
    connection each, as soon as it has arrived.
    Reduce, gather and scatter run as MPICH runs them (``MPIR_Reduce_intra_binomial``,
    ``MPIR_Gather_intra_binomial``, ``MPIR_Scatter_intra_binomial``): a rank serves its
    children one after another. Going up (reduce, gather) it receives from its children
    mask 1 first, each receive posted once the one before has completed, then
    sends its partial sum (reduce) or its whole subtree's blocks (gather) to its parent;
    going down (scatter) it sends each child the blocks of that child's subtree, the
    largest mask first, each send once the one before has arrived. Each step moves its whole
    message by default (:data:`~simcoll.algorithms.chunking.STEPWISE`); cut into pieces
    by request, piece j of a step follows piece j of the step before.

Double binary tree (all-reduce)
    NCCL's two complementary binary trees (:func:`simcoll.plan.trees.double_binary_tree`),
    across nodes with a chain inside each (:func:`simcoll.plan.trees.node_trees`).
    The buffer is cut into ``2 x n_channels x n_chunks`` pieces: channel c carries
    1/(2 n_channels) of it on tree ``c mod 2``. In each tree a piece is reduced up to the
    root (a rank adds a piece into its parent's once its children's copies of that piece
    have been added into its own) and then copied down from the root (a rank forwards it
    as soon as it has arrived), so pieces going up overlap pieces going down. Each rank
    sends and receives S/2 per tree edge it touches: an inner node with two children and
    a parent 3 S/2, a leaf S/2, about 2 S over both trees.

In NCCL a tree spans nodes and the GPUs of a node form a chain; here every rank is a
tree node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Op, Schedule, ScheduleBuilder
from simcoll.plan.trees import Tree, binomial_tree, msb_binomial_tree, node_trees

__all__ = [
    "ALGORITHMS",
    "msb_tree_broadcast",
    "tree_allreduce",
    "tree_broadcast",
    "tree_gather",
    "tree_reduce",
    "tree_scatter",
]


IntArray = npt.NDArray[np.int64]
PiecesOf = Callable[[int, int, int], list[int]]
Lane = tuple[int, int]  # (channel, chunk)
Arrivals = dict[tuple[int, Lane], list[int]]  # (rank, lane) -> transfers arriving there


def _up(
    b: ScheduleBuilder,
    tree: Tree,
    lanes: list[Lane],
    pieces: PiecesOf,
    op: Op,
    *,
    in_turn: bool = False,
) -> Arrivals:
    """Every rank but the root sends each lane up once its children's lanes arrived.

    ``pieces(rank, channel, chunk)`` is what the edge above ``rank`` carries. With
    ``in_turn``, a parent receives from its children one after another, in the reverse
    of their listed order (MPICH's: mask 1 first): a child's lane waits for the lane of
    the child before it to have arrived. Returns the transfers arriving at each (rank, lane).
    """
    into: Arrivals = {}
    for rank in _bottom_up(tree, in_turn):
        parent = tree.parent[rank]
        for lane in lanes:
            deps = list(into.get((rank, lane), ()))
            if in_turn:
                deps += into.get((parent, lane), ())[-1:]  # the sibling received before
            t = b.add(src=rank, dst=parent, pieces=pieces(rank, *lane), op=op,
                      channel=lane[0], deps=deps)  # fmt: skip
            into.setdefault((parent, lane), []).append(t)
    return into


def _bottom_up(tree: Tree, in_turn: bool) -> list[int]:
    """Every rank but the root, each after its children; with ``in_turn`` also each
    after the siblings received before it (those listed after it)."""
    if not in_turn:
        return tree.top_down()[:0:-1]
    ranks: list[int] = []

    def visit(rank: int) -> None:
        for child in reversed(tree.children[rank]):
            visit(child)
            ranks.append(child)

    visit(tree.root)
    return ranks


def _down(
    b: ScheduleBuilder,
    tree: Tree,
    lanes: list[Lane],
    pieces: PiecesOf,
    *,
    at_root: Arrivals | None = None,
    in_turn: bool = False,
) -> None:
    """Every rank forwards each lane to its children once it has arrived (copies).

    ``pieces(child, channel, chunk)`` is what the edge above ``child`` carries; the
    root's sends wait for ``at_root[root, lane]``. With ``in_turn``, a rank sends to its
    children one after another in their listed order (MPICH's: the largest mask first):
    a child's lane waits for the lane sent to the child before it to have arrived.
    """
    arrived: Arrivals = dict(at_root or {})
    for rank in tree.top_down():
        for i, child in enumerate(tree.children[rank]):
            for lane in lanes:
                deps = list(arrived.get((rank, lane), ()))
                if in_turn and i:
                    deps += arrived[tree.children[rank][i - 1], lane]
                t = b.add(src=rank, dst=child, pieces=pieces(child, *lane), op=Op.COPY,
                          channel=lane[0], deps=deps)  # fmt: skip
                arrived[child, lane] = [t]


def _builder(
    collective: Collective,
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int,
    n_chunks: int,
    max_in_flight: int,
    root: int = 0,
    trees: int = 1,
    algorithm: str = "tree",
) -> ScheduleBuilder:
    return ScheduleBuilder(
        collective,
        algorithm,
        n_ranks=n_ranks,
        size_bytes=size_bytes,
        pieces_per_block=trees * n_channels * n_chunks,
        root=root,
        max_in_flight=max_in_flight,
        params={"n_channels": n_channels, "n_chunks": n_chunks, "max_in_flight": max_in_flight},
    )


def _lanes(channels: Sequence[int], n_chunks: int) -> list[Lane]:
    return [(channel, chunk) for chunk in range(n_chunks) for channel in channels]


def tree_broadcast(
    n_ranks: int,
    size_bytes: int,
    *,
    root: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Binomial-tree broadcast: the buffer flows down, pipelined in pieces.

    The root sends S to each of its ceil(log2 n) children; every other rank receives S.

    >>> s = tree_broadcast(5, 50, root=1)
    >>> [(t.src, t.dst) for t in s.transfers()], s.bytes_sent_per_rank().tolist()
    ([(1, 0), (1, 3), (1, 2), (3, 4)], [0, 150, 0, 50, 0])
    """
    return _broadcast(binomial_tree(n_ranks, root), "tree", size_bytes, n_channels=n_channels,
                      n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip


def msb_tree_broadcast(
    n_ranks: int,
    size_bytes: int,
    *,
    root: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Broadcast down gloo's binomial tree (:func:`msb_binomial_tree`), pipelined in
    pieces as :func:`tree_broadcast`.

    >>> s = msb_tree_broadcast(4, 40)
    >>> [(t.src, t.dst) for t in s.transfers()], s.bytes_sent_per_rank().tolist()
    ([(0, 1), (0, 2), (1, 3)], [80, 40, 0, 0])
    """
    tree = msb_binomial_tree(n_ranks, root)
    return _broadcast(tree, "msb_tree", size_bytes, n_channels=n_channels, n_chunks=n_chunks,
                      max_in_flight=max_in_flight)  # fmt: skip


def _broadcast(
    tree: Tree,
    algorithm: str,
    size_bytes: int,
    *,
    n_channels: int,
    n_chunks: int,
    max_in_flight: int,
) -> Schedule:
    """The buffer down ``tree``, each piece forwarded as soon as it has arrived."""
    b = _builder(Collective.BROADCAST, len(tree.parent), size_bytes, root=tree.root,
                 n_channels=n_channels, n_chunks=n_chunks, max_in_flight=max_in_flight,
                 algorithm=algorithm)  # fmt: skip
    _down(b, tree, _lanes(range(n_channels), n_chunks),
          lambda _, channel, chunk: [channel * n_chunks + chunk])  # fmt: skip
    return b.build()


def tree_reduce(
    n_ranks: int,
    size_bytes: int,
    *,
    root: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Binomial-tree reduce as MPICH runs it: a rank adds in its children's partial sums
    one after another (mask 1 first), then sends its own up; whole by default.

    >>> s = tree_reduce(4, 40)
    >>> [(t.src, t.dst, t.op.value, t.deps) for t in s.transfers()]  # 2 -> 0 after 1 -> 0
    [(1, 0, 'reduce', ()), (3, 2, 'reduce', ()), (2, 0, 'reduce', (1, 0))]
    """
    b = _builder(Collective.REDUCE, n_ranks, size_bytes, root=root, n_channels=n_channels,
                 n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    _up(b, binomial_tree(n_ranks, root), _lanes(range(n_channels), n_chunks),
        lambda _, channel, chunk: [channel * n_chunks + chunk], Op.REDUCE,
        in_turn=True)  # fmt: skip
    return b.build()


def _subtree_pieces(tree: Tree, per_block: int, n_chunks: int) -> PiecesOf:
    """Pieces of lane (channel, chunk) of every block in the subtree below each rank."""
    below: list[list[int]] = [[] for _ in tree.parent]
    for rank in reversed(tree.top_down()):
        below[rank] = sorted([rank, *(r for c in tree.children[rank] for r in below[c])])
    return lambda rank, channel, chunk: [
        block * per_block + channel * n_chunks + chunk for block in below[rank]
    ]


def tree_gather(
    n_ranks: int,
    size_bytes: int,
    *,
    root: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Binomial-tree gather as MPICH runs it: each rank sends up the blocks of its whole
    subtree, once its children's have arrived one after another (mask 1 first).

    >>> s = tree_gather(4, 40)
    >>> [(t.src, t.dst, t.size_bytes, t.deps) for t in s.transfers()]
    [(1, 0, 10, ()), (3, 2, 10, ()), (2, 0, 20, (1, 0))]
    """
    b = _builder(Collective.GATHER, n_ranks, size_bytes, root=root, n_channels=n_channels,
                 n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    tree = binomial_tree(n_ranks, root)
    pieces = _subtree_pieces(tree, b.pieces_per_block, n_chunks)
    _up(b, tree, _lanes(range(n_channels), n_chunks), pieces, Op.COPY, in_turn=True)
    return b.build()


def tree_scatter(
    n_ranks: int,
    size_bytes: int,
    *,
    root: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Binomial-tree scatter as MPICH runs it: each rank receives the blocks of its whole
    subtree; a rank sends to its children one after another, largest subtree first.

    >>> s = tree_scatter(4, 40)
    >>> [(t.src, t.dst, t.size_bytes) for t in s.transfers()]
    [(0, 2, 20), (0, 1, 10), (2, 3, 10)]
    """
    b = _builder(Collective.SCATTER, n_ranks, size_bytes, root=root, n_channels=n_channels,
                 n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    tree = binomial_tree(n_ranks, root)
    pieces = _subtree_pieces(tree, b.pieces_per_block, n_chunks)
    _down(b, tree, _lanes(range(n_channels), n_chunks), pieces, in_turn=True)
    return b.build()


def tree_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    gpus_per_node: int = 1,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    trees: Sequence[Tree] | None = None,
) -> Schedule:
    """NCCL's double-binary-tree all-reduce: each channel reduces its share of the buffer up
    its tree and broadcasts it back down.

    Without ``trees``, channels 0, 2, ... run tree 0 and channels 1, 3, ... tree 1 of
    :func:`~simcoll.plan.trees.node_trees` (2 x n_channels in all): with ``gpus_per_node =
    g`` the trees span nodes of g consecutive ranks with a chain inside each node, as NCCL
    builds them. With ``trees`` (one per channel, from a plan), channel c runs
    ``trees[c]`` and ``n_channels`` and ``gpus_per_node`` are not used.

    >>> s = tree_allreduce(4, 64)
    >>> s.n_channels, s.bytes_sent_per_rank().tolist()
    (2, [64, 128, 128, 64])
    """
    if trees is None:
        pair = node_trees(n_ranks, gpus_per_node)
        per_channel = [pair[c % 2] for c in range(2 * n_channels)]
    else:
        per_channel = list(trees)
        for index, tree in enumerate(per_channel):
            if sorted(tree.top_down()) != list(range(n_ranks)):
                raise ScheduleError(f"tree: channel {index}'s tree does not span {n_ranks} ranks")
    # Without trees the parameter counts channels per tree, as before plans existed.
    shares = (n_channels, 2) if trees is None else (len(per_channel), 1)
    b = _builder(Collective.ALLREDUCE, n_ranks, size_bytes, n_channels=shares[0],
                 n_chunks=n_chunks, max_in_flight=max_in_flight, trees=shares[1])  # fmt: skip

    for channel, tree in enumerate(per_channel):
        _up_and_down(b, tree, channel, n_chunks)
    return b.build()


def _up_and_down(b: ScheduleBuilder, tree: Tree, channel: int, n_chunks: int) -> None:
    """One channel's reduction up ``tree`` and broadcast down it, as arrays: the same
    transfers, order and dependencies as :func:`_up` then :func:`_down` (children's
    reductions before their parent's, the root's down sends after every reduction into
    it), built with numpy because NCCL-sized trees have millions of them."""
    n, k = len(tree.parent), n_chunks
    if n < 2:
        return
    parent = np.array(tree.parent, dtype=np.int64)
    up = np.array(tree.top_down()[1:][::-1], dtype=np.int64)  # senders, in order
    up_at = np.empty(n, dtype=np.int64)
    up_at[up] = np.arange(n - 1)
    # Children of each rank, in the order their reductions are added.
    by_parent = np.lexsort((up_at[up], parent[up]))
    kids = up[by_parent]
    kids_ptr = np.searchsorted(parent[kids], np.arange(n + 1))
    base = b.n_transfers
    chunk = np.arange(k, dtype=np.int64)

    def into(ranks: IntArray) -> tuple[IntArray, IntArray]:
        """Deps of the lanes of each rank on its children's reductions (CSR)."""
        counts = np.repeat(kids_ptr[ranks + 1] - kids_ptr[ranks], k)
        row_rank, row_chunk = np.repeat(ranks, k), np.tile(chunk, len(ranks))
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        row = np.repeat(np.arange(len(counts)), counts)
        child = kids[kids_ptr[row_rank[row]] + np.arange(int(indptr[-1])) - indptr[row]]
        return indptr, base + up_at[child] * k + row_chunk[row]

    pieces = np.tile(channel * k + chunk, n - 1)
    indptr, deps = into(up)
    b.extend(np.repeat(up, k), np.repeat(parent[up], k), pieces, Op.REDUCE, channel, indptr,
             deps)  # fmt: skip
    down_base = b.n_transfers
    senders = np.array([r for r in tree.top_down() for _ in tree.children[r]], dtype=np.int64)
    receivers = np.array([c for r in tree.top_down() for c in tree.children[r]], dtype=np.int64)
    down_at = np.empty(n, dtype=np.int64)
    down_at[receivers] = np.arange(n - 1)
    root_indptr, root_deps = into(np.array([tree.root], dtype=np.int64))  # per chunk
    at_root = np.repeat(senders == tree.root, k)
    row_sender = np.repeat(senders, k)
    row_chunk = np.tile(chunk, n - 1)
    counts = np.where(at_root, root_indptr[1] - root_indptr[0], 1)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    deps = np.empty(int(indptr[-1]), dtype=np.int64)
    single = ~at_root
    deps[indptr[:-1][single]] = down_base + down_at[row_sender[single]] * k + row_chunk[single]
    width = int(root_indptr[1])
    for offset in range(width):
        deps[indptr[:-1][at_root] + offset] = root_deps[row_chunk[at_root] * width + offset]
    b.extend(row_sender, np.repeat(receivers, k), pieces, Op.COPY, channel, indptr, deps)


ALGORITHMS: dict[tuple[Collective, str], Callable[..., Schedule]] = {
    (Collective.BROADCAST, "tree"): tree_broadcast,
    (Collective.BROADCAST, "msb_tree"): msb_tree_broadcast,
    (Collective.REDUCE, "tree"): tree_reduce,
    (Collective.GATHER, "tree"): tree_gather,
    (Collective.SCATTER, "tree"): tree_scatter,
    (Collective.ALLREDUCE, "tree"): tree_allreduce,
}
"""Binomial trees for the rooted collectives (and gloo's for broadcast), NCCL's double
binary tree for all-reduce."""
