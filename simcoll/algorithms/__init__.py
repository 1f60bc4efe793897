"""Collective algorithms: functions ``(n_ranks, size_bytes, **params) -> Schedule``.

The registry :data:`ALGORITHMS` maps ``(Collective, name)`` to the function; use
:func:`build_schedule` to build by name with clear errors, and :func:`algorithm_names`
to list what a collective supports.

Common parameters (every algorithm takes those that apply):

``n_channels``
    parallel channels (NCCL rings/trees), each carrying 1/n_channels of every block;
``n_chunks``
    pieces each channel's share of a block is cut into, pipelined;
``max_in_flight``
    per-connection window of transfers issued but not yet arrived (NCCL's 8 step slots);
``root``
    the root rank of broadcast, reduce, gather and scatter.

A plan (:mod:`simcoll.plan`) gives the ring and tree algorithms one ring or tree per
channel (their ``rings`` and ``trees``): pass it to :func:`build_schedule` as ``plan``.

>>> algorithm_names("sendrecv")
['direct']
>>> build_schedule("allreduce", "ring", n_ranks=8, size_bytes=1024).n_transfers
112
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from simcoll.algorithms import bruck, collnet, doubling, hierarchical, nvls, sharp, tree
from simcoll.algorithms.direct import (
    direct_allgather,
    direct_allreduce,
    direct_alltoall,
    direct_broadcast,
    direct_gather,
    direct_reduce,
    direct_reducescatter,
    direct_scatter,
    direct_sendrecv,
    reduce_broadcast_allreduce,
)
from simcoll.algorithms.ring import (
    ring_allgather,
    ring_allreduce,
    ring_broadcast,
    ring_reduce,
    ring_reducescatter,
)
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.limits import (
    MAX_CHANNELS,
    MAX_CHUNKS,
    MAX_IN_FLIGHT,
    MAX_RANKS,
    check_count,
    check_size_bytes,
)
from simcoll.core.schedule import Schedule
from simcoll.plan.channels import Plan

__all__ = ["ALGORITHMS", "PARAM_MAXIMUM", "AlgorithmFn", "algorithm_names", "build_schedule"]

AlgorithmFn = Callable[..., Schedule]

C = Collective
ALGORITHMS: dict[tuple[Collective, str], AlgorithmFn] = {
    (C.ALLREDUCE, "ring"): ring_allreduce,
    (C.ALLREDUCE, "direct"): direct_allreduce,
    (C.ALLREDUCE, "reduce_broadcast"): reduce_broadcast_allreduce,
    (C.ALLGATHER, "ring"): ring_allgather,
    (C.ALLGATHER, "direct"): direct_allgather,
    (C.REDUCESCATTER, "ring"): ring_reducescatter,
    (C.REDUCESCATTER, "direct"): direct_reducescatter,
    (C.ALLTOALL, "direct"): direct_alltoall,
    (C.BROADCAST, "ring"): ring_broadcast,
    (C.BROADCAST, "direct"): direct_broadcast,
    (C.REDUCE, "ring"): ring_reduce,
    (C.REDUCE, "direct"): direct_reduce,
    (C.GATHER, "direct"): direct_gather,
    (C.SCATTER, "direct"): direct_scatter,
    (C.SENDRECV, "direct"): direct_sendrecv,
    **doubling.ALGORITHMS,
    **bruck.ALGORITHMS,
    **hierarchical.ALGORITHMS,
    **nvls.ALGORITHMS,
    **tree.ALGORITHMS,
    **sharp.ALGORITHMS,
    **collnet.ALGORITHMS,
}


def _collective(collective: Collective | str) -> Collective:
    return collective if isinstance(collective, Collective) else Collective.parse(collective)


def algorithm_names(collective: Collective | str) -> list[str]:
    """Names of the algorithms registered for a collective, sorted."""
    c = _collective(collective)
    return sorted(name for (coll, name) in ALGORITHMS if coll is c)


def build_schedule(
    collective: Collective | str,
    algorithm: str,
    plan: Plan | None = None,
    /,
    *,
    n_ranks: int,
    size_bytes: int,
    **params: int,
) -> Schedule:
    """Build the schedule of one collective call by algorithm name.

    With a ``plan``, an algorithm that takes rings or trees runs the plan's, one per
    channel (``n_channels`` is then the plan's); the others ignore it.

    Raises
    ------
    ConfigError
        If the collective or algorithm is unknown (the message lists the valid names), a
        parameter does not apply, a parameter value is not a positive integer or is over
        its cap (:data:`PARAM_MAXIMUM`), ``n_ranks`` is not in 1..32,768 or ``size_bytes``
        not a whole number of bytes up to 2^53 (:mod:`simcoll.core.limits`).

    >>> build_schedule("sendrecv", "ring", n_ranks=4, size_bytes=64)
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: sendrecv has no algorithm 'ring'; valid: direct
    """
    c = _collective(collective)
    fn = ALGORITHMS.get((c, algorithm))
    if fn is None:
        valid = ", ".join(algorithm_names(c))
        raise ConfigError(f"{c.value} has no algorithm {algorithm!r}; valid: {valid}")
    where = f"{c.value}/{algorithm}"
    try:
        n_ranks = check_count(n_ranks, "n_ranks", MAX_RANKS)
        size_bytes = check_size_bytes(size_bytes, "size_bytes")
    except ConfigError as error:
        raise ConfigError(f"{where}: {error.field} {error.message}") from None
    accepted = _accepted_params(fn)
    for key, value in params.items():
        if key not in accepted:
            raise ConfigError(
                f"{c.value}/{algorithm} takes no parameter {key!r}; valid: {', '.join(accepted)}"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < (key != "root"):
            low = "a rank" if key == "root" else "a positive integer"
            raise ConfigError(f"{where}: {key} must be {low}, got {value!r}")
        if value > PARAM_MAXIMUM.get(key, MAX_RANKS):
            raise ConfigError(
                f"{where}: {key} must be at most {PARAM_MAXIMUM.get(key, MAX_RANKS)}, got {value}"
            )
    if "root" in params and not 0 <= params["root"] < n_ranks:
        raise ConfigError(f"{c.value}: root {params['root']} is not a rank of {n_ranks}")
    return fn(n_ranks, size_bytes, **params, **_from_plan(fn, plan, n_ranks))


#: Parameters a plan gives, never a user: one ring or tree per channel.
PLAN_PARAMS = ("rings", "trees")


def _from_plan(fn: AlgorithmFn, plan: Plan | None, n_ranks: int) -> dict[str, object]:
    """The keyword arguments ``plan`` gives ``fn``: its rings or trees, if it takes them."""
    if plan is None:
        return {}
    if plan.n_ranks != n_ranks:
        raise ConfigError(f"the plan has {plan.n_ranks} ranks, the call {n_ranks}")
    taken = inspect.signature(fn).parameters
    if "rings" in taken:
        return {"rings": plan.rings}
    if "trees" in taken:
        return {"trees": plan.trees}
    return {}


#: The largest value of each common parameter (others, ranks and group sizes, are at most
#: :data:`~simcoll.core.limits.MAX_RANKS`).
PARAM_MAXIMUM = {
    "n_channels": MAX_CHANNELS,
    "n_chunks": MAX_CHUNKS,
    "max_in_flight": MAX_IN_FLIGHT,
    "n_ctas": MAX_CHANNELS,
    "sm_bus_bandwidth_bytes_per_s": 10**15,  # a petabyte per second, as a params file's links
}


def _accepted_params(fn: AlgorithmFn) -> list[str]:
    """The keyword-only parameters of an algorithm function a caller may set, in signature
    order (not the plan's)."""
    return [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind is p.KEYWORD_ONLY and p.name not in PLAN_PARAMS
    ]
