"""Per-rank traffic equals the textbook volume (issue 4), for the ring family.

Volumes (nccl-tests doc/PERFORMANCE.md; Thakur et al. 2005): ring all-reduce sends and
receives 2(n-1)/n x S per rank; ring reduce-scatter and all-gather (n-1)/n x S; a
broadcast chain's root sends S once and every other rank receives S.
"""

from __future__ import annotations

import pytest

from simcoll.algorithms import build_schedule


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
@pytest.mark.parametrize(("channels", "chunks"), [(1, 1), (2, 4)])
def test_ring_volumes(n: int, channels: int, chunks: int) -> None:
    size = n * channels * chunks * 64

    def volumes(collective: str) -> tuple[list[int], list[int]]:
        s = build_schedule(collective, "ring", n_ranks=n, size_bytes=size,
                           n_channels=channels, n_chunks=chunks)  # fmt: skip
        return s.bytes_sent_per_rank().tolist(), s.bytes_received_per_rank().tolist()

    assert volumes("allreduce") == ([2 * (n - 1) * size // n] * n,) * 2
    assert volumes("reducescatter") == ([(n - 1) * size // n] * n,) * 2
    assert volumes("allgather") == ([(n - 1) * size // n] * n,) * 2


@pytest.mark.parametrize("root", [0, 2])
def test_broadcast_chain_root_sends_s_and_everyone_else_receives_s(root: int) -> None:
    n, size = 5, 5000
    s = build_schedule("broadcast", "ring", n_ranks=n, size_bytes=size, root=root)
    sent, received = s.bytes_sent_per_rank().tolist(), s.bytes_received_per_rank().tolist()
    last = (root - 1) % n  # the chain root -> root+1 -> ... ends just before the root
    assert sent == [0 if r == last else size for r in range(n)]
    assert received == [0 if r == root else size for r in range(n)]
