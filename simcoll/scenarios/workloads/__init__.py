"""Workloads: training steps and traffic patterns that mix compute and communication.

Each workload is a function ``fn(topology, *, model="flow", protocol=None,
calibration=None, **params) -> WorkloadResult`` that runs one
:class:`~simcoll.prediction.session.Session` and returns its timeline and a flat dict of metrics
(every key names its unit; see :class:`WorkloadResult`). :data:`WORKLOADS` holds them by
name and :func:`run_workload` runs one by name, which is what scenario files do.

=======================  ===================================================
name                     what runs
=======================  ===================================================
``collective``           one collective call (or several back to back)
``ddp``                  a DDP step: backward overlapped with bucketed all-reduces
``tensor_parallel_mlp``  Megatron MLP blocks: GEMMs, then an all-reduce, per pass
``fsdp``                 an FSDP/ZeRO-3 step: all-gathers, reduce-scatters, prefetch
``moe``                  MoE layers: all-to-all, experts, all-to-all
``pipeline``             a GPipe or 1F1B step: stages passing copies
``concurrent``           several groups' collectives at once, and each alone
``p2p``                  copies from one GPU to several at once
``training_step``        a transformer's step under TP, PP, DP/FSDP, EP and CP
=======================  ===================================================
"""

from __future__ import annotations

from simcoll.scenarios.workloads._base import WorkloadResult
from simcoll.scenarios.workloads._registry import (
    WORKLOADS,
    is_metric,
    run_workload,
    workload_params,
)

__all__ = ["WORKLOADS", "WorkloadResult", "is_metric", "run_workload", "workload_params"]
