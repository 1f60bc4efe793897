"""Tests of simcoll.algorithms.nvls: correctness, traffic, closed forms, where it may run."""

from __future__ import annotations

import pytest

from simcoll.algorithms import build_schedule
from simcoll.algorithms.nvls import nvls_allgather, nvls_allreduce, nvls_reducescatter
from simcoll.core.checks import check_schedule
from simcoll.core.errors import ConfigError
from simcoll.prediction import predict
from simcoll.sim.engine import simulate
from simcoll.topology.calibration import Calibration
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
def test_traffic_per_gpu_is_nccls(n: int) -> None:
    # All-reduce: each GPU sends S up for the reduction of every shard and its own shard's
    # sum (S/n) for the multicast; it receives its shard's sum (S/n) and every shard's
    # multicast (S). The switch takes in n x S + S and sends out S + n x S.
    # Reduce-scatter: S up, S/n down. All-gather: S/n up (its block), S down (every
    # block, its own included: multimem.st writes the storing GPU too).
    s = n * 1200
    ar = nvls_allreduce(n, s)
    per_gpu = s + s // n
    assert ar.bytes_sent_per_rank().tolist() == [per_gpu] * n + [n * per_gpu]
    assert ar.bytes_received_per_rank().tolist() == [per_gpu] * n + [n * per_gpu]
    rs = nvls_reducescatter(n, s)
    assert rs.bytes_sent_per_rank().tolist()[:n] == [s] * n
    assert rs.bytes_received_per_rank().tolist()[:n] == [s // n] * n
    ag = nvls_allgather(n, s)
    assert ag.bytes_sent_per_rank().tolist()[:n] == [s // n] * n
    assert ag.bytes_received_per_rank().tolist()[:n] == [s] * n


@pytest.mark.parametrize("model", ["ideal", "flow"])
@pytest.mark.parametrize("efficiency", [1.0, 0.8])
def test_allreduce_by_hand_on_two_gpus(model: str, efficiency: float) -> None:
    # n = 2, unchunked, shard h = S/2 at B x e per direction (the switch's efficiency, as a
    # calibration's efficiency.nvls gives it): tau = h / (B e), a = one GPU-switch link.
    # Paced (simcoll.sim.pacing): every uplink carries 3 h (both shards up, its own
    # shard's store), the busiest links, so the reduce leg (2 h) moves at 2/3 B e and the
    # store (h) at 1/3 B e, in both models. Each uplink sends shard 0 then shard 1 up (in
    # at a + 1.5 tau, a + 3 tau); shard 0's sum reaches GPU 0 at 2a + 2.5 tau, is stored
    # up by 3a + 5.5 tau and written to both GPUs by 4a + 6.5 tau; shard 1's sum reaches
    # GPU 1 at 2a + 4 tau, is up at 3a + 7 tau and on both GPUs at T = 4a + 8 tau.
    n, size_bytes, links = 2, 2**20, 18
    bandwidth = links * BYTES_PER_LINK_S
    node = nvswitch_node(n, nvlinks_per_gpu=links, nvlink_bandwidth_bytes_per_s=BYTES_PER_LINK_S,
                         nvlink_latency_s=LATENCY_S, nvls=True)  # fmt: skip
    protocol = Calibration(efficiency={"nvls": efficiency}).protocol(None)
    tau = size_bytes / 2 / (bandwidth * efficiency)
    result = simulate(node, nvls_allreduce(n, size_bytes), model=model, protocol=protocol)
    assert result.time_s == pytest.approx(8 * tau + 4 * LATENCY_S, rel=1e-9)


def test_nvls_on_dgx_h100_is_nccls_figure() -> None:
    # NVIDIA/nccl-tests#290: NVLS all-reduce on 8 x H100 SXM reaches 466-477 GB/s busbw at
    # 1-4 GiB. By hand from the hardware base: a link moves 450 GB/s x 0.8223 (the ring's
    # measured share of NVLink4) x 0.85 x 15/16 (NCCL's nvlsEfficiency for Hopper, and one
    # of its 16 NVLS channels that moves no data) = 295.0 GB/s; each GPU moves S (n+1)/n
    # each way, so busbw tends to 2 (n-1)/(n+1) x 295.0 = 458.9 GB/s. A ring's tends to
    # 450 x 0.8223 = 370.0.
    h100 = load("topologies/dgx-h100.toml")
    link = 450e9 * 0.822331866471085
    nvls_bound = 2 * 7 / 9 * link * 0.85 * 15 / 16
    (ring,) = predict(h100, "allreduce", [2**32], algorithm="ring", protocol="simple").rows
    (nvls,) = predict(h100, "allreduce", [2**32], algorithm="nvls", protocol="simple").rows
    assert ring.busbw_bytes_per_s < link
    assert 0.98 * nvls_bound < nvls.busbw_bytes_per_s < nvls_bound
    assert nvls.busbw_bytes_per_s == pytest.approx(470e9, rel=0.05)  # the measured figure


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
