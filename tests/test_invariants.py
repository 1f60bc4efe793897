"""Physical invariants of the simulator, checked over random inputs (issue 8).

Every expected bound is derived here from the inputs alone: the topology's links, the
schedule's transfers and the meaning of the collective; never from an earlier output of
simcoll. Routes come from :class:`simcoll.topology.Router` (routing is an input of the
physics, not a result of the simulation).

The inputs are random: a topology from one of the builders (single boxes, PCIe trees,
fat-trees, rail-optimized, dragonfly, torus), bandwidths 1e8..1e12 B/s and latencies
0..10 us, optionally different on every directed link; 1..12 ranks (not only powers of
two) on at most as many GPUs; any collective and any algorithm the topology can run; any
size up to 1 GiB (sizes that do not split are rejected); random channels, chunks, window
and root. The invariants:

1. no link ever carries more than its bandwidth, at any instant or on average;
2. bytes are conserved: sent = received, link bytes = bytes x hops of every route, flow
   conservation at every node, and the fluid really moves those bytes;
3. no result beats a lower bound: per link, per rank (injection), across a cut, along a
   chain of dependencies;
4. results are deterministic to the last bit, in this process and in spawned workers;
5. times are finite, non-negative and ordered (issue <= start <= end), at extremes too.
"""

from __future__ import annotations

import graphlib
import inspect
import itertools
import math
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any
from unittest import mock

import networkx as nx
import numpy as np
import numpy.typing as npt
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from simcoll.algorithms import ALGORITHMS, algorithm_names, build_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, ScheduleError
from simcoll.core.schedule import Schedule
from simcoll.network.clock import TICK_S, on_grid
from simcoll.network.fabric import Fabric
from simcoll.plan.placement import switch_endpoints
from simcoll.prediction.choices import algorithm_params
from simcoll.prediction.session import Session
from simcoll.sim import engine
from simcoll.sim.engine import SimulationResult, simulate
from simcoll.topology import (
    NodeKind,
    Router,
    dragonfly,
    fat_tree,
    full_mesh,
    hybrid_cube_mesh,
    nvswitch_node,
    pcie_tree,
    rail_optimized,
    ring,
    switch_star,
    torus,
)

FloatArray = npt.NDArray[np.float64]
Edge = tuple[str, str]

RTOL = 1e-9  # float rounding of the simulator's clock and rates, never physics
# The fabric takes events within 1e-12 of the clock (relative) as one instant, and clock
# values are floats: a flow may join or leave a link up to CLOCK_RTOL * time_s off.
CLOCK_RTOL = 1e-12

BUILDERS = {
    f.__name__: f
    for f in (
        ring,
        switch_star,
        full_mesh,
        torus,
        nvswitch_node,
        pcie_tree,
        hybrid_cube_mesh,
        fat_tree,
        rail_optimized,
        dragonfly,
    )
}

# -- random cases: plain data, so hypothesis prints them and workers can rebuild them -----


@dataclass(frozen=True)
class TopologySpec:
    """A builder call, then optional per-link changes (in the graph's edge order)."""

    builder: str
    params: dict[str, Any]
    bandwidth_scale: tuple[float, ...] = ()  # multiplies each link's bandwidth
    latency_s: tuple[float, ...] = ()  # replaces each link's latency

    def build(self) -> nx.DiGraph:
        g = BUILDERS[self.builder](**self.params)
        for i, edge in enumerate(g.edges):
            if self.bandwidth_scale:
                g.edges[edge]["bandwidth_bytes_per_s"] *= self.bandwidth_scale[i]
            if self.latency_s:
                g.edges[edge]["latency_s"] = self.latency_s[i]
        return g


@dataclass(frozen=True)
class CallSpec:
    """One collective call: what ``build_schedule`` is given."""

    collective: str
    algorithm: str
    n_ranks: int
    size_bytes: int
    params: dict[str, int] = field(default_factory=dict)

    def schedule(self) -> Schedule:
        return build_schedule(
            self.collective,
            self.algorithm,
            n_ranks=self.n_ranks,
            size_bytes=self.size_bytes,
            **self.params,
        )


@dataclass(frozen=True)
class Case:
    topology: TopologySpec
    call: CallSpec


@dataclass(frozen=True)
class SessionCase:
    """Collectives started together on one session, each on its own stream."""

    topology: TopologySpec
    calls: tuple[tuple[tuple[int, ...], CallSpec], ...]  # (global ranks of the group, call)


def count(low: int, high: int) -> st.SearchStrategy[int]:
    """Uniform over low..high (``st.integers`` favours small values: mostly 1-rank runs)."""
    return st.sampled_from(range(low, high + 1))


BANDWIDTH = st.floats(8.0, 12.0).map(lambda e: 10.0**e)  # 1e8..1e12 B/s, log-uniform
LATENCY = count(0, 3).flatmap(  # 0 s a quarter of the time, else 1e-9..1e-5 s, log-uniform
    lambda k: st.floats(-9.0, -5.0).map(lambda e: 10.0**e) if k else st.just(0.0)
)
SCALES = st.sampled_from([0.25, 0.5, 1.0, 2.0, 4.0])


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def builder_calls(draw: st.DrawFn, latency: st.SearchStrategy[float]) -> tuple[str, dict]:
    """A builder name and valid parameters for a small instance of it."""
    name = draw(st.sampled_from(sorted(BUILDERS)))
    bw, lat = (lambda: draw(BANDWIDTH)), (lambda: draw(latency))
    if name in {"ring", "switch_star", "full_mesh"}:
        p = {
            "n_gpus": draw(count(1, 12)),
            "link_bandwidth_bytes_per_s": bw(),
            "link_latency_s": lat(),
        }
    elif name == "torus":
        p = {
            "dim_x": draw(count(1, 4)),
            "dim_y": draw(count(1, 3)),
            "link_bandwidth_bytes_per_s": bw(),
            "link_latency_s": lat(),
        }
    elif name == "nvswitch_node":
        p = {
            "n_gpus": draw(count(1, 12)),
            "nvlinks_per_gpu": draw(count(1, 18)),
            "nvlink_bandwidth_bytes_per_s": bw(),
            "nvlink_latency_s": lat(),
            "nvls": draw(st.booleans()),
        }
    elif name == "pcie_tree":
        sockets, per_socket = draw(count(1, 2)), draw(count(1, 4))
        p = {
            "n_gpus": sockets * per_socket,
            "n_sockets": sockets,
            "gpus_per_switch": draw(st.sampled_from([0, *divisors(per_socket)])),
            "pcie_bandwidth_bytes_per_s": bw(),
            "pcie_latency_s": lat(),
            "cpu_link_bandwidth_bytes_per_s": bw(),
            "cpu_link_latency_s": lat(),
            "p2p": draw(st.booleans()),
        }
    elif name == "hybrid_cube_mesh":
        p = {
            "nvlink_bandwidth_bytes_per_s": bw(),
            "nvlink_latency_s": lat(),
            "pcie_bandwidth_bytes_per_s": bw(),
            "pcie_latency_s": lat(),
            "cpu_link_bandwidth_bytes_per_s": bw(),
            "cpu_link_latency_s": lat(),
        }
    elif name in {"fat_tree", "rail_optimized"}:
        gpus_per_node = draw(count(1, 4))
        p = {
            "n_nodes": draw(count(1, 3)),
            "gpus_per_node": gpus_per_node,
            "nvlinks_per_gpu": draw(count(1, 4)),
            "nvlink_bandwidth_bytes_per_s": bw(),
            "nvlink_latency_s": lat(),
            "nvls": draw(st.booleans()),
            "nics_per_node": draw(st.sampled_from(divisors(gpus_per_node))),
            "nic_bandwidth_bytes_per_s": bw(),
            "nic_latency_s": lat(),
            "pcie_bandwidth_bytes_per_s": bw(),
            "pcie_latency_s": lat(),
            "oversubscription": draw(st.sampled_from([1.0, 2.0])),
            "fabric_latency_s": lat(),
            "sharp": draw(st.booleans()),
        }
        if name == "fat_tree":
            p["leaf_down_ports"] = draw(count(1, 4))
        else:
            p["rail_nodes_per_leaf"] = draw(count(1, 3))
    else:
        p = {
            "routers_per_group": draw(count(1, 3)),
            "gpus_per_router": draw(count(1, 2)),
            "global_links_per_router": draw(count(1, 2)),
            "n_groups": draw(count(1, 3)),
            "injection_bandwidth_bytes_per_s": bw(),
            "injection_latency_s": lat(),
            "local_bandwidth_bytes_per_s": bw(),
            "local_latency_s": lat(),
            "global_bandwidth_bytes_per_s": bw(),
            "global_latency_s": lat(),
        }
    return name, p


@st.composite
def topology_specs(
    draw: st.DrawFn, latency: st.SearchStrategy[float] = LATENCY, per_link_latency: bool = True
) -> TopologySpec:
    """A builder call, with (sometimes) different bandwidths and latencies on every link."""
    name, params = draw(builder_calls(latency))
    try:
        n_links = BUILDERS[name](**params).number_of_edges()
    except ConfigError:
        reject()
    per_link = st.lists(SCALES, min_size=n_links, max_size=n_links).map(tuple)
    scale = draw(per_link) if draw(st.booleans()) else ()
    lat: tuple[float, ...] = ()
    if per_link_latency and draw(st.booleans()):
        lat = tuple(draw(st.lists(latency, min_size=n_links, max_size=n_links)))
    return TopologySpec(name, params, scale, lat)


def n_gpus_of(spec: TopologySpec) -> int:
    g = BUILDERS[spec.builder](**spec.params)
    return sum(1 for v in g if g.nodes[v]["kind"] is NodeKind.GPU)


SIZES = count(0, 30).flatmap(lambda e: st.integers(2**e // 2, 2**e))  # 0..1 GiB, log-uniform


@st.composite
def call_specs(draw: st.DrawFn, n_ranks: int, sizes: st.SearchStrategy[int] = SIZES) -> CallSpec:
    """Any collective, any of its algorithms, a size, and some of the algorithm's knobs."""
    collective = draw(st.sampled_from(list(Collective)))
    algorithm = draw(st.sampled_from(algorithm_names(collective)))
    knobs = {
        "root": count(0, n_ranks - 1),
        "n_channels": count(1, 4),
        "n_chunks": count(1, 4),
        "max_in_flight": count(1, 8),
        "gpus_per_node": st.sampled_from(divisors(n_ranks)),
        "ranks_per_switch": st.sampled_from(divisors(n_ranks)),
    }
    accepted = inspect.signature(ALGORITHMS[collective, algorithm]).parameters
    params = {k: draw(s) for k, s in knobs.items() if k in accepted and draw(st.booleans())}
    size = draw(sizes)
    if draw(count(0, 7)):
        size -= size % n_ranks  # most sizes split into blocks; some may not
    return CallSpec(collective.value, algorithm, n_ranks, size, params)


@st.composite
def cases(
    draw: st.DrawFn,
    latency: st.SearchStrategy[float] = LATENCY,
    sizes: st.SearchStrategy[int] = SIZES,
    per_link_latency: bool = True,
) -> Case:
    topology = draw(topology_specs(latency, per_link_latency))
    most = min(12, n_gpus_of(topology))
    n_ranks = draw(count(1, most) | st.just(most))  # often every GPU, as real jobs do
    return Case(topology, draw(call_specs(n_ranks, sizes)))


@st.composite
def session_cases(draw: st.DrawFn) -> SessionCase:
    """Two collectives on random (possibly overlapping) groups of GPUs of one topology."""
    topology = draw(topology_specs())
    n_gpus = n_gpus_of(topology)
    calls = []
    for _ in range(2):
        gpus = draw(st.permutations(range(n_gpus)))
        group = tuple(gpus[: draw(count(1, min(12, n_gpus)))])
        calls.append((group, draw(call_specs(len(group)))))
    return SessionCase(topology, tuple(calls))


# -- running a case ----------------------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    topology: nx.DiGraph
    schedule: Schedule
    nodes: tuple[str, ...]  # node of each endpoint: ranks, then in-network switches
    result: SimulationResult


def gpu_of_rank(topology: nx.DiGraph) -> dict[int, str]:
    return {
        topology.nodes[v]["rank"]: v for v in topology if topology.nodes[v]["kind"] is NodeKind.GPU
    }


def endpoint_nodes(topology: nx.DiGraph, ranks: tuple[int, ...], schedule: Schedule) -> tuple:
    """Rank i of the call on the GPU of global rank ranks[i]; then its switch endpoints."""
    gpu = gpu_of_rank(topology)
    nodes = tuple(gpu[r] for r in ranks)
    return nodes + switch_endpoints(topology, nodes, schedule)


def run(case: Case) -> Ran:
    """Simulate a case; inputs that cannot run (a size that does not split, an in-network
    algorithm without a reducing switch, a parameter that does not fit) are rejected."""
    topology = case.topology.build()
    try:
        schedule = case.call.schedule()
        nodes = endpoint_nodes(topology, tuple(range(schedule.n_ranks)), schedule)
    except (ConfigError, ScheduleError):
        reject()
    result = simulate(topology, schedule, model="flow")
    assert result.rank_nodes == nodes
    return Ran(topology, schedule, nodes, result)


def outputs(case: Case) -> dict[str, FloatArray]:
    """What determinism compares; top level so that a spawned worker can run it."""
    r = simulate(case.topology.build(), case.call.schedule(), model="flow")
    return {
        "time_s": np.array([r.time_s]),
        "issue_s": r.issue_s,
        "start_s": r.start_s,
        "end_s": r.end_s,
        "link_bytes": r.link_bytes,
        "link_busy_s": r.link_busy_s,
    }


# -- the fabric probe: link loads after every rate recomputation -------------------------


@dataclass
class Sample:
    """Load of every link of one fabric from ``time_s`` until the next sample."""

    fabric: Fabric
    time_s: float
    load_bytes_per_s: FloatArray


def link_load(fabric: Fabric) -> FloatArray:
    """Sum over flows on each link of rate x weight (how much of the link the flow uses)."""
    load = np.zeros(len(fabric.capacity_bytes_per_s))
    for slot in sorted(set().union(*fabric._on_link.values())):
        weights = fabric._weights[slot]
        load[fabric._links[slot]] += fabric._rate[slot] * (1.0 if weights is None else weights)
    return load


@contextmanager
def probe() -> Iterator[list[Sample]]:
    """Record every fabric's link loads after each of its rate recomputations.

    Rates change only in ``Fabric._reshare``, and every step that adds or removes a flow
    on a link calls it, so the load is constant from one sample to the next. Runs take
    the reference fabric meanwhile (the compiled loop, which ``tests/network/
    test_kernel.py`` holds to it bit for bit, has no such hook).
    """
    samples: list[Sample] = []
    reshare = Fabric._reshare

    def reshare_and_record(fabric: Fabric, changed: list[int], joined: list[int]) -> None:
        reshare(fabric, changed, joined)
        samples.append(Sample(fabric, fabric.env.now, link_load(fabric)))

    with (
        mock.patch.object(Fabric, "_reshare", reshare_and_record),
        mock.patch.object(engine, "COMPILED", False),
    ):
        yield samples


def assert_within_capacity(samples: list[Sample]) -> None:
    for s in samples:
        capacity = s.fabric.capacity_bytes_per_s
        over = np.flatnonzero(s.load_bytes_per_s > capacity * (1 + RTOL))
        assert not len(over), (
            f"at t={s.time_s!r} link {over[0]} carries {s.load_bytes_per_s[over[0]]!r} B/s "
            f"> its {capacity[over[0]]!r} B/s"
        )


def assert_carried(
    samples: list[Sample], routed: FloatArray, bw: FloatArray, n_flows: FloatArray, time_s: float
) -> None:
    """The load of each link integrated over time is the bytes routed over it."""
    carried = carried_bytes(samples, len(routed))
    slack = RTOL * routed + clock_slack_bytes(bw, n_flows, time_s)
    off = np.flatnonzero(np.abs(carried - routed) > slack)
    assert not len(off), f"link {off[0]} carried {carried[off[0]]!r} B, routed {routed[off[0]]!r}"


def carried_bytes(samples: list[Sample], n_links: int) -> FloatArray:
    """Integral of each link's load over time: the bytes the fluid actually moved."""
    total = np.zeros(n_links)
    if samples:
        assert not samples[-1].load_bytes_per_s.any(), "flows still in flight at the end"
    for now, nxt in itertools.pairwise(samples):
        total += now.load_bytes_per_s * (nxt.time_s - now.time_s)
    return total


# -- facts derived from the inputs -------------------------------------------------------


def transfer_bytes(schedule: Schedule) -> FloatArray:
    """Bytes of each transfer: the sizes of its pieces, added up here."""
    piece = schedule.piece_bytes.tolist()
    return _summed(schedule, piece)


def timed_bytes(schedule: Schedule) -> FloatArray:
    """Bytes each transfer puts on its links: its pieces' sizes, except that pieces one
    byte apart, the smallest of at least 1,000 B, all count as the largest (the engine's
    documented convention, so that every path times them alike)."""
    piece = schedule.piece_bytes.tolist()
    if piece and max(piece) - min(piece) == 1 and min(piece) >= 1000:
        piece = [max(piece)] * len(piece)
    return _summed(schedule, piece)


def _summed(schedule: Schedule, piece: list[int]) -> FloatArray:
    return np.array(
        [
            sum(piece[p] for p in schedule.pieces_of(t).tolist())
            for t in range(schedule.n_transfers)
        ],
        dtype=np.float64,
    )


@dataclass(frozen=True)
class Paths:
    """Per transfer: its route, route latency and bottleneck bandwidth."""

    routes: list[tuple[Edge, ...]]
    latency_s: FloatArray
    bottleneck_bytes_per_s: FloatArray


def paths(topology: nx.DiGraph, nodes: tuple[str, ...], schedule: Schedule) -> Paths:
    router, cache = Router(topology), {}
    routes, latency, bottleneck = [], [], []
    for src, dst in zip(schedule.src.tolist(), schedule.dst.tolist(), strict=True):
        if (src, dst) not in cache:
            route = router.route(nodes[src], nodes[dst])
            edges = [topology.edges[e] for e in route]
            cache[src, dst] = (
                route,
                sum(e["latency_s"] for e in edges),
                min((e["bandwidth_bytes_per_s"] for e in edges), default=math.inf),
            )
        route, lat, bw = cache[src, dst]
        routes.append(route)
        latency.append(lat)
        bottleneck.append(bw)
    return Paths(routes, np.array(latency), np.array(bottleneck))


def flows_per_link(topology: nx.DiGraph, routes: list, nbytes: FloatArray) -> FloatArray:
    """How many transfers with bytes to move cross each link."""
    return routed_link_bytes(topology, routes, (nbytes > 0).astype(np.float64))


def routed_link_bytes(topology: nx.DiGraph, routes: list, nbytes: FloatArray) -> FloatArray:
    """Bytes over each link (graph edge order): every transfer's bytes on every hop."""
    index = {e: i for i, e in enumerate(topology.edges)}
    total = np.zeros(topology.number_of_edges())
    for route, b in zip(routes, nbytes.tolist(), strict=True):
        for e in route:
            total[index[e]] += b
    return total


def bandwidths(topology: nx.DiGraph) -> FloatArray:
    return np.array([topology.edges[e]["bandwidth_bytes_per_s"] for e in topology.edges])


def earliest_times(schedule: Schedule, p: Paths, nbytes: FloatArray) -> tuple[FloatArray, ...]:
    """Earliest issue, start and end of every transfer that the engine's rules allow.

    The rules (:mod:`simcoll.core.schedule`): a transfer is issued after its dependencies
    arrive, after the previous transfer of its connection (same src, dst, channel) is
    issued, and after the transfer ``max_in_flight`` places before it in the connection
    arrives (at most that many in flight); it starts moving bytes after its route latency
    and after the previous transfer of its connection has arrived (bytes go on the wire
    one transfer after another); it needs at least bytes / bottleneck bandwidth of its
    route to move them (no link gives it more than its capacity). So, over the graph of
    dependencies and connection order:

        issue >= max(end of deps, issue of previous, end of the one a window back)
        start >= max(issue + route latency, end of previous)
        end   >= start + bytes / bottleneck
    """
    n, window = schedule.n_transfers, schedule.max_in_flight
    connections: dict[tuple[int, int, int], list[int]] = {}
    for t in range(n):
        key = (int(schedule.src[t]), int(schedule.dst[t]), int(schedule.channel[t]))
        connections.setdefault(key, []).append(t)
    previous, window_back = [None] * n, [None] * n
    for order in connections.values():
        for k, t in enumerate(order):
            previous[t] = order[k - 1] if k else None
            window_back[t] = order[k - window] if k >= window else None
    before = {t: [int(d) for d in schedule.deps_of(t)] for t in range(n)}
    for t in range(n):
        before[t] += [u for u in (previous[t], window_back[t]) if u is not None]
    issue, start, end = np.zeros(n), np.zeros(n), np.zeros(n)
    duration = np.divide(nbytes, p.bottleneck_bytes_per_s)
    for t in graphlib.TopologicalSorter(before).static_order():
        issue[t] = max([end[d] for d in schedule.deps_of(t).tolist()], default=0.0)
        if previous[t] is not None:
            issue[t] = max(issue[t], issue[previous[t]])
        if window_back[t] is not None:
            issue[t] = max(issue[t], end[window_back[t]])
        start[t] = issue[t] + p.latency_s[t]
        if previous[t] is not None:
            start[t] = max(start[t], end[previous[t]])
        end[t] = start[t] + duration[t]
    return issue, start, end


def must_cross(call: Schedule, side: set[int]) -> tuple[float, float]:
    """Bytes the collective's meaning forces from ``side`` to the other ranks, and back.

    With S = ``side``, S' the rest, n ranks and size M (nccl-tests convention):

    - all-gather: every block (M/n) of S must reach S' at least once: |S| M/n one way,
      |S'| M/n the other;
    - all-to-all: every (s, d) block (M/n) is distinct data: |S| |S'| M/n each way;
    - reduce-scatter: the block of each rank of S' needs S's contribution, which S may
      pre-reduce to one block: |S'| M/n one way, |S| M/n the other;
    - all-reduce: each side needs the other's contribution, at least one reduced buffer
      of M bytes each way;
    - broadcast (scatter): the root's side sends M (M/n per rank of the other side) over;
      reduce (gather): the other side sends M (M/n per rank of it) to the root's side;
    - send/recv: rank r's block (M) goes to rank r + 1 mod n.
    """
    n, size, root = call.n_ranks, float(call.size_bytes), call.root
    s, other = len(side), n - len(side)
    block = size / n
    c = call.collective
    if c is Collective.ALLGATHER:
        return s * block, other * block
    if c is Collective.ALLTOALL:
        return s * other * block, s * other * block
    if c is Collective.REDUCESCATTER:
        return other * block, s * block
    if c is Collective.ALLREDUCE:
        return size, size
    if c is Collective.SENDRECV:
        out = sum(1 for r in range(n) if r in side and (r + 1) % n not in side)
        back = sum(1 for r in range(n) if r not in side and (r + 1) % n in side)
        return out * size, back * size
    away = other if root in side else s
    one_way = {
        Collective.BROADCAST: (size, 0.0),
        Collective.SCATTER: (away * block, 0.0),
        Collective.REDUCE: (0.0, size),
        Collective.GATHER: (0.0, away * block),
    }[c]
    return one_way if root in side else one_way[::-1]


def max_flow_bytes_per_s(topology: nx.DiGraph, sources: list[str], sinks: list[str]) -> float:
    """The min-cut capacity from GPU set to GPU set (any node may forward: an upper bound).

    Capacities are rounded up to whole bytes/s for networkx's exact integer max-flow.
    """
    g = nx.DiGraph()
    for u, v, bw in topology.edges(data="bandwidth_bytes_per_s"):
        g.add_edge(u, v, capacity=math.ceil(bw))
    for v in sources:
        g.add_edge("<source>", v)  # no capacity: infinite
    for v in sinks:
        g.add_edge(v, "<sink>")
    return float(nx.maximum_flow_value(g, "<source>", "<sink>"))


# -- checks shared by the tests ----------------------------------------------------------


def assert_no_earlier_than_the_rules_allow(ran: Ran, p: Paths, nbytes: FloatArray) -> FloatArray:
    """Each transfer is issued, starts and arrives no earlier than :func:`earliest_times`;
    returns the earliest arrivals."""
    r = ran.result
    issue, start, end = earliest_times(ran.schedule, p, nbytes)
    slack = RTOL * r.time_s
    assert np.all(r.issue_s >= issue - slack), "issued before the rules allow"
    assert np.all(r.start_s >= start - slack), "started before the rules allow"
    assert np.all(r.end_s >= end - slack), "arrived before the rules allow"
    return end


def assert_times_valid(issue: FloatArray, start: FloatArray, end: FloatArray, time_s: float):
    for name, a in (("issue_s", issue), ("start_s", start), ("end_s", end)):
        assert np.all(np.isfinite(a)), f"{name} has NaN or inf"
        assert np.all(a >= 0), f"{name} negative: {a.min()!r}"
    assert np.all(start >= issue), f"starts before issue: {np.flatnonzero(start < issue)[:5]}"
    assert np.all(end >= start), f"ends before start: {np.flatnonzero(end < start)[:5]}"
    assert math.isfinite(time_s)
    assert time_s == (end.max() if len(end) else 0.0)


def clock_slack_bytes(bw: FloatArray, n_flows: FloatArray, time_s: float) -> FloatArray:
    """Bytes a link may seem to move beyond exact arithmetic: each flow on it may join
    and leave ``CLOCK_RTOL * time_s`` early or late (one instant, float clock), and a few
    ticks of the clock's grid late (its time rounded up to a tick, an instant two ticks
    wide: simcoll.network.clock), at most at the link's bandwidth. Tiny next to any real
    transfer; it matters for a byte or two moving in a picosecond late in a run."""
    return bw * 2 * n_flows * (CLOCK_RTOL * time_s + 3 * TICK_S)


def assert_link_accounting(
    link_bytes: FloatArray, busy_s: FloatArray, bw: FloatArray, time_s: float, n_flows: FloatArray
) -> None:
    """Over a link busy for T seconds no more than bandwidth x T bytes can pass."""
    assert np.all(busy_s >= 0)
    assert np.all(busy_s <= time_s * (1 + RTOL))
    allowed = bw * busy_s * (1 + RTOL) + clock_slack_bytes(bw, n_flows, time_s)
    over = np.flatnonzero(link_bytes > allowed)
    assert not len(over), (
        f"link {over[0]}: {link_bytes[over[0]]!r} B in {busy_s[over[0]]!r} s at {bw[over[0]]!r} B/s"
    )


# -- 1. no link carries more than its bandwidth ------------------------------------------


@settings(max_examples=300, deadline=None, database=None)
@given(cases())
def test_no_link_ever_carries_more_than_its_bandwidth(case: Case) -> None:
    """After every rate recomputation, the rates x weights of the flows on a link add up
    to no more than its capacity; over the run, a link's bytes fit in its busy time at
    its bandwidth, and it is busy no longer than the run."""
    with probe() as samples:
        ran = run(case)
    r, topology = ran.result, ran.topology
    p = paths(topology, ran.nodes, ran.schedule)
    n_flows = flows_per_link(topology, p.routes, transfer_bytes(ran.schedule))
    assert_within_capacity(samples)
    assert_link_accounting(r.link_bytes, r.link_busy_s, bandwidths(topology), r.time_s, n_flows)
    assert_times_valid(r.issue_s, r.start_s, r.end_s, r.time_s)


@settings(max_examples=200, deadline=None, database=None)
@given(session_cases())
def test_concurrent_collectives_share_links_within_their_bandwidth(case: SessionCase) -> None:
    """Two collectives on different streams start together and share the fabric: no link
    is ever oversubscribed, each link carries exactly both calls' routed bytes, and the
    run lasts at least as long as the busiest link needs for both calls' bytes."""
    topology = case.topology.build()
    # the links alone, and each call's schedule as built here (no plan, no protocol)
    session = Session(topology, model="flow", protocol=None, plan="rank", calibration=None)
    routed = np.zeros(topology.number_of_edges())
    n_flows = np.zeros(topology.number_of_edges())
    try:
        for i, (group, call) in enumerate(case.calls):
            c = Collective.parse(call.collective)
            fn = ALGORITHMS[c, call.algorithm]
            pieces = {"n_chunks": 1} if "n_chunks" in inspect.signature(fn).parameters else {}
            # as a session builds it: one piece unless given, the servers from the topology
            params = algorithm_params(call.algorithm, c, pieces | call.params, topology,
                                      len(group))  # fmt: skip
            schedule = replace(call, params=params).schedule()
            nodes = endpoint_nodes(topology, group, schedule)
            session.collective(
                call.collective,
                call.size_bytes,
                group,
                algorithm=call.algorithm,
                params=params,
                stream=f"stream{i}",
            )
            p = paths(topology, nodes, schedule)
            routed += routed_link_bytes(topology, p.routes, timed_bytes(schedule))
            n_flows += flows_per_link(topology, p.routes, timed_bytes(schedule))
    except (ConfigError, ScheduleError):
        reject()
    with probe() as samples:  # the calls were decided (each run alone) above: only the graph
        timeline = session.run(load_bins=0, every_call_in_detail=True)
    bw = bandwidths(topology)
    assert_within_capacity(samples)
    time_s = timeline.time_s
    assert_link_accounting(timeline.link_bytes, timeline.link_busy_s, bw, time_s, n_flows)
    np.testing.assert_allclose(timeline.link_bytes, routed, rtol=1e-12)
    assert_carried(samples, routed, bw, n_flows, time_s)
    assert timeline.time_s >= np.max(routed / bw, initial=0.0) * (1 - RTOL)
    for batch in timeline.transfers:
        assert np.all(np.isfinite(batch.start_s))
        assert np.all(batch.start_s >= 0)
        assert np.all(batch.end_s >= batch.start_s)
        assert np.all(batch.end_s <= timeline.time_s)


# -- 2. bytes are conserved --------------------------------------------------------------


@settings(max_examples=300, deadline=None, database=None)
@given(cases())
def test_bytes_sent_equal_bytes_received_and_routed(case: Case) -> None:
    """Conservation, with every expected number derived here from the schedule's pieces:

    - each rank sends and receives the bytes of its transfers; all ranks together
      send exactly what they receive;
    - each link carries the bytes of every transfer routed over it (bytes x hops);
    - at every node, bytes in - bytes out = bytes its endpoints receive - send (a switch
      or a forwarding GPU keeps nothing);
    - the fluid really moves them: each link's load integrated over time is its bytes.
    """
    with probe() as samples:
        ran = run(case)
    s, r, topology = ran.schedule, ran.result, ran.topology
    nbytes = transfer_bytes(s)
    sent = np.bincount(s.src, weights=nbytes, minlength=s.n_endpoints)
    received = np.bincount(s.dst, weights=nbytes, minlength=s.n_endpoints)
    assert sent.sum() == received.sum() == nbytes.sum()
    np.testing.assert_array_equal(r.bytes_sent_per_rank, sent)
    np.testing.assert_array_equal(r.bytes_received_per_rank, received)

    routes = paths(topology, ran.nodes, s).routes
    timed = timed_bytes(s)  # what the links carry: pieces one byte apart as the largest
    routed = routed_link_bytes(topology, routes, timed)
    assert r.links == tuple(topology.edges)
    np.testing.assert_allclose(r.link_bytes, routed, rtol=1e-12, atol=0)

    net_in = dict.fromkeys(topology, 0.0)
    for (u, v), b in zip(topology.edges, routed.tolist(), strict=True):
        net_in[v] += b
        net_in[u] -= b
    timed_sent = np.bincount(s.src, weights=timed, minlength=s.n_endpoints)
    timed_received = np.bincount(s.dst, weights=timed, minlength=s.n_endpoints)
    for e, node in enumerate(ran.nodes):
        net_in[node] -= timed_received[e] - timed_sent[e]
    scale = max(timed.sum(), 1.0) * max(len(topology), 1)
    assert max(abs(x) for x in net_in.values()) <= 1e-12 * scale

    n_flows = flows_per_link(topology, routes, timed)
    assert_carried(samples, routed, bandwidths(topology), n_flows, r.time_s)


# -- 3. never faster than the lower bounds -----------------------------------------------


def min_positive_latency(latency_s: FloatArray, nbytes: FloatArray, mask: npt.NDArray) -> float:
    moving = mask & (nbytes > 0)
    return float(latency_s[moving].min()) if moving.any() else 0.0


@settings(max_examples=400, deadline=None, database=None)
@given(cases(), st.data())
def test_never_faster_than_lower_bounds(case: Case, data: st.DataObject) -> None:
    """The run takes at least as long as each of these, derived from the inputs:

    (link) every link l: no byte moves before the smallest route latency of the
    transfers crossing it, then its routed bytes need bytes / bandwidth;
    (injection) every endpoint: the bytes it sends leave through its node's out-links
    (their bandwidths added up), after the smallest latency of its routes; the same for
    the bytes it receives through the in-links;
    (cut) for a split of the ranks into S and S', the bytes the collective's meaning
    forces across (:func:`must_cross`) pass the minimum cut between the two sets of GPUs
    no faster than its capacity (max-flow = min-cut; switches may sit on either side);
    (chain) every transfer arrives no earlier than :func:`earliest_times` allows.
    """
    ran = run(case)
    s, r, topology = ran.schedule, ran.result, ran.topology
    nbytes, p = transfer_bytes(s), paths(topology, ran.nodes, s)
    bw = bandwidths(topology)
    floor = r.time_s * (1 + RTOL)  # every bound must be <= this

    index = {e: i for i, e in enumerate(topology.edges)}
    link_lat = np.full(len(bw), math.inf)
    for route, lat, b in zip(p.routes, p.latency_s.tolist(), nbytes.tolist(), strict=True):
        for e in route:
            if b > 0:
                link_lat[index[e]] = min(link_lat[index[e]], lat)
    routed = routed_link_bytes(topology, p.routes, nbytes)
    busy = routed > 0
    assert np.all(np.where(busy, link_lat, 0.0) + routed / bw <= floor), "link bound"

    for e, node in enumerate(ran.nodes):
        for mine, edges in (
            (s.src == e, topology.out_edges(node)),
            (s.dst == e, topology.in_edges(node)),
        ):
            total = nbytes[mine].sum()
            if total:
                capacity = sum(topology.edges[x]["bandwidth_bytes_per_s"] for x in edges)
                bound = min_positive_latency(p.latency_s, nbytes, mine) + total / capacity
                assert bound <= floor, f"injection bound of endpoint {e} at {node}"

    n = s.n_ranks
    if n >= 2:
        random_side = data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n - 1))
        for side in (set(range(n // 2)), random_side):
            there = [ran.nodes[i] for i in range(n) if i not in side]
            here = [ran.nodes[i] for i in side]
            out, back = must_cross(s, side)
            for need, a, b in ((out, here, there), (back, there, here)):
                if need:
                    capacity = max_flow_bytes_per_s(topology, a, b)
                    assert capacity > 0
                    assert need / capacity <= floor, f"cut bound {side}: {need} B / {capacity}"

    assert_no_earlier_than_the_rules_allow(ran, p, nbytes)
    assert_times_valid(r.issue_s, r.start_s, r.end_s, r.time_s)


# -- 4. determinism ----------------------------------------------------------------------


def assert_identical(a: dict[str, FloatArray], b: dict[str, FloatArray]) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        assert np.array_equal(value, b[key], equal_nan=True), key


@settings(max_examples=300, deadline=None, database=None)
@given(cases())
def test_same_inputs_give_bit_identical_results(case: Case) -> None:
    """Two runs from freshly built inputs agree to the last bit."""
    run(case)  # rejects what cannot run
    assert_identical(outputs(case), outputs(case))


def _spec(builder: str, **params: Any) -> TopologySpec:
    return TopologySpec(builder, params)


FIXED_CASES = [
    Case(
        _spec(
            "fat_tree",
            n_nodes=3,
            gpus_per_node=4,
            nvlinks_per_gpu=2,
            nvlink_bandwidth_bytes_per_s=3e11,
            nvlink_latency_s=5e-7,
            nics_per_node=2,
            nic_bandwidth_bytes_per_s=5e10,
            nic_latency_s=1e-6,
            pcie_bandwidth_bytes_per_s=6.4e10,
            pcie_latency_s=5e-7,
            leaf_down_ports=2,
            oversubscription=2.0,
            fabric_latency_s=7e-7,
        ),
        CallSpec("allreduce", "ring", 12, 12 * 1_000_003, {"n_chunks": 3, "n_channels": 2}),
    ),
    Case(
        _spec(
            "dragonfly",
            routers_per_group=2,
            gpus_per_router=2,
            global_links_per_router=1,
            n_groups=3,
            injection_bandwidth_bytes_per_s=2.5e10,
            injection_latency_s=1e-6,
            local_bandwidth_bytes_per_s=5e10,
            local_latency_s=3e-7,
            global_bandwidth_bytes_per_s=1.25e10,
            global_latency_s=2e-6,
        ),
        CallSpec("alltoall", "direct", 11, 11 * 7919, {"max_in_flight": 2}),
    ),
    Case(
        _spec(
            "nvswitch_node",
            n_gpus=7,
            nvlinks_per_gpu=18,
            nvlink_bandwidth_bytes_per_s=2.5e10,
            nvlink_latency_s=5e-7,
            nvls=True,
        ),
        CallSpec("allreduce", "nvls", 7, 7_777_777, {"n_chunks": 2}),
    ),
    Case(
        _spec(
            "pcie_tree",
            n_gpus=6,
            n_sockets=2,
            gpus_per_switch=3,
            pcie_bandwidth_bytes_per_s=2.4e10,
            pcie_latency_s=1e-6,
            cpu_link_bandwidth_bytes_per_s=4e10,
            cpu_link_latency_s=2e-6,
            p2p=False,
        ),
        CallSpec("gather", "direct", 5, 5 * 333_333, {"root": 3}),
    ),
]


def test_spawned_workers_give_bit_identical_results() -> None:
    """Fresh interpreters (other hash seeds, other import order) agree to the last bit:
    nothing depends on set or dict order of strings, or on state left by other runs."""
    here = [outputs(c) for c in FIXED_CASES]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        there = list(pool.map(outputs, FIXED_CASES))
    for a, b in zip(here, there, strict=True):
        assert_identical(a, b)


# -- 5. times are finite, non-negative and ordered ---------------------------------------


EXTREME_SIZES = st.sampled_from([0, 2**40])


@settings(max_examples=400, deadline=None, database=None)
@given(cases(latency=st.just(1e-9), sizes=EXTREME_SIZES, per_link_latency=False))
def test_times_are_finite_and_ordered_at_extremes(case: Case) -> None:
    """1 ns links under 1 TiB collectives (a clock up to ~1e4 s, the latency 1e-13 of it:
    below the fabric's same-instant tolerance) and empty collectives: no NaN, inf or
    negative time, issue <= start <= end, links within their bandwidth, nothing earlier
    than the rules allow. An empty collective moves no byte and shares nothing, so it
    takes exactly its longest chain of latencies, each a whole number of ticks."""
    with probe() as samples:
        ran = run(case)
    r, topology = ran.result, ran.topology
    assert_times_valid(r.issue_s, r.start_s, r.end_s, r.time_s)
    assert_within_capacity(samples)
    nbytes = transfer_bytes(ran.schedule)
    p = paths(topology, ran.nodes, ran.schedule)
    n_flows = flows_per_link(topology, p.routes, nbytes)
    assert_link_accounting(r.link_bytes, r.link_busy_s, bandwidths(topology), r.time_s, n_flows)
    earliest_end = assert_no_earlier_than_the_rules_allow(ran, p, nbytes)
    if case.call.size_bytes == 0:
        assert not r.link_bytes.any()
        # each latency of the chain rounded up to a tick of the clock, at most
        ticks = ran.schedule.n_transfers * TICK_S
        assert r.time_s <= np.max(earliest_end, initial=0.0) * (1 + RTOL) + ticks


def test_an_arrival_never_precedes_its_start() -> None:
    """Regression (found by the invariants above): transfer 19 of a 0-byte ring
    reduce-scatter of 5 ranks on a 7-GPU ring (3 hops of 1 ns) was issued at
    3.0000000000000004e-09 s, so its start was recorded at 6.000000000000001e-09 s, but the
    fabric took that start and the instant 6e-09 s as one and it arrived at 6e-09 s: an
    end one rounding before its start. The engine now records the start no later than
    the arrival."""
    topology = ring(7, link_bandwidth_bytes_per_s=1e8, link_latency_s=1e-9)
    schedule = build_schedule("reducescatter", "ring", n_ranks=5, size_bytes=0)
    r = simulate(topology, schedule, model="flow")
    assert_times_valid(r.issue_s, r.start_s, r.end_s, r.time_s)
    assert r.end_s[19] == 2 * on_grid(3e-09)  # two routes of 3 ns, each a whole number of ticks
