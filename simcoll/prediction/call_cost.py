"""What deciding one call will cost to simulate, by the path :func:`~simcoll.prediction.
call.decide` will take: the same candidates (:func:`~simcoll.prediction.simulated.
candidate_choices`), the same per-call tuning on the same plan (:func:`~simcoll.
prediction.simulated.planned_knobs`: NCCL's channels and pieces per protocol), the same
symmetry check for rings, each turned into transfers by
:func:`simcoll.models.estimate.estimate_point`.

A ring on the symmetric path also routes every rank's connection on every channel once,
and looks each one up again for every period it tries (:func:`simcoll.sim.symmetry.
simulate_ring_fast`); at 1,024 GPUs and more that routing, not the representatives, is
most of the run. Its cost per route is measured on the fabric itself
(:func:`seconds_per_route`), as it grows with the fabric's size and routing rule.

Every candidate is counted, though the run skips those whose lower bound cannot win: an
estimate may be high, rarely low.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from simcoll.core.errors import SimcollError
from simcoll.core.protocols import Protocol
from simcoll.core.schedule import ROUND_UP_TOLERANCE
from simcoll.models.estimate import (
    SECONDS_PER_BUILD,
    SECONDS_PER_REPRESENTATIVE,
    PointEstimate,
    estimate_point,
)
from simcoll.models.nccl import NCCL_ALGORITHMS, nccl_time_s
from simcoll.output.results import Row
from simcoll.plan.channels import Plan
from simcoll.plan.tuning import ring_chunks
from simcoll.prediction.nccl_choice import nccl_choice
from simcoll.prediction.simulated import (
    Choice,
    Setup,
    candidate_choices,
    choice_schedule,
    planned_knobs,
    tries_fast_ring,
)
from simcoll.sim.channel_symmetry import channel_symmetric
from simcoll.sim.oneshot import OneShot
from simcoll.sim.routes import route_pair
from simcoll.sim.symmetry import (
    ring_periods,
    ring_symmetric,
    symmetric_routes,
)
from simcoll.topology import Router
from simcoll.topology.schema import NodeKind

__all__ = ["SECONDS_PER_LOOKUP", "CallCosts", "call_estimates", "expected_s", "seconds_per_route"]

#: Wall seconds per copy checked, for each period the symmetric path tries (its route
#: looked up, its link classes and loads counted): 10-12 us under a profiler on
#: h100-ib-fat-tree at 128 and 1,024 GPUs (15,360 copies in 0.15 s; 92,160 in 1.1 s,
#: their routing apart); 5 us is used.
SECONDS_PER_LOOKUP = 5e-6
_ROUTE_SAMPLE = 8
_IN_NETWORK = ("nvls", "nvls_tree", "sharp", "collnet_direct", "collnet_chain")  # need a
# switch that reduces


@dataclass
class CallCosts:
    """What estimating many calls on one machine computes once: whether a ring's period
    is exact, and what a route costs."""

    exact: dict[tuple[object, ...], bool] = field(default_factory=dict)
    route_s: dict[int, tuple[float, float]] = field(default_factory=dict)
    routed: dict[tuple[object, ...], int] = field(default_factory=dict)  # channels routed


def expected_s(setup: Setup, sizes_bytes: Iterable[int], costs: CallCosts | None = None
               ) -> float:  # fmt: skip
    """The wall seconds simulating ``setup`` at each of ``sizes_bytes`` is expected to take
    (:func:`call_estimates`, summed); a size the estimate cannot cost counts nothing (its
    simulation says why)."""
    costs = costs or CallCosts()
    total = 0.0
    for size in sizes_bytes:
        try:
            total += sum(e.seconds for e in call_estimates(setup, size, costs))
        except SimcollError:
            continue
    return total


def call_estimates(
    setup: Setup, size_bytes: int, costs: CallCosts | None = None, *, general: bool = False
) -> list[PointEstimate]:
    """One estimate per (algorithm, protocol) the call is expected to simulate at
    ``size_bytes`` (``general``: every transfer on the general path, as a call that runs
    beside others transfer by transfer).

    As :func:`~simcoll.prediction.simulated.best_choice`, choices are taken in increasing
    order of their lower bounds, and one whose bound is above the best time so far is not
    simulated; the time a simulated choice will find is taken as its bound, or NCCL's
    model of it (:func:`simcoll.models.nccl.nccl_time_s`) where that is larger.
    """
    costs = costs or CallCosts()
    if size_bytes == 0:
        return []
    if setup.by_nccl:  # as decide: only what NCCL's model picks is simulated
        setup = nccl_choice(setup, size_bytes)
    choices, _ = candidate_choices(setup, size_bytes)
    estimates = []
    best_s = float("inf")
    reducing = [node for node, a in setup.topology.nodes(data=True) if a.get("reduces") is True]
    for bound_s, _, name, proto, chosen in sorted(choices, key=lambda c: (c[0], c[1])):
        if bound_s > best_s:
            continue  # cannot win: not simulated
        if name in _IN_NETWORK and not _reduces_for(setup, name, reducing):
            continue  # refused at once: no switch reduces for these GPUs
        try:
            knobs, used = planned_knobs(setup, name, proto, size_bytes, dict(chosen))
        except SimcollError:
            continue  # the run says why
        estimates.append(
            _choice_estimate(setup, name, proto, size_bytes, knobs, used, costs, general)
        )
        found_s = max(bound_s, _model_s(setup, name, proto, size_bytes, used))
        if found_s > 0:  # else nothing known of its time: it prunes nothing
            best_s = min(best_s, found_s)
    return estimates


def _choice_estimate(  # noqa: PLR0917 - one choice's facts, and the cache
    setup: Setup,
    name: str,
    proto: Protocol | None,
    size_bytes: int,
    knobs: dict[str, int],
    used: Plan | None,
    costs: CallCosts,
    general: bool,
) -> PointEstimate:
    """The transfers one choice simulates, by the path it takes, and their cost: the
    symmetric ring's representatives; else the whole schedule, built, and run whole or
    (where the channel-copies path folds it) one channel of each family. Each path first
    routes the connections this machine's router has not routed yet."""
    n = len(setup.nodes)
    channels = used.n_channels if used is not None else knobs.get("n_channels", 1)
    tried = None if general else _ring_periods(setup, name, proto, size_bytes, knobs, used, costs)
    period = tried[0] if tried is not None else None
    estimate = estimate_point(
        setup.collective, name, n_ranks=n, size_bytes=size_bytes, n_chunks=knobs.get("n_chunks"),
        n_channels=channels, symmetric=period is not None, period_ranks=period or 1,
        gpus_per_node=knobs.get("gpus_per_node", 0),
    )  # fmt: skip
    other_s = _routing_s(setup, name, channels, costs)
    if tried is not None:  # each period checked looks every copy up
        other_s += n * channels * tried[1] * SECONDS_PER_LOOKUP
    if period is not None:
        return replace(estimate, other_s=other_s)
    if tried is None and not general and _channel_copies(setup, size_bytes, knobs, used):
        other_s += n * channels * SECONDS_PER_LOOKUP  # the copies' check
        if _copies_exact(setup, name, proto, size_bytes, knobs, used, costs):
            # built whole, one channel of each family run (on NCCL's plans: every channel)
            run_s = estimate.transfers / channels * SECONDS_PER_REPRESENTATIVE
            return replace(estimate, seconds_per_transfer=SECONDS_PER_BUILD,
                           other_s=other_s + run_s)  # fmt: skip
    return replace(estimate, other_s=other_s)


def _routing_s(setup: Setup, name: str, channels: int, costs: CallCosts) -> float:
    """Seconds to route the connections (a rank to its neighbour, per channel) that the
    machine's router has not routed for an earlier call or size: a plan's first channels
    are every call's, so only channels beyond the most used so far are new. Of each new
    channel's connections, one per server crosses the fabric (its ring or tree enters
    and leaves each server once); the others stay in their server."""
    key = (id(setup.router), setup.nodes, name)
    before = costs.routed.get(key, 0)
    costs.routed[key] = max(before, channels)
    new = max(0, channels - before)
    near_s, far_s = seconds_per_route(setup, costs)
    far = new * _servers(setup)
    return (len(setup.nodes) * new - far) * near_s + far * far_s


def _servers(setup: Setup) -> int:
    """How many servers (``host``) the call's GPUs are on."""
    return len({setup.topology.nodes[node].get("host") for node in setup.nodes})


def _copies_exact(  # noqa: PLR0917 - one choice's facts, and the cache
    setup: Setup,
    name: str,
    proto: Protocol | None,
    size_bytes: int,
    knobs: dict[str, int],
    used: Plan | None,
    costs: CallCosts,
) -> bool:
    """Whether the channel-copies path holds for the choice on this fabric: its schedule
    with one piece per block, folded and its copies routed (once per algorithm and
    channels)."""
    key = (id(setup.topology), setup.nodes, name, proto.name if proto else None,
           None if used is None else used.rings)  # fmt: skip
    if key not in costs.exact:
        try:
            schedule = choice_schedule(setup, _one_piece(setup, name, size_bytes, knobs, used))
        except SimcollError:
            costs.exact[key] = False
            return False
        sym = channel_symmetric(schedule, round_up_pieces=True)
        costs.exact[key] = (
            sym is not None
            and symmetric_routes(
                setup.topology, sym, setup.nodes, proto, router=setup.router, plan=used
            )
            is not None
        )
    return costs.exact[key]


def _one_piece(
    setup: Setup, name: str, size_bytes: int, knobs: dict[str, int], used: Plan | None
) -> Choice:
    """A stand-in choice that builds the schedule with one piece per block."""
    row = Row.from_time(setup.collective, name, n_ranks=len(setup.nodes), size_bytes=size_bytes,
                        time_s=0.0)  # fmt: skip
    nothing = OneShot(0.0, np.zeros(0), ("", ""), 0)
    return Choice(row, name, None, {**knobs, "n_chunks": 1}, used, nothing)


def _reduces_for(setup: Setup, name: str, reducing: list[str]) -> bool:
    """Whether some switch can reduce for the call (as :func:`simcoll.plan.placement.
    switch_endpoints` asks): for NVLS, one linked to every GPU; for NVLS-tree, one
    linked to every GPU of each server; for SHARP, a fabric switch (for CollNet, with two
    or more servers)."""
    topology = setup.topology
    if name == "nvls":
        return any(all(topology.has_edge(g, r) for g in setup.nodes) for r in reducing)
    servers: dict[object, list[str]] = {}
    for gpu in setup.nodes:
        servers.setdefault(topology.nodes[gpu].get("host"), []).append(gpu)
    if name == "nvls_tree":
        return len(servers) > 1 and all(
            any(all(topology.has_edge(gpu, r) for gpu in gpus) for r in reducing)
            for gpus in servers.values()
        )
    if name.startswith("collnet") and len(servers) < 2:
        return False  # CollNet reduces across servers
    return any(topology.nodes[r]["kind"] is NodeKind.SWITCH for r in reducing)


def _model_s(
    setup: Setup, name: str, proto: Protocol | None, size_bytes: int, used: Plan | None
) -> float:
    """NCCL's model of the choice's time, where it has one (else 0)."""
    if proto is None or setup.collective not in NCCL_ALGORITHMS.get(name, frozenset()):
        return 0.0
    try:
        return nccl_time_s(setup.topology, setup.collective, name, proto.name,
                           len(setup.nodes), size_bytes,
                           n_channels=max(2, used.n_channels if used else 1),
                           rank_nodes=setup.nodes, router=setup.router)  # fmt: skip
    except SimcollError:
        return 0.0


def _channel_copies(
    setup: Setup, size_bytes: int, knobs: dict[str, int], used: Plan | None
) -> bool:
    """Whether the channel-copies path (:func:`~simcoll.sim.channel_symmetry.
    channel_symmetric`) may fold a choice that is no ring (a ring folds on the symmetric
    path or not at all): a plan's channels, several, in the flow or ideal model, pieces
    even or of at least 1,000 B."""
    if used is None or used.n_channels < 2 or setup.model not in {"flow", "ideal"}:
        return False
    n, channels = len(setup.nodes), used.n_channels
    pieces = channels * knobs.get("n_chunks", 1)
    block_bytes = setup.collective.block_bytes(size_bytes, n)
    return block_bytes % pieces == 0 or block_bytes // pieces * ROUND_UP_TOLERANCE >= 1


def _ring_periods(  # noqa: PLR0917 - one choice's facts, and the cache
    setup: Setup,
    name: str,
    proto: Protocol | None,
    size_bytes: int,
    knobs: dict[str, int],
    used: Plan | None,
    costs: CallCosts,
) -> tuple[int | None, int] | None:
    """Where the symmetric path is tried: ``(the period it will simulate, or None for the
    general path; how many periods it checks)``; None where it is not tried. The same
    search :func:`simcoll.sim.symmetry.simulate_ring_fast` makes, without simulating."""
    n = len(setup.nodes)
    if not tries_fast_ring(setup, name, knobs, used):  # as the run decides it
        return None
    c = setup.collective.value
    channels = used.n_channels if used is not None else knobs.get("n_channels", 1)
    chunks = knobs.get("n_chunks") or ring_chunks(setup.collective, n, size_bytes, channels)
    checked = 0
    for period in ring_periods(c, n, chunks, channels):
        # the verdict reads the ring's pairs alone: built as such, not as the whole ring
        sym = ring_symmetric(c, n, size_bytes, n_channels=channels, n_chunks=chunks,
                             period_ranks=period, round_up_pieces=True, pairs_only=True,
                             rings=None if used is None else used.rings)  # fmt: skip
        if sym is None:
            continue
        checked += 1
        key = (id(setup.topology), setup.nodes, c, proto.name if proto else None, period, channels,
               None if used is None else used.rings)  # fmt: skip
        if key not in costs.exact:
            routed = symmetric_routes(setup.topology, sym, setup.nodes, proto, router=setup.router,
                                      plan=used)  # fmt: skip
            costs.exact[key] = routed is not None
        if costs.exact[key]:
            return period, checked
    return None, checked


def seconds_per_route(setup: Setup, costs: CallCosts | None = None) -> tuple[float, float]:
    """Wall seconds to route one connection on this fabric: ``(to a GPU of the same
    server, across the fabric)``, each measured on a few of the call's GPUs with a fresh
    router, after a first route that sets the router up (a 1,024-GPU fat tree: about 30
    and 250 us; a star of 4,096 GPUs 4 ms). Cached per topology in ``costs``."""
    key = id(setup.topology)
    if costs is not None and key in costs.route_s:
        return costs.route_s[key]
    nodes = setup.nodes
    n = len(nodes)
    host = [setup.topology.nodes[node].get("host") for node in nodes]
    starts = [i * n // (_ROUTE_SAMPLE + 1) for i in range(min(n, _ROUTE_SAMPLE + 1))]
    near = [(a, (a + 1) % n) for a in starts if host[a] == host[(a + 1) % n]]
    far = [(a, (a + n // 2) % n) for a in starts if host[a] != host[(a + n // 2) % n]]
    router = Router(setup.topology)
    if near:
        _timed(router, nodes, near[:1])  # sets the router up
    found = _timed(router, nodes, near) if near else 0.0
    found_far = _timed(router, nodes, far) if far else found
    if costs is not None:
        costs.route_s[key] = (found, found_far)
    return found, found_far


def _timed(router: Router, nodes: tuple[str, ...], pairs: list[tuple[int, int]]) -> float:
    """Mean wall seconds of routing ``pairs``."""
    start = time.perf_counter()
    for a, b in pairs:
        try:
            route_pair(router, nodes, a, b)
        except SimcollError:
            return 0.0  # the run says why
    return (time.perf_counter() - start) / len(pairs)
