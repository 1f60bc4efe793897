"""Megatron-style tensor-parallel MLP layers: GEMMs split over a group, then an all-reduce.

Each of ``n_layers`` MLP blocks (hidden h -> 4h -> h) is split over ``tp_degree`` ranks
(Shoeybi et al. 2019, Megatron-LM): the first GEMM by columns, the second by rows, so each
rank ends the forward pass with a partial sum that one all-reduce of the activations
(``batch_tokens x hidden_size x dtype_bytes``) completes. The backward pass mirrors it:
the two GEMMs' gradients, then an all-reduce of the input gradient. Nothing overlaps:
every all-reduce is on the critical path.

GEMM time is ``flops / flops_per_s`` with, per rank and per layer, two GEMMs of
``2 x T x h x 4h / tp`` flops each in the forward pass (``16 T h^2 / tp`` in all) and
twice that in the backward pass (input and weight gradients)::

    per layer:  | GEMMs F | all-reduce | ... | GEMMs 2F | all-reduce |
                 forward                      backward (layers in reverse)

With ``n_ranks > tp_degree``, ranks split into consecutive groups of ``tp_degree`` that run
at once and share the fabric.

>>> from simcoll.topology import ring
>>> g = ring(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
>>> m = tensor_parallel_mlp(g, batch_tokens=1000, hidden_size=1000, flops_per_s=8e12,
...                         protocol=None).metrics  # the links alone
>>> round(m["gemm_forward_s_per_layer"] * 1e3, 9), round(m["time_s"] * 1e3, 9)  # 3 F + 2 AR
(1.0, 7.0)
"""

from __future__ import annotations

from typing import Literal

import networkx as nx

from simcoll.prediction.call import DEFAULTS
from simcoll.prediction.session import Op, Session
from simcoll.scenarios.workloads._base import ParamChecker, WorkloadResult, comm_metrics
from simcoll.topology.calibration import Calibration

__all__ = ["tensor_parallel_mlp"]


def tensor_parallel_mlp(
    topology: nx.DiGraph[str],
    *,
    model: str = DEFAULTS.model,
    protocol: str | None = DEFAULTS.protocol,
    calibration: Calibration | Literal["default"] | None = "default",
    tp_degree: int | None = None,
    n_ranks: int | None = None,
    batch_tokens: int = 4096,
    hidden_size: int = 4096,
    dtype_bytes: int = 2,
    n_layers: int = 1,
    flops_per_s: float = 300e12,
    algorithm: str | None = None,
) -> WorkloadResult:
    """Simulate forward and backward of ``n_layers`` tensor-parallel MLP blocks.

    Parameters
    ----------
    tp_degree
        Ranks per tensor-parallel group (None: all ``n_ranks``); divides ``n_ranks``.
    n_ranks
        Ranks 0..n_ranks-1 take part (None: every GPU).
    batch_tokens, hidden_size, dtype_bytes
        Tokens per step (micro-batch x sequence), model width, bytes per activation.
    n_layers
        MLP blocks, run forward then backward in reverse.
    flops_per_s
        Sustained GEMM throughput of one GPU.
    algorithm
        All-reduce algorithm.

    Returns
    -------
    WorkloadResult
        Common metrics plus ``tp_degree``, ``n_groups``, ``allreduce_bytes`` (per call),
        ``gemm_flops_per_layer`` (forward, per rank) and ``gemm_forward_s_per_layer``.
    """
    check = ParamChecker("tensor_parallel_mlp")
    tokens = check.count("batch_tokens", batch_tokens)
    hidden = check.count("hidden_size", hidden_size)
    dtype = check.count("dtype_bytes", dtype_bytes)
    layers = check.count("n_layers", n_layers)
    rate = check.rate("flops_per_s", flops_per_s)
    s = Session(topology, model=model, protocol=protocol, calibration=calibration)
    ranks = check.ranks(s, n_ranks)
    tp = len(ranks) if tp_degree is None else check.count("tp_degree", tp_degree)
    if len(ranks) % tp:
        raise check.error("tp_degree", f"a divisor of n_ranks = {len(ranks)}", tp_degree)
    flops = 16 * tokens * hidden * hidden / tp
    forward_s = flops / rate
    size = tokens * hidden * dtype

    passes = [(f"forward {i}", forward_s) for i in range(layers)]
    passes += [(f"backward {i}", 2 * forward_s) for i in reversed(range(layers))]
    for start in range(0, len(ranks), tp):  # the groups run at once, on their own ranks
        members = ranks[start : start + tp]
        reduced: list[Op] = []
        for what, duration_s in passes:  # every all-reduce on the critical path
            gemms = s.compute(members, duration_s, f"mlp {what}", after=reduced)
            reduced = [s.collective("allreduce", size, members, algorithm=algorithm,
                                    name=f"all-reduce {what}", after=[gemms])]  # fmt: skip
    timeline = s.run()
    metrics = {
        **comm_metrics(timeline, ranks),
        "tp_degree": tp,
        "n_groups": len(ranks) // tp,
        "allreduce_bytes": size,
        "gemm_flops_per_layer": flops,
        "gemm_forward_s_per_layer": forward_s,
    }
    return WorkloadResult("tensor_parallel_mlp", timeline, metrics)
