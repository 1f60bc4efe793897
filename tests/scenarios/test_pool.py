"""Worker processes of a sweep: a worker killed mid-point fails that point only, and killing
the sweep leaves no worker behind (issue 17, item 12)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simcoll.scenarios import sweep
from simcoll.scenarios.pool import WORKER_DIED
from simcoll.scenarios.scenario import load_scenario

STAR = """\
schema = 1
builder = "switch_star"
[params]
n_gpus = 4
link_bandwidth = "10 GB/s"
link_latency = "1 us"
"""
#: A stand-in for evaluate_point that is killed (as the out-of-memory killer would kill it)
#: on one point. It is a module of its own, so that spawned workers can import it.
KILLER = """
import os, signal
from simcoll.scenarios.points import evaluate_point

def evaluate(scenario, point, *, timeline=False):
    if point.values.get("size_bytes") == 8192:
        os.kill(os.getpid(), signal.SIGKILL)
    return evaluate_point(scenario, point, timeline=timeline)
"""


def write_scenario(folder: Path, sizes: str, algorithm: str = "ring", n_gpus: int = 4) -> Path:
    (folder / "star.toml").write_text(STAR.replace("n_gpus = 4", f"n_gpus = {n_gpus}"))
    path = folder / "s.toml"
    path.write_text(
        'schema = 1\n[topology]\nfile = "star.toml"\n[workload]\ncollective = "allgather"\n'
        f'algorithm = "{algorithm}"\nprotocol = "none"\n[sweep]\nsize_bytes = {sizes}\n'
    )
    return path


def test_a_worker_killed_mid_point_fails_that_point_and_the_rest_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # it aborted the run with a BrokenProcessPool traceback
    (tmp_path / "killer_module.py").write_text(KILLER)
    monkeypatch.syspath_prepend(str(tmp_path))
    import killer_module  # noqa: PLC0415 - written above  # type: ignore[import-not-found]

    monkeypatch.setattr(sweep, "evaluate_point", killer_module.evaluate)
    path = write_scenario(tmp_path, "[4096, 8192, 16384, 32768, 65536]")
    result = sweep.run_sweep(load_scenario(path), tmp_path / "out", workers=2)
    by_size = {p.point.values["size_bytes"]: p for p in result.points}
    assert sorted(by_size) == [4096, 8192, 16384, 32768, 65536]
    assert by_size[8192].error == WORKER_DIED
    assert [s for s, p in by_size.items() if p.ok] == [4096, 16384, 32768, 65536]
    # ring all-gather on a star of 4: 3 steps of 2 x 1 us + S/4 over one 10 GB/s link
    for size in (4096, 16384, 32768, 65536):
        time_s = by_size[size].rows[0]["time_s"]
        assert time_s == pytest.approx(3 * (2e-6 + size / 4 / 10e9), rel=1e-9)


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text()
        found |= {int(c) for c in text.split()}
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_kill_9_of_the_sweep_leaves_no_worker_alive(tmp_path: Path) -> None:
    # kill -9 of `simcoll run` left its spawn workers running
    # 40 points of about 0.4 s each: all-pairs all-gather over 64 GPUs
    sizes = "[" + ", ".join(str(2**20 + 4096 * k) for k in range(40)) + "]"
    path = write_scenario(tmp_path, sizes, algorithm="direct", n_gpus=64)
    code = "import sys; from simcoll.cli import main; sys.exit(main())"
    run = subprocess.Popen(
        [sys.executable, "-c", code, "run", str(path), "--out", str(tmp_path / "o"),
         "--workers", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    workers: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until both workers are computing points
        workers = {c for c in _children(run.pid) if "spawn_main" in _cmdline(c)}
        if len(workers) == 2 and (tmp_path / "o" / "results.jsonl").exists():
            break
        time.sleep(0.2)
    assert len(workers) == 2
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.2)
    left = [w for w in workers if _alive(w)]
    for pid in left:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert left == []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""
