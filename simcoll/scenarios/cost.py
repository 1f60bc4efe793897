"""What a sweep will cost, said before it starts: summed simulation seconds and the largest
point's memory, from :mod:`simcoll.models.estimate`; refused over a limit.

Each point is estimated by the path it will take. A ring all-reduce, all-gather or
reduce-scatter is asked the same question its run asks, whether the symmetric path is
exact on this fabric (:mod:`simcoll.sim.symmetry`, answered once per topology, ranks and
period); where it is not, every transfer counts. A workload point is run with its
collectives recorded, not simulated (:func:`simcoll.prediction.session.recording_calls`), and
each distinct call is estimated as a collective point, as the session decides it; its
memory is that of all its distinct calls, which one session holds at once. A workload whose
calls run on two streams of one rank (FSDP's gathers and scatters, concurrent groups) may
run them together transfer by transfer: each of its calls counts once more on the general
path. Closed-form models (``analytical``, ``nccl``) cost nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx

from simcoll.algorithms import PARAM_MAXIMUM
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.limits import MAX_RANKS, MAX_TRANSFERS, check_count
from simcoll.core.units import format_bytes, format_time
from simcoll.models.estimate import (
    BYTES_PER_TRANSFER,
    SECONDS_PER_TRANSFER,
    PointEstimate,
    estimate_point,
)
from simcoll.plan.placement import map_ranks
from simcoll.plan.tuning import ring_chunks
from simcoll.prediction.call import DEFAULTS
from simcoll.prediction.choices import candidates, default_algorithm
from simcoll.prediction.session import RecordedCall
from simcoll.scenarios.points import scenario_topology, timeline_points
from simcoll.scenarios.scenario import Scenario
from simcoll.sim.symmetry import (
    RING_COLLECTIVES,
    representatives_of,
    ring_symmetric,
    symmetric_routes,
)
from simcoll.topology import Router, gpu_nodes

__all__ = ["DEFAULT_MAX_HOURS", "check_cost", "estimate_sweep"]

#: A sweep whose estimate is longer than this is refused unless the caller raises it.
DEFAULT_MAX_HOURS = 12.0
_CLOSED_FORMS = ("analytical", "nccl")
_SYMMETRIC_KNOBS = {"n_channels", "n_chunks", "max_in_flight"}


@dataclass
class _Cache:
    """What estimating many points of one sweep computes once: routers, exact periods."""

    routers: dict[int, Router]
    exact: dict[tuple[int, str, int, int], bool]


#: What keeping one point's timeline costs besides its simulation: its Perfetto trace and
#: its three plots (Gantt, links, links over time). Measured: 12 all-reduce points of
#: h100-ib-fat-tree with `timelines = "all"` took 17.1 s where their simulations were
#: estimated at 5.8 s (issue 29: 484 ms estimated, about 70 s taken, before this count).
SECONDS_PER_TIMELINE = 1.0


def estimate_sweep(scenario: Scenario) -> tuple[float, int, int]:
    """``(seconds, peak_bytes, n_estimated)``: summed simulation seconds over the points
    it can estimate, plus :data:`SECONDS_PER_TIMELINE` per timeline kept, the largest peak
    memory of one point, and how many points were estimated (a point whose values are
    wrong is left to report its own error)."""
    points = scenario.points()
    seconds = SECONDS_PER_TIMELINE * len(timeline_points(scenario, points))
    peak, counted = 0, 0
    cache = _Cache({}, {})
    for point in points:
        file, overrides, params = scenario.setup(point)
        try:
            topology = scenario_topology(scenario, file, overrides)
            found = _estimate(scenario.kind, topology, dict(params), cache)
        except SimcollError:
            continue  # the point will report it
        if found is None:
            continue
        seconds += found[0]
        peak = max(peak, found[1])
        counted += 1
    return seconds, peak, counted


def _estimate(
    kind: str, topology: nx.DiGraph[str], params: dict[str, Any], cache: _Cache
) -> tuple[float, int] | None:
    """``(seconds, peak_bytes)`` of one point, or None where it cannot tell."""
    params.pop("kind", None)
    model = str(params.pop("model", "flow"))
    protocol = params.pop("protocol", DEFAULTS.protocol)
    for engine_only in ("calibration", "placement", "plan", "in_place"):
        params.pop(engine_only, None)
    n_protocols = 3 if protocol == "auto" else 1
    calls: list[_Call | None]
    meet = False
    if kind == "collective":
        calls = [_collective_call(params, len(gpu_nodes(topology)))]
    else:
        calls, meet = _workload_calls(kind, topology, model, protocol, params)
    if None in calls:
        return None
    # A session decides each distinct call once, as predict does (fast paths included);
    # calls on two streams of one rank may meet on a link and run again in its graph.
    distinct = list({_key(call): call for call in calls if call}.values())
    estimates = [e for call in distinct for e in _call_estimates(topology, call, model, cache)]
    if meet:
        for call in calls:  # each once more, transfer by transfer
            if call:
                estimates += _call_estimates(topology, call, model, cache, general=True)
    seconds = sum(e.seconds for e in estimates) * n_protocols
    if kind == "collective":  # one candidate's schedule at a time
        return seconds, max((e.peak_bytes for e in estimates), default=0)
    return seconds, sum(e.peak_bytes for e in estimates)  # a session holds all its calls


@dataclass(frozen=True)
class _Call:
    collective: str
    algorithm: str
    n_ranks: int
    size_bytes: int
    params: Mapping[str, int]


def _collective_call(params: dict[str, Any], n_gpus: int) -> _Call | None:
    collective, size, n = params.get("collective"), params.get("size_bytes"), params.get("n_ranks")
    n = n or n_gpus
    knobs = {k: v for k, v in params.items() if k not in ("collective", "size_bytes", "n_ranks",
             "algorithm", "kind")}  # fmt: skip
    if not isinstance(collective, str) or not isinstance(n, int) or not isinstance(size, int):
        return None
    for key, value in knobs.items():  # a bad one is the point's own error, not the estimate's
        try:
            check_count(value, key, PARAM_MAXIMUM.get(key, MAX_RANKS), minimum=int(key != "root"))
        except ConfigError:
            return None
    named = params.get("algorithm")
    algorithm = str(named) if named is not None else default_algorithm(Collective.parse(collective))
    return _Call(collective, algorithm, n, size, knobs)


def _workload_calls(
    kind: str, topology: nx.DiGraph[str], model: str, protocol: Any, params: dict[str, Any]
) -> tuple[list[_Call | None], bool]:
    """The calls a workload point makes, recorded without simulating them, and whether
    calls on two streams of one rank may run at once (:func:`_streams_meet`)."""
    from simcoll.prediction.session import recording_calls  # noqa: PLC0415 - with the workloads
    from simcoll.scenarios.workloads import run_workload  # noqa: PLC0415 - pulls in SimPy

    with recording_calls() as recorded:
        try:
            run_workload(kind, topology, model=model, protocol=protocol, **params)
        except SimcollError:
            raise  # bad parameters: the point will say so
        except (ArithmeticError, ValueError):
            pass  # metrics of calls that took no time: only the calls are needed
    calls: list[_Call | None] = [
        _Call(r.collective, r.algorithm, r.n_ranks, r.size_bytes, dict(r.params)) for r in recorded
    ]
    return calls, _streams_meet(recorded)


def _key(call: _Call) -> tuple[object, ...]:
    return (call.collective, call.algorithm, call.n_ranks, call.size_bytes,
            tuple(sorted(call.params.items())))  # fmt: skip


def _streams_meet(recorded: Sequence[RecordedCall]) -> bool:
    """Whether some rank has calls on two streams (which may then run at once)."""
    streams: dict[int, str] = {}
    for call in recorded:
        for rank in call.ranks:
            if streams.setdefault(rank, call.stream) != call.stream:
                return True
    return False


def _call_estimates(
    topology: nx.DiGraph[str], call: _Call, model: str, cache: _Cache, *, general: bool = False
) -> list[PointEstimate]:
    """One estimate per algorithm the call simulates (``auto``: each candidate);
    ``general``: every transfer on the general path (run with others in a session)."""
    if model in _CLOSED_FORMS:
        return []
    c = Collective.parse(call.collective)
    estimates = []
    for name in candidates(c, call.algorithm):
        period = None if general else _symmetric_period(topology, c, name, call, model, cache)
        estimates.append(
            estimate_point(
                c,
                name,
                n_ranks=call.n_ranks,
                size_bytes=call.size_bytes,
                n_chunks=call.params.get("n_chunks"),
                n_channels=call.params.get("n_channels", 1),
                symmetric=period is not None,
                period_ranks=period or 1,
            )
        )
    return estimates


def _symmetric_period(  # noqa: PLR0917 - one candidate of one call, and the sweep's cache
    topology: nx.DiGraph[str],
    c: Collective,
    name: str,
    call: _Call,
    model: str,
    cache: _Cache,
) -> int | None:
    """The period of ranks the symmetric path will simulate, or None for the general path
    (the same search :func:`simcoll.sim.symmetry.simulate_ring_fast` makes, without
    simulating: the routes of every copy are checked, once per period)."""
    n = call.n_ranks
    if (
        name != "ring"
        or model not in ("flow", "ideal")
        or c.value not in RING_COLLECTIVES
        or not set(call.params) <= _SYMMETRIC_KNOBS
        or n > len(gpu_nodes(topology))
    ):
        return None
    channels = call.params.get("n_channels", 1)
    chunks = call.params.get("n_chunks") or ring_chunks(c, n, call.size_bytes, channels)
    router = cache.routers.setdefault(id(topology), Router(topology))
    nodes = map_ranks(topology, n)
    periods = [p for p in range(1, n // 2 + 1) if n % p == 0]
    if channels > 1:
        periods.append(n)  # channel copies only, as simulate_ring_fast tries last
    for period in periods:
        if representatives_of(c.value, n, chunks, period) > MAX_TRANSFERS:
            return None  # as simulate_ring_fast stops: the general path
        sym = ring_symmetric(c.value, n, call.size_bytes, n_channels=channels, n_chunks=chunks,
                             period_ranks=period)  # fmt: skip
        if sym is None:
            return None  # uneven pieces: the general path
        key = (id(topology), c.value, n, period)
        if key not in cache.exact:
            cache.exact[key] = symmetric_routes(topology, sym, nodes, router=router) is not None
        if cache.exact[key]:
            return period
    return None


def check_cost(
    scenario: Scenario,
    *,
    workers: int,
    max_hours: float = DEFAULT_MAX_HOURS,
    memory_bytes: int | None = None,
) -> str:
    """Refuse a sweep whose estimate exceeds ``max_hours`` on ``workers`` processes, or
    whose largest point would not fit in ``memory_bytes`` (default: this machine's RAM,
    shared by the workers); otherwise return the estimate as a line of text."""
    seconds, peak, counted = estimate_sweep(scenario)
    wall_s = seconds / max(1, workers)
    memory = memory_bytes if memory_bytes is not None else _ram_bytes()
    n_points = scenario.n_points
    if wall_s > max_hours * 3600:
        raise ConfigError(
            f"this sweep would take about {_duration(wall_s)} on {workers} worker(s) "
            f"({n_points} points, estimated from their transfers at "
            f"{SECONDS_PER_TRANSFER * 1e6:.0f} us each), over the {max_hours:g} h limit; sweep "
            "fewer or smaller points, or raise --max-hours",
            source=scenario.source,
        )
    if memory and peak * min(max(1, workers), n_points) > memory:
        raise ConfigError(
            f"its largest point would need about {format_bytes(peak)} of memory per worker "
            f"({peak // BYTES_PER_TRANSFER} transfers), more than the {format_bytes(memory)} "
            f"this machine has for {workers} worker(s); simulate fewer ranks, chunks or "
            "workers",
            source=scenario.source,
        )
    if not counted:
        return "no estimate for these points"
    what = "collective" if scenario.kind == "collective" else scenario.kind
    return (
        f"estimated about {_duration(wall_s)} on {workers} worker(s) for the {counted} {what} "
        "point(s)"
    )


def _duration(seconds: float) -> str:
    """A long duration in the unit that reads best.

    >>> _duration(2013.0), _duration(9000.0), _duration(3e5), _duration(0.5)
    ('33.5 min', '2.5 h', '3.47 days', '500 ms')
    """
    for unit_s, unit in ((86400.0, "days"), (3600.0, "h"), (60.0, "min")):
        if seconds >= unit_s:
            return f"{seconds / unit_s:.3g} {unit}"
    return format_time(seconds)


def _ram_bytes() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0
