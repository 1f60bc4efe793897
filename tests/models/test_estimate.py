"""Tests of simcoll.models.estimate and the sweep's up-front cost check."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.algorithms import build_schedule
from simcoll.core.errors import ConfigError
from simcoll.models.estimate import BYTES_PER_TRANSFER, SECONDS_PER_TRANSFER, estimate_point
from simcoll.scenarios.cost import check_cost
from simcoll.scenarios.scenario import load_scenario
from simcoll.scenarios.sweep import run_sweep


@pytest.mark.parametrize(
    ("collective", "algorithm", "n_ranks", "size_bytes", "n_chunks"),
    [
        ("alltoall", "direct", 16, 16 * 16 * 64, 1),
        ("allgather", "direct", 12, 12 * 1024, 2),
        ("broadcast", "ring", 9, 9000, 3),
        ("gather", "direct", 7, 7 * 64, 1),
    ],
)
def test_counts_match_the_schedules_they_stand_for(
    collective: str, algorithm: str, n_ranks: int, size_bytes: int, n_chunks: int
) -> None:
    schedule = build_schedule(
        collective, algorithm, n_ranks=n_ranks, size_bytes=size_bytes, n_chunks=n_chunks
    )
    estimate = estimate_point(
        collective, algorithm, n_ranks=n_ranks, size_bytes=size_bytes, n_chunks=n_chunks
    )
    assert estimate.transfers == schedule.n_transfers


def test_rings_of_the_symmetric_path_count_one_representative_rank() -> None:
    # 2(n-1) steps x 4 pieces for one rank; the full schedule has n times as many
    e = estimate_point("allreduce", "ring", n_ranks=16, size_bytes=2**20, n_chunks=4)
    assert e.transfers == 2 * 15 * 4
    assert (
        build_schedule("allreduce", "ring", n_ranks=16, size_bytes=2**20, n_chunks=4).n_transfers
        == 16 * e.transfers
    )


def test_costs_follow_the_constants() -> None:
    e = estimate_point("alltoall", "direct", n_ranks=100, size_bytes=100 * 100 * 4)
    assert e.transfers == 100 * 99
    assert e.seconds == pytest.approx(9900 * SECONDS_PER_TRANSFER)
    assert e.peak_bytes == 9900 * BYTES_PER_TRANSFER
    assert estimate_point("allreduce", "ring", n_ranks=1, size_bytes=8).transfers == 0


def big_scenario(tmp_path: Path) -> Path:
    (tmp_path / "star.toml").write_text(
        'schema = 1\nbuilder = "switch_star"\ndescription = "big"\n[params]\nn_gpus = 4096\n'
        'link_bandwidth = "50 GB/s"\nlink_latency = "1 us"\n'
    )
    path = tmp_path / "big.toml"
    path.write_text(
        'schema = 1\n[topology]\nfile = "star.toml"\n[workload]\ncollective = "alltoall"\n'
        'algorithm = "direct"\n[sweep]\nsize_bytes = ["1 GiB", "2 GiB"]\n'
    )
    return path


def test_a_sweep_that_would_run_too_long_is_refused_before_it_starts(tmp_path: Path) -> None:
    path = big_scenario(tmp_path)
    transfers = 4096 * 4095  # all pairs, one piece each (64 KiB blocks)
    hours = 2 * transfers * SECONDS_PER_TRANSFER / 3600
    with pytest.raises(ConfigError) as info:
        run_sweep(load_scenario(path), tmp_path / "out", workers=1, max_hours=0.1)
    assert str(info.value) == (
        f"{path}: this sweep would take about {hours * 60:.3g} min on 1 worker(s) (2 points, "
        "estimated from their transfers at 60 us each), over the 0.1 h limit; sweep fewer or "
        "smaller points, or raise --max-hours"
    )
    assert not (tmp_path / "out").exists()


def test_a_point_too_big_for_memory_is_refused(tmp_path: Path) -> None:
    path = big_scenario(tmp_path)
    with pytest.raises(ConfigError) as info:
        check_cost(load_scenario(path), workers=2, memory_bytes=2**30)
    assert str(info.value) == (
        f"{path}: its largest point would need about 16 GiB of memory per worker (16773120 "
        "transfers), more than the 1 GiB this machine has for 2 worker(s); simulate fewer "
        "ranks, chunks or workers"
    )


def test_a_small_sweep_prints_its_estimate(tmp_path: Path) -> None:
    path = big_scenario(tmp_path)
    line = check_cost(load_scenario(path), workers=2, max_hours=100, memory_bytes=2**40)
    assert line.startswith("estimated about ")
    assert line.endswith(" on 2 worker(s) for the 2 collective point(s)")
