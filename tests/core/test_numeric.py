"""The numeric check: every registered algorithm moves real data to numpy's answer, for
every reduction op and two dtypes, and the check fails, naming the element, on schedules
that count a contribution twice or forget one."""

from __future__ import annotations

import re

import numpy as np
import pytest

from simcoll.algorithms import ALGORITHMS, build_schedule
from simcoll.core.checks import check_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError
from simcoll.core.numeric import (
    REDUCTION_OPS,
    check_numeric,
    random_inputs,
    reference,
    run_schedule,
)
from simcoll.core.schedule import Op, Schedule, ScheduleBuilder

C = Collective
DTYPES = [np.float32, np.int32]
N_RANKS = range(1, 9)
ALL = sorted(ALGORITHMS, key=str)


def _sized(
    collective: Collective, name: str, n: int, *, itemsize: int = 4, elems: int = 2, **params: int
) -> Schedule:
    """The schedule with every piece ``elems`` elements of ``itemsize`` bytes.

    A probe build tells how many pieces a block has and how many blocks ``size_bytes``
    spans (n for all-gather, 1 for all-reduce, ...); the size is then chosen so that
    each block is pieces_per_block x elems whole elements.
    """
    probe = build_schedule(collective, name, n_ranks=n, size_bytes=n * n * 4096, **params)
    ppb = probe.pieces_per_block
    blocks_per_size = probe.size_bytes // collective.block_bytes(probe.size_bytes, n)
    size = blocks_per_size * ppb * elems * itemsize
    schedule = build_schedule(collective, name, n_ranks=n, size_bytes=size, **params)
    assert schedule.pieces_per_block == ppb
    return schedule


def _roots(collective: Collective, n: int) -> list[dict[str, int]]:
    return [{"root": r} for r in sorted({0, n // 2, n - 1})] if collective.is_rooted else [{}]


def _cuts(name: str, collective: Collective) -> list[dict[str, int]]:
    """One plain cut and one with channels and chunks, where the algorithm takes them."""
    accepted = ALGORITHMS[collective, name].__kwdefaults__ or {}
    if "n_channels" in accepted and "n_chunks" in accepted:
        return [{}, {"n_channels": 2, "n_chunks": 2}]
    return [{}]


# -- every registered algorithm, every op, two dtypes --------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(("collective", "name"), ALL, ids=str)
def test_every_algorithm_computes_numpys_result(collective, name, dtype):
    # Reducing collectives: every op; the rest move data only, so one op is enough (op
    # is ignored) - the comparison is then of the data itself.
    ops = REDUCTION_OPS if collective.reduces else ("sum",)
    for n in N_RANKS:
        for cut in _cuts(name, collective):
            for root in _roots(collective, n):
                schedule = _sized(collective, name, n, **cut, **root)
                for op in ops:
                    check_numeric(schedule, op=op, dtype=dtype, seed=n)


@pytest.mark.parametrize(
    ("collective", "name", "n", "params"),
    [
        (C.ALLREDUCE, "ring", 16, {"n_channels": 2, "n_chunks": 3}),
        (C.ALLREDUCE, "ring", 13, {}),
        (C.ALLREDUCE, "halving_doubling", 16, {}),
        (C.ALLREDUCE, "halving_doubling", 12, {}),
        (C.REDUCESCATTER, "halving_doubling", 11, {}),
        (C.ALLREDUCE, "hierarchical", 8, {"gpus_per_node": 2}),
        (C.ALLREDUCE, "hierarchical", 12, {"gpus_per_node": 4}),
        (C.ALLREDUCE, "sharp", 8, {"ranks_per_switch": 2}),
        (C.ALLREDUCE, "sharp", 9, {"ranks_per_switch": 3}),
        (C.ALLREDUCE, "nvls", 16, {}),
        (C.REDUCE, "ring", 12, {"root": 5}),
        (C.ALLGATHER, "bruck", 13, {}),
        (C.ALLTOALL, "pairwise", 12, {}),
        (C.ALLTOALL, "direct", 16, {}),
    ],
    ids=str,
)
def test_larger_and_parametrised_cases(collective, name, n, params):
    if (collective, name) not in ALGORITHMS:
        pytest.skip(f"{collective.value}/{name} is not registered")
    schedule = _sized(collective, name, n, **params)
    for op in REDUCTION_OPS if collective.reduces else ("sum",):
        for dtype in DTYPES:
            check_numeric(schedule, op=op, dtype=dtype, seed=n)


def test_numeric_and_symbolic_checks_agree_on_the_registry():
    # Both must accept every registered algorithm (a stricter numeric check could not
    # be told apart from a broken replay); spot-check one size per algorithm.
    for collective, name in ALL:
        schedule = _sized(collective, name, 5)
        check_schedule(schedule)
        check_numeric(schedule)


@pytest.mark.parametrize("collective", list(Collective), ids=str)
def test_size_zero_gives_empty_buffers(collective):
    name = "ring" if (collective, "ring") in ALGORITHMS else "direct"
    schedule = build_schedule(collective, name, n_ranks=4, size_bytes=0)
    outputs = run_schedule(schedule, [np.zeros(0, np.float32)] * 4)
    assert [len(x) for x in outputs] == [0, 0, 0, 0]
    check_numeric(schedule)


# -- the buffer layouts and the reference --------------------------------------------------


def _ints(*values: list[int]) -> list[np.ndarray]:
    return [np.array(v, dtype=np.int32) for v in values]


@pytest.mark.parametrize(
    ("collective", "op", "root", "inputs", "expected"),
    [
        # 3 ranks, two elements each unless the collective splits the buffer into n blocks.
        (C.ALLREDUCE, "sum", 0, [[1, 2], [10, 20], [100, 200]], [[111, 222]] * 3),
        (C.ALLREDUCE, "prod", 0, [[1, -2], [3, 2], [2, 2]], [[6, -8]] * 3),
        (C.ALLREDUCE, "min", 0, [[1, -2], [3, 2], [2, 9]], [[1, -2]] * 3),
        (C.ALLREDUCE, "max", 0, [[1, -2], [3, 2], [2, 9]], [[3, 9]] * 3),
        # avg on integers: the sum divided by 3, rounded toward zero (NCCL SumPostDiv).
        (C.ALLREDUCE, "avg", 0, [[1, -1], [1, -1], [0, 0]], [[0, 0]] * 3),
        (C.ALLREDUCE, "avg", 0, [[5, -5], [2, -2], [0, 0]], [[2, -2]] * 3),
        (C.REDUCE, "sum", 1, [[1, 2], [10, 20], [100, 200]], [[], [111, 222], []]),
        (C.BROADCAST, "sum", 2, [[1, 2], [10, 20], [100, 200]], [[100, 200]] * 3),
        # Reduce-scatter: 3 blocks of one element; rank r gets the sum of block r.
        (C.REDUCESCATTER, "sum", 0, [[1, 2, 3], [10, 20, 30], [100, 200, 300]],
         [[111], [222], [333]]),
        (C.ALLGATHER, "sum", 0, [[1], [2], [3]], [[1, 2, 3]] * 3),
        (C.GATHER, "sum", 2, [[1], [2], [3]], [[], [], [1, 2, 3]]),
        (C.SCATTER, "sum", 1, [[0, 0, 0], [7, 8, 9], [0, 0, 0]], [[7], [8], [9]]),
        # All-to-all: rank s's block d goes to rank d, which orders the blocks by s.
        (C.ALLTOALL, "sum", 0, [[1, 2, 3], [10, 20, 30], [100, 200, 300]],
         [[1, 10, 100], [2, 20, 200], [3, 30, 300]]),
        # Send/recv: rank r sends to r + 1, so rank r receives rank r - 1's buffer.
        (C.SENDRECV, "sum", 0, [[1, 2], [10, 20], [100, 200]], [[100, 200], [1, 2], [10, 20]]),
    ],
    ids=str,
)  # fmt: skip
def test_reference_by_hand(collective, op, root, inputs, expected):
    got = reference(collective, _ints(*inputs), op, root)
    assert [x.tolist() for x in got] == expected
    assert all(x.dtype == np.int32 for x in got)


@pytest.mark.parametrize(("collective", "name"), ALL, ids=str)
def test_replay_matches_the_hand_reference_layout(collective, name):
    # The same hand-made 3-rank cases through each schedule (elements of 4 bytes, one
    # element per piece), so the layouts of run_schedule and reference agree.
    schedule = _sized(collective, name, 3, elems=1, **({"root": 1} if collective.is_rooted else {}))
    length = len(random_inputs(schedule, dtype=np.int32)[0])
    inputs = [np.arange(length, dtype=np.int32) * 10 + 1000 * r for r in range(3)]
    got = run_schedule(schedule, inputs, op="max")
    want = reference(collective, inputs, "max", 1)
    assert [x.tolist() for x in got] == [x.tolist() for x in want]


def test_int_avg_truncates_toward_zero_even_at_the_int32_limit():
    # NCCL's FuncSumPostDiv divides |x| and negates back: C's truncating x / n.
    # -2**31 / 3 = -715827882.67 -> -715827882 (numpy's floor division would give ...883).
    s = _sized(C.ALLREDUCE, "ring", 3, elems=1)
    x = np.array([-(2**31), 7, -7], dtype=np.int32)
    zero = np.zeros(3, dtype=np.int32)
    outputs = run_schedule(s, [x, zero, zero], op="avg")
    assert outputs[0].tolist() == [-715827882, 2, -2]


def test_int_sum_wraps_around_like_c():
    # 2**31 - 1 + 1 wraps to -2**31 in int32, as NCCL's device arithmetic does.
    s = _sized(C.ALLREDUCE, "ring", 2, elems=1)
    outputs = run_schedule(s, _ints([2**31 - 1, 5], [1, 5]))
    assert outputs[1].tolist() == [-(2**31), 10]
    assert reference(C.ALLREDUCE, _ints([2**31 - 1, 5], [1, 5]))[0].tolist() == [-(2**31), 10]


def test_float_avg_is_the_sum_divided_by_n_rounded_once():
    # 2 / 3 in float32 is 0.6666667 (rounded once). NCCL's pre-multiplied sum
    # fl(1/3) + fl(1/3) is also 0.6666667 here; the two can differ in the last bit.
    s = _sized(C.ALLREDUCE, "direct", 3, elems=1)
    xs = [np.array([1, 0, 3], np.float32), np.array([1, 1, 3], np.float32),
          np.array([0, 0, 3], np.float32)]  # fmt: skip
    got = run_schedule(s, xs, op="avg")[2]
    assert got.dtype == np.float32
    assert got.tolist() == [np.float32(2) / np.float32(3), np.float32(1) / np.float32(3), 3.0]


def test_min_and_max_ignore_nan_like_fminf():
    s = _sized(C.ALLREDUCE, "ring", 2, elems=1)
    xs = [np.array([np.nan, 1.0], np.float32), np.array([2.0, np.nan], np.float32)]
    assert run_schedule(s, xs, op="min")[0].tolist() == [2.0, 1.0]
    assert run_schedule(s, xs, op="max")[1].tolist() == [2.0, 1.0]


def test_random_inputs_are_exact_for_their_op():
    s = _sized(C.ALLREDUCE, "ring", 30, elems=1)
    prod = np.stack(random_inputs(s, op="prod", dtype=np.float32))
    assert set(np.unique(prod).tolist()) == {-1.0, 1.0}  # n > 24: +-1 only
    small = np.stack(random_inputs(_sized(C.ALLREDUCE, "ring", 4), op="prod", dtype=np.int32))
    assert set(np.unique(small).tolist()) <= {-2, -1, 1, 2}
    summed = np.stack(random_inputs(s, op="sum", dtype=np.uint8))
    assert summed.dtype == np.uint8
    assert summed.min() >= 0
    assert summed.max() <= 64


# -- transfers replay in dependency order, reading values at replay time ------------------


def test_replay_follows_dependencies_not_schedule_order():
    # Transfer 0 (rank 1 forwards to rank 2) depends on transfer 1 (rank 0 -> rank 1):
    # in schedule order rank 1 would send what it does not yet hold.
    b = ScheduleBuilder(C.BROADCAST, "fwd", n_ranks=3, size_bytes=8, pieces_per_block=1)
    b.add(src=1, dst=2, pieces=[0], deps=[1])
    b.add(src=0, dst=1, pieces=[0])
    outputs = run_schedule(b.build(), _ints([4, 5], [0, 0], [0, 0]))
    assert [x.tolist() for x in outputs] == [[4, 5]] * 3


def test_a_send_reads_the_value_at_its_turn():
    # Reduce to root 2: rank 1 adds its own input into rank 2 first, and only then (a
    # dependency) receives rank 0's; rank 0 also adds into rank 2. Had transfer 0 read
    # rank 1's piece after transfer 1 changed it, rank 0 would count twice: 1 + 1 + 10 + 100.
    b = ScheduleBuilder(C.REDUCE, "order", n_ranks=3, size_bytes=4, pieces_per_block=1, root=2)
    first = b.add(src=1, dst=2, pieces=[0], op=Op.REDUCE)
    b.add(src=0, dst=1, pieces=[0], op=Op.REDUCE, deps=[first])
    b.add(src=0, dst=2, pieces=[0], op=Op.REDUCE)
    assert run_schedule(b.build(), _ints([1], [10], [100]))[2].tolist() == [111]


def test_switch_endpoints_start_empty_and_accumulate():
    # Ranks 0 and 1 reduce into switch endpoint 2 (empty: the first reduction stores),
    # which multicasts the sum back; NVLS in miniature.
    b = ScheduleBuilder(C.ALLREDUCE, "sw", n_ranks=2, size_bytes=8, pieces_per_block=1,
                        n_switches=1)  # fmt: skip
    up = [b.add(src=r, dst=2, pieces=[0], op=Op.REDUCE) for r in (0, 1)]
    for r in (0, 1):
        b.add(src=2, dst=r, pieces=[0], deps=up)
    xs = _ints([3, -4], [5, 6])
    assert [x.tolist() for x in run_schedule(b.build(), xs, op="prod")] == [[15, -24]] * 2
    check_numeric(b.build(), op="prod", dtype=np.int32)


# -- broken schedules are caught, with the exact message -----------------------------------


def _by_hand(name: str, transfers: list[tuple[int, int, Op, list[int]]]) -> Schedule:
    """A 3-rank all-reduce of two int32 elements (one piece) from (src, dst, op, deps)."""
    b = ScheduleBuilder(C.ALLREDUCE, name, n_ranks=3, size_bytes=8, pieces_per_block=1)
    for src, dst, op, deps in transfers:
        b.add(src=src, dst=dst, pieces=[0], op=op, deps=deps)
    return b.build()


R, K = Op.REDUCE, Op.COPY
XS = _ints([1, 2], [10, 20], [100, 200])  # expected sum everywhere: [111, 222]


def test_a_contribution_reduced_twice_is_caught():
    # Rank 1 adds into rank 0 twice, rank 2 once, then rank 0 copies the total out:
    # everyone ends with 1 + 2 x 10 + 100 = 121 (and 242) instead of 111 (and 222).
    broken = _by_hand(
        "twice", [(1, 0, R, []), (2, 0, R, []), (1, 0, R, [0]), (0, 1, K, [0, 1, 2]),
                  (0, 2, K, [0, 1, 2])],
    )  # fmt: skip
    message = (
        "allreduce/twice on 3 ranks, op sum, int32: rank 0 element 0 (block 0, piece 0): "
        "got 121, expected 111 (2 of 2 elements of rank 0 differ)"
    )
    with pytest.raises(ScheduleError, match=f"^{re.escape(message)}$"):
        check_numeric(broken, inputs=XS)
    # avg and prod see it too; random float inputs as well (10 is not 0 in every element).
    with pytest.raises(ScheduleError, match=r"got 40, expected 37 \("):  # 121 / 3, 111 / 3
        check_numeric(broken, op="avg", inputs=XS)
    with pytest.raises(
        ScheduleError,
        match=r"^allreduce/twice on 3 ranks, op sum, float32: "
        r"rank 0 element \d+ \(block 0, piece 0\): got ",
    ):
        check_numeric(broken)  # fmt: skip
    # The symbolic checker names the same fault in its own words.
    with pytest.raises(ScheduleError, match=r"adds contributions \{1\} to piece 0 at rank 0"):
        check_schedule(broken)


def test_a_forgotten_contribution_is_caught():
    # Rank 2 never adds its input: everyone ends with 1 + 10 = 11 instead of 111.
    broken = _by_hand("forgets", [(1, 0, R, []), (0, 1, K, [0]), (0, 2, K, [0])])
    message = (
        "allreduce/forgets on 3 ranks, op sum, int32: rank 0 element 0 (block 0, piece 0): "
        "got 11, expected 111 (2 of 2 elements of rank 0 differ)"
    )
    with pytest.raises(ScheduleError, match=f"^{re.escape(message)}$"):
        check_numeric(broken, inputs=XS)
    with pytest.raises(ScheduleError, match=r"op max, int32: rank 0 element 0 .*got 10, "):
        check_numeric(broken, op="max", inputs=XS)


def _without_last(schedule: Schedule) -> Schedule:
    b = ScheduleBuilder(
        schedule.collective, "broken", n_ranks=schedule.n_ranks,
        size_bytes=schedule.size_bytes, pieces_per_block=schedule.pieces_per_block,
    )  # fmt: skip
    for t in list(schedule.transfers())[:-1]:
        b.add(src=t.src, dst=t.dst, pieces=t.pieces, op=t.op, channel=t.channel, deps=t.deps)
    return b.build()


def test_a_ring_missing_its_last_transfer_is_caught():
    # As in test_checks: the ring all-reduce's last transfer sends ring block 1 (piece 1,
    # elements 4..7 of 16 int32) to rank 0, whose copy is left with the partial sum of
    # ranks {0, 2, 3}. Inputs 10**r everywhere: got 1 + 100 + 1000, expected 1111.
    broken = _without_last(build_schedule("allreduce", "ring", n_ranks=4, size_bytes=64))
    inputs = [np.full(16, 10**r, dtype=np.int32) for r in range(4)]
    message = (
        "allreduce/broken on 4 ranks, op sum, int32: rank 0 element 4 (block 0, piece 1): "
        "got 1101, expected 1111 (4 of 16 elements of rank 0 differ)"
    )
    with pytest.raises(ScheduleError, match=f"^{re.escape(message)}$"):
        check_numeric(broken, inputs=inputs)


@pytest.mark.parametrize(
    ("transfers", "collective", "message"),
    [
        # A broadcast from 0 where rank 1 forwards before it has received.
        ([(1, 2, Op.COPY, 0), (0, 1, Op.COPY, 0)], C.BROADCAST,
         "broadcast/bad on 3 ranks: transfer 0 (1->2): rank 1 sends piece 0 that it does "
         "not hold"),
        # A gather that adds rank 1's block into the root, which has nothing there to add to.
        ([(1, 0, Op.REDUCE, 1), (2, 0, Op.COPY, 2)], C.GATHER,
         "gather/bad on 3 ranks: transfer 0 (1->0): reduces into piece 1 that rank 0 does "
         "not hold"),
        # A broadcast that never reaches rank 2.
        ([(0, 1, Op.COPY, 0)], C.BROADCAST,
         "broadcast/bad on 3 ranks: rank 2 ends without piece 0 (block 0) of its output"),
    ],
)  # fmt: skip
def test_replay_errors_name_the_transfer_or_rank(transfers, collective, message):
    size = 12 if collective is C.GATHER else 4  # one int32 per block
    b = ScheduleBuilder(collective, "bad", n_ranks=3, size_bytes=size, pieces_per_block=1)
    for src, dst, op, piece in transfers:
        b.add(src=src, dst=dst, pieces=[piece], op=op)
    length = 1
    with pytest.raises(ScheduleError, match=f"^{re.escape(message)}$"):
        run_schedule(b.build(), [np.zeros(length, np.int32)] * 3)


def test_pieces_of_partial_elements_are_refused():
    # A 2-rank ring all-reduce of 12 B cuts its one block into 2 pieces of 6 B.
    s = build_schedule("allreduce", "ring", n_ranks=2, size_bytes=12)
    message = (
        "allreduce/ring on 2 ranks: piece 0 holds 6 B, not a whole number of 4-byte int32 "
        "elements; use a size_bytes whose blocks are a multiple of 8 B (2 pieces per block)"
    )
    with pytest.raises(ScheduleError, match=f"^{re.escape(message)}$"):
        check_numeric(s, dtype=np.int32)
    check_numeric(s, dtype=np.int16)  # 3 int16 per piece are fine


def test_bad_inputs_are_named():
    s = build_schedule("allgather", "ring", n_ranks=2, size_bytes=16)  # 2 float32 per rank
    ok = np.zeros(2, np.float32)
    with pytest.raises(ScheduleError, match="got 1 input buffers for 2 ranks"):
        run_schedule(s, [ok])
    with pytest.raises(
        ScheduleError,
        match="rank 1's input has 4 elements; a allgather of 16 B of float32 needs 2 per rank",
    ):
        run_schedule(s, [ok, np.zeros(4, np.float32)])  # fmt: skip
    with pytest.raises(ScheduleError, match="rank 1's input is a 1-d float64 array"):
        run_schedule(s, [ok, np.zeros(2)])
    with pytest.raises(ScheduleError, match="unknown reduction op 'mean'; valid: sum, prod, min"):
        run_schedule(s, [ok, ok], op="mean")
