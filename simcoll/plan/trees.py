"""Trees over ranks as pure neighbour maths, as NCCL keeps them (``src/graph/trees.cc``).

Binomial tree (MPICH's; Thakur, Rabenseifner & Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 19(1), 2005)
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

Double binary tree (NCCL's)
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

In NCCL a tree spans nodes and the GPUs of a node form a chain (:func:`node_trees`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simcoll.core.errors import ScheduleError

__all__ = [
    "Tree",
    "binomial_tree",
    "double_binary_tree",
    "msb_binomial_tree",
    "node_trees",
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
