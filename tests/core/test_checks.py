"""The symbolic checker: every registered algorithm computes its collective, and the
checker catches each kind of broken schedule (it is only worth something if it fails)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from simcoll.algorithms import ALGORITHMS, build_schedule
from simcoll.core.checks import check_schedule, topological_order
from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError
from simcoll.core.schedule import Op, Schedule, ScheduleBuilder, Transfer

N_RANKS = [1, 2, 3, 4, 5, 7, 8, 16]
CUTS = [(1, 1), (2, 3)]  # (n_channels, n_chunks)


def _size(collective: Collective, n: int, channels: int, chunks: int) -> int:
    # Enough whole bytes for every piece of every block, and divisible by the blocks.
    return n * n * channels * chunks * 8


@pytest.mark.parametrize(("channels", "chunks"), CUTS)
@pytest.mark.parametrize("n_ranks", N_RANKS)
@pytest.mark.parametrize(("collective", "name"), sorted(ALGORITHMS, key=str), ids=str)
def test_every_algorithm_computes_its_collective(collective, name, n_ranks, channels, chunks):
    params = {"n_channels": channels, "n_chunks": chunks}
    roots = [0, n_ranks - 1] if collective.is_rooted else [None]
    for root in roots:
        extra = {} if root is None else {"root": root}
        schedule = build_schedule(
            collective, name, n_ranks=n_ranks,
            size_bytes=_size(collective, n_ranks, channels, chunks), **params, **extra,
        )  # fmt: skip
        check_schedule(schedule)


def test_every_collective_has_an_algorithm():
    assert {c for c, _ in ALGORITHMS} == set(Collective)


# -- the checker must fail on broken schedules --------------------------------------------


def _rebuild(schedule: Schedule, edit: Callable[[list[Transfer]], list[Transfer]]) -> Schedule:
    """The same schedule with its transfer list edited (indices renumbered)."""
    transfers = edit(list(schedule.transfers()))
    b = ScheduleBuilder(
        schedule.collective, schedule.algorithm, n_ranks=schedule.n_ranks,
        size_bytes=schedule.size_bytes, pieces_per_block=schedule.pieces_per_block,
        root=schedule.root,
    )  # fmt: skip
    for t in transfers:
        b.add(src=t.src, dst=t.dst, pieces=t.pieces, op=t.op, channel=t.channel, deps=t.deps)
    return b.build()


def _ring_allreduce4() -> Schedule:
    return build_schedule("allreduce", "ring", n_ranks=4, size_bytes=64)


def test_checker_catches_a_missing_transfer():
    # The last transfer is all-gather step 2 of rank 3: it sends ring block (3 - 2) = 1 to
    # rank 0. Without it rank 0 keeps what the reduce-scatter left there: block 1's chain
    # runs 2 -> 3 -> 0 -> 1, so rank 0 holds the partial sum of ranks {2, 3} plus its own.
    # No transfer depends on it, so only the postcondition can notice.
    broken = _rebuild(_ring_allreduce4(), lambda ts: ts[:-1])
    with pytest.raises(
        ScheduleError, match=r"rank 0 ends with data of ranks \{0,2,3\} in piece 1 "
    ):
        check_schedule(broken)


def test_checker_catches_a_copy_where_a_reduce_is_needed():
    # Transfer 0 is rank 0 adding its ring block 3 into rank 1's. As a copy it
    # overwrites rank 1's own contribution, which then never reaches the result.
    def edit(ts: list[Transfer]) -> list[Transfer]:
        return [_with(ts[0], op=Op.COPY), *ts[1:]]

    with pytest.raises(ScheduleError, match="must hold data of ranks"):
        check_schedule(_rebuild(_ring_allreduce4(), edit))


def _with(t: Transfer, **changes: object) -> Transfer:
    fields = {f: getattr(t, f) for f in Transfer.__slots__}
    fields.update(changes)
    return Transfer(**fields)  # type: ignore[arg-type]


def test_checker_catches_a_missing_dependency_as_a_race():
    # Step 1 of the reduce-scatter forwards what step 0 delivered; without the
    # dependency the send may read the piece before the reduction arrived.
    schedule = _ring_allreduce4()
    step1 = 4  # transfers 0..3 are step 0 (one per rank), 4.. step 1
    assert schedule.transfer(step1).deps, "the ring's step-1 transfer must have a dependency"
    broken = _rebuild(
        schedule, lambda ts: [*ts[:step1], _with(ts[step1], deps=()), *ts[step1 + 1 :]]
    )
    with pytest.raises(ScheduleError, match="without depending on transfer"):
        check_schedule(broken)


def test_checker_catches_a_contribution_counted_twice():
    # A ring reduce to root 0 on 3 ranks chains 1 -> 2 -> 0. Repeating its first transfer
    # (rank 1 adds its buffer into rank 2's) counts rank 1's contribution twice.
    schedule = build_schedule("reduce", "ring", n_ranks=3, size_bytes=30)

    def edit(ts: list[Transfer]) -> list[Transfer]:
        shifted = [_with(t, deps=tuple(d + 1 for d in t.deps)) for t in ts[1:]]
        return [ts[0], _with(ts[0], deps=(0,)), *shifted]

    broken = _rebuild(schedule, edit)
    with pytest.raises(
        ScheduleError, match=r"adds contributions \{1\} to piece 0 at rank 2 a second time"
    ):
        check_schedule(broken)


def test_checker_catches_a_send_of_data_the_sender_lacks():
    # In a broadcast from rank 0, rank 1 holds nothing before rank 0's transfer arrives.
    b = ScheduleBuilder(Collective.BROADCAST, "bad", n_ranks=3, size_bytes=9, pieces_per_block=1)
    b.add(src=1, dst=2, pieces=[0])
    b.add(src=0, dst=1, pieces=[0])
    with pytest.raises(ScheduleError, match="rank 1 sends piece 0 that it does not hold"):
        check_schedule(b.build())


def test_checker_catches_an_overwrite_of_data_still_being_read():
    # Rank 1 forwards its buffer to rank 2 while rank 0 copies over it, unordered: rank 2
    # may receive either rank 1's or rank 0's data.
    b = ScheduleBuilder(Collective.ALLREDUCE, "bad", n_ranks=3, size_bytes=3, pieces_per_block=1)
    b.add(src=1, dst=2, pieces=[0])
    b.add(src=0, dst=1, pieces=[0])
    with pytest.raises(ScheduleError, match="may still be reading"):
        check_schedule(b.build())


def test_checker_reports_a_dependency_cycle():
    b = ScheduleBuilder(Collective.SENDRECV, "bad", n_ranks=2, size_bytes=4, pieces_per_block=1)
    b.add(src=0, dst=1, pieces=[0], deps=[1])
    b.add(src=1, dst=0, pieces=[1], deps=[0])
    with pytest.raises(
        ScheduleError, match=r"dependency cycle: transfers \[0, 1\] can never start"
    ):
        topological_order(b.build())


def test_concurrent_reductions_into_one_piece_are_allowed_but_not_a_racing_read():
    # Ranks 1 and 2 both add into rank 0 at once (a sum does not depend on order) ...
    b = ScheduleBuilder(Collective.REDUCE, "ok", n_ranks=3, size_bytes=3, pieces_per_block=1)
    b.add(src=1, dst=0, pieces=[0], op=Op.REDUCE)
    b.add(src=2, dst=0, pieces=[0], op=Op.REDUCE)
    check_schedule(b.build())
    # ... but rank 0 forwarding the piece while rank 2's reduction may be in flight races.
    b = ScheduleBuilder(Collective.ALLREDUCE, "bad", n_ranks=3, size_bytes=3, pieces_per_block=1)
    r1 = b.add(src=1, dst=0, pieces=[0], op=Op.REDUCE)
    b.add(src=2, dst=0, pieces=[0], op=Op.REDUCE)
    b.add(src=0, dst=1, pieces=[0], deps=[r1])
    with pytest.raises(ScheduleError, match="without depending on transfer 1"):
        check_schedule(b.build())


# -- traffic laws: bandwidth-optimal algorithms send the textbook volume per rank ----------


@pytest.mark.parametrize(
    ("n", "channels", "chunks"), list(itertools.product([2, 3, 4, 8, 16], [1, 2], [1, 3]))
)
def test_ring_volumes_per_rank_are_the_textbook_ones(n, channels, chunks):
    size = n * channels * chunks * 1000  # divisible by every cut: exact volumes

    def sent(coll: str) -> list[int]:
        s = build_schedule(
            coll, "ring", n_ranks=n, size_bytes=size, n_channels=channels, n_chunks=chunks
        )
        return s.bytes_sent_per_rank().tolist()

    assert sent("allreduce") == [2 * (n - 1) * size // n] * n  # 2(n-1)/n x S
    assert sent("reducescatter") == [(n - 1) * size // n] * n  # (n-1)/n x S
    assert sent("allgather") == [(n - 1) * size // n] * n
    # Broadcast from root 0: every rank but the last of the chain (rank n-1) sends S.
    assert sent("broadcast") == [size] * (n - 1) + [0]
    # Reduce to root 0: the chain starts at rank 1 and ends at 0, which sends nothing.
    assert sent("reduce") == [0] + [size] * (n - 1)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_direct_volumes_per_rank(n):
    size = n * n * 48

    def vol(coll: str, name: str = "direct") -> tuple[list[int], list[int]]:
        s = build_schedule(coll, name, n_ranks=n, size_bytes=size)
        return s.bytes_sent_per_rank().tolist(), s.bytes_received_per_rank().tolist()

    per = (n - 1) * size // n
    assert vol("alltoall") == ([per] * n, [per] * n)  # (n-1)/n x S each way
    assert vol("allgather") == ([per] * n, [per] * n)
    assert vol("allreduce") == ([2 * per] * n, [2 * per] * n)  # 2(n-1)/n x S, like a ring
    root_heavy = [(n - 1) * size] + [size] * (n - 1)
    assert vol("allreduce", "reduce_broadcast") == (root_heavy, root_heavy)
    assert vol("gather")[1] == [per] + [0] * (n - 1)
    assert vol("scatter")[0] == [per] + [0] * (n - 1)
    assert vol("sendrecv") == ([size] * n, [size] * n)
