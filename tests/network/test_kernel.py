"""Tests of simcoll.network.kernel: the compiled event loop must give what the reference
(the engine's SimPy process and the fabric) gives, to the bit, on every kind of run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from simcoll.algorithms import build_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import SimulationError
from simcoll.core.protocols import PROTOCOLS
from simcoll.core.schedule import Schedule, ScheduleBuilder
from simcoll.network import kernel
from simcoll.plan.placement import place_ranks
from simcoll.prediction import predict
from simcoll.sim import engine
from simcoll.sim.engine import SimulationResult, simulate
from simcoll.sim.symmetry import simulate_ring_fast
from simcoll.topology import load, ring, switch_star

pytestmark = pytest.mark.skipif(not kernel.available(), reason="numba is not installed")

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def _file(name: str, **overrides: str) -> nx.DiGraph[str]:
    return load(TOPOLOGIES / name, overrides=overrides)


def _both(monkeypatch: pytest.MonkeyPatch, run: Callable[[], SimulationResult]):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(engine, "COMPILE_FROM_TRANSFERS", 0)  # every run, warm or not
    monkeypatch.setattr(engine, "COMPILED", True)
    compiled = run()
    monkeypatch.setattr(engine, "COMPILED", False)
    reference = run()
    return compiled, reference


def _assert_identical(compiled: SimulationResult, reference: SimulationResult) -> None:
    for name in ("issue_s", "start_s", "end_s", "link_bytes", "link_busy_s"):
        assert np.array_equal(getattr(compiled, name), getattr(reference, name)), name
    assert compiled.time_s == reference.time_s
    assert compiled.stats.instants == reference.stats.instants
    assert compiled.stats.reshares == reference.stats.reshares
    assert compiled.stats.flow_rate_updates == reference.stats.flow_rate_updates


def _paced(schedule: Schedule) -> Schedule:
    return dataclasses.replace(schedule, params={**schedule.params, "paced": True})


CASES: dict[str, Callable[[], tuple[nx.DiGraph[str], Schedule]]] = {
    "ring-allreduce-star": lambda: (
        switch_star(8, link_bandwidth_bytes_per_s=1e11, link_latency_s=1e-6),
        build_schedule(
            "allreduce",
            "ring",
            n_ranks=8,
            size_bytes=8 * 2**20,
            n_chunks=4,
            n_channels=2,
            max_in_flight=2,
        ),
    ),
    "ring-allgather-ring": lambda: (
        ring(6, link_bandwidth_bytes_per_s=5e10, link_latency_s=2e-6),
        build_schedule("allgather", "ring", n_ranks=6, size_bytes=6 * 10**6),
    ),
    "alltoall-2to1-fat-tree": lambda: (
        _file("a100-roce-2to1.toml", n_nodes="4"),
        build_schedule("alltoall", "direct", n_ranks=32, size_bytes=32 * 2**20),
    ),
    "tree-allreduce-ib": lambda: (
        _file("h100-ib-fat-tree.toml", n_nodes="4"),
        build_schedule(
            "allreduce", "tree", n_ranks=32, size_bytes=2**26, gpus_per_node=8, n_chunks=8
        ),
    ),
    "halving-doubling-allreduce-torus": lambda: (
        _file("torus-3d.toml"),
        build_schedule("allreduce", "halving_doubling", n_ranks=8, size_bytes=2**24),
    ),
    "bruck-allgather-dragonfly": lambda: (
        _file("dragonfly.toml"),
        build_schedule("allgather", "bruck", n_ranks=16, size_bytes=2**20 * 16),
    ),
    "hierarchical-allreduce-rail": lambda: (
        _file("h100-rail-optimized.toml", n_nodes="4", oversubscription="2"),
        build_schedule("allreduce", "hierarchical", n_ranks=32, size_bytes=2**27, gpus_per_node=8),
    ),
    "broadcast-pcie-bounce": lambda: (
        _file("pcie-8x-rtx4090.toml"),
        build_schedule("broadcast", "ring", n_ranks=8, size_bytes=2**24, n_chunks=8),
    ),
    "reduce-scatter-dgx1": lambda: (
        _file("dgx1-v100.toml"),
        build_schedule("reducescatter", "ring", n_ranks=8, size_bytes=8 * 2**20),
    ),
    # Paced (simcoll.sim.pacing): every GPU's send into its switch carries a rate cap.
    "paced-nvls-allreduce-dgx-h100": lambda: (
        _file("dgx-h100.toml"),
        _paced(build_schedule("allreduce", "nvls", n_ranks=8, size_bytes=2**24, n_chunks=4)),
    ),
    "paced-nvls-tree-allreduce-ib": lambda: (
        _file("h100-ib-fat-tree.toml", n_nodes="4"),
        _paced(build_schedule("allreduce", "nvls_tree", n_ranks=32, size_bytes=2**26, n_chunks=4)),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_runs_are_the_references(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    topology, schedule = CASES[case]()
    compiled, reference = _both(monkeypatch, lambda: simulate(topology, schedule))
    _assert_identical(compiled, reference)
    assert compiled.time_s > 0
    if case.startswith("paced"):  # the caps bind: slower than the same schedule unpaced
        unpaced = dataclasses.replace(schedule, params={**schedule.params, "paced": False})
        assert compiled.time_s > simulate(topology, unpaced).time_s


@pytest.mark.parametrize("bandwidth_bytes_per_s", [37.5, 25.0, 1.0])
def test_a_transfer_longer_than_2_to_the_63_ticks_ends_on_time(
    bandwidth_bytes_per_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 41: numba's math.ceil returned an int64, which wrapped past 2^63 ticks of the
    # clock (8,192 s), so on 200 bit/s links (25 B/s) a ring all-reduce of 1 MiB ended
    # after its latencies alone (2.4 ms) where each of its 6 steps moves 262,144 B. Closed
    # form of the ring on a star: 2(n - 1) steps of 2 latencies + (S / n) / B.
    star = switch_star(4, link_bandwidth_bytes_per_s=bandwidth_bytes_per_s, link_latency_s=2e-4)
    schedule = build_schedule("allreduce", "ring", n_ranks=4, size_bytes=2**20)
    compiled, reference = _both(monkeypatch, lambda: simulate(star, schedule))
    _assert_identical(compiled, reference)
    expected_s = 6 * (2 * 2e-4 + 2**18 / bandwidth_bytes_per_s)
    assert compiled.time_s == pytest.approx(expected_s, rel=1e-12)


@pytest.mark.parametrize("protocol", ["LL", "LL128", "simple"])
def test_protocol_latencies_and_fractions_carry_over(
    protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topology = _file("h100-ib-fat-tree.toml", n_nodes="2")
    schedule = build_schedule("allreduce", "ring", n_ranks=16, size_bytes=2**22, n_chunks=2)
    compiled, reference = _both(
        monkeypatch, lambda: simulate(topology, schedule, protocol=PROTOCOLS[protocol])
    )
    _assert_identical(compiled, reference)


def test_random_placement_on_an_oversubscribed_fabric(monkeypatch: pytest.MonkeyPatch) -> None:
    # Contention everywhere: flows join and leave large components at uneven times.
    topology = _file("h100-ib-fat-tree.toml", n_nodes="8", oversubscription="2")
    nodes = place_ranks(topology, 64, "random:3")
    schedule = build_schedule("allreduce", "ring", n_ranks=64, size_bytes=2**26, n_channels=4)
    compiled, reference = _both(monkeypatch, lambda: simulate(topology, schedule, rank_nodes=nodes))
    _assert_identical(compiled, reference)
    assert compiled.stats.reshares > 100


def test_the_symmetric_paths_weighted_flows(monkeypatch: pytest.MonkeyPatch) -> None:
    # The quotient fabric: one flow per representative, whole-number weights per class.
    topology = _file("h100-rail-optimized.toml", n_nodes="8", oversubscription="2")
    topology.graph["routing"] = "dmodk"

    def run() -> SimulationResult:
        found = simulate_ring_fast(topology, "allreduce", 64, 2**28, n_channels=4)
        assert found is not None
        return found[0]

    compiled, reference = _both(monkeypatch, run)
    _assert_identical(compiled, reference)


def test_predict_rows_are_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    topology = _file("h100-ib-fat-tree.toml", n_nodes="2")

    def rows() -> list[float]:
        found = predict(topology, "allreduce", [2**10, 2**20, 2**30], algorithm="auto")
        return [row.time_s for row in found.rows]

    monkeypatch.setattr(engine, "COMPILE_FROM_TRANSFERS", 0)
    monkeypatch.setattr(engine, "COMPILED", True)
    compiled = rows()
    monkeypatch.setattr(engine, "COMPILED", False)
    assert compiled == rows()


def test_random_dependency_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    # Hand-built schedules: random pairs, sizes (one-byte pieces included), channels,
    # windows and dependencies.
    rng = np.random.default_rng(7)
    topology = _file("a100-roce-2to1.toml", n_nodes="2")
    for _ in range(12):
        n_ranks = 16
        builder = ScheduleBuilder(
            Collective.SENDRECV, "random", n_ranks=n_ranks,
            size_bytes=int(rng.choice([64, 64 * 2**20])),  # 1-byte pieces: latency-bound
            pieces_per_block=64, max_in_flight=int(rng.integers(1, 4)),
        )  # fmt: skip
        for index in range(int(rng.integers(20, 80))):
            src = int(rng.integers(0, n_ranks))
            dst = (src + int(rng.integers(1, n_ranks))) % n_ranks
            deps = sorted({int(d) for d in rng.integers(0, index, 2)}) if index else []
            pieces = [int(p) for p in rng.integers(0, 64, int(rng.integers(1, 3)))]
            channel = int(rng.integers(0, 2))
            builder.add(src=src, dst=dst, pieces=sorted(set(pieces)), channel=channel, deps=deps)
        schedule = builder.build()
        compiled, reference = _both(monkeypatch, lambda s=schedule: simulate(topology, s))
        _assert_identical(compiled, reference)


def test_rate_caps_on_random_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    # Caps on some transfers, of every size against their links' shares: a capped flow
    # takes a link of its own in both (fairshare.max_min_rates_sparse's way).
    rng = np.random.default_rng(11)
    topology = _file("a100-roce-2to1.toml", n_nodes="2")
    for _ in range(6):
        builder = ScheduleBuilder(Collective.SENDRECV, "random", n_ranks=16,
                                  size_bytes=16 * 2**20, pieces_per_block=16)  # fmt: skip
        for index in range(40):
            src = int(rng.integers(0, 16))
            deps = sorted({int(d) for d in rng.integers(0, index, 2)}) if index else []
            builder.add(src=src, dst=(src + int(rng.integers(1, 16))) % 16,
                        pieces=[int(rng.integers(0, 16))], deps=deps)  # fmt: skip
        schedule = builder.build()
        caps = np.where(rng.random(schedule.n_transfers) < 0.5, np.inf,
                        rng.choice([1e9, 5e9, 2e10, 1e12], schedule.n_transfers))  # fmt: skip

        def run(s: Schedule = schedule, c: np.ndarray = caps) -> SimulationResult:
            prepared = engine.prepare(topology, s)
            prepared.cap_rates(c)
            try:
                return prepared.run("flow")
            finally:
                prepared.release()

        compiled, reference = _both(monkeypatch, run)
        _assert_identical(compiled, reference)
        uncapped = simulate(topology, schedule)
        assert compiled.time_s > uncapped.time_s


def test_a_stuck_run_is_the_same_error(monkeypatch: pytest.MonkeyPatch) -> None:
    b = ScheduleBuilder(Collective.SENDRECV, "bad", n_ranks=2, size_bytes=4, pieces_per_block=1)
    b.add(src=0, dst=1, pieces=[0], deps=[1])
    b.add(src=1, dst=0, pieces=[1], deps=[0])
    star = switch_star(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    messages = []
    monkeypatch.setattr(engine, "COMPILE_FROM_TRANSFERS", 0)
    for compiled in (True, False):
        monkeypatch.setattr(engine, "COMPILED", compiled)
        with pytest.raises(SimulationError) as caught:
            simulate(star, b.build())
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert "2 of 2 transfers never arrive" in messages[0]


def test_a_run_on_its_own_clock_takes_the_compiled_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    run_flows = kernel.run_flows

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return run_flows(*args, **kwargs)

    monkeypatch.setattr(kernel, "run_flows", spy)
    star = switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    schedule = build_schedule("allgather", "ring", n_ranks=4, size_bytes=4000)  # 12
    monkeypatch.setattr(engine, "COMPILED", True)
    monkeypatch.setattr(engine, "COMPILE_FROM_TRANSFERS", 12)
    monkeypatch.setattr(kernel, "warm", lambda: False)
    simulate(star, schedule)  # worth compiling for
    assert calls == [1]
    monkeypatch.setattr(engine, "COMPILE_FROM_TRANSFERS", 13)
    simulate(star, schedule)  # not worth it, and not compiled yet: the reference
    assert calls == [1]
    monkeypatch.setattr(kernel, "warm", lambda: True)
    simulate(star, schedule)  # compiled already: the kernel
    assert calls == [1, 1]
    simulate(star, schedule, model="ideal")  # no contention: the reference only
    monkeypatch.setattr(engine, "COMPILED", False)
    simulate(star, schedule)
    assert calls == [1, 1]


def test_the_loop_is_warm_once_compiled() -> None:
    # One transfer of 1 B over two links of 4 B/s, no latency: it arrives at 0.25 s.
    end_s = np.full(1, np.nan)
    found = kernel.run_flows(
        pair_of=np.zeros(1, dtype=np.int64), wire_bytes=np.ones(1), latency_s=np.zeros(1),
        deps_left=np.zeros(1, dtype=np.int64), dependents_ptr=np.zeros(2, dtype=np.int64),
        dependents=np.zeros(0, dtype=np.int64), conn_of=np.zeros(1, dtype=np.int64),
        conn_order=np.zeros(1, dtype=np.int64), conn_end=np.ones(1, dtype=np.int64),
        conn_window=np.ones(1, dtype=np.int64), pair_links=[np.array([0, 1])], pair_weights=[None],
        capacity_bytes_per_s=np.array([4.0, 4.0]), issue_s=np.full(1, np.nan),
        start_s=np.full(1, np.nan), end_s=end_s,
    )  # fmt: skip
    assert kernel.warm()
    assert end_s.tolist() == [0.25]
    assert found.link_busy_s.tolist() == [0.25, 0.25]
