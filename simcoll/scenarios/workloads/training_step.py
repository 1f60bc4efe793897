"""A transformer's training step under tensor, pipeline, data, expert and context parallelism.

The scenario face of :func:`simcoll.training.step.training_step`: ``transformer`` names a
model file (a shipped one by name, ``gpt3-175b``, ``llama3-70b``, ``mixtral-8x7b``... or a
path), whose ``[training]`` and ``[parallelism]`` tables give the defaults; every other
parameter replaces one of them, so that a scenario can sweep ``tp``, ``pp``, ``recompute``
or ``global_batch_size`` as axes. ``efficiency`` is a table of op-class efficiencies
(:class:`~simcoll.training.compute.Efficiency`). Compute times come from the topology
file's ``[gpu]`` table.

Metrics, besides the common ones (of the critical rank): ``tokens_per_s``, ``mfu``, the
breakdown of rank 0 (the first GPU of the first stage) ``exposed_tp_s`` ...
``exposed_dp_s`` and ``idle_s``, memory per GPU (``memory_total_bytes`` and its parts,
``fits_in_memory``), and the layout (``tp``, ``pp``, ``dp``, ``ep``, ``cp``, ``n_microbatches``).

>>> from simcoll.topology import load
>>> r = training_step(load("dgx-h100"), transformer="llama3-8b", tp=8, global_batch_size=8,
...                   seq_length=2048, data_parallel="ddp")
>>> r.metrics["n_microbatches"], r.metrics["dp"], 0.3 < r.metrics["mfu"] < 0.7
(8, 1, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.core.shipped import find
from simcoll.prediction.call import DEFAULTS
from simcoll.scenarios.workloads._base import WorkloadResult, comm_metrics
from simcoll.topology.calibration import Calibration
from simcoll.training.compute import Efficiency
from simcoll.training.spec import read_model_file, record_from
from simcoll.training.step import training_step as simulate_step

__all__ = ["PARALLELISM_KEYS", "TRAINING_KEYS", "training_step"]

TRAINING_KEYS = ("seq_length", "micro_batch_size", "global_batch_size", "precision", "recompute")
PARALLELISM_KEYS = ("tp", "pp", "dp", "ep", "cp", "sequence_parallel", "virtual_stages",
                    "data_parallel", "bucket_bytes", "overlap_grad_reduce", "order")  # fmt: skip


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
    tp: int | None = None,
    pp: int | None = None,
    dp: int | None = None,
    ep: int | None = None,
    cp: int | None = None,
    sequence_parallel: bool | None = None,
    virtual_stages: int | None = None,
    data_parallel: str | None = None,
    bucket_bytes: int | str | None = None,
    overlap_grad_reduce: bool | None = None,
    order: str | None = None,
    efficiency: Mapping[str, float] | None = None,
    memory_check: str = "flag",
    algorithm: str | None = None,
) -> WorkloadResult:
    """Simulate one training step (see the module docstring)."""
    if not isinstance(transformer, str):
        raise ConfigError(f"training_step: transformer must name a model file, got "
                          f"{transformer!r}")  # fmt: skip
    path = find(transformer, "models")
    m, training_table, parallel_table = read_model_file(path)
    given = dict(locals())
    training = {**training_table, **{k: given[k] for k in TRAINING_KEYS if given[k] is not None}}
    parallel = {**parallel_table,
                **{k: given[k] for k in PARALLELISM_KEYS if given[k] is not None}}  # fmt: skip
    if memory_check not in ("flag", "refuse"):
        raise ConfigError(f"training_step: memory_check must be 'flag' or 'refuse', got "
                          f"{memory_check!r}")  # fmt: skip
    t = record_from("training", training, str(path))
    p = record_from("parallelism", parallel, str(path))
    result = simulate_step(
        topology,
        m,
        t,
        p,
        efficiency=Efficiency.of(efficiency),
        algorithm=algorithm,
        protocol=protocol,
        calibration=calibration,
        fidelity=model,
        memory_check="refuse" if memory_check == "refuse" else "flag",
    )
    ranks = range(result.timeline.n_ranks)
    metrics: dict[str, Any] = {**comm_metrics(result.timeline, ranks), **result.metrics}
    return WorkloadResult("training_step", result.timeline, metrics)
