"""`simcoll plan show` and predict's --plan, --placement and --nccl, end to end."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from simcoll.cli import main

REPO = Path(__file__).resolve().parents[2]
H100 = REPO / "topologies" / "h100-ib-fat-tree.toml"
DGX1 = REPO / "topologies" / "dgx1-v100.toml"
DGX_A100 = REPO / "topologies" / "dgx-a100.toml"


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def _busbw(out: str) -> float:
    (row,) = list(csv.DictReader(io.StringIO(out)))
    return float(row["busbw_bytes_per_s"])


def test_plan_show_prints_nccl_lines_and_even_nics(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(capsys, "plan", "show", H100, "--set", "n_nodes=2")
    assert status == 0, err
    lines = out.splitlines()
    channels = [line for line in lines if line.startswith("NCCL INFO Channel ") and " : " in line
                and "[send]" not in line and "[receive]" not in line]  # fmt: skip
    assert len(channels) == 16
    assert channels[0].endswith(" 0   7   6   5   4   3   2   1   8  15  14  13  12  11  10   9")
    assert "# 16 NICs carry the channels evenly" in lines
    assert any(line.startswith("NCCL INFO Trees [0] ") for line in lines)


def test_a_plan_read_back_from_its_log_predicts_the_same(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, log, err = _run(capsys, "plan", "show", H100, "--set", "n_nodes=2")
    assert status == 0, err
    path = tmp_path / "nccl.log"
    path.write_text(log)
    common = ["predict", H100, "--set", "n_nodes=2", "--collective", "allreduce", "--sizes",
              "256M", "--algorithm", "ring", "--protocol", "simple", "--format", "csv"]  # fmt: skip
    status, searched, err = _run(capsys, *common)
    assert status == 0, err
    status, from_log, err = _run(capsys, *common, "--plan", path)
    assert status == 0, err
    assert _busbw(from_log) == pytest.approx(_busbw(searched), rel=1e-9)
    status, rank, err = _run(capsys, *common, "--plan", "rank")
    assert status == 0, err
    # One NIC per server in rank order against eight: at least 4x slower on the network.
    assert _busbw(searched) > 4 * _busbw(rank)


def test_knobs_and_placement_reach_the_rows(capsys: pytest.CaptureFixture[str]) -> None:
    common = ["predict", DGX_A100, "--collective", "allreduce", "--sizes", "64M",
              "--algorithm", "ring", "--protocol", "simple", "--format", "csv"]  # fmt: skip
    status, out, err = _run(capsys, *common, "--nccl", "NCCL_MAX_NCHANNELS=2",
                            "--placement", "random:3")  # fmt: skip
    assert status == 0, err
    (row,) = list(csv.DictReader(io.StringIO(out)))
    assert (row["n_channels"], row["placement"], row["plan"]) == ("2", "random:3", "nccl")
    status, full, err = _run(capsys, *common)
    assert status == 0, err
    (row,) = list(csv.DictReader(io.StringIO(full)))
    assert (row["n_channels"], row["placement"]) == ("24", "linear")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nccl", "NCCL_ALGO=fast"], "simcoll: error: --nccl NCCL_ALGO: expected one of"),
        (["--placement", "/no/such/file"], "simcoll: error: /no/such/file: no such file"),
        (["--plan", "/no/such/log"], "simcoll: error: /no/such/log: no such file"),
    ],
)
def test_bad_plan_options_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    status, out, err = _run(capsys, "predict", DGX1, "--collective", "allreduce", "--sizes",
                            "1M", *argv)  # fmt: skip
    assert status == 2
    assert out == ""
    assert err.startswith(message)
    assert err.count("\n") == 1


def test_a_log_of_another_rank_count_is_refused_not_substituted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Issue 29: a 16-rank log on --set n_nodes=3 printed "# 24 ranks" and the 16-rank
    # result; --ranks 8 with a 4-rank log simulated 4 ranks.
    status, log, err = _run(capsys, "plan", "show", H100, "--set", "n_nodes=2")
    assert status == 0, err
    path = tmp_path / "16.log"
    path.write_text(log)
    for argv, ran in ((["--set", "n_nodes=3"], 24), (["--set", "n_nodes=2", "--ranks", "8"], 8)):
        status, out, err = _run(capsys, "predict", H100, *argv, "--plan", path, "--collective",
                                "allreduce", "--sizes", "1G")  # fmt: skip
        assert (status, out) == (2, "")
        assert err == (f"simcoll: error: {path}: the log's communicator has 16 ranks, this run "
                       f"{ran}: give --ranks 16, or a topology of that many GPUs\n")  # fmt: skip
    status, _, err = _run(capsys, "plan", "show", H100, "--set", "n_nodes=3", "--plan", path)
    assert status == 2
    assert "the log's communicator has 16 ranks, this run 24" in err


def test_plan_show_shows_the_rank_order_ring(capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 29: `plan show --plan rank` answered "rank: no such file".
    status, out, err = _run(capsys, "plan", "show", DGX_A100, "--plan", "rank")
    assert status == 0, err
    assert "# 8 ranks, placement linear, routing ecmp, plan rank order" in out
    assert "NCCL INFO Channel 00/01 :    0   1   2   3   4   5   6   7" in out.splitlines()
