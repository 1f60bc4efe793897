"""Tree algorithms: MPI's binomial tree and NCCL's double binary tree.

Binomial tree (broadcast, reduce, gather, scatter)
    MPICH's classic (Thakur, Rabenseifner & Gropp, "Optimization of Collective
    Communication Operations in MPICH", IJHPCA 19(1), 2005). Ranks are renumbered
    relative to the root, ``v = (r - root) mod n``; the parent of ``v > 0`` is ``v``
    with its lowest set bit cleared, and its children are ``v + 2^i`` for every
    ``2^i`` below that bit (below n for the root), largest first. For n = 8::

        0 ──► 4 ──► 6 ──► 7
        │     └───► 5
        ├───► 2 ──► 3
        └───► 1

    The root has ceil(log2 n) children; the tree is floor(log2 n) edges deep (a rank is
    as deep as its relative number has one bits); the subtree of ``v`` is
    ``v .. v + m - 1`` with ``m`` the smaller of v's lowest bit and ``n - v`` (all n
    ranks for the root).
    Broadcast and reduce move the whole buffer over every edge, cut into
    ``n_channels x n_chunks`` pieces (as the ring does): a rank forwards a piece down as
    soon as it has arrived, or up once the pieces of all its children have been added
    into its own. Gather and scatter move, over the edge above ``v``, the blocks of v's
    whole subtree: one transfer per channel and chunk, holding that piece of each of
    those blocks. A rank sends to its children at once, one connection each.

Double binary tree (all-reduce)
    NCCL's trees (``ncclGetBtree`` and ``ncclGetDtree`` in NVIDIA/nccl
    ``src/graph/trees.cc``). Tree 0 is the in-order binary tree given by the bit
    pattern of the rank: rank 0 is the root and has one child, the largest power of two
    below n; a rank whose lowest set bit is ``2^h`` (h >= 1) has children ``r - 2^(h-1)``
    and ``r + 2^(h-1)`` (or ``r + 2^(h-k)``, the first that is a rank), and odd ranks are
    leaves. Tree 1 is tree 0 mirrored (rank r plays ``n - 1 - r``) when n is even and
    shifted by one rank (r plays ``r - 1``) when n is odd, so most leaves of one tree
    are inner nodes of the other. For n = 8::

        tree 0:  0 ──► 4 ─┬─► 2 ─┬─► 1       tree 1:  7 ──► 3 ─┬─► 5 ─┬─► 6
                          │      └─► 3                         │      └─► 4
                          └─► 6 ─┬─► 5                         └─► 1 ─┬─► 2
                                 └─► 7                                └─► 0

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
from dataclasses import dataclass

from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Op, Schedule, ScheduleBuilder

__all__ = [
    "ALGORITHMS",
    "Tree",
    "binomial_tree",
    "double_binary_tree",
    "msb_binomial_tree",
    "msb_tree_broadcast",
    "node_trees",
    "tree_allreduce",
    "tree_broadcast",
    "tree_gather",
    "tree_reduce",
    "tree_scatter",
]


@dataclass(frozen=True)
class Tree:
    """A spanning tree of ranks 0..n-1: each rank's parent (-1 at the root) and children."""

    root: int
    parent: tuple[int, ...]
    children: tuple[tuple[int, ...], ...]

    def top_down(self) -> list[int]:
        """Ranks in breadth-first order from the root (each after its parent)."""
        order = [self.root]
        for rank in order:
            order.extend(self.children[rank])
        return order

    def depth(self) -> int:
        """Edges on the longest root-to-leaf path (0 for a single rank).

        >>> binomial_tree(8).depth(), double_binary_tree(8)[1].depth()
        (3, 3)
        """
        level = {self.root: 0}
        for rank in self.top_down()[1:]:
            level[rank] = level[self.parent[rank]] + 1
        return max(level.values())


def _from_parents(parent: Sequence[int], children: Sequence[Sequence[int]]) -> Tree:
    return Tree(parent.index(-1), tuple(parent), tuple(tuple(c) for c in children))


def binomial_tree(n_ranks: int, root: int = 0) -> Tree:
    """MPICH's binomial tree rooted at ``root``; children listed largest subtree first.

    >>> binomial_tree(6, root=2).children
    ((1,), (), (0, 4, 3), (), (5,), ())
    """
    n = n_ranks
    parent = [-1] * n
    children: list[list[int]] = [[] for _ in range(n)]
    for v in range(n):
        low = v & -v if v else 1 << (n - 1).bit_length()
        rank = (v + root) % n
        if v:
            parent[rank] = (v - low + root) % n
        mask = low >> 1
        while mask:
            if v + mask < n:
                children[rank].append((v + mask + root) % n)
            mask >>= 1
    return _from_parents(parent, children)


def msb_binomial_tree(n_ranks: int, root: int = 0) -> Tree:
    """gloo's binomial tree: the parent of relative rank ``v`` is ``v`` minus its highest
    set bit, its children ``v + 2^i`` for every ``2^i`` above that bit (gloo
    ``gloo/broadcast.cc``; see validation/gloo-algorithms.md). Children are listed largest
    subtree first. It differs from :func:`binomial_tree` in which ranks pair up: for
    n = 4 the root's children are 1 and 2 and rank 1 feeds rank 3 (MPICH: 2 feeds 3).

    >>> msb_binomial_tree(4).children, msb_binomial_tree(6).children
    (((1, 2), (3,), (), ()), ((1, 2, 4), (3, 5), (), (), (), ()))
    """
    n = n_ranks
    parent = [-1] * n
    children: list[list[int]] = [[] for _ in range(n)]
    for v in range(n):
        high = 1 << (v.bit_length() - 1) if v else 0
        rank = (v + root) % n
        if v:
            parent[rank] = (v - high + root) % n
        step = high << 1 if v else 1
        while v + step < n:
            children[rank].append((v + step + root) % n)
            step <<= 1
    return _from_parents(parent, children)


def _btree(n_ranks: int, rank: int) -> tuple[int, int, int]:
    """Parent and two children (-1: none) of ``rank``: NCCL's ``ncclGetBtree``."""
    bit = 1
    while bit < n_ranks and not bit & rank:
        bit <<= 1
    if rank == 0:
        return -1, -1, (bit >> 1 if n_ranks > 1 else -1)
    up = (rank ^ bit) | (bit << 1)
    if up >= n_ranks:
        up = rank ^ bit
    lowbit = bit >> 1
    down0 = -1 if lowbit == 0 else rank - lowbit
    down1 = -1 if lowbit == 0 else rank + lowbit
    while down1 >= n_ranks:  # as in NCCL: halve the step until the child is a rank
        down1 = -1 if lowbit == 0 else rank + lowbit
        lowbit >>= 1
    return up, down0, down1


def _relabel(n: int, which: int, rank: int, *, back: bool = False) -> int:
    """The rank of tree 0 that ``rank`` plays in tree ``which`` (or, ``back``, the reverse)."""
    if which == 0:
        return rank
    if n % 2:
        return (rank + (1 if back else -1)) % n
    return n - 1 - rank


def double_binary_tree(n_ranks: int) -> tuple[Tree, Tree]:
    """NCCL's two complementary binary trees (``ncclGetDtree``).

    Tree 0 is rooted at rank 0; tree 1 at rank 1 when n is odd (shift) and at rank
    n - 1 when n is even (mirror), as ``ncclGetDtreeRoots`` says.

    >>> t0, t1 = double_binary_tree(5)
    >>> t0.parent, t1.parent
    ((-1, 2, 4, 2, 0), (1, -1, 3, 0, 3))
    """
    n = n_ranks
    trees = []
    for which in range(2):
        parent, children = [], []
        for rank in range(n):
            up, *down = _btree(n, _relabel(n, which, rank))
            parent.append(-1 if up == -1 else _relabel(n, which, up, back=True))
            children.append([_relabel(n, which, d, back=True) for d in down if d != -1])
        trees.append(_from_parents(parent, children))
    return trees[0], trees[1]


def node_trees(n_ranks: int, gpus_per_node: int) -> tuple[Tree, Tree]:
    """NCCL's trees across nodes: a double binary tree over the nodes, a chain inside each.

    NCCL builds its trees between servers (``ncclGetDtree`` over node indices) and links
    the GPUs of a server in a chain (``src/graph/connect.cc``): local rank 0 of a node is
    its head, joined to the heads of its parent and child nodes; local rank l hangs below
    local rank l - 1. With ``gpus_per_node = 1`` these are the trees over ranks.

    >>> t0, _ = node_trees(6, 2)  # 3 nodes of 2 GPUs
    >>> t0.parent
    (-1, 0, 4, 2, 0, 4)

    Raises
    ------
    ScheduleError
        If ``gpus_per_node`` does not divide ``n_ranks``.
    """
    g = min(gpus_per_node, n_ranks)
    if n_ranks % g:
        raise ScheduleError(
            f"tree: {n_ranks} ranks do not split into nodes of gpus_per_node = {gpus_per_node}"
        )
    trees = []
    for across in double_binary_tree(n_ranks // g):
        # A non-head hangs on the chain towards its node's head; a head on its parent
        # node's head (the root node's head is the root).
        parent = [
            rank - 1 if rank % g else max(-1, across.parent[rank // g] * g)
            for rank in range(n_ranks)
        ]
        children: list[list[int]] = [[] for _ in range(n_ranks)]
        for rank in range(n_ranks):
            node, local = divmod(rank, g)
            if local == 0:
                children[rank] += [child * g for child in across.children[node]]
            if local + 1 < g:
                children[rank].append(rank + 1)
        trees.append(_from_parents(parent, children))
    return trees[0], trees[1]


PiecesOf = Callable[[int, int, int], list[int]]
Lane = tuple[int, int]  # (channel, chunk)
Arrivals = dict[tuple[int, Lane], list[int]]  # (rank, lane) -> transfers arriving there


def _up(b: ScheduleBuilder, tree: Tree, lanes: list[Lane], pieces: PiecesOf, op: Op) -> Arrivals:
    """Every rank but the root sends each lane up once its children's lanes arrived.

    ``pieces(rank, channel, chunk)`` is what the edge above ``rank`` carries. Returns the
    transfers arriving at each (rank, lane).
    """
    into: Arrivals = {}
    for rank in reversed(tree.top_down()[1:]):
        for lane in lanes:
            t = b.add(src=rank, dst=tree.parent[rank], pieces=pieces(rank, *lane), op=op,
                      channel=lane[0], deps=into.get((rank, lane), ()))  # fmt: skip
            into.setdefault((tree.parent[rank], lane), []).append(t)
    return into


def _down(
    b: ScheduleBuilder,
    tree: Tree,
    lanes: list[Lane],
    pieces: PiecesOf,
    *,
    at_root: Arrivals | None = None,
) -> None:
    """Every rank forwards each lane to its children once it has arrived (copies).

    ``pieces(child, channel, chunk)`` is what the edge above ``child`` carries; the
    root's sends wait for ``at_root[root, lane]``.
    """
    arrived: Arrivals = dict(at_root or {})
    for rank in tree.top_down():
        for child in tree.children[rank]:
            for lane in lanes:
                t = b.add(src=rank, dst=child, pieces=pieces(child, *lane), op=Op.COPY,
                          channel=lane[0], deps=arrived.get((rank, lane), ()))  # fmt: skip
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
    """Binomial-tree reduce: partial sums flow up, pipelined in pieces.

    >>> s = tree_reduce(4, 40)
    >>> [(t.src, t.dst, t.op.value) for t in s.transfers()]
    [(3, 2, 'reduce'), (1, 0, 'reduce'), (2, 0, 'reduce')]
    """
    b = _builder(Collective.REDUCE, n_ranks, size_bytes, root=root, n_channels=n_channels,
                 n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    _up(b, binomial_tree(n_ranks, root), _lanes(range(n_channels), n_chunks),
        lambda _, channel, chunk: [channel * n_chunks + chunk], Op.REDUCE)  # fmt: skip
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
    """Binomial-tree gather: each rank sends up the blocks of its whole subtree.

    >>> s = tree_gather(4, 40)
    >>> [(t.src, t.dst, t.size_bytes) for t in s.transfers()]
    [(3, 2, 10), (1, 0, 10), (2, 0, 20)]
    """
    b = _builder(Collective.GATHER, n_ranks, size_bytes, root=root, n_channels=n_channels,
                 n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    tree = binomial_tree(n_ranks, root)
    pieces = _subtree_pieces(tree, b.pieces_per_block, n_chunks)
    _up(b, tree, _lanes(range(n_channels), n_chunks), pieces, Op.COPY)
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
    """Binomial-tree scatter: each rank receives the blocks of its whole subtree.

    >>> s = tree_scatter(4, 40)
    >>> [(t.src, t.dst, t.size_bytes) for t in s.transfers()]
    [(0, 2, 20), (0, 1, 10), (2, 3, 10)]
    """
    b = _builder(Collective.SCATTER, n_ranks, size_bytes, root=root, n_channels=n_channels,
                 n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    tree = binomial_tree(n_ranks, root)
    pieces = _subtree_pieces(tree, b.pieces_per_block, n_chunks)
    _down(b, tree, _lanes(range(n_channels), n_chunks), pieces)
    return b.build()


def tree_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    gpus_per_node: int = 1,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """NCCL's double-binary-tree all-reduce: half the buffer reduced and broadcast per tree.

    Channels 0, 2, ... run tree 0 and channels 1, 3, ... tree 1 (2 x n_channels in all).
    With ``gpus_per_node = g`` the trees span nodes of g consecutive ranks with a chain
    inside each node, as NCCL builds them (:func:`node_trees`); ``predict`` sets it from
    the topology's servers.

    >>> s = tree_allreduce(4, 64)
    >>> s.n_channels, s.bytes_sent_per_rank().tolist()
    (2, [64, 128, 128, 64])
    """
    b = _builder(Collective.ALLREDUCE, n_ranks, size_bytes, n_channels=n_channels,
                 n_chunks=n_chunks, max_in_flight=max_in_flight, trees=2)  # fmt: skip

    def pieces(_: int, channel: int, chunk: int) -> list[int]:
        return [channel * n_chunks + chunk]

    for index, tree in enumerate(node_trees(n_ranks, gpus_per_node)):
        lanes = _lanes(range(index, 2 * n_channels, 2), n_chunks)
        reduced = _up(b, tree, lanes, pieces, Op.REDUCE)
        at_root = {key: ts for key, ts in reduced.items() if key[0] == tree.root}
        _down(b, tree, lanes, pieces, at_root=at_root)
    return b.build()


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
