"""One clock for many calls: an execution graph of spans and transfers, run as one set of
flows by the engine's event loop.

A workload (a training step) is compute on each GPU and collective calls of many rank
groups, ordered by streams and by what waits for what. Here that is one graph whose nodes
are all flows of the engine (:class:`simcoll.sim.engine.FlowRun`):

- a **span** is a flow over no link that takes a fixed time once everything it waits for
  is done: a compute kernel, a call's launch cost, a wait; it moves no byte and shares
  nothing, so it is the engine's own latency rule (issued when its dependencies have
  arrived, arrived that long after);
- a **call** is a prepared run's transfers (:func:`simcoll.sim.engine.prepare`: routed on
  its group's GPUs, with its protocol and plan), each of its first transfers waiting for
  the node that opens the call; its connections keep their own windows.

:meth:`ExecutionGraph.simulate` runs the whole graph on one fabric, so calls that overlap
in time share every link they cross, max-min fairly, and spans cost no bandwidth. It runs
on the compiled loop (:mod:`simcoll.network.kernel`) where a single schedule would, and
on the fabric's SimPy process otherwise or with :data:`simcoll.sim.engine.COMPILED` off:
the same rules, to the same floats, bit for bit.

>>> from simcoll.algorithms import build_schedule
>>> from simcoll.sim.engine import prepare
>>> from simcoll.topology import ring
>>> topo = ring(4, link_bandwidth_bytes_per_s=100e9, link_latency_s=2e-6)
>>> g = ExecutionGraph(topo)
>>> compute = g.span(10e-6)  # 10 us of compute, then a ring all-gather of 8 MB
>>> gather = g.call(prepare(topo, build_schedule("allgather", "ring", n_ranks=4,
...                                              size_bytes=8_000_000)), after=compute)
>>> done = g.simulate()
>>> round(float(done.end_s[gather.end]) * 1e6, 6)  # 10 us, then 3 x (2 us + 2 MB at 100 GB/s)
76.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np
import numpy.typing as npt

from simcoll.core.errors import ConfigError, SimulationError
from simcoll.network.fabric import FabricStats
from simcoll.sim.engine import FlowRun, Run
from simcoll.sim.routes import link_table
from simcoll.topology import Router

__all__ = ["CallNodes", "ExecutionGraph", "GraphResult"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_NO_LINKS: IntArray = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class CallNodes:
    """Where a call's transfers sit in the graph: nodes ``first .. first + n - 1``, in
    the call's schedule order, and ``end``, the node that arrives with its last one."""

    first: int
    n_transfers: int
    end: int

    @property
    def transfers(self) -> slice:
        """The call's transfers' nodes, as a slice of the result's arrays."""
        return slice(self.first, self.first + self.n_transfers)


@dataclass(frozen=True, eq=False)
class GraphResult:
    """When every node of a graph was issued (its dependencies met), started (its bytes
    moving, or its time running) and ended, and the links' bytes and busy time."""

    issue_s: FloatArray
    start_s: FloatArray
    end_s: FloatArray
    link_bytes: FloatArray
    link_busy_s: FloatArray
    stats: FabricStats
    pair_of: IntArray  # per node: its pair (0: a span, over no link)
    pair_links: list[IntArray]  # per pair: the links it crosses
    wire_bytes: FloatArray  # per node: bytes on the wire (0 for a span)

    @property
    def time_s(self) -> float:
        """When the last node ended (0 for an empty graph)."""
        return float(self.end_s.max()) if len(self.end_s) else 0.0


@dataclass
class _Spans:
    """Consecutive span nodes: their durations and dependencies (flat, with counts)."""

    first: int
    duration_s: list[float]
    deps: list[int]
    n_deps: list[int]


@dataclass
class _Call:
    """A prepared run's transfers, opened by node ``after``."""

    first: int
    run: Run
    after: int


class ExecutionGraph:
    """Spans and calls on one topology, with what each waits for; see the module
    docstring. Nodes are numbered in the order they are added, from 0, and a node may
    only wait for nodes added before it (so a graph has no cycle).

    Parameters
    ----------
    topology
        The graph every call's run was prepared on (its links and bandwidths).
    model
        ``"flow"`` (links shared max-min fairly) or ``"ideal"`` (every flow at its
        route's bottleneck, as if alone).
    router
        The router the calls were prepared with, whose topology's links are read once
        (:func:`~simcoll.sim.routes.link_table`); None reads them here.
    """

    def __init__(
        self, topology: nx.DiGraph[str], *, model: str = "flow", router: Router | None = None
    ) -> None:
        if model not in ("flow", "ideal"):
            raise ConfigError(f"an execution graph runs model 'flow' or 'ideal', not {model!r}")
        self.model = model
        table = link_table(topology, router)
        self.links = table.links
        self.capacity_bytes_per_s = table.capacity_bytes_per_s
        self._parts: list[_Spans | _Call] = []
        self.n_nodes = 0

    def span(self, duration_s: float = 0.0, after: Sequence[int] = ()) -> int:
        """A node that ends ``duration_s`` after every node of ``after`` has ended (at 0
        if none); returns its number. A span of 0 s joins what it waits for."""
        if not (duration_s >= 0 and duration_s < float("inf")):
            raise ConfigError(f"a span takes a finite time >= 0 s, got {duration_s!r}")
        self._check(after)
        part = self._parts[-1] if self._parts else None
        if not isinstance(part, _Spans):
            part = _Spans(self.n_nodes, [], [], [])
            self._parts.append(part)
        part.duration_s.append(float(duration_s))
        part.deps.extend(after)
        part.n_deps.append(len(after))
        self.n_nodes += 1
        return self.n_nodes - 1

    def call(self, run: Run, *, after: int | None = None) -> CallNodes:
        """The transfers of ``run`` (prepared on this graph's topology), each of its
        first transfers (those that wait for no other) waiting for node ``after``."""
        if run.links != self.links:
            raise ConfigError("a call's run was prepared on another topology than the graph's")
        if after is not None:
            self._check([after])
        first = self.n_nodes
        self._parts.append(_Call(first, run, -1 if after is None else after))
        self.n_nodes += run.n_transfers
        sinks = _sinks(run)
        end = self.span(0.0, [first + int(t) for t in sinks] if len(sinks) else
                        ([] if after is None else [after]))  # fmt: skip
        return CallNodes(first, run.n_transfers, end)

    def _check(self, after: Sequence[int]) -> None:
        for node in after:
            if not 0 <= node < self.n_nodes:
                raise ConfigError(f"node {node} is not a node added before this one")

    def simulate(self) -> GraphResult:
        """Run every node to its end, calls sharing the fabric where they overlap.

        Raises
        ------
        SimulationError
            If some node never ends (a call whose own schedule cannot finish).
        """
        flows = self._flows()
        flows.run_events(self.model)
        stuck = np.flatnonzero(np.isnan(flows.end_s))
        if len(stuck):
            raise SimulationError(
                f"the graph cannot finish: {len(stuck)} of {flows.n_transfers} nodes never "
                f"end, the first node {int(stuck[0])}"
            )
        return GraphResult(
            issue_s=flows.issue_s,
            start_s=flows.start_s,
            end_s=flows.end_s,
            link_bytes=flows._link_bytes(),
            link_busy_s=flows.fabric.link_busy_s.copy(),
            stats=flows.fabric.stats,
            pair_of=flows.pair_of,
            pair_links=flows.pair_links,
            wire_bytes=flows.wire_bytes,
        )

    def _flows(self) -> FlowRun:
        """The graph as the engine's arrays: pair 0 is the spans' (no link); every span
        and every call's connection is a connection of its own."""
        n = self.n_nodes
        pair_of = np.zeros(n, dtype=np.int64)
        latency = np.zeros(n)
        wire = np.zeros(n)
        cap = np.full(n, np.inf)  # per node: its call's rate cap (sim.pacing), if any
        n_deps = np.zeros(n, dtype=np.int64)
        dep_parts: list[IntArray] = []
        conn_of = np.zeros(n, dtype=np.int64)
        windows: list[IntArray] = []
        pair_links: list[IntArray] = [_NO_LINKS]
        pair_weights: list[FloatArray | None] = [None]
        n_conn = 0
        for part in self._parts:
            if isinstance(part, _Spans):
                ids = slice(part.first, part.first + len(part.duration_s))
                latency[ids] = part.duration_s
                n_deps[ids] = part.n_deps
                dep_parts.append(np.asarray(part.deps, dtype=np.int64))
                k = len(part.duration_s)
                conn_of[ids] = np.arange(n_conn, n_conn + k)
                windows.append(np.ones(k, dtype=np.int64))
                n_conn += k
                continue
            ids = slice(part.first, part.first + part.run.n_transfers)
            run = part.run
            pair_of[ids] = run.pair_of + len(pair_links)
            pair_links += run.pair_links
            pair_weights += run.pair_weights
            latency[ids] = run.latency_s
            wire[ids] = run.wire_bytes
            if run.rate_cap_bytes_per_s is not None:
                cap[ids] = run.rate_cap_bytes_per_s
            n_deps[ids], own = _call_deps(part)
            dep_parts.append(own)
            conn_of[ids] = np.frombuffer(run.conn_of, dtype=np.int64) + n_conn
            window = np.frombuffer(run.conn_window, dtype=np.int64)
            windows.append(window.copy())
            n_conn += len(window)
        deps_indptr = np.concatenate([[0], np.cumsum(n_deps)]).astype(np.int64)
        deps = np.concatenate([*dep_parts, _NO_LINKS]).astype(np.int64)
        return FlowRun(
            links=self.links,
            capacity_bytes_per_s=self.capacity_bytes_per_s,
            pair_of=pair_of,
            pair_links=pair_links,
            pair_weights=pair_weights,
            latency_s=latency,
            wire_bytes=wire,
            deps_indptr=deps_indptr,
            deps=deps,
            conn_of=conn_of,
            conn_window=np.concatenate([*windows, _NO_LINKS]),
            model=self.model,
            rate_cap_bytes_per_s=cap if np.isfinite(cap).any() else None,
        )


def _call_deps(part: _Call) -> tuple[IntArray, IntArray]:
    """A call's transfers' dependency counts and dependencies (CSR, numbered in the graph):
    its schedule's own, and for each first transfer (none of its own) the opening node."""
    s = part.run.s
    counts = np.diff(s.deps_indptr)
    own = s.deps + part.first
    if part.after < 0:
        return counts, own
    roots = counts == 0
    ptr = s.deps_indptr[:-1] + np.cumsum(roots) - roots  # each root's one slot comes first
    merged = np.empty(len(own) + int(roots.sum()), dtype=np.int64)
    at_root = ptr[roots]
    merged[at_root] = part.after
    rest = np.ones(len(merged), dtype=bool)
    rest[at_root] = False
    merged[rest] = own
    return counts + roots, merged


def _sinks(run: Run) -> IntArray:
    """The transfers no other transfer of ``run`` waits for: the call ends with the last
    of them."""
    s = run.s
    waited = np.zeros(s.n_transfers, dtype=bool)
    waited[s.deps] = True
    return np.flatnonzero(~waited)
