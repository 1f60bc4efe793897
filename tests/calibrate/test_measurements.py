"""Tests of simcoll.calibrate.measurements: the measurement CSV, its sidecar, the crash-safe
writer."""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
import tempfile
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcoll.calibrate.measurements import (
    MEASUREMENT_COLUMNS,
    Measurement,
    MeasurementWriter,
    sidecar_path,
    to_csv_text,
    write_sidecar,
)
from simcoll.calibrate.read import read_measurements
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
PUBLIC = REPO / "validation" / "data" / "public"
HEADER = ",".join(MEASUREMENT_COLUMNS)

_TEXT = st.text(alphabet=string.ascii_letters + string.digits + ',"_ ', min_size=1, max_size=8)
_MEASUREMENTS = st.builds(
    Measurement,
    collective=st.sampled_from([c.value for c in Collective]),
    n_ranks=st.integers(min_value=1, max_value=32_768),  # simcoll.core.limits.MAX_RANKS
    size_bytes=st.integers(min_value=0, max_value=2**50),
    time_s=st.floats(min_value=1e-9, max_value=1e4, allow_nan=False),
    in_place=st.booleans(),
    count=st.integers(min_value=0, max_value=2**48),
    dtype=_TEXT.map(str.strip).filter(bool),
    redop=st.one_of(st.just(""), _TEXT.map(str.strip)),
    root=st.integers(min_value=-1, max_value=4096),
)


def _row(**cells: object) -> str:
    values = {"collective": "allreduce", "n_ranks": 8, "size_bytes": 1024, "time_s": 2e-05}
    values.update(cells)
    return ",".join(str(values.get(c, "")) for c in MEASUREMENT_COLUMNS) + "\n"


@settings(max_examples=50, deadline=None)
@given(rows=st.lists(_MEASUREMENTS, max_size=8), metadata=st.dictionaries(_TEXT, st.integers()))
def test_what_the_writer_appends_the_reader_reads_back(rows, metadata):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.csv"
        with MeasurementWriter(path, metadata=metadata) as writer:
            for m in rows:
                writer.append(m)
        got = read_measurements(path)
        assert got.rows == tuple(rows)
        assert got.metadata == metadata
        assert got.source == str(path)
        assert path.read_text() == to_csv_text(rows)


def test_rows_written_before_a_crash_survive_it(tmp_path):
    """A writer killed without closing its file (os._exit) leaves every appended row."""
    path = tmp_path / "runs.csv"
    script = (
        "import os, sys\n"
        "from simcoll.calibrate.measurements import Measurement, MeasurementWriter\n"
        "w = MeasurementWriter(sys.argv[1], metadata={'host': 'crashy'})\n"
        "for size, time_s in ((4096, 1e-05), (8192, 2e-05), (16384, 3e-05)):\n"
        "    w.append(Measurement(collective='allgather', n_ranks=4, size_bytes=size,\n"
        "                         time_s=time_s))\n"
        "os._exit(9)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], cwd=REPO, check=False)
    assert done.returncode == 9
    runs = read_measurements(path)
    assert [(m.size_bytes, m.time_s) for m in runs.rows] == [
        (4096, 1e-05), (8192, 2e-05), (16384, 3e-05)
    ]  # fmt: skip
    assert runs.metadata == {"host": "crashy"}


def test_rows_are_on_disk_before_the_writer_closes(tmp_path):
    path = tmp_path / "runs.csv"
    writer = MeasurementWriter(path)
    try:
        for k in range(3):
            writer.append(Measurement(collective="allreduce", n_ranks=2, size_bytes=k, time_s=1.0))
        assert [m.size_bytes for m in read_measurements(path).rows] == [0, 1, 2]
    finally:
        writer.close()


def test_reopening_appends_and_drops_a_half_written_line(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + "\n" + _row(size_bytes=8) + "allreduce,8,16,1.")
    with MeasurementWriter(path) as writer:
        writer.append(Measurement(collective="allreduce", n_ranks=8, size_bytes=32, time_s=1e-5))
    assert [m.size_bytes for m in read_measurements(path).rows] == [8, 32]
    assert path.read_text().count(HEADER) == 1


def test_writer_refuses_a_file_with_other_columns(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError) as info:
        MeasurementWriter(path)
    assert str(info.value) == (
        f"{path}: line 1: header is 'a,b', not simcoll's measurement columns; will not append to it"
    )


def test_bandwidths_follow_the_nccl_tests_definitions():
    m = Measurement(collective="allreduce", n_ranks=8, size_bytes=2**30, time_s=0.01)
    assert m.algbw_bytes_per_s == 2**30 / 0.01
    assert m.busbw_bytes_per_s == pytest.approx(2**30 / 0.01 * 2 * 7 / 8)


def test_only_the_four_contract_columns_are_needed(tmp_path):
    path = tmp_path / "min.csv"
    path.write_text("collective,n_ranks,size_bytes,time_s\nbroadcast,4,64,3e-06\n")
    (m,) = read_measurements(path).rows
    assert m == Measurement(collective="broadcast", n_ranks=4, size_bytes=64, time_s=3e-06)


def test_collective_and_ranks_select_rows_of_a_measurement_csv(tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text(HEADER + "\n" + _row() + _row(collective="allgather") + _row(n_ranks=16))
    rows = read_measurements(path, collective="allreduce", n_ranks=8).rows
    assert [(m.collective, m.n_ranks) for m in rows] == [("allreduce", 8)]
    with pytest.raises(ConfigError) as info:
        read_measurements(path, collective="sendrecv")
    assert str(info.value) == (
        f"{path}: no rows for sendrecv on any number of ranks; the file has allgather on 8, "
        "allreduce on 16, allreduce on 8 ranks"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "data.csv: empty file"),
        (
            "collective,n_ranks,size_bytes\nallreduce,8,1024\n",
            "data.csv: line 1: missing column 'time_s'; a measurement CSV needs "
            "collective,n_ranks,size_bytes,time_s",
        ),
        (
            HEADER + "\n" + _row() + _row(time_s="abc"),
            "data.csv: line 3: time_s: not a number: 'abc'",
        ),
        (
            HEADER + "\n" + _row(time_s="nan"),
            "data.csv: line 2: time_s: not a finite number: 'nan'",
        ),
        (
            HEADER + "\n" + _row(time_s=-1e-06),
            "data.csv: line 2: time_s: must be positive, got -1e-06",
        ),
        (HEADER + "\n" + _row(time_s=0), "data.csv: line 2: time_s: must be positive, got 0.0"),
        (HEADER + "\n" + _row(size_bytes=-8), "data.csv: line 2: size_bytes: must be >= 0, got -8"),
        (
            HEADER + "\n" + _row(size_bytes="1.5"),
            "data.csv: line 2: size_bytes: not an integer: '1.5'",
        ),
        (HEADER + "\n" + _row(n_ranks=0), "data.csv: line 2: n_ranks: must be >= 1, got 0"),
        (HEADER + "\n" + _row(n_ranks=""), "data.csv: line 2: n_ranks: missing value"),
        (
            HEADER + "\n" + _row(collective="all_reduce"),
            "data.csv: line 2: collective: unknown collective 'all_reduce'; valid: allreduce, "
            "allgather, reducescatter, alltoall, broadcast, reduce, gather, scatter, sendrecv",
        ),
        (
            HEADER + "\n" + _row(in_place="maybe"),
            "data.csv: line 2: in_place: not true or false: 'maybe'",
        ),
        (HEADER + "\n" + _row(root="x"), "data.csv: line 2: root: not an integer: 'x'"),
        (
            "phase,matrix,src_gpu,dst_gpu,value\nstock,uni,0,1,18.77\n",
            "data.csv: line 1: neither a measurement CSV (collective,n_ranks,size_bytes,time_s) "
            "nor an nccl-tests table CSV (size_bytes,count,type,redop,time_us_oop,...); its "
            "header is 'phase,matrix,src_gpu,dst_gpu,value'",
        ),
    ],
)
def test_a_bad_measurement_file_is_one_line_naming_file_line_and_field(
    tmp_path, monkeypatch, text, message
):
    monkeypatch.chdir(tmp_path)
    Path("data.csv").write_text(text)
    with pytest.raises(ConfigError) as info:
        read_measurements("data.csv")
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_a_missing_file_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        read_measurements("runs/none.csv")
    assert str(info.value) == "runs/none.csv: no such file"


def test_a_directory_is_not_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("d.csv").mkdir()
    with pytest.raises(ConfigError) as info:
        read_measurements("d.csv")
    assert str(info.value) == "d.csv: is a directory, not a file"


@pytest.mark.parametrize(
    ("sidecar", "message"),
    [
        (
            '{"gpu": "A100",}',
            "data.json: not valid JSON: Expecting property name enclosed in double quotes "
            "(line 1 column 16)",
        ),
        (
            '{"gpu": "A100"\n "nic": 1}',
            "data.json: not valid JSON: Expecting ',' delimiter (line 2 column 2)",
        ),
        ('["A100"]', "data.json: expected a JSON object, got list"),
    ],
)
def test_a_malformed_sidecar_is_named(tmp_path, monkeypatch, sidecar, message):
    monkeypatch.chdir(tmp_path)
    Path("data.csv").write_text(HEADER + "\n" + _row())
    Path("data.json").write_text(sidecar)
    with pytest.raises(ConfigError) as info:
        read_measurements("data.csv")
    assert str(info.value) == message


def test_sidecar_lies_beside_its_file_and_round_trips(tmp_path):
    assert sidecar_path(tmp_path / "a.csv") == tmp_path / "a.json"
    assert sidecar_path("logs/all_reduce_perf.log") == Path("logs/all_reduce_perf.json")
    meta = {"nccl": "2.21.5", "env": {"NCCL_ALGO": "Ring"}, "gpus": ["H100"] * 2}
    path = write_sidecar(tmp_path / "a.csv", meta)
    assert path == tmp_path / "a.json"
    assert json.loads(path.read_text()) == meta
    assert sorted(os.listdir(tmp_path)) == ["a.json"]  # no partial file left behind


def test_metadata_that_is_not_json_is_refused(tmp_path):
    with pytest.raises(ConfigError) as info:
        write_sidecar(tmp_path / "a.csv", {"when": object})
    assert str(info.value).startswith(f"{tmp_path / 'a.json'}: metadata is not JSON-serialisable: ")


#: The public tables: collective and ranks as the file names say, and their printed lines.
PUBLIC_TABLES = {
    "nccl_allgather_8xA100_nvswitch_superbench.csv": ("allgather", 8, 34),
    "nccl_allreduce_2x8xH100_ndr_ring_mincta24_nccltests309_gjaion.csv": ("allreduce", 16, 14),
    "nccl_allreduce_8xA100_nvswitch_superbench.csv": ("allreduce", 8, 34),
    "nccl_allreduce_8xRTX4090_pcie_P2Pdriver_chlc.csv": ("allreduce", 8, 25),
    "nccl_allreduce_8xRTX4090_pcie_noP2P_chlc.csv": ("allreduce", 8, 25),
    "nccl_allreduce_8xV100_oci_bmgpu38_ocitutorials.csv": ("allreduce", 8, 1),
    "nccl_sendrecv_8xA100_nvswitch_liplus.csv": ("sendrecv", 8, 4),
}


@pytest.mark.parametrize("name", sorted(PUBLIC_TABLES))
def test_public_tables_read_as_both_halves_with_printed_times(name):
    collective, n_ranks, n_lines = PUBLIC_TABLES[name]
    runs = read_measurements(PUBLIC / name)
    assert len(runs.rows) == 2 * n_lines
    assert {(m.collective, m.n_ranks) for m in runs.rows} == {(collective, n_ranks)}
    assert [m.in_place for m in runs.rows] == [False, True] * n_lines
    lines = [line.split(",") for line in (PUBLIC / name).read_text().splitlines()[1:]]
    for (oop, ip), cells in zip(
        zip(runs.rows[::2], runs.rows[1::2], strict=True), lines, strict=True
    ):
        assert oop.size_bytes == ip.size_bytes == int(cells[0])
        assert oop.time_s == float(Decimal(cells[4]) / 10**6)
        assert ip.time_s == float(Decimal(cells[7]) / 10**6)
        # busbw from the printed time is the printed busbw, to print rounding: this holds
        # only with the collective's factor for the rank count the file name gives
        for m, time_us, busbw in ((oop, cells[4], cells[6]), (ip, cells[7], cells[9])):
            exponent = Decimal(time_us).as_tuple().exponent
            assert isinstance(exponent, int)
            half_digit = Decimal(5).scaleb(exponent - 1)
            slack = 0.005 + m.busbw_bytes_per_s / 1e9 * float(half_digit / Decimal(time_us))
            assert m.busbw_bytes_per_s / 1e9 == pytest.approx(float(busbw), abs=slack + 1e-9)


def test_first_superbench_line_in_seconds():
    first = read_measurements(PUBLIC / "nccl_allreduce_8xA100_nvswitch_superbench.csv").rows[0]
    assert first == Measurement(
        collective="allreduce", n_ranks=8, size_bytes=0, time_s=3.52e-05, dtype="float",
        redop="sum",
    )  # fmt: skip


def test_a_table_whose_name_does_not_say_needs_collective_and_ranks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = (PUBLIC / "nccl_sendrecv_8xA100_nvswitch_liplus.csv").read_text()
    Path("run.csv").write_text(text)
    with pytest.raises(ConfigError) as info:
        read_measurements("run.csv")
    assert str(info.value) == "run.csv: cannot tell the collective; pass --collective"
    with pytest.raises(ConfigError) as info:
        read_measurements("run.csv", collective="sendrecv")
    assert str(info.value) == (
        "run.csv: cannot tell the number of ranks (no '# Rank' lines); pass --ranks"
    )
    rows = read_measurements("run.csv", collective="sendrecv", n_ranks=8).rows
    assert rows[0].busbw_bytes_per_s == rows[0].algbw_bytes_per_s  # send/recv: factor 1


def test_a_table_with_a_bad_time_names_line_and_column(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("nccl_allreduce_8xA100.csv").write_text(
        "size_bytes,count,type,redop,time_us_oop,algbw_oop,busbw_oop,time_us_ip,algbw_ip,busbw_ip\n"
        "1024,256,float,sum,12.5,0.08,0.14,12.0,0.09,0.15\n"
        "2048,512,float,sum,13.0,0.16,0.28,fast,0.16,0.28\n"
    )
    with pytest.raises(ConfigError) as info:
        read_measurements("nccl_allreduce_8xA100.csv")
    assert str(info.value) == "nccl_allreduce_8xA100.csv: line 3: time_us_ip: not a number: 'fast'"


def test_a_log_reads_with_its_sidecar(tmp_path):
    log = REPO / "validation/data/nccl-tests-logs/nccl_sendrecv_8xA100_nvswitch_liplus.log"
    path = tmp_path / "sendrecv_perf.log"
    path.write_text(log.read_text())
    write_sidecar(path, {"cluster": "lab"})
    runs = read_measurements(path)
    assert runs.metadata["cluster"] == "lab"
    assert runs.metadata["nGpus"] == 8
    assert [m.time_s for m in runs.rows[:2]] == [1.2112e-03, 1.2118e-03]


def test_a_spreadsheet_byte_order_mark_is_not_part_of_the_first_column(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbfcollective,n_ranks,size_bytes,time_s\r\nallreduce,2,8,1e-05\r\n")
    assert [m.collective for m in read_measurements(path).rows] == ["allreduce"]


def test_the_writer_makes_the_folder_it_writes_into(tmp_path):
    path = tmp_path / "new" / "dir" / "runs.csv"
    with MeasurementWriter(path) as writer:
        writer.append(Measurement(collective="scatter", n_ranks=4, size_bytes=64, time_s=2e-06))
    assert path.read_text().splitlines()[0] == HEADER
