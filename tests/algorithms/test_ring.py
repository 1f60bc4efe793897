"""Ring prefixes: the first steps of a ring, transfer for transfer, and nothing after."""

from __future__ import annotations

import numpy as np
import pytest

from simcoll.algorithms.ring import (
    ring_allgather,
    ring_allreduce,
    ring_prefix,
    ring_reducescatter,
)
from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError

RINGS = [[0, 2, 4, 1, 3], [3, 1, 4, 2, 0]]  # two channels, neither in rank order


@pytest.mark.parametrize(
    ("collective", "whole", "taken"),
    [(Collective.ALLREDUCE, ring_allreduce, k) for k in (1, 3, 4, 6, 8)]
    + [(Collective.REDUCESCATTER, ring_reducescatter, k) for k in (1, 4)]
    + [(Collective.ALLGATHER, ring_allgather, k) for k in (2, 4)],
)
def test_a_prefix_is_the_first_steps_of_the_whole(collective, whole, taken):
    # 5 ranks, 2 channels, 3 pieces each: a step is 5 x 2 x 3 = 30 transfers, and a prefix
    # of k steps is the whole schedule's first 30 k, dependencies included (all-reduce's
    # sixth step is the all-gather's second).
    full = whole(5, 6000, n_chunks=3, rings=RINGS, max_in_flight=2)
    first = ring_prefix(collective, 5, 6000, taken, n_chunks=3, rings=RINGS, max_in_flight=2,
                        n_channels=2)  # fmt: skip
    m = 30 * taken
    assert first.n_transfers == m
    for column in ("src", "dst", "op", "channel"):
        assert np.array_equal(getattr(first, column), getattr(full, column)[:m])
    assert np.array_equal(first.transfer_bytes, full.transfer_bytes[:m])
    assert np.array_equal(first.deps_indptr, full.deps_indptr[: m + 1])
    assert np.array_equal(first.deps, full.deps[: full.deps_indptr[m]])
    assert (first.max_in_flight, first.params) == (full.max_in_flight, full.params)


@pytest.mark.parametrize(
    ("collective", "n_steps", "message"),
    [(Collective.ALLREDUCE, 0, "1 to 8 steps, not 0"), (Collective.ALLGATHER, 5, "1 to 4 steps"),
     (Collective.BROADCAST, 1, "broadcast has no ring steps")],
)  # fmt: skip
def test_a_prefix_out_of_range_is_refused(collective, n_steps, message):
    with pytest.raises(ScheduleError, match=message):
        ring_prefix(collective, 5, 6000, n_steps)


def _phase_one_by_one(b, *, op, block_at, rings, n_chunks, after, n_steps=None):  # type: ignore[no-untyped-def]
    """The ring phase as its docstring states it, one ScheduleBuilder.add at a time: at
    step s the rank at position i of channel c's ring sends block ring[(i + block_at - s)
    mod n], piece (block x C + c) x K + chunk, after what last arrived at it."""
    n, n_channels, last = b.n_ranks, len(rings), dict(after)
    for step in range(n - 1 if n_steps is None else n_steps):
        arrived = {}
        for chunk in range(n_chunks):
            for position in range(n):
                for channel, ring in enumerate(rings):
                    rank, successor = ring[position], ring[(position + 1) % n]
                    block = ring[(position + block_at - step) % n]
                    dep = last.get((rank, channel, chunk))
                    arrived[successor, channel, chunk] = b.add(
                        src=rank, dst=successor,
                        pieces=[(block * n_channels + channel) * n_chunks + chunk], op=op,
                        channel=channel, deps=() if dep is None else (dep,))  # fmt: skip
        last = arrived
    return last


@pytest.mark.parametrize(("n_chunks", "rings"), [(1, [[0, 1, 2, 3, 4]]), (3, RINGS), (2, None)])
def test_the_vectorised_phases_add_what_one_transfer_at_a_time_adds(n_chunks, rings, monkeypatch):
    # The all-reduce's two phases (the all-gather waits on the reduce-scatter's last
    # arrivals) built with numpy, and built by the loop the phase's docstring states: the
    # same transfers, pieces and dependencies.
    from simcoll.algorithms import ring as ring_module  # noqa: PLC0415 - the module patched

    def build():  # type: ignore[no-untyped-def]
        return ring_allreduce(5, 5 * 2 * 3 * 64, n_channels=2, n_chunks=n_chunks,
                              rings=rings, max_in_flight=2)  # fmt: skip

    vectorised = build()
    monkeypatch.setattr(ring_module, "_ring_phase", _phase_one_by_one)
    reference = build()
    assert vectorised.n_transfers == reference.n_transfers > 0
    for name in ("src", "dst", "op", "channel", "pieces", "pieces_indptr", "deps", "deps_indptr"):
        assert np.array_equal(getattr(vectorised, name), getattr(reference, name)), name
