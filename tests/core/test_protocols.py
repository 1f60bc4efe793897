"""Tests of simcoll.core.protocols and of their cost in the engine (closed forms)."""

from __future__ import annotations

import pytest

from simcoll.algorithms import build_schedule
from simcoll.core.errors import ConfigError
from simcoll.core.protocols import PROTOCOLS, link_class, parse_protocol
from simcoll.sim.engine import simulate
from simcoll.topology.builders import switch_star
from simcoll.topology.schema import LinkKind

BANDWIDTH_BYTES_PER_S = 100e9
LATENCY_S = 1e-6


def test_efficiencies_are_nccls_line_formats() -> None:
    # LL: 8-byte lines of 4 data bytes; LL128: 128-byte lines of 120 data bytes.
    assert PROTOCOLS["LL"].efficiency == 4 / 8
    assert PROTOCOLS["LL128"].efficiency == 120 / 128
    assert PROTOCOLS["simple"].efficiency == 1.0


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [
        ([], "nvlink"),
        (["nvlink"], "nvlink"),
        (["nvlink", "pcie"], "pcie"),
        (["cpu_link"], "pcie"),
        (["pcie", "ib", "pcie"], "net"),
        (["ethernet"], "net"),
    ],
)
def test_link_class_is_the_slowest_kind_on_the_route(kinds: list[str], expected: str) -> None:
    assert link_class(kinds) == expected


def test_unknown_protocol_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"^unknown protocol 'LL64'; valid: LL, LL128, simple$"):
        parse_protocol("LL64")


@pytest.mark.parametrize("name", ["LL", "LL128", "simple"])
@pytest.mark.parametrize("kind", [LinkKind.NVLINK, LinkKind.PCIE, LinkKind.IB])
def test_ring_allgather_pays_efficiency_and_step_latency(name: str, kind: LinkKind) -> None:
    # Ring all-gather on a 4-GPU star, one chunk: 3 steps, each a route of two links
    # (latency 2 L) plus the protocol's step latency for that link class, then S/4 data
    # bytes sent as S/4 / efficiency wire bytes at B. Nothing is shared on a star ring.
    n, size_bytes = 4, 4 * 2**20
    protocol = PROTOCOLS[name]
    star = switch_star(
        n,
        link_bandwidth_bytes_per_s=BANDWIDTH_BYTES_PER_S,
        link_latency_s=LATENCY_S,
        link_kind=kind,
    )
    step_s = protocol.step_latency_s[{"nvlink": "nvlink", "pcie": "pcie", "ib": "net"}[kind.value]]
    expected = (n - 1) * (
        2 * LATENCY_S + step_s + size_bytes / n / protocol.efficiency / BANDWIDTH_BYTES_PER_S
    )
    schedule = build_schedule("allgather", "ring", n_ranks=n, size_bytes=size_bytes)
    result = simulate(star, schedule, protocol=protocol)
    assert result.time_s == pytest.approx(expected, rel=1e-12)
    assert result.protocol == name
    # Links carry the wire bytes; ranks' accounting stays in data bytes.
    assert result.link_bytes.max() == pytest.approx((n - 1) * size_bytes / n / protocol.efficiency)
    assert result.bytes_sent_per_rank.tolist() == [(n - 1) * size_bytes // n] * n


def test_ll_wins_small_and_simple_wins_large() -> None:
    # Per step, LL saves 3.4 - 0.6 = 2.8 us of latency on NVLink but doubles the wire
    # bytes: LL is faster while (S/n)/B < 2.8 us, i.e. S/n < 280 KB at 100 GB/s.
    n = 4
    star = switch_star(n, link_bandwidth_bytes_per_s=BANDWIDTH_BYTES_PER_S, link_latency_s=0.0)

    def time_s(name: str, size_bytes: int) -> float:
        schedule = build_schedule("allgather", "ring", n_ranks=n, size_bytes=size_bytes)
        return simulate(star, schedule, protocol=PROTOCOLS[name]).time_s

    assert time_s("LL", n * 200_000) < time_s("simple", n * 200_000)
    assert time_s("LL", n * 400_000) > time_s("simple", n * 400_000)
