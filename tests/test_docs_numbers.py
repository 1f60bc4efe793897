"""Numbers quoted in the docs come from their commands: each test reruns the command a
document names beside a number and fails if the number it prints is no longer there.

(The README's Python examples are doctests, ``tests/test_readme.py``; the numbers of
``simcoll bench`` and other timings are measured, not checked here.)"""

from __future__ import annotations

from pathlib import Path

from simcoll import load_topology
from simcoll.scenarios.workloads import run_workload

REPO = Path(__file__).resolve().parents[1]


def test_the_readme_ddp_step_on_128_gpus() -> None:
    # README, "Status": run_workload("ddp", ... n_nodes "16" ..., bucket_bytes=25*2**20)
    readme = " ".join((REPO / "README.md").read_text().split())
    graph = load_topology(REPO / "topologies/h100-ib-fat-tree.toml", overrides={"n_nodes": "16"})
    m = run_workload("ddp", graph, bucket_bytes=25 * 2**20).metrics
    quoted = f"step {m['time_s'] * 1e3:.2f} ms, all-reduces {m['allreduce_s'] * 1e3:.2f} ms in all"
    assert quoted in readme
