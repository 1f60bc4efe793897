"""Tests of simcoll.algorithms.direct: the numpy-built all-pairs schedules equal the same
schedules sent pair by pair with ``_Direct.send``."""

from __future__ import annotations

import numpy as np
import pytest

from simcoll.algorithms.direct import (
    _Cut,
    _make,
    direct_allgather,
    direct_alltoall,
    direct_reducescatter,
)
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.schedule import Op, Schedule


def _pair_by_pair(collective: Collective, n: int, size: int, cut: _Cut) -> Schedule:
    """The reference: every (src, dst) in turn, each rank's peers from src + 1 on."""
    d = _make(collective, n, size, cut=cut)
    for src in range(n):
        for dst in d.others(src):
            if collective is Collective.ALLGATHER:
                d.send(src, dst, src, Op.COPY)
            elif collective is Collective.REDUCESCATTER:
                d.send(src, dst, dst, Op.REDUCE)
            else:
                d.send(src, dst, src * n + dst, Op.COPY)
    return d.b.build()


@pytest.mark.parametrize(("n", "channels", "chunks"), [(1, 1, 1), (2, 1, 1), (5, 3, 2), (8, 2, 4)])
@pytest.mark.parametrize(
    ("collective", "build"),
    [
        (Collective.ALLGATHER, direct_allgather),
        (Collective.REDUCESCATTER, direct_reducescatter),
        (Collective.ALLTOALL, direct_alltoall),
    ],
)
def test_all_pairs_built_at_once_equal_the_pair_by_pair_schedule(
    collective: Collective, build: object, n: int, channels: int, chunks: int
) -> None:
    size = n * n * channels * chunks * 8
    fast = build(n, size, n_channels=channels, n_chunks=chunks)  # type: ignore[operator]
    slow = _pair_by_pair(collective, n, size, _Cut(channels, chunks, 8))
    assert fast.n_transfers == slow.n_transfers == n * (n - 1) * channels * chunks
    for field in ("src", "dst", "op", "channel", "pieces", "pieces_indptr", "deps",
                  "deps_indptr", "piece_bytes"):  # fmt: skip
        assert np.array_equal(getattr(fast, field), getattr(slow, field)), field


def test_an_all_gather_over_the_transfer_cap_is_refused_before_any_transfer() -> None:
    # 4,100 ranks x 4,099 peers = 16,805,900 transfers, over the cap of 2^24 = 16,777,216,
    # while its 4,100 pieces are well under it: refused by the count, not by building
    with pytest.raises(ConfigError) as info:
        direct_allgather(4100, 4100 * 8)
    assert str(info.value) == (
        "allgather/direct on 4100 ranks would have more than 16777216 transfers, too many "
        "to simulate; use fewer ranks, chunks or channels"
    )
