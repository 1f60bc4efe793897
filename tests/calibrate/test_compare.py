"""Comparison: error signs and regimes by hand, and the calibrate/compare commands end to end.

The 'measured' files are written by the test from closed forms (alpha-beta on a star of
4 ranks over 1 Gbit/s links), so every expected number is derived here.
"""

from __future__ import annotations

import csv
import io
import json
import tomllib
from pathlib import Path

import pytest

from simcoll.calibrate.compare import ComparedPoint, regime_of, summarise
from simcoll.calibrate.fit import FitPoint, simulate_points
from simcoll.calibrate.gloo import Recipe
from simcoll.calibrate.measurements import Measurement, MeasurementWriter
from simcoll.cli import main
from simcoll.topology import LinkKind, NodeKind, switch_star
from simcoll.topology.calibration import Calibration

B = 125e6
N = 4
E, HOP = 0.9, 30e-6  # the 'real' efficiency and per-link latency
SIZES = [4096 * 2**k for k in range(9)]  # 4 KiB .. 1 MiB

TOPOLOGY = """schema = 1
builder = "switch_star"
[params]
n_gpus = 4
link_bandwidth = "1 Gbit/s"
link_latency = "0.2 ms"
link_kind = "ethernet"
switch_kind = "switch"
"""


def sendrecv_s(size: int) -> float:
    return 2 * HOP + size / (E * B)


def allgather_s(size: int) -> float:
    return (N - 1) * (2 * HOP + size / N / (E * B))


def test_regime_boundaries():
    assert [regime_of(s) for s in (65535, 65536, 2**26 - 1, 2**26)] == [
        "latency", "middle", "middle", "bandwidth"]  # fmt: skip


def test_summary_by_hand():
    points = [
        ComparedPoint("f", "allreduce", 4, 1024, measured_s=1.0, simulated_s=1.2),  # +20 %
        ComparedPoint("f", "allreduce", 4, 2048, measured_s=1.0, simulated_s=0.9),  # -10 %
        ComparedPoint("f", "allreduce", 4, 2**27, measured_s=2.0, simulated_s=2.0),  # 0
    ]
    rows = {r["regime"]: r for r in summarise(points)}
    assert set(rows) == {"latency", "bandwidth", "all"}
    assert rows["latency"]["mean_time_error"] == pytest.approx(0.05)
    assert rows["latency"]["median_abs_time_error"] == pytest.approx(0.15)
    assert rows["latency"]["max_abs_time_error"] == pytest.approx(0.2)
    # busbw error = measured/simulated - 1: 1/1.2 - 1 and 1/0.9 - 1
    assert rows["latency"]["median_abs_busbw_error"] == pytest.approx((1 / 6 + 1 / 9) / 2)
    assert rows["all"]["points"] == 3
    assert rows["all"]["median_abs_time_error"] == pytest.approx(0.1)


@pytest.fixture
def files(tmp_path):
    topo = tmp_path / "star4.toml"
    topo.write_text(TOPOLOGY)
    p2p = tmp_path / "sendrecv.csv"
    with MeasurementWriter(p2p, metadata={"backend": "gloo"}) as w:
        for s in SIZES:
            w.append(Measurement(collective="sendrecv", n_ranks=N, size_bytes=s,
                                 time_s=sendrecv_s(s)))  # fmt: skip
    ag = tmp_path / "allgather.csv"
    with MeasurementWriter(ag, metadata={"backend": "gloo"}) as w:
        for s in SIZES:
            w.append(Measurement(collective="allgather", n_ranks=N, size_bytes=s,
                                 time_s=allgather_s(s)))  # fmt: skip
    return tmp_path, topo, p2p, ag


def test_calibrate_then_compare_end_to_end(files, capsys):
    tmp, topo, p2p, ag = files
    params = tmp / "p.toml"
    assert main(["calibrate", str(p2p), "--topology", str(topo), "-o", str(params)]) == 0
    out = capsys.readouterr().out
    assert "efficiency.net = 0.9\n" in out
    assert "link_latency_s.ethernet = 3e-05 s" in out
    assert "not identifiable from these runs (left uncalibrated): step_latency_s.net, " \
           "launch_s" in out  # fmt: skip
    document = tomllib.loads(params.read_text())
    assert document["efficiency"]["net"] == pytest.approx(E)
    assert document["fit"]["backend"] == "gloo"  # from the sidecar
    assert document["fit"]["algorithms"] == {"sendrecv": ["direct (n_chunks=1)"]}
    assert len(document["residuals"]) == len(SIZES)
    # the all-gather was never fitted; the plain ring (the closed form's) predicts it to
    # rounding (gloo's own recipe halves each block: see test_gloo_recipe_...)
    out_dir = tmp / "cmp"
    code = main(["compare", str(ag), "--topology", str(topo), "--params", str(params),
                 "--algorithm", "ring", "--out", str(out_dir)])  # fmt: skip
    assert code == 0
    table = capsys.readouterr().out
    assert "allgather" in table
    assert "+0.0 %" in table or "-0.0 %" in table  # exact to rounding, either side
    summary = (out_dir / "summary.csv").read_text().splitlines()
    assert summary[0].startswith("source,collective,n_ranks,regime,points")
    assert (out_dir / "compare.png").stat().st_size > 10_000
    uncalibrated = main(["compare", str(ag), "--topology", str(topo), "--algorithm", "ring"])
    assert uncalibrated == 0
    # without calibration: 0.2 ms links and full efficiency, so the simulator is slow
    # most at 4 KiB: (2 x 0.2 ms + 1 KiB / 1 Gbit/s) vs (2 x 30 us + 1 KiB / 0.9 Gbit/s)
    worst = (2 * 2e-4 + 1024 / B) / (2 * HOP + 1024 / (E * B)) - 1
    assert f" {100 * worst:.1f} %" in capsys.readouterr().out  # the max |time err| column


def test_commands_fail_in_one_line(files, capsys):
    tmp, topo, p2p, _ = files
    assert main(["calibrate", str(p2p), "--topology", str(topo), "-o", str(tmp / "x.toml"),
                 "--regimes", "huge"]) == 2  # fmt: skip
    assert capsys.readouterr().err == (
        "simcoll: error: --regimes: unknown regime 'huge'; valid: latency, middle, bandwidth\n"
    )
    assert main(["compare", str(tmp / "none.csv"), "--topology", str(topo)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("simcoll: error: ")
    assert err.count("\n") == 1
    assert "none.csv" in err
    bad = tmp / "bad.toml"
    bad.write_text("[efficiency]\nnet = -1\n")
    assert main(["compare", str(p2p), "--topology", str(topo), "--params", str(bad)]) == 2
    assert capsys.readouterr().err == (
        f"simcoll: error: {bad}: efficiency.net: must be in [0.001, 1], got -1: an efficiency is "
        "the fraction of a link's bandwidth that carries data, and no transfer beats its wire\n"
    )
    meta = json.loads((tmp / "sendrecv.json").read_text())
    meta["backend"] = "mpi"
    (tmp / "sendrecv.json").write_text(json.dumps(meta))
    assert main(["compare", str(p2p), "--topology", str(topo)]) == 2
    assert "backend 'mpi' is not one of nccl, gloo; pass --backend" in capsys.readouterr().err


def test_a_recipe_can_simulate_another_collective():
    """gloo's reduce-scatter is an all-reduce of the whole input (validation/
    gloo-algorithms.md): a reduce-scatter point simulated as the unchunked ring
    all-reduce takes 2 (n - 1) (2 hop + S / n / B') on the star."""
    star = switch_star(N, link_bandwidth_bytes_per_s=B, link_latency_s=HOP,
                       link_kind=LinkKind.ETHERNET, switch_kind=NodeKind.SWITCH)  # fmt: skip
    cal = Calibration(efficiency={"net": E})
    as_allreduce = Recipe("ring", (("n_chunks", 1),), simulate_as="allreduce")
    points = [FitPoint("reducescatter", N, s, 1.0) for s in SIZES]
    got = simulate_points(star, points, cal, recipe=lambda c, n, s: as_allreduce)
    for size, time_s in zip(SIZES, got, strict=True):
        assert time_s == pytest.approx(2 * (N - 1) * (2 * HOP + size / N / (E * B)))
    plain = simulate_points(star, points, cal, recipe=lambda c, n, s: "ring")
    for size, time_s in zip(SIZES, plain, strict=True):  # the real reduce-scatter: half
        assert time_s == pytest.approx((N - 1) * (2 * HOP + size / N / (E * B)))


def test_in_place_points_are_simulated_without_the_out_of_place_copy():
    """An out-of-place all-gather point pays each rank's own block, S / n read and written
    at the GPUs' memory bandwidth, beside the unchunked ring's (n - 1) (2 hop + S / n / B');
    its in-place twin (nccl-tests' second half) does not."""
    star = switch_star(N, link_bandwidth_bytes_per_s=B, link_latency_s=HOP,
                       link_kind=LinkKind.ETHERNET, switch_kind=NodeKind.SWITCH)  # fmt: skip
    memory = 2e9  # bytes/s: slow enough that the copy shows at every size
    star.graph["gpu_memory_bandwidth_bytes_per_s"] = memory
    cal = Calibration(efficiency={"net": E})
    unchunked = Recipe("ring", (("n_chunks", 1),))
    points = [FitPoint("allgather", N, s, 1.0, in_place=p) for s in SIZES for p in (False, True)]
    got = simulate_points(star, points, cal, recipe=lambda c, n, s: unchunked)
    for point, time_s in zip(points, got, strict=True):
        size = point.size_bytes
        ring_s = (N - 1) * (2 * HOP + size / N / (E * B))
        copy_s = 0.0 if point.in_place else 2 * (size / N) / memory
        assert time_s == pytest.approx(ring_s + copy_s), point


def test_option_errors_name_the_option_and_come_before_any_work(files, capsys):
    tmp, topo, p2p, _ = files
    assert main(["calibrate", str(p2p), "--topology", str(topo), "--fit", "bogus",
                 "-o", str(tmp / "x.toml")]) == 2  # fmt: skip
    assert capsys.readouterr().err == (
        "simcoll: error: --fit: unknown parameter group 'bogus'; valid (or one of a group's "
        "parameters, as efficiency.net): efficiency, link_latency_s, step_latency_s, launch_s, "
        "protocol_efficiency, floor_s\n"
    )
    out = tmp / "missing" / "x.toml"
    assert main(["calibrate", str(p2p), "--topology", str(topo), "-o", str(out)]) == 2
    assert capsys.readouterr().err == (f"simcoll: error: -o {out}: no such folder {out.parent}\n")
    assert main(["compare", str(p2p), "--topology", str(topo), "--min-size", "lots"]) == 2
    assert capsys.readouterr().err == (
        "simcoll: error: --min-size: cannot read 'lots' as a number with a unit\n"
    )


def test_predict_with_params_on_the_bare_links_in_every_model(files, capsys):
    """A gloo calibration (protocol none) works with the closed forms too; the nccl
    model costs the bare links as NCCL's Simple protocol, the launch cost on top."""
    tmp, topo, _, _ = files
    cal = tmp / "cal.toml"
    cal.write_text("launch_s = 0.001\n")
    times = {}
    for model in ("nccl", "analytical", "flow"):
        for extra in ([], ["--params", str(cal)]):
            argv = [
                "predict",
                str(topo),
                "--collective",
                "allreduce",
                "--sizes",
                "1M",
                "--protocol",
                "none",
                "--model",
                model,
                "--format",
                "csv",
                *extra,
            ]
            assert main(argv) == 0, capsys.readouterr().err
            times[model, bool(extra)] = float(capsys.readouterr().out.splitlines()[1].split(",")[5])
        assert times[model, True] == pytest.approx(times[model, False] + 0.001)


def test_a_prediction_read_back_compares_exactly_in_its_own_half(tmp_path, capsys):
    """``predict --format csv`` is a measurement file: its rows say which half they are,
    and comparing them on the same topology gives 0 error; the other half is refused in
    one line that says which flag to use."""
    repo = Path(__file__).resolve().parents[2]
    a100 = str(repo / "topologies" / "dgx-a100.toml")
    predicted = tmp_path / "in-place.csv"
    assert main(["predict", a100, "--collective", "allgather", "--sizes", "1M,1G",
                 "--format", "csv", "--in-place"]) == 0  # fmt: skip
    predicted.write_text(capsys.readouterr().out)
    assert main(["compare", str(predicted), "--topology", a100]) == 2
    assert capsys.readouterr().err == (
        f"simcoll: error: {predicted}: no out-of-place rows to use; pass --in-place\n"
    )
    assert main(["compare", str(predicted), "--topology", a100, "--in-place",
                 "--out", str(tmp_path / "cmp")]) == 0  # fmt: skip
    capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO((tmp_path / "cmp" / "points.csv").read_text())))
    assert [float(r["time_error"]) for r in rows] == [0.0, 0.0]


def test_compare_and_calibrate_say_what_they_will_simulate_before_they_start(files, capsys):
    # Issue 29: on a 5,000-row table both ran for minutes without a word. Each says, on
    # standard error, the measured points, the distinct calls (one per size here) and an
    # estimate; the bar itself shows only on a terminal.
    tmp, topo, p2p, ag = files
    assert main(["compare", str(ag), "--topology", str(topo), "--algorithm", "ring"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"compare: {len(SIZES)} measured point(s), {len(SIZES)} call(s) "
                             "to simulate; estimated about ")  # fmt: skip
    assert err[0].endswith(" for them")
    assert len(err) == 1  # not a terminal: no bar
    assert main(["calibrate", str(p2p), "--topology", str(topo), "-o", str(tmp / "p.toml")]) == 0
    printed = capsys.readouterr()
    err = printed.err.splitlines()
    assert err[0].startswith(f"calibrate: {len(SIZES)} measured point(s), {len(SIZES)} call(s)")
    assert err[0].endswith(" for a pass over them (a fit makes several)")
    # issue 31: what it wrote is said on stderr, as every command says it
    assert err[-1] == f"simcoll: wrote {tmp / 'p.toml'}"
    assert "wrote" not in printed.out


def test_compare_and_calibrate_simulate_the_runs_nccl_settings(tmp_path, capsys):
    # The public 2-server ring ran with NCCL_MIN_CTAS=24; compare and calibrate take
    # --nccl as predict does, and a fit records it with its provenance.
    from simcoll.plan.tuning import parse_nccl_knobs  # noqa: PLC0415
    from simcoll.prediction import predict  # noqa: PLC0415
    from simcoll.topology.io import load  # noqa: PLC0415

    repo = Path(__file__).resolve().parents[2]
    table = (
        repo
        / "validation/data/public/nccl_allreduce_2x8xH100_ndr_ring_mincta24_nccltests309_gjaion.csv"
    )
    topo = repo / "topologies/h100-ib-fat-tree.toml"
    common = ["--topology", str(topo), "--set", "n_nodes=2", "--collective", "allreduce",
              "--ranks", "16", "--algorithm", "ring", "--min-size", "1G"]  # fmt: skip
    times = {}
    for knobs in ([], ["NCCL_MAX_CTAS=2"]):
        out = tmp_path / f"cmp{len(knobs)}"
        flags = [a for k in knobs for a in ("--nccl", k)]
        assert main(["compare", str(table), *common, *flags, "--out", str(out)]) == 0
        with (out / "points.csv").open() as handle:
            rows = list(csv.DictReader(handle))
        times[len(knobs)] = {int(r["size_bytes"]): float(r["simulated_s"]) for r in rows}
    graph = load(topo, {"n_nodes": "2"})
    (row,) = predict(graph, "allreduce", [2**30], algorithm="ring", n_ranks=16,
                     knobs=parse_nccl_knobs(["NCCL_MAX_CTAS=2"])).rows  # fmt: skip
    assert times[1][2**30] == pytest.approx(row.time_s, rel=1e-12)
    assert times[1][2**30] > 1.5 * times[0][2**30]  # 2 channels: 2 of the 8 NICs
    capsys.readouterr()
    params = tmp_path / "p.toml"
    assert main(["calibrate", str(table), *common[:-2], "--regimes", "bandwidth",
                 "--fit", "efficiency.net", "--nccl", "NCCL_MIN_CTAS=24",
                 "-o", str(params)]) == 0  # fmt: skip
    assert tomllib.loads(params.read_text())["fit"]["nccl"] == ["NCCL_MIN_CTAS=24"]
    capsys.readouterr()
    assert main(["compare", str(table), *common, "--nccl", "NCCL_CTAS=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("simcoll: error: --nccl: ")
    assert err.count("\n") == 1
