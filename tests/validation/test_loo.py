"""validation/loo.py: the leave-one-out report runs, never reports a table it fitted on,
and its medians are those of the comparisons' own points."""

from __future__ import annotations

import csv
import os
import statistics
from pathlib import Path

import pytest

from validation.loo import MACHINES, main, summarise

REPO = Path(__file__).resolve().parents[2]


def test_every_table_exists_and_none_is_both_fitted_and_predicted() -> None:
    for machine in MACHINES:
        assert (REPO / machine.topology).is_file()
        for table in [machine.fit_on, *machine.predict]:
            assert (REPO / table.file).is_file(), table.file
        assert machine.fit_on.file not in {t.file for t in machine.predict}
    # every public nccl-tests table of a machine with more than one is in the report
    used = {Path(t.file).name for m in MACHINES for t in [m.fit_on, *m.predict]}
    public = {p.name for p in (REPO / "validation/data/public").glob("nccl_*.csv")}
    assert public - used == {"nccl_allreduce_8xV100_oci_bmgpu38_ocitutorials.csv"}  # alone


def test_summary_by_hand() -> None:
    errors = {512: 0.9, 2**10: 0.1, 2**20: -0.05, 2**26: -0.3, 2**27: 0.2, 2**28: 0.25}
    found = summarise(errors)
    assert found["from 64 MiB"] == (0.25, 2**26, 3)  # |-0.3|, 0.2, 0.25: median 0.25
    assert found["from 1 KiB"] == (pytest.approx(0.2), 2**26, 5)  # 0.05 0.1 0.2 0.25 0.3
    assert summarise({512: 0.1})["from 64 MiB"] is None


def test_the_report_over_every_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # CI runs the whole report (about 40 s): every machine fitted on its one table, every
    # other table predicted; each row's medians recomputed here from its points.csv.
    here = Path.cwd()
    try:
        assert main(["--out", str(tmp_path)]) == 0
    finally:
        os.chdir(here)
    out = capsys.readouterr().out
    medians: dict[int, list[float]] = {2**26: [], 2**10: []}
    for machine in MACHINES:
        for table in machine.predict:
            with (tmp_path / machine.name / table.name / "points.csv").open() as handle:
                rows = list(csv.DictReader(handle))
            key = f"| {machine.name} | {machine.fit_on.name} | {table.name} |"
            row = next(line for line in out.splitlines() if line.startswith(key))
            cells = row.split(" | ")
            for smallest, column in ((2**26, 3), (2**10, 5)):
                # busbw error = measured time / simulated time - 1
                errors = [abs(float(r["measured_s"]) / float(r["simulated_s"]) - 1) for r in rows
                          if int(r["size_bytes"]) >= smallest]  # fmt: skip
                if not errors:
                    assert cells[column] == "-"
                    continue
                median = statistics.median(errors)
                medians[smallest].append(median)
                assert cells[column] == f"{100 * median:.1f} %"
    summary = next(line for line in out.splitlines() if line.startswith("Median of the per"))
    assert summary == (
        "Median of the per-table medians of |busbw error|: "
        f"from 64 MiB: {100 * statistics.median(medians[2**26]):.1f} % over "
        f"{len(medians[2**26])} tables, "
        f"from 1 KiB: {100 * statistics.median(medians[2**10]):.1f} % over "
        f"{len(medians[2**10])} tables."
    )
    report = (tmp_path / "report.md").read_text()
    assert summary in report
    # cross-cluster: exactly qoofyk's multi-server tables (the fit is gj-aion's), with the
    # medians of their rows above
    cross = out.split("Cross-cluster", 1)[1].split("Node scaling", 1)[0]
    rows = [line.split(" | ") for line in cross.splitlines() if line.startswith("| h100 |")]
    qoofyk = ["nccl_allreduce_2x8xH100_ndr_nccltests309_qoofyk",
              "nccl_allreduce_4x8xH100_ndr_vm_nccltests309_qoofyk"]  # fmt: skip
    assert [r[2] for r in rows] == qoofyk
    fit = "nccl_allreduce_2x8xH100_ndr_ring_mincta24_nccltests309_gjaion"
    for r in rows:
        key = f"| h100 | {fit} | {r[2]} |"
        main_row = next(line for line in out.splitlines() if line.startswith(key)).split(" | ")
        assert (r[4], r[5].rstrip(" |")) == (main_row[3], main_row[5])
    scaling = out.split("Node scaling", 1)[1]
    assert [
        line.split(" | ")[1:3] for line in scaling.splitlines() if line.startswith("| gjaion")
    ] == [
        ["2", "nccl_allreduce_2x8xH100_ndr_nccltests309_gjaion"],
        ["4", "nccl_allreduce_4x8xH100_ndr_nccltests309_gjaion"],
        ["8", "nccl_allreduce_8x8xH100_ndr_nccltests309_gjaion"],
    ]
