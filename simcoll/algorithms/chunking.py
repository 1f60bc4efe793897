"""How a call is cut into pieces when its caller does not say: one rule for the flow model
and the closed forms (:mod:`simcoll.models.alphabeta`), so that both cost the same schedule.

Pipelined algorithms (rings, chains, trees that forward a piece as soon as it has arrived,
direct exchanges, NVLS, SHARP) cut each channel's share of a block into pieces so that
their largest transfer is about :data:`~simcoll.plan.tuning.CHUNK_TARGET_BYTES` (NCCL's
Simple step), at most :data:`~simcoll.plan.tuning.MAX_DEFAULT_CHUNKS` pieces. The largest
transfer of the uncut schedule is known in closed form (:func:`largest_transfer_bytes`,
checked against built schedules in ``tests/algorithms/test_chunking.py``), so nothing is
built to find it.

Stepwise algorithms (:data:`STEPWISE`: recursive halving and doubling, Bruck, pairwise
exchange, binomial reduce, gather and scatter) run each step whole, as MPICH and gloo run them:
a step is one ``MPI_Sendrecv`` (or send) of the step's whole message, and the next step
starts once it has completed, so nothing of a later step overlaps an earlier one (Thakur,
Rabenseifner & Gropp, IJHPCA 2005; MPICH ``src/mpi/coll``; gloo
``allreduce_halving_doubling.cc``). Cut into pieces by request (``n_chunks``), their
schedules pipeline piece by piece across steps: a what-if no MPI library runs.

>>> from simcoll.core.collectives import Collective
>>> largest_transfer_bytes(Collective.ALLGATHER, "bruck", 8, 8 * 2**20)  # 4 blocks, last step
4194304
>>> default_n_chunks(Collective.ALLREDUCE, "ring", 8, 2**30)  # 128 MiB per transfer: capped
64
>>> default_n_chunks(Collective.ALLGATHER, "bruck", 8, 2**30)  # stepwise: whole steps
1
"""

from __future__ import annotations

from simcoll.algorithms.collnet import servers_per_switch
from simcoll.core.collectives import Collective
from simcoll.plan.tuning import CHUNK_TARGET_BYTES, MAX_DEFAULT_CHUNKS

__all__ = [
    "STEPWISE",
    "default_n_chunks",
    "largest_transfer_bytes",
    "pieces_per_block",
    "transfer_count",
]

C = Collective

#: Algorithms whose steps run whole, one after another, as MPI libraries run them.
STEPWISE: frozenset[tuple[Collective, str]] = frozenset(
    {
        (C.ALLREDUCE, "halving_doubling"),
        (C.REDUCESCATTER, "halving_doubling"),
        (C.ALLGATHER, "halving_doubling"),
        (C.ALLGATHER, "bruck"),
        (C.ALLTOALL, "pairwise"),
        (C.REDUCE, "tree"),
        (C.GATHER, "tree"),
        (C.SCATTER, "tree"),
    }
)


def _most_blocks_per_step(n_ranks: int) -> int:
    """The most blocks one step of a Bruck all-gather (or one edge of a binomial tree's
    gather or scatter) moves: at distance 2^i, min(2^i, n - 2^i) blocks."""
    most, distance = 0, 1
    while distance < n_ranks:
        most = max(most, min(distance, n_ranks - distance))
        distance *= 2
    return most


def _shape(collective: Collective, name: str, n: int, gpus_per_node: int) -> tuple[int, int]:
    """(pieces each block is cut into per channel, uncut; pieces the largest transfer
    carries) of the uncut schedule."""
    power = n & (n - 1) == 0
    if collective is C.ALLREDUCE:
        if name == "tree":
            return 2, 1  # half the buffer per tree
        if name == "nvls_tree" and min(gpus_per_node, n) < n:
            return 2 * min(gpus_per_node, n), 1  # a shard per local rank, half per tree
        if name == "halving_doubling":
            p = 1 << (n.bit_length() - 1)
            return p, p // 2 if power else p  # the first halving (or the fold: all of it)
        if name == "hierarchical":
            g = min(gpus_per_node, n)
            return n, n // g if g > 1 else 1  # a node's ring moves a whole slice
        if name in ("reduce_broadcast", "sharp", "collnet_chain"):
            return 1, 1
        if name == "collnet_direct":
            return min(gpus_per_node, n), 1  # a piece per head
        return n, 1  # ring, direct, reducescatter_allgather, nvls
    if name == "halving_doubling":  # the last doubling or first halving; else the fold
        if collective is C.ALLGATHER:
            return 1, n // 2 if power else n - 1
        return 1, n // 2 if power else n
    if (collective, name) in ((C.ALLGATHER, "bruck"), (C.GATHER, "tree"), (C.SCATTER, "tree")):
        return 1, _most_blocks_per_step(n)
    if (collective, name) == (C.REDUCE, "reducescatter_gather"):
        return n, 1
    return 1, 1


def largest_transfer_bytes(
    collective: Collective,
    name: str,
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    gpus_per_node: int = 8,
) -> int:
    """Bytes of the largest transfer of the uncut schedule (``n_chunks = 1``), to within
    the bytes its pieces differ by (the pieces of a block differ by at most one byte).

    Raises
    ------
    ConfigError
        If ``size_bytes`` does not split into the collective's blocks.

    >>> largest_transfer_bytes(Collective.ALLREDUCE, "ring", 8, 2**30, n_channels=2)
    67108864
    """
    pieces, per_transfer = _shape(collective, name, n_ranks, gpus_per_node)
    block_bytes = collective.block_bytes(size_bytes, n_ranks)
    return per_transfer * -(-block_bytes // (pieces * n_channels))


def pieces_per_block(
    collective: Collective,
    name: str,
    n_ranks: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    gpus_per_node: int = 8,
    planned: bool = False,
) -> int:
    """The pieces each block of the schedule of ``name`` is cut into (its builder's
    ``pieces_per_block``), known before it is built: a block of fewer bytes cannot be
    cut (:func:`simcoll.core.schedule.check_pieces`). ``planned``: the tree all-reduce on
    a plan's trees, one per channel (else two trees, each on ``n_channels``).

    >>> pieces_per_block(Collective.ALLREDUCE, "ring", 8, n_channels=2, n_chunks=4)  # n C K
    64
    """
    if planned and (collective, name) == (C.ALLREDUCE, "tree"):
        return n_channels * n_chunks
    return _shape(collective, name, n_ranks, gpus_per_node)[0] * n_channels * n_chunks


def default_n_chunks(
    collective: Collective,
    name: str,
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    gpus_per_node: int = 8,
) -> int:
    """Pieces per channel and block when the caller gives no ``n_chunks``: 1 for a
    stepwise algorithm, else enough for transfers of about ``CHUNK_TARGET_BYTES``.

    >>> default_n_chunks(Collective.BROADCAST, "tree", 8, 2 * 2**20)  # 2 MiB per edge
    4
    """
    if (collective, name) in STEPWISE or n_ranks < 2:
        return 1
    largest = largest_transfer_bytes(
        collective, name, n_ranks, size_bytes, n_channels=n_channels, gpus_per_node=gpus_per_node
    )
    return max(1, min(MAX_DEFAULT_CHUNKS, -(-largest // CHUNK_TARGET_BYTES)))


def transfer_count(
    collective: Collective,
    name: str,
    n_ranks: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    gpus_per_node: int = 8,
    ranks_per_switch: int = 0,
    planned: bool = False,
) -> int:
    """How many transfers the schedule of ``name`` holds, known before it is built (the
    refusal of a schedule too large to simulate comes from this count, in no time;
    ``tests/algorithms/test_chunking.py`` holds it to the built schedules). ``planned``:
    the tree all-reduce on a plan's trees, one per channel (else two per channel pair).

    >>> transfer_count(Collective.ALLREDUCE, "ring", 8, n_channels=2, n_chunks=4)  # 2n(n-1)kC
    896
    """
    n, per = n_ranks, n_channels * n_chunks
    if n < 2:
        return 0
    p = 1 << (n.bit_length() - 1)  # halving-doubling's core
    steps = (n - 1).bit_length()  # ceil(log2 n)
    c = collective
    if c is C.ALLREDUCE:
        g = min(gpus_per_node, n)
        hosts = n // max(1, g)
        groups = n // ranks_per_switch if 0 < ranks_per_switch < n else 1
        counts = {
            "ring": 2 * n * (n - 1),
            "direct": 2 * n * (n - 1),
            "reducescatter_allgather": 2 * n * (n - 1),
            "halving_doubling": 2 * (n - p) + 2 * p * (p.bit_length() - 1),
            "hierarchical": 2 * hosts * g * (g - 1) + g * hosts * 2 * (hosts - 1),
            "reduce_broadcast": 2 * (n - 1),
            "sharp": 2 * n + (2 * groups if groups > 1 else 0),
            "tree": 2 * (n - 1) if planned else 4 * (n - 1),
            "nvls": 2 * n * (n + 1),
        }
        if name in ("collnet_direct", "collnet_chain"):  # 2n per piece, and the roots'
            leaves = hosts // servers_per_switch(ranks_per_switch, g, hosts)
            heads = g if name == "collnet_direct" else 1
            return heads * (2 * n + (2 * leaves if leaves > 1 else 0)) * per
        if name == "nvls_tree":
            if hosts < 2:
                return 2 * n * (n + 1) * per
            return 2 * g * (hosts * (2 * g + 2) + 2 * (hosts - 1)) * per
        return counts[name] * per
    if c in (C.ALLGATHER, C.REDUCESCATTER):
        counts = {"ring": n * (n - 1), "direct": n * (n - 1), "nvls": n * (n + 1),
                  "halving_doubling": 2 * (n - p) + p * (p.bit_length() - 1),
                  "bruck": n * steps}  # fmt: skip
        return counts[name] * per
    if c is C.ALLTOALL:
        return n * (n - 1) * per
    if c is C.SENDRECV:
        return n * per
    if (c, name) == (C.REDUCE, "reducescatter_gather"):
        return n * (n - 1) * per + (n - 1) * n_channels  # the gather: one message a channel
    return (n - 1) * per  # broadcast, reduce, gather, scatter: one edge per rank but the root
