"""Tests of simcoll.algorithms.chunking: the closed form of an uncut schedule's largest
transfer is what the built schedules hold, for every algorithm, rank count, channel count
and size that does not split evenly, and the chunk rule follows from it."""

from __future__ import annotations

import inspect
import itertools

import pytest

from simcoll.algorithms import ALGORITHMS, build_schedule
from simcoll.algorithms.chunking import (
    STEPWISE,
    _shape,
    default_n_chunks,
    largest_transfer_bytes,
    transfer_count,
)
from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError
from simcoll.plan.tuning import CHUNK_TARGET_BYTES, MAX_DEFAULT_CHUNKS

RANKS = [*range(1, 18), 24, 32]


def _cases():
    for (collective, name), fn in sorted(
        ALGORITHMS.items(), key=lambda x: (x[0][0].value, x[0][1])
    ):
        yield pytest.param(collective, name, fn, id=f"{collective.value}-{name}")


@pytest.mark.parametrize(("collective", "name", "fn"), list(_cases()))
def test_largest_transfer_is_the_built_schedules(collective, name, fn):
    taken = inspect.signature(fn).parameters
    for n, channels, units in itertools.product(RANKS, (1, 3), (1, 7, 4097)):
        if channels > 1 and "n_channels" not in taken:
            continue
        params = {"n_channels": channels} if "n_channels" in taken else {}
        nodes = [g for g in (1, 2, 4, n) if n % g == 0] if "gpus_per_node" in taken else [8]
        for g in nodes:
            if "gpus_per_node" in taken:
                params["gpus_per_node"] = g
            per = {Collective.SENDRECV: 1, Collective.ALLTOALL: n}.get(
                collective, collective.n_blocks(n)
            )
            size = per * units
            try:
                built = build_schedule(collective, name, n_ranks=n, size_bytes=size, **params)
            except ScheduleError:  # fewer bytes than pieces: no schedule to compare with
                continue
            most = int(built.transfer_bytes.max(initial=0))
            closed = largest_transfer_bytes(collective, name, n, size, n_channels=channels,
                                            gpus_per_node=g)  # fmt: skip
            # Pieces of a block differ by at most a byte: the closed form counts every piece
            # of the largest transfer at the largest piece's size.
            slack = _shape(collective, name, n, g)[1]
            assert most <= closed < most + max(slack, 1) or most == 0, (n, channels, g, size)


def test_chunks_follow_the_largest_transfer():
    # A ring all-reduce of 64 MiB on 8 ranks: 8 MiB per transfer uncut, 16 pieces of 512 KiB;
    # with 2 channels 4 MiB per transfer, 8 pieces; 8 GiB is over the cap of 64.
    assert default_n_chunks(Collective.ALLREDUCE, "ring", 8, 64 * 2**20) == 16
    assert default_n_chunks(Collective.ALLREDUCE, "ring", 8, 64 * 2**20, n_channels=2) == 8
    assert default_n_chunks(Collective.ALLREDUCE, "ring", 8, 8 * 2**30) == MAX_DEFAULT_CHUNKS
    # one byte over a whole number of target pieces takes one piece more
    size = 8 * (3 * CHUNK_TARGET_BYTES + 1)
    assert default_n_chunks(Collective.ALLGATHER, "ring", 8, size) == 4


@pytest.mark.parametrize(("collective", "name"), sorted(STEPWISE, key=lambda x: x[1]))
def test_stepwise_algorithms_run_whole_steps(collective, name):
    assert default_n_chunks(collective, name, 8, 8 * 2**30) == 1


@pytest.mark.parametrize(("collective", "name", "fn"), list(_cases()))
def test_transfer_count_is_the_built_schedules(collective, name, fn):
    taken = inspect.signature(fn).parameters
    for n, channels, chunks in itertools.product(RANKS, (1, 3), (1, 2)):
        params = {"n_chunks": chunks} if "n_chunks" in taken else {}
        if "n_channels" in taken:
            params["n_channels"] = channels
        elif channels > 1:
            continue
        options = {}
        if "gpus_per_node" in taken:
            options = {"gpus_per_node": [g for g in (1, 2, 4, n) if n % g == 0]}
        if "ranks_per_switch" in taken:
            options = {"ranks_per_switch": [n, *(r for r in (2, 4) if n % r == 0 and r < n)]}
        if name.startswith("collnet"):  # servers of g GPUs, two or more
            options = {"gpus_per_node": [g for g in (1, 2, 4) if n % g == 0 and n // g > 1]}
        for key, values in options.items() or [(None, [None])]:
            for value in values:
                if key is not None:
                    params[key] = value
                per = {Collective.SENDRECV: 1, Collective.ALLTOALL: n}.get(
                    collective, collective.n_blocks(n)
                )
                built = build_schedule(collective, name, n_ranks=n, size_bytes=per * 4096, **params)
                count = transfer_count(collective, name, n, **params)
                assert count == built.n_transfers, (n, params)
