"""NCCL's CollNet all-reduce: each server reduces to its heads over NVLink, the heads of
every server reduce on a SHARP tree of fabric switches, and the result comes back.

NCCL reaches in-network reduction (InfiniBand SHARP, through its CollNet plugin) with two
algorithms, both Simple only (``src/device/all_reduce.h``):

- **CollNet Direct** (``NCCL_ALGO=CollNetDirect``). A server has ``H`` heads, GPUs with a
  network connection of their own (simcoll: every GPU, as on a DGX with eight NICs).
  Piece ``p`` of the buffer is head ``p mod H``'s: every other GPU of the server sends
  it that piece directly (``scatter``), the head adds them to its own and sends the sum
  to the network (``recvReduceDirectSend``); the network's result comes back to the
  head, which sends it to every GPU of its server (``directRecvCopyDirectSend``,
  ``directGather``)::

      GPU -> head (+) -> SHARP (+) -> head -> GPU        per piece, pipelined

- **CollNet Chain** (``NCCL_ALGO=CollNetChain``). Each channel chains a server's GPUs to
  that channel's head: the last GPU sends its piece up, each GPU adds its own and sends
  on (``directRecvReduceDirectSend``), the head sends the sum to the network, and the
  result goes back down the chain. simcoll gives channel ``c`` head ``c mod G`` (one head
  per NIC, as NCCL's CollNet graph puts one per network device) and the chain the
  server's GPUs in order from there.

The network part is :mod:`simcoll.algorithms.sharp`'s tree, one per head index: the
heads ``h`` of every server form a SHARP group, ``servers_per_switch`` of them under
each first-level switch (from ``ranks_per_switch``, the ranks a first-level reducing
switch serves: its whole servers; 0, or less than a server, puts every server under one
switch) and those switches under a root. Several groups' endpoints may sit on one
switch (SHARP trees share the fabric's switches): ``switch_share``.

A GPU sends to another of its server both as a scatter (to it as a head) and as a
gather (from itself as one): NCCL runs the two on connections of their own (the scatter's
and the gather's primitives take different connection indices), so Direct's gather
sends on channels ``C .. 2C - 1`` of a schedule of ``C`` channels; one connection would
hold each piece's scatter behind the previous piece's gather.

With one GPU per server both are :func:`~simcoll.algorithms.sharp.sharp_allreduce`. A
single server has no network to reduce on: NCCL runs CollNet on two or more.

Per piece its head receives it from the ``G - 1`` other GPUs of its server, sends it up
and back to them. With ``S`` bytes and ``G`` GPUs, each a head, a GPU sends ``S / G``
up, ``(G - 1) S / G`` back and ``(G - 1) S / G`` to the other heads:

>>> s = collnet_direct_allreduce(8, 64, gpus_per_node=4)
>>> s.n_switches, s.bytes_sent_per_rank().tolist()  # 16 + 48 + 48 a GPU, 2 x 16 a switch
(4, [112, 112, 112, 112, 112, 112, 112, 112, 32, 32, 32, 32])
>>> s = collnet_chain_allreduce(8, 64, gpus_per_node=4)
>>> s.n_switches, s.bytes_sent_per_rank().tolist()[:8]  # one channel: head 0, chain 0-1-2-3
(1, [128, 128, 128, 64, 128, 128, 128, 64])
"""

from __future__ import annotations

from collections.abc import Callable

from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Op, Schedule, ScheduleBuilder

__all__ = [
    "ALGORITHMS",
    "collnet_chain_allreduce",
    "collnet_direct_allreduce",
    "collnet_servers",
    "servers_per_switch",
]


def collnet_direct_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    gpus_per_node: int = 1,
    ranks_per_switch: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """All-reduce as NCCL's CollNet Direct, every GPU of a server a head (a NIC per GPU,
    as DGX servers have): ``gpus_per_node`` GPUs per server (by default 1: every rank
    its own server, SHARP alone; ``predict`` gives the topology's).

    Raises
    ------
    ScheduleError
        If the servers do not split the ranks evenly, there is one server, or the SHARP
        switches do not split the servers evenly.

    >>> collnet_direct_allreduce(8, 64, gpus_per_node=8)
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ScheduleError: collnet_direct: 8 ranks on 1 server of 8 GPUs; CollNet \
reduces across servers (2 or more): use nvls or ring on one
    """
    g, n_nodes = collnet_servers("collnet_direct", n_ranks, gpus_per_node)
    heads = g
    b, leaf_of, n_per_head = _builder("collnet_direct", n_ranks, size_bytes, g, heads,
                                      ranks_per_switch, heads * n_channels * n_chunks,
                                      max_in_flight, n_channels, n_chunks)  # fmt: skip
    for piece in range(b.pieces_per_block if n_ranks > 1 else 0):
        h, channel = piece % heads, (piece // heads) % n_channels
        arrived = []
        for k in range(n_nodes):
            head = k * g + h
            into = [b.add(src=k * g + local, dst=head, pieces=[piece], op=Op.REDUCE,
                          channel=channel) for local in range(g) if local != h]  # fmt: skip
            arrived.append(into)
        back = _sharp(b, piece, [k * g + h for k in range(n_nodes)], h * n_per_head, leaf_of,
                      channel, arrived)  # fmt: skip
        for k in range(n_nodes):  # on the gather's own connections (see the module doc)
            for local in range(g):
                if local != h:
                    b.add(src=k * g + h, dst=k * g + local, pieces=[piece],
                          channel=n_channels + channel, deps=[back[k]])  # fmt: skip
    return b.build()


def collnet_chain_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    gpus_per_node: int = 1,
    ranks_per_switch: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """All-reduce as NCCL's CollNet Chain: channel ``c``'s head is each server's GPU
    ``c mod gpus_per_node``, its chain the server's GPUs in order from the head.

    Raises
    ------
    ScheduleError
        As :func:`collnet_direct_allreduce`.
    """
    g, n_nodes = collnet_servers("collnet_chain", n_ranks, gpus_per_node)
    heads = min(n_channels, g)  # head indices in use: 0 .. heads - 1
    b, leaf_of, n_per_head = _builder("collnet_chain", n_ranks, size_bytes, g, heads,
                                      ranks_per_switch, n_channels * n_chunks, max_in_flight,
                                      n_channels, n_chunks)  # fmt: skip
    for piece in range(b.pieces_per_block if n_ranks > 1 else 0):
        channel = piece % n_channels
        h = channel % g
        chains = [[k * g + (h + i) % g for i in range(g)] for k in range(n_nodes)]
        arrived = []
        for chain in chains:  # up: the last GPU to the head, each adding its own
            up: list[int] = []
            for i in range(g - 1, 0, -1):
                up = [b.add(src=chain[i], dst=chain[i - 1], pieces=[piece], op=Op.REDUCE,
                            channel=channel, deps=up)]  # fmt: skip
            arrived.append(up)
        back = _sharp(b, piece, [chain[0] for chain in chains], h * n_per_head, leaf_of,
                      channel, arrived)  # fmt: skip
        for k, chain in enumerate(chains):  # down: the head to the last GPU
            down = [back[k]]
            for i in range(g - 1):
                down = [b.add(src=chain[i], dst=chain[i + 1], pieces=[piece], channel=channel,
                              deps=down)]  # fmt: skip
    return b.build()


def collnet_servers(name: str, n_ranks: int, gpus_per_node: int) -> tuple[int, int]:
    """GPUs per server and servers of a CollNet call (the schedules' and the closed
    forms' one refusal); refused unless two or more servers split the ranks (one rank
    alone has nothing to reduce: no transfers, as every algorithm).

    >>> collnet_servers("collnet_chain", 16, 8)
    (8, 2)
    """
    g = gpus_per_node if 0 < gpus_per_node <= n_ranks else n_ranks
    if n_ranks % g:
        raise ScheduleError(f"{name}: {n_ranks} ranks do not split into servers of {g} GPUs")
    if n_ranks // g < 2 and n_ranks > 1:
        raise ScheduleError(f"{name}: {n_ranks} ranks on 1 server of {g} GPUs; CollNet "
                            "reduces across servers (2 or more): use nvls or ring on "
                            "one")  # fmt: skip
    return g, n_ranks // g


def servers_per_switch(ranks_per_switch: int, gpus_per_node: int, n_nodes: int) -> int:
    """Servers whose heads share a first-level SHARP switch: the whole servers among the
    ``ranks_per_switch`` ranks a first-level reducing switch serves; every server where
    that is 0, less than a server or all of them.

    >>> servers_per_switch(32, 8, 8), servers_per_switch(0, 8, 8), servers_per_switch(4, 8, 8)
    (4, 8, 8)
    """
    per = ranks_per_switch // gpus_per_node if ranks_per_switch >= gpus_per_node else n_nodes
    return per if 0 < per < n_nodes else n_nodes


def _builder(  # noqa: PLR0917 - the schedule's header, shared by both
    name: str,
    n_ranks: int,
    size_bytes: int,
    g: int,
    heads: int,
    ranks_per_switch: int,
    pieces_per_block: int,
    max_in_flight: int,
    n_channels: int,
    n_chunks: int,
) -> tuple[ScheduleBuilder, list[int], int]:
    """The builder, each server's first-level switch group, and the switch endpoints per
    head index (its groups' first-level switches, then its root where there are two
    levels)."""
    n_nodes = n_ranks // g
    if n_ranks == 1:
        heads = 0  # nothing to reduce: no switch, no transfer
    per_switch = servers_per_switch(ranks_per_switch, g, n_nodes)
    if n_nodes % per_switch:
        raise ScheduleError(f"{name}: first-level switches of {per_switch} servers each "
                            f"(ranks_per_switch {ranks_per_switch}) do not split "
                            f"{n_nodes} servers")  # fmt: skip
    n_groups = n_nodes // per_switch
    two_levels = n_groups > 1
    n_per_head = n_groups + two_levels
    switch_groups: list[tuple[int, ...]] = []
    for h in range(heads):
        members = [k * g + h for k in range(n_nodes)]
        switch_groups += [tuple(members[j * per_switch:(j + 1) * per_switch])
                          for j in range(n_groups)]  # fmt: skip
        switch_groups += [tuple(members)] * two_levels
    b = ScheduleBuilder(
        Collective.ALLREDUCE,
        name,
        n_ranks=n_ranks,
        size_bytes=size_bytes,
        pieces_per_block=pieces_per_block,
        max_in_flight=max_in_flight,
        n_switches=heads * n_per_head,
        params={
            "gpus_per_node": g,
            "ranks_per_switch": ranks_per_switch,
            "n_channels": n_channels,
            "n_chunks": n_chunks,
            "max_in_flight": max_in_flight,
            "switch_groups": tuple(switch_groups),
            "switch_share": True,
        },
    )
    return b, [k // per_switch for k in range(n_nodes)], n_per_head


def _sharp(  # noqa: PLR0917 - one piece on one head group's tree
    b: ScheduleBuilder,
    piece: int,
    heads: list[int],
    first_endpoint: int,
    leaf_of: list[int],
    channel: int,
    after: list[list[int]],
) -> list[int]:
    """One piece from each server's head (once ``after[k]`` arrived) up its group's SHARP
    tree (reducing) and back; per server, the transfer that brings the result home."""
    base = b.n_ranks + first_endpoint
    n_groups = max(leaf_of) + 1
    up: dict[int, list[int]] = {}
    for k, head in enumerate(heads):
        up.setdefault(leaf_of[k], []).append(
            b.add(src=head, dst=base + leaf_of[k], pieces=[piece], op=Op.REDUCE,
                  channel=channel, deps=after[k]))  # fmt: skip
    down = up
    if n_groups > 1:
        root = base + n_groups
        to_root = [b.add(src=base + j, dst=root, pieces=[piece], op=Op.REDUCE, channel=channel,
                         deps=up[j]) for j in range(n_groups)]  # fmt: skip
        down = {j: [b.add(src=root, dst=base + j, pieces=[piece], channel=channel,
                          deps=to_root)] for j in range(n_groups)}  # fmt: skip
    return [b.add(src=base + leaf_of[k], dst=head, pieces=[piece], channel=channel,
                  deps=down[leaf_of[k]]) for k, head in enumerate(heads)]  # fmt: skip


ALGORITHMS: dict[tuple[Collective, str], Callable[..., Schedule]] = {
    (Collective.ALLREDUCE, "collnet_direct"): collnet_direct_allreduce,
    (Collective.ALLREDUCE, "collnet_chain"): collnet_chain_allreduce,
}
"""NCCL's CollNet all-reduces."""
