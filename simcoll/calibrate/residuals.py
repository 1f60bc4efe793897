"""One definition of a measured point's error and of the median error, for ``calibrate``
(what it prints and writes in its ``[fit]`` table) and ``compare`` (its summary) alike.

A point's error is signed and relative, ``simulated / measured - 1`` (positive: the
simulator is slow); the median |error| of an even number of points is the mean of the
middle two, as :func:`statistics.median` has it.

>>> errors = [time_error(1.0, s) for s in (0.9, 1.05, 1.2, 1.3)]
>>> [round(e, 6) for e in errors]
[-0.1, 0.05, 0.2, 0.3]
>>> round(median_abs_error(errors), 6)  # |errors| 0.05, 0.1, 0.2, 0.3: (0.1 + 0.2) / 2
0.15
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

__all__ = ["max_abs_error", "median_abs_error", "time_error"]


def time_error(measured_s: float, simulated_s: float) -> float:
    """Signed relative error of a simulated time: ``simulated / measured - 1``."""
    return simulated_s / measured_s - 1


def median_abs_error(errors: Iterable[float]) -> float:
    """The median of the errors' absolute values (the mean of the middle two of an even
    count).

    Raises
    ------
    statistics.StatisticsError
        With no errors.
    """
    return statistics.median(abs(e) for e in errors)


def max_abs_error(errors: Iterable[float]) -> float:
    """The largest absolute error.

    >>> max_abs_error([0.1, -0.3, 0.2])
    0.3
    """
    return max(abs(e) for e in errors)
