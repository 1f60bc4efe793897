"""The engine: run a schedule on a topology and record when every transfer arrives.

:func:`simulate` maps ranks to GPU nodes, routes every transfer, and releases transfers
as the rules of :mod:`simcoll.core.schedule` allow: a transfer is *issued* once all of its
dependencies have arrived, it is the next of its connection, and the connection has fewer
than ``max_in_flight`` transfers in flight; it *starts* moving bytes once its route latency
has passed and the connection's previous transfer has finished moving its bytes; it
*arrives* when its last byte is through. Bandwidth is shared by the
:class:`~simcoll.network.fabric.Fabric`.

Everything is deterministic: the same inputs give the same floats, bit for bit. A run on
its own clock with the ``flow`` model runs these rules and the fabric's compiled
(:mod:`simcoll.network.kernel`), to the same floats; :data:`COMPILED` ``= False`` keeps it
on the SimPy process, the reference.

>>> from simcoll.algorithms import build_schedule
>>> from simcoll.topology import ring
>>> topo = ring(4, link_bandwidth_bytes_per_s=100e9, link_latency_s=2e-6)
>>> result = simulate(topo, build_schedule("allgather", "ring", n_ranks=4, size_bytes=8_000_000))
>>> round(result.time_s * 1e6, 6)  # 3 steps of (2 us + 2 MB / 100 GB/s)
66.0
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import networkx as nx
import numpy as np
import numpy.typing as npt
import simpy

from simcoll.core.errors import ConfigError, SimulationError, TopologyError
from simcoll.core.protocols import Protocol, parse_protocol
from simcoll.core.schedule import Schedule
from simcoll.network import kernel
from simcoll.network.clock import on_grid_array
from simcoll.network.fabric import Fabric, FabricStats
from simcoll.network.packet import DEFAULT_PACKET_BYTES, PacketFabric
from simcoll.plan.channels import Plan
from simcoll.plan.placement import map_ranks, switch_endpoints
from simcoll.sim.pacing import multimem_sends, paced_rate_caps, sm_bound_s
from simcoll.sim.routes import (
    LinkArrays,
    LinkTable,
    Routes,
    batch_costs,
    bytes_per_link,
    link_table,
    pair_efficiency,
    pair_endpoint,
    pair_latency_s,
    route_pair,
)
from simcoll.topology import Router

__all__ = ["FlowRun", "Model", "Run", "SimulationResult", "prepare", "simulate"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

Model = Literal["flow", "ideal", "packet"]

#: Runs of the flow model on a clock of their own take the compiled event loop
#: (:mod:`simcoll.network.kernel`) where numba is installed; False keeps every run on the
#: reference (the fabric's SimPy process), as tests that hook into the fabric need.
COMPILED = True
#: A run of fewer transfers than this takes the reference while the compiled loop is not
#: yet warm (:func:`simcoll.network.kernel.warm`): compiling it once costs more than the
#: run (about 11 s, against some 4 s for 100,000 transfers on the reference).
COMPILE_FROM_TRANSFERS = 100_000

# A source rank with at least this many destinations has its routes found together.
_BATCH_DESTINATIONS = 32
_NO_LINKS: IntArray = np.zeros(0, dtype=np.int64)
MODELS: tuple[str, ...] = ("flow", "ideal", "packet")


@dataclass(frozen=True, eq=False, kw_only=True)
class SimulationResult:
    """What one simulated collective call did.

    Per-transfer arrays are indexed like the schedule's transfers; per-link arrays like
    ``links`` (directed edges of the topology, in graph order).
    """

    schedule: Schedule
    model: str
    time_s: float
    issue_s: FloatArray  # dependencies met and window open
    start_s: FloatArray  # first byte moves (latency paid, connection's turn)
    end_s: FloatArray  # last byte arrived
    rank_nodes: tuple[str, ...]
    links: tuple[tuple[str, str], ...]
    link_bytes: FloatArray
    link_busy_s: FloatArray
    stats: FabricStats

    @property
    def algbw_bytes_per_s(self) -> float:
        """nccl-tests algorithm bandwidth: size_bytes / time_s (0 when time is 0)."""
        return self.schedule.size_bytes / self.time_s if self.time_s > 0 else 0.0

    @property
    def busbw_bytes_per_s(self) -> float:
        """nccl-tests bus bandwidth: algbw times the collective's factor."""
        s = self.schedule
        return self.algbw_bytes_per_s * s.collective.busbw_factor(s.n_ranks)

    protocol: str | None = None

    @property
    def bytes_sent_per_rank(self) -> IntArray:
        """Data bytes each rank sent (then each in-network switch endpoint, if any)."""
        return self.schedule.bytes_sent_per_rank()

    @property
    def bytes_received_per_rank(self) -> IntArray:
        """Data bytes each rank received (then each in-network switch endpoint, if any)."""
        return self.schedule.bytes_received_per_rank()


def simulate(
    topology: nx.DiGraph[str],
    schedule: Schedule,
    *,
    model: str = "flow",
    rank_nodes: tuple[str, ...] | None = None,
    protocol: Protocol | str | None = None,
    packet_bytes: int = DEFAULT_PACKET_BYTES,
    plan: Plan | None = None,
) -> SimulationResult:
    """Simulate one collective call.

    Parameters
    ----------
    topology
        A validated topology graph (see :mod:`simcoll.topology`).
    schedule
        The transfers to run.
    model
        ``"flow"``: flows share links max-min fairly (contention); ``"ideal"``: every
        flow runs at its route's bottleneck bandwidth as if alone (no contention);
        ``"packet"``: store-and-forward packets of ``packet_bytes``, hop by hop, links
        first come first served (:mod:`simcoll.network.packet`; for small checks).
    rank_nodes
        GPU node of each rank; by default rank r runs on the GPU whose ``rank`` is r.
        In-network switch endpoints of the schedule go to :func:`switch_endpoints`.
    protocol
        An NCCL protocol cost (:mod:`simcoll.core.protocols`, or its name): each transfer
        puts its bytes divided by the protocol's efficiency on the wire and pays its step
        latency on top of its route's. ``None`` (the default) models the links alone.
    packet_bytes
        Packet size of the packet model.
    plan
        A communication plan (:mod:`simcoll.plan`): its ``rank_nodes`` place the ranks
        (instead of ``rank_nodes``), and an edge it routes through NICs (and a PXN proxy)
        on a channel takes that path; the schedule's channel ``c`` is the plan's channel
        ``c`` (cyclically).

    Raises
    ------
    SimulationError
        If the schedule cannot finish (a dependency cycle, a transfer waiting for one
        nobody sends) or a transfer has no route; the message names the stuck transfers.
    """
    run = prepare(topology, schedule, model=model, rank_nodes=rank_nodes, protocol=protocol,
                  packet_bytes=packet_bytes, plan=plan)  # fmt: skip
    try:
        return run.run(model)
    finally:
        run.release()


def prepare(
    topology: nx.DiGraph[str],
    schedule: Schedule,
    *,
    model: str = "flow",
    rank_nodes: tuple[str, ...] | None = None,
    protocol: Protocol | str | None = None,
    packet_bytes: int = DEFAULT_PACKET_BYTES,
    plan: Plan | None = None,
    router: Router | None = None,
) -> Run:
    """The run :func:`simulate` makes, routed and with its connections grouped, not yet
    started: :mod:`simcoll.sim.oneshot` reads the same routes and latencies from it.
    ``router`` (of ``topology``) lets runs on one topology share what it has found."""
    if model not in MODELS:
        raise ConfigError(f"unknown model {model!r}; valid: {', '.join(MODELS)}")
    if not isinstance(topology, nx.DiGraph):
        raise ConfigError(f"a topology is a networkx DiGraph (simcoll.load_topology), got "
                          f"{type(topology).__name__}")  # fmt: skip
    if not isinstance(schedule, Schedule):
        raise ConfigError(f"a schedule is a Schedule (simcoll.build_schedule), got "
                          f"{type(schedule).__name__} {schedule!r:.40}")  # fmt: skip
    if isinstance(protocol, str):
        protocol = parse_protocol(protocol)
    elif protocol is not None and not isinstance(protocol, Protocol):
        raise ConfigError(f"a protocol is a name (LL, LL128, simple) or a Protocol, got "
                          f"{type(protocol).__name__} {protocol!r:.40}")  # fmt: skip
    if plan is not None:
        if plan.n_ranks != schedule.n_ranks:
            raise ConfigError(f"the plan has {plan.n_ranks} ranks, the schedule {schedule.n_ranks}")
        rank_nodes = plan.rank_nodes
    nodes = rank_nodes if rank_nodes is not None else map_ranks(topology, schedule.n_ranks)
    nodes += switch_endpoints(topology, nodes, schedule)
    return _Run(topology, schedule, nodes, model=model, protocol=protocol,
                packet_bytes=packet_bytes, plan=plan, router=router)  # fmt: skip


class FlowRun:
    """Transfers as the event loop runs them: the release rules of the module docstring
    over flows already routed, on the fabric's SimPy process (the reference) or the
    compiled loop.

    Everything is given as arrays, per transfer (its pair, wire bytes, latency, and its
    dependencies in CSR form), per pair (its links and their weights) and per connection
    (its window; ``conn_of`` numbers each transfer's connection, whose transfers go in
    index order). :class:`_Run` makes them from one schedule;
    :mod:`simcoll.sim.graph` from many calls and compute spans on one clock.
    """

    def __init__(
        self,
        *,
        links: tuple[tuple[str, str], ...],
        capacity_bytes_per_s: FloatArray,
        pair_of: IntArray,
        pair_links: list[IntArray],
        pair_weights: list[FloatArray | None],
        latency_s: FloatArray,
        wire_bytes: FloatArray,
        deps_indptr: IntArray,
        deps: IntArray,
        conn_of: IntArray,
        conn_window: IntArray,
        model: str = "flow",
        packet_bytes: int = 0,
        finish_heap: bool = False,
        rate_cap_bytes_per_s: FloatArray | None = None,
    ) -> None:
        self.links = links
        # The event loop reads and writes per-transfer values one item at a time: stdlib
        # arrays give Python numbers at a fraction of numpy's per-item cost. The numpy
        # attributes are views of the same memory, not copies (a copy of each is 8 bytes
        # a transfer: 12 MB for a 1,024-rank ring's half a million transfers).
        self._pair = _ints(pair_of)
        self._wire = _floats(wire_bytes)
        self._latency = _floats(on_grid_array(latency_s))  # ticks: simcoll.network.clock
        self.pair_of = np.frombuffer(self._pair, dtype=np.int64)
        self.wire_bytes = np.frombuffer(self._wire, dtype=np.float64)
        self.latency_s = np.frombuffer(self._latency, dtype=np.float64)
        self.pair_links = pair_links
        self.pair_weights = pair_weights
        self.cap_rates(rate_cap_bytes_per_s)
        self.fabric: Fabric | PacketFabric
        self.on_done: Callable[[], None] | None = None
        self.env = simpy.Environment()
        if model == "packet":
            self.fabric = PacketFabric(self.env, capacity_bytes_per_s, self._on_arrival,
                                       packet_bytes=packet_bytes)  # fmt: skip
        else:
            self.fabric = Fabric(self.env, capacity_bytes_per_s, self._on_arrival,
                                 contention=model == "flow", finish_heap=finish_heap)  # fmt: skip
        n = len(pair_of)
        self._group_connections(conn_of, conn_window)
        self.deps_left = _ints(np.diff(deps_indptr))
        self._dependents_ptr, self._dependents = _invert(deps_indptr, deps, n)
        self.issue_s = np.full(n, np.nan)
        self.start_s = np.full(n, np.nan)
        self.end_s = np.full(n, np.nan)
        self.n_left = n

    @property
    def n_transfers(self) -> int:
        """How many transfers (flows) the run holds."""
        return len(self.end_s)

    def cap_rates(self, rate_cap_bytes_per_s: FloatArray | None) -> None:
        """Give each transfer the most rate it may take, bytes/s (``inf``: none; None:
        no transfer has a cap), before the run: a capped flow shares links as if it
        also crossed a link of its own of that capacity (:mod:`simcoll.sim.pacing`)."""
        self.rate_cap_bytes_per_s = (
            None if rate_cap_bytes_per_s is None
            else np.asarray(rate_cap_bytes_per_s, dtype=np.float64)
        )  # fmt: skip
        caps = self.rate_cap_bytes_per_s
        if caps is not None and (caps.shape != (len(self.pair_of),) or not (caps > 0).all()):
            raise ConfigError(f"rate caps: one positive cap per transfer ({len(self.pair_of)}), "
                              f"got {caps.shape[0] if caps.ndim else 0} with "
                              f"{int((caps <= 0).sum())} not positive")  # fmt: skip
        self._cap = (None if self.rate_cap_bytes_per_s is None
                     else _floats(self.rate_cap_bytes_per_s))  # fmt: skip

    def _group_connections(self, conn_of: IntArray, conn_window: IntArray) -> None:
        """Per connection, its transfers in index order and its window."""
        counts = np.bincount(conn_of, minlength=len(conn_window))
        conn_end = np.cumsum(counts)
        self.conn_of = _ints(conn_of)
        self.conn_order = _ints(np.argsort(conn_of, kind="stable"))
        self.conn_end = _ints(conn_end)
        self.conn_next = _ints(conn_end - counts)
        self.conn_window = _ints(conn_window)
        self.conn_in_flight = _ints(np.zeros(len(counts), dtype=np.int64))
        self.conn_sending = bytearray(len(counts))
        self.conn_queue: dict[int, deque[int]] = {}

    def _send(self, t: int, start_s: float) -> None:
        self.start_s[t] = start_s
        pair = self._pair[t]
        cap = math.inf if self._cap is None else self._cap[t]
        if isinstance(self.fabric, Fabric):
            self.fabric.send(t, self.pair_links[pair], self._wire[t], start_s, cap,
                             weights=self.pair_weights[pair])  # fmt: skip
        else:
            self.fabric.send(t, self.pair_links[pair], self._wire[t], start_s, cap)

    def _try_issue(self, c: int) -> None:
        now = self.env.now
        conn_next, conn_in_flight = self.conn_next, self.conn_in_flight
        end, most = self.conn_end[c], self.conn_window[c]
        while conn_next[c] < end and conn_in_flight[c] < most:
            t = self.conn_order[conn_next[c]]
            if self.deps_left[t]:
                return
            conn_next[c] += 1
            conn_in_flight[c] += 1
            self.issue_s[t] = now
            ready_s = now + self._latency[t]
            if self.conn_sending[c]:
                self.conn_queue.setdefault(c, deque()).append(t)
            else:
                self.conn_sending[c] = True
                self._send(t, ready_s)

    def _on_arrival(self, flow_ids: list[int]) -> None:
        now = self.env.now
        touched = set()
        conn_of, deps_left = self.conn_of, self.deps_left
        ptr, dependents = self._dependents_ptr, self._dependents
        for t in flow_ids:
            # The fabric takes times within rounding of each other as one instant, so it may
            # admit a flow (and a short one arrive) a rounding before the start recorded by
            # _send: it started by the time it arrived.
            self.start_s[t] = min(self.start_s[t], now)
            self.end_s[t] = now
            c = conn_of[t]
            self.conn_in_flight[c] -= 1
            queue = self.conn_queue.get(c)
            if queue:
                nxt = queue.popleft()
                self._send(nxt, max(now, float(self.issue_s[nxt]) + self._latency[nxt]))
            else:
                self.conn_sending[c] = False
            touched.add(c)
            for u in dependents[ptr[t] : ptr[t + 1]]:
                deps_left[u] -= 1
                if deps_left[u] == 0:
                    touched.add(conn_of[u])
        for c in sorted(touched):
            self._try_issue(c)
        self.n_left -= len(flow_ids)
        if not self.n_left and self.on_done is not None:
            self.on_done()

    def start(self) -> None:
        """Issue what can be issued at time 0."""
        for c in range(len(self.conn_end)):
            self._try_issue(c)
        if not self.n_left and self.on_done is not None:
            self.on_done()

    def release(self) -> None:
        """Drop the fabric's hold on this run (its arrival callback), so that the run's
        arrays (hundreds of MB for an all-to-all) go when the caller drops the run, not at
        the next cyclic garbage collection. The run does not run after this."""
        self.fabric.on_arrival = _arrived_after_release

    def run_events(self, model: str) -> None:
        """Run every transfer to its arrival (or until none can move): on the compiled
        loop where :meth:`_compiled` says so, else on the fabric's SimPy process."""
        if self._compiled(model):
            self._run_compiled()
        else:
            self.start()
            self.env.run()
            self.fabric.close()

    def _compiled(self, model: str) -> bool:
        """Whether this run takes the compiled event loop (:mod:`simcoll.network.kernel`):
        the flow model, with numba installed and not switched off, once the loop is
        compiled or the run is worth compiling it for."""
        return (
            model == "flow"
            and COMPILED
            and isinstance(self.fabric, Fabric)
            and self.fabric.contention
            and self.on_done is None
            and kernel.available()
            and (self.n_transfers >= COMPILE_FROM_TRANSFERS or kernel.warm())
        )

    def _run_compiled(self) -> None:
        fabric = self.fabric
        assert isinstance(fabric, Fabric)
        done = kernel.run_flows(
            pair_of=self.pair_of,
            wire_bytes=self.wire_bytes,
            latency_s=self.latency_s,
            deps_left=np.frombuffer(self.deps_left, dtype=np.int64),
            dependents_ptr=np.frombuffer(self._dependents_ptr, dtype=np.int64),
            dependents=np.frombuffer(self._dependents, dtype=np.int64),
            conn_of=np.frombuffer(self.conn_of, dtype=np.int64),
            conn_order=np.frombuffer(self.conn_order, dtype=np.int64),
            conn_end=np.frombuffer(self.conn_end, dtype=np.int64),
            conn_window=np.frombuffer(self.conn_window, dtype=np.int64),
            pair_links=self.pair_links,
            pair_weights=self.pair_weights,
            capacity_bytes_per_s=fabric.capacity_bytes_per_s,
            issue_s=self.issue_s,
            start_s=self.start_s,
            end_s=self.end_s,
            rate_cap_bytes_per_s=self.rate_cap_bytes_per_s,
        )
        self.deps_left = _ints(done.deps_left)
        fabric.link_busy_s[:] = done.link_busy_s
        fabric.stats.instants = done.instants
        fabric.stats.reshares = done.reshares
        fabric.stats.flow_rate_updates = done.flow_rate_updates
        fabric.stats.rate_computations = done.reshares  # no memo: one per reshare

    def _link_bytes(self) -> FloatArray:
        """Bytes over each fabric link (each link class, on the symmetric path)."""
        return bytes_per_link(self.pair_of, self.wire_bytes, self.pair_links,
                              self.pair_weights, len(self.fabric.link_busy_s))  # fmt: skip


class _Run(FlowRun):
    """One schedule on a topology: its transfers routed, then run as flows."""

    def __init__(
        self,
        topology: nx.DiGraph[str],
        schedule: Schedule,
        nodes: tuple[str, ...],
        *,
        model: str,
        protocol: Protocol | None,
        packet_bytes: int,
        routes: Routes | None = None,
        plan: Plan | None = None,
        finish_heap: bool | None = None,
        router: Router | None = None,
    ) -> None:
        self.s = schedule
        self.plan = plan
        self.protocol = protocol
        self.nodes = nodes
        table = link_table(topology, router)
        self.links = table.links
        routes_given = routes is not None
        if routes is None:
            # A router of this run's own (none given) is dropped once routed: its searches
            # and cached routes (hundreds of MB for an all-to-all) are not needed while it
            # runs. A router given is the caller's to keep, for runs to come.
            routes = self._route(topology, router or Router(topology), table)
        efficiency: float | FloatArray = protocol.efficiency if protocol else 1.0
        if routes.efficiency is not None:
            efficiency = routes.efficiency[routes.pair_of]
        s = schedule
        key = (s.src * s.n_endpoints + s.dst) * (s.n_channels or 1) + s.channel
        _, conn_of = np.unique(key, return_inverse=True)
        n_conn = int(conn_of.max(initial=-1)) + 1
        wire_bytes = s.timed_bytes / efficiency  # pieces one byte apart: the largest
        caps = None
        if s.params.get("paced"):
            caps = paced_rate_caps(
                conn_of=conn_of,
                wire_bytes=wire_bytes,
                paced=multimem_sends(s),
                pair_of=routes.pair_of,
                pair_links=routes.pair_links,
                pair_weights=routes.pair_weights,
                capacity_bytes_per_s=routes.capacity_bytes_per_s,
                sm_bound_s=sm_bound_s(s),
            )
        # A ring's quotient (routes given) has small components and many flows in
        # flight: finish times in a heap pay there (see Fabric); trees' do not.
        super().__init__(
            links=self.links,
            capacity_bytes_per_s=routes.capacity_bytes_per_s,
            pair_of=routes.pair_of,
            pair_links=routes.pair_links,
            pair_weights=routes.pair_weights,
            latency_s=routes.latency_s[routes.pair_of],
            wire_bytes=wire_bytes,
            deps_indptr=s.deps_indptr,
            deps=s.deps,
            conn_of=conn_of.astype(np.int64),
            conn_window=np.full(n_conn, s.max_in_flight, dtype=np.int64),
            model=model,
            packet_bytes=packet_bytes,
            finish_heap=routes_given if finish_heap is None else finish_heap,
            rate_cap_bytes_per_s=caps,
        )
        self.bytes = s.transfer_bytes

    def _route(self, topology: nx.DiGraph[str], router: Router, table: LinkTable) -> Routes:
        s = self.s
        link_index = table.index
        pair = s.src * s.n_endpoints + s.dst
        via_of, vias = self._waypoints()
        pairs, pair_of = np.unique(pair * len(vias) + via_of, return_inverse=True)
        pair_links: list[IntArray] = [_NO_LINKS] * len(pairs)
        latency = np.zeros(len(pairs))
        efficiency = np.ones(len(pairs))
        routed = np.zeros(len(pairs), dtype=bool)
        link_arrays: LinkArrays | None = None  # the table's, if any source is batched
        for group in self._batches(pairs, len(vias)):
            src, dsts = divmod(pairs[group] // len(vias), s.n_endpoints)
            try:
                links, offsets = router.routes_from(
                    self.nodes[int(src[0])], [self.nodes[d] for d in dsts.tolist()]
                )
            except TopologyError:
                continue  # routed one by one below, to name the ranks
            if link_arrays is None:
                link_arrays = table.arrays
            each = np.split(links, offsets[1:-1])
            for p, links_of_pair in zip(group.tolist(), each, strict=True):
                pair_links[p] = links_of_pair
            latency[group], efficiency[group] = batch_costs(
                links, offsets, link_arrays, self.protocol
            )
            routed[group] = True
        facts = table.facts
        for p, key in enumerate(pairs.tolist()):
            if routed[p]:
                continue
            pair_index, via = divmod(key, len(vias))
            src, dst = divmod(pair_index, s.n_endpoints)
            edges = route_pair(router, self.nodes, src, dst, vias[via])
            pair_links[p] = np.array([link_index[e] for e in edges], dtype=np.int64)
            latency[p] = pair_latency_s(topology, edges, src, dst, s, self.nodes,
                                        self.protocol, facts)  # fmt: skip
            endpoint = pair_endpoint(topology, src, dst, s, self.nodes)
            efficiency[p] = pair_efficiency(topology, edges, self.protocol, facts, endpoint)
        capacity = table.capacity_bytes_per_s
        return Routes(
            pair_of=pair_of,
            pair_links=pair_links,
            pair_weights=[None] * len(pair_links),
            latency_s=latency,
            capacity_bytes_per_s=capacity,
            efficiency=efficiency,
        )

    def _batches(self, pairs: IntArray, n_vias: int) -> list[IntArray]:
        """Positions in ``pairs`` routed together: those of one source rank with many
        destinations and no waypoints (an all-to-all's), where one search over arrays
        (:meth:`Router.routes_from`) beats routing each pair."""
        if self.s.n_switches:
            return []
        plain = np.flatnonzero(pairs % n_vias == 0)
        src = pairs[plain] // n_vias // self.s.n_endpoints
        starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]])
        groups = np.split(plain, starts[1:])
        return [group for group in groups if len(group) >= _BATCH_DESTINATIONS]

    def _waypoints(self) -> tuple[IntArray, list[tuple[str, ...]]]:
        """Per transfer, an index into the distinct waypoint lists of the plan (none: 0)."""
        s = self.s
        vias: list[tuple[str, ...]] = [()]
        if self.plan is None or s.n_switches:
            return np.zeros(s.n_transfers, dtype=np.int64), vias
        n_channels = s.n_channels or 1  # a max over every transfer: once, not per connection
        key = (s.src * s.n_endpoints + s.dst) * n_channels + s.channel
        connections, conn_of = np.unique(key, return_inverse=True)
        index: dict[tuple[str, ...], int] = {(): 0}
        conn_via = np.zeros(len(connections), dtype=np.int64)
        for c, k in enumerate(connections.tolist()):
            pair, channel = divmod(k, n_channels)
            src, dst = divmod(pair, s.n_endpoints)
            via = self.plan.waypoints(channel, src, dst)
            if via not in index:
                index[via] = len(vias)
                vias.append(via)
            conn_via[c] = index[via]
        return conn_via[conn_of], vias

    def run(self, model: str) -> SimulationResult:
        self.run_events(model)
        self._raise_if_stuck()
        return SimulationResult(
            schedule=self.s,
            model=model,
            time_s=float(self.end_s.max()) if len(self.end_s) else 0.0,
            issue_s=self.issue_s,
            start_s=self.start_s,
            end_s=self.end_s,
            rank_nodes=self.nodes,
            links=self.links,
            link_bytes=self._link_bytes(),
            link_busy_s=self.fabric.link_busy_s,
            stats=self.fabric.stats,
            protocol=self.protocol.name if self.protocol else None,
        )

    def _raise_if_stuck(self) -> None:
        stuck = np.flatnonzero(np.isnan(self.end_s))
        if not len(stuck):
            return
        s = self.s
        waiting = [int(t) for t in stuck if self.deps_left[t] > 0][:3] or stuck[:3].tolist()
        details = []
        for t in waiting:
            missing = [int(d) for d in s.deps_of(t) if np.isnan(self.end_s[d])]
            details.append(
                f"transfer {t} (rank {int(s.src[t])}->{int(s.dst[t])}, channel "
                f"{int(s.channel[t])}) waits for "
                f"{missing or 'an earlier transfer of its connection'}"
            )
        raise SimulationError(
            f"{s.collective.value}/{s.algorithm} cannot finish: {len(stuck)} of {s.n_transfers} "
            f"transfers never arrive (a dependency cycle or a wait for a transfer that never "
            f"comes); {'; '.join(details)}"
        )


Run = _Run  # what prepare returns; its run(model) is what simulate returns


def _arrived_after_release(flow_ids: list[int]) -> None:
    raise SimulationError(f"{len(flow_ids)} flows arrived for a run already released")


def _invert(indptr: IntArray, indices: IntArray, n: int) -> tuple[array[int], array[int]]:
    """For CSR deps (transfer -> its dependencies), the dependents of each transfer, in
    CSR form: those of ``t`` are ``dependents[ptr[t]:ptr[t + 1]]``, in increasing order."""
    owners = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    order = np.argsort(indices, kind="stable")
    counts = np.bincount(indices, minlength=n)
    ptr = np.concatenate([[0], np.cumsum(counts)])
    return _ints(ptr), _ints(owners[order])


def _ints(values: npt.ArrayLike) -> array[int]:
    """A stdlib array of int64 holding ``values`` (one copy: from numpy's buffer).

    >>> _ints(np.array([3, 1, 2])).tolist()
    [3, 1, 2]
    """
    out = array("q")
    out.frombytes(np.ascontiguousarray(values, dtype=np.int64).data.cast("B"))
    return out


def _floats(values: npt.ArrayLike) -> array[float]:
    """A stdlib array of float64 holding ``values`` (one copy: from numpy's buffer)."""
    out = array("d")
    out.frombytes(np.ascontiguousarray(values, dtype=np.float64).data.cast("B"))
    return out
