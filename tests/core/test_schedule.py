"""Schedules as data: the builder, the frozen columns, piece sizes and structural errors."""

from __future__ import annotations

import numpy as np
import pytest

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, ScheduleError
from simcoll.core.schedule import Op, ScheduleBuilder, split_bytes


def test_split_bytes_is_even_to_the_byte_and_sums_to_the_whole():
    for total in range(0, 50):
        for parts in range(1, 9):
            got = split_bytes(total, parts)
            assert sum(got) == total
            assert max(got) - min(got) <= 1
            assert got == sorted(got, reverse=True)


def test_builder_records_every_column_and_derives_transfer_bytes():
    # Reduce-scatter of 24 B over 3 ranks: 3 blocks of 8 B, 2 pieces each of 4 B.
    b = ScheduleBuilder(Collective.REDUCESCATTER, "hand", n_ranks=3, size_bytes=24,
                        pieces_per_block=2)  # fmt: skip
    first = b.add(src=0, dst=1, pieces=[b.piece(1, 0), b.piece(1, 1)], op=Op.REDUCE, channel=1)
    b.add(src=2, dst=1, pieces=[b.piece(1, 1)], op=Op.REDUCE, deps=[first])
    s = b.build()
    assert s.piece_bytes.tolist() == [4] * 6
    assert s.transfer_bytes.tolist() == [8, 4]
    assert s.transfer(0).pieces == (2, 3)
    assert s.transfer(1).deps == (0,)
    assert s.transfer(0).op is Op.REDUCE
    assert s.n_channels == 2
    assert s.block_of_piece(3) == 1
    assert s.bytes_sent_per_rank().tolist() == [8, 0, 4]
    assert s.bytes_received_per_rank().tolist() == [0, 12, 0]


def test_schedule_columns_are_read_only():
    b = ScheduleBuilder(Collective.BROADCAST, "hand", n_ranks=2, size_bytes=8, pieces_per_block=1)
    b.add(src=0, dst=1, pieces=[0])
    s = b.build()
    with pytest.raises(ValueError, match="read-only"):
        s.src[0] = 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_ranks": 0}, "n_ranks must be at least 1, got 0"),
        ({"size_bytes": -1}, "size_bytes must not be negative, got -1"),
        ({"pieces_per_block": 0}, "pieces_per_block must be at least 1, got 0"),
        ({"root": 4}, "root 4 is not a rank of a 4-rank collective"),
        ({"max_in_flight": 0}, "max_in_flight must be at least 1, got 0"),
        ({"size_bytes": 4, "pieces_per_block": 8},
         "broadcast of 4 B over 4 ranks has 4 B per block, fewer than the 8 pieces"),
    ],
)  # fmt: skip
def test_builder_refuses_bad_headers(kwargs, message):
    base = {"n_ranks": 4, "size_bytes": 64, "pieces_per_block": 1}
    with pytest.raises(ScheduleError, match=message.replace("(", r"\(")):
        ScheduleBuilder(Collective.BROADCAST, "hand", **{**base, **kwargs})


def test_a_size_that_does_not_split_into_blocks_is_refused():
    with pytest.raises(
        ConfigError, match="allgather size 10 B does not divide into 4 equal blocks"
    ):
        ScheduleBuilder(Collective.ALLGATHER, "hand", n_ranks=4, size_bytes=10, pieces_per_block=1)


@pytest.mark.parametrize(
    ("transfer", "message"),
    [
        ({"src": 0, "dst": 0, "pieces": [0]}, "transfer 0: sends from rank 0 to itself"),
        ({"src": 5, "dst": 0, "pieces": [0]}, "transfer 0: src rank 5 is out of range"),
        ({"src": 0, "dst": -1, "pieces": [0]}, "transfer 0: dst rank -1 is out of range"),
        ({"src": 0, "dst": 1, "pieces": [9]}, "a transfer names a piece outside 0..0"),
        ({"src": 0, "dst": 1, "pieces": []}, "transfer 0 moves no pieces"),
        ({"src": 0, "dst": 1, "pieces": [0], "deps": [3]},
         "a transfer depends on a transfer outside 0..0"),
        ({"src": 0, "dst": 1, "pieces": [0], "channel": -1},
         "channel numbers must not be negative"),
    ],
)  # fmt: skip
def test_builder_refuses_malformed_transfers(transfer, message):
    b = ScheduleBuilder(Collective.BROADCAST, "hand", n_ranks=2, size_bytes=8, pieces_per_block=1)
    b.add(**transfer)
    with pytest.raises(ScheduleError, match=message):
        b.build()


def test_a_block_added_again_is_its_transfers_added_one_by_one():
    def builder() -> ScheduleBuilder:
        return ScheduleBuilder(Collective.ALLREDUCE, "x", n_ranks=4, size_bytes=64,
                               pieces_per_block=4)  # fmt: skip

    hops = [(0, 1, Op.REDUCE, 0, []), (1, 2, Op.COPY, 1, [0]), (2, 3, Op.COPY, 1, [0, 1])]
    one = builder()
    for src, dst, op, slot, deps in hops:
        one.add(src=src, dst=dst, pieces=[0], op=op, channel=slot, deps=deps)
    block = one.block()
    by_block, by_hand = builder(), builder()
    for piece, channels in ((2, (2, 7)), (3, (0, 3))):
        by_block.add_block(block, piece=piece, channels=channels)
        base = by_hand.n_transfers
        for src, dst, op, slot, deps in hops:
            by_hand.add(src=src, dst=dst, pieces=[piece], op=op, channel=channels[slot],
                        deps=[base + d for d in deps])  # fmt: skip
    a, b = by_block.build(), by_hand.build()
    for name in ("src", "dst", "op", "channel", "pieces_indptr", "pieces", "deps_indptr", "deps"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    two = builder()
    two.add(src=0, dst=1, pieces=[0, 1])
    with pytest.raises(ScheduleError, match="one piece each"):
        two.block()
