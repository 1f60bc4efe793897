"""Tests of simcoll.sim.session: shared fabric, streams, spans, link load, errors."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import pytest

from simcoll.core.errors import ConfigError, SimulationError
from simcoll.output.plot import plot_link_heatmap
from simcoll.sim.session import Session
from simcoll.topology import ring, switch_star

BANDWIDTH_BYTES_PER_S = 10e9
LATENCY_S = 1e-6


def star(n: int = 4) -> Session:
    return Session(
        switch_star(n, link_bandwidth_bytes_per_s=BANDWIDTH_BYTES_PER_S, link_latency_s=LATENCY_S)
    )


def test_two_copies_into_one_gpu_share_its_link() -> None:
    s = star()
    size = 10_000_000
    s.copy(1, 0, size, stream="a")
    s.copy(2, 0, size, stream="b")
    timeline = s.run()
    # both cross gpu->sw (their own) then sw->gpu0 (shared): half the bandwidth each
    assert timeline.time_s == pytest.approx(2 * LATENCY_S + 2 * size / BANDWIDTH_BYTES_PER_S)


@pytest.mark.parametrize("in_place", [False, True])
def test_an_out_of_place_allgather_in_a_session_pays_its_own_blocks_copy(in_place: bool) -> None:
    # The unchunked ring all-gather on 4 GPUs: 3 steps of 2 hops' latency and S / 4 at B;
    # out of place, each GPU also reads and writes its own S / 4 at the memory's 50 GB/s.
    s = star()
    s.topology.graph["gpu_memory_bandwidth_bytes_per_s"] = 50e9
    size = 8_000_000
    s.collective("allgather", size, range(4), params={"n_chunks": 1}, in_place=in_place)
    ring_s = 3 * (2 * LATENCY_S + size / 4 / BANDWIDTH_BYTES_PER_S)
    copy_s = 0.0 if in_place else 2 * (size / 4) / 50e9
    assert s.run().time_s == pytest.approx(ring_s + copy_s, rel=1e-12)


def test_copies_on_one_stream_run_one_after_the_other() -> None:
    s = star()
    size = 10_000_000
    s.copy(1, 0, size)
    s.copy(2, 0, size)
    assert s.run().time_s == pytest.approx(2 * (2 * LATENCY_S + size / BANDWIDTH_BYTES_PER_S))


def test_a_collective_waits_for_every_rank_of_its_group_on_that_stream() -> None:
    s = star()
    size = 9_000_000
    s.copy(0, 1, size)  # rank 0's comm stream is busy until this copy ends
    s.collective("allgather", size, [0, 2, 3])
    timeline = s.run()
    copy_s = 2 * LATENCY_S + size / BANDWIDTH_BYTES_PER_S
    ring_s = 2 * (2 * LATENCY_S + size / 3 / BANDWIDTH_BYTES_PER_S)  # 2 steps of size/3
    assert timeline.time_s == pytest.approx(copy_s + ring_s)
    (span,) = [x for x in timeline.spans_of(2) if x.stream == "comm"]
    assert span.start_s == pytest.approx(copy_s)


def test_compute_overlaps_communication_and_exposed_time_is_the_rest() -> None:
    s = star()
    size = 10_000_000
    copy_s = 2 * LATENCY_S + size / BANDWIDTH_BYTES_PER_S

    def step(session: Session) -> Generator[Any, Any, None]:
        pending = session.copy(0, 1, size)
        yield session.compute([0, 1], copy_s / 2, "backward")
        yield pending

    s.process(step(s))
    timeline = s.run()
    assert timeline.time_s == pytest.approx(copy_s)
    assert timeline.exposed_comm_s(0) == pytest.approx(copy_s / 2)
    assert timeline.comm_s(0) == pytest.approx(copy_s)


def test_link_load_over_time_conserves_bytes_and_shows_a_saturated_link(tmp_path: Any) -> None:
    s = Session(ring(2, link_bandwidth_bytes_per_s=BANDWIDTH_BYTES_PER_S, link_latency_s=0.0))
    size = 1_000_000_000
    s.copy(0, 1, size)
    timeline = s.run(load_bins=10)
    assert timeline.link_load_bytes.shape == (len(timeline.links), 10)
    np.testing.assert_allclose(timeline.link_load_bytes.sum(axis=1), timeline.link_bytes)
    _, used = timeline.link_utilisation_over_time()
    busy = timeline.links.index(("gpu0", "gpu1"))
    np.testing.assert_allclose(used[busy], 1.0)  # the copy fills its link the whole time
    assert used.sum() == pytest.approx(10.0)
    assert plot_link_heatmap(timeline, tmp_path / "h.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.copy(0, 9, 8), "copy 0->9 8 B: rank 9 is not a GPU of this topology "
         "(ranks 0..3)"),
        (lambda s: s.collective("allreduce", 8, []), "allreduce: the rank group is empty"),
        (lambda s: s.collective("allreduce", 8, [1, 1]), "allreduce: a rank appears twice in "
         "the group [1, 1]"),
        (lambda s: s.compute([0], -1.0, "fwd"), "fwd: compute time must be >= 0 s, got -1.0"),
        (lambda s: s.collective("allreduce", 8, [0, 1], algorithm="nope"), "allreduce has no "
         "algorithm 'nope'; valid: direct, halving_doubling, hierarchical, nvls, "
         "reduce_broadcast, reducescatter_allgather, ring, sharp, tree"),
    ],
)  # fmt: skip
def test_bad_calls_give_one_line(call: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        call(star())
    assert str(info.value) == message


def test_packet_model_is_refused() -> None:
    with pytest.raises(ConfigError, match="a session runs model 'flow' or 'ideal', not 'packet'"):
        Session(ring(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0), model="packet")


def test_a_process_waiting_for_an_event_nobody_triggers_is_reported_not_hung() -> None:
    s = star()

    def stage(session: Session) -> Generator[Any, Any, None]:
        yield session.copy(0, 1, 1000)
        yield session.env.event()  # a receive that no one will ever send

    s.process(stage(s))
    with pytest.raises(SimulationError) as info:
        s.run()
    assert str(info.value) == (
        "the workload cannot finish: process stage waits for an event that never happens"
    )
