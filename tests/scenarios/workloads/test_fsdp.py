"""FSDP: all-gather before forward and backward, reduce-scatter after, prefetch ahead."""

from __future__ import annotations

import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.workloads.fsdp import fsdp
from simcoll.topology import ring

B, L, N = 1e9, 1e-6, 4
SIZE = 4_000_000  # per layer, a multiple of N


@pytest.fixture
def g():
    return ring(N, link_bandwidth_bytes_per_s=B, link_latency_s=L)


def gather_s(size_bytes):
    """Ring all-gather or reduce-scatter of nccl-tests size S, the links alone: n - 1 steps
    of S/n, cut into pieces that follow one another on each link (each far longer than
    the latency), so one latency, then (n - 1) S/n at B."""
    return L + (N - 1) * size_bytes / N / B


def test_one_layer_without_compute_is_the_sum_of_its_three_collectives(g):
    m = fsdp(
        g, layer_params_bytes=[SIZE], forward_s_per_layer=0.0, backward_s_per_layer=0.0,
        protocol=None,
    ).metrics  # fmt: skip
    assert m["time_s"] == pytest.approx(3 * gather_s(SIZE), rel=1e-12)
    assert m["comm_s"] == m["exposed_comm_s"] == pytest.approx(m["time_s"], rel=1e-12)


def test_prefetch_hides_every_allgather_but_the_first(g):
    # Without contention (ideal model), each all-gather (3 ms) is issued when the
    # previous layer's compute (>= 4 ms) starts, so only the first one and the last
    # reduce-scatter are exposed.
    f, b, n_layers = 4e-3, 5e-3, 3
    t = gather_s(SIZE)
    m = fsdp(
        g,
        model="ideal",
        layer_params_bytes=[SIZE] * n_layers,
        forward_s_per_layer=f,
        backward_s_per_layer=b,
        protocol=None,
    ).metrics
    assert m["time_s"] == pytest.approx(t + n_layers * (f + b) + t, rel=1e-12)
    assert m["exposed_comm_s"] == pytest.approx(2 * t, rel=1e-12)


def test_without_prefetch_every_allgather_is_exposed(g):
    # 2 x 3 all-gathers in the critical path; reduce-scatters hide behind them but the last.
    f, b, n_layers = 4e-3, 5e-3, 3
    t = gather_s(SIZE)
    m = fsdp(
        g,
        model="ideal",
        layer_params_bytes=[SIZE] * n_layers,
        forward_s_per_layer=f,
        backward_s_per_layer=b,
        prefetch=False,
        protocol=None,
    ).metrics
    assert m["time_s"] == pytest.approx(2 * n_layers * t + n_layers * (f + b) + t, rel=1e-12)
    assert m["prefetch"] == 0.0


def test_a_reduce_scatter_shares_the_ring_with_the_next_allgather(g):
    # No compute, no prefetch, 3 layers. Forward: 3 all-gathers alone. Backward: the
    # all-gather of layer 2 alone; then reduce-scatter i with all-gather i - 1, twice:
    # same links, same steps, so in lockstep at half bandwidth each: one latency, then
    # both calls' (n - 1) 2 S/n on each link; then the last reduce-scatter alone.
    t = gather_s(SIZE)
    pair = L + (N - 1) * 2 * SIZE / N / B
    m = fsdp(
        g,
        layer_params_bytes=[SIZE] * 3,
        forward_s_per_layer=0.0,
        backward_s_per_layer=0.0,
        prefetch=False,
        protocol=None,
    ).metrics
    assert m["time_s"] == pytest.approx(4 * t + 2 * pair + t, rel=1e-9)


def test_layers_are_padded_to_a_multiple_of_the_ranks(g):
    m = fsdp(
        g, layer_params_bytes=[10, 4], forward_s_per_layer=0.0, backward_s_per_layer=0.0
    ).metrics
    assert m["reducescatter_bytes"] == 12 + 4
    assert m["allgather_bytes"] == 2 * (12 + 4)


def test_bad_prefetch(g):
    with pytest.raises(ConfigError) as info:
        fsdp(g, prefetch="yes")
    assert str(info.value) == "fsdp: prefetch must be true or false, got 'yes'"
