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
that transfers to and from it get. Every schedule here asks to be paced
(``params["paced"]``, :mod:`simcoll.sim.pacing`): what a GPU sends into its switch is
issued by its warps a chunk per step, so it moves at the pace of the pipeline's busiest
link even while it runs alone, as the first chunks fill the pipeline.

Across servers, NCCL's NVLS-tree (``NCCL_ALGO=NVLSTree``, all-reduce only) joins the
servers' switches by trees over the network: :func:`nvls_tree_allreduce`. Each server's
local rank k owns shard k as above; its reduce leg ends at local rank k of every server,
those heads (one per NIC, so one per rail) add their partial sums up a tree over the
servers and pass the total back down, and each head multicasts it in its own server::

    node 0: gpus -> nvsw (+) -> head k ==(net, up the tree)==> head k of node 1 (+)
    node 1: ... <==(net, down the tree)== ... head k -> nvsw -> every GPU of node 1

The trees are NCCL's double binary tree over the servers (``ncclGetDtree``): half of
each shard's pieces run on each tree, so every NIC carries one channel of each, and a
server that is inner in one tree is a leaf in the other. Per server, the network then
moves S each way on two servers and 2 S on more (an inner node of a binary tree takes
two children's sums and passes one up), which is why the all-reduce's bus bandwidth on
two servers can pass the NICs' total and falls to about that total on more
(NVIDIA/nccl-tests#309: about 466 GB/s on 2 x 8 H100, 320-365 on 4 and 8 servers).
The heads' CTAs bound it below that (``sm_bus_bandwidth_bytes_per_s``,
:func:`simcoll.sim.pacing.sm_bound_s`): NCCL's cap of 57.7 GB/s per head on two servers
and 45.5 on more, at its 16 CTAs, is 462 and 364 GB/s for 8 heads.

Not modelled: NVLS with CollNet (SHARP across servers), user-buffer
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
from simcoll.core.errors import ScheduleError
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Block, Op, Schedule, ScheduleBuilder
from simcoll.plan.trees import Tree, double_binary_tree
from simcoll.plan.tuning import NVLS_CHANNELS

__all__ = [
    "ALGORITHMS",
    "nvls_allgather",
    "nvls_allreduce",
    "nvls_reducescatter",
    "nvls_tree_allreduce",
]


def _builder(
    collective: Collective,
    n_ranks: int,
    size_bytes: int,
    pieces_per_block: int,
    *,
    n_channels: int,
    n_chunks: int,
    max_in_flight: int,
    n_ctas: int = NVLS_CHANNELS,
) -> ScheduleBuilder:
    return ScheduleBuilder(
        collective,
        "nvls",
        n_ranks=n_ranks,
        size_bytes=size_bytes,
        pieces_per_block=pieces_per_block,
        max_in_flight=max_in_flight,
        params={
            "n_channels": n_channels,
            "n_chunks": n_chunks,
            "max_in_flight": max_in_flight,
            "n_ctas": n_ctas,
            "paced": True,  # SM-bound legs (simcoll.sim.pacing)
        },
        n_switches=1 if n_ranks > 1 else 0,  # one rank needs no switch
    )


def _reduce(b: ScheduleBuilder, piece: int, owner: int, channel: int) -> int:
    """``multimem.ld_reduce``: the piece up from every GPU, its sum down to ``owner``."""
    switch = b.n_ranks
    up = [b.add(src=r, dst=switch, pieces=[piece], op=Op.REDUCE, channel=channel)
          for r in range(b.n_ranks)]  # fmt: skip
    return b.add(src=switch, dst=owner, pieces=[piece], channel=channel, deps=up)


def _multicast(
    b: ScheduleBuilder,
    piece: int,
    owner: int,
    channel: int,
    deps: Sequence[int] = (),
    *,
    switch: int | None = None,
    ranks: Sequence[int] | None = None,
    owner_reads: Sequence[int] = (),
) -> None:
    """``multimem.st``: ``owner`` stores the piece once; the switch (the only one unless
    named) writes it to every GPU (of ``ranks`` if given), to ``owner`` once its own
    sends of the piece (``owner_reads``) are done."""
    switch = b.n_ranks if switch is None else switch
    up = b.add(src=owner, dst=switch, pieces=[piece], channel=channel, deps=deps)
    for r in range(b.n_ranks) if ranks is None else ranks:
        after = [up, *owner_reads] if r == owner else [up]
        b.add(src=switch, dst=r, pieces=[piece], channel=channel, deps=after)


def nvls_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    n_ctas: int = NVLS_CHANNELS,
) -> Schedule:
    """All-reduce in the switch: rank k reduces shard k through the switch, then
    multicasts it; each GPU sends and receives S (n + 1) / n.

    Each shard is cut into ``n_channels x n_chunks`` pieces; the reduce leg of channel c
    runs on channel c, the multicast leg on channel ``n_channels + c``. ``n_ctas`` is the
    CTAs NCCL runs the call with (``NCCL_NVLS_NCHANNELS``, within ``NCCL_MIN_CTAS`` and
    ``NCCL_MAX_CTAS``), kept in the schedule's params: they set NCCL's chunks
    (:func:`simcoll.prediction.simulated.nvls_call_chunks`) and the SMs the call holds
    beside compute (:mod:`simcoll.prediction.sm_sharing`), not its channels here.

    >>> s = nvls_allreduce(3, 30, n_chunks=2)
    >>> s.n_transfers, s.transfer_bytes.tolist()[:4]
    (48, [5, 5, 5, 5])
    """
    per_shard = n_channels * n_chunks
    b = _builder(Collective.ALLREDUCE, n_ranks, size_bytes, n_ranks * per_shard,
                 n_channels=n_channels, n_chunks=n_chunks, max_in_flight=max_in_flight,
                 n_ctas=n_ctas)  # fmt: skip
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
    n_ctas: int = NVLS_CHANNELS,
) -> Schedule:
    """Reduce-scatter in the switch: the reduce leg alone, block r reduced down to rank r
    (``n_ctas`` as for :func:`nvls_allreduce`: the CTAs the call holds).

    >>> nvls_reducescatter(4, 64).bytes_received_per_rank().tolist()
    [16, 16, 16, 16, 256]
    """
    per_block = n_channels * n_chunks
    b = _builder(Collective.REDUCESCATTER, n_ranks, size_bytes, per_block,
                 n_channels=n_channels, n_chunks=n_chunks, max_in_flight=max_in_flight,
                 n_ctas=n_ctas)  # fmt: skip
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
    n_ctas: int = NVLS_CHANNELS,
) -> Schedule:
    """All-gather by multicast: rank r stores block r once, the switch writes it to every
    GPU (rank r included, as ``multimem.st`` does; ``n_ctas`` as for
    :func:`nvls_allreduce`).

    >>> nvls_allgather(4, 64).bytes_sent_per_rank().tolist()
    [16, 16, 16, 16, 256]
    """
    per_block = n_channels * n_chunks
    b = _builder(Collective.ALLGATHER, n_ranks, size_bytes, per_block,
                 n_channels=n_channels, n_chunks=n_chunks, max_in_flight=max_in_flight,
                 n_ctas=n_ctas)  # fmt: skip
    if n_ranks > 1:
        for j in range(per_block):
            for block in range(n_ranks):
                _multicast(b, b.piece(block, j), block, j % n_channels)
    return b.build()


def nvls_tree_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    gpus_per_node: int = 8,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    n_ctas: int = NVLS_CHANNELS,
    sm_bus_bandwidth_bytes_per_s: int = 0,
) -> Schedule:
    """All-reduce as NCCL's NVLS-tree runs it across servers of ``gpus_per_node`` GPUs
    (ranks ``j g .. j g + g - 1`` on server j), each with a switch that reduces.

    Local rank k of every server heads shard k: the server's switch reduces the shard to
    it, the heads add their sums up a tree over the servers and pass the total down, and
    each head multicasts it through its switch. Each shard is cut into ``2 x n_channels x
    n_chunks`` pieces, alternating between NCCL's two trees over the servers; every
    server has a switch endpoint (number ``n_ranks + j``), which the engine places on
    the reducing switch linked to all of that server's GPUs. One server is
    :func:`nvls_allreduce`.

    Per GPU this moves S (g + 1) / g each way over NVLink, as on one server; a head
    sends and receives ``S / g`` times 1 (two servers) to 2 (an inner server in one tree)
    over its NIC.

    ``n_ctas`` is as for :func:`nvls_allreduce`; ``sm_bus_bandwidth_bytes_per_s`` the
    most bus bandwidth (nccl-tests' busbw) those CTAs move (0: no bound; for the prediction
    layer to give: :func:`simcoll.plan.tuning.nvls_tree_sm_bus_bandwidth_bytes_per_s`).
    The engine paces the call to it (:mod:`simcoll.sim.pacing`).

    Raises
    ------
    ScheduleError
        If ``gpus_per_node`` does not divide ``n_ranks``.

    >>> s = nvls_tree_allreduce(4, 64, gpus_per_node=2)
    >>> s.n_switches, s.bytes_sent_per_rank().tolist()
    (2, [128, 128, 128, 128, 192, 192])
    >>> nvls_tree_allreduce(6, 64, gpus_per_node=4)
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ScheduleError: nvls_tree: 6 ranks do not split into servers of \
gpus_per_node = 4
    """
    g = min(gpus_per_node, n_ranks)
    if g < 1 or n_ranks % g:
        raise ScheduleError(f"nvls_tree: {n_ranks} ranks do not split into servers of "
                            f"gpus_per_node = {gpus_per_node}")  # fmt: skip
    n_nodes = n_ranks // g
    if n_nodes == 1:
        return nvls_allreduce(n_ranks, size_bytes, n_channels=n_channels, n_chunks=n_chunks,
                              max_in_flight=max_in_flight, n_ctas=n_ctas)  # fmt: skip
    per_shard = 2 * n_channels * n_chunks
    groups = tuple(tuple(range(j * g, (j + 1) * g)) for j in range(n_nodes))
    b = ScheduleBuilder(
        Collective.ALLREDUCE,
        "nvls_tree",
        n_ranks=n_ranks,
        size_bytes=size_bytes,
        pieces_per_block=g * per_shard,
        max_in_flight=max_in_flight,
        n_switches=n_nodes,
        params={
            "gpus_per_node": gpus_per_node,
            "n_channels": n_channels,
            "n_chunks": n_chunks,
            "max_in_flight": max_in_flight,
            # Which ranks each switch endpoint serves, and that it is their server's own
            # switch (linked to each of them), for the engine to place it.
            "switch_groups": groups,
            "switch_scope": "server",
            "n_ctas": n_ctas,
            "sm_bus_bandwidth_bytes_per_s": sm_bus_bandwidth_bytes_per_s,
            "paced": True,  # SM-bound legs (simcoll.sim.pacing)
        },
    )
    trees = double_binary_tree(n_nodes)
    # Every piece of shard k on tree t moves alike: build it once per (k, t), then repeat
    # it with its piece and channels (the same transfers, in the same order, as
    # building each piece in turn).
    blocks = {(local, t): _tree_block(b, groups, local, trees[t])
              for local in range(g) for t in range(2)}  # fmt: skip
    for j in range(per_shard):
        channel = (j // 2) % n_channels
        for local in range(g):
            b.add_block(blocks[local, j % 2], piece=b.piece(0, local * per_shard + j),
                        channels=(channel, n_channels + channel))  # fmt: skip
    return b.build()


def _tree_block(
    b: ScheduleBuilder, groups: tuple[tuple[int, ...], ...], local: int, tree: Tree
) -> Block:
    """:func:`_tree_piece` of one piece of shard ``local`` on ``tree``, as a block whose
    channel slots are 0 (reduce and up the tree) and 1 (down the tree and multicast)."""
    one = ScheduleBuilder(b.collective, b.algorithm, n_ranks=b.n_ranks,
                          size_bytes=b.size_bytes, pieces_per_block=b.pieces_per_block,
                          n_switches=b.n_switches)  # fmt: skip
    _tree_piece(one, 0, groups, local, tree, channel=0, down_channel=1)
    return one.block()


def _tree_piece(
    b: ScheduleBuilder,
    piece: int,
    groups: tuple[tuple[int, ...], ...],
    local: int,
    tree: Tree,
    *,
    channel: int,
    down_channel: int,
) -> None:
    """One piece of shard ``local``: reduced to each server's head, up and down the tree
    of servers, and multicast in each server."""
    n = b.n_ranks
    head = [group[local] for group in groups]
    # The server's sum lands on its head (a copy), before any child's sum is added to it.
    landed = {}
    for node, group in enumerate(groups):
        up = [b.add(src=r, dst=n + node, pieces=[piece], op=Op.REDUCE, channel=channel)
              for r in group]  # fmt: skip
        landed[node] = [b.add(src=n + node, dst=head[node], pieces=[piece], channel=channel,
                              deps=up)]  # fmt: skip
    order = tree.top_down()
    for node in reversed(order[1:]):  # children before their parent: up the tree
        parent = tree.parent[node]
        added = b.add(src=head[node], dst=head[parent], pieces=[piece], op=Op.REDUCE,
                      channel=channel, deps=landed[node] + landed[parent][:1])  # fmt: skip
        landed[parent].append(added)
    total = {tree.root: landed[tree.root]}
    sent: dict[int, list[int]] = {node: [] for node in order}
    for node in order[1:]:  # parents before their children: down the tree
        parent = tree.parent[node]
        total[node] = [b.add(src=head[parent], dst=head[node], pieces=[piece],
                             channel=down_channel, deps=total[parent])]  # fmt: skip
        sent[parent] += total[node]
    for node in order:
        _multicast(
            b,
            piece,
            head[node],
            down_channel,
            deps=total[node],
            switch=n + node,
            ranks=groups[node],
            owner_reads=sent[node],
        )


ALGORITHMS: dict[tuple[Collective, str], Callable[..., Schedule]] = {
    (Collective.ALLREDUCE, "nvls"): nvls_allreduce,
    (Collective.ALLREDUCE, "nvls_tree"): nvls_tree_allreduce,
    (Collective.REDUCESCATTER, "nvls"): nvls_reducescatter,
    (Collective.ALLGATHER, "nvls"): nvls_allgather,
}
"""NVLS for the collectives NCCL runs it for."""
