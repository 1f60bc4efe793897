"""What ``predict`` chooses among: the algorithms for ``auto`` and ``all``, and the
parameters an algorithm takes from the topology (GPUs per server, ranks per switch)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence

import networkx as nx

from simcoll.algorithms import ALGORITHMS, algorithm_names
from simcoll.core.collectives import Collective
from simcoll.plan.placement import gpus_per_host, ranks_per_reducing_switch
from simcoll.plan.tuning import NcclKnobs, nvls_tree_sm_bus_bandwidth_bytes_per_s
from simcoll.topology.calibration import Calibration

__all__ = [
    "AUTO_FAMILY",
    "DEFAULT_ALGORITHM",
    "algorithm_params",
    "candidates",
    "default_algorithm",
]

#: The algorithm a call runs when none is named: NCCL's own choice per size
#: (:mod:`simcoll.prediction.nccl_choice`), what nccl-tests and frameworks run when no
#: ``NCCL_ALGO`` is set. ``ring``, ``auto`` and the rest are one argument away.
DEFAULT_ALGORITHM = "nccl"


def default_algorithm(collective: Collective) -> str:
    """The algorithm a call of ``collective`` runs when none is named: ``"nccl"`` for
    every collective (NCCL's tuning model picks among ring, tree, NVLS and SHARP where it
    costs the collective, else its point-to-point path).

    >>> default_algorithm(Collective.ALLREDUCE), default_algorithm(Collective.ALLTOALL)
    ('nccl', 'nccl')
    """
    return DEFAULT_ALGORITHM


#: What ``algorithm="auto"`` picks from: NCCL's own algorithms (ring, trees, NVLS, and
#: SHARP as NCCL's CollNet reaches it). The others (direct, halving-doubling, ...) are
#: simulated on request or with ``"all"``: on hundreds of ranks, all-pairs algorithms put
#: tens of thousands of flows in flight at once and cost minutes to simulate.
AUTO_FAMILY = ("ring", "tree", "nvls", "sharp")


def candidates(collective: Collective, algorithm: str) -> list[str]:
    """The algorithms ``predict`` simulates for ``algorithm`` (a name, auto or all).

    >>> candidates(Collective.ALLTOALL, "auto")
    ['direct', 'pairwise']
    """
    names = algorithm_names(collective)
    if algorithm == "all":
        return names
    if algorithm == "auto":
        return [name for name in names if name in AUTO_FAMILY] or names
    return [algorithm]


def algorithm_params(
    name: str,
    collective: Collective,
    params: Mapping[str, int] | None,
    topology: nx.DiGraph[str],
    n_ranks: int,
    *,
    rank_nodes: Sequence[str] | None = None,
    knobs: NcclKnobs | None = None,
    calibration: Calibration | None = None,
) -> dict[str, int]:
    """The user's parameters, plus what the topology and NCCL's settings (``knobs``) say
    where the algorithm takes it: ``gpus_per_node`` (counted over the ranks' GPUs,
    ``rank_nodes``, when given), CollNet Chain's channels (one per GPU of a server, each
    its head), NVLS's CTAs (``n_ctas``: NCCL's 16 within
    ``NCCL_MIN_CTAS`` / ``NCCL_MAX_CTAS``) and the bus bandwidth NVLS-tree's CTAs move
    by ``calibration``'s rate per CTA
    (:func:`~simcoll.plan.tuning.nvls_tree_sm_bus_bandwidth_bytes_per_s`)."""
    chosen = dict(params or {})
    fn = ALGORITHMS.get((collective, name))
    accepted = inspect.signature(fn).parameters if fn is not None else {}
    if "gpus_per_node" in accepted:
        chosen.setdefault("gpus_per_node", gpus_per_host(topology, n_ranks, rank_nodes))
    if "n_ctas" in accepted:
        chosen.setdefault("n_ctas", (knobs or NcclKnobs()).nvls_ctas())
    if "sm_bus_bandwidth_bytes_per_s" in accepted and calibration is not None:
        g = min(chosen.get("gpus_per_node", n_ranks), n_ranks)
        bus_bytes_per_s = nvls_tree_sm_bus_bandwidth_bytes_per_s(
            n_ranks // max(1, g), g, chosen["n_ctas"], calibration.cta_bus_bandwidth_bytes_per_s
        )
        if bus_bytes_per_s:  # 0: no bound (one server; none in the params)
            chosen.setdefault("sm_bus_bandwidth_bytes_per_s", bus_bytes_per_s)
    if name == "collnet_chain":  # a channel per head, every GPU's NIC one's (NCCL runs
        # CollNet on its ring channels, connect.cc: at least one per NIC)
        chosen.setdefault("n_channels", min(chosen["gpus_per_node"], n_ranks))
    if "ranks_per_switch" in accepted and "ranks_per_switch" not in chosen:
        per_switch = ranks_per_reducing_switch(topology, n_ranks)
        if per_switch:
            chosen["ranks_per_switch"] = per_switch
    return chosen
