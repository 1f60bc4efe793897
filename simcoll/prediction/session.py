"""Many calls and compute on one cluster and one clock: the session behind workloads.

A :class:`Session` records what a workload does, in the order it does it: compute on
GPUs (:meth:`Session.compute`), collective calls of rank groups
(:meth:`Session.collective`) and copies between two GPUs (:meth:`Session.copy`). Each
returns an :class:`Op` that later work may wait for (``after=``). :meth:`Session.run`
simulates it all on one fabric and returns the :class:`~simcoll.sim.timeline.Timeline`.

Streams
    Every rank has streams, as a CUDA device does. Work on one (rank, stream) runs in
    call order: compute runs on ``"compute"``, a collective or copy on ``"comm"`` unless
    told otherwise (a second communicator, FSDP's reduce-scatters, concurrent groups:
    another stream name), and starts once every rank of its group has finished its
    earlier work on that stream and everything in ``after`` has ended.

One path for every call
    A collective runs what ``simcoll predict`` runs for that call on those GPUs
    (:mod:`simcoll.prediction.call`): NCCL's plan for exactly the group's GPUs, its
    per-size tuning, the algorithm and protocol choice, the calibration with its launch
    cost and floor, and the out-of-place copy. A copy is one transfer from one GPU to the
    other (``cudaMemcpyPeer``: no protocol, no launch cost).

Exact where calls meet
    Max-min fair shares split over the connected components of flows and the links they
    share, so a call whose flows share no link with any other call's while it runs takes
    exactly its time alone. :meth:`Session.run` first gives every call its decided time
    (the time ``predict`` prints, from its exact fast paths where they apply), runs the
    execution graph (:mod:`simcoll.prediction.workgraph`, :mod:`simcoll.sim.graph`) and
    finds the calls whose run overlaps another's on a common link; those run transfer by
    transfer, sharing the fabric, and the graph runs again, until no call that ran alone
    overlaps another on a link, or until the next calls to run in detail would take the
    run past :data:`~simcoll.core.limits.MAX_MEETING_TRANSFERS` (a 405B step with context
    parallelism on 512 GPUs asked for 47 million and grew past 12 GB): those keep their
    time alone, without the contention, and the timeline's notes say how many. What is
    recorded (spans, transfers, link loads: :mod:`simcoll.prediction.record`) never
    changes what runs.

Below, the all-gather is ``predict``'s: the ring, cut into pieces of about 512 KiB that
follow one another on each link, so only the first pays the 2 us latency.

>>> from simcoll.topology import ring
>>> s = Session(ring(4, link_bandwidth_bytes_per_s=100e9, link_latency_s=2e-6), protocol=None)
>>> forward = s.compute(range(4), 10e-6, "forward")
>>> gather = s.collective("allgather", 8_000_000, range(4), after=[forward])
>>> timeline = s.run()
>>> round(timeline.time_s * 1e6, 6)  # 10 us of compute, 2 us of latency, 3 steps of 20 us
72.0
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import networkx as nx
import numpy as np
import numpy.typing as npt

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, LimitError, SimcollError
from simcoll.core.limits import (
    MAX_MEETING_TRANSFERS,
    MAX_STEP_CALLS,
    MAX_TIME_S,
    check_size_bytes,
)
from simcoll.core.schedule import ScheduleBuilder
from simcoll.core.units import format_bytes
from simcoll.plan.placement import map_ranks
from simcoll.plan.tuning import NcclKnobs
from simcoll.prediction.call import (
    DEFAULTS,
    Decided,
    Machine,
    call_setup,
    decide,
)
from simcoll.prediction.choices import default_algorithm
from simcoll.prediction.hosts import HostShape, group_shape, moved_links
from simcoll.prediction.record import empty_timeline, timeline_of
from simcoll.prediction.simulated import Setup, schedule_recipe
from simcoll.prediction.sm_sharing import slowed_durations_s
from simcoll.prediction.workgraph import Built, Comm, Compute, Solo, build, meeting, once
from simcoll.sim.engine import Run, prepare
from simcoll.sim.graph import GraphResult
from simcoll.sim.timeline import COMM, COMPUTE, Timeline
from simcoll.topology import gpu_nodes
from simcoll.topology.calibration import Calibration
from simcoll.topology.gpu_spec import gpu_spec

__all__ = [
    "LOAD_BINS",
    "SM_SHARING_ROUNDS",
    "SM_SHARING_TOLERANCE",
    "Op",
    "RecordedCall",
    "Session",
    "recording_calls",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Time bins of a timeline's per-link load (the link utilisation heatmap).
LOAD_BINS = 200

#: With ``sm_sharing``: at most this many runs, each compute span stretched by the calls
#: beside it in the run before, until no span moves by more than
#: :data:`SM_SHARING_TOLERANCE` of its time alone.
SM_SHARING_ROUNDS = 8
SM_SHARING_TOLERANCE = 1e-4


@dataclass(frozen=True)
class Op:
    """One piece of work a workload asked for (compute, a collective, a copy): what later
    work of the same session may wait for with ``after=``."""

    index: int
    session: int = field(default=0, repr=False)


@dataclass(frozen=True)
class RecordedCall:
    """A collective, copy or compute (``collective`` ``"compute"``) a workload asked for,
    recorded instead of simulated."""

    collective: str
    algorithm: str
    n_ranks: int
    size_bytes: int
    params: tuple[tuple[str, int], ...] = ()
    stream: str = COMM
    ranks: tuple[int, ...] = ()


_RECORDING: ContextVar[list[RecordedCall] | None] = ContextVar("_RECORDING", default=None)


@contextmanager
def recording_calls() -> Iterator[list[RecordedCall]]:
    """Sessions made inside the block simulate nothing: every collective, copy and compute
    is recorded (and takes no time), so that a workload's calls and the size of its
    timeline can be counted and costed before it runs (:mod:`simcoll.scenarios.cost`)."""
    calls: list[RecordedCall] = []
    token = _RECORDING.set(calls)
    try:
        yield calls
    finally:
        _RECORDING.reset(token)


class Session:
    """A topology, a clock and one fabric; see the module docstring.

    Parameters
    ----------
    topology
        A validated topology; rank r runs on the GPU whose ``rank`` is r.
    model
        ``"flow"`` (links shared max-min fairly) or ``"ideal"`` (no contention).
    protocol
        Every collective's protocol unless a call names its own: ``"auto"`` (the default:
        the fastest per size, as ``predict``), ``"LL"``, ``"LL128"``, ``"simple"``, or
        None for the links alone.
    calibration
        Fitted parameters applied to the topology, the protocols and each call (launch
        cost, floor), as in :func:`simcoll.prediction.predict`: ``"default"`` (the
        default) those the topology file carries, None the bare links.
    knobs
        NCCL's environment settings (channels, buffer size, algorithm, protocol).
    rank_nodes
        The GPU of each rank (default: rank r on the GPU whose ``rank`` is r), as
        :func:`simcoll.plan.placement.place_ranks` gives them.
    plan
        ``"nccl"`` (the default: NCCL's channels for each call's GPUs) or ``"rank"`` (one
        ring in rank order).
    sm_sharing
        Compute beside a call runs on the SMs the call's CTAs leave
        (:mod:`~simcoll.prediction.sm_sharing`), on GPUs of the topology's ``[gpu] sms``
        (without it, as if alone); off by default: measured compute (a trace) is already
        slowed.
    """

    def __init__(
        self,
        topology: nx.DiGraph[str],
        *,
        model: str = DEFAULTS.model,
        protocol: str | None = DEFAULTS.protocol,
        calibration: Calibration | Literal["default"] | None = "default",
        knobs: NcclKnobs | None = None,
        rank_nodes: Sequence[str] | None = None,
        plan: str = DEFAULTS.plan,
        sm_sharing: bool = False,
    ) -> None:
        if model not in ("flow", "ideal"):
            raise ConfigError(f"a session runs model 'flow' or 'ideal', not {model!r}")
        if plan not in ("nccl", "rank"):
            raise ConfigError(f"a session plans 'nccl' or 'rank', not {plan!r}", field="plan")
        self.machine = Machine.of(topology, calibration)
        self.topology = self.machine.topology
        self.model = model
        self.protocol = protocol
        self.knobs = knobs
        self.plan = plan
        self.sm_count = _sm_count(self.topology) if sm_sharing else 0
        self.rank_nodes = (tuple(rank_nodes) if rank_nodes is not None else
                           map_ranks(self.topology, len(gpu_nodes(self.topology))))  # fmt: skip
        self._ops: list[Compute | Comm] = []
        self._last_compute: dict[int, int] = {}
        self._stream_tail: dict[tuple[int, str], int] = {}
        self._setups: dict[tuple[object, ...], Setup] = {}
        self._solos: dict[tuple[object, ...], Solo] = {}
        self._unions: dict[tuple[object, ...], tuple[Solo, Any, bool]] = {}  # collectives()
        # per call in a server's shape: the server it was decided on, and its decision
        self._shaped: dict[tuple[object, ...], tuple[HostShape, Solo]] = {}
        self._recorded = _RECORDING.get()
        self._notes: list[str] = []
        self._alone: set[int] = set()  # calls that meet others but ran alone (the budget)

    @property
    def n_ranks(self) -> int:
        """Number of GPUs (ranks) of the topology."""
        return len(self.rank_nodes)

    def channels_of(self, rank: int) -> dict[tuple[int, ...], int]:
        """Per communicator ``rank`` is in (a group of ranks its calls ran over), the most
        channels one of those calls ran on: what NCCL allocates buffers for. Copies use
        none.

        >>> from simcoll.topology import switch_star
        >>> s = Session(switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6))
        >>> _ = s.collective("allreduce", 1 << 20, range(4), params={"n_channels": 2})
        >>> _ = s.collective("allgather", 1 << 20, (0, 1), params={"n_channels": 3})
        >>> s.channels_of(0), s.channels_of(3)
        ({(0, 1, 2, 3): 2, (0, 1): 3}, {(0, 1, 2, 3): 2})
        """
        found: dict[tuple[int, ...], int] = {}
        for op in self._ops:
            if isinstance(op, Comm) and op.solo is not None and rank in op.ranks:
                for ranks, solo in op.pieces:
                    if solo.ctas and rank in ranks:
                        key = tuple(sorted(ranks))
                        found[key] = max(found.get(key, 0), solo.ctas)
        return found

    # -- what workloads call ------------------------------------------------------------

    def compute(
        self, ranks: Iterable[int], duration_s: float, name: str, *, after: Iterable[Op] = ()
    ) -> Op:
        """Each rank of ``ranks`` computes for ``duration_s`` on its compute stream, once
        its earlier compute and everything in ``after`` are done."""
        if not (duration_s >= 0 and duration_s < float("inf")):
            raise ConfigError(f"{name}: compute time must be a finite time >= 0 s, "
                              f"got {duration_s!r}")  # fmt: skip
        if duration_s > MAX_TIME_S:  # 1e300 s overflowed the clock's ticks (issue 41)
            raise ConfigError(f"{name}: compute time must be at most {MAX_TIME_S:g} s, "
                              f"got {duration_s!r}")  # fmt: skip
        group = self._group(ranks, name)
        waits = self._after(after, name)
        if self._recorded is not None:  # counted, for the timeline's size
            self._recorded.append(RecordedCall("compute", "", len(group), 0, (), COMPUTE, group))
        previous = tuple(self._last_compute.get(r) for r in group)
        index = len(self._ops)
        self._ops.append(Compute(name, group, float(duration_s), waits, previous))
        for r in group:
            self._last_compute[r] = index
        return Op(index, id(self))

    def collective(
        self,
        collective: Collective | str,
        size_bytes: int,
        ranks: Iterable[int],
        *,
        algorithm: str | None = DEFAULTS.algorithm,
        protocol: str | Literal["session"] | None = "session",
        params: Mapping[str, int] | None = None,
        stream: str = COMM,
        name: str | None = None,
        in_place: bool = False,
        after: Iterable[Op] = (),
        repeat: int = 1,
    ) -> Op:
        """Run one collective over ``ranks`` (group rank i is global rank ``ranks[i]``).

        ``size_bytes`` follows nccl-tests (all-gather: the gathered buffer). The call is
        decided as ``predict`` decides it for these GPUs (the algorithm: NCCL's choice
        (``nccl``) unless named, or ``auto``, ``all`` or a name; ``protocol``: the
        session's unless given); ``in_place`` skips the out-of-place copy of the own block.
        ``repeat`` issues the same call that many times, each once the one before has
        ended, as one op (a layer's calls over a pipeline stage's layers): the same times
        as ``repeat`` separate calls in a row, for one op's cost.

        Raises
        ------
        SimcollError
            Naming the call, if it cannot run (an unknown algorithm, a size that does not
            split...).
        """
        c = collective if isinstance(collective, Collective) else Collective.parse(collective)
        label = name or f"{c.value} {format_bytes(size_bytes)}"
        group = self._group(ranks, label)
        waits = self._after(after, label)
        proto = self.protocol if protocol == "session" else protocol
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ConfigError(f"{label}: repeat must be an integer >= 1, got {repeat!r}")
        made = len(self._recorded) if self._recorded is not None else 0
        if made + repeat > MAX_STEP_CALLS:  # before the list of repeats is built (issue 41)
            raise LimitError(f"{label}: would make {made + repeat} calls, more than the "
                             f"{MAX_STEP_CALLS} (2^24) a session simulates")  # fmt: skip
        if self._recorded is not None:
            items = tuple(sorted(dict(params or {}).items()))
            name = algorithm or default_algorithm(c)
            self._recorded.extend([RecordedCall(c.value, name, len(group), size_bytes, items,
                                                stream, group)] * repeat)  # fmt: skip
            return self._comm(label, group, stream, waits, None, repeat)
        try:
            size = check_size_bytes(size_bytes, "size_bytes")
            solo = self._call_solo(c, size, group, algorithm, proto, params, in_place)
        except SimcollError as error:
            raise type(error)(f"{label}: {error.message}", source=error.source,
                              field=error.field) from None  # fmt: skip
        return self._comm(label, group, stream, waits, solo, repeat)

    def collectives(
        self,
        collective: Collective | str,
        size_bytes: int,
        groups: Sequence[Iterable[int]],
        *,
        algorithm: str | None = DEFAULTS.algorithm,
        protocol: str | Literal["session"] | None = "session",
        params: Mapping[str, int] | None = None,
        stream: str = COMM,
        name: str | None = None,
        in_place: bool = False,
        after: Iterable[Op] = (),
        repeat: int = 1,
    ) -> Op:
        """The same call on each of several disjoint ``groups`` at once, as one op (every
        data-parallel replica's tensor-parallel call, when the replicas run alike): each
        group's call decided as :meth:`collective` decides it, all of them starting
        together; the op ends when the last one ends. Where no two groups' calls share a
        link, each takes its time alone, as separate ops starting together would; where
        they do, they run transfer by transfer, sharing the fabric.

        On one NVSwitch, two groups of four share no link: the op takes one group's time.

        >>> from simcoll.topology import nvswitch_node
        >>> node = nvswitch_node(8, nvlinks_per_gpu=18, nvlink_bandwidth_bytes_per_s=25e9,
        ...                      nvlink_latency_s=1e-6)
        >>> both = Session(node, protocol=None)
        >>> _ = both.collectives("allreduce", 1 << 24, [range(0, 4), range(4, 8)])
        >>> one = Session(node, protocol=None)
        >>> _ = one.collective("allreduce", 1 << 24, range(0, 4))
        >>> both.run().time_s == one.run().time_s
        True
        """
        c = collective if isinstance(collective, Collective) else Collective.parse(collective)
        label = name or f"{c.value} {format_bytes(size_bytes)}"
        these = [self._group(g, label) for g in groups]
        if not these:
            raise ConfigError(f"{label}: no rank group given")
        union = tuple(r for g in these for r in g)
        if len(set(union)) != len(union):
            raise ConfigError(f"{label}: the groups must be disjoint")
        if len(these) == 1:
            return self.collective(c, size_bytes, these[0], algorithm=algorithm,
                                   protocol=protocol, params=params, stream=stream, name=name,
                                   in_place=in_place, after=after, repeat=repeat)  # fmt: skip
        waits = self._after(after, label)
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ConfigError(f"{label}: repeat must be an integer >= 1, got {repeat!r}")
        made = len(self._recorded) if self._recorded is not None else 0
        if made + repeat * len(these) > MAX_STEP_CALLS:
            raise LimitError(f"{label}: would make {made + repeat * len(these)} calls, more "
                             f"than the {MAX_STEP_CALLS} (2^24) a session simulates")  # fmt: skip
        proto = self.protocol if protocol == "session" else protocol
        items = tuple(sorted(dict(params or {}).items()))
        if self._recorded is not None:
            name_ = algorithm or default_algorithm(c)
            for g in these:
                self._recorded.extend([RecordedCall(c.value, name_, len(g), size_bytes, items,
                                                    stream, g)] * repeat)  # fmt: skip
            return self._comm(label, union, stream, waits, None, repeat)
        key = (c, size_bytes, tuple(these), algorithm, proto, items, in_place)
        known = self._unions.get(key)
        if known is not None:  # the same call on the same groups (every layer's, every pass)
            return self._comm(label, union, stream, waits, known[0], repeat, parts=known[1],
                              joint=known[2])  # fmt: skip
        try:
            size = check_size_bytes(size_bytes, "size_bytes")
            solos = [self._call_solo(c, size, g, algorithm, proto, params, in_place)
                     for g in these]  # fmt: skip
        except SimcollError as error:
            raise type(error)(f"{label}: {error.message}", source=error.source,
                              field=error.field) from None  # fmt: skip
        links = np.concatenate([x.links for x in solos])
        union_solo = Solo(
            time_s=max(x.time_s for x in solos),
            delay_s=max(x.delay_s for x in solos),
            transfers_s=max(x.transfers_s for x in solos),
            floor_s=max(x.floor_s for x in solos),
            links=links,
            link_bytes=np.concatenate([x.link_bytes for x in solos]),
            link_busy_s=np.concatenate([x.link_busy_s for x in solos]),
            result=None,
            prepare=solos[0].prepare,
            ctas=max(x.ctas for x in solos),
        )
        joint = len(np.unique(links)) < len(links)
        parts = tuple(zip(these, solos, strict=True))
        self._unions[key] = (union_solo, parts, joint)
        return self._comm(label, union, stream, waits, union_solo, repeat, parts=parts,
                          joint=joint)  # fmt: skip

    def copy(
        self,
        src_rank: int,
        dst_rank: int,
        size_bytes: int,
        *,
        stream: str = COMM,
        name: str = "",
        after: Iterable[Op] = (),
    ) -> Op:
        """Copy ``size_bytes`` from one GPU to another (``cudaMemcpyPeer``): one transfer
        over the route between them, with no protocol and no launch cost."""
        label = name or f"copy {src_rank}->{dst_rank} {format_bytes(size_bytes)}"
        group = self._group((src_rank, dst_rank), label)
        waits = self._after(after, label)
        if self._recorded is not None:
            self._recorded.append(RecordedCall("sendrecv", "direct", 2, size_bytes, (), stream,
                                               group))  # fmt: skip
            return self._comm(label, group, stream, waits, None)
        size = check_size_bytes(size_bytes, "size_bytes")
        return self._comm(label, group, stream, waits, self._copy_solo(group, size))

    def copies(
        self,
        pairs: Iterable[tuple[int, int]],
        size_bytes: int,
        *,
        stream: str = COMM,
        name: str = "",
        after: Iterable[Op] = (),
    ) -> Op:
        """Copy ``size_bytes`` from each source to its destination, all at once, as one op
        (a pipeline stage's ranks each sending their activations to the next stage's): one
        transfer per pair over the route between them, sharing the links they meet."""
        pairs = [(int(a), int(b)) for a, b in pairs]
        if not pairs:
            raise ConfigError(f"{name or 'copies'}: no (source, destination) pairs given")
        if any(a == b for a, b in pairs):
            raise ConfigError(f"{name or 'copies'}: a rank cannot copy to itself")
        if len(pairs) == 1:
            return self.copy(*pairs[0], size_bytes, stream=stream, name=name, after=after)
        label = name or f"copies x{len(pairs)} {format_bytes(size_bytes)}"
        group = self._group([r for pair in pairs for r in pair], label)
        waits = self._after(after, label)
        if self._recorded is not None:
            self._recorded.extend(RecordedCall("sendrecv", "direct", 2, size_bytes, (), stream,
                                               pair) for pair in pairs)  # fmt: skip
            return self._comm(label, group, stream, waits, None)
        size = check_size_bytes(size_bytes, "size_bytes")
        return self._comm(label, group, stream, waits, self._copy_solo(group, size))

    def run(
        self,
        *,
        load_bins: int = LOAD_BINS,
        every_call_in_detail: bool = False,
        transfers: bool = True,
    ) -> Timeline:
        """Simulate everything asked for and return what happened.

        ``load_bins`` is the number of time bins of the timeline's per-link load (0:
        none), and ``transfers=False`` keeps no transfer in the timeline (a training step's
        millions); they change what is recorded, never a time. ``every_call_in_detail`` runs
        every call transfer by transfer, none as its time alone: the same times (to
        rounding, where calls share no link while they run), more slowly; tests compare
        the two.
        """
        if self._recorded is not None or not self._ops:
            return empty_timeline(self._ops, self.n_ranks)
        self._alone = set()
        # calls on several groups that share a link never run as their time alone
        detailed = {i for i, op in enumerate(self._ops) if isinstance(op, Comm) and op.joint}
        if every_call_in_detail:
            detailed = {i for i, op in enumerate(self._ops) if isinstance(op, Comm)}
        base_s = {i: op.duration_s for i, op in enumerate(self._ops)
                  if isinstance(op, Compute) and op.duration_s > 0}  # fmt: skip
        ctas = {i: op.solo.ctas for i, op in enumerate(self._ops)
                if isinstance(op, Comm) and op.solo is not None and op.solo.ctas}  # fmt: skip
        try:
            if self.sm_count and base_s and ctas:  # a first stretch, from the cheap run
                self._stretch_from_a_preview(detailed, base_s, ctas)
            for round_ in range(SM_SHARING_ROUNDS):
                built, result = self._run_meeting(detailed)
                if not (self.sm_count and base_s and ctas):
                    break
                slowed = slowed_durations_s(self._ops, base_s, ctas, (built, result),
                                            self.sm_count)  # fmt: skip
                moved = max(abs(slowed[i] - self._ops[i].duration_s) / base_s[i]  # type: ignore[union-attr]
                            for i in base_s)  # fmt: skip
                if moved <= SM_SHARING_TOLERANCE:
                    break  # this run's spans are within the tolerance of where they settle
                if round_ == SM_SHARING_ROUNDS - 1:
                    self._notes.append(f"compute beside calls: the spans' stretch had not "
                                       f"settled after {SM_SHARING_ROUNDS} runs (last move "
                                       f"{moved:.1e} of a span)")  # fmt: skip
                    break
                for i, duration_s in slowed.items():
                    self._ops[i].duration_s = duration_s  # type: ignore[union-attr]
            return timeline_of(self._ops, built, result, self.n_ranks, load_bins,
                               self._notes, transfers=transfers)  # fmt: skip
        finally:
            for i, duration_s in base_s.items():  # the ops as recorded: run() runs again
                self._ops[i].duration_s = duration_s  # type: ignore[union-attr]

    def _stretch_from_a_preview(
        self, detailed: set[int], base_s: dict[int, float], ctas: dict[int, int]
    ) -> None:
        """Stretch the compute spans by the calls beside them in one run where only the
        calls of ``detailed`` run transfer by transfer (the others as their time alone,
        meeting or not): a cheap first guess, so that the runs that find where calls meet
        and run them together start near where the spans settle and usually settle in
        one. Every later run is checked as before (the spans within the tolerance of what
        its calls make them), so the guess changes how many runs, not where they stop
        but within that tolerance."""
        built = build(self._ops, self.topology, self.model, detailed, self.machine.router)
        run = (built, built.graph.simulate())
        for i, duration_s in slowed_durations_s(self._ops, base_s, ctas, run,
                                                self.sm_count).items():  # fmt: skip
            self._ops[i].duration_s = duration_s  # type: ignore[union-attr]

    def _run_meeting(self, detailed: set[int]) -> tuple[Built, GraphResult]:
        """Run the graph, the calls in ``detailed`` (grown here) transfer by transfer,
        until no call that ran alone overlaps another on a link, or until running the
        next calls that do in detail would take the run past
        :data:`~simcoll.core.limits.MAX_MEETING_TRANSFERS`: those keep their time alone,
        and a note says so.

        Raises
        ------
        LimitError
            If the calls that can never run alone (several groups sharing a link) hold
            more transfers than that already.
        """
        n_detailed = self._transfers_of(detailed)
        if n_detailed > MAX_MEETING_TRANSFERS:
            raise LimitError(f"the calls whose groups share links would run {n_detailed:,} "
                             f"transfers together, more than the {MAX_MEETING_TRANSFERS:,} one run "
                             "holds: use fewer GPUs or micro-batches")  # fmt: skip
        while True:
            built = build(self._ops, self.topology, self.model, detailed, self.machine.router)
            result = built.graph.simulate()
            meeting_now = meeting(self._ops, built, result, self.model) - detailed - self._alone
            if not meeting_now:
                return built, result
            more = self._transfers_of(meeting_now)
            if n_detailed + more > MAX_MEETING_TRANSFERS:
                self._alone |= meeting_now
                self._notes.append(
                    f"{len(meeting_now):,} calls that share links with others while they run "
                    f"ran as their time alone (no contention): in detail the run would hold "
                    f"{n_detailed + more:,} transfers, more than the {MAX_MEETING_TRANSFERS:,} one "
                    "run can"
                )
                return built, result
            detailed |= meeting_now
            n_detailed += more

    def _transfers_of(self, calls: set[int]) -> int:
        """The transfers ``calls`` add to a run where they run in detail: each repeat of
        each group's call."""
        return sum(op.repeat * sum(part.prepare().n_transfers for _, part in op.pieces)
                   for op in (self._ops[i] for i in calls)
                   if isinstance(op, Comm))  # fmt: skip

    # -- deciding calls -----------------------------------------------------------------

    def _call_solo(  # noqa: PLR0917 - one call's facts
        self,
        c: Collective,
        size_bytes: int,
        group: tuple[int, ...],
        algorithm: str | None,
        protocol: str | None,
        params: Mapping[str, int] | None,
        in_place: bool,
    ) -> Solo:
        nodes = tuple(self.rank_nodes[r] for r in group)
        items = tuple(sorted(dict(params or {}).items()))
        key = (c, nodes, algorithm, protocol, items, size_bytes, in_place)
        solo = self._solos.get(key)
        if solo is not None:
            return solo
        machine = self.machine
        shaped = group_shape(machine.topology, machine.router, nodes)
        shape_key: tuple[object, ...] | None = None
        if shaped is not None:
            shape, places = shaped
            shape_key = (c, shape.key, places, *key[2:])
            known = self._shaped.get(shape_key)
            if known is not None:  # the same call in a server of the same shape
                moved = moved_links(machine.topology, machine.router, known[1].links,
                                    known[0], shape)  # fmt: skip
                if moved is not None:
                    solo = replace(known[1], links=moved, prepare=self._deciding_runner(key))
        if solo is None:
            solo = self._decided_solo(key)
            if shaped is not None and shape_key is not None:
                self._shaped.setdefault(shape_key, (shaped[0], solo))
        self._solos[key] = solo
        return solo

    def _decided_solo(self, key: tuple[Any, ...]) -> Solo:
        """The call of ``key`` (as :meth:`_call_solo` makes it) decided for its GPUs."""
        setup, decided = self._decide(key)
        return Solo.of(
            time_s=decided.row.time_s,
            delay_s=decided.delay_s,
            transfers_s=decided.transfers_s,
            floor_s=decided.floor_s,
            result=decided.choice.result,
            prepare=self._call_runner(setup, decided, key[1]),
            ctas=_ctas(decided),
        )

    def _decide(self, key: tuple[Any, ...]) -> tuple[Setup, Decided]:
        c, nodes, algorithm, protocol, items, size_bytes, in_place = key
        setup_key = key[:5]
        setup = self._setups.get(setup_key)
        if setup is None:
            setup = call_setup(self.machine, c, nodes, algorithm=algorithm, protocol=protocol,
                               model=self.model, params=dict(items) or None, knobs=self.knobs,
                               plan=self.plan)  # fmt: skip
            self._setups[setup_key] = setup
        known = len(setup.unsimulated)
        decided = decide(setup, size_bytes, in_place=in_place)
        for size, choices in setup.unsimulated[known:]:
            self._notes.append(
                f"{c.value} of {format_bytes(size)} on {len(nodes)} ranks: "
                f"{', '.join(choices)} could not be simulated (too many transfers) and "
                "might have been faster; it ran the fastest of the others"
            )
        return setup, decided

    def _deciding_runner(self, key: tuple[Any, ...]) -> Callable[[], Run]:
        """How to prepare a call moved from a server of its shape, should it meet others:
        decided for its own GPUs then (the same choice, on its own links)."""

        def prepared() -> Run:
            setup, decided = self._decide(key)
            return self._call_runner(setup, decided, key[1])()

        return once(prepared)

    def _call_runner(
        self, setup: Setup, decided: Decided, nodes: tuple[str, ...]
    ) -> Callable[[], Run]:
        """How to prepare the decided call's whole schedule to run beside others (what
        builds it, not the run that timed it alone: that one's per-link arrays are the
        fabric's size, and a step decides thousands of calls)."""
        machine, model = self.machine, self.model
        recipe = schedule_recipe(decided.choice)
        protocol, plan = decided.choice.protocol, decided.choice.plan

        def prepared() -> Run:
            return prepare(machine.topology, recipe(setup), model=model, protocol=protocol,
                           rank_nodes=nodes, plan=plan, router=machine.router)  # fmt: skip

        return once(prepared)

    def _copy_solo(self, group: tuple[int, ...], size_bytes: int) -> Solo:
        """Group ranks 2i -> 2i + 1, one transfer each, all at once."""
        nodes = tuple(self.rank_nodes[r] for r in group)
        key = ("copy", nodes, size_bytes)
        solo = self._solos.get(key)
        if solo is None:
            b = ScheduleBuilder(Collective.SENDRECV, "copy", n_ranks=len(group),
                                size_bytes=size_bytes, pieces_per_block=1)  # fmt: skip
            for i in range(0, len(group), 2):
                b.add(src=i, dst=i + 1, pieces=[i])
            schedule = b.build()
            machine, model = self.machine, self.model

            def prepared() -> Run:
                return prepare(machine.topology, schedule, model=model, rank_nodes=nodes,
                               router=machine.router)  # fmt: skip

            result = prepared().run(model)  # not kept: prepared again if it meets others
            runner = once(prepared)
            solo = Solo.of(result.time_s, 0.0, result.time_s, 0.0, result, runner)
            self._solos[key] = solo
        return solo

    # -- recording ----------------------------------------------------------------------

    def _group(self, ranks: Iterable[int], name: str) -> tuple[int, ...]:
        group = tuple(int(r) for r in ranks)
        if not group:
            raise ConfigError(f"{name}: the rank group is empty")
        bad = [r for r in group if not 0 <= r < self.n_ranks]
        if bad:
            raise ConfigError(
                f"{name}: rank {bad[0]} is not a GPU of this topology (ranks 0..{self.n_ranks - 1})"
            )
        if len(set(group)) != len(group):
            raise ConfigError(f"{name}: a rank appears twice in the group {list(group)}")
        return group

    def _after(self, after: Iterable[Op], name: str) -> tuple[int, ...]:
        waits = []
        for op in after:
            if not isinstance(op, Op):
                raise ConfigError(f"{name}: after= takes ops of this session, got {op!r}")
            if op.session != id(self) or not 0 <= op.index < len(self._ops):
                raise ConfigError(f"{name}: after= takes ops of this session, got one of "
                                  "another session")  # fmt: skip
            waits.append(op.index)
        return tuple(dict.fromkeys(waits))

    def _comm(  # noqa: PLR0917 - one op's facts
        self,
        name: str,
        group: tuple[int, ...],
        stream: str,
        waits: tuple[int, ...],
        solo: Solo | None,
        repeat: int = 1,
        *,
        parts: tuple[tuple[tuple[int, ...], Solo], ...] = (),
        joint: bool = False,
    ) -> Op:
        previous = tuple(dict.fromkeys(
            self._stream_tail[r, stream] for r in group if (r, stream) in self._stream_tail
        ))  # fmt: skip
        index = len(self._ops)
        self._ops.append(Comm(name, group, stream, waits, previous, solo, repeat, parts, joint))
        for r in group:
            self._stream_tail[r, stream] = index
        return Op(index, id(self))


def _ctas(decided: Decided) -> int:
    """The CTAs (SMs) a decided call runs on: one per channel it used, NCCL's kernel
    layout, or NVLS's CTAs (16 by default, whose channels simcoll runs as one); 0 for a
    call that moves no byte."""
    choice = decided.choice
    if choice.row.size_bytes == 0:
        return 0
    if "n_ctas" in choice.knobs:
        return int(choice.knobs["n_ctas"])
    if choice.plan is not None:
        return choice.plan.n_channels
    return int(choice.knobs.get("n_channels", 1))


def _sm_count(topology: nx.DiGraph[str]) -> int:
    """The SMs of the topology's GPUs (``[gpu] sms``), 0 where the file does not say."""
    spec = gpu_spec(topology)
    return int(spec.sm_count) if spec is not None and spec.sm_count else 0
