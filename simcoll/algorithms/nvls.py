"""In-network reduction on an NVSwitch: NCCL's NVLS algorithms (NVLink SHARP).

On a third-generation NVSwitch (DGX H100 and later) the switch itself adds up what the
GPUs hold and multicasts what one GPU stores (NVIDIA/nccl ``src/device/all_reduce.h``,
the NVLS variant of ``runRing``; the NVLS rows of the tuning model in
``shared/reference/state-of-the-art.md``). The schedule names the switch as an extra
endpoint, number ``n_ranks`` (see :mod:`simcoll.core.schedule`), and the engine places it on a
switch whose ``reduces`` attribute is true.

All-reduce runs as NCCL's single-node NVLS kernel does. The buffer is cut into ``n``
shards; rank ``k`` owns shard ``k``:

1. *reduce* (``multimem.ld_reduce``): the switch reads shard ``k`` from every GPU, adds it
   up and returns the sum to rank ``k``;
2. *multicast* (``multimem.st``): rank ``k`` stores the sum once to the multicast address,
   and the switch writes it to every GPU (rank ``k`` included)::

       gpu0  gpu1  gpu2  gpu3         reduce:    every GPU -> switch (+) -> owner k
         \\    |     |    /            multicast: owner k -> switch -> every GPU
          `-- nvsw (+) --'

Per GPU an all-reduce of S bytes therefore sends S + S/n and receives S/n + S: for large
messages algbw tends to ``B x n / (n + 1)``, busbw to ``2 (n - 1) / (n + 1) x B``, where a
ring's busbw tends to B. The two legs run on separate connections (NCCL gives them
separate warps), so the multicast of one piece overlaps the reduction of the next.
Reduce-scatter is the reduce leg alone (every GPU sends S, rank r receives block r);
all-gather the multicast leg alone (rank r stores block r once, every other GPU receives
it).

The switch's own throughput is the topology's business: a reducing switch's
``reduce_efficiency`` (:mod:`simcoll.topology.machines`) is the share of a link's rate
that transfers to and from it get.

Not modelled: NVLS across nodes (NVLS-tree, and NVLS with CollNet), user-buffer
registration (without it NCCL copies through its own NVLS buffers in GPU memory, which at
3 TB/s and more does not limit these rates), and the multicast object's setup at
communicator creation.

>>> s = nvls_allreduce(4, 64)
>>> s.n_switches, s.bytes_sent_per_rank().tolist(), s.bytes_received_per_rank().tolist()
(1, [80, 80, 80, 80, 320], [80, 80, 80, 80, 320])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from simcoll.core.collectives import Collective
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Op, Schedule, ScheduleBuilder

__all__ = ["ALGORITHMS", "nvls_allgather", "nvls_allreduce", "nvls_reducescatter"]


def _builder(
    collective: Collective,
    n_ranks: int,
    size_bytes: int,
    pieces_per_block: int,
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
        pieces_per_block=pieces_per_block,
        max_in_flight=max_in_flight,
        params={"n_channels": n_channels, "n_chunks": n_chunks, "max_in_flight": max_in_flight},
        n_switches=1 if n_ranks > 1 else 0,  # one rank needs no switch
    )


def _reduce(b: ScheduleBuilder, piece: int, owner: int, channel: int) -> int:
    """``multimem.ld_reduce``: the piece up from every GPU, its sum down to ``owner``."""
    switch = b.n_ranks
    up = [b.add(src=r, dst=switch, pieces=[piece], op=Op.REDUCE, channel=channel)
          for r in range(b.n_ranks)]  # fmt: skip
    return b.add(src=switch, dst=owner, pieces=[piece], channel=channel, deps=up)


def _multicast(
    b: ScheduleBuilder, piece: int, owner: int, channel: int, deps: Sequence[int] = ()
) -> None:
    """``multimem.st``: ``owner`` stores the piece once; the switch writes it to every GPU."""
    switch = b.n_ranks
    up = b.add(src=owner, dst=switch, pieces=[piece], channel=channel, deps=deps)
    for r in range(b.n_ranks):
        b.add(src=switch, dst=r, pieces=[piece], channel=channel, deps=[up])


def nvls_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """All-reduce in the switch: rank k reduces shard k through the switch, then
    multicasts it; each GPU sends and receives S (n + 1) / n.

    Each shard is cut into ``n_channels x n_chunks`` pieces; the reduce leg of channel c
    runs on channel c, the multicast leg on channel ``n_channels + c``.

    >>> s = nvls_allreduce(3, 30, n_chunks=2)
    >>> s.n_transfers, s.transfer_bytes.tolist()[:4]
    (48, [5, 5, 5, 5])
    """
    per_shard = n_channels * n_chunks
    b = _builder(Collective.ALLREDUCE, n_ranks, size_bytes, n_ranks * per_shard,
                 n_channels=n_channels, n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    if n_ranks > 1:
        for j in range(per_shard):
            channel = j % n_channels
            for owner in range(n_ranks):
                piece = b.piece(0, owner * per_shard + j)
                down = _reduce(b, piece, owner, channel)
                _multicast(b, piece, owner, n_channels + channel, deps=[down])
    return b.build()


def nvls_reducescatter(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Reduce-scatter in the switch: the reduce leg alone, block r reduced down to rank r.

    >>> nvls_reducescatter(4, 64).bytes_received_per_rank().tolist()
    [16, 16, 16, 16, 256]
    """
    per_block = n_channels * n_chunks
    b = _builder(Collective.REDUCESCATTER, n_ranks, size_bytes, per_block,
                 n_channels=n_channels, n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    if n_ranks > 1:
        for j in range(per_block):
            for block in range(n_ranks):
                _reduce(b, b.piece(block, j), block, j % n_channels)
    return b.build()


def nvls_allgather(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """All-gather by multicast: rank r stores block r once, the switch writes it to every
    GPU (rank r included, as ``multimem.st`` does).

    >>> nvls_allgather(4, 64).bytes_sent_per_rank().tolist()
    [16, 16, 16, 16, 256]
    """
    per_block = n_channels * n_chunks
    b = _builder(Collective.ALLGATHER, n_ranks, size_bytes, per_block,
                 n_channels=n_channels, n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    if n_ranks > 1:
        for j in range(per_block):
            for block in range(n_ranks):
                _multicast(b, b.piece(block, j), block, j % n_channels)
    return b.build()


ALGORITHMS: dict[tuple[Collective, str], Callable[..., Schedule]] = {
    (Collective.ALLREDUCE, "nvls"): nvls_allreduce,
    (Collective.REDUCESCATTER, "nvls"): nvls_reducescatter,
    (Collective.ALLGATHER, "nvls"): nvls_allgather,
}
"""NVLS for the collectives NCCL runs it for."""
