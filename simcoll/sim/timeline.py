"""What a workload did, rank by rank: the data behind traces, Gantt charts and overlap.

A :class:`Timeline` is plain data (no SimPy): the *spans* during which each rank was busy
(computing, or inside a collective call), every point-to-point *transfer* the fabric
carried, and how busy each link was. A rank runs its spans on *streams*, as CUDA does:
``"compute"`` for kernels, ``"comm"`` for collectives (``"comm 1"``, ``"comm 2"``... when a
rank is in several collectives at once). Spans of one (rank, stream) never overlap.

>>> t = Timeline(
...     n_ranks=2,
...     time_s=3.0,
...     spans=(
...         Span(rank=0, stream="compute", name="backward", start_s=0.0, end_s=2.0),
...         Span(rank=0, stream="comm", name="allreduce", start_s=1.0, end_s=3.0),
...     ),
... )
>>> t.busy_s(0, "compute"), t.busy_s(0, "comm"), t.busy_s(1, "comm")
(2.0, 2.0, 0.0)
>>> t.exposed_comm_s(0)  # comm not hidden behind compute: 2.0 to 3.0
1.0
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

__all__ = ["Span", "Timeline", "TransferBatch", "overlap_s", "union_s"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

COMPUTE = "compute"
COMM = "comm"


@dataclass(frozen=True, slots=True)
class Span:
    """One rank busy with one thing from ``start_s`` to ``end_s`` on one stream."""

    rank: int
    stream: str
    name: str
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        """``end_s - start_s``."""
        return self.end_s - self.start_s

    @property
    def is_compute(self) -> bool:
        """Whether the span is on the compute stream."""
        return self.stream == COMPUTE


@dataclass(frozen=True, eq=False)
class TransferBatch:
    """The transfers of one collective call (or one point-to-point copy), as arrays.

    Ranks are global ranks of the workload, not ranks within the collective's group.
    """

    name: str
    src_rank: IntArray
    dst_rank: IntArray
    size_bytes: IntArray
    start_s: FloatArray  # first byte moves
    end_s: FloatArray  # last byte arrives

    def __len__(self) -> int:
        return len(self.src_rank)


@dataclass(frozen=True, eq=False, kw_only=True)
class Timeline:
    """Spans, transfers and link load of one simulated workload."""

    n_ranks: int
    time_s: float
    spans: tuple[Span, ...] = ()
    transfers: tuple[TransferBatch, ...] = ()
    links: tuple[tuple[str, str], ...] = ()
    link_bytes: FloatArray = field(default_factory=lambda: np.zeros(0))
    link_busy_s: FloatArray = field(default_factory=lambda: np.zeros(0))
    link_bandwidth_bytes_per_s: FloatArray = field(default_factory=lambda: np.zeros(0))
    # Bytes each link carried in each of equal time bins over [0, time_s] (links x bins),
    # each transfer's wire bytes spread evenly over its transfer time; empty if not kept.
    link_load_bytes: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    # What the run could not do as asked, in one line each (a choice too large to simulate).
    notes: tuple[str, ...] = ()

    def link_utilisation_over_time(self) -> tuple[FloatArray, FloatArray]:
        """``(bin_edges_s, utilisation)``: per link and time bin, the share of capacity used.

        >>> t = Timeline(n_ranks=2, time_s=2.0, links=(("a", "b"),),
        ...              link_bandwidth_bytes_per_s=np.array([10.0]),
        ...              link_load_bytes=np.array([[10.0, 5.0]]))
        >>> edges, used = t.link_utilisation_over_time()
        >>> edges.tolist(), used.tolist()
        ([0.0, 1.0, 2.0], [[1.0, 0.5]])
        """
        n_bins = self.link_load_bytes.shape[1] if self.link_load_bytes.ndim == 2 else 0
        edges = np.linspace(0.0, self.time_s, n_bins + 1)
        capacity = self.link_bandwidth_bytes_per_s[:, None] * np.diff(edges)[None, :]
        used = np.divide(
            self.link_load_bytes,
            capacity,
            out=np.zeros_like(self.link_load_bytes),
            where=capacity > 0,
        )
        return edges, used

    def streams(self, rank: int) -> list[str]:
        """The streams rank ``rank`` used, compute first, then the comm streams in order."""
        names = {s.stream for s in self._spans_by_rank.get(rank, [])}
        return sorted(names, key=lambda name: (name != COMPUTE, len(name), name))

    def spans_of(self, rank: int, stream: str | None = None) -> list[Span]:
        """Spans of one rank (on one stream, if given), by start time."""
        mine = self._spans_by_rank.get(rank, [])
        chosen = [s for s in mine if stream in (None, s.stream)]
        return sorted(chosen, key=lambda s: (s.start_s, s.end_s))

    @cached_property
    def _spans_by_rank(self) -> dict[int, list[Span]]:
        """The spans of each rank, found once (a 1,024-GPU step has some 100,000)."""
        by_rank: dict[int, list[Span]] = {}
        for span in self.spans:
            by_rank.setdefault(span.rank, []).append(span)
        return by_rank

    def busy_s(self, rank: int, stream: str) -> float:
        """Total time rank ``rank`` was busy on ``stream`` (its spans do not overlap)."""
        return float(sum(s.duration_s for s in self.spans_of(rank, stream)))

    def comm_s(self, rank: int) -> float:
        """Time rank ``rank`` spent inside at least one collective."""
        return union_s((s.start_s, s.end_s) for s in self.spans_of(rank) if not s.is_compute)

    def compute_s(self, rank: int) -> float:
        """Time rank ``rank`` spent computing."""
        return self.busy_s(rank, COMPUTE)

    def exposed_comm_s(self, rank: int) -> float:
        """Communication time of ``rank`` not overlapped by its own compute."""
        comm = [(s.start_s, s.end_s) for s in self.spans_of(rank) if not s.is_compute]
        compute = [(s.start_s, s.end_s) for s in self.spans_of(rank, COMPUTE)]
        return union_s(comm) - overlap_s(comm, compute)

    def n_transfers(self) -> int:
        """Number of point-to-point transfers in all batches."""
        return sum(len(b) for b in self.transfers)


def binned_bytes(
    size_bytes: FloatArray, start_s: FloatArray, end_s: FloatArray, edges_s: FloatArray
) -> FloatArray:
    """Bytes per time bin when each transfer moves its bytes evenly from start to end.

    A transfer of zero duration puts all its bytes in the bin of its instant. Bytes moved
    before the first edge or after the last are not counted (an instant at or after the
    last edge falls in the last bin).

    Each transfer adds its rate to the bins it spans whole (a difference array over the
    bins) and its partial shares to the bins it starts and ends in: O((T + B) log B) for
    T transfers and B bins. The dense T x B form took 83 s of a 127 s FSDP step with LL
    (ten million transfers, 200 bins) to record its timeline (issue 41).

    >>> binned_bytes(np.array([4.0, 1.0]), np.array([0.0, 3.0]), np.array([2.0, 3.0]),
    ...              np.array([0.0, 1.0, 2.0, 3.0, 4.0])).tolist()
    [2.0, 2.0, 0.0, 1.0]
    """
    n_bins = len(edges_s) - 1
    if n_bins < 1 or len(size_bytes) == 0:
        return np.zeros(max(n_bins, 0))
    size = np.asarray(size_bytes, dtype=np.float64)
    start, end = np.asarray(start_s, dtype=np.float64), np.asarray(end_s, dtype=np.float64)
    first, last = edges_s[0], edges_s[-1]

    def add(bins: npt.NDArray[np.int64], values: FloatArray, length: int = n_bins) -> FloatArray:
        counted = np.bincount(bins, weights=values, minlength=length)[:length]
        return counted.astype(np.float64, copy=False)  # (an int array when nothing counts)

    timed = end > start
    # zero duration: all the bytes in the bin of the instant (the last bin from its edge on)
    instant = ~timed & (start >= first)
    at = np.minimum(np.searchsorted(edges_s, start[instant], side="right") - 1, n_bins - 1)
    out = add(at, size[instant])
    # a duration: the rate over the part of [start, end] inside [first, last]
    rate = size[timed] / (end[timed] - start[timed])
    lo, hi = np.clip(start[timed], first, last), np.clip(end[timed], first, last)
    inside = hi > lo
    rate, lo, hi = rate[inside], lo[inside], hi[inside]
    a = np.minimum(np.searchsorted(edges_s, lo, side="right") - 1, n_bins - 1)
    b = np.maximum(np.minimum(np.searchsorted(edges_s, hi, side="left") - 1, n_bins - 1), a)
    one = a == b  # within one bin
    out += add(a[one], rate[one] * (hi[one] - lo[one]))
    many = ~one
    a, b, r = a[many], b[many], rate[many]
    out += add(a, r * (edges_s[a + 1] - lo[many]))  # the partial first bin
    out += add(b, r * (hi[many] - edges_s[b]))  # the partial last bin
    whole = add(a + 1, r, n_bins + 1) - add(b, r, n_bins + 1)  # the bins between, whole
    out += np.cumsum(whole[:-1]) * np.diff(edges_s)
    return out


def union_s(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals.

    >>> union_s([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)])
    4.0
    """
    total = 0.0
    end = -np.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _merged(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def overlap_s(first: Sequence[tuple[float, float]], second: Sequence[tuple[float, float]]) -> float:
    """Length of (union of ``first``) intersected with (union of ``second``).

    >>> overlap_s([(0.0, 2.0), (5.0, 6.0)], [(1.0, 5.5)])
    1.5
    """
    a, b = _merged(first), _merged(second)
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
