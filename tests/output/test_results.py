"""Tests of simcoll.output.results: algbw/busbw the nccl-tests way, and the table writers."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from simcoll.core.collectives import Collective
from simcoll.output.results import CSV_COLUMNS, Row, bandwidths, format_table, to_csv, to_json

CONTRACT_HEADER = (
    "collective,algorithm,protocol,n_ranks,size_bytes,time_s,algbw_bytes_per_s,busbw_bytes_per_s"
)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 16])
@pytest.mark.parametrize("collective", list(Collective))
def test_bandwidths_are_size_over_time_times_factor(collective: Collective, n: int) -> None:
    size, time_s = 3 * 2**20, 7.25e-5
    algbw, busbw = bandwidths(collective, n, size, time_s)
    assert algbw == pytest.approx(size / time_s, rel=1e-15)
    assert busbw == pytest.approx(size / time_s * collective.busbw_factor(n), rel=1e-15)


def test_bandwidths_accept_a_name() -> None:
    algbw, busbw = bandwidths("allreduce", 8, 2**30, 0.01)
    assert algbw == pytest.approx(2**30 / 0.01, rel=1e-15)
    assert busbw == pytest.approx(2**30 / 0.01 * 2 * 7 / 8, rel=1e-15)


@pytest.mark.parametrize("time_s", [0.0, -1.0])
def test_bandwidths_are_zero_without_time(time_s: float) -> None:
    assert bandwidths("allgather", 4, 4096, time_s) == (0.0, 0.0)


def test_bandwidths_unknown_collective() -> None:
    with pytest.raises(ValueError, match="unknown collective 'allreduse'"):
        bandwidths("allreduse", 4, 4096, 1.0)


@pytest.mark.parametrize(
    ("name", "root", "redop", "printed_root"),
    [
        ("allreduce", 3, "sum", -1),
        ("allgather", 3, "none", -1),
        ("reducescatter", 3, "sum", -1),
        ("broadcast", 3, "none", 3),
        ("reduce", 2, "sum", 2),
        ("gather", 1, "none", 1),
        ("alltoall", 0, "none", -1),
    ],
)
def test_row_from_time(name: str, root: int, redop: str, printed_root: int) -> None:
    n, size, time_s = 4, 2**20, 3.5e-5
    c = Collective(name)
    row = Row.from_time(name, "ring", n_ranks=n, size_bytes=size, time_s=time_s, root=root)
    assert row.collective == name
    assert row.algorithm == "ring"
    assert row.protocol == "simple"
    assert row.model == "flow"
    assert row.n_ranks == n
    assert row.size_bytes == size
    assert row.time_s == time_s
    assert row.algbw_bytes_per_s == pytest.approx(size / time_s, rel=1e-15)
    assert row.busbw_bytes_per_s == pytest.approx(size / time_s * c.busbw_factor(n), rel=1e-15)
    assert row.count == c.count(size, n)
    assert row.type == "float"
    assert row.redop == redop
    assert row.root == printed_root


def test_row_from_time_takes_a_collective_and_options() -> None:
    row = Row.from_time(
        Collective.ALLGATHER,
        "direct",
        n_ranks=8,
        size_bytes=2**30,
        time_s=4.4e-3,
        protocol="LL",
        model="ideal",
    )
    assert (row.collective, row.algorithm, row.protocol, row.model) == (
        "allgather",
        "direct",
        "LL",
        "ideal",
    )
    assert row.count == 2**30 // 4 // 8


def _rows() -> list[Row]:
    # Awkward floats: thirds and sevenths have no short decimal form.
    return [
        Row.from_time("allreduce", "ring", n_ranks=8, size_bytes=2**k, time_s=(1 + k) / 3e5)
        for k in range(3, 8)
    ] + [
        Row.from_time("broadcast", "direct", n_ranks=3, size_bytes=1000, time_s=1 / 7, root=2),
    ]


def test_csv_columns_contract() -> None:
    assert ",".join(CSV_COLUMNS) == CONTRACT_HEADER


def test_to_csv_header_starts_with_the_contract() -> None:
    text = to_csv(_rows())
    header = text.splitlines()[0]
    assert header.startswith(CONTRACT_HEADER)
    assert header.split(",")[: len(CSV_COLUMNS)] == list(CSV_COLUMNS)


def test_to_csv_of_no_rows_is_the_header() -> None:
    assert to_csv([]).splitlines()[0].startswith(CONTRACT_HEADER)
    assert len(to_csv([]).splitlines()) == 1


def test_to_csv_round_trips_exactly() -> None:
    rows = _rows()
    parsed = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert len(parsed) == len(rows)
    for row, back in zip(rows, parsed, strict=True):
        assert back["collective"] == row.collective
        assert back["algorithm"] == row.algorithm
        assert back["protocol"] == row.protocol
        assert int(back["n_ranks"]) == row.n_ranks
        assert int(back["size_bytes"]) == row.size_bytes
        # Bit for bit, not approximately.
        assert float(back["time_s"]) == row.time_s
        assert float(back["algbw_bytes_per_s"]) == row.algbw_bytes_per_s
        assert float(back["busbw_bytes_per_s"]) == row.busbw_bytes_per_s
        assert int(back["count"]) == row.count
        assert int(back["root"]) == row.root


def test_to_json_parses() -> None:
    rows = _rows()
    data = json.loads(to_json(rows))
    assert isinstance(data, list)
    assert len(data) == len(rows)
    for row, obj in zip(rows, data, strict=True):
        assert set(CSV_COLUMNS) <= set(obj)
        assert obj["collective"] == row.collective
        assert obj["size_bytes"] == row.size_bytes
        assert obj["time_s"] == row.time_s
        assert obj["algbw_bytes_per_s"] == row.algbw_bytes_per_s
        assert obj["busbw_bytes_per_s"] == row.busbw_bytes_per_s
    assert json.loads(to_json([])) == []


# --- the nccl-tests-style table -----------------------------------------------------------


def _table_row() -> Row:
    return Row.from_time("allreduce", "ring", n_ranks=8, size_bytes=2**30, time_s=6.25e-3)


def test_format_table_header_lines() -> None:
    lines = format_table([_table_row()]).splitlines()
    names, units = lines[0], lines[1]
    assert names.startswith("#")
    assert units.startswith("#")
    assert names.split()[1:] == [
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "algorithm",
        "protocol",
    ]
    assert units.split()[1:] == ["(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)"]


def test_format_table_title_lines_are_comments() -> None:
    lines = format_table([_table_row()], title="first\nsecond").splitlines()
    assert lines[:2] == ["# first", "# second"]
    assert lines[2].split()[1] == "size"


def test_format_table_data_row() -> None:
    row = _table_row()
    lines = format_table([row]).splitlines()
    data = [line for line in lines if not line.startswith("#")]
    assert len(data) == 1
    fields = data[0].split()
    assert int(fields[0]) == row.size_bytes
    assert int(fields[1]) == row.size_bytes // 4
    assert fields[2:5] == ["float", "sum", "-1"]
    assert float(fields[5]) == pytest.approx(row.time_s * 1e6, abs=0.005)  # us
    assert float(fields[6]) == pytest.approx(row.size_bytes / row.time_s / 1e9, abs=0.005)
    assert float(fields[7]) == pytest.approx(row.size_bytes / row.time_s / 1e9 * 7 / 4, abs=0.005)
    assert fields[8] == "ring"


def _ends(line: str) -> list[int]:
    return [m.end() for m in re.finditer(r"\S+", line)]


def test_format_table_columns_line_up() -> None:
    rows = [
        Row.from_time("allreduce", "ring", n_ranks=8, size_bytes=2**k, time_s=1e-5 + 2**k / 2e11)
        for k in (3, 20, 33)  # 10 us to 53 ms
    ]
    lines = format_table(rows).splitlines()
    header_ends = _ends(lines[0])[1:9]  # size .. busbw, after the leading "#"
    for line in lines[2:5]:
        assert _ends(line)[:8] == header_ends, line


def test_format_table_average_bus_bandwidth() -> None:
    rows = _rows()
    lines = format_table(rows).splitlines()
    assert lines[-1].startswith("# Avg bus bandwidth")
    value = float(lines[-1].split(":")[1].split()[0])
    mean = sum(r.busbw_bytes_per_s for r in rows) / len(rows) / 1e9
    assert value == pytest.approx(mean, rel=1e-3)  # four significant digits
    assert lines[-1].endswith("GB/s")


def test_format_table_without_rows_has_no_average() -> None:
    lines = format_table([]).splitlines()
    assert len(lines) == 2
    assert all(line.startswith("#") for line in lines)


def test_format_table_long_times_stay_fixed_point() -> None:
    row = Row.from_time("allreduce", "ring", n_ranks=8, size_bytes=8 * 2**30, time_s=0.125409)
    lines = format_table([row]).splitlines()
    field = lines[2].split()[5]
    assert "e" not in field
    assert float(field) == pytest.approx(125409, abs=1)
    assert _ends(lines[2])[5] == lines[0].index("time") + len("time")
