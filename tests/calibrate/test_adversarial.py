"""``simcoll calibrate`` and ``simcoll compare`` against adversarial input: outputs that name
inputs, folders of other files, impossible physics, failed nccl-tests runs, and values
past what a float holds (issue 17, items 2, 7, 18 and 19).

The 'measured' files are written from closed forms on a star of 4 ranks over 1 Gbit/s
links (as in test_compare.py), so every expected number is derived here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simcoll.calibrate.fit import FitPoint, fit
from simcoll.calibrate.measurements import Measurement, MeasurementWriter
from simcoll.calibrate.nccltests.read import parse_log
from simcoll.cli import main
from simcoll.core.errors import ConfigError
from simcoll.topology import LinkKind, NodeKind, switch_star

B = 125e6  # 1 Gbit/s in bytes per second
HOP_S = 30e-6
SIZES = [4096 * 2**k for k in range(6)]
TOPOLOGY = """schema = 1
builder = "switch_star"
[params]
n_gpus = 4
link_bandwidth = "1 Gbit/s"
link_latency = "30 us"
link_kind = "ethernet"
switch_kind = "switch"
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    topo = tmp_path / "star4.toml"
    topo.write_text(TOPOLOGY)
    runs = tmp_path / "sendrecv.csv"
    with MeasurementWriter(runs, metadata={"backend": "gloo"}) as w:
        for s in SIZES:  # 2 hops of latency, then S at 90 % of the wire
            w.append(Measurement(collective="sendrecv", n_ranks=4, size_bytes=s,
                                 time_s=2 * HOP_S + s / (0.9 * B)))  # fmt: skip
    return tmp_path, topo, runs


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.mark.parametrize("target", ["star4.toml", "sendrecv.csv", "sendrecv.json"])
def test_calibrate_refuses_an_output_that_is_one_of_its_inputs(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], target: str
) -> None:
    # issue 17 item 2: -o equal to --topology or a measurement file was overwritten, rc 0
    tmp, topo, runs = files
    before = snapshot(tmp)
    out = tmp / target
    assert main(["calibrate", str(runs), "--topology", str(topo), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"simcoll: error: -o {out}: is an input of this command (")
    assert err.endswith("); will not overwrite it\n")
    assert snapshot(tmp) == before


def test_calibrate_replaces_only_its_own_params_file(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    tmp, topo, runs = files
    mine = tmp / "mine.toml"
    mine.write_text("# my own notes\n")
    assert main(["calibrate", str(runs), "--topology", str(topo), "-o", str(mine)]) == 2
    assert capsys.readouterr().err == (
        f"simcoll: error: -o {mine}: exists and was not written by simcoll; will not overwrite "
        "it (remove it or choose another name)\n"
    )
    assert mine.read_text() == "# my own notes\n"
    params = tmp / "params.toml"
    for _ in range(2):  # the second run replaces what the first wrote
        assert main(["calibrate", str(runs), "--topology", str(topo), "-o", str(params)]) == 0
    assert "efficiency.net = 0.9\n" in capsys.readouterr().out


def test_compare_out_is_treated_like_run(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 17 item 2: compare --out overwrote points.csv, summary.csv, compare.png
    tmp, topo, runs = files
    out = tmp / "cmp"
    out.mkdir()
    (out / "summary.csv").write_text("my summary")
    (out / "photo.png").write_bytes(b"my photo")
    args = ["compare", str(runs), "--topology", str(topo), "--out", str(out)]
    assert main(args) == 2
    assert "holds files simcoll did not write (photo.png, summary.csv)" in capsys.readouterr().err
    assert main([*args, "--force"]) == 2
    assert capsys.readouterr().err.endswith(
        f"simcoll: error: {out}: holds summary.csv, which simcoll writes but did not write here; "
        "will not overwrite (move them or choose another --out)\n"
    )
    (out / "summary.csv").unlink()
    assert main([*args, "--force"]) == 0
    assert main([*args, "--force"]) == 0  # its own files are replaced
    assert (out / "photo.png").read_bytes() == b"my photo"
    assert {"points.csv", "summary.csv", "compare.png"} <= {p.name for p in out.iterdir()}


def test_the_fit_never_makes_a_link_faster_than_its_wire() -> None:
    # issue 17 item 7: efficiency.nvlink fitted up to 4 (753 GB/s busbw on 300 GB/s links).
    # "Measured" here at twice the wire (S / (2 B)): the best physical fit is efficiency 1.
    star = switch_star(2, link_bandwidth_bytes_per_s=B, link_latency_s=HOP_S,
                       link_kind=LinkKind.ETHERNET, switch_kind=NodeKind.SWITCH)  # fmt: skip
    points = [FitPoint("sendrecv", 2, s, 2 * HOP_S + s / (2 * B)) for s in (10**3, 10**5, 10**7)]
    result = fit(star, points, recipe=lambda c, n, s: "direct", parameters=["efficiency"])
    assert result.calibration.values["efficiency.net"] == 1.0


def test_a_hand_written_efficiency_above_one_is_refused(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    tmp, topo, _ = files
    params = tmp / "p.toml"
    params.write_text("[efficiency]\nnet = 4\n")
    args = ["predict", str(topo), "--collective", "sendrecv", "--params", str(params)]
    assert main(args) == 2
    assert capsys.readouterr().err.startswith(
        f"simcoll: error: {params}: efficiency.net: must be in [0.001, 1], got 4: "
    )


NEW_LOG = """\
# nThread 1 nGpus 2 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20
#  Rank  0 Group  0 Pid  10000 on      node0 device  0 [0x07] NVIDIA A100-SXM4-40GB
#  Rank  1 Group  0 Pid  10000 on      node0 device  1 [0x0f] NVIDIA A100-SXM4-40GB
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256     float     sum      -1    12.50    0.08    0.08      0    12.00    0.09    0.09      0
        2048           512     float     sum      -1    13.50    0.15    0.15      3    13.00    0.16    0.16      0
        4096          1024     float     sum      -1    14.50    0.28    0.28      0    14.00    0.29    0.29      7
# Out of bounds values : {bounds}
# Avg bus bandwidth    : 0.17
"""  # noqa: E501 - a log line is as long as nccl-tests prints it


def test_rows_that_failed_the_data_check_are_dropped_and_counted(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 17 item 7: rows with #wrong not 0, or a log saying FAILED, were timing data
    runs = parse_log(NEW_LOG.format(bounds="10 FAILED"), source="all_reduce_perf.log")
    assert [(m.size_bytes, m.in_place) for m in runs.rows] == [
        (1024, False), (1024, True), (2048, True), (4096, False)]  # fmt: skip
    assert runs.metadata["dropped_rows"] == 2
    tmp, topo, _ = files
    log = tmp / "all_reduce_perf.log"
    log.write_text(NEW_LOG.format(bounds="10 FAILED"))
    main(["compare", str(log), "--topology", str(topo), "--collective", "allreduce"])
    assert capsys.readouterr().err.startswith(
        f"simcoll: warning: {log}: dropped 2 row(s) that failed nccl-tests' data check (the log "
        "says 'Out of bounds values : 10 FAILED'); a wrong result is no timing\n"
    )


def test_a_log_that_says_failed_without_a_line_to_blame_gives_no_timing() -> None:
    text = NEW_LOG.format(bounds="1 FAILED").replace("      3 ", "      0 ").replace(" 7\n", " 0\n")
    with pytest.raises(ConfigError) as info:
        parse_log(text, source="all_reduce_perf.log")
    assert str(info.value) == (
        "all_reduce_perf.log: every data line failed nccl-tests' data check (the log says "
        "'Out of bounds values : 1 FAILED'); no timing to use"
    )


@pytest.mark.parametrize(("time_us", "seconds"), [("1e400", "inf"), ("1e-400", "0.0")])
def test_a_time_past_a_float_is_refused_not_fitted(time_us: str, seconds: str) -> None:
    # issue 17 item 7: 1e400 (inf) crashed the SVD, 1e-400 (0) divided by zero
    text = NEW_LOG.format(bounds="0 OK").replace("12.50", time_us)
    with pytest.raises(ConfigError) as info:
        parse_log(text, source="all_reduce_perf.log")
    assert str(info.value) == (
        f"all_reduce_perf.log: line 6: out-of-place time: out of range: {time_us} us is {seconds} s"
    )


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        (f"sendrecv,4,{2**63},1e-5", "size_bytes: must be at most 2^53 bytes (8 PiB), got "
         "9223372036854775808"),
        (f"sendrecv,4,{10**25},1e-5", f"size_bytes: must be at most 2^53 bytes (8 PiB), got "
         f"{10**25}"),
        (f"sendrecv,4,{10**29},1e-5", f"size_bytes: must be at most 2^53 bytes (8 PiB), got "
         f"{10**29}"),
        ("sendrecv,4,8," + "1" * 131_073, "not a CSV line: field larger than field limit "
         "(131072)"),
        ("sendrecv,4,8,1e-400", "time_s: must be positive, got 0.0"),
    ],
)  # fmt: skip
def test_measurement_cells_past_their_limits_are_one_line(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], cells: str, message: str
) -> None:
    # issue 17 item 18: these raised _csv.Error or computed with wrapped integers
    tmp, topo, _ = files
    runs = tmp / "bad.csv"
    runs.write_text(f"collective,n_ranks,size_bytes,time_s\n{cells}\n")
    assert main(["compare", str(runs), "--topology", str(topo)]) == 2
    assert capsys.readouterr().err == f"simcoll: error: {runs}: line 2: {message}\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--regimes", "bandwidth"], "--regimes: none of the 6 measured points is in bandwidth "
         "(their sizes, 4096 B to 131072 B, are latency, middle)"),
        (["--fit", ""], "--fit: names no parameter group; valid: efficiency, link_latency_s, "
         "step_latency_s, launch_s, protocol_efficiency, floor_s"),
        (["--regimes", ","], "--regimes: names no regime; valid: latency, middle, bandwidth"),
    ],
)  # fmt: skip
def test_calibrate_options_give_the_right_reason(
    files: tuple[Path, Path, Path],
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    # issue 17 item 19: --regimes latency gave the wrong reason, --fit "" named no option
    tmp, topo, runs = files
    argv = ["calibrate", str(runs), "--topology", str(topo), "-o", str(tmp / "p.toml"), *args]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"simcoll: error: {message}\n"


def test_compare_refuses_a_negative_rank_count(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, topo, runs = files
    with pytest.raises(SystemExit):
        main(["compare", str(runs), "--topology", str(topo), "--ranks", "-5"])
    assert "argument --ranks: expected a positive integer" in capsys.readouterr().err


def test_sidecar_and_log_files_must_be_json_objects(files: tuple[Path, Path, Path]) -> None:
    _, _, runs = files
    runs.with_suffix(".json").write_text(json.dumps([1, 2]))
    from simcoll.calibrate.read import read_measurements  # noqa: PLC0415

    with pytest.raises(ConfigError, match="expected a JSON object, got list"):
        read_measurements(runs)
