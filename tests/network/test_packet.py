"""Tests of simcoll.network.packet: store-and-forward closed forms and the 1% agreement."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from simcoll.algorithms import build_schedule
from simcoll.network.packet import PacketFabric
from simcoll.sim.engine import simulate
from simcoll.topology.builders import switch_star


def _arrivals(
    capacity: list[float], sends: list[tuple[int, list[int], float, float]], packet_bytes: int
) -> dict[int, float]:
    env = simpy.Environment()
    arrived: dict[int, float] = {}

    def record(ids: list[int]) -> None:
        for flow_id in ids:
            arrived[flow_id] = env.now

    fabric = PacketFabric(env, np.array(capacity), record, packet_bytes=packet_bytes)
    for flow_id, links, size_bytes, start_s in sends:
        fabric.send(flow_id, np.array(links, dtype=np.int64), size_bytes, start_s)
    env.run()
    return arrived


@pytest.mark.parametrize(("n_packets", "n_hops"), [(1, 1), (1, 3), (10, 1), (10, 3), (7, 2)])
def test_one_transfer_store_and_forward(n_packets: int, n_hops: int) -> None:
    # Equal links: the pipeline fills in n_hops packet times, then one packet per time:
    # (n_packets + n_hops - 1) packet times.
    packet_s = 1000 / 1e9
    arrived = _arrivals([1e9] * n_hops, [(0, list(range(n_hops)), 1000.0 * n_packets, 0.0)], 1000)
    assert arrived[0] == pytest.approx((n_packets + n_hops - 1) * packet_s, rel=1e-12)


def test_slow_middle_link_paces_the_pipeline() -> None:
    # 3 hops at 1, 0.5 and 1 GB/s, 4 packets of 1000 B: the slow link takes 2 us per
    # packet; packet i leaves it at 1 + 2(i + 1) us and the last hop adds 1 us:
    # 1 + 8 + 1 = 10 us.
    arrived = _arrivals([1e9, 0.5e9, 1e9], [(0, [0, 1, 2], 4000.0, 0.0)], 1000)
    assert arrived[0] == pytest.approx(10e-6, rel=1e-12)


def test_a_partial_last_packet_and_a_late_start() -> None:
    # 2500 B = 1000 + 1000 + 500 over 2 hops from t = 5 us. First hop: the packets end at
    # +1, +2, +2.5 us. Second hop: +2, then max(2, 2) + 1 = +3, then max(3, 2.5) + 0.5 =
    # +3.5 us: the half packet waits for the link. 5 + 3.5 = 8.5 us.
    arrived = _arrivals([1e9, 1e9], [(3, [0, 1], 2500.0, 5e-6)], 1000)
    assert arrived[3] == pytest.approx(8.5e-6, rel=1e-12)


def test_transfers_queue_first_come_first_served() -> None:
    # Two 2-packet transfers on one link, both at t = 0: the second waits for the first.
    arrived = _arrivals([1e9], [(0, [0], 2000.0, 0.0), (1, [0], 2000.0, 0.0)], 1000)
    assert arrived == {0: pytest.approx(2e-6), 1: pytest.approx(4e-6)}


def test_flow_and_packet_models_agree_on_a_contention_free_star() -> None:
    # Issue 4: within 1% on a contention-free 8-GPU star at 64 MiB. A ring all-reduce on a
    # star shares no link; store-and-forward through the switch delays each transfer by
    # one 4 KiB packet time, 4096 B / 300 GB/s = 14 ns per step against 2 MiB / 300 GB/s
    # = 7 us of transmission: 0.2%.
    star = switch_star(8, link_bandwidth_bytes_per_s=300e9, link_latency_s=0.5e-6)
    schedule = build_schedule("allreduce", "ring", n_ranks=8, size_bytes=64 * 2**20, n_chunks=4)
    flow = simulate(star, schedule, model="flow").time_s
    packet = simulate(star, schedule, model="packet").time_s
    assert packet == pytest.approx(flow, rel=1e-2)
    assert packet >= flow  # store-and-forward can only add time here
