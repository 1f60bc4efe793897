"""Tests of simcoll.prediction.workgraph: which calls meet, against a pairwise count."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from simcoll.prediction.workgraph import Comm, Solo, meeting


def _comm(links: list[int]) -> Comm:
    solo = Solo(1.0, 0.0, 1.0, 0.0, np.array(links, dtype=np.int64), np.ones(len(links)),
                np.ones(len(links)), None, lambda: None)  # type: ignore[arg-type, return-value]  # fmt: skip
    return Comm("c", (0,), "comm", (), (), solo)


def _run(intervals: list[tuple[float, float]]) -> tuple[Any, Any]:
    """A built graph and its result where call i opens at node 2i and ends at 2i + 1."""
    ends = np.array([t for interval in intervals for t in interval])
    built = SimpleNamespace(opened={i: 2 * i for i in range(len(intervals))},
                            end=[2 * i + 1 for i in range(len(intervals))])  # fmt: skip
    return built, SimpleNamespace(end_s=ends)


def _pairwise(intervals: list[tuple[float, float]], links: list[list[int]]) -> set[int]:
    """Every call that shares a link with another while both run (open intervals)."""
    found = set()
    for i, j in itertools.combinations(range(len(intervals)), 2):
        (a, b), (c, d) = intervals[i], intervals[j]
        if b > a and d > c and a < d and c < b and set(links[i]) & set(links[j]):
            found |= {i, j}
    return found


def test_calls_meet_where_they_share_a_link_while_both_run() -> None:
    # 0 and 1 share link 5 and overlap; 2 starts as 1 ends (touching, not meeting); 3 runs
    # beside 0 on its own links; 4 takes no time.
    intervals = [(0.0, 2.0), (1.0, 3.0), (3.0, 4.0), (0.5, 1.5), (1.0, 1.0)]
    links = [[5, 6], [5, 7], [7], [8, 9], [5]]
    built, result = _run(intervals)
    ops = [_comm(used) for used in links]
    assert meeting(ops, built, result, "flow") == {0, 1}  # type: ignore[arg-type]
    assert meeting(ops, built, result, "ideal") == set()  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(5))
def test_meeting_calls_are_those_a_pairwise_count_finds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 60
    starts = rng.integers(0, 40, n).astype(float)  # integers: many exact ties and touches
    intervals = [(s, s + float(rng.integers(0, 6))) for s in starts]
    links = [sorted(rng.choice(30, size=int(rng.integers(1, 4)), replace=False).tolist())
             for _ in range(n)]  # fmt: skip
    built, result = _run(intervals)
    ops = [_comm(used) for used in links]
    expected = _pairwise(intervals, links)
    assert expected, "no call meets another: the case shows nothing"
    assert meeting(ops, built, result, "flow") == expected  # type: ignore[arg-type]
