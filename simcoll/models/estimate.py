"""What a sweep will cost, said before it starts.

The engine's cost grows with the number of transfers it simulates. :func:`estimate_point`
counts them from the algorithm's structure (no schedule is built, so the count is instant
even for 16,384 ranks) and turns them into seconds and bytes with two constants measured
on a 2-core machine, :data:`SECONDS_PER_TRANSFER` and :data:`BYTES_PER_TRANSFER`. Ring
all-reduce, all-gather and reduce-scatter usually take the exact symmetric path
(:mod:`simcoll.sim.symmetry`), which simulates one representative rank instead of n; the
estimate assumes so. It is an order of magnitude, not a promise: its purpose is to stop a
sweep that would run for days or exhaust memory before it starts.

>>> e = estimate_point("alltoall", "direct", n_ranks=1024, size_bytes=2**30)
>>> e.transfers, round(e.seconds)  # 1024 x 1023 pairs, 1 KiB each: one piece; x 60 us
(1047552, 63)
>>> # one representative rank, 2 x 7 steps, 128 MiB blocks cut into 64 pieces
>>> estimate_point("allreduce", "ring", n_ranks=8, size_bytes=2**30).transfers
896
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simcoll.core.collectives import Collective

__all__ = [
    "BYTES_PER_TRANSFER",
    "SECONDS_PER_TRANSFER",
    "PointEstimate",
    "estimate_point",
]

#: Wall seconds per simulated transfer on the general path: measured 25-116 us on a
#: 2-core machine (64-rank tree, ring and all-to-all on a fat tree); the upper end is used.
SECONDS_PER_TRANSFER = 60e-6
#: Peak memory per simulated transfer: about 0.5 KiB measured (a 64-rank ring all-reduce
#: of 64,512 transfers grew the process by 30 MiB); doubled for headroom.
BYTES_PER_TRANSFER = 1024
#: simcoll's default piece size and most pieces per block (:mod:`simcoll.prediction`).
_PIECE_BYTES = 512 * 2**10
_MAX_PIECES = 64


@dataclass(frozen=True)
class PointEstimate:
    """Transfers one point simulates, and what they cost."""

    transfers: int

    @property
    def seconds(self) -> float:
        """Wall seconds, at :data:`SECONDS_PER_TRANSFER`."""
        return self.transfers * SECONDS_PER_TRANSFER

    @property
    def peak_bytes(self) -> int:
        """Peak memory, at :data:`BYTES_PER_TRANSFER`."""
        return self.transfers * BYTES_PER_TRANSFER


def estimate_point(
    collective: Collective | str,
    algorithm: str,
    *,
    n_ranks: int,
    size_bytes: int,
    n_chunks: int | None = None,
    n_channels: int = 1,
) -> PointEstimate:
    """Estimate the transfers of one simulated collective call (see the module docstring).

    Transfers are counted per piece (``n_chunks`` pieces per block and channel, by
    default blocks cut into about 512 KiB, at most 64) from the algorithm's shape: rings
    move a piece per rank per step; all-pairs algorithms (direct, pairwise, bruck,
    halving-doubling) at most one per rank pair; trees and in-network algorithms about
    two per rank. The symmetric path simulates one rank's share of a ring.
    """
    c = collective if isinstance(collective, Collective) else Collective.parse(collective)
    n = max(1, n_ranks)
    block_bytes = size_bytes / max(1, c.n_blocks(n))
    pieces = n_chunks or min(_MAX_PIECES, max(1, math.ceil(block_bytes / _PIECE_BYTES)))
    per = pieces * max(1, n_channels)
    if n == 1:
        return PointEstimate(0)
    if algorithm == "ring":
        steps = {"allreduce": 2 * (n - 1), "allgather": n - 1, "reducescatter": n - 1}
        if c.value in steps:  # the symmetric path simulates one representative rank
            return PointEstimate(steps[c.value] * per)
        return PointEstimate((n - 1) * per)  # a chain: every rank but the last sends
    if algorithm in ("tree", "double_binary_tree", "msb_tree", "hierarchical", "nvls", "sharp"):
        return PointEstimate(2 * n * per)
    if c is Collective.SENDRECV:
        return PointEstimate(n * per)
    if c.is_rooted:
        return PointEstimate((n - 1) * per)
    return PointEstimate(n * (n - 1) * per * (2 if c is Collective.ALLREDUCE else 1))
