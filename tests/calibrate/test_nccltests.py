"""Tests of simcoll.calibrate.nccltests: parsing old, new and 2025 nccl-tests logs, printing
them back.

The log snippets below are written by hand in the exact printf layout of each nccl-tests
version (see the module docstring for the sources); their algbw/busbw columns were worked
out from size and time, so the tests can recompute them.
"""

from __future__ import annotations

import importlib.util
from decimal import Decimal
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcoll.calibrate.measurements import Measurement
from simcoll.calibrate.nccltests.read import (
    collective_from_name,
    n_ranks_from_name,
    parse_log,
    seconds_from_us,
)
from simcoll.calibrate.nccltests.write import LogHeader, format_log, oop_ip_pairs, time_text
from simcoll.calibrate.read import read_measurements
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
PUBLIC = REPO / "validation" / "data" / "public"
LOGS = REPO / "validation" / "data" / "nccl-tests-logs"

# all_reduce_perf -b 8 -e 1G -f 2 -g 8 as nccl-tests 2.13 prints it (4 of its lines), with a
# line of NCCL's own output in between as real runs have.
NEW_ALL_REDUCE = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  51234 on    dgx-a01 device  0 [0x07] NVIDIA A100-SXM4-40GB
#  Rank  1 Group  0 Pid  51234 on    dgx-a01 device  1 [0x0f] NVIDIA A100-SXM4-40GB
#  Rank  2 Group  0 Pid  51234 on    dgx-a01 device  2 [0x47] NVIDIA A100-SXM4-40GB
#  Rank  3 Group  0 Pid  51234 on    dgx-a01 device  3 [0x4e] NVIDIA A100-SXM4-40GB
#  Rank  4 Group  0 Pid  51234 on    dgx-a01 device  4 [0x87] NVIDIA A100-SXM4-40GB
#  Rank  5 Group  0 Pid  51234 on    dgx-a01 device  5 [0x90] NVIDIA A100-SXM4-40GB
#  Rank  6 Group  0 Pid  51234 on    dgx-a01 device  6 [0xb7] NVIDIA A100-SXM4-40GB
#  Rank  7 Group  0 Pid  51234 on    dgx-a01 device  7 [0xbd] NVIDIA A100-SXM4-40GB
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
dgx-a01:51234:51234 [0] NCCL INFO Launch mode Parallel
           8             2     float     sum      -1    35.20    0.00    0.00      0    34.88    0.00    0.00      0
     1048576        262144     float     sum      -1    46.51   22.55   39.45      0    45.97   22.81   39.92      0
   134217728      33554432     float     sum      -1   1204.3  111.45  195.04      0   1210.8  110.85  193.99      0
  1073741824     268435456     float     sum      -1   8159.5  131.59  230.29      0   8163.1  131.54  230.19      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 108.603 
#

"""  # noqa: E501, W291 - a log line is as long as nccl-tests prints it, trailing blanks included

# all_gather_perf -b 1 -e 128M -f 2 -g 8 -c 1 as nccl-tests of 2019-2021 prints it: no redop
# or root column, an "error" column of %5.0le, "#   Rank ... Pid" lines without a group.
OLD_ALL_GATHER = """\
# nThread 1 nGpus 8 minBytes 1 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 validation: 1 
#
# Using devices
#   Rank  0 Pid  70311 on    gpunode device  0 [0x07] A100-SXM4-40GB
#   Rank  1 Pid  70311 on    gpunode device  1 [0x0f] A100-SXM4-40GB
#   Rank  2 Pid  70311 on    gpunode device  2 [0x47] A100-SXM4-40GB
#   Rank  3 Pid  70311 on    gpunode device  3 [0x4e] A100-SXM4-40GB
#   Rank  4 Pid  70311 on    gpunode device  4 [0x87] A100-SXM4-40GB
#   Rank  5 Pid  70311 on    gpunode device  5 [0x90] A100-SXM4-40GB
#   Rank  6 Pid  70311 on    gpunode device  6 [0xb7] A100-SXM4-40GB
#   Rank  7 Pid  70311 on    gpunode device  7 [0xbd] A100-SXM4-40GB
#
#                                             out-of-place                       in-place          
#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
           0             0   float    34.27    0.00    0.00  0e+00    33.57    0.00    0.00  0e+00
          32             1   float    35.03    0.00    0.00  0e+00    34.15    0.00    0.00  0e+00
     1048576         32768   float    72.95   14.37   12.58  0e+00    73.07   14.35   12.56  0e+00
   134217728       4194304   float    698.6  192.12  168.11  0e+00    657.3  204.20  178.67  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 45.0004 
#
"""  # noqa: E501, W291

# nccl-tests 2.17 (2025) under mpirun --tag-output, in a file whose name says nothing: the
# test names itself, bus ids are domain:bus:device, times fill 7 columns, #wrong is %6g.
NEW_2025_TAGGED = """\
[1,0]<stdout>:# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807
[1,0]<stdout>:# Collective test starting: all_gather_perf
[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 4096 maxBytes 1073741824 step: 64(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
[1,0]<stdout>:#
[1,0]<stdout>:# Using devices
[1,0]<stdout>:#  Rank  0 Group  0 Pid   8812 on      h100a device  0 [0000:18:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank  1 Group  0 Pid   8813 on      h100a device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank  2 Group  0 Pid   8814 on      h100a device  2 [0000:3a:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank  3 Group  0 Pid   8815 on      h100a device  3 [0000:5d:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#
[1,0]<stdout>:#                                                              out-of-place                       in-place          
[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong 
[1,0]<stdout>:#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         
[1,0]<stdout>:        4096           512  bfloat16    none      -1    18.43    0.22    0.17       0    18.02    0.23    0.17       0
[1,0]<stdout>:      262144         32768  bfloat16    none      -1    24.87   10.54    7.91       0    24.61   10.65    7.99       0
[1,0]<stdout>:    16777216       2097152  bfloat16    none      -1   187.25   89.60   67.20       0   186.90   89.77   67.32       0
[1,0]<stdout>:  1073741824     134217728  bfloat16    none      -1  5497.30  195.32  146.49       0  5490.80  195.55  146.66       0
[1,0]<stdout>:# Out of bounds values : 0 OK
[1,0]<stdout>:# Avg bus bandwidth    : 55.4888 
[1,0]<stdout>:#
[1,0]<stdout>:# Collective test concluded: all_gather_perf
"""  # noqa: E501, W291


def _printed(text: str) -> list[tuple[str, ...]]:
    """The data lines of a log as tokens (the mpirun tag removed)."""
    lines = [line.split(":", 1)[-1] if line.startswith("[") else line for line in text.splitlines()]
    return [tuple(line.split()) for line in lines if line[:12].strip().isdigit()]


def _print_tolerance(time_us: str, bandwidth_gb_per_s: float) -> float:
    """How far a bandwidth recomputed from a printed time may sit from the printed one.

    The printed bandwidth is rounded to 0.005 GB/s; the time to half its last digit, which
    moves the recomputed bandwidth by that fraction of itself.
    """
    exponent = Decimal(time_us).as_tuple().exponent
    assert isinstance(exponent, int)
    half_digit = Decimal(5).scaleb(exponent - 1)
    return 0.005 + bandwidth_gb_per_s * float(half_digit / Decimal(time_us)) + 1e-9


def _check_bandwidths(rows: tuple[Measurement, ...], text: str, tokens_before_time: int) -> None:
    """algbw = size/time and busbw = algbw x factor(n), as printed within print rounding."""
    for (oop, ip), tokens in zip(oop_ip_pairs(rows), _printed(text), strict=True):
        for m, start in ((oop, tokens_before_time), (ip, tokens_before_time + 4)):
            time_us, algbw, busbw = tokens[start], float(tokens[start + 1]), tokens[start + 2]
            factor = Collective.parse(m.collective).busbw_factor(m.n_ranks)
            recomputed = m.algbw_bytes_per_s / 1e9
            assert recomputed == pytest.approx(algbw, abs=_print_tolerance(time_us, recomputed))
            assert m.busbw_bytes_per_s / 1e9 == pytest.approx(recomputed * factor)
            assert recomputed * factor == pytest.approx(
                float(busbw), abs=_print_tolerance(time_us, recomputed * factor)
            )


def test_new_layout_rows_are_the_printed_values_in_seconds():
    runs = parse_log(NEW_ALL_REDUCE, source="logs/all_reduce_perf_8xA100.log")
    assert [(m.size_bytes, m.time_s, m.in_place) for m in runs.rows[:4]] == [
        (8, 3.52e-05, False),  # 35.20 us
        (8, 3.488e-05, True),
        (1048576, 4.651e-05, False),
        (1048576, 4.597e-05, True),
    ]
    assert runs.rows[-1].time_s == 8.1631e-03  # 8163.1 us
    assert {(m.collective, m.n_ranks, m.dtype, m.redop, m.root) for m in runs.rows} == {
        ("allreduce", 8, "float", "sum", -1)
    }
    assert [m.count for m in runs.rows[::2]] == [2, 262144, 33554432, 268435456]  # size / 4 B


def test_new_layout_bandwidths_recomputed_match_the_printed_ones():
    runs = parse_log(NEW_ALL_REDUCE, source="all_reduce_perf.log")
    assert Collective.ALLREDUCE.busbw_factor(8) == 2 * 7 / 8
    _check_bandwidths(runs.rows, NEW_ALL_REDUCE, tokens_before_time=5)


def test_new_layout_metadata_is_the_header_and_footer():
    meta = parse_log(NEW_ALL_REDUCE, source="all_reduce_perf.log").metadata
    assert {k: meta[k] for k in ("nThread", "nGpus", "minBytes", "maxBytes", "step")} == {
        "nThread": 1, "nGpus": 8, "minBytes": 8, "maxBytes": 1073741824, "step": "2(factor)"
    }  # fmt: skip
    assert (meta["warmup iters"], meta["iters"], meta["agg iters"]) == (5, 20, 1)
    assert (meta["validation"], meta["graph"], meta["layout"]) == (1, 0, "new")
    assert (meta["Out of bounds values"], meta["Avg bus bandwidth"]) == (0, 108.603)
    assert len(meta["devices"]) == 8
    assert meta["devices"][1] == {
        "rank": 1, "group": 0, "pid": 51234, "device": 1, "host": "dgx-a01", "bus_id": "0x0f",
        "name": "NVIDIA A100-SXM4-40GB",
    }  # fmt: skip


def test_old_all_gather_has_no_redop_or_root_column():
    runs = parse_log(OLD_ALL_GATHER, source="nccl_all_gather_perf.out")
    assert runs.metadata["layout"] == "old"
    assert runs.metadata["validation"] == 1
    assert runs.metadata["devices"][7] == {
        "rank": 7, "pid": 70311, "device": 7, "host": "gpunode", "bus_id": "0xbd",
        "name": "A100-SXM4-40GB",
    }  # fmt: skip
    assert [(m.size_bytes, m.count, m.time_s) for m in runs.rows[::2]] == [
        (0, 0, 3.427e-05),
        (32, 1, 3.503e-05),  # count is per rank: 32 B / 4 B / 8 ranks
        (1048576, 32768, 7.295e-05),
        (134217728, 4194304, 6.986e-04),
    ]
    assert {(m.collective, m.n_ranks, m.redop, m.root) for m in runs.rows} == {
        ("allgather", 8, "", -1)
    }
    _check_bandwidths(runs.rows, OLD_ALL_GATHER, tokens_before_time=3)


def test_2025_layout_under_mpirun_names_its_own_test():
    runs = parse_log(NEW_2025_TAGGED, source="job-4711.out")
    assert {(m.collective, m.n_ranks, m.dtype, m.redop) for m in runs.rows} == {
        ("allgather", 4, "bfloat16", "none")
    }
    assert [m.time_s for m in runs.rows] == [
        1.843e-05, 1.802e-05, 2.487e-05, 2.461e-05, 1.8725e-04, 1.869e-04, 5.4973e-03, 5.4908e-03
    ]  # fmt: skip
    assert [m.count for m in runs.rows[::2]] == [512, 32768, 2097152, 134217728]  # 2 B, 4 ranks
    assert runs.metadata["nccl-tests version"] == "2.17.6"
    assert runs.metadata["nccl-library"] == 22807
    assert runs.metadata["Collective test"] == "all_gather_perf"
    assert runs.metadata["devices"][3]["bus_id"] == "0000:5d:00"
    _check_bandwidths(runs.rows, NEW_2025_TAGGED, tokens_before_time=5)


def test_repeated_rank_lines_count_each_rank_once():
    lines = NEW_ALL_REDUCE.splitlines(keepends=True)
    doubled = "".join(lines[:11] + lines[3:11] + lines[11:])
    assert parse_log(doubled, source="all_reduce_perf.log").rows[0].n_ranks == 8


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("all_reduce_perf.log", Collective.ALLREDUCE),
        ("reduce_scatter_perf.log", Collective.REDUCESCATTER),
        ("nccl_allgather_8xA100.csv", Collective.ALLGATHER),
        ("alltoall_perf.txt", Collective.ALLTOALL),
        ("sendrecv_perf.out", Collective.SENDRECV),
        ("broadcast_perf.log", Collective.BROADCAST),
        ("reduce_perf.log", Collective.REDUCE),
        ("gather_perf.log", Collective.GATHER),
        ("scatter_perf.log", Collective.SCATTER),
        ("alltoallv_perf.log", None),
        ("all_reduce_vs_all_gather.log", None),
        ("run-17.log", None),
    ],
)
def test_collective_from_name(name, expected):
    assert collective_from_name(name) is expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [("x_8xA100_y.csv", 8), ("x_2x8xH100.csv", 16), ("16xH200.log", 16), ("all_reduce.log", None)],
)
def test_n_ranks_from_name(name, expected):
    assert n_ranks_from_name(name) == expected


def _replace_line(text: str, number: int, old: str, new: str) -> str:
    lines = text.splitlines(keepends=True)
    assert old in lines[number - 1]
    lines[number - 1] = lines[number - 1].replace(old, new, 1)
    return "".join(lines)


@pytest.mark.parametrize(
    ("text", "kwargs", "message"),
    [
        (
            _replace_line(NEW_ALL_REDUCE, 18, "46.51", "  abc"),
            {},
            "run.log: line 18: out-of-place time: not a number: 'abc'",
        ),
        (
            _replace_line(NEW_ALL_REDUCE, 18, "45.97", "-45.9"),
            {},
            "run.log: line 18: in-place time: must be positive, got -45.9",
        ),
        (
            _replace_line(NEW_ALL_REDUCE, 19, "111.45", "  fast"),
            {},
            "run.log: line 19: out-of-place algbw: not a number: 'fast'",
        ),
        (
            _replace_line(NEW_ALL_REDUCE, 17, "     sum", ""),
            {},
            "run.log: line 17: expected 13 columns (size count type redop root and two halves "
            "of 4), found 12: '8 2 float -1 35.20 0.00 0.00 0 34.88 0.00 0.00 0'",
        ),
        (
            _replace_line(NEW_ALL_REDUCE, 18, "262144", "  2.5e5"),
            {},
            "run.log: line 18: count: not an integer: '2.5e5'",
        ),
        (
            NEW_ALL_REDUCE.replace("#       size", "#      bytes_"),
            {},
            "run.log: line 17: a data line before the column header",
        ),
        (
            "# nThread 1 nGpus 8\n",
            {},
            "run.log: no nccl-tests column header ('# size count type ...')",
        ),
        (
            "".join(NEW_ALL_REDUCE.splitlines(keepends=True)[:15]),
            {},
            "run.log: no data lines under the column header",
        ),
        (
            NEW_ALL_REDUCE,
            {"collective": None},
            "run.log: cannot tell the collective; pass --collective",
        ),
        (
            NEW_ALL_REDUCE,
            {"collective": "allreduce", "n_ranks": 16},
            "run.log: 16 ranks given, but the log lists 8 ('# Rank' lines)",
        ),
        (
            "\n".join(line for line in NEW_ALL_REDUCE.splitlines() if "Rank" not in line),
            {"collective": "allreduce"},
            "run.log: cannot tell the number of ranks (no '# Rank' lines); pass --ranks",
        ),
        (
            NEW_ALL_REDUCE,
            {"collective": "all_reduce"},
            "unknown collective 'all_reduce'; valid: allreduce, allgather, reducescatter, "
            "alltoall, broadcast, reduce, gather, scatter, sendrecv",
        ),
    ],
)
def test_a_log_that_does_not_parse_says_where(text, kwargs, message):
    with pytest.raises(ConfigError) as info:
        parse_log(text, source="run.log", **kwargs)
    assert str(info.value) == message


def test_a_blank_root_column_reads_as_no_root():
    # Some nccl-tests versions printed "%6s" of "" as the root of all-reduce.
    text = _replace_line(NEW_ALL_REDUCE, 19, "     sum      -1", "     sum        ")
    rows = parse_log(text, source="all_reduce_perf.log").rows
    assert (rows[4].size_bytes, rows[4].redop, rows[4].root, rows[4].time_s) == (
        134217728, "sum", -1, 1.2043e-03
    )  # fmt: skip


def test_n_ranks_given_where_the_log_lists_none():
    text = "\n".join(line for line in NEW_ALL_REDUCE.splitlines() if "Rank" not in line)
    runs = parse_log(text, source="all_reduce_perf.log", n_ranks=8)
    assert {m.n_ranks for m in runs.rows} == {8}


@pytest.mark.parametrize(
    ("time_s", "text"),
    [(9.999e-05, "  99.99"), (1e-04, "  100.0"), (9.9999e-03, " 9999.9"), (1e-02, "  10000")],
)
def test_time_text_follows_the_nccl_tests_precision_steps(time_s, text):
    assert time_text(time_s) == text


_TYPE_BYTES = {"float": 4, "half": 2, "int8": 1, "double": 8, "bfloat16": 2}
_SIZES = st.integers(min_value=0, max_value=2**36).map(lambda k: k - k % 64)
_TIMES = st.floats(min_value=1e-6, max_value=10.0, allow_nan=False)


@st.composite
def _logs(draw: st.DrawFn) -> tuple[str, int, list[tuple[Measurement, Measurement]]]:
    collective = draw(st.sampled_from([c.value for c in Collective]))
    n_ranks = draw(st.integers(min_value=1, max_value=64))
    dtype = draw(st.sampled_from(sorted(_TYPE_BYTES)))
    pairs = []
    for size in draw(st.lists(_SIZES, min_size=1, max_size=6)):
        count = draw(st.integers(min_value=0, max_value=2**34))
        common = {"collective": collective, "n_ranks": n_ranks, "size_bytes": size,
                  "count": count, "dtype": dtype}  # fmt: skip
        oop = Measurement(**common, time_s=draw(_TIMES))
        ip = Measurement(**common, time_s=draw(_TIMES), in_place=True)
        pairs.append((oop, ip))
    return collective, n_ranks, pairs


@settings(max_examples=60, deadline=None)
@given(log=_logs(), layout=st.sampled_from(["old", "new"]))
def test_format_then_parse_gives_the_rows_back_to_print_precision(log, layout):
    collective, n_ranks, pairs = log
    text = format_log(pairs, collective=collective, n_ranks=n_ranks, layout=layout)
    runs = parse_log(text, source="x.log", collective=collective)
    expected = [m for pair in pairs for m in pair]
    assert len(runs.rows) == len(expected)
    for got, want in zip(runs.rows, expected, strict=True):
        assert (got.collective, got.n_ranks) == (collective, n_ranks)
        # a count of 0 (unknown) prints as nccl-tests would count the size
        count = want.count or Collective(collective).count(
            want.size_bytes, n_ranks, _TYPE_BYTES[want.dtype]
        )
        assert (got.size_bytes, got.count, got.dtype, got.in_place) == (
            want.size_bytes, count, want.dtype, want.in_place,
        )  # fmt: skip
        printed_us = time_text(want.time_s).strip()
        assert got.time_s == seconds_from_us(printed_us, source="x.log", field="time")
    assert runs.metadata["layout"] == layout


def test_old_layout_columns_follow_the_collective():
    m = Measurement(collective="reduce", n_ranks=2, size_bytes=64, time_s=1e-5, root=1)
    ip = Measurement(collective="reduce", n_ranks=2, size_bytes=64, time_s=1e-5, root=1,
                     in_place=True)  # fmt: skip
    text = format_log([(m, ip)], collective="reduce", n_ranks=2, layout="old")
    assert "    type   redop    root     time" in text
    assert "          64            16   float     sum       1    10.00" in text
    assert {r.root for r in parse_log(text, source="reduce_perf.log").rows} == {1}


def test_format_log_refuses_rows_of_another_collective():
    m = Measurement(collective="allgather", n_ranks=8, size_bytes=64, time_s=1e-5)
    with pytest.raises(ConfigError) as info:
        format_log([(m, m)], collective="allreduce", n_ranks=8)
    assert str(info.value) == "line 1 is allgather on 8 ranks, not allreduce on 8"


def test_ranks_must_spread_evenly_over_hosts():
    m = Measurement(collective="allreduce", n_ranks=3, size_bytes=64, time_s=1e-5)
    with pytest.raises(ConfigError) as info:
        format_log([(m, m)], collective="allreduce", n_ranks=3, header=LogHeader(hosts=("a", "b")))
    assert str(info.value) == "3 ranks do not spread evenly over 2 hosts"


def test_pairs_must_be_out_of_place_then_in_place():
    m = Measurement(collective="allreduce", n_ranks=8, size_bytes=64, time_s=1e-5)
    with pytest.raises(ConfigError) as info:
        oop_ip_pairs([m, m])
    assert str(info.value) == (
        "rows 1 and 2 are not an out-of-place and an in-place measurement of one size"
    )


def _regenerate_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "regenerate_logs", REPO / "validation" / "regenerate_logs.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REGENERATED = {
    "nccl_allgather_8xA100_nvswitch_superbench": ("allgather", 8, "old"),
    "nccl_allreduce_2x8xH100_ndr_ring_mincta24_nccltests309_gjaion": ("allreduce", 16, "new"),
    "nccl_allreduce_4x8xH100_ndr_nccltests309_gjaion": ("allreduce", 32, "new"),
    "nccl_allreduce_2x8xH100_ndr_nccltests309_gjaion": ("allreduce", 16, "new"),
    "nccl_allreduce_8x8xH100_ndr_nccltests309_gjaion": ("allreduce", 64, "new"),
    "nccl_allreduce_8x8xH100_ndr_mincta24_qps2_nccltests309_gjaion": ("allreduce", 64, "new"),
    "nccl_allreduce_2x8xH100_ndr_nccltests309_qoofyk": ("allreduce", 16, "new"),
    "nccl_allreduce_4x8xH100_ndr_vm_nccltests309_qoofyk": ("allreduce", 32, "new"),
    "nccl_allreduce_8xH100_nvswitch_nccltests290": ("allreduce", 8, "new"),
    "nccl_allreduce_8xA100_nvswitch_superbench": ("allreduce", 8, "old"),
    "nccl_allreduce_8xRTX4090_pcie_P2Pdriver_chlc": ("allreduce", 8, "new"),
    "nccl_allreduce_8xRTX4090_pcie_noP2P_chlc": ("allreduce", 8, "new"),
    "nccl_allreduce_8xV100_oci_bmgpu38_ocitutorials": ("allreduce", 8, "new"),
    "nccl_reducescatter_8xA100_nvswitch_superbench": ("reducescatter", 8, "old"),
    "nccl_sendrecv_8xA100_nvswitch_liplus": ("sendrecv", 8, "new"),
}


def test_every_public_table_has_a_regenerated_log():
    tables = {p.stem for p in PUBLIC.glob("nccl_*.csv")}
    assert tables == set(REGENERATED)
    assert {Path(name).stem for name in _regenerate_script().LOGS} == tables


@pytest.mark.parametrize("stem", sorted(REGENERATED))
def test_regenerated_log_parses_back_to_its_table(stem):
    collective, n_ranks, layout = REGENERATED[stem]
    log = read_measurements(LOGS / f"{stem}.log")
    table = read_measurements(PUBLIC / f"{stem}.csv")
    assert log.rows == table.rows  # sizes, counts, types, redops and both halves' times
    assert {(m.collective, m.n_ranks) for m in log.rows} == {(collective, n_ranks)}
    assert log.metadata["layout"] == layout
    table_lines = (PUBLIC / f"{stem}.csv").read_text().splitlines()[1:]
    for tokens, line in zip(_printed((LOGS / f"{stem}.log").read_text()), table_lines, strict=True):
        cells = line.split(",")
        start = len(tokens) - 8
        assert tokens[start : start + 3] == tuple(cells[4:7])  # time, algbw, busbw as printed
        assert tokens[start + 4 : start + 7] == tuple(cells[7:10])


def test_committed_logs_are_what_the_script_writes(tmp_path):
    written = _regenerate_script().regenerate(tmp_path)
    assert len(written) == len(REGENERATED)
    for path in written:
        assert path.read_text() == (LOGS / path.name).read_text(), path.name
