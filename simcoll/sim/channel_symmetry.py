r"""Channels that are copies of each other: simulate one channel of each family, exactly.

NCCL's plan on a rail-optimized cluster builds its channels in families: channel ``c``
of a family enters every server through NIC ``c`` and is channel 0 of that family with
every GPU's local index shifted by ``c`` (``plan show`` prints 16 trees that are 2
families of 8). Where the fabric looks the same after that shift, every copy of a
transfer moves exactly as its representative does, so only the representatives need
simulating: the argument and the check are those of :mod:`simcoll.sim.symmetry` (an
equitable partition of the links by the copies' routes), with the copies given by rank
permutations between channels instead of rank shifts.

:func:`channel_symmetric` finds the families in any schedule, from the schedule itself:
channel ``b`` is a copy of channel ``a`` when the ``i``-th transfer of ``b`` is the
``i``-th of ``a`` under one rank permutation, with the same bytes, operation and
dependencies (position by position). Each family must have as many channels, and its
``k``-th copy the same permutation in every family. The result runs on
:func:`simcoll.sim.symmetry.simulate_symmetric`, which checks the routes and returns
None where the fabric breaks the symmetry (then simulate the schedule itself).

>>> from simcoll.algorithms.tree import tree_allreduce
>>> from simcoll.plan.trees import Tree
>>> chain = Tree(root=0, parent=(-1, 0, 1, 2), children=((1,), (2,), (3,), ()))
>>> shifted = Tree(root=1, parent=(3, -1, 1, 2), children=((), (2,), (3,), (0,)))
>>> schedule = tree_allreduce(4, 4096, trees=[chain, shifted, chain, shifted])
>>> sym = channel_symmetric(schedule)
>>> sym.channel_copies, sym.representatives.n_transfers, schedule.n_transfers
(4, 6, 24)
>>> sym.channel_maps.tolist()  # copies 1 and 3 shift every rank by one
[[0, 1, 2, 3], [1, 2, 3, 0], [0, 1, 2, 3], [1, 2, 3, 0]]
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt

from simcoll.core.schedule import ROUND_UP_TOLERANCE, Schedule, _check_transfers, _frozen
from simcoll.sim.symmetry import SymmetricSchedule

__all__ = ["channel_symmetric"]

IntArray = npt.NDArray[np.int64]


def channel_symmetric(
    schedule: Schedule, *, round_up_pieces: bool = False
) -> SymmetricSchedule | None:
    """``schedule`` as representatives (one channel per family) and channel copies.

    None when it has a single channel, in-network endpoints, or channels that do not fall
    into families of equal size whose ``k``-th copies share one rank permutation. Pieces
    one byte apart (a buffer that does not split evenly) make channels differ; with
    ``round_up_pieces`` every piece then moves the largest piece's bytes, where pieces
    hold at least 1,000 B: the engine's own timing of such pieces
    (:attr:`~simcoll.core.schedule.Schedule.timed_bytes`), so the same times.
    """
    n = schedule.n_ranks
    if schedule.n_channels < 2 or schedule.n_endpoints != n:
        return None
    sizes = schedule.piece_bytes
    rounded = bool(len(sizes)) and int(sizes.min()) != int(sizes.max())
    if rounded:
        if not round_up_pieces or int(sizes.min()) * ROUND_UP_TOLERANCE < 1:
            return None
        largest = np.full(len(sizes), int(sizes.max()), dtype=np.int64)
        schedule = replace(schedule, piece_bytes=_frozen(largest))
    channel = schedule.channel
    members = [np.flatnonzero(channel == c) for c in range(schedule.n_channels)]
    position = np.empty(schedule.n_transfers, dtype=np.int64)
    for index in members:
        position[index] = np.arange(len(index))
    deps = _deps_by_position(schedule, position)
    if deps is None:
        return None
    transfer_bytes = schedule.transfer_bytes
    families: dict[int, list[tuple[int, IntArray]]] = {}
    for c, index in enumerate(members):
        for rep, copies in families.items():
            perm = _image(schedule, transfer_bytes, members[rep], index, deps)
            if perm is not None:
                copies.append((c, perm))
                break
        else:
            families[c] = [(c, np.arange(n, dtype=np.int64))]
    aligned = _aligned(families)
    if aligned is None:
        return None
    maps, copy_channels = aligned
    kept = np.sort(np.concatenate([members[r] for r in families]))
    reps = _subset(schedule, kept)
    table = np.zeros((schedule.n_channels, len(maps)), dtype=np.int64)
    for r, row in copy_channels.items():
        table[r] = row
    return SymmetricSchedule(
        representatives=reps,
        period_ranks=n,
        channel_copies=len(maps),
        dep_shift=_frozen(np.zeros(len(reps.deps), dtype=np.int64)),
        channel_maps=_frozen(np.array(maps, dtype=np.int64)),
        copy_channels=_frozen(table),
        rounded_up=rounded,
    )


def _deps_by_position(schedule: Schedule, position: IntArray) -> IntArray | None:
    """Every dependency as a position in its own channel (aligned with ``deps``); None if
    one waits for a transfer of another channel (then channels are not independent)."""
    indptr, deps, channel = schedule.deps_indptr, schedule.deps, schedule.channel
    owner = np.repeat(np.arange(schedule.n_transfers), np.diff(indptr))
    if np.any(channel[deps] != channel[owner]):
        return None
    return position[deps]


def _image(
    schedule: Schedule, transfer_bytes: IntArray, a: IntArray, b: IntArray, deps: IntArray
) -> IntArray | None:
    """The rank permutation taking channel ``a``'s transfers onto ``b``'s, position by
    position, with equal bytes, operations and dependencies; None if there is none."""
    s = schedule
    if len(a) != len(b):
        return None
    if not (
        np.array_equal(transfer_bytes[a], transfer_bytes[b]) and np.array_equal(s.op[a], s.op[b])
    ):
        return None
    indptr = s.deps_indptr
    if not np.array_equal(np.diff(indptr)[a], np.diff(indptr)[b]):
        return None
    if not np.array_equal(_csr_rows(indptr, deps, a)[1], _csr_rows(indptr, deps, b)[1]):
        return None
    keys = np.concatenate([s.src[a], s.dst[a]])
    values = np.concatenate([s.src[b], s.dst[b]])
    perm = np.full(s.n_ranks, -1, dtype=np.int64)
    perm[keys] = values
    if not np.array_equal(perm[keys], values) or np.any(perm < 0):
        return None
    if len(np.unique(perm)) != s.n_ranks:
        return None
    return perm


def _aligned(
    families: dict[int, list[tuple[int, IntArray]]],
) -> tuple[list[IntArray], dict[int, IntArray]] | None:
    """One list of permutations for every family (copy k of each uses the k-th) and,
    per family, the channel of each copy; None unless the families match."""
    sizes = {len(copies) for copies in families.values()}
    if len(sizes) != 1 or sizes == {1}:
        return None
    first = next(iter(families.values()))
    maps = [perm for _, perm in first]
    slots: dict[bytes, list[int]] = {}
    for k, perm in enumerate(maps):
        slots.setdefault(perm.tobytes(), []).append(k)
    copy_channels: dict[int, IntArray] = {}
    for rep, copies in families.items():
        free = {key: list(ks) for key, ks in slots.items()}
        row = np.full(len(maps), -1, dtype=np.int64)
        for c, perm in copies:
            ks = free.get(perm.tobytes())
            if not ks:
                return None
            row[ks.pop(0)] = c
        copy_channels[rep] = row
    return maps, copy_channels


def _subset(schedule: Schedule, kept: IntArray) -> Schedule:
    """The transfers ``kept`` (sorted) as a schedule, dependencies renumbered."""
    s = schedule
    new_index = np.full(s.n_transfers, -1, dtype=np.int64)
    new_index[kept] = np.arange(len(kept))
    pieces_indptr, pieces = _csr_rows(s.pieces_indptr, s.pieces, kept)
    deps_indptr, deps = _csr_rows(s.deps_indptr, s.deps, kept)
    rep = replace(
        s,
        src=_frozen(s.src[kept]),
        dst=_frozen(s.dst[kept]),
        op=_frozen(s.op[kept]),
        channel=_frozen(s.channel[kept]),
        pieces_indptr=_frozen(pieces_indptr),
        pieces=_frozen(pieces),
        deps_indptr=_frozen(deps_indptr),
        deps=_frozen(new_index[deps]),
    )
    _check_transfers(rep)
    return rep


def _csr_rows(indptr: IntArray, values: IntArray, rows: IntArray) -> tuple[IntArray, IntArray]:
    """Rows ``rows`` of a CSR list, as a CSR list."""
    lengths = np.diff(indptr)[rows]
    out_indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    starts = np.repeat(indptr[rows], lengths)
    within = np.arange(int(out_indptr[-1]), dtype=np.int64) - np.repeat(out_indptr[:-1], lengths)
    return out_indptr, values[starts + within]
