"""The shipped DGX A100 defaults against public nccl-tests runs they were not fitted on.

`topologies/calibration/dgx-a100.params.toml` is fitted on the all-reduce alone; the
all-gather and the reduce-scatter are predictions. The bars are issue 18's: a median busbw
error of at most 5 % from 64 MiB and 15 % from 1 KiB. The measured numbers are SuperBench's
captured run (`validation/data/public/README.md`), not simcoll output.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from simcoll.cli import main
from simcoll.prediction import predict
from simcoll.topology import load

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "validation" / "data" / "public"
MiB = 2**20


def _busbw_errors(tmp_path: Path, collective: str, *flags: str) -> dict[int, float]:
    """|busbw error| per size of ``simcoll compare`` on the shipped DGX A100 file."""
    out = tmp_path / "cmp"
    measured = DATA / f"nccl_{collective}_8xA100_nvswitch_superbench.csv"
    assert main(["compare", str(measured), "--topology", str(REPO / "topologies/dgx-a100.toml"),
                 "--algorithm", "ring", "--out", str(out), *flags]) == 0  # fmt: skip
    with (out / "points.csv").open(newline="") as f:
        return {int(row["size_bytes"]): abs(float(row["busbw_error"])) for row in csv.DictReader(f)}


@pytest.mark.parametrize(
    ("collective", "flags"),
    [("allgather", ()), ("allgather", ("--in-place",)), ("reducescatter", ())],
    ids=["allgather", "allgather-in-place", "reducescatter"],
)
def test_collectives_never_fitted_on_are_within_issue_18s_bars(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], collective: str, flags: tuple[str, ...]
) -> None:
    errors = _busbw_errors(tmp_path, collective, *flags)
    capsys.readouterr()
    large = [e for size, e in errors.items() if size >= 64 * MiB]
    from_1k = [e for size, e in errors.items() if size >= 1024]
    assert len(large) == 8
    assert len(from_1k) == 24
    assert statistics.median(large) <= 0.05
    assert statistics.median(from_1k) <= 0.15


def test_the_out_of_place_copy_is_what_nccl_tests_measures_between_its_halves() -> None:
    """simcoll's out-of-place all-gather minus its in-place one is the copy of S / 8, read
    and written at the A100 40 GB's 1,555 GB/s of HBM2; measured from 256 MiB to 8 GiB, the
    gap between nccl-tests' two halves is within 45 % of it (23 % under at 256 MiB, 41 %
    over at 8 GiB)."""
    with (DATA / "nccl_allgather_8xA100_nvswitch_superbench.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if int(r["size_bytes"]) >= 256 * MiB]
    assert len(rows) == 6
    sizes = [int(r["size_bytes"]) for r in rows]
    topology = load(REPO / "topologies" / "dgx-a100.toml")
    out_of_place, in_place = (
        predict(topology, "allgather", sizes, algorithm="ring", in_place=p).rows for p in (0, 1)
    )
    for row, oop, ip in zip(rows, out_of_place, in_place, strict=True):
        simulated_gap_s = oop.time_s - ip.time_s
        assert simulated_gap_s == pytest.approx(2 * oop.size_bytes / 8 / 1555e9, rel=1e-9)
        measured_gap_s = (float(row["time_us_oop"]) - float(row["time_us_ip"])) * 1e-6
        assert simulated_gap_s / measured_gap_s - 1 == pytest.approx(0, abs=0.45), oop.size_bytes
