"""Data-parallel training step with gradient buckets, as PyTorch DDP runs it.

Every rank computes the forward pass of all layers, then the backward pass layer by
layer from the last. Gradients go into buckets in that reverse order (PyTorch's
``compute_bucket_assignment_by_size``: a layer is added to the open bucket, which closes
once it holds at least its cap; the first bucket's cap is ``first_bucket_bytes``, 1 MiB
by default, the others ``bucket_bytes``, 25 MiB). A bucket's all-reduce is launched the
moment its last gradient is computed, on one communication stream, so all-reduces run in
bucket order and overlap the backward of the layers before them. The step ends when the
backward pass and the last all-reduce are done, plus ``optimizer_s``.

::

    compute  | fwd 0 | fwd 1 | bwd 1 | bwd 0 |
    comm                             | AR b0 | AR b1 |     (b0 = layer 1, b1 = layer 0)

>>> bucket_layers([4, 4, 4], first_bucket_bytes=1, bucket_bytes=6)
[[2], [1, 0]]
>>> from simcoll.topology import ring
>>> g = ring(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
>>> r = ddp(g, layer_params_bytes=[2_000_000, 2_000_000], forward_s_per_layer=1e-3, protocol=None,
...         backward_s_per_layer=2e-3, first_bucket_bytes=1, bucket_bytes=1)
>>> round(r.metrics["time_s"] * 1e3, 9), r.metrics["n_buckets"]  # 6 ms + AR of layer 0
(8.0, 2)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import networkx as nx

from simcoll.prediction.call import DEFAULTS
from simcoll.prediction.session import Session
from simcoll.scenarios.workloads._base import ParamChecker, WorkloadResult, comm_metrics
from simcoll.sim.timeline import COMM
from simcoll.topology.calibration import Calibration

__all__ = ["bucket_layers", "ddp"]

MiB = 2**20


def bucket_layers(
    layer_bytes: Sequence[int], *, first_bucket_bytes: int, bucket_bytes: int
) -> list[list[int]]:
    """Layers of each bucket, in the order backward fills them (the last layer first).

    A layer goes whole into the open bucket; the bucket closes once it holds at least
    its cap (so it may overshoot by one layer), as in PyTorch's reducer.
    """
    buckets: list[list[int]] = []
    current: list[int] = []
    held = 0
    for layer in reversed(range(len(layer_bytes))):
        current.append(layer)
        held += layer_bytes[layer]
        if held >= (bucket_bytes if buckets else first_bucket_bytes):
            buckets.append(current)
            current, held = [], 0
    if current:
        buckets.append(current)
    return buckets


def ddp(
    topology: nx.DiGraph[str],
    *,
    model: str = DEFAULTS.model,
    protocol: str | None = DEFAULTS.protocol,
    calibration: Calibration | Literal["default"] | None = "default",
    layer_params_bytes: list[int] | None = None,
    n_layers: int | None = None,
    params_bytes: int | None = None,
    forward_s_per_layer: float | list[float] = 1e-3,
    backward_s_per_layer: float | list[float] = 2e-3,
    bucket_bytes: int = 25 * MiB,
    first_bucket_bytes: int = 1 * MiB,
    optimizer_s: float = 0.0,
    n_ranks: int | None = None,
    algorithm: str | None = None,
) -> WorkloadResult:
    """Simulate one DDP training step (see the module docstring).

    Parameters
    ----------
    layer_params_bytes
        Gradient bytes of each layer, in forward order. Or give ``n_layers`` and
        ``params_bytes`` (split evenly); neither: 24 layers, 1.36 GB (BERT-Large, fp32).
    forward_s_per_layer, backward_s_per_layer
        Compute time of each layer: one value for all, or a list in forward order.
    bucket_bytes, first_bucket_bytes
        Bucket caps (PyTorch ``bucket_cap_mb`` and its 1 MiB first bucket).
    optimizer_s
        Compute after the last all-reduce.
    n_ranks, algorithm
        Data-parallel ranks 0..n_ranks-1 (None: every GPU) and the all-reduce algorithm.

    Returns
    -------
    WorkloadResult
        Common metrics (``time_s`` is the step time) plus ``n_layers``, ``n_buckets``,
        ``bucket_bytes``, ``first_bucket_bytes``, ``grad_bytes`` (all layers),
        ``allreduce_s`` (the all-reduces' durations summed) and ``no_overlap_time_s``.

    Notes
    -----
    ``no_overlap_time_s`` is what the step would take with every all-reduce waited for
    before going on: all compute plus ``allreduce_s`` (whose spans include the calibration's
    launch delay of each call). It is summed from this run rather than simulated again,
    which is exact because the all-reduces run one at a time on one stream with nothing
    else on the fabric, so each takes as long as it would alone.
    """
    check = ParamChecker("ddp")
    layers = check.layer_bytes(layer_params_bytes, n_layers, params_bytes)
    forward = check.times_s("forward_s_per_layer", forward_s_per_layer, len(layers), "layer")
    backward = check.times_s("backward_s_per_layer", backward_s_per_layer, len(layers), "layer")
    caps = {
        "first_bucket_bytes": check.size_bytes("first_bucket_bytes", first_bucket_bytes),
        "bucket_bytes": check.size_bytes("bucket_bytes", bucket_bytes),
    }
    optimizer = check.time_s("optimizer_s", optimizer_s)
    buckets = bucket_layers(layers, **caps)
    closing = {bucket[-1]: k for k, bucket in enumerate(buckets)}
    s = Session(topology, model=model, protocol=protocol, calibration=calibration)
    ranks = check.ranks(s, n_ranks)

    for i, duration_s in enumerate(forward):
        s.compute(ranks, duration_s, f"forward {i}")
    last = []
    for i in reversed(range(len(layers))):
        grads = s.compute(ranks, backward[i], f"backward {i}")
        if i in closing:  # launched once its last gradient is computed, on one stream
            k = closing[i]
            size = sum(layers[j] for j in buckets[k])
            last = [s.collective("allreduce", size, ranks, algorithm=algorithm,
                                 name=f"bucket {k}", after=[grads])]  # fmt: skip
    s.compute(ranks, optimizer, "optimizer", after=last)  # one stream: the last ends last
    timeline = s.run()
    allreduce_s = timeline.busy_s(ranks[0], COMM)
    compute_s = sum(forward) + sum(backward) + optimizer
    metrics = {
        **comm_metrics(timeline, ranks),
        "n_layers": len(layers),
        "n_buckets": len(buckets),
        **caps,
        "grad_bytes": sum(layers),
        "allreduce_s": allreduce_s,
        "no_overlap_time_s": compute_s + allreduce_s,
    }
    return WorkloadResult("ddp", timeline, metrics)
