"""Tests of simcoll.models.estimate and the sweep's up-front cost check."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.algorithms import build_schedule
from simcoll.core.errors import ConfigError
from simcoll.models.estimate import (
    BYTES_PER_TRANSFER,
    SECONDS_PER_REPRESENTATIVE,
    SECONDS_PER_TRANSFER,
    estimate_point,
)
from simcoll.prediction import call_cost
from simcoll.prediction.call_cost import SECONDS_PER_LOOKUP
from simcoll.scenarios.cost import (
    SECONDS_PER_RUN,
    SECONDS_PER_SPAN,
    SECONDS_PER_TIMELINE,
    check_cost,
    estimate_sweep,
)
from simcoll.scenarios.scenario import load_scenario
from simcoll.scenarios.sweep import run_sweep

REPO = Path(__file__).resolve().parents[2]
#: What a route costs in these tests (measured on the fabric in a real estimate).
ROUTE_S = 1e-5


@pytest.fixture(autouse=True)
def fixed_route_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    both = (ROUTE_S, ROUTE_S)  # within a server and across the fabric
    monkeypatch.setattr(call_cost, "seconds_per_route", lambda setup, costs=None: both)


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


def test_rings_of_the_general_path_count_every_rank() -> None:
    e = estimate_point("allreduce", "ring", n_ranks=16, size_bytes=2**20, n_chunks=4,
                       symmetric=False)  # fmt: skip
    full = build_schedule("allreduce", "ring", n_ranks=16, size_bytes=2**20, n_chunks=4)
    assert e.transfers == full.n_transfers == 16 * 2 * 15 * 4
    assert e.seconds == pytest.approx(e.transfers * SECONDS_PER_TRANSFER)


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
        'algorithm = "direct"\nprotocol = "simple"\n[sweep]\nsize_bytes = ["1 GiB", "2 GiB"]\n'
    )
    return path


def test_a_sweep_that_would_run_too_long_is_refused_before_it_starts(tmp_path: Path) -> None:
    path = big_scenario(tmp_path)
    transfers = 4096 * 4095  # all pairs, one piece each (64 KiB blocks)
    # each point: every transfer, and a route towards each of the 4,096 GPUs
    hours = (SECONDS_PER_RUN + 2 * (transfers * SECONDS_PER_TRANSFER + 4096 * ROUTE_S)) / 3600
    with pytest.raises(ConfigError) as info:
        run_sweep(load_scenario(path), tmp_path / "out", workers=1, max_hours=0.01)
    assert str(info.value) == (
        f"{path}: this sweep would take about {hours * 60:.3g} min on 1 worker(s) (2 points, "
        f"estimated from their transfers at {SECONDS_PER_TRANSFER * 1e6:.0f} us each), over the "
        "0.01 h limit; sweep fewer or smaller points, or raise --max-hours"
    )
    assert not (tmp_path / "out").exists()


def test_a_point_too_big_for_memory_is_refused(tmp_path: Path) -> None:
    path = big_scenario(tmp_path)
    with pytest.raises(ConfigError) as info:
        check_cost(load_scenario(path), workers=2, memory_bytes=2**30)
    transfers = 4096 * 4095
    gib = transfers * BYTES_PER_TRANSFER / 2**30
    assert str(info.value) == (
        f"{path}: its largest point would need about {gib:.4g} GiB of memory per worker "
        f"({transfers} transfers), more than the 1 GiB this machine has for 2 worker(s); "
        "simulate fewer ranks, chunks or workers"
    )


def test_a_small_sweep_prints_its_estimate(tmp_path: Path) -> None:
    path = big_scenario(tmp_path)
    line = check_cost(load_scenario(path), workers=2, max_hours=100, memory_bytes=2**40)
    assert line.startswith("estimated about ")
    assert line.endswith(" on 2 worker(s) for the 2 collective point(s)")


def ring_scenario(tmp_path: Path, topology: str, size: str = "16 MiB") -> Path:
    path = tmp_path / "s.toml"
    path.write_text(
        f'schema = 1\n[topology]\nfile = "{REPO / "topologies" / topology}"\n[workload]\n'
        f'collective = "allreduce"\nalgorithm = "ring"\nprotocol = "simple"\n[sweep]\n'
        f'size_bytes = ["{size}"]\n'
    )
    return path


def test_a_ring_that_cannot_take_the_symmetric_path_counts_every_transfer(
    tmp_path: Path,
) -> None:
    # issue 17 item 10: the estimate assumed the symmetric path even where it does not run
    # (31 s estimated, 116 s taken at 4,096 GPUs). The 3D torus of 64 GPUs routes its ring
    # unevenly: the general path runs, 64 ranks x 2 x 63 steps, one piece each (16 MiB / 64
    # = 256 KiB blocks, under the 512 KiB piece), after the symmetric path checked its
    # periods (a route per rank, and each rank's copy looked up once per period checked).
    scenario = load_scenario(ring_scenario(tmp_path, "torus-3d.toml"))
    seconds, peak, counted = estimate_sweep(scenario)
    transfers = 64 * 2 * 63
    assert (peak, counted) == (transfers * BYTES_PER_TRANSFER, 1)
    simulated = seconds - SECONDS_PER_RUN - transfers * SECONDS_PER_TRANSFER - 64 * ROUTE_S
    checked = simulated / (64 * SECONDS_PER_LOOKUP)
    periods = [p for p in range(1, 33) if 64 % p == 0]  # 1, 2, 4, 8, 16, 32
    assert round(checked) in range(len(periods) + 1)
    assert checked == pytest.approx(round(checked))
    # a DGX H100 is symmetric with a period of one rank: NCCL's 24 channels with simple at
    # 16 MiB, one piece each (1 MiB pieces: 16 MiB / 8 / 24 < 1 MiB), 2 x 7 steps for one
    # rank, after routing each rank's copy on each channel once, looked up for period 1
    scenario = load_scenario(ring_scenario(tmp_path, "dgx-h100.toml"))
    seconds, peak, _ = estimate_sweep(scenario)
    copies = 8 * 24
    assert (seconds, peak) == pytest.approx(
        (SECONDS_PER_RUN + 14 * SECONDS_PER_REPRESENTATIVE
         + copies * (ROUTE_S + SECONDS_PER_LOOKUP), 14 * BYTES_PER_TRANSFER)
    )  # fmt: skip


def test_a_ring_off_rank_order_without_a_plan_is_estimated_on_the_general_path(
    tmp_path: Path,
) -> None:
    # The symmetric path is tried only on a plan or on ranks in rank order
    # (simulated.tries_fast_ring); the estimate looked for periods anyway, so a ring of
    # ranks placed 3 2 1 0 on a star (no servers: no plan) was costed as a fold it does not
    # take. On the general path: 4 ranks x 2 x 3 steps, one piece each (64 KiB: 16 KiB
    # blocks), after routing each rank's connection to its successor once; no lookups.
    (tmp_path / "star.toml").write_text(
        'schema = 1\nbuilder = "switch_star"\n[params]\nn_gpus = 4\n'
        'link_bandwidth = "50 GB/s"\nlink_latency = "1 us"\n'
    )
    (tmp_path / "order.txt").write_text("3\n2\n1\n0\n")
    path = tmp_path / "s.toml"
    path.write_text('schema = 1\n[topology]\nfile = "star.toml"\n[workload]\n'
                    'collective = "allreduce"\nalgorithm = "ring"\nprotocol = "simple"\n'
                    'placement = "order.txt"\n[sweep]\nsize_bytes = ["64 KiB"]\n')  # fmt: skip
    seconds, peak, _ = estimate_sweep(load_scenario(path))
    transfers = 4 * 2 * 3
    assert peak == transfers * BYTES_PER_TRANSFER
    assert seconds == pytest.approx(
        SECONDS_PER_RUN + transfers * SECONDS_PER_TRANSFER + 4 * ROUTE_S
    )


def workload_scenario(tmp_path: Path, workload: str, n_gpus: int = 4) -> Path:
    (tmp_path / "star.toml").write_text(
        f'schema = 1\nbuilder = "switch_star"\n[params]\nn_gpus = {n_gpus}\n'
        'link_bandwidth = "50 GB/s"\nlink_latency = "1 us"\n'
    )
    path = tmp_path / "w.toml"
    path.write_text(f'schema = 1\n[topology]\nfile = "star.toml"\n[workload]\n{workload}\n'
                    'protocol = "simple"\n')  # fmt: skip
    return path


def test_workload_points_are_estimated_by_the_calls_they_make(tmp_path: Path) -> None:
    # issue 17 item 11: workload points were never estimated. Two layers of 4 KiB, one per
    # bucket: two ring all-reduces on 4 ranks, the same call, which a session decides once
    # (issue 28), as predict does: on the star the symmetric path runs one rank's 2 x 3
    # steps of one piece.
    workload = (
        'kind = "ddp"\nlayer_params_bytes = [4096, 4096]\nfirst_bucket_bytes = 1\nbucket_bytes = 1'
    )
    seconds, peak, counted = estimate_sweep(load_scenario(workload_scenario(tmp_path, workload)))
    representatives = 2 * 3
    # its copies: each rank's connection routed, and looked up for the period checked
    decided = representatives * SECONDS_PER_REPRESENTATIVE + 4 * (ROUTE_S + SECONDS_PER_LOOKUP)
    # a workload keeps its first point's timeline: a span per op and rank (2 forwards, 2
    # backwards, 2 buckets' all-reduces and the optimizer step, on 4 ranks)
    spans = 7 * 4
    timeline_s = SECONDS_PER_TIMELINE + spans * SECONDS_PER_SPAN
    assert (seconds, peak, counted) == pytest.approx(
        (SECONDS_PER_RUN + decided + timeline_s, representatives * BYTES_PER_TRANSFER, 1)
    )


def test_the_default_protocol_costs_the_simulations_it_will_run(tmp_path: Path) -> None:
    # No protocol named: the fastest of LL, LL128 and simple; those whose lower bound
    # shows they cannot win are not simulated, and not counted.
    path = ring_scenario(tmp_path, "dgx-h100.toml")
    simple, _, _ = estimate_sweep(load_scenario(path))
    path.write_text(path.read_text().replace('protocol = "simple"\n', ""))
    auto = estimate_sweep(load_scenario(path))[0]
    assert simple < auto <= 3 * simple


def test_calls_that_may_meet_count_once_more_on_the_general_path(tmp_path: Path) -> None:
    # FSDP: all-gathers on one stream and reduce-scatters on another, on the same ranks:
    # they may run at once, transfer by transfer. One layer of 4 KiB on 4 ranks: two
    # all-gathers and a reduce-scatter (3 steps of one piece each), decided once per
    # distinct call (one representative rank's 3 transfers each), then each distinct
    # call's 4 x 3 transfers once on the general path (the two all-gathers are one call).
    workload = 'kind = "fsdp"\nlayer_params_bytes = [4096]'
    seconds, _, _ = estimate_sweep(load_scenario(workload_scenario(tmp_path, workload)))
    # the 4 ranks' ring connections are routed once (the session's router keeps them),
    # and each decided call looks its 4 copies up for period 1
    routes = 4 * ROUTE_S
    decided = 2 * (3 * SECONDS_PER_REPRESENTATIVE + 4 * SECONDS_PER_LOOKUP)  # AG and RS
    together = 2 * 4 * 3 * SECONDS_PER_TRANSFER
    spans = 6 * 4  # 2 all-gathers, forward, backward, reduce-scatter, optimizer; 4 ranks
    timeline_s = SECONDS_PER_TIMELINE + spans * SECONDS_PER_SPAN
    assert seconds == pytest.approx(SECONDS_PER_RUN + routes + decided + together + timeline_s)


def test_a_workload_too_big_for_memory_is_refused_before_it_runs(tmp_path: Path) -> None:
    # One MoE layer on 1,024 ranks: a dispatch and a combine all-to-all (direct, one piece
    # per pair), the same call: 1,024 x 1,023 transfers, decided once.
    workload = 'kind = "moe"\ntokens_per_rank = 64\nhidden_size = 64'
    path = workload_scenario(tmp_path, workload, n_gpus=1024)
    with pytest.raises(ConfigError) as info:
        check_cost(load_scenario(path), workers=1, memory_bytes=2**30)
    transfers = 1024 * 1023
    assert str(info.value).startswith(
        f"{path}: its largest point would need about "
        f"{transfers * BYTES_PER_TRANSFER / 2**30:.4g} GiB of memory per worker ({transfers} "
        "transfers), more than the 1 GiB"
    )


def test_a_workload_count_past_its_cap_is_one_line_and_fast(tmp_path: Path) -> None:
    # issue 17 item 11: ddp n_layers = 1e8 grew past 8 GB
    path = workload_scenario(tmp_path, 'kind = "ddp"\nn_layers = 100000000')
    result = run_sweep(load_scenario(path), workers=1)
    assert [p.error for p in result.points] == [
        "ddp: n_layers must be an integer of at most 100000, got 100000000"
    ]


def test_timelines_kept_count_in_the_estimate(tmp_path: Path) -> None:
    # Issue 29: `timelines = "all"` on 12 points was estimated at 484 ms and took about
    # 70 s: each timeline's trace and plots were not counted.
    path = ring_scenario(tmp_path, "dgx-h100.toml")
    without, _, _ = estimate_sweep(load_scenario(path))
    path.write_text(path.read_text() + '[output]\ntimelines = "all"\n')
    # a collective's timeline: the call on each of its 8 ranks
    with_timeline = without + SECONDS_PER_TIMELINE + 8 * SECONDS_PER_SPAN
    assert estimate_sweep(load_scenario(path))[0] == pytest.approx(with_timeline)
