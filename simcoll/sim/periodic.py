"""Rings whose steps repeat: simulate the first steps, extend their period to the end.

Every step of a ring all-reduce, reduce-scatter or all-gather moves the same pieces over
the same connections, and each waits only on the step before it. Once the ring settles
into a pace, every step takes the same time, to the last digit: the step whose flows
share the most loaded link holds the pace, and the others keep up with it. The engine
then spends 2(n - 1) steps finding one period. At 1,024 GPUs on NCCL's plan with 16
channels, a ring all-reduce is 33.5 M transfers, over what one schedule may hold
(:data:`~simcoll.core.limits.MAX_TRANSFERS`); where hashed ECMP routes the channels
differently, no symmetry folds them (:mod:`simcoll.sim.symmetry`,
:mod:`simcoll.sim.channel_symmetry`).

:func:`extend_periodic` takes the engine's result on a prefix of the ring (the first
``k`` steps, :func:`simcoll.algorithms.ring.ring_prefix`) and checks that the steps of
its second quarter end one period ``P`` apart, to 1e-9 of the time: the first steps may
still be settling, and those after the middle are simulated but not used, since the
steps beyond the prefix, which the prefix lacks, could have slowed them. Then the last
step ends at ``end(m) + (n_steps - m - 1) x P`` for the last checked step ``m``. Where
the check fails, or the result would beat the busiest link's bytes at its bandwidth (a
bound no run can beat), it returns None and the caller simulates the whole ring, or
refuses it.

This is an extension, not a proof. Each transfer does not repeat: ranks drift up to a
dozen steps apart (in a 2:1 RoCE fabric under hashed ECMP), and only the steps' last
arrivals keep the pace, the one the most loaded link sets once it never idles. It is
taken only on a uniform fabric (:func:`uniform_links`: every link the ring crosses has
the bandwidth and latency of every other link of its kind), where only placement and
routing vary. One slow link is not: its delay travels one rank per step around the ring,
so the pace changes only after a whole lap, far beyond the prefix (a NIC cable 1 ms
slower on ``h100-ib-fat-tree`` extended to 7.15 ms where the whole ring takes 9.92 ms at
64 GPUs, 7.26 against 17.87 at 128: issue 29). On the
shipped RoCE fat-tree with hashed ECMP and a random placement, at 64, 128 and 256 GPUs
with NCCL's 16 channels, the extension equals the whole ring's simulation to 1e-14
(``tests/sim/test_periodic.py`` holds it there to 1e-12 at 64 GPUs and shows a ring it
refuses); predictions take it only where the whole ring is more than one schedule may
hold, so it never replaces a simulated answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
import numpy.typing as npt

from simcoll.sim.engine import SimulationResult

__all__ = ["PERIOD_TOLERANCE", "Periodic", "extend_periodic", "uniform_links"]

FloatArray = npt.NDArray[np.float64]

PERIOD_TOLERANCE = 1e-9
"""How far from one period, relative to the time, a step's transfers may be."""


@dataclass(frozen=True)
class Periodic:
    """A ring's time from its first steps: what a row needs."""

    time_s: float
    period_s: float
    n_steps: int  # of the whole ring
    steps_simulated: int  # of the prefix
    link_bytes: FloatArray  # the whole ring's, on each link (every step moves the same)
    prefix: SimulationResult


def extend_periodic(
    prefix: SimulationResult, n_steps: int, capacity_bytes_per_s: FloatArray
) -> Periodic | None:
    """The whole ring's time from the engine's ``prefix`` of its first steps, or None if
    they do not keep one pace (see the module). ``capacity_bytes_per_s`` is each link's,
    in the order of ``prefix.links``.

    ``prefix.schedule`` holds the same number of transfers per step, in step order. The
    steps compared are those of its second quarter: at least three (twelve steps).

    >>> from simcoll.algorithms.ring import ring_prefix
    >>> from simcoll.core.collectives import Collective
    >>> from simcoll.sim.engine import simulate
    >>> from simcoll.topology import ring
    >>> topo = ring(7, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    >>> first = ring_prefix(Collective.ALLGATHER, 7, 7_000_000, 3)
    >>> round(simulate(topo, first).time_s * 1e3, 9)  # 3 steps of 1 MB at 1 GB/s
    3.0
    >>> first = ring_prefix(Collective.ALLREDUCE, 7, 7_000_000, 12)  # 12 of 12 steps
    >>> whole = extend_periodic(simulate(topo, first), 12, np.full(14, 1e9))
    >>> round(whole.time_s * 1e3, 9), round(whole.period_s * 1e3, 9)
    (12.0, 1.0)
    """
    k = n_steps_of(prefix)
    first, middle = k // 4, k // 2  # the steps compared: past the start, before the end
    if middle - first < 3 or k > n_steps:
        return None
    per = prefix.schedule.n_transfers // k
    ends_s = np.asarray(prefix.end_s).reshape(k, per).max(axis=1)[first:middle]
    period_s = float(ends_s[-1] - ends_s[0]) / (len(ends_s) - 1)
    if np.abs(np.diff(ends_s) - period_s).max() > PERIOD_TOLERANCE * float(ends_s[-1]):
        return None
    time_s = float(ends_s[-1]) + (n_steps - middle) * period_s
    link_bytes = prefix.link_bytes * (n_steps / k)
    if (link_bytes > time_s * capacity_bytes_per_s * (1 + PERIOD_TOLERANCE)).any():
        return None  # faster than the busiest link could carry its bytes
    return Periodic(
        time_s=time_s,
        period_s=period_s,
        n_steps=n_steps,
        steps_simulated=k,
        link_bytes=link_bytes,
        prefix=prefix,
    )


def n_steps_of(prefix: SimulationResult) -> int:
    """How many ring steps a prefix holds: its transfers over one step's, which is every
    rank on every channel with every piece."""
    s = prefix.schedule
    per = s.n_ranks * s.n_channels * int(s.params.get("n_chunks", 1))
    if s.n_transfers % per:
        raise ValueError(f"{s.n_transfers} transfers are not whole steps of {per}")
    return s.n_transfers // per


def uniform_links(topology: nx.DiGraph[str], links: npt.NDArray[np.int64]) -> str | None:
    """None if every link of ``links`` (indices into the graph's edges) has the bandwidth
    and latency of every other of its kind between nodes of the same kinds (every NIC's
    cable to its leaf alike, every leaf's uplink alike...); else why not, naming one.

    >>> from simcoll.topology import switch_star
    >>> star = switch_star(3, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    >>> uniform_links(star, np.arange(6)) is None
    True
    >>> star.edges["gpu2", "sw"]["latency_s"] = 2e-6
    >>> print(uniform_links(star, np.arange(6)))
    link gpu2 -> sw: 1e+09 B/s, 2e-06 s, where another like it has 1e+09 B/s, 1e-06 s
    """
    edges = list(topology.edges)
    kinds = topology.nodes
    seen: dict[tuple[object, object, object], tuple[float, float]] = {}
    for index in np.unique(links).tolist():
        u, v = edges[index]
        attrs = topology.edges[u, v]
        facts = (float(attrs["bandwidth_bytes_per_s"]), float(attrs["latency_s"]))
        first = seen.setdefault((attrs["kind"], kinds[u]["kind"], kinds[v]["kind"]), facts)
        if first != facts:
            return (f"link {u} -> {v}: {facts[0]:g} B/s, {facts[1]:g} s, where another like "
                    f"it has {first[0]:g} B/s, {first[1]:g} s")  # fmt: skip
    return None
