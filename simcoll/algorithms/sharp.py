"""In-network reduction in the fabric: SHARP all-reduce on switches that can reduce.

Mellanox/NVIDIA SHARP (Graham et al., "Scalable Hierarchical Aggregation Protocol",
COMHPC 2016) builds an aggregation tree of InfiniBand switches: each leaf switch adds up
what the hosts below it send, passes one partial sum up to the root, and the root's
result flows back down the same tree. NCCL reaches it through its CollNet algorithms.

simcoll's schedule uses switch endpoints (:mod:`simcoll.core.schedule`): with
``ranks_per_switch = g`` the ranks are grouped g at a time under one first-level switch
(endpoint ``n_ranks + j`` for group j), and the group switches under one root (the last
endpoint)::

    rank -> leaf (+) -> root (+) -> leaf -> rank        per piece, pipelined

``ranks_per_switch = 0`` (or >= n_ranks) is a single switch for every rank. The engine
places each endpoint on the reducing switch nearest to its group's GPUs (fewest hops to
the farthest of them), so the topology decides where the tree sits, and refuses
topologies without switches that reduce (``sharp = true`` in a fat-tree file).

Per rank an all-reduce sends S and receives S; a group switch sends S up and S down.

>>> s = sharp_allreduce(4, 64, ranks_per_switch=2)
>>> s.n_switches, s.bytes_sent_per_rank().tolist()
(3, [64, 64, 64, 64, 192, 192, 128])
"""

from __future__ import annotations

from collections.abc import Callable

from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Op, Schedule, ScheduleBuilder

__all__ = ["ALGORITHMS", "sharp_allreduce"]


def sharp_allreduce(
    n_ranks: int,
    size_bytes: int,
    *,
    ranks_per_switch: int = 0,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Schedule:
    """All-reduce on a two-level tree of reducing switches (one level if it fits one).

    Raises
    ------
    ScheduleError
        If ``ranks_per_switch`` does not divide ``n_ranks``.

    >>> sharp_allreduce(6, 24, ranks_per_switch=4)
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ScheduleError: sharp: ranks_per_switch 4 does not divide 6 ranks
    """
    g = ranks_per_switch if 0 < ranks_per_switch < n_ranks else n_ranks
    if n_ranks % g:
        raise ScheduleError(f"sharp: ranks_per_switch {g} does not divide {n_ranks} ranks")
    groups = [list(range(first, first + g)) for first in range(0, n_ranks, g)]
    two_levels = len(groups) > 1
    b = ScheduleBuilder(
        Collective.ALLREDUCE,
        "sharp",
        n_ranks=n_ranks,
        size_bytes=size_bytes,
        pieces_per_block=n_channels * n_chunks,
        max_in_flight=max_in_flight,
        n_switches=0 if n_ranks == 1 else len(groups) + two_levels,
        params={
            "ranks_per_switch": ranks_per_switch,
            "n_channels": n_channels,
            "n_chunks": n_chunks,
            "max_in_flight": max_in_flight,
            # Which ranks each switch endpoint serves, for the engine to place it.
            "switch_groups": (
                tuple(tuple(group) for group in groups) + ((tuple(range(n_ranks)),) * two_levels)
            ),
        },
    )
    if n_ranks > 1:
        for piece in range(b.pieces_per_block):
            _piece(b, piece, groups, channel=piece % n_channels, two_levels=two_levels)
    return b.build()


def _piece(
    b: ScheduleBuilder, piece: int, groups: list[list[int]], *, channel: int, two_levels: bool
) -> None:
    """One piece up the tree (reducing) and back down (copying)."""
    n = b.n_ranks
    root = n + len(groups)
    up: dict[int, list[int]] = {}
    for j, group in enumerate(groups):
        up[j] = [
            b.add(src=r, dst=n + j, pieces=[piece], op=Op.REDUCE, channel=channel) for r in group
        ]
    down_to: dict[int, list[int]] = {}
    if two_levels:
        to_root = [
            b.add(src=n + j, dst=root, pieces=[piece], op=Op.REDUCE, channel=channel, deps=up[j])
            for j in range(len(groups))
        ]
        for j in range(len(groups)):
            down_to[j] = [b.add(src=root, dst=n + j, pieces=[piece], channel=channel, deps=to_root)]
    else:
        down_to[0] = up[0]
    for j, group in enumerate(groups):
        for r in group:
            b.add(src=n + j, dst=r, pieces=[piece], channel=channel, deps=down_to[j])


ALGORITHMS: dict[tuple[Collective, str], Callable[..., Schedule]] = {
    (Collective.ALLREDUCE, "sharp"): sharp_allreduce,
}
"""SHARP all-reduce."""
