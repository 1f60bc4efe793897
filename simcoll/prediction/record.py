"""What a session's run did, as a :class:`~simcoll.sim.timeline.Timeline`: recording only,
from the graph's result; nothing here changes a time."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from simcoll.prediction.workgraph import Built, Comm, Compute, Solo
from simcoll.sim.graph import CallNodes, GraphResult
from simcoll.sim.timeline import COMPUTE, Span, Timeline, TransferBatch, binned_bytes

__all__ = ["empty_timeline", "timeline_of"]

FloatArray = npt.NDArray[np.float64]


def timeline_of(  # noqa: PLR0917 - what one run made
    ops: Sequence[Compute | Comm],
    built: Built,
    result: GraphResult,
    n_ranks: int,
    load_bins: int,
    notes: Sequence[str] = (),
    *,
    transfers: bool = True,
) -> Timeline:
    """What happened, rank by rank: every op's spans, the transfers (unless not
    ``transfers``; a call timed alone: as its run alone kept them, shifted to its start,
    where that run kept every one), and
    each link's bytes, busy time and load per time bin (a call timed alone: its links'
    bytes spread evenly over its transfers' time)."""
    end_s, issue_s = result.end_s, result.issue_s
    spans: list[Span] = []
    batches: list[TransferBatch] = []
    link_bytes = result.link_bytes.copy()
    link_busy_s = result.link_busy_s.copy()
    time_s = result.time_s
    n_bins = load_bins if time_s > 0 else 0
    edges = np.linspace(0.0, time_s, n_bins + 1)
    load = np.zeros((len(built.graph.links), n_bins))
    for index, op in enumerate(ops):
        if isinstance(op, Compute):
            if op.duration_s > 0:
                nodes = built.rank_nodes[index]
                for r, node in zip(op.ranks, nodes, strict=True):
                    spans.append(Span(r, COMPUTE, op.name, float(issue_s[node]),
                                      float(end_s[node])))  # fmt: skip
            continue
        opened, end = float(end_s[built.opened[index]]), float(end_s[built.end[index]])
        spans += [Span(r, op.stream, op.name, opened, end) for r in op.ranks]
        solo = op.solo
        assert solo is not None
        runs = built.calls.get(index)
        pieces = op.pieces
        if runs is not None:
            for k, nodes_of in enumerate(runs):
                ranks, part = pieces[k % len(pieces)]
                if transfers:
                    batches.append(_detailed_batch(op.name, ranks, part, nodes_of, result))
                if n_bins:
                    load += _detailed_load(nodes_of, result, edges, load.shape[0])
            continue
        used = solo.links  # only the links it uses: a cluster has thousands
        link_bytes[used] += solo.link_bytes * op.repeat
        link_busy_s[used] += solo.link_busy_s * op.repeat
        for k in range(op.repeat):  # each repeat as the call ran alone, one after another
            first_s = opened + k * solo.time_s + solo.delay_s
            if transfers:
                batches += [_solo_batch(op.name, ranks, part, first_s) for ranks, part in pieces]
            if n_bins and len(solo.links):
                load[solo.links] += _spread(solo.link_bytes, first_s,
                                            first_s + solo.transfers_s, edges)  # fmt: skip
    spans.sort(key=attrgetter("rank", "stream", "start_s", "end_s"))
    return Timeline(
        n_ranks=n_ranks,
        time_s=time_s,
        spans=tuple(spans),
        transfers=tuple(batches),
        links=built.graph.links,
        link_bytes=link_bytes,
        link_busy_s=link_busy_s,
        link_bandwidth_bytes_per_s=built.graph.capacity_bytes_per_s.copy(),
        link_load_bytes=load,
        notes=tuple(dict.fromkeys(notes)),
    )


def empty_timeline(ops: Sequence[Compute | Comm], n_ranks: int) -> Timeline:
    """What a session of recorded calls (or of nothing) gives: every span at 0."""
    spans = []
    for op in ops:
        stream = COMPUTE if isinstance(op, Compute) else op.stream
        spans += [Span(r, stream, op.name, 0.0, 0.0) for r in op.ranks]
    return Timeline(n_ranks=n_ranks, time_s=0.0, spans=tuple(spans))


def _detailed_batch(
    name: str, ranks: tuple[int, ...], solo: Solo, nodes: CallNodes, result: GraphResult
) -> TransferBatch:
    """A call (of group ``ranks``) run with others: its transfers as they ran in the graph."""
    s = solo.prepare().s
    n = s.n_ranks
    real = (s.src < n) & (s.dst < n)  # transfers to in-network switches are not P2P
    to_global = np.array(ranks, dtype=np.int64)
    part = nodes.transfers
    return TransferBatch(name, to_global[s.src[real]], to_global[s.dst[real]],
                         s.transfer_bytes[real], result.start_s[part][real],
                         result.end_s[part][real])  # fmt: skip


def _solo_batch(name: str, ranks: tuple[int, ...], solo: Solo, first_s: float) -> TransferBatch:
    """A call (of group ``ranks``) timed alone: its transfers as they ran alone, shifted to
    when its first could start, where that run kept every transfer (the general path);
    else none."""
    result = solo.result  # kept where the run alone kept every transfer's times
    to_global = np.array(ranks, dtype=np.int64)
    if result is not None:
        s = result.schedule
        n = s.n_ranks
        real = (s.src < n) & (s.dst < n)
        return TransferBatch(name, to_global[s.src[real]], to_global[s.dst[real]],
                             s.transfer_bytes[real], result.start_s[real] + first_s,
                             result.end_s[real] + first_s)  # fmt: skip
    empty = np.zeros(0, dtype=np.int64)
    return TransferBatch(name, empty, empty, empty, np.zeros(0), np.zeros(0))


def _spread(
    bytes_per_link: FloatArray, start_s: float, end_s: float, edges: FloatArray
) -> FloatArray:
    """Each link's bytes spread evenly over ``[start_s, end_s]``, per time bin (links x bins)."""
    share = binned_bytes(np.ones(1), np.array([start_s]), np.array([end_s]), edges)
    return np.outer(bytes_per_link, share)


def _detailed_load(
    nodes: CallNodes, result: GraphResult, edges: FloatArray, n_links: int
) -> FloatArray:
    """Per link and time bin, the wire bytes of a call's transfers as they ran."""
    load = np.zeros((n_links, len(edges) - 1))
    part = nodes.transfers
    pair_of = result.pair_of[part]
    wire = result.wire_bytes[part]
    start, end = result.start_s[part], result.end_s[part]
    for pair in np.unique(pair_of).tolist():
        links = result.pair_links[pair]
        mine = np.flatnonzero(pair_of == pair)
        if len(links) and len(mine):
            load[links] += binned_bytes(wire[mine], start[mine], end[mine], edges)
    return load
