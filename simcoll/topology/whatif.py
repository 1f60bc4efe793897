"""What-if changes to a loaded topology: links slowed down, links or nodes failed, NICs
without GPUDirect RDMA.

A *target* names links in one of three ways: a link kind (``nvlink``, ``pcie``,
``cpu_link``, ``ib``, ``ethernet``: every link of that kind), a link ``A-B`` (both
directions between nodes A and B), or a node ``A`` (every link into or out of it). Node
names may be shell patterns (``*``, ``?``, ``[...]``), so one target reaches a part of a
large fabric: ``plane3.*`` every link of plane 3's switches (its NICs' cables too),
``agg3.*-core*`` pod 3's uplinks, ``spine1?`` ten spines. Both functions return a new
graph and leave the given one as it was; a target that names nothing is an error, and so
is a failure that leaves some GPU unable to reach another.

>>> from simcoll.topology import switch_star
>>> star = switch_star(3, link_bandwidth_bytes_per_s=100e9, link_latency_s=1e-6)
>>> slow = degrade(star, "gpu0-sw", 0.25)
>>> [slow.edges[e]["bandwidth_bytes_per_s"] for e in (("gpu0", "sw"), ("sw", "gpu1"))]
[25000000000.0, 100000000000.0]
>>> try:
...     fail(star, "gpu0-sw")
... except TopologyError as error:
...     print(error.message)
--fail gpu0-sw: gpu0 and gpu1 can no longer reach each other (the fabric is cut)
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Sequence

import networkx as nx

from simcoll.core.errors import ConfigError, TopologyError
from simcoll.core.limits import MIN_BANDWIDTH_BYTES_PER_S
from simcoll.topology.reach import parted
from simcoll.topology.schema import LinkKind, NodeKind, gpu_nodes

__all__ = ["degrade", "fail", "gpudirect_rdma_off", "links_of", "parse_degrade"]

_KINDS = tuple(kind.value for kind in LinkKind)


def links_of(graph: nx.DiGraph[str], target: str, what: str) -> list[tuple[str, str]]:
    """The directed links ``target`` names (see the module docstring)."""
    if target in _KINDS:
        found = [(u, v) for u, v, a in graph.edges(data=True) if a["kind"].value == target]
    elif target in graph:
        found = [*graph.in_edges(target), *graph.out_edges(target)]
    elif any(ch in target for ch in "*?["):
        found = _matching(graph, target)
    elif "-" in target:
        found = _pair(graph, target)
    else:
        found = []
    if not found:
        raise ConfigError(f"{target!r} names no link: give a link kind ({', '.join(_KINDS)}), "
                          "a link A-B or a node (names may be patterns: plane3.*, "
                          "agg3.*-core*)", field=what)  # fmt: skip
    return found


def _pair(graph: nx.DiGraph[str], target: str) -> list[tuple[str, str]]:
    """Both directions of the link ``A-B``, splitting at the dash that names two nodes."""
    for at in [i for i, ch in enumerate(target) if ch == "-"]:
        a, b = target[:at], target[at + 1 :]
        if a in graph and b in graph:
            return [e for e in ((a, b), (b, a)) if graph.has_edge(*e)]
    return []


def _matching(graph: nx.DiGraph[str], pattern: str) -> list[tuple[str, str]]:
    """The links a pattern names: both directions of every link between a node matching
    ``A`` and one matching ``B`` (``A-B``, split at the first dash that leaves two
    patterns each matching a node), else every link of every node matching it.

    >>> from simcoll.topology import switch_star
    >>> star = switch_star(3, link_bandwidth_bytes_per_s=100e9, link_latency_s=1e-6)
    >>> sorted(_matching(star, "gpu[01]-s*"))
    [('gpu0', 'sw'), ('gpu1', 'sw'), ('sw', 'gpu0'), ('sw', 'gpu1')]
    >>> len(_matching(star, "gpu*"))
    6
    """
    for at in [i for i, ch in enumerate(pattern) if ch == "-"]:
        a, b = _nodes_like(graph, pattern[:at]), _nodes_like(graph, pattern[at + 1 :])
        if a and b:
            return [(u, v) for u in a for v in graph.successors(u) if v in b] + [
                (u, v) for u in b for v in graph.successors(u) if v in a and u not in a
            ]
    nodes = _nodes_like(graph, pattern)
    found = [e for node in nodes for e in graph.out_edges(node)]
    return found + [(u, v) for node in nodes for u, v in graph.in_edges(node) if u not in nodes]


def _nodes_like(graph: nx.DiGraph[str], pattern: str) -> set[str]:
    """The nodes whose id matches the shell pattern (case matters)."""
    if not pattern:
        return set()
    match = re.compile(fnmatch.translate(pattern)).match
    return {node for node in graph if match(node)}


def parse_degrade(item: str) -> tuple[str, float]:
    """``TARGET=FACTOR`` (``--degrade``'s value) as ``(target, factor)``; a factor that
    is not a number is NaN, which :func:`degrade` refuses naming the target.

    >>> parse_degrade("node0.nic0=0.25")
    ('node0.nic0', 0.25)
    >>> parse_degrade("ib")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: --degrade: expected TARGET=FACTOR, got 'ib'
    """
    target, sep, text = item.rpartition("=")
    if not sep or not target:
        raise ConfigError(f"expected TARGET=FACTOR, got {item!r}", field="--degrade")
    try:
        return target, float(text)
    except ValueError:
        return target, math.nan


def degrade(graph: nx.DiGraph[str], target: str, factor: float) -> nx.DiGraph[str]:
    """A copy of ``graph`` whose links named by ``target`` carry ``factor`` (0 < factor
    <= 1) of their bandwidth."""
    if not (isinstance(factor, int | float) and math.isfinite(factor) and 0 < factor <= 1):
        raise ConfigError(f"{target}: the factor must be in (0, 1], got {factor!r}",
                          field="--degrade")  # fmt: skip
    found = links_of(graph, target, "--degrade")
    out = graph.copy()
    for u, v in found:
        attrs = out.edges[u, v]
        attrs["bandwidth_bytes_per_s"] = float(attrs["bandwidth_bytes_per_s"]) * factor
        if attrs["bandwidth_bytes_per_s"] < MIN_BANDWIDTH_BYTES_PER_S:  # 1e-300: issue 41
            left = attrs["bandwidth_bytes_per_s"]
            raise ConfigError(f"{target}={factor!r} leaves {u}->{v} {left!r} B/s, less than "
                              "the 1 bit/s of the slowest link simcoll simulates",
                              field="--degrade")  # fmt: skip
    return out


def fail(
    graph: nx.DiGraph[str], target: str, *, gpus: Sequence[str] | None = None
) -> nx.DiGraph[str]:
    """A copy of ``graph`` without the links named by ``target`` (a node: all of its links,
    and the node, unless it is a GPU; a NIC left with no link out of its server, its cable
    cut: the NIC too, as NCCL then uses the others); refused if two of ``gpus`` (default:
    every GPU; the GPUs a run's ranks are on) could then no longer reach each other as
    calls route them (:mod:`simcoll.topology.reach`: inside a server never through another
    GPU).

    >>> from simcoll.topology import switch_star
    >>> star = switch_star(3, link_bandwidth_bytes_per_s=100e9, link_latency_s=1e-6)
    >>> sorted(fail(star, "gpu2", gpus=["gpu0", "gpu1"]).edges)
    [('gpu0', 'sw'), ('gpu1', 'sw'), ('sw', 'gpu0'), ('sw', 'gpu1')]
    """
    found = links_of(graph, target, "--fail")
    out = graph.copy()
    out.remove_edges_from(found)
    gpus_left = set(gpu_nodes(out))
    named = {target} if target in out else set()
    if not named and "-" not in target and any(ch in target for ch in "*?["):
        named = _nodes_like(out, target)  # a pattern of nodes: those nodes go too
    out.remove_nodes_from(sorted(named - gpus_left))
    for nic in sorted({n for link in found for n in link if n in out and _cut_off(out, n)}):
        out.remove_node(nic)  # its cable to the fabric cut: the NIC is down, NCCL skips it
    cut = parted(out, list(gpu_nodes(out) if gpus is None else gpus))
    if cut is not None:
        raise TopologyError(f"--fail {target}: {cut}")
    return out


def _cut_off(graph: nx.DiGraph[str], node: str) -> bool:
    """Whether ``node`` is a NIC of a server with no link left out of that server."""
    attrs = graph.nodes[node]
    if attrs["kind"] is not NodeKind.NIC or attrs.get("host") is None:
        return False
    return all(graph.nodes[v].get("host") == attrs["host"] for v in graph.succ[node])


def gpudirect_rdma_off(graph: nx.DiGraph[str]) -> nx.DiGraph[str]:
    """A copy of ``graph`` whose NICs move data through host memory, as NCCL's network
    transport does without GPUDirect RDMA (``NCCL_NET_GDR_LEVEL`` below the GPU-NIC
    distance, or no ``nvidia-peermem``): the sending GPU writes each byte into a buffer in
    host memory and the NIC reads it from there; the receiving NIC writes it there and the
    GPU reads it. So a NIC moving ``r`` bytes/s each way costs its server ``4 r`` of host
    memory bandwidth, and with the server's ``n`` NICs equally busy (a collective's case)
    each NIC moves at most ``host_memory_bandwidth / (4 n)`` each way: every link into or
    out of a NIC is capped at that (pessimistic where fewer NICs are busy; the PCIe
    crossings and the added latency are not charged).

    >>> from simcoll.topology import load
    >>> h100 = load("topologies/h100-ib-fat-tree.toml", {"n_nodes": "2"})
    >>> off = gpudirect_rdma_off(h100)
    >>> [g.edges["node0.nic0", "leaf0"]["bandwidth_bytes_per_s"] / 1e9 for g in (h100, off)]
    [50.0, 19.2]
    """
    host_bytes_per_s = graph.graph.get("host_memory_bandwidth_bytes_per_s")
    source = graph.graph.get("source")
    if host_bytes_per_s is None:
        raise ConfigError("missing: without GPUDirect RDMA the NICs' data is staged in "
                          "host memory, at this bandwidth (each server's, all sockets)",
                          source=source, field="host_memory_bandwidth")  # fmt: skip
    nics: dict[object, list[str]] = {}
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] is NodeKind.NIC:
            nics.setdefault(attrs.get("host", node), []).append(node)
    if not nics:
        raise ConfigError("has no NIC, so nothing to run without GPUDirect RDMA", source=source)
    out = graph.copy()
    for members in nics.values():
        cap_bytes_per_s = float(host_bytes_per_s) / (4 * len(members))
        for nic in members:
            for u, v in [*out.in_edges(nic), *out.out_edges(nic)]:
                attrs = out.edges[u, v]
                attrs["bandwidth_bytes_per_s"] = min(float(attrs["bandwidth_bytes_per_s"]),
                                                     cap_bytes_per_s)  # fmt: skip
    return out
