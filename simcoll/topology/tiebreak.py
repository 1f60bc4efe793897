"""How routing breaks ties, shared by the router and its array form: the rounding that
makes equal-cost latencies compare equal, the natural order of names, and the seeded hash
of ECMP.

>>> rounded_s(1e-6 + 2e-6) == rounded_s(3e-6)
True
>>> sorted(["spine10", "spine2", "leaf1"], key=natural_key)
['leaf1', 'spine2', 'spine10']
>>> hash_index("0/gpu0/gpu9", "leaf3", 4) == hash_index("0/gpu0/gpu9", "leaf3", 4)
True
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from typing import overload

import numpy as np
import numpy.typing as npt

__all__ = ["STEPS_PER_S", "hash_index", "natural_key", "rounded_s"]

FloatArray = npt.NDArray[np.float64]

#: Latency sums of equal-cost paths may differ in the last bits when their links are added
#: in another order; they compare rounded to a whole femtosecond.
STEPS_PER_S = 1e15
_STEPS_PER_S = STEPS_PER_S


@overload
def rounded_s(seconds: float) -> float: ...
@overload
def rounded_s(seconds: FloatArray) -> FloatArray: ...
def rounded_s(seconds: float | FloatArray) -> float | FloatArray:
    """``seconds`` rounded to a whole femtosecond (half to even), the same bits for a float
    as for each item of an array.

    >>> rounded_s(1.0000000000000004e-06)
    1e-06
    >>> rounded_s(np.array([2.5e-15, 3.5e-15, 1e300])).tolist()
    [2e-15, 4e-15, inf]
    >>> rounded_s(1e300)
    inf
    """
    if type(seconds) is float:  # the router's many sums: the quickest test first
        scaled = seconds * _STEPS_PER_S
        try:
            return round(scaled) / _STEPS_PER_S
        except (OverflowError, ValueError):  # inf or nan stays so, as in numpy
            return scaled / _STEPS_PER_S
    if isinstance(seconds, np.ndarray):
        with np.errstate(over="ignore"):  # an absurd latency overflows to inf, as a float
            result: FloatArray = np.rint(seconds * _STEPS_PER_S) / _STEPS_PER_S
        return result
    scaled = seconds * _STEPS_PER_S
    if not math.isfinite(scaled):  # an infinite latency stays infinite, as in numpy
        return scaled / _STEPS_PER_S
    return round(scaled) / _STEPS_PER_S


@functools.lru_cache(maxsize=1 << 18)
def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders the digit runs of a name as numbers: ``spine2 < spine10``.

    >>> natural_key("nic10") > natural_key("nic2")
    True
    """
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part
    )


def hash_index(key: str, node: str, n_choices: int) -> int:
    """A choice in 0..n_choices-1, the same in every process (unlike ``hash``).

    >>> hash_index("0/gpu0/gpu9", "leaf3", 1)
    0
    """
    digest = hashlib.blake2b(f"{key}/{node}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % n_choices
