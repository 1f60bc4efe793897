"""Tests of simcoll.sim.pacing: paced legs move at the pace of the run's busiest link."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from simcoll.algorithms import build_schedule
from simcoll.algorithms.nvls import nvls_allreduce
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.schedule import ScheduleBuilder
from simcoll.prediction import predict
from simcoll.prediction.simulated import nvls_transfers_per_chunk
from simcoll.sim import engine
from simcoll.sim.graph import ExecutionGraph
from simcoll.sim.pacing import multimem_sends, paced_rate_caps, sm_bound_s
from simcoll.topology import load, ring

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
RATE = 1e9  # the slow link, bytes/s
PIECE = 10**6  # bytes
N_PIECES = 4


def _two_stage(paced: bool) -> float:
    """``N_PIECES`` pieces from rank 0 to 1 over a 2 GB/s link, each forwarded on to rank 2
    over a 1 GB/s link once it has arrived (store and forward), no latency."""
    topology = ring(3, link_bandwidth_bytes_per_s=2 * RATE, link_latency_s=0.0)
    topology.edges["gpu1", "gpu2"]["bandwidth_bytes_per_s"] = RATE
    b = ScheduleBuilder(Collective.SENDRECV, "pipeline", n_ranks=3,
                        size_bytes=N_PIECES * PIECE, pieces_per_block=N_PIECES)  # fmt: skip
    for piece in range(N_PIECES):
        first = b.add(src=0, dst=1, pieces=[piece])
        b.add(src=1, dst=2, pieces=[piece], deps=[first])
    run = engine.prepare(topology, b.build())
    if paced:
        run.cap_rates(
            paced_rate_caps(
                conn_of=np.frombuffer(run.conn_of, dtype=np.int64),
                wire_bytes=run.wire_bytes,
                paced=np.ones(run.n_transfers, dtype=bool),
                pair_of=run.pair_of,
                pair_links=run.pair_links,
                pair_weights=run.pair_weights,
                capacity_bytes_per_s=run.fabric.capacity_bytes_per_s,
            )
        )
    try:
        return run.run("flow").time_s
    finally:
        run.release()


def test_a_fast_stage_fills_the_pipeline_at_the_slow_stages_pace() -> None:
    # Unpaced, the first piece crosses the fast link in PIECE / 2 GB/s, then the slow
    # link streams all of them: 0.5 ms + 4 x 1 ms. Paced, the busiest link needs
    # 4 MB / 1 GB/s = 4 ms, so the fast stage's connection (4 MB) moves at most
    # 1 GB/s: the first piece takes a whole step, 1 ms + 4 x 1 ms.
    assert _two_stage(paced=False) == pytest.approx(PIECE / (2 * RATE) + N_PIECES * PIECE / RATE)
    assert _two_stage(paced=True) == pytest.approx((N_PIECES + 1) * PIECE / RATE)


def test_only_what_a_gpu_sends_into_its_switch_is_multimem() -> None:
    # Per piece of shard k: every rank's share up (n), the sum down to k (1), k's store
    # up (1) and the switch's copies down (n): n + 1 of 2 n + 2 are a GPU's sends.
    n = 4
    s = nvls_allreduce(n, 4 * 2**10)
    sent = multimem_sends(s)
    assert int(sent.sum()) == n * (n + 1)
    assert (s.dst[sent] == n).all()
    assert (s.src[~sent] == n).all()


def test_an_nvls_calls_legs_are_capped_at_their_share_of_the_busiest_link() -> None:
    # One DGX H100, NVLS all-reduce of S on n = 8 GPUs: each GPU's link into the switch
    # carries S (its shares of every shard's reduction) + S / n (its shard's store), the
    # busiest links, so the link bound is S (n + 1) / n / B. The reduce leg's connection
    # (S) is capped at B n / (n + 1), the store's (S / n) at B / (n + 1); the switch's
    # sends are not capped. Wire efficiencies cancel out of both.
    topology = load(TOPOLOGIES / "dgx-h100.toml")
    n = 8
    schedule = nvls_allreduce(n, 2**24, n_chunks=2)
    run = engine.prepare(topology, replace(schedule, params={**schedule.params, "paced": True}))
    caps = run.rate_cap_bytes_per_s
    assert caps is not None
    s = run.s
    up = multimem_sends(s)
    link_s = [topology.edges[f"gpu{r}", "nvsw"]["bandwidth_bytes_per_s"] for r in range(n)]
    bandwidth = link_s[0]
    assert link_s == [bandwidth] * n
    reduce_leg = up & (s.channel == 0)
    store_leg = up & (s.channel == 1)
    assert caps[reduce_leg] == pytest.approx(np.full(reduce_leg.sum(), bandwidth * n / (n + 1)))
    assert caps[store_leg] == pytest.approx(np.full(store_leg.sum(), bandwidth / (n + 1)))
    assert np.isinf(caps[~up]).all()
    run.release()


def test_a_schedule_that_does_not_ask_is_not_paced() -> None:
    topology = ring(3, link_bandwidth_bytes_per_s=RATE, link_latency_s=0.0)
    b = ScheduleBuilder(Collective.SENDRECV, "one", n_ranks=3, size_bytes=8, pieces_per_block=1)
    b.add(src=0, dst=1, pieces=[0])
    run = engine.prepare(topology, b.build())
    assert run.rate_cap_bytes_per_s is None
    run.release()


def test_a_paced_call_in_an_execution_graph_is_the_call_alone() -> None:
    # One simulator: a workload's call (sim.graph) keeps its caps, so after 5 us of
    # compute a paced NVLS all-reduce ends 5 us later than alone, and no sooner than
    # the same call unpaced would.
    topology = load(TOPOLOGIES / "dgx-h100.toml")
    schedule = nvls_allreduce(8, 2**24, n_chunks=4)
    alone = engine.simulate(topology, schedule).time_s
    plain = replace(schedule, params={**schedule.params, "paced": False})
    unpaced = engine.simulate(topology, plain).time_s
    graph = ExecutionGraph(topology)
    compute = graph.span(5e-6)
    call = graph.call(engine.prepare(topology, schedule), after=compute)
    done = graph.simulate()
    assert float(done.end_s[call.end]) == pytest.approx(5e-6 + alone, rel=1e-12)
    assert alone > unpaced


@pytest.mark.parametrize(
    ("name", "n_ranks", "heads"), [("nvls", 2, 2), ("nvls", 8, 8), ("nvls_tree", 16, 8),
                                   ("nvls_tree", 32, 8), ("nvls_tree", 24, 4)]
)  # fmt: skip
def test_the_transfer_budget_counts_what_the_builders_build(
    name: str, n_ranks: int, heads: int
) -> None:
    # nvls_call_chunks keeps a call under NVLS_TRANSFER_BUDGET by this count: it must be
    # the built schedule's own, per chunk, at any chunk count.
    params = {"gpus_per_node": heads} if name == "nvls_tree" else {}
    for chunks in (1, 3):
        s = build_schedule("allreduce", name, n_ranks=n_ranks, size_bytes=n_ranks * 2**16,
                           n_chunks=chunks, **params)  # fmt: skip
        assert s.n_transfers == chunks * nvls_transfers_per_chunk(name, n_ranks, heads)


def test_caps_of_the_wrong_length_or_sign_are_refused() -> None:
    topology = ring(3, link_bandwidth_bytes_per_s=RATE, link_latency_s=0.0)
    b = ScheduleBuilder(Collective.SENDRECV, "one", n_ranks=3, size_bytes=8, pieces_per_block=1)
    b.add(src=0, dst=1, pieces=[0])
    run = engine.prepare(topology, b.build())
    for bad in (np.array([1.0, 2.0]), np.array([0.0]), np.array([-1.0])):
        with pytest.raises(ConfigError, match="one positive cap per transfer"):
            run.cap_rates(bad)
    run.cap_rates(np.array([np.inf]))  # no cap is a cap of inf
    run.release()


def test_an_nvls_tree_call_bound_by_its_ctas_takes_their_time_plus_its_fill() -> None:
    # Two DGX H100 on bare links, 1 GiB: the links alone bound NVLS-tree at about
    # S (g + 1) / g / 450 GB/s (2.7 ms). Its CTAs bound at 100 GB/s of bus bandwidth
    # take S x 2 (n - 1) / n / 100 GB/s = 20.1 ms, paced; the pipeline fills one chunk
    # per leg (six legs: up, to the head, over the network each way, the store, down),
    # and each leg's connection moves 1/64 of its bytes per chunk (1 GiB over 16
    # channels, 8 heads and NCCL's 128 KiB chunks), so the call ends within 6/64 after.
    size, n, bus = 2**30, 16, 100 * 10**9
    topology = load(TOPOLOGIES / "h100-ib-fat-tree.toml", overrides={"n_nodes": "2"})
    args = {"algorithm": "nvls_tree", "n_ranks": n, "calibration": None}
    free = predict(topology, "allreduce", [size], **args).rows[0].time_s
    bound = predict(topology, "allreduce", [size], params={"sm_bus_bandwidth_bytes_per_s": bus},
                    **args).rows[0].time_s  # fmt: skip
    least_s = size * 2 * (n - 1) / n / bus
    assert free < least_s / 5
    assert least_s <= bound <= least_s * (1 + 6 / 64)
    schedule = build_schedule("allreduce", "nvls_tree", n_ranks=n, size_bytes=size,
                              gpus_per_node=8, sm_bus_bandwidth_bytes_per_s=bus)  # fmt: skip
    assert sm_bound_s(schedule) == pytest.approx(least_s)
