"""Several collectives, copies and compute on one cluster and one clock.

A :class:`Session` is the engine for workloads (:mod:`simcoll.scenarios.workloads`): one SimPy
clock and one :class:`~simcoll.network.fabric.Fabric` over the whole topology, on which
any number of collective calls of any rank groups run at once and share the links. A
workload is a SimPy process (a generator) that calls :meth:`Session.collective`,
:meth:`Session.copy` and :meth:`Session.compute`, each of which returns an event it may
``yield`` to wait for (or keep, to wait later: that is how communication overlaps
compute).

Streams
    Every rank has streams, as a CUDA device does. Work on one (rank, stream) runs in
    call order: a collective starts when every rank of its group has finished what it
    was given earlier on that stream. Compute runs on ``"compute"``, collectives and
    copies on ``"comm"`` unless told otherwise, so a second communicator (FSDP prefetch,
    concurrent groups) is simply another stream name.

>>> from simcoll.topology import ring
>>> s = Session(ring(4, link_bandwidth_bytes_per_s=100e9, link_latency_s=2e-6))
>>> def step(s):
...     yield s.compute(range(4), 10e-6, "forward")
...     yield s.collective("allgather", 8_000_000, range(4))
>>> _ = s.process(step(s))
>>> timeline = s.run()
>>> round(timeline.time_s * 1e6, 6)  # 10 us of compute, then 3 x (2 us + 20 us)
76.0
"""

from __future__ import annotations

import bisect
from collections.abc import Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
import numpy.typing as npt
import simpy

from simcoll.algorithms import build_schedule
from simcoll.core.collectives import Collective, local_copy_s
from simcoll.core.errors import ConfigError, SimulationError
from simcoll.core.protocols import Protocol, parse_protocol
from simcoll.core.schedule import Schedule, ScheduleBuilder
from simcoll.core.units import format_bytes
from simcoll.network.fabric import Fabric
from simcoll.plan.placement import map_ranks, switch_endpoints
from simcoll.sim.engine import MODELS, _Run, _Shared
from simcoll.sim.timeline import COMM, COMPUTE, Span, Timeline, TransferBatch, binned_bytes
from simcoll.topology import Router, gpu_nodes
from simcoll.topology.calibration import Calibration

__all__ = ["LOAD_BINS", "RecordedCall", "Session", "Waitable", "recording_calls"]

#: Time bins of a timeline's per-link load (the link utilisation heatmap).
LOAD_BINS = 200

#: What :meth:`Session.collective`, :meth:`Session.copy` and :meth:`Session.compute`
#: return: an event a workload process may ``yield`` (wait for) now or later.
Waitable = simpy.Event


@dataclass(frozen=True)
class RecordedCall:
    """A collective or copy a workload asked for, recorded instead of simulated."""

    collective: str
    algorithm: str
    n_ranks: int
    size_bytes: int
    params: tuple[tuple[str, int], ...] = ()


_RECORDING: ContextVar[list[RecordedCall] | None] = ContextVar("_RECORDING", default=None)


@contextmanager
def recording_calls() -> Iterator[list[RecordedCall]]:
    """Sessions made inside the block simulate nothing: every collective and copy is
    recorded (and takes no time), so that a workload's calls can be counted and costed
    before it runs (:mod:`simcoll.scenarios.cost`). Compute and control flow run as usual.
    """
    calls: list[RecordedCall] = []
    token = _RECORDING.set(calls)
    try:
        yield calls
    finally:
        _RECORDING.reset(token)


@dataclass
class _Call:
    """One collective or copy: its run, group and where its spans go."""

    name: str
    ranks: tuple[int, ...]
    stream: str
    run: _Run
    start_s: float = 0.0
    started: bool = False


class Session:
    """A topology, a clock and a shared fabric; see the module docstring.

    Parameters
    ----------
    topology
        A validated topology; rank r runs on the GPU whose ``rank`` is r.
    model
        ``"flow"`` (links shared max-min fairly) or ``"ideal"`` (no contention).
    protocol
        An NCCL protocol name (``"simple"``, ``"LL"``, ``"LL128"``) costed on every
        transfer, or None for the links alone.
    calibration
        Fitted parameters applied to the topology and protocol, as in
        :func:`simcoll.prediction.predict`; its ``launch_s`` delays every collective's start.
    """

    def __init__(
        self,
        topology: nx.DiGraph[str],
        *,
        model: str = "flow",
        protocol: str | None = None,
        calibration: Calibration | None = None,
    ) -> None:
        if model not in MODELS or model == "packet":
            raise ConfigError(f"a session runs model 'flow' or 'ideal', not {model!r}")
        base: Protocol | None = parse_protocol(protocol) if protocol else None
        self.launch_s = 0.0
        if calibration is not None:
            topology = calibration.apply(topology)
            base = calibration.protocol(base)
            self.launch_s = calibration.launch_s
        self.topology = topology
        self.protocol = base
        self.model = model
        self.rank_nodes = map_ranks(topology, len(gpu_nodes(topology)))
        self.env = simpy.Environment()
        self.links = tuple(topology.edges)
        capacity = np.array(
            [topology.edges[e]["bandwidth_bytes_per_s"] for e in self.links], dtype=np.float64
        )
        self.fabric = Fabric(self.env, capacity, self._dispatch, contention=model == "flow")
        self.router = Router(topology)
        self._bases: list[int] = []
        self._calls: list[_Call] = []
        self._next_flow = 0
        self._stream_tail: dict[tuple[int, str], simpy.Event] = {}
        self._compute_free_s: dict[int, float] = {}
        self._spans: list[Span] = []
        self._processes: list[tuple[str, simpy.Process]] = []

    @property
    def n_ranks(self) -> int:
        """Number of GPUs (ranks) of the topology."""
        return len(self.rank_nodes)

    # -- what workloads call ------------------------------------------------------------

    def process(self, generator: Generator[Any, Any, Any]) -> Waitable:
        """Start a workload process; the returned event fires when it returns."""
        process = self.env.process(generator)
        self._processes.append((getattr(generator, "__name__", "process"), process))
        return process

    def compute(self, ranks: Iterable[int], duration_s: float, name: str) -> Waitable:
        """Each rank of ``ranks`` computes for ``duration_s`` on its compute stream.

        Compute of one rank runs in call order: it starts when the rank's earlier
        compute is done. The event fires when every rank has finished.
        """
        if not duration_s >= 0:
            raise ConfigError(f"{name}: compute time must be >= 0 s, got {duration_s!r}")
        group = self._group(ranks, name)
        now = self.env.now
        end_s = now
        for r in group:
            start = max(now, self._compute_free_s.get(r, 0.0))
            self._compute_free_s[r] = start + duration_s
            end_s = max(end_s, start + duration_s)
            if duration_s > 0:
                self._spans.append(Span(r, COMPUTE, name, start, start + duration_s))
        return self.env.timeout(end_s - now)

    def collective(
        self,
        collective: Collective | str,
        size_bytes: int,
        ranks: Iterable[int],
        *,
        algorithm: str = "ring",
        params: Mapping[str, int] | None = None,
        stream: str = COMM,
        name: str | None = None,
        in_place: bool = False,
    ) -> Waitable:
        """Run one collective over ``ranks`` (group rank i is global rank ``ranks[i]``).

        ``size_bytes`` follows nccl-tests (all-gather: the gathered buffer). The
        collective starts once every rank of the group is done with earlier work on
        ``stream``; the event fires when its last transfer arrives. An out-of-place call
        (the default, as ``torch.distributed.all_gather_into_tensor`` makes) also copies
        its own block at the topology's ``gpu_memory_bandwidth_bytes_per_s``, where given
        (:func:`~simcoll.core.collectives.local_copy_s`), before its transfers start.
        """
        group = self._group(ranks, name or str(collective))
        c = collective if isinstance(collective, Collective) else Collective.parse(collective)
        recorded = _RECORDING.get()
        if recorded is not None:
            items = tuple(sorted(dict(params or {}).items()))
            recorded.append(RecordedCall(c.value, algorithm, len(group), size_bytes, items))
            return self._recorded(group, stream, name or c.value)
        schedule = build_schedule(
            c, algorithm, n_ranks=len(group), size_bytes=size_bytes, **dict(params or {})
        )
        label = name or f"{c.value} {_size_text(size_bytes)}"
        memory = self.topology.graph.get("gpu_memory_bandwidth_bytes_per_s")
        copy_s = local_copy_s(c, size_bytes, len(group), memory) if memory and not in_place else 0.0
        return self._launch(schedule, group, stream, label, self.launch_s + copy_s)

    def copy(
        self, src_rank: int, dst_rank: int, size_bytes: int, *, stream: str = COMM, name: str = ""
    ) -> Waitable:
        """Copy ``size_bytes`` from one GPU to another (cudaMemcpyPeer, NCCL send/recv)."""
        label = name or f"copy {src_rank}->{dst_rank} {_size_text(size_bytes)}"
        group = self._group((src_rank, dst_rank), label)
        recorded = _RECORDING.get()
        if recorded is not None:
            recorded.append(RecordedCall("sendrecv", "direct", 2, size_bytes))
            return self._recorded(group, stream, label)
        b = ScheduleBuilder(
            Collective.SENDRECV, "copy", n_ranks=2, size_bytes=size_bytes, pieces_per_block=1
        )
        b.add(src=0, dst=1, pieces=[0])
        return self._launch(b.build(), group, stream, label, 0.0)

    def run(self, *, load_bins: int = LOAD_BINS) -> Timeline:
        """Run every process to the end and return what happened.

        ``load_bins`` is the number of time bins of the timeline's per-link load (0: none).
        """
        self.env.run()
        self.fabric.close()
        self._raise_if_stuck()
        return self._timeline(load_bins)

    def _raise_if_stuck(self) -> None:
        """A workload that cannot finish is an error naming what waits, never a hang."""
        for call in self._calls:
            if call.started and call.run.n_left:
                try:
                    call.run._raise_if_stuck()
                except SimulationError as error:
                    raise SimulationError(f"{call.name}: {error.message}") from None
        waiting = [name for name, process in self._processes if process.is_alive]
        unstarted = [call.name for call in self._calls if not call.started]
        if waiting or unstarted:
            what = [f"process {', '.join(waiting[:3])} waits for an event that never happens"]
            if unstarted:
                what.append(
                    f"{len(unstarted)} call(s) never started ({', '.join(unstarted[:3])}): "
                    "they wait on a stream whose earlier work never ends"
                )
            raise SimulationError(f"the workload cannot finish: {'; '.join(what)}")

    # -- inside -------------------------------------------------------------------------

    def _recorded(self, group: tuple[int, ...], stream: str, name: str) -> Waitable:
        """A recorded call: done at once, with an empty span on every rank of its group."""
        now = self.env.now
        for r in group:
            self._spans.append(Span(r, stream, name, now, now))
        return self.env.timeout(0)

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

    def _launch(
        self, schedule: Schedule, group: tuple[int, ...], stream: str, name: str, delay_s: float
    ) -> Waitable:
        done = self.env.event()
        nodes = tuple(self.rank_nodes[r] for r in group)
        nodes += switch_endpoints(self.topology, nodes, schedule)
        shared = _Shared(self.env, self.fabric, self.router, self._next_flow)
        run = _Run(
            self.topology,
            schedule,
            nodes,
            model=self.model,
            protocol=self.protocol,
            packet_bytes=0,
            shared=shared,
        )
        call = _Call(name, group, stream, run)
        self._bases.append(self._next_flow)
        self._calls.append(call)
        self._next_flow += max(schedule.n_transfers, 1)
        before = [self._stream_tail[r, stream] for r in group if (r, stream) in self._stream_tail]
        for r in group:
            self._stream_tail[r, stream] = done
        self.env.process(self._call(call, before, delay_s, done))
        return done

    def _call(
        self, call: _Call, before: list[simpy.Event], delay_s: float, done: simpy.Event
    ) -> Generator[Any, Any, None]:
        if before:
            yield self.env.all_of(before)
        call.start_s = self.env.now  # the launch cost is part of the call's span
        call.started = True
        if delay_s:
            yield self.env.timeout(delay_s)
        finished = self.env.event()

        def on_done() -> None:
            if not finished.triggered:
                finished.succeed()

        call.run.on_done = on_done
        call.run.start()
        yield finished
        for r in call.ranks:
            self._spans.append(Span(r, call.stream, call.name, call.start_s, self.env.now))
        done.succeed()

    def _dispatch(self, flow_ids: list[int]) -> None:
        """Hand the fabric's arrivals to the runs they belong to (ids are sorted)."""
        i = 0
        while i < len(flow_ids):
            k = bisect.bisect_right(self._bases, flow_ids[i]) - 1
            base, run = self._bases[k], self._calls[k].run
            j = i
            while j < len(flow_ids) and flow_ids[j] < base + run.s.n_transfers:
                j += 1
            run._on_arrival([f - base for f in flow_ids[i:j]])
            i = j

    def _link_load(self, n_bins: int) -> npt.NDArray[np.float64]:
        """Wire bytes per link and time bin (see :attr:`Timeline.link_load_bytes`)."""
        load = np.zeros((len(self.links), n_bins))
        if not n_bins or self.env.now <= 0:
            return load
        edges = np.linspace(0.0, float(self.env.now), n_bins + 1)
        for call in self._calls:
            run = call.run
            for pair, links in enumerate(run.pair_links):
                mine = np.flatnonzero(run.pair_of == pair)
                if len(mine) and len(links):
                    wire = np.broadcast_to(run.wire_bytes, run.end_s.shape)[mine]
                    load[links] += binned_bytes(wire, run.start_s[mine], run.end_s[mine], edges)
        return load

    def _timeline(self, load_bins: int) -> Timeline:
        batches = []
        for call in self._calls:
            run, s = call.run, call.run.s
            n = s.n_ranks
            to_global = np.array(call.ranks, dtype=np.int64)
            real = (s.src < n) & (s.dst < n)  # transfers to in-network switches are not P2P
            batches.append(
                TransferBatch(
                    name=call.name,
                    src_rank=to_global[s.src[real]],
                    dst_rank=to_global[s.dst[real]],
                    size_bytes=s.transfer_bytes[real],
                    start_s=run.start_s[real],
                    end_s=run.end_s[real],
                )
            )
        link_bytes = np.zeros(len(self.links))
        for call in self._calls:
            link_bytes += call.run._link_bytes()
        spans = sorted(self._spans, key=lambda x: (x.rank, x.stream, x.start_s, x.end_s))
        return Timeline(
            n_ranks=self.n_ranks,
            time_s=float(self.env.now),
            spans=tuple(spans),
            transfers=tuple(batches),
            links=self.links,
            link_bytes=link_bytes,
            link_busy_s=self.fabric.link_busy_s.copy(),
            link_bandwidth_bytes_per_s=self.fabric.capacity_bytes_per_s.copy(),
            link_load_bytes=self._link_load(load_bins),
        )


def _size_text(size_bytes: int) -> str:
    return format_bytes(size_bytes)
