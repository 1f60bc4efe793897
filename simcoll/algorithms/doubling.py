"""Recursive halving and doubling: MPICH's reduce-scatter, all-gather and all-reduce.

The algorithms of Thakur, Rabenseifner & Gropp, "Optimization of Collective
Communication Operations in MPICH" (IJHPCA 19(1), 2005), for n = 2^L ranks:

recursive halving (reduce-scatter)
    L steps. Every rank starts responsible for the whole buffer; at each step it pairs
    with the rank whose number differs in one bit, highest bit first (distance n/2, then
    n/4, ..., 1), keeps the half of its current range that holds its own block and adds
    the other half into the partner's copy. Data sent halves every step, S/2 + S/4 + ...
    = (n-1)/n x S per rank, and rank r ends with block r reduced over every rank.
recursive doubling (all-gather)
    The mirror image: distance 1, 2, ..., n/2; at each step a rank swaps everything it
    has with its partner, so what it holds, and sends, doubles: (n-1)/n x S per rank.
Rabenseifner's all-reduce
    A recursive-halving reduce-scatter of the buffer cut into n sub-blocks, then a
    recursive-doubling all-gather of the reduced sub-blocks: 2 log2(n) steps and
    2(n-1)/n x S per rank, the same volume as a ring in logarithmically many steps.

For n = 8 the partners at each step of the halving are::

    distance 4:  0-4  1-5  2-6  3-7
    distance 2:  0-2  1-3  4-6  5-7
    distance 1:  0-1  2-3  4-5  6-7      (doubling: the same rows, bottom up)

Any other n is folded onto p = 2^floor(log2 n) ranks, as MPICH does: with r = n - p,
each even rank 2i < 2r hands its data to its odd neighbour 2i + 1 (adding it in, or for
all-gather sending its block) and sits out; the p remaining ranks (the odd ones among the
first 2r, then 2r..n-1) run the power-of-two algorithm, each standing for the blocks of
the ranks it represents; finally each odd rank 2i + 1 sends the result back to 2i (for
reduce-scatter only block 2i, so that every rank r ends with block r).

Each step is an ``MPI_Sendrecv`` between partners, as MPICH runs it: a transfer starts
once both partners have finished their previous step (sent and received: MPI's
rendezvous holds a send until its receiver has posted the receive), and after the data
it moves has arrived and whatever it overwrites has been read (the data dependencies).
So ranks 2r..n-1, which have no fold, wait for a partner still folding. Each block (or
sub-block) is cut into ``n_channels x n_chunks`` pieces; a step sends, per channel and
chunk, one transfer with that piece of every block it moves, so chunk j of a step
follows chunk j of the step before and channels run in parallel. By default a step is
one piece per block (:data:`~simcoll.algorithms.chunking.STEPWISE`), as MPI sends it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from simcoll.algorithms._dataflow import Dataflow
from simcoll.core.collectives import Collective
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Op, Schedule, ScheduleBuilder

__all__ = [
    "ALGORITHMS",
    "fold",
    "halving_doubling_allgather",
    "halving_doubling_allreduce",
    "halving_doubling_reducescatter",
]


def fold(n_ranks: int) -> tuple[int, list[int]]:
    """The power of two p <= n_ranks and the rank that plays each of the p positions.

    Position i is rank 2i + 1 for i < r = n_ranks - p (it also stands for rank 2i),
    and rank i + r otherwise.

    >>> fold(6)
    (4, [1, 3, 4, 5])
    >>> fold(8)
    (8, [0, 1, 2, 3, 4, 5, 6, 7])
    """
    p = 1 << (n_ranks.bit_length() - 1)
    extra = n_ranks - p
    return p, [2 * i + 1 if i < extra else i + extra for i in range(p)]


class _Plan:
    """A ScheduleBuilder that derives every transfer's dependencies from the buffers.

    Slots are the units the algorithms move: slot s is pieces ``s * P .. s * P + P - 1``
    with ``P = n_channels * n_chunks`` (a block of all-gather or reduce-scatter, or one of
    the p sub-blocks of the all-reduce buffer). For every (rank, piece) the plan keeps
    the last copy into it, the reductions since and the reads since, and makes each new
    transfer depend on the writes of what it reads and on the reads and writes of what it
    overwrites (reductions into one piece may run concurrently).
    """

    def __init__(
        self,
        collective: Collective,
        n_ranks: int,
        size_bytes: int,
        *,
        slots_per_block: int,
        n_channels: int,
        n_chunks: int,
        max_in_flight: int,
    ) -> None:
        self.n_channels = n_channels
        self.n_chunks = n_chunks
        self.per_slot = n_channels * n_chunks
        self.b = ScheduleBuilder(
            collective,
            "halving_doubling",
            n_ranks=n_ranks,
            size_bytes=size_bytes,
            pieces_per_block=slots_per_block * self.per_slot,
            max_in_flight=max_in_flight,
            params={"n_channels": n_channels, "n_chunks": n_chunks, "max_in_flight": max_in_flight},
        )
        self.flow = Dataflow(self.b)
        # Per (rank, channel, chunk): the transfers of the rank's last step, sent and
        # received, and those of the step being added.
        self.last: dict[tuple[int, int, int], list[int]] = {}
        self.current: dict[tuple[int, int, int], list[int]] = {}

    def send(self, src: int, dst: int, slots: Iterable[int], op: Op) -> None:
        """Move ``slots`` from src to dst in the current step: one transfer per chunk and
        channel, once both ranks have finished their last step."""
        slots = sorted(slots)
        for chunk in range(self.n_chunks):
            for channel in range(self.n_channels):
                offset = channel * self.n_chunks + chunk
                pieces = [s * self.per_slot + offset for s in slots]
                before = [*self.last.get((src, channel, chunk), ()),
                          *self.last.get((dst, channel, chunk), ())]  # fmt: skip
                t = self.flow.add(src, dst, pieces, op, channel, after=before)
                for rank in (src, dst):
                    self.current.setdefault((rank, channel, chunk), []).append(t)

    def end_step(self) -> None:
        """The step's transfers become the last step of the ranks that took part."""
        self.last.update(self.current)
        self.current = {}


def _halving(plan: _Plan, ranks: list[int], slots_of: list[list[int]]) -> None:
    """Recursive halving over positions 0..p-1 (played by ``ranks``), reducing.

    At distance d = p/2, p/4, ..., 1 position i keeps the positions j of its range with
    j // d == i // d and adds the slots of the others into its partner i XOR d.
    """
    p = len(ranks)
    distance = p // 2
    while distance:
        for i in range(p):
            partner = i ^ distance
            # The partner's half of i's range: positions that share partner // distance.
            given = [
                s for j in range(p) if j // distance == partner // distance for s in slots_of[j]
            ]
            plan.send(ranks[i], ranks[partner], given, Op.REDUCE)
        plan.end_step()
        distance //= 2


def _doubling(plan: _Plan, ranks: list[int], slots_of: list[list[int]]) -> None:
    """Recursive doubling over positions 0..p-1 (played by ``ranks``), copying.

    At distance d = 1, 2, ..., p/2 position i holds the slots of the positions j with
    j // d == i // d and sends them all to its partner i XOR d.
    """
    p = len(ranks)
    distance = 1
    while distance < p:
        for i in range(p):
            held = [s for j in range(p) if j // distance == i // distance for s in slots_of[j]]
            plan.send(ranks[i], ranks[i ^ distance], held, Op.COPY)
        plan.end_step()
        distance *= 2


def _blocks_of(n_ranks: int) -> tuple[list[int], list[list[int]]]:
    """The p ranks that run the power-of-two core and the blocks each position owns."""
    p, ranks = fold(n_ranks)
    extra = n_ranks - p
    blocks = [[2 * i, 2 * i + 1] if i < extra else [i + extra] for i in range(p)]
    return ranks, blocks


def halving_doubling_reducescatter(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Recursive-halving reduce-scatter (Thakur, Rabenseifner & Gropp 2005).

    log2(n) steps for n a power of two; rank r ends with block r reduced over all ranks.
    Otherwise the even ranks below 2r first add all n blocks into their odd neighbour,
    and that neighbour finally returns the neighbour's block.

    >>> s = halving_doubling_reducescatter(4, 64)
    >>> [(t.src, t.dst, t.size_bytes) for t in s.transfers()][:4]
    [(0, 2, 32), (1, 3, 32), (2, 0, 32), (3, 1, 32)]
    >>> s.bytes_sent_per_rank().tolist()
    [48, 48, 48, 48]
    """
    plan = _Plan(Collective.REDUCESCATTER, n_ranks, size_bytes, slots_per_block=1,
                 n_channels=n_channels, n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    ranks, blocks = _blocks_of(n_ranks)
    extra = n_ranks - len(ranks)
    for i in range(extra):
        plan.send(2 * i, 2 * i + 1, range(n_ranks), Op.REDUCE)
    plan.end_step()
    _halving(plan, ranks, blocks)
    for i in range(extra):
        plan.send(2 * i + 1, 2 * i, [2 * i], Op.COPY)
    return plan.b.build()


def halving_doubling_allgather(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Recursive-doubling all-gather (Thakur, Rabenseifner & Gropp 2005).

    log2(n) steps for n a power of two, the data exchanged doubling each step.
    Otherwise the even ranks below 2r first send their block to their odd neighbour,
    which finally sends them every other block.

    >>> s = halving_doubling_allgather(4, 64)
    >>> [(t.src, t.dst, t.size_bytes) for t in s.transfers()][4:]
    [(0, 2, 32), (1, 3, 32), (2, 0, 32), (3, 1, 32)]
    >>> halving_doubling_allgather(3, 30).bytes_sent_per_rank().tolist()
    [10, 40, 10]
    """
    plan = _Plan(Collective.ALLGATHER, n_ranks, size_bytes, slots_per_block=1,
                 n_channels=n_channels, n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    ranks, blocks = _blocks_of(n_ranks)
    extra = n_ranks - len(ranks)
    for i in range(extra):
        plan.send(2 * i, 2 * i + 1, [2 * i], Op.COPY)
    plan.end_step()
    _doubling(plan, ranks, blocks)
    for i in range(extra):
        plan.send(2 * i + 1, 2 * i, [b for b in range(n_ranks) if b != 2 * i], Op.COPY)
    return plan.b.build()


def halving_doubling_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """Rabenseifner's all-reduce: recursive halving, then recursive doubling.

    The buffer is cut into p = 2^floor(log2 n) sub-blocks; the p ranks of the
    power-of-two core reduce-scatter them by recursive halving and all-gather them by
    recursive doubling (Thakur, Rabenseifner & Gropp 2005). For n a power of two each
    rank sends and receives 2(n-1)/n x S. Otherwise the even ranks below 2r first add
    their whole buffer into their odd neighbour and get the result back at the end.

    >>> s = halving_doubling_allreduce(4, 64)
    >>> s.n_transfers, s.bytes_sent_per_rank().tolist()
    (16, [96, 96, 96, 96])
    >>> halving_doubling_allreduce(3, 32).bytes_received_per_rank().tolist()
    [32, 64, 32]
    """
    p, ranks = fold(n_ranks)
    plan = _Plan(Collective.ALLREDUCE, n_ranks, size_bytes, slots_per_block=p,
                 n_channels=n_channels, n_chunks=n_chunks, max_in_flight=max_in_flight)  # fmt: skip
    extra = n_ranks - p
    sub_blocks = [[i] for i in range(p)]
    for i in range(extra):
        plan.send(2 * i, 2 * i + 1, range(p), Op.REDUCE)
    plan.end_step()
    _halving(plan, ranks, sub_blocks)
    _doubling(plan, ranks, sub_blocks)
    for i in range(extra):
        plan.send(2 * i + 1, 2 * i, range(p), Op.COPY)
    return plan.b.build()


ALGORITHMS: dict[tuple[Collective, str], Callable[..., Schedule]] = {
    (Collective.REDUCESCATTER, "halving_doubling"): halving_doubling_reducescatter,
    (Collective.ALLGATHER, "halving_doubling"): halving_doubling_allgather,
    (Collective.ALLREDUCE, "halving_doubling"): halving_doubling_allreduce,
}
"""Recursive halving/doubling for the collectives MPICH runs it for."""
