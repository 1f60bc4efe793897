"""Chrome / Perfetto trace export of a Timeline: schema, busy times, nesting, lanes, cap."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simcoll.core.errors import ConfigError
from simcoll.output.trace import MAX_TRACE_TRANSFERS, PID, chrome_trace, write_chrome_trace
from simcoll.scenarios.workloads import run_workload
from simcoll.sim.timeline import Span, Timeline, TransferBatch
from simcoll.topology import switch_star

US = 1e-6


def batch(name: str, transfers: list[tuple[int, int, int, float, float]]) -> TransferBatch:
    """``(src, dst, size_bytes, start_us, end_us)`` rows as a batch (times given in µs)."""
    src, dst, size, start, end = zip(*transfers, strict=True)
    return TransferBatch(
        name=name,
        src_rank=np.array(src),
        dst_rank=np.array(dst),
        size_bytes=np.array(size),
        start_s=np.array(start) * US,
        end_s=np.array(end) * US,
    )


def span(rank: int, stream: str, name: str, start_us: float, end_us: float) -> Span:
    return Span(rank=rank, stream=stream, name=name, start_s=start_us * US, end_s=end_us * US)


@pytest.fixture
def timeline() -> Timeline:
    """Two ranks; rank 1 in two collectives at once (comm and comm 1); three transfers."""
    return Timeline(
        n_ranks=2,
        time_s=6 * US,
        spans=(
            span(0, "compute", "forward", 0, 2),
            span(0, "compute", "backward", 3, 4),
            span(0, "comm", "allreduce", 1, 3),
            span(1, "comm", "allreduce", 0.5, 2.5),
            span(1, "comm 1", "allgather", 1, 1.5),
        ),
        transfers=(
            batch("allreduce", [(0, 1, 1024, 1, 2), (1, 0, 1024, 1, 2.5)]),
            batch("allgather", [(0, 1, 512, 1.5, 3)]),  # overlaps rank 0's first send
        ),
    )


def x_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def thread_names(trace: dict[str, Any]) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}


def assert_schema(trace: dict[str, Any]) -> None:
    """The subset of the Chrome Trace Event Format this exporter promises."""
    assert set(trace) == {"traceEvents", "displayTimeUnit", "otherData"}
    assert trace["displayTimeUnit"] == "ns"
    flows: dict[int, list[dict[str, Any]]] = {}
    for event in trace["traceEvents"]:
        assert event["ph"] in {"X", "M", "s", "f"}, event
        assert type(event["pid"]) is int, event
        assert type(event["tid"]) is int, event
        assert event["pid"] == PID
        assert isinstance(event["name"], str)
        if event["ph"] == "X":
            assert isinstance(event["ts"], int | float)
            assert isinstance(event["dur"], int | float)
            assert event["dur"] >= 0
            assert event["cat"] in {"compute", "comm", "send", "recv"}
        elif event["ph"] == "M":
            assert event["name"] in {"process_name", "thread_name", "thread_sort_index"}
        else:
            flows.setdefault(event["id"], []).append(event)
    for flow_id, (start, end) in flows.items():  # exactly one start and one end per id
        assert (start["ph"], end["ph"]) == ("s", "f"), flow_id
        assert (start["cat"], start["name"]) == (end["cat"], end["name"])
        assert end["bp"] == "e"
        assert start["ts"] <= end["ts"]
    named = thread_names(trace)
    assert all(e["tid"] in named for e in trace["traceEvents"] if e["ph"] != "M")


def test_trace_round_trips_through_json_and_meets_the_schema(
    timeline: Timeline, tmp_path: Path
) -> None:
    out = write_chrome_trace(timeline, tmp_path / "deep" / "run.trace.json", title="demo")
    assert out == tmp_path / "deep" / "run.trace.json"
    trace = json.loads(out.read_text())
    # the first key marks the file as simcoll's (only such a file is ever replaced)
    assert trace.pop("_written_by") == "simcoll"
    assert trace == json.loads(json.dumps(chrome_trace(timeline, title="demo")))
    assert_schema(trace)
    process = [e for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert [e["args"]["name"] for e in process] == ["demo"]
    assert trace["otherData"]["n_transfers"] == 3
    assert trace["otherData"]["transfers_omitted"] == 0


def test_a_file_simcoll_did_not_write_is_not_replaced(timeline: Timeline, tmp_path: Path) -> None:
    mine = tmp_path / "mine.json"
    mine.write_text('{"traceEvents": []}')
    with pytest.raises(ConfigError, match="exists and was not written by simcoll"):
        write_chrome_trace(timeline, mine)
    assert mine.read_text() == '{"traceEvents": []}'
    ours = write_chrome_trace(timeline, tmp_path / "ours.json")
    assert write_chrome_trace(timeline, ours) == ours  # its own file is replaced


def test_threads_go_rank_by_rank_with_sort_indices(timeline: Timeline) -> None:
    trace = chrome_trace(timeline)
    names = thread_names(trace)
    # Rank 0: compute, comm, two send lanes (its sends overlap from 1.5 to 2 us), recv.
    assert [names[tid] for tid in sorted(names)] == [
        "rank 0 compute",
        "rank 0 comm",
        "rank 0 send",
        "rank 0 send 1",
        "rank 0 recv",
        "rank 1 comm",
        "rank 1 comm 1",
        "rank 1 send",
        "rank 1 recv",
        "rank 1 recv 1",
    ]
    sort = {e["tid"]: e["args"]["sort_index"] for e in trace["traceEvents"]
            if e["name"] == "thread_sort_index"}  # fmt: skip
    assert sort == {tid: tid for tid in names}
    assert 0 not in names  # Perfetto treats tid 0 as the idle task
    assert chrome_trace(timeline) == trace  # deterministic


def test_busy_time_per_thread_equals_the_timeline(timeline: Timeline) -> None:
    trace = chrome_trace(timeline)
    names = thread_names(trace)
    busy_us = Counter[str]()
    for event in x_events(trace):
        busy_us[names[event["tid"]]] += event["dur"]
    # By hand: rank 0 computes 0-2 and 3-4 us (3 us) and is in an all-reduce 1-3 (2 us);
    # rank 1 is in its all-reduce 0.5-2.5 (2 us) and its all-gather 1-1.5 (0.5 us).
    expected_us = {
        (0, "compute"): 3.0,
        (0, "comm"): 2.0,
        (1, "comm"): 2.0,
        (1, "comm 1"): 0.5,
    }
    for (rank, stream), value_us in expected_us.items():
        assert busy_us[f"rank {rank} {stream}"] == pytest.approx(value_us, abs=1e-9)
        assert busy_us[f"rank {rank} {stream}"] == pytest.approx(
            timeline.busy_s(rank, stream) * 1e6, abs=1e-9
        )
    # Sends: rank 0 sent 1-2 and 1.5-3 us, rank 1 sent 1-2.5 us.
    assert busy_us["rank 0 send"] + busy_us["rank 0 send 1"] == pytest.approx(2.5)
    assert busy_us["rank 1 send"] == pytest.approx(1.5)


def assert_nested(trace: dict[str, Any]) -> None:
    """Slices of one thread either nest or are disjoint (touching is fine)."""
    by_tid: dict[int, list[tuple[float, float]]] = {}
    for e in x_events(trace):
        by_tid.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    for tid, slices in by_tid.items():
        open_ends: list[float] = []
        for start, end in sorted(slices, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start + 1e-9:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1] + 1e-9, (tid, start, end)
            open_ends.append(end)


def test_slices_on_one_thread_nest_properly(timeline: Timeline) -> None:
    assert_nested(chrome_trace(timeline))


def test_overlapping_sends_are_spread_over_lanes() -> None:
    # Rank 0 sends to 1, 2, 3 at once (0-3, 1-4, 2-5 us): three lanes. A fourth send
    # 3-6 us starts when the first ends, so it takes lane 0 again (touching is fine).
    sends = [(0, 1, 8, 0, 3), (0, 2, 8, 1, 4), (0, 3, 8, 2, 5), (0, 1, 8, 3, 6)]
    trace = chrome_trace(Timeline(n_ranks=4, time_s=6 * US, transfers=(batch("alltoall", sends),)))
    names = thread_names(trace)
    lane_of = [names[e["tid"]] for e in x_events(trace) if e["cat"] == "send"]
    assert lane_of == ["rank 0 send", "rank 0 send 1", "rank 0 send 2", "rank 0 send"]
    recv_threads = {names[e["tid"]] for e in x_events(trace) if e["cat"] == "recv"}
    assert recv_threads == {"rank 1 recv", "rank 2 recv", "rank 3 recv"}
    assert_nested(trace)
    assert_schema(trace)


def test_times_are_whole_nanoseconds_so_back_to_back_transfers_share_a_lane() -> None:
    # 0.1 + 0.2 is 0.30000000000000004 in binary floating point: without rounding, the
    # second send would overlap the first by 4e-17 s and need a lane of its own.
    first = TransferBatch("a", np.array([0]), np.array([1]), np.array([8]),
                          np.array([0.0]), np.array([0.1 + 0.2]))  # fmt: skip
    second = TransferBatch("b", np.array([0]), np.array([1]), np.array([8]),
                           np.array([0.3]), np.array([0.5]))  # fmt: skip
    trace = chrome_trace(Timeline(n_ranks=2, time_s=0.5, transfers=(first, second)))
    assert set(thread_names(trace).values()) == {"rank 0 send", "rank 1 recv"}
    sends = [(e["ts"], e["dur"]) for e in x_events(trace) if e["cat"] == "send"]
    assert sends == [(0.0, 300_000.0), (300_000.0, 200_000.0)]


def test_each_transfer_has_a_flow_from_its_send_start_to_its_receive_end(
    timeline: Timeline,
) -> None:
    trace = chrome_trace(timeline)
    names = thread_names(trace)
    starts = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "f"}
    assert sorted(starts) == sorted(ends) == [0, 1, 2]
    flows = sorted(
        (names[starts[i]["tid"]], starts[i]["ts"], names[ends[i]["tid"]], ends[i]["ts"])
        for i in starts
    )
    assert flows == [
        ("rank 0 send", 1.0, "rank 1 recv", 2.0),
        ("rank 0 send 1", 1.5, "rank 1 recv 1", 3.0),
        ("rank 1 send", 1.0, "rank 0 recv", 2.5),
    ]
    slices = [e for e in x_events(trace) if e["cat"] == "send"]
    assert {(e["name"], e["args"]["src_rank"], e["args"]["dst_rank"], e["args"]["size_bytes"])
            for e in slices} == {("allreduce", 0, 1, 1024), ("allreduce", 1, 0, 1024),
                                 ("allgather", 0, 1, 512)}  # fmt: skip


def test_the_cap_keeps_the_earliest_transfers_and_says_how_many_it_dropped() -> None:
    late_first = [(0, 1, 8, float(t), float(t) + 0.5) for t in (4, 3, 2, 1, 0)]
    timeline = Timeline(n_ranks=2, time_s=5 * US, transfers=(batch("ring", late_first),))
    trace = chrome_trace(timeline, max_transfers=2)
    assert trace["otherData"]["transfers_omitted"] == 3
    assert trace["otherData"]["n_transfers"] == 5
    assert sorted(e["ts"] for e in x_events(trace) if e["cat"] == "send") == [0.0, 1.0]
    assert sum(e["ph"] == "s" for e in trace["traceEvents"]) == 2
    assert_schema(trace)


def test_an_empty_timeline_is_a_named_process_and_nothing_else() -> None:
    trace = chrome_trace(Timeline(n_ranks=4, time_s=0.0), title="nothing")
    assert trace["traceEvents"] == [
        {"name": "process_name", "ph": "M", "pid": PID, "tid": PID, "args": {"name": "nothing"}}
    ]
    assert_schema(trace)


def test_a_negative_cap_is_refused(timeline: Timeline) -> None:
    with pytest.raises(ValueError, match="max_transfers"):
        chrome_trace(timeline, max_transfers=-1)


def test_a_simulated_workload_exports_a_valid_trace_whose_slices_sum_to_busy_time() -> None:
    topo = switch_star(4, link_bandwidth_bytes_per_s=10e9, link_latency_s=1e-6)
    result = run_workload(
        "fsdp", topo, n_layers=3, params_bytes=12_000_000, forward_s_per_layer=1e-4,
        backward_s_per_layer=2e-4,
    )  # fmt: skip
    timeline = result.timeline
    trace = json.loads(json.dumps(chrome_trace(timeline)))
    assert_schema(trace)
    assert_nested(trace)
    names = thread_names(trace)
    busy_us = Counter[str]()
    for event in x_events(trace):
        busy_us[names[event["tid"]]] += event["dur"]
    for rank in range(4):
        for stream in timeline.streams(rank):
            assert busy_us[f"rank {rank} {stream}"] == pytest.approx(
                timeline.busy_s(rank, stream) * 1e6, rel=1e-9, abs=1e-3
            )
        sent_s = sum(
            float((b.end_s - b.start_s)[b.src_rank == rank].sum()) for b in timeline.transfers
        )
        lanes = [n for n in names.values() if n.startswith(f"rank {rank} send")]
        assert sum(busy_us[n] for n in lanes) == pytest.approx(sent_s * 1e6, rel=1e-9, abs=1e-3)
    assert trace["otherData"]["n_transfers"] == timeline.n_transfers()


def test_by_default_a_trace_keeps_the_first_20000_transfers() -> None:
    # issue 31: each DDP point wrote a 90 MB trace (every one of its 92,160 transfers at
    # about 0.5 KB); by default the earliest 20,000 are kept, and every span
    n = MAX_TRACE_TRANSFERS + 3
    ranks = np.zeros(n, dtype=np.int64)
    starts = np.arange(n, dtype=np.float64) * US
    transfers = TransferBatch("ring", ranks, ranks + 1, np.full(n, 8), starts, starts + US / 2)
    timeline = Timeline(n_ranks=2, time_s=n * US, transfers=(transfers,))
    trace = chrome_trace(timeline)
    assert MAX_TRACE_TRANSFERS == 20_000
    assert trace["otherData"]["transfers_omitted"] == 3
    assert sum(e["ph"] == "s" for e in trace["traceEvents"]) == MAX_TRACE_TRANSFERS
