"""The replay runner, for real: torch.distributed with gloo on local processes.

Skipped where torch is not installed (it is not a simcoll dependency; install it with
``pip install -e '.[validation]'``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simcoll.calibrate.read import read_measurements
from simcoll.core.collectives import Collective

pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[validation]')")

REPO = Path(__file__).resolve().parents[2]


def replay(*args: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "validation.replay", *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip


def test_all_nine_collectives_on_two_local_ranks(tmp_path):
    out = tmp_path / "run.csv"
    done = replay("--nprocs", "2", "--sizes", "4K,64K", "--warmup", "1", "--iters", "2",
                  "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = read_measurements(out)
    # every collective ran (each checked its result) at both sizes, out-of-place
    assert [(m.collective, m.size_bytes) for m in data.rows] == [
        (c.value, s) for c in Collective for s in (4096, 65536)
    ]
    assert all(m.n_ranks == 2 and m.time_s > 0 and not m.in_place for m in data.rows)
    counts = {m.collective: m.count for m in data.rows if m.size_bytes == 65536}
    assert counts["allreduce"] == 16384  # 64 KiB of float32
    assert counts["allgather"] == 8192  # per rank, as nccl-tests prints
    meta = json.loads(out.with_suffix(".json").read_text())
    for key in ("host", "cpu", "torch", "backend", "git_revision", "env", "warmup_iters"):
        assert key in meta
    assert meta["backend"] == "gloo"
    assert meta["timed_iters"] == 2


def test_rows_are_appended_to_an_existing_file(tmp_path):
    out = tmp_path / "run.csv"
    for sizes in ("4K", "8K"):
        done = replay("--nprocs", "2", "--collectives", "allreduce", "--sizes", sizes,
                      "--warmup", "1", "--iters", "1", "--out", str(out))  # fmt: skip
        assert done.returncode == 0, done.stderr
    assert [m.size_bytes for m in read_measurements(out).rows] == [4096, 8192]


def test_a_missing_peer_ends_in_a_one_line_error_not_a_hang(tmp_path):
    """World size 2 but only rank 0 starts: init times out and the run says so."""
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29593",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "validation.replay", "--collectives", "allreduce", "--sizes",
         "4K", "--timeout-s", "3", "--out", str(tmp_path / "x.csv")],
        cwd=REPO, capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("replay: rank 0: ")
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--collectives", "allreduce,fft"],
         "replay: unknown collective 'fft'; valid: allreduce, allgather, reducescatter, "
         "alltoall, broadcast, reduce, gather, scatter, sendrecv"),
        (["--iters", "0"], "replay: --warmup and --iters must be at least 1"),
        ([], "replay: RANK is not set; launch with torchrun or --nprocs N"),
    ],
)  # fmt: skip
def test_bad_arguments(tmp_path, args, message):
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "validation.replay", *args, "--out", str(tmp_path / "x.csv")],
        cwd=REPO, capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == message + "\n"
