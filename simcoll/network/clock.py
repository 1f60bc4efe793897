"""The simulated clock's grid: every time the fabric and the engine compute is a whole
number of ticks, so that a run is the same run wherever it starts.

A fluid network amplifies rounding: the rates of flows that share a link change whenever
one of them starts or ends, so a difference in the last bit of one finish time moves
later ones, and on a busy fabric it grows, roughly a hundredfold every 200 us of a
16-GPU broadcast across two RoCE servers (from 1e-15 s to 0.3 % of the call). Float sums
round differently at different clock values, so the same call started at 0 (``predict``)
and started after its launch cost (a workload's execution graph) used to end up to 0.5 %
apart. Rounding every computed time to a tick of 2^-50 s (about 0.9 fs) makes the sums
exact: a time on the grid plus a duration rounded up to the grid is on the grid, exactly, as
long as it is below 2^53 ticks (8 s), so shifting a run by a whole number of ticks
shifts every time it computes by exactly that much. Past 8 s the grid is coarser than
a float's spacing and rounding to it does nothing; times stay deterministic.

>>> on_grid(1.2 * TICK_S) == 2 * TICK_S, on_grid(1e-6) * 2**50 % 1  # whole ticks, up
(True, 0.0)
>>> t, d = on_grid(3e-6), on_grid(7e-9)
>>> (t + d) - t == d, (t + 1.0 + d) - (t + 1.0) == d  # sums on the grid are exact
(True, True)
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["SAME_INSTANT_TICKS", "TICK_S", "instant_ends_s", "on_grid", "on_grid_array"]

#: One tick of the simulated clock, in seconds: 2^-50 s, about 0.89 fs.
TICK_S = 2.0**-50
_TICKS_PER_S = 2.0**50


def on_grid(time_s: float) -> float:
    """``time_s`` rounded up to a whole number of ticks: a duration on the grid is never
    shorter than the one computed, so no flow moves faster than its rate."""
    return math.ceil(time_s * _TICKS_PER_S) * TICK_S


def on_grid_array(times_s: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """:func:`on_grid` of every element.

    >>> on_grid_array([0.0, 1.4 * TICK_S, 2.6 * TICK_S]).tolist() == [0.0, 2 * TICK_S, 3 * TICK_S]
    True
    """
    return np.ceil(np.asarray(times_s, dtype=np.float64) * _TICKS_PER_S) * TICK_S


#: Events at most this many ticks after the clock happen at its instant: two times equal
#: in exact arithmetic, reached by different sums, round at most a tick apart.
SAME_INSTANT_TICKS = 2
#: Past 2^53 ticks (8 s) a float's spacing is coarser than a tick: the instant then spans
#: a few of those spacings, relative to the clock (4 x 2^-53 is 4 floats apart).
_SAME_INSTANT_RELATIVE = 4.0 * 2.0**-53


def instant_ends_s(now_s: float) -> float:
    """The last time that belongs to the instant ``now_s``: two ticks later (a few float
    spacings past 8 s). On the grid, this depends on nothing but the ticks between the
    events, not on the clock's value, below 4 s.

    >>> instant_ends_s(0.0) == 2 * TICK_S, instant_ends_s(1e3) > 1e3 + 2 * TICK_S
    (True, True)
    """
    return max(now_s + SAME_INSTANT_TICKS * TICK_S, now_s * (1.0 + _SAME_INSTANT_RELATIVE))
