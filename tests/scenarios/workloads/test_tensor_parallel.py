"""Tensor-parallel MLP: GEMM time from flops, all-reduces on the critical path."""

from __future__ import annotations

import math

import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.workloads.tensor_parallel import tensor_parallel_mlp
from simcoll.topology import ring

B, L = 1e9, 1e-6
TOKENS, HIDDEN, DTYPE = 1024, 1024, 2
FLOPS_PER_S = 1e12


@pytest.fixture
def g():
    return ring(4, link_bandwidth_bytes_per_s=B, link_latency_s=L)


def allreduce_s(n, size_bytes):
    """Ring all-reduce on the ring, the links alone: a block of at most 512 KiB goes
    whole, each of the 2(n - 1) steps paying L + S/n/B; a larger one is cut into pieces
    that follow one another on each link (each far longer than L): L + 2(n - 1) S/n/B."""
    if size_bytes / n <= 512 * 2**10:
        return 2 * (n - 1) * (L + size_bytes / n / B)
    return L + 2 * (n - 1) * size_bytes / n / B


def test_each_layer_is_three_gemm_times_and_two_allreduces(g):
    # Per rank, forward: 2 GEMMs of 2 T h (4h / tp) flops; backward twice that.
    tp = 4
    forward_s = 2 * (2 * TOKENS * HIDDEN * 4 * HIDDEN / tp) / FLOPS_PER_S
    ar = allreduce_s(tp, TOKENS * HIDDEN * DTYPE)
    m = tensor_parallel_mlp(
        g,
        batch_tokens=TOKENS,
        hidden_size=HIDDEN,
        n_layers=2,
        flops_per_s=FLOPS_PER_S,
        protocol=None,
    ).metrics
    assert m["gemm_forward_s_per_layer"] == pytest.approx(forward_s, rel=1e-12)
    assert m["time_s"] == pytest.approx(2 * (3 * forward_s + 2 * ar), rel=1e-12)
    assert m["comm_s"] == m["exposed_comm_s"] == pytest.approx(4 * ar, rel=1e-12)
    assert (m["tp_degree"], m["n_groups"], m["allreduce_bytes"]) == (4, 1, TOKENS * HIDDEN * 2)


def test_with_free_compute_only_the_allreduces_remain(g):
    m = tensor_parallel_mlp(
        g,
        batch_tokens=TOKENS,
        hidden_size=HIDDEN,
        n_layers=3,
        flops_per_s=math.inf,
        protocol=None,
    ).metrics
    assert m["time_s"] == pytest.approx(6 * allreduce_s(4, TOKENS * HIDDEN * DTYPE), rel=1e-12)


def test_two_groups_on_their_own_links_run_as_fast_as_one(g):
    # Groups 0 1 and 2 3 of the ring use the links 0-1 and 2-3 only.
    tp = 2
    forward_s = 16 * TOKENS * HIDDEN**2 / tp / FLOPS_PER_S
    ar = allreduce_s(tp, TOKENS * HIDDEN * DTYPE)
    m = tensor_parallel_mlp(
        g,
        tp_degree=2,
        batch_tokens=TOKENS,
        hidden_size=HIDDEN,
        flops_per_s=FLOPS_PER_S,
        protocol=None,
    ).metrics
    assert m["n_groups"] == 2
    assert m["time_s"] == pytest.approx(3 * forward_s + 2 * ar, rel=1e-12)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"tp_degree": 3},
            "tensor_parallel_mlp: tp_degree must be a divisor of n_ranks = 4, got 3",
        ),
        ({"flops_per_s": 0}, "tensor_parallel_mlp: flops_per_s must be a number > 0, got 0"),
        ({"hidden_size": 1.5}, "tensor_parallel_mlp: hidden_size must be an integer >= 1, got 1.5"),
    ],
)
def test_bad_parameters(g, params, message):
    with pytest.raises(ConfigError) as info:
        tensor_parallel_mlp(g, **params)
    assert str(info.value) == message
