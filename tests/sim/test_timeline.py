"""Tests of simcoll.sim.timeline's binned_bytes: bytes per time bin, each transfer moving its
bytes evenly from start to end (a timeline's per-link load)."""

from __future__ import annotations

import numpy as np
import pytest

from simcoll.sim.timeline import binned_bytes


def dense(size: np.ndarray, start: np.ndarray, end: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The definition, transfer by bin edge: the share of each transfer's bytes moved by
    each edge, clipped to [0, 1] (all at once for a transfer of no duration, at the first
    edge after it or at the last edge); bytes per bin are the differences."""
    duration = (end - start)[:, None]
    moving = np.clip((edges - start[:, None]) / np.where(duration > 0, duration, 1.0), 0.0, 1.0)
    instant = (edges > start[:, None]) | (edges == edges[-1])
    return np.diff(size @ np.where(duration > 0, moving, instant))


def test_hand_count() -> None:
    # 4 B over [0, 2] s: 2 B a second; 1 B at 3 s; a transfer half before the first edge
    # keeps only its half inside; one after the last edge counts nowhere
    edges = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    got = binned_bytes(np.array([4.0, 1.0, 2.0, 5.0]), np.array([0.0, 3.0, -1.0, 5.0]),
                       np.array([2.0, 3.0, 1.0, 6.0]), edges)  # fmt: skip
    assert got.tolist() == [2.0 + 1.0, 2.0, 0.0, 1.0]


@pytest.mark.parametrize("seed", range(40))
def test_the_same_bytes_as_the_definition(seed: int) -> None:
    # issue 41: the dense form (transfers x bins) took 83 s of a 127 s FSDP step with LL;
    # the per-bin sums must stay those of the definition, edges and instants included
    rng = np.random.default_rng(seed)
    n, n_bins = int(rng.integers(1, 400)), int(rng.integers(1, 60))
    edges = np.sort(rng.random(n_bins + 1)) * rng.choice([1e-6, 1.0, 1e3]) + rng.choice([0, 0.5])
    if seed % 2:
        edges = np.linspace(edges[0], edges[-1], n_bins + 1)
    span = edges[-1] - edges[0]
    start = edges[0] + (rng.random(n) * 1.4 - 0.2) * span
    duration = rng.random(n) * span * rng.choice([0.01, 0.5, 2.0])
    duration[rng.random(n) < 0.2] = 0.0
    on_edge = rng.random(n) < 0.2  # starts and ends exactly on bin edges
    start[on_edge] = edges[rng.integers(0, n_bins + 1, on_edge.sum())]
    end = start + duration
    on_edge = rng.random(n) < 0.1
    end[on_edge] = np.maximum(edges[rng.integers(0, n_bins + 1, on_edge.sum())], start[on_edge])
    size = rng.random(n) * 1e6
    got = binned_bytes(size, start, end, edges)
    np.testing.assert_allclose(got, dense(size, start, end, edges), rtol=0, atol=1e-9 * size.sum())


def test_no_bins_or_no_transfers() -> None:
    assert binned_bytes(np.ones(3), np.zeros(3), np.ones(3), np.array([0.0])).tolist() == []
    empty = np.zeros(0)
    assert binned_bytes(empty, empty, empty, np.array([0.0, 1.0, 2.0])).tolist() == [0.0, 0.0]
