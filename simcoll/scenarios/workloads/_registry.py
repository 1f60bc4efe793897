"""The workloads by name, and :func:`run_workload`, which checks parameter names.

>>> sorted(WORKLOADS)
['collective', 'concurrent', 'ddp', 'fsdp', 'moe', 'p2p', 'pipeline', 'tensor_parallel_mlp', \
'training_step']
>>> workload_params("p2p")
['src_rank', 'dst_ranks', 'size_bytes', 'n_copies']
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, Literal

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.prediction.call import DEFAULTS
from simcoll.scenarios.workloads._base import WorkloadResult
from simcoll.scenarios.workloads.collective import collective
from simcoll.scenarios.workloads.concurrent import concurrent
from simcoll.scenarios.workloads.ddp import ddp
from simcoll.scenarios.workloads.fsdp import fsdp
from simcoll.scenarios.workloads.moe import moe
from simcoll.scenarios.workloads.p2p import p2p
from simcoll.scenarios.workloads.pipeline import pipeline
from simcoll.scenarios.workloads.tensor_parallel import tensor_parallel_mlp
from simcoll.scenarios.workloads.training_step import training_step
from simcoll.topology.calibration import Calibration

__all__ = [
    "COMMON_METRICS",
    "WORKLOADS",
    "WORKLOAD_METRICS",
    "is_metric",
    "run_workload",
    "workload_params",
]

WORKLOADS: dict[str, Callable[..., WorkloadResult]] = {
    "collective": collective,
    "ddp": ddp,
    "tensor_parallel_mlp": tensor_parallel_mlp,
    "fsdp": fsdp,
    "moe": moe,
    "pipeline": pipeline,
    "concurrent": concurrent,
    "p2p": p2p,
    "training_step": training_step,
}
"""Workload functions by the name a scenario's ``workload.kind`` gives."""

_ENGINE_PARAMS = ("model", "protocol", "calibration")

#: The metrics every workload reports (:func:`~simcoll.scenarios.workloads._base.comm_metrics`).
COMMON_METRICS = ("time_s", "compute_s", "comm_s", "exposed_comm_s", "hidden_comm_s")
#: Each workload's own metrics, as regular expressions (``\\d+`` for a rank or group), so
#: that a scenario's ``[output]`` columns can be checked before any point runs;
#: ``tests/scenarios/workloads/test_metrics.py`` holds them to what the workloads return.
WORKLOAD_METRICS: dict[str, tuple[str, ...]] = {
    "collective": ("iteration_time_s", "algbw_bytes_per_s", "busbw_bytes_per_s"),
    "ddp": ("n_layers", "n_buckets", "first_bucket_bytes", "bucket_bytes", "grad_bytes",
            "allreduce_s", "no_overlap_time_s"),
    "tensor_parallel_mlp": ("tp_degree", "n_groups", "allreduce_bytes", "gemm_flops_per_layer",
                            "gemm_forward_s_per_layer"),
    "fsdp": ("n_layers", "prefetch", "allgather_bytes", "reducescatter_bytes"),
    "moe": ("ep_degree", "n_groups", "alltoall_bytes"),
    "pipeline": ("n_stages", "n_microbatches", "bubble_fraction", "ideal_bubble_fraction"),
    "concurrent": ("n_groups", "max_slowdown", r"time_s_group_\d+", r"alone_time_s_group_\d+",
                   r"slowdown_group_\d+"),
    "p2p": ("bandwidth_bytes_per_s", r"time_s_to_\d+", r"bandwidth_bytes_per_s_to_\d+"),
    "training_step": ("tokens_per_s", "mfu", "model_flops_per_step", "recomputed_fraction",
                      "n_gpus", "tp", "pp", "dp",
                      "ep", "cp", "n_microbatches", "params", r"memory_\w+_bytes",
                      "memory_stage", "fits_in_memory", r"exposed_(tp|ep|cp|pp|dp)_s",
                      "idle_s"),
}  # fmt: skip


def is_metric(kind: str, name: str) -> bool:
    """Whether workload ``kind`` reports a metric called ``name``.

    >>> is_metric("p2p", "time_s_to_4"), is_metric("p2p", "n_buckets")
    (True, False)
    """
    patterns = (*COMMON_METRICS, *WORKLOAD_METRICS.get(kind, ()))
    return any(re.fullmatch(pattern, name) for pattern in patterns)


def _workload(name: str) -> Callable[..., WorkloadResult]:
    fn = WORKLOADS.get(name)
    if fn is None:
        raise ConfigError(f"unknown workload {name!r}; valid: {', '.join(sorted(WORKLOADS))}")
    return fn


def workload_params(name: str) -> list[str]:
    """The parameters of a workload (beyond the engine's), in signature order."""
    params = inspect.signature(_workload(name)).parameters.values()
    return [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name not in _ENGINE_PARAMS]


def run_workload(
    name: str,
    topology: nx.DiGraph[str],
    *,
    model: str = DEFAULTS.model,
    protocol: str | None = DEFAULTS.protocol,
    calibration: Calibration | Literal["default"] | None = "default",
    **params: Any,
) -> WorkloadResult:
    """Run the workload called ``name`` on ``topology`` with ``params``.

    Raises
    ------
    ConfigError
        If the workload is unknown, a parameter is not one it takes (the message lists
        those it takes), or a value is wrong (the message names the parameter).

    >>> from simcoll.topology import ring
    >>> run_workload("ddp", ring(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0),
    ...              bucket_size=1)
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: ddp has no parameter 'bucket_size'; valid: \
layer_params_bytes, n_layers, params_bytes, forward_s_per_layer, backward_s_per_layer, \
bucket_bytes, first_bucket_bytes, optimizer_s, n_ranks, algorithm
    """
    valid = workload_params(name)
    for key in params:
        if key not in valid:
            raise ConfigError(f"{name} has no parameter {key!r}; valid: {', '.join(valid)}")
    fn = WORKLOADS[name]
    return fn(topology, model=model, protocol=protocol, calibration=calibration, **params)
