"""Lower bounds and the choices ``auto`` skips with them.

A bound must never exceed what the engine simulates (else ``auto`` could skip the
winner): checked against simulations of every ring and tree choice on a server and on a
cluster, with and without calibration. Skipping must leave ``auto``'s rows exactly as
simulating every choice gives them. The closed forms are derived by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.core.protocols import PROTOCOLS
from simcoll.prediction import predict
from simcoll.prediction import simulated as simulated_module
from simcoll.prediction.bounds import Bounds
from simcoll.topology import load
from simcoll.topology.builders import switch_star

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
SIZES = [2**k for k in range(3, 31, 3)]


def test_bounds_by_hand() -> None:
    # 8 GPUs on a star of 50 GB/s links, 2 us each: a GPU's egress is one link.
    star = switch_star(8, link_bandwidth_bytes_per_s=50e9, link_latency_s=2e-6)
    nodes = tuple(f"gpu{i}" for i in range(8))
    flow = Bounds.of(star, nodes, model="flow", tree_depth=3)
    # Ring all-gather of 8 GB with Simple: 7/8 x 8 GB at 50 GB/s = 140 ms.
    assert flow.time_s("allgather", "ring", PROTOCOLS["simple"], 8 * 10**9) == pytest.approx(0.14)
    # Tree all-reduce of 8 B with LL: up and down 3 levels, 6 x (0.6 + 2) us.
    assert flow.time_s("allreduce", "tree", PROTOCOLS["LL"], 8) == pytest.approx(15.6e-6)
    # Bare links: no step latency, all of the wire: 14 x 2 us or 2 x 7/8 x S / B.
    assert flow.time_s("allreduce", "ring", None, 8) == pytest.approx(28e-6)
    # The ideal model shares no link: the latency bound only.
    ideal = Bounds.of(star, nodes, model="ideal", tree_depth=3)
    assert ideal.time_s("allreduce", "ring", None, 8 * 10**9) == pytest.approx(28e-6)
    # Nothing known of other algorithms and collectives.
    assert flow.time_s("allreduce", "direct", None, 10**9) == 0.0
    assert flow.time_s("broadcast", "ring", None, 10**9) == 0.0
    assert flow.time_s("allreduce", "tree", None, 8) == pytest.approx(6 * 2e-6)


def _cluster(n_nodes: int):  # type: ignore[no-untyped-def]
    graph = load(TOPOLOGIES / "h100-ib-fat-tree.toml", overrides={"n_nodes": str(n_nodes)})
    graph.graph["routing"] = "dmodk"
    return graph


@pytest.mark.parametrize("where", ["dgx-a100", "cluster-2", "cluster-4"])
def test_bounds_never_exceed_the_simulated_time(where: str) -> None:
    graph = load(TOPOLOGIES / "dgx-a100.toml") if where == "dgx-a100" else _cluster(
        int(where.split("-")[1])
    )  # fmt: skip
    for algorithm in ("ring", "tree"):
        for protocol in ("LL", "LL128", "simple"):
            result = predict(graph, "allreduce", SIZES, algorithm=algorithm, protocol=protocol,
                             skip_too_small=True)  # fmt: skip
            setup_bounds = _bounds_of(graph, algorithm, protocol)
            for row in result.rows:
                bound = setup_bounds(row.size_bytes)
                assert bound <= _simulated_s(graph, row) * (1 + 1e-12), (
                    algorithm, protocol, row.size_bytes,
                )  # fmt: skip


def _bounds_of(graph, algorithm: str, protocol: str):  # type: ignore[no-untyped-def]
    """The bound best_choice uses for this choice on ``graph`` with its defaults."""
    captured: dict[str, object] = {}
    original = simulated_module._bounds

    def spy(setup):  # type: ignore[no-untyped-def]
        bounds = original(setup)
        captured["bounds"], captured["setup"] = bounds, setup
        return bounds

    simulated_module._bounds = spy
    try:
        predict(graph, "allreduce", [8], algorithm="auto", protocol="auto")
    finally:
        simulated_module._bounds = original
    bounds, setup = captured["bounds"], captured["setup"]
    proto = next(p for p in setup.protocols if p is not None and p.name == protocol)  # type: ignore[attr-defined]
    return lambda size: bounds.time_s("allreduce", algorithm, proto, size)  # type: ignore[attr-defined]


def _simulated_s(graph, row) -> float:  # type: ignore[no-untyped-def]
    """The row's time less the calibration's per-call cost (which the bound leaves out)."""
    calibration = graph.graph.get("calibration")
    return row.time_s - (calibration.launch_s if calibration is not None else 0.0)


@pytest.mark.parametrize("where", ["dgx-a100", "cluster-4"])
def test_auto_skips_only_what_cannot_win(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    graph = load(TOPOLOGIES / "dgx-a100.toml") if where == "dgx-a100" else _cluster(4)
    calls: list[str] = []
    original_row = simulated_module._choice

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[1])
        return original_row(*args, **kwargs)

    monkeypatch.setattr(simulated_module, "_choice", counting)
    pruned = predict(graph, "allreduce", SIZES, algorithm="auto", protocol="auto",
                     skip_too_small=True).rows  # fmt: skip
    pruned_calls = len(calls)
    calls.clear()
    monkeypatch.setattr(simulated_module, "_bounds", lambda setup: _NoBounds())
    every = predict(graph, "allreduce", SIZES, algorithm="auto", protocol="auto",
                    skip_too_small=True).rows  # fmt: skip
    assert [(r.size_bytes, r.algorithm, r.protocol, r.time_s) for r in pruned] == [
        (r.size_bytes, r.algorithm, r.protocol, r.time_s) for r in every
    ]
    assert pruned_calls < len(calls)  # and some choices were skipped


class _NoBounds:
    def time_s(self, *args: object) -> float:
        return 0.0
