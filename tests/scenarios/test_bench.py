"""simcoll bench: its smallest case end to end, and its command-line errors."""

from __future__ import annotations

import io

import pytest

from simcoll.cli import main
from simcoll.models.estimate import SECONDS_PER_REPRESENTATIVE
from simcoll.prediction import predict
from simcoll.scenarios.bench import CASES, BenchRow, print_rows, run_bench
from simcoll.topology import load as load_topology


def test_bench_ring_8_counts_the_whole_schedule_and_its_representatives() -> None:
    (row,) = run_bench(["ring-8"], timeout_s=120)
    assert row.status == "ok"
    # 8 ranks, 2(8 - 1) steps, 8 channels: 2 x 7 x 8 x 8 transfers; on one NVSwitch
    # every rank is like every other and channels are copies: 14 representatives.
    assert (row.ranks, row.transfers, row.simulated) == (8, 2 * 7 * 8 * 8, 14)
    assert row.events > 0
    assert row.wall_s > 0
    assert row.peak_MiB > 0
    out = io.StringIO()
    print_rows(iter([row]), "csv", out)
    header, line = out.getvalue().splitlines()
    assert header.startswith("case,ranks,transfers,simulated,events,sim_time_ms,wall_s,estimate_s")
    # the cost check's estimate, by the path taken: 14 representatives
    assert row.estimate_s == pytest.approx(14 * SECONDS_PER_REPRESENTATIVE)
    assert line.startswith("ring-8,8,896,14,")


def targets_of(prefix: str) -> dict[str, float | None]:
    return {c.name: c.target_wall_s for c in CASES if c.name.startswith(prefix)}


def test_the_suite_has_the_issue_cases() -> None:
    assert [c.name for c in CASES] == [
        "ring-8",
        "ring-1024",
        "ring-16384",
        "build-131072-multiplane",
        "ring-16384-multiplane",
        "ring-1024-nccl",
        "ring-16384-nccl",
        "alltoall-1024",
        "alltoall-1024-ecmp",
        "ring-ecmp-256",
        "tree-1024",
        "ring-1024-ecmp",
        "nvls-tree-1024",
        "ring-1024-random",
        "ring-16384-random",
        "allreduce-65536-3tier",
        "allreduce-131072-multiplane",
        "ring-1024-random-ib",
        "tree-1024-nccl",
        "auto-128",
        "ddp-128",
        "ddp-1024",
        "step-gpt3-1024",
        "step-70b-fsdp-128",
        "step-405b-2048",
        "step-405b-16384",
        "search-70b-1024",
        "step-mixtral-256",
        "calibrate-h100",
        "diagnose-256",
        "sweep-128",
    ]
    # issue 28's: the README's DDP step on 128 GPUs, and on 1,024
    assert {c.name: c.target_wall_s for c in CASES if c.name.startswith("ddp")} == {
        "ddp-128": 3.0, "ddp-1024": 30.0}  # fmt: skip
    # issue 30's: a GPT-3 175B step on 1,024 GPUs and a Mixtral step on 256, a minute each;
    # issue 42's: a 70B FSDP per-block step on 128 GPUs in 10 s; Llama 3 405B's layout on
    # 16,384 GPUs in 60 s (and on 2,048, the same target), a 70B search on 1,024 in 5 min
    assert {c.name: c.target_wall_s for c in CASES if c.name.startswith("step")} == {
        "step-gpt3-1024": 60.0, "step-mixtral-256": 60.0, "step-70b-fsdp-128": 10.0,
        "step-405b-2048": 60.0, "step-405b-16384": 60.0}  # fmt: skip
    assert targets_of("search") == {"search-70b-1024": 300.0}
    targets = {c.name: c.target_wall_s for c in CASES}
    # issue 19's targets, seconds of wall time on a 2-core machine
    assert {k: targets[k] for k in ("ring-1024-ecmp", "ring-1024-random", "alltoall-1024",
                                    "alltoall-1024-ecmp", "tree-1024-nccl", "auto-128",
                                    "ring-16384-nccl", "calibrate-h100")} == {
        "ring-1024-ecmp": 30, "ring-1024-random": 30, "alltoall-1024": 30,
        "alltoall-1024-ecmp": 30,
        "tree-1024-nccl": 30, "auto-128": 60, "ring-16384-nccl": 60, "calibrate-h100": 120,
    }  # fmt: skip


def test_unknown_case_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "--cases", "ring-9"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    valid = ", ".join(c.name for c in CASES)
    assert err == (
        f"simcoll bench: error: argument --cases: unknown case ring-9; valid: {valid} "
        "(see simcoll bench --help)"
    )


#: The bench cases whose estimate is that of the cost check of ``run``, ``compare`` and
#: ``calibrate`` (prediction.call_cost): what ``predict`` and a workload take.
ESTIMATED = ["ring-1024-ecmp", "ring-1024-random-ib", "auto-128", "ddp-128", "ddp-1024"]


@pytest.mark.slow
def test_estimates_are_within_a_factor_of_two_of_the_time_taken() -> None:
    # Issue 29: estimates were 3-30x off (16,384 GPUs: 5.2 s estimated, 35 s taken; a
    # 5,000-row compare: none). Measured here, on the machine the constants were fitted
    # on (the project's 2-core one): each case's wall time against its estimate.
    # the event loop compiled (and cached for the cases' processes) first: a compile is
    # the first run's cost after install, not a case's
    predict(load_topology("dgx-h100"), "allreduce", [2**20])
    rows = list(run_bench(ESTIMATED, timeout_s=300))
    ratios = {row.case: row.wall_s / row.estimate_s for row in rows}
    print("wall / estimate:", {case: round(r, 2) for case, r in ratios.items()})
    assert all(row.status == "ok" for row in rows)
    # A run under a second (ddp-128: 0.4-0.5 s, 1.5-2.0x its estimate) is mostly costs the
    # estimate does not try to count (building the session's graph); the check is there to
    # stop long runs, so runs of a second and more are held to 2x.
    long = {row.case: ratios[row.case] for row in rows if row.wall_s >= 1.0}
    assert len(long) >= 4
    assert all(0.5 <= r <= 2.0 for r in long.values()), long


def test_the_table_keeps_its_columns_aligned_and_the_path_last() -> None:
    # issue 31: the table's columns misaligned after a long path
    row = BenchRow(case="auto-128 (31 sizes)", ranks=128, transfers=0, simulated=0, events=0,
                   sim_time_ms=1.0, path="predict: ring/simple, routing dmodk")  # fmt: skip
    short = BenchRow(case="ring-8", ranks=8, transfers=896, simulated=14, events=28,
                     sim_time_ms=4.19, path="symmetric")  # fmt: skip
    out = io.StringIO()
    print_rows(iter([row, short]), "table", out)
    header, first, second = out.getvalue().splitlines()
    assert header.rstrip().endswith("path")
    assert first.endswith("predict: ring/simple, routing dmodk")
    assert second.endswith("symmetric")
    at = header.index("status") + len("status")  # every column before the path ends here
    assert first[:at].rstrip().endswith("ok")
    assert second[:at].rstrip().endswith("ok")
