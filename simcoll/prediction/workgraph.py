"""A session's work as data, and the execution graph it becomes.

:class:`~simcoll.prediction.session.Session` records what a workload asks for as a list
of ops: :class:`Compute` (a span on each GPU of a group) and :class:`Comm` (a collective or
a copy, with its :class:`Solo`: the call as decided and timed alone). :func:`build` turns
the ops into one :class:`~simcoll.sim.graph.ExecutionGraph`, each call either one span of
its time alone or its transfers; :func:`meeting` finds the calls that must not run alone:
those whose run overlaps another call's in time on a common link.

Why a call that meets no other on a link may run as its time alone: max-min fair shares
are computed per connected component of flows and the links they share, so flows that
share no link with any other call's flows get the rates they would get alone, at every
instant; the call then ends its time alone after its transfers start (to rounding).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import networkx as nx
import numpy as np
import numpy.typing as npt

from simcoll.sim.engine import Run, SimulationResult
from simcoll.sim.graph import CallNodes, ExecutionGraph, GraphResult
from simcoll.topology import Router

__all__ = ["Built", "Comm", "Compute", "Solo", "build", "meeting", "once"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_NO_BYTES: FloatArray = np.zeros(0)


@dataclass(eq=False)
class Compute:
    """Compute on each GPU of a group, after ``after`` (op indices) and, per rank, its
    compute before this one (``previous``)."""

    name: str
    ranks: tuple[int, ...]
    duration_s: float
    after: tuple[int, ...]
    previous: tuple[int | None, ...]  # per rank: its compute before this one


@dataclass(eq=False)
class Solo:
    """A call (or copy) as run alone: its time in all, when its transfers start and how
    long they take, its floor, the links it uses with their wire bytes and busy time
    (those only: a 16,384-GPU fabric has 131,072 links, a call uses a few), the run
    itself where it kept every transfer's times (else None), and how to run it with
    others."""

    time_s: float
    delay_s: float
    transfers_s: float
    floor_s: float
    links: IntArray
    link_bytes: FloatArray  # per link of ``links``
    link_busy_s: FloatArray  # per link of ``links``
    result: SimulationResult | None
    prepare: Callable[[], Run]
    ctas: int = 0  # the SMs it holds while it runs (one CTA per channel; copies: none)

    @classmethod
    def of(  # noqa: PLR0917 - one call's facts
        cls,
        time_s: float,
        delay_s: float,
        transfers_s: float,
        floor_s: float,
        result: object,
        prepare: Callable[[], Run],
        ctas: int = 0,
    ) -> Solo:
        """From the run alone (``result``: its per-link bytes and, where it has them,
        busy times over every link; without, each used link is busy ``transfers_s``)."""
        every = np.asarray(getattr(result, "link_bytes"))  # noqa: B009 - any run's result
        links = np.flatnonzero(every > 0)
        busy = getattr(result, "link_busy_s", None)
        busy_s = (np.asarray(busy)[links] if busy is not None
                  else np.full(len(links), float(transfers_s)))  # fmt: skip
        kept = None
        if isinstance(result, SimulationResult) and (
            len(result.end_s) == result.schedule.n_transfers
        ):  # every transfer's times: the timeline's transfers; its per-link arrays dropped
            kept = replace(result, link_bytes=_NO_BYTES, link_busy_s=_NO_BYTES)
        return cls(time_s, delay_s, transfers_s, floor_s, links, every[links], busy_s, kept,
                   prepare, ctas)  # fmt: skip


@dataclass(eq=False)
class Comm:
    """A collective or a copy of a group, on ``stream``, after ``after`` and the ops
    before it on its ranks' stream (``previous``)."""

    name: str
    ranks: tuple[int, ...]  # group rank i is global rank ranks[i]
    stream: str
    after: tuple[int, ...]
    previous: tuple[int, ...]  # the ops before it on its ranks' stream
    solo: Solo | None  # None when recorded, not simulated
    repeat: int = 1  # the same call this many times, one after another
    # the same call on several disjoint groups at once (each group's global ranks and its
    # call; ``solo`` is then their union, ending with the last): empty for one group
    parts: tuple[tuple[tuple[int, ...], Solo], ...] = ()
    joint: bool = False  # parts that share a link: never timed alone, always in detail

    @property
    def pieces(self) -> tuple[tuple[tuple[int, ...], Solo], ...]:
        """Each group's ranks and call: the parts, or the one call over ``ranks``."""
        assert self.solo is not None
        return self.parts or ((self.ranks, self.solo),)


@dataclass(eq=False)
class Built:
    """An execution graph as built for one run, and where each op's nodes are."""

    graph: ExecutionGraph
    end: list[int] = field(default_factory=list)  # per op: the node it ends with
    opened: dict[int, int] = field(default_factory=dict)  # per call: the node it opens on
    calls: dict[int, list[CallNodes]] = field(default_factory=dict)  # in detail: per repeat, part
    rank_nodes: dict[int, list[int]] = field(default_factory=dict)  # per compute op
    _last: dict[int, int] = field(default_factory=dict)  # per rank: its last compute node

    def add_compute(self, index: int, op: Compute, waits: list[int]) -> None:
        """One span for the whole group where every rank's compute so far ended with the
        same node (or there was none): they start and end together; else one per rank."""
        g = self.graph
        before = {self._last.get(r, -1) for r in op.ranks}
        if len(before) == 1:
            last = before.pop()
            node = g.span(op.duration_s, waits + ([last] if last >= 0 else []))
            nodes = [node] * len(op.ranks)
            end = node
        else:
            nodes = []
            for r in op.ranks:
                last = self._last.get(r, -1)
                nodes.append(g.span(op.duration_s, waits + ([last] if last >= 0 else [])))
            end = g.span(0.0, list(dict.fromkeys(nodes)))
        for r, node in zip(op.ranks, nodes, strict=True):
            self._last[r] = node
        self.rank_nodes[index] = nodes
        self.end.append(end)


def build(
    ops: Sequence[Compute | Comm],
    topology: nx.DiGraph[str],
    model: str,
    detailed: set[int],
    router: Router | None = None,
) -> Built:
    """The execution graph of ``ops``: the calls in ``detailed`` run transfer by transfer
    (after their launch and copy, and for at least their floor), every other call is one
    span of its time alone. ``router`` is the one the calls were prepared with."""
    g = ExecutionGraph(topology, model=model, router=router)
    built = Built(g)
    for index, op in enumerate(ops):
        waits = [built.end[a] for a in op.after]
        if isinstance(op, Compute):
            built.add_compute(index, op, waits)
            continue
        solo = op.solo
        assert solo is not None
        opened = g.span(0.0, list(dict.fromkeys(waits + [built.end[p] for p in op.previous])))
        if index in detailed:
            runs, end = [], opened
            for _ in range(op.repeat):  # each repeat opens once the one before has ended
                start, ends = end, []
                for _, part in op.pieces:  # every group's call at once
                    gate = g.span(part.delay_s, [start]) if part.delay_s else start
                    nodes = g.call(part.prepare(), after=gate)
                    part_end = nodes.end
                    if part.floor_s:
                        part_end = g.span(0.0, [part_end, g.span(part.floor_s, [start])])
                    ends.append(part_end)
                    runs.append(nodes)
                end = ends[0] if len(ends) == 1 else g.span(0.0, ends)
            built.calls[index] = runs  # repeat by repeat, each part in order
        else:
            end = g.span(solo.time_s * op.repeat, [opened])
        built.opened[index] = opened
        built.end.append(end)
    return built


def meeting(
    ops: Sequence[Compute | Comm], built: Built, result: GraphResult, model: str
) -> set[int]:
    """The calls whose run overlaps another call's in time (open intervals, from the call's
    start to its end) on a common link; none in the ideal model, without contention. (Two
    calls already run in detail share the fabric: the caller drops those.)

    Every (call, link) pair is one interval; sorted by link and start, an interval overlaps
    another on its link exactly when an earlier one there ends after it starts or the next
    one starts before it ends. The times are compared as their ranks among all the times,
    so the test is exact and runs over arrays, not link by link (a call over every
    replica's group crosses thousands of links).
    """
    if model == "ideal":
        return set()
    end_s = result.end_s
    indices, starts, ends, links = [], [], [], []
    for index, opened in built.opened.items():
        start, end = float(end_s[opened]), float(end_s[built.end[index]])
        used = _solo(ops, index).links
        if end > start and len(used):
            indices.append(index)
            starts.append(start)
            ends.append(end)
            links.append(used)
    if not indices:
        return set()
    counts = [len(used) for used in links]
    link = np.concatenate(links)
    op_of = np.repeat(np.array(indices, dtype=np.int64), counts)
    n = len(link)
    times, rank = np.unique(np.concatenate([np.repeat(starts, counts), np.repeat(ends, counts)]),
                            return_inverse=True)  # fmt: skip
    first, last = rank[:n].astype(np.int64), rank[n:].astype(np.int64)
    order = np.lexsort((first, link))
    link_rank = np.unique(link[order], return_inverse=True)[1].astype(np.int64)
    base = link_rank * (len(times) + 1)  # each link's times apart from every other link's
    first, last = first[order] + base, last[order] + base
    before = np.concatenate([[-1], np.maximum.accumulate(last)[:-1]])
    after = np.concatenate([first[1:], [np.iinfo(np.int64).max]])
    hit = (before > first) | (after < last)
    return set(op_of[order][hit].tolist())


def _solo(ops: Sequence[Compute | Comm], index: int) -> Solo:
    op = ops[index]
    assert isinstance(op, Comm)
    assert op.solo is not None
    return op.solo


def once(make: Callable[[], Run]) -> Callable[[], Run]:
    """``make``, called once: later calls return the same run."""
    made: list[Run] = []

    def cached() -> Run:
        if not made:
            made.append(make())
        return made[0]

    return cached
