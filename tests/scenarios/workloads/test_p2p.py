"""Copies from one GPU to several: full bandwidth on own links, shared on a common one."""

from __future__ import annotations

import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.workloads.p2p import p2p
from simcoll.topology import LinkKind, load, ring, switch_star

B, L = 1e9, 1e-6
SIZE = 1_000_000


def test_destinations_on_their_own_links_each_get_full_bandwidth():
    # Ring: 0 -> 1 and 0 -> 3 leave gpu0 on different links.
    g = ring(4, link_bandwidth_bytes_per_s=B, link_latency_s=L)
    m = p2p(g, dst_ranks=[1, 3], size_bytes=SIZE, n_copies=3).metrics
    for dst in (1, 3):
        assert m[f"time_s_to_{dst}"] == pytest.approx(3 * (L + SIZE / B), rel=1e-12)
        assert m[f"bandwidth_bytes_per_s_to_{dst}"] == pytest.approx(
            3 * SIZE / (3 * (L + SIZE / B)), rel=1e-12
        )


def test_destinations_behind_one_link_share_it():
    # Star: both copies leave gpu0 on its one link to the switch, B/2 each; a route is
    # two links of latency L.
    g = switch_star(4, link_bandwidth_bytes_per_s=B, link_latency_s=L)
    m = p2p(g, dst_ranks=[1, 2], size_bytes=SIZE, n_copies=2).metrics
    expected = 2 * (2 * L + SIZE / (B / 2))
    assert m["time_s_to_1"] == pytest.approx(expected, rel=1e-12)
    assert m["time_s_to_2"] == pytest.approx(expected, rel=1e-12)
    assert m["bandwidth_bytes_per_s"] == pytest.approx(4 * SIZE / expected, rel=1e-12)


def test_dgx1_v100_copies_to_gpus_1_2_and_4(repo):
    # The classic question: 10 tensors of 10^7 float32 from GPU 0 to GPUs 1, 2 and 4 at
    # once on a DGX-1 (V100). In its hybrid cube mesh GPU 0 has its own NVLink to each:
    # one link (NV1) to GPUs 1 and 2, two bonded links (NV2) to GPU 4, so 4 gets twice
    # the bandwidth. Expected times come from the file's link bandwidths and latencies.
    g = load(repo / "topologies" / "dgx1-v100.toml")
    size, copies = 10**7 * 4, 10
    m = p2p(g, src_rank=0, dst_ranks=[1, 2, 4], size_bytes=size, n_copies=copies).metrics
    for dst in (1, 2, 4):
        link = g.edges["gpu0", f"gpu{dst}"]
        assert link["kind"] is LinkKind.NVLINK
        expected = copies * (link["latency_s"] + size / link["bandwidth_bytes_per_s"])
        assert m[f"time_s_to_{dst}"] == pytest.approx(expected, rel=1e-12)
    nvlink_bytes_per_s = g.edges["gpu0", "gpu1"]["bandwidth_bytes_per_s"]
    assert g.edges["gpu0", "gpu4"]["bandwidth_bytes_per_s"] == 2 * nvlink_bytes_per_s
    assert m["bandwidth_bytes_per_s_to_4"] / m["bandwidth_bytes_per_s_to_1"] == pytest.approx(
        2.0, rel=1e-3
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"dst_ranks": [0]},
            "p2p: dst_ranks must be a non-empty list of distinct ranks 0..3 other than 0, got [0]",
        ),
        (
            {"dst_ranks": [1, 1]},
            "p2p: dst_ranks must be a non-empty list of distinct ranks 0..3 "
            "other than 0, got [1, 1]",
        ),
        ({"src_rank": 4}, "p2p: src_rank must be a rank 0..3, got 4"),
        ({"n_copies": 0}, "p2p: n_copies must be an integer >= 1, got 0"),
    ],
)
def test_bad_parameters(params, message):
    g = ring(4, link_bandwidth_bytes_per_s=B, link_latency_s=L)
    with pytest.raises(ConfigError) as info:
        p2p(g, **params)
    assert str(info.value) == message
