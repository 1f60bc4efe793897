"""A transformer's training step under tensor, pipeline, data, expert and context parallelism.

The scenario face of :func:`simcoll.training.step.training_step`: ``transformer`` names a
model file (a shipped one by name, ``gpt3-175b``, ``llama3-70b``, ``mixtral-8x7b``... or a
path), whose ``[training]`` and ``[parallelism]`` tables give the defaults; every other
parameter replaces one of them, so that a scenario can sweep ``tp``, ``pp``, ``recompute``
or ``global_batch_size`` as axes. With ``data_parallel = "fsdp"``, the ``fsdp_*`` keys
are PyTorch FSDP's options (:class:`~simcoll.training.spec.Parallelism`): the blocks per
unit, the sharding strategy (``full_shard``, ``shard_grad_op``, ``hybrid_shard`` with
``fsdp_shard_size``, ``no_shard``), prefetching, ``no_sync`` gradient accumulation and the
reduce dtype. ``gemm_efficiency`` ... ``memory_efficiency`` replace
the roofline op classes' efficiencies, ``kernels_efficiency`` the fraction of the measured
kernels' throughput reached (:class:`~simcoll.training.compute.Efficiency`);
``attention_kernel`` picks the fused attention (``flash2``, ``cudnn``, ``flash3``,
``triton``);
``recompute_early_stop`` makes ``recompute = "full"`` PyTorch's checkpoint, which does
not re-run a layer's last GEMM (:class:`~simcoll.training.spec.Training`). An
error in a value the scenario gives names its ``workload`` key; one in the model file, the
file. Compute times come from the topology file's ``[gpu]`` table: each kernel from its
shape, on the GPU's measured tables where it has them.

Metrics, besides the common ones (of the critical rank): ``tokens_per_s``, ``mfu``,
``recomputed_fraction`` (of a layer's forward FLOPs, run again in its backward), the
breakdown of rank 0 (the first GPU of the first stage) ``exposed_tp_s`` ...
``exposed_dp_s`` and ``idle_s``, memory per GPU (``memory_total_bytes`` and its parts,
FSDP's gathered parameters and unsharded gradients among them, ``fits_in_memory``), and
the layout (``tp``, ``pp``, ``dp``, ``ep``, ``cp``, ``n_microbatches``).

>>> from simcoll.topology import load
>>> r = training_step(load("dgx-h100"), transformer="llama3-8b", tp=8, global_batch_size=8,
...                   seq_length=2048, data_parallel="ddp")
>>> r.metrics["n_microbatches"], r.metrics["dp"], 0.2 < r.metrics["mfu"] < 0.5
(8, 1, True)
"""

from __future__ import annotations

from typing import Any, Literal

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.core.shipped import find, shipped_names
from simcoll.prediction.call import DEFAULTS
from simcoll.scenarios.workloads._base import WorkloadResult, comm_metrics
from simcoll.topology.calibration import Calibration
from simcoll.training.compute import Efficiency
from simcoll.training.spec import Transformer, read_model_file, record_from
from simcoll.training.step import training_step as simulate_step

__all__ = ["EFFICIENCY_KEYS", "PARALLELISM_KEYS", "TRAINING_KEYS", "training_step"]

TRAINING_KEYS = ("seq_length", "micro_batch_size", "global_batch_size", "precision", "recompute",
                 "recompute_early_stop", "flash_attention", "attention_kernel")  # fmt: skip
PARALLELISM_KEYS = ("tp", "pp", "dp", "ep", "cp", "sequence_parallel", "tp_comm_overlap",
                    "tp_comm_overlap_impl", "sequence_parallel_dim", "tp_fp8_all_gather",
                    "virtual_stages",
                    "first_stage_layers", "last_stage_layers", "data_parallel",
                    "bucket_bytes", "overlap_grad_reduce", "order",
                    "fsdp_layers_per_unit", "fsdp_sharding", "fsdp_shard_size",
                    "fsdp_forward_prefetch", "fsdp_backward_prefetch", "fsdp_limit_all_gathers",
                    "fsdp_no_sync", "fsdp_reduce_dtype")  # fmt: skip
EFFICIENCY_KEYS = ("gemm_efficiency", "attention_efficiency", "elementwise_efficiency",
                   "optimizer_efficiency", "memory_efficiency", "kernels_efficiency")  # fmt: skip


def _model(transformer: object) -> tuple[Transformer, dict[str, Any], dict[str, Any]]:
    """The model file ``transformer`` names (a shipped name or a path) and its defaults."""
    if not isinstance(transformer, str):
        raise ConfigError(f"must name a model file, got {transformer!r}",
                          field="workload.transformer")  # fmt: skip
    path = find(transformer, "models")
    if not path.exists():  # a FIFO or a device exists: reading it refuses it in one line
        raise ConfigError(f"no model file {transformer!r}; shipped: "
                          f"{', '.join(shipped_names('models'))}",
                          field="workload.transformer")  # fmt: skip
    m, training, parallel = read_model_file(path)
    # the file's own values, checked (errors name the file)
    source = str(path)
    if "seq_length" in training:
        record_from("training", training, source)
    record_from("parallelism", parallel, source)
    return m, dict(training), dict(parallel)


def _with_overrides(
    kind: str, table: dict[str, Any], given: dict[str, Any], keys: tuple[str, ...]
) -> Any:
    """The file's table with the scenario's values over it, one at a time, so that an error
    names the ``workload`` key that caused it."""
    record = None
    for key in keys:
        if given[key] is not None:
            table[key] = given[key]
            if kind == "parallelism" or "seq_length" in table:
                record = record_from(kind, table, None, field=f"workload.{key}")
    return record if record is not None else record_from(kind, table, None, field="workload")


def training_step(
    topology: nx.DiGraph[str],
    *,
    model: str = DEFAULTS.model,
    protocol: str | None = DEFAULTS.protocol,
    calibration: Calibration | Literal["default"] | None = "default",
    transformer: str = "llama3-8b",
    seq_length: int | None = None,
    micro_batch_size: int | None = None,
    global_batch_size: int | None = None,
    precision: str | None = None,
    recompute: str | None = None,
    recompute_early_stop: bool | None = None,
    flash_attention: bool | None = None,
    attention_kernel: str | None = None,
    tp: int | None = None,
    pp: int | None = None,
    dp: int | None = None,
    ep: int | None = None,
    cp: int | None = None,
    sequence_parallel: bool | None = None,
    tp_comm_overlap: bool | None = None,
    tp_comm_overlap_impl: str | None = None,
    sequence_parallel_dim: int | None = None,
    tp_fp8_all_gather: bool | None = None,
    virtual_stages: int | None = None,
    first_stage_layers: int | None = None,
    last_stage_layers: int | None = None,
    data_parallel: str | None = None,
    bucket_bytes: int | str | None = None,
    overlap_grad_reduce: bool | None = None,
    order: str | None = None,
    fsdp_layers_per_unit: int | None = None,
    fsdp_sharding: str | None = None,
    fsdp_shard_size: int | None = None,
    fsdp_forward_prefetch: bool | None = None,
    fsdp_backward_prefetch: str | None = None,
    fsdp_limit_all_gathers: bool | None = None,
    fsdp_no_sync: bool | None = None,
    fsdp_reduce_dtype: str | None = None,
    gemm_efficiency: float | None = None,
    attention_efficiency: float | None = None,
    elementwise_efficiency: float | None = None,
    optimizer_efficiency: float | None = None,
    memory_efficiency: float | None = None,
    kernels_efficiency: float | None = None,
    memory_check: str = "flag",
    algorithm: str | None = None,
) -> WorkloadResult:
    """Simulate one training step (see the module docstring)."""
    given = dict(locals())
    m, training, parallel = _model(transformer)
    t = _with_overrides("training", training, given, TRAINING_KEYS)
    p = _with_overrides("parallelism", parallel, given, PARALLELISM_KEYS)
    if memory_check not in ("flag", "refuse"):
        raise ConfigError(f"must be 'flag' or 'refuse', got {memory_check!r}",
                          field="workload.memory_check")  # fmt: skip
    efficiency: dict[str, object] = {}
    for key in EFFICIENCY_KEYS:
        if given[key] is not None:
            efficiency[key.removesuffix("_efficiency")] = given[key]
            try:
                Efficiency.of(efficiency)
            except ConfigError:
                raise ConfigError(f"must be a number in (0, 1], got {given[key]!r}",
                                  field=f"workload.{key}") from None  # fmt: skip
    result = simulate_step(
        topology,
        m,
        t,
        p,
        efficiency=Efficiency.of(efficiency),  # checked above
        algorithm=algorithm,
        protocol=protocol,
        calibration=calibration,
        fidelity=model,
        memory_check="refuse" if memory_check == "refuse" else "flag",
    )
    ranks = range(result.timeline.n_ranks)
    metrics: dict[str, Any] = {**comm_metrics(result.timeline, ranks), **result.metrics}
    return WorkloadResult("training_step", result.timeline, metrics)
