"""Ring algorithms, as NCCL runs them: channels, chunk pipelining, one peer per rank.

Each channel has its own ring, an order of the ranks (from the plan,
:mod:`simcoll.plan.search`); by default every channel's ring is the rank order, where rank
``r`` sends only to ``(r + 1) mod n`` (the ring below is for n = 4)::

    0 ──► 1 ──► 2 ──► 3
    ▲                 │
    └─────────────────┘

Each block of the buffer is cut into ``n_channels`` parts, one per channel (NCCL runs one
ring per channel, in parallel), and each part into ``n_chunks`` pieces that flow around the
ring one after another. The rank at position ``i`` of a channel's ring plays the part rank
``i`` plays in the rank-order ring: it sends to position ``i + 1``, and at step ``s`` it
forwards the block of the rank at position ``i - s``. A piece is forwarded as soon as it
has arrived, so pieces of one step overlap the next step: this is the pipelining the fabric
honours through each connection's send order and in-flight window (see
:mod:`simcoll.core.schedule`).

Bandwidth-optimal volumes per rank (nccl-tests ``doc/PERFORMANCE.md``): all-reduce sends
2(n-1)/n x S, reduce-scatter and all-gather (n-1)/n x S, broadcast and reduce S (every rank
but one end of the chain).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Op, Schedule, ScheduleBuilder

__all__ = [
    "PREFIX_STEPS",
    "ring_allgather",
    "ring_allreduce",
    "ring_broadcast",
    "ring_orders",
    "ring_prefix",
    "ring_reduce",
    "ring_reducescatter",
]

Rings = Sequence[Sequence[int]]

PREFIX_STEPS = 32
"""The steps of a ring that predictions simulate where the whole ring is over one
schedule's transfers, before extending at their pace (:func:`ring_prefix`,
:mod:`simcoll.sim.periodic`)."""


def ring_orders(n_ranks: int, n_channels: int, rings: Rings | None) -> tuple[tuple[int, ...], ...]:
    """The ring of every channel: ``rings`` checked, or the rank order ``n_channels`` times.

    >>> ring_orders(3, 2, None)
    ((0, 1, 2), (0, 1, 2))
    >>> ring_orders(3, 1, [[0, 2, 1], [1, 0, 2]])
    ((0, 2, 1), (1, 0, 2))

    Raises
    ------
    ScheduleError
        If a ring is not an order of the ``n_ranks`` ranks.
    """
    if rings is None:
        return (tuple(range(n_ranks)),) * n_channels
    orders = tuple(tuple(int(r) for r in ring) for ring in rings)
    if not orders:
        raise ScheduleError("ring: rings must hold at least one channel's order")
    for index, order in enumerate(orders):
        if sorted(order) != list(range(n_ranks)):
            raise ScheduleError(
                f"ring: channel {index}'s ring {list(order)} is not an order of {n_ranks} ranks"
            )
    return orders


def _builder(
    collective: Collective,
    n_ranks: int,
    size_bytes: int,
    *,
    rings: tuple[tuple[int, ...], ...],
    n_chunks: int,
    max_in_flight: int,
    root: int = 0,
) -> ScheduleBuilder:
    # All-reduce has a single block; the ring cuts it into n ring blocks of its own.
    ring_blocks = n_ranks if collective is Collective.ALLREDUCE else 1
    n_channels = len(rings)
    params: dict[str, object] = {
        "n_channels": n_channels,
        "n_chunks": n_chunks,
        "max_in_flight": max_in_flight,
    }
    if any(ring != tuple(range(n_ranks)) for ring in rings):
        params["rings"] = rings
    return ScheduleBuilder(
        collective,
        "ring",
        n_ranks=n_ranks,
        size_bytes=size_bytes,
        pieces_per_block=ring_blocks * n_channels * n_chunks,
        root=root,
        max_in_flight=max_in_flight,
        params=params,
    )


def _ring_phase(
    b: ScheduleBuilder,
    *,
    op: Op,
    block_at: int,
    rings: tuple[tuple[int, ...], ...],
    n_chunks: int,
    after: dict[tuple[int, int, int], int],
    n_steps: int | None = None,
) -> dict[tuple[int, int, int], int]:
    """n - 1 ring steps (the first ``n_steps`` only, if given); at step s the rank at
    position i of a channel's ring sends the block of the rank at position
    (i + block_at - s) mod n to position i + 1.

    Block k is pieces [k * P, (k + 1) * P) with P = n_channels * n_chunks: for all-gather
    and reduce-scatter that is the collective's block k (rank k's).

    ``after[r, c, j]`` is the transfer that must arrive at rank r before its first send
    of channel c, chunk j. Returns the same map for the transfers this phase delivers last.
    """
    n = b.n_ranks
    n_channels = len(rings)
    order = np.array(rings, dtype=np.int64).reshape(n_channels, n)
    # one step's transfers in the order chunk, position, channel (as added one by one)
    chunk, position, channel = (a.ravel() for a in np.meshgrid(
        np.arange(n_chunks), np.arange(n), np.arange(n_channels), indexing="ij"))  # fmt: skip
    rank = order[channel, position]
    successor = order[channel, (position + 1) % n]
    # last[r, c, j]: the transfer that last arrived at rank r on channel c, chunk j (-1: none)
    last = np.full((n, n_channels, n_chunks), -1, dtype=np.int64)
    for (r, c, j), t in after.items():
        last[r, c, j] = t
    for step in range(n - 1 if n_steps is None else n_steps):
        block = order[channel, (position + block_at - step) % n]
        dep = last[rank, channel, chunk]
        has = dep >= 0
        first = b.n_transfers
        b.extend(rank, successor, (block * n_channels + channel) * n_chunks + chunk, op,
                 channel, np.concatenate([[0], np.cumsum(has)]), dep[has])  # fmt: skip
        last = np.full_like(last, -1)
        last[successor, channel, chunk] = first + np.arange(len(rank))
    return {(int(r), int(c), int(j)): int(last[r, c, j])
            for r, c, j in zip(*np.nonzero(last >= 0), strict=True)}  # fmt: skip


def ring_reducescatter(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    rings: Rings | None = None,
) -> Schedule:
    """Ring reduce-scatter: n - 1 steps; rank r ends with block r reduced over all ranks.

    At step s rank r adds block (r - s - 1) mod n into its successor's copy.

    >>> s = ring_reducescatter(4, 64)
    >>> s.n_transfers, s.bytes_sent_per_rank().tolist()
    (12, [48, 48, 48, 48])
    """
    orders = ring_orders(n_ranks, n_channels, rings)
    b = _builder(
        Collective.REDUCESCATTER,
        n_ranks,
        size_bytes,
        rings=orders,
        n_chunks=n_chunks,
        max_in_flight=max_in_flight,
    )
    b.expect((n_ranks - 1) * n_ranks * len(orders) * n_chunks)
    _ring_phase(b, op=Op.REDUCE, block_at=-1, rings=orders, n_chunks=n_chunks, after={})
    return b.build()


def ring_allgather(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    rings: Rings | None = None,
) -> Schedule:
    """Ring all-gather: n - 1 steps; at step s rank r forwards block (r - s) mod n.

    >>> s = ring_allgather(4, 64, n_channels=2)
    >>> s.n_transfers, s.transfer_bytes.tolist()[:2]
    (24, [8, 8])
    """
    orders = ring_orders(n_ranks, n_channels, rings)
    b = _builder(
        Collective.ALLGATHER,
        n_ranks,
        size_bytes,
        rings=orders,
        n_chunks=n_chunks,
        max_in_flight=max_in_flight,
    )
    b.expect((n_ranks - 1) * n_ranks * len(orders) * n_chunks)
    _ring_phase(b, op=Op.COPY, block_at=0, rings=orders, n_chunks=n_chunks, after={})
    return b.build()


def ring_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    rings: Rings | None = None,
) -> Schedule:
    """Ring all-reduce: a ring reduce-scatter, then a ring all-gather; 2(n - 1) steps.

    The all-gather of block r starts at rank r as soon as its reduction has arrived there.

    >>> s = ring_allreduce(4, 64)
    >>> s.n_transfers, s.bytes_sent_per_rank().tolist()
    (24, [96, 96, 96, 96])
    """
    orders = ring_orders(n_ranks, n_channels, rings)
    b = _builder(
        Collective.ALLREDUCE,
        n_ranks,
        size_bytes,
        rings=orders,
        n_chunks=n_chunks,
        max_in_flight=max_in_flight,
    )
    b.expect(2 * (n_ranks - 1) * n_ranks * len(orders) * n_chunks)
    done = _ring_phase(b, op=Op.REDUCE, block_at=-1, rings=orders, n_chunks=n_chunks, after={})
    _ring_phase(b, op=Op.COPY, block_at=0, rings=orders, n_chunks=n_chunks, after=done)
    return b.build()


def _chain(
    b: ScheduleBuilder, *, root: int, op: Op, rings: tuple[tuple[int, ...], ...], n_chunks: int
) -> None:
    """Pass every piece along each channel's ring (n - 1 hops), pipelined: from the root
    for a copy (broadcast), from the root's successor to the root for a reduction."""
    n = b.n_ranks
    after_root = 1 if op is Op.REDUCE else 0
    starts = [ring.index(root) + after_root for ring in rings]
    previous: dict[tuple[int, int], int] = {}
    for hop in range(n - 1):
        for chunk in range(n_chunks):
            for channel, ring in enumerate(rings):
                position = (starts[channel] + hop) % n
                dep = previous.get((channel, chunk))
                previous[channel, chunk] = b.add(
                    src=ring[position],
                    dst=ring[(position + 1) % n],
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
    rings: Rings | None = None,
) -> Schedule:
    """Ring broadcast: pieces flow from the root around each channel's ring, pipelined.

    >>> s = ring_broadcast(4, 64, root=2, n_chunks=2)
    >>> [(t.src, t.dst) for t in s.transfers()][:3]
    [(2, 3), (2, 3), (3, 0)]
    """
    orders = ring_orders(n_ranks, n_channels, rings)
    b = _builder(
        Collective.BROADCAST,
        n_ranks,
        size_bytes,
        rings=orders,
        n_chunks=n_chunks,
        max_in_flight=max_in_flight,
        root=root,
    )
    _chain(b, root=root, op=Op.COPY, rings=orders, n_chunks=n_chunks)
    return b.build()


def ring_reduce(
    n_ranks: int,
    size_bytes: int,
    *,
    root: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    rings: Rings | None = None,
) -> Schedule:
    """Ring reduce: partial sums flow around each channel's ring into the root, pipelined.

    >>> s = ring_reduce(3, 30, root=0)
    >>> [(t.src, t.dst, t.op.value) for t in s.transfers()]
    [(1, 2, 'reduce'), (2, 0, 'reduce')]
    """
    orders = ring_orders(n_ranks, n_channels, rings)
    b = _builder(
        Collective.REDUCE,
        n_ranks,
        size_bytes,
        rings=orders,
        n_chunks=n_chunks,
        max_in_flight=max_in_flight,
        root=root,
    )
    _chain(b, root=root, op=Op.REDUCE, rings=orders, n_chunks=n_chunks)
    return b.build()


def ring_prefix(
    collective: Collective,
    n_ranks: int,
    size_bytes: int,
    n_steps: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    rings: Rings | None = None,
) -> Schedule:
    """The first ``n_steps`` steps of a ring all-reduce, reduce-scatter or all-gather: the
    same transfers, in the same order, as the first of the whole schedule's, and nothing
    after. It does not compute the collective; :mod:`simcoll.sim.periodic` simulates it
    and extends the steps' period to the whole ring.

    >>> whole = ring_allreduce(4, 64, n_channels=2)
    >>> first = ring_prefix(Collective.ALLREDUCE, 4, 64, 4, n_channels=2)
    >>> first.n_transfers, bool((first.dst == whole.dst[:32]).all())
    (32, True)

    Raises
    ------
    ScheduleError
        If ``n_steps`` is not in 1 .. the ring's steps, or the collective has no ring of
        steps (broadcast and reduce are chains).
    """
    phases = {
        Collective.ALLREDUCE: ((Op.REDUCE, -1), (Op.COPY, 0)),
        Collective.REDUCESCATTER: ((Op.REDUCE, -1),),
        Collective.ALLGATHER: ((Op.COPY, 0),),
    }.get(collective)
    if phases is None:
        raise ScheduleError(f"ring: {collective.value} has no ring steps to take a prefix of")
    total = len(phases) * (n_ranks - 1)
    if not 1 <= n_steps <= total:
        raise ScheduleError(f"ring: a prefix takes 1 to {total} steps, not {n_steps}")
    orders = ring_orders(n_ranks, n_channels, rings)
    b = _builder(collective, n_ranks, size_bytes, rings=orders, n_chunks=n_chunks,
                 max_in_flight=max_in_flight)  # fmt: skip
    b.expect(n_steps * n_ranks * len(orders) * n_chunks)
    last: dict[tuple[int, int, int], int] = {}
    for op, block_at in phases:
        steps = min(n_steps, n_ranks - 1)
        last = _ring_phase(b, op=op, block_at=block_at, rings=orders, n_chunks=n_chunks,
                           after=last, n_steps=steps)  # fmt: skip
        n_steps -= steps
        if not n_steps:
            break
    return b.build()
