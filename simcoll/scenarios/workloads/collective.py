"""One collective call (or a few back to back) on the first ``n_ranks`` GPUs.

The same call ``simcoll predict`` runs, as a workload: the same time, and a timeline
with it. On a 4-GPU ring of 100 GB/s, 2 us links, the links alone, a ring all-gather of
8 MB in one piece per block takes 3 steps of 2 us + 2 MB / 100 GB/s:

>>> from simcoll.topology import ring
>>> g = ring(4, link_bandwidth_bytes_per_s=100e9, link_latency_s=2e-6)
>>> m = collective(g, collective="allgather", size_bytes=8_000_000, protocol=None,
...                n_chunks=1).metrics
>>> round(m["time_s"] * 1e6, 6), round(m["busbw_bytes_per_s"] / 1e9, 6)
(66.0, 90.909091)
"""

from __future__ import annotations

from typing import Literal

import networkx as nx

from simcoll.core.collectives import Collective
from simcoll.prediction.call import DEFAULTS
from simcoll.prediction.session import Session
from simcoll.scenarios.workloads._base import ParamChecker, WorkloadResult, comm_metrics
from simcoll.topology.calibration import Calibration

__all__ = ["collective"]


def collective(
    topology: nx.DiGraph[str],
    *,
    model: str = DEFAULTS.model,
    protocol: str | None = DEFAULTS.protocol,
    calibration: Calibration | Literal["default"] | None = "default",
    collective: str = "allreduce",
    size_bytes: int | str = 64 * 2**20,
    algorithm: str | None = None,
    n_ranks: int | None = None,
    iterations: int = 1,
    n_channels: int | None = None,
    n_chunks: int | None = None,
    max_in_flight: int | None = None,
    root: int | None = None,
) -> WorkloadResult:
    """Run ``iterations`` calls of one collective, one after another on one stream.

    Parameters
    ----------
    collective, algorithm
        What to run (``simcoll.algorithms.algorithm_names`` lists the algorithms).
    size_bytes
        nccl-tests size (all-gather, reduce-scatter: the whole gathered buffer).
    n_ranks
        Ranks 0..n_ranks-1 take part; None: every GPU.
    iterations
        Calls back to back; the metrics below are per call (the mean).
    n_channels, n_chunks, max_in_flight, root
        Algorithm parameters; None keeps the algorithm's default.

    Returns
    -------
    WorkloadResult
        Common metrics plus ``iteration_time_s``, ``algbw_bytes_per_s`` and
        ``busbw_bytes_per_s`` (nccl-tests definitions, per call).
    """
    check = ParamChecker("collective")
    c = Collective.parse(collective)
    size = check.size_bytes("size_bytes", size_bytes)
    n_iterations = check.count("iterations", iterations)
    extra = {"n_channels": n_channels, "n_chunks": n_chunks, "max_in_flight": max_in_flight}
    params = {k: check.count(k, v) for k, v in extra.items() if v is not None}
    if root is not None:
        params["root"] = check.count("root", root, minimum=0)
    s = Session(topology, model=model, protocol=protocol, calibration=calibration)
    ranks = check.ranks(s, n_ranks)

    for _ in range(n_iterations):  # one stream: each call starts when the last ends
        s.collective(c, size, ranks, algorithm=algorithm, params=params)
    timeline = s.run()
    per_call_s = timeline.time_s / n_iterations
    algbw = size / per_call_s if per_call_s > 0 else 0.0
    metrics = {
        **comm_metrics(timeline, ranks),
        "iteration_time_s": per_call_s,
        "algbw_bytes_per_s": algbw,
        "busbw_bytes_per_s": algbw * c.busbw_factor(len(ranks)),
    }
    return WorkloadResult("collective", timeline, metrics)
