"""Issue 43's bar for the SMs that drive the network: gj-aion's 8 x 8 H100 all-reduce with
NCCL's default 16 NVLS CTAs and with ``NCCL_MIN_CTAS=24`` (NVIDIA/nccl-tests#309; the
second run also set ``NCCL_IB_QPS_PER_CONNECTION=2``, which simcoll has no knob for) come
out in the measured order and each within 10 % of its table, with one parameter set: the
shipped ``h100-ib-fat-tree`` file and its calibration, none of it fitted on these tables.
Measured, the default plateaus at about 320 GB/s busbw and 24 CTAs at about 390, over the
same wires. The sizes are the plateau's (2, 4 and 8 GiB), where the CTAs bound the call.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from simcoll.cli import main

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "validation" / "data" / "public"
GiB = 2**30
TABLES = {
    (): "nccl_allreduce_8x8xH100_ndr_nccltests309_gjaion",
    ("--nccl", "NCCL_MIN_CTAS=24"): "nccl_allreduce_8x8xH100_ndr_mincta24_qps2_nccltests309_gjaion",
}


def _times_s(tmp_path: Path, nccl: tuple[str, ...], table: str) -> dict[int, tuple[float, float]]:
    """Per size, the (measured, simulated) seconds of the table's 2, 4 and 8 GiB rows."""
    out = tmp_path / table
    assert main(["compare", str(DATA / f"{table}.csv"), "--topology",
                 str(REPO / "topologies/h100-ib-fat-tree.toml"), "--set", "n_nodes=8",
                 "--collective", "allreduce", "--ranks", "64", "--min-size", "2G",
                 *nccl, "--out", str(out)]) == 0  # fmt: skip
    with (out / "points.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if int(r["size_bytes"]) >= 2 * GiB]
    times = {int(r["size_bytes"]): (float(r["measured_s"]), float(r["simulated_s"])) for r in rows}
    assert sorted(times) == [2 * GiB, 4 * GiB, 8 * GiB]
    return times


def test_more_ctas_are_faster_and_each_run_is_within_10_percent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    default, more = (_times_s(tmp_path, nccl, table) for nccl, table in TABLES.items())
    capsys.readouterr()
    for times in (default, more):
        for measured_s, simulated_s in times.values():  # busbw error: measured/simulated - 1
            assert abs(measured_s / simulated_s - 1) <= 0.10, (measured_s, simulated_s)
    for size in default:  # the measured order, size by size: 24 CTAs take less than 16
        assert more[size][0] < default[size][0]
        assert more[size][1] < default[size][1]
