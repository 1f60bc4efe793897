"""Bruck's all-gather and the pairwise-exchange all-to-all, as MPICH runs them.

Bruck all-gather (Bruck, Ho, Kipnis, Upfal & Weathersby, "Efficient Algorithms for
All-to-All Communications in Multiport Message-Passing Systems", IEEE TPDS 8(11), 1997;
MPICH's choice for all-gather on a rank count that is not a power of two, per Thakur,
Rabenseifner & Gropp, IJHPCA 2005)
    ceil(log2 n) steps for any n. Before step k rank r holds the 2^k blocks
    r, r+1, ..., r+2^k-1 (mod n); it sends them to rank r - 2^k and receives the next
    2^k from rank r + 2^k, so what it holds doubles. The last step sends only the
    n - 2^k blocks still missing. Every rank sends and receives (n-1)/n x S. MPI
    programs keep blocks in rotated order and fix them with a local copy at the end;
    here blocks have global names, so that rotation costs nothing and is not a transfer.
    For n = 5::

        step 0, distance 1:  r -> r-1  block r          holds r, r+1
        step 1, distance 2:  r -> r-2  blocks r, r+1    holds r .. r+3
        step 2, distance 4:  r -> r-4  block r          holds all 5

Pairwise-exchange all-to-all (MPICH's algorithm for long messages, Thakur, Rabenseifner
& Gropp 2005)
    n - 1 steps; at step s rank r sends its block for rank (r + s) mod n straight to that
    rank and receives from rank (r - s) mod n, so each rank talks to one peer at a time.
    Every rank sends and receives (n-1)/n x S, S being the nccl-tests size (one rank's
    send buffer).

Both run their steps in order, as an MPI send-receive loop does: a rank sends its step
k data once its step k-1 receive has arrived (for Bruck this is the data dependency of
every step but possibly the last; for pairwise exchange it is only the ordering). Each
block is cut into ``n_channels x n_chunks`` pieces; per channel and chunk a step is one
transfer, and chunk j of a step waits only for chunk j of the previous step's receive
(pipelining), channels in parallel.
"""

from __future__ import annotations

from collections.abc import Callable

from simcoll.core.collectives import Collective
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Schedule, ScheduleBuilder

__all__ = ["ALGORITHMS", "bruck_allgather", "pairwise_alltoall"]


def _builder(
    collective: Collective,
    algorithm: str,
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int,
    n_chunks: int,
    max_in_flight: int,
) -> ScheduleBuilder:
    return ScheduleBuilder(
        collective,
        algorithm,
        n_ranks=n_ranks,
        size_bytes=size_bytes,
        pieces_per_block=n_channels * n_chunks,
        max_in_flight=max_in_flight,
        params={"n_channels": n_channels, "n_chunks": n_chunks, "max_in_flight": max_in_flight},
    )


def bruck_allgather(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Bruck all-gather: at distance d = 1, 2, 4, ... rank r sends r .. r+d-1 to r - d.

    The last step sends min(d, n - d) blocks, so the n - 1 blocks a rank needs arrive in
    ceil(log2 n) steps, for any n.

    >>> s = bruck_allgather(5, 50)
    >>> [(t.src, t.dst, t.size_bytes) for t in s.transfers() if t.src == 0]
    [(0, 4, 10), (0, 3, 20), (0, 1, 10)]
    >>> s.bytes_received_per_rank().tolist()
    [40, 40, 40, 40, 40]
    """
    b = _builder(Collective.ALLGATHER, "bruck", n_ranks, size_bytes, n_channels=n_channels,
                 n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    n = n_ranks
    per_block = n_channels * n_chunks
    # received[rank, channel, chunk]: the transfers that brought that piece, step by step.
    received: dict[tuple[int, int, int], list[int]] = {}
    distance = 1
    while distance < n:
        count = min(distance, n - distance)
        arrived: dict[tuple[int, int, int], int] = {}
        for chunk in range(n_chunks):
            for rank in range(n):
                blocks = [(rank + i) % n for i in range(count)]
                for channel in range(n_channels):
                    offset = channel * n_chunks + chunk
                    dst = (rank - distance) % n
                    arrived[dst, channel, chunk] = b.add(
                        src=rank,
                        dst=dst,
                        pieces=sorted(block * per_block + offset for block in blocks),
                        channel=channel,
                        deps=received.get((rank, channel, chunk), ()),
                    )
        for key, t in arrived.items():
            received.setdefault(key, []).append(t)
        distance *= 2
    return b.build()


def pairwise_alltoall(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Pairwise-exchange all-to-all: at step s = 1 .. n-1 rank r sends to (r + s) mod n.

    Step s + 1 of a rank starts once its step s receive has arrived.

    >>> s = pairwise_alltoall(3, 30)
    >>> [(t.src, t.dst, t.pieces, t.deps) for t in s.transfers()]
    [(0, 1, (1,), ()), (1, 2, (5,), ()), (2, 0, (6,), ()), (0, 2, (2,), (2,)), \
(1, 0, (3,), (0,)), (2, 1, (7,), (1,))]
    >>> s.bytes_sent_per_rank().tolist()
    [20, 20, 20]
    """
    b = _builder(Collective.ALLTOALL, "pairwise", n_ranks, size_bytes, n_channels=n_channels,
                 n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    n = n_ranks
    per_block = n_channels * n_chunks
    last: dict[tuple[int, int, int], int] = {}  # (rank, channel, chunk) -> its last receive
    for step in range(1, n):
        arrived: dict[tuple[int, int, int], int] = {}
        for chunk in range(n_chunks):
            for rank in range(n):
                dst = (rank + step) % n
                block = rank * n + dst
                for channel in range(n_channels):
                    dep = last.get((rank, channel, chunk))
                    arrived[dst, channel, chunk] = b.add(
                        src=rank,
                        dst=dst,
                        pieces=[block * per_block + channel * n_chunks + chunk],
                        channel=channel,
                        deps=() if dep is None else (dep,),
                    )
        last = arrived
    return b.build()


ALGORITHMS: dict[tuple[Collective, str], Callable[..., Schedule]] = {
    (Collective.ALLGATHER, "bruck"): bruck_allgather,
    (Collective.ALLTOALL, "pairwise"): pairwise_alltoall,
}
"""Bruck all-gather and pairwise-exchange all-to-all."""
