"""Inspection: what a topology offers its GPUs, as numbers and as a text report.

Three views, each a pure function of a validated graph:

- :func:`bisection_bandwidth_bytes_per_s`: how much the lower half of the ranks can send
  to the upper half at once (a max flow);
- :func:`path_matrix` and :func:`pair_classes`: what the *routed* path between two GPUs
  gives one transfer alone: its bottleneck bandwidth, its latency and its hop count, as
  CUDA's ``p2pBandwidthLatencyTest`` reports them for a real machine;
- :func:`summarize` and :func:`format_summary`: counts of nodes and links, and a report
  with the unit in every figure (bandwidths in GB/s = 1e9 B/s, per direction; latencies
  in us). :func:`report` puts them together, as ``simcoll topo show`` prints it.

>>> from simcoll.topology.builders import switch_star
>>> from simcoll.core.units import GB, us
>>> g = switch_star(4, link_bandwidth_bytes_per_s=100 * GB, link_latency_s=1 * us)
>>> bisection_bandwidth_bytes_per_s(g)  # ranks 0-1 send to ranks 2-3 over 2 links
200000000000.0
>>> m = path_matrix(g)
>>> m.bandwidth_bytes_per_s[0, 3], m.latency_s[0, 3], m.hops[0, 3]
(np.float64(100000000000.0), np.float64(2e-06), np.int64(2))
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np
from numpy.typing import NDArray

from simcoll.core.units import GB, us
from simcoll.topology.routing import Router, route_bandwidth_bytes_per_s, route_latency_s
from simcoll.topology.schema import LinkKind, NodeKind, gpu_nodes

__all__ = [
    "MATRIX_MAX_GPUS",
    "SAMPLE_TO_RANK0",
    "LinkGroup",
    "PairClass",
    "PathMatrix",
    "TopologySummary",
    "bisection_bandwidth_bytes_per_s",
    "format_routes",
    "format_summary",
    "natural_key",
    "pair_classes",
    "path_matrix",
    "report",
    "sample_pairs",
    "summarize",
]

MATRIX_MAX_GPUS = 16
"""Up to this many GPUs, reports print the GPU x GPU matrices; beyond, pair classes."""
SAMPLE_TO_RANK0 = 64
"""At most this many routes *to* rank 0 are in the sample of :func:`pair_classes`."""

# Latency sums of equal paths may differ in the last bits: group them rounded to 1 fs.
_LATENCY_DECIMALS = 15
_LISTED_SWITCHES = 8


@dataclass(frozen=True, eq=False)
class PathMatrix:
    """The routed path between every ordered pair of GPUs, indexed ``[src_rank, dst_rank]``.

    The arrays are read-only. On the diagonal (a GPU to itself, an empty route) the
    bandwidth is ``inf`` (no link limits it), the latency 0.0 and the hop count 0.
    """

    bandwidth_bytes_per_s: NDArray[np.float64]
    """Bottleneck bandwidth: the smallest per-direction bandwidth of the route's links."""
    latency_s: NDArray[np.float64]
    """The sum of the route's link latencies."""
    hops: NDArray[np.int64]
    """The number of links on the route."""


@dataclass(frozen=True)
class PairClass:
    """GPU pairs whose routed paths have the same bandwidth, latency and hop count."""

    bandwidth_bytes_per_s: float
    latency_s: float
    hops: int
    n_pairs: int


@dataclass(frozen=True)
class LinkGroup:
    """Directed links of one kind with the same bandwidth (per direction) and latency."""

    kind: str  # a LinkKind value
    bandwidth_bytes_per_s: float
    latency_s: float
    n_links: int


@dataclass(frozen=True)
class TopologySummary:
    """What :func:`summarize` counts on a topology; kinds are keyed by their value."""

    name: str
    description: str
    source: str
    n_gpus: int
    nodes_by_kind: dict[str, int]  # NodeKind value -> nodes, kinds present, in enum order
    links_by_kind: dict[str, int]  # LinkKind value -> directed links, likewise
    link_groups: tuple[LinkGroup, ...]  # by kind, then bandwidth descending
    reducing_switches: tuple[str, ...]  # nodes with ``reduces=True``, in natural order
    bisection_bytes_per_s: float
    #: The file's ``gpu_memory_bandwidth``, which out-of-place copies pay; None if not given.
    gpu_memory_bandwidth_bytes_per_s: float | None = None


def bisection_bandwidth_bytes_per_s(graph: nx.DiGraph[str]) -> float:
    """The rank-order bisection bandwidth: ranks ``< n // 2`` sending to all the others.

    It is the maximum flow from a super-source joined to the GPUs of ranks
    ``0 .. n//2 - 1`` to a super-sink joined from the GPUs of ranks ``n//2 .. n-1``, with
    each directed link's ``bandwidth_bytes_per_s`` as its capacity: one direction only
    (lower half to upper half), and switches forward at any rate. With an odd ``n`` the
    upper half has one GPU more. One GPU has no other half to send to: 0.0.

    Ranks are cut in their order, which on multi-node builders (node-major ranks, an
    even number of machines) falls between machines; it is not the minimum over every
    balanced cut.

    Notes
    -----
    ``transit=False`` on GPUs does not change the value: a flow path through a lower-half
    GPU can start at that GPU instead, and one through an upper-half GPU can end there.

    >>> from simcoll.topology.builders import ring
    >>> from simcoll.core.units import GB
    >>> bisection_bandwidth_bytes_per_s(ring(6, link_bandwidth_bytes_per_s=50 * GB,
    ...                                       link_latency_s=0.0))  # cuts 2 ring links
    100000000000.0
    """
    gpus = gpu_nodes(graph)
    half = len(gpus) // 2
    if half == 0:
        return 0.0
    index = {node: i for i, node in enumerate(graph)}
    source, sink = -1, -2
    flow: nx.DiGraph[int] = nx.DiGraph()
    for u, v, attrs in graph.edges(data=True):
        flow.add_edge(index[u], index[v], capacity=float(attrs["bandwidth_bytes_per_s"]))
    for node in gpus[:half]:
        flow.add_edge(source, index[node])  # no capacity attribute: unlimited
    for node in gpus[half:]:
        flow.add_edge(index[node], sink)
    return float(nx.maximum_flow_value(flow, source, sink))


def path_matrix(graph: nx.DiGraph[str], router: Router | None = None) -> PathMatrix:
    """Route every ordered pair of GPUs and tabulate the paths; see :class:`PathMatrix`.

    This routes ``n * (n - 1)`` pairs: for thousands of GPUs use :func:`pair_classes`.

    Parameters
    ----------
    graph
        A validated topology.
    router
        The router to use (and whose route cache to fill); by default a new one.

    >>> from simcoll.topology.builders import ring
    >>> from simcoll.core.units import GB, us
    >>> m = path_matrix(ring(4, link_bandwidth_bytes_per_s=50 * GB, link_latency_s=1 * us))
    >>> m.hops
    array([[0, 1, 2, 1],
           [1, 0, 1, 2],
           [2, 1, 0, 1],
           [1, 2, 1, 0]])
    >>> m.bandwidth_bytes_per_s[1, 1]
    np.float64(inf)
    """
    router = Router(graph) if router is None else router
    gpus = gpu_nodes(graph)
    n = len(gpus)
    bandwidth = np.full((n, n), math.inf)
    latency = np.zeros((n, n))
    hops = np.zeros((n, n), dtype=np.int64)
    for a, b in itertools.permutations(range(n), 2):
        bandwidth[a, b], latency[a, b], hops[a, b] = _path(graph, router, gpus[a], gpus[b])
    for array in (bandwidth, latency, hops):
        array.setflags(write=False)
    return PathMatrix(bandwidth, latency, hops)


def pair_classes(graph: nx.DiGraph[str], router: Router | None = None) -> tuple[PairClass, ...]:
    """Group a sample of GPU pairs by the bandwidth, latency and hops of their route.

    The pairs are :func:`sample_pairs`: from rank 0 to every other GPU, and back to rank
    0 from up to :data:`SAMPLE_TO_RANK0` of them. On the symmetric designs simcoll builds
    (every machine alike, rank 0 like any GPU of its machine) they meet every class of
    pair, though not in the proportions of all pairs.

    Returns
    -------
    tuple of PairClass
        Sorted by bandwidth, descending; then latency and hops, ascending.

    >>> from simcoll.topology.builders import ring
    >>> from simcoll.core.units import GB, us
    >>> g = ring(5, link_bandwidth_bytes_per_s=50 * GB, link_latency_s=1 * us)
    >>> [(c.latency_s, c.hops, c.n_pairs) for c in pair_classes(g)]
    [(1e-06, 1, 4), (2e-06, 2, 4)]
    """
    router = Router(graph) if router is None else router
    gpus = gpu_nodes(graph)
    return _group(_path(graph, router, gpus[a], gpus[b]) for a, b in sample_pairs(len(gpus)))


def sample_pairs(n_gpus: int) -> list[tuple[int, int]]:
    """The ``(src_rank, dst_rank)`` pairs :func:`pair_classes` routes.

    All ``(0, j)`` for ``j = 1 .. n-1``, then ``(j, 0)`` for ``j = 1 .. n-1`` when
    ``n - 1 <= SAMPLE_TO_RANK0``, else for :data:`SAMPLE_TO_RANK0` ranks ``j`` spread evenly
    over ``1 .. n-1``. The routes from rank 0 cost one breadth-first search in all, but
    each route to rank 0 costs a search of its own, O(V + E): routing every ``(j, 0)``
    of a 4096-GPU fat tree takes minutes, the capped sample under a second.

    >>> sample_pairs(4)
    [(0, 1), (0, 2), (0, 3), (1, 0), (2, 0), (3, 0)]
    >>> pairs = sample_pairs(1025)
    >>> len(pairs), pairs[1024:1027], pairs[-1]
    (1088, [(1, 0), (17, 0), (33, 0)], (1009, 0))
    """
    others = n_gpus - 1
    n_back = min(others, SAMPLE_TO_RANK0)
    back = [1 + k * others // n_back for k in range(n_back)]
    return [(0, j) for j in range(1, n_gpus)] + [(j, 0) for j in back]


def summarize(graph: nx.DiGraph[str]) -> TopologySummary:
    """Count a topology's nodes and links by kind and compute its bisection bandwidth.

    >>> from simcoll.topology.builders import switch_star
    >>> s = summarize(switch_star(8, link_bandwidth_bytes_per_s=3e11, link_latency_s=5e-7))
    >>> s.name, s.n_gpus, s.nodes_by_kind, s.links_by_kind, s.bisection_bytes_per_s
    ('switch_star_8', 8, {'gpu': 8, 'nvswitch': 1}, {'nvlink': 16}, 1200000000000.0)
    """
    nodes = Counter(attrs["kind"] for _, attrs in graph.nodes(data=True))
    links = Counter(attrs["kind"] for _, _, attrs in graph.edges(data=True))
    reducing = [n for n, attrs in graph.nodes(data=True) if attrs.get("reduces") is True]
    return TopologySummary(
        name=str(graph.graph.get("name", "")),
        description=str(graph.graph.get("description", "")),
        source=str(graph.graph.get("source", "")),
        n_gpus=nodes[NodeKind.GPU],
        nodes_by_kind={kind.value: nodes[kind] for kind in NodeKind if nodes[kind]},
        links_by_kind={kind.value: links[kind] for kind in LinkKind if links[kind]},
        link_groups=_link_groups(graph),
        reducing_switches=tuple(sorted(reducing, key=natural_key)),
        bisection_bytes_per_s=bisection_bandwidth_bytes_per_s(graph),
        gpu_memory_bandwidth_bytes_per_s=graph.graph.get("gpu_memory_bandwidth_bytes_per_s"),
    )


def format_summary(summary: TopologySummary, paths: PathMatrix | Sequence[PairClass]) -> str:
    """A readable report: header, node and link tables, bisection, then the GPU pairs.

    With a :class:`PathMatrix` of at most :data:`MATRIX_MAX_GPUS` GPUs, the pairs are two
    GPU x GPU matrices, as ``p2pBandwidthLatencyTest`` prints them: the bottleneck
    bandwidth (GB/s) and the latency (us) of each routed path, ``-`` on the diagonal.
    Otherwise (a bigger matrix, or classes from :func:`pair_classes`) they are a table
    of pair classes.

    >>> from simcoll.topology.builders import ring
    >>> from simcoll.core.units import GB, us
    >>> g = ring(3, link_bandwidth_bytes_per_s=50 * GB, link_latency_s=1 * us)
    >>> print(format_summary(summarize(g), path_matrix(g)))
    topology: ring_3
    GPUs: 3; nodes: 3; directed links: 6
    units: bandwidths in GB/s (1e9 B/s), per direction; latencies in us
    <BLANKLINE>
    nodes         count
      gpu             3
    <BLANKLINE>
    links         count  bandwidth       latency
      nvlink          6  50 GB/s         1 us
    <BLANKLINE>
    in-network reduction: none
    bisection bandwidth: 100 GB/s (max flow from rank 0 to ranks 1-2, one direction)
    <BLANKLINE>
    bottleneck bandwidth of the routed path (GB/s), row: source rank, column: destination
     src\\dst       0       1       2
           0       -    50.0    50.0
           1    50.0       -    50.0
           2    50.0    50.0       -
    <BLANKLINE>
    latency of the routed path (us), row: source rank, column: destination
     src\\dst       0       1       2
           0       -    1.00    1.00
           1    1.00       -    1.00
           2    1.00    1.00       -
    """
    sections = [_header(summary), _node_table(summary), _link_table(summary), _totals(summary)]
    if isinstance(paths, PathMatrix) and len(paths.hops) <= MATRIX_MAX_GPUS:
        sections += _matrices(paths)
    else:
        sections.append(_class_table(paths, summary.n_gpus))
    return "\n\n".join(sections)


def report(graph: nx.DiGraph[str]) -> str:
    """:func:`format_summary` of a topology, with matrices up to 16 GPUs, else sampled classes.

    >>> from simcoll.topology.builders import switch_star
    >>> text = report(switch_star(32, link_bandwidth_bytes_per_s=1e11, link_latency_s=1e-6))
    >>> print(text[text.index("GPU pairs"):])
    GPU pairs by routed path (sample: rank 0 to each of the 31 others, 31 of them to rank 0)
      bandwidth   latency     hops   pairs
      100 GB/s    2 us           2      62
    """
    router = Router(graph)
    summary = summarize(graph)
    if summary.n_gpus <= MATRIX_MAX_GPUS:
        text = format_summary(summary, path_matrix(graph, router))
        return f"{text}\n\n{format_routes(graph, router)}"
    return format_summary(summary, pair_classes(graph, router))


def format_routes(graph: nx.DiGraph[str], router: Router | None = None, src_rank: int = 0) -> str:
    """The routed path from one GPU to every other, each hop with its link kind.

    >>> from simcoll.topology.builders import switch_star
    >>> print(format_routes(switch_star(3, link_bandwidth_bytes_per_s=1e11, link_latency_s=1e-6)))
    routes from rank 0 (node ids, each hop with its link kind)
      0 -> 1: gpu0 -nvlink-> sw -nvlink-> gpu1
      0 -> 2: gpu0 -nvlink-> sw -nvlink-> gpu2
    """
    router = router or Router(graph)
    gpus = gpu_nodes(graph)
    lines = [f"routes from rank {src_rank} (node ids, each hop with its link kind)"]
    for dst_rank, dst in enumerate(gpus):
        if dst_rank == src_rank:
            continue
        hops = "".join(
            f" -{graph.edges[u, v]['kind'].value}-> {v}"
            for u, v in router.route(gpus[src_rank], dst)
        )
        lines.append(f"  {src_rank} -> {dst_rank}: {gpus[src_rank]}{hops}")
    return "\n".join(lines)


def natural_key(text: str) -> tuple[str | int, ...]:
    """Sort key that orders the digits in ids as numbers: ``gpu2`` before ``gpu10``.

    >>> sorted(["gpu10", "node1.nic2", "gpu2", "node10.nic0"], key=natural_key)
    ['gpu2', 'gpu10', 'node1.nic2', 'node10.nic0']
    """
    # re.split with a group alternates text and digits, so like positions compare alike.
    return tuple(int(p) if i % 2 else p for i, p in enumerate(re.split(r"(\d+)", text)))


# --- computing --------------------------------------------------------------------------------


def _path(graph: nx.DiGraph[str], router: Router, src: str, dst: str) -> tuple[float, float, int]:
    edges = router.route(src, dst)
    return route_bandwidth_bytes_per_s(graph, edges), route_latency_s(graph, edges), len(edges)


def _group(paths: Iterable[tuple[float, float, int]]) -> tuple[PairClass, ...]:
    counts = Counter((b, round(t, _LATENCY_DECIMALS), h) for b, t, h in paths)
    keys = sorted(counts, key=lambda k: (-k[0], k[1], k[2]))
    return tuple(PairClass(b, t, h, counts[b, t, h]) for b, t, h in keys)


def _link_groups(graph: nx.DiGraph[str]) -> tuple[LinkGroup, ...]:
    order = {kind: i for i, kind in enumerate(LinkKind)}
    counts = Counter(
        (attrs["kind"], float(attrs["bandwidth_bytes_per_s"]), float(attrs["latency_s"]))
        for _, _, attrs in graph.edges(data=True)
    )
    keys = sorted(counts, key=lambda k: (order[k[0]], -k[1], k[2]))
    return tuple(LinkGroup(k.value, b, t, counts[k, b, t]) for k, b, t in keys)


# --- formatting -------------------------------------------------------------------------------
# (Kept beside the data it formats: the module runs past 400 lines, mostly doctested docstrings.)

_CORNER = "src\\dst"
_CLASS_ROW = "  {:<12}{:<12}{:>4}{:>8}"


def _gb(bandwidth_bytes_per_s: float) -> str:
    # Not units.format_bandwidth: its 4 digits print a 25.6 TB/s bisection as 2.56e+04.
    return f"{bandwidth_bytes_per_s / GB:.6g} GB/s"


def _us(latency_s: float) -> str:
    return f"{latency_s / us:.4g} us"


def _ranks(first: int, last: int) -> str:
    return f"rank {first}" if first == last else f"ranks {first}-{last}"


def _header(s: TopologySummary) -> str:
    lines = [f"topology: {s.name}"]
    if s.description:
        lines.append(f"description: {s.description}")
    if s.source:
        lines.append(f"source: {s.source}")
    n_nodes, n_links = sum(s.nodes_by_kind.values()), sum(s.links_by_kind.values())
    lines.append(f"GPUs: {s.n_gpus}; nodes: {n_nodes}; directed links: {n_links}")
    lines.append("units: bandwidths in GB/s (1e9 B/s), per direction; latencies in us")
    return "\n".join(lines)


def _node_table(s: TopologySummary) -> str:
    rows = [f"  {kind:<12}{count:>5}" for kind, count in s.nodes_by_kind.items()]
    return "\n".join([f"{'nodes':<14}{'count':>5}", *rows])


def _link_table(s: TopologySummary) -> str:
    head = f"{'links':<14}{'count':>5}  {'bandwidth':<16}latency"
    rows = [
        f"  {g.kind:<12}{g.n_links:>5}  {_gb(g.bandwidth_bytes_per_s):<16}{_us(g.latency_s)}"
        for g in s.link_groups
    ]
    return "\n".join([head, *rows]) if rows else "links: none"


def _totals(s: TopologySummary) -> str:
    n = len(s.reducing_switches)
    listed = list(s.reducing_switches[:_LISTED_SWITCHES])
    if n > _LISTED_SWITCHES:
        listed.append(f"and {n - _LISTED_SWITCHES} more")
    reduction = f"{n} switch{'es' * (n != 1)} ({', '.join(listed)})" if n else "none"
    half = s.n_gpus // 2
    cut = (
        f"max flow from {_ranks(0, half - 1)} to {_ranks(half, s.n_gpus - 1)}, one direction"
        if half
        else "one GPU: no other half"
    )
    bisection = f"{_gb(s.bisection_bytes_per_s)} ({cut})"
    memory = s.gpu_memory_bandwidth_bytes_per_s
    copies = (
        f"\nGPU memory: {_gb(memory)} per GPU (out-of-place all-gather and broadcast copy at it)"
        if memory
        else ""
    )
    return f"in-network reduction: {reduction}\nbisection bandwidth: {bisection}{copies}"


def _matrices(m: PathMatrix) -> list[str]:
    title = "of the routed path ({}), row: source rank, column: destination"
    return [
        _matrix(f"bottleneck bandwidth {title.format('GB/s')}", m.bandwidth_bytes_per_s / GB, 1),
        _matrix(f"latency {title.format('us')}", m.latency_s / us, 2),
    ]


def _matrix(title: str, values: NDArray[np.float64], decimals: int) -> str:
    """A square table with a ``-`` diagonal; columns fit the widest figure."""
    n = len(values)
    cells = [
        ["-" if a == b else f"{values[a, b]:.{decimals}f}" for b in range(n)] for a in range(n)
    ]
    width = max([8, *(len(cell) + 2 for row in cells for cell in row)])
    lines = [title, f"{_CORNER:>8}" + "".join(f"{b:>{width}}" for b in range(n))]
    lines += [f"{a:>8}" + "".join(f"{c:>{width}}" for c in row) for a, row in enumerate(cells)]
    return "\n".join(lines)


def _class_table(paths: PathMatrix | Sequence[PairClass], n_gpus: int) -> str:
    if isinstance(paths, PathMatrix):
        n = len(paths.hops)
        classes = _group(
            (paths.bandwidth_bytes_per_s[a, b], paths.latency_s[a, b], int(paths.hops[a, b]))
            for a, b in itertools.permutations(range(n), 2)
        )
        what = f"all {n * (n - 1)} ordered pairs"
    else:
        classes = tuple(paths)
        n_from = n_gpus - 1
        n_to = len(sample_pairs(n_gpus)) - n_from
        what = f"sample: rank 0 to each of the {n_from} others, {n_to} of them to rank 0"
    lines = [f"GPU pairs by routed path ({what})"]
    lines.append(_CLASS_ROW.format("bandwidth", "latency", "hops", "pairs"))
    lines += [
        _CLASS_ROW.format(_gb(c.bandwidth_bytes_per_s), _us(c.latency_s), c.hops, c.n_pairs)
        for c in classes
    ]
    return "\n".join(lines)
