"""Schedules: a collective call as frozen data.

A :class:`Schedule` lists the *transfers* of one collective call. Each transfer moves some
*pieces* of the collective's logical buffer from a source rank to a destination rank,
either copying them (``Op.COPY``) or reducing them into what the destination holds
(``Op.REDUCE``), on a *channel*. It starts only after the transfers it depends on have
arrived.

Send order and in-flight window
    Transfers from one rank to another on one channel form a *connection*. A connection
    issues its transfers in schedule order, keeps at most ``max_in_flight`` of them
    issued but not yet arrived (NCCL's step slots), and puts their bytes on the wire one
    transfer after another. Latency of a later transfer therefore overlaps the
    transmission of earlier ones: that is how chunk pipelining hides latency.

Logical buffer
    The buffer a collective works on is split into ``collective.n_blocks(n)`` blocks (one
    per rank for all-gather, one per rank pair for all-to-all, ...), and each block into
    the same number of pieces. ``piece_bytes[p]`` is the size of piece ``p``; piece ``p``
    belongs to block ``p // pieces_per_block``.

In-network reduction
    A schedule may also name ``n_switches`` switch *endpoints*, numbered after the ranks
    (``n_ranks`` .. ``n_ranks + n_switches - 1``): switches that reduce in the network
    (NVLink SHARP on an NVSwitch, SHARP on an InfiniBand switch). They start with no data,
    owe none at the end, and a reduction into what a switch does not hold yet stores it
    (the switch accumulates from zero). The engine maps them to switch nodes whose
    ``reduces`` attribute is true.

Schedules are built by algorithm functions with :class:`ScheduleBuilder`, and are plain
data: they can be checked (:mod:`simcoll.core.checks`), costed and simulated on any topology.

>>> from simcoll.core.collectives import Collective
>>> b = ScheduleBuilder(Collective.SENDRECV, "direct", n_ranks=2, size_bytes=8,
...                     pieces_per_block=1)
>>> first = b.add(src=0, dst=1, pieces=[0])
>>> second = b.add(src=1, dst=0, pieces=[1])
>>> s = b.build()
>>> s.n_transfers, s.transfer_bytes.tolist(), s.transfer(1)
(2, [8, 8], Transfer(index=1, src=1, dst=0, pieces=(1,), size_bytes=8, op=<Op.COPY: 'copy'>, \
channel=0, deps=()))
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, LimitError, ScheduleError
from simcoll.core.limits import (
    MAX_DEPENDENCIES,
    MAX_RANKS,
    MAX_TRANSFERS,
    check_count,
    check_memory,
    check_size_bytes,
    whole_number,
)

__all__ = [
    "ROUND_UP_TOLERANCE",
    "Block",
    "Op",
    "Schedule",
    "ScheduleBuilder",
    "Transfer",
    "check_pieces",
    "split_bytes",
]

IntArray = npt.NDArray[np.int64]

#: NCCL keeps NCCL_STEPS = 8 slots per connection (src/include/device.h).
DEFAULT_MAX_IN_FLIGHT = 8
#: Pieces one byte apart (a block that does not split evenly) are timed at the largest
#: piece's size where that is at most this much more than the smallest (pieces of at least
#: 1,000 B): :attr:`Schedule.timed_bytes`.
ROUND_UP_TOLERANCE = 1e-3


class Op(Enum):
    """What a transfer does with the pieces it delivers."""

    COPY = "copy"  # the destination's pieces become the source's
    REDUCE = "reduce"  # the destination combines the source's pieces into its own


_OP_CODES = {Op.COPY: 0, Op.REDUCE: 1}
_OPS = (Op.COPY, Op.REDUCE)


@dataclass(frozen=True, slots=True)
class Transfer:
    """One transfer of a schedule, as a readable record (see :meth:`Schedule.transfer`)."""

    index: int
    src: int
    dst: int
    pieces: tuple[int, ...]
    size_bytes: int
    op: Op
    channel: int
    deps: tuple[int, ...]


def split_bytes(size_bytes: int, n_parts: int) -> list[int]:
    """Split ``size_bytes`` into ``n_parts`` whole-byte parts that differ by at most one.

    The first ``size_bytes % n_parts`` parts get the extra byte.

    >>> split_bytes(10, 4)
    [3, 3, 2, 2]
    """
    base, extra = divmod(size_bytes, n_parts)
    return [base + 1] * extra + [base] * (n_parts - extra)


def _frozen(values: Iterable[int] | IntArray) -> IntArray:
    """``values`` as a read-only int64 array of its own (a builder's stdlib arrays are
    copied from their buffers, not item by item)."""
    frozen = np.array(values, dtype=np.int64)
    frozen.setflags(write=False)
    return frozen


def _append(out: array[int], values: npt.ArrayLike) -> None:
    """Append ``values`` (numpy or a sequence of ints) to the stdlib array ``out``."""
    out.frombytes(np.ascontiguousarray(values, dtype=np.int64).data.cast("B"))


@dataclass(frozen=True, eq=False, kw_only=True)
class Schedule:
    """The transfers of one collective call, as columns (one entry per transfer).

    Build one with :class:`ScheduleBuilder`; the constructor only stores validated arrays.
    ``pieces_indptr``/``pieces`` and ``deps_indptr``/``deps`` are CSR lists: the pieces of
    transfer ``t`` are ``pieces[pieces_indptr[t]:pieces_indptr[t + 1]]``.
    """

    collective: Collective
    algorithm: str
    n_ranks: int
    size_bytes: int
    root: int
    piece_bytes: IntArray
    pieces_per_block: int
    src: IntArray
    dst: IntArray
    op: IntArray
    channel: IntArray
    pieces_indptr: IntArray
    pieces: IntArray
    deps_indptr: IntArray
    deps: IntArray
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    params: dict[str, Any] = field(default_factory=dict)
    n_switches: int = 0

    @property
    def n_endpoints(self) -> int:
        """Ranks plus in-network switch endpoints: the range of ``src`` and ``dst``."""
        return self.n_ranks + self.n_switches

    @property
    def n_transfers(self) -> int:
        """Number of transfers."""
        return len(self.src)

    @property
    def n_pieces(self) -> int:
        """Number of pieces of the logical buffer."""
        return len(self.piece_bytes)

    @property
    def n_channels(self) -> int:
        """Number of channels used (1 + the largest channel index)."""
        return int(self.channel.max()) + 1 if self.n_transfers else 0

    @property
    def transfer_bytes(self) -> IntArray:
        """Bytes each transfer moves: the sum of its pieces' sizes."""
        sums = (
            np.add.reduceat(self.piece_bytes[self.pieces], self.pieces_indptr[:-1])
            if len(self.pieces)
            else np.zeros(0, dtype=np.int64)
        )
        return _frozen(sums)

    @property
    def timed_bytes(self) -> IntArray:
        """Bytes each transfer is timed with: :attr:`transfer_bytes`, except that where the
        pieces are one byte apart (a block that does not split evenly: 1 GiB over 24
        channels), every piece counts as the largest, if that adds at most
        :data:`ROUND_UP_TOLERANCE` to the smallest (pieces of at least 1,000 B).

        One convention for every path of the engine: the symmetric fast paths need equal
        pieces to fold ranks and channels, and timing the general path the same way keeps
        every path's answer the same (a byte more or less per piece can reorder the fluid
        model's events, and moved times by up to 4 % where each path had its own: issue
        29). The data each rank ends with is the schedule's own, to the byte.

        >>> b = ScheduleBuilder(Collective.SENDRECV, "t", n_ranks=2, size_bytes=2001,
        ...                     pieces_per_block=2)
        >>> _ = b.add(src=0, dst=1, pieces=[0, 1])
        >>> s = b.build()
        >>> s.piece_bytes.tolist(), s.transfer_bytes.tolist(), s.timed_bytes.tolist()  # 2 blocks
        ([1001, 1000, 1001, 1000], [2001], [2002])
        """
        sizes = self.piece_bytes
        if not len(sizes) or int(sizes.max()) - int(sizes.min()) != 1:
            return self.transfer_bytes
        if int(sizes.min()) * ROUND_UP_TOLERANCE < 1:
            return self.transfer_bytes
        return _frozen(np.diff(self.pieces_indptr) * int(sizes.max()))

    def pieces_of(self, index: int) -> IntArray:
        """The pieces transfer ``index`` moves."""
        return self.pieces[self.pieces_indptr[index] : self.pieces_indptr[index + 1]]

    def deps_of(self, index: int) -> IntArray:
        """The transfers that must arrive before transfer ``index`` may be issued."""
        return self.deps[self.deps_indptr[index] : self.deps_indptr[index + 1]]

    def transfer(self, index: int) -> Transfer:
        """Transfer ``index`` as a readable record."""
        pieces = tuple(int(p) for p in self.pieces_of(index))
        return Transfer(
            index=index,
            src=int(self.src[index]),
            dst=int(self.dst[index]),
            pieces=pieces,
            size_bytes=int(self.piece_bytes[list(pieces)].sum()),
            op=_OPS[int(self.op[index])],
            channel=int(self.channel[index]),
            deps=tuple(int(d) for d in self.deps_of(index)),
        )

    def transfers(self) -> Iterator[Transfer]:
        """All transfers in schedule order, as readable records."""
        return (self.transfer(i) for i in range(self.n_transfers))

    def block_of_piece(self, piece: int) -> int:
        """The block (unit of ownership, see :meth:`Collective.n_blocks`) a piece is in."""
        return piece // self.pieces_per_block

    def bytes_sent_per_rank(self) -> IntArray:
        """Bytes each endpoint (ranks, then switches) sends over the whole schedule."""
        sent = np.bincount(self.src, weights=self.transfer_bytes, minlength=self.n_endpoints)
        return _frozen(sent.astype(np.int64))

    def bytes_received_per_rank(self) -> IntArray:
        """Bytes each endpoint (ranks, then switches) receives over the whole schedule."""
        received = np.bincount(self.dst, weights=self.transfer_bytes, minlength=self.n_endpoints)
        return _frozen(received.astype(np.int64))


@dataclass(frozen=True)
class Block:
    """A run of one-piece transfers that a schedule repeats (:meth:`ScheduleBuilder.block`):
    endpoints and operation codes, a channel slot per transfer (an index into the
    channels :meth:`ScheduleBuilder.add_block` is given), and dependencies numbered from
    the block's first transfer."""

    src: list[int]
    dst: list[int]
    op: list[int]
    channel: IntArray
    deps_indptr: IntArray
    deps: IntArray


class ScheduleBuilder:
    """Collects transfers for one :class:`Schedule`; algorithms use it and call ``build``.

    Parameters
    ----------
    collective, algorithm, n_ranks, size_bytes
        What the schedule computes; ``size_bytes`` follows nccl-tests.
    pieces_per_block
        How many pieces each block of the logical buffer is cut into; piece sizes are the
        block's bytes split as evenly as whole bytes allow (:func:`split_bytes`).
    root
        Root rank of rooted collectives (ignored otherwise).
    max_in_flight
        Per-connection window: transfers issued but not yet arrived.
    """

    def __init__(
        self,
        collective: Collective,
        algorithm: str,
        *,
        n_ranks: int,
        size_bytes: int,
        pieces_per_block: int,
        root: int = 0,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        params: dict[str, Any] | None = None,
        n_switches: int = 0,
    ) -> None:
        if n_switches < 0:
            raise ScheduleError(f"n_switches must not be negative, got {n_switches}")
        self.n_switches = n_switches
        _check_header(collective, n_ranks, size_bytes, pieces_per_block, root, max_in_flight)
        block_bytes = collective.block_bytes(size_bytes, n_ranks)
        n_blocks = collective.n_blocks(n_ranks)
        if n_blocks * pieces_per_block > MAX_TRANSFERS:
            raise ConfigError(
                f"{collective.value} over {n_ranks} ranks in {pieces_per_block} pieces per "
                f"block would cut the buffer into {n_blocks * pieces_per_block} pieces, more "
                f"than the {MAX_TRANSFERS} one schedule may hold; use fewer chunks or channels"
            )
        self.collective = collective
        self.algorithm = algorithm
        self.n_ranks = n_ranks
        self.size_bytes = size_bytes
        self.root = root
        self.pieces_per_block = pieces_per_block
        self.max_in_flight = max_in_flight
        self.params = dict(params or {})
        self.piece_bytes = split_bytes(block_bytes, pieces_per_block) * n_blocks
        # stdlib arrays, not lists: appended one by one like lists, and frozen into numpy
        # from their buffers (a list of millions of ints costs seconds to convert)
        self._src = array("q")
        self._dst = array("q")
        self._op = array("q")
        self._channel = array("q")
        self._pieces = array("q")
        self._pieces_indptr = array("q", [0])
        self._deps = array("q")
        self._deps_indptr = array("q", [0])

    @property
    def n_transfers(self) -> int:
        """Transfers added so far."""
        return len(self._src)

    def expect(self, n_transfers: int, n_dependencies: int = 0) -> None:
        """Refuse now, before any is built, a schedule that will hold ``n_transfers``
        transfers or ``n_dependencies`` dependencies where that is more than
        :data:`~simcoll.core.limits.MAX_TRANSFERS` or
        :data:`~simcoll.core.limits.MAX_DEPENDENCIES` (:meth:`add` would refuse it only at
        the cap, after minutes of building), or where building and simulating it would
        need more memory than this machine has available
        (:func:`~simcoll.core.limits.check_memory`).
        """
        if n_transfers > MAX_TRANSFERS:
            raise self._too_many()
        if n_dependencies > MAX_DEPENDENCIES:
            raise self._too_many_dependencies()
        what = f"{self.collective.value}/{self.algorithm} on {self.n_ranks} ranks"
        check_memory(n_transfers, n_dependencies, what)

    def _too_many_dependencies(self) -> LimitError:
        return LimitError(
            f"{self.collective.value}/{self.algorithm} on {self.n_ranks} ranks would have "
            f"more than {MAX_DEPENDENCIES} dependencies, too many to simulate; use fewer "
            "ranks, chunks or channels, or another algorithm"
        )

    def _too_many(self) -> LimitError:
        return LimitError(
            f"{self.collective.value}/{self.algorithm} on {self.n_ranks} ranks would have "
            f"more than {MAX_TRANSFERS} transfers, too many to simulate; use fewer ranks, "
            "chunks or channels"
        )

    def piece(self, block: int, index: int = 0) -> int:
        """The global piece number of piece ``index`` of ``block``."""
        return block * self.pieces_per_block + index

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
        """Append one transfer and return its index (for later transfers' ``deps``).

        Raises ConfigError past :data:`~simcoll.core.limits.MAX_TRANSFERS` transfers (a
        schedule that would not fit in memory to simulate).
        """
        index = len(self._src)
        if index >= MAX_TRANSFERS:
            raise self._too_many()
        self._src.append(src)
        self._dst.append(dst)
        self._op.append(_OP_CODES[op])
        self._channel.append(channel)
        self._pieces.extend(pieces)
        self._pieces_indptr.append(len(self._pieces))
        self._deps.extend(d for d in deps if d is not None)
        self._deps_indptr.append(len(self._deps))
        if len(self._deps) > MAX_DEPENDENCIES:
            raise self._too_many_dependencies()
        return index

    def extend(  # noqa: PLR0917 - one transfer's fields, as arrays
        self,
        src: IntArray,
        dst: IntArray,
        piece: IntArray,
        op: Op,
        channel: int | IntArray,
        deps_indptr: IntArray,
        deps: IntArray,
    ) -> None:
        """Append many transfers of one piece each at once (what :meth:`add` does one by
        one); ``channel`` is one for all or one per transfer; ``deps`` hold absolute
        transfer indices, ``deps_indptr`` starts at 0.

        Raises ConfigError past :data:`~simcoll.core.limits.MAX_TRANSFERS` transfers.
        """
        if len(self._src) + len(src) > MAX_TRANSFERS:
            raise self._too_many()
        base_pieces, base_deps = len(self._pieces), len(self._deps)
        n = len(src)
        _append(self._src, src)
        _append(self._dst, dst)
        _append(self._op, np.full(n, _OP_CODES[op]))
        _append(self._channel, np.full(n, channel) if isinstance(channel, int) else channel)
        _append(self._pieces, piece)
        _append(self._pieces_indptr, np.arange(base_pieces + 1, base_pieces + n + 1))
        _append(self._deps, deps)
        _append(self._deps_indptr, np.asarray(deps_indptr[1:]) + base_deps)

    def block(self) -> Block:
        """Every transfer added so far as a :class:`Block`, to append again with
        :meth:`add_block`: each must move one piece (its piece and channels are given
        anew each time), and its dependencies stay within it.

        >>> b = ScheduleBuilder(Collective.BROADCAST, "x", n_ranks=3, size_bytes=4,
        ...                     pieces_per_block=2)
        >>> first = b.add(src=0, dst=1, pieces=[0])
        >>> _ = b.add(src=1, dst=2, pieces=[0], channel=1, deps=[first])
        >>> hop = b.block()
        >>> b.add_block(hop, piece=1, channels=[3, 4])
        >>> s = b.build()
        >>> s.channel.tolist(), s.pieces.tolist(), s.deps_of(3).tolist()
        ([0, 1, 3, 4], [0, 0, 1, 1], [2])
        """
        if self._pieces_indptr[-1] != len(self._src):
            raise ScheduleError("a block's transfers move one piece each")
        return Block(
            src=list(self._src),
            dst=list(self._dst),
            op=list(self._op),
            channel=np.array(self._channel, dtype=np.int64),  # copies: the builder grows
            deps_indptr=np.array(self._deps_indptr, dtype=np.int64),
            deps=np.array(self._deps, dtype=np.int64),
        )

    def add_block(self, block: Block, *, piece: int, channels: Sequence[int]) -> None:
        """Append ``block``'s transfers, each moving ``piece``, transfer i on channel
        ``channels[block.channel[i]]``, with its dependencies shifted to the new copies.
        The same transfers as :meth:`add` one by one, in the same order, at a fraction of
        the cost (NVLS-tree repeats one piece's 2,500 transfers a thousand times at 1,024
        GPUs).

        Raises ConfigError past :data:`~simcoll.core.limits.MAX_TRANSFERS` transfers or
        :data:`~simcoll.core.limits.MAX_DEPENDENCIES` dependencies.
        """
        n = len(block.src)
        base = len(self._src)
        if base + n > MAX_TRANSFERS:
            raise self._too_many()
        if len(self._deps) + len(block.deps) > MAX_DEPENDENCIES:
            raise self._too_many_dependencies()
        base_pieces, base_deps = len(self._pieces), len(self._deps)
        self._src.extend(block.src)
        self._dst.extend(block.dst)
        self._op.extend(block.op)
        self._channel.extend(np.asarray(channels, dtype=np.int64)[block.channel].tolist())
        self._pieces.extend([piece] * n)
        self._pieces_indptr.extend(range(base_pieces + 1, base_pieces + n + 1))
        self._deps.extend((block.deps + base).tolist())
        self._deps_indptr.extend((block.deps_indptr[1:] + base_deps).tolist())

    def build(self) -> Schedule:
        """Freeze and validate the schedule (see :func:`_check_transfers`)."""
        schedule = Schedule(
            collective=self.collective,
            algorithm=self.algorithm,
            n_ranks=self.n_ranks,
            size_bytes=self.size_bytes,
            root=self.root,
            piece_bytes=_frozen(self.piece_bytes),
            pieces_per_block=self.pieces_per_block,
            src=_frozen(self._src),
            dst=_frozen(self._dst),
            op=_frozen(self._op),
            channel=_frozen(self._channel),
            pieces_indptr=_frozen(self._pieces_indptr),
            pieces=_frozen(self._pieces),
            deps_indptr=_frozen(self._deps_indptr),
            deps=_frozen(self._deps),
            max_in_flight=self.max_in_flight,
            params=self.params,
            n_switches=self.n_switches,
        )
        _check_transfers(schedule)
        return schedule


def _check_header(  # noqa: PLR0917 - a private check of the builder's own arguments
    collective: Collective,
    n_ranks: int,
    size_bytes: int,
    pieces_per_block: int,
    root: int,
    max_in_flight: int,
) -> None:
    if n_ranks < 1:
        raise ScheduleError(f"n_ranks must be at least 1, got {n_ranks}")
    check_count(n_ranks, "n_ranks", MAX_RANKS)
    if whole_number(size_bytes) is not None and size_bytes < 0:
        raise ScheduleError(f"size_bytes must not be negative, got {size_bytes}")
    check_size_bytes(size_bytes, "size_bytes")
    if pieces_per_block < 1:
        raise ScheduleError(f"pieces_per_block must be at least 1, got {pieces_per_block}")
    if not 0 <= root < n_ranks:
        raise ScheduleError(f"root {root} is not a rank of a {n_ranks}-rank collective")
    if max_in_flight < 1:
        raise ScheduleError(f"max_in_flight must be at least 1, got {max_in_flight}")
    check_pieces(collective, n_ranks, size_bytes, pieces_per_block)


def check_pieces(
    collective: Collective, n_ranks: int, size_bytes: int, pieces_per_block: int
) -> None:
    """Refuse a block of fewer bytes than the pieces it is to be cut into (a piece is at
    least one byte): what every builder checks, and the closed forms before costing the
    schedule they do not build.

    >>> check_pieces(Collective.ALLGATHER, 4, 12, 4)
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ScheduleError: allgather of 12 B over 4 ranks has 3 B per block, \
fewer than the 4 pieces asked for; use fewer chunks or channels, or a larger size
    """
    block_bytes = collective.block_bytes(size_bytes, n_ranks)
    if 0 < block_bytes < pieces_per_block:
        raise ScheduleError(
            f"{collective.value} of {size_bytes} B over {n_ranks} ranks has {block_bytes} B per "
            f"block, fewer than the {pieces_per_block} pieces asked for; use fewer chunks or "
            "channels, or a larger size"
        )


def _check_transfers(s: Schedule) -> None:
    """Structural checks: endpoints in range, no self-transfers, pieces and deps in range."""
    n = s.n_transfers
    for name, ranks in (("src", s.src), ("dst", s.dst)):
        bad = np.flatnonzero((ranks < 0) | (ranks >= s.n_endpoints))
        if len(bad):
            t = int(bad[0])
            raise ScheduleError(f"transfer {t}: {name} rank {int(ranks[t])} is out of range")
    selfish = np.flatnonzero(s.src == s.dst)
    if len(selfish):
        raise ScheduleError(
            f"transfer {int(selfish[0])}: sends from rank {int(s.src[selfish[0]])} to itself"
        )
    if len(s.pieces) and (s.pieces.min() < 0 or s.pieces.max() >= s.n_pieces):
        raise ScheduleError(f"a transfer names a piece outside 0..{s.n_pieces - 1}")
    empty = np.flatnonzero(np.diff(s.pieces_indptr) == 0)
    if len(empty):
        raise ScheduleError(f"transfer {int(empty[0])} moves no pieces")
    if len(s.deps) and (s.deps.min() < 0 or s.deps.max() >= n):
        raise ScheduleError(f"a transfer depends on a transfer outside 0..{n - 1}")
    if len(s.channel) and s.channel.min() < 0:
        raise ScheduleError("channel numbers must not be negative")
