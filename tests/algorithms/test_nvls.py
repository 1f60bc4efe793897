"""Tests of simcoll.algorithms.nvls: correctness, traffic, closed forms, where it may run."""

from __future__ import annotations

import pytest

from simcoll.algorithms import build_schedule
from simcoll.algorithms.nvls import nvls_allgather, nvls_allreduce, nvls_reducescatter
from simcoll.core.checks import check_schedule
from simcoll.core.errors import ConfigError
from simcoll.prediction import predict
from simcoll.sim.engine import simulate
from simcoll.topology.io import load
from simcoll.topology.machines import nvswitch_node

BYTES_PER_LINK_S = 25e9  # NVLink4, per link and direction
LATENCY_S = 0.5e-6


@pytest.mark.parametrize("collective", ["allreduce", "reducescatter", "allgather"])
@pytest.mark.parametrize("n", range(1, 17))
@pytest.mark.parametrize(("channels", "chunks"), [(1, 1), (2, 3)])
def test_nvls_computes_its_collective(collective: str, n: int, channels: int, chunks: int) -> None:
    size_bytes = n * 4 * channels * chunks * 3
    check_schedule(
        build_schedule(
            collective, "nvls", n_ranks=n, size_bytes=size_bytes, n_channels=channels,
            n_chunks=chunks,
        )
    )  # fmt: skip


@pytest.mark.parametrize("n", [2, 3, 8])
def test_traffic_is_s_up_and_s_down_per_gpu(n: int) -> None:
    # All-reduce: each GPU sends its S once and receives the sum once; the switch takes in
    # n x S and sends out n x S. Reduce-scatter: S up, S/n down. All-gather: S/n up (its
    # block), (n-1) S/n down.
    s = n * 1200
    up, down = (
        nvls_allreduce(n, s).bytes_sent_per_rank(),
        nvls_allreduce(n, s).bytes_received_per_rank(),
    )
    assert up.tolist() == [s] * n + [n * s]
    assert down.tolist() == [s] * n + [n * s]
    rs = nvls_reducescatter(n, s)
    assert rs.bytes_sent_per_rank().tolist()[:n] == [s] * n
    assert rs.bytes_received_per_rank().tolist()[:n] == [s // n] * n
    ag = nvls_allgather(n, s)
    assert ag.bytes_sent_per_rank().tolist()[:n] == [s // n] * n
    assert ag.bytes_received_per_rank().tolist()[:n] == [(n - 1) * s // n] * n


@pytest.mark.parametrize("model", ["ideal", "flow"])
@pytest.mark.parametrize("chunks", [1, 4])
def test_allreduce_closed_form_on_an_nvswitch(model: str, chunks: int) -> None:
    # One link GPU -> switch (latency a, bandwidth B per direction). Piece j (tau = S/(kB)
    # each) goes up from every GPU on its own uplink: the uplinks stream pieces back to
    # back, piece j is in at a + (j + 1) tau. Its down copies start a later and queue on
    # each downlink behind piece j - 1: end_j = max(2a + (j + 1) tau, end_{j-1}) + tau
    # = 2a + (j + 2) tau. The last (j = k - 1): T = 2a + (k + 1) tau.
    n, size_bytes, links = 8, 2**26, 18
    bandwidth = links * BYTES_PER_LINK_S
    node = nvswitch_node(n, nvlinks_per_gpu=links, nvlink_bandwidth_bytes_per_s=BYTES_PER_LINK_S,
                         nvlink_latency_s=LATENCY_S, nvls=True)  # fmt: skip
    schedule = nvls_allreduce(n, size_bytes, n_chunks=chunks, max_in_flight=chunks)
    tau = size_bytes / chunks / bandwidth
    expected = 2 * LATENCY_S + (chunks + 1) * tau
    assert simulate(node, schedule, model=model).time_s == pytest.approx(expected, rel=1e-9)


def test_nvls_beats_ring_on_dgx_h100_for_large_messages() -> None:
    # Ring: busbw tends to B = 450 GB/s. NVLS moves S each way per GPU: algbw tends to B,
    # busbw to 2(n-1)/n B = 787.5 GB/s; pipelined in 512 KiB pieces it gets most of that.
    h100 = load("topologies/dgx-h100.toml")
    size = [2**30]
    (ring,) = predict(h100, "allreduce", size, algorithm="ring", protocol="simple").rows
    (nvls,) = predict(h100, "allreduce", size, algorithm="nvls", protocol="simple").rows
    assert ring.busbw_bytes_per_s < 450e9
    assert nvls.busbw_bytes_per_s > 1.5 * ring.busbw_bytes_per_s
    assert nvls.busbw_bytes_per_s < 2 * 7 / 8 * 450e9


def test_nvls_on_a_switch_that_cannot_reduce_is_a_clear_error() -> None:
    a100 = load("topologies/dgx-a100.toml")
    with pytest.raises(ConfigError) as info:
        predict(a100, "allreduce", [2**20], algorithm="nvls")
    assert str(info.value) == (
        "nvls needs a switch that reduces in the network (reduces = true, e.g. an NVSwitch "
        "with NVLink SHARP such as dgx-h100's) linked to all 8 GPUs; "
        "topologies/dgx-a100.toml has none"
    )


def test_auto_leaves_nvls_out_where_it_cannot_run() -> None:
    a100 = load("topologies/dgx-a100.toml")
    rows = predict(a100, "allreduce", [2**30], algorithm="auto", protocol="simple").rows
    assert rows[0].algorithm != "nvls"
