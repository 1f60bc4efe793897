"""In-network reduction on an NVSwitch: NCCL's NVLS algorithms (NVLink SHARP).

On a third-generation NVSwitch (DGX H100 and later) the switch itself adds up what the
GPUs send it and multicasts results (NVIDIA/nccl ``src/device/all_reduce.h``,
``runRing``'s NVLS sibling ``runNvls``; the NVLS rows of the tuning model in
``shared/reference/state-of-the-art.md``). The schedule names the switch as an extra
endpoint, number ``n_ranks`` (see :mod:`simcoll.core.schedule`), and the engine places it on a
switch whose ``reduces`` attribute is true::

    gpu0   gpu1   gpu2   gpu3         up:   every GPU sends each piece once, the switch
      \\     |      |     /                 adds it to what it holds (reduce);
       `---- nvsw (+) ---'            down: once all n contributions of a piece are in,
                                             the switch sends the sum to every GPU.

Per GPU an all-reduce of S bytes sends S and receives S, against 2(n-1)/n x S each way
for a ring: for large messages NVLS approaches algbw = B (busbw 2(n-1)/n x B) where a
ring gets B x n / (2(n-1)). Reduce-scatter sends every block up and brings block r down
to rank r; all-gather sends block r up once and multicasts it to the other ranks.

Each block is cut into ``n_channels x n_chunks`` pieces; pieces flow independently, so
the down leg of one piece overlaps the up leg of the next.

>>> s = nvls_allreduce(4, 64)
>>> s.n_switches, s.bytes_sent_per_rank().tolist(), s.bytes_received_per_rank().tolist()
(1, [64, 64, 64, 64, 256], [64, 64, 64, 64, 256])
"""

from __future__ import annotations

from collections.abc import Callable

from simcoll.core.collectives import Collective
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Op, Schedule, ScheduleBuilder

__all__ = ["ALGORITHMS", "nvls_allgather", "nvls_allreduce", "nvls_reducescatter"]


def _builder(
    collective: Collective,
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int,
    n_chunks: int,
    max_in_flight: int,
) -> ScheduleBuilder:
    return ScheduleBuilder(
        collective,
        "nvls",
        n_ranks=n_ranks,
        size_bytes=size_bytes,
        pieces_per_block=n_channels * n_chunks,
        max_in_flight=max_in_flight,
        params={"n_channels": n_channels, "n_chunks": n_chunks, "max_in_flight": max_in_flight},
        n_switches=1 if n_ranks > 1 else 0,  # one rank needs no switch
    )


def _through_switch(
    b: ScheduleBuilder,
    block: int,
    *,
    senders: list[int],
    receivers: list[int],
    op: Op,
    n_channels: int,
) -> None:
    """Every piece of ``block``: up from each sender, then down to each receiver."""
    switch = b.n_ranks
    for piece_in_block in range(b.pieces_per_block):
        piece = b.piece(block, piece_in_block)
        channel = piece_in_block % n_channels
        up = [b.add(src=r, dst=switch, pieces=[piece], op=op, channel=channel) for r in senders]
        for r in receivers:
            b.add(src=switch, dst=r, pieces=[piece], channel=channel, deps=up)


def nvls_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """All-reduce in the switch: every GPU sends S up once and receives the sum once.

    >>> s = nvls_allreduce(3, 30, n_chunks=2)
    >>> s.n_transfers, s.transfer_bytes.tolist()[:3]
    (12, [15, 15, 15])
    """
    b = _builder(Collective.ALLREDUCE, n_ranks, size_bytes, n_channels=n_channels,
                 n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    if n_ranks > 1:
        ranks = list(range(n_ranks))
        _through_switch(b, 0, senders=ranks, receivers=ranks, op=Op.REDUCE, n_channels=n_channels)
    return b.build()


def nvls_reducescatter(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Reduce-scatter in the switch: all of every block goes up, block r comes down to r.

    >>> nvls_reducescatter(4, 64).bytes_received_per_rank().tolist()
    [16, 16, 16, 16, 256]
    """
    b = _builder(Collective.REDUCESCATTER, n_ranks, size_bytes, n_channels=n_channels,
                 n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    if n_ranks > 1:
        ranks = list(range(n_ranks))
        for block in ranks:
            _through_switch(
                b, block, senders=ranks, receivers=[block], op=Op.REDUCE, n_channels=n_channels
            )
    return b.build()


def nvls_allgather(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """All-gather by multicast: block r goes up once and down to every other rank.

    >>> nvls_allgather(4, 64).bytes_sent_per_rank().tolist()
    [16, 16, 16, 16, 192]
    """
    b = _builder(Collective.ALLGATHER, n_ranks, size_bytes, n_channels=n_channels,
                 n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    if n_ranks > 1:
        for block in range(n_ranks):
            others = [r for r in range(n_ranks) if r != block]
            _through_switch(
                b, block, senders=[block], receivers=others, op=Op.COPY, n_channels=n_channels
            )
    return b.build()


ALGORITHMS: dict[tuple[Collective, str], Callable[..., Schedule]] = {
    (Collective.ALLREDUCE, "nvls"): nvls_allreduce,
    (Collective.REDUCESCATTER, "nvls"): nvls_reducescatter,
    (Collective.ALLGATHER, "nvls"): nvls_allgather,
}
"""NVLS for the collectives NCCL runs it for."""
