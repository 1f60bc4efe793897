"""Direct algorithms: every rank sends straight to the ranks that need its data.

These are the naive algorithms, one step deep: all-to-all as pairwise sends, gather and
scatter as sends to and from the root, broadcast and reduce as a root talking to every
rank at once. They are bandwidth-optimal only where the root's link is not the
bottleneck, which is what makes them a useful contrast to rings and trees.

Every send of a block is cut into ``n_channels x n_chunks`` pieces; pieces on one channel
between one pair of ranks go one after another (one connection), channels in parallel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from simcoll.core.collectives import Collective
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Op, Schedule, ScheduleBuilder

__all__ = [
    "direct_allgather",
    "direct_allreduce",
    "direct_alltoall",
    "direct_broadcast",
    "direct_gather",
    "direct_reduce",
    "direct_reducescatter",
    "direct_scatter",
    "direct_sendrecv",
    "reduce_broadcast_allreduce",
]

DepsOf = Callable[[int], Iterable[int]]
IntArray = npt.NDArray[np.int64]


class _Direct:
    """A ScheduleBuilder plus the channel/chunk cut shared by all direct algorithms."""

    def __init__(
        self,
        collective: Collective,
        algorithm: str,
        n_ranks: int,
        size_bytes: int,
        *,
        root: int,
        n_channels: int,
        n_chunks: int,
        max_in_flight: int,
        sub_blocks: int = 1,
    ) -> None:
        self.n_channels = n_channels
        self.n_chunks = n_chunks
        self.per_block = n_channels * n_chunks
        self.b = ScheduleBuilder(
            collective,
            algorithm,
            n_ranks=n_ranks,
            size_bytes=size_bytes,
            pieces_per_block=sub_blocks * self.per_block,
            root=root,
            max_in_flight=max_in_flight,
            params={"n_channels": n_channels, "n_chunks": n_chunks, "max_in_flight": max_in_flight},
        )

    def send(
        self, src: int, dst: int, block: int, op: Op, deps_of: DepsOf | None = None
    ) -> dict[int, int]:
        """Send every piece of ``block`` from src to dst; returns {piece: transfer}."""
        sent = {}
        for chunk in range(self.n_chunks):
            for channel in range(self.n_channels):
                piece = block * self.per_block + channel * self.n_chunks + chunk
                deps = deps_of(piece) if deps_of else ()
                sent[piece] = self.b.add(
                    src=src, dst=dst, pieces=[piece], op=op, channel=channel, deps=deps
                )
        return sent

    def send_every_pair(self, block: Callable[[IntArray, IntArray], IntArray], op: Op) -> None:
        """:meth:`send` from every rank to every other (each rank's peers as
        :meth:`others` lists them), block ``block(src, dst)``, with no dependencies: the
        same transfers in the same order, built with numpy (a million at 1,024 ranks)."""
        n, per = self.b.n_ranks, self.per_block
        src = np.repeat(np.arange(n, dtype=np.int64), n - 1)
        dst = (src + np.tile(np.arange(1, n, dtype=np.int64), n)) % n
        self.b.expect(len(src) * per)
        chunk = np.repeat(np.arange(self.n_chunks, dtype=np.int64), self.n_channels)
        channel = np.tile(np.arange(self.n_channels, dtype=np.int64), self.n_chunks)
        pieces = block(src, dst)[:, None] * per + channel * self.n_chunks + chunk
        self.b.extend(np.repeat(src, per), np.repeat(dst, per), pieces.ravel(), op,
                      np.tile(channel, len(src)), np.zeros(len(src) * per + 1, dtype=np.int64),
                      np.zeros(0, dtype=np.int64))  # fmt: skip

    def others(self, rank: int) -> list[int]:
        """Every rank but ``rank``, starting after it (so sends spread over peers)."""
        n = self.b.n_ranks
        return [(rank + k) % n for k in range(1, n)]


@dataclass(frozen=True)
class _Cut:
    """How every block is cut: channels x chunks, and the per-connection window."""

    n_channels: int
    n_chunks: int
    max_in_flight: int


def _make(
    collective: Collective,
    n_ranks: int,
    size_bytes: int,
    *,
    cut: _Cut,
    root: int = 0,
    algorithm: str = "direct",
    sub_blocks: int = 1,
) -> _Direct:
    return _Direct(
        collective,
        algorithm,
        n_ranks,
        size_bytes,
        root=root,
        n_channels=cut.n_channels,
        n_chunks=cut.n_chunks,
        max_in_flight=cut.max_in_flight,
        sub_blocks=sub_blocks,
    )


def direct_allgather(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Every rank sends its block to every other rank.

    >>> direct_allgather(3, 30).bytes_sent_per_rank().tolist()
    [20, 20, 20]
    """
    d = _make(
        Collective.ALLGATHER, n_ranks, size_bytes, cut=_Cut(n_channels, n_chunks, max_in_flight)
    )
    d.send_every_pair(lambda src, _dst: src, Op.COPY)
    return d.b.build()


def direct_reducescatter(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Every rank adds its copy of block b into rank b's, for every b but its own.

    >>> direct_reducescatter(3, 30).bytes_received_per_rank().tolist()
    [20, 20, 20]
    """
    d = _make(
        Collective.REDUCESCATTER, n_ranks, size_bytes, cut=_Cut(n_channels, n_chunks, max_in_flight)
    )
    d.send_every_pair(lambda _src, dst: dst, Op.REDUCE)
    return d.b.build()


def direct_alltoall(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Rank s sends block (s, d) to rank d for every d != s (pairwise exchange).

    >>> direct_alltoall(4, 64).bytes_sent_per_rank().tolist()
    [48, 48, 48, 48]
    """
    d = _make(
        Collective.ALLTOALL, n_ranks, size_bytes, cut=_Cut(n_channels, n_chunks, max_in_flight)
    )
    d.send_every_pair(lambda src, dst: src * n_ranks + dst, Op.COPY)
    return d.b.build()


def direct_broadcast(
    n_ranks: int,
    size_bytes: int,
    *,
    root: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """The root sends the whole buffer to every other rank at once.

    >>> direct_broadcast(4, 64, root=1).bytes_sent_per_rank().tolist()
    [0, 192, 0, 0]
    """
    d = _make(
        Collective.BROADCAST,
        n_ranks,
        size_bytes,
        root=root,
        cut=_Cut(n_channels, n_chunks, max_in_flight),
    )
    root = d.b.root
    for dst in d.others(root):
        d.send(root, dst, 0, Op.COPY)
    return d.b.build()


def direct_reduce(
    n_ranks: int,
    size_bytes: int,
    *,
    root: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Every other rank adds its buffer into the root's at once.

    >>> direct_reduce(4, 64).bytes_received_per_rank().tolist()
    [192, 0, 0, 0]
    """
    d = _make(
        Collective.REDUCE,
        n_ranks,
        size_bytes,
        root=root,
        cut=_Cut(n_channels, n_chunks, max_in_flight),
    )
    root = d.b.root
    for src in d.others(root):
        d.send(src, root, 0, Op.REDUCE)
    return d.b.build()


def direct_gather(
    n_ranks: int,
    size_bytes: int,
    *,
    root: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Every other rank sends its block to the root.

    >>> direct_gather(4, 64).bytes_received_per_rank().tolist()
    [48, 0, 0, 0]
    """
    d = _make(
        Collective.GATHER,
        n_ranks,
        size_bytes,
        root=root,
        cut=_Cut(n_channels, n_chunks, max_in_flight),
    )
    root = d.b.root
    for src in d.others(root):
        d.send(src, root, src, Op.COPY)
    return d.b.build()


def direct_scatter(
    n_ranks: int,
    size_bytes: int,
    *,
    root: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """The root sends block r to rank r, for every other rank.

    >>> direct_scatter(4, 64).bytes_sent_per_rank().tolist()
    [48, 0, 0, 0]
    """
    d = _make(
        Collective.SCATTER,
        n_ranks,
        size_bytes,
        root=root,
        cut=_Cut(n_channels, n_chunks, max_in_flight),
    )
    root = d.b.root
    for dst in d.others(root):
        d.send(root, dst, dst, Op.COPY)
    return d.b.build()


def direct_sendrecv(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Rank r sends its buffer to rank (r + 1) mod n, as nccl-tests' sendrecv_perf does.

    With one rank there is nothing to move.

    >>> [(t.src, t.dst, t.size_bytes) for t in direct_sendrecv(3, 8).transfers()]
    [(0, 1, 8), (1, 2, 8), (2, 0, 8)]
    """
    d = _make(
        Collective.SENDRECV, n_ranks, size_bytes, cut=_Cut(n_channels, n_chunks, max_in_flight)
    )
    if n_ranks > 1:
        for src in range(n_ranks):
            d.send(src, (src + 1) % n_ranks, src, Op.COPY)
    return d.b.build()


def direct_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """A direct reduce-scatter, then a direct all-gather of the reduced blocks.

    The buffer is cut into n sub-blocks; rank b reduces sub-block b from everyone, then
    sends it to everyone. Each rank sends 2(n-1)/n x S, as a ring does, in two steps.

    >>> direct_allreduce(4, 64).bytes_sent_per_rank().tolist()
    [96, 96, 96, 96]
    """
    d = _make(
        Collective.ALLREDUCE,
        n_ranks,
        size_bytes,
        sub_blocks=n_ranks,
        cut=_Cut(n_channels, n_chunks, max_in_flight),
    )
    # every all-gather piece waits for the n - 1 reductions of its sub-block: n^3 in all
    pairs = n_ranks * (n_ranks - 1) * d.per_block
    d.b.expect(2 * pairs, n_dependencies=pairs * (n_ranks - 1))
    reduced: dict[int, list[int]] = {}
    for src in range(n_ranks):
        for dst in d.others(src):
            for piece, t in d.send(src, dst, dst, Op.REDUCE).items():
                reduced.setdefault(piece, []).append(t)
    for src in range(n_ranks):
        for dst in d.others(src):
            d.send(src, dst, src, Op.COPY, deps_of=lambda p: reduced.get(p, ()))
    return d.b.build()


def reduce_broadcast_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """All-reduce as a direct reduce to the root, then a direct broadcast from it.

    The root receives and then sends (n-1) x S: its link is the bottleneck, which is why
    this is slower than a ring for large messages.

    >>> s = reduce_broadcast_allreduce(4, 64)
    >>> s.bytes_sent_per_rank().tolist(), s.bytes_received_per_rank().tolist()
    ([192, 64, 64, 64], [192, 64, 64, 64])
    """
    d = _make(Collective.ALLREDUCE, n_ranks, size_bytes, algorithm="reduce_broadcast",
              cut=_Cut(n_channels, n_chunks, max_in_flight))  # fmt: skip
    root = d.b.root
    reduced: dict[int, list[int]] = {}
    for src in d.others(root):
        for piece, t in d.send(src, root, 0, Op.REDUCE).items():
            reduced.setdefault(piece, []).append(t)
    for dst in d.others(root):
        d.send(root, dst, 0, Op.COPY, deps_of=lambda p: reduced.get(p, ()))
    return d.b.build()
