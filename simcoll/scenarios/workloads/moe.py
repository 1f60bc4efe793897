"""Mixture-of-experts layers: all-to-all dispatch, expert compute, all-to-all combine.

Each rank of an expert-parallel group of ``ep_degree`` ranks holds its experts and
``tokens_per_rank`` tokens. Every token goes to ``top_k`` experts, spread evenly over the
group (balanced routing), so a rank sends ``tokens_per_rank x top_k x hidden_size x
dtype_bytes`` bytes in the dispatch all-to-all (the nccl-tests all-to-all size, padded up
to a multiple of the group size so it splits into equal blocks), computes its experts for
``expert_s`` and sends the results back in an all-to-all of the same size::

    per layer:  | all-to-all (dispatch) | experts | all-to-all (combine) |

With ``n_ranks > ep_degree``, ranks split into consecutive groups that run at once and
share the fabric. Only the MoE layers' forward pass is modelled.

>>> from simcoll.topology import switch_star
>>> g = switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
>>> m = moe(g, tokens_per_rank=1000, hidden_size=1000, dtype_bytes=2, top_k=2, protocol=None,
...         expert_s=1e-3).metrics
>>> m["alltoall_bytes"], round(m["time_s"] * 1e3, 9)  # 3 blocks of 1 MB leave each GPU
(4000000, 7.0)
"""

from __future__ import annotations

from typing import Literal

import networkx as nx

from simcoll.prediction.call import DEFAULTS
from simcoll.prediction.session import Session
from simcoll.scenarios.workloads._base import ParamChecker, WorkloadResult, comm_metrics
from simcoll.topology.calibration import Calibration

__all__ = ["moe"]


def moe(
    topology: nx.DiGraph[str],
    *,
    model: str = DEFAULTS.model,
    protocol: str | None = DEFAULTS.protocol,
    calibration: Calibration | Literal["default"] | None = "default",
    tokens_per_rank: int = 4096,
    hidden_size: int = 4096,
    dtype_bytes: int = 2,
    top_k: int = 2,
    expert_s: float = 1e-3,
    n_layers: int = 1,
    ep_degree: int | None = None,
    n_ranks: int | None = None,
    algorithm: str | None = None,
) -> WorkloadResult:
    """Simulate the forward pass of ``n_layers`` expert-parallel MoE layers.

    Parameters
    ----------
    tokens_per_rank, hidden_size, dtype_bytes
        Tokens each rank routes, model width, bytes per activation element.
    top_k
        Experts each token goes to.
    expert_s
        Expert compute time per layer on each rank.
    n_layers
        MoE layers, one after another.
    ep_degree
        Ranks per expert-parallel group (None: all ``n_ranks``); divides ``n_ranks``.
    n_ranks, algorithm
        Ranks 0..n_ranks-1 (None: every GPU) and the all-to-all algorithm.

    Returns
    -------
    WorkloadResult
        Common metrics plus ``ep_degree``, ``n_groups`` and ``alltoall_bytes`` (the
        nccl-tests size of each all-to-all call).
    """
    check = ParamChecker("moe")
    size = (
        check.count("tokens_per_rank", tokens_per_rank)
        * check.count("top_k", top_k)
        * check.count("hidden_size", hidden_size)
        * check.count("dtype_bytes", dtype_bytes)
    )
    compute_s = check.time_s("expert_s", expert_s)
    layers = check.count("n_layers", n_layers)
    s = Session(topology, model=model, protocol=protocol, calibration=calibration)
    ranks = check.ranks(s, n_ranks)
    ep = len(ranks) if ep_degree is None else check.count("ep_degree", ep_degree)
    if len(ranks) % ep:
        raise check.error("ep_degree", f"a divisor of n_ranks = {len(ranks)}", ep_degree)
    size = -(-size // ep) * ep

    for start in range(0, len(ranks), ep):  # the groups run at once, on their own ranks
        members = ranks[start : start + ep]
        for i in range(layers):  # one stream: dispatch after the last combine
            dispatch = s.collective("alltoall", size, members, algorithm=algorithm,
                                    name=f"dispatch {i}")  # fmt: skip
            experts = s.compute(members, compute_s, f"experts {i}", after=[dispatch])
            s.collective("alltoall", size, members, algorithm=algorithm, name=f"combine {i}",
                         after=[experts])  # fmt: skip
    timeline = s.run()
    metrics = {
        **comm_metrics(timeline, ranks),
        "ep_degree": ep,
        "n_groups": len(ranks) // ep,
        "alltoall_bytes": size,
    }
    return WorkloadResult("moe", timeline, metrics)
