"""Tests of simcoll.cli: ``simcoll predict`` in-process, its outputs and its one-line errors."""

from __future__ import annotations

import csv
import io
import json
import tomllib
from pathlib import Path

import networkx as nx
import pytest

from simcoll.cli import main
from simcoll.core.collectives import Collective
from simcoll.core.units import parse_bandwidth_bytes_per_s, parse_time_s
from simcoll.topology import load
from simcoll.topology.nodelink import from_node_link

REPO = Path(__file__).resolve().parents[2]
DGX_A100 = REPO / "topologies" / "dgx-a100.toml"
DGX_H100 = REPO / "topologies" / "dgx-h100.toml"
CONTRACT_HEADER = (
    "collective,algorithm,protocol,n_ranks,size_bytes,time_s,algbw_bytes_per_s,busbw_bytes_per_s"
)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ALL_COLLECTIVES = (
    "allreduce, allgather, reducescatter, alltoall, broadcast, reduce, gather, scatter, sendrecv"
)

GOOD_TOPOLOGY = """\
schema = 1
builder = "switch_star"
description = "test box"

[params]
n_gpus = 8
link_bandwidth = "{bandwidth}"
link_latency = "0.5 us"
"""


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """Run ``simcoll ARGV`` in-process; return (exit status, stdout, stderr)."""
    try:
        status = main([str(a) for a in argv])
    except SystemExit as exit_:  # argparse: --help, usage errors
        status = exit_.code if isinstance(exit_.code, int) else 1
    out, err = capsys.readouterr()
    return status, out, err


def error_line(capsys: pytest.CaptureFixture[str], *argv: object) -> str:
    """Run a command that must fail: non-zero, nothing on stdout, one line on stderr."""
    status, out, err = run(capsys, *argv)
    assert status == 2, (status, err)
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def data_rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.splitlines() if line and not line.startswith("#")]


def _params(path: Path) -> dict[str, object]:
    with path.open("rb") as f:
        return tomllib.load(f)["params"]


# --- the table ------------------------------------------------------------------------------


def test_predict_allreduce_dgx_a100_full_table(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(
        capsys, "predict", DGX_A100, "--collective", "allreduce", "--sizes", "8:8G"
    )
    assert status == 0, err
    assert err == ""
    rows = data_rows(out)
    assert len(rows) == 31
    sizes = [int(r[0]) for r in rows]
    assert sizes == [8 * 2**k for k in range(31)]
    assert sizes[0] == 8
    assert sizes[-1] == 8589934592
    assert all(r[8] == "ring" for r in rows)

    params = _params(DGX_A100)
    n = params["n_gpus"]
    link_gb_s = _gpu_link_bytes_per_s(DGX_A100) / 1e9  # 12 x 25 GB/s
    assert link_gb_s == pytest.approx(300)
    latency_us = parse_time_s(params["nvlink_latency"]) * 1e6
    factor = Collective.ALLREDUCE.busbw_factor(n)

    (gib,) = [r for r in rows if int(r[0]) == 1073741824]
    busbw = float(gib[7])
    assert link_gb_s / 2 < busbw < link_gb_s

    times_us = [float(r[5]) for r in rows]
    assert times_us == sorted(times_us)  # never faster for more bytes
    for r, time_us in zip(rows, times_us, strict=True):
        size = int(r[0])
        # A ring all-reduce takes 2(n-1) steps, each over a two-link route.
        assert time_us >= 2 * (n - 1) * 2 * latency_us - 0.005
        # No bus can beat the wire: busbw = algbw x factor <= link bandwidth.
        assert float(r[7]) <= link_gb_s
        assert float(r[6]) == pytest.approx(size / time_us / 1e3, abs=0.006, rel=1e-3)
        assert float(r[7]) == pytest.approx(size / time_us / 1e3 * factor, abs=0.006, rel=1e-3)
    *_, average, picked = out.splitlines()
    assert average.startswith("# Avg bus bandwidth")
    # the default (NCCL's choice, protocol auto) says what it picked: LL small, simple large.
    assert picked.startswith("# Picked by NCCL's tuning model, then simulated: ring/LL for 8 B..")
    assert ", ring/simple from " in picked
    assert picked.endswith(" MiB")


def _gpu_link_bytes_per_s(path: Path) -> float:
    """A GPU's NVSwitch link in a DGX file: links per GPU x bandwidth per link."""
    params = _params(path)
    per_link = parse_bandwidth_bytes_per_s(str(params["nvlink_bandwidth"]))
    return int(str(params["nvlinks_per_gpu"])) * per_link


def test_predict_h100_beats_a100(capsys: pytest.CaptureFixture[str]) -> None:
    def busbw(path: Path) -> float:
        status, out, _ = run(
            capsys, "predict", path, "--collective", "allreduce", "--sizes", "1G", "--format", "csv"
        )
        assert status == 0
        (row,) = csv.DictReader(io.StringIO(out))
        return float(row["busbw_bytes_per_s"])

    a100, h100 = (_gpu_link_bytes_per_s(path) for path in (DGX_A100, DGX_H100))
    assert a100 / 2 < busbw(DGX_A100) < a100
    assert h100 / 2 < busbw(DGX_H100) < h100
    assert busbw(DGX_H100) > busbw(DGX_A100)


# --- CSV, JSON, plot --------------------------------------------------------------------------


def test_predict_csv(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(
        capsys,
        "predict",
        DGX_A100,
        "--collective",
        "allgather",
        "--sizes",
        "1K:1M",
        "--format",
        "csv",
    )
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(CONTRACT_HEADER)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 11  # 1 KiB .. 1 MiB, powers of two
    assert [int(r["size_bytes"]) for r in rows] == [2**k for k in range(10, 21)]
    for r in rows:
        assert r["collective"] == "allgather"
        assert r["algorithm"] == "ring"
        assert r["protocol"] in ("LL", "LL128", "simple")  # --protocol auto by default
        assert int(r["n_ranks"]) == 8
        size, time_s = int(r["size_bytes"]), float(r["time_s"])
        assert float(r["algbw_bytes_per_s"]) == pytest.approx(size / time_s, rel=1e-12)
        assert float(r["busbw_bytes_per_s"]) == pytest.approx(size / time_s * 7 / 8, rel=1e-12)


def test_predict_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(
        capsys, "predict", DGX_A100, "--collective", "reducescatter", "--sizes", "1K,1M",
        "--format", "json",
    )  # fmt: skip
    assert status == 0, err
    data = json.loads(out)
    assert [d["size_bytes"] for d in data] == [2**10, 2**20]
    for d in data:
        assert d["collective"] == "reducescatter"
        assert d["n_ranks"] == 8
        assert d["time_s"] > 0
        assert d["busbw_bytes_per_s"] == pytest.approx(
            d["size_bytes"] / d["time_s"] * 7 / 8, rel=1e-12
        )


def test_predict_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    png = tmp_path / "allreduce.png"
    status, out, err = run(
        capsys, "predict", DGX_A100, "--collective", "allreduce", "--sizes", "1K:1M", "--plot", png
    )
    assert status == 0, err
    assert len(data_rows(out)) == 11
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert len(err.splitlines()) == 1  # "simcoll: wrote ..."
    assert str(png) in err


# --- ranks --------------------------------------------------------------------------------


def _csv_ranks(capsys: pytest.CaptureFixture[str], *extra: str) -> set[int]:
    status, out, err = run(
        capsys, "predict", DGX_A100, "--collective", "allreduce", "--sizes", "1M",
        "--format", "csv", *extra,
    )  # fmt: skip
    assert status == 0, err
    return {int(r["n_ranks"]) for r in csv.DictReader(io.StringIO(out))}


def test_set_n_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    assert _csv_ranks(capsys, "--set", "n_gpus=4") == {4}


def test_the_table_header_names_the_overrides_beside_the_files_description(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run(
        capsys, "predict", DGX_A100, "--collective", "allreduce", "--sizes", "1M",
        "--set", "n_gpus=4", "--set", "nvlink_bandwidth=100 GB/s",
    )  # fmt: skip
    assert status == 0, err
    first = out.splitlines()[0]
    assert first.endswith("; --set n_gpus=4; --set nvlink_bandwidth=100 GB/s)")


def test_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    assert _csv_ranks(capsys, "--ranks", "2") == {2}


def test_default_ranks_are_every_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert _csv_ranks(capsys) == {_params(DGX_A100)["n_gpus"]}


def test_set_link_bandwidth_changes_the_result(capsys: pytest.CaptureFixture[str]) -> None:
    def time_s(*extra: str) -> float:
        status, out, _ = run(
            capsys, "predict", DGX_A100, "--collective", "allgather", "--sizes", "1G",
            "--format", "csv", *extra,
        )  # fmt: skip
        assert status == 0
        (row,) = csv.DictReader(io.StringIO(out))
        return float(row["time_s"])

    # Halving the link bandwidth at a bandwidth-bound size about doubles the time.
    ratio = time_s("--set", "nvlink_bandwidth=12.5 GB/s") / time_s()  # per link, was 25
    assert 1.9 < ratio <= 2.0


def test_in_place_drops_the_own_blocks_copy_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def predicted(*extra: str) -> tuple[str, dict[str, str]]:
        args = ("--collective", "allgather", "--sizes", "1G", *extra)
        status, table, err = run(capsys, "predict", DGX_A100, *args)
        assert status == 0, err
        status, out, err = run(capsys, "predict", DGX_A100, *args, "--format", "csv")
        assert status == 0, err
        (row,) = csv.DictReader(io.StringIO(out))
        return table.splitlines()[2], row

    header, out_of_place = predicted()
    header_ip, in_place = predicted("--in-place")
    assert header.endswith("; out-of-place: own block copied at 1555 GB/s")
    assert header_ip.endswith("; in-place calls")
    assert (out_of_place["in_place"], in_place["in_place"]) == ("False", "True")
    # each A100 40 GB reads and writes its own eighth of 1 GiB at 1,555 GB/s
    copy_s = 2 * 2**30 / 8 / 1555e9
    gap_s = float(out_of_place["time_s"]) - float(in_place["time_s"])
    assert gap_s == pytest.approx(copy_s, rel=1e-9)


def test_range_too_small_for_chunks_is_skipped_with_a_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A range drops sizes too small to cut (as nccl-tests would), and says so on stderr.
    status, out, err = run(
        capsys, "predict", DGX_A100, "--collective", "allgather", "--sizes", "32:1K",
        "--chunks", "8",
    )  # fmt: skip
    assert status == 0
    sizes = [int(r[0]) for r in data_rows(out)]
    assert sizes == [64, 128, 256, 512, 1024]  # 32 B is 4 B per rank: too few for 8 chunks
    assert len(err.splitlines()) == 1
    assert err.startswith("simcoll: note: skipped")


def test_a_ring_extended_from_its_first_steps_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A ring over one schedule's transfers runs 32 steps and is extended at their pace
    # (simcoll/sim/periodic.py); the table does not show it, so a note on stderr does.
    # The threshold is lowered so that 64 GPUs on the RoCE fat-tree (no symmetry: hashed
    # ECMP, random placement) take that path.
    from simcoll.prediction import simulated  # noqa: PLC0415 - the threshold under test

    monkeypatch.setattr(simulated, "PERIODIC_FROM_TRANSFERS", 0)
    monkeypatch.setattr(simulated, "EXTEND_RINGS", True)
    status, out, err = run(
        capsys, "predict", str(REPO / "topologies" / "a100-roce-2to1.toml"), "--set", "n_nodes=8",
        "--collective", "allreduce", "--algorithm", "ring", "--sizes", "256M,1G",
        "--protocol", "simple", "--placement", "random:1",
    )  # fmt: skip
    assert status == 0
    assert len(data_rows(out)) == 2
    assert err.splitlines() == [
        "simcoll: note: the ring at 256 MiB, 1 GiB ran its first 32 steps and was extended "
        "at their pace: whole, it is over one schedule's 16777216 transfers "
        "(simcoll/sim/periodic.py)"
    ]


# --- bad input: exit 2 and exactly one line on stderr -------------------------------------


def test_unknown_collective(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "predict", DGX_A100, "--collective", "all_reduce")
    assert line == f"simcoll: error: unknown collective 'all_reduce'; valid: {ALL_COLLECTIVES}"


def test_unknown_algorithm_lists_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(
        capsys, "predict", DGX_A100, "--collective", "alltoall", "--algorithm", "ring"
    )
    assert line == (
        "simcoll: error: alltoall has no algorithm 'ring'; valid: direct, pairwise, auto, nccl, all"
    )


def test_unknown_algorithm_allreduce(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "predict", DGX_A100, "--collective", "allreduce", "--algorithm", "x")
    assert "no algorithm 'x'" in line
    assert "ring" in line
    assert "auto" in line


def test_malformed_toml(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('schema = 1\nbuilder = "switch_star"\n[params\nn_gpus = 8\n')
    line = error_line(capsys, "predict", path, "--collective", "allreduce")
    assert line.startswith(f"simcoll: error: {path}: line 3")
    assert "invalid TOML" in line


def test_unknown_key_in_toml(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "extra.toml"
    path.write_text("colour = 'green'\n" + GOOD_TOPOLOGY.format(bandwidth="300 GB/s"))
    line = error_line(capsys, "predict", path, "--collective", "allreduce")
    assert line == (
        f"simcoll: error: {path}: colour: unknown key; valid keys: "
        "schema, builder, description, calibration, calibration_when, gpu_memory_bandwidth, "
        "host_memory_bandwidth, gpu, params, routing, transport"
    )


def test_unknown_param_in_toml(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "param.toml"
    path.write_text(GOOD_TOPOLOGY.format(bandwidth="300 GB/s") + "n_nics = 2\n")
    line = error_line(capsys, "predict", path, "--collective", "allreduce")
    assert line.startswith(f"simcoll: error: {path}: params.n_nics: unknown parameter")
    assert "n_gpus" in line


@pytest.mark.parametrize("bandwidth", ["0 GB/s", "-300 GB/s"])
def test_bad_bandwidth_in_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, bandwidth: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(GOOD_TOPOLOGY.format(bandwidth=bandwidth))
    line = error_line(capsys, "predict", path, "--collective", "allreduce")
    assert line.startswith(f"simcoll: error: {path}: params.link_bandwidth: ")
    assert "positive" in line


@pytest.mark.parametrize("bandwidth", ["0 GB/s", "-5 GB/s"])
def test_bad_bandwidth_via_set(capsys: pytest.CaptureFixture[str], bandwidth: str) -> None:
    line = error_line(
        capsys, "predict", DGX_A100, "--collective", "allreduce",
        "--set", f"nvlink_bandwidth={bandwidth}",
    )  # fmt: skip
    assert line.startswith(f"simcoll: error: {DGX_A100}: --set nvlink_bandwidth: ")
    assert "positive" in line


def test_ambiguous_bandwidth_via_set(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(
        capsys,
        "predict",
        DGX_A100,
        "--collective",
        "allreduce",
        "--set",
        "nvlink_bandwidth=25 Gbps",
    )
    assert line == (
        f"simcoll: error: {DGX_A100}: --set nvlink_bandwidth: unit 'Gbps' is ambiguous "
        "(bits or bytes?): write '25 Gbit/s' or '25 GB/s'"
    )


@pytest.mark.parametrize(
    ("sizes", "words"),
    [
        ("abc", ["--sizes", "'abc'"]),
        ("8:x", ["--sizes", "'x'"]),
        ("1M:1K", ["--sizes", "'1M:1K'", "below"]),
    ],
)
def test_bad_sizes(capsys: pytest.CaptureFixture[str], sizes: str, words: list[str]) -> None:
    line = error_line(capsys, "predict", DGX_A100, "--collective", "allreduce", "--sizes", sizes)
    for word in words:
        assert word in line


def test_bad_sizes_exact(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "predict", DGX_A100, "--collective", "allreduce", "--sizes", "1M:1K")
    assert line == "simcoll: error: --sizes: range '1M:1K' ends below its start"


def test_overflowing_size(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "predict", DGX_A100, "--collective", "allreduce", "--sizes", "1e999")
    assert "--sizes" in line


@pytest.mark.parametrize("collective", ["allreduce", "allgather"])
def test_explicit_size_smaller_than_chunks(
    capsys: pytest.CaptureFixture[str], collective: str
) -> None:
    line = error_line(
        capsys, "predict", DGX_A100, "--collective", collective, "--sizes", "16", "--chunks", "4"
    )
    assert line.startswith(f"simcoll: error: {collective} of 16 B over 8 ranks has ")
    assert "pieces" in line
    assert "fewer chunks" in line


def test_explicit_size_not_dividing_into_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "predict", DGX_A100, "--collective", "allgather", "--sizes", "1001")
    assert line == (
        "simcoll: error: allgather size 1001 B does not divide into 8 equal blocks "
        "(one per rank); use a multiple of 8 B"
    )


def test_missing_topology_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "nowhere.toml"
    line = error_line(capsys, "predict", path, "--collective", "allreduce")
    assert line == f"simcoll: error: {path}: no such file"


def test_topology_is_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = error_line(capsys, "predict", tmp_path, "--collective", "allreduce")
    assert line.startswith(f"simcoll: error: {tmp_path}: ")


@pytest.mark.parametrize("item", ["n_gpus", "=4"])
def test_malformed_set(capsys: pytest.CaptureFixture[str], item: str) -> None:
    line = error_line(capsys, "predict", DGX_A100, "--collective", "allreduce", "--set", item)
    assert line == f"simcoll: error: --set: expected KEY=VALUE (e.g. n_gpus=4), got {item!r}"


def test_unknown_set_key(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "predict", DGX_A100, "--collective", "allreduce", "--set", "n_gpu=4")
    assert line.startswith(f"simcoll: error: {DGX_A100}: --set n_gpu: unknown parameter")
    assert "n_gpus" in line


VALID_MODELS = "flow, ideal, packet, analytical, nccl"


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--model", "fluid", f"simcoll: error: unknown --model 'fluid'; valid: {VALID_MODELS}"),
        (
            "--protocol",
            "ll",
            "simcoll: error: unknown --protocol 'll'; valid: auto, simple, LL, LL128, none",
        ),
    ],
)
def test_unknown_models_and_protocols(
    capsys: pytest.CaptureFixture[str], option: str, value: str, expected: str
) -> None:
    line = error_line(capsys, "predict", DGX_A100, "--collective", "allreduce", option, value)
    assert line == expected


def test_more_ranks_than_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "predict", DGX_A100, "--collective", "allreduce", "--ranks", "16")
    assert line.startswith("simcoll: error: ")
    assert "16 ranks" in line
    assert "8 GPUs" in line
    assert str(DGX_A100) in line


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_ranks_not_positive(capsys: pytest.CaptureFixture[str], value: str) -> None:
    line = error_line(capsys, "predict", DGX_A100, "--collective", "allreduce", "--ranks", value)
    assert line.startswith("simcoll predict: error: argument --ranks: expected a positive integer")


def test_missing_collective_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "predict", DGX_A100)
    assert line == (
        "simcoll predict: error: the following arguments are required: --collective "
        "(see simcoll predict --help)"
    )


def test_missing_command_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys)
    assert line.startswith("simcoll: error: ")
    assert "COMMAND" in line
    assert "simcoll --help" in line


def test_bad_format_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "predict", DGX_A100, "--collective", "allreduce", "--format", "xml")
    assert "--format" in line
    assert "'xml'" in line


def test_bad_root(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(
        capsys, "predict", DGX_A100, "--collective", "broadcast", "--root", "9", "--sizes", "1M"
    )
    assert "root 9" in line


# --- help -----------------------------------------------------------------------------------


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "--help")
    assert status == 0
    assert "predict" in out
    assert err == ""


def test_predict_help(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "predict", "--help")
    assert status == 0
    assert "--collective" in out
    assert "--sizes" in out
    assert err == ""


def test_main_help_raises_system_exit_zero() -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["predict", "--help"])
    assert exit_.value.code == 0


# --- simcoll topo ---------------------------------------------------------------------------


def _matrix_rows(text: str, title: str) -> list[list[str]]:
    """The cells of the GPU x GPU matrix printed under ``title`` (rank column dropped)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows: list[list[str]] = []
    for line in lines[start + 2 :]:  # after the title and the column header
        if not line.strip():
            break
        rows.append(line.split()[1:])
    return rows


def test_topo_show_dgx_a100(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "topo", "show", DGX_A100)
    assert status == 0, err
    assert err == ""
    params = _params(DGX_A100)
    n = params["n_gpus"]
    assert isinstance(n, int)
    # Each GPU's NVLinks (12 x 25 GB/s) form its one link to the switch, per direction.
    per_link = parse_bandwidth_bytes_per_s(str(params["nvlink_bandwidth"]))
    gpu_gb_s = int(str(params["nvlinks_per_gpu"])) * per_link / 1e9
    assert gpu_gb_s == pytest.approx(300)
    assert f"GPUs: {n};" in out
    assert str(DGX_A100) in out
    rows = _matrix_rows(out, "bottleneck bandwidth of the routed path (GB/s)")
    assert len(rows) == n
    for a, row in enumerate(rows):
        assert row == ["-" if a == b else f"{gpu_gb_s:.1f}" for b in range(n)]  # "300.0"
    # GPU -> switch -> GPU: two hops of the file's latency each.
    latency_us = parse_time_s(str(params["nvlink_latency"])) * 1e6
    for a, row in enumerate(_matrix_rows(out, "latency of the routed path (us)")):
        assert row == ["-" if a == b else f"{2 * latency_us:.2f}" for b in range(n)]
    # Ranks 0-3 send to ranks 4-7 over their own four GPU links: 4 x 300 GB/s.
    bisection_gb_s = (n // 2) * gpu_gb_s
    assert bisection_gb_s == pytest.approx(1200)
    assert f"bisection bandwidth: {bisection_gb_s:g} GB/s (" in out


def test_topo_show_with_set(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "topo", "show", DGX_A100, "--set", "n_gpus=4")
    assert status == 0
    assert "GPUs: 4;" in out
    assert len(_matrix_rows(out, "bottleneck bandwidth")) == 4


def _assert_same_graph(a: nx.DiGraph[str], b: nx.DiGraph[str]) -> None:
    assert nx.utils.graphs_equal(a, b)
    assert list(a.nodes(data=True)) == list(b.nodes(data=True))
    assert list(a.edges(data=True)) == list(b.edges(data=True))
    assert a.graph == b.graph


def test_topo_dump_reloads_to_the_loaded_graph(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "topo", "dump", DGX_A100)
    assert status == 0, err
    assert err == ""
    _assert_same_graph(from_node_link(json.loads(out)), load(DGX_A100))


def test_topo_dump_to_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "dgx.json"
    status, out, err = run(capsys, "topo", "dump", DGX_A100, "--set", "n_gpus=2", "-o", path)
    assert status == 0, err
    assert out == ""
    assert err == f"simcoll: wrote {path}\n"
    graph = from_node_link(json.loads(path.read_text()))
    _assert_same_graph(graph, load(DGX_A100, {"n_gpus": "2"}))


def test_topo_draw_writes_a_png(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    png = tmp_path / "dgx.png"
    status, out, err = run(capsys, "topo", "draw", DGX_A100, "-o", png)
    assert status == 0, err
    assert out == ""
    assert err == f"simcoll: wrote {png}\n"
    assert png.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize("action", ["show", "draw", "dump"])
def test_topo_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, action: str) -> None:
    path = tmp_path / "nowhere.toml"
    extra = ["-o", tmp_path / "x.png"] if action == "draw" else []
    line = error_line(capsys, "topo", action, path, *extra)
    assert line == f"simcoll: error: {path}: no such file"


def test_topo_malformed_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('schema = 1\nbuilder = "switch_star"\n[params\n')
    line = error_line(capsys, "topo", "show", path)
    assert line.startswith(f"simcoll: error: {path}: line 3")


def test_topo_bad_set(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "topo", "dump", DGX_A100, "--set", "n_gpus=0")
    assert line.startswith(f"simcoll: error: {DGX_A100}: --set n_gpus: ")


def test_topo_draw_needs_an_output(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "topo", "draw", DGX_A100)
    assert line == (
        "simcoll topo draw: error: the following arguments are required: -o/--output "
        "(see simcoll topo draw --help)"
    )


def test_topo_needs_an_action(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "topo")
    assert line == (
        "simcoll topo: error: the following arguments are required: ACTION "
        "(see simcoll topo --help)"
    )


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--help"], ["topo"]),
        (["topo", "--help"], ["show", "draw", "dump", "GB/s", "example"]),
        (["topo", "show", "--help"], ["GB/s", "us", "bisection", "--set", "example"]),
        (["topo", "draw", "--help"], ["-o FILE.png", "example"]),
        (["topo", "dump", "--help"], ["bytes per second", "seconds", "FILE.json", "example"]),
    ],
)
def test_topo_help(capsys: pytest.CaptureFixture[str], argv: list[str], words: list[str]) -> None:
    status, out, err = run(capsys, *argv)
    assert status == 0
    assert err == ""
    for word in words:
        assert word in out


def test_topo_show_dgx1_nvlink_pairs_and_the_pcie_detour(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Issue 3: GPU 0 reaches its NV2 neighbour (GPU 3) at twice the bandwidth of an NV1
    # neighbour (GPU 1), and a GPU with no NVLink to it (GPU 5) only over PCIe and both
    # CPUs. NVLink2: 25 GB/s per link; PCIe Gen3 x16 written 15.75 GB/s in the file.
    status, out, _ = run(capsys, "topo", "show", "topologies/dgx1-v100.toml")
    assert status == 0
    lines = out.splitlines()
    matrix_at = next(i for i, line in enumerate(lines) if line.startswith("bottleneck"))
    row0 = lines[matrix_at + 2].split()
    assert row0[0] == "0"
    by_rank = [float("inf") if cell == "-" else float(cell) for cell in row0[1:]]
    assert by_rank[3] == 2 * by_rank[1] == 2 * 25.0
    assert by_rank[5] == pytest.approx(15.75, abs=0.06)  # printed to 0.1 GB/s
    (route5,) = [line.strip() for line in lines if line.strip().startswith("0 -> 5:")]
    assert route5 == (
        "0 -> 5: gpu0 -pcie-> pcie0 -pcie-> cpu0 -cpu_link-> cpu1 -pcie-> pcie2 -pcie-> gpu5"
    )
    (route3,) = [line.strip() for line in lines if line.strip().startswith("0 -> 3:")]
    assert route3 == "0 -> 3: gpu0 -nvlink-> gpu3"


def test_set_is_refused_on_a_dumped_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    dumped = tmp_path / "t.json"
    status, _out, _ = run(capsys, "topo", "dump", DGX_A100, "-o", dumped)
    assert status == 0
    line = error_line(capsys, "topo", "show", dumped, "--set", "n_gpus=4")
    assert line == (
        f"simcoll: error: {dumped}: --set n_gpus: --set only changes builder parameters, "
        "and a node-link JSON file has none"
    )


def test_help_names_every_algorithm_choice_and_where_files_go(capsys) -> None:
    # issue 31: the metavar left out nccl and all
    for command in ("predict", "calibrate", "compare"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--algorithm NAME|auto|nccl|all" in " ".join(capsys.readouterr().out.split())


def test_params_of_another_machine_are_named(capsys) -> None:
    # issue 31: the RTX 4090's parameters on a DGX H100 silently gave bare links
    rtx = str(REPO / "topologies" / "calibration" / "pcie-8x-rtx4090.params.toml")
    assert main(["predict", "dgx-h100", "--collective", "allreduce", "--sizes", "1G",
                 "--params", rtx]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert err == (
        f"simcoll: warning: --params {rtx}: efficiency.pcie apply to no link of dgx-h100 "
        "(its links: nvlink); its links stay bare: is it another machine's file?\n"
    )
    own = str(REPO / "topologies" / "calibration" / "dgx-h100.params.toml")
    assert main(["predict", "dgx-h100", "--collective", "allreduce", "--sizes", "1G",
                 "--params", own]) == 0  # fmt: skip
    assert capsys.readouterr().err == ""


def _busbw_at_1g(capsys, *extra: str) -> float:
    assert main(["predict", "h100-ib-fat-tree", "--set", "n_nodes=2", "--collective",
                 "allreduce", "--sizes", "1G", "--format", "csv", *extra]) == 0  # fmt: skip
    header, row = capsys.readouterr().out.strip().splitlines()[-2:]
    return (
        float(dict(zip(header.split(","), row.split(","), strict=True))["busbw_bytes_per_s"]) / 1e9
    )


def test_what_if_a_link_is_slower_or_down(capsys) -> None:
    # issue 31: no way to ask "what if one NIC is down, or the network runs at half rate".
    # Two DGX H100 on NDR, the ring: the NICs bind (8 x 50 GB/s x the file's fitted net
    # efficiency). (NCCL's own pick there, NVLS-tree, passes the NICs' total.)
    from simcoll.topology.calibration import read_calibration  # noqa: PLC0415

    params = REPO / "topologies" / "calibration" / "h100-ib-fat-tree.params.toml"
    net = 50 * read_calibration(params).efficiency["net"]
    half = _busbw_at_1g(capsys, "--degrade", "ib=0.5", "--algorithm", "ring")
    assert 0.93 * 8 * net / 2 <= half <= 8 * net / 2
    one_down = _busbw_at_1g(capsys, "--fail", "node0.nic0", "--algorithm", "ring")  # 7 NICs
    assert 0.93 * 7 * net <= one_down <= 7 * net
    assert main(["predict", "dgx-a100", "--collective", "allreduce", "--sizes", "1G",
                 "--fail", "gpu0"]) == 2  # fmt: skip
    assert capsys.readouterr().err == (
        "simcoll: error: --fail gpu0: gpu0 and gpu1 can no longer reach each other (the fabric "
        "is cut)\n"
    )
    for bad in ("nvlink=0", "nvlink=1.5", "nvlink=x", "=0.5"):
        assert main(["predict", "dgx-a100", "--collective", "allreduce", "--sizes", "1G",
                     "--degrade", bad]) == 2  # fmt: skip
        err = capsys.readouterr().err
        assert err.startswith("simcoll: error: --degrade: ")
        assert err.count("\n") == 1


def test_the_nccl_tests_format_reads_back_through_the_nccl_tests_parser(tmp_path, capsys) -> None:
    # issue 31: output nccl-tests users can read as nccl-tests: both halves side by side,
    # #wrong, -d and -o; read back by the parser simcoll reads real logs with
    from simcoll.calibrate.read import read_measurements  # noqa: PLC0415

    assert main(["predict", "dgx-a100", "--collective", "allgather", "--sizes", "1M,1G",
                 "--format", "nccl-tests", "-d", "half"]) == 0  # fmt: skip
    log = tmp_path / "all_gather_perf.log"
    log.write_text(capsys.readouterr().out)
    assert main(["predict", "dgx-a100", "--collective", "allgather", "--sizes", "1M,1G",
                 "--format", "csv", "-d", "half"]) == 0  # fmt: skip
    header, *lines = capsys.readouterr().out.strip().splitlines()
    oop = [dict(zip(header.split(","), line.split(","), strict=True)) for line in lines]
    assert main(["predict", "dgx-a100", "--collective", "allgather", "--sizes", "1M,1G",
                 "--format", "csv", "-d", "half", "--in-place"]) == 0  # fmt: skip
    header, *lines = capsys.readouterr().out.strip().splitlines()
    ip = [dict(zip(header.split(","), line.split(","), strict=True)) for line in lines]
    rows = read_measurements(log).rows
    assert [(m.size_bytes, m.in_place) for m in rows] == [
        (2**20, False), (2**20, True), (2**30, False), (2**30, True)]  # fmt: skip
    for m, simulated in zip(rows, [oop[0], ip[0], oop[1], ip[1]], strict=True):
        # nccl-tests prints microseconds to 2, 1 or 0 decimals
        assert m.time_s == pytest.approx(float(simulated["time_s"]), rel=1e-3)
        assert (m.dtype, m.count) == ("half", m.size_bytes // 2 // 8)
    text = log.read_text()
    assert "#wrong" in text
    assert " half " in text


def test_algorithm_all_shows_every_algorithm_side_by_side(capsys) -> None:
    # Issue 31: --algorithm all kept only the fastest per size. Now: one column group per
    # algorithm that can run here (NVLS, SHARP and CollNet cannot on a DGX A100: said on
    # stderr),
    # a line per size, and the fastest per size named under the table.
    from simcoll.algorithms import algorithm_names  # noqa: PLC0415

    argv = ("predict", DGX_A100, "--collective", "allreduce", "--sizes", "1M,1G",
            "--algorithm", "all", "--protocol", "simple")  # fmt: skip
    status, out, err = run(capsys, *argv)
    assert status == 0, err
    runnable = [a for a in algorithm_names(Collective.ALLREDUCE)
                if a not in ("nvls", "nvls_tree", "sharp", "collnet_direct",
                             "collnet_chain")]  # fmt: skip
    header = next(line for line in out.splitlines() if line.startswith("#       size"))
    assert [group.strip() for group in header.split("|")[1:]] == runnable
    assert "simcoll: note: nvls not run: " in err
    assert "simcoll: note: sharp not run: " in err
    assert "simcoll: note: collnet_chain not run: " in err
    lines = [line for line in out.splitlines() if not line.startswith("#")]
    assert [int(line.split()[0]) for line in lines] == [2**20, 2**30]
    assert all(line.count("|") == len(runnable) for line in lines)
    status, csv_out, _ = run(capsys, *argv, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(csv_out)))
    assert len(rows) == 2 * len(runnable)  # a row per algorithm and size
    fastest = {}
    for row in rows:
        size, time_s = int(row["size_bytes"]), float(row["time_s"])
        if size not in fastest or time_s < fastest[size][1]:
            fastest[size] = (row["algorithm"], time_s)
    picked = out.splitlines()[-1]
    assert picked.startswith("# Fastest per size: ")
    for algorithm, _ in fastest.values():
        assert f"{algorithm}/simple" in picked


def test_algorithm_all_has_no_nccl_tests_log(capsys) -> None:
    status, _, err = run(capsys, "predict", DGX_A100, "--collective", "allreduce", "--sizes",
                         "1M", "--algorithm", "all", "--format", "nccl-tests")  # fmt: skip
    assert status == 2
    assert err == (
        "simcoll: error: --format nccl-tests: prints one algorithm's log, as nccl-tests does; "
        "name one, or use --format table, csv or json for every algorithm\n"
    )


@pytest.mark.parametrize("y", ["time", "algbw", "busbw"])
def test_plot_against_size_of_time_or_bandwidth_on_a_log_axis(capsys, tmp_path, y) -> None:
    png = tmp_path / f"{y}.png"
    status, _, err = run(capsys, "predict", DGX_A100, "--collective", "allgather", "--sizes",
                         "1K:1G:32", "--plot", png, "--plot-y", y, "--log-y")  # fmt: skip
    assert status == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"simcoll: wrote {png}" in err


def test_plot_refuses_an_unknown_y() -> None:
    from simcoll.output.plot import plot_vs_size  # noqa: PLC0415

    with pytest.raises(ValueError, match="y must be one of busbw, algbw, time, got 'speed'"):
        plot_vs_size([], "x.png", title="t", y="speed")


def test_predict_says_first_how_long_a_long_simulation_is_expected_to_take(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 41's adversarial pass, seed 61: a 1 GiB all-gather by halving-doubling in 64
    # channels of 4,096 pieces (14.7 million transfers) ran minutes with nothing said. A
    # run expected to take longer than SAY_EXPECTED_AFTER_S says so before it starts; the
    # figure is the cost check's own (the same call_estimates), here with the bar at 0 s.
    from simcoll.cli import predict as predict_cli  # noqa: PLC0415
    from simcoll.prediction.call import Machine, call_setup  # noqa: PLC0415
    from simcoll.prediction.call_cost import CallCosts, call_estimates  # noqa: PLC0415
    from simcoll.topology import load  # noqa: PLC0415

    dgx = str(REPO / "topologies" / "dgx-a100.toml")
    args = ["predict", dgx, "--collective", "allgather", "--algorithm", "ring", "--sizes", "1M"]
    assert main(args) == 0
    assert "expected to take" not in capsys.readouterr().err  # milliseconds: nothing said
    monkeypatch.setattr(predict_cli, "SAY_EXPECTED_AFTER_S", 0.0)
    assert main(args) == 0
    machine = Machine.of(load(dgx))
    setup = call_setup(machine, "allgather", machine.gpus(8), algorithm="ring")
    expected = sum(e.seconds for e in call_estimates(setup, 2**20, CallCosts()))
    note = next(line for line in capsys.readouterr().err.splitlines() if "expected" in line)
    assert note.startswith("simcoll: note: simulating allgather (ring) is expected to take about ")
    assert note.endswith(" (an estimate; Ctrl-C stops it)")
    said = parse_time_s(note.split(" about ")[1].split(" (")[0])
    # the estimate times a route on this machine (call_cost.seconds_per_route): the same
    # figure, give or take that clock
    assert 0.5 < said / expected < 2.0


def test_ncclalgo_collnet_runs_collnet(capsys) -> None:
    # NCCL_ALGO=CollNetChain: NCCL's model costs only CollNet Chain (Simple), the call runs
    # it, as predict by name (it ran the point-to-point direct path before).
    from simcoll.prediction import predict  # noqa: PLC0415

    fabric = REPO / "topologies" / "h100-ib-fat-tree.toml"
    status, out, err = run(capsys, "predict", fabric, "--set", "n_nodes=2", "--set",
                           "sharp=true", "--collective", "allreduce", "--sizes", "64M",
                           "--nccl", "NCCL_ALGO=CollNetChain", "--format", "json")  # fmt: skip
    assert status == 0, err
    (row,) = json.loads(out)
    tree = load(fabric, {"n_nodes": "2", "sharp": "true"})
    (named,) = predict(tree, "allreduce", [2**26], algorithm="collnet_chain").rows
    assert (row["algorithm"], row["protocol"]) == ("collnet_chain", "simple")
    assert row["time_s"] == named.time_s
