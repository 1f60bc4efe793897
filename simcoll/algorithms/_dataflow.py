"""Dependencies derived from the data: a helper for algorithms with irregular patterns.

:class:`Dataflow` wraps a :class:`~simcoll.core.schedule.ScheduleBuilder`. For every
(rank, piece) it keeps the last copy into it, the reductions since and the reads since; a
new transfer then depends on the writes of what it reads (read after write) and on the
reads and writes of what it overwrites (write after read, write after write), while
reductions into one piece may run concurrently. Algorithms whose steps are easier to state
as "who sends what" than as explicit dependency lists (halving-doubling, hierarchical)
add their transfers through it.

>>> from simcoll.core.collectives import Collective
>>> from collections.abc import Iterable

from simcoll.core.schedule import Op, ScheduleBuilder
>>> flow = Dataflow(ScheduleBuilder(Collective.ALLGATHER, "demo", n_ranks=3, size_bytes=3,
...                                 pieces_per_block=1))
>>> flow.add(0, 1, [0], Op.COPY, 0), flow.add(1, 2, [0], Op.COPY, 0)
(0, 1)
>>> flow.b.build().transfer(1).deps  # rank 1 forwards piece 0 after it arrived
(0,)
"""

from __future__ import annotations

from collections.abc import Iterable

from simcoll.core.schedule import Op, ScheduleBuilder

__all__ = ["Dataflow"]


class Dataflow:
    """Adds transfers to ``b`` with the dependencies their data implies."""

    def __init__(self, b: ScheduleBuilder) -> None:
        self.b = b
        self.copier: dict[tuple[int, int], int] = {}
        self.reducers: dict[tuple[int, int], list[int]] = {}
        self.readers: dict[tuple[int, int], list[int]] = {}

    def add(  # noqa: PLR0917 - a transfer's fields, as ScheduleBuilder.add takes them
        self, src: int, dst: int, pieces: list[int], op: Op, channel: int, after: Iterable[int] = ()
    ) -> int:
        """Add one transfer, after ``after`` too (an ordering the data does not imply);
        return its index."""
        deps: set[int] = set(after)
        for p in pieces:
            deps.update(self._writes(src, p))  # read after write
            deps.update(self.readers.get((dst, p), ()))  # write after read
            if op is Op.COPY:
                deps.update(self._writes(dst, p))  # write after write
            elif (dst, p) in self.copier:
                deps.add(self.copier[dst, p])  # reductions follow the last copy
        t = self.b.add(src=src, dst=dst, pieces=pieces, op=op, channel=channel, deps=sorted(deps))
        for p in pieces:
            self.readers.setdefault((src, p), []).append(t)
            if op is Op.COPY:
                self.copier[dst, p] = t
                self.reducers[dst, p] = []
                self.readers[dst, p] = []
            else:
                self.reducers.setdefault((dst, p), []).append(t)
        return t

    def _writes(self, rank: int, piece: int) -> list[int]:
        key = (rank, piece)
        first = [self.copier[key]] if key in self.copier else []
        return first + self.reducers.get(key, [])
