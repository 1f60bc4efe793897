"""Tests of simcoll.prediction: --sizes parsing, nccl-tests alignment, and predict()."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.algorithms import algorithm_names, build_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, ScheduleError
from simcoll.network.clock import on_grid
from simcoll.prediction import predict
from simcoll.prediction.choices import AUTO_FAMILY
from simcoll.sim.engine import simulate
from simcoll.topology import gpu_nodes, load, switch_star

LINK_BANDWIDTH = 100e9  # bytes/s, per direction
LINK_LATENCY = 1e-6  # s, per link: a GPU-to-GPU route through the switch crosses two


@pytest.fixture
def star4():
    """4 GPUs on one switch: 100 GB/s and 1 us per link."""
    return switch_star(4, link_bandwidth_bytes_per_s=LINK_BANDWIDTH, link_latency_s=LINK_LATENCY)


# --- parse_sizes --------------------------------------------------------------------------


# --- align_size_bytes -----------------------------------------------------------------------


# --- predict --------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [4, 4096, 2**20, 2**24])  # 0 B: see the zero-byte test
def test_ring_allgather_matches_closed_form(star4, size: int) -> None:
    # Three ring steps; each crosses GPU->switch->GPU (two links of latency L, paid once per
    # route) and moves one block of S/4 bytes at B. The four transfers of a step use four
    # distinct uplinks and downlinks, so nothing is shared. The engine's clock counts
    # whole ticks (simcoll.network.clock): each latency and each transfer's time rounded
    # up to one, and sums of ticks are exact.
    expected = 3 * (on_grid(2 * LINK_LATENCY) + on_grid((size / 4) / LINK_BANDWIDTH))
    (row,) = predict(star4, "allgather", [size], params={"n_chunks": 1}, protocol=None).rows
    assert row.algorithm == "ring"
    assert row.n_ranks == 4
    assert row.size_bytes == size
    assert row.time_s == pytest.approx(expected, rel=1e-12)
    assert row.busbw_bytes_per_s == pytest.approx(
        size / expected * 3 / 4 if size else 0.0, rel=1e-12
    )


MEMORY_BANDWIDTH = 50e9  # bytes/s: each GPU's memory, for out-of-place copies


@pytest.mark.parametrize("size", [4096, 2**24])
def test_an_out_of_place_allgather_also_copies_its_own_block_at_memory_speed(
    star4, size: int
) -> None:
    # The closed form above, plus each GPU reading and writing its own S/4 block (from
    # input to output) at the memory's bandwidth; in place, the closed form alone.
    star4.graph["gpu_memory_bandwidth_bytes_per_s"] = MEMORY_BANDWIDTH
    ring_s = 3 * (2 * LINK_LATENCY + (size / 4) / LINK_BANDWIDTH)
    copy_s = 2 * (size / 4) / MEMORY_BANDWIDTH
    params = {"n_chunks": 1}
    (out_of_place,) = predict(star4, "allgather", [size], params=params, protocol=None).rows
    (in_place,) = predict(star4, "allgather", [size], params=params, in_place=True,
                          protocol=None).rows  # fmt: skip
    assert out_of_place.time_s == pytest.approx(ring_s + copy_s, rel=1e-12)
    assert in_place.time_s == pytest.approx(ring_s, rel=1e-12)
    assert out_of_place.busbw_bytes_per_s == pytest.approx(size / (ring_s + copy_s) * 3 / 4)


def test_an_out_of_place_broadcast_copies_the_roots_buffer(star4) -> None:
    star4.graph["gpu_memory_bandwidth_bytes_per_s"] = MEMORY_BANDWIDTH
    size = 2**24
    times = [predict(star4, "broadcast", [size], in_place=p).rows[0].time_s for p in (0, 1)]
    assert times[0] - times[1] == pytest.approx(2 * size / MEMORY_BANDWIDTH, rel=1e-9)


@pytest.mark.parametrize(
    ("collective", "algorithm"),
    [("allreduce", "ring"), ("reducescatter", "ring"), ("reduce", "ring"), ("alltoall", "direct")],
)
def test_collectives_that_write_as_they_receive_copy_nothing(
    star4, collective: str, algorithm: str
) -> None:
    bare = predict(star4, collective, [2**24], algorithm=algorithm).rows[0].time_s
    star4.graph["gpu_memory_bandwidth_bytes_per_s"] = MEMORY_BANDWIDTH
    assert predict(star4, collective, [2**24], algorithm=algorithm).rows[0].time_s == bare


@pytest.mark.parametrize("model", ["flow", "ideal", "analytical", "nccl"])
def test_the_copy_is_paid_in_every_model_and_only_with_a_memory_bandwidth(
    star4, model: str
) -> None:
    # Like the launch cost, the copy is a cost of the call, beside whatever models the
    # links; a topology that gives no memory bandwidth models the links alone.
    size = 2**24
    (bare,) = predict(star4, "allgather", [size], model=model).rows
    (in_place,) = predict(star4, "allgather", [size], model=model, in_place=True).rows
    assert bare.time_s == in_place.time_s
    star4.graph["gpu_memory_bandwidth_bytes_per_s"] = MEMORY_BANDWIDTH
    (copied,) = predict(star4, "allgather", [size], model=model).rows
    assert copied.time_s - bare.time_s == pytest.approx(2 * size / 4 / MEMORY_BANDWIDTH)


def test_predict_rows_follow_the_sizes(star4) -> None:
    sizes = [2**20, 64, 4096]
    prediction = predict(star4, Collective.ALLREDUCE, sizes)
    assert [r.size_bytes for r in prediction.rows] == sizes
    assert prediction.skipped == []
    assert all(r.collective == "allreduce" and r.model == "flow" for r in prediction.rows)


def test_predict_fewer_ranks_than_gpus(star4) -> None:
    size = 2**20
    (row,) = predict(star4, "allgather", [size], n_ranks=2, protocol=None).rows
    assert row.n_ranks == 2
    assert row.time_s == pytest.approx(2 * LINK_LATENCY + size / 2 / LINK_BANDWIDTH, rel=1e-12)


def test_predict_more_ranks_than_gpus(star4) -> None:
    with pytest.raises(ConfigError, match="has 4 GPUs, fewer than the 5 ranks"):
        predict(star4, "allgather", [64], n_ranks=5)


@pytest.mark.parametrize("n_ranks", [0, -1])
def test_predict_rejects_no_ranks(star4, n_ranks: int) -> None:
    with pytest.raises(ConfigError, match="at least 1"):
        predict(star4, "allgather", [64], n_ranks=n_ranks)


def test_predict_unknown_algorithm(star4) -> None:
    with pytest.raises(ConfigError) as error:
        predict(star4, "sendrecv", [64], algorithm="ring")
    assert str(error.value) == "sendrecv has no algorithm 'ring'; valid: direct"


@pytest.mark.parametrize("collective", ["allreduce", "allgather", "broadcast"])
def test_auto_keeps_the_fastest_algorithm(star4, collective: str) -> None:
    sizes = [64, 4096, 2**20, 2**24]
    prediction = predict(star4, collective, sizes, algorithm="all", params={"n_chunks": 1},
                         protocol=None)  # fmt: skip
    assert [r.size_bytes for r in prediction.rows] == sizes
    # NVLS, SHARP and CollNet need a switch that reduces; this star's cannot, so "all"
    # leaves them out.
    names = [name for name in algorithm_names(collective)
             if name not in ("nvls", "nvls_tree", "sharp", "collnet_direct",
                             "collnet_chain")]  # fmt: skip
    assert len(names) >= 2
    for row in prediction.rows:
        times = {
            name: simulate(
                star4, build_schedule(collective, name, n_ranks=4, size_bytes=row.size_bytes)
            ).time_s
            for name in names
        }
        assert row.time_s == min(times.values())
        assert row.algorithm in names
        assert times[row.algorithm] == row.time_s


def test_auto_on_a_collective_outside_nccls_family(star4) -> None:
    # Send/recv has none of NCCL's ring/tree/NVLS/SHARP: auto tries what it has.
    (row,) = predict(star4, "sendrecv", [4096], algorithm="auto").rows
    assert row.algorithm == "direct"


def test_auto_chooses_among_nccls_algorithms_only(star4) -> None:
    # On a star the direct all-reduce moves the ring's bytes (3 x S/4 through each link,
    # twice) in 2 latency steps instead of 6: 2a + 1.5 S/B against 6a + 1.5 S/B, so at
    # 16 KiB it is the fastest of all. "all" finds it; auto keeps to NCCL's algorithms.
    fastest = predict(star4, "allreduce", [2**14], algorithm="all").rows[0]
    assert fastest.algorithm == "direct"
    (row,) = predict(star4, "allreduce", [2**14], algorithm="auto").rows
    assert row.algorithm in AUTO_FAMILY


def test_too_small_size_raises_by_default(star4) -> None:
    # All-gather of 8 B over 4 ranks: 2 B per block, cut into 4 chunks.
    with pytest.raises(ScheduleError) as error:
        predict(star4, "allgather", [8, 4096], params={"n_chunks": 4})
    assert str(error.value) == (
        "allgather of 8 B over 4 ranks has 2 B per block, fewer than the 4 pieces asked "
        "for; use fewer chunks or channels, or a larger size"
    )


@pytest.mark.parametrize("algorithm", ["ring", "auto"])
def test_skip_too_small(star4, algorithm: str) -> None:
    prediction = predict(
        star4,
        "allgather",
        [8, 12, 16, 4096],
        algorithm=algorithm,
        params={"n_chunks": 4},
        skip_too_small=True,
    )
    # 16 B is 4 B per block: exactly one byte per chunk, still cuttable.
    assert [r.size_bytes for r in prediction.rows] == [16, 4096]
    assert [size for size, _ in prediction.skipped] == [8, 12]
    for size, message in prediction.skipped:
        assert f"allgather of {size} B over 4 ranks" in message
        assert "fewer than the 4 pieces" in message
        assert "\n" not in message


def test_skip_too_small_does_not_hide_other_errors(star4) -> None:
    with pytest.raises(ConfigError, match="takes no parameter 'root'"):
        predict(star4, "allgather", [4096], params={"root": 1}, skip_too_small=True)


def test_predict_params_reach_the_schedule(star4) -> None:
    # Broadcast from rank 2: the row reports the root.
    (row,) = predict(star4, "broadcast", [4096], params={"root": 2}).rows
    assert row.root == 2


# --- the shipped topology files -----------------------------------------------------------

SHIPPED = sorted(
    path.name for path in (Path(__file__).resolve().parents[2] / "topologies").glob("*.toml")
)


@pytest.mark.parametrize("name", SHIPPED)
def test_predict_works_on_every_shipped_topology(name: str) -> None:
    # Multi-node designs at 2 nodes (keep CI short); the 128-GPU case is tested below.
    path = f"topologies/{name}"
    overrides = {"n_nodes": "2"} if "n_nodes" in Path(path).read_text() else {}
    topology = load(path, overrides)
    rows = predict(topology, "allreduce", [2**20, 2**26]).rows
    assert [row.size_bytes for row in rows] == [2**20, 2**26]
    egress = max(
        sum(bw for _, _, bw in topology.out_edges(gpu, data="bandwidth_bytes_per_s"))
        for gpu in gpu_nodes(topology)
    )
    for row in rows:
        # busbw of a ring all-reduce is the bytes a rank sends, 2(n-1)/n x S, over the time:
        # it cannot beat what a GPU's links can carry out of it, whatever the channels.
        assert 0 < row.busbw_bytes_per_s <= egress


def _ring_busbw_bytes_per_s(
    path: str, overrides: dict[str, str], n_gpus: int, plan: str = "nccl"
) -> float:
    """busbw of a 1 GiB ring all-reduce on bare links (no calibration)."""
    topology = load(path, overrides)
    assert len(gpu_nodes(topology)) == n_gpus
    (row,) = predict(topology, "allreduce", [2**30], algorithm="ring", calibration=None,  # type: ignore[arg-type]
                     plan=plan).rows  # fmt: skip
    return row.busbw_bytes_per_s


def test_dgx1_rank_order_ring_is_bound_by_pcie() -> None:
    # Ring 0-1-...-7-0 on the hybrid cube mesh: 0-1, 1-2, 2-3, 4-5, 5-6, 6-7 have NVLinks
    # (25 or 50 GB/s), but 3-4 and 7-0 do not: they go over PCIe Gen3 x16 (15.75 GB/s)
    # and the inter-socket link (38.4 GB/s), in opposite directions, so nothing shares.
    # A ring all-reduce's busbw tends to its slowest edge's bandwidth for large messages
    # (busbw = 2(n-1)/n * S / T and T -> 2(n-1)/n * S / B).
    busbw = _ring_busbw_bytes_per_s("topologies/dgx1-v100.toml", {}, 8, plan="rank")
    assert busbw == pytest.approx(15.75e9, rel=1e-2)
    assert busbw < 15.75e9


def test_dgx1_nccl_rings_use_every_nvlink() -> None:
    # NCCL's search finds six rings at 20 GB/s (NCCL's units) that use each GPU's six
    # NVLink ports once in each direction; duplicated, 12 channels. Every GPU then sends
    # over all its NVLinks at once (two NV1 and two NV2 links: 6 x 25 = 150 GB/s out of
    # each GPU), and busbw (the bytes a rank sends over the time) tends to that.
    busbw = _ring_busbw_bytes_per_s("topologies/dgx1-v100.toml", {}, 8)
    assert busbw == pytest.approx(150e9, rel=1e-2)
    assert busbw < 150e9


def test_h100_fat_tree_with_16_nodes_is_bound_by_the_nics() -> None:
    # 128 GPUs; ring edges inside a node cross the NVSwitch (450 GB/s), the 16 edges
    # between nodes go NIC -> leaf (-> spine -> leaf) -> NIC at 400 Gbit/s = 50 GB/s,
    # one flow per link at 1:1, so busbw tends to 50 GB/s.
    path = "topologies/h100-ib-fat-tree.toml"
    busbw = _ring_busbw_bytes_per_s(path, {"n_nodes": "16"}, 128, plan="rank")
    assert busbw == pytest.approx(400e9 / 8, rel=1e-2)
    assert busbw < 400e9 / 8


def test_h100_fat_tree_nccl_plan_uses_all_eight_nics() -> None:
    # NCCL's plan on 4 nodes (one leaf): 16 channels, channel c through NIC c mod 8 on every
    # node, so each NIC carries 2 of the 16 channels out and 2 in. Each channel moves 1/16
    # of the data around a ring whose slowest edges are its two NIC crossings per node at
    # 50 GB/s / 2 channels: busbw = 16 x 25 = 400 GB/s (8 NICs x 50 GB/s), the NICs' limit.
    busbw = _ring_busbw_bytes_per_s("topologies/h100-ib-fat-tree.toml", {"n_nodes": "4"}, 32)
    assert busbw == pytest.approx(400e9, rel=1e-2)
    assert busbw < 400e9


def test_an_algorithm_asked_for_with_a_protocol_it_cannot_use_is_an_error() -> None:
    # NCCL runs NVLS with Simple only: asking for LL must not print an empty table.
    h100 = load("topologies/dgx-h100.toml")
    with pytest.raises(ConfigError, match=r"^nvls runs with the simple protocol only, not LL$"):
        predict(h100, "allreduce", [2**20], algorithm="nvls", protocol="LL")
    # Under auto the protocol that fits is used.
    (row,) = predict(h100, "allreduce", [2**20], algorithm="nvls", protocol="auto").rows
    assert row.protocol == "simple"


@pytest.mark.parametrize("collective", ["alltoall", "scatter"])
def test_one_shot_rows_equal_the_engines(monkeypatch, collective: str) -> None:
    # A direct all-to-all or scatter starts every flow at once: predict takes the closed
    # form (simcoll.sim.oneshot). On the shipped RoCE fat-tree (hashed ECMP, 32 GPUs) and
    # every protocol, its rows must be the engine's, to rounding.
    from simcoll.prediction import simulated  # noqa: PLC0415 - the switch under test

    file = Path(__file__).resolve().parents[2] / "topologies" / "a100-roce-2to1.toml"
    graph = load(file, overrides={"n_nodes": "4"})
    sizes = [2**10, 2**16, 2**20, 2**26]
    taken = []
    closed_form = simulated.one_shot
    monkeypatch.setattr(
        simulated, "one_shot", lambda run: taken.append(closed_form(run)) or taken[-1]
    )
    rows = {}
    for one_shot in (True, False):
        monkeypatch.setattr(simulated, "ONE_SHOT", one_shot)
        rows[one_shot] = predict(graph, collective, sizes, algorithm="direct",
                                 protocol="auto").rows  # fmt: skip
    assert sum(shot is not None for shot in taken) >= len(sizes)  # the closed form ran
    for fast, engine in zip(rows[True], rows[False], strict=True):
        assert (fast.protocol, fast.max_link_bytes) == (engine.protocol, engine.max_link_bytes)
        assert fast.time_s == pytest.approx(engine.time_s, rel=1e-12)


def test_auto_all_to_all_skips_pairwise_by_its_link_bound(monkeypatch) -> None:
    # Direct's closed form sits on the busiest link's bound; pairwise exchange moves the
    # same bytes over the same routes, so its link bound cannot beat it and it is not
    # simulated. The rows must be those of simulating every choice.
    from simcoll.prediction import simulated  # noqa: PLC0415 - the switch under test
    from simcoll.sim import engine  # noqa: PLC0415

    file = Path(__file__).resolve().parents[2] / "topologies" / "a100-roce-2to1.toml"
    graph = load(file, overrides={"n_nodes": "4"})
    sizes = [2**10, 2**20, 2**26]
    simulated_algorithms = []
    run = engine.Run.run
    monkeypatch.setattr(engine.Run, "run", lambda self, model: simulated_algorithms.append(
        self.s.algorithm) or run(self, model))  # fmt: skip
    rows = {}
    bound = simulated.link_bound_s
    for pruned in (True, False):
        monkeypatch.setattr(simulated, "link_bound_s", bound if pruned else lambda run: 0.0)
        simulated_algorithms.clear()
        found = predict(graph, "alltoall", sizes, algorithm="auto", protocol="auto").rows
        rows[pruned] = [(r.algorithm, r.protocol, r.time_s) for r in found]
        if pruned:
            assert "pairwise" not in simulated_algorithms
        else:
            assert "pairwise" in simulated_algorithms
    assert rows[True] == rows[False]


@pytest.mark.parametrize("collective", [c.value for c in Collective])
def test_a_zero_byte_call_costs_only_its_launch_and_floor(collective: str) -> None:
    # Issue 29: 0 B (nccl-tests' first row) gave a traceback for alltoall, broadcast,
    # reduce, gather, scatter and sendrecv. Nothing moves: bare links give 0 s; the DGX
    # A100 file's calibration gives max(launch_s, floor_s).
    graph = load(Path(__file__).resolve().parents[2] / "topologies" / "dgx-a100.toml")
    calibration = graph.graph["calibration"]
    (bare,) = predict(graph, collective, [0], calibration=None).rows
    assert (bare.size_bytes, bare.time_s, bare.busbw_bytes_per_s) == (0, 0.0, 0.0)
    (called,) = predict(graph, collective, [0]).rows
    assert called.time_s == pytest.approx(max(calibration.launch_s, calibration.floor_s))
