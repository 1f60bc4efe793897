"""DDP: buckets filled in reverse, all-reduces overlapping the backward pass."""

from __future__ import annotations

import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.workloads.ddp import bucket_layers, ddp
from simcoll.topology import ring
from simcoll.topology.calibration import Calibration

B = 1e9  # bytes/s per link
L = 1e-6  # s per link
N = 4
LAYER_BYTES = 1_000_000
ONE_LAYER_PER_BUCKET = {"first_bucket_bytes": 1, "bucket_bytes": 1}


@pytest.fixture
def g():
    return ring(N, link_bandwidth_bytes_per_s=B, link_latency_s=L)


def allreduce_s(size_bytes):
    """Ring all-reduce on the ring, the links alone (``protocol=None``): a block of at
    most 512 KiB goes whole, each of the 2(n - 1) steps paying L + S/n/B; a larger one
    is cut into pieces that follow one another on each link, each far longer than L, so
    only the first pays it: L + 2(n - 1) S/n/B."""
    if size_bytes / N <= 512 * 2**10:
        return 2 * (N - 1) * (L + size_bytes / N / B)
    return L + 2 * (N - 1) * size_bytes / N / B


def test_buckets_fill_from_the_last_layer_and_close_at_their_cap():
    # Layers of 3 (forward order 0..4). Backward meets layer 4 first: 3 >= 1 (first cap)
    # closes [4]; then 3 + 3 >= 5 closes [3, 2]; then [1, 0].
    assert bucket_layers([3] * 5, first_bucket_bytes=1, bucket_bytes=5) == [[4], [3, 2], [1, 0]]
    # A bucket overshoots by one layer; what is left at the end is the last bucket.
    assert bucket_layers([1, 1, 9], first_bucket_bytes=4, bucket_bytes=4) == [[2], [1, 0]]
    assert bucket_layers([1, 1, 1], first_bucket_bytes=10, bucket_bytes=10) == [[2, 1, 0]]


def test_one_bucket_means_no_overlap(g):
    f, b = 1e-3, 2e-3
    m = ddp(
        g,
        protocol=None,
        layer_params_bytes=[LAYER_BYTES] * 4,
        forward_s_per_layer=f,
        backward_s_per_layer=b,
        first_bucket_bytes=10**9,
        bucket_bytes=10**9,
    ).metrics
    ar = allreduce_s(4 * LAYER_BYTES)
    assert m["n_buckets"] == 1
    assert m["time_s"] == pytest.approx(4 * (f + b) + ar, rel=1e-12)
    assert m["exposed_comm_s"] == pytest.approx(ar, rel=1e-12)
    assert m["hidden_comm_s"] == pytest.approx(0.0, abs=1e-15)
    assert m["no_overlap_time_s"] == pytest.approx(m["time_s"], rel=1e-12)


def test_fast_comm_hides_all_but_the_last_bucket(g):
    # Each all-reduce (1.506 ms) ends before the next layer's backward (2 ms) does.
    f, b = 1e-3, 2e-3
    ar = allreduce_s(LAYER_BYTES)
    assert ar < b
    m = ddp(
        g,
        protocol=None,
        layer_params_bytes=[LAYER_BYTES] * 4,
        forward_s_per_layer=f,
        backward_s_per_layer=b,
        **ONE_LAYER_PER_BUCKET,
    ).metrics
    assert m["n_buckets"] == 4
    assert m["time_s"] == pytest.approx(4 * (f + b) + ar, rel=1e-12)
    assert m["exposed_comm_s"] == pytest.approx(ar, rel=1e-12)
    assert m["hidden_comm_s"] == pytest.approx(3 * ar, rel=1e-12)
    assert m["comm_s"] == pytest.approx(4 * ar, rel=1e-12)
    assert m["allreduce_s"] == pytest.approx(4 * ar, rel=1e-12)
    assert m["no_overlap_time_s"] == pytest.approx(4 * (f + b) + 4 * ar, rel=1e-12)


def test_slow_comm_runs_back_to_back_from_the_first_bucket(g):
    # Backward of a layer (0.1 ms) is shorter than an all-reduce: once the first bucket
    # is ready (forward + one backward), the four all-reduces run back to back.
    f, b = 1e-3, 1e-4
    ar = allreduce_s(LAYER_BYTES)
    m = ddp(
        g,
        protocol=None,
        layer_params_bytes=[LAYER_BYTES] * 4,
        forward_s_per_layer=f,
        backward_s_per_layer=b,
        **ONE_LAYER_PER_BUCKET,
    ).metrics
    assert m["time_s"] == pytest.approx(4 * f + b + 4 * ar, rel=1e-12)
    assert m["hidden_comm_s"] == pytest.approx(3 * b, rel=1e-9)


def test_free_comm_leaves_the_compute_and_the_optimizer():
    free = ring(N, link_bandwidth_bytes_per_s=B, link_latency_s=0.0)
    m = ddp(
        free,
        protocol=None,
        layer_params_bytes=[0, 0, 0],
        forward_s_per_layer=[1e-3, 2e-3, 3e-3],
        backward_s_per_layer=2e-3,
        optimizer_s=5e-4,
    ).metrics
    assert m["time_s"] == pytest.approx(6e-3 + 3 * 2e-3 + 5e-4, rel=1e-12)
    assert m["comm_s"] == 0.0
    assert m["compute_s"] == pytest.approx(m["time_s"], rel=1e-12)


def test_even_split_and_bucket_metrics(g):
    m = ddp(
        g, n_layers=2, params_bytes=8 * 2**20, forward_s_per_layer=0.0, backward_s_per_layer=0.0,
        protocol=None,
    ).metrics  # fmt: skip
    # Two layers of 4 MiB: 4 MiB >= 1 MiB closes the first bucket, the second holds the rest.
    assert (m["n_layers"], m["n_buckets"], m["grad_bytes"]) == (2, 2, 8 * 2**20)
    assert (m["bucket_bytes"], m["first_bucket_bytes"]) == (25 * 2**20, 2**20)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"layer_params_bytes": [1, 1], "forward_s_per_layer": [1e-3]},
            "ddp: forward_s_per_layer must be one time or a list of 2 (one per layer), got [0.001]",
        ),
        (
            {"layer_params_bytes": []},
            "ddp: layer_params_bytes must be a non-empty list of sizes in bytes, got []",
        ),
        ({"n_layers": 0}, "ddp: n_layers must be an integer >= 1, got 0"),
        ({"optimizer_s": -1}, "ddp: optimizer_s must be a time >= 0 s, got -1"),
    ],
)
def test_bad_parameters(g, params, message):
    with pytest.raises(ConfigError) as info:
        ddp(g, **params)
    assert str(info.value) == message


def test_launch_cost_counts_once_in_the_no_overlap_time() -> None:
    launch_s, size = 1e-4, 2_000_000
    g = ring(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    r = ddp(
        g, layer_params_bytes=[size, size], forward_s_per_layer=1e-3, backward_s_per_layer=2e-3,
        first_bucket_bytes=1, bucket_bytes=1, calibration=Calibration(launch_s=launch_s),
        protocol=None,
    )  # fmt: skip
    # two buckets, each: launch, then a 2-rank ring all-reduce: 2 steps of size/2 at 1 GB/s
    allreduce_s = launch_s + 2 * (size / 2) / 1e9
    assert r.metrics["allreduce_s"] == pytest.approx(2 * allreduce_s)
    assert r.metrics["no_overlap_time_s"] == pytest.approx(6e-3 + 2 * allreduce_s)


def test_the_readme_step_on_128_gpus_runs_predicts_call_over_every_nic() -> None:
    # The README's step: h100-ib-fat-tree with 16 nodes, every default. Each bucket's
    # all-reduce is the call predict runs: NCCL's 16 channels over the 8 NICs of every
    # node; one bucket of 1 GiB takes exactly predict's time for that call.
    from pathlib import Path  # noqa: PLC0415

    from simcoll.prediction import predict  # noqa: PLC0415
    from simcoll.topology import load  # noqa: PLC0415

    topology = Path(__file__).resolve().parents[3] / "topologies" / "h100-ib-fat-tree.toml"
    graph = load(topology, overrides={"n_nodes": "16"})
    step = ddp(graph, bucket_bytes=25 * 2**20)
    nic_ports = [i for i, (u, v) in enumerate(step.timeline.links) if ".nic" in u and "leaf" in v]
    assert len(nic_ports) == 16 * 8
    assert (step.timeline.link_bytes[nic_ports] > 0).all()
    one = ddp(graph, layer_params_bytes=[2**30], first_bucket_bytes=2**30, bucket_bytes=2**30)
    expected = predict(graph, "allreduce", [2**30]).rows[0].time_s
    assert one.metrics["allreduce_s"] == pytest.approx(expected, rel=1e-9)
