"""Closed-form models of a collective call: instant estimates beside the simulator.

Two models, pure functions of a topology (numpy and networkx, no simulation):

- :func:`alphabeta_time_s`: the alpha-beta formula of each of simcoll's algorithms, with
  alpha and B read off the routes the algorithm uses (:mod:`simcoll.models.alphabeta`).
  On contention-free, symmetric cases it equals the flow simulator; it is the test
  oracle of DESIGN.md's ``analytical`` fidelity mode.
- :func:`nccl_time_s`: NCCL's own tuning model (``src/graph/tuning.cc``), as a baseline
  for what NCCL would predict and pick (:mod:`simcoll.models.nccl`).

>>> from simcoll.topology import switch_star
>>> star = switch_star(8, link_bandwidth_bytes_per_s=300e9, link_latency_s=0.5e-6)
>>> round(alphabeta_time_s(star, "allreduce", "ring", 8, 2**30) * 1e3, 6)  # 14 (1 us + S/8B)
6.277494
>>> round(nccl_time_s(star, "allreduce", "ring", "simple", 8, 2**30, n_channels=8) * 1e3, 6)
6.319494
"""

from __future__ import annotations

from simcoll.models.alphabeta import (
    ALPHABETA_ALGORITHMS,
    NoClosedFormError,
    PatternCost,
    alphabeta_algorithm_names,
    alphabeta_time_s,
    chain_time_s,
    pattern_cost,
    pipeline_time_s,
)
from simcoll.models.nccl import (
    HOPPER,
    NCCL_ALGORITHMS,
    NCCL_PROTOCOLS,
    NcclConstants,
    NcclEstimate,
    nccl_estimate,
    nccl_time_s,
)

__all__ = [
    "ALPHABETA_ALGORITHMS",
    "HOPPER",
    "NCCL_ALGORITHMS",
    "NCCL_PROTOCOLS",
    "NcclConstants",
    "NcclEstimate",
    "NoClosedFormError",
    "PatternCost",
    "alphabeta_algorithm_names",
    "alphabeta_time_s",
    "chain_time_s",
    "nccl_estimate",
    "nccl_time_s",
    "pattern_cost",
    "pipeline_time_s",
]
