"""A :class:`~simcoll.sim.timeline.Timeline` as a Chrome / Perfetto trace (JSON).

The trace uses the object form of the Chrome Trace Event Format
(``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``); open it in
https://ui.perfetto.dev or ``chrome://tracing``. ``ts`` and ``dur`` are in microseconds.

Layout
    One process (``pid`` :data:`PID`) named after the title. Every rank is a group of
    threads, rank by rank (``tid`` counts up from 1 in that order, and
    ``thread_sort_index`` says the same):

    - ``"rank r compute"``, ``"rank r comm"``, ``"rank r comm 1"``...: the rank's spans
      as complete events (``"ph": "X"``, ``cat`` ``"compute"`` or ``"comm"``);
    - ``"rank r send"``, ``"rank r send 1"``...: one slice per transfer the rank sent,
      from its first byte to its last (``args``: ``src_rank``, ``dst_rank``,
      ``size_bytes``). A rank sends to many peers at once (an all-to-all), and slices on
      one thread must nest, so overlapping sends are spread over *lanes* by greedy
      interval partitioning (each goes to the lowest-numbered lane free at its start);
    - ``"rank r recv"``, ``"rank r recv 1"``...: the same transfers on the receiving
      side, in lanes likewise.

    Each transfer also gets a flow arrow: ``"ph": "s"`` on its send slice at its start
    and ``"ph": "f"`` with ``"bp": "e"`` on its receive slice at its end, sharing one
    ``id``.

Times are rounded to whole nanoseconds (Perfetto's resolution) before they are written,
so slices that touch in the simulation touch exactly in the trace instead of
overlapping by a rounding error. pid and tid 0 are avoided: Perfetto treats them as
the kernel's idle task (google/perfetto#394).

>>> import numpy as np
>>> from simcoll.sim.timeline import Span, Timeline, TransferBatch
>>> t = Timeline(
...     n_ranks=2,
...     time_s=3e-6,
...     spans=(Span(rank=0, stream="compute", name="fwd", start_s=0.0, end_s=2e-6),),
...     transfers=(
...         TransferBatch(
...             name="allgather",
...             src_rank=np.array([0]),
...             dst_rank=np.array([1]),
...             size_bytes=np.array([1024]),
...             start_s=np.array([1e-6]),
...             end_s=np.array([3e-6]),
...         ),
...     ),
... )
>>> events = chrome_trace(t)["traceEvents"]
>>> [e["args"]["name"] for e in events if e["name"] == "thread_name"]
['rank 0 compute', 'rank 0 send', 'rank 1 recv']
>>> [(e["ph"], e["tid"], e["ts"], e.get("dur")) for e in events if e["ph"] != "M"]
[('X', 1, 0.0, 2.0), ('X', 2, 1.0, 2.0), ('s', 2, 1.0, None), ('X', 3, 1.0, 2.0), \
('f', 3, 3.0, None)]
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from simcoll.core.files import write_output
from simcoll.sim.timeline import COMPUTE, Timeline

__all__ = ["MAX_TRACE_TRANSFERS", "PID", "chrome_trace", "write_chrome_trace"]

PID = 1
"""The one process of the trace (not 0, which Perfetto reserves for the idle task)."""

_FLOW = "transfer"  # name and cat of flow events (Perfetto pairs flows by id, cat and name)

Event = dict[str, Any]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class _Transfers:
    """All transfers kept, flattened and sorted by start; times in whole nanoseconds."""

    name: list[str]
    src_rank: IntArray
    dst_rank: IntArray
    size_bytes: IntArray
    start_ns: IntArray
    end_ns: IntArray
    omitted: int


#: Transfers a trace holds by default, the earliest first: about 0.5 KB each in the file
#: (ddp-buckets' first point, 92,160 transfers, wrote 45 MB; issue 31 saw 90 MB), so
#: about 10 MB; every span (compute, calls) is kept whatever the count.
MAX_TRACE_TRANSFERS = 20_000


def chrome_trace(
    timeline: Timeline, *, title: str = "simcoll", max_transfers: int = MAX_TRACE_TRANSFERS
) -> dict[str, Any]:
    """The timeline as a Chrome Trace Event Format object (see the module docstring).

    Parameters
    ----------
    timeline
        What to export.
    title
        Name of the trace's process, shown by the viewer.
    max_transfers
        At most this many transfers are exported, the earliest by start time; how many
        were left out is ``otherData["transfers_omitted"]`` (0 when none). Spans are
        always exported in full.

    Returns
    -------
    dict
        ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``, ready
        for :func:`json.dumps`.

    Raises
    ------
    ValueError
        If ``max_transfers`` is negative.
    """
    if max_transfers < 0:
        raise ValueError(f"max_transfers must be >= 0, got {max_transfers}")
    transfers = _flatten(timeline, max_transfers)
    send_lane = _lanes(transfers.src_rank, transfers.start_ns, transfers.end_ns)
    recv_lane = _lanes(transfers.dst_rank, transfers.start_ns, transfers.end_ns)
    tids = _threads(timeline, transfers, send_lane, recv_lane)
    events = [_meta("process_name", PID, {"name": title})]
    for (rank, kind), tid in tids.items():
        events.append(_meta("thread_name", tid, {"name": f"rank {rank} {kind}"}))
        events.append(_meta("thread_sort_index", tid, {"sort_index": tid}))
    events += _span_events(timeline, tids)
    events += _transfer_events(transfers, send_lane, recv_lane, tids)
    other = {
        "title": title,
        "generator": "simcoll",
        "n_ranks": timeline.n_ranks,
        "time_s": timeline.time_s,
        "n_transfers": timeline.n_transfers(),
        "transfers_omitted": transfers.omitted,
    }
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


#: The first key of a trace file simcoll writes: only such a file is replaced.
TRACE_MARK = b'{"_written_by":"simcoll"'


def write_chrome_trace(timeline: Timeline, path: str | Path, **kw: Any) -> Path:
    """Write :func:`chrome_trace` of ``timeline`` to ``path`` as compact JSON.

    Keyword arguments go to :func:`chrome_trace`. Parent folders are created. The file
    starts with a ``_written_by`` key (trace viewers ignore it); an existing file
    without it is not overwritten (:func:`simcoll.core.files.write_output`).
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {"_written_by": "simcoll", **chrome_trace(timeline, **kw)}
    return write_output(out, json.dumps(data, separators=(",", ":")), mark=TRACE_MARK)


def _ns(time_s: Any) -> IntArray:
    return np.rint(np.asarray(time_s, dtype=np.float64) * 1e9).astype(np.int64)


def _us(time_ns: int) -> float:
    return time_ns / 1000


def _flatten(timeline: Timeline, max_transfers: int) -> _Transfers:
    batches = [b for b in timeline.transfers if len(b)]
    if not batches:
        empty = np.zeros(0, dtype=np.int64)
        return _Transfers([], empty, empty, empty, empty, empty, 0)
    start_s = np.concatenate([b.start_s for b in batches])
    order = np.argsort(start_s, kind="stable")[:max_transfers]
    which = np.concatenate([np.full(len(b), i) for i, b in enumerate(batches)])[order]

    def column(attribute: str) -> IntArray:
        values = np.concatenate([getattr(b, attribute) for b in batches])[order]
        return _ns(values) if attribute.endswith("_s") else values.astype(np.int64)

    return _Transfers(
        name=[batches[i].name for i in which.tolist()],
        src_rank=column("src_rank"),
        dst_rank=column("dst_rank"),
        size_bytes=column("size_bytes"),
        start_ns=column("start_s"),
        end_ns=column("end_s"),
        omitted=len(start_s) - len(order),
    )


def _lanes(rank: IntArray, start_ns: IntArray, end_ns: IntArray) -> list[int]:
    """Lane of each interval among those of its rank, by greedy interval partitioning.

    Intervals come sorted by start; each takes the lowest-numbered lane whose last
    interval has ended (touching is not overlapping), or opens a new one.

    >>> _lanes(np.array([0, 0, 0, 1]), np.array([0, 1, 2, 0]), np.array([2, 3, 4, 1]))
    [0, 1, 0, 0]
    """
    lane = [0] * len(rank)
    busy: dict[int, list[tuple[int, int]]] = {}  # rank -> heap of (end, lane)
    free: dict[int, list[int]] = {}  # rank -> heap of free lanes
    opened: dict[int, int] = {}
    columns = zip(rank.tolist(), start_ns.tolist(), end_ns.tolist(), strict=True)
    for i, (r, a, b) in enumerate(columns):
        ends, idle = busy.setdefault(r, []), free.setdefault(r, [])
        while ends and ends[0][0] <= a:
            heapq.heappush(idle, heapq.heappop(ends)[1])
        if idle:
            lane[i] = heapq.heappop(idle)
        else:
            lane[i] = opened.get(r, 0)
            opened[r] = lane[i] + 1
        heapq.heappush(ends, (b, lane[i]))
    return lane


def _lane_name(kind: str, lane: int) -> str:
    return kind if lane == 0 else f"{kind} {lane}"


def _threads(
    timeline: Timeline, transfers: _Transfers, send_lane: list[int], recv_lane: list[int]
) -> dict[tuple[int, str], int]:
    """tid of each (rank, thread name suffix), rank-major: streams, sends, receives."""
    kinds: dict[int, list[str]] = {}
    for rank in sorted({s.rank for s in timeline.spans}):
        kinds[rank] = list(timeline.streams(rank))
    sides = (("send", transfers.src_rank, send_lane), ("recv", transfers.dst_rank, recv_lane))
    for kind, ranks, lanes in sides:
        used: dict[int, int] = {}
        for rank, lane in zip(ranks.tolist(), lanes, strict=True):
            used[rank] = max(used.get(rank, 0), lane + 1)
        for rank, n_lanes in used.items():
            kinds.setdefault(rank, []).extend(_lane_name(kind, i) for i in range(n_lanes))
    names = [(rank, kind) for rank in sorted(kinds) for kind in kinds[rank]]
    return {name: tid for tid, name in enumerate(names, start=1)}


def _meta(name: str, tid: int, args: dict[str, Any]) -> Event:
    return {"name": name, "ph": "M", "pid": PID, "tid": tid, "args": args}


def _slice(name: str, cat: str, tid: int, interval_ns: tuple[int, int], args: Event) -> Event:
    start_ns, end_ns = interval_ns
    return {"name": name, "cat": cat, "ph": "X", "ts": _us(start_ns),
            "dur": _us(max(0, end_ns - start_ns)), "pid": PID, "tid": tid,
            "args": args}  # fmt: skip


def _span_events(timeline: Timeline, tids: dict[tuple[int, str], int]) -> list[Event]:
    events = []
    for (rank, stream), tid in tids.items():
        for span in timeline.spans_of(rank, stream):
            start_ns, end_ns = _ns([span.start_s, span.end_s]).tolist()
            cat = "compute" if span.stream == COMPUTE else "comm"
            args = {"rank": rank, "stream": stream}
            events.append(_slice(span.name, cat, tid, (start_ns, end_ns), args))
    return events


def _transfer_events(
    transfers: _Transfers,
    send_lane: list[int],
    recv_lane: list[int],
    tids: dict[tuple[int, str], int],
) -> list[Event]:
    """Send slice, flow start, receive slice, flow end, transfer by transfer.

    The order matters to Perfetto, which binds a flow event to the slice open on its
    thread when the event is read: each slice comes before its flow event, and a flow
    end (at the end of its receive slice) before any later slice that starts then.
    """
    events = []
    columns = zip(transfers.name, transfers.src_rank.tolist(), transfers.dst_rank.tolist(),
                  transfers.size_bytes.tolist(), transfers.start_ns.tolist(),
                  transfers.end_ns.tolist(), send_lane, recv_lane, strict=True)  # fmt: skip
    for flow_id, (name, src, dst, size, a, b, send, recv) in enumerate(columns):
        args = {"src_rank": src, "dst_rank": dst, "size_bytes": size}
        send_tid = tids[src, _lane_name("send", send)]
        recv_tid = tids[dst, _lane_name("recv", recv)]
        events += [
            _slice(name, "send", send_tid, (a, b), args),
            _flow("s", flow_id, send_tid, a),
            _slice(name, "recv", recv_tid, (a, b), args),
            _flow("f", flow_id, recv_tid, b) | {"bp": "e"},
        ]
    return events


def _flow(phase: str, flow_id: int, tid: int, time_ns: int) -> Event:
    return {"name": _FLOW, "cat": _FLOW, "ph": phase, "id": flow_id, "ts": _us(time_ns),
            "pid": PID, "tid": tid}  # fmt: skip
