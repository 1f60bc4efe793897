"""One-line errors that used to name the wrong thing, or nothing (issue 17, item 19)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.cli import main

REPO = Path(__file__).resolve().parents[2]
DGX = str(REPO / "topologies" / "dgx-a100.toml")


def test_model_nccl_refuses_chunks_and_window(capsys: pytest.CaptureFixture[str]) -> None:
    # --model nccl silently ignored --chunks and --window
    cases = [
        (["--chunks", "4"], "--chunks", "does"),
        (["--chunks", "4", "--window", "2"], "--chunks and --window", "do"),
    ]
    for flags, names, verb in cases:
        argv = ["predict", DGX, "--collective", "allreduce", "--model", "nccl", *flags]
        assert main(argv) == 2
        assert capsys.readouterr().err == (
            f"simcoll: error: {names} {verb} not apply to --model nccl: NCCL's tuning model "
            "costs channels, not pieces or a window; drop it or use --model flow\n"
        )
    assert main(["predict", DGX, "--collective", "allreduce", "--model", "nccl", "--sizes",
                 "1M", "--channels", "4"]) == 0  # fmt: skip


def test_a_scenario_with_n_ranks_0_does_not_name_a_cli_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the point's error named --ranks, a flag of another command
    path = tmp_path / "s.toml"
    path.write_text(
        f'schema = 1\n[topology]\nfile = "{DGX}"\n[workload]\ncollective = "allreduce"\n'
        'size_bytes = "1 MiB"\n[sweep]\nn_ranks = [0, 2]\nn_channels = [-1, 1]\n'
    )
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert "(n_ranks=0, n_channels=-1) failed: n_ranks: must be at least 1, got 0\n" in out
    assert "(n_ranks=0, n_channels=1) failed: n_ranks: must be at least 1, got 0\n" in out
    assert "(n_ranks=2, n_channels=-1) failed: n_channels: must be at least 1, got -1\n" in out
    assert "--ranks" not in out
    assert "pieces_per_block" not in out
