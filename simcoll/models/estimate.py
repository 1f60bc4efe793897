"""What a sweep will cost, said before it starts.

The engine's cost grows with the number of transfers it simulates. :func:`estimate_point`
counts them from the algorithm's structure (no schedule is built, so the count is instant
even for 16,384 ranks) and turns them into seconds and bytes with constants measured by
``simcoll bench`` on a 2-core machine (each case prints its estimate beside its wall
time). Ring all-reduce, all-gather and reduce-scatter take the exact symmetric path
(:mod:`simcoll.sim.symmetry`) where the fabric allows, which simulates one period of
ranks instead of all n: the caller says which path will run (``symmetric``;
:mod:`simcoll.scenarios.cost` asks the symmetry check itself, as the run will). With
ECMP collisions on a large fat-tree the check fails and every transfer is simulated; an
estimate that assumed the symmetric path there was 4x short at 4,096 GPUs and let a
30,000-GPU point through the memory check. It is an order of magnitude, not a promise:
its purpose is to stop a sweep that would run for days or exhaust memory before it starts.

>>> e = estimate_point("alltoall", "direct", n_ranks=1024, size_bytes=2**30)
>>> e.transfers, round(e.seconds, 1)  # 1024 x 1023 pairs, 1 KiB each: one piece; x 4 us
(1047552, 4.2)
>>> # the symmetric path: one period (here 1 rank), 2 x 7 steps, 128 MiB blocks in 64 pieces
>>> estimate_point("allreduce", "ring", n_ranks=8, size_bytes=2**30).transfers
896
>>> # the general path: every rank's transfers
>>> estimate_point("allreduce", "ring", n_ranks=8, size_bytes=2**30, symmetric=False).transfers
7168
>>> # over one schedule's 2^24 transfers: its first 32 steps, extended at their pace
>>> estimate_point("allreduce", "ring", n_ranks=1024, size_bytes=2**30, n_channels=16,
...                symmetric=False).transfers  # 1,024 ranks x 32 steps x 16 channels
524288
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from simcoll.algorithms.ring import PREFIX_STEPS
from simcoll.core.collectives import Collective
from simcoll.core.limits import MAX_TRANSFERS
from simcoll.plan.tuning import ring_chunks

__all__ = [
    "BYTES_PER_TRANSFER",
    "SECONDS_PER_BUILD",
    "SECONDS_PER_REPRESENTATIVE",
    "SECONDS_PER_TRANSFER",
    "PointEstimate",
    "estimate_point",
]

#: Wall seconds per simulated transfer on the general path: built, prepared and run on
#: the compiled loop. Measured on the project's 2-core machine (2026-11-27): 3.5 us on a
#: 128-GPU ``a100-roce-2to1`` ring all-reduce of 1 MiB (585,216 transfers in 2.06 s, two
#: protocols), of which 2.2 us building the schedule; 4 us is used (20 us before the
#: estimate followed the path that runs, which made estimates 3-30x long).
SECONDS_PER_TRANSFER = 4e-6
#: Wall seconds per transfer of a schedule built whole but run folded (the channel-copies
#: path builds every channel, then runs one of each family): the build share above for a
#: ring (2.2 us), less for the trees' vectorised builders; 1.5 us is used.
SECONDS_PER_BUILD = 1.5e-6
#: Wall seconds per representative transfer on the symmetric path: 2.0 us measured on a
#: 1,024-GPU ``h100-ib-fat-tree`` ring all-reduce of 1 MiB with LL (65,472
#: representatives in 0.13 s besides its routes), about 1.8 us on a 16,384-GPU
#: ``h100-rail-optimized`` one of 1 GiB (two protocols, 8.4 million each); 2 us is used.
#: Routing the copies is counted apart (:mod:`simcoll.prediction.call_cost`).
SECONDS_PER_REPRESENTATIVE = 2e-6
#: Peak memory per simulated transfer: 0.4 KiB measured on a ring (256 GPUs, 130,560
#: transfers: 98 MiB), 1.1 KiB on alltoall-1024 (1.05 M transfers, 1,128 MiB; 2.1 GiB
#: before its routes were found per source); 2 KiB is used.
BYTES_PER_TRANSFER = 2048
#: simcoll's default piece size and most pieces per block (:mod:`simcoll.prediction`).
#: Steps of a ring collective on n ranks.
_RING_STEPS: dict[str, Callable[[int], int]] = {
    "allreduce": lambda n: 2 * (n - 1),
    "allgather": lambda n: n - 1,
    "reducescatter": lambda n: n - 1,
}
_PIECE_BYTES = 512 * 2**10
_MAX_PIECES = 64


@dataclass(frozen=True)
class PointEstimate:
    """Transfers one point simulates, and what they cost."""

    transfers: int
    seconds_per_transfer: float = SECONDS_PER_TRANSFER
    other_s: float = 0.0  # what the run spends besides its transfers (routing copies)

    @property
    def seconds(self) -> float:
        """Wall seconds: :data:`SECONDS_PER_TRANSFER` each on the general path,
        :data:`SECONDS_PER_REPRESENTATIVE` on the symmetric one, plus ``other_s``."""
        return self.transfers * self.seconds_per_transfer + self.other_s

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
    symmetric: bool = True,
    period_ranks: int = 1,
    gpus_per_node: int = 0,
) -> PointEstimate:
    """Estimate the transfers of one simulated collective call (see the module docstring).

    Transfers are counted per piece (``n_chunks`` pieces per block and channel, by
    default blocks cut into about 512 KiB, at most 64) from the algorithm's shape: rings
    move a piece per rank per step; all-pairs algorithms (direct, pairwise, bruck,
    halving-doubling) at most one per rank pair; trees and in-network algorithms about
    two per rank, and NVLS cuts every shard (one per rank; NVLS-tree: two per local rank
    of a server of ``gpus_per_node``) into those pieces. With ``symmetric`` (the caller's
    knowledge that the symmetric path will run, with ``period_ranks`` ranks per period), a
    ring all-reduce, all-gather or reduce-scatter costs one period's share on one channel
    (the other channels are its copies), at :data:`SECONDS_PER_REPRESENTATIVE` each;
    otherwise every rank's.
    """
    c = collective if isinstance(collective, Collective) else Collective.parse(collective)
    n = max(1, n_ranks)
    block_bytes = size_bytes / max(1, c.n_blocks(n))
    pieces = n_chunks or min(_MAX_PIECES, max(1, math.ceil(block_bytes / _PIECE_BYTES)))
    if algorithm == "ring" and c.value in _RING_STEPS and not n_chunks:  # as predict cuts
        pieces = ring_chunks(c, n, size_bytes, max(1, n_channels))
    per = pieces * max(1, n_channels)
    if n == 1:
        return PointEstimate(0)
    if algorithm == "ring":
        steps = {name: count(n) for name, count in _RING_STEPS.items()}
        if c.value in steps and symmetric:  # one period of ranks, one channel: the rest copy
            reps = max(1, period_ranks) * steps[c.value] * pieces
            return PointEstimate(reps, SECONDS_PER_REPRESENTATIVE)
        if c.value in steps:  # the general path: every rank sends every step
            whole = n * steps[c.value] * per
            if whole > MAX_TRANSFERS:  # its first steps, extended (simcoll.sim.periodic)
                return PointEstimate(n * min(steps[c.value], PREFIX_STEPS) * per)
            return PointEstimate(whole)
        return PointEstimate((n - 1) * per)  # a chain: every rank but the last sends
    if algorithm in ("nvls", "nvls_tree"):  # per piece: every GPU up and down, the heads
        g = max(1, min(gpus_per_node or n, n))
        shards, heads = (n, 1) if algorithm == "nvls" else (2 * g, n // g)
        return PointEstimate(shards * per * (2 * n + 4 * heads))
    if algorithm in ("tree", "double_binary_tree", "msb_tree", "hierarchical", "sharp",
                     "collnet_chain"):  # fmt: skip
        return PointEstimate(2 * n * per)
    if algorithm == "collnet_direct":  # per piece of each head's: every GPU up and back
        return PointEstimate(2 * n * per * max(1, min(gpus_per_node or n, n)))
    if c is Collective.SENDRECV:
        return PointEstimate(n * per)
    if c.is_rooted:
        return PointEstimate((n - 1) * per)
    return PointEstimate(n * (n - 1) * per * (2 if c is Collective.ALLREDUCE else 1))
