"""Prove, without simulating, that a schedule computes its collective.

:func:`check_schedule` replays the transfers symbolically. Each (rank, piece) holds a
bitmask of the ranks whose input it contains (0: nothing valid). A copy overwrites the
destination's mask with the source's; a reduce ORs it in, and refuses masks that overlap
(a contribution counted twice). The replay follows the dependency order and enforces
that the result cannot depend on timing: every read or write of a rank's piece must be
ordered, through dependencies, after the writes it relies on and after the reads that must
see the old value. Reductions into the same piece may run concurrently with each other
(a sum does not depend on the order of its terms), but not with a read or a copy.

At the end, the collective's postcondition (:meth:`Collective.final_holdings`) must hold
for every piece of every required block.

>>> from simcoll.algorithms import build_schedule
>>> check_schedule(build_schedule("allreduce", "ring", n_ranks=4, size_bytes=64))
"""

from __future__ import annotations

from collections import deque

import numpy as np

from simcoll.core.errors import ScheduleError
from simcoll.core.schedule import Op, Schedule

__all__ = ["check_schedule", "topological_order"]

_COPY = 0
_REDUCE = 1
assert Op.COPY.value == "copy"  # codes mirror simcoll.core.schedule._OP_CODES


def topological_order(schedule: Schedule) -> list[int]:
    """Transfers in an order where each comes after all of its dependencies.

    Ties are broken by schedule index, so the order is deterministic.

    Raises
    ------
    ScheduleError
        If the dependencies contain a cycle (the message names transfers on it).
    """
    n = schedule.n_transfers
    waiting = np.diff(schedule.deps_indptr).astype(np.int64)
    dependents: list[list[int]] = [[] for _ in range(n)]
    for t in range(n):
        for d in schedule.deps_of(t):
            dependents[int(d)].append(t)
    ready = deque(int(t) for t in np.flatnonzero(waiting == 0))
    order: list[int] = []
    while ready:
        t = ready.popleft()
        order.append(t)
        for u in dependents[t]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    if len(order) < n:
        stuck = np.flatnonzero(waiting > 0)[:5].tolist()
        raise ScheduleError(f"dependency cycle: transfers {stuck} can never start")
    return order


def _name(schedule: Schedule) -> str:
    return f"{schedule.collective.value}/{schedule.algorithm} on {schedule.n_ranks} ranks"


def _bits(mask: int) -> str:
    return "{" + ",".join(str(r) for r in range(mask.bit_length()) if mask >> r & 1) + "}"


class _Replay:
    """State of a symbolic replay: holdings, the last write and the reads since it."""

    def __init__(self, schedule: Schedule) -> None:
        self.s = schedule
        self.value: dict[tuple[int, int], int] = {}
        # Per (rank, piece): the last copy into it, the reductions since, the reads since.
        self.writer: dict[tuple[int, int], int] = {}
        self.reducers: dict[tuple[int, int], list[int]] = {}
        self.readers: dict[tuple[int, int], list[int]] = {}
        self.ancestors: list[int] = [0] * schedule.n_transfers
        per = schedule.pieces_per_block
        initial = schedule.collective.initial_holdings(schedule.n_ranks, schedule.root)
        for (rank, block), mask in initial.items():
            for piece in range(block * per, (block + 1) * per):
                self.value[rank, piece] = mask

    def fail(self, t: int, why: str) -> ScheduleError:
        tr = self.s.transfer(t)
        return ScheduleError(f"{_name(self.s)}: transfer {t} ({tr.src}->{tr.dst}): {why}")

    def ordered_before(self, earlier: int, t: int) -> bool:
        return earlier < 0 or bool(self.ancestors[t] >> earlier & 1)

    def read(self, t: int, rank: int, piece: int) -> int:
        mask = self.value.get((rank, piece), 0)
        if mask == 0:
            raise self.fail(t, f"rank {rank} sends piece {piece} that it does not hold")
        key = (rank, piece)
        for writer in [self.writer.get(key, -1), *self.reducers.get(key, ())]:
            if not self.ordered_before(writer, t):
                raise self.fail(t, f"reads piece {piece} at rank {rank} without depending on "
                                   f"transfer {writer} that writes it")  # fmt: skip
        self.readers.setdefault(key, []).append(t)
        return mask

    def write(self, t: int, rank: int, piece: int, mask: int, op: int) -> None:
        key = (rank, piece)
        earlier = [self.writer.get(key, -1)]
        if op == _COPY:
            earlier += self.reducers.get(key, [])
        for writer in earlier:
            if not self.ordered_before(writer, t):
                raise self.fail(t, f"writes piece {piece} at rank {rank} unordered with "
                                   f"transfer {writer} that also writes it")  # fmt: skip
        for reader in self.readers.get(key, ()):
            if reader != t and not self.ordered_before(reader, t):
                raise self.fail(t, f"overwrites piece {piece} at rank {rank} that transfer "
                                   f"{reader} may still be reading")  # fmt: skip
        if op == _REDUCE:
            held = self.value.get(key, 0)
            if held == 0 and rank >= self.s.n_ranks:  # a switch accumulates from zero
                self.value[key] = mask
                self.reducers.setdefault(key, []).append(t)
                return
            if held == 0:
                raise self.fail(t, f"reduces into piece {piece} that rank {rank} does not hold")
            if held & mask:
                raise self.fail(t, f"adds contributions {_bits(held & mask)} to piece {piece} "
                                   f"at rank {rank} a second time")  # fmt: skip
            self.value[key] = held | mask
            self.reducers.setdefault(key, []).append(t)
            return
        self.value[key] = mask
        self.writer[key] = t
        self.reducers[key] = []
        self.readers[key] = []

    def run(self, order: list[int]) -> None:
        s = self.s
        for t in order:
            ancestors = 0
            for d in s.deps_of(t):
                ancestors |= self.ancestors[int(d)] | (1 << int(d))
            self.ancestors[t] = ancestors
            src, dst, op = int(s.src[t]), int(s.dst[t]), int(s.op[t])
            pieces = [int(p) for p in s.pieces_of(t)]
            masks = [self.read(t, src, p) for p in pieces]
            for piece, mask in zip(pieces, masks, strict=True):
                self.write(t, dst, piece, mask, op)

    def verify_postcondition(self) -> None:
        s = self.s
        per = s.pieces_per_block
        final = s.collective.final_holdings(s.n_ranks, s.root)
        for (rank, block), want in sorted(final.items()):
            for piece in range(block * per, (block + 1) * per):
                got = self.value.get((rank, piece), 0)
                if got != want:
                    have = "nothing" if got == 0 else f"data of ranks {_bits(got)}"
                    raise ScheduleError(
                        f"{_name(s)}: rank {rank} ends with {have} in piece {piece} (block "
                        f"{block}); it must hold data of ranks {_bits(want)}"
                    )


def check_schedule(schedule: Schedule) -> None:
    """Raise :class:`ScheduleError` unless ``schedule`` computes its collective.

    Checks, in order: no dependency cycle; every sender holds what it sends; every read
    and write of a (rank, piece) is ordered by dependencies after the write it relies on
    (no race); no reduction adds a contribution twice; and the postcondition of the
    collective holds for every piece.

    >>> from simcoll.core.collectives import Collective
    >>> from simcoll.core.schedule import ScheduleBuilder
    >>> b = ScheduleBuilder(Collective.BROADCAST, "bad", n_ranks=3, size_bytes=8,
    ...                     pieces_per_block=1)
    >>> _ = b.add(src=0, dst=1, pieces=[0])
    >>> check_schedule(b.build())
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ScheduleError: broadcast/bad on 3 ranks: rank 2 ends with nothing in \
piece 0 (block 0); it must hold data of ranks {0}
    """
    replay = _Replay(schedule)
    replay.run(topological_order(schedule))
    replay.verify_postcondition()
