"""Pipeline parallelism against the GPipe closed form."""

from __future__ import annotations

import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.workloads.pipeline import pipeline, stage_order
from simcoll.topology import ring

F, B_S = 1e-3, 2e-3  # forward and backward per micro-batch per stage


@pytest.fixture
def free():
    """Copies of 0 bytes over links without latency cost nothing."""
    return ring(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)


def test_stage_orders():
    gpipe = stage_order("gpipe", stage=1, n_stages=3, n_microbatches=2)
    assert gpipe == [("forward", 0), ("forward", 1), ("backward", 0), ("backward", 1)]
    # 1F1B on the last stage: no warm-up, forward and backward in turn.
    last = stage_order("1f1b", stage=2, n_stages=3, n_microbatches=2)
    assert last == [("forward", 0), ("backward", 0), ("forward", 1), ("backward", 1)]
    # More warm-up than micro-batches: all forwards, then all backwards.
    first = stage_order("1f1b", stage=0, n_stages=4, n_microbatches=2)
    assert first == gpipe


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("n_microbatches", [1, 3, 8])
def test_free_communication_gives_the_closed_form(free, schedule, n_microbatches):
    m, p = n_microbatches, 4
    metrics = pipeline(
        free,
        n_microbatches=m,
        activation_bytes=0,
        stage_forward_s=F,
        stage_backward_s=B_S,
        schedule=schedule,
    ).metrics
    assert metrics["time_s"] == pytest.approx((m + p - 1) * (F + B_S), rel=1e-12)
    assert metrics["bubble_fraction"] == pytest.approx((p - 1) / (m + p - 1), rel=1e-9)
    assert metrics["ideal_bubble_fraction"] == pytest.approx((p - 1) / (m + p - 1), rel=1e-12)


def test_gpipe_pays_each_hop_once_per_direction():
    # A copy to the next stage takes c = L + A/B < F, so it never queues: the first
    # micro-batch reaches the last stage (p - 1) hops late, and the first gradient
    # reaches stage 0 (p - 1) hops late: (m + p - 1)(f + b) + 2 (p - 1) c.
    lat, bw, size = 1e-5, 1e9, 200_000
    g = ring(4, link_bandwidth_bytes_per_s=bw, link_latency_s=lat)
    c = lat + size / bw
    m = pipeline(
        g, n_microbatches=6, activation_bytes=size, stage_forward_s=F, stage_backward_s=B_S
    ).metrics
    assert m["time_s"] == pytest.approx(9 * (F + B_S) + 2 * 3 * c, rel=1e-12)


def test_n_stages_uses_the_first_ranks(free):
    m = pipeline(
        free,
        n_stages=2,
        n_microbatches=2,
        activation_bytes=0,
        stage_forward_s=[F, 2 * F],
        stage_backward_s=0.0,
    ).metrics
    # Stage 1 is the slower: F0 on 0 (0-1), F0 on 1 (1-3), F1 on 1 (3-5).
    assert m["time_s"] == pytest.approx(5 * F, rel=1e-12)
    assert m["n_stages"] == 2


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"schedule": "zero-bubble"},
            "pipeline: schedule must be one of gpipe, 1f1b, got 'zero-bubble'",
        ),
        ({"n_stages": 5}, "pipeline: n_stages must be at most 4 (the topology's GPUs), got 5"),
        (
            {"stage_forward_s": [1e-3] * 3},
            "pipeline: stage_forward_s must be one time or a list "
            "of 4 (one per stage), got [0.001, 0.001, 0.001]",
        ),
    ],
)
def test_bad_parameters(free, params, message):
    with pytest.raises(ConfigError) as info:
        pipeline(free, **params)
    assert str(info.value) == message
