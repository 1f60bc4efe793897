"""Tests of simcoll.scenarios.sweep: results against closed forms, failures, resuming, Dask."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.scenario import load_scenario
from simcoll.scenarios.sweep import RESULTS_JSONL, check_sweep, run_sweep

REPO = Path(__file__).resolve().parents[2]

BANDWIDTH_BYTES_PER_S = 10e9
LATENCY_S = 1e-6
TOPOLOGY = f"""\
schema = 1
builder = "switch_star"
description = "8 GPUs on one switch"
[params]
n_gpus = 8
link_bandwidth = "{BANDWIDTH_BYTES_PER_S / 1e9:g} GB/s"
link_latency = "{LATENCY_S * 1e6:g} us"
"""


def write_scenario(folder: Path, sweep: str, workload: str = 'collective = "allreduce"') -> Path:
    (folder / "star.toml").write_text(TOPOLOGY)
    path = folder / "s.toml"
    path.write_text(
        f'schema = 1\ntitle = "t"\n[topology]\nfile = "star.toml"\n'
        f'[workload]\nalgorithm = "ring"\nprotocol = "none"\n{workload}\n[sweep]\n{sweep}\n'
    )
    return path


def ring_allreduce_s(n_ranks: int, size_bytes: int) -> float:
    """2(n-1) steps; each crosses GPU->switch->GPU: 2 latencies, then size/n over one link."""
    return 2 * (n_ranks - 1) * (2 * LATENCY_S + size_bytes / n_ranks / BANDWIDTH_BYTES_PER_S)


def test_rows_match_the_ring_closed_form(tmp_path: Path) -> None:
    scenario = load_scenario(
        write_scenario(tmp_path, 'n_ranks = [2, 4, 8]\nsize_bytes = "64K:256K"')
    )
    result = run_sweep(scenario, workers=1)
    assert len(result.rows) == 9
    for row in result.rows:
        expected = ring_allreduce_s(row["n_ranks"], row["size_bytes"])
        assert row["time_s"] == pytest.approx(expected, rel=1e-9)
        assert row["collective"] == "allreduce"
        assert row["algorithm"] == "ring"


def test_a_failed_point_is_recorded_and_the_rest_go_on(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, 'algorithm = ["ring", "nope"]\nsize_bytes = [1024]')
    out = tmp_path / "out"
    result = run_sweep(load_scenario(path), out, workers=1)
    assert [p.ok for p in result.points] == [True, False]
    assert result.failures[0].error == (
        "allreduce has no algorithm 'nope'; valid: collnet_chain, collnet_direct, direct, "
        "halving_doubling, hierarchical, "
        "nvls, nvls_tree, reduce_broadcast, reducescatter_allgather, ring, sharp, tree"
    )
    records = [json.loads(line) for line in (out / RESULTS_JSONL).read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok", "error"]
    assert records[1]["error"] == result.failures[0].error


def test_rerun_skips_finished_points_and_retries_failed_ones(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, "n_ranks = [2, 4]\nsize_bytes = [1024, 2048, 4096]")
    out = tmp_path / "out"
    first = run_sweep(load_scenario(path), out, workers=1)
    log = out / RESULTS_JSONL
    lines = log.read_text().splitlines()
    # keep two finished points, a failed one and a line torn by a kill mid-write
    failed = json.loads(lines[2]) | {"status": "error", "error": "boom", "rows": []}
    log.write_text("\n".join([*lines[:2], json.dumps(failed), lines[3][:20]]) + "\n")
    ran: list[int] = []
    second = run_sweep(
        load_scenario(path), out, workers=1, on_point=lambda p: ran.append(p.point.index)
    )
    assert sorted(ran) == [2, 3, 4, 5]
    assert second.skipped == 2
    assert second.rows == first.rows


def test_a_folder_of_other_files_is_not_overwritten_without_force(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, "size_bytes = [1024]")
    out = tmp_path / "out"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    with pytest.raises(ConfigError) as info:
        run_sweep(load_scenario(path), out, workers=1)
    assert str(info.value) == (
        f"{out}: holds files simcoll did not write (thesis.tex); choose another --out or pass "
        "--force to write beside them; they stay untouched"
    )
    run_sweep(load_scenario(path), out, workers=1, force=True)
    assert (out / "thesis.tex").read_text() == "precious"
    other = write_scenario(tmp_path, "size_bytes = [2048]")
    with pytest.raises(ConfigError, match="and another scenario's results"):
        run_sweep(load_scenario(other), out, workers=1)


def test_local_processes_give_the_same_rows_as_in_process(tmp_path: Path) -> None:
    scenario = load_scenario(write_scenario(tmp_path, 'n_ranks = [2, 4, 8]\nsize_bytes = "1K:4K"'))
    assert run_sweep(scenario, workers=2).rows == run_sweep(scenario, workers=1).rows


def test_dask_cluster_gives_the_same_rows_as_local_processes(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    scenario = load_scenario(write_scenario(tmp_path, 'n_ranks = [2, 4, 8]\nsize_bytes = "1K:4K"'))
    local = run_sweep(scenario, workers=2)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        on_dask = run_sweep(scenario, tmp_path / "dask", scheduler=cluster.scheduler_address)
    assert on_dask.rows == local.rows
    assert len(on_dask.rows) == 9


def test_killing_a_sweep_and_running_it_again_completes_only_the_missing_points(
    tmp_path: Path,
) -> None:
    path = write_scenario(tmp_path, 'n_ranks = [2, 3, 4, 5, 6, 7, 8]\nsize_bytes = "1M:64M"')
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "simcoll",
        "run",
        str(path),
        "--out",
        str(out),
        "--workers",
        "1",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = out / RESULTS_JSONL
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= 3:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the sweep ended before it could be killed"
    n_before = len([line for line in log.read_text().splitlines() if line.endswith("}")])
    n_points = 7 * 7
    assert 3 <= n_before < n_points
    ran: list[int] = []
    result = run_sweep(
        load_scenario(path), out, workers=1, on_point=lambda p: ran.append(p.point.index)
    )
    assert len(ran) == n_points - n_before
    assert result.skipped == n_before
    assert len(result.rows) == n_points
    fresh = run_sweep(load_scenario(path), workers=1)
    assert result.rows == fresh.rows


def test_points_with_more_ranks_than_gpus_are_skipped_not_failed(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, "n_ranks = [8, 16]\nsize_bytes = [1024]")
    out = tmp_path / "out"
    result = run_sweep(load_scenario(path), out, workers=1)
    assert [p.status for p in result.points] == ["ok", "skipped"]
    assert result.points[1].skipped == "star.toml has 8 GPUs, fewer than n_ranks=16"
    assert result.failures == []
    ran: list[int] = []
    run_sweep(load_scenario(path), out, workers=1, on_point=lambda p: ran.append(p.point.index))
    assert ran == []


def test_results_come_back_as_columns_and_as_a_dataframe(tmp_path: Path) -> None:
    scenario = load_scenario(write_scenario(tmp_path, "n_ranks = [2, 4]\nsize_bytes = [1024]"))
    result = run_sweep(scenario, workers=1)
    assert result.column("n_ranks").tolist() == [2, 4]
    if importlib.util.find_spec("pandas") is None:  # pandas is optional
        with pytest.raises(ConfigError) as info:
            result.to_pandas()
        assert str(info.value) == "to_pandas needs pandas: pip install pandas"
        return
    import pandas as pd  # noqa: PLC0415 - only where installed

    frame = result.to_pandas()
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns[:3]) == ["collective", "algorithm", "protocol"]
    assert frame["time_s"].tolist() == [r["time_s"] for r in result.rows]


@pytest.mark.parametrize(
    ("workload", "sweep", "message"),
    [
        ('kind = "dpp"', "", "workload.kind: unknown workload 'dpp'; valid: collective, "
         "concurrent, ddp, fsdp, moe, p2p, pipeline, tensor_parallel_mlp, training_step"),
        ('kind = "p2p"\nbucket_size = 1', "", "workload.bucket_size: p2p has no parameter "
         "'bucket_size'; valid: src_rank, dst_ranks, size_bytes, n_copies, model, protocol, "
         "calibration"),
        ('kind = "p2p"', "n_copy = [1, 2]", "sweep.n_copy: p2p has no parameter 'n_copy'; "
         "valid: src_rank, dst_ranks, size_bytes, n_copies, model, protocol, calibration"),
        ('collective = "allreduse"', "", "workload.collective: unknown collective "
         "'allreduse'; valid: allreduce, allgather, reducescatter, alltoall, broadcast, "
         "reduce, gather, scatter, sendrecv"),
    ],
)  # fmt: skip
def test_names_that_would_fail_every_point_are_refused_before_any_runs(
    tmp_path: Path, workload: str, sweep: str, message: str
) -> None:
    path = tmp_path / "s.toml"
    (tmp_path / "star.toml").write_text(TOPOLOGY)
    path.write_text(
        f'schema = 1\n[topology]\nfile = "star.toml"\n[workload]\n{workload}\n[sweep]\n{sweep}\n'
    )
    with pytest.raises(ConfigError) as info:
        run_sweep(load_scenario(path), tmp_path / "out", workers=1)
    assert str(info.value) == f"{path}: {message}"
    assert not (tmp_path / "out").exists()


def test_topology_errors_name_the_scenario_field_they_come_from(tmp_path: Path) -> None:
    (tmp_path / "star.toml").write_text(TOPOLOGY)
    path = tmp_path / "s.toml"
    path.write_text(
        'schema = 1\n[topology]\nfile = "nowhere.toml"\n[workload]\ncollective = "allreduce"\n'
    )
    with pytest.raises(ConfigError) as info:
        run_sweep(load_scenario(path), workers=1)
    assert str(info.value) == (
        f"{path}: topology.file: no such topology file '{tmp_path / 'nowhere.toml'}'"
    )
    path.write_text(
        'schema = 1\n[topology]\nfile = "star.toml"\nset = { n_gpus = -2 }\n'
        '[workload]\ncollective = "allreduce"\n'
    )
    with pytest.raises(ConfigError) as info:
        run_sweep(load_scenario(path), workers=1)
    assert str(info.value) == (
        f"{path}: topology.set.n_gpus: must be an integer >= 1, got -2 "
        f"(in {tmp_path / 'star.toml'})"
    )


def test_a_point_with_zero_channels_is_its_own_error_not_a_traceback(tmp_path: Path) -> None:
    # Issue 29: n_channels = 0 gave ZeroDivisionError in plan/tuning.py through the
    # sweep's cost estimate.
    workload = 'collective = "allreduce"\nn_channels = 0'
    scenario = load_scenario(write_scenario(tmp_path, 'size_bytes = ["1 MiB"]', workload))
    result = run_sweep(scenario, workers=1)
    assert [p.error for p in result.points] == ["n_channels: must be at least 1, got 0"]


@pytest.mark.parametrize("protocol", ["0", "[1]", "true"])
def test_a_protocol_that_is_not_a_name_is_the_points_error_not_a_traceback(
    tmp_path: Path, protocol: str
) -> None:
    # Issue 41: protocol = 0 raised AttributeError ('int' object has no attribute 'lower')
    # in the sweep's cost estimate, before any point ran.
    path = write_scenario(tmp_path, 'size_bytes = ["1 MiB"]')
    path.write_text(path.read_text().replace('protocol = "none"', f"protocol = {protocol}"))
    scenario = load_scenario(path)
    check_sweep(scenario, workers=1, scheduler=None, max_hours=1.0)
    result = run_sweep(scenario, workers=1)
    value = tomllib.loads(f"x = {protocol}")["x"]
    assert [p.error for p in result.points] == [
        f"workload.protocol: must be a protocol name, got {value!r}"
    ]


def test_the_bar_moves_by_the_work_each_point_is_estimated_to_take() -> None:
    # Issue 31: the bar counted points, so one slow point among quick ones held it at
    # 1/N, then it jumped. Weighted by each point's estimate, the first (1 GiB, 64 pieces
    # per block) fills most of it, the three 1 KiB points the rest.
    import io  # noqa: PLC0415

    from simcoll.scenarios.cost import point_estimates  # noqa: PLC0415
    from simcoll.scenarios.scenario import parse_scenario  # noqa: PLC0415

    scenario = parse_scenario({
        "schema": 1,
        "topology": {"file": str(REPO / "topologies" / "dgx-a100.toml")},
        "workload": {"collective": "allreduce", "algorithm": "ring", "protocol": "simple"},
        "sweep": {"size_bytes": ["1 GiB", "1 KiB", "2 KiB", "4 KiB"]},
    }, source="<test>", base=REPO)  # fmt: skip
    weights = point_estimates(scenario)
    share = weights[0] / sum(weights.values())
    assert share > 0.5
    out = io.StringIO()
    run_sweep(scenario, workers=1, progress=out)
    first = next(line for line in out.getvalue().splitlines() if line.startswith("["))
    # (not a terminal: a line per tenth reached; the estimate's line comes before)
    assert first.startswith("[" + "#" * int(30 * share))
    assert " 1/4 points" in first
