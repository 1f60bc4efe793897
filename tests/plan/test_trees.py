"""NCCL's and MPICH's trees as neighbour maths (simcoll.plan.trees), checked against
NCCL's own pictures and by their shape laws."""

from __future__ import annotations

import math

import pytest

from simcoll.plan.trees import binomial_tree, double_binary_tree, node_trees

# NCCL's own pictures in src/graph/trees.cc, child -> parent. Tree 0 for n = 14:
#   0 -> 8;  8 -> 4, 12;  4 -> 2, 6;  12 -> 10, 13;  2 -> 1, 3;  6 -> 5, 7;  10 -> 9, 11
BTREE_14 = {8: 0, 4: 8, 12: 8, 2: 4, 6: 4, 10: 12, 13: 12, 1: 2, 3: 2, 5: 6, 7: 6, 9: 10, 11: 10}


# Double tree, n = 12 (tree 1 is the mirror, root 11):
#   11 -> 3;  3 -> 1, 7;  1 -> 0, 2;  7 -> 5, 9;  5 -> 4, 6;  9 -> 8, 10
DTREE1_12 = {3: 11, 1: 3, 7: 3, 0: 1, 2: 1, 5: 7, 9: 7, 4: 5, 6: 5, 8: 9, 10: 9}


# n = 13 (tree 1 is tree 0 shifted by one rank, root 1):
#   1 -> 9;  9 -> 5, 0;  5 -> 3, 7;  0 -> 11;  3 -> 2, 4;  7 -> 6, 8;  11 -> 10, 12
DTREE1_13 = {9: 1, 5: 9, 0: 9, 3: 5, 7: 5, 11: 0, 2: 3, 4: 3, 6: 7, 8: 7, 10: 11, 12: 11}


def _parents(table: dict[int, int], n: int) -> tuple[int, ...]:
    return tuple(table.get(r, -1) for r in range(n))


def test_trees_match_the_pictures_in_nccl():
    assert double_binary_tree(14)[0].parent == _parents(BTREE_14, 14)
    assert double_binary_tree(14)[0].children[12] == (10, 13)
    assert double_binary_tree(12)[1].parent == _parents(DTREE1_12, 12)
    assert double_binary_tree(13)[1].parent == _parents(DTREE1_13, 13)
    # Tree 0 of n = 13 is n = 14's without rank 13.
    assert double_binary_tree(13)[0].parent == _parents(BTREE_14, 13)


@pytest.mark.parametrize("n", range(1, 40))
def test_tree_shapes(n):
    t0, t1 = double_binary_tree(n)
    binomial = binomial_tree(n, root=n // 2)
    for tree in (t0, t1, binomial):
        assert sorted(tree.top_down()) == list(range(n))  # spans every rank once
        for rank in range(n):
            for child in tree.children[rank]:
                assert tree.parent[child] == rank
    # ncclGetDtreeRoots: tree 1 is rooted at 1 for odd n > 1, else at n - 1.
    assert (t0.root, t1.root, binomial.root) == (0, 1 if n % 2 and n > 1 else n - 1, n // 2)
    assert max(len(c) for tree in (t0, t1) for c in tree.children) <= 2
    # Depths derived in the module docstring.
    assert binomial.depth() == n.bit_length() - 1
    assert t0.depth() == t1.depth() == (math.ceil(math.log2(n)) if n > 1 else 0)
    assert len(binomial.children[binomial.root]) == math.ceil(math.log2(n))
    # Complementary: tree 0's inner nodes are the even ranks (an even rank has its down0
    # child), tree 1's the odd ones (mirror of the even ranks for even n; even ranks
    # plus one for odd n, which makes rank 0 = (n - 1) + 1 inner in both).
    if n > 1:
        inner0 = {r for r in range(n) if t0.children[r]}
        inner1 = {r for r in range(n) if t1.children[r]}
        assert inner0 == set(range(0, n, 2))
        assert inner1 == set(range(1, n, 2)) | ({0} if n % 2 else set())


def test_node_trees_are_a_tree_of_node_heads_with_chains_inside() -> None:
    # 4 nodes of 3 GPUs. Across nodes NCCL's tree 0 on 4 nodes is 0 -> 2; 2 -> 1, 3
    # (ncclGetBtree), so the heads 0, 6, 3, 9 hang as 0 -> 6 -> (3, 9); inside node k
    # the chain is 3k -> 3k+1 -> 3k+2.
    tree0, tree1 = node_trees(12, 3)
    across0, across1 = double_binary_tree(4)
    assert across0.parent == (-1, 2, 0, 2)
    assert tree0.parent == (-1, 0, 1, 6, 3, 4, 0, 6, 7, 6, 9, 10)
    assert tree0.depth() == across0.depth() + 2  # two more hops down the deepest chain
    assert tree1.root == across1.root * 3
    # Every node's traffic to other nodes leaves from its head: 2 of 3 ranks have no
    # edge outside their node.
    for tree in (tree0, tree1):
        for rank in range(12):
            if rank % 3:
                assert tree.parent[rank] // 3 == rank // 3
