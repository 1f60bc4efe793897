"""The declared metrics of every workload (``WORKLOAD_METRICS``, against which a scenario's
``[output]`` columns are checked before a sweep) are exactly what the workloads return."""

from __future__ import annotations

import re
from typing import Any

import pytest

from simcoll.scenarios.workloads import WORKLOADS, run_workload
from simcoll.scenarios.workloads._registry import COMMON_METRICS, WORKLOAD_METRICS
from simcoll.topology import switch_star
from simcoll.topology.gpu_spec import GpuSpec

STAR = switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
STAR.graph["gpu"] = GpuSpec("test GPU", {"bf16": 100e12}, 80 * 10**9)  # a training step's
#: Small parameters: every workload runs in milliseconds.
SMALL: dict[str, dict[str, Any]] = {
    "collective": {"size_bytes": 4096},
    "ddp": {"layer_params_bytes": [4096, 4096]},
    "tensor_parallel_mlp": {"batch_tokens": 4, "hidden_size": 8},
    "fsdp": {"layer_params_bytes": [4096, 4096]},
    "moe": {"tokens_per_rank": 4, "hidden_size": 8},
    "pipeline": {"n_microbatches": 2, "activation_bytes": 4096},
    "concurrent": {"size_bytes": 4096},
    "p2p": {"dst_ranks": [1, 2], "size_bytes": 4096, "n_copies": 1},
    "training_step": {
        "transformer": "llama3-8b",
        "seq_length": 256,
        "global_batch_size": 4,
        "tp": 2,
        "pp": 2,
    },
}


def test_every_workload_declares_its_metrics() -> None:
    assert set(WORKLOAD_METRICS) == set(WORKLOADS) == set(SMALL)


@pytest.mark.parametrize("kind", sorted(WORKLOADS))
def test_declared_metrics_are_what_the_workload_returns(kind: str) -> None:
    metrics = run_workload(kind, STAR, **SMALL[kind]).metrics
    patterns = (*COMMON_METRICS, *WORKLOAD_METRICS[kind])
    undeclared = [m for m in metrics if not any(re.fullmatch(p, m) for p in patterns)]
    missing = [p for p in patterns if not any(re.fullmatch(p, m) for m in metrics)]
    assert (undeclared, missing) == ([], [])
