"""Concurrent groups: no slowdown on disjoint links, the derived one on a shared link.

Two sockets, GPUs 0 1 on cpu0 and 2 3 on cpu1, each GPU on a root port::

    gpu0 gpu1 --- cpu0 ====== cpu1 --- gpu2 gpu3      (==== 10 GB/s, the rest 20 GB/s)
"""

from __future__ import annotations

import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.workloads.concurrent import concurrent
from simcoll.topology import pcie_tree

PCIE_BYTES_PER_S, PCIE_S = 20e9, 1e-6
CPU_BYTES_PER_S, CPU_S = 10e9, 2e-6
SIZE = 8_000_000


@pytest.fixture
def g():
    return pcie_tree(
        4,
        n_sockets=2,
        gpus_per_switch=0,
        pcie_bandwidth_bytes_per_s=PCIE_BYTES_PER_S,
        pcie_latency_s=PCIE_S,
        cpu_link_bandwidth_bytes_per_s=CPU_BYTES_PER_S,
        cpu_link_latency_s=CPU_S,
    )


def two_rank_allreduce_s(latency_s, bandwidth_bytes_per_s):
    """A 2-rank ring all-reduce, the links alone: 2 steps of S/2 each way, cut into pieces
    that follow one another on the link (each far longer than the latency): one route
    latency, then the S bytes at the link's rate."""
    return latency_s + SIZE / bandwidth_bytes_per_s


def test_groups_inside_one_socket_do_not_slow_each_other(g):
    # 0 1 and 2 3: routes gpu -> cpu -> gpu, two PCIe hops, nothing shared.
    m = concurrent(g, n_groups=2, layout="contiguous", size_bytes=SIZE, protocol=None).metrics
    alone = two_rank_allreduce_s(2 * PCIE_S, PCIE_BYTES_PER_S)
    for group in (0, 1):
        assert m[f"time_s_group_{group}"] == pytest.approx(alone, rel=1e-12)
        assert m[f"alone_time_s_group_{group}"] == pytest.approx(alone, rel=1e-12)
        assert m[f"slowdown_group_{group}"] == pytest.approx(1.0, rel=1e-12)
    assert m["max_slowdown"] == pytest.approx(1.0, rel=1e-12)
    assert m["n_groups"] == 2


def test_groups_across_sockets_halve_the_socket_link(g):
    # 0 2 and 1 3 both cross cpu0 -> cpu1 (and back): alone a flow gets its 10 GB/s,
    # together two flows share it, 5 GB/s each, in lockstep.
    latency_s = 2 * PCIE_S + CPU_S
    alone = two_rank_allreduce_s(latency_s, CPU_BYTES_PER_S)
    together = two_rank_allreduce_s(latency_s, CPU_BYTES_PER_S / 2)
    m = concurrent(g, n_groups=2, layout="strided", size_bytes=SIZE, protocol=None).metrics
    assert m["alone_time_s_group_1"] == pytest.approx(alone, rel=1e-12)
    assert m["time_s_group_1"] == pytest.approx(together, rel=1e-12)
    assert m["max_slowdown"] == pytest.approx(together / alone, rel=1e-12)
    listed = concurrent(g, groups=[[0, 2], [1, 3]], size_bytes=SIZE, protocol=None).metrics
    assert listed == m


def test_a_rank_may_be_in_two_groups(g):
    # Groups 0 1 and 1 2 share rank 1, each on its own stream; they run at once.
    m = concurrent(g, groups=[[0, 1], [1, 2]], size_bytes=SIZE).metrics
    assert m["time_s"] == pytest.approx(max(m["time_s_group_0"], m["time_s_group_1"]))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"layout": "random"},
            "concurrent: layout must be one of contiguous, strided, got 'random'",
        ),
        ({"n_groups": 3}, "concurrent: n_groups must be a divisor of n_ranks = 4, got 3"),
        (
            {"groups": [[0, 9]]},
            "concurrent: groups must be a non-empty list of non-empty lists "
            "of distinct ranks 0..3, got [[0, 9]]",
        ),
    ],
)
def test_bad_parameters(g, params, message):
    with pytest.raises(ConfigError) as info:
        concurrent(g, **params)
    assert str(info.value) == message
