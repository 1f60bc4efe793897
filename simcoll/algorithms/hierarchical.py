"""Two-level all-reduces: rings inside nodes and across them, and the two-phase composition.

hierarchical
    Horovod's hierarchical all-reduce (``NCCLHierarchicalAllreduce`` in
    ``horovod/common/ops/nccl_operations.cc``: NCCL reduce-scatter inside the node, an
    all-reduce across nodes, NCCL all-gather inside the node), which is also the 2D-torus
    all-reduce of Mikami et al., "Massively Distributed SGD: ImageNet/ResNet-50 Training
    in a Flash" (arXiv:1811.05233, 2018). Ranks form nodes of ``g = gpus_per_node``
    consecutive ranks (rank ``r`` is local rank ``r mod g`` of node ``r // g``), m nodes
    in all, and the buffer is cut into g *slices*, one per local rank:

    1. a ring reduce-scatter inside each node: local rank l ends with slice l summed over
       its node (g - 1 steps of S/g);
    2. for each l, a ring all-reduce of slice l over the m ranks of local index l, one per
       node (on a rail-optimized cluster they share a rail): 2(m - 1) steps of S/(g m);
    3. a ring all-gather of the slices inside each node (g - 1 steps of S/g).

    For 2 nodes of 4 GPUs (ranks 0..3 and 4..7)::

        node 0:  0 ─► 1 ─► 2 ─► 3 ─► 0        phases 1 and 3
                 ▲    ▲    ▲    ▲
                 ▼    ▼    ▼    ▼              phase 2: rings 0-4, 1-5, 2-6, 3-7
        node 1:  4 ─► 5 ─► 6 ─► 7 ─► 4

    Per rank: 2(g-1)/g x S inside the node and 2(m-1)/m x S/g across nodes, sent and
    received, where a flat ring spanning the nodes sends 2(n-1)/n x S out of the last GPU
    of each node into the next node. One node (``gpus_per_node >= n_ranks``) is a flat
    ring all-reduce.
reducescatter_allgather
    The textbook composition all-reduce = reduce-scatter + all-gather, as two collective
    calls: a ring reduce-scatter, then a ring all-gather that rank r joins only after all
    of its reduce-scatter transfers, sent and received, have arrived (each transfer of the
    all-gather waits for both of its ranks). NCCL's ring all-reduce instead streams every
    block on into the all-gather as soon as it is reduced; the volumes are the same,
    2(n-1)/n x S per rank, and the barrier costs the pipeline's drain and refill.

reducescatter_gather (reduce)
    gloo's reduce (``gloo/reduce.cc``; ``validation/gloo-algorithms.md``): a ring
    reduce-scatter, after which rank r holds block r summed over all ranks, then every
    rank but the root sends its block to the root in one message (a direct gather).
    Per non-root rank (n-1)/n x S in the ring and S/n to the root; the root receives
    (n-1)/n x S twice. gloo's loop also re-sends k - 2 segments of a rank's own chunk
    when a chunk has k > 2 segments (S above 2n MiB), wasted bytes not modelled here.

In the hierarchical all-reduce a transfer depends on the transfers that wrote what it
reads, and on the reads and writes of what it overwrites (as in
:mod:`simcoll.algorithms.doubling`), piece by piece, so the phases overlap wherever the
data allows: a chunk of a slice starts across nodes as soon as its reduction inside the
node has arrived, and is gathered inside the node as soon as it is all-reduced.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from simcoll.algorithms._dataflow import Dataflow
from simcoll.algorithms.ring import _ring_phase, ring_orders
from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Op, Schedule, ScheduleBuilder

IntArray = npt.NDArray[np.int64]

__all__ = [
    "ALGORITHMS",
    "hierarchical_allreduce",
    "reducescatter_allgather_allreduce",
    "reducescatter_gather_reduce",
]

PiecesOf = Callable[[int, int, int], list[int]]
"""``(ring block, channel, chunk) -> pieces``: what one transfer of a ring step moves."""


class _Plan(Dataflow):
    """A :class:`Dataflow` builder (dependencies from the buffers) with ring phases."""

    def ring(
        self,
        ranks: list[int],
        pieces_of: PiecesOf,
        *,
        op: Op,
        block_at: int,
        n_channels: int,
        n_chunks: int,
    ) -> None:
        """len(ranks) - 1 ring steps: at step s ``ranks[i]`` sends ring block i + block_at - s.

        The ring is ``ranks[0] -> ranks[1] -> ... -> ranks[0]``. With ``block_at = -1``
        (reducing) ``ranks[i]`` ends with block i summed over the ring; with
        ``block_at = 0`` (copying) block i travels from ``ranks[i]`` to all others.
        """
        n = len(ranks)
        for step in range(n - 1):
            for chunk in range(n_chunks):
                for i in range(n):
                    block = (i + block_at - step) % n
                    for channel in range(n_channels):
                        pieces = pieces_of(block, channel, chunk)
                        self.add(ranks[i], ranks[(i + 1) % n], pieces, op, channel)


def hierarchical_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    gpus_per_node: int = 8,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Reduce-scatter in each node, all-reduce across nodes per local rank, all-gather.

    The buffer is cut into n = g x m pieces per channel and chunk: piece
    ``((l m + j) n_channels + c) n_chunks + k`` is chunk k, channel c of block j of the
    cross-node ring of slice l. A transfer inside a node moves one chunk of one channel of
    a whole slice (its m pieces); a transfer across nodes moves one piece.

    Raises
    ------
    ScheduleError
        If ``gpus_per_node`` (below ``n_ranks``) does not divide ``n_ranks``.

    Examples
    --------
    Two nodes of four GPUs: each rank sends 2 x 3/4 x 64 = 96 B inside its node and
    2 x 1/2 x 64/4 = 16 B across nodes.

    >>> s = hierarchical_allreduce(8, 64, gpus_per_node=4)
    >>> s.n_transfers, s.bytes_sent_per_rank().tolist()
    (64, [112, 112, 112, 112, 112, 112, 112, 112])
    >>> [(t.src, t.dst, t.size_bytes) for t in s.transfers() if t.src // 4 != t.dst // 4][:3]
    [(0, 4, 8), (4, 0, 8), (0, 4, 8)]
    >>> hierarchical_allreduce(12, 96, gpus_per_node=8)
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ScheduleError: hierarchical: 12 ranks do not split into nodes of \
gpus_per_node = 8 GPUs; use a gpus_per_node that divides 12
    """
    g = min(gpus_per_node, n_ranks)
    if g < 1 or n_ranks % g:
        raise ScheduleError(
            f"hierarchical: {n_ranks} ranks do not split into nodes of gpus_per_node = "
            f"{gpus_per_node} GPUs; use a gpus_per_node that divides {n_ranks}"
        )
    m = n_ranks // g
    plan = _Plan(
        ScheduleBuilder(
            Collective.ALLREDUCE,
            "hierarchical",
            n_ranks=n_ranks,
            size_bytes=size_bytes,
            pieces_per_block=n_ranks * n_channels * n_chunks,
            max_in_flight=max_in_flight,
            params={
                "gpus_per_node": gpus_per_node,
                "n_channels": n_channels,
                "n_chunks": n_chunks,
                "max_in_flight": max_in_flight,
            },
        )
    )

    def piece(slice_: int, j: int, channel: int, chunk: int) -> int:
        return ((slice_ * m + j) * n_channels + channel) * n_chunks + chunk

    def whole_slice(slice_: int, channel: int, chunk: int) -> list[int]:
        return [piece(slice_, j, channel, chunk) for j in range(m)]

    def one_piece_of(slice_: int) -> PiecesOf:
        return lambda j, channel, chunk: [piece(slice_, j, channel, chunk)]

    cut = {"n_channels": n_channels, "n_chunks": n_chunks}
    nodes = [list(range(node * g, (node + 1) * g)) for node in range(m)]
    rails = [list(range(local, n_ranks, g)) for local in range(g)]
    for ranks in nodes:
        plan.ring(ranks, whole_slice, op=Op.REDUCE, block_at=-1, **cut)
    for local, ranks in enumerate(rails):
        plan.ring(ranks, one_piece_of(local), op=Op.REDUCE, block_at=-1, **cut)
        plan.ring(ranks, one_piece_of(local), op=Op.COPY, block_at=0, **cut)
    for ranks in nodes:
        plan.ring(ranks, whole_slice, op=Op.COPY, block_at=0, **cut)
    return plan.b.build()


class _BarrierBuilder(ScheduleBuilder):
    """A ScheduleBuilder whose transfers also wait for both of their ranks' ``barrier``."""

    barrier: dict[int, list[int]]

    def add(
        self,
        *,
        src: int,
        dst: int,
        pieces: Sequence[int],
        op: Op = Op.COPY,
        channel: int = 0,
        deps: Iterable[int] = (),
    ) -> int:
        waits = set(deps) | set(self.barrier.get(src, ())) | set(self.barrier.get(dst, ()))
        return super().add(
            src=src, dst=dst, pieces=pieces, op=op, channel=channel, deps=sorted(waits)
        )

    def extend(  # noqa: PLR0917 - ScheduleBuilder.extend's fields
        self,
        src: IntArray,
        dst: IntArray,
        piece: IntArray,
        op: Op,
        channel: int | IntArray,
        deps_indptr: IntArray,
        deps: IntArray,
    ) -> None:
        """:meth:`add` each transfer, so that each waits for its ranks' barrier too."""
        channels = np.broadcast_to(np.asarray(channel), np.shape(src))
        for i in range(len(src)):
            self.add(src=int(src[i]), dst=int(dst[i]), pieces=[int(piece[i])], op=op,
                     channel=int(channels[i]),
                     deps=deps[deps_indptr[i] : deps_indptr[i + 1]].tolist())  # fmt: skip


def reducescatter_allgather_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """A ring reduce-scatter, then a ring all-gather after a per-rank barrier.

    The transfers are those of :func:`~simcoll.algorithms.ring.ring_allreduce`; every
    all-gather transfer also waits for the last reduce-scatter transfer of every channel
    and chunk into and out of its source and its destination. A connection's transfers
    arrive in the order they were issued (one after another on the wire), so these last
    ones arriving means all of a rank's reduce-scatter has.

    Examples
    --------
    On 4 ranks the reduce-scatter's last step is transfers 8 (0 -> 1), 9 (1 -> 2),
    10 (2 -> 3) and 11 (3 -> 0); the all-gather's first, 12 (0 -> 1), waits for those
    into and out of ranks 0 and 1 (11 also delivered the block it sends):

    >>> s = reducescatter_allgather_allreduce(4, 64)
    >>> s.n_transfers, s.bytes_sent_per_rank().tolist()
    (24, [96, 96, 96, 96])
    >>> s.transfer(12).deps
    (8, 9, 11)
    """
    b = _BarrierBuilder(
        Collective.ALLREDUCE,
        "reducescatter_allgather",
        n_ranks=n_ranks,
        size_bytes=size_bytes,
        pieces_per_block=n_ranks * n_channels * n_chunks,
        max_in_flight=max_in_flight,
        params={"n_channels": n_channels, "n_chunks": n_chunks, "max_in_flight": max_in_flight},
    )
    b.barrier = {}
    rings = ring_orders(n_ranks, n_channels, None)
    done = _ring_phase(b, op=Op.REDUCE, block_at=-1, rings=rings, n_chunks=n_chunks, after={})
    # done[r, c, k]: the last reduce-scatter transfer into r (channel c, chunk k), which is
    # also the last out of r - 1.
    last_in: dict[int, list[int]] = {}
    for (rank, _, _), t in done.items():
        last_in.setdefault(rank, []).append(t)
    b.barrier = {r: last_in.get(r, []) + last_in.get((r + 1) % n_ranks, []) for r in range(n_ranks)}
    _ring_phase(b, op=Op.COPY, block_at=0, rings=rings, n_chunks=n_chunks, after=done)
    return b.build()


def reducescatter_gather_reduce(
    n_ranks: int,
    size_bytes: int,
    *,
    root: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """gloo's reduce: a ring reduce-scatter, then each rank's reduced block to the root.

    The gather of block r is one message per channel, as gloo sends it: every piece of
    the block on that channel, once the last reduce-scatter transfer into r of each of
    its chunks has arrived (gloo gathers after its reduce-scatter loop has drained).

    >>> s = reducescatter_gather_reduce(4, 64, root=0)
    >>> s.n_transfers, s.bytes_sent_per_rank().tolist(), s.bytes_received_per_rank().tolist()
    (15, [48, 64, 64, 64], [96, 48, 48, 48])
    >>> [(t.src, t.dst, t.op.value) for t in s.transfers()][12:]
    [(1, 0, 'copy'), (2, 0, 'copy'), (3, 0, 'copy')]
    """
    b = ScheduleBuilder(
        Collective.REDUCE,
        "reducescatter_gather",
        n_ranks=n_ranks,
        size_bytes=size_bytes,
        pieces_per_block=n_ranks * n_channels * n_chunks,
        root=root,
        max_in_flight=max_in_flight,
        params={"n_channels": n_channels, "n_chunks": n_chunks, "max_in_flight": max_in_flight},
    )
    rings = ring_orders(n_ranks, n_channels, None)
    done = _ring_phase(b, op=Op.REDUCE, block_at=-1, rings=rings, n_chunks=n_chunks, after={})
    for rank, channel in itertools.product(range(n_ranks), range(n_channels)):
        if rank != root:  # its block (the ring ends with block r at rank r), to the root
            first = (rank * n_channels + channel) * n_chunks
            deps = [done[rank, channel, chunk] for chunk in range(n_chunks)]
            b.add(src=rank, dst=root, pieces=list(range(first, first + n_chunks)), op=Op.COPY,
                  channel=channel, deps=deps)  # fmt: skip
    return b.build()


ALGORITHMS: dict[tuple[Collective, str], Callable[..., Schedule]] = {
    (Collective.ALLREDUCE, "hierarchical"): hierarchical_allreduce,
    (Collective.ALLREDUCE, "reducescatter_allgather"): reducescatter_allgather_allreduce,
    (Collective.REDUCE, "reducescatter_gather"): reducescatter_gather_reduce,
}
"""Two-level and two-phase all-reduces."""
