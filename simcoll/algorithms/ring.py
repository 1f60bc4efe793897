"""Ring algorithms, as NCCL runs them: channels, chunk pipelining, one peer per rank.

Rank ``r`` sends only to ``(r + 1) mod n`` (the ring below is for n = 4)::

    0 ──► 1 ──► 2 ──► 3
    ▲                 │
    └─────────────────┘

Each block of the buffer is cut into ``n_channels`` parts, one per channel (NCCL runs one
ring per channel, in parallel), and each part into ``n_chunks`` pieces that flow around the
ring one after another. A piece is forwarded as soon as it has arrived, so pieces of one
step overlap the next step: this is the pipelining the fabric honours through each
connection's send order and in-flight window (see :mod:`simcoll.core.schedule`).

Bandwidth-optimal volumes per rank (nccl-tests ``doc/PERFORMANCE.md``): all-reduce sends
2(n-1)/n x S, reduce-scatter and all-gather (n-1)/n x S, broadcast and reduce S (every rank
but one end of the chain).
"""

from __future__ import annotations

from simcoll.core.collectives import Collective
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Op, Schedule, ScheduleBuilder

__all__ = [
    "ring_allgather",
    "ring_allreduce",
    "ring_broadcast",
    "ring_reduce",
    "ring_reducescatter",
]


def _builder(
    collective: Collective,
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int,
    n_chunks: int,
    max_in_flight: int,
    root: int = 0,
) -> ScheduleBuilder:
    # All-reduce has a single block; the ring cuts it into n ring blocks of its own.
    ring_blocks = n_ranks if collective is Collective.ALLREDUCE else 1
    return ScheduleBuilder(
        collective,
        "ring",
        n_ranks=n_ranks,
        size_bytes=size_bytes,
        pieces_per_block=ring_blocks * n_channels * n_chunks,
        root=root,
        max_in_flight=max_in_flight,
        params={"n_channels": n_channels, "n_chunks": n_chunks, "max_in_flight": max_in_flight},
    )


def _ring_phase(
    b: ScheduleBuilder,
    *,
    op: Op,
    block_at: int,
    n_channels: int,
    n_chunks: int,
    after: dict[tuple[int, int, int], int],
) -> dict[tuple[int, int, int], int]:
    """n - 1 ring steps; at step s rank r sends ring block (r + block_at - s) mod n to r + 1.

    Ring block i is pieces [i * P, (i + 1) * P) with P = n_channels * n_chunks: for
    all-gather and reduce-scatter that is the collective's block i.

    ``after[r, c, j]`` is the transfer that must arrive at rank r before its first send
    of channel c, chunk j. Returns the same map for the transfers this phase delivers last.
    """
    n = b.n_ranks
    last = dict(after)
    for step in range(n - 1):
        arrived: dict[tuple[int, int, int], int] = {}
        for chunk in range(n_chunks):
            for rank in range(n):
                block = (rank + block_at - step) % n
                for channel in range(n_channels):
                    dep = last.get((rank, channel, chunk))
                    t = b.add(
                        src=rank,
                        dst=(rank + 1) % n,
                        pieces=[(block * n_channels + channel) * n_chunks + chunk],
                        op=op,
                        channel=channel,
                        deps=() if dep is None else (dep,),
                    )
                    arrived[(rank + 1) % n, channel, chunk] = t
        last = arrived
    return last


def ring_reducescatter(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Ring reduce-scatter: n - 1 steps; rank r ends with block r reduced over all ranks.

    At step s rank r adds block (r - s - 1) mod n into its successor's copy.

    >>> s = ring_reducescatter(4, 64)
    >>> s.n_transfers, s.bytes_sent_per_rank().tolist()
    (12, [48, 48, 48, 48])
    """
    b = _builder(
        Collective.REDUCESCATTER,
        n_ranks,
        size_bytes,
        n_channels=n_channels,
        n_chunks=n_chunks,
        max_in_flight=max_in_flight,
    )
    _ring_phase(b, op=Op.REDUCE, block_at=-1, n_channels=n_channels, n_chunks=n_chunks, after={})
    return b.build()


def ring_allgather(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Ring all-gather: n - 1 steps; at step s rank r forwards block (r - s) mod n.

    >>> s = ring_allgather(4, 64, n_channels=2)
    >>> s.n_transfers, s.transfer_bytes.tolist()[:2]
    (24, [8, 8])
    """
    b = _builder(
        Collective.ALLGATHER,
        n_ranks,
        size_bytes,
        n_channels=n_channels,
        n_chunks=n_chunks,
        max_in_flight=max_in_flight,
    )
    _ring_phase(b, op=Op.COPY, block_at=0, n_channels=n_channels, n_chunks=n_chunks, after={})
    return b.build()


def ring_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Ring all-reduce: a ring reduce-scatter, then a ring all-gather; 2(n - 1) steps.

    The all-gather of block r starts at rank r as soon as its reduction has arrived there.

    >>> s = ring_allreduce(4, 64)
    >>> s.n_transfers, s.bytes_sent_per_rank().tolist()
    (24, [96, 96, 96, 96])
    """
    b = _builder(
        Collective.ALLREDUCE,
        n_ranks,
        size_bytes,
        n_channels=n_channels,
        n_chunks=n_chunks,
        max_in_flight=max_in_flight,
    )
    done = _ring_phase(
        b, op=Op.REDUCE, block_at=-1, n_channels=n_channels, n_chunks=n_chunks, after={}
    )
    _ring_phase(b, op=Op.COPY, block_at=0, n_channels=n_channels, n_chunks=n_chunks, after=done)
    return b.build()


def _chain(b: ScheduleBuilder, *, first: int, op: Op, n_channels: int, n_chunks: int) -> None:
    """Pass every piece along first -> first + 1 -> ... (n - 1 hops), pipelined."""
    n = b.n_ranks
    previous: dict[tuple[int, int], int] = {}
    for hop in range(n - 1):
        src = (first + hop) % n
        for chunk in range(n_chunks):
            for channel in range(n_channels):
                dep = previous.get((channel, chunk))
                previous[channel, chunk] = b.add(
                    src=src,
                    dst=(src + 1) % n,
                    pieces=[channel * n_chunks + chunk],
                    op=op,
                    channel=channel,
                    deps=() if dep is None else (dep,),
                )


def ring_broadcast(
    n_ranks: int,
    size_bytes: int,
    *,
    root: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Ring broadcast: pieces flow root -> root + 1 -> ... -> root - 1, pipelined.

    >>> s = ring_broadcast(4, 64, root=2, n_chunks=2)
    >>> [(t.src, t.dst) for t in s.transfers()][:3]
    [(2, 3), (2, 3), (3, 0)]
    """
    b = _builder(
        Collective.BROADCAST,
        n_ranks,
        size_bytes,
        n_channels=n_channels,
        n_chunks=n_chunks,
        max_in_flight=max_in_flight,
        root=root,
    )
    _chain(b, first=root, op=Op.COPY, n_channels=n_channels, n_chunks=n_chunks)
    return b.build()


def ring_reduce(
    n_ranks: int,
    size_bytes: int,
    *,
    root: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Ring reduce: partial sums flow root + 1 -> root + 2 -> ... -> root, pipelined.

    >>> s = ring_reduce(3, 30, root=0)
    >>> [(t.src, t.dst, t.op.value) for t in s.transfers()]
    [(1, 2, 'reduce'), (2, 0, 'reduce')]
    """
    b = _builder(
        Collective.REDUCE,
        n_ranks,
        size_bytes,
        n_channels=n_channels,
        n_chunks=n_chunks,
        max_in_flight=max_in_flight,
        root=root,
    )
    _chain(b, first=root + 1, op=Op.REDUCE, n_channels=n_channels, n_chunks=n_chunks)
    return b.build()
