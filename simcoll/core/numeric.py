"""The numeric check: move real numpy buffers through a schedule and compare with numpy.

:func:`simcoll.core.checks.check_schedule` proves *symbolically* which contributions every
piece ends with. This module is the data-mode companion: :func:`run_schedule` replays a
schedule on real buffers, :func:`reference` computes what the collective must produce
with plain numpy, and :func:`check_numeric` compares the two for random inputs.

Buffers follow nccl-tests (``size_bytes`` is the ``size`` column, see
:mod:`simcoll.core.collectives`; E = ``size_bytes / itemsize`` elements, n ranks):

=============  ===========================  ========================================
collective     input of every rank          output
=============  ===========================  ========================================
allreduce      E                            E on every rank
reduce         E                            E on the root; nothing elsewhere
broadcast      E (only the root's is read)  E on every rank
reducescatter  E                            E/n on every rank: rank r gets block r
allgather      E/n                          E on every rank, rank b's input at block b
gather         E/n                          E on the root; nothing elsewhere
scatter        E (only the root's is read)  E/n on every rank: block r of the root's
alltoall       E: n blocks of E/n, block d  E: n blocks of E/n, block s from rank s
               for rank d
sendrecv       E                            E on every rank: rank r-1's input
=============  ===========================  ========================================

Every rank's input holds the blocks :meth:`Collective.initial_holdings` gives it, in
block order, and its output the blocks of :meth:`Collective.final_holdings` (non-roots
of reduce and gather own no output: NCCL leaves their receive buffer alone, so they get
an empty array). Each block is cut into the schedule's pieces; ``piece_bytes`` are bytes,
so every piece must hold whole elements of the dtype.

Reductions (``op``), as NCCL defines them:

``sum``, ``prod``
    element-wise in the dtype; integers wrap around like NCCL's C arithmetic.
``min``, ``max``
    :func:`numpy.fmin` / :func:`numpy.fmax`: like NCCL's ``fminf``/``fmaxf``
    (``FuncMinMax`` in ``src/device/reduce_kernel.h``), a NaN loses to a number.
``avg``
    NCCL's ``ncclAvg`` (``hostToDevRedOp`` in NVIDIA/nccl ``src/enqueue.cc``). For
    integer types it is ``ncclDevSumPostDiv``: a wrapping sum, then each result divided
    by n with truncation toward zero (``FuncSumPostDiv::divide`` in
    ``src/device/reduce_kernel.h`` divides ``|x|`` and negates back, i.e. C's
    ``x / n``); simcoll does exactly that. For floating types NCCL uses
    ``ncclDevPreMulSum``: every input is first multiplied by ``T(1.0 / n)`` and the
    products summed. simcoll instead sums and divides the result by n, the exact average
    rounded once; it can differ from NCCL in the last bits (both are exact when every
    partial sum is representable and n is a power of two).

The replay follows :func:`simcoll.core.checks.topological_order`: a copy replaces the
destination's piece, a reduction combines the source's piece into it, and a send reads
the source's piece as it is at that point of the replay. Switch endpoints of in-network
reduction (``schedule.n_switches``) hold buffers too; they start empty and a reduction
into a piece they do not hold yet stores it. Whether the result is independent of the
order transfers run in (no races) is the symbolic checker's job, not this module's.

>>> import numpy as np
>>> from simcoll.algorithms import build_schedule
>>> s = build_schedule("allreduce", "ring", n_ranks=3, size_bytes=3 * 4 * 2)
>>> inputs = [np.array([1, 2, 3, 4, 5, -6], dtype=np.int32) * 10**r for r in range(3)]
>>> run_schedule(s, inputs)[2].tolist()
[111, 222, 333, 444, 555, -666]
>>> run_schedule(s, inputs, op="avg")[0].tolist()
[37, 74, 111, 148, 185, -222]
>>> # Rank 0's input less one: sums 110, 221, 332, 443, 554, -667; avg rounds toward 0.
>>> run_schedule(s, [inputs[0] - 1, *inputs[1:]], op="avg")[0].tolist()
[36, 73, 110, 147, 184, -222]
>>> check_numeric(s, op="prod", dtype=np.int32)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from simcoll.core.checks import topological_order
from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError
from simcoll.core.schedule import Op, Schedule

__all__ = ["REDUCTION_OPS", "check_numeric", "random_inputs", "reference", "run_schedule"]

#: The reduction operations of NCCL (``ncclRedOp_t``), by simcoll's names.
REDUCTION_OPS = ("sum", "prod", "min", "max", "avg")

_COPY = 0
_REDUCE = 1
assert Op.REDUCE.value == "reduce"  # codes mirror simcoll.core.schedule._OP_CODES

_COMBINE = {
    "sum": np.add,
    "prod": np.multiply,
    "min": np.fmin,
    "max": np.fmax,
    "avg": np.add,  # divided by n at the end (see the module docstring)
}

Array = npt.NDArray[Any]


def _check_op(op: str) -> None:
    if op not in _COMBINE:
        raise ScheduleError(f"unknown reduction op {op!r}; valid: {', '.join(REDUCTION_OPS)}")


def _name(schedule: Schedule) -> str:
    return f"{schedule.collective.value}/{schedule.algorithm} on {schedule.n_ranks} ranks"


def _blocks_by_rank(table: dict[tuple[int, int], int], n_ranks: int) -> list[list[int]]:
    """The blocks each rank holds in ``table`` (initial or final holdings), sorted."""
    blocks: list[list[int]] = [[] for _ in range(n_ranks)]
    for rank, block in sorted(table):
        blocks[rank].append(block)
    return blocks


def _trunc_divide(values: Array, n: int) -> Array:
    """Integer division by ``n`` rounding toward zero, as C's ``/`` (and NCCL) does."""
    quotient: Array = values // n  # numpy floors: one too low for inexact negative quotients
    inexact_negative = (values < 0) & (quotient * n != values)
    result: Array = quotient + inexact_negative.astype(values.dtype)
    return result


def _average(values: Array, n: int) -> Array:
    if values.dtype.kind in "iu":
        return _trunc_divide(values, n)
    mean: Array = (values / values.dtype.type(n)).astype(values.dtype)
    return mean


class _Layout:
    """Where every piece lies in elements, and which blocks each rank reads and writes."""

    def __init__(self, schedule: Schedule, dtype: np.dtype[Any]) -> None:
        s = schedule
        itemsize = dtype.itemsize
        odd = np.flatnonzero(s.piece_bytes % itemsize)
        if len(odd):
            p = int(odd[0])
            raise ScheduleError(
                f"{_name(s)}: piece {p} holds {int(s.piece_bytes[p])} B, not a whole number "
                f"of {itemsize}-byte {dtype} elements; use a size_bytes whose blocks are a "
                f"multiple of {itemsize * s.pieces_per_block} B ({s.pieces_per_block} pieces "
                f"per block)"
            )
        self.offsets = np.concatenate([[0], np.cumsum(s.piece_bytes)]) // itemsize
        per = s.pieces_per_block
        self.block_elems = int(self.offsets[per])
        self.total = int(self.offsets[-1])
        self.inputs = _blocks_by_rank(s.collective.initial_holdings(s.n_ranks, s.root), s.n_ranks)
        self.outputs = _blocks_by_rank(s.collective.final_holdings(s.n_ranks, s.root), s.n_ranks)
        # nccl-tests gives every rank a send buffer of the same size: that of the rank
        # holding the most blocks (a broadcast's non-roots read none of theirs).
        self.input_elems = max(len(b) for b in self.inputs) * self.block_elems

    def block_slice(self, block: int) -> slice:
        return slice(block * self.block_elems, (block + 1) * self.block_elems)


def _check_inputs(schedule: Schedule, inputs: Sequence[Array]) -> np.dtype[Any]:
    s = schedule
    if len(inputs) != s.n_ranks:
        raise ScheduleError(f"{_name(s)}: got {len(inputs)} input buffers for {s.n_ranks} ranks")
    arrays = [np.asarray(x) for x in inputs]
    dtype = arrays[0].dtype
    if dtype.kind not in "iuf":
        raise ScheduleError(f"{_name(s)}: inputs must be integer or floating, got {dtype}")
    for rank, x in enumerate(arrays):
        if x.dtype != dtype or x.ndim != 1:
            raise ScheduleError(
                f"{_name(s)}: rank {rank}'s input is a {x.ndim}-d {x.dtype} array; every "
                f"input must be a 1-d {dtype} array"
            )
    return dtype


def run_schedule(schedule: Schedule, inputs: Sequence[Array], *, op: str = "sum") -> list[Array]:
    """Replay ``schedule`` on real buffers and return every rank's output buffer.

    Parameters
    ----------
    schedule
        Any schedule whose pieces hold whole elements of the inputs' dtype.
    inputs
        Rank r's input buffer (1-d, one dtype for all ranks), laid out as nccl-tests does
        (module docstring).
    op
        One of :data:`REDUCTION_OPS`; ignored by collectives that do not reduce.

    Returns
    -------
    list of numpy.ndarray
        Rank r's output buffer (empty for the non-roots of reduce and gather).

    Raises
    ------
    ScheduleError
        If the inputs do not fit the schedule, a piece is not whole elements, a transfer
        sends a piece its source does not hold (or reduces into one a rank does not
        hold), or a rank ends without a piece of its output.
    """
    _check_op(op)
    s = schedule
    dtype = _check_inputs(s, inputs)
    layout = _Layout(s, dtype)
    for rank, x in enumerate(inputs):
        if len(x) != layout.input_elems:
            raise ScheduleError(
                f"{_name(s)}: rank {rank}'s input has {len(x)} elements; a "
                f"{s.collective.value} of {s.size_bytes} B of {dtype} needs "
                f"{layout.input_elems} per rank"
            )
    state = _State(s, layout, dtype)
    for rank, blocks in enumerate(layout.inputs):
        for i, block in enumerate(blocks):
            chunk = slice(i * layout.block_elems, (i + 1) * layout.block_elems)
            state.load(rank, block, np.asarray(inputs[rank])[chunk])
    for t in topological_order(s):
        state.apply(t, _COMBINE[op])
    outputs = [state.output(rank, blocks) for rank, blocks in enumerate(layout.outputs)]
    if op == "avg" and s.collective.reduces:
        outputs = [_average(out, s.n_ranks) for out in outputs]
    return outputs


class _State:
    """The buffers of every endpoint (ranks, then switches) and which pieces they hold."""

    def __init__(self, schedule: Schedule, layout: _Layout, dtype: np.dtype[Any]) -> None:
        self.s = schedule
        self.layout = layout
        n_endpoints = schedule.n_ranks + getattr(schedule, "n_switches", 0)
        self.buffers = np.zeros((n_endpoints, layout.total), dtype=dtype)
        self.held = np.zeros((n_endpoints, schedule.n_pieces), dtype=bool)

    def pieces(self, block: int) -> slice:
        per = self.s.pieces_per_block
        return slice(block * per, (block + 1) * per)

    def load(self, rank: int, block: int, values: Array) -> None:
        self.buffers[rank, self.layout.block_slice(block)] = values
        self.held[rank, self.pieces(block)] = True

    def fail(self, t: int, why: str) -> ScheduleError:
        s = self.s
        return ScheduleError(f"{_name(s)}: transfer {t} ({s.src[t]}->{s.dst[t]}): {why}")

    def apply(self, t: int, combine: np.ufunc) -> None:
        """Replay transfer ``t``: copy or combine each of its pieces into the destination."""
        s, buffers, held, offsets = self.s, self.buffers, self.held, self.layout.offsets
        src, dst, kind = int(s.src[t]), int(s.dst[t]), int(s.op[t])
        for piece in s.pieces_of(t).tolist():
            where = slice(int(offsets[piece]), int(offsets[piece + 1]))
            if not held[src, piece]:
                raise self.fail(t, f"rank {src} sends piece {piece} that it does not hold")
            if kind == _REDUCE and held[dst, piece]:
                combine(buffers[dst, where], buffers[src, where], out=buffers[dst, where])
            elif kind == _REDUCE and dst < s.n_ranks:
                raise self.fail(t, f"reduces into piece {piece} that rank {dst} does not hold")
            else:  # a copy, or the first reduction into a switch (accumulating from zero)
                buffers[dst, where] = buffers[src, where]
                held[dst, piece] = True

    def output(self, rank: int, blocks: list[int]) -> Array:
        """Rank ``rank``'s output: its ``blocks``, each of which it must hold entirely."""
        for block in blocks:
            missing = np.flatnonzero(~self.held[rank, self.pieces(block)])
            if len(missing):
                piece = block * self.s.pieces_per_block + int(missing[0])
                raise ScheduleError(
                    f"{_name(self.s)}: rank {rank} ends without piece {piece} (block {block}) "
                    "of its output"
                )
        parts = [self.buffers[rank, self.layout.block_slice(b)] for b in blocks]
        return np.concatenate(parts) if parts else self.buffers[rank, :0].copy()


def _reduce_all(stacked: Array, op: str) -> Array:
    """Reduce rank-stacked inputs (axis 0) in their own dtype, wrapping like NCCL."""
    n = stacked.shape[0]
    ufunc = _COMBINE[op]
    result: Array = ufunc.reduce(stacked, axis=0, dtype=stacked.dtype)
    return _average(result, n) if op == "avg" else result


def reference(
    collective: Collective | str, inputs: Sequence[Array], op: str = "sum", root: int = 0
) -> list[Array]:
    """What every rank's output must be, computed directly with numpy.

    ``inputs`` are laid out as for :func:`run_schedule`; ``op`` applies to allreduce,
    reduce and reducescatter, ``root`` to broadcast, reduce, gather and scatter.

    >>> import numpy as np
    >>> xs = [np.array([1, 2], dtype=np.int32), np.array([3, 4], dtype=np.int32)]
    >>> [x.tolist() for x in reference("alltoall", xs)]
    [[1, 3], [2, 4]]
    >>> [x.tolist() for x in reference("reduce", xs, "max", root=1)]
    [[], [3, 4]]
    """
    _check_op(op)
    c = collective if isinstance(collective, Collective) else Collective.parse(collective)
    xs = [np.asarray(x) for x in inputs]
    n = len(xs)
    if n == 0:
        raise ScheduleError("reference: no inputs (a collective needs at least one rank)")
    if not 0 <= root < n:
        raise ScheduleError(f"reference: root {root} is not a rank of {n}")
    length = len(xs[0])
    if any(len(x) != length for x in xs):
        raise ScheduleError("reference: every rank's input must have the same length")
    if c in (Collective.REDUCESCATTER, Collective.SCATTER, Collective.ALLTOALL) and length % n:
        raise ScheduleError(
            f"reference: {c.value} input of {length} elements is not n = {n} blocks"
        )
    block = length // n
    empty = xs[0][:0].copy()

    def blocks_of(x: Array) -> list[Array]:
        return [x[i * block : (i + 1) * block].copy() for i in range(n)]

    if c is Collective.ALLREDUCE:
        reduced = _reduce_all(np.stack(xs), op)
        return [reduced.copy() for _ in range(n)]
    if c is Collective.REDUCE:
        reduced = _reduce_all(np.stack(xs), op)
        return [reduced if r == root else empty.copy() for r in range(n)]
    if c is Collective.REDUCESCATTER:
        return blocks_of(_reduce_all(np.stack(xs), op))
    if c is Collective.BROADCAST:
        return [xs[root].copy() for _ in range(n)]
    if c is Collective.ALLGATHER:
        return [np.concatenate(xs) for _ in range(n)]
    if c is Collective.GATHER:
        return [np.concatenate(xs) if r == root else empty.copy() for r in range(n)]
    if c is Collective.SCATTER:
        return blocks_of(xs[root])
    if c is Collective.ALLTOALL:
        sent = [blocks_of(x) for x in xs]  # sent[s][d]: what rank s sends rank d
        return [np.concatenate([sent[s][d] for s in range(n)]) for d in range(n)]
    assert c is Collective.SENDRECV
    return [xs[(r - 1) % n].copy() for r in range(n)]


def random_inputs(
    schedule: Schedule, *, op: str = "sum", dtype: npt.DTypeLike = np.float32, seed: int = 0
) -> list[Array]:
    """Random input buffers for ``schedule`` whose reductions are exact in any order.

    The values are small integers, exact in every dtype: in -64..64 (0..64 unsigned) for
    sum, min, max and avg, whose partial sums then stay far below 2**24 (float32's
    integer range) for any practical n; in {-2, -1, 1, 2} ({1, 2} unsigned) for prod, so
    a product of n ranks is at most 2**n in magnitude, and only {-1, 1} ({1}) above
    n = 24 so that float32 (24-bit mantissa) and int32 products stay exact. Results then
    do not depend on the order a schedule reduces in, and compare exactly.
    """
    _check_op(op)
    s = schedule
    dt = np.dtype(dtype)
    layout = _Layout(s, dt)
    rng = np.random.default_rng(seed)
    unsigned = dt.kind == "u"
    if op == "prod":
        choices = [1, 2] if unsigned else [-2, -1, 1, 2]
        if s.n_ranks > 24:
            choices = [1] if unsigned else [-1, 1]
        values = rng.choice(choices, size=(s.n_ranks, layout.input_elems))
    else:
        values = rng.integers(0 if unsigned else -64, 65, size=(s.n_ranks, layout.input_elems))
    return [row.astype(dt) for row in values]


def _same(got: Array, want: Array, rtol: float) -> npt.NDArray[np.bool_]:
    """Element-wise agreement: exact (NaN equal to NaN), or within ``rtol`` if given."""
    if got.dtype.kind != "f":
        return np.asarray(got == want)
    return np.isclose(got, want, rtol=rtol, atol=0.0, equal_nan=True)


def _where(layout: _Layout, rank: int, element: int) -> str:
    """Which block and piece element ``element`` of rank ``rank``'s output is."""
    blocks = layout.outputs[rank]
    block = blocks[element // layout.block_elems]
    offset = block * layout.block_elems + element % layout.block_elems
    piece = int(np.searchsorted(layout.offsets, offset, side="right")) - 1
    return f"block {block}, piece {piece}"


def check_numeric(
    schedule: Schedule,
    *,
    op: str = "sum",
    dtype: npt.DTypeLike = np.float32,
    seed: int = 0,
    inputs: Sequence[Array] | None = None,
    rtol: float = 0.0,
) -> None:
    """Raise :class:`ScheduleError` unless ``schedule`` computes numpy's result.

    Runs :func:`run_schedule` on ``inputs`` (default: :func:`random_inputs` for ``op``,
    ``dtype`` and ``seed``) and compares every rank's output with :func:`reference`.
    The default inputs reduce exactly, so the comparison is exact; pass ``rtol`` when
    supplying float inputs whose sums round differently in another order.

    Double-counted contributions show up with sum, prod and avg only: min and max are
    idempotent (``max(x, x) = x``), which is why the symbolic checker is the real proof.

    >>> from simcoll.core.collectives import Collective
    >>> from simcoll.core.schedule import ScheduleBuilder
    >>> b = ScheduleBuilder(Collective.REDUCE, "twice", n_ranks=2, size_bytes=8,
    ...                     pieces_per_block=1)
    >>> first = b.add(src=1, dst=0, pieces=[0], op=Op.REDUCE)
    >>> _ = b.add(src=1, dst=0, pieces=[0], op=Op.REDUCE, deps=[first])
    >>> xs = [np.array([1, 2], dtype=np.int32), np.array([10, 20], dtype=np.int32)]
    >>> check_numeric(b.build(), inputs=xs)
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ScheduleError: reduce/twice on 2 ranks, op sum, int32: rank 0 element 0 \
(block 0, piece 0): got 21, expected 11 (2 of 2 elements of rank 0 differ)
    """
    s = schedule
    if inputs is None:
        inputs = random_inputs(s, op=op, dtype=dtype, seed=seed)
    outputs = run_schedule(s, inputs, op=op)
    expected = reference(s.collective, inputs, op, s.root)
    layout = _Layout(s, outputs[0].dtype)
    what = f"{_name(s)}, op {op}, {outputs[0].dtype}"
    for rank, (got, want) in enumerate(zip(outputs, expected, strict=True)):
        if got.shape != want.shape:
            raise ScheduleError(
                f"{what}: rank {rank} ends with {len(got)} elements, expected {len(want)}"
            )
        bad = np.flatnonzero(~_same(got, want, rtol))
        if len(bad):
            i = int(bad[0])
            raise ScheduleError(
                f"{what}: rank {rank} element {i} ({_where(layout, rank, i)}): got "
                f"{got[i].item()!r}, expected {want[i].item()!r} ({len(bad)} of {len(got)} "
                f"elements of rank {rank} differ)"
            )
