"""MoE: all-to-all, experts, all-to-all, on a switch where the closed form is exact."""

from __future__ import annotations

import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.workloads.moe import moe
from simcoll.topology import switch_star

B, L = 1e9, 1e-6


@pytest.fixture
def g():
    return switch_star(4, link_bandwidth_bytes_per_s=B, link_latency_s=L)


def alltoall_s(n, size_bytes):
    """Direct all-to-all on a star, the links alone: each GPU's link carries its n - 1
    blocks of S/n at once (each in pieces that follow one another), so each flow gets
    B/(n - 1); a route is two links."""
    return 2 * L + (n - 1) * (size_bytes / n) / B


def test_each_layer_is_two_alltoalls_around_the_experts(g):
    size = 1000 * 2 * 1000 * 2  # tokens x top_k x hidden x dtype
    m = moe(
        g,
        tokens_per_rank=1000,
        top_k=2,
        hidden_size=1000,
        dtype_bytes=2,
        expert_s=1e-3,
        n_layers=2,
        protocol=None,
    ).metrics
    assert m["alltoall_bytes"] == size
    assert m["time_s"] == pytest.approx(2 * (2 * alltoall_s(4, size) + 1e-3), rel=1e-12)
    assert m["exposed_comm_s"] == pytest.approx(4 * alltoall_s(4, size), rel=1e-12)


def test_groups_run_at_once_on_their_own_links(g):
    size = 1_000_000
    m = moe(
        g,
        tokens_per_rank=size,
        top_k=1,
        hidden_size=1,
        dtype_bytes=1,
        expert_s=0.0,
        ep_degree=2,
        protocol=None,
    ).metrics
    assert (m["ep_degree"], m["n_groups"]) == (2, 2)
    assert m["time_s"] == pytest.approx(2 * alltoall_s(2, size), rel=1e-12)


def test_the_size_is_padded_to_whole_blocks(g):
    m = moe(g, tokens_per_rank=1, top_k=1, hidden_size=1, dtype_bytes=1, expert_s=0.0).metrics
    assert m["alltoall_bytes"] == 4


def test_bad_ep_degree(g):
    with pytest.raises(ConfigError) as info:
        moe(g, ep_degree=3)
    assert str(info.value) == "moe: ep_degree must be a divisor of n_ranks = 4, got 3"
