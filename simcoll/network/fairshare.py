r"""Max-min fair sharing of link bandwidth among flows: pure numpy, no simulation.

The model
---------
Flows ``f`` cross links ``l``; link ``l`` carries at most ``c_l`` bytes/s in its direction.
A rate vector ``x`` is *max-min fair* when no flow's rate can grow without shrinking the
rate of a flow that is already no faster. It is unique and found by *progressive
filling* (Bertsekas & Gallager, *Data Networks*, sec. 6.5.2; SimGrid's LMM solver with all
weights 1):

1. every unfrozen flow grows at the same pace;
2. when a link is full (the sum of its flows' rates equals ``c_l``), the flows crossing it
   freeze;
3. repeat until every flow is frozen.

Each round raises all unfrozen rates by ``min_l (c_l - used_l) / n_l`` over links with
``n_l > 0`` unfrozen flows, so a round costs one pass over the flow-link incidences and
there are at most as many rounds as distinct bottleneck levels. A per-flow rate cap (a
sender that cannot go faster than some throughput) is a private link of that capacity.

Weighted incidences serve the symmetric fast path (:mod:`simcoll.sim.symmetry`): a flow that
stands for w identical flows on a link (one per rank shift and channel copy), or a link
class whose links each carry w copies of it, uses ``w`` times its rate there. Progressive
filling is unchanged except that link ``l`` fills at ``sum_f w_fl`` per unit of rate.

Worked example
--------------
Links L0 = 10 B/s and L1 = 4 B/s; flow a crosses both, b only L0, c only L1.
Round 1: L0 has 2 flows (share 5), L1 has 2 flows (share 2): all grow by 2, L1 is full,
so a and c freeze at 2. Round 2: only b is left, on L0 with 10 - 2 - 2 = 6 left: b grows
by 6 to 8.

>>> uses = np.array([[1, 1], [1, 0], [0, 1]], dtype=bool)
>>> max_min_rates(uses, np.array([10.0, 4.0])).tolist()
[2.0, 8.0, 2.0]
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["max_min_rates", "max_min_rates_sparse"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Two bottleneck shares closer than this (relative) saturate in the same round; it only
# absorbs float rounding, it never merges distinct physical levels.
_SAME_LEVEL = 1e-12


def max_min_rates(
    uses: npt.ArrayLike,
    capacity_bytes_per_s: npt.ArrayLike,
    rate_cap_bytes_per_s: npt.ArrayLike | None = None,
) -> FloatArray:
    """Max-min fair rate of each flow (bytes/s), from a dense flow x link matrix.

    Parameters
    ----------
    uses
        Boolean matrix, ``uses[f, l]`` true when flow f crosses link l.
    capacity_bytes_per_s
        Capacity of each link, positive.
    rate_cap_bytes_per_s
        Optional per-flow upper bound on the rate (``inf`` for none).

    Returns
    -------
    numpy.ndarray
        One rate per flow. A flow that crosses no link and has no cap gets ``inf``.

    >>> max_min_rates([[1, 0], [1, 1]], [10.0, 10.0], rate_cap_bytes_per_s=[2.0, np.inf])
    array([2., 8.])
    """
    matrix = np.asarray(uses, dtype=bool)
    flows, links = np.nonzero(matrix)
    return max_min_rates_sparse(
        flows.astype(np.int64),
        links.astype(np.int64),
        np.asarray(capacity_bytes_per_s, dtype=np.float64),
        n_flows=matrix.shape[0],
        rate_cap_bytes_per_s=rate_cap_bytes_per_s,
    )


def max_min_rates_sparse(
    flow_of_use: IntArray,
    link_of_use: IntArray,
    capacity_bytes_per_s: FloatArray,
    *,
    n_flows: int,
    rate_cap_bytes_per_s: npt.ArrayLike | None = None,
    weight_of_use: FloatArray | None = None,
) -> FloatArray:
    """Max-min fair rates from the incidences of flows on links (COO form).

    Incidence ``i`` says flow ``flow_of_use[i]`` crosses link ``link_of_use[i]``; a flow
    must not list the same link twice. ``weight_of_use[i]`` (default 1) is how many units
    of link capacity the flow uses there per unit of its rate.

    >>> max_min_rates_sparse(np.array([0, 0, 1, 2]), np.array([0, 1, 0, 1]),
    ...                      np.array([10.0, 4.0]), n_flows=3).tolist()
    [2.0, 8.0, 2.0]

    Flow 0 standing for three flows on link 0 (weight 3) leaves flow 1 a quarter:

    >>> max_min_rates_sparse(np.array([0, 1]), np.array([0, 0]), np.array([8.0]),
    ...                      n_flows=2, weight_of_use=np.array([3.0, 1.0])).tolist()
    [2.0, 2.0]
    """
    capacity = np.asarray(capacity_bytes_per_s, dtype=np.float64)
    flow_of_use = np.asarray(flow_of_use, dtype=np.int64)
    link_of_use = np.asarray(link_of_use, dtype=np.int64)
    if rate_cap_bytes_per_s is not None:
        cap = np.broadcast_to(np.asarray(rate_cap_bytes_per_s, dtype=np.float64), (n_flows,))
        capped = np.flatnonzero(np.isfinite(cap))
        flow_of_use = np.concatenate([flow_of_use, capped])
        link_of_use = np.concatenate([link_of_use, len(capacity) + np.arange(len(capped))])
        capacity = np.concatenate([capacity, cap[capped]])
        if weight_of_use is not None:
            weight_of_use = np.concatenate([weight_of_use, np.ones(len(capped))])
    return _progressive_filling(flow_of_use, link_of_use, capacity, n_flows, weight_of_use)


def _progressive_filling(
    flow_of_use: IntArray,
    link_of_use: IntArray,
    capacity: FloatArray,
    n_flows: int,
    weight_of_use: FloatArray | None = None,
) -> FloatArray:
    rate = np.zeros(n_flows)
    left = capacity.copy()
    active = np.zeros(n_flows, dtype=bool)
    active[flow_of_use] = True
    rate[~active] = np.inf  # crosses nothing: nothing limits it
    n_links = len(capacity)
    while active.any():
        live = active[flow_of_use]
        weights = None if weight_of_use is None else weight_of_use[live]
        users = np.bincount(link_of_use[live], weights=weights, minlength=n_links)
        loaded = np.flatnonzero(users)
        share = left[loaded] / users[loaded]
        step = share.min()
        rate[active] += step
        left[loaded] -= step * users[loaded]
        full = loaded[share <= step * (1 + _SAME_LEVEL)]
        left[full] = 0.0
        is_full = np.zeros(n_links, dtype=bool)
        is_full[full] = True
        frozen = flow_of_use[live & is_full[link_of_use]]
        active[frozen] = False
    return rate
