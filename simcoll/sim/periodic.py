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
arrivals keep the pace, the one the most loaded link sets once it never idles. On the
shipped RoCE fat-tree with hashed ECMP and a random placement, at 64, 128 and 256 GPUs
with NCCL's 16 channels, the extension equals the whole ring's simulation to 1e-14
(``tests/sim/test_periodic.py`` holds it there to 1e-12 at 64 GPUs and shows a ring it
refuses); predictions take it only where the whole ring is more than one schedule may
hold, so it never replaces a simulated answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from simcoll.sim.engine import SimulationResult

__all__ = ["PERIOD_TOLERANCE", "Periodic", "extend_periodic"]

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
